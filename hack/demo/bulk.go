package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

	"k8s.io/client-go/rest"

	"github.com/nodeproxy/nodeproxy/internal/controlplane"
)

// bulkRequest is what a kubelet on node-a would ask for when web-0 starts:
// its secret and configmap, and its own pods, in one request.
const bulkRequest = `{
  "apiVersion": "bulk.k8s.io/v1alpha1", "kind": "BulkGetOperation",
  "spec": {"operations": [
    {"resource": {"group": "", "version": "v1", "resource": "secrets"}, "namespace": "demo",
     "options": {"fieldSelector": "metadata.name=db-password"}},
    {"resource": {"group": "", "version": "v1", "resource": "configmaps"}, "namespace": "demo",
     "options": {"fieldSelector": "metadata.name=web-config"}},
    {"resource": {"group": "", "version": "v1", "resource": "pods"},
     "options": {"fieldSelector": "spec.nodeName=%s"}}
  ]}
}`

// showBulkGet posts bulkRequest through kube-apiserver's aggregator as
// node-a and as node-b, and prints what comes back: lists for node-a, a
// 403 naming the refused operation for node-b.
func showBulkGet(ctx context.Context, cp *controlplane.ControlPlane) error {
	for _, node := range []string{"node-a", "node-b"} {
		cfg, err := cp.NodeConfig(node)
		if err != nil {
			return err
		}
		client, err := rest.HTTPClientFor(cfg)
		if err != nil {
			return err
		}
		body := fmt.Sprintf(bulkRequest, "node-a")
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, cfg.Host+"/apis/bulk.k8s.io/v1alpha1/bulkgetoperations", strings.NewReader(body))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			return fmt.Errorf("bulk get as %s: %w", node, err)
		}
		raw, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return err
		}
		fmt.Printf("    %s asks for demo/db-password, demo/web-config and node-a's pods: %s\n", node, resp.Status)
		if resp.StatusCode != http.StatusCreated {
			var status struct{ Message string }
			_ = json.Unmarshal(raw, &status)
			fmt.Printf("        %s\n", status.Message)
			continue
		}
		var out struct {
			Status struct {
				Results []struct {
					Kind     string
					Metadata struct{ ResourceVersion string }
					Items    []struct {
						Metadata struct{ Namespace, Name string }
					}
				}
			}
		}
		if err := json.Unmarshal(raw, &out); err != nil {
			return fmt.Errorf("bulk get answer: %w", err)
		}
		for i, r := range out.Status.Results {
			var names []string
			for _, it := range r.Items {
				names = append(names, it.Metadata.Namespace+"/"+it.Metadata.Name)
			}
			fmt.Printf("        results[%d]: %s at resourceVersion %s: %s\n", i, r.Kind, r.Metadata.ResourceVersion, strings.Join(names, ", "))
		}
	}
	return nil
}
