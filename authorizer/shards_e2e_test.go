package authorizer_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/nodeproxy/nodeproxy/authorizer"
	"github.com/nodeproxy/nodeproxy/graph"
	"github.com/nodeproxy/nodeproxy/shard"
	"github.com/nodeproxy/nodeproxy/test/testserver"
)

// TestShardedReplicasDecideAsTheInTreeNodeAuthorizer is the parity proof
// with shards: three replicas whose graphs hold disjoint shares of the
// nodes' pods, attachments and slices (each node held by its owner and
// its secondary, by shard.Table), and a fourth that holds no node and
// whose peers are all down, so that it decides everything from
// kube-apiserver's consistent reads. Each is asked the differential's
// questions about every node and must answer as a kube-apiserver running
// the in-tree Node authorizer alone; then again after churn, and again
// once the owner of node0 is lost (its server closed, the table not yet
// changed: the moment before membership notices).
func TestShardedReplicasDecideAsTheInTreeNodeAuthorizer(t *testing.T) {
	ctx := context.Background()
	ref := startNodeAuthorizerControlPlane(t)
	authorizer.RegisterMetrics()
	admin := clientset(t, ref.AdminConfig(), nil)
	// The consistent decisions' reads: no client-side rate limit, as the
	// hub's checks have none (each bounds its own requests); at client-go's
	// default of 5 a second, the fourth replica's thousand lists a round
	// would be minutes of waiting for tokens.
	unlimited := rest.CopyConfig(ref.AdminConfig())
	unlimited.QPS = -1
	source := authorizer.KubeSource(clientset(t, unlimited, nil))

	members := []string{"nodeproxy-0", "nodeproxy-1", "nodeproxy-2"}
	table := shard.NewTable(members)
	urls := map[string]string{}
	var servers []*httptest.Server
	var replicas []*testReplica
	for _, m := range members {
		r := startReplica(t, ctx, ref.AdminConfig(), m, table.Held(m))
		replicas = append(replicas, r)
		servers = append(servers, r.server)
		urls[m] = r.server.URL
	}
	// The fourth: no node held, its peers' addresses those of servers
	// that are gone.
	lonely := startReplica(t, ctx, ref.AdminConfig(), "nodeproxy-3", shard.Set{})
	gone := httptest.NewTLSServer(http.NotFoundHandler())
	gone.Close()
	lonely.shards.Owners = downOwners{gone.URL}
	replicas = append(replicas, lonely)

	client := peerClient(t, servers[0])
	for _, r := range replicas {
		r.shards.Peers.Client = client
		r.shards.Consistent = authorizer.NewConsistent(source, r.graph, 0, 0)
		if r.name != lonely.name {
			r.shards.Owners = tableOwners{table: table, self: r.name, urls: urls}
		}
	}
	for _, n := range []string{"node0", "node1", "node2", "node-x"} {
		r := shard.Range(n)
		t.Logf("%s: owner %s, secondary %s", n, table.Owner(r), table.Secondary(r))
	}

	objs := createVariedWorkload(t, ref, admin)
	compare := func(phase string, asked []*testReplica) {
		t.Helper()
		var answerers []answerer
		for _, r := range asked {
			answerers = append(answerers, answerer{name: r.name, client: client, url: r.server.URL})
		}
		sameAnswers(t, admin, phase, objs.questions(), answerers, 60*time.Second)
	}
	paths := func() map[string]float64 {
		out := map[string]float64{}
		for _, p := range []string{"local", "owner", "secondary", "consistent_list"} {
			out[p] = testserver.Gathered(t, "nodeproxy_authorizer_routed_reviews_total", map[string]string{"path": p})
		}
		out["owner failures"] = testserver.Gathered(t, "nodeproxy_authorizer_peer_failures_total", map[string]string{"peer": "owner"})
		return out
	}
	risen := func(phase string, before map[string]float64, keys ...string) {
		t.Helper()
		after := paths()
		for _, k := range keys {
			if after[k] <= before[k] {
				t.Errorf("%s: %s did not rise (%v): that path was not taken", phase, k, after[k])
			}
		}
		t.Logf("%s: routed local %v, owner %v, secondary %v, consistent list %v; owner failures %v", phase,
			after["local"]-before["local"], after["owner"]-before["owner"], after["secondary"]-before["secondary"],
			after["consistent_list"]-before["consistent_list"], after["owner failures"]-before["owner failures"])
	}

	before := paths()
	compare("initial workload", replicas)
	risen("initial workload", before, "local", "owner", "consistent_list")
	objs.churn(t, admin)
	compare("after churn", replicas)

	// node0's owner lost: whoever does not hold node0 finds its owner
	// down and asks the secondary.
	lost := table.OwnerOf("node0")
	var left []*testReplica
	for _, r := range replicas {
		if r.name == lost {
			r.server.Close()
			continue
		}
		left = append(left, r)
	}
	before = paths()
	compare(lost+" lost", left)
	risen(lost+" lost", before, "secondary", "owner failures")
}

// testReplica is a hub replica reduced to its webhook: a graph fed by
// its own informers with the pods, attachments and slices of the nodes
// it holds (cache.Options.Held's filter, done here with a handler) and
// every PV, served over TLS.
type testReplica struct {
	name   string
	graph  *graph.Graph
	shards *authorizer.Shards
	server *httptest.Server
}

func startReplica(t *testing.T, ctx context.Context, cfg *rest.Config, name string, held shard.Set) *testReplica {
	t.Helper()
	g := graph.New()
	factory := informers.NewSharedInformerFactory(clientset(t, cfg, nil), 0)
	heldOnly := func(h toolscache.ResourceEventHandler) toolscache.ResourceEventHandler {
		keep := func(obj any) bool {
			node := ""
			switch o := obj.(type) {
			case *corev1.Pod:
				node = o.Spec.NodeName
			case *storagev1.VolumeAttachment:
				node = o.Spec.NodeName
			case *resourcev1.ResourceSlice:
				if o.Spec.NodeName != nil {
					node = *o.Spec.NodeName
				}
			}
			return node != "" && held.HasNode(node)
		}
		return toolscache.ResourceEventHandlerFuncs{
			AddFunc: func(obj any) {
				if keep(obj) {
					h.OnAdd(obj, false)
				}
			},
			UpdateFunc: func(old, obj any) {
				if keep(obj) {
					h.OnUpdate(old, obj)
				}
			},
			DeleteFunc: h.OnDelete,
		}
	}
	must := func(_ toolscache.ResourceEventHandlerRegistration, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(factory.Core().V1().Pods().Informer().AddEventHandler(heldOnly(g.PodHandler())))
	must(factory.Storage().V1().VolumeAttachments().Informer().AddEventHandler(heldOnly(g.VolumeAttachmentHandler())))
	must(factory.Resource().V1().ResourceSlices().Informer().AddEventHandler(heldOnly(g.ResourceSliceHandler())))
	must(factory.Core().V1().PersistentVolumes().Informer().AddEventHandler(g.PVHandler()))
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop); factory.Shutdown() })
	factory.Start(stop)
	for typ, ok := range factory.WaitForCacheSync(stop) {
		if !ok {
			t.Fatalf("%s: %v did not sync", name, typ)
		}
	}
	r := &testReplica{name: name, graph: g, shards: &authorizer.Shards{Peers: &authorizer.Peers{Self: name}}}
	mux := http.NewServeMux()
	mux.Handle(authorizer.WebhookPath, &authorizer.Webhook{Authorizer: authorizer.New(g), Shards: r.shards})
	r.server = httptest.NewTLSServer(mux)
	t.Cleanup(r.server.Close)
	return r
}

// peerClient trusts the test servers' certificate (httptest's, the same
// for every server) and outlives any one of them.
func peerClient(t *testing.T, s *httptest.Server) *http.Client {
	pool := x509.NewCertPool()
	pool.AddCert(s.Certificate())
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// tableOwners is what the lead's membership gives a replica: its table.
type tableOwners struct {
	table *shard.Table
	self  string
	urls  map[string]string
}

func (o tableOwners) Holders(node string) (bool, string, string) {
	r := shard.Range(node)
	owner, secondary := o.table.Owner(r), o.table.Secondary(r)
	if owner == o.self || secondary == o.self {
		return true, "", ""
	}
	return false, o.urls[owner], o.urls[secondary]
}

// downOwners holds nothing, and its peers are down.
type downOwners struct{ url string }

func (o downOwners) Holders(string) (bool, string, string) { return false, o.url, o.url }
