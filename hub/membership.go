package hub

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/nodeproxy/nodeproxy/shard"
)

// Membership follows the hub's replicas, the endpoints of the headless
// Service's EndpointSlices, and publishes the shard.Table they make:
// which replica owns, and which holds warm, which node
// (docs/architecture.md, "Sharding").
//
//	List (once, before the cache) --+
//	                                 +--> slices --signal--> Run: Table and ready set,
//	the cache's EndpointSlice store -+    (mu)               published; OnChange, OnServing
//	                                                         (one goroutine, in order)
//
// The store's handlers run under the store's lock, before its readers see
// the change: they only record the slice and signal. Run, on its own
// goroutine, makes the table and calls the subscribers, which may be slow
// (the cache letting go of ranges), without holding the store back.
// Signals coalesce: a burst of slice changes makes one table.
//
// The table's members are every replica the slices list, ready or not,
// and this one (shard.Members): what a replica holds follows the
// replicas that exist, so that replicas started together each list only
// their share, and a replica that fails its readiness or restarts under
// its name changes no table: its nodes are served meanwhile by their
// warm secondaries (Serving), which hold them already. A replica the
// slices stop listing stays a member for memberGrace, the time a
// StatefulSet takes to put a replaced pod back; only one gone longer,
// or one added, changes the table, and with it what replicas hold.
type Membership struct {
	self, service, namespace string

	table   atomic.Pointer[shard.Table]
	ready   atomic.Pointer[map[string]bool]
	changed chan struct{} // one slot: signals coalesce
	// grace is memberGrace, shorter in tests.
	grace time.Duration

	mu       sync.Mutex
	slices   map[string]*discoveryv1.EndpointSlice // guarded by mu: the Service's, by name
	lastSeen map[string]time.Time                  // guarded by mu: each member's last listing
	subs     []func(old, new *shard.Table)         // guarded by mu
	serving  []func()                              // guarded by mu
	// expiry re-signals when the first member not listed runs out of
	// grace; only Run's publish sets it.
	expiry    *time.Timer
	published []string // only Run: the members of the last table
}

// memberGrace is how long a replica the EndpointSlices no longer list
// stays a member: a StatefulSet's rollout or a lost node deletes the pod
// and makes it again under the same name, and its endpoint is gone from
// the slices in between. Dropping it at once would move every range it
// owns or holds to another replica, which would list them, and move
// them back a moment later; within the grace its nodes are served by
// their secondaries (it is not ready), and nothing is listed.
const memberGrace = 2 * time.Minute

// NewMembership follows the replicas of service in namespace, self
// among them. Its table, until List, has self alone.
func NewMembership(self, service, namespace string) *Membership {
	m := &Membership{self: self, service: service, namespace: namespace, grace: memberGrace,
		changed: make(chan struct{}, 1), slices: map[string]*discoveryv1.EndpointSlice{}, lastSeen: map[string]time.Time{}}
	m.table.Store(shard.NewTable([]string{self}))
	m.ready.Store(&map[string]bool{})
	m.published = []string{self}
	registerMetrics()
	m.count(m.table.Load())
	return m
}

// Self is this replica's stable name.
func (m *Membership) Self() string { return m.self }

// Table is the current table. It never changes; a new membership
// publishes a new one.
func (m *Membership) Table() *shard.Table { return m.table.Load() }

// OnChange calls f with the previous and the new table each time the
// members change, from Run's goroutine, in order. Subscribe before Run.
func (m *Membership) OnChange(f func(old, new *shard.Table)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.subs = append(m.subs, f)
}

// OnServing calls f each time which replica serves a node may have
// changed (a new table, or a replica ready or not ready), from Run's
// goroutine, after the OnChange subscribers. Subscribe before Run.
func (m *Membership) OnServing(f func()) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.serving = append(m.serving, f)
}

// Ready reports whether the Service lists member ready.
func (m *Membership) Ready(member string) bool { return (*m.ready.Load())[member] }

// Serving is the replica that serves node now: its owner if ready, else
// its secondary if ready, else "" (no ready replica holds it; shard.Table.Serving).
func (m *Membership) Serving(node string) string { return m.Table().Serving(node, m.Ready) }

// List reads the Service's EndpointSlices once and publishes the first
// table, before the cache starts: a replica holds its ranges from the
// cache's first list on, not everything until its EndpointSlice store
// has synced.
func (m *Membership) List(ctx context.Context, client kubernetes.Interface) error {
	list, err := client.DiscoveryV1().EndpointSlices(m.namespace).List(ctx, metav1.ListOptions{
		LabelSelector: discoveryv1.LabelServiceName + "=" + m.service,
	})
	if err != nil {
		return fmt.Errorf("list the EndpointSlices of Service %s/%s: %w", m.namespace, m.service, err)
	}
	m.mu.Lock()
	for i := range list.Items {
		s := &list.Items[i]
		m.slices[s.Name] = s
	}
	m.mu.Unlock()
	m.publish()
	return nil
}

// Handler follows the Service's EndpointSlices in the cache's store.
// Register it before the cache starts.
func (m *Membership) Handler() toolscache.ResourceEventHandler {
	return toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj interface{}) { m.put(obj) },
		UpdateFunc: func(_, obj interface{}) { m.put(obj) },
		DeleteFunc: func(obj interface{}) {
			if tomb, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
				obj = tomb.Obj
			}
			if s, ok := obj.(*discoveryv1.EndpointSlice); ok && m.ours(s) {
				m.mu.Lock()
				delete(m.slices, s.Name)
				m.mu.Unlock()
				m.signal()
			}
		},
	}
}

func (m *Membership) put(obj interface{}) {
	s, ok := obj.(*discoveryv1.EndpointSlice)
	if !ok || !m.ours(s) {
		return
	}
	m.mu.Lock()
	m.slices[s.Name] = s
	m.mu.Unlock()
	m.signal()
}

// ours reports whether s is one of the Service's slices.
func (m *Membership) ours(s *discoveryv1.EndpointSlice) bool {
	return s.Namespace == m.namespace && s.Labels[discoveryv1.LabelServiceName] == m.service
}

func (m *Membership) signal() {
	select {
	case m.changed <- struct{}{}:
	default:
	}
}

// Run publishes a table on every change of the slices until ctx ends.
func (m *Membership) Run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-m.changed:
			m.publish()
		}
	}
}

// publish makes the table of the slices as they are now and publishes
// it, and the ready set; it tells the OnChange subscribers when the
// members changed, and the OnServing ones when either did. Only List
// (before Run) and Run call it.
func (m *Membership) publish() {
	now := time.Now()
	m.mu.Lock()
	all := make([]*discoveryv1.EndpointSlice, 0, len(m.slices))
	for _, s := range m.slices {
		all = append(all, s)
	}
	listed, ready := shard.Members(all)
	members, next := m.membersLocked(listed, now)
	m.armExpiryLocked(next)
	subs, serving := slices.Clone(m.subs), slices.Clone(m.serving)
	m.mu.Unlock()
	readyChanged := !maps.Equal(ready, *m.ready.Load())
	m.ready.Store(&ready)
	if slices.Equal(members, m.published) {
		if readyChanged {
			for _, f := range serving {
				f()
			}
		}
		return
	}
	m.published = members
	table := shard.NewTable(members)
	old := m.table.Swap(table)
	shardTableChanges.Inc()
	m.count(table)
	ownedBefore, heldBefore := old.Owned(m.self), old.Held(m.self)
	ownedNow, heldNow := table.Owned(m.self), table.Held(m.self)
	klog.InfoS("Hub replicas changed; new shard table", "self", m.self, "members", members, "ready", len(ready),
		"ownedIn", ownedNow.Minus(ownedBefore).Len(), "ownedOut", ownedBefore.Minus(ownedNow).Len(),
		"heldIn", heldNow.Minus(heldBefore).Len(), "heldOut", heldBefore.Minus(heldNow).Len(),
		"owned", ownedNow.Len(), "held", heldNow.Len())
	for _, f := range subs {
		f(old, table)
	}
	for _, f := range serving {
		f()
	}
}

// membersLocked are the table's members: those listed now, those listed
// within the grace, and self, sorted; and when the first of those not
// listed runs out of grace (zero if none).
func (m *Membership) membersLocked(listed []string, now time.Time) (members []string, expires time.Time) {
	for _, name := range listed {
		m.lastSeen[name] = now
	}
	members = []string{m.self}
	for name, seen := range m.lastSeen {
		switch end := seen.Add(m.grace); {
		case !end.After(now):
			delete(m.lastSeen, name)
			continue
		case seen != now && (expires.IsZero() || end.Before(expires)):
			expires = end
		}
		members = append(members, name)
	}
	slices.Sort(members)
	return slices.Compact(members), expires
}

// armExpiryLocked signals Run when the first member not listed runs out
// of grace, so that the table leaves it then.
func (m *Membership) armExpiryLocked(at time.Time) {
	if m.expiry != nil {
		m.expiry.Stop()
		m.expiry = nil
	}
	if !at.IsZero() {
		m.expiry = time.AfterFunc(time.Until(at), m.signal)
	}
}

// Held are the ranges this replica owns or holds warm by the current
// table: what its cache keeps.
func (m *Membership) Held() shard.Set { return m.Table().Held(m.self) }

// Holds reports whether this replica owns node's range or holds it warm
// by the current table: Held().HasNode(node), asked for every review and
// request of a node, without making the set of 4,096 ranges.
func (m *Membership) Holds(node string) bool { return m.Table().Holds(m.self, node) }

// count sets the gauges from t.
func (m *Membership) count(t *shard.Table) {
	shardMembers.Set(float64(len(t.Members())))
	shardRanges.WithLabelValues("owned").Set(float64(t.Owned(m.self).Len()))
	shardRanges.WithLabelValues("held").Set(float64(t.Held(m.self).Len()))
}
