package endpoint

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"time"

	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/nodeproxy/nodeproxy/nodecopy"
	"github.com/nodeproxy/nodeproxy/nodecopy/disk"
)

// persistDelay gathers the batches of a burst into one save: a save
// rewrites the whole copy (docs/operations.md, "Secrets at rest on the
// node"), and a second's worth of changes lost to a crash is taken again
// from the hub, which resumes from the position saved.
const persistDelay = time.Second

// clusterOf names the cluster cfg reaches, for a persisted copy: a
// digest of kube-apiserver's CA, which another cluster does not share.
func clusterOf(cfg *rest.Config) (string, error) {
	ca := cfg.CAData
	if len(ca) == 0 && cfg.CAFile != "" {
		var err error
		if ca, err = os.ReadFile(cfg.CAFile); err != nil {
			return "", fmt.Errorf("kube-apiserver's CA, which names the cluster of the node's copy: %w", err)
		}
	}
	if len(ca) == 0 {
		ca = []byte(cfg.Host)
	}
	sum := sha256.Sum256(ca)
	return hex.EncodeToString(sum[:]), nil
}

// restore loads the persisted copy, if any, into the copy, and sets its
// age: by the boot clock if it was saved in this boot; across a reboot
// by the wall clock, but only a wall clock the kernel holds synchronized
// and that does not put the save in the future. An age neither proves is
// unproven: the copy is not served offline until it has followed the hub
// again (servableOffline), and is still the position the view resumes from,
// since the hub sends every change after it. A copy that cannot be
// loaded is left where it is (a later save replaces it) and the endpoint
// starts empty: never half a copy.
func (f *viewFollower) restore() {
	snap, err := f.store.Load(f.copy.Node(), f.cluster)
	switch {
	case err != nil:
		klog.ErrorS(err, "Refused the node's persisted copy; starting without one, the hub sends the view whole")
		return
	case snap == nil:
		return
	}
	b := nodecopy.Batch{Initial: true, Position: snap.Position}
	for _, o := range snap.Objects {
		raw := []byte(o.Raw)
		if o.Protobuf != nil {
			raw = o.Protobuf
		}
		b.Events = append(b.Events, nodecopy.Event{Type: watch.Added, Object: raw})
	}
	refused, err := f.copy.Apply(b)
	if err == nil && len(refused) == 0 {
		err = f.copy.RestoreGones(gonesOf(snap.Gone))
	}
	if err != nil || len(refused) > 0 {
		f.copy.Clear()
		klog.ErrorS(errors.Join(append(refused, err)...), "Refused the node's persisted copy; starting without one", "file", f.store.Path())
		return
	}
	age, proof := ageOf(snap)
	copyRestores.WithLabelValues(proof).Inc()
	if snap.Unvouched {
		// Saved while it could not vouch for what it held: it still
		// cannot, until the hub brings it current.
		f.trust.distrustedAt.Store(mono())
		klog.InfoS("The node's persisted copy may lack what the node was served before it was saved; it is not served offline until the hub brings it current")
	}
	f.mu.Lock()
	f.lost = time.Now().Add(-max(age, 0))
	f.unproven = proof == ageUnproven
	f.mu.Unlock()
	if proof == ageUnproven {
		klog.ErrorS(nil, "Loaded the node's persisted copy, saved in an earlier boot, whose age cannot be proven: it is not served offline until it has followed the hub",
			"file", f.store.Path(), "objects", len(snap.Objects), "wallClockAge", age.Round(time.Second), "wallClockSynced", wallClockSynced(), "position", snap.Position)
		return
	}
	klog.InfoS("Loaded the node's persisted copy", "file", f.store.Path(), "objects", len(snap.Objects), "age", age.Round(time.Second), "by", proof, "position", snap.Position)
}

// How a loaded copy's age was known, the values of the copy restores
// metric's "age" label.
const (
	ageBootClock = "boot_clock"
	ageWallClock = "wall_clock"
	ageUnproven  = "unproven"
)

// ageOf is how long snap has not followed the hub, and how that is
// known: by CLOCK_BOOTTIME within the boot it was saved in; else by a
// synchronized wall clock; else not (the wall clock's guess is returned
// for the log).
func ageOf(snap *disk.Snapshot) (time.Duration, string) {
	if id, now, ok := bootClock(); ok && id == snap.BootID && snap.BootID != "" {
		if age := now - snap.BootTime; age >= 0 {
			return age, ageBootClock
		}
		return 0, ageUnproven // a boot clock that went back: a file not of this boot
	}
	age := time.Since(snap.SavedAt)
	if age < 0 || !wallClockSynced() {
		return age, ageUnproven
	}
	return age, ageWallClock
}

// persist saves the copy after each change, a burst at a time, until ctx
// ends.
func (f *viewFollower) persist(ctx context.Context) {
	for {
		changed := f.copy.Changed()
		select {
		case <-ctx.Done():
			return
		case <-changed:
		}
		select {
		case <-ctx.Done():
		case <-time.After(persistDelay):
		}
		if err := f.save(); err != nil {
			klog.ErrorS(err, "Persisting the node's copy; the last good one stays", "file", f.store.Path())
		}
	}
}

// save writes the copy as it is now, with when it was last current.
func (f *viewFollower) save() error {
	snap := &disk.Snapshot{Node: f.copy.Node(), Cluster: f.cluster}
	pos, whole := f.copy.Objects(func(resource string, o *nodecopy.Object) {
		d := disk.Object{Resource: resource}
		if nodecopy.IsProtobuf(o.Raw) {
			d.Protobuf = o.Raw
		} else {
			d.Raw = o.Raw
		}
		snap.Objects = append(snap.Objects, d)
	})
	if !whole || f.ageUnproven() {
		// An unproven copy has not changed since it was loaded: the
		// file is already it, with the age it had.
		return nil
	}
	snap.Position = pos
	for _, g := range f.copy.Gones() {
		snap.Gone = append(snap.Gone, disk.Gone{Resource: g.Resource, Namespace: g.Namespace, Name: g.Name, RV: g.RV})
	}
	snap.Unvouched = !f.vouched()
	age, _ := f.offlineAge()
	snap.SavedAt = time.Now().Add(-age)
	if id, now, ok := bootClock(); ok {
		snap.BootID, snap.BootTime = id, now-age
	}
	return f.store.Save(snap)
}

// gonesOf is the copy's deletions as they were persisted.
func gonesOf(gs []disk.Gone) []nodecopy.Gone {
	out := make([]nodecopy.Gone, len(gs))
	for i, g := range gs {
		out[i] = nodecopy.Gone{Resource: g.Resource, Namespace: g.Namespace, Name: g.Name, RV: g.RV}
	}
	return out
}
