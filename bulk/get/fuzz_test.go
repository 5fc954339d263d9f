package get

import (
	"context"
	"encoding/json"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apiserver/pkg/authentication/user"

	"github.com/nodeproxy/nodeproxy/apis/bulk/v1alpha1"
	"github.com/nodeproxy/nodeproxy/bulk/internal/bulktest"
)

// FuzzBulkGet feeds arbitrary specs to a bulk get as an bulktest.Admin and as a
// node: whatever the input, the answer is results or an API status (never
// a panic, never a bare error). `go test` runs the seeds; explore with
//
//	go test ./bulk/get -run '^$' -fuzz FuzzBulkGet -fuzztime 60s
func FuzzBulkGet(f *testing.F) {
	for _, seed := range []string{
		`{"operations":[{"resource":{"version":"v1","resource":"secrets"},"namespace":"a","options":{"fieldSelector":"metadata.name=s1"}}]}`,
		`{"operations":[{"resource":{"version":"v1","resource":"pods"},"options":{"fieldSelector":"spec.nodeName=node-a","limit":1}}]}`,
		`{"operations":[{"resource":{"version":"v1","resource":"secrets"},"options":{"fieldSelector":"bulk.k8s.io/reachableFrom=node-a","labelSelector":"x in (a,b),!y"}}]}`,
		`{"operations":[{"resource":{"version":"v1","resource":"nodes"},"namespace":"x","options":{"resourceVersion":"5","resourceVersionMatch":"Exact"}}]}`,
		`{"operations":[{"resource":{"version":"v1","resource":"configmaps"},"options":{"continue":"eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6MSwic3RhcnQiOiJhL2IifQ"}}]}`,
		`{"operations":[]}`,
	} {
		f.Add([]byte(seed))
	}
	fx := newFixture(f, 16)
	fx.Add(f, bulktest.Secret("a", "s1"))
	fx.Add(f, bulktest.Pod("a", "p", "node-a", "s1"))
	f.Fuzz(func(t *testing.T, data []byte) {
		var spec v1alpha1.BulkGetOperationSpec
		if json.Unmarshal(data, &spec) != nil {
			return
		}
		for _, u := range []user.Info{bulktest.Admin, bulktest.NodeA} {
			ctx, cancel := context.WithCancel(context.Background())
			cancel() // a version the cache has not reached fails at once instead of waiting
			results, err := fx.getter.Get(ctx, u, &spec)
			if err != nil {
				if _, ok := err.(apierrors.APIStatus); !ok {
					t.Fatalf("%s: a bare error: %v", u.GetName(), err)
				}
				continue
			}
			if len(results) != len(spec.Operations) {
				t.Fatalf("%s: %d results for %d operations", u.GetName(), len(results), len(spec.Operations))
			}
			for i, r := range results {
				if !json.Valid(r.Raw) {
					t.Fatalf("result %d is not JSON: %s", i, r.Raw)
				}
			}
		}
	})
}
