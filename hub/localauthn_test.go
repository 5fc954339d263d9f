package hub

import (
	"encoding/base64"
	"encoding/json"
	"net/http"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"
	"k8s.io/apiserver/pkg/authentication/user"
)

// fakeObjects is the hub's cache as a test sets it: objects by
// resource/namespace/name, and the resources whose cache is not fresh.
type fakeObjects struct {
	mu      sync.Mutex
	objects map[string]metav1.Object
	stale   map[string]bool
	lookups int
}

func (f *fakeObjects) key(resource, namespace, name string) string {
	return resource + "/" + namespace + "/" + name
}

func (f *fakeObjects) lookup(resource, namespace, name string) (metav1.Object, lookupResult) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lookups++
	if f.stale[resource] {
		return nil, lookupStale
	}
	o, ok := f.objects[f.key(resource, namespace, name)]
	if !ok {
		return nil, lookupMissing
	}
	return o, lookupFound
}

func (f *fakeObjects) lookupCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.lookups
}

// put sets what the cache holds of resource.
func (f *fakeObjects) put(resource string, o metav1.Object) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.objects[f.key(resource, o.GetNamespace(), o.GetName())] = o
}

// cluster is kube-system's ServiceAccount kube-proxy, its pod
// kube-proxy-a on node-a, Secret holder and Node node-a, all fresh.
func cluster() *fakeObjects {
	f := &fakeObjects{objects: map[string]metav1.Object{}, stale: map[string]bool{}}
	f.put("serviceaccounts", &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "kube-proxy", UID: "sa-1"}})
	f.put("pods", &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "kube-proxy-a", UID: "pod-1"}})
	f.put("secrets", &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "holder", UID: "secret-1"}})
	f.put("nodes", &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a", UID: "node-1"}})
	return f
}

// now is the instant the table decides at; the tokens were issued an hour
// before and expire in an hour.
var now = time.Unix(1_900_000_000, 0)

// claimsJSON is the payload of a token of kube-system/kube-proxy issued
// by TokenRequest, bound to what bind names ("pod", "secret", "node",
// "pod+node": a pod-bound token with its node's claims, or "" for none).
func claimsJSON(bind string) map[string]any {
	k := map[string]any{"namespace": "kube-system", "serviceaccount": map[string]any{"name": "kube-proxy", "uid": "sa-1"}}
	switch bind {
	case "pod":
		k["pod"] = map[string]any{"name": "kube-proxy-a", "uid": "pod-1"}
	case "pod+node":
		k["pod"] = map[string]any{"name": "kube-proxy-a", "uid": "pod-1"}
		k["node"] = map[string]any{"name": "node-a", "uid": "node-1"}
	case "secret":
		k["secret"] = map[string]any{"name": "holder", "uid": "secret-1"}
	case "node":
		k["node"] = map[string]any{"name": "node-a", "uid": "node-1"}
	}
	return map[string]any{"iss": "https://kubernetes.default.svc", "aud": []string{"https://kubernetes.default.svc"},
		"iat": now.Add(-time.Hour).Unix(), "nbf": now.Add(-time.Hour).Unix(), "exp": now.Add(time.Hour).Unix(), "kubernetes.io": k}
}

// jwtOf is a JWT of payload, with header kid, and no valid signature:
// the hub never verifies one.
func jwtOf(kid string, payload map[string]any) string {
	h, _ := json.Marshal(map[string]string{"alg": "RS256", "kid": kid})
	p, _ := json.Marshal(payload)
	return base64.RawURLEncoding.EncodeToString(h) + "." + base64.RawURLEncoding.EncodeToString(p) + ".sig"
}

func claimsOfJSON(t *testing.T, payload map[string]any) tokenClaims {
	t.Helper()
	c, ok := claimsOf(&credential{header: http.Header{"Authorization": {"Bearer " + jwtOf("key-1", payload)}}})
	if !ok {
		t.Fatalf("claims of %v not read", payload)
	}
	return c
}

func deleting(o metav1.Object, at time.Time) metav1.Object {
	o.SetDeletionTimestamp(&metav1.Time{Time: at})
	return o
}

// TestLocalDecisionFollowsTheServiceAccountAuthenticatorsRules: one row
// per rule of kube-apiserver's service account token validation
// (k8s.io/kubernetes pkg/serviceaccount/claims.go), decided from the
// hub's cache.
func TestLocalDecisionFollowsTheServiceAccountAuthenticatorsRules(t *testing.T) {
	leeway := serviceAccountLeeway
	for _, tc := range []struct {
		name   string
		bind   string
		claims func(map[string]any)
		cache  func(*fakeObjects)
		want   verdict
		until  time.Time // when allowed
	}{
		{name: "a pod-bound token, everything in place", bind: "pod", want: verdictAllow, until: now.Add(time.Hour + leeway + time.Nanosecond)},
		{name: "a secret-bound token, everything in place", bind: "secret", want: verdictAllow, until: now.Add(time.Hour + leeway + time.Nanosecond)},
		{name: "a node-bound token, everything in place", bind: "node", want: verdictAllow, until: now.Add(time.Hour + leeway + time.Nanosecond)},
		{name: "a token without exp", bind: "pod", claims: func(c map[string]any) { delete(c, "exp") }, want: verdictAllow},

		// exp, nbf, iat, with go-jose's leeway.
		{name: "expired within the leeway", bind: "pod", claims: func(c map[string]any) { c["exp"] = now.Add(-leeway).Unix() },
			want: verdictAllow, until: now.Add(time.Nanosecond)},
		{name: "expired past the leeway", bind: "pod", claims: func(c map[string]any) { c["exp"] = now.Add(-leeway - time.Second).Unix() }, want: verdictRefuse},
		{name: "not valid yet, within the leeway", bind: "pod", claims: func(c map[string]any) { c["nbf"] = now.Add(leeway).Unix() },
			want: verdictAllow, until: now.Add(time.Hour + leeway + time.Nanosecond)},
		{name: "not valid yet, past the leeway", bind: "pod", claims: func(c map[string]any) { c["nbf"] = now.Add(leeway + time.Second).Unix() }, want: verdictRefuse},
		{name: "issued in the future, past the leeway", bind: "pod", claims: func(c map[string]any) { c["iat"] = now.Add(leeway + time.Second).Unix() }, want: verdictRefuse},

		// The ServiceAccount.
		{name: "the ServiceAccount recreated (another UID)", bind: "pod", cache: func(f *fakeObjects) {
			f.put("serviceaccounts", &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "kube-proxy", UID: "sa-2"}})
		}, want: verdictRefuse},
		{name: "the ServiceAccount deleted past the leeway", bind: "pod", cache: func(f *fakeObjects) {
			f.put("serviceaccounts", deleting(&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "kube-proxy", UID: "sa-1"}}, now.Add(-leeway-time.Second)))
		}, want: verdictRefuse},
		{name: "the ServiceAccount deleted within the leeway", bind: "pod", cache: func(f *fakeObjects) {
			f.put("serviceaccounts", deleting(&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "kube-proxy", UID: "sa-1"}}, now.Add(-time.Second)))
		}, want: verdictAllow, until: now.Add(-time.Second + leeway + time.Nanosecond)},

		// The pod, and its graceful deletion: refused only once its
		// deletionTimestamp is more than the leeway ago.
		{name: "the pod recreated (another UID)", bind: "pod", cache: func(f *fakeObjects) {
			f.put("pods", &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "kube-proxy-a", UID: "pod-2"}})
		}, want: verdictRefuse},
		{name: "the pod in graceful deletion, its deletionTimestamp to come", bind: "pod", cache: func(f *fakeObjects) {
			f.put("pods", deleting(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "kube-proxy-a", UID: "pod-1"}}, now.Add(30*time.Second)))
		}, want: verdictAllow, until: now.Add(30*time.Second + leeway + time.Nanosecond)},
		{name: "the pod's deletionTimestamp exactly the leeway ago", bind: "pod", cache: func(f *fakeObjects) {
			f.put("pods", deleting(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "kube-proxy-a", UID: "pod-1"}}, now.Add(-leeway)))
		}, want: verdictAllow, until: now.Add(time.Nanosecond)},
		{name: "the pod's deletionTimestamp past the leeway", bind: "pod", cache: func(f *fakeObjects) {
			f.put("pods", deleting(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "kube-proxy-a", UID: "pod-1"}}, now.Add(-leeway-time.Second)))
		}, want: verdictRefuse},

		// The Secret, the Node.
		{name: "the Secret recreated (another UID)", bind: "secret", cache: func(f *fakeObjects) {
			f.put("secrets", &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "holder", UID: "secret-2"}})
		}, want: verdictRefuse},
		{name: "the Secret deleted past the leeway", bind: "secret", cache: func(f *fakeObjects) {
			f.put("secrets", deleting(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "holder", UID: "secret-1"}}, now.Add(-leeway-time.Second)))
		}, want: verdictRefuse},
		{name: "a node-bound token's Node recreated (another UID)", bind: "node", cache: func(f *fakeObjects) {
			f.put("nodes", &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a", UID: "node-2"}})
		}, want: verdictRefuse},
		{name: "a pod-bound token's node claims are not checked", bind: "pod+node", cache: func(f *fakeObjects) {
			f.put("nodes", &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a", UID: "node-2"}})
			f.stale["nodes"] = true
		}, want: verdictAllow, until: now.Add(time.Hour + leeway + time.Nanosecond)},

		// What the cache cannot vouch for is reviewed.
		{name: "the pod missing from the cache", bind: "pod", cache: func(f *fakeObjects) { delete(f.objects, "pods/kube-system/kube-proxy-a") }, want: verdictReview},
		{name: "the ServiceAccount missing from the cache", bind: "pod", cache: func(f *fakeObjects) { delete(f.objects, "serviceaccounts/kube-system/kube-proxy") }, want: verdictReview},
		{name: "the pods' cache not fresh", bind: "pod", cache: func(f *fakeObjects) { f.stale["pods"] = true }, want: verdictReview},
		{name: "the ServiceAccounts' cache not fresh", bind: "secret", cache: func(f *fakeObjects) { f.stale["serviceaccounts"] = true }, want: verdictReview},
		{name: "the pod in graceful deletion, the ServiceAccounts' cache not fresh: reviewed, and when to check again", bind: "pod", cache: func(f *fakeObjects) {
			f.stale["serviceaccounts"] = true
			f.put("pods", deleting(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "kube-proxy-a", UID: "pod-1"}}, now.Add(30*time.Second)))
		}, want: verdictReview, until: now.Add(30*time.Second + leeway + time.Nanosecond)},
		{name: "a refusal stands whatever the cache cannot vouch for", bind: "pod", cache: func(f *fakeObjects) {
			f.stale["serviceaccounts"] = true
			f.put("pods", &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "kube-proxy-a", UID: "pod-2"}})
		}, want: verdictRefuse},

		// Tokens the local check does not decide.
		{name: "an unbound token", bind: "", want: verdictReview},
		{name: "a token without kubernetes.io claims (legacy, OIDC)", claims: func(c map[string]any) { delete(c, "kubernetes.io") }, want: verdictReview},
	} {
		t.Run(tc.name, func(t *testing.T) {
			payload := claimsJSON(tc.bind)
			if tc.claims != nil {
				tc.claims(payload)
			}
			objs := cluster()
			if tc.cache != nil {
				tc.cache(objs)
			}
			got := decideLocally(claimsOfJSON(t, payload), objs, now)
			if got.verdict != tc.want {
				t.Fatalf("verdict %d (%s), want %d", got.verdict, got.reason, tc.want)
			}
			if (tc.want == verdictAllow || !tc.until.IsZero()) && !got.until.Equal(tc.until) {
				t.Errorf("refused by time alone from %s, want %s", got.until, tc.until)
			}
		})
	}
}

// TestOnlyTheServiceAccountAuthenticatorsUsersAreCheckedLocally: the
// local check stands in only for a token kube-apiserver's service
// account authenticator accepted as the user its claims make.
func TestOnlyTheServiceAccountAuthenticatorsUsersAreCheckedLocally(t *testing.T) {
	saUser := func(name, uid, podUID string) *authenticator.Response {
		extra := map[string][]string{}
		if podUID != "" {
			extra[serviceaccount.PodUIDKey] = []string{podUID}
		}
		return &authenticator.Response{User: &user.DefaultInfo{Name: name, UID: uid, Extra: extra}}
	}
	for _, tc := range []struct {
		name string
		bind string
		resp *authenticator.Response
		want bool
	}{
		{"the pod-bound token's user", "pod", saUser("system:serviceaccount:kube-system:kube-proxy", "sa-1", "pod-1"), true},
		{"the secret-bound token's user", "secret", saUser("system:serviceaccount:kube-system:kube-proxy", "sa-1", ""), true},
		{"not reviewed yet", "pod", nil, false},
		{"another name (an OIDC user with the same claims)", "pod", saUser("oidc:kube-proxy", "sa-1", "pod-1"), false},
		{"another ServiceAccount UID", "pod", saUser("system:serviceaccount:kube-system:kube-proxy", "sa-2", "pod-1"), false},
		{"without the pod's UID in its extra", "pod", saUser("system:serviceaccount:kube-system:kube-proxy", "sa-1", ""), false},
		{"another pod's UID in its extra", "pod", saUser("system:serviceaccount:kube-system:kube-proxy", "sa-1", "pod-2"), false},
		{"an unbound token", "", saUser("system:serviceaccount:kube-system:kube-proxy", "sa-1", ""), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := authenticatedAs(tc.resp, claimsOfJSON(t, claimsJSON(tc.bind))); got != tc.want {
				t.Errorf("authenticatedAs: %v, want %v", got, tc.want)
			}
		})
	}
}

// TestTokenClasses: tokens of one issuer, key and audiences share a
// class, whatever order their audiences are in; any of the three apart
// makes another.
func TestTokenClasses(t *testing.T) {
	class := func(kid string, change func(map[string]any)) tokenClass {
		p := claimsJSON("pod")
		if change != nil {
			change(p)
		}
		c, _ := claimsOf(&credential{header: http.Header{"Authorization": {"Bearer " + jwtOf(kid, p)}}})
		return classOf(c)
	}
	base := class("key-1", nil)
	if got := class("key-1", func(p map[string]any) {
		p["kubernetes.io"].(map[string]any)["pod"] = map[string]any{"name": "other", "uid": types.UID("pod-9")}
	}); got != base {
		t.Errorf("another pod's token: class %+v, want %+v", got, base)
	}
	if got := class("key-1", func(p map[string]any) { p["aud"] = "https://kubernetes.default.svc" }); got != base {
		t.Errorf("aud as a string: class %+v, want %+v", got, base)
	}
	if a, b := class("key-1", func(p map[string]any) { p["aud"] = []string{"a", "b"} }), class("key-1", func(p map[string]any) { p["aud"] = []string{"b", "a"} }); a != b {
		t.Errorf("audiences in another order: %+v and %+v", a, b)
	}
	for name, other := range map[string]tokenClass{
		"another key":      class("key-2", nil),
		"another issuer":   class("key-1", func(p map[string]any) { p["iss"] = "https://other" }),
		"another audience": class("key-1", func(p map[string]any) { p["aud"] = []string{"vault"} }),
	} {
		if other == base {
			t.Errorf("%s: the same class %+v", name, base)
		}
	}
}
