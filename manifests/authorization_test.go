package manifests

import (
	"os"
	"testing"

	apiserverv1 "k8s.io/apiserver/pkg/apis/apiserver/v1"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"
)

// webhookKubeconfigOnHost is where docs/operations.md has operators put
// the overlay's webhook.kubeconfig.
const webhookKubeconfigOnHost = "/etc/kubernetes/nodeproxy-webhook.kubeconfig"

// TestAuthorizationWebhookFilesAgree: the overlay's AuthorizationConfiguration
// (which test/testserver.RunBehindWebhook runs kube-apiserver with)
// names the webhook kubeconfig where the docs put it, and that kubeconfig
// is one client-go loads, with a server on /authorize, a CA to verify it
// and a client certificate.
func TestAuthorizationWebhookFilesAgree(t *testing.T) {
	raw, err := os.ReadFile("overlays/authorization-webhook/authorization-config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var c apiserverv1.AuthorizationConfiguration
	if err := yaml.UnmarshalStrict(raw, &c); err != nil {
		t.Fatal(err)
	}
	if len(c.Authorizers) == 0 || c.Authorizers[0].Webhook == nil {
		t.Fatal("the first authorizer is not nodeproxy's webhook")
	}
	if path := c.Authorizers[0].Webhook.ConnectionInfo.KubeConfigFile; path == nil || *path != webhookKubeconfigOnHost {
		t.Errorf("the configuration reads the webhook kubeconfig from %v, the docs put it at %s", path, webhookKubeconfigOnHost)
	}

	cfg, err := clientcmd.LoadFromFile("overlays/authorization-webhook/webhook.kubeconfig")
	if err != nil {
		t.Fatal(err)
	}
	ctx := cfg.Contexts[cfg.CurrentContext]
	if ctx == nil || cfg.Clusters[ctx.Cluster] == nil || cfg.AuthInfos[ctx.AuthInfo] == nil {
		t.Fatalf("current context %q does not name a cluster and a user", cfg.CurrentContext)
	}
	cluster, user := cfg.Clusters[ctx.Cluster], cfg.AuthInfos[ctx.AuthInfo]
	if cluster.Server != "https://nodeproxy.nodeproxy.svc:443/authorize" {
		t.Errorf("server %s, want the hub's /authorize", cluster.Server)
	}
	if cluster.CertificateAuthority == "" && len(cluster.CertificateAuthorityData) == 0 || cluster.InsecureSkipTLSVerify {
		t.Error("the webhook kubeconfig does not verify the hub with a CA")
	}
	if user.ClientCertificate == "" || user.ClientKey == "" {
		t.Error("the webhook kubeconfig has no client certificate: base/rbac-webhook.yaml lets in a certificate's user")
	}
}
