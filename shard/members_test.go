package shard

import (
	"slices"
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
