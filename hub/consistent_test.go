package hub_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/transport"
	"k8s.io/utils/ptr"

	"github.com/nodeproxy/nodeproxy/hub"
	"github.com/nodeproxy/nodeproxy/test/testserver"
)

// secretsLag is how far the lagging replica's secrets watch runs behind
// kube-apiserver: long enough that a read right after a write finds the
// cache without it, well inside the 3 s a consistent read may wait.
const secretsLag = time.Second

// startLaggingReplica runs a hub whose secrets watch runs secretsLag
// behind kube-apiserver (test/testserver.LagWatches).
func startLaggingReplica(t testing.TB) *testserver.Server {
	t.Helper()
	srv := testserver.Start(t, cp, testserver.Options{Configure: func(o *hub.Options) {
		o.KubeTransportWrapper = testserver.LagWatches("secrets", secretsLag)
	}})
	srv.WaitReady(t, 90*time.Second)
	return srv
}

// nodeGetsSecret is the named bulk get a node endpoint sends for a
// kubelet's GET of ns/name with resourceVersion rv: the status code and
// the secrets' data v, or the Status.
func nodeGetsSecret(t testing.TB, srv *testserver.Server, node *http.Client, ns, name, rv string) (int, []string, *metav1.Status) {
	t.Helper()
	code, raw, status := postBulkGet(t, srv, node, secretsIn(ns, "metadata.name="+name, rv))
	if status != nil {
		return code, nil, status
	}
	var list corev1.SecretList
	if err := json.Unmarshal(raw, &list); err != nil {
		t.Fatal(err)
	}
	var vs []string
	for _, s := range list.Items {
		vs = append(vs, string(s.Data["v"]))
	}
	return code, vs, nil
}

// consistentGet is nodeGetsSecret at resourceVersion "", asked again when
// refused with 504: a consistent read may be refused when the replica
// cannot show its cache current within its budget (a loaded machine), and
// the node endpoint then asks kube-apiserver; what it may never do is
// answer stale. Three refusals in a row fail the test.
func consistentGet(t *testing.T, srv *testserver.Server, node *http.Client, ns, name string) (int, []string, *metav1.Status) {
	t.Helper()
	for try := 1; ; try++ {
		code, got, status := nodeGetsSecret(t, srv, node, ns, name, "")
		if code != http.StatusGatewayTimeout || try == 3 {
			return code, got, status
		}
		t.Logf("refused (%s): a consistent read may be, never answered stale; again", status.Message)
	}
}

// TestConsistentReadsThroughALaggingReplica: through a replica whose
// secrets watch runs a second behind kube-apiserver, a node that reads
// with resourceVersion "" right after a write (a CSI driver's
// nodePublishSecretRef GET of a secret just created; a reflector's
// streaming list after a 410) gets kube-apiserver's state, never an
// older one: the secret just created (not an empty list, which the
// endpoint turns into 404), nothing once it is deleted, the new data in
// a streaming list's initial state. Before, "" read the cache as it
// stood, as "0" still does: every one of these saw the state of a second
// before (checked by reverting bulk/parse.go's "" case).
func TestConsistentReadsThroughALaggingReplica(t *testing.T) {
	const (
		ns   = "consistent"
		node = "node-consistent"
	)
	ctx := context.Background()
	if err := cp.EnsureNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	testserver.InstallRBAC(t, cp)
	admin := kubernetes.NewForConfigOrDie(cp.AdminConfig())
	podUsing(t, admin, ns, node, secretVolume("csi"), secretVolume("watched"))
	srv := startLaggingReplica(t)
	nodeCfg, err := cp.NodeConfig(node)
	if err != nil {
		t.Fatal(err)
	}
	nodeClient := srv.Client(t, nodeCfg)
	before := testserver.Gathered(t, "nodeproxy_bulk_consistent_reads_total", map[string]string{"resource": "secrets"})

	t.Run("a secret read by name right after its creation", func(t *testing.T) {
		writeSecret(t, admin, ns, "csi", "1")
		code, got, status := consistentGet(t, srv, nodeClient, ns, "csi")
		if code != http.StatusCreated || len(got) != 1 || got[0] != "1" {
			t.Fatalf("the node read %d %v %+v, want the secret just created", code, got, status)
		}
	})
	t.Run("a secret read by name right after its deletion", func(t *testing.T) {
		// The replica has the secret: the question is whether a read
		// after the deletion still sees it.
		testserver.Eventually(t, 30*time.Second, "the replica has the secret", func(context.Context) error {
			if _, got, _ := nodeGetsSecret(t, srv, nodeClient, ns, "csi", "0"); len(got) != 1 {
				return fmt.Errorf("v=%v", got)
			}
			return nil
		})
		if err := admin.CoreV1().Secrets(ns).Delete(ctx, "csi", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		code, got, status := consistentGet(t, srv, nodeClient, ns, "csi")
		if code != http.StatusCreated || len(got) != 0 {
			t.Fatalf("the node read %d %v %+v, want nothing: the secret was deleted", code, got, status)
		}
	})
	t.Run("a streaming list right after an update", func(t *testing.T) {
		writeSecret(t, admin, ns, "watched", "1")
		c := dialAsNode(t, srv, node)
		// Wait until the replica has the first version: the question
		// is whether the streaming list sees the second.
		testserver.Eventually(t, 30*time.Second, "the replica has v=1", func(context.Context) error {
			if _, got, _ := nodeGetsSecret(t, srv, nodeClient, ns, "watched", "0"); len(got) != 1 || got[0] != "1" {
				return fmt.Errorf("v=%v", got)
			}
			return nil
		})
		writeSecret(t, admin, ns, "watched", "2")
		sel := secretsIn(ns, "metadata.name=watched", "")
		sel.Options.SendInitialEvents = ptr.To(true)
		sel.Options.AllowWatchBookmarks = true
		sel.Options.ResourceVersionMatch = metav1.ResourceVersionMatchNotOlderThan
		ch, err := c.Watch(ctx, sel)
		for try := 1; apierrors.IsTimeout(err) && try < 3; try++ {
			t.Logf("refused (%v): a consistent read may be, never answered stale; again", err)
			ch, err = c.Watch(ctx, sel)
		}
		if err != nil {
			t.Fatal(err)
		}
		if ev := nextSeen(t, ch); ev.typ != watch.Added || ev.v != "2" {
			t.Fatalf("initial state %+v, want ADDED with v=2", ev)
		}
	})
	t.Run("a quiet type after writes to another", func(t *testing.T) {
		// kube-apiserver's resourceVersion moves with the configmap; the
		// replica's secrets stay where they were until their next
		// bookmark, a minute away. A probe shows them current.
		confirmedBefore := testserver.Gathered(t, "nodeproxy_bulk_consistent_reads_total", map[string]string{"resource": "secrets", "result": "confirmed"})
		if _, err := admin.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{GenerateName: "moves-"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		code, got, status := consistentGet(t, srv, nodeClient, ns, "watched")
		if code != http.StatusCreated || len(got) != 1 || got[0] != "2" {
			t.Fatalf("the node read %d %v %+v, want v=2", code, got, status)
		}
		if n := testserver.Gathered(t, "nodeproxy_bulk_consistent_reads_total", map[string]string{"resource": "secrets", "result": "confirmed"}) - confirmedBefore; n < 1 {
			t.Errorf("no read of the quiet type was shown current by a probe")
		}
	})
	if got := testserver.Gathered(t, "nodeproxy_bulk_consistent_reads_total", map[string]string{"resource": "secrets"}) - before; got < 4 {
		t.Errorf("nodeproxy_bulk_consistent_reads_total{resource=\"secrets\"} grew by %v, want at least 4", got)
	}
}

// slowQuestions delays the replica's questions for kube-apiserver's
// latest resourceVersion of resource (hub's latestVersions: a list of one
// item) by d, as a loaded kube-apiserver answers a consistent list late;
// every other request goes through untouched.
func slowQuestions(resource string, d time.Duration) transport.WrapperFunc {
	return func(rt http.RoundTripper) http.RoundTripper {
		return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
			q := req.URL.Query()
			if q.Get("limit") == "1" && q.Get("watch") != "true" && strings.HasSuffix(req.URL.Path, "/"+resource) {
				select {
				case <-time.After(d):
				case <-req.Context().Done():
					return nil, req.Context().Err()
				}
			}
			return rt.RoundTrip(req)
		})
	}
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// TestConsistentReadOfAQuietTypeOutlivesABookmarklessProbe: a consistent
// read of a type nobody writes is served even when a probe of the type
// ends without a bookmark. kube-apiserver's watch cache bookmarks a watch
// only at a version past the watch's own, and a probe is due its only
// bookmark a second in; a probe from the version the cache of the type is
// at gets none when nothing has made the cache move past it by then
// (kube-apiserver asks etcd for its progress only while a consistent read
// of the type waits there), and it ends at its timeout. Before, that
// counted as a failed probe: every read waiting on the type, and every
// read arriving in the second after with no probe out, stopped asking and
// waited for the store alone, which a quiet type never moves, and was
// refused with 504 "Too large resource version" when its budget ran out.
// In the failover benchmark, on channels opened on a freshly started
// replica, the probes so ended were the ones the first channels started
// while the cache was still current; the channels refused were waiting
// for a later version (a write to another type) that a probe started
// after it would have shown.
//
// Here the replica's question for kube-apiserver's version comes back
// late (a loaded kube-apiserver), so that the read's own first probe is
// due its bookmark before the question makes kube-apiserver's cache
// move: a question late by anything from the probe's last bookmark tick
// (2.25 s) to a second after the probe's end (4 s) failed the read so.
func TestConsistentReadOfAQuietTypeOutlivesABookmarklessProbe(t *testing.T) {
	const (
		node          = "node-bookmarkless"
		questionDelay = 3100 * time.Millisecond
	)
	// A namespace of its own each run, so that -count=N runs again
	// (the node's pod is created once per namespace).
	ns := fmt.Sprintf("bookmarkless-%d", time.Now().UnixNano())
	ctx := context.Background()
	if err := cp.EnsureNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	testserver.InstallRBAC(t, cp)
	admin := kubernetes.NewForConfigOrDie(cp.AdminConfig())
	podUsing(t, admin, ns, node, secretVolume("quiet"))
	writeSecret(t, admin, ns, "quiet", "1")
	srv := testserver.Start(t, cp, testserver.Options{Configure: func(o *hub.Options) {
		o.KubeTransportWrapper = slowQuestions("secrets", questionDelay)
	}})
	srv.WaitReady(t, 90*time.Second)
	nodeCfg, err := cp.NodeConfig(node)
	if err != nil {
		t.Fatal(err)
	}
	nodeClient := srv.Client(t, nodeCfg)
	// The last change of secrets, which the replica's store and
	// kube-apiserver's watch cache both end at; reads at "0" ask
	// kube-apiserver nothing.
	writeSecret(t, admin, ns, "quiet", "2")
	testserver.Eventually(t, 30*time.Second, "the replica has v=2", func(context.Context) error {
		if _, got, _ := nodeGetsSecret(t, srv, nodeClient, ns, "quiet", "0"); len(got) != 1 || got[0] != "2" {
			return fmt.Errorf("v=%v", got)
		}
		return nil
	})
	// kube-apiserver's version moves past the last change of secrets.
	if _, err := admin.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{GenerateName: "moves-"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// A streaming list from "", as watchmux.Session opens a channel
	// from now (the failover benchmark's).
	c := dialAsNode(t, srv, node)
	sel := secretsIn(ns, "metadata.name=quiet", "")
	sel.Options.SendInitialEvents = ptr.To(true)
	sel.Options.AllowWatchBookmarks = true
	start := time.Now()
	ch, err := c.Watch(ctx, sel)
	if err != nil {
		t.Fatalf("the channel was refused after %s: %v", time.Since(start).Round(time.Millisecond), err)
	}
	if ev := nextSeen(t, ch); ev.typ != watch.Added || ev.v != "2" {
		t.Fatalf("initial state %+v, want ADDED with v=2", ev)
	}
	t.Logf("the channel opened in %s", time.Since(start).Round(time.Millisecond))
}
