package get

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeproxy/nodeproxy/apis/bulk/v1alpha1"
	"github.com/nodeproxy/nodeproxy/bulk/internal/bulktest"
)

// TestBulkGetsDuringChurn reads while the cache's writer changes secrets
// and pods: every answer must be one consistent state (no item newer than
// its list, no object twice, key order), and a node must be allowed what
// it reached at the moment it asked. Run with -race.
func TestBulkGetsDuringChurn(t *testing.T) {
	f := newFixture(t, 256)
	for i := range 50 {
		f.Add(t, bulktest.Secret("a", fmt.Sprintf("s%02d", i)))
	}
	f.Add(t, bulktest.Pod("a", "p", "node-a", "s00"))
	done := make(chan struct{})
	var wg sync.WaitGroup
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			spec := &v1alpha1.BulkGetOperationSpec{Operations: []v1alpha1.GetOperation{
				bulktest.FieldOp("secrets", "a", ""), bulktest.GetOp("secrets", "a", metav1.ListOptions{Limit: 7}),
			}}
			for {
				select {
				case <-done:
					return
				default:
				}
				raw, err := f.getter.Get(context.Background(), bulktest.Admin, spec)
				if err != nil {
					t.Error(err)
					return
				}
				for _, r := range raw {
					var l struct {
						Metadata struct{ ResourceVersion string }
						Items    []struct{ Metadata metav1.ObjectMeta }
					}
					if err := json.Unmarshal(r.Raw, &l); err != nil {
						t.Error(err)
						return
					}
					listRV, _ := strconv.ParseUint(l.Metadata.ResourceVersion, 10, 64)
					prev := ""
					for _, it := range l.Items {
						rv, _ := strconv.ParseUint(it.Metadata.ResourceVersion, 10, 64)
						if rv > listRV || it.Metadata.Name <= prev {
							t.Errorf("list at %d holds %s at %d after %q", listRV, it.Metadata.Name, rv, prev)
							return
						}
						prev = it.Metadata.Name
					}
				}
				// The node's pod always references s00 (it only moves
				// between volumes), so this is never refused.
				if _, err := f.getter.Get(context.Background(), bulktest.NodeA, &v1alpha1.BulkGetOperationSpec{Operations: []v1alpha1.GetOperation{
					bulktest.FieldOp("secrets", "a", "metadata.name=s00"),
				}}); err != nil {
					t.Errorf("node-a refused its pod's secret during churn: %v", err)
					return
				}
			}
		}()
	}
	for i := range 3000 {
		name := fmt.Sprintf("s%02d", i%50)
		if i%7 == 0 {
			if err := f.Cache.Store(bulktest.GVR("secrets")).Delete(bulktest.Secret("a", name)); err != nil {
				t.Fatal(err)
			}
			continue
		}
		f.Add(t, bulktest.Secret("a", name))
		f.Add(t, bulktest.Pod("a", "p", "node-a", "s00", name))
	}
	close(done)
	wg.Wait()
}
