package passthrough_test

import (
	"net/http"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestBulkGetSpansCachedCoreCRDAndAggregatedTypes: one request reads a
// cached type (configmaps), a built-in type nodeproxy does not cache
// (Deployments), a CRD created after the hub started and an aggregated
// API (counts), in order, each list with its own resourceVersion,
// directly and through kube-apiserver.
func TestBulkGetSpansCachedCoreCRDAndAggregatedTypes(t *testing.T) {
	srv := startHub(t)
	alice, err := cp.UserConfig("alice")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range endpoints(t, srv, alice) {
		t.Run(e.name, func(t *testing.T) {
			code, lists, status := e.post(t, widgets, configmaps, deployments, countsOp)
			if code != http.StatusCreated {
				t.Fatalf("%d: %v", code, status)
			}
			want := []string{"WidgetList: gear", "ConfigMapList: settings", "DeploymentList: web", "CountList: visits"}
			for i, l := range lists {
				if l.String() != want[i] {
					t.Errorf("result %d = %q, want %q", i, l, want[i])
				}
				if l.Metadata.ResourceVersion == "" {
					t.Errorf("result %d (%s) has no resourceVersion", i, l.Kind)
				}
			}
		})
	}
}

// TestBulkGetRefusedWholeWhenKubeAPIServerRefusesOneOperation: bob may
// read configmaps and widgets but not Deployments; kube-apiserver
// refuses that list as bob, and the whole request gets its 403, naming
// the operation.
func TestBulkGetRefusedWholeWhenKubeAPIServerRefusesOneOperation(t *testing.T) {
	srv := startHub(t)
	bob, err := cp.UserConfig("bob")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range endpoints(t, srv, bob) {
		t.Run(e.name, func(t *testing.T) {
			code, lists, status := e.post(t, configmaps, widgets, deployments)
			if code != http.StatusForbidden || lists != nil {
				t.Fatalf("%d %v, want 403 and nothing answered", code, lists)
			}
			if status.Reason != metav1.StatusReasonForbidden || !strings.HasPrefix(status.Message, "spec.operations[2]: ") ||
				!strings.Contains(status.Message, `User "bob" cannot list resource "deployments"`) {
				t.Errorf("status = %+v", status)
			}
		})
	}
}

// TestNodeReadsUncachedTypesAsKubeAPIServerAllows: a node's uncached
// operation is decided by kube-apiserver as that node (here: nodeproxy's
// webhook for node identities, then RBAC), not by nodeproxy's graph: a
// node may list services (the node rules) but not Deployments.
func TestNodeReadsUncachedTypesAsKubeAPIServerAllows(t *testing.T) {
	srv := startHub(t)
	node, err := cp.NodeConfig("node-a")
	if err != nil {
		t.Fatal(err)
	}
	e := endpoints(t, srv, node)[0]
	code, lists, status := e.post(t, op("", "v1", "services", ""))
	if code != http.StatusCreated || len(lists) != 1 || lists[0].Kind != "ServiceList" {
		t.Fatalf("services as node-a: %d %v %v", code, lists, status)
	}
	code, _, status = e.post(t, op("", "v1", "services", ""), deployments)
	if code != http.StatusForbidden || !strings.Contains(status.Message, `User "system:node:node-a" cannot list resource "deployments"`) {
		t.Fatalf("deployments as node-a: %d %+v, want 403 from kube-apiserver", code, status)
	}
}

// TestBulkGetUnknownTypes: what discovery does not list is 422, as an
// uncached type was before; the bulk API itself is never passed through.
func TestBulkGetUnknownTypes(t *testing.T) {
	srv := startHub(t)
	alice, err := cp.UserConfig("alice")
	if err != nil {
		t.Fatal(err)
	}
	e := endpoints(t, srv, alice)[0]
	for _, tc := range []struct {
		name, op, cause string
	}{
		{"no such resource", op("apps", "v1", "deploymentz", ns), "FieldValueNotFound"},
		{"no such group", op("nowhere.example.com", "v1", "things", ns), "FieldValueNotFound"},
		{"a subresource", op("", "v1", "pods/status", ns), "FieldValueNotFound"},
		{"the bulk API", op("bulk.k8s.io", "v1alpha1", "bulkgetoperations", ""), "FieldValueNotSupported"},
		{"namespace on a cluster-scoped type", op("rbac.authorization.k8s.io", "v1", "clusterroles", ns), "FieldValueInvalid"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, status := e.post(t, configmaps, tc.op)
			if code != http.StatusUnprocessableEntity || status.Details == nil || len(status.Details.Causes) != 1 ||
				string(status.Details.Causes[0].Type) != tc.cause || status.Details.Causes[0].Field != "spec.operations[1].resource" && tc.cause != "FieldValueInvalid" {
				t.Fatalf("%d %+v, want 422 %s on spec.operations[1]", code, status, tc.cause)
			}
		})
	}
}
