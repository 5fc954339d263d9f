package hub

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"
)

// answers is an authenticator whose answer the test sets.
type answers struct {
	mu   sync.Mutex
	name string
	err  error
	ok   bool
}

func (a *answers) set(name string, ok bool, err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.name, a.ok, a.err = name, ok, err
}

func (a *answers) AuthenticateRequest(*http.Request) (*authenticator.Response, bool, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.ok {
		return nil, false, a.err
	}
	return &authenticator.Response{User: &user.DefaultInfo{Name: a.name}}, true, nil
}

// upgrade is a bulk watch upgrade with token, as withCredential keeps it.
func upgrade(token string) *http.Request {
	r := httptest.NewRequest(http.MethodGet, "/apis/bulk.k8s.io/v1alpha1/bulkgetoperations?watch=1", nil)
	r.Header.Set("Authorization", "Bearer "+token)
	r.Header.Set("Connection", "Upgrade")
	r.Header.Set("Upgrade", "websocket")
	var kept *http.Request
	withCredential(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) { kept = r })).ServeHTTP(httptest.NewRecorder(), r)
	return kept
}

func ended(t *testing.T, end <-chan *metav1.Status) *metav1.Status {
	t.Helper()
	select {
	case st := <-end:
		return st
	case <-time.After(time.Minute):
		t.Fatal("the connection was not ended")
		return nil
	}
}

func notEnded(t *testing.T, end <-chan *metav1.Status, checks func() int, n int) {
	t.Helper()
	for checks() < n {
		select {
		case st := <-end:
			t.Fatalf("the connection was ended with %+v", st)
		case <-time.After(time.Millisecond):
		}
	}
}

func TestReauthenticationEndsAConnectionWhoseTokenNoLongerAuthenticatesWith401(t *testing.T) {
	for _, tc := range []struct {
		name   string
		revoke func(*answers)
	}{
		{"refused", func(a *answers) { a.set("", false, nil) }},
		{"refused with the review's reason", func(a *answers) {
			a.set("", false, errors.New("[invalid bearer token, service account token has been invalidated]"))
		}},
		{"someone else", func(a *answers) { a.set("system:serviceaccount:other:other", true, nil) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			authn := &answers{name: "system:serviceaccount:kube-system:kube-proxy", ok: true}
			a := newReauthenticator(authn, nil, nil, 10*time.Millisecond, ages{direct: time.Hour})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			end := a.follow(ctx, upgrade("token"))
			tc.revoke(authn)
			st := ended(t, end)
			if want := apierrors.NewUnauthorized("Unauthorized").ErrStatus; st.Code != want.Code || st.Reason != want.Reason || st.Message != want.Message {
				t.Errorf("ended with %+v, want kube-apiserver's %+v", st, want)
			}
		})
	}
}

func TestReauthenticationKeepsAConnectionWhoseCheckCannotBeMade(t *testing.T) {
	authn := &answers{name: "kube-proxy", ok: true}
	a := newReauthenticator(authn, nil, nil, 10*time.Millisecond, ages{direct: time.Hour})
	var mu sync.Mutex
	calls := 0
	counted := &countingAuthn{next: authn, count: func() { mu.Lock(); calls++; mu.Unlock() }}
	a.authn, a.retry = counted, 10*time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	end := a.follow(ctx, upgrade("token"))
	authn.set("", false, apierrors.NewTimeoutError("the review timed out", 1))
	// Checks that cannot be made, one after another, do not end it.
	notEnded(t, end, func() int { mu.Lock(); defer mu.Unlock(); return calls }, 5)
}

type countingAuthn struct {
	next  authenticator.Request
	count func()
}

func (c *countingAuthn) AuthenticateRequest(r *http.Request) (*authenticator.Response, bool, error) {
	c.count()
	return c.next.AuthenticateRequest(r)
}

func TestReauthenticationEndsAConnectionAtItsMaximumAgeWith503(t *testing.T) {
	a := newReauthenticator(&answers{name: "kube-proxy", ok: true}, nil, nil, time.Hour, ages{direct: 10 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if st := ended(t, a.follow(ctx, upgrade("token"))); st.Code != http.StatusServiceUnavailable {
		t.Errorf("ended with %+v, want 503 (the client resumes elsewhere)", st)
	}
}

func TestCredentialExpiry(t *testing.T) {
	jwt := func(payload string) string {
		return "e30." + base64.RawURLEncoding.EncodeToString([]byte(payload)) + ".sig"
	}
	notAfter := time.Unix(2_000_000_000, 0)
	for _, tc := range []struct {
		name string
		cred *credential
		want time.Time
		ok   bool
	}{
		{"a JWT's exp", &credential{header: http.Header{"Authorization": {"Bearer " + jwt(`{"exp":1900000000}`)}}}, time.Unix(1_900_000_000, 0), true},
		{"a JWT without exp", &credential{header: http.Header{"Authorization": {"Bearer " + jwt(`{}`)}}}, time.Time{}, false},
		{"an opaque token", &credential{header: http.Header{"Authorization": {"Bearer abcdef.0123456789abcdef"}}}, time.Time{}, false},
		{"a client certificate", &credential{header: http.Header{}, tls: &tls.ConnectionState{PeerCertificates: []*x509.Certificate{{NotAfter: notAfter}}}}, notAfter, true},
		{"nothing", &credential{header: http.Header{}}, time.Time{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := expiry(tc.cred)
			if ok != tc.ok || !got.Equal(tc.want) {
				t.Errorf("expiry: %s %v, want %s %v", got, ok, tc.want, tc.ok)
			}
		})
	}
}
