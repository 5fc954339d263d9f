package endpoint

import (
	"bytes"
	"encoding/json"
	"net/http/httptest"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/nodeproxy/nodeproxy/nodecopy"
	"github.com/nodeproxy/nodeproxy/test/workload"
)

// BenchmarkCopyPodList measures the endpoint's answer to a kubelet's
// protobuf list of its pods from the copy: 30 running Deployment pods
// (workload.DeploymentPod, a node's share in the hub's benchmarks), kept
// as the view sent them, JSON (view=json: decoded into a typed list and
// encoded) or protobuf (view=protobuf: the list made of the items'
// bytes, nodecopy.ProtobufList).
//
//	go test ./endpoint -run '^$' -bench CopyPodList -benchmem
func BenchmarkCopyPodList(b *testing.B) {
	const pods = 30
	for _, enc := range []struct {
		name     string
		protobuf bool
	}{{"json", false}, {"protobuf", true}} {
		b.Run("view="+enc.name, func(b *testing.B) {
			batch := nodecopy.Batch{Initial: true, Position: viewPosition(100)}
			for i := range pods {
				p := workload.DeploymentPod("shop", "web", i, "node-1", workload.PodRunning)
				p.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"}
				p.ResourceVersion = "50"
				var raw []byte
				var err error
				if enc.protobuf {
					var out bytes.Buffer
					err = protobuf.NewSerializer(scheme, scheme).Encode(p, &out)
					raw = out.Bytes()
				} else {
					raw, err = json.Marshal(p)
				}
				if err != nil {
					b.Fatal(err)
				}
				batch.Events = append(batch.Events, nodecopy.Event{Type: watch.Added, Object: raw})
			}
			c := nodecopy.New("node-1")
			if refused, err := c.Apply(batch); err != nil || len(refused) > 0 {
				b.Fatal(refused, err)
			}
			list, rv, err := c.List(nodecopy.TypeIndex("", "pods"), nodecopy.Filter{})
			if err != nil || len(list) != pods {
				b.Fatalf("%d pods, %v", len(list), err)
			}
			req := httptest.NewRequest("GET", "/api/v1/pods?fieldSelector=spec.nodeName%3Dnode-1", nil)
			req.Header.Set("Accept", runtime.ContentTypeProtobuf)
			gvk := coreV1.WithKind("PodList")
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				w := httptest.NewRecorder()
				writeCopyList(w, req, gvk, list, rv)
				if w.Code != 200 || w.Header().Get("Content-Type") != runtime.ContentTypeProtobuf {
					b.Fatalf("%d %s", w.Code, w.Header().Get("Content-Type"))
				}
			}
		})
	}
}
