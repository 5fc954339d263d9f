package authorizer_test

import (
	"bytes"
	"io"
	"net/http"
	"testing"
	"time"

	"k8s.io/klog/v2"

	"github.com/nodeproxy/nodeproxy/test/testserver"
)

// BenchmarkWebhookHTTPS posts SubjectAccessReviews to a running nodeproxy
// over HTTPS on loopback, as kube-apiserver's webhook would: client
// certificate authentication, delegated authorization of the caller
// (cached), decision, JSON both ways. Client and server share the
// machine's cores, so the figure is a floor for the server alone.
//
//	go test ./authorizer -run '^$' -bench WebhookHTTPS
func BenchmarkWebhookHTTPS(b *testing.B) {
	// The server's informational logs would interleave with the figures.
	klog.LogToStderr(false)
	klog.SetOutput(io.Discard)
	testserver.InstallRBAC(b, cp, "rbac-webhook.yaml")
	srv := testserver.Start(b, cp, testserver.Options{})
	srv.WaitReady(b, 90*time.Second)
	caller, err := cp.UserConfig(webhook)
	if err != nil {
		b.Fatal(err)
	}
	h1 := srv.Client(b, caller)
	h1.Transport.(*http.Transport).MaxIdleConnsPerHost = 64
	h2 := srv.Client(b, caller)
	h2.Transport.(*http.Transport).ForceAttemptHTTP2 = true
	client := h1
	body := []byte(`{"apiVersion":"authorization.k8s.io/v1","kind":"SubjectAccessReview","spec":{"user":"system:node:node-a","groups":["system:nodes","system:authenticated"],"resourceAttributes":{"verb":"get","version":"v1","resource":"secrets","namespace":"e2e","name":"secret-a"}}}`)
	post := func() error {
		resp, err := client.Post(srv.URL+"/authorize", "application/json", bytes.NewReader(body))
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return &statusError{resp.Status}
		}
		return nil
	}
	// The RBAC just applied reaches kube-apiserver's authorizer a moment
	// later, and nodeproxy caches a refusal for 10 s: poll until allowed.
	deadline := time.Now().Add(30 * time.Second)
	for err := post(); err != nil; err = post() {
		if time.Now().After(deadline) {
			b.Fatal(err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	// Sub-benchmarks, so that the server starts once while b.N ramps up.
	// kube-apiserver's webhook client (client-go) speaks HTTP/2.
	for _, proto := range []struct {
		name   string
		client *http.Client
	}{{"http2", h2}, {"http1.1", h1}} {
		b.Run(proto.name+" 8 clients", func(b *testing.B) {
			client = proto.client
			b.SetParallelism(4) // 4 per CPU: 8 concurrent requests on two cores
			start := time.Now()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if err := post(); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "reviews/s")
		})
	}
}

type statusError struct{ status string }

func (e *statusError) Error() string { return "nodeproxy answered " + e.status }
