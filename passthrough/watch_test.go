package passthrough

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/client-go/rest"
)

// The protocol of an uncached channel is kube-apiserver's watch, relayed;
// what is nodeproxy's own, and tested here against a scripted server, is
// when it re-opens a watch that ended and from where. That kube-apiserver
// behaves as scripted is tested end to end (watch_e2e_test.go).

// answer is one scripted response to a WATCH: the query it must carry
// (parameter: value, "" for absent) and what it sends.
type answer struct {
	want   map[string]string
	code   int
	events []string
}

func ev(t watch.EventType, rv string) string {
	return fmt.Sprintf(`{"type":%q,"object":{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"web","resourceVersion":%q}}}`, t, rv)
}

const (
	gone      = `{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Expired","code":410,"message":"too old"}}`
	forbidden = `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Forbidden","code":403,"message":"alice cannot watch"}`
)

// recorder is a Sink that records what a channel would carry.
type recorder struct {
	mu     sync.Mutex
	events []string
	final  *metav1.Status
	closed chan struct{}
	once   sync.Once
}

func (r *recorder) Send(t watch.EventType, object []byte) bool {
	var o objectVersion
	_ = json.Unmarshal(object, &o)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, string(t)+" "+o.Metadata.ResourceVersion)
	return true
}
func (r *recorder) OnClose(func()) {}
func (r *recorder) Close(s *metav1.Status) {
	r.once.Do(func() { r.final = s; close(r.closed) })
}

func TestUncachedWatchReopensFromTheLastVersionRelayed(t *testing.T) {
	for _, tc := range []struct {
		name      string
		opts      metav1.ListOptions
		script    []answer
		events    string
		finalCode int32
	}{
		{
			name: "from a bookmark on, every event is a resume point; kube-apiserver's ERROR is the last",
			opts: metav1.ListOptions{},
			script: []answer{
				{want: map[string]string{"resourceVersion": "", "allowWatchBookmarks": "true", "watch": "true"}, code: 200,
					events: []string{ev(watch.Added, "5"), ev(watch.Bookmark, "7"), ev(watch.Modified, "9")}},
				{want: map[string]string{"resourceVersion": "9"}, code: 200, events: []string{ev(watch.Modified, "11"), gone}},
			},
			events:    "ADDED 5,MODIFIED 9,MODIFIED 11",
			finalCode: http.StatusGone,
		},
		{
			name: "bookmarks passed on when asked for",
			opts: metav1.ListOptions{AllowWatchBookmarks: true, ResourceVersion: "3"},
			script: []answer{
				{want: map[string]string{"resourceVersion": "3"}, code: 200, events: []string{ev(watch.Bookmark, "4")}},
				{want: map[string]string{"resourceVersion": "4"}, code: 200, events: []string{gone}},
			},
			events:    "BOOKMARK 4",
			finalCode: http.StatusGone,
		},
		{
			name: "ended before its initial state was known complete: 410, not re-opened",
			opts: metav1.ListOptions{},
			script: []answer{
				{code: 200, events: []string{ev(watch.Added, "5")}},
			},
			events:    "ADDED 5",
			finalCode: http.StatusGone,
		},
		{
			name: "initial events: the resume point is the bookmark that ends them, the re-open sends none",
			opts: metav1.ListOptions{SendInitialEvents: ptr(true), ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan, AllowWatchBookmarks: true},
			script: []answer{
				{want: map[string]string{"sendInitialEvents": "true", "resourceVersionMatch": "NotOlderThan"}, code: 200,
					events: []string{ev(watch.Added, "5"), ev(watch.Bookmark, "8")}},
				{want: map[string]string{"resourceVersion": "8", "sendInitialEvents": "", "resourceVersionMatch": ""}, code: 200, events: []string{gone}},
			},
			events:    "ADDED 5,BOOKMARK 8",
			finalCode: http.StatusGone,
		},
		{
			name: "a re-open refused by kube-apiserver ends the channel with its Status",
			opts: metav1.ListOptions{ResourceVersion: "3"},
			script: []answer{
				{code: 200, events: []string{ev(watch.Modified, "4")}},
				{want: map[string]string{"resourceVersion": "4"}, code: http.StatusForbidden, events: []string{forbidden}},
			},
			events:    "MODIFIED 4",
			finalCode: http.StatusForbidden,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			n := 0
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				i := n
				n++
				mu.Unlock()
				if i >= len(tc.script) {
					t.Errorf("request %d: not scripted (%s)", i, r.URL.RawQuery)
					http.Error(w, "", http.StatusInternalServerError)
					return
				}
				a := tc.script[i]
				for k, v := range a.want {
					if got := r.URL.Query().Get(k); got != v {
						t.Errorf("request %d: %s=%q, want %q", i, k, got, v)
					}
				}
				if got := r.Header.Get("Impersonate-User"); got != "alice" {
					t.Errorf("request %d: as %q, want alice", i, got)
				}
				w.WriteHeader(a.code)
				fmt.Fprint(w, strings.Join(a.events, "\n"))
			}))
			defer srv.Close()
			c, err := NewClient(&rest.Config{Host: srv.URL})
			if err != nil {
				t.Fatal(err)
			}
			c.watchTimeout = func() time.Duration { return time.Minute }
			ctx := request.WithUser(context.Background(), &user.DefaultInfo{Name: "alice"})
			typ := Type{Resource: schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}, Namespaced: true, verbs: []string{"watch"}}
			sink := &recorder{closed: make(chan struct{})}
			run, err := c.Watch(ctx, typ, "ns", tc.opts, sink)
			if err != nil {
				t.Fatal(err)
			}
			run()
			select {
			case <-sink.closed:
			default:
				t.Fatal("run returned and the channel is still open")
			}
			if got := strings.Join(sink.events, ","); got != tc.events {
				t.Errorf("events %q, want %q", got, tc.events)
			}
			if sink.final == nil || sink.final.Code != tc.finalCode {
				t.Errorf("final %+v, want code %d", sink.final, tc.finalCode)
			}
			if n != len(tc.script) {
				t.Errorf("%d requests, want %d", n, len(tc.script))
			}
		})
	}
}

// TestUncachedWatchRefusedOpenIsKubeAPIServersStatus: nothing is left
// open, and the refusal is kube-apiserver's own.
func TestUncachedWatchRefusedOpenIsKubeAPIServersStatus(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusForbidden)
		fmt.Fprint(w, forbidden)
	}))
	defer srv.Close()
	c, err := NewClient(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	ctx := request.WithUser(context.Background(), &user.DefaultInfo{Name: "alice"})
	typ := Type{Resource: schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}, Namespaced: true}
	_, err = c.Watch(ctx, typ, "ns", metav1.ListOptions{}, &recorder{closed: make(chan struct{})})
	if err == nil || !strings.Contains(err.Error(), "alice cannot watch") {
		t.Fatalf("got %v, want kube-apiserver's 403", err)
	}
}

func ptr[T any](v T) *T { return &v }
