package authorizer

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// BenchmarkShardedWebhook is what sharding adds to a review, in process
// (no kube-apiserver, no authentication): unsharded, the webhook as an
// unsharded hub serves it; held, a sharded replica deciding for a node
// it holds (the routing question, then the local decision); forwarded,
// a replica that does not hold the node posting the review to the owner
// over TLS and HTTP/2 on loopback, the owner's decision and both JSON
// codings included. Client and peer share the machine's cores.
//
//	go test ./authorizer -run '^$' -bench ShardedWebhook -benchmem
func BenchmarkShardedWebhook(b *testing.B) {
	body := review(secretA)
	owner := httptest.NewUnstartedServer(&Webhook{Authorizer: fixture(b)})
	owner.EnableHTTP2 = true
	owner.StartTLS()
	b.Cleanup(owner.Close)
	held := fixture(b)
	for _, bc := range []struct {
		name string
		h    http.Handler
	}{
		{"unsharded", &Webhook{Authorizer: held}},
		{"held", &Webhook{Authorizer: held, Shards: &Shards{Owners: holdsAll{}}}},
		{"forwarded", replica(b, owners{owner.URL, owner.URL}, &fakeSource{}, owner.Client())},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				rec := httptest.NewRecorder()
				bc.h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, WebhookPath, strings.NewReader(body)))
				if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `"allowed":true`) {
					b.Fatalf("%d: %s", rec.Code, rec.Body)
				}
			}
		})
	}
}

type holdsAll struct{}

func (holdsAll) Holders(string) (bool, string, string) { return true, "", "" }
