package nodeview

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"math/bits"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/nodeproxy/nodeproxy/apis/bulk/v1alpha1"
	"github.com/nodeproxy/nodeproxy/cache"
	"github.com/nodeproxy/nodeproxy/graph"
	"github.com/nodeproxy/nodeproxy/watchmux"
)

// Reachability is the live authorization graph; *graph.Graph is one.
type Reachability interface {
	Reachable(node string, ref graph.ObjectRef) bool
}

// index keeps what each view knows of the objects of the graph's kinds
// it reaches or holds (their reach), for all views at once, so that
// their changes are routed to the views that reach them (Views keeps it,
// reachIndex). shared says whether more than one view reaches or holds
// ref.
type index interface {
	reach(v *view, ref graph.ObjectRef) reach
	setReach(v *view, ref graph.ObjectRef, r reach)
	shared(ref graph.ObjectRef) bool
}

// state is the cache as views read it at one position: a snapshot per
// type, and which volumes are bound to which claim at the volumes'
// snapshot.
type state struct {
	stores  *[numTypes]*cache.Store
	encoder *cache.Encoder
	snaps   [numTypes]*cache.Snapshot
	claims  map[graph.ObjectRef]map[string]struct{} // claim -> names of the PVs bound to it
	// last is the object encoded last in each encoding (JSON, protobuf),
	// with its bytes: a change sent to every view (a service's) is looked
	// up in the encoder once per encoding, not once per view.
	last      [2]*cache.Object
	lastBytes [2][]byte
	// decoded are the pod versions decoded last, in a ring. The cache
	// keeps pods as bytes, and one goroutine reads a pod version in
	// several places one after the other: Views (holdLocked), its view
	// (applyPod, build), its JSON (encode), and a first sync reads a
	// node's pods twice (build, then sendAll). Each reads it decoded once
	// as long as fewer pods came between.
	decoded     [decodedPods]decodedPod
	nextDecoded int
}

// decodedPods bounds the ring: a node's first sync decodes each of its
// pods once where it has at most this many, twice where it has more, and
// the ring holds that many decoded pods (about 13 KB each for a
// Deployment's, docs/benchmarks.md) until the step ends.
const decodedPods = 32

// decodedPod is a pod version decoded, and what it adds a path to.
type decodedPod struct {
	o    *cache.Object
	pod  *corev1.Pod
	uses []graph.ObjectRef
}

// decodedPod is pod o decoded, from the ring or the cache's bytes.
func (st *state) decodedPod(o *cache.Object) (*decodedPod, error) {
	for i := range st.decoded {
		if st.decoded[i].o == o {
			return &st.decoded[i], nil
		}
	}
	countPodRead(false)
	obj, err := o.Typed()
	if err != nil {
		return nil, err
	}
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return nil, fmt.Errorf("%s/%s is a %T, not a pod", o.Namespace, o.Name, obj)
	}
	var uses []graph.ObjectRef
	graph.PodUses(pod, func(r graph.ObjectRef) {
		i := typeOfKind[r.Kind]
		if i < 0 || slices.Contains(uses, r) {
			return
		}
		// The names the cache holds, where it holds the object: the
		// view keys its entries by them for as long as the pod stays,
		// and the decoded pod's own copies would cost each view its own.
		if held, ok := st.get(i, r.Namespace, r.Name); ok {
			r.Namespace, r.Name = held.Namespace, held.Name
		}
		uses = append(uses, r)
	})
	d := &st.decoded[st.nextDecoded]
	*d = decodedPod{o: o, pod: pod, uses: uses}
	st.nextDecoded = (st.nextDecoded + 1) % decodedPods
	return d, nil
}

// forgetDecoded empties the ring at the end of a step: the reads it
// spares are those of one step, and its pods would otherwise stay
// decoded in the heap until others push them out.
func (st *state) forgetDecoded() { st.decoded, st.nextDecoded = [decodedPods]decodedPod{}, 0 }

// podUses is what pod o adds a path to, once each: graph.PodUses,
// without the kinds a view does not carry. An empty entry (a pod the
// view never had) uses nothing.
func (st *state) podUses(o *cache.Object) ([]graph.ObjectRef, error) {
	if o == nil {
		return nil, nil
	}
	d, err := st.decodedPod(o)
	if err != nil {
		return nil, err
	}
	return d.uses, nil
}

// get returns the object ref names, at the state's snapshot of type i.
func (st *state) get(i int, namespace, name string) (*cache.Object, bool) {
	return st.snaps[i].Get(namespace, name)
}

// volumesOf returns the PVs bound to claim, by name.
func (st *state) volumesOf(claim graph.ObjectRef) []*cache.Object {
	names := st.claims[claim]
	if len(names) == 0 {
		return nil
	}
	out := make([]*cache.Object, 0, len(names))
	for _, name := range slices.Sorted(maps.Keys(names)) {
		if o, ok := st.get(pvIndex, "", name); ok {
			out = append(out, o)
		}
	}
	return out
}

// bindClaims records in claims the binding of the volume o (nil: none).
func bindClaims(claims map[graph.ObjectRef]map[string]struct{}, prev, o *cache.Object) {
	if c, ok := claimOf(prev); ok {
		if set := claims[c]; set != nil {
			delete(set, prev.Name)
			if len(set) == 0 {
				delete(claims, c)
			}
		}
	}
	if c, ok := claimOf(o); ok {
		set := claims[c]
		if set == nil {
			set = map[string]struct{}{}
			claims[c] = set
		}
		set[o.Name] = struct{}{}
	}
}

// claimsAt indexes the volumes of snap by the claim each is bound to.
func claimsAt(snap *cache.Snapshot) map[graph.ObjectRef]map[string]struct{} {
	claims := map[graph.ObjectRef]map[string]struct{}{}
	snap.Ascend("", "", "", func(o *cache.Object) bool {
		bindClaims(claims, nil, o)
		return true
	})
	return claims
}

var (
	pvIndex  = typeIndex("persistentvolumes")
	podIndex = typeIndex("pods")
)

// view is one node's view: the synchronous core. It holds what its
// consumer holds (the objects' identities, not their data, which stay
// the cache's) and turns each change of the cache into the events that
// take the consumer from the view at one position to the view at the
// next. It takes no lock and starts no goroutine: Views calls it, one
// change at a time, in types order within a step.
type view struct {
	node string
	sink watchmux.Sink
	live Reachability
	ix   index

	// The objects of the graph's kinds the view reaches or the consumer
	// holds, and the volumes it holds, are in ix with their reach: one
	// entry for both, since they are the same objects but while one is
	// withheld or missing. An entry goes when it is neither. The view
	// keeps no list of them (reachIndex says why): what it must go
	// through, it finds from its pods (namespaces) or records while it
	// builds (built).
	//
	// held counts the objects of ix the consumer holds.
	held int
	// id names the view in ix's entries, 0 before its first (ix keeps it).
	id uint32
	// built are the objects build recorded as held, for sendAll to send
	// (nil once sent): the initial state's, gone once it is.
	built []graph.ObjectRef
	// volumes are the PVs in the view, bound to a claim it reaches, each
	// at the version whose secrets it added a path to: the cache's own
	// object, which the view takes in again at each change.
	volumes map[string]*cache.Object
	// pods are the node's pods in the view, each at the version whose
	// references it added a path to, the cache's own object: removal
	// takes away exactly those, whatever the pod looks like by then.
	pods map[objectKey]podEntry
	// own are the types of which the consumer holds the node's own
	// object (ownNode: its Node, its CSINode).
	own v1alpha1.NodeViewTypeSet
	// types are the types the view carries: those of the version of the
	// view its client asked for, which knows no other.
	types v1alpha1.NodeViewTypeSet

	// quiet: building the state the consumer already holds (a resume,
	// or before the initial state is sent): record, send nothing.
	quiet bool
	// initial: sending the initial state, which the channel does not
	// bound (watchmux.Sink.Initial).
	initial bool
	// sent counts events since the last bookmark; marked is the position
	// of the last bookmark.
	sent   int
	marked Position
	dead   bool
	joined bool
	// progress are the client's progress requests not yet answered,
	// oldest first (progress_requests.go).
	progress []progressAsk
}

// reach is what a view knows of an object of the graph's kinds: paths
// counts the paths from it to the node, one per pod of the node that
// uses it and one per volume in the view that names it (counted, as the
// graph counts, so that an object two pods use stays when one goes);
// held, whether the consumer holds it. A volume has no paths of its own:
// it is in the view by its claim's.
type reach struct {
	paths int32
	held  bool
}

type objectKey struct{ namespace, name string }

// podEntry is a pod of the node in the view: the version whose
// references it added a path to (state.podUses), and whether the
// consumer holds it.
type podEntry struct {
	obj  *cache.Object
	held bool
}

func newView(node string, types v1alpha1.NodeViewTypeSet, sink watchmux.Sink, live Reachability, ix index) *view {
	return &view{
		node: node, types: types, sink: sink, live: live, ix: ix,
		volumes: map[string]*cache.Object{}, pods: map[objectKey]podEntry{},
	}
}

// paths is how many paths lead from ref to the node.
func (v *view) paths(ref graph.ObjectRef) int32 { return v.ix.reach(v, ref).paths }

// holds says whether the consumer holds ref.
func (v *view) holds(ref graph.ObjectRef) bool { return v.ix.reach(v, ref).held }

// setHeld changes one half of ref's entry, the index dropping the entry
// once it is empty.
func (v *view) setHeld(ref graph.ObjectRef, held bool) {
	r := v.ix.reach(v, ref)
	switch {
	case held && !r.held:
		v.held++
	case !held && r.held:
		v.held--
	}
	r.held = held
	v.ix.setReach(v, ref, r)
}

// objects is how many objects of its own the view holds: everything but
// the cluster-wide types, which every view holds alike.
func (v *view) objects() int {
	return v.held + len(v.pods) + bits.OnesCount32(uint32(v.own))
}

// build records the view at st as held by the consumer, sending nothing:
// the node's pods and what they reach, its Node. A resume builds the view
// at the client's position; a first sync builds at the hub's and then
// sends it (sendAll).
func (v *view) build(st *state) {
	v.quiet = true
	defer func() { v.quiet = false }()
	st.snaps[podIndex].AscendNode(v.node, "", "", "", func(o *cache.Object) bool {
		uses, err := st.podUses(o)
		if err != nil {
			v.fail(fmt.Errorf("read pod %s/%s: %w", o.Namespace, o.Name, err))
			return false
		}
		v.pods[objectKey{o.Namespace, o.Name}] = podEntry{obj: o, held: true}
		v.addNamespacePath(o, 1, st)
		for _, r := range uses {
			v.addPath(r, 1, st)
		}
		return true
	})
	v.own = 0
	for i, t := range types {
		if t.role != ownNode || !v.types.Has(i) {
			continue
		}
		if _, ok := st.get(i, "", v.node); ok {
			v.own |= 1 << i
		}
	}
}

// sendAll sends the view build recorded (built) as its initial state, in types
// order, each type in key order, then the bookmark that ends it. An
// object the live graph no longer lets the node reach is withheld (the
// graph is ahead of the snapshot: the change that took it away is about
// to be published).
func (v *view) sendAll(st *state, pos Position) {
	v.initial = true
	defer func() { v.initial = false }()
	for i, t := range types {
		if !v.types.Has(i) {
			continue
		}
		switch t.role {
		case reached, boundVolume:
			var refs []graph.ObjectRef
			for _, r := range v.built {
				if r.Kind == t.kind {
					refs = append(refs, r)
				}
			}
			slices.SortFunc(refs, compareRefs)
			for _, r := range refs {
				// build recorded it held: sent as show sends what the
				// consumer lacks, or withheld and then not held. Its
				// entry is written only then, which most are not.
				if !v.live.Reachable(v.node, r) {
					withheld.Inc()
					v.setHeld(r, false)
					continue
				}
				o, _ := st.get(i, r.Namespace, r.Name)
				v.emit(watch.Added, v.encode(st, i, o))
			}
		case ownNode:
			if o, ok := st.get(i, "", v.node); ok {
				v.emit(watch.Added, v.encode(st, i, o))
			}
		case clusterWide:
			st.snaps[i].Ascend("", "", "", func(o *cache.Object) bool {
				v.emit(watch.Added, v.encode(st, i, o))
				return !v.dead
			})
		case podNamespaces:
			v.sendServices(i, st)
		case ownPods:
			st.snaps[i].AscendNode(v.node, "", "", "", func(o *cache.Object) bool {
				key := objectKey{o.Namespace, o.Name}
				if v.live.Reachable(v.node, graph.ObjectRef{Kind: graph.Pod, Namespace: o.Namespace, Name: o.Name}) {
					v.emit(watch.Added, v.encode(st, i, o))
				} else {
					withheld.Inc()
					v.pods[key] = podEntry{obj: v.pods[key].obj}
				}
				return !v.dead
			})
		}
	}
	v.built = nil
	v.sink.Initial(watch.Bookmark, bookmarkObject(v.positionOf(pos), true, ""))
	v.sent, v.marked = 0, pos
}

// apply takes in one change of type i, st being the state at the view's
// position for every type before i in types order (the order Views and
// the resume keep). It sends what the change is to this view, if
// anything: the changes of other nodes' pods, and of objects the node
// does not reach, are none of its business.
func (v *view) apply(i int, e *cache.Event, st *state) {
	if !v.types.Has(i) {
		return
	}
	o := e.Object
	switch t := types[i]; t.role {
	case reached:
		ref := graph.ObjectRef{Kind: t.kind, Namespace: o.Namespace, Name: o.Name}
		if v.paths(ref) == 0 {
			return
		}
		if e.Type == watch.Deleted {
			v.hide(i, ref, o, watch.Deleted, st)
			return
		}
		v.show(i, ref, o, e.Type, st)
	case boundVolume:
		v.applyVolume(e, st)
	case ownNode:
		if o.Name != v.node {
			return
		}
		held := v.own.Has(i)
		switch {
		case e.Type == watch.Deleted && held:
			v.own &^= 1 << i
			v.emit(watch.Deleted, v.encode(st, i, o))
		case e.Type != watch.Deleted && held:
			v.emit(watch.Modified, v.encode(st, i, o))
		case e.Type != watch.Deleted:
			v.own |= 1 << i
			v.emit(watch.Added, v.encode(st, i, o))
		}
	case clusterWide:
		v.emit(e.Type, v.encode(st, i, o))
	case podNamespaces:
		v.applyService(i, e, st)
	case ownPods:
		v.applyPod(e, st)
	}
}

// applyPod: a pod's references enter the view before the pod and leave
// it after the pod, so that the consumer never holds a pod without what
// it uses. A pod the live graph no longer has on the node (deleted, the
// deletion not yet taken in) is withheld as its references are (show):
// sending it would send a pod without what it uses, which the graph has
// already taken away.
func (v *view) applyPod(e *cache.Event, st *state) {
	o := e.Object
	key := objectKey{o.Namespace, o.Name}
	old, was := v.pods[key]
	is := e.Type != watch.Deleted && o.NodeName == v.node
	switch {
	case is:
		// A version with the spec of the one the view holds (a
		// kubelet's status write) uses what that one used: its paths
		// stand, and nothing is decoded for them.
		same := was && o.SameSpec(old.obj)
		var uses []graph.ObjectRef
		if same {
			countPodRead(true)
		} else {
			var err error
			if uses, err = st.podUses(o); err != nil {
				v.fail(fmt.Errorf("read pod %s/%s: %w", o.Namespace, o.Name, err))
				return
			}
		}
		if !was {
			v.addNamespacePath(o, 1, st)
		}
		for _, r := range uses {
			v.addPath(r, 1, st)
		}
		held := old.held
		if v.quiet {
			held = true
		} else if v.live.Reachable(v.node, graph.ObjectRef{Kind: graph.Pod, Namespace: o.Namespace, Name: o.Name}) {
			t := watch.Added
			if held {
				t = watch.Modified
			}
			v.emit(t, v.encode(st, podIndex, o))
			held = true
		} else {
			withheld.Inc()
		}
		v.pods[key] = podEntry{obj: o, held: held}
		if same {
			return
		}
		oldUses, err := st.podUses(old.obj)
		if err != nil {
			v.fail(fmt.Errorf("read pod %s/%s: %w", o.Namespace, o.Name, err))
			return
		}
		for _, r := range oldUses {
			v.addPath(r, -1, st)
		}
	case was:
		delete(v.pods, key)
		if old.held {
			v.emit(watch.Deleted, v.encode(st, podIndex, o))
		}
		oldUses, err := st.podUses(old.obj)
		if err != nil {
			v.fail(fmt.Errorf("read pod %s/%s: %w", o.Namespace, o.Name, err))
			return
		}
		for _, r := range oldUses {
			v.addPath(r, -1, st)
		}
		v.addNamespacePath(o, -1, st)
	}
}

// applyVolume: a PV is in the view while it is bound to a claim the node
// reaches; its secrets enter before it and leave after it.
func (v *view) applyVolume(e *cache.Event, st *state) {
	o := e.Object
	ref := graph.ObjectRef{Kind: graph.PersistentVolume, Name: o.Name}
	old, was := v.volumes[o.Name]
	claim, bound := claimOf(o)
	is := e.Type != watch.Deleted && bound && v.paths(claim) > 0
	switch {
	case is && !was:
		t := watch.Added
		if e.Type != watch.Added {
			t = v1alpha1.NodeViewEntered
		}
		v.volumeIn(o, t, st)
	case is:
		for _, s := range volumeSecrets(o) {
			v.addPath(s, 1, st)
		}
		v.volumes[o.Name] = o
		v.show(pvIndex, ref, o, watch.Modified, st)
		for _, s := range volumeSecrets(old) {
			v.addPath(s, -1, st)
		}
	case was:
		t := v1alpha1.NodeViewLeft
		if e.Type == watch.Deleted {
			t = watch.Deleted
		}
		v.volumeOut(o.Name, o, t, st)
	}
}

// volumeIn takes in the PV o, bound to a claim the view reaches.
func (v *view) volumeIn(o *cache.Object, t watch.EventType, st *state) {
	v.volumes[o.Name] = o
	for _, s := range volumeSecrets(o) {
		v.addPath(s, 1, st)
	}
	v.show(pvIndex, graph.ObjectRef{Kind: graph.PersistentVolume, Name: o.Name}, o, t, st)
}

func (v *view) volumeOut(name string, o *cache.Object, t watch.EventType, st *state) {
	vol := v.volumes[name]
	delete(v.volumes, name)
	v.hide(pvIndex, graph.ObjectRef{Kind: graph.PersistentVolume, Name: name}, o, t, st)
	for _, s := range volumeSecrets(vol) {
		v.addPath(s, -1, st)
	}
}

// addPath adds delta paths from ref to the node. When the first path
// appears the object enters the view (for a claim, the volumes bound to
// it first); when the last goes it leaves (for a claim, its volumes
// after it).
func (v *view) addPath(ref graph.ObjectRef, delta int32, st *state) {
	i := typeOfKind[ref.Kind]
	if i < 0 {
		return
	}
	r := v.ix.reach(v, ref)
	before := r.paths
	r.paths = max(before+delta, 0)
	after := r.paths
	// The entry that routes ref's changes to the view comes and goes
	// with its reach: first path in, last path and held out.
	v.ix.setReach(v, ref, r)
	switch {
	case before == 0 && after > 0:
		if ref.Kind == namespaceKind {
			v.namespaceIn(ref.Name, st)
			return
		}
		if ref.Kind == graph.PersistentVolumeClaim {
			for _, pv := range st.volumesOf(ref) {
				if _, in := v.volumes[pv.Name]; !in {
					v.volumeIn(pv, v1alpha1.NodeViewEntered, st)
				}
			}
		}
		if o, ok := st.get(i, ref.Namespace, ref.Name); ok {
			v.show(i, ref, o, v1alpha1.NodeViewEntered, st)
		}
	case before > 0 && after == 0:
		if ref.Kind == namespaceKind {
			v.namespaceOut(ref.Name, st)
		}
		v.hide(i, ref, nil, v1alpha1.NodeViewLeft, st)
		if ref.Kind == graph.PersistentVolumeClaim {
			var gone []string
			for name, vol := range v.volumes {
				if c, _ := claimOf(vol); c == ref {
					gone = append(gone, name)
				}
			}
			slices.Sort(gone)
			for _, name := range gone {
				v.volumeOut(name, nil, v1alpha1.NodeViewLeft, st)
			}
		}
	}
}

// show sends o, of type i, as in the view: ADDED, MODIFIED or ENTERED by
// what the consumer holds. Only if the live graph lets the node reach it.
// The graph takes in a change before the cache publishes it, so when it
// says no, the change taking the object away is already published or
// about to be, and this view will take it in at the latest in its next
// step: the object is withheld, and the consumer keeps the version it
// has until then, when it leaves after what used it (a pod's DELETED,
// then its secret's LEFT), as it would have without the race. Sending
// LEFT at once instead would take the secret from under a pod the
// consumer still holds.
func (v *view) show(i int, ref graph.ObjectRef, o *cache.Object, t watch.EventType, st *state) {
	if v.quiet {
		v.setHeld(ref, true)
		v.built = append(v.built, ref)
		return
	}
	held := v.holds(ref)
	if !v.live.Reachable(v.node, ref) {
		withheld.Inc()
		return
	}
	switch {
	case held:
		t = watch.Modified
	case t == watch.Modified:
		t = v1alpha1.NodeViewEntered
	}
	v.setHeld(ref, true)
	v.emit(t, v.encode(st, i, o))
}

// hide takes ref out of the consumer's copy: DELETED with its last state
// when the object was deleted while the node reaches it, otherwise LEFT
// with its identity alone.
func (v *view) hide(i int, ref graph.ObjectRef, o *cache.Object, t watch.EventType, st *state) {
	if !v.holds(ref) {
		return
	}
	v.setHeld(ref, false)
	if v.quiet {
		return
	}
	if t == watch.Deleted && o != nil && v.live.Reachable(v.node, ref) {
		v.emit(watch.Deleted, v.encode(st, i, o))
		return
	}
	v.emit(v1alpha1.NodeViewLeft, identityObject(st.stores[i], ref, st.snaps[i].RV))
}

// encode is o from the cache's encoder, in the encoding the view's
// client asked for: protobuf (Sink.Protobuf, the node endpoint's) or
// JSON. What several views send (the cluster-wide types, an object more
// than one node reaches) is encoded once per version and kept in the
// encoder's LRU for all of them; what this view alone sends (its pods,
// its Node, what only it reaches) is encoded for it and not kept, so that
// the bytes go once written rather than stay in the LRU for a reader that
// will not come (cache.Encoder.EncodeUncached). A pod, which the cache
// keeps as kube-apiserver's protobuf, goes to a protobuf view as those
// bytes: neither decoded nor encoded.
func (v *view) encode(st *state, i int, o *cache.Object) []byte {
	enc := 0
	if v.sink.Protobuf() {
		enc = 1
	}
	countEncoded(enc)
	if o == st.last[enc] {
		return st.lastBytes[enc]
	}
	var encode func(*cache.Store, *cache.Object) ([]byte, error)
	shared := v.sharedObject(i, o)
	switch {
	case enc == 1 && shared:
		encode = st.encoder.EncodeProtobuf
	case enc == 1:
		encode = st.encoder.EncodeProtobufUncached
	case shared:
		encode = st.encoder.Encode
	case types[i].role == ownPods:
		// Most likely decoded a moment ago for its references.
		encode = func(s *cache.Store, o *cache.Object) ([]byte, error) {
			d, err := st.decodedPod(o)
			if err != nil {
				return nil, err
			}
			return st.encoder.EncodeUncachedTyped(s, o, d.pod)
		}
	default:
		encode = st.encoder.EncodeUncached
	}
	b, err := encode(st.stores[i], o)
	if err != nil {
		// Not the node's fault and not to be skipped: the view cannot
		// go on without this object.
		v.fail(fmt.Errorf("encode %s %s/%s: %w", types[i].gvr.Resource, o.Namespace, o.Name, err))
		return nil
	}
	st.last[enc], st.lastBytes[enc] = o, b
	return b
}

// encodingNames are the values of the encoded objects metric's
// "encoding" label, by the index encode uses.
var encodingNames = [2]string{"json", "protobuf"}

// sharedObject says whether other views may send o, of type i, too.
func (v *view) sharedObject(i int, o *cache.Object) bool {
	switch t := types[i]; t.role {
	case clusterWide:
		return true
	case reached:
		return v.ix.shared(graph.ObjectRef{Kind: t.kind, Namespace: o.Namespace, Name: o.Name})
	case boundVolume:
		c, ok := claimOf(o)
		return ok && v.ix.shared(c)
	case podNamespaces:
		return v.sharedService(o)
	}
	return false
}

func (v *view) emit(t watch.EventType, object []byte) {
	if v.dead || v.quiet || object == nil {
		return
	}
	var ok bool
	if v.initial {
		ok = v.sink.Initial(t, object)
	} else {
		ok = v.sink.Send(t, object)
	}
	if !ok {
		v.dead = true
		return
	}
	v.sent++
	countEvent(t)
}

func (v *view) fail(err error) {
	if v.dead {
		return
	}
	v.dead = true
	v.sink.Close(&metav1.Status{Status: metav1.StatusFailure, Code: 500, Reason: metav1.StatusReasonInternalError, Message: err.Error()})
}

// volumeSecrets is what a PV adds a path to, once each.
func volumeSecrets(o *cache.Object) []graph.ObjectRef {
	if o == nil {
		return nil
	}
	pv, ok := persistentVolume(o)
	if !ok {
		return nil
	}
	var out []graph.ObjectRef
	graph.PVSecrets(pv, func(r graph.ObjectRef) {
		if !slices.Contains(out, r) {
			out = append(out, r)
		}
	})
	return out
}

// claimOf is the claim a PV is bound to (spec.claimRef), as the graph
// reads it.
func claimOf(o *cache.Object) (graph.ObjectRef, bool) {
	if o == nil {
		return graph.ObjectRef{}, false
	}
	pv, ok := persistentVolume(o)
	if !ok || pv.Spec.ClaimRef == nil {
		return graph.ObjectRef{}, false
	}
	return graph.ObjectRef{Kind: graph.PersistentVolumeClaim, Namespace: pv.Spec.ClaimRef.Namespace, Name: pv.Spec.ClaimRef.Name}, true
}

// persistentVolume is o's typed PV. The cache keeps PVs decoded, so
// this never decodes; a PV that could not be read would add no path, so
// that nothing is sent for it.
func persistentVolume(o *cache.Object) (*corev1.PersistentVolume, bool) {
	obj, err := o.Typed()
	if err != nil {
		return nil, false
	}
	pv, ok := obj.(*corev1.PersistentVolume)
	return pv, ok
}

func compareRefs(a, b graph.ObjectRef) int {
	return cmp.Or(strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Name, b.Name))
}

// identityObject is the object of a LEFT event: the type and the name,
// none of the state the node may no longer read.
func identityObject(s *cache.Store, ref graph.ObjectRef, rv uint64) []byte {
	b, _ := json.Marshal(&metav1.PartialObjectMetadata{
		TypeMeta:   metav1.TypeMeta{Kind: s.Kind, APIVersion: s.Resource.GroupVersion().String()},
		ObjectMeta: metav1.ObjectMeta{Namespace: ref.Namespace, Name: ref.Name, ResourceVersion: strconv.FormatUint(rv, 10)},
	})
	return b
}

// positionOf is pos as v's client has it: naming the types v carries.
func (v *view) positionOf(pos Position) Position {
	pos.Types = v.types
	return pos
}

// bookmarkObject is a view's BOOKMARK: its position, a resume point, with
// the annotation that ends the initial state when initialEnd is set, and
// the one that answers a progress request when progressToken is not "".
func bookmarkObject(pos Position, initialEnd bool, progressToken string) []byte {
	m := metav1.PartialObjectMetadata{
		TypeMeta:   metav1.TypeMeta{Kind: v1alpha1.NodeViewKind, APIVersion: v1alpha1.SchemeGroupVersion.String()},
		ObjectMeta: metav1.ObjectMeta{ResourceVersion: pos.String()},
	}
	if initialEnd {
		m.Annotations = map[string]string{metav1.InitialEventsAnnotationKey: "true"}
	} else if progressToken != "" {
		// Never both: the initial state's bookmark is sent as the view
		// joins, and a request pending then gets a bookmark of its own.
		m.Annotations = map[string]string{v1alpha1.NodeViewProgressAnnotation: progressToken}
	}
	b, _ := json.Marshal(&m)
	return b
}
