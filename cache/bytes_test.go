package cache

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strconv"
	"testing"
	"time"
	"unsafe"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/scheme"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/nodeproxy/nodeproxy/test/workload"
)

// recorder keeps what a store's handler was given.
type recorder struct{ calls []string }

func (r *recorder) OnAdd(obj interface{}, _ bool) { r.calls = append(r.calls, "add "+podState(obj)) }
func (r *recorder) OnUpdate(old, obj interface{}) {
	r.calls = append(r.calls, "update "+podState(old)+" -> "+podState(obj))
}
func (r *recorder) OnDelete(obj interface{}) { r.calls = append(r.calls, "delete "+podState(obj)) }

// podState names a pod handed to a handler by its resourceVersion,
// node and phase, which a handler can only know from a whole object.
func podState(obj interface{}) string {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return "not a pod"
	}
	return p.ResourceVersion + "@" + p.Spec.NodeName + "/" + string(p.Status.Phase)
}

// kubeAPIServerProtobuf is pod as kube-apiserver's protobuf serializer
// writes it, type meta on the envelope, without managedFields.
func kubeAPIServerProtobuf(t *testing.T, pod *corev1.Pod) []byte {
	t.Helper()
	return kubeAPIServerBytes(t, pod.DeepCopy(), "Pod")
}

// kubeAPIServerBytes is obj, which it changes, as kube-apiserver's
// protobuf serializer writes an object of kind in v1: type meta on the
// envelope, without managedFields.
func kubeAPIServerBytes(t *testing.T, obj runtime.Object, kind string) []byte {
	t.Helper()
	accessor, err := meta.Accessor(obj)
	if err != nil {
		t.Fatal(err)
	}
	accessor.SetManagedFields(nil)
	obj.GetObjectKind().SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind(kind))
	var b bytes.Buffer
	if err := protobuf.NewSerializer(scheme.Scheme, scheme.Scheme).Encode(obj, &b); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// typedAsWritten checks that o's typed readers get want (a version
// written to the store) without its managedFields, which the store
// strips, and returns that copy of want.
func typedAsWritten[T runtime.Object](t *testing.T, o *Object, want T) T {
	t.Helper()
	stripped := want.DeepCopyObject().(T)
	accessor, err := meta.Accessor(stripped)
	if err != nil {
		t.Fatal(err)
	}
	accessor.SetManagedFields(nil)
	typed, err := o.Typed()
	if err != nil {
		t.Fatal(err)
	}
	if !equality.Semantic.DeepEqual(typed, runtime.Object(stripped)) {
		t.Errorf("version %s: the typed readers get another object than was written: %s", accessor.GetResourceVersion(), cmp.Diff(runtime.Object(stripped), typed))
	}
	return stripped
}

// TestPodsAreKeptAsBytes: a pod store keeps each version as
// kube-apiserver's protobuf bytes, without managedFields, and no typed
// object; protobuf readers get those bytes, typed readers an object equal
// to what was decoded, JSON readers its JSON; its handlers see every
// change typed, the version before included; and a status write shares
// the spec's bytes and the key fields with the version before.
func TestPodsAreKeptAsBytes(t *testing.T) {
	s := newStore(served[0], 16)
	rec := &recorder{}
	s.AddHandler(rec)
	version := func(stage workload.PodStage, rv int) *corev1.Pod {
		p := workload.DeploymentPod("shop", "web", 1, "node-1", stage)
		p.ResourceVersion = strconv.Itoa(rv)
		p.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubelet", Operation: metav1.ManagedFieldsOperationUpdate}}
		return p
	}
	scheduled, starting, running := version(workload.PodScheduled, 2), version(workload.PodStarting, 3), version(workload.PodRunning, 4)
	if err := s.Replace([]interface{}{scheduled.DeepCopy()}, "2"); err != nil {
		t.Fatal(err)
	}
	if err := s.Update(starting.DeepCopy()); err != nil {
		t.Fatal(err)
	}
	if err := s.Update(running.DeepCopy()); err != nil {
		t.Fatal(err)
	}
	gone := running.DeepCopy()
	gone.ResourceVersion = "5"
	gone.DeletionTimestamp = &metav1.Time{Time: time.Unix(1_800_000_000, 0)}
	if err := s.Delete(gone.DeepCopy()); err != nil {
		t.Fatal(err)
	}

	wantCalls := []string{"add 2@node-1/Pending", "update 2@node-1/Pending -> 3@node-1/Pending",
		"update 3@node-1/Pending -> 4@node-1/Running", "delete 5@node-1/Running"}
	if !reflect.DeepEqual(rec.calls, wantCalls) {
		t.Errorf("the handlers saw\n%q\nwant\n%q", rec.calls, wantCalls)
	}

	events, err := s.Snapshot().Changes(2)
	if err != nil {
		t.Fatal(err)
	}
	if len(events) != 3 || events[0].Type != watch.Modified || events[2].Type != watch.Deleted {
		t.Fatalf("events %v, want MODIFIED, MODIFIED, DELETED", events)
	}
	enc, err := NewEncoder(16)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []*corev1.Pod{starting, running, gone} {
		o := events[i].Object
		if o.obj != nil {
			t.Errorf("version %s is kept decoded", want.ResourceVersion)
		}
		got, err := enc.EncodeProtobuf(s, o)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, kubeAPIServerProtobuf(t, want)) {
			t.Errorf("version %s: the protobuf readers get other bytes than kube-apiserver's", want.ResourceVersion)
		}
		stripped := typedAsWritten(t, o, want)
		js, err := enc.Encode(s, o)
		if err != nil {
			t.Fatal(err)
		}
		var fromJSON corev1.Pod
		if err := json.Unmarshal(js, &fromJSON); err != nil {
			t.Fatal(err)
		}
		stripped.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"}
		if !equality.Semantic.DeepEqual(&fromJSON, stripped) {
			t.Errorf("version %s: the JSON readers get another object than was decoded: %s", want.ResourceVersion, cmp.Diff(stripped, &fromJSON))
		}
		if o.NodeName != "node-1" || o.UID != want.UID || !reflect.DeepEqual(o.Labels.Map(), want.Labels) || !reflect.DeepEqual(o.Deleting, want.DeletionTimestamp) {
			t.Errorf("version %s: the index says node %q, UID %q, labels %v, deleting %v", want.ResourceVersion, o.NodeName, o.UID, o.Labels, o.Deleting)
		}
	}
	first, second := events[0].Object, events[1].Object
	if !sameString(first.raw.part[1], events[0].Prev.raw.part[1]) || !sameString(second.raw.part[1], first.raw.part[1]) {
		t.Errorf("a status write does not share the spec's bytes with the version before")
	}
	if sameString(second.raw.part[2], first.raw.part[2]) {
		t.Errorf("two statuses share their bytes")
	}
	if !sameString(second.Name, first.Name) || second.Labels != first.Labels {
		t.Errorf("a status write does not share the key fields with the version before")
	}
}

// inBytes says whether s is held in b's memory.
func inBytes(s, b string) bool {
	if s == "" || b == "" {
		return false
	}
	p, start := uintptr(unsafe.Pointer(unsafe.StringData(s))), uintptr(unsafe.Pointer(unsafe.StringData(b)))
	return p >= start && p+uintptr(len(s)) <= start+uintptr(len(b))
}

// TestSegmentsJoinToTheWhole: an object is cut as its type's layout
// says (a pod after its metadata and its spec; a secret after its
// metadata only, its data one piece whatever its keys; a Node around
// its status from its addresses to its images, which are the middle
// piece and nothing else, images or none) and its segments join to its
// bytes as they were; bytes without kube-apiserver's shape are kept
// whole.
func TestSegmentsJoinToTheWhole(t *testing.T) {
	pod := kubeAPIServerProtobuf(t, workload.DeploymentPod("shop", "web", 1, "node-1", workload.PodRunning))
	secret := func(data map[string][]byte) []byte {
		return kubeAPIServerBytes(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s", ResourceVersion: "3"}, Data: data, Type: corev1.SecretTypeOpaque}, "Secret")
	}
	node, imagesLast, noImages := statusNode(2, 0, 3), statusNode(2, 0, 3), statusNode(2, 0, 0)
	imagesLast.Status.VolumesInUse = nil
	nodeBytes := func(n *corev1.Node) []byte { return kubeAPIServerBytes(t, n.DeepCopy(), "Node") }
	for _, tc := range []struct {
		name   string
		whole  []byte
		layout cuts
		pieces int
		middle string // the second piece, where the test knows it
	}{
		{"pod", pod, metadataSpecStatus, 3, ""},
		{"secret with three keys", secret(map[string][]byte{"a": []byte("1"), "b": []byte("2"), "c": []byte("3")}), metadataRest, 2, ""},
		{"secret without data", secret(nil), metadataRest, 2, ""},
		{"not kube-apiserver's", []byte("k8s\x00\xff"), metadataRest, 1, ""},
		{"node", nodeBytes(node), nodeStatusWrites, 3, statusWritesBytes(t, node)},
		{"node with nothing after its images", nodeBytes(imagesLast), nodeStatusWrites, 3, statusWritesBytes(t, imagesLast)},
		{"node without images", nodeBytes(noImages), nodeStatusWrites, 3, statusWritesBytes(t, noImages)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := splitSegments(tc.whole, tc.layout)
			pieces := 0
			for _, p := range s.part {
				if p != "" {
					pieces++
				}
			}
			if pieces != tc.pieces {
				t.Errorf("cut in %d pieces, want %d", pieces, tc.pieces)
			}
			if tc.middle != "" && s.part[1] != tc.middle {
				t.Errorf("the second piece is %d bytes, not the %d expected", len(s.part[1]), len(tc.middle))
			}
			if !bytes.Equal(s.join(), tc.whole) {
				t.Errorf("the segments do not join to the bytes")
			}
		})
	}
}

var _ toolscache.ResourceEventHandler = (*recorder)(nil)
