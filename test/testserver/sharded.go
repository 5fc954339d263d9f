package testserver

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/nodeproxy/nodeproxy/hub"
	"github.com/nodeproxy/nodeproxy/shard"
	"github.com/nodeproxy/nodeproxy/test/controlplane"
)

// ShardedService is the headless Service StartSharded's replicas share.
const ShardedService = "nodeproxy-shards"

// Sharded is hub replicas of one headless Service (--shard-service),
// each serving on its own port of 127.0.0.1, and reached by their stable
// names through Dial, which stands in for the cluster's DNS: a replica's
// name goes to its port whatever port the address names (replicas share
// one in production, so a redirect names the redirecting replica's), and
// the Service's own name to one replica (Behind), as a Service picks one.
// The harness runs no EndpointSlice controller: the Service's one
// EndpointSlice is made by hand, each endpoint with its hostname and
// ready (SetReady).
type Sharded struct {
	Namespace string
	Servers   map[string]*Server // by member

	cp     *controlplane.ControlPlane
	mu     sync.Mutex
	addr   map[string]string // guarded by mu: stable name -> 127.0.0.1:port
	behind atomic.Value      // the member the Service's name reaches
	slice  *discoveryv1.EndpointSlice
}

// Host is member's stable name.
func (s *Sharded) Host(member string) string { return shard.Host(member, ShardedService, s.Namespace) }

// ServiceHost is the Service's own name, which nodes dial.
func (s *Sharded) ServiceHost() string { return ShardedService + "." + s.Namespace + ".svc" }

// ServiceURL is the address nodes are given for the hub.
func (s *Sharded) ServiceURL() string { return "https://" + s.ServiceHost() + ":443" }

// Behind makes the Service's name reach member.
func (s *Sharded) Behind(member string) { s.behind.Store(s.Host(member)) }

// Dial is a rest.Config's Dial that reaches the replicas by name.
func (s *Sharded) Dial(ctx context.Context, network, address string) (net.Conn, error) {
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		return nil, err
	}
	if host == s.ServiceHost() {
		host = s.behind.Load().(string)
	}
	s.mu.Lock()
	to, ok := s.addr[host]
	s.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("no replica is named %s", host)
	}
	return (&net.Dialer{}).DialContext(ctx, network, to)
}

// SetReady marks member's endpoint ready or not, as the EndpointSlice
// controller does when its readiness changes.
func (s *Sharded) SetReady(t testing.TB, member string, ready bool) {
	t.Helper()
	for i := range s.slice.Endpoints {
		if *s.slice.Endpoints[i].Hostname == member {
			s.slice.Endpoints[i].Conditions.Ready = new(ready)
		}
	}
	admin := kubernetes.NewForConfigOrDie(s.cp.AdminConfig())
	updated, err := admin.DiscoveryV1().EndpointSlices(s.Namespace).Update(context.Background(), s.slice, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s.slice = updated
}

// StartSharded runs one hub replica per member, of a headless Service in
// ns whose EndpointSlice lists them all ready, and waits until each is
// ready; the Service's name reaches the first member. The serving
// certificates cover the replicas' stable names and the Service's.
func StartSharded(t testing.TB, cp *controlplane.ControlPlane, ns string, members ...string) *Sharded {
	t.Helper()
	ctx := context.Background()
	s := &Sharded{Namespace: ns, Servers: map[string]*Server{}, cp: cp, addr: map[string]string{}}
	if err := cp.EnsureNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	admin := kubernetes.NewForConfigOrDie(cp.AdminConfig())
	if _, err := admin.CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: ShardedService},
		Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Selector: map[string]string{"app": "nodeproxy"},
			Ports: []corev1.ServicePort{{Name: "https", Port: 443}}},
	}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: ShardedService + "-1", Labels: map[string]string{discoveryv1.LabelServiceName: ShardedService}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: new("https"), Port: new(int32(443))}},
	}
	for i, m := range members {
		slice.Endpoints = append(slice.Endpoints, discoveryv1.Endpoint{Addresses: []string{"10.0.0." + strconv.Itoa(i+1)},
			Hostname: new(m), Conditions: discoveryv1.EndpointConditions{Ready: new(true)}})
	}
	created, err := admin.DiscoveryV1().EndpointSlices(ns).Create(ctx, slice, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s.slice = created
	t.Cleanup(func() {
		_ = admin.DiscoveryV1().EndpointSlices(ns).Delete(context.Background(), created.Name, metav1.DeleteOptions{})
	})

	// The webhook's role, bound to the replicas' own identity as the
	// sharded overlay binds it, so that they may forward reviews.
	InstallRBAC(t, cp, "rbac-webhook.yaml")
	root, err := controlplane.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	if err := cp.ApplyFiles(ctx, filepath.Join(root, "manifests", "overlays", "sharded", "rbac-peers.yaml")); err != nil {
		t.Fatal(err)
	}
	for _, m := range members {
		s.start(t, m)
	}
	for _, srv := range s.Servers {
		srv.WaitReady(t, 90*time.Second)
	}
	s.Behind(members[0])
	return s
}

// start runs member's replica.
func (s *Sharded) start(t testing.TB, m string) *Server {
	srv := Start(t, s.cp, Options{
		// The replicas forward reviews to each other (the webhook),
		// verified with the CA of their serving certificates and
		// reached through Dial.
		Args: []string{"--shard-service=" + ShardedService, "--shard-member=" + m, "--shard-namespace=" + s.Namespace,
			"--shard-peer-ca-file=" + s.cp.ServingCA.CertPath},
		ServingNames: []string{s.Host(m), s.ServiceHost()},
		Configure:    func(o *hub.Options) { o.Shard.PeerDial = s.Dial },
	})
	s.mu.Lock()
	s.addr[s.Host(m)] = strings.TrimPrefix(srv.URL, "https://")
	s.mu.Unlock()
	s.Servers[m] = srv
	return srv
}

// Add runs one more replica, a StatefulSet scaled up: it starts outside
// the EndpointSlice (listing its share of the nodes as it starts), and
// once ready its endpoint is added, ready, as the EndpointSlice
// controller adds it; the other replicas then make a new table.
func (s *Sharded) Add(t testing.TB, member string) {
	t.Helper()
	s.start(t, member).WaitReady(t, 90*time.Second)
	s.slice.Endpoints = append(s.slice.Endpoints, discoveryv1.Endpoint{Addresses: []string{"10.0.1." + strconv.Itoa(len(s.slice.Endpoints)+1)},
		Hostname: new(member), Conditions: discoveryv1.EndpointConditions{Ready: new(true)}})
	admin := kubernetes.NewForConfigOrDie(s.cp.AdminConfig())
	updated, err := admin.DiscoveryV1().EndpointSlices(s.Namespace).Update(context.Background(), s.slice, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s.slice = updated
}

// NodeOwnedBy is a node name, of prefix and a number, that a table of
// members gives to member.
func NodeOwnedBy(prefix, member string, members ...string) string {
	table := shard.NewTable(members)
	for i := 0; ; i++ {
		if n := prefix + strconv.Itoa(i); table.OwnerOf(n) == member {
			return n
		}
	}
}
