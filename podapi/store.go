package podapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
)

// State is where a stored pod is in its life.
type State string

const (
	// StateLocal: served to the kubelet as a static pod; not (yet) in the API.
	StateLocal State = "Local"
	// StateHandingOver: no longer served to the kubelet; the API pod is
	// being created once the kubelet has dropped the static pod and its
	// mirror pod is gone.
	StateHandingOver State = "HandingOver"
	// StateHandedOver: the API pod exists; the record stays until the
	// API pod is deleted, so that GET shows where it went.
	StateHandedOver State = "HandedOver"
	// StateHandoverFailed: the last attempt failed (Reason says why); the
	// pod is served to the kubelet meanwhile and handover is retried.
	StateHandoverFailed State = "HandoverFailed"
	// StateQuarantined: no longer served to the kubelet, because the
	// kubelet kept fetching lists holding it and took none of them (it
	// refuses a whole list when one pod in it fails its checks); Reason
	// says so. The other pods run meanwhile. See quarantine.go.
	StateQuarantined State = "Quarantined"
)

// served reports whether the kubelet gets the pod from the source.
func (s State) served() bool { return s == StateLocal || s == StateHandoverFailed }

// Record is one stored pod and what became of it: the body of
// <state-dir>/<uid>.json.
type Record struct {
	// Pod is the pod as accepted: metadata.name is <pod>-<node>, the
	// name the kubelet and the API give it; metadata.uid is the one the
	// kubelet runs it under.
	Pod corev1.Pod `json:"pod"`
	// State and Reason: see State. Reason is why the last handover
	// failed, or why the pod waits.
	State  State  `json:"state"`
	Reason string `json:"reason,omitempty"`
	// APIUID is the UID of the pod created in the API (StateHandedOver).
	APIUID types.UID `json:"apiUID,omitempty"`
	// Since is when State last changed.
	Since metav1.Time `json:"since"`
	// TakenByKubelet is when the kubelet was first seen to have the pod
	// (its PodResources list): from then on the pod is known not to make
	// the kubelet refuse its lists. Kept across restarts, so that a pod
	// that has ended (and left the kubelet's active pods) is not judged
	// again.
	TakenByKubelet *metav1.Time `json:"takenByKubelet,omitempty"`
	// OnSuspicion marks a quarantine decided while other pods of the same
	// lists were not taken either: the pod is served again, alone, once
	// the kubelet has taken the others.
	OnSuspicion bool `json:"onSuspicion,omitempty"`
}

// Store keeps records as one file each in a directory, written whole or
// not at all: a temporary file, fsynced, renamed over the old one, and
// the directory fsynced, so that a crash or power loss leaves either the
// old record or the new one, never part of either.
type Store struct {
	dir string

	mu      sync.RWMutex
	records map[types.UID]*Record
}

// OpenStore loads every record in dir, creating dir (0700: records hold
// pod specs, which may carry secrets in their environment) if missing.
// Leftover temporary files of an interrupted write are removed; a record
// that does not parse is an error, not skipped: the pod it held would
// otherwise vanish from the node without a trace.
func OpenStore(dir string) (*Store, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("pod store %s: %w", dir, err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("pod store %s: %w", dir, err)
	}
	s := &Store{dir: dir, records: map[types.UID]*Record{}}
	for _, e := range entries {
		name := e.Name()
		switch {
		case strings.HasPrefix(name, tmpPrefix):
			_ = os.Remove(filepath.Join(dir, name))
		case strings.HasSuffix(name, ".json"):
			b, err := os.ReadFile(filepath.Join(dir, name))
			if err != nil {
				return nil, fmt.Errorf("pod store: %w", err)
			}
			r := &Record{}
			if err := json.Unmarshal(b, r); err != nil {
				return nil, fmt.Errorf("pod store: record %s: %w", name, err)
			}
			if string(r.Pod.UID)+".json" != name {
				return nil, fmt.Errorf("pod store: record %s holds pod UID %q", name, r.Pod.UID)
			}
			s.records[r.Pod.UID] = r
		}
	}
	klog.InfoS("Pod API store loaded", "dir", dir, "pods", len(s.records))
	return s, nil
}

const tmpPrefix = ".tmp-"

// List returns copies of the records, by namespace and name.
func (s *Store) List() []Record {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]Record, 0, len(s.records))
	for _, r := range s.records {
		out = append(out, *r.DeepCopy())
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i].Pod.ObjectMeta, out[j].Pod.ObjectMeta
		if a.Namespace != b.Namespace {
			return a.Namespace < b.Namespace
		}
		return a.Name < b.Name
	})
	return out
}

// Get returns a copy of the record of uid.
func (s *Store) Get(uid types.UID) (Record, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	r, ok := s.records[uid]
	if !ok {
		return Record{}, false
	}
	return *r.DeepCopy(), true
}

// errExists is Add's refusal of a second pod of the same namespace and
// name.
var errExists = errors.New("a pod of that namespace and name is stored")

// Add stores a new record, unless one of the same namespace and name is
// stored already.
func (s *Store) Add(r Record) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, o := range s.records {
		if o.Pod.Namespace == r.Pod.Namespace && o.Pod.Name == r.Pod.Name {
			return fmt.Errorf("%w (uid %s)", errExists, o.Pod.UID)
		}
	}
	if err := s.write(&r); err != nil {
		return err
	}
	s.records[r.Pod.UID] = &r
	return nil
}

// Update replaces the record of r's UID, if it is still stored.
func (s *Store) Update(r Record) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.records[r.Pod.UID]; !ok {
		return fmt.Errorf("pod %s: %w", r.Pod.UID, os.ErrNotExist)
	}
	if err := s.write(&r); err != nil {
		return err
	}
	s.records[r.Pod.UID] = &r
	return nil
}

// Modify applies change to the stored record of uid, under the store's
// lock, and writes the result if change returns true: a read-modify-write
// that no concurrent change can come between (the handover loop and the
// kubelet's watch both move pods between states). It reports whether it
// wrote.
func (s *Store) Modify(uid types.UID, change func(*Record) bool) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cur, ok := s.records[uid]
	if !ok {
		return false, nil
	}
	r := cur.DeepCopy()
	if !change(r) {
		return false, nil
	}
	if err := s.write(r); err != nil {
		return false, err
	}
	s.records[uid] = r
	return true, nil
}

// Delete removes the record of uid; it reports whether there was one.
func (s *Store) Delete(uid types.UID) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.records[uid]; !ok {
		return false, nil
	}
	if err := os.Remove(s.path(uid)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return true, fmt.Errorf("remove pod %s: %w", uid, err)
	}
	if err := syncDir(s.dir); err != nil {
		return true, err
	}
	delete(s.records, uid)
	return true, nil
}

func (s *Store) path(uid types.UID) string { return filepath.Join(s.dir, string(uid)+".json") }

// write puts r on disk atomically (see Store).
func (s *Store) write(r *Record) (err error) {
	b, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("encode pod %s: %w", r.Pod.UID, err)
	}
	f, err := os.CreateTemp(s.dir, tmpPrefix)
	if err != nil {
		return fmt.Errorf("write pod %s: %w", r.Pod.UID, err)
	}
	defer func() {
		if err != nil {
			_ = os.Remove(f.Name())
		}
	}()
	if _, err = f.Write(b); err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write pod %s: %w", r.Pod.UID, err)
	}
	if err = os.Rename(f.Name(), s.path(r.Pod.UID)); err != nil {
		return fmt.Errorf("write pod %s: %w", r.Pod.UID, err)
	}
	return syncDir(s.dir)
}

// syncDir makes a rename or removal in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
}

// DeepCopy copies r.
func (r *Record) DeepCopy() *Record {
	c := *r
	r.Pod.DeepCopyInto(&c.Pod)
	if r.TakenByKubelet != nil {
		t := *r.TakenByKubelet
		c.TakenByKubelet = &t
	}
	return &c
}
