package watch

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	apiwatch "k8s.io/apimachinery/pkg/watch"

	"github.com/nodeproxy/nodeproxy/bulk"
	"github.com/nodeproxy/nodeproxy/cache"
)

// dispatcher feeds the watch channels of one resource type from its
// store's change log: one goroutine per type follows the log and hands
// each change to the channels that may want it, found through indexes (by
// namespace/name, by node for pods), as kube-apiserver's watch cache
// dispatches to its watchers. Channels of a type cost no goroutine and are
// not woken by changes they do not select.
//
// mu is held while dispatching a batch and while registering a channel,
// so a new channel joins at a definite position: it replays the log from
// its own resourceVersion up to pos, then receives what follows. Sends
// never block (watchmux queues them), so the lock is held for the time a
// batch takes to fan out.
type dispatcher struct {
	store    *cache.Store
	encoder  *cache.Encoder
	interval time.Duration // between bookmarks
	// ready is closed once run has taken its position: a channel that
	// registered before would miss the changes between its
	// resourceVersion and that position.
	ready chan struct{}

	mu     sync.Mutex
	pos    uint64                             // guarded by mu: dispatched up to here
	byName map[objectKey]map[*stream]struct{} // guarded by mu
	byNode map[string]map[*stream]struct{}    // guarded by mu
	// scan holds everything else by namespace ("": every namespace, or
	// a cluster-scoped type), then grouped by what it selects: a change
	// is matched once per group, not once per channel (5,000 kubelets
	// watching services with one selector are one group), and channels
	// of other namespaces are not visited.
	scan    map[string]map[bulk.Selection]*group // guarded by mu
	marking map[*stream]struct{}                 // guarded by mu: want bookmarks

	// gone holds channels closed since the last batch. Closing happens on
	// whatever goroutine closed the channel, possibly the dispatcher's
	// own inside a send, so it must not take mu.
	goneMu sync.Mutex
	gone   []*stream
}

type objectKey struct{ namespace, name string }

// group is the channels of one Selection: q and graph are its first
// channel's, and decide for all of them.
type group struct {
	q       *bulk.Query
	graph   bulk.Reachability
	streams map[*stream]struct{}
}

func newDispatcher(s *cache.Store, enc *cache.Encoder, bookmarkInterval time.Duration) *dispatcher {
	return &dispatcher{
		store: s, encoder: enc, interval: bookmarkInterval, ready: make(chan struct{}),
		byName: map[objectKey]map[*stream]struct{}{}, byNode: map[string]map[*stream]struct{}{},
		scan: map[string]map[bulk.Selection]*group{}, marking: map[*stream]struct{}{},
	}
}

// run dispatches until ctx ends.
func (d *dispatcher) run(ctx context.Context) {
	bookmarks := time.NewTicker(d.interval)
	defer bookmarks.Stop()
	snap := d.store.Snapshot()
	d.mu.Lock()
	d.pos = snap.RV
	d.mu.Unlock()
	close(d.ready)
	for {
		select {
		case <-ctx.Done():
			return
		case <-bookmarks.C:
			d.bookmark()
			continue
		case <-snap.Next():
		}
		snap = d.store.Snapshot()
		d.dispatch(snap)
	}
}

func (d *dispatcher) dispatch(snap *cache.Snapshot) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.sweepLocked()
	events, err := snap.Changes(d.pos)
	if err != nil {
		// The store relisted, or this goroutine fell a whole log behind:
		// no channel can be told what it missed. Each must relist.
		d.expireAllLocked("the cache relisted " + d.store.Resource.Resource + "; list again and resubscribe")
		d.pos = snap.RV
		return
	}
	for _, e := range events {
		d.fanOutLocked(e)
	}
	d.pos = snap.RV
}

// fanOutLocked hands e to the channels that may select it: those naming
// the object, those of the pod's node (before and after a move), and those
// that scan its namespace or every namespace, a group of one selection at
// a time. Each channel is in one index, so none gets e twice.
//
// The object is encoded at most once per change, here, whatever the number
// of channels: an update of an object 2,000 nodes watch costs one lookup
// in the encoded-object cache, not 2,000.
func (d *dispatcher) fanOutLocked(e *cache.Event) {
	o := e.Object
	enc := &encodedEvent{Event: e, store: d.store, encoder: d.encoder}
	for s := range d.byName[objectKey{o.Namespace, o.Name}] {
		s.deliver(enc)
	}
	if o.NodeName != "" {
		for s := range d.byNode[o.NodeName] {
			s.deliver(enc)
		}
	}
	if p := e.Prev; p != nil && p.NodeName != "" && p.NodeName != o.NodeName {
		for s := range d.byNode[p.NodeName] {
			s.deliver(enc)
		}
	}
	d.fanOutGroupsLocked(enc, d.scan[""])
	if o.Namespace != "" { // an object never changes namespace
		d.fanOutGroupsLocked(enc, d.scan[o.Namespace])
	}
}

// fanOutGroupsLocked matches e once per group, and sends what it is to
// the group's channels.
func (d *dispatcher) fanOutGroupsLocked(e *encodedEvent, groups map[bulk.Selection]*group) {
	for _, g := range groups {
		t, ok := eventFor(e, g.q, g.graph)
		if !ok {
			continue
		}
		for s := range g.streams {
			if s.wants(e) {
				s.send(e, t)
			}
		}
	}
}

// encodedEvent is a change with its object's encodings, each made on
// first use: JSON, and protobuf for the channels that ask for it.
type encodedEvent struct {
	*cache.Event
	store   *cache.Store
	encoder *cache.Encoder
	json    encoded
	proto   encoded
}

// encoded is one encoding of an event's object, once made.
type encoded struct {
	done bool
	b    []byte
	err  error
}

// bytes is the object in the encoding the channel asked for.
func (e *encodedEvent) bytes(protobuf bool) ([]byte, error) {
	enc, encode := &e.json, e.encoder.Encode
	if protobuf {
		enc, encode = &e.proto, e.encoder.EncodeProtobuf
	}
	if !enc.done {
		enc.b, enc.err = encode(e.store, e.Object)
		enc.done = true
	}
	return enc.b, enc.err
}

// register adds s, which has seen the state at from, replaying the log
// from there to where dispatching is, and says how (resumeFromLog,
// resumeFromState, resumeExpired). When the log no longer reaches from,
// a resumed channel that names one object gets that object's current
// state instead (resumeFromStateLocked); any other gets ErrExpired.
func (d *dispatcher) register(s *stream, from uint64, resumed bool) (string, error) {
	select {
	case <-d.ready:
	case <-s.sink.Done():
		return resumeGone, nil // closed meanwhile; nothing to feed
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	s.after = from
	how := resumeFromLog
	if from < d.pos {
		snap := d.store.Snapshot()
		events, err := snap.Changes(from)
		switch {
		case errors.Is(err, cache.ErrExpired) && resumed && s.q.NamesOneObject():
			if err := d.resumeFromStateLocked(s, from, snap); err != nil {
				return resumeExpired, err
			}
			how = resumeFromState
		case err != nil:
			return resumeExpired, err
		}
		for _, e := range events {
			if e.RV > d.pos {
				break // dispatch will deliver these
			}
			s.deliver(&encodedEvent{Event: e, store: d.store, encoder: d.encoder})
		}
	}
	switch {
	case s.q.NamesOneObject():
		addTo(d.byName, objectKey{s.q.Namespace(), s.q.Name()}, s)
	case s.q.Node() != "":
		addTo(d.byNode, s.q.Node(), s)
	default:
		groups, ok := d.scan[s.q.Namespace()]
		if !ok {
			groups = map[bulk.Selection]*group{}
			d.scan[s.q.Namespace()] = groups
		}
		key := s.q.Selection()
		g, ok := groups[key]
		if !ok {
			g = &group{q: s.q, graph: s.graph, streams: map[*stream]struct{}{}}
			groups[key] = g
		}
		g.streams[s] = struct{}{}
	}
	if s.q.Bookmarks() {
		d.marking[s] = struct{}{}
	}
	return how, nil
}

func addTo[K comparable](m map[K]map[*stream]struct{}, k K, s *stream) {
	set, ok := m[k]
	if !ok {
		set = map[*stream]struct{}{}
		m[k] = set
	}
	set[s] = struct{}{}
}

// unregister is called when s's channel closes, on any goroutine.
func (d *dispatcher) unregister(s *stream) {
	d.goneMu.Lock()
	d.gone = append(d.gone, s)
	d.goneMu.Unlock()
}

func (d *dispatcher) sweepLocked() {
	d.goneMu.Lock()
	gone := d.gone
	d.gone = nil
	d.goneMu.Unlock()
	for _, s := range gone {
		d.removeLocked(s)
	}
}

func (d *dispatcher) removeLocked(s *stream) {
	removeFrom(d.byName, objectKey{s.q.Namespace(), s.q.Name()}, s)
	removeFrom(d.byNode, s.q.Node(), s)
	if groups, ok := d.scan[s.q.Namespace()]; ok {
		key := s.q.Selection()
		if g, ok := groups[key]; ok {
			delete(g.streams, s)
			if len(g.streams) == 0 {
				delete(groups, key)
			}
		}
		if len(groups) == 0 {
			delete(d.scan, s.q.Namespace())
		}
	}
	delete(d.marking, s)
}

func removeFrom[K comparable](m map[K]map[*stream]struct{}, k K, s *stream) {
	if set, ok := m[k]; ok {
		delete(set, s)
		if len(set) == 0 {
			delete(m, k)
		}
	}
}

func (d *dispatcher) expireAllLocked(msg string) {
	status := &metav1.Status{Status: metav1.StatusFailure, Code: http.StatusGone, Reason: metav1.StatusReasonExpired, Message: msg}
	var all []*stream
	for _, set := range d.byName {
		for s := range set {
			all = append(all, s)
		}
	}
	for _, set := range d.byNode {
		for s := range set {
			all = append(all, s)
		}
	}
	for _, groups := range d.scan {
		for _, g := range groups {
			for s := range g.streams {
				all = append(all, s)
			}
		}
	}
	for _, s := range all {
		d.removeLocked(s)
		s.sink.Close(status)
	}
}

// bookmark sends every channel that asked for bookmarks the position
// dispatching has reached: nothing it selects changed up to there.
func (d *dispatcher) bookmark() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.sweepLocked()
	if len(d.marking) == 0 {
		return
	}
	object := bookmarkObject(d.store, d.pos, false)
	for s := range d.marking {
		if d.pos > s.after {
			s.sink.Send(apiwatch.Bookmark, object)
		}
	}
}

// bookmarkObject is a BOOKMARK's object: the type, and the
// resourceVersion, with the annotation that ends the initial events when
// initialEnd is set.
func bookmarkObject(s *cache.Store, rv uint64, initialEnd bool) []byte {
	b := []byte(`{"kind":"` + s.Kind + `","apiVersion":"` + s.Resource.GroupVersion().String() + `","metadata":{"resourceVersion":"`)
	b = strconv.AppendUint(b, rv, 10)
	b = append(b, '"')
	if initialEnd {
		b = append(b, `,"annotations":{"`+metav1.InitialEventsAnnotationKey+`":"true"}`...)
	}
	return append(b, "}}"...)
}
