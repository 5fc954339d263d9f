package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/nodeproxy/nodeproxy/test/controlplane"
	"github.com/nodeproxy/nodeproxy/test/testserver"
)

// TestServeReloadsCertificatesUnderAConnectedClient rotates the serving
// certificate and key and the --client-ca-file while a client holds a
// connection open: nodeproxy serve must take both from the files without
// a restart (k8s.io/apiserver's dynamic certificates), the open
// connection must keep working, a new connection must be served the new
// certificate, and a client certificate of the new CA must be accepted
// on the connection that was open before the CA was trusted.
func TestServeReloadsCertificatesUnderAConnectedClient(t *testing.T) {
	dir := t.TempDir()
	servingCert, servingKey := filepath.Join(dir, "serving.crt"), filepath.Join(dir, "serving.key")
	clientCAFile := filepath.Join(dir, "client-ca.crt")

	oldCA := cp.ServingCA
	first, err := oldCA.ServingCert(dir, "first")
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, servingCert, first.CertPEM)
	writeFile(t, servingKey, first.KeyPEM)
	// --client-ca-file replaces the client CA nodeproxy would read from
	// kube-system/extension-apiserver-authentication, so it holds the
	// control plane's, which the harness's admin client is of.
	writeFile(t, clientCAFile, caPEM(t, cp.ClientCA))

	ports, err := controlplane.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	np, err := cp.StartNodeproxy(context.Background(), bin, ports[0],
		"--tls-cert-file="+servingCert, "--tls-private-key-file="+servingKey, "--client-ca-file="+clientCAFile)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(np.Process.Stop)

	newServingCA, err := controlplane.NewCA(dir, "new-serving")
	if err != nil {
		t.Fatal(err)
	}
	newClientCA, err := controlplane.NewCA(dir, "new-client")
	if err != nil {
		t.Fatal(err)
	}
	// The client trusts both serving CAs and presents a certificate of
	// the client CA that is not trusted yet, as a member of
	// system:masters, which kube-apiserver's RBAC lets read /metrics.
	user, err := newClientCA.ClientCert("rotated-user", []string{"system:masters"}, "", "")
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(user.CertPEM, user.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(oldCA.Cert)
	roots.AddCert(newServingCA.Cert)
	// The certificate is sent whatever CAs the server names as acceptable
	// in the handshake: given it as Certificates, Go's client would send
	// nothing to a server that does not yet list its CA, and that
	// connection would stay anonymous after the rotation.
	clientTLS := &tls.Config{RootCAs: roots, GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &pair, nil }}
	connected := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxConnsPerHost: 1, TLSClientConfig: clientTLS}}

	// A certificate of a CA nodeproxy does not trust gets no identity:
	// /metrics is refused.
	issuer, reused := get(t, connected, np.URL+"/metrics", http.StatusUnauthorized, http.StatusForbidden)
	if issuer != oldCA.Cert.Subject.CommonName || reused {
		t.Fatalf("first connection served by %q (reused %v), want a new one served by %q", issuer, reused, oldCA.Cert.Subject.CommonName)
	}

	// Rotate the serving certificate and key to the new CA's.
	second, err := newServingCA.ServingCert(dir, "second")
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, servingKey, second.KeyPEM)
	writeFile(t, servingCert, second.CertPEM)
	testserver.Eventually(t, 90*time.Second, "a new connection served the rotated certificate", func(context.Context) error {
		fresh := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}}
		defer fresh.CloseIdleConnections()
		if issuer, _ := get(t, fresh, np.URL+"/readyz", http.StatusOK); issuer != newServingCA.Cert.Subject.CommonName {
			return fmt.Errorf("served by %q", issuer)
		}
		return nil
	})
	if _, reused := get(t, connected, np.URL+"/metrics", http.StatusUnauthorized, http.StatusForbidden); !reused {
		t.Error("the connection open before the rotation was closed by it")
	}

	// Trust the new client CA: on the connection opened before, its
	// certificate now gets in.
	writeFile(t, clientCAFile, append(caPEM(t, cp.ClientCA), caPEM(t, newClientCA)...))
	testserver.Eventually(t, 90*time.Second, "the rotated client CA accepted", func(context.Context) error {
		if code := status(t, connected, np.URL+"/metrics"); code != http.StatusOK {
			return fmt.Errorf("/metrics: %d", code)
		}
		return nil
	})
	if _, reused := get(t, connected, np.URL+"/metrics", http.StatusOK); !reused {
		t.Error("the connection open before the CA rotation was closed by it")
	}
}

// get requests url, checks the status is one of want, and returns the common name of the
// serving certificate's issuer and whether the connection was reused.
func get(t *testing.T, c *http.Client, url string, want ...int) (issuer string, reused bool) {
	t.Helper()
	ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{
		GotConn: func(info httptrace.GotConnInfo) { reused = info.Reused },
	})
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	drain(resp)
	if !slices.Contains(want, resp.StatusCode) {
		t.Fatalf("GET %s: %d, want one of %v", url, resp.StatusCode, want)
	}
	return resp.TLS.PeerCertificates[0].Issuer.CommonName, reused
}

func status(t *testing.T, c *http.Client, url string) int {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	drain(resp)
	return resp.StatusCode
}

// writeFile replaces path's contents in one rename, as a certificate
// manager (cert-manager's projected Secret, kubeadm) swaps files, so the
// server never reads half a file.
func writeFile(t *testing.T, path string, data []byte) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func caPEM(t *testing.T, ca *controlplane.CA) []byte {
	t.Helper()
	raw, err := os.ReadFile(ca.CertPath)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// drain reads the body to its end before closing it: an HTTP/1.1
// connection whose body was left unread is not reused, and the test is
// about the connection staying open.
func drain(resp *http.Response) {
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
}
