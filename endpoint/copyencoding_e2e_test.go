package endpoint_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"testing"
	"time"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/nodeproxy/nodeproxy/test/testserver"
)

// TestKubeletReadsTheSameFromAProtobufOrAJSONCopy runs two endpoints of
// one node on one hub: one follows the node's view in protobuf (as
// today's endpoint does), one in JSON (as an endpoint of the release
// before asks for it). A kubelet's client-go, in protobuf (the
// kubelet's default) and in JSON, reads its pod, its pods by node, its
// secret by name and a watch event of that secret from each copy: all
// four read the same objects. A protobuf read of the protobuf copy is
// passed through, one of the JSON copy transcoded.
func TestKubeletReadsTheSameFromAProtobufOrAJSONCopy(t *testing.T) {
	hub := startHub(t)
	const name = "node-copy-encodings"
	ns := workload(t, name)
	kp, err := cp.ClientCA.ClientCert("system:node:"+name, []string{"system:nodes"}, "", "")
	if err != nil {
		t.Fatal(err)
	}
	inProtobuf := startNodeWith(t, name, nodeSpec{hub: hub.URL, kubelet: kp})
	inJSON := startNodeWith(t, name, nodeSpec{hub: hub.URL, kubelet: kp, jsonView: true})
	ctx := context.Background()
	admin := kubernetes.NewForConfigOrDie(cp.AdminConfig())

	type reader struct {
		what   string
		n      *node
		client kubernetes.Interface
	}
	var readers []reader
	for _, n := range []struct {
		what string
		n    *node
	}{{"protobuf copy", inProtobuf}, {"JSON copy", inJSON}} {
		for _, mediaType := range []string{runtime.ContentTypeProtobuf, runtime.ContentTypeJSON} {
			cfg := rest.CopyConfig(n.n.kubelet)
			cfg.ContentType, cfg.AcceptContentTypes = mediaType, mediaType
			readers = append(readers, reader{n.what + ", " + mediaType + " client", n.n, kubernetes.NewForConfigOrDie(cfg)})
		}
	}
	const copyGets = `nodeproxy_node_requests_total{path="copy",resource="secrets",verb="get"}`
	for _, r := range readers {
		testserver.Eventually(t, 60*time.Second, "the secret from the "+r.what, func(ctx context.Context) error {
			before := counter(t, r.n, copyGets)
			if _, err := r.client.CoreV1().Secrets(ns).Get(ctx, "s", metav1.GetOptions{}); err != nil {
				return err
			}
			if counter(t, r.n, copyGets) == before {
				return fmt.Errorf("not from the copy")
			}
			return nil
		})
	}

	const (
		passed     = `nodeproxy_node_copy_objects_written_total{encoding="passed_through"}`
		transcoded = `nodeproxy_node_copy_objects_written_total{encoding="transcoded"}`
	)
	var first []any
	var rv string
	for i, r := range readers {
		passedBefore, transcodedBefore := counter(t, r.n, passed), counter(t, r.n, transcoded)
		pod, err := r.client.CoreV1().Pods(ns).Get(ctx, "p", metav1.GetOptions{})
		if err != nil {
			t.Fatalf("%s: %v", r.what, err)
		}
		pods, err := r.client.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("spec.nodeName", name).String()})
		if err != nil {
			t.Fatalf("%s: %v", r.what, err)
		}
		secrets, err := r.client.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", "s").String()})
		if err != nil {
			t.Fatalf("%s: %v", r.what, err)
		}
		// Compared without apiVersion and kind, which a protobuf object
		// never carries in its message (kube-apiserver's neither), and
		// client-go's JSON decoder keeps where the JSON has them.
		for i := range pods.Items {
			pods.Items[i].TypeMeta = metav1.TypeMeta{}
		}
		for i := range secrets.Items {
			secrets.Items[i].TypeMeta = metav1.TypeMeta{}
		}
		pod.TypeMeta = metav1.TypeMeta{}
		got := []any{pod, pods.Items, secrets.Items}
		if i == 0 {
			first = got
			rv = secrets.ResourceVersion
		} else if !apiequality.Semantic.DeepEqual(got, first) {
			t.Errorf("%s read\n%+v\n%s read\n%+v", r.what, got, readers[0].what, first)
		}
		dPassed, dTranscoded := counter(t, r.n, passed)-passedBefore, counter(t, r.n, transcoded)-transcodedBefore
		switch i {
		case 0: // a protobuf client of the protobuf copy
			if dPassed < 3 || dTranscoded != 0 {
				t.Errorf("%s: %v objects passed through, %v transcoded; want every one passed through", r.what, dPassed, dTranscoded)
			}
		case 2: // a protobuf client of the JSON copy
			if dTranscoded < 3 {
				t.Errorf("%s: %v objects transcoded, want every one", r.what, dTranscoded)
			}
		}
	}

	var watches []watch.Interface
	for _, r := range readers {
		w, err := r.client.CoreV1().Secrets(ns).Watch(ctx, metav1.ListOptions{
			FieldSelector: fields.OneTermEqualSelector("metadata.name", "s").String(), ResourceVersion: rv})
		if err != nil {
			t.Fatalf("%s: %v", r.what, err)
		}
		defer w.Stop()
		watches = append(watches, w)
	}
	patch := fmt.Sprintf(`{"data":{"password":%q}}`, base64.StdEncoding.EncodeToString([]byte("changed")))
	if _, err := admin.CoreV1().Secrets(ns).Patch(ctx, "s", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	var firstEvent watch.Event
	for i, w := range watches {
		select {
		case ev := <-w.ResultChan():
			if ev.Type != watch.Modified {
				t.Fatalf("%s: a %s event, want MODIFIED: %+v", readers[i].what, ev.Type, ev.Object)
			}
			ev.Object.GetObjectKind().SetGroupVersionKind(schema.GroupVersionKind{})
			if i == 0 {
				firstEvent = ev
			} else if !apiequality.Semantic.DeepEqual(ev.Object, firstEvent.Object) {
				t.Errorf("%s watched\n%+v\n%s watched\n%+v", readers[i].what, ev.Object, readers[0].what, firstEvent.Object)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("%s: no event of the secret's change within 30 s", readers[i].what)
		}
	}
}
