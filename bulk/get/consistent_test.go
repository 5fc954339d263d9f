package get

import (
	"context"
	"errors"
	"net/http"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/nodeproxy/nodeproxy/bulk"
	"github.com/nodeproxy/nodeproxy/bulk/internal/bulktest"
)

type unreachable struct{}

func (unreachable) LatestVersion(context.Context, schema.GroupVersionResource) (uint64, error) {
	return 0, errors.New("connection refused")
}

// TestConsistentReadNeverFallsBackToTheCache: when kube-apiserver cannot
// be asked its resourceVersion (or nobody was given to ask), a read with
// resourceVersion "" is refused with 500 ServerTimeout, as kube-apiserver
// refuses one when etcd does not answer, never answered from the cache as
// it stands; "0" is still answered from the cache.
func TestConsistentReadNeverFallsBackToTheCache(t *testing.T) {
	for _, tc := range []struct {
		name   string
		source bulk.LatestVersions
	}{
		{"kube-apiserver unreachable", unreachable{}},
		{"nobody to ask", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, 16)
			f.Catalog.AskLatest(tc.source)
			_, err := f.get(t, bulktest.Admin, bulktest.GetOp("secrets", "a", metav1.ListOptions{}))
			var status apierrors.APIStatus
			if !errors.As(err, &status) || status.Status().Code != http.StatusInternalServerError || status.Status().Reason != metav1.StatusReasonServerTimeout {
				t.Fatalf("resourceVersion \"\": %v, want 500 ServerTimeout", err)
			}
			if _, err := f.get(t, bulktest.Admin, bulktest.GetOp("secrets", "a", metav1.ListOptions{ResourceVersion: "0"})); err != nil {
				t.Fatalf("resourceVersion \"0\": %v", err)
			}
		})
	}
}
