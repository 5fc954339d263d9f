package hub

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/component-base/metrics/testutil"
)

// tokenReviews is kube-apiserver's service account authenticator as a
// test sets it: each token accepted as the user its claims make, until
// refused (or unanswerable) by key ID; it counts the reviews of each
// token.
type tokenReviews struct {
	mu      sync.Mutex
	refused map[string]error // by kid; nil error: refused without a reason
	failing map[string]error // by kid: the review cannot be made
	reviews map[string]int   // by token
	// refuseFrom, if set, refuses every token from then on (the pod's
	// deletionTimestamp plus the leeway).
	refuseFrom time.Time
}

func newTokenReviews() *tokenReviews {
	return &tokenReviews{refused: map[string]error{}, failing: map[string]error{}, reviews: map[string]int{}}
}

func (r *tokenReviews) AuthenticateRequest(req *http.Request) (*authenticator.Response, bool, error) {
	cred := &credential{header: req.Header}
	claims, _ := claimsOf(cred)
	token := strings.TrimPrefix(req.Header.Get("Authorization"), "Bearer ")
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reviews[token]++
	if err, ok := r.failing[claims.KeyID]; ok {
		return nil, false, err
	}
	if err, ok := r.refused[claims.KeyID]; ok {
		return nil, false, err
	}
	if !r.refuseFrom.IsZero() && !time.Now().Before(r.refuseFrom) {
		return nil, false, errors.New("service account token has been invalidated")
	}
	k := claims.Kubernetes
	return &authenticator.Response{User: &user.DefaultInfo{Name: serviceaccount.MakeUsername(k.Namespace, k.ServiceAccount.Name), UID: string(k.ServiceAccount.UID),
		Extra: map[string][]string{serviceaccount.PodUIDKey: {string(k.Pod.UID)}}}}, true, nil
}

func (r *tokenReviews) count(token string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.reviews[token]
}

func (r *tokenReviews) set(kid string, refused, failing error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.refused, kid)
	delete(r.failing, kid)
	if refused != nil {
		r.refused[kid] = refused
	}
	if failing != nil {
		r.failing[kid] = failing
	}
}

// kubeProxyToken is the token of kube-proxy's pod kube-proxy-<i>
// (UID pod-<i>), signed by key kid, as TokenRequest issues it; objs gets
// the pod.
func kubeProxyToken(objs *fakeObjects, kid string, i int) string {
	p := claimsJSON("pod")
	p["exp"] = time.Now().Add(time.Hour).Unix()
	p["iat"], p["nbf"] = time.Now().Unix(), time.Now().Unix()
	name, uid := fmt.Sprintf("kube-proxy-%d", i), fmt.Sprintf("pod-%d", i)
	p["kubernetes.io"].(map[string]any)["pod"] = map[string]any{"name": name, "uid": uid}
	objs.put("pods", &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: name, UID: types.UID(uid)}})
	return jwtOf(kid, p)
}

// TestBoundTokensAreCheckedLocallyBetweenReviews: a pod-bound token's
// connection, once reviewed when it opened, is checked against the
// cache at every interval, without a review; its canary is kept out of
// the way here (an hour). When the cache cannot vouch for its objects
// (the pods' cache not fresh, its pod missing), each check is a review
// again, counted by why.
func TestBoundTokensAreCheckedLocallyBetweenReviews(t *testing.T) {
	registerMetrics()
	for _, tc := range []struct {
		name     string
		cache    func(*fakeObjects)
		fallback string // "": no reviews between
	}{
		{"everything in the cache, fresh", nil, ""},
		{"the pods' cache not fresh", func(f *fakeObjects) { f.mu.Lock(); f.stale["pods"] = true; f.mu.Unlock() }, fallbackStale},
		{"its pod missing from the cache", func(f *fakeObjects) { f.mu.Lock(); delete(f.objects, "pods/kube-system/kube-proxy-1"); f.mu.Unlock() }, fallbackMissing},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fallbacks := func() float64 {
				if tc.fallback == "" {
					return 0
				}
				v, err := testutil.GetCounterMetricValue(localFallbacks.WithLabelValues(tc.fallback))
				if err != nil {
					t.Fatal(err)
				}
				return v
			}
			before := fallbacks()
			objs, reviews := cluster(), newTokenReviews()
			token := kubeProxyToken(objs, "key-1", 1)
			a := newReauthenticator(reviews, nil, objs, 5*time.Millisecond, ages{direct: time.Hour})
			a.canaries.interval = time.Hour
			if tc.cache != nil {
				tc.cache(objs)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			end := a.follow(ctx, upgrade(token))
			// 20 checks: lookups count the local ones (a ServiceAccount
			// and a pod each), reviews the others.
			for objs.lookupCount() < 40 && reviews.count(token) < 21 {
				select {
				case st := <-end:
					t.Fatalf("the connection ended with %+v", st)
				case <-time.After(time.Millisecond):
				}
			}
			if got := reviews.count(token); (tc.fallback != "") != (got > 1) {
				t.Errorf("%d reviews of the token (one when it opened), want reviews between: %v", got, tc.fallback != "")
			}
			if tc.fallback != "" && fallbacks() == before {
				t.Errorf("no review counted as %s", tc.fallback)
			}
		})
	}
}

// TestPodInGracefulDeletionEndsItsTokensConnectionAtDeletionTimestampPlusLeeway:
// the cache sees the token's pod marked for deletion; the connection
// ends with 401 once the deletionTimestamp is more than the leeway ago,
// as kube-apiserver then refuses the token, not before, with no periodic
// check (an hour) to end it. With everything in the cache fresh, no
// review is made; with the ServiceAccounts' cache not fresh, the checks
// are reviews, and one is made at that instant, when kube-apiserver
// refuses.
func TestPodInGracefulDeletionEndsItsTokensConnectionAtDeletionTimestampPlusLeeway(t *testing.T) {
	for _, tc := range []struct {
		name       string
		stale      bool
		maxReviews int
		// publishLate: the cache publishes the marked pod only after its
		// handlers ran, as the store does, so the check they wake reads
		// the pod unmarked.
		publishLate bool
	}{
		{"everything in the cache, fresh", false, 1, false},
		{"the ServiceAccounts' cache not fresh", true, 3, false},
		{"the cache publishing after its handlers", false, 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs, reviews, bound := cluster(), newTokenReviews(), newBoundObjects()
			token := kubeProxyToken(objs, "key-1", 1)
			a := newReauthenticator(reviews, bound, objs, time.Hour, ages{direct: time.Hour})
			a.canaries.interval = time.Hour
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			end := a.follow(ctx, upgrade(token))

			// deletionTimestamp is in whole seconds: a second or two
			// from now, minus the leeway.
			deletionTimestamp := time.Now().Add(2 * time.Second).Truncate(time.Second).Add(-serviceAccountLeeway)
			refusedFrom := deletionTimestamp.Add(serviceAccountLeeway)
			reviews.mu.Lock()
			reviews.refuseFrom = refusedFrom
			reviews.mu.Unlock()
			objs.mu.Lock()
			objs.stale["serviceaccounts"] = tc.stale
			objs.mu.Unlock()
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "kube-proxy-1", UID: "pod-1"}}
			marked := deleting(pod.DeepCopy(), deletionTimestamp)
			if !tc.publishLate {
				objs.put("pods", marked)
			}
			bound.handler().OnUpdate(pod, marked)
			if tc.publishLate {
				time.Sleep(100 * time.Millisecond)
				objs.put("pods", marked)
			}

			st := ended(t, end)
			if at := time.Now(); at.Before(refusedFrom) {
				t.Errorf("ended %s before kube-apiserver's rule refuses the token", refusedFrom.Sub(at))
			}
			if st.Code != http.StatusUnauthorized || st.Message != "Unauthorized" {
				t.Errorf("ended with %+v, want kube-apiserver's 401", st)
			}
			if got := reviews.count(token); got > tc.maxReviews {
				t.Errorf("%d reviews, want at most %d", got, tc.maxReviews)
			}
		})
	}
}

// TestRefusedCanaryHasItsClassReviewed: kube-apiserver stops accepting
// the tokens of one signing key (an external signer's key removed),
// which no object in the cache shows. The class's canary is refused, so
// every token of the class is reviewed at once and its connections end
// with 401, though the connections' own checks (an hour apart here)
// would not have come; another key's tokens are untouched. A canary
// whose review cannot be made keeps every connection.
func TestRefusedCanaryHasItsClassReviewed(t *testing.T) {
	t.Run("refused", func(t *testing.T) {
		objs, reviews := cluster(), newTokenReviews()
		a := newReauthenticator(reviews, nil, objs, time.Hour, ages{direct: time.Hour})
		a.canaries.interval = 5 * time.Millisecond
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var removed, kept []<-chan *metav1.Status
		var keptTokens []string
		for i := range 5 {
			removed = append(removed, a.follow(ctx, upgrade(kubeProxyToken(objs, "removed-key", i))))
			keptTokens = append(keptTokens, kubeProxyToken(objs, "kept-key", 10+i))
			kept = append(kept, a.follow(ctx, upgrade(keptTokens[i])))
		}
		keptReviews := func() int {
			n := 0
			for _, token := range keptTokens {
				n += reviews.count(token)
			}
			return n
		}
		// No token is a canary until its local check passed once: the
		// connections' checks are an hour apart, so pass them here.
		passAll(a)
		reviews.set("removed-key", errors.New("invalid signature, no keys found"), nil)
		for _, end := range removed {
			if st := ended(t, end); st.Code != http.StatusUnauthorized {
				t.Errorf("ended with %+v, want 401", st)
			}
		}
		// The other key's class goes on: its canaries accepted, five
		// more of them, and none of its connections ended.
		for _, end := range kept {
			notEnded(t, end, keptReviews, keptReviews()+5)
		}
	})
	t.Run("cannot be made", func(t *testing.T) {
		objs, reviews := cluster(), newTokenReviews()
		a := newReauthenticator(reviews, nil, objs, time.Hour, ages{direct: time.Hour})
		a.canaries.interval, a.canaries.retry = 5*time.Millisecond, 5*time.Millisecond
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		token := kubeProxyToken(objs, "key-1", 1)
		end := a.follow(ctx, upgrade(token))
		passAll(a)
		reviews.set("key-1", nil, apierrors.NewTimeoutError("the review timed out", 1))
		notEnded(t, end, func() int { return reviews.count(token) }, 6)
	})
}

// passAll marks every member of a's classes as having passed its local
// check, as its first check would.
func passAll(a *reauthenticator) {
	a.canaries.mu.Lock()
	defer a.canaries.mu.Unlock()
	for _, cm := range a.canaries.classes {
		for m := range cm.members {
			m.passed.Store(true)
		}
	}
}

// TestTokenMarkedBeforeItsConnectionOpenedIsTimedToo: the pod a token is
// bound to was marked for deletion before the connection opened (its
// token still accepted at the door, as kube-apiserver's token cache may
// accept it up to 10 s past its rule), so no mark reaches the
// connection's follow. Its check at the open times the refusal all the
// same: at once when the mark is already more than the leeway old, at
// deletionTimestamp plus the leeway otherwise; never at the next
// periodic check, an hour away here.
func TestTokenMarkedBeforeItsConnectionOpenedIsTimedToo(t *testing.T) {
	for _, tc := range []struct {
		name string
		ago  time.Duration // the deletionTimestamp, before the open
	}{
		{"marked more than the leeway ago", serviceAccountLeeway + 5*time.Second},
		{"marked less than the leeway ago", serviceAccountLeeway - 2*time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs, reviews, bound := cluster(), newTokenReviews(), newBoundObjects()
			token := kubeProxyToken(objs, "key-1", 1)
			deletionTimestamp := time.Now().Add(-tc.ago).Truncate(time.Second)
			refusedFrom := deletionTimestamp.Add(serviceAccountLeeway)
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "kube-proxy-1", UID: "pod-1"}}
			objs.put("pods", deleting(pod, deletionTimestamp))
			a := newReauthenticator(reviews, bound, objs, time.Hour, ages{direct: time.Hour})
			a.canaries.interval = time.Hour
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			st := ended(t, a.follow(ctx, upgrade(token)))
			if at := time.Now(); at.Before(refusedFrom) {
				t.Errorf("ended %s before kube-apiserver's rule refuses the token", refusedFrom.Sub(at))
			}
			if st.Code != http.StatusUnauthorized {
				t.Errorf("ended with %+v, want kube-apiserver's 401", st)
			}
		})
	}
}
