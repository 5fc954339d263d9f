package endpoint

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"sync"
	"time"

	certutil "k8s.io/client-go/util/cert"
)

// reloadInterval is how stale a certificate file may be read: the
// kubelet's client CA and the endpoint's serving certificate change
// rarely (a CA rotation, a renewal), and a stat per handshake or request
// within it would cost more than it buys.
const reloadInterval = 10 * time.Second

// fileContent is a file re-read when it changes, at most every
// reloadInterval; a read that fails keeps the last good content, so a
// file replaced non-atomically is never seen half-written for long.
type fileContent[T any] struct {
	paths []string
	parse func(data [][]byte) (T, error)

	mu      sync.Mutex
	checked time.Time // guarded by mu
	raw     [][]byte  // guarded by mu
	value   T         // guarded by mu
}

func newFileContent[T any](parse func([][]byte) (T, error), paths ...string) (*fileContent[T], error) {
	f := &fileContent[T]{paths: paths, parse: parse}
	if _, err := f.load(); err != nil {
		return nil, err
	}
	return f, nil
}

// get returns the content, reloading it if the interval has passed.
func (f *fileContent[T]) get() T {
	f.mu.Lock()
	stale := time.Since(f.checked) > reloadInterval
	v := f.value
	f.mu.Unlock()
	if !stale {
		return v
	}
	v, _ = f.load()
	return v
}

func (f *fileContent[T]) load() (T, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.checked = time.Now()
	raw := make([][]byte, len(f.paths))
	for i, p := range f.paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return f.value, fmt.Errorf("read %s: %w", p, err)
		}
		raw[i] = b
	}
	if f.raw != nil && equalAll(raw, f.raw) {
		return f.value, nil
	}
	v, err := f.parse(raw)
	if err != nil {
		return f.value, fmt.Errorf("%v: %w", f.paths, err)
	}
	f.raw, f.value = raw, v
	return v, nil
}

func equalAll(a, b [][]byte) bool {
	for i := range a {
		if !bytes.Equal(a[i], b[i]) {
			return false
		}
	}
	return len(a) == len(b)
}

// caPool parses a CA bundle.
func caPool(data [][]byte) (*x509.CertPool, error) {
	certs, err := certutil.ParseCertsPEM(data[0])
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	for _, c := range certs {
		pool.AddCert(c)
	}
	return pool, nil
}

// keyPair parses a certificate and its key.
func keyPair(data [][]byte) (*tls.Certificate, error) {
	pair, err := tls.X509KeyPair(data[0], data[1])
	if err != nil {
		return nil, err
	}
	return &pair, nil
}
