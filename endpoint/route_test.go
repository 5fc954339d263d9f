package endpoint

import (
	"net/http/httptest"
	"testing"
)

func TestHubRoute(t *testing.T) {
	for _, tc := range []struct {
		url      string
		method   string
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
		r, ok := hubRoute(req, info, "node-a")
		if ok != tc.hub {
			t.Errorf("%s %s: hub %v, want %v", method, tc.url, ok, tc.hub)
			continue
		}
		if ok && (r.verb != tc.verb || r.op.Options.FieldSelector != tc.selector) {
			t.Errorf("%s %s: %s %q, want %s %q", method, tc.url, r.verb, r.op.Options.FieldSelector, tc.verb, tc.selector)
		}
		if ok && (r.op.Options.Watch || r.op.Options.TimeoutSeconds != nil) {
			t.Errorf("%s %s: watch options left in the operation: %+v", method, tc.url, r.op.Options)
		}
	}
}
