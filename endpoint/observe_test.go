package endpoint

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/streaming"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/nodeproxy/nodeproxy/apis/bulk/v1alpha1"
	"github.com/nodeproxy/nodeproxy/nodecopy"
)

// followerWith is a follower whose copy holds a view with pods, at rv 10.
func followerWith(t *testing.T, pods ...*corev1.Pod) *viewFollower {
	t.Helper()
	f := newViewFollower(nil, "node-a")
	var pos v1alpha1.NodeViewPosition
	for i := range pos.At {
		pos.Since[i], pos.At[i] = 10, 10
	}
	b := nodecopy.Batch{Initial: true, Position: pos.String()}
	for _, p := range pods {
		raw, _, err := viewJSON(p.DeepCopy())
		if err != nil {
			t.Fatal(err)
		}
		b.Events = append(b.Events, nodecopy.Event{Type: watch.Added, Object: raw})
	}
	if refused, err := f.copy.Apply(b); err != nil || len(refused) > 0 {
		t.Fatal(refused, err)
	}
	return f
}

func testPod(name string, rv int) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, ResourceVersion: fmt.Sprint(rv),
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubelet"}}},
		Spec: corev1.PodSpec{NodeName: "node-a"},
	}
}

// watchBody is a watch's body as kube-apiserver writes it in mediaType.
func watchBody(t *testing.T, mediaType string, events ...watch.Event) []byte {
	t.Helper()
	info, ok := runtime.SerializerInfoForMediaType(codecs.SupportedMediaTypes(), mediaType)
	if !ok {
		t.Fatal(mediaType)
	}
	var out bytes.Buffer
	objects := codecs.EncoderForVersion(info.Serializer, corev1.SchemeGroupVersion)
	enc := streaming.NewEncoder(info.StreamSerializer.Framer.NewFrameWriter(&out), codecs.EncoderForVersion(info.StreamSerializer.Serializer, coreV1))
	for _, ev := range events {
		raw, err := runtime.Encode(objects, ev.Object)
		if err != nil {
			t.Fatal(err)
		}
		if err := enc.Encode(&metav1.WatchEvent{Type: string(ev.Type), Object: runtime.RawExtension{Raw: raw}}); err != nil {
			t.Fatal(err)
		}
	}
	return out.Bytes()
}

// trickle reads r a few bytes at a time, as a slow connection delivers.
func trickle(t *testing.T, r io.Reader) []byte {
	t.Helper()
	var out []byte
	p := make([]byte, 7)
	for {
		n, err := r.Read(p)
		out = append(out, p[:n]...)
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

func TestAWatchServedByKubeAPIServerIsTakenInAsItPasses(t *testing.T) {
	for _, mediaType := range []string{runtime.ContentTypeProtobuf, runtime.ContentTypeJSON} {
		t.Run(mediaType, func(t *testing.T) {
			f := followerWith(t, testPod("kept", 5), testPod("deleted", 6))
			e := &Endpoint{view: f}
			body := watchBody(t, mediaType,
				watch.Event{Type: watch.Modified, Object: testPod("kept", 20)},
				watch.Event{Type: watch.Deleted, Object: testPod("deleted", 21)},
				watch.Event{Type: watch.Added, Object: testPod("new", 22)},
				watch.Event{Type: watch.Bookmark, Object: &corev1.Pod{ObjectMeta: metav1.ObjectMeta{ResourceVersion: "23"}}},
			)
			ct := mediaType
			if mediaType == runtime.ContentTypeProtobuf {
				ct += ";stream=watch"
			}
			resp := &http.Response{StatusCode: http.StatusOK, Header: http.Header{"Content-Type": {ct}}, Body: io.NopCloser(bytes.NewReader(body))}
			r := &copyRead{typ: v1alpha1.NodeViewTypeIndex("pods"), verb: "watch"}
			e.observeResponse(resp, r)
			if got := trickle(t, resp.Body); !bytes.Equal(got, body) {
				t.Fatalf("the kubelet got %d bytes, kube-apiserver sent %d", len(got), len(body))
			}
			got, _, _ := f.copy.List(r.typ, nodecopy.Filter{})
			if names := podNames(got); names != "kept@20 new@22" {
				t.Errorf("the copy's pods: %s, want kept@20 new@22", names)
			}
			for _, o := range got {
				if bytes.Contains(o.Raw, []byte("managedFields")) {
					t.Errorf("%s kept its managedFields: %s", o.Name, o.Raw)
				}
			}
			if !f.vouched() {
				t.Error("the copy is distrusted after a watch it took in whole")
			}
			if n := f.trust.newest.Load(); n != 22 {
				t.Errorf("the newest version seen: %d, want 22", n)
			}
		})
	}
}

func TestAnAnswerTheCopyCannotTakeInDistrustsIt(t *testing.T) {
	f := followerWith(t, testPod("kept", 5))
	e := &Endpoint{view: f}
	body := []byte("\x00\x00\x00\x05hello")
	resp := &http.Response{StatusCode: http.StatusOK, Header: http.Header{"Content-Type": {runtime.ContentTypeProtobuf + ";stream=watch"}}, Body: io.NopCloser(bytes.NewReader(body))}
	e.observeResponse(resp, &copyRead{typ: v1alpha1.NodeViewTypeIndex("pods"), verb: "watch"})
	if got := trickle(t, resp.Body); !bytes.Equal(got, body) {
		t.Fatalf("the kubelet got %q, kube-apiserver sent %q", got, body)
	}
	if f.vouched() {
		t.Error("the copy vouches for what it holds after a watch event it could not read")
	}
}

func TestAListServedByKubeAPIServerIsTheWholeOfItsSelection(t *testing.T) {
	f := followerWith(t, testPod("kept", 5), testPod("deleted", 6))
	e := &Endpoint{view: f}
	list := &corev1.PodList{ListMeta: metav1.ListMeta{ResourceVersion: "30"}, Items: []corev1.Pod{*testPod("kept", 5), *testPod("new", 25)}}
	body, err := runtime.Encode(codecFactory.LegacyCodec(corev1.SchemeGroupVersion), list)
	if err != nil {
		t.Fatal(err)
	}
	resp := &http.Response{StatusCode: http.StatusOK, Header: http.Header{"Content-Type": {runtime.ContentTypeJSON}}, Body: io.NopCloser(bytes.NewReader(body))}
	r := &copyRead{typ: v1alpha1.NodeViewTypeIndex("pods"), verb: "list",
		filter: nodecopy.Filter{Fields: fields.OneTermEqualSelector("spec.nodeName", "node-a")}}
	e.observeResponse(resp, r)
	if got, _ := io.ReadAll(resp.Body); !bytes.Equal(got, body) {
		t.Fatalf("the kubelet got another list than kube-apiserver's")
	}
	got, _, _ := f.copy.List(r.typ, nodecopy.Filter{})
	if names := podNames(got); names != "kept@5 new@25" {
		t.Errorf("the copy's pods: %s, want kept@5 new@25", names)
	}
	// A pod of another node in kube-apiserver's answer is never taken.
	other := testPod("other", 31)
	other.Spec.NodeName = "node-b"
	raw, _ := json.Marshal(other)
	resp = &http.Response{StatusCode: http.StatusOK, Header: http.Header{"Content-Type": {runtime.ContentTypeJSON}},
		Body: io.NopCloser(bytes.NewReader(append([]byte(`{"apiVersion":"v1","kind":"Pod",`), raw[1:]...)))}
	e.observeResponse(resp, &copyRead{typ: r.typ, verb: "get", filter: nodecopy.Filter{Namespace: "ns", Name: "other"}})
	if got, _, _ := f.copy.Get(r.typ, "ns", "other"); got != nil {
		t.Errorf("the copy took a pod of another node")
	}
}

func podNames(objs []*nodecopy.Object) string {
	var b bytes.Buffer
	for i, o := range objs {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%s@%d", o.Name, o.RV)
	}
	return b.String()
}
