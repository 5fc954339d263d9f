package shard

import (
	discoveryv1 "k8s.io/api/discovery/v1"
)

// ReadyMembers are the ready hub replicas among a headless Service's
// EndpointSlices, by their stable names: an endpoint's hostname (a
// StatefulSet's pod name, set for a Service that is the StatefulSet's
// serviceName), else the name of the pod it targets. An endpoint whose
// ready condition is unknown counts as ready, as kube-proxy counts it;
// one that is terminating or not ready does not: its replica is leaving
// or has not synced, and its ranges are served by the next in order.
func ReadyMembers(slices []*discoveryv1.EndpointSlice) []string {
	var out []string
	for _, s := range slices {
		for _, e := range s.Endpoints {
			if e.Conditions.Ready != nil && !*e.Conditions.Ready {
				continue
			}
			if e.Conditions.Terminating != nil && *e.Conditions.Terminating {
				continue
			}
			switch {
			case e.Hostname != nil && *e.Hostname != "":
				out = append(out, *e.Hostname)
			case e.TargetRef != nil && e.TargetRef.Kind == "Pod":
				out = append(out, e.TargetRef.Name)
			}
		}
	}
	return out
}

// Host is a member's stable DNS name through the headless Service:
// what a replica names in a redirect, and what the hub's serving
// certificate must cover (`*.<service>.<namespace>.svc`).
func Host(member, service, namespace string) string {
	return member + "." + service + "." + namespace + ".svc"
}
