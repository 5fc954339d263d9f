package workload

import (
	"strconv"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

// ServiceSlice is an EndpointSlice as the endpointslice controller writes
// one for Service service in namespace: endpoints ready pods, each on a
// node of its own, on two ports, with type meta and a resourceVersion,
// as kube-apiserver sends it. Benchmarks of what one event costs use it
// as kube-proxy's typical object.
func ServiceSlice(namespace, service string, endpoints int) *discoveryv1.EndpointSlice {
	es := &discoveryv1.EndpointSlice{
		TypeMeta: metav1.TypeMeta{APIVersion: "discovery.k8s.io/v1", Kind: "EndpointSlice"},
		ObjectMeta: metav1.ObjectMeta{
			Name: service + "-x7k2p", Namespace: namespace, GenerateName: service + "-", UID: "5f0c8e53-1d7c-4a7e-9a3c-3b0b2f8c1e11",
			ResourceVersion: "184467", Generation: 42, CreationTimestamp: metav1.Unix(1764000000, 0),
			Labels: map[string]string{
				"endpointslice.kubernetes.io/managed-by": "endpointslice-controller.k8s.io",
				discoveryv1.LabelServiceName:             service,
			},
			Annotations: map[string]string{"endpoints.kubernetes.io/last-change-trigger-time": "2026-11-26T04:00:00Z"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Service", Name: service,
				UID: "0b6e1a9c-7f2d-4b8e-a1c4-9d3e5f7a2b60", Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}},
		},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports: []discoveryv1.EndpointPort{
			{Name: ptr.To("http"), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To[int32](8080)},
			{Name: ptr.To("metrics"), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To[int32](9090)},
		},
	}
	for i := range endpoints {
		n := strconv.Itoa(i)
		es.Endpoints = append(es.Endpoints, discoveryv1.Endpoint{
			Addresses:  []string{"10.244." + n + ".17"},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true), Serving: ptr.To(true), Terminating: ptr.To(false)},
			NodeName:   ptr.To(NodeName(i)),
			Zone:       ptr.To("zone-a"),
			TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: namespace, Name: service + "-7d9f8b6c5-" + n,
				UID: types.UID("c4f1e2d3-0000-4000-8000-" + strconv.Itoa(100000000000+i))},
		})
	}
	return es
}
