package shard

import (
	"slices"
	"strconv"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/utils/ptr"
)

func TestReadyMembersAreTheReadyEndpointsByStableName(t *testing.T) {
	s := &discoveryv1.EndpointSlice{Endpoints: []discoveryv1.Endpoint{
		{Hostname: ptr.To("nodeproxy-0"), Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}},
		{Hostname: ptr.To("nodeproxy-1")}, // unknown: ready
		{Hostname: ptr.To("nodeproxy-2"), Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(false)}},
		{Hostname: ptr.To("nodeproxy-3"), Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true), Terminating: ptr.To(true)}},
		{TargetRef: &corev1.ObjectReference{Kind: "Pod", Name: "nodeproxy-4"}},
		{TargetRef: &corev1.ObjectReference{Kind: "Node", Name: "a-node"}},
	}}
	got := ReadyMembers([]*discoveryv1.EndpointSlice{s})
	if want := []string{"nodeproxy-0", "nodeproxy-1", "nodeproxy-4"}; !slices.Equal(got, want) {
		t.Errorf("ready members %q, want %q", got, want)
	}
	if h := Host("nodeproxy-1", "nodeproxy-shards", "nodeproxy"); h != "nodeproxy-1.nodeproxy-shards.nodeproxy.svc" {
		t.Errorf("host %q", h)
	}
}

func TestMembersAreEveryEndpointAndTheReadyOnesAmongThem(t *testing.T) {
	s := &discoveryv1.EndpointSlice{Endpoints: []discoveryv1.Endpoint{
		{Hostname: ptr.To("nodeproxy-0"), Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}},
		{Hostname: ptr.To("nodeproxy-1"), Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(false)}},
		{Hostname: ptr.To("nodeproxy-2"), Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true), Terminating: ptr.To(true)}},
		{TargetRef: &corev1.ObjectReference{Kind: "Node", Name: "a-node"}},
	}}
	all, ready := Members([]*discoveryv1.EndpointSlice{s})
	if want := []string{"nodeproxy-0", "nodeproxy-1", "nodeproxy-2"}; !slices.Equal(all, want) {
		t.Errorf("members %q, want %q", all, want)
	}
	if len(ready) != 1 || !ready["nodeproxy-0"] {
		t.Errorf("ready %v, want nodeproxy-0 alone", ready)
	}
}

// A replica not ready (restarting under its name) leaves the table as it
// is; its nodes are served by their secondaries, which hold them.
func TestANotReadyOwnersNodesAreServedByTheirSecondary(t *testing.T) {
	tab := NewTable(members(3))
	down := "nodeproxy-1"
	ready := func(m string) bool { return m != down }
	for i := range 300 {
		node := "node-" + strconv.Itoa(i)
		r := Range(node)
		got := tab.Serving(node, ready)
		switch {
		case tab.Owner(r) != down && got != tab.Owner(r):
			t.Fatalf("%s: served by %q, not its ready owner %q", node, got, tab.Owner(r))
		case tab.Owner(r) == down && got != tab.Secondary(r):
			t.Fatalf("%s: owner down, served by %q, not its secondary %q", node, got, tab.Secondary(r))
		case !tab.Held(got).HasNode(node) || !tab.Holds(got, node):
			t.Fatalf("%s: served by %q, which does not hold it", node, got)
		}
	}
	if got := tab.Serving("node-1", func(string) bool { return false }); got != "" {
		t.Errorf("no replica ready, node-1 served by %q", got)
	}
}
