package controlplane

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	apiserverv1 "k8s.io/apiserver/pkg/apis/apiserver/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"
)

// AuthorizationConfigManifest is kube-apiserver's --authorization-config
// as the authorization-webhook overlay ships it, relative to the
// repository, for tests and the demo to run kube-apiserver with.
const AuthorizationConfigManifest = "manifests/overlays/authorization-webhook/authorization-config.yaml"

// WebhookAuthorization returns an Options.AuthorizationFor that loads the
// AuthorizationConfiguration file at configPath (nodeproxy's manifest),
// points its first authorizer, a webhook, at url with a client certificate
// for user, and, unless cache is true, turns kube-apiserver's decision
// cache off so that what a test sees is the webhook's answer of the moment.
func WebhookAuthorization(configPath, url, user string, cache bool) func(*ControlPlane) (*apiserverv1.AuthorizationConfiguration, error) {
	return func(cp *ControlPlane) (*apiserverv1.AuthorizationConfiguration, error) {
		raw, err := os.ReadFile(configPath)
		if err != nil {
			return nil, err
		}
		var c apiserverv1.AuthorizationConfiguration
		if err := yaml.UnmarshalStrict(raw, &c); err != nil {
			return nil, fmt.Errorf("%s: %w", configPath, err)
		}
		if len(c.Authorizers) == 0 || c.Authorizers[0].Webhook == nil {
			return nil, fmt.Errorf("%s: the first authorizer is not a webhook", configPath)
		}
		client, err := cp.UserConfig(user)
		if err != nil {
			return nil, err
		}
		client.Host = url
		// One file per webhook address: peer kube-apiservers may each
		// ask a replica of their own.
		kubeconfig := filepath.Join(cp.Dir, "authorization-webhook-"+strings.NewReplacer(":", "-", "/", "-").Replace(strings.TrimPrefix(url, "https://"))+".kubeconfig")
		if err := WriteKubeconfig(client, kubeconfig); err != nil {
			return nil, err
		}
		w := c.Authorizers[0].Webhook
		w.ConnectionInfo.KubeConfigFile = &kubeconfig
		if !cache {
			w.CacheAuthorizedRequests = ptr.To(false)
			w.CacheUnauthorizedRequests = ptr.To(false)
		}
		return &c, nil
	}
}
