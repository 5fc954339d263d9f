package controlplane

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"
)

// certValidity is long enough for any test run and short enough that a
// leaked key from a temporary directory is worthless soon after.
const certValidity = 24 * time.Hour

// CA is a certificate authority the harness made for one control plane.
// Its key stays in memory and on disk only inside the control plane's
// temporary directory.
type CA struct {
	Cert     *x509.Certificate
	Key      crypto.Signer
	CertPath string
	// chain is the CA's own certificate, in PEM, when it is an
	// intermediate: its leaves carry it, so that clients of the root
	// verify them.
	chain []byte
}

// KeyPair is a certificate and its key, in PEM, with the files that hold
// them.
type KeyPair struct {
	CertPEM, KeyPEM   []byte
	CertPath, KeyPath string
}

// newKey makes an ECDSA P-256 key: as strong as RSA-3072 and generated in
// microseconds instead of the ~100 ms an RSA key costs, which adds up when a
// test mints a certificate per simulated node.
func newKey() (*ecdsa.PrivateKey, error) {
	return ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
}

// caKeyBits sizes the CAs' RSA keys. CAs are RSA, not ECDSA, because
// k8s.io/apiserver verifies a client certificate's chain on every request:
// an RSA-2048 signature checks in about 30 us, a P-256 one in about 150 us,
// which dominated a loopback benchmark of nodeproxy's webhook. RSA-2048 is
// also what kubeadm issues, so tests see what clusters see. Generating the
// key costs ~100 ms per CA, three per control plane.
const caKeyBits = 2048

// NewCA makes a CA of its own, its certificate written to
// dir/<name>-ca.crt, for tests that rotate a CA or certificate nodeproxy
// trusts.
func NewCA(dir, name string) (*CA, error) { return newCA(dir, name) }

func newCA(dir, name string) (*CA, error) {
	key, err := rsa.GenerateKey(rand.Reader, caKeyBits)
	if err != nil {
		return nil, fmt.Errorf("generate %s CA key: %w", name, err)
	}
	c, err := cert.NewSelfSignedCACert(cert.Config{CommonName: "nodeproxy-test-" + name}, key)
	if err != nil {
		return nil, fmt.Errorf("self-sign %s CA: %w", name, err)
	}
	path := filepath.Join(dir, name+"-ca.crt")
	if err := cert.WriteCert(path, certPEM(c.Raw)); err != nil {
		return nil, fmt.Errorf("write %s CA: %w", name, err)
	}
	return &CA{Cert: c, Key: key, CertPath: path}, nil
}

// IntermediateCA makes a CA signed by ca, its certificate written to
// dir/<name>-ca.crt. Its leaves carry its certificate, so that clients
// trusting ca verify them, while a client given only the intermediate
// trusts nothing else of ca's: the harness's hubs are signed by one, the
// "hub's own CA" of the node endpoint's --hub-ca-file.
func (ca *CA) IntermediateCA(dir, name string) (*CA, error) {
	key, err := rsa.GenerateKey(rand.Reader, caKeyBits)
	if err != nil {
		return nil, fmt.Errorf("generate %s CA key: %w", name, err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "nodeproxy-test-" + name},
		NotBefore:             now.Add(-time.Minute),
		NotAfter:              now.Add(certValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, key.Public(), ca.Key)
	if err != nil {
		return nil, fmt.Errorf("sign %s CA: %w", name, err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	path := filepath.Join(dir, name+"-ca.crt")
	if err := cert.WriteCert(path, certPEM(der)); err != nil {
		return nil, fmt.Errorf("write %s CA: %w", name, err)
	}
	return &CA{Cert: c, Key: key, CertPath: path, chain: certPEM(der)}, nil
}

// leafSpec says what a leaf certificate is for.
type leafSpec struct {
	commonName   string
	organization []string
	usages       []x509.ExtKeyUsage
	dnsNames     []string
	ips          []net.IP
	// validity is how long the certificate is good for; 0 is
	// certValidity.
	validity time.Duration
}

// issue signs a new leaf certificate. When dir is not empty the pair is also
// written there as <file>.crt and <file>.key.
func (ca *CA) issue(spec leafSpec, dir, file string) (*KeyPair, error) {
	key, err := newKey()
	if err != nil {
		return nil, fmt.Errorf("generate key for %q: %w", spec.commonName, err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return nil, fmt.Errorf("serial for %q: %w", spec.commonName, err)
	}
	now := time.Now()
	validity := spec.validity
	if validity == 0 {
		validity = certValidity
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: spec.commonName, Organization: spec.organization},
		NotBefore:    now.Add(-time.Minute), // tolerate small clock steps between processes
		NotAfter:     now.Add(validity),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  spec.usages,
		DNSNames:     spec.dnsNames,
		IPAddresses:  spec.ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, key.Public(), ca.Key)
	if err != nil {
		return nil, fmt.Errorf("sign certificate for %q: %w", spec.commonName, err)
	}
	keyPEM, err := keyutil.MarshalPrivateKeyToPEM(key)
	if err != nil {
		return nil, fmt.Errorf("encode key for %q: %w", spec.commonName, err)
	}
	kp := &KeyPair{CertPEM: append(certPEM(der), ca.chain...), KeyPEM: keyPEM}
	if dir != "" {
		kp.CertPath = filepath.Join(dir, file+".crt")
		kp.KeyPath = filepath.Join(dir, file+".key")
		if err := cert.WriteCert(kp.CertPath, kp.CertPEM); err != nil {
			return nil, fmt.Errorf("write certificate for %q: %w", spec.commonName, err)
		}
		if err := keyutil.WriteKey(kp.KeyPath, kp.KeyPEM); err != nil {
			return nil, fmt.Errorf("write key for %q: %w", spec.commonName, err)
		}
	}
	return kp, nil
}

func certPEM(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: cert.CertificateBlockType, Bytes: der})
}

// ServingCert issues a TLS server certificate for 127.0.0.1 and localhost,
// plus any extra DNS names, written to dir/file.{crt,key}.
func (ca *CA) ServingCert(dir, file string, dnsNames ...string) (*KeyPair, error) {
	return ca.issue(leafSpec{
		commonName: "localhost",
		usages:     []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		dnsNames:   append([]string{"localhost"}, dnsNames...),
		ips:        []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("::1")},
	}, dir, file)
}

// KubeletServingCert issues what a node can obtain from the cluster's CA
// on a kubeadm cluster: a kubelet serving certificate
// (kubernetes.io/kubelet-serving), system:node:<node> in system:nodes,
// for the DNS names the node asks for, and 127.0.0.1. A hub verified
// against the cluster's CA could be impersonated with it.
func (ca *CA) KubeletServingCert(node string, dnsNames ...string) (*KeyPair, error) {
	return ca.issue(leafSpec{
		commonName:   "system:node:" + node,
		organization: []string{"system:nodes"},
		usages:       []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		dnsNames:     dnsNames,
		ips:          []net.IP{net.ParseIP("127.0.0.1")},
	}, "", "")
}

// ClientCert issues a client certificate for user in groups. Pass dir and
// file to also write it to disk (for flags that take paths).
func (ca *CA) ClientCert(user string, groups []string, dir, file string) (*KeyPair, error) {
	return ca.issue(leafSpec{
		commonName:   user,
		organization: groups,
		usages:       []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, dir, file)
}

// ShortLivedClientCert is ClientCert valid for validity only, kept in
// memory: a kubelet's certificate about to be rotated.
func (ca *CA) ShortLivedClientCert(user string, groups []string, validity time.Duration) (*KeyPair, error) {
	return ca.issue(leafSpec{
		commonName:   user,
		organization: groups,
		usages:       []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		validity:     validity,
	}, "", "")
}

// writeServiceAccountKey writes the key pair kube-apiserver signs and
// verifies service-account tokens with.
func writeServiceAccountKey(dir string) (keyPath, pubPath string, err error) {
	key, err := newKey()
	if err != nil {
		return "", "", fmt.Errorf("generate service-account key: %w", err)
	}
	keyPEM, err := keyutil.MarshalPrivateKeyToPEM(key)
	if err != nil {
		return "", "", fmt.Errorf("encode service-account key: %w", err)
	}
	pubDER, err := x509.MarshalPKIXPublicKey(key.Public())
	if err != nil {
		return "", "", fmt.Errorf("encode service-account public key: %w", err)
	}
	pubPEM := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER})
	keyPath, pubPath = filepath.Join(dir, "sa.key"), filepath.Join(dir, "sa.pub")
	if err := keyutil.WriteKey(keyPath, keyPEM); err != nil {
		return "", "", fmt.Errorf("write service-account key: %w", err)
	}
	if err := os.WriteFile(pubPath, pubPEM, 0o600); err != nil {
		return "", "", fmt.Errorf("write service-account public key: %w", err)
	}
	return keyPath, pubPath, nil
}
