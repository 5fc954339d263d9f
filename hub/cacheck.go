package hub

import (
	"fmt"
	"net/http"

	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	"k8s.io/client-go/util/cert"
)

// clientCAsLoaded is a readiness check: the CAs that client certificates
// (the caller's own, or a front proxy's) are verified against have been
// loaded. k8s.io/apiserver reads them from the
// kube-system/extension-apiserver-authentication ConfigMap through an
// informer that fills after the server is already serving; until then the
// TLS handshake asks for no client certificate, and every certificate
// caller, kube-apiserver's webhook client included, would be served as
// anonymous. sources is how many CA sources are configured; each
// contributes at least one certificate to the served bundle.
func clientCAsLoaded(provider dynamiccertificates.CAContentProvider, sources int) func(*http.Request) error {
	return func(*http.Request) error {
		if provider == nil || sources == 0 {
			return nil
		}
		certs, err := cert.ParseCertsPEM(provider.CurrentCABundleContent())
		if err != nil || len(certs) < sources {
			return fmt.Errorf("client certificate authorities not loaded yet (%d of %d sources)", len(certs), sources)
		}
		return nil
	}
}
