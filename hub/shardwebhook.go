package hub

import (
	"fmt"
	"math"
	"strconv"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	restclient "k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/nodeproxy/nodeproxy/authorizer"
	"github.com/nodeproxy/nodeproxy/cache"
	"github.com/nodeproxy/nodeproxy/graph"
	"github.com/nodeproxy/nodeproxy/shard"
)

// shardOwners answers the webhook's question, for a node: does this
// replica's graph have every pod of it, and if not, which replicas'
// do (authorizer.Owners).
type shardOwners struct {
	members            *Membership
	pods               *cache.Store
	service, namespace string
	port               int
}

// Holders: held once the table gives the node's range to this replica
// and its cache has taken the range in (an acquisition finished,
// HeldSince), not before: a range still being listed has a graph
// without its pods. Otherwise the owner and the secondary, the ready
// one first, so that a review about a node whose owner is down goes
// first to the replica that serves it.
func (o shardOwners) Holders(node string) (held bool, owner, secondary string) {
	if o.members.Holds(node) && o.pods.HeldSince(node) != math.MaxUint64 {
		return true, "", ""
	}
	t := o.members.Table()
	r := shard.Range(node)
	first, second := t.Owner(r), t.Secondary(r)
	if !o.members.Ready(first) && o.members.Ready(second) {
		first, second = second, first
	}
	return false, o.url(first), o.url(second)
}

func (o shardOwners) url(member string) string {
	if member == "" || member == o.members.Self() {
		return ""
	}
	return "https://" + shard.Host(member, o.service, o.namespace) + ":" + strconv.Itoa(o.port)
}

// shardedWebhook is what the authorization webhook of a sharded replica
// needs to answer for nodes it does not hold: the membership's owners,
// a client of the other replicas (this replica's own credentials, their
// serving CA; none without --shard-peer-ca-file), and kube-apiserver's
// consistent list of a node's pods.
func shardedWebhook(c *Config, m *Membership, objects *cache.Cache, g *graph.Graph) (*authorizer.Shards, error) {
	// No client-side rate limit: Consistent bounds its own lists (at
	// most DefaultConsistentMaxConcurrent at once), as the refresher's
	// metadata client does.
	kube := restclient.CopyConfig(c.Kube)
	kube.QPS = -1
	kube.ContentType = runtime.ContentTypeProtobuf
	client, err := kubernetes.NewForConfig(kube)
	if err != nil {
		return nil, fmt.Errorf("client for the webhook's lists of a node's pods: %w", err)
	}
	s := &authorizer.Shards{
		Owners:     shardOwners{members: m, pods: objects.Store(podsResource), service: c.Shard.Service, namespace: c.Shard.Namespace, port: c.ShardPort},
		Consistent: authorizer.NewConsistent(authorizer.KubeSource(client), g, 0, 0),
	}
	if c.Shard.PeerCAFile == "" {
		klog.InfoS("No --shard-peer-ca-file: the webhook decides for nodes other replicas hold from kube-apiserver's list of their pods, not by asking those replicas")
		return s, nil
	}
	peer := restclient.CopyConfig(c.Kube)
	peer.TLSClientConfig.CAData, peer.TLSClientConfig.CAFile = nil, c.Shard.PeerCAFile
	peer.TLSClientConfig.ServerName = ""
	if c.Shard.PeerDial != nil {
		peer.Dial = c.Shard.PeerDial
	}
	hc, err := restclient.HTTPClientFor(peer)
	if err != nil {
		return nil, fmt.Errorf("client of the other replicas (--shard-peer-ca-file %s): %w", c.Shard.PeerCAFile, err)
	}
	s.Peers = &authorizer.Peers{Client: hc, Self: m.Self()}
	return s, nil
}
