package hub

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeproxy/nodeproxy/cache"
)

// TestCachedObjectsAnswerOnlyFromFreshTypes: the local check reads a
// type's objects only once its store has listed and heard from
// kube-apiserver within the bound; a type not listed yet, one heard
// from too long ago, or a bound of 0 is stale, and an object a fresh
// store does not hold is missing, not refused.
func TestCachedObjectsAnswerOnlyFromFreshTypes(t *testing.T) {
	objects, err := cache.NewDetached(cache.Options{LogSize: 16, EncodedEntries: 16})
	if err != nil {
		t.Fatal(err)
	}
	pods := objects.Store(corev1.SchemeGroupVersion.WithResource("pods"))
	c := newCachedObjects(objects, time.Minute)

	if _, got := c.lookup("pods", "kube-system", "kube-proxy-a"); got != lookupStale {
		t.Errorf("before the first list: %v, want stale", got)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "kube-proxy-a", UID: "pod-1", ResourceVersion: "5"}}
	if err := pods.Replace([]interface{}{pod}, "5"); err != nil {
		t.Fatal(err)
	}
	if o, got := c.lookup("pods", "kube-system", "kube-proxy-a"); got != lookupFound || o.GetUID() != "pod-1" {
		t.Errorf("listed: %v %v, want pod-1", o, got)
	}
	if _, got := c.lookup("pods", "kube-system", "kube-proxy-b"); got != lookupMissing {
		t.Errorf("another pod: %v, want missing", got)
	}
	if _, got := c.lookup("serviceaccounts", "kube-system", "kube-proxy"); got != lookupStale {
		t.Errorf("serviceaccounts, never listed: %v, want stale", got)
	}
	c.now = func() time.Time { return time.Now().Add(2 * time.Minute) }
	if _, got := c.lookup("pods", "kube-system", "kube-proxy-a"); got != lookupStale {
		t.Errorf("not heard from for 2 minutes: %v, want stale", got)
	}
	if _, got := newCachedObjects(objects, 0).lookup("pods", "kube-system", "kube-proxy-a"); got != lookupStale {
		t.Errorf("bound 0: %v, want stale", got)
	}
}
