package endpoint_test

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"

	"github.com/nodeproxy/nodeproxy/test/controlplane"
	"github.com/nodeproxy/nodeproxy/test/testserver"
)

// notAfter is kp's certificate's NotAfter.
func notAfter(t *testing.T, kp *controlplane.KeyPair) time.Time {
	t.Helper()
	block, _ := pem.Decode(kp.CertPEM)
	if block == nil {
		t.Fatal("no certificate in the key pair")
	}
	leaf, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return leaf.NotAfter
}

// secretUpdates is what a watch of one Secret saw: its password at each
// MODIFIED, in order, and anything else it got.
type secretUpdates struct {
	mu     sync.Mutex
	seen   []string
	other  []string
	closed bool
}

func (p *secretUpdates) follow(w watch.Interface) {
	for ev := range w.ResultChan() {
		p.mu.Lock()
		s, _ := ev.Object.(*corev1.Secret)
		switch {
		case ev.Type == watch.Modified && s != nil:
			p.seen = append(p.seen, string(s.Data["password"]))
		case ev.Type == watch.Bookmark:
		default:
			p.other = append(p.other, fmt.Sprintf("%s %v", ev.Type, ev.Object))
		}
		p.mu.Unlock()
	}
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
}

func (p *secretUpdates) last() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.seen) == 0 {
		return ""
	}
	return p.seen[len(p.seen)-1]
}

func (p *secretUpdates) has(want string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, s := range p.seen {
		if s == want {
			return true
		}
	}
	return false
}

// TestKubeletCertificateExpiringUnderTheHubConnection: the kubelet's
// client certificate, which its node endpoint presents to the hub (read
// from the kubelet's file at each dial), is valid for 30 s; the kubelet
// watches a Secret of its pod through the endpoint, as its reflectors do
// (from the list's resourceVersion, watching again from the last one seen
// when a watch ends), while an admin updates it every 300 ms.
//
//   - 12 s before its NotAfter the kubelet rotates it on disk (a new
//     certificate, valid 35 s), as the kubelet's certificate manager
//     does well before expiry. The endpoint's connection to the hub was
//     made with the old one: at its NotAfter the hub ends it with 401
//     (its check at the credential's expiry), not before; the endpoint
//     dials again with the rotated certificate, and the kubelet's watch
//     sees every update, once, in order, across it.
//   - The rotated certificate then expires with nothing replacing it.
//     The hub ends the connection with 401 at its NotAfter; the endpoint
//     dials again and is refused; an update made after that never
//     reaches the kubelet's watch, and a new request of the kubelet is
//     refused 401 at the endpoint, as kube-apiserver refuses an expired
//     certificate.
func TestKubeletCertificateExpiringUnderTheHubConnection(t *testing.T) {
	ctx := context.Background()
	hub := startHub(t)
	const node = "node-cert-expiry"
	groups := []string{"system:nodes"}
	first, err := cp.ClientCA.ShortLivedClientCert("system:node:"+node, groups, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	firstNotAfter := notAfter(t, first)
	n := startNodeWith(t, node, nodeSpec{hub: hub.URL, kubelet: first})
	ns := workload(t, node)
	kubelet := kubernetes.NewForConfigOrDie(n.kubelet)
	// In-process, not through the endpoint's /metrics: that is the
	// kubelet's port, which its expired certificate no longer opens.
	type series struct {
		name   string
		labels map[string]string
	}
	count := func(s series) int { return int(testserver.Gathered(t, s.name, s.labels)) }
	var (
		refusedByHub = series{"nodeproxy_hub_reauthentications_total", map[string]string{"result": "unauthorized"}}
		hubUp        = series{"nodeproxy_node_hub_dials_total", map[string]string{"result": "ok"}}
		failedDials  = series{"nodeproxy_watchmux_client_reconnects_total", map[string]string{"result": "error"}}
	)

	// The kubelet's watch of its Secret, from its list's resourceVersion.
	var rv string
	testserver.Eventually(t, 30*time.Second, "the kubelet's list of its Secret", func(ctx context.Context) error {
		l, err := kubelet.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=s"})
		if err != nil {
			return err
		}
		rv = l.ResourceVersion
		return nil
	})
	lw := cache.NewListWatchFromClient(kubelet.CoreV1().RESTClient(), "secrets", ns, fields.OneTermEqualSelector("metadata.name", "s"))
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	w, err := watchtools.NewRetryWatcherWithContext(watchCtx, rv, lw)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	var seen secretUpdates
	go seen.follow(w)

	// The admin's updates, every 300 ms, until told to stop.
	var (
		writeMu sync.Mutex
		written []string
	)
	stopWriting := make(chan struct{})
	writerDone := make(chan struct{})
	go func() {
		defer close(writerDone)
		admin := kubernetes.NewForConfigOrDie(cp.AdminConfig())
		for i := 1; ; i++ {
			select {
			case <-stopWriting:
				return
			case <-time.After(300 * time.Millisecond):
			}
			s, err := admin.CoreV1().Secrets(ns).Get(ctx, "s", metav1.GetOptions{})
			if err != nil {
				t.Error(err)
				return
			}
			s.Data["password"] = []byte(strconv.Itoa(i))
			if _, err := admin.CoreV1().Secrets(ns).Update(ctx, s, metav1.UpdateOptions{}); err != nil {
				t.Error(err)
				return
			}
			writeMu.Lock()
			written = append(written, strconv.Itoa(i))
			writeMu.Unlock()
		}
	}()
	var stopOnce sync.Once
	stopWriter := func() []string {
		stopOnce.Do(func() { close(stopWriting) })
		<-writerDone
		writeMu.Lock()
		defer writeMu.Unlock()
		return append([]string(nil), written...)
	}
	// A test that fails early stops it before the control plane goes.
	t.Cleanup(func() { stopWriter() })

	// The kubelet rotates its certificate on disk before its NotAfter.
	time.Sleep(time.Until(firstNotAfter.Add(-12 * time.Second)))
	second, err := cp.ClientCA.ShortLivedClientCert("system:node:"+node, groups, 35*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	secondNotAfter := notAfter(t, second)
	refused0, up0 := count(refusedByHub), count(hubUp)
	n.writeCert(t, second)

	// The connection made with the first stays until its NotAfter (the
	// file's change alone does not end it), and the hub ends it then.
	time.Sleep(time.Until(firstNotAfter.Add(-time.Second)))
	if count(hubUp) != up0 || count(refusedByHub) != refused0 {
		t.Fatalf("the endpoint's hub connection was made again before the first certificate's NotAfter (dials %d -> %d, refusals %d -> %d): nothing would be tested",
			up0, count(hubUp), refused0, count(refusedByHub))
	}
	ended := waitRefusal(t, func() int { return count(refusedByHub) }, refused0, firstNotAfter)
	testserver.Eventually(t, 20*time.Second, "the endpoint dialed the hub again with the rotated certificate", func(context.Context) error {
		if count(hubUp) == up0 {
			return fmt.Errorf("no new hub connection")
		}
		return nil
	})
	t.Logf("the hub ended the endpoint's connection with 401 %s after the first certificate's NotAfter; the endpoint was connected again %s after it",
		ended.Sub(firstNotAfter).Round(time.Millisecond), time.Since(firstNotAfter).Round(time.Millisecond))
	// A few updates through the new connection, then everything so far
	// must have reached the kubelet, once each, in order.
	time.Sleep(3 * time.Second)
	writeMu.Lock()
	upTo := written[len(written)-1]
	writeMu.Unlock()
	testserver.Eventually(t, 20*time.Second, "the kubelet's watch at update "+upTo, func(context.Context) error {
		if !seen.has(upTo) {
			return fmt.Errorf("at %q", seen.last())
		}
		return nil
	})
	seen.mu.Lock()
	got := append([]string(nil), seen.seen...)
	other := append([]string(nil), seen.other...)
	seen.mu.Unlock()
	want, _ := strconv.Atoi(upTo)
	for i, p := range got {
		if p != strconv.Itoa(i+1) {
			t.Fatalf("the kubelet's watch saw %v, want 1..%d once each in order", got, want)
		}
	}
	if len(other) > 0 {
		t.Errorf("the kubelet's watch got events other than its Secret's updates: %v", other)
	}

	// The rotated certificate expires with nothing replacing it.
	refused1, failed1 := count(refusedByHub), count(failedDials)
	ended = waitRefusal(t, func() int { return count(refusedByHub) }, refused1, secondNotAfter)
	testserver.Eventually(t, 20*time.Second, "the endpoint's dial with the expired certificate refused", func(context.Context) error {
		if count(failedDials) == failed1 {
			return fmt.Errorf("no failed dial")
		}
		return nil
	})
	time.Sleep(2 * time.Second)
	writes := stopWriter()
	lastWritten := writes[len(writes)-1]
	time.Sleep(10 * time.Second)
	if seen.has(lastWritten) {
		t.Errorf("update %s, made 2 s after the hub refused the expired certificate, reached the kubelet's watch through the endpoint", lastWritten)
	}
	_, err = kubelet.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=s"})
	if !apierrors.IsUnauthorized(err) {
		t.Errorf("a new request of the kubelet with its expired certificate: %v, want 401", err)
	}
	upTo = seen.last()
	seen.mu.Lock()
	t.Logf("the hub ended the connection made with the rotated certificate with 401 %s after its NotAfter; the kubelet's watch saw updates up to %q of %s, then %d other events (%v), its events closed: %t; its new request: %v",
		ended.Sub(secondNotAfter).Round(time.Millisecond), upTo, lastWritten, len(seen.other), seen.other, seen.closed, err)
	seen.mu.Unlock()
}

// waitRefusal waits until refusals, the hub's count of open connections
// it refused, passes from, and fails t if that happens before expiry
// or more than 10 s after it; it returns when it was seen.
func waitRefusal(t *testing.T, refusals func() int, from int, expiry time.Time) time.Time {
	t.Helper()
	deadline := time.Now().Add(time.Until(expiry) + 10*time.Second)
	for time.Now().Before(deadline) {
		if refusals() > from {
			at := time.Now()
			if at.Before(expiry) {
				t.Fatalf("the hub refused the connection %s before the certificate's NotAfter", expiry.Sub(at))
			}
			return at
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("the hub did not end the connection within 10 s of the certificate's NotAfter (%s)", expiry)
	return time.Time{}
}
