package podapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/nodeproxy/nodeproxy/test/controlplane"
	"github.com/nodeproxy/nodeproxy/test/testserver"
)

// cp runs kube-apiserver with NodeRestriction, as kubeadm does: the
// admission plugin that decides what a node may create.
var (
	cp   *controlplane.ControlPlane
	runs atomic.Int32
)

func TestMain(m *testing.M) {
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	dir, err := os.MkdirTemp("", "nodeproxy-podadmit-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	if testAdmitBinary, err = buildAdmitBinary(dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return testserver.RunTests(m, controlplane.Options{
		ExtraAPIServerArgs: []string{"--enable-admission-plugins=NodeRestriction"},
	}, &cp)
}

// httpCheckFrequency is how often the test's kubelet fetches its pod
// source; the kubelet's default is 20s. PODAPI_HTTP_CHECK_FREQUENCY
// overrides it, to measure the handover with the default.
func httpCheckFrequency(t *testing.T) time.Duration {
	if s := os.Getenv("PODAPI_HTTP_CHECK_FREQUENCY"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatalf("PODAPI_HTTP_CHECK_FREQUENCY: %v", err)
		}
		return d
	}
	return 5 * time.Second
}

// TestBootstrapWorkflow is the seed's workflow with real parts: a kubelet
// (kubemark's, with its pod source set) with no API server runs a pod
// created through the Pod API; kube-apiserver comes up; the pod is
// created there, bound to the node, and runs as an API pod in place of
// the static one (the one restart, measured); deleting it through
// kube-apiserver removes it from the node and from the Pod API.
func TestBootstrapWorkflow(t *testing.T) {
	ctx := context.Background()
	admin := kubernetes.NewForConfigOrDie(cp.AdminConfig())
	n := runs.Add(1)
	node, ns := fmt.Sprintf("podapi-node-%d", n), fmt.Sprintf("podapi-%d", n)
	if err := cp.EnsureNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}

	// Until the gate opens, neither the kubelet nor the Pod API reaches
	// kube-apiserver: the node has no API server.
	gate := startGate(t)
	handover := handoverIdentity(t)
	handover.Host = gate.URL

	const token = "kubelet-token-kubelet-token-kubelet-token"
	// The kubelet first, so that the API can watch what it takes (the
	// quarantine must not mistake a handover for a refusal).
	src, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	every := httpCheckFrequency(t)
	kubelet := startKubelet(t, node, gate, "http://"+src.Addr().String()+"/pods", token, every)
	_, call, _ := testAPIOn(t, Config{NodeName: node, KubeletToken: token,
		Handover: handover, HandoverInterval: time.Second, HandoverTimeout: 2 * time.Minute,
		KubeletPodResources: kubelet.PodResourcesSocket()}, src)
	t.Cleanup(func() { _ = admin.CoreV1().Nodes().Delete(context.Background(), node, metav1.DeleteOptions{}) })

	// 1. No API server: the Pod API's pod runs on the kubelet.
	code, body := call("POST", "/pods", fmt.Sprintf(`{"apiVersion":"v1","kind":"Pod",
		"metadata":{"name":"boot","namespace":%q,"labels":{"app":"boot"}},
		"spec":{"automountServiceAccountToken":false,"containers":[{"name":"pause","image":"registry.k8s.io/pause:3.10"}]}}`, ns))
	if code != http.StatusCreated {
		t.Fatalf("POST: %d %s", code, body)
	}
	var rec Record
	if err := json.Unmarshal(body, &rec); err != nil {
		t.Fatal(err)
	}
	name := "boot-" + node
	testserver.Eventually(t, 2*time.Minute, "the static pod running on the kubelet", func(ctx context.Context) error {
		return kubelet.Runs(ctx, rec.Pod.UID)
	})
	testserver.Eventually(t, time.Minute, "the static pod noted taken by the kubelet", func(context.Context) error {
		if get(t, call, rec.Pod.UID).TakenByKubelet == nil {
			return errors.New("not yet")
		}
		return nil
	})
	if r := get(t, call, rec.Pod.UID); r.State != StateLocal || r.Reason == "" {
		t.Errorf("with no API server: state %s (%q), want Local with the reason it waits", r.State, r.Reason)
	} else {
		t.Logf("with no API server: %s, %s", r.State, r.Reason)
	}

	// The node's own identity may not create the pod: NodeRestriction
	// admits only mirror pods from nodes. Hence the handover identity.
	direct, err := cp.NodeConfig(node)
	if err != nil {
		t.Fatal(err)
	}
	_, err = kubernetes.NewForConfigOrDie(direct).CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "as-node"},
		Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "x"}}},
	}, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "can only create mirror pods") {
		t.Errorf("a regular pod created as the node: %v, want NodeRestriction's 403", err)
	}

	// 2. kube-apiserver comes up: the pod is handed over, and the kubelet
	// runs the API's pod instead of the static one.
	sampler := startSampler(ctx, admin, kubelet, ns, name, rec.Pod.UID)
	gate.Open()
	opened := time.Now()
	var apiPod *corev1.Pod
	testserver.Eventually(t, 3*time.Minute, "the API pod running on the node", func(ctx context.Context) error {
		p, err := admin.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if _, mirror := p.Annotations[corev1.MirrorPodAnnotationKey]; mirror {
			return fmt.Errorf("still the mirror pod of the static pod")
		}
		if p.Annotations[annotationUID] != string(rec.Pod.UID) || p.Spec.NodeName != node {
			return fmt.Errorf("a pod %s not the Pod API's for %s: annotations %v, node %q", name, node, p.Annotations, p.Spec.NodeName)
		}
		if p.Status.Phase != corev1.PodRunning {
			return fmt.Errorf("phase %s", p.Status.Phase)
		}
		apiPod = p
		return nil
	})
	gap := sampler.stop()
	if err := kubelet.Runs(ctx, rec.Pod.UID); err == nil {
		t.Errorf("the static pod %s still runs beside the API pod", rec.Pod.UID)
	}
	r := get(t, call, rec.Pod.UID)
	if r.State != StateHandedOver || r.APIUID != apiPod.UID {
		t.Errorf("after handover: state %s (%s), API UID %s; want HandedOver, %s", r.State, r.Reason, r.APIUID, apiPod.UID)
	}
	if apiPod.Labels["app"] != "boot" || apiPod.Annotations[annotationSource] != sourceValue {
		t.Errorf("API pod labels %v annotations %v: the Pod API's labels and tag not kept", apiPod.Labels, apiPod.Annotations)
	}
	t.Logf("handover: API pod Running %s after kube-apiserver came up; the pod ran nowhere for %s (last static Running to first API Running, httpCheckFrequency %s)",
		time.Since(opened).Round(100*time.Millisecond), gap.Round(100*time.Millisecond), every)

	// 3. Deleted through kube-apiserver: gone from the node and from the
	// Pod API, and not created again.
	if err := admin.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testserver.Eventually(t, 2*time.Minute, "the API pod gone", func(ctx context.Context) error {
		p, err := admin.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		return fmt.Errorf("still there (uid %s, deletion %v)", p.UID, p.DeletionTimestamp)
	})
	testserver.Eventually(t, time.Minute, "the Pod API's record gone", func(ctx context.Context) error {
		if code, body := call("GET", "/pods/"+string(rec.Pod.UID), ""); code != http.StatusNotFound {
			return fmt.Errorf("GET: %d %s", code, body)
		}
		return nil
	})
	testserver.Eventually(t, time.Minute, "nothing of it on the kubelet", func(ctx context.Context) error {
		pods, err := kubelet.Pods(ctx)
		if err != nil {
			return err
		}
		for _, p := range pods {
			if p.UID == rec.Pod.UID || p.UID == apiPod.UID {
				return fmt.Errorf("kubelet still has %s", p.UID)
			}
		}
		return nil
	})
	time.Sleep(3 * time.Second) // a few handover rounds: nothing brings it back
	if _, err := admin.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("after the deletion: %v, want NotFound", err)
	}
}

// startKubelet starts a hollow kubelet for node, stopped when the test
// ends, whose kube-apiserver is behind gate and whose pod source is
// source (the kubelet fetches it with token every every).
func startKubelet(t *testing.T, node string, gate *controlplane.Gate, source, token string, every time.Duration) *controlplane.HollowKubelet {
	t.Helper()
	ctx := context.Background()
	tools, err := controlplane.EnsureTools(ctx, os.Stderr, "hollowkubelet")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	nodeCfg, err := cp.NodeConfig(node)
	if err != nil {
		t.Fatal(err)
	}
	nodeCfg.Host = gate.URL
	kubeconfig := filepath.Join(dir, "kubelet.kubeconfig")
	if err := controlplane.WriteKubeconfig(nodeCfg, kubeconfig); err != nil {
		t.Fatal(err)
	}
	kubelet, err := controlplane.StartHollowKubelet(ctx, tools["hollowkubelet"], controlplane.HollowKubeletOptions{
		Name: node, Kubeconfig: kubeconfig, Dir: dir,
		ExtraArgs: []string{
			"--static-pod-url=" + source,
			"--static-pod-url-header=Authorization: Bearer " + token,
			"--http-check-frequency=" + every.String(),
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kubelet.Stop)
	return kubelet
}

// handoverIdentity is the identity the Pod API hands pods over with: the
// user that manifests/podapi-handover grants, with that file's RBAC
// applied as shipped, so that the test proves it is enough.
func handoverIdentity(t *testing.T) *rest.Config {
	t.Helper()
	if err := cp.ApplyFiles(context.Background(), "../manifests/podapi-handover/rbac.yaml"); err != nil {
		t.Fatal(err)
	}
	cfg, err := cp.UserConfig("nodeproxy:podapi-handover")
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// startGate is a controlplane.Gate to kube-apiserver, closed when the
// test ends.
func startGate(t *testing.T) *controlplane.Gate {
	t.Helper()
	g, err := controlplane.StartGate(strings.TrimPrefix(cp.URL, "https://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.Close)
	return g
}

func get(t *testing.T, call func(method, urlPath, body string) (int, []byte), uid types.UID) Record {
	t.Helper()
	code, body := call("GET", "/pods/"+string(uid), "")
	var r Record
	if err := json.Unmarshal(body, &r); code != http.StatusOK || err != nil {
		t.Fatalf("GET /pods/%s: %d %s", uid, code, body)
	}
	return r
}

// sampler watches the handover every 100ms: the last moment the kubelet
// ran the static pod, the first the API showed the API pod Running.
type sampler struct {
	cancel context.CancelFunc
	done   chan struct{}
	// lastStatic, firstAPI are set by the sampling goroutine.
	lastStatic, firstAPI time.Time
}

func startSampler(ctx context.Context, admin kubernetes.Interface, kubelet *controlplane.HollowKubelet, ns, name string, static types.UID) *sampler {
	ctx, cancel := context.WithCancel(ctx)
	s := &sampler{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			if kubelet.Runs(ctx, static) == nil {
				s.lastStatic = time.Now()
			}
			if s.firstAPI.IsZero() {
				p, err := admin.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
				if err == nil && p.Annotations[corev1.MirrorPodAnnotationKey] == "" && p.Status.Phase == corev1.PodRunning {
					s.firstAPI = time.Now()
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return s
}

// stop ends the sampling and returns how long the pod ran nowhere.
func (s *sampler) stop() time.Duration {
	time.Sleep(200 * time.Millisecond) // one more sample of the API pod
	s.cancel()
	<-s.done
	if s.firstAPI.IsZero() || s.lastStatic.IsZero() {
		return 0
	}
	return s.firstAPI.Sub(s.lastStatic)
}

// podJSON is a pod that runs anywhere, without API objects.
func podJSON(ns, name string) string {
	return fmt.Sprintf(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":%q,"namespace":%q},
		"spec":{"automountServiceAccountToken":false,"containers":[{"name":"pause","image":"registry.k8s.io/pause:3.10"}]}}`, name, ns)
}

func post(t *testing.T, call func(method, urlPath, body string) (int, []byte), body string) Record {
	t.Helper()
	code, b := call("POST", "/pods", body)
	var r Record
	if err := json.Unmarshal(b, &r); code != http.StatusCreated || err != nil {
		t.Fatalf("POST: %d %s", code, b)
	}
	return r
}

// TestHandoverRefused: against kube-apiserver, with no kubelet: when the
// handover cannot happen, the pod keeps being served to the kubelet and
// its state says why.
func TestHandoverRefused(t *testing.T) {
	ctx := context.Background()
	admin := kubernetes.NewForConfigOrDie(cp.AdminConfig())
	allowed := handoverIdentity(t)
	nobody, err := cp.UserConfig("nodeproxy:podapi-nobody")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		identity *rest.Config
		timeout  time.Duration
		// taken is a pod of the API pod's name created first.
		taken      bool
		wantReason string
	}{
		{name: "identity without RBAC", identity: nobody, wantReason: "forbidden"},
		{name: "name taken in the API", identity: allowed, taken: true, wantReason: "already exists"},
		{name: "no kubelet lets go", identity: allowed, timeout: 2 * time.Second, wantReason: "did not fetch its pods"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := runs.Add(1)
			node, ns := fmt.Sprintf("podapi-node-%d", n), fmt.Sprintf("podapi-%d", n)
			if err := cp.EnsureNamespace(ctx, ns); err != nil {
				t.Fatal(err)
			}
			if tc.taken {
				if _, err := admin.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "app-" + node},
					Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "x"}}}}, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			_, call, source := testAPI(t, Config{NodeName: node, KubeletToken: testToken, Handover: tc.identity,
				HandoverInterval: 200 * time.Millisecond, HandoverTimeout: tc.timeout})
			rec := post(t, call, podJSON(ns, "app"))
			var sawHandingOver atomic.Bool
			testserver.Eventually(t, time.Minute, "handover failed", func(ctx context.Context) error {
				// The kubelet would have fetched; the timeout case must not.
				r := get(t, call, rec.Pod.UID)
				if r.State == StateHandingOver {
					sawHandingOver.Store(true)
				}
				if r.State != StateHandoverFailed || !strings.Contains(r.Reason, tc.wantReason) {
					return fmt.Errorf("state %s (%s), want HandoverFailed with %q", r.State, r.Reason, tc.wantReason)
				}
				return nil
			})
			if tc.timeout > 0 && !sawHandingOver.Load() {
				t.Errorf("never HandingOver before the timeout")
			}
			if _, list := fetchSource(t, source, "Bearer "+testToken); len(list.Items) != 1 || list.Items[0].UID != rec.Pod.UID {
				t.Errorf("after a failed handover the kubelet is served %+v, want the pod", list.Items)
			}
			if _, err := admin.CoreV1().Pods(ns).Get(ctx, "app-"+node, metav1.GetOptions{}); tc.taken != (err == nil) {
				t.Errorf("API pod: %v; want one only if it was there before", err)
			}
		})
	}
}
