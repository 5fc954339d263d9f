package cache

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"

	"github.com/google/btree"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/watch"
)

// relistChanges turns a relist into the changes a watch would have
// delivered between the store's state at prevRV (old) and the list at
// listRV (list), so that the change log can go on instead of starting
// over, and watches from before the relist need not relist themselves.
//
// The events keep the log's promise for a watch that follows the store
// across the relist (it misses nothing and repeats nothing) because every
// event gets a resourceVersion of its own, in order:
//   - ADDED and MODIFIED carry the object as listed, at its own
//     resourceVersion: a change the store missed happened after prevRV
//     (it would have heard it otherwise) and at or before listRV. kube-apiserver
//     writes one object per etcd revision, so no two share one.
//   - DELETED, for objects the list lacks, come last, at the n
//     resourceVersions up to listRV (their own deletion revisions are
//     unknown; these are after every ADDED and MODIFIED, so the state
//     after the last event is the list), each the object's last state
//     with that resourceVersion.
//
// A watch resumed from a version strictly inside (prevRV, listRV) is
// refused instead (changeLog.inGap): a client of another replica may hold
// one, and neither kind of event above tells it the truth.
//
// It declines (false), and the caller starts the log over as before,
// where no such sequence exists or would tell the truth: the list is older
// than the store, a listed object's version is not in (prevRV, listRV], an
// object was deleted and created again under its name (a new UID: a watch
// must see DELETED then ADDED, and there is no version to put the DELETED
// at), or there are more deletions than unused versions after the last
// ADDED or MODIFIED.
func relistChanges(old, list *btree.BTreeG[*Object], prevRV, listRV uint64) ([]*Event, bool) {
	if listRV < prevRV {
		return nil, false
	}
	var changes []*Event
	ok := true
	list.Ascend(func(o *Object) bool {
		prev, found := old.Get(o)
		switch {
		case found && prev.RV == o.RV:
			return true
		case o.RV <= prevRV || o.RV > listRV:
			ok = false
		case !found:
			changes = append(changes, &Event{Type: watch.Added, Object: o, RV: o.RV})
		case uid(prev) != uid(o):
			ok = false
		default:
			changes = append(changes, &Event{Type: watch.Modified, Object: o, Prev: prev, RV: o.RV})
		}
		return ok
	})
	if !ok {
		return nil, false
	}
	slices.SortFunc(changes, func(a, b *Event) int { return cmp.Compare(a.RV, b.RV) })
	last := prevRV
	for _, e := range changes {
		if e.RV == last {
			return nil, false // two objects at one version: not kube-apiserver's etcd
		}
		last = e.RV
	}
	var gone []*Object
	old.Ascend(func(prev *Object) bool {
		if _, found := list.Get(prev); !found {
			gone = append(gone, prev)
		}
		return true
	})
	if uint64(len(gone)) > listRV-last {
		return nil, false
	}
	rv := listRV - uint64(len(gone))
	for _, prev := range gone {
		rv++
		o, err := atVersion(prev, rv)
		if err != nil {
			return nil, false
		}
		o.slim(prev) // a copy of prev but for its resourceVersion
		changes = append(changes, &Event{Type: watch.Deleted, Object: o, Prev: prev, RV: rv})
	}
	return changes, true
}

// atVersion is a copy of o's last state with resourceVersion rv, the
// object a DELETED event at rv carries.
func atVersion(o *Object, rv uint64) (*Object, error) {
	obj := o.Obj.DeepCopyObject()
	accessor, err := meta.Accessor(obj)
	if err != nil {
		return nil, fmt.Errorf("%s/%s: %w", o.Namespace, o.Name, err)
	}
	accessor.SetResourceVersion(strconv.FormatUint(rv, 10))
	return newObject(obj)
}

func uid(o *Object) string {
	accessor, err := meta.Accessor(o.Obj)
	if err != nil {
		return ""
	}
	return string(accessor.GetUID())
}

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
