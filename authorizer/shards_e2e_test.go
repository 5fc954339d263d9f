package authorizer_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"

	"github.com/nodeproxy/nodeproxy/authorizer"
	"github.com/nodeproxy/nodeproxy/cache"
	"github.com/nodeproxy/nodeproxy/graph"
	"github.com/nodeproxy/nodeproxy/hub"
	"github.com/nodeproxy/nodeproxy/shard"
	"github.com/nodeproxy/nodeproxy/test/testserver"
)

// TestShardedReplicasDecideAsTheInTreeNodeAuthorizer is the parity proof
// with shards: three replicas, each caching the pods, Nodes, attachments
// and slices of the nodes it owns or holds warm by shard.Table (so each
// node is on two of them, and one's graph lacks it), and a fourth that holds no node and
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
	// The agreement is not a graph that holds everything: each replica's
	// has the pods of the nodes it holds, and no other.
	for _, r := range replicas {
		for _, o := range objs.namespaced["pods"] {
			pod := o.(*corev1.Pod)
			if pod.Spec.NodeName == "" {
				continue
			}
			ref := graph.ObjectRef{Kind: graph.Pod, Namespace: pod.Namespace, Name: pod.Name}
			if has, held := r.graph.Reachable(pod.Spec.NodeName, ref), r.held.HasNode(pod.Spec.NodeName); has != held {
				t.Errorf("%s's graph has pod %s/%s of %s: %v; it holds that node: %v", r.name, pod.Namespace, pod.Name, pod.Spec.NodeName, has, held)
			}
		}
	}
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

// testReplica is a hub replica reduced to its webhook: a sharded cache
// (cache.Options.Held: the pods, Nodes, attachments and slices of the
// nodes it holds, everything else whole) feeding its graph, served over
// TLS.
type testReplica struct {
	name   string
	held   shard.Set
	graph  *graph.Graph
	shards *authorizer.Shards
	server *httptest.Server
}

func startReplica(t *testing.T, ctx context.Context, cfg *rest.Config, name string, held shard.Set) *testReplica {
	t.Helper()
	// As the hub builds its cache (protobuf, as the pods are kept) and
	// feeds its graph from it.
	pb := rest.CopyConfig(cfg)
	pb.ContentType = runtime.ContentTypeProtobuf
	pb.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	objects, err := cache.New(clientset(t, pb, nil), cache.Options{
		LogSize: cache.DefaultLogSize, EncodedEntries: cache.DefaultEncodedEntries, Held: &held,
	})
	if err != nil {
		t.Fatal(err)
	}
	g := graph.New()
	if err := hub.FeedGraph(objects, g); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(ctx)
	objects.Start(ctx)
	t.Cleanup(func() { cancel(); objects.Wait() })
	testserver.Eventually(t, 60*time.Second, name+"'s cache listed", func(context.Context) error {
		if missing := objects.Unsynced(); len(missing) > 0 {
			return fmt.Errorf("not yet listed: %v", missing)
		}
		return nil
	})
	r := &testReplica{name: name, held: held, graph: g, shards: &authorizer.Shards{Peers: &authorizer.Peers{Self: name}}}
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
