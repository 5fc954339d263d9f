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

// TestMembersAreTheReadyReplicasAndSelfWhileStarting: a replica counts
// the Service's ready endpoints, and itself until it has been seen ready;
// once seen ready and then not, it leaves its own table as it leaves the
// others'.
func TestMembersAreTheReadyReplicasAndSelfWhileStarting(t *testing.T) {
	for _, tc := range []struct {
		name      string
		endpoints map[string]bool
		wasReady  bool
		want      []string
		ready     bool
	}{
		{"starting, not listed", map[string]bool{"a": true, "b": true}, false, []string{"a", "b", "self"}, false},
		{"starting, listed not ready", map[string]bool{"a": true, "self": false}, false, []string{"a", "self"}, false},
		{"ready", map[string]bool{"a": true, "self": true, "c": false}, false, []string{"a", "self"}, true},
		{"ready again", map[string]bool{"a": true, "self": true}, true, []string{"a", "self"}, true},
		{"was ready, now not", map[string]bool{"a": true, "self": false}, true, []string{"a"}, false},
		{"was ready, now gone", map[string]bool{"a": true}, true, []string{"a"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ready := membersOf([]*discoveryv1.EndpointSlice{slice("ns", "svc", "s1", tc.endpoints)}, "self", tc.wasReady)
			if !slices.Equal(got, tc.want) || ready != tc.ready {
				t.Errorf("members %v ready %v, want %v %v", got, ready, tc.want, tc.ready)
			}
		})
	}
}

// TestMembershipPublishesATableOnEachChangeOfMembers: the first list
// makes the first table; the store's changes to the Service's slices
// make new ones, each told to the subscribers with the one before, in
// order; a change that leaves the members as they were, or a slice of
// another Service or namespace, makes none.
func TestMembershipPublishesATableOnEachChangeOfMembers(t *testing.T) {
	client := fake.NewClientset(
		slice("ns", "svc", "s1", map[string]bool{"a": true, "self": true}),
		slice("ns", "other", "o1", map[string]bool{"x": true}),
		slice("elsewhere", "svc", "e1", map[string]bool{"y": true}),
	)
	m := NewMembership("self", "svc", "ns")
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
	expect([]string{"a", "b", "self"}, []string{"b", "self"})
	h.OnUpdate(nil, slice("ns", "svc", "s1", map[string]bool{"a": false, "self": false}))
	expect([]string{"b", "self"}, []string{"b"})
	if held := m.Held(); held.Len() != 0 {
		t.Errorf("a replica that left its table holds %d ranges, want none", held.Len())
	}
	h.OnDelete(slice("ns", "svc", "s2", nil))
	expect([]string{"b"}, []string{})
	select {
	case c := <-changes:
		t.Fatalf("unexpected change %v -> %v", c.old, c.new)
	case <-time.After(200 * time.Millisecond):
	}
}
