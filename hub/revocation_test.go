package hub

import (
	"context"
	"encoding/base64"
	"net/http"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"
)

// boundToken is a JWT whose claims bind it to Secret secretUID of
// ServiceAccount saUID, as a TokenRequest with a bound object issues it.
func boundToken(secretUID, saUID string) string {
	payload := `{"exp":4000000000,"kubernetes.io":{"namespace":"kube-system","secret":{"name":"holder","uid":"` + secretUID +
		`"},"serviceaccount":{"name":"kube-proxy","uid":"` + saUID + `"}}}`
	return "e30." + base64.RawURLEncoding.EncodeToString([]byte(payload)) + ".sig"
}

// TestDeletingWhatATokenIsBoundToEndsItsConnectionsWith401: the bound
// Secret's or the ServiceAccount's deletion, as the cache hears it (a
// tombstone too), ends every connection of a token that names it, at
// once, with kube-apiserver's 401, and no other token's; the checks
// would still have let it be (the review answers from caches).
func TestDeletingWhatATokenIsBoundToEndsItsConnectionsWith401(t *testing.T) {
	for _, tc := range []struct {
		name    string
		deleted interface{}
	}{
		{"the bound Secret", &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "holder", UID: "secret-1"}}},
		{"the ServiceAccount, as a tombstone", toolscache.DeletedFinalStateUnknown{Key: "kube-system/kube-proxy",
			Obj: &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "kube-proxy", UID: "sa-1"}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bound := newBoundObjects()
			a := newReauthenticator(&answers{name: "system:serviceaccount:kube-system:kube-proxy", ok: true}, bound, nil, time.Hour, ages{direct: time.Hour})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			first := a.follow(ctx, upgrade(boundToken("secret-1", "sa-1")))
			second := a.follow(ctx, upgrade(boundToken("secret-1", "sa-1")))
			other := a.follow(ctx, upgrade(boundToken("secret-2", "sa-2")))
			bound.handler().OnDelete(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "unrelated", UID: "secret-3"}})
			bound.handler().OnDelete(tc.deleted)
			for _, end := range []<-chan *metav1.Status{first, second} {
				if st := ended(t, end); st.Code != http.StatusUnauthorized || st.Message != "Unauthorized" {
					t.Errorf("ended with %+v, want kube-apiserver's 401", st)
				}
			}
			select {
			case st := <-other:
				t.Errorf("another token's connection ended with %+v", st)
			case <-time.After(100 * time.Millisecond):
			}
		})
	}
}

// TestConnectionsStopFollowingTheirBoundObjectsWhenTheyEnd: the index
// holds nothing of a connection that has ended.
func TestConnectionsStopFollowingTheirBoundObjectsWhenTheyEnd(t *testing.T) {
	bound := newBoundObjects()
	a := newReauthenticator(&answers{name: "kube-proxy", ok: true}, bound, nil, time.Hour, ages{direct: time.Hour})
	ctx, cancel := context.WithCancel(context.Background())
	a.follow(ctx, upgrade(boundToken("secret-1", "sa-1")))
	cancel()
	for range 1000 {
		bound.mu.Lock()
		n := len(bound.byUID)
		bound.mu.Unlock()
		if n == 0 {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Error("an ended connection is still followed")
}
