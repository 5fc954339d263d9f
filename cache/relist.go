package cache

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"

	"github.com/google/btree"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
)

// Why a relist could not be carried on, the reasons
// nodeproxy_cache_relist_log_restarts_total counts.
const (
	// restartOption: Options.RestartLogOnRelist asks for it.
	restartOption = "option"
	// restartListOlder: the list is older than the store.
	restartListOlder = "list_older"
	// restartVersionOutside: a listed object changed at a version not
	// in (store's, list's].
	restartVersionOutside = "version_outside"
	// restartVersionShared: two listed objects at one version, which
	// kube-apiserver's etcd never writes.
	restartVersionShared = "version_shared"
	// restartNoRoom: more changes than versions, and no version strictly
	// inside the relist's span for them to share.
	restartNoRoom = "no_room"
)

// relistChanges turns a relist into the changes a watch would have
// delivered between the store's state at prevRV (old) and the list at
// listRV (list), so that the change log can go on instead of starting
// over, and watches from before the relist need not relist themselves.
// It returns the reason it cannot (restart...) instead, and the caller
// starts the log over.
//
// The events keep the log's promise for a watch that follows the store
// across the relist (it misses nothing and repeats nothing, and versions
// never go back):
//   - ADDED and MODIFIED carry the object as listed, at its own
//     resourceVersion: a change the store missed happened after prevRV
//     (it would have heard it otherwise) and at or before listRV.
//     kube-apiserver writes one object per etcd revision, so no two share
//     one.
//   - A name whose UID changed (deleted and created again: a
//     StatefulSet's pod) is the old object's DELETED, then the new one's
//     ADDED, as a watch of kube-apiserver sees it.
//   - Each DELETED (its own deletion revision is unknown) takes the
//     latest version no other event holds, after prevRV and before what
//     must follow it: the new object's ADDED for a reused name, else
//     listRV (placeDeletions). kube-apiserver's etcd spent a revision of
//     its own on every deletion in that span, so there always are enough
//     such versions for the lists it serves; the object is its last
//     state with that version.
//   - Where versions do not suffice anyway (placeDeletions), the
//     deletions left over share the span's first version, prevRV+1,
//     ahead of every other event. Versions strictly inside the span are
//     no resume points (changeLog.inGap), so no watch can stop between
//     two events that share one and be resumed past the second, which is
//     what kube-apiserver's watch cache would do: it resumes after every
//     event at the version given. listRV, a resume point, is never
//     shared: where the span has no version inside it (listRV is
//     prevRV+1) and more than one change, the log starts over.
//
// A watch resumed from a version strictly inside (prevRV, listRV) is
// refused (changeLog.inGap): a client of another replica may hold one,
// and none of the events above tells it the truth.
//
// It declines where no such sequence exists or would tell the truth: the
// list is older than the store, a listed object's version is not in
// (prevRV, listRV], two listed objects share a version.
func relistChanges(old, list *btree.BTreeG[*Object], prevRV, listRV uint64, layout cuts) (relist, string) {
	if listRV < prevRV {
		return relist{}, restartListOlder
	}
	var changes []*Event
	var gone []deletion
	reason := ""
	list.Ascend(func(o *Object) bool {
		prev, found := old.Get(o)
		switch {
		case found && prev.RV == o.RV:
			return true
		case o.RV <= prevRV || o.RV > listRV:
			reason = restartVersionOutside
		case !found:
			changes = append(changes, &Event{Type: watch.Added, Object: o, RV: o.RV})
		case uid(prev) != uid(o):
			gone = append(gone, deletion{prev: prev, before: o.RV, reused: true})
			changes = append(changes, &Event{Type: watch.Added, Object: o, RV: o.RV})
		default:
			changes = append(changes, &Event{Type: watch.Modified, Object: o, Prev: prev, RV: o.RV})
		}
		return reason == ""
	})
	if reason != "" {
		return relist{}, reason
	}
	slices.SortFunc(changes, func(a, b *Event) int { return cmp.Compare(a.RV, b.RV) })
	for i := 1; i < len(changes); i++ {
		if changes[i].RV == changes[i-1].RV {
			return relist{}, restartVersionShared // not kube-apiserver's etcd
		}
	}
	old.Ascend(func(prev *Object) bool {
		if _, found := list.Get(prev); !found {
			gone = append(gone, deletion{prev: prev, before: listRV + 1})
		}
		return true
	})
	shared := placeDeletions(gone, changes, prevRV, listRV)
	if shared > 0 && listRV-prevRV < 2 {
		return relist{}, restartNoRoom
	}
	deleted := make([]*Event, 0, len(gone))
	for _, d := range gone {
		o, err := atVersion(d.prev, d.rv, layout)
		if err != nil {
			return relist{}, restartVersionOutside
		}
		deleted = append(deleted, &Event{Type: watch.Deleted, Object: o, Prev: d.prev, RV: d.rv})
	}
	// gone is in placement order: the shared ones last, and the others
	// by descending version. The shared go first, in key order.
	out := slices.Clone(deleted[len(deleted)-shared:])
	slices.SortFunc(out, func(a, b *Event) int { return compareKeys(a.Object, b.Object) })
	own := append(changes, deleted[:len(deleted)-shared]...)
	slices.SortFunc(own, func(a, b *Event) int { return cmp.Compare(a.RV, b.RV) })
	r := relist{changes: append(out, own...)}
	for i, d := range gone {
		cause, version := 0, 0
		if d.reused {
			cause = 1
		}
		if i >= len(gone)-shared {
			version = 1
		}
		r.deletions[cause][version]++
	}
	return r, ""
}

// relist is a relist carried on: its changes, and its DELETED events
// counted by cause (0: the list lacks the object, 1: its name has a new
// UID) and version (0: one of its own, 1: shared).
type relist struct {
	changes   []*Event
	deletions [2][2]int
}

// deletion is a DELETED a relist synthesizes: the object's last state,
// the version it must come before (the new object's, for a reused name;
// listRV+1 otherwise), and the version it gets.
type deletion struct {
	prev   *Object
	before uint64
	reused bool
	rv     uint64
}

// placeDeletions gives each deletion in gone a version in (prevRV,
// listRV] below its before that no change in changes (sorted, one a
// version) holds and no other deletion took, the latest such, and
// reorders gone: the deletions placed, by descending version, then the
// ones left over, which it gives prevRV+1 and counts.
//
// Latest deadline first, each taking the latest free version under its
// own, places every deletion whenever any assignment of distinct free
// versions does (the exchange argument of scheduling unit jobs with
// deadlines): one that finds none leaves every later one none either.
func placeDeletions(gone []deletion, changes []*Event, prevRV, listRV uint64) (shared int) {
	slices.SortFunc(gone, func(a, b deletion) int {
		if c := cmp.Compare(b.before, a.before); c != 0 {
			return c
		}
		return compareKeys(b.prev, a.prev)
	})
	next := listRV // every version above it is taken
	held := len(changes) - 1
	for i := range gone {
		v := min(gone[i].before-1, next)
		for ; held >= 0 && changes[held].RV >= v; held-- {
			if changes[held].RV == v {
				v--
			}
		}
		if v <= prevRV {
			for j := i; j < len(gone); j++ {
				gone[j].rv = prevRV + 1
			}
			return len(gone) - i
		}
		gone[i].rv, next = v, v-1
	}
	return 0
}

// atVersion is a copy of o's last state with resourceVersion rv, the
// object a DELETED event at rv carries, kept as o is: decoded, or as
// bytes (decoded, changed and encoded again, cut as layout says, the
// store's; relists only).
func atVersion(o *Object, rv uint64, layout cuts) (*Object, error) {
	var obj runtime.Object
	var tm runtime.TypeMeta
	if o.obj != nil {
		obj = o.obj.DeepCopyObject()
	} else {
		var err error
		if obj, tm, err = decodeProtobuf(o.raw.join()); err != nil {
			return nil, fmt.Errorf("%s/%s: %w", o.Namespace, o.Name, err)
		}
	}
	accessor, err := meta.Accessor(obj)
	if err != nil {
		return nil, fmt.Errorf("%s/%s: %w", o.Namespace, o.Name, err)
	}
	accessor.SetResourceVersion(strconv.FormatUint(rv, 10))
	n, err := newObject(obj)
	if err != nil {
		return nil, err
	}
	if !o.raw.empty() {
		if err := n.keepBytes(tm.APIVersion, tm.Kind, layout, o); err != nil {
			return nil, fmt.Errorf("%s/%s: %w", o.Namespace, o.Name, err)
		}
	} else {
		n.slim(o)
	}
	return n, nil
}

func uid(o *Object) string { return string(o.UID) }

// appendRelistLocked appends a relist's changes to the log and publishes
// the list as one snapshot at listRV: no reader sees a state between
// the old one and the list. Only the last event keeps the state after
// it; an exact-version read inside the batch gets ErrExpired, since the
// states in between are the store's reconstruction, not kube-apiserver's.
func (s *Store) appendRelistLocked(changes []*Event, listRV uint64) {
	old := s.current.Load()
	next := &Snapshot{RV: listRV, objects: s.objects.Clone(), log: s.log, next: make(chan struct{})}
	if s.nodes != nil {
		next.nodes = s.nodes.Clone()
	}
	prevRV := old.RV
	s.log.addGapLocked(prevRV, listRV, s.seq)
	for i, e := range changes {
		e.PrevRV = prevRV
		if i == len(changes)-1 {
			e.after = next
		} else {
			e.partial = true
		}
		s.log.appendLocked(e, s.seq)
		s.seq++
		prevRV = e.RV
	}
	next.seq = s.seq
	s.current.Store(next)
	close(old.next)
}
