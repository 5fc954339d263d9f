package authorizer

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/utils/ptr"

	"github.com/nodeproxy/nodeproxy/graph"
)

// fixture: node-a runs pod ns/a, node-b runs pod ns/b. Each pod uses its
// own secret, configmap, claim (bound to a PV with a secret), service
// account and resource claim; node-a has an attachment and a slice.
func fixture(t testing.TB) *NodeAuthorizer {
	t.Helper()
	g := graph.New()
	for _, n := range []string{"a", "b"} {
		g.AddPod(&corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: n, UID: k8stypes.UID("uid-" + n)},
			Spec: corev1.PodSpec{
				NodeName:           "node-" + n,
				ServiceAccountName: "sa-" + n,
				Volumes: []corev1.Volume{
					{Name: "s", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "secret-" + n}}},
					{Name: "c", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cm-" + n}}}},
					{Name: "p", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "pvc-" + n}}},
				},
				ResourceClaims: []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptr.To("claim-" + n)}},
			},
		})
		g.AddPV(&corev1.PersistentVolume{
			ObjectMeta: metav1.ObjectMeta{Name: "pv-" + n},
			Spec: corev1.PersistentVolumeSpec{
				ClaimRef: &corev1.ObjectReference{Namespace: "ns", Name: "pvc-" + n},
				PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{
					Driver: "d", NodePublishSecretRef: &corev1.SecretReference{Namespace: "ns", Name: "pv-secret-" + n},
				}},
			},
		})
	}
	g.AddVolumeAttachment("va-a", "node-a")
	g.AddResourceSlice("slice-a", "node-a")
	return New(g)
}

var nodeA = &user.DefaultInfo{Name: "system:node:node-a", Groups: []string{user.NodesGroup, user.AllAuthenticated}}

// req builds a resource request of node-a; fieldSelector is parsed as
// kube-apiserver parses ?fieldSelector=.
func req(verb, group, resource, subresource, namespace, name, fieldSelector string) authorizer.AttributesRecord {
	r := authorizer.AttributesRecord{
		User: nodeA, Verb: verb, APIGroup: group, APIVersion: "v1", Resource: resource, Subresource: subresource,
		Namespace: namespace, Name: name, ResourceRequest: true,
	}
	if fieldSelector != "" {
		sel, err := fields.ParseSelector(fieldSelector)
		r.FieldSelectorRequirements, r.FieldSelectorParsingErr = sel.Requirements(), err
	}
	return r
}

type decisionCase struct {
	name  string
	attrs authorizer.AttributesRecord
	want  authorizer.Decision
}

func run(t *testing.T, a *NodeAuthorizer, cases []decisionCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, reason, err := a.Authorize(context.Background(), tc.attrs)
			if err != nil {
				t.Fatalf("error: %v", err)
			}
			if got != tc.want {
				t.Errorf("decision = %v (%q), want %v", got, reason, tc.want)
			}
			if got == authorizer.DecisionDeny {
				t.Errorf("Deny is never given: a refusal must leave RBAC its say")
			}
		})
	}
}

const (
	allowed = authorizer.DecisionAllow
	refused = authorizer.DecisionNoOpinion
)

func TestOnlyNodeIdentitiesGetAnOpinion(t *testing.T) {
	a := fixture(t)
	secret := func(u user.Info) authorizer.AttributesRecord {
		r := req("get", "", "secrets", "", "ns", "secret-a", "")
		r.User = u
		return r
	}
	run(t, a, []decisionCase{
		{"node", secret(nodeA), allowed},
		{"node name without group", secret(&user.DefaultInfo{Name: "system:node:node-a"}), refused},
		{"group without node name", secret(&user.DefaultInfo{Name: "node-a", Groups: []string{user.NodesGroup}}), refused},
		{"admin", secret(&user.DefaultInfo{Name: "admin", Groups: []string{user.SystemPrivilegedGroup}}), refused},
		{"no user", secret(nil), refused},
	})
	_, reason, _ := a.Authorize(context.Background(), secret(&user.DefaultInfo{Name: "system:node:", Groups: []string{user.NodesGroup}}))
	if reason != `unknown node for user "system:node:"` {
		t.Errorf("reason for a nameless node = %q", reason)
	}
}

func TestNodeCannotReadOtherNodesSecretsOrConfigMaps(t *testing.T) {
	a := fixture(t)
	var cases []decisionCase
	for _, res := range []struct{ resource, mine, theirs string }{
		{"secrets", "secret-a", "secret-b"},
		{"configmaps", "cm-a", "cm-b"},
	} {
		cases = append(cases,
			decisionCase{res.resource + ": get own", req("get", "", res.resource, "", "ns", res.mine, ""), allowed},
			decisionCase{res.resource + ": list own by name", req("list", "", res.resource, "", "ns", res.mine, ""), allowed},
			decisionCase{res.resource + ": watch own by name", req("watch", "", res.resource, "", "ns", res.mine, ""), allowed},
			decisionCase{res.resource + ": get other node's", req("get", "", res.resource, "", "ns", res.theirs, ""), refused},
			decisionCase{res.resource + ": list all", req("list", "", res.resource, "", "ns", "", ""), refused},
			decisionCase{res.resource + ": list all namespaces", req("list", "", res.resource, "", "", "", ""), refused},
			decisionCase{res.resource + ": without namespace", req("get", "", res.resource, "", "", res.mine, ""), refused},
			decisionCase{res.resource + ": wrong namespace", req("get", "", res.resource, "", "other", res.mine, ""), refused},
			decisionCase{res.resource + ": update own", req("update", "", res.resource, "", "ns", res.mine, ""), refused},
			decisionCase{res.resource + ": create", req("create", "", res.resource, "", "ns", "", ""), refused},
			decisionCase{res.resource + ": delete own", req("delete", "", res.resource, "", "ns", res.mine, ""), refused},
			decisionCase{res.resource + ": subresource", req("get", "", res.resource, "status", "ns", res.mine, ""), refused},
			decisionCase{res.resource + ": unknown object", req("get", "", res.resource, "", "ns", "nope", ""), refused},
		)
	}
	cases = append(cases, decisionCase{"secret of the PV of own claim", req("get", "", "secrets", "", "ns", "pv-secret-a", ""), allowed},
		decisionCase{"secret of the PV of other node's claim", req("get", "", "secrets", "", "ns", "pv-secret-b", ""), refused})
	run(t, a, cases)
}

func TestNodeReadsOnlyItsVolumesClaimsAndAttachments(t *testing.T) {
	run(t, fixture(t), []decisionCase{
		{"pvc: get own", req("get", "", "persistentvolumeclaims", "", "ns", "pvc-a", ""), allowed},
		{"pvc: get other's", req("get", "", "persistentvolumeclaims", "", "ns", "pvc-b", ""), refused},
		{"pvc: list own", req("list", "", "persistentvolumeclaims", "", "ns", "pvc-a", ""), refused},
		{"pvc: no name", req("get", "", "persistentvolumeclaims", "", "ns", "", ""), refused},
		{"pvc status: update own", req("update", "", "persistentvolumeclaims", "status", "ns", "pvc-a", ""), allowed},
		{"pvc status: patch own", req("patch", "", "persistentvolumeclaims", "status", "ns", "pvc-a", ""), allowed},
		{"pvc status: patch other's", req("patch", "", "persistentvolumeclaims", "status", "ns", "pvc-b", ""), refused},
		{"pvc status: get own", req("get", "", "persistentvolumeclaims", "status", "ns", "pvc-a", ""), refused},
		{"pvc: update own (not status)", req("update", "", "persistentvolumeclaims", "", "ns", "pvc-a", ""), refused},
		{"pv: get own", req("get", "", "persistentvolumes", "", "", "pv-a", ""), allowed},
		{"pv: get other's", req("get", "", "persistentvolumes", "", "", "pv-b", ""), refused},
		{"pv: list", req("list", "", "persistentvolumes", "", "", "", ""), refused},
		{"pv: subresource", req("get", "", "persistentvolumes", "status", "", "pv-a", ""), refused},
		{"resourceclaim: get own", req("get", "resource.k8s.io", "resourceclaims", "", "ns", "claim-a", ""), allowed},
		{"resourceclaim: get other's", req("get", "resource.k8s.io", "resourceclaims", "", "ns", "claim-b", ""), refused},
		{"resourceclaim: list", req("list", "resource.k8s.io", "resourceclaims", "", "ns", "", ""), refused},
		{"volumeattachment: get own", req("get", "storage.k8s.io", "volumeattachments", "", "", "va-a", ""), allowed},
		{"volumeattachment: get unknown", req("get", "storage.k8s.io", "volumeattachments", "", "", "va-b", ""), refused},
		{"volumeattachment: list", req("list", "storage.k8s.io", "volumeattachments", "", "", "", ""), refused},
	})
}

func TestServiceAccountsAndTokens(t *testing.T) {
	run(t, fixture(t), []decisionCase{
		{"get own pod's account", req("get", "", "serviceaccounts", "", "ns", "sa-a", ""), allowed},
		{"get other's account", req("get", "", "serviceaccounts", "", "ns", "sa-b", ""), refused},
		{"list accounts", req("list", "", "serviceaccounts", "", "ns", "", ""), refused},
		{"watch own account", req("watch", "", "serviceaccounts", "", "ns", "sa-a", ""), refused},
		{"token for own pod's account", req("create", "", "serviceaccounts", "token", "ns", "sa-a", ""), allowed},
		{"token for other's account", req("create", "", "serviceaccounts", "token", "ns", "sa-b", ""), refused},
		{"token without name", req("create", "", "serviceaccounts", "token", "ns", "", ""), refused},
		{"create account", req("create", "", "serviceaccounts", "", "ns", "sa-a", ""), refused},
		{"get token subresource", req("get", "", "serviceaccounts", "token", "ns", "sa-a", ""), refused},
	})
}

func TestNodeScopedObjects(t *testing.T) {
	run(t, fixture(t), []decisionCase{
		{"lease: get own", req("get", "coordination.k8s.io", "leases", "", "kube-node-lease", "node-a", ""), allowed},
		{"lease: update own", req("update", "coordination.k8s.io", "leases", "", "kube-node-lease", "node-a", ""), allowed},
		{"lease: create (name unknown)", req("create", "coordination.k8s.io", "leases", "", "kube-node-lease", "", ""), allowed},
		{"lease: other node's", req("get", "coordination.k8s.io", "leases", "", "kube-node-lease", "node-b", ""), refused},
		{"lease: other namespace", req("get", "coordination.k8s.io", "leases", "", "default", "node-a", ""), refused},
		{"lease: list", req("list", "coordination.k8s.io", "leases", "", "kube-node-lease", "", ""), refused},
		{"csinode: get own", req("get", "storage.k8s.io", "csinodes", "", "", "node-a", ""), allowed},
		{"csinode: delete own", req("delete", "storage.k8s.io", "csinodes", "", "", "node-a", ""), allowed},
		{"csinode: create", req("create", "storage.k8s.io", "csinodes", "", "", "", ""), allowed},
		{"csinode: other's", req("update", "storage.k8s.io", "csinodes", "", "", "node-b", ""), refused},
		{"csinode: subresource", req("get", "storage.k8s.io", "csinodes", "status", "", "node-a", ""), refused},
		{"csinode: list", req("list", "storage.k8s.io", "csinodes", "", "", "", ""), refused},
		{"slice: create", req("create", "resource.k8s.io", "resourceslices", "", "", "", ""), allowed},
		{"slice: get own", req("get", "resource.k8s.io", "resourceslices", "", "", "slice-a", ""), allowed},
		{"slice: delete own", req("delete", "resource.k8s.io", "resourceslices", "", "", "slice-a", ""), allowed},
		{"slice: get unknown", req("get", "resource.k8s.io", "resourceslices", "", "", "slice-b", ""), refused},
		{"slice: list own by field", req("list", "resource.k8s.io", "resourceslices", "", "", "", "spec.nodeName=node-a"), allowed},
		{"slice: deletecollection own by field", req("deletecollection", "resource.k8s.io", "resourceslices", "", "", "", "spec.nodeName=node-a"), allowed},
		{"slice: list other's by field", req("list", "resource.k8s.io", "resourceslices", "", "", "", "spec.nodeName=node-b"), refused},
		{"slice: list with == selector (parsed as =)", req("list", "resource.k8s.io", "resourceslices", "", "", "", "spec.nodeName==node-a"), allowed},
		{"slice: list all", req("list", "resource.k8s.io", "resourceslices", "", "", "", ""), refused},
		{"slice: subresource", req("get", "resource.k8s.io", "resourceslices", "status", "", "slice-a", ""), refused},
		{"slice: unknown verb", req("escalate", "resource.k8s.io", "resourceslices", "", "", "slice-a", ""), refused},
	})
}

func TestNodeObjects(t *testing.T) {
	run(t, fixture(t), []decisionCase{
		{"get own", req("get", "", "nodes", "", "", "node-a", ""), allowed},
		{"watch own", req("watch", "", "nodes", "", "", "node-a", ""), allowed},
		{"get own before it exists", req("get", "", "nodes", "", "", "node-a", ""), allowed},
		{"get other", req("get", "", "nodes", "", "", "node-b", ""), refused},
		{"list all", req("list", "", "nodes", "", "", "", ""), refused},
		{"create", req("create", "", "nodes", "", "", "", ""), allowed},
		{"patch", req("patch", "", "nodes", "", "", "node-a", ""), allowed},
		{"delete", req("delete", "", "nodes", "", "", "node-a", ""), refused},
		{"status update", req("update", "", "nodes", "status", "", "node-a", ""), allowed},
		{"status get", req("get", "", "nodes", "status", "", "node-a", ""), refused},
		{"proxy", req("get", "", "nodes", "proxy", "", "node-a", ""), refused},
	})
}

func TestPods(t *testing.T) {
	run(t, fixture(t), []decisionCase{
		{"get own", req("get", "", "pods", "", "ns", "a", ""), allowed},
		{"get other's", req("get", "", "pods", "", "ns", "b", ""), refused},
		{"list own by field", req("list", "", "pods", "", "", "", "spec.nodeName=node-a"), allowed},
		{"watch own by field and more", req("watch", "", "pods", "", "", "", "metadata.namespace=ns,spec.nodeName=node-a"), allowed},
		{"list other's by field", req("list", "", "pods", "", "", "", "spec.nodeName=node-b"), refused},
		{"list with != selector", req("list", "", "pods", "", "", "", "spec.nodeName!=node-b"), refused},
		{"list all", req("list", "", "pods", "", "", "", ""), refused},
		{"watch own by name", req("watch", "", "pods", "", "ns", "a", ""), allowed},
		{"watch other's by name", req("watch", "", "pods", "", "ns", "b", ""), refused},
		{"create (mirror pod)", req("create", "", "pods", "", "ns", "", ""), allowed},
		{"delete", req("delete", "", "pods", "", "ns", "b", ""), allowed},
		{"update", req("update", "", "pods", "", "ns", "a", ""), refused},
		{"status", req("patch", "", "pods", "status", "ns", "b", ""), allowed},
		{"eviction", req("create", "", "pods", "eviction", "ns", "b", ""), allowed},
		{"exec", req("create", "", "pods", "exec", "ns", "a", ""), refused},
		{"get subresource", req("get", "", "pods", "log", "ns", "a", ""), refused},
	})
}

func TestStaticRulesOfTheSystemNodeRole(t *testing.T) {
	nonResource := func(verb, path string) authorizer.AttributesRecord {
		return authorizer.AttributesRecord{User: nodeA, Verb: verb, Path: path}
	}
	run(t, fixture(t), []decisionCase{
		{"services list", req("list", "", "services", "", "", "", ""), allowed},
		{"endpoints get", req("get", "", "endpoints", "", "ns", "e", ""), allowed},
		{"endpoints list", req("list", "", "endpoints", "", "ns", "", ""), refused},
		{"events create", req("create", "", "events", "", "ns", "", ""), allowed},
		{"events.k8s.io patch", req("patch", "events.k8s.io", "events", "", "ns", "e", ""), allowed},
		{"events delete", req("delete", "", "events", "", "ns", "e", ""), refused},
		{"tokenreviews", req("create", "authentication.k8s.io", "tokenreviews", "", "", "", ""), allowed},
		{"subjectaccessreviews", req("create", "authorization.k8s.io", "subjectaccessreviews", "", "", "", ""), allowed},
		{"localsubjectaccessreviews", req("create", "authorization.k8s.io", "localsubjectaccessreviews", "", "ns", "", ""), allowed},
		{"csr watch", req("watch", "certificates.k8s.io", "certificatesigningrequests", "", "", "", ""), allowed},
		{"csr approve", req("update", "certificates.k8s.io", "certificatesigningrequests", "approval", "", "x", ""), refused},
		{"csidrivers", req("list", "storage.k8s.io", "csidrivers", "", "", "", ""), allowed},
		{"runtimeclasses", req("watch", "node.k8s.io", "runtimeclasses", "", "", "", ""), allowed},
		{"resourceslices deletecollection without selector (rule, not graph)", req("deletecollection", "resource.k8s.io", "resourceslices", "", "", "", ""), refused},
		{"clustertrustbundles (gate off)", req("list", "certificates.k8s.io", "clustertrustbundles", "", "", "", ""), refused},
		{"podcertificaterequests (gate off)", req("create", "certificates.k8s.io", "podcertificaterequests", "", "ns", "", ""), refused},
		{"deployments", req("get", "apps", "deployments", "", "ns", "d", ""), refused},
		{"namespaces", req("get", "", "namespaces", "", "", "ns", ""), refused},
		{"wildcard verb", req("*", "", "services", "", "", "", ""), refused},
		{"non-resource /healthz", nonResource("get", "/healthz"), refused},
		{"non-resource /api", nonResource("get", "/api"), refused},
	})
}

func TestRulesForNodesIsIncomplete(t *testing.T) {
	a := fixture(t)
	_, _, incomplete, err := a.RulesFor(context.Background(), nodeA, "ns")
	if !incomplete || err == nil {
		t.Errorf("RulesFor(node) = incomplete %v, err %v; want incomplete with an error", incomplete, err)
	}
	_, _, incomplete, err = a.RulesFor(context.Background(), &user.DefaultInfo{Name: "alice"}, "ns")
	if incomplete || err != nil {
		t.Errorf("RulesFor(alice) = incomplete %v, err %v; want complete, no error", incomplete, err)
	}
}

func TestDenialReasonsNameTheMissingRelationship(t *testing.T) {
	a := fixture(t)
	_, reason, _ := a.Authorize(context.Background(), req("get", "", "secrets", "", "ns", "secret-b", ""))
	if want := missingRelationship[graph.Secret]; reason != want {
		t.Errorf("reason = %q, want %q", reason, want)
	}
}
