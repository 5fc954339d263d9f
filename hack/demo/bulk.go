package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"github.com/nodeproxy/nodeproxy/test/controlplane"
)

// bulkRequestFile is what a kubelet on node-a would ask for when web-0
// starts: its secret and configmap, and its own pods, in one request. The
// demo sends the documented example, so the example stays true.
const bulkRequestFile = "docs/examples/bulkget.yaml"

// showBulkGet posts bulkRequestFile through kube-apiserver's aggregator as
// node-a and as node-b, and prints what comes back: lists for node-a, a
// 403 naming the refused operation for node-b.
func showBulkGet(ctx context.Context, cp *controlplane.ControlPlane) error {
	manifest, err := os.ReadFile(bulkRequestFile)
	if err != nil {
		return err
	}
	body, err := yaml.YAMLToJSON(manifest)
	if err != nil {
		return fmt.Errorf("%s: %w", bulkRequestFile, err)
	}
	for _, node := range []string{"node-a", "node-b"} {
		cfg, err := cp.NodeConfig(node)
		if err != nil {
			return err
		}
		client, err := rest.HTTPClientFor(cfg)
		if err != nil {
			return err
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, cfg.Host+"/apis/bulk.k8s.io/v1alpha1/bulkgetoperations", bytes.NewReader(body))
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
