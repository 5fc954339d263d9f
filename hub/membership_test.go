package hub

import (
	"context"
	"slices"
	"testing"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/nodeproxy/nodeproxy/shard"
)

// slice is an EndpointSlice of service in ns with the endpoints given as
// hostname -> ready.
func slice(ns, service, name string, endpoints map[string]bool) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name,
		Labels: map[string]string{discoveryv1.LabelServiceName: service}}, AddressType: discoveryv1.AddressTypeIPv4}
	for host, ready := range endpoints {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{"10.0.0.1"}, Hostname: new(host),
			Conditions: discoveryv1.EndpointConditions{Ready: new(ready)}})
	}
	return s
}

// TestMembershipPublishesATableOnEachChangeOfMembers: the first list
// makes the first table, of every replica listed, ready or not, and this
// one; the store's changes to the Service's slices make new ones, each
// told to the subscribers with the one before, in order; a replica not
// ready stays a member (its readiness changes who serves, not the
// table), one no longer listed stays for the grace and then leaves; a
// change that leaves the members as they were, or a slice of another
// Service or namespace, makes no table.
func TestMembershipPublishesATableOnEachChangeOfMembers(t *testing.T) {
	client := fake.NewClientset(
		slice("ns", "svc", "s1", map[string]bool{"a": true, "self": true}),
		slice("ns", "other", "o1", map[string]bool{"x": true}),
		slice("elsewhere", "svc", "e1", map[string]bool{"y": true}),
	)
	m := NewMembership("self", "svc", "ns")
	m.grace = 300 * time.Millisecond
	servingChanges := make(chan struct{}, 10)
	m.OnServing(func() { servingChanges <- struct{}{} })
	if got := m.Table().Members(); !slices.Equal(got, []string{"self"}) {
		t.Fatalf("before the list: %v, want self alone", got)
	}
	type change struct{ old, new []string }
	changes := make(chan change, 10)
	m.OnChange(func(old, new *shard.Table) { changes <- change{old.Members(), new.Members()} })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := m.List(ctx, client); err != nil {
		t.Fatal(err)
	}
	expect := func(old, new []string) {
		t.Helper()
		select {
		case c := <-changes:
			if !slices.Equal(c.old, old) || !slices.Equal(c.new, new) {
				t.Fatalf("change %v -> %v, want %v -> %v", c.old, c.new, old, new)
			}
			if got := m.Table().Members(); !slices.Equal(got, new) {
				t.Fatalf("table %v after the change to %v", got, new)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no change to %v", new)
		}
	}
	expect([]string{"self"}, []string{"a", "self"})
	if held, want := m.Held(), m.Table().Held("self"); held != want {
		t.Errorf("held %d ranges, want the table's %d", held.Len(), want.Len())
	}
	go m.Run(ctx)

	h := m.Handler()
	h.OnAdd(slice("ns", "other", "o2", map[string]bool{"z": true}), false)
	h.OnUpdate(nil, slice("ns", "svc", "s1", map[string]bool{"a": true, "self": true})) // the same members
	h.OnAdd(slice("ns", "svc", "s2", map[string]bool{"b": true}), false)
	expect([]string{"a", "self"}, []string{"a", "b", "self"})
	h.OnUpdate(nil, slice("ns", "svc", "s1", map[string]bool{"a": false, "self": true}))
	for deadline := time.Now().Add(10 * time.Second); m.Ready("a"); {
		select {
		case <-servingChanges:
		case <-time.After(time.Until(deadline)):
			t.Fatal("a replica no longer ready did not change who serves")
		}
	}
	if !m.Ready("self") || !m.Ready("b") {
		t.Errorf("ready self %v, b %v; want both", m.Ready("self"), m.Ready("b"))
	}
	h.OnUpdate(nil, slice("ns", "svc", "s1", map[string]bool{"self": true}))
	expect([]string{"a", "b", "self"}, []string{"b", "self"}) // a's grace over
	h.OnDelete(slice("ns", "svc", "s2", nil))
	expect([]string{"b", "self"}, []string{"self"})
	if held := m.Held(); held.Len() != shard.Ranges {
		t.Errorf("a replica alone holds %d ranges, want all", held.Len())
	}
	select {
	case c := <-changes:
		t.Fatalf("unexpected change %v -> %v", c.old, c.new)
	case <-time.After(200 * time.Millisecond):
	}
}
