package cache

import (
	"encoding/json"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// BenchmarkBytesPerSecret measures the heap one cached secret of 1 KiB
// costs: the decoded object (decoded from JSON, as the reflector decodes
// it, so its strings and maps are allocated as they are in production)
// and what the store adds (the Object record, both trees, the snapshot).
//
//	go test ./cache -run '^$' -bench BytesPerSecret -benchtime 1x
func BenchmarkBytesPerSecret(b *testing.B) {
	const n = 100000
	template := `{"metadata":{"name":"secret-%d","namespace":"ns%d","uid":"0b1a6c2e-4b8f-4a3e-9d6e-%012d",` +
		`"resourceVersion":"%d","creationTimestamp":"2026-11-22T10:00:00Z","labels":{"app":"web"}},` +
		`"type":"Opaque","data":{"password":"%s"}}`
	value := []byte(strings.Repeat("x", 1024))
	encoded, _ := json.Marshal(value) // base64 of 1 KiB, quoted
	for b.Loop() {
		heap := func() uint64 {
			runtime.GC()
			var m runtime.MemStats
			runtime.ReadMemStats(&m)
			return m.HeapAlloc
		}
		base := heap()
		secrets := make([]interface{}, n)
		for i := range n {
			var s corev1.Secret
			raw := fmt.Sprintf(template, i, i%200, i, i+2, strings.Trim(string(encoded), `"`))
			if err := json.Unmarshal([]byte(raw), &s); err != nil {
				b.Fatal(err)
			}
			secrets[i] = &s
		}
		decoded := heap()
		s := newStore(served[1], DefaultLogSize)
		if err := s.Replace(secrets, strconv.Itoa(n+2)); err != nil {
			b.Fatal(err)
		}
		secrets = nil
		cached := heap()
		runtime.KeepAlive(s)
		b.ReportMetric(float64(decoded-base)/n, "object-B/secret")
		b.ReportMetric(float64(cached-base)/n, "cached-B/secret")
		b.ReportMetric(float64(int64(cached)-int64(decoded))/n, "store-overhead-B/secret")
	}
}
