package nodecopy

import (
	"k8s.io/apimachinery/pkg/watch"

	"github.com/nodeproxy/nodeproxy/apis/bulk/v1alpha1"
)

// maxLog is how many changes the copy keeps for watches to resume from,
// of every type together. A node's view changes with its own pods and
// the cluster's services: a kubelet's watches resume within seconds of
// the change they last saw, and a watch from before the oldest change
// kept gets 410 and relists from the copy, which costs nothing off the
// node.
const maxLog = 4096

// change is one change of the copy, as a watch of its type sees it.
type change struct {
	typ      watch.EventType // ADDED, MODIFIED, DELETED, ENTERED, LEFT
	resource int
	// rv orders the type's changes: the object's resourceVersion, or for
	// ENTERED and LEFT the position the batch took the type to.
	rv  uint64
	obj *Object
}

// changeLog is the copy's last changes, oldest first, numbered in a
// sequence of its own: seq of changes[0] is base.
type changeLog struct {
	changes []change
	base    uint64
	// from is, per type, the resourceVersion from which every change of
	// the type is in the log: a watch from an earlier one may have missed
	// one.
	from [numTypes]uint64
}

func (l *changeLog) reset(at [numTypes]uint64) {
	l.base += uint64(len(l.changes))
	l.changes = nil
	l.from = at
}

// end is the sequence number of the next change.
func (l *changeLog) end() uint64 { return l.base + uint64(len(l.changes)) }

func (l *changeLog) append(c change) {
	if len(l.changes) == maxLog {
		// Drop a quarter at a time, in the same array.
		n := maxLog / 4
		for _, d := range l.changes[:n] {
			l.from[d.resource] = max(l.from[d.resource], d.rv)
		}
		l.changes = append(l.changes[:0], l.changes[n:]...)
		l.base += uint64(n)
	}
	l.changes = append(l.changes, c)
}

// since is the sequence number from which a watch of type i from
// resourceVersion rv reads, false if the log no longer holds every change
// after rv. An object that entered the view at rv is read too: entering
// leaves the type's version where it was when only pods moved (a
// namespace's services come with its first pod), so a list at rv may
// have been answered before it.
func (l *changeLog) since(i int, rv uint64) (uint64, bool) {
	if rv < l.from[i] {
		return 0, false
	}
	for j, c := range l.changes {
		if c.resource == i && (c.rv > rv || c.rv == rv && c.typ == v1alpha1.NodeViewEntered) {
			return l.base + uint64(j), true
		}
	}
	return l.end(), true
}

// read returns the changes from seq on, false if some of them are no
// longer kept.
func (l *changeLog) read(seq uint64) ([]change, bool) {
	if seq < l.base {
		return nil, false
	}
	return l.changes[seq-l.base:], true
}
