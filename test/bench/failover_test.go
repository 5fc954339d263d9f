package bench

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/nodeproxy/nodeproxy/apis/bulk/v1alpha1"
	"github.com/nodeproxy/nodeproxy/test/controlplane"
	"github.com/nodeproxy/nodeproxy/test/forwarder"
	"github.com/nodeproxy/nodeproxy/watchmux"
)

// TestFailoverLosesNothing runs the failover scenario small, against real
// hub processes: every client on replica a, a killed or stopped under
// writes, the clients resumed on b; and the rolling restart under kubelet
// watches through node endpoints (processes). Every channel must receive
// every write once, resume from where it was, and (b having run since
// before the clients came) never need a relist; no kubelet watch may end
// or go to kube-apiserver.
func TestFailoverLosesNothing(t *testing.T) {
	np := startNodeproxy(t)
	target := localTarget(t, np)
	kube, err := kubernetes.NewForConfig(target.Admin)
	if err != nil {
		t.Fatal(err)
	}
	load := FailoverLoad{Conns: 3, Channels: 4, WriteRate: 20, Settle: 1500 * time.Millisecond}
	for _, kind := range []failoverKind{failKill, failTerm, failEndpoints} {
		t.Run(string(kind), func(t *testing.T) {
			var log strings.Builder
			env := &Env{Failover: load, Progress: &log}
			ctx := context.Background()
			names, err := createFailoverSecrets(ctx, env, kube, load.Conns*load.Channels)
			if err != nil {
				t.Fatal(err)
			}
			out, err := runFailoverOnce(ctx, env, target.Local, kube, names, kind)
			if err != nil {
				t.Fatalf("%v\nprogress:\n%s", err, log.String())
			}
			t.Logf("%+v", *out)
			if out.writes == 0 {
				t.Fatal("nothing was written")
			}
			if out.lost != 0 || out.duplicated != 0 {
				t.Errorf("%d events lost, %d duplicated over %d writes, want none", out.lost, out.duplicated, out.writes)
			}
			if out.strange > out.writeFailures {
				t.Errorf("%d events of writes never made (%d writes failed, whose events may come)", out.strange, out.writeFailures)
			}
			if out.expired != 0 || out.otherErrors != 0 || out.lostInitial != 0 {
				t.Errorf("channels ended: %d with 410, %d otherwise, %d during their initial events; want none", out.expired, out.otherErrors, out.lostInitial)
			}
			if kind != failEndpoints {
				if out.resumed != out.channels {
					t.Errorf("%d of %d channels resumed, want every one", out.resumed, out.channels)
				}
				return
			}
			// Both replicas were replaced: every endpoint moved at least
			// once (its one channel, the node view its copy follows), and
			// none of its kubelet's watches noticed.
			if out.resumed < load.Conns {
				t.Errorf("%d channels carried over for %d endpoints, want at least one each", out.resumed, load.Conns)
			}
			if out.watchRestarts != 0 || out.apiserverWatches != 0 {
				t.Errorf("kubelet watches: %d ended and watched again, %d opened on kube-apiserver; want none", out.watchRestarts, out.apiserverWatches)
			}
		})
	}
}

// TestFailoverToAFreshReplicaSays410 moves a channel to a replica started
// after the channel's last resourceVersion: its change log begins later,
// so it cannot continue the channel, and the consumer must hear so (ERROR
// 410, then the channel closes), never a silent gap. The channel watches
// a namespace (not one name), whose resume point no replica can
// reconstruct from its current state.
func TestFailoverToAFreshReplicaSays410(t *testing.T) {
	ctx := context.Background()
	np := startNodeproxy(t)
	target := localTarget(t, np)
	kube, err := kubernetes.NewForConfig(target.Admin)
	if err != nil {
		t.Fatal(err)
	}
	const ns = "bench-failover-410"
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	fwd, err := forwarder.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer fwd.Close()
	rs := &replicas{fwd: fwd, hub: np, live: map[string]*controlplane.Nodeproxy{}}
	defer rs.stopAll()
	old, err := rs.start(ctx, "failover-old")
	if err != nil {
		t.Fatal(err)
	}
	fwd.SetBackends(addrOf(old))

	resumes := make(chan watchmux.Resume, 1)
	cfg := &rest.Config{Host: "https://" + fwd.Addr(), TLSClientConfig: rest.TLSClientConfig{
		CAFile: np.Files.CA, CertFile: np.Files.AdminCert, KeyFile: np.Files.AdminKey,
	}}
	s, err := watchmux.NewSession(ctx, cfg, watchmux.WithResumeObserver(func(r watchmux.Resume) { resumes <- r }))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ch, err := s.Watch(ctx, v1alpha1.GetOperation{
		Resource: metav1.GroupVersionResource{Version: "v1", Resource: "secrets"}, Namespace: ns,
		Options: metav1.ListOptions{SendInitialEvents: ptr.To(true), AllowWatchBookmarks: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, ch, watch.Bookmark) // the initial state's end: the channel's resume point

	// A secret elsewhere moves the secrets' resourceVersion past the
	// channel's before the fresh replica lists them.
	other := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{GenerateName: "elsewhere-", Namespace: "default"}}
	if _, err := kube.CoreV1().Secrets("default").Create(ctx, other, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	fresh, err := rs.start(ctx, "failover-fresh")
	if err != nil {
		t.Fatal(err)
	}
	fwd.SetBackends(addrOf(fresh))
	rs.stop("failover-old", failKill)

	ev := waitFor(t, ch, watch.Error)
	if ev.Status.Code != http.StatusGone {
		t.Fatalf("the channel ended with %d %s, want 410", ev.Status.Code, ev.Status.Message)
	}
	if _, open := <-ch.Events; open {
		t.Error("the channel's Events stayed open after its ERROR")
	}
	select {
	case r := <-resumes:
		if r.Outcome != watchmux.ResumeReopened {
			t.Errorf("resume outcome %s, want %s (then the 410)", r.Outcome, watchmux.ResumeReopened)
		}
	default:
		t.Error("no resume was observed")
	}
}

// waitFor reads ch until an event of type typ, which it returns; any other
// ERROR, or a channel closing first, fails the test.
func waitFor(t *testing.T, ch *watchmux.SessionChannel, typ watch.EventType) watchmux.Event {
	t.Helper()
	timeout := time.After(time.Minute)
	for {
		select {
		case ev, ok := <-ch.Events:
			switch {
			case !ok:
				t.Fatalf("the channel closed before a %s", typ)
			case ev.Type == typ:
				return ev
			case ev.Type == watch.Error:
				t.Fatalf("the channel ended with %d %s before a %s", ev.Status.Code, ev.Status.Message, typ)
			}
		case <-timeout:
			t.Fatalf("no %s within a minute", typ)
		}
	}
}
