package endpoint

import (
	"net/http/httptest"
	"testing"
)

func TestCopyRoute(t *testing.T) {
	for _, tc := range []struct {
		url     string
		method  string
		copy    bool
		verb    string
		name    string
		partial bool
		offline bool
	}{
		// One object of a type the graph decides, by name.
		{url: "/api/v1/namespaces/ns/secrets/s", copy: true, verb: "get", name: "s", partial: true},
		{url: "/api/v1/namespaces/ns/secrets?allowWatchBookmarks=true&fieldSelector=metadata.name%3Ds&resourceVersion=&resourceVersionMatch=NotOlderThan&sendInitialEvents=true&watch=true",
			copy: true, verb: "watch", name: "s", partial: true},
		{url: "/api/v1/namespaces/ns/configmaps?fieldSelector=metadata.name%3Dc&resourceVersion=0", copy: true, verb: "list", name: "c", partial: true},
		{url: "/api/v1/namespaces/ns/persistentvolumeclaims/data", copy: true, verb: "get", name: "data", partial: true},
		{url: "/api/v1/persistentvolumes/pv-1", copy: true, verb: "get", name: "pv-1", partial: true},
		{url: "/api/v1/namespaces/ns/serviceaccounts/default", copy: true, verb: "get", name: "default", partial: true},
		// ... never many of them, which no node may list.
		{url: "/api/v1/namespaces/ns/secrets"},
		{url: "/api/v1/secrets?fieldSelector=metadata.name%3Ds"},
		{url: "/api/v1/namespaces/ns/secrets?fieldSelector=metadata.name%3Ds&labelSelector=a%3Db"},
		{url: "/api/v1/namespaces/ns/secrets?fieldSelector=metadata.name%21%3Ds"},
		// The node's pods and Node; a get may ask what the copy lacks yet.
		{url: "/api/v1/pods?fieldSelector=spec.nodeName%3Dnode-a&watch=true", copy: true, verb: "watch"},
		{url: "/api/v1/pods?fieldSelector=spec.nodeName%3Dnode-b&watch=true"},
		{url: "/api/v1/pods?fieldSelector=spec.nodeName%3Dnode-a%2Cstatus.phase%3DRunning"},
		{url: "/api/v1/namespaces/ns/pods/p", copy: true, verb: "get", name: "p", partial: true},
		{url: "/api/v1/nodes?fieldSelector=metadata.name%3Dnode-a&watch=true", copy: true, verb: "watch", name: "node-a"},
		{url: "/api/v1/nodes/node-a", copy: true, verb: "get", name: "node-a", partial: true},
		{url: "/api/v1/nodes/node-b"},
		{url: "/apis/storage.k8s.io/v1/csinodes/node-a", copy: true, verb: "get", name: "node-a", partial: true},
		{url: "/apis/storage.k8s.io/v1/csinodes/node-b"},
		{url: "/apis/storage.k8s.io/v1/csinodes?fieldSelector=metadata.name%3Dnode-a"},
		{url: "/api/v1/nodes"},
		// The cluster-wide types the view carries, with their selectors.
		{url: "/api/v1/services?fieldSelector=spec.clusterIP%21%3DNone&resourceVersion=&sendInitialEvents=true&watch=true", copy: true, verb: "watch"},
		{url: "/api/v1/services?labelSelector=%21service.kubernetes.io%2Fheadless", copy: true, verb: "list"},
		{url: "/api/v1/services?fieldSelector=spec.externalName%3Dx"},
		{url: "/apis/node.k8s.io/v1/runtimeclasses?watch=true", copy: true, verb: "watch"},
		{url: "/apis/storage.k8s.io/v1/csidrivers", copy: true, verb: "list"},
		{url: "/apis/storage.k8s.io/v1/csidrivers/d", copy: true, verb: "get", name: "d", offline: true},
		// Not in the view, or not a read of it.
		{url: "/apis/discovery.k8s.io/v1/endpointslices?watch=true"},
		{url: "/apis/storage.k8s.io/v1beta1/csidrivers"},
		{url: "/api/v1/namespaces/ns/secrets/s", method: "PUT"},
		{url: "/api/v1/namespaces/ns/pods/p/status"},
		{url: "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/node-a"},
		{url: "/version"},
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
		r, ok := copyRoute(req, info, "node-a")
		if ok != tc.copy {
			t.Errorf("%s %s: copy %v, want %v", method, tc.url, ok, tc.copy)
			continue
		}
		if ok && (r.verb != tc.verb || r.filter.Name != tc.name || r.partial != tc.partial || r.onlyOffline != tc.offline) {
			t.Errorf("%s %s: %s %q partial %v offline-only %v; want %s %q %v %v",
				method, tc.url, r.verb, r.filter.Name, r.partial, r.onlyOffline, tc.verb, tc.name, tc.partial, tc.offline)
		}
	}
}
