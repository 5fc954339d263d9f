package endpoint

import (
	"net/http/httptest"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestHubRoute(t *testing.T) {
	for _, tc := range []struct {
		url      string
		method   string
		who      caller
		hub      bool
		verb     string
		selector string
	}{
		{url: "/api/v1/namespaces/ns/secrets?fieldSelector=metadata.name%3Ds&resourceVersion=0", hub: true, verb: "list", selector: "metadata.name=s"},
		{url: "/api/v1/namespaces/ns/secrets/s", hub: true, verb: "get", selector: "metadata.name=s"},
		{url: "/api/v1/namespaces/ns/secrets?allowWatchBookmarks=true&fieldSelector=metadata.name%3Ds&resourceVersion=&resourceVersionMatch=NotOlderThan&sendInitialEvents=true&timeoutSeconds=420&watch=true",
			hub: true, verb: "watch", selector: "metadata.name=s"},
		{url: "/api/v1/namespaces/ns/configmaps?fieldSelector=metadata.name%3Dc&resourceVersion=12&timeoutSeconds=300&watch=true", hub: true, verb: "watch", selector: "metadata.name=c"},
		{url: "/api/v1/watch/namespaces/ns/secrets/s", hub: true, verb: "watch", selector: "metadata.name=s"},
		{url: "/api/v1/pods?fieldSelector=spec.nodeName%3Dnode-a&watch=true", hub: true, verb: "watch", selector: "spec.nodeName=node-a"},
		{url: "/api/v1/pods?fieldSelector=spec.nodeName%3Dnode-a", hub: true, verb: "list", selector: "spec.nodeName=node-a"},
		{url: "/api/v1/nodes?fieldSelector=metadata.name%3Dnode-a&watch=true", hub: true, verb: "watch", selector: "metadata.name=node-a"},
		// kube-apiserver's business.
		{url: "/api/v1/pods?fieldSelector=spec.nodeName%3Dnode-b&watch=true"},
		{url: "/api/v1/pods?fieldSelector=spec.nodeName%21%3Dnode-a"},
		{url: "/api/v1/nodes/node-a"},
		{url: "/api/v1/secrets"},
		{url: "/api/v1/namespaces/ns/secrets/s", method: "PUT"},
		{url: "/api/v1/namespaces/ns/pods/p/status", method: "PATCH"},
		{url: "/api/v1/namespaces/ns/serviceaccounts/default/token", method: "POST"},
		{url: "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/node-a"},
		{url: "/version"},
		// The clusterWide types, for the kubelet and other clients alike.
		{url: "/api/v1/services?fieldSelector=spec.clusterIP%21%3DNone&resourceVersion=&sendInitialEvents=true&watch=true", hub: true, verb: "watch", selector: "spec.clusterIP!=None"},
		{url: "/api/v1/services?fieldSelector=spec.clusterIP%21%3DNone&labelSelector=%21service.kubernetes.io%2Fservice-proxy-name&watch=true", who: client, hub: true, verb: "watch", selector: "spec.clusterIP!=None"},
		{url: "/apis/discovery.k8s.io/v1/endpointslices?labelSelector=%21service.kubernetes.io%2Fheadless&limit=500", who: client, hub: true, verb: "list"},
		{url: "/apis/networking.k8s.io/v1/servicecidrs?watch=true", who: client, hub: true, verb: "watch"},
		{url: "/apis/node.k8s.io/v1/runtimeclasses?watch=true", hub: true, verb: "watch"},
		{url: "/apis/storage.k8s.io/v1/csidrivers", hub: true, verb: "list"},
		{url: "/api/v1/namespaces/ns/services?watch=true", hub: true, verb: "watch"},
		// Gets of them stay with kube-apiserver, which authorizes a get as get.
		{url: "/api/v1/namespaces/ns/services/s"},
		{url: "/apis/storage.k8s.io/v1/csidrivers/d", who: client},
		// Another version, or another type of the same group.
		{url: "/apis/discovery.k8s.io/v1beta1/endpointslices?watch=true", who: client},
		{url: "/apis/storage.k8s.io/v1/storageclasses?watch=true"},
		{url: "/apis/networking.k8s.io/v1/ingresses?watch=true", who: client},
		// kube-proxy's Node: any selector, as the client; never the kubelet's routes.
		{url: "/api/v1/nodes?fieldSelector=metadata.name%3Dnode-a&watch=true", who: client, hub: true, verb: "watch", selector: "metadata.name=node-a"},
		{url: "/api/v1/nodes?fieldSelector=metadata.name%3Dnode-b", who: client, hub: true, verb: "list", selector: "metadata.name=node-b"},
		{url: "/api/v1/nodes/node-a", who: client},
		{url: "/api/v1/namespaces/ns/secrets/s", who: client},
		{url: "/api/v1/namespaces/ns/configmaps?watch=true", who: client},
		{url: "/api/v1/pods?fieldSelector=spec.nodeName%3Dnode-a&watch=true", who: client},
	} {
		method := tc.method
		if method == "" {
			method = "GET"
		}
		req := httptest.NewRequest(method, tc.url, nil)
		info, err := requestInfo.NewRequestInfo(req)
		if err != nil {
			t.Fatal(err)
		}
		r, ok := hubRoute(req, info, "node-a", tc.who)
		if ok != tc.hub {
			t.Errorf("%s %s (caller %d): hub %v, want %v", method, tc.url, tc.who, ok, tc.hub)
			continue
		}
		if ok && (r.verb != tc.verb || r.op.Options.FieldSelector != tc.selector) {
			t.Errorf("%s %s: %s %q, want %s %q", method, tc.url, r.verb, r.op.Options.FieldSelector, tc.verb, tc.selector)
		}
		if want := (metav1.GroupVersionResource{Group: info.APIGroup, Version: info.APIVersion, Resource: info.Resource}); ok && (r.who != tc.who || r.op.Resource != want) {
			t.Errorf("%s %s: routed as %d %s/%s", method, tc.url, r.who, r.groupVersion(), r.op.Resource.Resource)
		}
		if ok && (r.op.Options.Watch || r.op.Options.TimeoutSeconds != nil) {
			t.Errorf("%s %s: watch options left in the operation: %+v", method, tc.url, r.op.Options)
		}
	}
}
