package endpoint

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"strconv"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/nodeproxy/nodeproxy/endpoint/relay"
	"github.com/nodeproxy/nodeproxy/nodecopy"
	"github.com/nodeproxy/nodeproxy/test/workload"
	"github.com/nodeproxy/nodeproxy/watchmux"
)

// BenchmarkCopyPodStatusEvent measures the endpoint's CPU for a kubelet's
// status write of a Deployment's running pod (workload.DeploymentPod),
// from the view's batch to the kubelet's watch: the copy takes the batch
// in (Apply: the object's head read, the change logged), the kubelet's
// watch of its pods reads the change, and the event is written in
// protobuf (the kubelet's encoding) to its response. The view's batch
// comes in JSON (an older hub, or view=json) or protobuf (view=protobuf);
// making the batch's bytes is the hub's and is not timed.
//
//	go test ./endpoint -run '^$' -bench CopyPodStatusEvent -count 6
func BenchmarkCopyPodStatusEvent(b *testing.B) {
	pods := nodecopy.TypeIndex("", "pods")
	for _, enc := range []struct {
		name     string
		protobuf bool
	}{{"json", false}, {"protobuf", true}} {
		b.Run("view="+enc.name, func(b *testing.B) {
			p := workload.DeploymentPod("shop", "web", 1, "node-1", workload.PodRunning)
			p.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"}
			encode := func(rv uint64) []byte {
				p.ResourceVersion = strconv.FormatUint(rv, 10)
				p.Status.ContainerStatuses[0].RestartCount = int32(rv % 2)
				if !enc.protobuf {
					out, err := json.Marshal(p)
					if err != nil {
						b.Fatal(err)
					}
					return out
				}
				var out bytes.Buffer
				if err := protobuf.NewSerializer(scheme, scheme).Encode(p, &out); err != nil {
					b.Fatal(err)
				}
				return out.Bytes()
			}
			c := nodecopy.New("node-1")
			if _, err := c.Apply(nodecopy.Batch{Initial: true, Position: viewPosition(10), Events: []nodecopy.Event{{Type: watch.Added, Object: encode(10)}}}); err != nil {
				b.Fatal(err)
			}
			w, err := c.WatchFrom(pods, nodecopy.Filter{}, 10)
			if err != nil {
				b.Fatal(err)
			}
			var info runtime.SerializerInfo
			for _, s := range codecs.SupportedMediaTypes() {
				if s.MediaType == runtime.ContentTypeProtobuf {
					info = s
				}
			}
			out := relay.NewWriter(io.Discard, info, relay.Codecs{Encoders: codecs, Decoder: deserializer}, coreV1)
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				rv := uint64(11 + i)
				b.StopTimer()
				batch := nodecopy.Batch{Position: viewPosition(rv), Events: []nodecopy.Event{{Type: watch.Modified, Object: encode(rv)}}}
				b.StartTimer()
				if refused, err := c.Apply(batch); err != nil || len(refused) > 0 {
					b.Fatal(refused, err)
				}
				changes, _, err := w.Next(ctx)
				if err != nil || len(changes) != 1 {
					b.Fatalf("%d changes, %v", len(changes), err)
				}
				ev := watchmux.Event{Type: changes[0].Type}
				if raw := changes[0].Object.Raw; bytes.HasPrefix(raw, []byte("k8s\x00")) {
					ev.Protobuf = raw
				} else {
					ev.Object = raw
				}
				if _, err := out.Write(ev); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
