package prometheus

import (
	"fmt"
	"os"

	"sigs.k8s.io/yaml"
)

// ServiceMonitorJob returns the scrape configuration the Prometheus
// Operator generates from the first endpoint of the ServiceMonitor at
// path, for one pod of the Service at address (host:port), with the
// token the endpoint's bearerTokenFile names read from tokenFile instead
// (the test's Prometheus has no ServiceAccount mount). Service discovery
// is the one part replaced: the target is static, labelled as the
// operator labels an endpoint's target (job: the Service; namespace,
// service, pod, endpoint: the port's name). Any endpoint setting this
// does not translate is an error, so that a setting added to the
// ServiceMonitor cannot go untested.
func ServiceMonitorJob(path, address, pod, tokenFile string) (map[string]any, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var sm struct {
		Kind     string `json:"kind"`
		Metadata struct {
			Name      string `json:"name"`
			Namespace string `json:"namespace"`
		} `json:"metadata"`
		Spec struct {
			NamespaceSelector struct {
				MatchNames []string `json:"matchNames"`
			} `json:"namespaceSelector"`
			Endpoints []map[string]any `json:"endpoints"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(raw, &sm); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if sm.Kind != "ServiceMonitor" || len(sm.Spec.Endpoints) != 1 {
		return nil, fmt.Errorf("%s: want a ServiceMonitor with one endpoint, got kind %q with %d", path, sm.Kind, len(sm.Spec.Endpoints))
	}
	namespace := sm.Metadata.Namespace
	if len(sm.Spec.NamespaceSelector.MatchNames) == 1 {
		namespace = sm.Spec.NamespaceSelector.MatchNames[0]
	}
	ep := sm.Spec.Endpoints[0]
	port, _ := ep["port"].(string)
	job := map[string]any{
		// The operator's job label is the Service's name, which the base
		// names as the ServiceMonitor.
		"job_name": sm.Metadata.Name,
		"static_configs": []any{map[string]any{
			"targets": []string{address},
			"labels": map[string]string{
				"namespace": namespace, "service": sm.Metadata.Name, "pod": pod, "endpoint": port,
			},
		}},
	}
	for k, v := range ep {
		switch k {
		case "port", "interval":
			// The target's address; the interval is the test's (it
			// waits for samples, not for 30 s).
		case "scheme":
			job["scheme"] = v
		case "path":
			job["metrics_path"] = v
		case "bearerTokenFile":
			job["authorization"] = map[string]any{"type": "Bearer", "credentials_file": tokenFile}
		case "tlsConfig":
			tls := map[string]any{}
			for tk, tv := range v.(map[string]any) {
				switch tk {
				case "insecureSkipVerify":
					tls["insecure_skip_verify"] = tv
				case "serverName":
					tls["server_name"] = tv
				default:
					return nil, fmt.Errorf("%s: tlsConfig.%s: not translated by the test (add it to ServiceMonitorJob)", path, tk)
				}
			}
			job["tls_config"] = tls
		default:
			return nil, fmt.Errorf("%s: endpoint setting %s: not translated by the test (add it to ServiceMonitorJob)", path, k)
		}
	}
	return job, nil
}

// ScrapeConfigJob returns the one scrape configuration in the file at
// path (a list of scrape_configs, as Prometheus's additionalScrapeConfigs
// takes), with its Kubernetes service discovery replaced by one static
// target carrying the meta labels discovery would give it (sdLabels, for
// the relabelling to use as shipped), and its credentials_file by
// tokenFile.
func ScrapeConfigJob(path string, sdLabels map[string]string, tokenFile string) (map[string]any, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var jobs []map[string]any
	if err := yaml.Unmarshal(raw, &jobs); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(jobs) != 1 {
		return nil, fmt.Errorf("%s: %d scrape configurations, want 1", path, len(jobs))
	}
	job := jobs[0]
	if _, ok := job["kubernetes_sd_configs"]; !ok {
		return nil, fmt.Errorf("%s: no kubernetes_sd_configs to stand in for", path)
	}
	delete(job, "kubernetes_sd_configs")
	job["static_configs"] = []any{map[string]any{
		// Discovery sets __address__ too; the shipped relabelling
		// replaces it.
		"targets": []string{"discovered.invalid:1"},
		"labels":  sdLabels,
	}}
	auth, ok := job["authorization"].(map[string]any)
	if !ok || auth["credentials_file"] == nil {
		return nil, fmt.Errorf("%s: no authorization.credentials_file (the ServiceAccount token)", path)
	}
	auth["credentials_file"] = tokenFile
	return job, nil
}
