package cache

import (
	"bytes"
	"reflect"
	"strconv"
	"testing"
	"unsafe"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/component-base/metrics/testutil"

	"github.com/nodeproxy/nodeproxy/test/workload"
)

// typedRecorder keeps the typed objects a store's handler was given.
type typedRecorder struct{ added, updated []*corev1.Pod }

func (r *typedRecorder) OnAdd(obj interface{}, _ bool) { r.added = append(r.added, obj.(*corev1.Pod)) }
func (r *typedRecorder) OnUpdate(_, obj interface{}) {
	r.updated = append(r.updated, obj.(*corev1.Pod))
}
func (r *typedRecorder) OnDelete(interface{}) {}

// TestAListTakenInAsItStreamsIsKeptAsAListHandedWhole: a pod store is a
// TransformingStore, and a list that goes through client-go's temporary
// store with its transformer (the reflector's watch-list) holds, in that
// store, what the pod store keeps rather than decoded pods; handed to
// Replace, it leaves the store as a list of the same decoded pods would:
// the same bytes and index, the handlers given equal typed pods. A
// relist that finds a pod unchanged decodes nothing for it.
func TestAListTakenInAsItStreamsIsKeptAsAListHandedWhole(t *testing.T) {
	pods := make([]*corev1.Pod, 5)
	for i := range pods {
		p := workload.DeploymentPod("shop", "web", i, "node-"+strconv.Itoa(i%2), workload.PodRunning)
		p.ResourceVersion = strconv.Itoa(10 + i)
		p.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubelet"}}
		pods[i] = p
	}
	direct, streamed := newStore(served[0], 16), newStore(served[0], 16)
	var directSaw, streamedSaw typedRecorder
	direct.AddHandler(&directSaw)
	streamed.AddHandler(&streamedSaw)

	var items []interface{}
	for _, p := range pods {
		items = append(items, p.DeepCopy())
	}
	if err := direct.Replace(items, "20"); err != nil {
		t.Fatal(err)
	}

	var ts toolscache.TransformingStore = streamed
	temporary := toolscache.NewStore(toolscache.DeletionHandlingMetaNamespaceKeyFunc, toolscache.WithTransformer(ts.Transformer()))
	for _, p := range pods {
		if err := temporary.Add(p.DeepCopy()); err != nil {
			t.Fatal(err)
		}
	}
	for _, item := range temporary.List() {
		if _, ok := item.(*listed); !ok {
			t.Fatalf("the temporary store holds a %T, want what the pod store keeps", item)
		}
	}
	if err := streamed.Replace(temporary.List(), "20"); err != nil {
		t.Fatal(err)
	}

	enc, err := NewEncoder(16)
	if err != nil {
		t.Fatal(err)
	}
	want, got := direct.Snapshot(), streamed.Snapshot()
	for _, p := range pods {
		w, _ := want.Get(p.Namespace, p.Name)
		g, ok := got.Get(p.Namespace, p.Name)
		if !ok {
			t.Fatalf("%s is not in the store", p.Name)
		}
		wb, _ := enc.EncodeProtobuf(direct, w)
		gb, _ := enc.EncodeProtobuf(streamed, g)
		if !bytes.Equal(wb, gb) {
			t.Errorf("%s: other bytes than a list handed decoded", p.Name)
		}
		if g.NodeName != w.NodeName || g.UID != w.UID || g.RV != w.RV || !reflect.DeepEqual(g.Labels.Map(), w.Labels.Map()) {
			t.Errorf("%s: index %q %q %d %v, want %q %q %d %v", p.Name, g.NodeName, g.UID, g.RV, g.Labels, w.NodeName, w.UID, w.RV, w.Labels)
		}
	}
	if len(streamedSaw.added) != len(pods) {
		t.Fatalf("the handlers saw %d pods added, want %d", len(streamedSaw.added), len(pods))
	}
	for i := range pods {
		if !equality.Semantic.DeepEqual(streamedSaw.added[i], directSaw.added[i]) {
			t.Errorf("the handlers saw %s otherwise than from a list handed decoded", directSaw.added[i].Name)
		}
	}

	// A relist: one pod changed, the others as they were.
	changed := pods[2].DeepCopy()
	changed.ResourceVersion = "21"
	changed.Labels["rolled"] = "yes"
	temporary = toolscache.NewStore(toolscache.DeletionHandlingMetaNamespaceKeyFunc, toolscache.WithTransformer(ts.Transformer()))
	for i, p := range pods {
		if i == 2 {
			p = changed
		}
		if err := temporary.Add(p.DeepCopy()); err != nil {
			t.Fatal(err)
		}
	}
	decodes := func() float64 {
		n, err := testutil.GetCounterMetricValue(objectDecodes.WithLabelValues("Pod"))
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	before := decodes()
	if err := streamed.Replace(temporary.List(), "21"); err != nil {
		t.Fatal(err)
	}
	if len(streamedSaw.updated) != 1 || streamedSaw.updated[0].Labels["rolled"] != "yes" {
		t.Fatalf("the handlers saw %d updates, want the changed pod's", len(streamedSaw.updated))
	}
	// The changed pod, and the version before it, for OnUpdate.
	if n := decodes() - before; n != 2 {
		t.Errorf("the relist decoded %v pod versions, want 2: the changed one and its version before", n)
	}
	unchanged, _ := streamed.Snapshot().Get(pods[0].Namespace, pods[0].Name)
	first, _ := got.Get(pods[0].Namespace, pods[0].Name)
	if !sameString(unchanged.raw.part[1], first.raw.part[1]) {
		t.Error("an unchanged pod does not share its bytes with the version it had")
	}
}

// TestASecretListTakenInAsItStreamsKeepsItsKeysInItsOwnBytes: a
// secret taken in as it was listed and then relisted at a new version
// holds the same bytes and index as one handed decoded, its type for
// the selector, and its name in its own metadata's bytes, not in the
// version before's.
func TestASecretListTakenInAsItStreamsKeepsItsKeysInItsOwnBytes(t *testing.T) {
	secret := func(rv string) *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "creds", UID: "u-1", ResourceVersion: rv,
			Labels: map[string]string{"rev": rv}}, Type: corev1.SecretTypeOpaque, Data: map[string][]byte{"password": []byte("x")}}
	}
	direct, streamed := newStore(served[1], 16), newStore(served[1], 16)
	listThrough := func(s *Store, rv string) {
		t.Helper()
		temporary := toolscache.NewStore(toolscache.DeletionHandlingMetaNamespaceKeyFunc, toolscache.WithTransformer(s.Transformer()))
		if err := temporary.Add(secret(rv)); err != nil {
			t.Fatal(err)
		}
		if err := s.Replace(temporary.List(), rv); err != nil {
			t.Fatal(err)
		}
	}
	listThrough(streamed, "5")
	listThrough(streamed, "6")
	if err := direct.Replace([]interface{}{secret("5")}, "5"); err != nil {
		t.Fatal(err)
	}
	if err := direct.Replace([]interface{}{secret("6")}, "6"); err != nil {
		t.Fatal(err)
	}
	w, _ := direct.Snapshot().Get("shop", "creds")
	g, ok := streamed.Snapshot().Get("shop", "creds")
	if !ok {
		t.Fatal("the secret is not in the store")
	}
	if w.raw.join() == nil || !bytes.Equal(g.raw.join(), w.raw.join()) || g.raw.selected != w.raw.selected {
		t.Error("other bytes or type than a list handed decoded")
	}
	if g.Name != w.Name || g.Namespace != w.Namespace || g.UID != w.UID || g.RV != 6 {
		t.Errorf("index %s/%s %s %d", g.Namespace, g.Name, g.UID, g.RV)
	}
	first := g.raw.part[0]
	if p := unsafe.StringData(g.Name); uintptr(unsafe.Pointer(p)) < uintptr(unsafe.Pointer(unsafe.StringData(first))) ||
		uintptr(unsafe.Pointer(p)) >= uintptr(unsafe.Pointer(unsafe.StringData(first)))+uintptr(len(first)) {
		t.Error("the secret's name is not in its own metadata's bytes")
	}
}

// A store of a type kept decoded gives the reflector no transformer: it
// takes ownership of what the list decoded.
func TestAStoreKeptDecodedHasNoTransformer(t *testing.T) {
	for _, r := range served {
		if s := newStore(r, 4); (s.Transformer() != nil) != s.asBytes {
			t.Errorf("%s: a transformer %v, kept as bytes %v", r.gvr.Resource, s.Transformer() != nil, s.asBytes)
		}
	}
}
