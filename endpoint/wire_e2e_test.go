package endpoint_test

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/nodeproxy/nodeproxy/test/testserver"
)

// TestWatchEventsAreKubeAPIServersBytes: a change seen through the
// endpoint, by the kubelet (a Secret) and by kube-proxy with its own token
// (an EndpointSlice), in protobuf as they ask and in JSON, is the same
// watch frame, byte for byte, as kube-apiserver sends a watch of its own
// from the same resourceVersion; and the endpoint passed the hub's bytes
// through rather than decoding them. The change also strips the object's
// managedFields, which the hub never carries (docs/api.md, "The node
// endpoint"): everything else of the object is compared.
func TestWatchEventsAreKubeAPIServersBytes(t *testing.T) {
	n, ns, proxy, _ := kubeProxyBehindEndpoint(t, "node-wire")
	ctx := context.Background()
	admin := kubernetes.NewForConfigOrDie(cp.AdminConfig())
	kubelet := kubernetes.NewForConfigOrDie(n.kubelet)
	testserver.Eventually(t, 30*time.Second, "the secret through the endpoint", func(ctx context.Context) error {
		_, err := kubelet.CoreV1().Secrets(ns).Get(ctx, "s", metav1.GetOptions{})
		return err
	})

	secrets, slices := admin.CoreV1().Secrets(ns), admin.DiscoveryV1().EndpointSlices(ns)
	for _, tc := range []struct {
		who    string
		client *rest.Config
		path   string
		query  url.Values
		// current is the object's resourceVersion.
		current func() (string, error)
		// change changes the object with patch, stripping its
		// managedFields.
		change func(patch []byte) (metav1.Object, error)
		// patch is a change of the object in round.
		patch func(round int) string
	}{
		{"kubelet", n.kubelet, "/api/v1/namespaces/" + ns + "/secrets", url.Values{"fieldSelector": {"metadata.name=s"}},
			func() (string, error) { o, err := secrets.Get(ctx, "s", metav1.GetOptions{}); return rvOf(o, err) },
			func(p []byte) (metav1.Object, error) {
				return secrets.Patch(ctx, "s", types.MergePatchType, p, metav1.PatchOptions{})
			},
			func(round int) string {
				return fmt.Sprintf(`"data":{"password":%q}`, base64.StdEncoding.EncodeToString([]byte("round-"+strconv.Itoa(round))))
			}},
		{"kube-proxy", proxy, "/apis/discovery.k8s.io/v1/namespaces/" + ns + "/endpointslices", url.Values{"labelSelector": {"!service.kubernetes.io/headless"}},
			func() (string, error) { o, err := slices.Get(ctx, "web-1", metav1.GetOptions{}); return rvOf(o, err) },
			func(p []byte) (metav1.Object, error) {
				return slices.Patch(ctx, "web-1", types.MergePatchType, p, metav1.PatchOptions{})
			},
			func(round int) string {
				return fmt.Sprintf(`"endpoints":[{"addresses":["10.0.0.%d"],"conditions":{"ready":true},"nodeName":"node-wire"}]`, round+1)
			}},
	} {
		for round, mediaType := range []string{runtime.ContentTypeProtobuf, runtime.ContentTypeJSON} {
			t.Run(tc.who+"/"+mediaType, func(t *testing.T) {
				const passed = `nodeproxy_node_hub_watch_events_total{encoding="passed_through"}`
				const reencoded = `nodeproxy_node_hub_watch_events_total{encoding="reencoded"}`
				passedBefore, reencodedBefore := counter(t, n, passed), counter(t, n, reencoded)
				// Both watches are opened before the change, from the
				// version before it: each has it as its first event.
				rv, err := tc.current()
				if err != nil {
					t.Fatal(err)
				}
				direct := openWatch(t, cp.AdminConfig(), tc.path, tc.query, rv, mediaType)
				through := openWatch(t, tc.client, tc.path, tc.query, rv, mediaType)
				after, err := tc.change([]byte(`{"metadata":{"managedFields":[{}]},` + tc.patch(round) + `}`))
				if err != nil {
					t.Fatal(err)
				}
				if mf := after.GetManagedFields(); len(mf) > 0 {
					t.Fatalf("kube-apiserver kept managedFields %v: the frames would differ by them alone", mf)
				}
				want, got := direct.next(t), through.next(t)
				if string(got) != string(want) {
					t.Fatalf("the change to %s: the endpoint sent\n%q\nkube-apiserver\n%q", after.GetResourceVersion(), got, want)
				}
				if p := counter(t, n, passed); p <= passedBefore {
					t.Errorf("%s: %v before the event, %v after", passed, passedBefore, p)
				}
				if r := counter(t, n, reencoded); r != reencodedBefore {
					t.Errorf("%s: %v before the event, %v after", reencoded, reencodedBefore, r)
				}
			})
		}
	}
}

// kubeProxyBehindEndpoint starts a hub, and node's endpoint in front of
// it with workload's objects, and creates EndpointSlice web-1 of Service
// web there. It returns the endpoint, the namespace, kube-proxy's
// configuration for the endpoint (a token of its own, protobuf as
// kube-proxy asks) and the slice.
func kubeProxyBehindEndpoint(t *testing.T, node string) (*node, string, *rest.Config, *discoveryv1.EndpointSlice) {
	t.Helper()
	hub := startHub(t)
	kp, err := cp.ClientCA.ClientCert("system:node:"+node, []string{"system:nodes"}, "", "")
	if err != nil {
		t.Fatal(err)
	}
	// The hub channels' relay: without a copy, the kubelet's watches are
	// channels too.
	n := startNodeWith(t, node, nodeSpec{hub: hub.URL, kubelet: kp, noView: true})
	ns := workload(t, node)
	proxy := &rest.Config{Host: n.kubelet.Host, BearerToken: proxierToken(t, ns, "kube-proxy", true),
		TLSClientConfig: rest.TLSClientConfig{CAData: n.kubelet.CAData},
		ContentConfig: rest.ContentConfig{
			AcceptContentTypes: "application/vnd.kubernetes.protobuf,application/json", ContentType: "application/vnd.kubernetes.protobuf"}}
	es, err := kubernetes.NewForConfigOrDie(cp.AdminConfig()).DiscoveryV1().EndpointSlices(ns).Create(context.Background(), &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "web-1", Labels: map[string]string{discoveryv1.LabelServiceName: "web"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](8080), Protocol: ptr.To(corev1.ProtocolTCP)}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return n, ns, proxy, es
}

func rvOf(o metav1.Object, err error) (string, error) {
	if err != nil {
		return "", err
	}
	return o.GetResourceVersion(), nil
}

// counter is a series of n's endpoint as a number.
func counter(t *testing.T, n *node, series string) float64 {
	t.Helper()
	v, err := strconv.ParseFloat(metric(t, n, series), 64)
	if err != nil {
		t.Fatalf("%s: %v", series, err)
	}
	return v
}

// rawWatch is a watch response read frame by frame, as sent.
type rawWatch struct {
	body     *bufio.Reader
	protobuf bool
}

// openWatch opens a watch of path as cfg's user, from resourceVersion rv,
// asking for mediaType as client-go does for a watch, and checks that it
// is answered in it.
func openWatch(t *testing.T, cfg *rest.Config, path string, query url.Values, rv, mediaType string) *rawWatch {
	t.Helper()
	c, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c.Timeout = 30 * time.Second
	q := url.Values{"watch": {"true"}, "resourceVersion": {rv}}
	for k, v := range query {
		q[k] = v
	}
	req, err := http.NewRequest(http.MethodGet, cfg.Host+path+"?"+q.Encode(), nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", mediaType)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	want := mediaType
	if mediaType == runtime.ContentTypeProtobuf {
		want += ";stream=watch"
	}
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != want {
		body, _ := io.ReadAll(resp.Body)
		t.Fatalf("watch of %s at %s: %s, %s: %s", path, cfg.Host, resp.Status, resp.Header.Get("Content-Type"), body)
	}
	return &rawWatch{body: bufio.NewReader(resp.Body), protobuf: mediaType == runtime.ContentTypeProtobuf}
}

// next reads one frame: a length and that many bytes in protobuf, a line
// in JSON.
func (w *rawWatch) next(t *testing.T) []byte {
	t.Helper()
	if !w.protobuf {
		line, err := w.body.ReadBytes('\n')
		if err != nil {
			t.Fatal(err)
		}
		return line
	}
	var size [4]byte
	if _, err := io.ReadFull(w.body, size[:]); err != nil {
		t.Fatal(err)
	}
	frame := make([]byte, 4+binary.BigEndian.Uint32(size[:]))
	copy(frame, size[:])
	if _, err := io.ReadFull(w.body, frame[4:]); err != nil {
		t.Fatal(err)
	}
	return frame
}
