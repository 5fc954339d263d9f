package hub_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/nodeproxy/nodeproxy/apis/bulk/v1alpha1"
	"github.com/nodeproxy/nodeproxy/test/testserver"
	"github.com/nodeproxy/nodeproxy/watchmux"
)

// Tests of a client that moves between hub replicas: it resumes every
// channel on the replica it lands on from the last resourceVersion it
// saw (issue 13 item 2, issue 14 item 3).

// startReplica runs one more hub against the test's control plane and
// waits until it is ready.
func startReplica(t testing.TB) *testserver.Server {
	t.Helper()
	srv := testserver.Start(t, cp, testserver.Options{})
	srv.WaitReady(t, 90*time.Second)
	return srv
}

// dialAsAdmin opens a bulk watch connection to srv as the cluster admin
// (authorized by kube-apiserver, not the graph, so that it may watch
// objects no pod uses), closed when the test ends.
func dialAsAdmin(t testing.TB, srv *testserver.Server) *watchmux.Client {
	t.Helper()
	return dialAs(t, srv, cp.AdminConfig())
}

func secretsIn(ns, fieldSelector, rv string) v1alpha1.GetOperation {
	return v1alpha1.GetOperation{
		Resource: metav1.GroupVersionResource{Version: "v1", Resource: "secrets"}, Namespace: ns,
		Options: metav1.ListOptions{FieldSelector: fieldSelector, ResourceVersion: rv},
	}
}

// seen is an event as a test compares it: type, name, data v and
// resourceVersion, or the ERROR's code.
type seen struct {
	typ     watch.EventType
	name, v string
	rv      uint64
	code    int32
}

// nextSeen waits up to 30 s for ch's next event.
func nextSeen(t testing.TB, ch *watchmux.Channel) seen {
	t.Helper()
	select {
	case ev, ok := <-ch.Events:
		if !ok {
			t.Fatal("the channel closed")
		}
		if ev.Type == watch.Error {
			return seen{typ: ev.Type, code: ev.Status.Code}
		}
		var s corev1.Secret
		if err := json.Unmarshal(ev.Object, &s); err != nil {
			t.Fatalf("%s: %v", ev.Type, err)
		}
		rv, _ := strconv.ParseUint(s.ResourceVersion, 10, 64)
		return seen{typ: ev.Type, name: s.Name, v: string(s.Data["v"]), rv: rv}
	case <-time.After(30 * time.Second):
		t.Fatal("no event within 30 s")
		return seen{}
	}
}

// writeSecret creates or updates ns/name with data v=v and returns its
// resourceVersion.
func writeSecret(t testing.TB, admin kubernetes.Interface, ns, name, v string) uint64 {
	t.Helper()
	ctx := context.Background()
	s, err := admin.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		s, err = admin.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string][]byte{"v": []byte(v)}}, metav1.CreateOptions{})
	} else if err == nil {
		s.Data = map[string][]byte{"v": []byte(v)}
		s, err = admin.CoreV1().Secrets(ns).Update(ctx, s, metav1.UpdateOptions{})
	}
	if err != nil {
		t.Fatal(err)
	}
	rv, _ := strconv.ParseUint(s.ResourceVersion, 10, 64)
	return rv
}

// kubeSecretsVersion is kube-apiserver's resourceVersion for secrets now:
// a consistent list's.
func kubeSecretsVersion(t testing.TB, admin kubernetes.Interface, ns string) uint64 {
	t.Helper()
	l, err := admin.CoreV1().Secrets(ns).List(context.Background(), metav1.ListOptions{Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	rv, _ := strconv.ParseUint(l.ResourceVersion, 10, 64)
	return rv
}

// bulkGetSecrets is srv's answer to a bulk get of ns's secrets at rv:
// the status code and the list's resourceVersion, or the Status.
func bulkGetSecrets(t testing.TB, srv *testserver.Server, ns, rv string) (int, uint64, *metav1.Status) {
	t.Helper()
	code, raw, status := postBulkGet(t, srv, srv.Client(t, cp.AdminConfig()), secretsIn(ns, "", rv))
	if status != nil {
		return code, 0, status
	}
	var list metav1.List
	if err := json.Unmarshal(raw, &list); err != nil {
		t.Fatalf("answer %s: %v", raw, err)
	}
	listRV, _ := strconv.ParseUint(list.ResourceVersion, 10, 64)
	return code, listRV, nil
}

// quietBelow writes a configmap (never a secret) and returns
// kube-apiserver's secrets version then, once it is past what srv's
// secrets cache has reached: what a client that was on another replica,
// which had a later secrets bookmark than srv, resumes from. It tries
// again if a bookmark brought srv's cache there meanwhile.
func quietBelow(t testing.TB, srv *testserver.Server, admin kubernetes.Interface, ns string) uint64 {
	t.Helper()
	ctx := context.Background()
	for range 3 {
		if _, err := admin.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{GenerateName: "churn-"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		x := kubeSecretsVersion(t, admin, ns)
		code, cached, status := bulkGetSecrets(t, srv, ns, "0")
		if code != http.StatusCreated {
			t.Fatalf("bulk get: %d %+v", code, status)
		}
		if cached < x {
			return x
		}
		t.Logf("the replica's secrets are at %d, not below kube-apiserver's %d: a bookmark came just now", cached, x)
	}
	t.Fatal("the replica's secrets cache was never below kube-apiserver's version: nothing to test")
	return 0
}

// TestResumeOnAnotherReplica: a channel that was on replica A resumes on
// replica B from the last resourceVersion it saw there and gets every
// later change exactly once, the ones written while it moved included;
// and so it does when B's secrets cache is quiet and below that version
// (B's last secrets bookmark is older than the version), where B must
// neither stall the channel (waiting for a bookmark up to a minute away)
// nor refuse it.
//
// Before this change the second case passed as well (B joined a channel
// ahead of its cache without asking anybody, which is what let a version
// from the future swallow changes: TestResumeFromTheFutureIsRefused); an
// implementation that only waited for B's cache fails it with 504.
func TestResumeOnAnotherReplica(t *testing.T) {
	const ns = "resume-replica"
	ctx := context.Background()
	if err := cp.EnsureNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	testserver.InstallRBAC(t, cp)
	a, b := startReplica(t), startReplica(t)
	admin := kubernetes.NewForConfigOrDie(cp.AdminConfig())
	writeSecret(t, admin, ns, "s", "0")

	onA, err := dialAsAdmin(t, a).Watch(ctx, secretsIn(ns, "metadata.name=s", ""))
	if err != nil {
		t.Fatal(err)
	}
	if e := nextSeen(t, onA); e.typ != watch.Added || e.v != "0" {
		t.Fatalf("on A: %+v, want ADDED v=0", e)
	}
	writeSecret(t, admin, ns, "s", "1")
	last := nextSeen(t, onA)
	if last.typ != watch.Modified || last.v != "1" {
		t.Fatalf("on A: %+v, want MODIFIED v=1", last)
	}
	a.Stop(t) // the client moves: what is written meanwhile must not be lost
	writeSecret(t, admin, ns, "s", "2")

	t.Run("from A's last version", func(t *testing.T) {
		onB, err := dialAsAdmin(t, b).Watch(ctx, secretsIn(ns, "metadata.name=s", strconv.FormatUint(last.rv, 10)))
		if err != nil {
			t.Fatal(err)
		}
		writeSecret(t, admin, ns, "s", "3")
		for _, want := range []string{"2", "3"} {
			if e := nextSeen(t, onB); e.typ != watch.Modified || e.v != want {
				t.Fatalf("on B: %+v, want MODIFIED v=%s (each change once, in order)", e, want)
			}
		}
	})

	t.Run("from a version B's quiet cache has not reached", func(t *testing.T) {
		// B's cache may take in a secrets bookmark between quietBelow and
		// the resume (then it resumes from its log, correctly, but the
		// case is not tested): try again.
		c := dialAsAdmin(t, b)
		for i := range 3 {
			vouched := testserver.Gathered(t, "nodeproxy_bulk_version_waits_total", map[string]string{"result": "vouched"})
			x := quietBelow(t, b, admin, ns)
			onB, err := c.Watch(ctx, secretsIn(ns, "metadata.name=s", strconv.FormatUint(x, 10)))
			if err != nil {
				t.Fatalf("resume from %d: %v", x, err)
			}
			v := strconv.Itoa(4 + i)
			rv := writeSecret(t, admin, ns, "s", v)
			if e := nextSeen(t, onB); e.typ != watch.Modified || e.v != v || e.rv != rv {
				t.Fatalf("on B: %+v, want MODIFIED v=%s at %d", e, v, rv)
			}
			if testserver.Gathered(t, "nodeproxy_bulk_version_waits_total", map[string]string{"result": "vouched"}) > vouched {
				return
			}
			t.Logf("B's cache reached %d before it was asked to; again", x)
		}
		t.Fatal("B's cache always reached the version before the resume: the quiet case was not tested")
	})
}

// TestResumeFromTheFutureIsRefused: a channel resumed from a
// resourceVersion kube-apiserver has not reached is refused with 504
// "Too large resource version" once the replica has waited for it (3 s),
// as kube-apiserver's watch cache answers; so is a bulk get at such a
// version, and at a version kube-apiserver has reached but the replica's
// quiet cache has not: a read at X must hold every change up to X, and
// only the cache reaching X says it does (the node endpoint then asks
// kube-apiserver). A bulk get at a version the cache reaches within the
// wait is answered.
//
// Before this change the channel opened and silently skipped every
// change up to the bogus version (a bulk get already waited and
// answered 504).
func TestResumeFromTheFutureIsRefused(t *testing.T) {
	const ns = "resume-future"
	ctx := context.Background()
	if err := cp.EnsureNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	testserver.InstallRBAC(t, cp)
	srv := startReplica(t)
	admin := kubernetes.NewForConfigOrDie(cp.AdminConfig())
	now := writeSecret(t, admin, ns, "s", "0")
	future := strconv.FormatUint(now+1_000_000, 10)
	tooLarge := func(t *testing.T, status metav1.Status) {
		t.Helper()
		if status.Code != http.StatusGatewayTimeout || status.Reason != metav1.StatusReasonTimeout || status.Details == nil ||
			len(status.Details.Causes) != 1 || status.Details.Causes[0].Type != metav1.CauseTypeResourceVersionTooLarge {
			t.Errorf("status %+v, want 504 Timeout with cause ResourceVersionTooLarge", status)
		}
	}

	t.Run("a channel", func(t *testing.T) {
		before := testserver.Gathered(t, "nodeproxy_bulk_version_waits_total", map[string]string{"request": "resume", "resource": "secrets", "result": "too_large"})
		ch, err := dialAsAdmin(t, srv).Watch(ctx, secretsIn(ns, "metadata.name=s", future))
		var status *apierrors.StatusError
		if !errors.As(err, &status) {
			t.Fatalf("resume from %s: channel %v, error %v; want 504 Too large resource version", future, ch, err)
		}
		tooLarge(t, status.ErrStatus)
		if got := testserver.Gathered(t, "nodeproxy_bulk_version_waits_total", map[string]string{"request": "resume", "resource": "secrets", "result": "too_large"}) - before; got != 1 {
			t.Errorf("nodeproxy_bulk_version_waits_total{request=resume,result=too_large} grew by %v, want 1", got)
		}
	})
	t.Run("a bulk get from the future", func(t *testing.T) {
		code, _, status := bulkGetSecrets(t, srv, ns, future)
		if code != http.StatusGatewayTimeout || status == nil {
			t.Fatalf("bulk get at %s: %d, want 504", future, code)
		}
		tooLarge(t, *status)
	})
	t.Run("a bulk get at a version the quiet cache has not reached", func(t *testing.T) {
		x := quietBelow(t, srv, admin, ns)
		code, _, status := bulkGetSecrets(t, srv, ns, strconv.FormatUint(x, 10))
		if code != http.StatusGatewayTimeout || status == nil {
			t.Fatalf("bulk get at %d: %d, want 504", x, code)
		}
		tooLarge(t, *status)
	})
	t.Run("a bulk get at a version the cache reaches", func(t *testing.T) {
		rv := writeSecret(t, admin, ns, "s", "1")
		code, listRV, status := bulkGetSecrets(t, srv, ns, strconv.FormatUint(rv, 10))
		if code != http.StatusCreated || listRV < rv {
			t.Fatalf("bulk get at %d: %d, list at %d, %+v", rv, code, listRV, status)
		}
	})
}

// TestNamedChannelResumesOnAFreshReplica: a replica started after its
// client saw resourceVersion X has no change log back to X. A channel
// naming one object, resumed there from X, gets that object's state as
// at most one event instead of 410 and a relist: nothing for an object
// unchanged since X, MODIFIED with the current object for one changed
// since, DELETED for one deleted since; then each later change once. A
// channel that does not name one object still gets ERROR 410.
//
// Before this change every one of them got ERROR 410.
func TestNamedChannelResumesOnAFreshReplica(t *testing.T) {
	const ns = "resume-fresh"
	ctx := context.Background()
	if err := cp.EnsureNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	testserver.InstallRBAC(t, cp)
	admin := kubernetes.NewForConfigOrDie(cp.AdminConfig())
	for _, name := range []string{"same", "newer", "gone"} {
		writeSecret(t, admin, ns, name, "0")
	}
	x := strconv.FormatUint(kubeSecretsVersion(t, admin, ns), 10)
	newer := writeSecret(t, admin, ns, "newer", "1")
	if err := admin.CoreV1().Secrets(ns).Delete(ctx, "gone", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	srv := startReplica(t) // its change log starts after x
	c := dialAsAdmin(t, srv)
	before := testserver.Gathered(t, "nodeproxy_bulk_watch_resumes_total", map[string]string{"how": "current_state"})
	open := func(fieldSelector string) *watchmux.Channel {
		ch, err := c.Watch(ctx, secretsIn(ns, fieldSelector, x))
		if err != nil {
			t.Fatal(err)
		}
		return ch
	}
	same, changed, gone, all := open("metadata.name=same"), open("metadata.name=newer"), open("metadata.name=gone"), open("")

	if e := nextSeen(t, changed); e.typ != watch.Modified || e.v != "1" || e.rv != newer {
		t.Errorf("changed since: %+v, want MODIFIED v=1 at %d", e, newer)
	}
	if e := nextSeen(t, gone); e.typ != watch.Deleted || e.name != "gone" {
		t.Errorf("deleted since: %+v, want DELETED gone", e)
	}
	if e := nextSeen(t, all); e.typ != watch.Error || e.code != http.StatusGone {
		t.Errorf("all of the namespace: %+v, want ERROR 410", e)
	}
	rv := writeSecret(t, admin, ns, "same", "2")
	if e := nextSeen(t, same); e.typ != watch.Modified || e.v != "2" || e.rv != rv {
		t.Errorf("unchanged since: first %+v, want the next change, MODIFIED v=2 at %d", e, rv)
	}
	rv = writeSecret(t, admin, ns, "newer", "3")
	if e := nextSeen(t, changed); e.typ != watch.Modified || e.v != "3" || e.rv != rv {
		t.Errorf("changed since, then again: %+v, want MODIFIED v=3 at %d", e, rv)
	}
	if got := testserver.Gathered(t, "nodeproxy_bulk_watch_resumes_total", map[string]string{"how": "current_state"}) - before; got != 3 {
		t.Errorf("nodeproxy_bulk_watch_resumes_total{how=current_state} grew by %v, want 3", got)
	}
}
