package nodecopy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/apimachinery/pkg/watch"
	clientscheme "k8s.io/client-go/kubernetes/scheme"

	"github.com/nodeproxy/nodeproxy/apis/bulk/v1alpha1"
)

// inProtobuf is the JSON object b in kube-apiserver's protobuf, as the
// hub sends a view that asks for it.
func inProtobuf(t testing.TB, b []byte) []byte {
	t.Helper()
	obj, err := runtime.Decode(clientscheme.Codecs.UniversalDeserializer(), b)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := protobuf.NewSerializer(clientscheme.Scheme, clientscheme.Scheme).Encode(obj, &out); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

// decoded is raw, in either encoding, decoded with client-go's scheme.
func decoded(t testing.TB, raw []byte) runtime.Object {
	t.Helper()
	obj, err := runtime.Decode(clientscheme.Codecs.UniversalDeserializer(), raw)
	if err != nil {
		t.Fatalf("decode %q: %v", raw, err)
	}
	return obj
}

// TestProtobufAndJSONViewsMakeTheSameCopy applies the same batches to two
// copies, one as a hub sends a JSON view and one as it sends a protobuf
// view: their lists, selections and watch events hold the same objects
// (the protobuf copy keeping its objects as protobuf), including a
// deletion the copy makes at a version of its own (a view afresh),
// whose protobuf bytes it rewrites.
func TestProtobufAndJSONViewsMakeTheSameCopy(t *testing.T) {
	labelled := func(b []byte) []byte {
		return bytes.Replace(b, []byte(`"metadata":{`), []byte(`"metadata":{"labels":{"app":"web","tier":"front"},`), 1)
	}
	svc := func(ns, name string, rv int, ip, typ string) []byte {
		return obj("Service", ns, name, rv, fmt.Sprintf(`,"spec":{"clusterIP":%q,"type":%q}`, ip, typ))
	}
	batches := []Batch{
		{Initial: true, Position: position(10, nil), Events: []Event{
			{watch.Added, labelled(secret("a", 5))}, {watch.Added, secret("gone", 6)},
			{watch.Added, svc("ns", "front", 4, "10.0.0.1", "ClusterIP")},
			{watch.Added, labelled(pod("p", "node-a", 8))}, {watch.Added, pod("old", "node-a", 9)},
		}},
		{Position: position(20, nil), Events: []Event{
			{watch.Modified, secret("a", 12)}, {v1alpha1.NodeViewEntered, svc("ns", "back", 3, "None", "ClusterIP")},
			{watch.Deleted, secret("gone", 15)}, {watch.Modified, pod("p", "node-a", 18)},
		}},
		{Initial: true, Position: position(40, nil), Events: []Event{
			{watch.Added, secret("a", 35)}, {watch.Added, svc("ns", "front", 4, "10.0.0.1", "ClusterIP")},
			{watch.Added, svc("ns", "back", 3, "None", "ClusterIP")}, {watch.Added, pod("p", "node-a", 38)},
		}},
	}
	type seen struct {
		heads   []string
		objects []runtime.Object
	}
	run := func(protobuf bool) seen {
		c := New("node-a")
		var out seen
		var watches []*Watch
		for n, b := range batches {
			if protobuf {
				b.Events = append([]Event(nil), b.Events...)
				for i := range b.Events {
					b.Events[i].Object = inProtobuf(t, b.Events[i].Object)
				}
			}
			mustApply(t, c, b)
			if n == 0 {
				for _, i := range []int{secrets, pods, services} {
					w, _, _, err := c.WatchInitial(i, Filter{})
					if err != nil {
						t.Fatal(err)
					}
					watches = append(watches, w)
				}
			}
		}
		note := func(what string, o *Object) {
			if IsProtobuf(o.Raw) != protobuf {
				t.Errorf("%s %s/%s kept as protobuf=%v in a copy of a protobuf=%v view", what, o.Namespace, o.Name, IsProtobuf(o.Raw), protobuf)
			}
			out.heads = append(out.heads, fmt.Sprintf("%s %s/%s@%d labels=%v node=%q ip=%q type=%q",
				what, o.Namespace, o.Name, o.RV, o.Labels, o.NodeName, o.ClusterIP, o.ServiceType))
			out.objects = append(out.objects, decoded(t, o.Raw))
		}
		for _, i := range []int{secrets, pods, services} {
			list, _, err := c.List(i, Filter{})
			if err != nil {
				t.Fatal(err)
			}
			for _, o := range list {
				note("listed", o)
			}
		}
		sel, _, err := c.List(services, Filter{Fields: fields.OneTermEqualSelector("spec.clusterIP", "None")})
		if err != nil || names(sel) != "back@3" {
			t.Errorf("services selected by spec.clusterIP=None: %q (%v), want back@3", names(sel), err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		for _, w := range watches {
			changes, _, err := w.Next(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, ch := range changes {
				note(string(ch.Type), ch.Object)
			}
		}
		return out
	}
	fromJSON, fromProtobuf := run(false), run(true)
	if !reflect.DeepEqual(fromJSON.heads, fromProtobuf.heads) {
		t.Errorf("the copies read differently:\n JSON     %s\n protobuf %s", strings.Join(fromJSON.heads, "\n          "), strings.Join(fromProtobuf.heads, "\n          "))
	}
	if !strings.Contains(strings.Join(fromProtobuf.heads, "|"), "DELETED ns/old@40") {
		t.Errorf("no deletion of old at the view afresh's version: %s", strings.Join(fromProtobuf.heads, "|"))
	}
	for i := range fromJSON.objects {
		if !reflect.DeepEqual(fromJSON.objects[i], fromProtobuf.objects[i]) {
			t.Errorf("%s: the objects differ:\n JSON     %#v\n protobuf %#v", fromJSON.heads[i], fromJSON.objects[i], fromProtobuf.objects[i])
		}
	}
}

// TestAProtobufObjectThatDoesNotParseIsRefused: bytes with the magic
// that are no message are refused as the JSON that is not JSON is.
func TestAProtobufObjectThatDoesNotParseIsRefused(t *testing.T) {
	c := New("node-a")
	good := inProtobuf(t, secret("a", 5))
	refused, err := c.Apply(Batch{Initial: true, Position: position(10, nil), Events: []Event{
		{watch.Added, good}, {watch.Added, good[:len(good)-3]},
	}})
	if err != nil || len(refused) != 1 || !strings.Contains(refused[0].Error(), "not protobuf") {
		t.Errorf("a truncated protobuf object: refused %v, error %v; want it alone refused as not protobuf", refused, err)
	}
}

// TestAProtobufListIsKubeAPIServersBytes: the list the copy makes of its
// objects' bytes is what kube-apiserver's protobuf serializer writes for
// the same list, byte for byte.
func TestAProtobufListIsKubeAPIServersBytes(t *testing.T) {
	list := &corev1.PodList{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "PodList"}, ListMeta: metav1.ListMeta{ResourceVersion: "40"}}
	var objs []*Object
	for _, raw := range [][]byte{pod("a", "node-a", 5), runningPod("b", 6)} {
		b := inProtobuf(t, raw)
		_, o, err := parseObject(b)
		if err != nil {
			t.Fatal(err)
		}
		objs = append(objs, o)
		p := decoded(t, b).(*corev1.Pod)
		p.TypeMeta = metav1.TypeMeta{} // an item's, which protobuf never carries
		list.Items = append(list.Items, *p)
	}
	got, err := ProtobufList("v1", "PodList", 40, objs)
	if err != nil {
		t.Fatal(err)
	}
	var want bytes.Buffer
	if err := protobuf.NewSerializer(clientscheme.Scheme, clientscheme.Scheme).Encode(list, &want); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want.Bytes()) {
		t.Errorf("the copy's list\n%q\nkube-apiserver's serializer\n%q", got, want.Bytes())
	}
	if _, err := ProtobufList("v1", "PodList", 40, []*Object{{Namespace: "ns", Name: "j", Raw: pod("j", "node-a", 7)}}); !errors.Is(err, errNotProtobuf) {
		t.Errorf("a list with an object kept as JSON: %v, want errNotProtobuf", err)
	}
}

func runningPod(name string, rv int) []byte {
	return obj("Pod", "ns", name, rv, `,"spec":{"nodeName":"node-a","containers":[{"name":"c","image":"pause"}]},"status":{"phase":"Running"}`)
}
