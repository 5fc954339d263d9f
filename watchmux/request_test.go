package watchmux

import (
	"strings"
	"testing"

	"github.com/nodeproxy/nodeproxy/apis/bulk/v1alpha1"
)

// FuzzDecodeRequest: whatever a client sends, the decoder returns a
// request with exactly one of watch, closeWatch and progress (a progress
// token within its bounds), or a status with a code and a message; never
// a panic. `make test` runs it for a few
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
		`{"id":6,"progress":{"channel":7,"token":"42"}}`,
		`{"id":7,"progress":{"channel":7,"token":""}}`,
		`{"id":8,"closeWatch":{"channel":7},"progress":{"channel":7,"token":"t"}}`,
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
		if kinds(req) != 1 {
			t.Fatalf("accepted %q with watch %v, closeWatch %v and progress %v", data, req.Watch, req.CloseWatch, req.Progress)
		}
		if p := req.Progress; p != nil && (p.Token == "" || len(p.Token) > v1alpha1.MaxProgressTokenLength) {
			t.Fatalf("accepted %q with a token of %d bytes", data, len(p.Token))
		}
	})
}

// TestDecodeProgressRequest: a progress request is the request's only
// kind, and its token is 1 to MaxProgressTokenLength bytes.
func TestDecodeProgressRequest(t *testing.T) {
	for _, tc := range []struct {
		name, data string
		refused    string // in the status's message; "" for accepted
	}{
		{name: "valid", data: `{"id":1,"progress":{"channel":7,"token":"a-uuid-or-a-counter"}}`},
		{name: "token at the bound", data: `{"id":1,"progress":{"channel":7,"token":"` + strings.Repeat("x", v1alpha1.MaxProgressTokenLength) + `"}}`},
		{name: "token too long", data: `{"id":1,"progress":{"channel":7,"token":"` + strings.Repeat("x", v1alpha1.MaxProgressTokenLength+1) + `"}}`, refused: "65 bytes; it must be 1 to 64"},
		{name: "no token", data: `{"id":1,"progress":{"channel":7}}`, refused: "0 bytes"},
		{name: "with watch", data: `{"id":1,"watch":{"selector":{}},"progress":{"channel":7,"token":"t"}}`, refused: "not several"},
		{name: "with closeWatch", data: `{"id":1,"closeWatch":{"channel":7},"progress":{"channel":7,"token":"t"}}`, refused: "not several"},
		{name: "null progress", data: `{"id":1,"progress":null}`, refused: "one of watch, closeWatch and progress"},
		{name: "unknown field in progress", data: `{"id":1,"progress":{"channel":7,"token":"t","after":3}}`, refused: "unknown field"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, status := decodeRequest([]byte(tc.data))
			if req.ID != 1 {
				t.Errorf("id %d, want 1", req.ID)
			}
			switch {
			case tc.refused == "" && status != nil:
				t.Fatalf("refused: %s", status.Message)
			case tc.refused == "":
				if req.Progress == nil || req.Progress.Channel != 7 {
					t.Fatalf("progress %+v, want channel 7", req.Progress)
				}
			case status == nil:
				t.Fatalf("accepted %+v", req.Progress)
			case status.Code != 400 || !strings.Contains(status.Message, tc.refused):
				t.Fatalf("refused with %d %q, want 400 naming %q", status.Code, status.Message, tc.refused)
			}
		})
	}
}
