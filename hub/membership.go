package hub

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/nodeproxy/nodeproxy/shard"
)

// Membership follows the hub's replicas, the ready endpoints of the
// headless Service's EndpointSlices, and publishes the shard.Table they
// make: which replica serves which node (docs/architecture.md,
// "Sharding").
//
//	List (once, before the cache) --+
//	                                 +--> slices --signal--> Run: Table, published, OnChange
//	the cache's EndpointSlice store -+    (mu)               (one goroutine, in order)
//
// The store's handlers run under the store's lock, before its readers see
// the change: they only record the slice and signal. Run, on its own
// goroutine, makes the table and calls the subscribers, which may be slow
// (the cache letting go of ranges), without holding the store back.
// Signals coalesce: a burst of slice changes makes one table.
//
// This replica is a member while it is starting (the Service does not
// list it ready yet, but it must hold the ranges it is about to own, so
// that it is warm when it becomes ready) and while the Service lists it
// ready. Once it has been seen ready and is no longer (its readiness
// failed, or it is terminating), it leaves its own table as every other
// replica's table leaves it: its nodes go to their secondaries, and it
// ends their connections (shardRouter).
type Membership struct {
	self, service, namespace string

	table   atomic.Pointer[shard.Table]
	changed chan struct{} // one slot: signals coalesce

	mu        sync.Mutex
	slices    map[string]*discoveryv1.EndpointSlice // guarded by mu: the Service's, by name
	wasReady  bool                                  // guarded by mu: the Service listed self ready once
	subs      []func(old, new *shard.Table)         // guarded by mu
	published []string                              // only Run: the members of the last table
}

// NewMembership follows the replicas of service in namespace, self
// among them. Its table, until List, has self alone.
func NewMembership(self, service, namespace string) *Membership {
	m := &Membership{self: self, service: service, namespace: namespace,
		changed: make(chan struct{}, 1), slices: map[string]*discoveryv1.EndpointSlice{}}
	m.table.Store(shard.NewTable([]string{self}))
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

// publish makes the table of the slices as they are now, and, if its
// members differ from the last one's, publishes it and tells the
// subscribers. Only List (before Run) and Run call it.
func (m *Membership) publish() {
	m.mu.Lock()
	all := make([]*discoveryv1.EndpointSlice, 0, len(m.slices))
	for _, s := range m.slices {
		all = append(all, s)
	}
	members, ready := membersOf(all, m.self, m.wasReady)
	m.wasReady = m.wasReady || ready
	subs := slices.Clone(m.subs)
	m.mu.Unlock()
	if slices.Equal(members, m.published) {
		return
	}
	m.published = members
	next := shard.NewTable(members)
	old := m.table.Swap(next)
	shardTableChanges.Inc()
	m.count(next)
	ownedBefore, heldBefore := rangesOf(old, m.self)
	ownedNow, heldNow := rangesOf(next, m.self)
	klog.InfoS("Hub replicas changed; new shard table", "self", m.self, "members", members, "selfReady", ready,
		"ownedIn", ownedNow.Minus(ownedBefore).Len(), "ownedOut", ownedBefore.Minus(ownedNow).Len(),
		"heldIn", heldNow.Minus(heldBefore).Len(), "heldOut", heldBefore.Minus(heldNow).Len(),
		"owned", ownedNow.Len(), "held", heldNow.Len())
	for _, f := range subs {
		f(old, next)
	}
}

// Held are the ranges this replica owns or holds warm by the current
// table: what its cache keeps.
func (m *Membership) Held() shard.Set {
	_, held := rangesOf(m.Table(), m.self)
	return held
}

// count sets the gauges from t.
func (m *Membership) count(t *shard.Table) {
	owned, held := rangesOf(t, m.self)
	shardMembers.Set(float64(len(t.Members())))
	shardRanges.WithLabelValues("owned").Set(float64(owned.Len()))
	shardRanges.WithLabelValues("held").Set(float64(held.Len()))
}

// rangesOf are the ranges self owns and holds by t. A table of one
// member gives that member everything, and shard.Table says so of any
// name it is asked about; a replica that has left its own table (it was
// ready, and is no longer) owns and holds nothing. With no member at all
// nobody else serves anything, and self holds all, as shard says.
func rangesOf(t *shard.Table, self string) (owned, held shard.Set) {
	members := t.Members()
	if len(members) > 0 && !slices.Contains(members, self) {
		return shard.Set{}, shard.Set{}
	}
	return t.Owned(self), t.Held(self)
}

// membersOf are the replicas the slices make, sorted, self among them
// unless it has been ready (wasReady) and is no longer; ready reports
// whether the slices list self ready now.
func membersOf(all []*discoveryv1.EndpointSlice, self string, wasReady bool) (members []string, ready bool) {
	members = shard.ReadyMembers(all)
	ready = slices.Contains(members, self)
	if !ready && !wasReady {
		// Starting: not ready yet, but about to own its ranges.
		members = append(members, self)
	}
	slices.Sort(members)
	return slices.Compact(members), ready
}
