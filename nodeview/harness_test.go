package nodeview

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/endpoints/request"
	clientscheme "k8s.io/client-go/kubernetes/scheme"

	"github.com/nodeproxy/nodeproxy/apis/bulk/v1alpha1"
	"github.com/nodeproxy/nodeproxy/cache"
	"github.com/nodeproxy/nodeproxy/graph"
)

// replica is one hub's cache, graph and views, written by hand as the
// reflectors would write them and stepped by the test.
type replica struct {
	t     testing.TB
	cache *cache.Cache
	graph *graph.Graph
	views *Views
}

func newReplica(t testing.TB, logSize int) *replica {
	t.Helper()
	return newReplicaListedAt(t, logSize, nil)
}

// newReplicaListedAt is newReplica whose stores of the types in listed
// take their first list at the version given, as a replica started
// later does; the others at 1.
func newReplicaListedAt(t testing.TB, logSize int, listed map[string]string) *replica {
	t.Helper()
	return newReplicaOf(t, cache.Options{LogSize: logSize, EncodedEntries: 1024}, listed)
}

func newReplicaOf(t testing.TB, opts cache.Options, listed map[string]string) *replica {
	t.Helper()
	c, err := cache.NewDetached(opts)
	if err != nil {
		t.Fatal(err)
	}
	g := graph.New()
	c.Store(corev1.SchemeGroupVersion.WithResource("pods")).AddHandler(g.PodHandler())
	c.Store(corev1.SchemeGroupVersion.WithResource("persistentvolumes")).AddHandler(g.PVHandler())
	for _, gvr := range cache.Watched() {
		rv := "1"
		if v, ok := listed[gvr.Resource]; ok {
			rv = v
		}
		if err := c.Store(gvr).Replace(nil, rv); err != nil {
			t.Fatal(err)
		}
	}
	views, err := NewViews(c, g, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	views.Step()
	return &replica{t: t, cache: c, graph: g, views: views}
}

// write applies w to the replica's store of its type.
func (r *replica) write(w write) {
	r.t.Helper()
	s := r.cache.Store(w.gvr)
	obj := w.obj.DeepCopyObject()
	var err error
	if w.delete {
		err = s.Delete(obj)
	} else {
		err = s.Add(obj)
	}
	if err != nil {
		r.t.Fatal(err)
	}
}

// open opens node's view from pos (nil: its initial state) on a
// recording sink; it joins at the next step.
func (r *replica) open(node string, from *Position) *consumer {
	return r.openIn(node, from, false)
}

// openIn is open on a sink that asks for protobuf if protobuf is set.
func (r *replica) openIn(node string, from *Position, protobuf bool) *consumer {
	c := &consumer{t: r.t, node: node, held: map[string]uint64{}}
	c.sink.protobuf = protobuf
	v := newView(node, v1alpha1.AllNodeViewTypes, &c.sink, r.graph, r.views)
	c.view = v
	c.sink.onClose = func() { r.views.remove(v) }
	if from == nil {
		r.views.join(v, Position{}, false)
	} else {
		r.views.join(v, *from, true)
	}
	return c
}

// write is one change of the cluster, as etcd orders them.
type write struct {
	gvr    schema.GroupVersionResource
	obj    runtime.Object
	delete bool
}

// cluster makes writes with increasing resourceVersions, as etcd would.
type cluster struct{ rv uint64 }

func (c *cluster) next() string {
	c.rv++
	return strconv.FormatUint(c.rv+1, 10) // 1 is the empty lists'
}

func (c *cluster) put(gvr schema.GroupVersionResource, obj runtime.Object) write {
	obj.(metav1.Object).SetResourceVersion(c.next())
	return write{gvr: gvr, obj: obj}
}

func (c *cluster) del(gvr schema.GroupVersionResource, obj runtime.Object) write {
	obj.(metav1.Object).SetResourceVersion(c.next())
	return write{gvr: gvr, obj: obj, delete: true}
}

var (
	secretsGVR  = corev1.SchemeGroupVersion.WithResource("secrets")
	cmGVR       = corev1.SchemeGroupVersion.WithResource("configmaps")
	saGVR       = corev1.SchemeGroupVersion.WithResource("serviceaccounts")
	pvcGVR      = corev1.SchemeGroupVersion.WithResource("persistentvolumeclaims")
	pvGVR       = corev1.SchemeGroupVersion.WithResource("persistentvolumes")
	podsGVR     = corev1.SchemeGroupVersion.WithResource("pods")
	nodesGVR    = corev1.SchemeGroupVersion.WithResource("nodes")
	servicesGVR = corev1.SchemeGroupVersion.WithResource("services")
	rcGVR       = nodev1.SchemeGroupVersion.WithResource("runtimeclasses")
)

func secret(name, value string) *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}, Data: map[string][]byte{"v": []byte(value)}}
}

func configMap(name, value string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}, Data: map[string]string{"v": value}}
}

func claim(name string) *corev1.PersistentVolumeClaim {
	return &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}}
}

// pv is a CSI PV whose node-publish secret is secretName, bound to
// claimName in ns ("": unbound).
func pv(name, claimName, secretName string) *corev1.PersistentVolume {
	pv := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PersistentVolumeSpec{
		PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{
			Driver: "csi.example.com", VolumeHandle: name,
			NodePublishSecretRef: &corev1.SecretReference{Namespace: "ns", Name: secretName},
		}},
	}}
	if claimName != "" {
		pv.Spec.ClaimRef = &corev1.ObjectReference{Namespace: "ns", Name: claimName}
	}
	return pv
}

// pod is bound to node and uses what uses names: "secret/x",
// "configmap/x", "claim/x", "sa/x".
func pod(name, node string, uses ...string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}, Spec: corev1.PodSpec{NodeName: node}}
	for i, u := range uses {
		kind, ref, _ := strings.Cut(u, "/")
		vol := corev1.Volume{Name: fmt.Sprintf("v%d", i)}
		switch kind {
		case "secret":
			vol.Secret = &corev1.SecretVolumeSource{SecretName: ref}
		case "configmap":
			vol.ConfigMap = &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: ref}}
		case "claim":
			vol.PersistentVolumeClaim = &corev1.PersistentVolumeClaimVolumeSource{ClaimName: ref}
		case "sa":
			p.Spec.ServiceAccountName = ref
			continue
		}
		p.Spec.Volumes = append(p.Spec.Volumes, vol)
	}
	return p
}

func serviceAccount(name string) *corev1.ServiceAccount {
	return &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}}
}

func node(name, label string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"l": label}}}
}

// service is a service of default, which every view carries.
func service(name string) *corev1.Service { return serviceIn(metav1.NamespaceDefault, name) }

func serviceIn(namespace, name string) *corev1.Service {
	return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
}

// recordingSink is a watchmux.Sink that keeps what it was sent.
type recordingSink struct {
	// protobuf: the client asked for protobuf (Sink.Protobuf).
	protobuf bool
	mu       sync.Mutex
	events   []sent
	closed   *metav1.Status
	onClose  func()
}

type sent struct {
	typ    watch.EventType
	object []byte
}

func (s *recordingSink) Send(t watch.EventType, object []byte) bool    { return s.add(t, object) }
func (s *recordingSink) Initial(t watch.EventType, object []byte) bool { return s.add(t, object) }
func (s *recordingSink) OnClose(f func())                              { s.onClose = f }
func (s *recordingSink) Done() <-chan struct{}                         { return nil }
func (s *recordingSink) Protobuf() bool                                { return s.protobuf }

func (s *recordingSink) add(t watch.EventType, object []byte) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed != nil {
		return false
	}
	s.events = append(s.events, sent{t, object})
	return true
}

func (s *recordingSink) Close(status *metav1.Status) {
	s.mu.Lock()
	if s.closed != nil {
		s.mu.Unlock()
		return
	}
	s.closed = status
	f := s.onClose
	s.mu.Unlock()
	if f != nil {
		f()
	}
}

// take returns what was sent since the last take.
func (s *recordingSink) take() []sent {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.events
	s.events = nil
	return out
}

// consumer is a view's client as the node endpoint will be: it applies
// the events of a batch to its copy at the batch's bookmark, and fails
// the test on any event that would lose or repeat a change.
type consumer struct {
	t    testing.TB
	node string
	sink recordingSink
	view *view
	// held is the copy: "Kind ns/name" -> resourceVersion held.
	held map[string]uint64
	// pos is the last bookmark's position; "" before the first.
	pos string
	// log is every event, as "TYPE Kind ns/name", bookmarks as "BOOKMARK".
	log []string
	// exists, if set, says whether the cache holds an object of type i
	// now: a pod arriving before such an object it uses fails the test.
	exists func(i int, namespace, name string) bool
	// live says whether the live graph lets the node reach an object now.
	live func(graph.ObjectRef) bool
	// services are the names of the services of a namespace the cache
	// holds now: a pod arriving before one of its namespace's fails the
	// test.
	services func(namespace string) []string
	// objects is every event read, its object as JSON (transcoded from
	// protobuf where it came so); protobufEvents counts those.
	objects        []sent
	protobufEvents int
}

// protobufMagic begins an object in kube-apiserver's protobuf.
var protobufMagic = []byte("k8s\x00")

// asJSON is b, an object in kube-apiserver's protobuf, as JSON with its
// apiVersion and kind, as the cache's encoder writes it: decoded with
// client-go's scheme, which knows every type a view carries.
func asJSON(t testing.TB, b []byte) []byte {
	t.Helper()
	obj, gvk, err := clientscheme.Codecs.UniversalDeserializer().Decode(b, nil, nil)
	if err != nil {
		t.Fatalf("decode a protobuf object: %v", err)
	}
	obj.GetObjectKind().SetGroupVersionKind(*gvk)
	out, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

var kindNames = map[graph.Kind]string{
	graph.Secret: "Secret", graph.ConfigMap: "ConfigMap", graph.ServiceAccount: "ServiceAccount",
	graph.PersistentVolumeClaim: "PersistentVolumeClaim", graph.PersistentVolume: "PersistentVolume", graph.Pod: "Pod",
}

// reachable is held as sorted "key@rv" lines, without the objects the
// graph's kinds and pods that r's live graph does not let c's node
// reach now.
func (c *consumer) reachable(r *replica, held map[string]uint64) []string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(held)) {
		kind, rest, _ := strings.Cut(k, " ")
		ns, name, namespaced := strings.Cut(rest, "/")
		if !namespaced {
			ns, name = "", rest
		}
		for gk, n := range kindNames {
			if n == kind && !r.graph.Reachable(c.node, graph.ObjectRef{Kind: gk, Namespace: ns, Name: name}) {
				goto skip
			}
		}
		out = append(out, fmt.Sprintf("%s@%d", k, held[k]))
	skip:
	}
	return out
}

// checkOrder fails the test if the pod of a pod event uses an object the
// cache holds and the consumer does not.
func (c *consumer) checkOrder(object []byte, batch []string) {
	c.t.Helper()
	var p corev1.Pod
	if err := json.Unmarshal(object, &p); err != nil {
		c.t.Fatal(err)
	}
	graph.PodUses(&p, func(r graph.ObjectRef) {
		i := typeOfKind[r.Kind]
		if i < 0 || !c.exists(i, r.Namespace, r.Name) || !c.live(r) {
			return // not there, or not the node's to read any more
		}
		if _, held := c.held[kindNames[r.Kind]+" "+r.Namespace+"/"+r.Name]; !held {
			c.t.Errorf("pod %s/%s arrived before the %s it uses; events: %s", p.Namespace, p.Name, r, strings.Join(append(c.log, batch...), " | "))
		}
	})
}

// checkServices fails the test if a pod of namespace ns arrives while
// the cache holds a service of ns that the consumer does not: the kubelet
// would compute the pod's environment without it.
func (c *consumer) checkServices(ns, pod string, batch []string) {
	c.t.Helper()
	for _, name := range c.services(ns) {
		if _, held := c.held["Service "+ns+"/"+name]; !held {
			c.t.Errorf("%s arrived before service %s/%s of its namespace; events: %s", pod, ns, name, strings.Join(append(c.log, batch...), " | "))
		}
	}
}

type objectMeta struct {
	Kind     string `json:"kind"`
	Metadata struct {
		Namespace       string            `json:"namespace"`
		Name            string            `json:"name"`
		ResourceVersion string            `json:"resourceVersion"`
		Annotations     map[string]string `json:"annotations"`
	} `json:"metadata"`
	Data json.RawMessage `json:"data"`
	Spec json.RawMessage `json:"spec"`
}

func keyOf(m objectMeta) string {
	if m.Metadata.Namespace == "" {
		return m.Kind + " " + m.Metadata.Name
	}
	return m.Kind + " " + m.Metadata.Namespace + "/" + m.Metadata.Name
}

// read takes in what the view sent since the last read and returns it as
// log lines.
func (c *consumer) read() []string {
	c.t.Helper()
	var lines []string
	taken := c.sink.take()
	if c.pos != "" && slices.ContainsFunc(taken, func(e sent) bool {
		return e.typ == watch.Bookmark && strings.Contains(string(e.object), metav1.InitialEventsAnnotationKey)
	}) {
		// The view afresh on a resume: the consumer replaces its copy.
		clear(c.held)
	}
	for _, e := range taken {
		if bytes.HasPrefix(e.object, protobufMagic) {
			if !c.sink.protobuf {
				c.t.Fatalf("%s: protobuf on a JSON view", e.typ)
			}
			c.protobufEvents++
			e.object = asJSON(c.t, e.object)
		}
		c.objects = append(c.objects, e)
		var m objectMeta
		if err := json.Unmarshal(e.object, &m); err != nil {
			c.t.Fatalf("%s: %v", e.typ, err)
		}
		if e.typ == watch.Bookmark {
			if m.Kind != v1alpha1.NodeViewKind {
				c.t.Fatalf("a bookmark of kind %q", m.Kind)
			}
			if _, err := ParsePosition(m.Metadata.ResourceVersion); err != nil {
				c.t.Fatal(err)
			}
			c.pos = m.Metadata.ResourceVersion
			line := "BOOKMARK"
			if m.Metadata.Annotations[metav1.InitialEventsAnnotationKey] == "true" {
				line = "BOOKMARK initial-events-end"
			}
			if token, ok := m.Metadata.Annotations[v1alpha1.NodeViewProgressAnnotation]; ok {
				line = "BOOKMARK progress=" + token
			}
			lines = append(lines, line)
			continue
		}
		k := keyOf(m)
		rv, err := strconv.ParseUint(m.Metadata.ResourceVersion, 10, 64)
		if err != nil {
			c.t.Fatalf("%s %s: resourceVersion %q", e.typ, k, m.Metadata.ResourceVersion)
		}
		prev, held := c.held[k]
		switch e.typ {
		case watch.Added, v1alpha1.NodeViewEntered:
			if held {
				c.t.Errorf("%s %s, which the consumer holds at %d: repeated", e.typ, k, prev)
			}
			c.held[k] = rv
		case watch.Modified:
			if !held {
				c.t.Errorf("MODIFIED %s, which the consumer does not hold: an ADDED or ENTERED was lost", k)
			} else if rv <= prev {
				c.t.Errorf("MODIFIED %s at %d, the consumer holds %d: repeated", k, rv, prev)
			}
			c.held[k] = rv
		case watch.Deleted, v1alpha1.NodeViewLeft:
			if !held {
				c.t.Errorf("%s %s, which the consumer does not hold", e.typ, k)
			}
			if e.typ == v1alpha1.NodeViewLeft && (m.Data != nil || m.Spec != nil) {
				c.t.Errorf("LEFT %s carries the object's state: %s", k, e.object)
			}
			delete(c.held, k)
		default:
			c.t.Fatalf("unexpected event %s", e.typ)
		}
		if m.Kind == "Pod" && (e.typ == watch.Added || e.typ == watch.Modified) && c.exists != nil {
			c.checkOrder(e.object, lines)
			c.checkServices(m.Metadata.Namespace, k, lines)
		}
		lines = append(lines, string(e.typ)+" "+k)
	}
	c.log = append(c.log, lines...)
	return lines
}

// position is the last bookmark's position, parsed.
func (c *consumer) position() Position {
	c.t.Helper()
	p, err := ParsePosition(c.pos)
	if err != nil {
		c.t.Fatal(err)
	}
	return p
}

// snapshot is the copy as sorted "key@rv" lines.
func (c *consumer) snapshot() []string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(c.held)) {
		out = append(out, fmt.Sprintf("%s@%d", k, c.held[k]))
	}
	return out
}

// selector is a node view's selector.
func selector(fieldSelector, rv string) *v1alpha1.GetOperation {
	return &v1alpha1.GetOperation{Resource: v1alpha1.NodeViewResourceV1alpha2,
		Options: metav1.ListOptions{FieldSelector: fieldSelector, ResourceVersion: rv}}
}

// openAs asks the replica's handler for sel as the user; nil if it opened.
func openAs(t testing.TB, r *replica, name string, groups []string, sel *v1alpha1.GetOperation) *metav1.Status {
	t.Helper()
	ctx := request.WithUser(context.Background(), &user.DefaultInfo{Name: name, Groups: groups})
	var sink recordingSink
	run, st := NewHandler(r.views, nil).Open(ctx, sel, &sink)
	if st == nil && run == nil {
		t.Fatal("opened without a run function")
	}
	return st
}

func codeOf(st *metav1.Status) int32 {
	if st == nil {
		return 0
	}
	return st.Code
}
