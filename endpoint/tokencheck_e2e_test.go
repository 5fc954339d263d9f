package endpoint_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/nodeproxy/nodeproxy/test/testserver"
)

// TestNewWatchWithARefusedTokenGetsKubeAPIServers401AsDirectly: a
// token allowed kube-proxy's reads and the bulk API's door watches
// Services through a node endpoint, served by the hub over the token's
// own connection: a new watch is a new channel on that connection, which
// the hub authenticated when it was dialed (a list is a bulk get, which
// the hub authenticates on its own). What the token depends on is then
// deleted, but held by a finalizer, so the hub sees no deletion, and its
// periodic check is set to 10 minutes here; kube-apiserver refuses the
// token from a minute past the deletionTimestamp (its leeway) and its own
// 10 s token cache. In turn, every 100 ms, the token lists Services
// directly on kube-apiserver and opens a new watch through the endpoint:
// from the first list kube-apiserver refuses, the watch right after it
// gets kube-apiserver's 401 too, answered by kube-apiserver, and later
// ones do; before that, the endpoint's watches were the hub's.
//   - A token bound to a Secret (as kube-proxy's is bound to its pod):
//     the hub's local check times its refusal at the Secret's
//     deletionTimestamp plus the leeway, and the endpoint asks
//     kube-apiserver nothing about it.
//   - A TokenRequest bound to nothing, its ServiceAccount held: the hub
//     reviews it only every interval, and the endpoint asks kube-apiserver
//     about it before each new read, which is refused.
func TestNewWatchWithARefusedTokenGetsKubeAPIServers401AsDirectly(t *testing.T) {
	t.Run("bound to a Secret", func(t *testing.T) { newWatchWithARefusedToken(t, true) })
	t.Run("bound to nothing", func(t *testing.T) { newWatchWithARefusedToken(t, false) })
}

func newWatchWithARefusedToken(t *testing.T, bound bool) {
	ctx := context.Background()
	hub := startHubWith(t, testserver.Options{Args: []string{"--watch-reauthenticate-interval=10m"}})
	n := startNode(t, "node-token-check", hub.URL)
	admin := kubernetes.NewForConfigOrDie(cp.AdminConfig())
	ns := "token-check-unbound"
	if bound {
		ns = "token-check-bound"
	}
	proxierToken(t, ns, "kube-proxy", true)
	var token string
	// What is deleted under the token, held by a finalizer: its Secret,
	// or its ServiceAccount.
	var holderName string
	var patchHolder func(patch []byte) error
	var deleteHolder func() error
	var holderDeleting func() (bool, error)
	if bound {
		t0, holder, err := cp.SecretBoundToken(ctx, ns, "kube-proxy", "held-token-holder")
		if err != nil {
			t.Fatal(err)
		}
		token, holderName = t0, holder.Name
		patchHolder = func(patch []byte) error {
			_, err := admin.CoreV1().Secrets(ns).Patch(ctx, holderName, types.MergePatchType, patch, metav1.PatchOptions{})
			return err
		}
		deleteHolder = func() error { return admin.CoreV1().Secrets(ns).Delete(ctx, holderName, metav1.DeleteOptions{}) }
		holderDeleting = func() (bool, error) {
			s, err := admin.CoreV1().Secrets(ns).Get(ctx, holderName, metav1.GetOptions{})
			return err == nil && s.DeletionTimestamp != nil, err
		}
	} else {
		t0, err := cp.ServiceAccountToken(ctx, ns, "kube-proxy", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		token, holderName = t0, "kube-proxy"
		patchHolder = func(patch []byte) error {
			_, err := admin.CoreV1().ServiceAccounts(ns).Patch(ctx, holderName, types.MergePatchType, patch, metav1.PatchOptions{})
			return err
		}
		deleteHolder = func() error {
			return admin.CoreV1().ServiceAccounts(ns).Delete(ctx, holderName, metav1.DeleteOptions{})
		}
		holderDeleting = func() (bool, error) {
			s, err := admin.CoreV1().ServiceAccounts(ns).Get(ctx, holderName, metav1.GetOptions{})
			return err == nil && s.DeletionTimestamp != nil, err
		}
	}
	const finalizer = "nodeproxy.test/hold"
	hold := func(finalizers string) {
		t.Helper()
		if err := patchHolder([]byte(fmt.Sprintf(`{"metadata":{"finalizers":%s}}`, finalizers))); err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
	}
	hold(`["` + finalizer + `"]`)
	t.Cleanup(func() { hold(`null`) })

	proxy := asClient(n, token)
	direct := kubernetes.NewForConfigOrDie(&rest.Config{Host: cp.URL, BearerToken: token, TLSClientConfig: rest.TLSClientConfig{CAFile: cp.ServingCA.CertPath}})
	count := func(series string) int {
		v, _ := strconv.Atoi(metric(t, n, series))
		return v
	}
	const (
		hubWatches      = `nodeproxy_node_client_requests_total{path="hub",resource="services",verb="watch"}`
		apiserverWatchs = `nodeproxy_node_client_requests_total{path="apiserver",resource="services",verb="watch"}`
		refusedChecks   = `nodeproxy_node_client_token_checks_total{result="refused"}`
		acceptedChecks  = `nodeproxy_node_client_token_checks_total{result="accepted"}`
	)
	rv := servicesListedByHub(t, n, proxy, ns)
	// The process's registry: other tests' questions came before.
	refused0, accepted0 := count(refusedChecks), count(acceptedChecks)
	// A new watch through the endpoint, as a reflector opens one; closed
	// at once. Its error, and whether the hub served it.
	newWatch := func() (onHub bool, err error) {
		hubBefore := count(hubWatches)
		w, err := proxy.CoreV1().Services(ns).Watch(ctx, metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true})
		if err == nil {
			w.Stop()
		}
		return count(hubWatches) > hubBefore, err
	}
	if onHub, err := newWatch(); err != nil || !onHub {
		t.Fatalf("the token's first watch through the endpoint: %v, on the hub: %t", err, onHub)
	}

	if err := deleteHolder(); err != nil {
		t.Fatal(err)
	}
	deleted := time.Now()
	if deleting, err := holderDeleting(); err != nil || !deleting {
		t.Fatalf("%s after its deletion: %v; want it held by its finalizer", holderName, err)
	}

	// In turn, directly then through the endpoint, until kube-apiserver
	// refuses the token directly: its leeway of a minute, then its cache.
	hubServed := 0
	deadline := time.Now().Add(90 * time.Second)
	for {
		if time.Now().After(deadline) {
			t.Fatalf("kube-apiserver still accepts the token %s after its Secret was deleted", time.Since(deleted).Round(time.Second))
		}
		_, directErr := direct.CoreV1().Services(ns).List(ctx, metav1.ListOptions{})
		if directErr != nil && !apierrors.IsUnauthorized(directErr) {
			t.Fatalf("a direct list: %v", directErr)
		}
		apiBefore := count(apiserverWatchs)
		onHub, viaErr := newWatch()
		if directErr == nil {
			if viaErr == nil && onHub {
				hubServed++
			}
			time.Sleep(100 * time.Millisecond)
			continue
		}
		refused := time.Since(deleted).Round(time.Millisecond)
		if !apierrors.IsUnauthorized(viaErr) {
			t.Fatalf("kube-apiserver refused the token directly (%s after %s's deletion), and a new watch through the endpoint right after got %v (served by the hub: %t), want kube-apiserver's 401",
				refused, holderName, viaErr, onHub)
		}
		if onHub || count(apiserverWatchs) == apiBefore {
			t.Fatalf("the 401 through the endpoint was not kube-apiserver's (served by the hub: %t, watches sent to kube-apiserver %d -> %d)",
				onHub, apiBefore, count(apiserverWatchs))
		}
		t.Logf("kube-apiserver refused the token %s after %s's deletion, and the next watch through the endpoint got its 401; %d watches through the endpoint were served by the hub before", refused, holderName, hubServed)
		break
	}
	if hubServed == 0 {
		t.Error("no watch through the endpoint was served by the hub while kube-apiserver accepted the token: the test saw nothing of the hub's path")
	}
	switch questions := count(refusedChecks) - refused0 + count(acceptedChecks) - accepted0; {
	case bound && questions != 0:
		t.Errorf("%d questions to kube-apiserver about a bound token, want none: the hub times its refusal", questions)
	case !bound && count(refusedChecks) == refused0:
		t.Errorf("%s: 0, want the refusal counted", refusedChecks)
	}
	// Later ones stay with kube-apiserver: the connection is gone.
	for range 5 {
		if onHub, err := newWatch(); !apierrors.IsUnauthorized(err) || onHub {
			t.Fatalf("a later watch through the endpoint: %v (on the hub: %t), want kube-apiserver's 401", err, onHub)
		}
	}
}
