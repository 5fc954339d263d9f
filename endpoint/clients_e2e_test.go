package endpoint_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/nodeproxy/nodeproxy/test/forwarder"
	"github.com/nodeproxy/nodeproxy/test/testserver"
)

// asClient is how a client of the node other than the kubelet reaches
// n's endpoint, as kube-proxy does with its kubeconfig's server and
// certificate-authority changed: a bearer token, no certificate.
func asClient(n *node, token string) kubernetes.Interface {
	c := &rest.Config{Host: n.kubelet.Host, BearerToken: token, TLSClientConfig: rest.TLSClientConfig{CAData: n.kubelet.CAData}}
	return kubernetes.NewForConfigOrDie(c)
}

// proxierToken creates ServiceAccount ns/sa and returns a token of it.
// When bound is set, the account is bound to system:node-proxier, as
// kubeadm binds kube-proxy's, and to the bulk API's door, as the
// kube-proxy component does.
func proxierToken(t *testing.T, ns, sa string, bound bool) string {
	t.Helper()
	token := scraperToken(t, ns, sa)
	if !bound {
		return token
	}
	ctx := context.Background()
	admin := kubernetes.NewForConfigOrDie(cp.AdminConfig())
	if _, err := admin.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "nodeproxy:bulk-clients"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{"bulk.k8s.io"}, Resources: []string{"bulkgetoperations"}, Verbs: []string{"create", "watch"}}},
	}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	for _, role := range []string{"system:node-proxier", "nodeproxy:bulk-clients"} {
		if _, err := admin.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: role + "-" + ns + "-" + sa},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
			Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: ns, Name: sa}},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	return token
}

// TestClientsOfTheNodeAreServedAsThemselves: a client of the node with
// its own ServiceAccount token (kube-proxy's, bound to
// system:node-proxier) reads its Node through the hub over a connection
// of its own, and everything else reaches kube-apiserver as itself, never
// as the node. A token bound to nothing is refused what RBAC refuses it;
// a token nobody issued is kube-apiserver's 401.
func TestClientsOfTheNodeAreServedAsThemselves(t *testing.T) {
	ctx := context.Background()
	hub := startHub(t)
	n := startNode(t, "node-clients", hub.URL)
	admin := kubernetes.NewForConfigOrDie(cp.AdminConfig())
	if _, err := admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	proxy := asClient(n, proxierToken(t, "clients", "kube-proxy", true))
	byName := metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", n.name).String()}

	// RBAC's grant may reach the authorizers a moment after the create.
	var nodes *corev1.NodeList
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		var err error
		nodes, err = proxy.CoreV1().Nodes().List(ctx, byName)
		return err == nil, nil
	}); err != nil {
		t.Fatalf("kube-proxy lists its Node: %v", err)
	}
	if len(nodes.Items) != 1 || nodes.Items[0].Name != n.name {
		t.Fatalf("kube-proxy's Node list: %+v", nodes.Items)
	}
	if got := metric(t, n, `nodeproxy_node_client_requests_total{path="hub",resource="nodes",verb="list"}`); got == "0" {
		t.Errorf("the list did not come from the hub (client requests via the hub: %s)", got)
	}
	if got := metric(t, n, "nodeproxy_node_client_hub_connections"); got != "1" {
		t.Errorf("client hub connections: %s, want 1", got)
	}

	// A watch through the hub sees a change.
	byName.ResourceVersion = nodes.ResourceVersion
	w, err := proxy.CoreV1().Nodes().Watch(ctx, byName)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	patch := []byte(`{"metadata":{"labels":{"seen":"yes"}}}`)
	if _, err := admin.CoreV1().Nodes().Patch(ctx, n.name, "application/merge-patch+json", patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-w.ResultChan():
		if node, ok := ev.Object.(*corev1.Node); ev.Type != watch.Modified || !ok || node.Labels["seen"] != "yes" {
			t.Fatalf("watch event: %s %#v", ev.Type, ev.Object)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no event for the Node's change")
	}
	if got := metric(t, n, `nodeproxy_node_client_watches{path="hub",resource="nodes"}`); got != "1" {
		t.Errorf("client watches via the hub: %s, want 1", got)
	}

	// Everything else reaches kube-apiserver as the client itself.
	review, err := proxy.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := review.Status.UserInfo.Username; got != "system:serviceaccount:clients:kube-proxy" {
		t.Errorf("kube-apiserver saw %q, want the client's own ServiceAccount", got)
	}
	if _, err := proxy.CoreV1().Secrets("default").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("the client listing secrets, which its RBAC does not allow: %v, want 403", err)
	}

	// A token RBAC grants nothing: the hub refuses it what kube-apiserver
	// would, as itself.
	unbound := asClient(n, proxierToken(t, "clients", "unbound", false))
	_, err = unbound.CoreV1().Nodes().List(ctx, byName)
	if !apierrors.IsForbidden(err) {
		t.Errorf("an unbound ServiceAccount listing nodes: %v, want 403", err)
	}
	// A token nobody issued: 401, from kube-apiserver, never the node's
	// identity.
	for _, do := range []func() error{
		func() error { _, err := asClient(n, "made-up").CoreV1().Nodes().List(ctx, byName); return err },
		func() error {
			_, err := asClient(n, "made-up").CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{})
			return err
		},
	} {
		err := do()
		var status apierrors.APIStatus
		if !errorsAs(err, &status) || status.Status().Code != http.StatusUnauthorized {
			t.Errorf("a made-up token: %v, want 401", err)
		}
	}
	if got := metric(t, n, `nodeproxy_node_client_hub_dials_total{result="unauthorized"}`); got == "0" {
		t.Errorf("the made-up token's dial was not counted as unauthorized")
	}
}

// TestClientTokenRotationLosesNoEvent: a client's watch through the hub
// outlives the token it was opened with. The client's token is replaced
// (as the kubelet rotates a projected ServiceAccount token), the old one
// then stops being valid (the hub ends its connection with 401 as soon as
// it sees the Secret it is bound to deleted), and the hub's connections
// drop: the old connection cannot come back with the old token, so its
// channel ends, and the client watches again with the new token, over a
// new connection, from its last resourceVersion. Every change made before
// and after is seen, in order, once.
func TestClientTokenRotationLosesNoEvent(t *testing.T) {
	ctx := context.Background()
	hub := startHub(t)
	hubAddr := strings.TrimPrefix(hub.URL, "https://")
	// A Service's stand-in, which can drop every connection to the hub.
	fwd, err := forwarder.Start(hubAddr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = fwd.Close() })
	n := startNode(t, "node-rotation", "https://"+fwd.Addr())
	admin := kubernetes.NewForConfigOrDie(cp.AdminConfig())
	if _, err := admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	_ = proxierToken(t, "rotation", "kube-proxy", true)
	// The first token is bound to a Secret: deleting it ends the token's
	// validity, as expiry would.
	if _, err := admin.CoreV1().Secrets("rotation").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "first-token-holder"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	holder, err := admin.CoreV1().Secrets("rotation").Get(ctx, "first-token-holder", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	first, err := admin.CoreV1().ServiceAccounts("rotation").CreateToken(ctx, "kube-proxy", &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Secret", APIVersion: "v1", Name: holder.Name, UID: holder.UID},
	}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	second, err := admin.CoreV1().ServiceAccounts("rotation").CreateToken(ctx, "kube-proxy", &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var token atomic.Value
	token.Store(first.Status.Token)
	cfg := &rest.Config{Host: n.kubelet.Host, TLSClientConfig: rest.TLSClientConfig{CAData: n.kubelet.CAData}}
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
			req = req.Clone(req.Context())
			req.Header.Set("Authorization", "Bearer "+token.Load().(string))
			return rt.RoundTrip(req)
		})
	})
	client := kubernetes.NewForConfigOrDie(cfg)

	// A reflector-like watcher: resumes from its last resourceVersion
	// whenever its watch ends, as client-go's reflector does.
	byName := fields.OneTermEqualSelector("metadata.name", n.name).String()
	seen := make(chan string, 100)
	watchCtx, stop := context.WithCancel(ctx)
	defer stop()
	list, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{FieldSelector: byName})
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		rv := list.ResourceVersion
		for watchCtx.Err() == nil {
			w, err := client.CoreV1().Nodes().Watch(watchCtx, metav1.ListOptions{FieldSelector: byName, ResourceVersion: rv})
			if err != nil {
				time.Sleep(100 * time.Millisecond)
				continue
			}
			for ev := range w.ResultChan() {
				if node, ok := ev.Object.(*corev1.Node); ok && ev.Type == watch.Modified {
					rv = node.ResourceVersion
					seen <- node.Labels["n"]
				}
			}
		}
	}()
	testserver.Eventually(t, 30*time.Second, "the watch on the hub", func(context.Context) error {
		if got := metric(t, n, `nodeproxy_node_client_watches{path="hub",resource="nodes"}`); got != "1" {
			return fmt.Errorf("%s client watches of nodes on the hub", got)
		}
		return nil
	})
	label := func(i int) {
		t.Helper()
		patch := fmt.Appendf(nil, `{"metadata":{"labels":{"n":"%d"}}}`, i)
		if _, err := admin.CoreV1().Nodes().Patch(ctx, n.name, "application/merge-patch+json", patch, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for i := 1; i <= 3; i++ {
		label(i)
	}
	// Rotation: new requests carry the second token, and the first is no
	// longer valid, to kube-apiserver and to the hub (whose cache of
	// token reviews keeps a good answer for 10 s).
	dialed := metric(t, n, `nodeproxy_node_client_hub_dials_total{result="ok"}`)
	token.Store(second.Status.Token)
	if err := admin.CoreV1().Secrets("rotation").Delete(ctx, holder.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testserver.Eventually(t, time.Minute, "the hub refusing the first token", func(context.Context) error {
		if code, _ := get(t, hub.URL+"/apis/bulk.k8s.io/v1alpha1", first.Status.Token); code != http.StatusUnauthorized {
			return fmt.Errorf("the hub answers the first token %d", code)
		}
		return nil
	})
	// Every connection to the hub drops: the first token's, if the hub
	// has not ended it already, cannot be made again, its channel ends,
	// and the client watches again with the second. Changes are made
	// meanwhile.
	fwd.Cut(hubAddr)
	for i := 4; i <= 6; i++ {
		label(i)
	}
	for want := 1; want <= 6; want++ {
		select {
		case got := <-seen:
			if got != fmt.Sprint(want) {
				t.Fatalf("change %d seen as %s: lost or repeated", want, got)
			}
		case <-time.After(time.Minute):
			t.Fatalf("change %d never seen", want)
		}
	}
	select {
	case got := <-seen:
		t.Fatalf("a change seen again: %s", got)
	case <-time.After(2 * time.Second):
	}
	testserver.Eventually(t, time.Minute, "the watch back on the hub", func(context.Context) error {
		onHub := metric(t, n, `nodeproxy_node_client_watches{path="hub",resource="nodes"}`)
		// The endpoints of a test binary count into one registry: the
		// second token's connection is one more than before the
		// rotation.
		ok := metric(t, n, `nodeproxy_node_client_hub_dials_total{result="ok"}`)
		if onHub != "1" || ok == dialed {
			return fmt.Errorf("%s client watches of nodes on the hub; dials ok %s (%s before the cut)", onHub, ok, dialed)
		}
		return nil
	})
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// servicesListedByHub lists the Services of ns ("" for all) as client
// through n until the hub serves the list (RBAC, and the delegated
// authorizer's cache of a denial, settle a moment after a binding is
// made), and returns the list's resourceVersion.
func servicesListedByHub(t *testing.T, n *node, client kubernetes.Interface, ns string) string {
	t.Helper()
	const hubLists = `nodeproxy_node_client_requests_total{path="hub",resource="services",verb="list"}`
	var rv string
	testserver.Eventually(t, 30*time.Second, "the client's list of Services through the hub", func(ctx context.Context) error {
		before := metric(t, n, hubLists)
		list, err := client.CoreV1().Services(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		if metric(t, n, hubLists) == before {
			return fmt.Errorf("the list went to kube-apiserver")
		}
		rv = list.ResourceVersion
		return nil
	})
	return rv
}
