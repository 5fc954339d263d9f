package get

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"github.com/nodeproxy/nodeproxy/apis/bulk/v1alpha1"
	"github.com/nodeproxy/nodeproxy/bulk"
	"github.com/nodeproxy/nodeproxy/bulk/internal/bulktest"
)

// fixture is bulktest's, with a Getter on its catalog.
type fixture struct {
	*bulktest.Fixture
	getter *Getter
}

func newFixture(t testing.TB, logSize int) *fixture {
	t.Helper()
	f := bulktest.New(t, logSize)
	return &fixture{Fixture: f, getter: NewGetter(f.Catalog)}
}

// decodedList is what a test reads of one result.
type decodedList struct {
	Kind     string `json:"kind"`
	Metadata struct {
		ResourceVersion string `json:"resourceVersion"`
		Continue        string `json:"continue"`
	} `json:"metadata"`
	Items []struct {
		Kind       string            `json:"kind"`
		APIVersion string            `json:"apiVersion"`
		Metadata   metav1.ObjectMeta `json:"metadata"`
	} `json:"items"`
}

func (l decodedList) String() string {
	var names []string
	for _, it := range l.Items {
		names = append(names, it.Metadata.Namespace+"/"+it.Metadata.Name)
	}
	return l.Kind + ": " + strings.Join(names, " ")
}

func (f *fixture) get(t testing.TB, u user.Info, ops ...v1alpha1.GetOperation) ([]decodedList, error) {
	t.Helper()
	raw, err := f.getter.Get(context.Background(), u, &v1alpha1.BulkGetOperationSpec{Operations: ops})
	if err != nil {
		return nil, err
	}
	out := make([]decodedList, len(raw))
	for i, r := range raw {
		if err := json.Unmarshal(r.Raw, &out[i]); err != nil {
			t.Fatalf("result %d is not JSON: %v\n%s", i, err, r.Raw)
		}
	}
	return out, nil
}

func TestSelectorsPickObjects(t *testing.T) {
	f := newFixture(t, 64)
	f.Add(t, bulktest.Secret("a", "s1"))
	f.Add(t, bulktest.Secret("a", "s2"))
	f.Add(t, bulktest.Secret("b", "s1"))
	f.Add(t, bulktest.Pod("a", "p1", "node-a", "s1"))
	f.Add(t, bulktest.Pod("b", "p2", "node-b", "s1"))
	f.Add(t, bulktest.Pod("b", "p3", "node-a"))
	f.Add(t, &corev1.Node{ObjectMeta: bulktest.Meta("", "node-a")})
	f.Add(t, &corev1.Node{ObjectMeta: bulktest.Meta("", "node-b")})

	for _, tc := range []struct {
		name string
		op   v1alpha1.GetOperation
		want string
	}{
		{"one named secret", bulktest.FieldOp("secrets", "a", "metadata.name=s1"), "SecretList: a/s1"},
		{"a name in every namespace", bulktest.FieldOp("secrets", "", "metadata.name=s1"), "SecretList: a/s1 b/s1"},
		{"a namespace", bulktest.FieldOp("secrets", "a", ""), "SecretList: a/s1 a/s2"},
		{"all namespaces", bulktest.FieldOp("secrets", "", ""), "SecretList: a/s1 a/s2 b/s1"},
		{"not equal", bulktest.FieldOp("secrets", "", "metadata.name!=s1"), "SecretList: a/s2"},
		{"namespace field", bulktest.FieldOp("secrets", "", "metadata.namespace=b"), "SecretList: b/s1"},
		{"no match", bulktest.FieldOp("secrets", "a", "metadata.name=nope"), "SecretList: "},
		{"contradiction", bulktest.FieldOp("secrets", "a", "metadata.name=s1,metadata.name=s2"), "SecretList: "},
		{"labels", bulktest.GetOp("secrets", "", metav1.ListOptions{LabelSelector: "name in (s2)"}), "SecretList: a/s2"},
		{"pods of a node", bulktest.FieldOp("pods", "", "spec.nodeName=node-a"), "PodList: a/p1 b/p3"},
		{"pods of a node in a namespace", bulktest.FieldOp("pods", "b", "spec.nodeName=node-a"), "PodList: b/p3"},
		{"pods not on a node", bulktest.FieldOp("pods", "", "spec.nodeName!=node-a"), "PodList: b/p2"},
		{"reachable secrets", bulktest.FieldOp("secrets", "", bulk.ReachableFromField+"=node-a"), "SecretList: a/s1"},
		{"reachable secrets of node-b", bulktest.FieldOp("secrets", "", bulk.ReachableFromField+"=node-b"), "SecretList: b/s1"},
		{"reachable pods", bulktest.FieldOp("pods", "", bulk.ReachableFromField+"=node-a"), "PodList: a/p1 b/p3"},
		{"reachable node", bulktest.FieldOp("nodes", "", bulk.ReachableFromField+"=node-a"), "NodeList: /node-a"},
		{"a cluster-scoped name", bulktest.FieldOp("nodes", "", "metadata.name=node-b"), "NodeList: /node-b"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := f.get(t, bulktest.Admin, tc.op)
			if err != nil {
				t.Fatal(err)
			}
			if got := out[0].String(); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
			for _, it := range out[0].Items {
				if it.Kind == "" || it.APIVersion != "v1" {
					t.Errorf("item %s has kind %q apiVersion %q", it.Metadata.Name, it.Kind, it.APIVersion)
				}
			}
		})
	}
}

func TestNodeIsDecidedByTheGraph(t *testing.T) {
	f := newFixture(t, 64)
	f.Add(t, bulktest.Secret("a", "mine"))
	f.Add(t, bulktest.Secret("a", "theirs"))
	f.Add(t, bulktest.Pod("a", "p1", "node-a", "mine"))
	f.Add(t, bulktest.Pod("a", "p2", "node-b", "theirs"))
	f.Add(t, &corev1.Node{ObjectMeta: bulktest.Meta("", "node-a")})

	for _, tc := range []struct {
		name string
		ops  []v1alpha1.GetOperation
		// refused names the operation expected refused; -1 for allowed.
		refused int
	}{
		{"its pod's secret", []v1alpha1.GetOperation{bulktest.FieldOp("secrets", "a", "metadata.name=mine")}, -1},
		{"its pods", []v1alpha1.GetOperation{bulktest.FieldOp("pods", "", "spec.nodeName=node-a")}, -1},
		{"its node", []v1alpha1.GetOperation{bulktest.FieldOp("nodes", "", "metadata.name=node-a")}, -1},
		{"what it reaches", []v1alpha1.GetOperation{bulktest.FieldOp("secrets", "", bulk.ReachableFromField+"=node-a")}, -1},
		{"its pod by name", []v1alpha1.GetOperation{bulktest.FieldOp("pods", "a", "metadata.name=p1")}, -1},
		{"another node's secret, second", []v1alpha1.GetOperation{bulktest.FieldOp("secrets", "a", "metadata.name=mine"), bulktest.FieldOp("secrets", "a", "metadata.name=theirs")}, 1},
		{"a namespace's secrets", []v1alpha1.GetOperation{bulktest.FieldOp("secrets", "a", "")}, 0},
		{"a name in every namespace", []v1alpha1.GetOperation{bulktest.FieldOp("secrets", "", "metadata.name=mine")}, 0},
		{"another node's pods", []v1alpha1.GetOperation{bulktest.FieldOp("pods", "", "spec.nodeName=node-b")}, 0},
		{"all pods", []v1alpha1.GetOperation{bulktest.FieldOp("pods", "", "")}, 0},
		{"what another node reaches", []v1alpha1.GetOperation{bulktest.FieldOp("secrets", "", bulk.ReachableFromField+"=node-b")}, 0},
		{"another node", []v1alpha1.GetOperation{bulktest.FieldOp("nodes", "", "metadata.name=node-b")}, 0},
		{"another node's pod by name", []v1alpha1.GetOperation{bulktest.FieldOp("pods", "a", "metadata.name=p2")}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f.Asked() // forget earlier questions
			out, err := f.get(t, bulktest.NodeA, tc.ops...)
			if asked := f.Asked(); len(asked) > 0 {
				t.Errorf("a node identity was sent to the delegated authorizer: %v", asked)
			}
			if tc.refused < 0 {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				if len(out) != len(tc.ops) {
					t.Fatalf("%d results for %d operations", len(out), len(tc.ops))
				}
				return
			}
			if !apierrors.IsForbidden(err) {
				t.Fatalf("got %v, %v; want 403", out, err)
			}
			if want := fmt.Sprintf("spec.operations[%d]", tc.refused); !strings.Contains(err.Error(), want) {
				t.Errorf("refusal %q does not name %s", err, want)
			}
		})
	}
}

func TestOtherUsersAreAskedPerOperation(t *testing.T) {
	f := newFixture(t, 64)
	f.Add(t, bulktest.Secret("a", "s1"))
	f.Allow(func(a authorizer.Attributes) bool { return a.GetResource() != "configmaps" })
	_, err := f.get(t, bulktest.Admin, bulktest.FieldOp("secrets", "a", "metadata.name=s1"), bulktest.GetOp("pods", "", metav1.ListOptions{LabelSelector: "app=x"}), bulktest.FieldOp("configmaps", "b", ""))
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "spec.operations[2]") || !strings.Contains(err.Error(), "RBAC says no") {
		t.Fatalf("got %v; want 403 naming operation 2 and the reason", err)
	}
	asked := f.Asked()
	if len(asked) != 3 {
		t.Fatalf("asked %d times, want once per operation", len(asked))
	}
	first := asked[0]
	if first.GetVerb() != "list" || first.GetName() != "s1" || first.GetNamespace() != "a" || first.GetResource() != "secrets" {
		t.Errorf("operation 0 asked as %s %s %s/%s", first.GetVerb(), first.GetResource(), first.GetNamespace(), first.GetName())
	}
	if reqs, _ := asked[1].GetLabelSelector(); len(reqs) != 1 {
		t.Errorf("operation 1 asked without its label selector: %v", reqs)
	}
	if reqs, _ := first.GetFieldSelector(); len(reqs) != 1 || reqs[0].Field != "metadata.name" {
		t.Errorf("operation 0 asked without its field selector: %v", reqs)
	}

	f.Allow(func(authorizer.Attributes) bool { return true })
	f.Fail(errors.New("kube-apiserver unreachable"))
	_, err = f.get(t, bulktest.Admin, bulktest.FieldOp("secrets", "a", ""))
	if !apierrors.IsInternalError(err) || !strings.Contains(err.Error(), "unreachable") {
		t.Errorf("an authorizer error gave %v; want 500 naming it, never an allow", err)
	}
}

func TestBadInputNamesTheOperation(t *testing.T) {
	f := newFixture(t, 64)
	many := make([]v1alpha1.GetOperation, bulk.MaxOperations+1)
	for i := range many {
		many[i] = bulktest.FieldOp("secrets", "a", "")
	}
	for _, tc := range []struct {
		name string
		ops  []v1alpha1.GetOperation
		want string // a substring of the field path and message
	}{
		{"no operations", nil, "spec.operations: Required value"},
		{"too many", many, "spec.operations: Too many: 1001: must have at most 1000 items"},
		{"unknown resource", []v1alpha1.GetOperation{bulktest.FieldOp("secrets", "a", ""), bulktest.FieldOp("endpoints", "a", "")}, `spec.operations[1].resource: Unsupported value`},
		{"graph-only resource", []v1alpha1.GetOperation{{Resource: metav1.GroupVersionResource{Group: "storage.k8s.io", Version: "v1", Resource: "volumeattachments"}}}, `spec.operations[0].resource: Unsupported value`},
		{"wrong version", []v1alpha1.GetOperation{{Resource: metav1.GroupVersionResource{Version: "v2", Resource: "secrets"}}}, `spec.operations[0].resource: Unsupported value`},
		{"namespace on a cluster-scoped type", []v1alpha1.GetOperation{bulktest.FieldOp("nodes", "a", "")}, "spec.operations[0].namespace: Invalid value: \"a\": must be empty: nodes are cluster-scoped"},
		{"bad namespace", []v1alpha1.GetOperation{bulktest.FieldOp("secrets", "Not_A_Namespace", "")}, "spec.operations[0].namespace: Invalid value"},
		{"malformed field selector", []v1alpha1.GetOperation{bulktest.FieldOp("secrets", "a", "metadata.name")}, "spec.operations[0].options.fieldSelector: Invalid value"},
		{"malformed label selector", []v1alpha1.GetOperation{bulktest.GetOp("secrets", "a", metav1.ListOptions{LabelSelector: "a in (b"})}, "spec.operations[0].options.labelSelector: Invalid value"},
		{"a field kube-apiserver selects on but nodeproxy does not", []v1alpha1.GetOperation{bulktest.FieldOp("pods", "a", "status.phase=Running")}, `spec.operations[0].options.fieldSelector: Unsupported value: "status.phase"`},
		{"reachableFrom with !=", []v1alpha1.GetOperation{bulktest.FieldOp("secrets", "", bulk.ReachableFromField+"!=n")}, "takes one node name"},
		{"watch", []v1alpha1.GetOperation{bulktest.GetOp("secrets", "a", metav1.ListOptions{Watch: true})}, "spec.operations[0].options.watch: Forbidden"},
		{"bookmarks", []v1alpha1.GetOperation{bulktest.GetOp("secrets", "a", metav1.ListOptions{AllowWatchBookmarks: true})}, "spec.operations[0].options.allowWatchBookmarks: Forbidden"},
		{"match without version", []v1alpha1.GetOperation{bulktest.GetOp("secrets", "a", metav1.ListOptions{ResourceVersionMatch: metav1.ResourceVersionMatchExact})}, "spec.operations[0].options.resourceVersionMatch: Forbidden"},
		{"exact 0", []v1alpha1.GetOperation{bulktest.GetOp("secrets", "a", metav1.ListOptions{ResourceVersion: "0", ResourceVersionMatch: metav1.ResourceVersionMatchExact})}, "spec.operations[0].options.resourceVersionMatch: Forbidden"},
		{"version not a number", []v1alpha1.GetOperation{bulktest.GetOp("secrets", "a", metav1.ListOptions{ResourceVersion: "abc"})}, "spec.operations[0].options.resourceVersion: Invalid value"},
		{"negative limit", []v1alpha1.GetOperation{bulktest.GetOp("secrets", "a", metav1.ListOptions{Limit: -1})}, "spec.operations[0].options.limit: Invalid value"},
		{"bad continue", []v1alpha1.GetOperation{bulktest.GetOp("secrets", "a", metav1.ListOptions{Continue: "garbage"})}, "spec.operations[0].options.continue: Invalid value"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := f.get(t, bulktest.Admin, tc.ops...)
			if !apierrors.IsInvalid(err) || out != nil {
				t.Fatalf("got %v, %v; want 422 and nothing else", out, err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q lacks %q", err, tc.want)
			}
		})
	}
}

// TestFieldsKubeAPIServerDoesNotKnowAreBadRequests: a field the type's
// conversion in kube-apiserver does not know is its 400, in its words,
// each naming its operation, and before any 422.
func TestFieldsKubeAPIServerDoesNotKnowAreBadRequests(t *testing.T) {
	f := newFixture(t, 64)
	for _, tc := range []struct {
		name string
		ops  []v1alpha1.GetOperation
		want string
	}{
		{"nodeName on secrets", []v1alpha1.GetOperation{bulktest.FieldOp("secrets", "a", "spec.nodeName=n")},
			`spec.operations[0].options.fieldSelector: field label not supported: spec.nodeName`},
		{"a type without a conversion of its own", []v1alpha1.GetOperation{bulktest.FieldOp("configmaps", "a", ""), bulktest.FieldOp("configmaps", "a", "data.x=y")},
			`spec.operations[1].options.fieldSelector: "data.x" is not a known field selector: only "metadata.name", "metadata.namespace"`},
		{"two operations, and a 422 besides", []v1alpha1.GetOperation{bulktest.FieldOp("secrets", "Not_A_Namespace", "spec.x=1,spec.y=2"), bulktest.FieldOp("nodes", "", "metadata.namespace=x")},
			`spec.operations[0].options.fieldSelector: field label not supported: spec.x; spec.operations[1].options.fieldSelector: field label not supported: metadata.namespace`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := f.get(t, bulktest.Admin, tc.ops...)
			if !apierrors.IsBadRequest(err) || out != nil {
				t.Fatalf("got %v, %v; want 400 and nothing else", out, err)
			}
			if err.Error() != tc.want {
				t.Errorf("error %q, want %q", err, tc.want)
			}
		})
	}
}

func TestResourceVersionsAndPages(t *testing.T) {
	f := newFixture(t, 4)
	for i := range 5 {
		f.Add(t, bulktest.Secret("a", fmt.Sprintf("s%d", i)))
	}
	store := f.Cache.Store(bulktest.GVR("secrets"))
	now := store.Snapshot().RV

	out, err := f.get(t, bulktest.Admin, bulktest.GetOp("secrets", "a", metav1.ListOptions{Limit: 2}))
	if err != nil {
		t.Fatal(err)
	}
	page := out[0]
	if page.String() != "SecretList: a/s0 a/s1" || page.Metadata.Continue == "" || page.Metadata.ResourceVersion != strconv.FormatUint(now, 10) {
		t.Fatalf("first page: %s, continue %q, rv %s (cache at %d)", page, page.Metadata.Continue, page.Metadata.ResourceVersion, now)
	}
	// A change between pages does not show: the pages read one state.
	f.Add(t, bulktest.Secret("a", "s1b"))
	var all []string
	all = append(all, page.String())
	for page.Metadata.Continue != "" {
		out, err = f.get(t, bulktest.Admin, bulktest.GetOp("secrets", "a", metav1.ListOptions{Limit: 2, Continue: page.Metadata.Continue}))
		if err != nil {
			t.Fatal(err)
		}
		page = out[0]
		if page.Metadata.ResourceVersion != strconv.FormatUint(now, 10) {
			t.Errorf("continued page at rv %s, want %d", page.Metadata.ResourceVersion, now)
		}
		all = append(all, page.String())
	}
	if got := strings.Join(all, " | "); got != "SecretList: a/s0 a/s1 | SecretList: a/s2 a/s3 | SecretList: a/s4" {
		t.Errorf("pages: %s", got)
	}

	// Exact: the state at a version the log still holds.
	out, err = f.get(t, bulktest.Admin, bulktest.GetOp("secrets", "a", metav1.ListOptions{ResourceVersion: strconv.FormatUint(now, 10), ResourceVersionMatch: metav1.ResourceVersionMatchExact}))
	if err != nil || out[0].String() != "SecretList: a/s0 a/s1 a/s2 a/s3 a/s4" {
		t.Errorf("exact at %d: %v %v", now, out, err)
	}
	// NotOlderThan an old version: the latest state.
	out, err = f.get(t, bulktest.Admin, bulktest.GetOp("secrets", "a", metav1.ListOptions{ResourceVersion: "2"}))
	if err != nil || !strings.Contains(out[0].String(), "a/s1b") {
		t.Errorf("not older than 2: %v %v", out, err)
	}
	// Exact at a version the log no longer holds: 410, nothing partial.
	for range 4 {
		f.Add(t, bulktest.Secret("b", "churn"))
	}
	_, err = f.get(t, bulktest.Admin, bulktest.FieldOp("secrets", "a", ""), bulktest.GetOp("secrets", "a", metav1.ListOptions{ResourceVersion: strconv.FormatUint(now, 10), ResourceVersionMatch: metav1.ResourceVersionMatchExact}))
	if !apierrors.IsResourceExpired(err) || !strings.Contains(err.Error(), "spec.operations[1]") {
		t.Errorf("exact at an expired version: %v; want 410 naming operation 1", err)
	}
	// A version the cache has not reached: 504 after waiting.
	_, err = f.get(t, bulktest.Admin, bulktest.GetOp("secrets", "a", metav1.ListOptions{ResourceVersion: strconv.FormatUint(now+1000, 10)}))
	if !apierrors.IsTimeout(err) || !strings.Contains(err.Error(), "Too large resource version") {
		t.Errorf("a future version: %v; want 504 Too large resource version", err)
	}
}

// TestNodeDecidedAsNodeThenRBAC: a node identity is decided as
// kube-apiserver's chain Node,RBAC decides it. The system:node role's
// static rules allow services without asking anyone; endpointslices, on
// which the Node authorizer has no opinion, are the delegated
// authorizer's to allow or refuse; a type the graph decides is refused by
// the graph alone, never asked of the delegated authorizer.
func TestNodeDecidedAsNodeThenRBAC(t *testing.T) {
	f := newFixture(t, 64)
	slices := v1alpha1.GetOperation{Resource: metav1.GroupVersionResource{Group: "discovery.k8s.io", Version: "v1", Resource: "endpointslices"},
		Options: metav1.ListOptions{LabelSelector: "!service.kubernetes.io/headless"}}
	f.Asked()

	if _, err := f.get(t, bulktest.NodeA, bulktest.FieldOp("services", "", "spec.clusterIP!=None")); err != nil {
		t.Errorf("services for a node: %v", err)
	}
	if asked := f.Asked(); len(asked) != 0 {
		t.Errorf("services were asked of the delegated authorizer: %v", asked)
	}

	f.Allow(func(a authorizer.Attributes) bool { return a.GetResource() == "endpointslices" })
	if _, err := f.get(t, bulktest.NodeA, slices); err != nil {
		t.Errorf("endpointslices RBAC allows: %v", err)
	}
	asked := f.Asked()
	if len(asked) != 1 || asked[0].GetUser().GetName() != bulktest.NodeA.Name || asked[0].GetVerb() != "list" {
		t.Fatalf("asked %v; want the node's list of endpointslices", asked)
	}
	if reqs, _ := asked[0].GetLabelSelector(); len(reqs) != 1 || reqs[0].Key() != "service.kubernetes.io/headless" {
		t.Errorf("asked without the label selector: %v", reqs)
	}
	f.Allow(func(authorizer.Attributes) bool { return false })
	if _, err := f.get(t, bulktest.NodeA, slices); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "RBAC says no") {
		t.Errorf("endpointslices RBAC refuses: %v; want 403 with its reason", err)
	}
	f.Fail(errors.New("kube-apiserver unreachable"))
	if _, err := f.get(t, bulktest.NodeA, slices); !apierrors.IsInternalError(err) {
		t.Errorf("endpointslices with the delegated authorizer failing: %v; want 500, never an allow", err)
	}
	f.Fail(nil)

	f.Allow(func(authorizer.Attributes) bool { return true })
	f.Asked()
	if _, err := f.get(t, bulktest.NodeA, bulktest.FieldOp("secrets", "a", "metadata.name=s1")); !apierrors.IsForbidden(err) {
		t.Errorf("a secret node-a does not reach, RBAC allowing everything: %v; want 403", err)
	}
	if asked := f.Asked(); len(asked) != 0 {
		t.Errorf("the graph's refusal was asked of the delegated authorizer: %v", asked)
	}
}
