package watch_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/nodeproxy/nodeproxy/apis/bulk/v1alpha1"
	"github.com/nodeproxy/nodeproxy/test/bulke2e"
	"github.com/nodeproxy/nodeproxy/test/testserver"
	"github.com/nodeproxy/nodeproxy/watchmux"
)

// TestRevokedTokenEndsItsChannelsWith401: a ServiceAccount token bound to
// a Secret (a TokenRequest with the Secret as its bound object), allowed
// kube-proxy's reads and the bulk API's door, watches Services directly
// on the hub. The Secret is deleted: kube-apiserver refuses the token
// from then on (within its 10 s token cache). The hub, with its default
// flags, must end the channel with ERROR 401 in kube-apiserver's words
// within 70 s (its re-check at least once a minute, and its own 10 s
// token cache) and close the connection; a new connection with the token
// is 401.
func TestRevokedTokenEndsItsChannelsWith401(t *testing.T) {
	testserver.InstallRBAC(t, cp, "rbac-webhook.yaml", "rbac-bulk.yaml")
	srv := testserver.Start(t, cp, testserver.Options{Port: npPort})
	srv.WaitReady(t, 90*time.Second)
	ctx := context.Background()
	admin := kubernetes.NewForConfigOrDie(cp.AdminConfig())
	ns := bulke2e.Namespace("revoked")
	if err := cp.EnsureNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "kube-proxy"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	bind(t, admin, ns, "door", "nodeproxy:bulk-nodes", "kube-proxy")
	bind(t, admin, ns, "node-proxier", "system:node-proxier", "kube-proxy")
	holder, err := admin.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "token-holder"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tr, err := admin.CoreV1().ServiceAccounts(ns).CreateToken(ctx, "kube-proxy", &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Secret", APIVersion: "v1", Name: holder.Name, UID: holder.UID},
	}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := &rest.Config{Host: srv.URL, BearerToken: tr.Status.Token, TLSClientConfig: rest.TLSClientConfig{CAFile: cp.ServingCA.CertPath}}
	services := v1alpha1.GetOperation{Resource: metav1.GroupVersionResource{Version: "v1", Resource: "services"},
		Options: metav1.ListOptions{SendInitialEvents: ptr.To(true), AllowWatchBookmarks: true}}

	var c *watchmux.Client
	var ch *watchmux.Channel
	testserver.Eventually(t, 30*time.Second, "the token's channel allowed", func(ctx context.Context) error {
		var err error
		if c == nil {
			if c, err = watchmux.Dial(ctx, cfg); err != nil {
				c = nil
				return err
			}
		}
		ch, err = c.Watch(ctx, services)
		return err
	})
	defer c.Close()
	untilInitialEnd(t, ch)

	if err := admin.CoreV1().Secrets(ns).Delete(ctx, holder.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	revoked := time.Now()
	// kube-apiserver refuses the token once its own cache has let go.
	client := kubernetes.NewForConfigOrDie(&rest.Config{Host: cp.URL, BearerToken: tr.Status.Token, TLSClientConfig: rest.TLSClientConfig{CAFile: cp.ServingCA.CertPath}})
	testserver.Eventually(t, 30*time.Second, "kube-apiserver refusing the token", func(ctx context.Context) error {
		if _, err := client.CoreV1().Services(ns).List(ctx, metav1.ListOptions{}); err == nil || !strings.Contains(err.Error(), "Unauthorized") {
			return fmt.Errorf("kube-apiserver answers the token: %v", err)
		}
		return nil
	})
	refusedAfter := time.Since(revoked)
	if _, err := admin.CoreV1().Services(ns).Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "after-revocation"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	var seen []string
	deadline := time.After(70*time.Second - time.Since(revoked))
	for ended := false; !ended; {
		select {
		case ev, ok := <-ch.Events:
			if !ok {
				t.Fatalf("the channel closed without an ERROR; events after the revocation: %v", seen)
			}
			if ev.Type == watch.Bookmark {
				continue
			}
			if ev.Type != watch.Error {
				seen = append(seen, string(ev.Type))
				continue
			}
			st := ev.Status
			if st == nil || st.Code != http.StatusUnauthorized || st.Reason != metav1.StatusReasonUnauthorized {
				t.Fatalf("the channel ended with %+v, want 401 Unauthorized", st)
			}
			t.Logf("the channel ended with 401 %q %s after the Secret was deleted (kube-apiserver refused the token after %s)", st.Message, time.Since(revoked).Round(time.Second), refusedAfter.Round(time.Second))
			ended = true
		case <-deadline:
			t.Fatalf("the channel is open 70 s after the Secret was deleted (kube-apiserver refused the token after %s); events it got meanwhile: %v", refusedAfter.Round(time.Second), seen)
		}
	}
	select {
	case <-c.Done():
	case <-time.After(30 * time.Second):
		t.Error("the connection is open 30 s after its channel ended with 401")
	}
	if _, err := watchmux.Dial(ctx, cfg); err == nil || !strings.Contains(err.Error(), "Unauthorized") {
		t.Errorf("a new connection with the revoked token: %v, want 401", err)
	}
}
