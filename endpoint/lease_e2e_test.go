package endpoint_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"k8s.io/component-helpers/apimachinery/lease"
	"k8s.io/utils/clock"

	"github.com/nodeproxy/nodeproxy/test/testserver"
)

const (
	leaseGets       = `nodeproxy_node_requests_total{path="apiserver",resource="leases",verb="get"}`
	leaseFromMemory = `nodeproxy_node_requests_total{path="memory",resource="leases",verb="get"}`
	leaseConflicts  = `nodeproxy_node_lease_forgets_total{reason="conflict"}`
)

// runLeaseController runs the kubelet's lease controller (the code the
// kubelet runs, renewing every second rather than every 10 s) through
// n's endpoint until the returned stop is called: a kubelet's start and
// stop, as far as its Lease goes. Its client is the kubelet's heartbeat
// client: the kubelet's with a timeout, which client-go sends as a
// query parameter of every request.
func runLeaseController(n *node) (stop func()) {
	heartbeat := rest.CopyConfig(n.kubelet)
	heartbeat.Timeout = 10 * time.Second
	kubelet := kubernetes.NewForConfigOrDie(heartbeat)
	c := lease.NewController(clock.RealClock{}, kubelet, n.name, 40, nil, time.Second, n.name, corev1.NamespaceNodeLease, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.Run(ctx)
	}()
	return func() {
		cancel()
		<-done
	}
}

// TestKubeletRestartReadsItsLeaseFromTheEndpoint runs the kubelet's lease
// controller through an endpoint, stops it and starts it again, as a
// kubelet restart does: the restarted controller's get of its Lease is
// answered from the endpoint's memory of it, equal to kube-apiserver's,
// and no read of it leaves the node. An administrator's write of the
// Lease behind the endpoint's back shows at the next renewal as a
// conflict; the controller's get after it goes to kube-apiserver, and
// the memory is kube-apiserver's Lease again.
func TestKubeletRestartReadsItsLeaseFromTheEndpoint(t *testing.T) {
	hub := startHub(t)
	n := startNode(t, "node-lease", hub.URL)
	ctx := context.Background()
	kubelet := kubernetes.NewForConfigOrDie(n.kubelet)
	admin := kubernetes.NewForConfigOrDie(cp.AdminConfig())
	leases := admin.CoordinationV1().Leases(corev1.NamespaceNodeLease)

	// The metrics are the process's, which other tests count in too.
	fromMemory, conflicts := counter(t, n, leaseFromMemory), counter(t, n, leaseConflicts)

	// The first start: no Lease yet, the get is kube-apiserver's 404,
	// then the controller creates it and renews it.
	stop := runLeaseController(n)
	first := renewals(t, leases, n.name, "", 2)
	stop()
	if got := counter(t, n, leaseFromMemory); got != fromMemory {
		t.Errorf("%s %v -> %v before any restart: the first get finds no Lease", leaseFromMemory, fromMemory, got)
	}

	// What a get through the endpoint answers is kube-apiserver's Lease.
	gets := counter(t, n, leaseGets)
	sameLease(t, kubelet, leases, n.name)
	if got := counter(t, n, leaseFromMemory); got != fromMemory+1 {
		t.Fatalf("%s %v -> %v after a get, want one more", leaseFromMemory, fromMemory, got)
	}

	// The restart: its get from memory, its renewals go on from it.
	stop = runLeaseController(n)
	renewals(t, leases, n.name, first.ResourceVersion, 2)
	if got := counter(t, n, leaseGets); got != gets {
		t.Errorf("the restarted controller's get left the node: %s %v -> %v", leaseGets, gets, got)
	}
	if got := counter(t, n, leaseFromMemory); got != fromMemory+2 {
		t.Errorf("%s %v -> %v after the restart, want two more", leaseFromMemory, fromMemory, got)
	}
	if got := counter(t, n, leaseConflicts); got != conflicts {
		t.Errorf("%s %v -> %v: the memory was not kube-apiserver's Lease", leaseConflicts, conflicts, got)
	}

	// An administrator writes the Lease behind the endpoint's back.
	var written *coordinationv1.Lease
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		l, err := leases.Get(ctx, n.name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		metav1.SetMetaDataAnnotation(&l.ObjectMeta, "example.com/admin", "was-here")
		written, err = leases.Update(ctx, l, metav1.UpdateOptions{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	testserver.Eventually(t, 30*time.Second, "the renewal after the administrator's write conflicts, and the controller gets the Lease from kube-apiserver", func(context.Context) error {
		if got := counter(t, n, leaseConflicts); got <= conflicts {
			return fmt.Errorf("%s = %v", leaseConflicts, got)
		}
		if got := counter(t, n, leaseGets); got <= gets {
			return fmt.Errorf("%s = %v: no get went to kube-apiserver", leaseGets, got)
		}
		return nil
	})
	renewed := renewals(t, leases, n.name, written.ResourceVersion, 1)
	stop()
	if renewed.Annotations["example.com/admin"] != "was-here" {
		t.Errorf("the controller renewed a Lease without the administrator's annotation: %v", renewed.Annotations)
	}
	fromMemory = counter(t, n, leaseFromMemory)
	got := sameLease(t, kubelet, leases, n.name)
	if got.Annotations["example.com/admin"] != "was-here" {
		t.Errorf("the endpoint's Lease lacks the administrator's annotation: %v", got.Annotations)
	}
	if after := counter(t, n, leaseFromMemory); after != fromMemory+1 {
		t.Errorf("the get after the renewal was not answered from memory: %s %v -> %v", leaseFromMemory, fromMemory, after)
	}
}

// renewals waits until kube-apiserver's Lease of node has been written
// times times since version since ("": since it did not exist), and
// returns it.
func renewals(t *testing.T, leases interface {
	Get(context.Context, string, metav1.GetOptions) (*coordinationv1.Lease, error)
}, node, since string, times int) *coordinationv1.Lease {
	t.Helper()
	var seen []string
	var last *coordinationv1.Lease
	testserver.Eventually(t, 30*time.Second, fmt.Sprintf("%d renewals of the Lease after version %q", times, since), func(ctx context.Context) error {
		l, err := leases.Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if l.ResourceVersion != since && (len(seen) == 0 || seen[len(seen)-1] != l.ResourceVersion) {
			seen = append(seen, l.ResourceVersion)
		}
		last = l
		if len(seen) < times {
			return fmt.Errorf("versions since: %v", seen)
		}
		return nil
	})
	return last
}

// sameLease gets node's Lease through the endpoint as its kubelet and
// from kube-apiserver, checks they are one, and returns it.
func sameLease(t *testing.T, kubelet kubernetes.Interface, leases interface {
	Get(context.Context, string, metav1.GetOptions) (*coordinationv1.Lease, error)
}, node string) *coordinationv1.Lease {
	t.Helper()
	ctx := context.Background()
	got, err := kubelet.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want, err := leases.Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got.TypeMeta, want.TypeMeta = metav1.TypeMeta{}, metav1.TypeMeta{}
	if !apiequality.Semantic.DeepEqual(got, want) {
		t.Fatalf("the endpoint's Lease is not kube-apiserver's:\n got %+v\nwant %+v", got, want)
	}
	return got
}

// TestOfflineLeaseGetGoesToKubeAPIServer: while the node reaches neither
// the hub nor kube-apiserver, the kubelet's get of its Lease is not
// answered from the endpoint's memory (the renewal after it could not
// succeed): it fails as kube-apiserver's would, and the memory is
// forgotten. After the outage the get is kube-apiserver's.
func TestOfflineLeaseGetGoesToKubeAPIServer(t *testing.T) {
	hub := startHub(t)
	o := newOutage(t, hub.URL)
	const name = "node-lease-offline"
	kp, err := cp.ClientCA.ClientCert("system:node:"+name, []string{"system:nodes"}, "", "")
	if err != nil {
		t.Fatal(err)
	}
	n := startNodeWith(t, name, nodeSpec{apiServer: "https://" + o.api.Addr(), hub: "https://" + o.hub.Addr(), kubelet: kp})
	admin := kubernetes.NewForConfigOrDie(cp.AdminConfig())
	leases := admin.CoordinationV1().Leases(corev1.NamespaceNodeLease)
	stop := runLeaseController(n)
	renewals(t, leases, name, "", 2)
	stop()

	const offline = `nodeproxy_node_lease_forgets_total{reason="offline"}`
	fromMemory, forgotten := counter(t, n, leaseFromMemory), counter(t, n, offline)
	o.begin()
	testserver.Eventually(t, 60*time.Second, "/readyz says the node is offline", func(context.Context) error {
		if code, body := get(t, n.metrics+"/readyz", ""); code != 200 || !strings.Contains(body, "offline") {
			return fmt.Errorf("/readyz %d %q", code, body)
		}
		return nil
	})
	kubelet := kubernetes.NewForConfigOrDie(n.kubelet)
	ctx := context.Background()
	if _, err := kubelet.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, name, metav1.GetOptions{}); err == nil {
		t.Fatal("the Lease was read offline")
	}
	if got := counter(t, n, leaseFromMemory); got != fromMemory {
		t.Errorf("%s %v -> %v: answered from memory offline", leaseFromMemory, fromMemory, got)
	}
	if got := counter(t, n, offline); got != forgotten+1 {
		t.Errorf("%s %v -> %v, want one more", offline, forgotten, got)
	}

	o.end()
	gets := counter(t, n, leaseGets)
	testserver.Eventually(t, 60*time.Second, "the Lease from kube-apiserver after the outage", func(ctx context.Context) error {
		_, err := kubelet.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, name, metav1.GetOptions{})
		return err
	})
	if got := counter(t, n, leaseGets); got <= gets {
		t.Errorf("%s %v -> %v: the get after the outage did not go to kube-apiserver", leaseGets, gets, got)
	}
	if got := counter(t, n, leaseFromMemory); got != fromMemory {
		t.Errorf("%s %v -> %v: answered from a memory forgotten offline", leaseFromMemory, fromMemory, got)
	}
}
