package endpoint

import (
	"net/http/httptest"
	"testing"
)

// TestMetricVerbsAreBounded: the verb and resource labels of the request
// metrics are of fixed sets whatever method and path the caller sends, so
// that the series do not grow with what a caller invents.
func TestMetricVerbsAreBounded(t *testing.T) {
	for _, tc := range []struct {
		method, url, resource, verb string
	}{
		{"GET", "/api/v1/namespaces/ns/secrets/s", "secrets", "get"},
		{"GET", "/api/v1/namespaces/ns/secrets?watch=true", "secrets", "watch"},
		{"PATCH", "/api/v1/nodes/n/status", "nodes/status", "patch"},
		{"DELETE", "/api/v1/namespaces/ns/pods", "pods", "deletecollection"},
		{"GET", "/version", "", "get"},
		{"POST", "/apis/authentication.k8s.io/v1/tokenreviews", "tokenreviews", "create"},
		// Methods of the caller's invention.
		{"FLOOD-1", "/version", "", "other"},
		{"FLOOD-2", "/api/v1/namespaces/ns/secrets/s", "secrets", "other"},
		{"TRACE", "/healthz", "", "other"},
		// Resources and subresources of the caller's invention.
		{"GET", "/api/v1/namespaces/ns/flood-1", "other", "list"},
		{"GET", "/apis/example.com/v1/widgets?watch=true", "other", "watch"},
		{"GET", "/api/v1/namespaces/ns/pods/p/flood-2", "pods/other", "get"},
		{"GET", "/api/v1/namespaces/ns/pods/p/log", "pods/log", "get"},
	} {
		req := httptest.NewRequest(tc.method, tc.url, nil)
		info, err := requestInfo.NewRequestInfo(req)
		if err != nil {
			t.Fatalf("%s %s: %v", tc.method, tc.url, err)
		}
		resource, verb := describe(req, info)
		if resource != tc.resource || verb != tc.verb {
			t.Errorf("%s %s: (%q, %q), want (%q, %q)", tc.method, tc.url, resource, verb, tc.resource, tc.verb)
		}
	}
}
