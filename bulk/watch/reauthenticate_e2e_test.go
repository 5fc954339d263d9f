package watch_test

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/utils/ptr"

	"github.com/nodeproxy/nodeproxy/apis/bulk/v1alpha1"
	"github.com/nodeproxy/nodeproxy/test/testserver"
	"github.com/nodeproxy/nodeproxy/watchmux"
)

// servicesFromNow is a channel on every Service, with its initial events.
var servicesFromNow = v1alpha1.GetOperation{Resource: metav1.GroupVersionResource{Version: "v1", Resource: "services"},
	Options: metav1.ListOptions{SendInitialEvents: ptr.To(true), AllowWatchBookmarks: true}}

// TestRevokedTokenEndsItsChannelsWith401: a ServiceAccount token bound to
// a Secret (a TokenRequest with the Secret as its bound object), allowed
// kube-proxy's reads and the bulk API's door, watches Services directly
// on the hub. The Secret is deleted: kube-apiserver refuses the token
// from then on (within its 10 s token cache). The hub, with its default
// flags, must end the channel with ERROR 401 in kube-apiserver's words
// within 70 s (its re-check at least once a minute, and its own 10 s
// token cache) and close the connection; a new connection with the token
// is 401.
func TestRevokedTokenEndsItsChannelsWith401(t *testing.T) {
	srv, admin, ns := startKubeProxyHub(t, "revoked")
	ctx := context.Background()
	token, holder, err := cp.SecretBoundToken(ctx, ns, "kube-proxy", "token-holder")
	if err != nil {
		t.Fatal(err)
	}
	cfg := &rest.Config{Host: srv.URL, BearerToken: token, TLSClientConfig: rest.TLSClientConfig{CAFile: cp.ServingCA.CertPath}}
	c, chs := dialWatching(t, cfg, servicesFromNow)
	defer c.Close()
	ch := chs[0]

	if err := admin.CoreV1().Secrets(ns).Delete(ctx, holder.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	revoked := time.Now()
	// kube-apiserver refuses the token once its own cache has let go.
	client := kubernetes.NewForConfigOrDie(&rest.Config{Host: cp.URL, BearerToken: token, TLSClientConfig: rest.TLSClientConfig{CAFile: cp.ServingCA.CertPath}})
	testserver.Eventually(t, 30*time.Second, "kube-apiserver refusing the token", func(ctx context.Context) error {
		if _, err := client.CoreV1().Services(ns).List(ctx, metav1.ListOptions{}); err == nil || !strings.Contains(err.Error(), "Unauthorized") {
			return fmt.Errorf("kube-apiserver answers the token: %v", err)
		}
		return nil
	})
	refusedAfter := time.Since(revoked)
	if _, err := admin.CoreV1().Services(ns).Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "after-revocation"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	var seen []string
	deadline := time.After(70*time.Second - time.Since(revoked))
	for ended := false; !ended; {
		select {
		case ev, ok := <-ch.Events:
			if !ok {
				t.Fatalf("the channel closed without an ERROR; events after the revocation: %v", seen)
			}
			if ev.Type == watch.Bookmark {
				continue
			}
			if ev.Type != watch.Error {
				seen = append(seen, string(ev.Type))
				continue
			}
			st := ev.Status
			if st == nil || st.Code != http.StatusUnauthorized || st.Reason != metav1.StatusReasonUnauthorized {
				t.Fatalf("the channel ended with %+v, want 401 Unauthorized", st)
			}
			t.Logf("the channel ended with 401 %q %s after the Secret was deleted (kube-apiserver refused the token after %s)", st.Message, time.Since(revoked).Round(time.Second), refusedAfter.Round(time.Second))
			ended = true
		case <-deadline:
			t.Fatalf("the channel is open 70 s after the Secret was deleted (kube-apiserver refused the token after %s); events it got meanwhile: %v", refusedAfter.Round(time.Second), seen)
		}
	}
	select {
	case <-c.Done():
	case <-time.After(30 * time.Second):
		t.Error("the connection is open 30 s after its channel ended with 401")
	}
	if _, err := watchmux.Dial(ctx, cfg); err == nil || !strings.Contains(err.Error(), "Unauthorized") {
		t.Errorf("a new connection with the revoked token: %v, want 401", err)
	}
}

// TestExpiredClientCertificateEndsItsChannelsWith401: a node's client
// certificate, of the cluster's client CA, valid for another 75 s, opens
// a bulk watch channel on Services directly on the hub. At its NotAfter
// the hub finds it no longer authenticates: the channel ends with ERROR
// 401 in kube-apiserver's words, not before NotAfter and within a minute
// after it, the connection closes, and a new connection with the
// certificate is refused with 401. The hub's periodic check is set to 10
// minutes here, so that only its check at the credential's own expiry
// can end the channel within that minute.
func TestExpiredClientCertificateEndsItsChannelsWith401(t *testing.T) {
	testserver.InstallRBAC(t, cp, "rbac-webhook.yaml", "rbac-bulk.yaml")
	srv := testserver.Start(t, cp, testserver.Options{Port: npPort, Args: []string{"--watch-reauthenticate-interval=10m"}})
	srv.WaitReady(t, 90*time.Second)
	kp, err := cp.ClientCA.ShortLivedClientCert("system:node:node-short-lived", []string{"system:nodes"}, 75*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(kp.CertPEM)
	leaf, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	cfg := &rest.Config{Host: srv.URL, TLSClientConfig: rest.TLSClientConfig{CertData: kp.CertPEM, KeyData: kp.KeyPEM, CAFile: cp.ServingCA.CertPath}}
	c, chs := dialWatching(t, cfg, servicesFromNow)
	defer c.Close()
	ch := chs[0]

	endsWith401NotBefore(t, ch, leaf.NotAfter, time.Minute, "the certificate's NotAfter")
	select {
	case <-c.Done():
	case <-time.After(30 * time.Second):
		t.Error("the connection is open 30 s after its channel ended with 401")
	}
	if _, err := watchmux.Dial(context.Background(), cfg); !apierrors.IsUnauthorized(err) {
		t.Errorf("a new connection with the expired certificate: %v, want 401", err)
	}
}

// TestPodBoundTokenEndsWith401AtItsPodsDeletionTimestampPlusLeeway: a
// kube-proxy's projected token (a TokenRequest bound to its pod, on a
// node; no kubelet runs here, so the pod stays in graceful deletion)
// watches Services directly on the hub. The pod is deleted with a grace
// period: kube-apiserver goes on accepting the token until the pod's
// deletionTimestamp is a minute past (its leeway), and so must the hub;
// then the channel ends with ERROR 401 in kube-apiserver's words. The
// hub's periodic check is set to 10 minutes and the channel ends well
// before, by a check refusing it (counted so: the local check's, or a
// review's if the cache of a type it needs was not fresh then): only the
// check timed at the deletionTimestamp plus the leeway can have ended
// it. The order asserted: kube-apiserver accepted the token past the
// deletionTimestamp with the channel open, the channel ended no earlier
// than the deletionTimestamp plus the leeway, and kube-apiserver then
// refuses the token, as the hub does a new connection.
func TestPodBoundTokenEndsWith401AtItsPodsDeletionTimestampPlusLeeway(t *testing.T) {
	srv, admin, ns := startKubeProxyHub(t, "graceful", "--watch-reauthenticate-interval=10m")
	ctx := context.Background()
	pod, err := admin.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "kube-proxy-graceful"},
		Spec: corev1.PodSpec{NodeName: "graceful-node", ServiceAccountName: "kube-proxy",
			Containers: []corev1.Container{{Name: "kube-proxy", Image: "registry.k8s.io/kube-proxy:v1.36.3"}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = admin.CoreV1().Pods(ns).Delete(context.Background(), pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
	})
	token, err := cp.PodBoundToken(ctx, ns, "kube-proxy", pod)
	if err != nil {
		t.Fatal(err)
	}
	cfg := &rest.Config{Host: srv.URL, BearerToken: token, TLSClientConfig: rest.TLSClientConfig{CAFile: cp.ServingCA.CertPath}}
	c, chs := dialWatching(t, cfg, servicesFromNow)
	defer c.Close()
	ch := chs[0]
	refusals := func() (local, review float64) {
		return reauthentications(t, "local", "unauthorized"), reauthentications(t, "review", "unauthorized")
	}
	local0, review0 := refusals()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the hub's re-authentications: %s", counters(t, "nodeproxy_hub_reauthentications_total", "nodeproxy_hub_reauthentication_local_fallbacks_total"))
		}
	})

	if err := admin.CoreV1().Pods(ns).Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](5)}); err != nil {
		t.Fatal(err)
	}
	marked, err := admin.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
	if err != nil || marked.DeletionTimestamp == nil {
		t.Fatalf("the pod in graceful deletion: %v, %v", marked, err)
	}
	refusedFrom := marked.DeletionTimestamp.Add(time.Minute)

	// Past the deletionTimestamp, within the leeway: kube-apiserver
	// accepts the token, and the channel is open.
	time.Sleep(time.Until(marked.DeletionTimestamp.Add(time.Second)))
	direct := kubernetes.NewForConfigOrDie(&rest.Config{Host: cp.URL, BearerToken: token, TLSClientConfig: rest.TLSClientConfig{CAFile: cp.ServingCA.CertPath}})
	if _, err := direct.CoreV1().Services(ns).List(ctx, metav1.ListOptions{}); err != nil {
		t.Fatalf("kube-apiserver refuses the token within the leeway: %v", err)
	}
	for open := true; open; {
		select {
		case ev := <-ch.Events:
			if ev.Type == watch.Error {
				t.Fatalf("the channel ended with %+v within the leeway, while kube-apiserver accepts the token", ev.Status)
			}
		default:
			open = false
		}
	}

	endsWith401NotBefore(t, ch, refusedFrom, 30*time.Second, "the deletionTimestamp plus the leeway")
	if local, review := refusals(); local-local0+review-review0 != 1 {
		t.Errorf("%v connections ended by the hub's local check and %v by a review, want this one", local-local0, review-review0)
	} else {
		t.Logf("refused by the hub's local check: %v, by a review: %v", local-local0, review-review0)
	}
	testserver.Eventually(t, 30*time.Second, "kube-apiserver refusing the token", func(ctx context.Context) error {
		if _, err := direct.CoreV1().Services(ns).List(ctx, metav1.ListOptions{}); !apierrors.IsUnauthorized(err) {
			return fmt.Errorf("kube-apiserver answers the token: %v", err)
		}
		return nil
	})
	if _, err := watchmux.Dial(ctx, cfg); !apierrors.IsUnauthorized(err) {
		t.Errorf("a new connection with the token: %v, want 401", err)
	}
}

// endsWith401NotBefore reads ch until it ends with ERROR 401 in
// kube-apiserver's words, failing if that comes before notBefore (what
// names it), or not within grace after it.
func endsWith401NotBefore(t *testing.T, ch *watchmux.Channel, notBefore time.Time, grace time.Duration, what string) {
	t.Helper()
	deadline := time.After(time.Until(notBefore) + grace)
	for {
		select {
		case ev, ok := <-ch.Events:
			if !ok {
				t.Fatal("the channel closed without an ERROR")
			}
			if ev.Type != watch.Error {
				continue
			}
			at := time.Now()
			if st := ev.Status; st == nil || st.Code != http.StatusUnauthorized || st.Reason != metav1.StatusReasonUnauthorized || st.Message != "Unauthorized" {
				t.Fatalf("the channel ended with %+v, want kube-apiserver's 401 Unauthorized", st)
			}
			if at.Before(notBefore) {
				t.Fatalf("the channel ended with 401 %s before %s", notBefore.Sub(at), what)
			}
			t.Logf("the channel ended with 401 %s after %s", at.Sub(notBefore).Round(time.Millisecond), what)
			return
		case <-deadline:
			t.Fatalf("the channel is open %s past %s (%s)", grace, what, notBefore)
		}
	}
}

// counters are the samples of the hub's counter families names, labels
// and values: what a failure shows of how the hub decided.
func counters(t *testing.T, names ...string) string {
	t.Helper()
	families, err := legacyregistry.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, f := range families {
		if !slices.Contains(names, f.GetName()) {
			continue
		}
		for _, m := range f.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			out = append(out, fmt.Sprintf("%s{%s} %v", f.GetName(), strings.Join(labels, ","), m.GetCounter().GetValue()))
		}
	}
	return strings.Join(out, "; ")
}

// reauthentications is the hub's count of re-authentications decided
// so, with such a result: the hub runs in this process.
func reauthentications(t *testing.T, decidedBy, result string) float64 {
	t.Helper()
	families, err := legacyregistry.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "nodeproxy_hub_reauthentications_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["decided_by"] == decidedBy && labels["result"] == result {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}
