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
			if name := memberName(e); name != "" {
				out = append(out, name)
			}
		}
	}
	return out
}

// Members are every hub replica among a headless Service's
// EndpointSlices, ready or not, terminating or not, by stable name, and
// the set of those ready (ReadyMembers' rule).
//
// Why every replica and not the ready ones alone: what a replica holds
// is decided by the table of every replica, so that replicas started
// together (a StatefulSet's, in parallel) each list only their share from
// the start, and a replica that restarts under the same name leaves the
// table as it was: its peers hold its ranges warm as secondaries and
// serve them while it is not ready (Table.Serving), with nothing to list
// and nothing to drop. Only a replica added or removed for good changes
// the table.
func Members(slices []*discoveryv1.EndpointSlice) (all []string, ready map[string]bool) {
	ready = map[string]bool{}
	for _, s := range slices {
		for _, e := range s.Endpoints {
			name := memberName(e)
			if name == "" {
				continue
			}
			all = append(all, name)
			if (e.Conditions.Ready == nil || *e.Conditions.Ready) && (e.Conditions.Terminating == nil || !*e.Conditions.Terminating) {
				ready[name] = true
			}
		}
	}
	return all, ready
}

func memberName(e discoveryv1.Endpoint) string {
	switch {
	case e.Hostname != nil && *e.Hostname != "":
		return *e.Hostname
	case e.TargetRef != nil && e.TargetRef.Kind == "Pod":
		return e.TargetRef.Name
	}
	return ""
}

// Host is a member's stable DNS name through the headless Service:
// what a replica names in a redirect, and what the hub's serving
// certificate must cover (`*.<service>.<namespace>.svc`).
func Host(member, service, namespace string) string {
	return member + "." + service + "." + namespace + ".svc"
}
