package watchmux

import (
	"testing"
)

// FuzzDecodeRequest: whatever a client sends, the decoder returns a
// request with exactly one of watch and closeWatch, or a status with a
// code and a message; never a panic. `make test` runs it for a few
// seconds; explore longer with
//
//	go test ./watchmux -run '^$' -fuzz FuzzDecodeRequest -fuzztime 5m
func FuzzDecodeRequest(f *testing.F) {
	for _, seed := range []string{
		`{"id":1,"watch":{"selector":{"resource":{"group":"","version":"v1","resource":"secrets"},"namespace":"default","options":{"fieldSelector":"metadata.name=db-password","resourceVersion":"","allowWatchBookmarks":true,"sendInitialEvents":true}}}}`,
		`{"id":2,"closeWatch":{"channel":7}}`,
		`{"id":3}`,
		`{"id":4,"watch":{"selector":{}},"closeWatch":{"channel":1}}`,
		`{"id":"x"}`,
		`[]`,
		`{"id":5,"closeWatch":{"channel":1}} {}`,
		"",
		"\xff",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		req, status := decodeRequest(data)
		if status != nil {
			if status.Code == 0 || status.Message == "" {
				t.Fatalf("a refusal without code or message: %+v", status)
			}
			return
		}
		if (req.Watch == nil) == (req.CloseWatch == nil) {
			t.Fatalf("accepted %q with watch %v and closeWatch %v", data, req.Watch, req.CloseWatch)
		}
	})
}
