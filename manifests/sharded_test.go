package manifests

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/nodeproxy/nodeproxy/test/testserver"
)

// TestShardedOverlayIsTheBasesPodAsAStatefulSet: the sharded overlay runs
// the base Deployment's pod, changed only by the sharding flag and the
// pod's name and namespace in its environment, and the serving CA
// (mounted, and named by --shard-peer-ca-file) that the replicas verify
// each other with, as a StatefulSet whose
// service is the headless Service the flag names, and no Deployment; and
// the serving certificate covers every replica's stable name, where a
// redirect sends a node endpoint.
func TestShardedOverlayIsTheBasesPodAsAStatefulSet(t *testing.T) {
	base := deployment(t, "base")
	_, out := build(t, "overlays/sharded")
	var (
		sts      *appsv1.StatefulSet
		headless *corev1.Service
		names    []string
	)
	for _, doc := range strings.Split(string(out), "\n---\n") {
		var o struct {
			Kind     string
			Metadata struct{ Name string }
			Spec     struct{ DNSNames []string }
		}
		if err := sigsyaml.Unmarshal([]byte(doc), &o); err != nil {
			t.Fatal(err)
		}
		switch o.Kind + "/" + o.Metadata.Name {
		case "Deployment/nodeproxy":
			t.Error("the sharded overlay still builds the base's Deployment")
		case "StatefulSet/nodeproxy":
			sts = &appsv1.StatefulSet{}
			if err := sigsyaml.Unmarshal([]byte(doc), sts); err != nil {
				t.Fatal(err)
			}
		case "Service/nodeproxy-shards":
			headless = &corev1.Service{}
			if err := sigsyaml.Unmarshal([]byte(doc), headless); err != nil {
				t.Fatal(err)
			}
		case "Certificate/nodeproxy-serving":
			names = o.Spec.DNSNames
		}
	}
	if sts == nil || headless == nil {
		t.Fatalf("the sharded overlay lacks its StatefulSet or headless Service")
	}
	if headless.Spec.ClusterIP != corev1.ClusterIPNone || headless.Spec.PublishNotReadyAddresses {
		t.Errorf("the headless Service: clusterIP %q, publishNotReadyAddresses %v; want None and false (a replica owns nodes once ready)",
			headless.Spec.ClusterIP, headless.Spec.PublishNotReadyAddresses)
	}
	if sts.Spec.ServiceName != headless.Name {
		t.Errorf("the StatefulSet's serviceName is %q, not the headless Service %q", sts.Spec.ServiceName, headless.Name)
	}
	want := "*." + headless.Name + "." + headless.Namespace + ".svc"
	if !slices.Contains(names, want) {
		t.Errorf("the serving certificate's names %q lack %q: a redirected endpoint could not verify the owner", names, want)
	}

	got := sts.Spec.Template.DeepCopy()
	c := &got.Spec.Containers[0]
	flag := "--shard-service=" + headless.Name
	if !slices.Contains(c.Args, flag) {
		t.Errorf("the StatefulSet's arguments %q lack %s", c.Args, flag)
	}
	peerCA := "--shard-peer-ca-file=/etc/nodeproxy/tls/ca.crt"
	if !slices.Contains(c.Args, peerCA) {
		t.Errorf("the StatefulSet's arguments %q lack %s: replicas would not forward reviews to each other", c.Args, peerCA)
	}
	c.Args = slices.DeleteFunc(c.Args, func(a string) bool { return a == flag || a == peerCA })
	for _, v := range got.Spec.Volumes {
		if v.Secret != nil {
			v.Secret.Items = slices.DeleteFunc(v.Secret.Items, func(k corev1.KeyToPath) bool { return k.Key == "ca.crt" })
		}
	}
	for _, e := range c.Env {
		if e.ValueFrom == nil || e.ValueFrom.FieldRef == nil {
			t.Errorf("environment %s is not from the pod's fields", e.Name)
		}
	}
	c.Env = slices.DeleteFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == "POD_NAME" || e.Name == "POD_NAMESPACE" })
	if !equality.Semantic.DeepEqual(*got, base.Spec.Template) {
		t.Errorf("the StatefulSet's pod differs from the base Deployment's by more than the sharding flag and environment:\n%s\n---\n%s",
			mustYAML(t, got), mustYAML(t, base.Spec.Template))
	}
}

func mustYAML(t *testing.T, v any) string {
	t.Helper()
	b, err := sigsyaml.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestShardedReplicasMayForwardReviewsToEachOther: a sharded replica
// forwards a review about a node it does not hold to the replica that
// holds it, as the hub's ServiceAccount; the receiver authorizes that
// caller for POST /authorize by SubjectAccessReview. kube-apiserver must
// allow it with the sharded overlay's RBAC, and not with the base's
// alone (which lets in only kube-apiserver's webhook identity).
func TestShardedReplicasMayForwardReviewsToEachOther(t *testing.T) {
	ctx := context.Background()
	if err := cp.EnsureNamespace(ctx, "nodeproxy"); err != nil {
		t.Fatal(err)
	}
	admin, err := kubernetes.NewForConfig(cp.AdminConfig())
	if err != nil {
		t.Fatal(err)
	}
	mayPost := func(ctx context.Context) (bool, error) {
		r, err := admin.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User:                  testserver.ServiceAccount,
			Groups:                []string{"system:serviceaccounts", "system:serviceaccounts:nodeproxy", "system:authenticated"},
			NonResourceAttributes: &authorizationv1.NonResourceAttributes{Verb: "post", Path: "/authorize"},
		}}, metav1.CreateOptions{})
		if err != nil {
			return false, err
		}
		return r.Status.Allowed, nil
	}
	if err := cp.ApplyFiles(ctx, "base/rbac-webhook.yaml"); err != nil {
		t.Fatal(err)
	}
	if allowed, err := mayPost(ctx); err != nil || allowed {
		t.Fatalf("with the base's RBAC alone the hub's ServiceAccount may post to /authorize (%v, %v): the test proves nothing", allowed, err)
	}
	if err := cp.ApplyFiles(ctx, "overlays/sharded/rbac-peers.yaml"); err != nil {
		t.Fatal(err)
	}
	// RBAC's authorizer learns of the binding through its informers.
	testserver.Eventually(t, 30*time.Second, "the hub's ServiceAccount allowed to post to /authorize", func(ctx context.Context) error {
		allowed, err := mayPost(ctx)
		if err == nil && !allowed {
			err = errors.New("not allowed")
		}
		return err
	})
}
