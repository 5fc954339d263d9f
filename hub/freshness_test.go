package hub_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/nodeproxy/nodeproxy/apis/bulk/v1alpha1"
	"github.com/nodeproxy/nodeproxy/test/testserver"
)

// TestCacheCatchesUpSoonAfterKubeAPIServerRestart kills kube-apiserver
// under a running hub, keeps it down until the hub's secrets reflector has
// failed five times, starts it again, and checks that:
//   - while it is down, /readyz's cache-watch check fails (the bound is
//     set to 2 s here) and nodeproxy_cache_watch_outage_seconds and
//     nodeproxy_cache_watch_failures_total show the outage;
//   - a Secret update written once kube-apiserver is ready again reaches a
//     node reading from the hub within restartCatchUp;
//   - the check passes again and the outage metric drops to 0.
//
// Five failures first is what makes the bound prove the defect rather
// than time the code: with client-go's default backoff (0.8 s doubling,
// jitter up to 2x, cap 30 s) the fifth failure comes no sooner than
// 0.8+1.6+3.2+6.4+12.8 = 24.8 s into the outage, the retry then pending
// lasts 12.8 to 25.6 s, and the relist after the 410 Expired that a
// restarted kube-apiserver answers the resumed watch with waits the next
// step, 30 to 60 s: the update reached the hub 30 s or more after
// kube-apiserver was ready, every time. With ReflectorBackoff both waits
// are under 3 s. restartCatchUp leaves room for a loaded machine
// without letting the old backoff pass.
func TestCacheCatchesUpSoonAfterKubeAPIServerRestart(t *testing.T) {
	const restartCatchUp = 15 * time.Second
	ctx := context.Background()
	testserver.InstallRBAC(t, cp)
	srv := testserver.Start(t, cp, testserver.Options{Args: []string{"--cache-max-watch-outage=2s"}})
	srv.WaitReady(t, 90*time.Second)
	anon := srv.Client(t, nil)
	secret := nodeReadsSecret(t, srv, "freshness")
	secret.waitFor(t, "0", 30*time.Second)

	failuresBefore := testserver.Gathered(t, "nodeproxy_cache_watch_failures_total", map[string]string{"resource": "secrets"})
	cp.APIServer().Kill()
	restarted := false
	t.Cleanup(func() {
		if !restarted { // leave the package's later tests a kube-apiserver
			if err := cp.RestartAPIServer(ctx); err != nil {
				t.Error(err)
			}
		}
	})

	waitReadyzCheck(t, srv, anon, "[-]cache-watch failed", 30*time.Second)
	testserver.Eventually(t, 120*time.Second, "five failed lists or watches of secrets", func(context.Context) error {
		if n := testserver.Gathered(t, "nodeproxy_cache_watch_failures_total", map[string]string{"resource": "secrets"}) - failuresBefore; n < 5 {
			return fmt.Errorf("%v failures", n)
		}
		return nil
	})
	if outage := testserver.Gathered(t, "nodeproxy_cache_watch_outage_seconds", map[string]string{"resource": "secrets"}); outage < 2 {
		t.Errorf("nodeproxy_cache_watch_outage_seconds{resource=\"secrets\"} = %v during the outage, want more than the 2 s bound", outage)
	}

	if err := cp.RestartAPIServer(ctx); err != nil {
		t.Fatal(err)
	}
	restarted = true
	ready := time.Now()
	secret.update(t, "1")
	secret.waitFor(t, "1", restartCatchUp)
	t.Logf("the update reached the node %s after kube-apiserver was ready again", time.Since(ready).Round(time.Millisecond))

	waitReadyzCheck(t, srv, anon, "[+]cache-watch ok", 30*time.Second)
	if outage := testserver.Gathered(t, "nodeproxy_cache_watch_outage_seconds", map[string]string{"resource": "secrets"}); outage != 0 {
		t.Errorf("nodeproxy_cache_watch_outage_seconds{resource=\"secrets\"} = %v after the outage, want 0", outage)
	}
}

// waitReadyzCheck polls /readyz?verbose until its body has line.
func waitReadyzCheck(t testing.TB, srv *testserver.Server, c *http.Client, line string, timeout time.Duration) {
	t.Helper()
	testserver.Eventually(t, timeout, "/readyz says "+line, func(context.Context) error {
		_, body, err := get(c, srv.URL+"/readyz?verbose")
		if err != nil {
			return err
		}
		if !strings.Contains(body, line) {
			return errors.New(body)
		}
		return nil
	})
}

// watchedSecret is a Secret a node's pod uses, written through
// kube-apiserver and read by the node from the hub with a bulk get, the
// way the node endpoint reads it.
type watchedSecret struct {
	ns, name string
	admin    kubernetes.Interface
	node     *http.Client
	url      string
}

// nodeReadsSecret makes namespace ns with Secret s (data v=0) and a pod
// on node node-<ns> that mounts it, so that the node may read it.
func nodeReadsSecret(t testing.TB, srv *testserver.Server, ns string) *watchedSecret {
	t.Helper()
	ctx := context.Background()
	if err := cp.EnsureNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	admin := kubernetes.NewForConfigOrDie(cp.AdminConfig())
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s"}, Data: map[string][]byte{"v": []byte("0")}}
	if _, err := admin.CoreV1().Secrets(ns).Create(ctx, s, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p"},
		Spec: corev1.PodSpec{
			NodeName:   "node-" + ns,
			Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}},
			Volumes:    []corev1.Volume{{Name: "s", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "s"}}}},
		},
	}
	if _, err := admin.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	node, err := cp.NodeConfig("node-" + ns)
	if err != nil {
		t.Fatal(err)
	}
	w := &watchedSecret{ns: ns, name: "s", admin: admin, node: srv.Client(t, node), url: srv.URL + "/apis/bulk.k8s.io/v1alpha1/bulkgetoperations"}
	w.update(t, "0")
	return w
}

// update writes v as the secret's data, retrying while a kube-apiserver
// that has just become ready refuses.
func (w *watchedSecret) update(t testing.TB, v string) {
	t.Helper()
	testserver.Eventually(t, 30*time.Second, "secret updated", func(ctx context.Context) error {
		s, err := w.admin.CoreV1().Secrets(w.ns).Get(ctx, w.name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		s.Data = map[string][]byte{"v": []byte(v)}
		_, err = w.admin.CoreV1().Secrets(w.ns).Update(ctx, s, metav1.UpdateOptions{})
		return err
	})
}

// read is the secret's data v as the node reads it from the hub.
func (w *watchedSecret) read() (string, error) {
	body := fmt.Sprintf(`{"apiVersion":"bulk.k8s.io/v1alpha1","kind":"BulkGetOperation","spec":{"operations":[`+
		`{"resource":{"group":"","version":"v1","resource":"secrets"},"namespace":%q,"options":{"fieldSelector":"metadata.name=%s"}}]}}`, w.ns, w.name)
	resp, err := w.node.Post(w.url, "application/json", strings.NewReader(body))
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusCreated {
		return "", fmt.Errorf("%d: %s", resp.StatusCode, raw)
	}
	var out v1alpha1.BulkGetOperation
	if err := json.Unmarshal(raw, &out); err != nil {
		return "", err
	}
	if len(out.Status.Results) != 1 {
		return "", fmt.Errorf("%d results", len(out.Status.Results))
	}
	var list corev1.SecretList
	if err := json.Unmarshal(out.Status.Results[0].Raw, &list); err != nil {
		return "", err
	}
	if len(list.Items) != 1 {
		return "", fmt.Errorf("%d secrets", len(list.Items))
	}
	return string(list.Items[0].Data["v"]), nil
}

// waitFor polls, as the node, until the secret's data is v.
func (w *watchedSecret) waitFor(t testing.TB, v string, timeout time.Duration) {
	t.Helper()
	testserver.Eventually(t, timeout, "the node reads v="+v+" from the hub", func(context.Context) error {
		got, err := w.read()
		if err != nil {
			return err
		}
		if got != v {
			return fmt.Errorf("v=%s", got)
		}
		return nil
	})
}
