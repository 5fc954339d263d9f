package endpoint_test

import (
	"context"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/nodeproxy/nodeproxy/endpoint"
)

// BenchmarkTokenCheck: what the endpoint's question before a client's
// new read costs, against the local kube-apiserver: a SelfSubjectReview
// with a ServiceAccount token of kube-proxy's roles, which kube-apiserver
// answers from its token cache (the token is asked about once before the
// timing). Beside it, for scale, the cheapest read the question comes
// before: a list of the Services of one namespace, directly on
// kube-apiserver with the same token.
//
//	go test ./endpoint -run '^$' -bench TokenCheck -benchtime 2000x
func BenchmarkTokenCheck(b *testing.B) {
	ctx := context.Background()
	const ns, sa = "token-check-bench", "kube-proxy"
	if err := cp.EnsureNamespace(ctx, ns); err != nil {
		b.Fatal(err)
	}
	if err := cp.EnsureServiceAccount(ctx, ns, sa); err != nil {
		b.Fatal(err)
	}
	admin := kubernetes.NewForConfigOrDie(cp.AdminConfig())
	if _, err := admin.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: ns},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:node-proxier"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: sa}},
	}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		b.Fatal(err)
	}
	token, err := cp.ServiceAccountToken(ctx, ns, sa, time.Hour)
	if err != nil {
		b.Fatal(err)
	}
	anonymous := &rest.Config{Host: cp.URL, TLSClientConfig: rest.TLSClientConfig{CAFile: cp.ServingCA.CertPath}}
	check, err := endpoint.NewTokenCheck(anonymous)
	if err != nil {
		b.Fatal(err)
	}
	if refused, err := check.Refuses(ctx, token); refused || err != nil {
		b.Fatalf("the token refused: %t, %v", refused, err)
	}
	b.Run("selfsubjectreview", func(b *testing.B) {
		for b.Loop() {
			if refused, err := check.Refuses(ctx, token); refused || err != nil {
				b.Fatalf("the token refused: %t, %v", refused, err)
			}
		}
	})
	direct := rest.CopyConfig(anonymous)
	direct.BearerToken, direct.QPS, direct.Burst = token, -1, 0
	client := kubernetes.NewForConfigOrDie(direct)
	b.Run("list services of one namespace directly", func(b *testing.B) {
		for b.Loop() {
			if _, err := client.CoreV1().Services(ns).List(ctx, metav1.ListOptions{}); err != nil {
				b.Fatal(err)
			}
		}
	})
}
