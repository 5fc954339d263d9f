package bench

import (
	"context"
	"encoding/json"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/nodeproxy/nodeproxy/apis/bulk/v1alpha1"
	"github.com/nodeproxy/nodeproxy/watchmux"
)

// bulkClient posts bulk gets as one user, over one kept-alive connection.
type bulkClient struct {
	rest rest.Interface
}

func newBulkClient(cfg *rest.Config) (*bulkClient, error) {
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("bulk client for %s: %w", cfg.Host, err)
	}
	return &bulkClient{rest: kube.CoreV1().RESTClient()}, nil
}

// get posts one bulk get of ops and returns how many objects each
// operation's list holds. A refusal is the server's *StatusError.
func (c *bulkClient) get(ctx context.Context, ops []v1alpha1.GetOperation) ([]int, error) {
	body, err := json.Marshal(&v1alpha1.BulkGetOperation{
		TypeMeta: metav1.TypeMeta{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: "BulkGetOperation"},
		Spec:     v1alpha1.BulkGetOperationSpec{Operations: ops},
	})
	if err != nil {
		return nil, err
	}
	raw, err := c.rest.Post().AbsPath(watchmux.Path).SetHeader("Content-Type", "application/json").Body(body).Do(ctx).Raw()
	if err != nil {
		return nil, err
	}
	var out struct {
		Status struct {
			Results []struct{ Items []json.RawMessage }
		}
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		return nil, fmt.Errorf("bulk get answer: %w", err)
	}
	if len(out.Status.Results) != len(ops) {
		return nil, fmt.Errorf("bulk get answered %d of %d operations", len(out.Status.Results), len(ops))
	}
	counts := make([]int, len(ops))
	for i, r := range out.Status.Results {
		counts[i] = len(r.Items)
	}
	return counts, nil
}

// namedOp selects one object by name, as a kubelet asks for what a pod
// uses.
func namedOp(resource, namespace, name string) v1alpha1.GetOperation {
	return v1alpha1.GetOperation{Resource: metav1GVR(resource), Namespace: namespace,
		Options: metav1.ListOptions{FieldSelector: "metadata.name=" + name}}
}
