package hub

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/endpoints/request"

	"github.com/nodeproxy/nodeproxy/shard"
	"github.com/nodeproxy/nodeproxy/watchmux"
)

// nodeOwnedBy is a node name that table gives to member.
func nodeOwnedBy(t *testing.T, table *shard.Table, member string) string {
	t.Helper()
	for i := range 10000 {
		if n := fmt.Sprintf("node-%d", i); table.OwnerOf(n) == member {
			return n
		}
	}
	t.Fatalf("no node owned by %s", member)
	return ""
}

func asUser(r *http.Request, name string, groups ...string) *http.Request {
	return r.WithContext(request.WithUser(r.Context(), &user.DefaultInfo{Name: name, Groups: groups}))
}

// TestANodeIsSentToTheReplicaThatOwnsIt: a node's bulk get for a node
// another replica owns gets 307, its Location the owner's stable name
// on this replica's port with the same path and query, its body a Status
// naming the owner; a node this replica owns, and a caller that is not a
// node, are served here.
func TestANodeIsSentToTheReplicaThatOwnsIt(t *testing.T) {
	m := NewMembership("a", "shards", "ns")
	table := shard.NewTable([]string{"a", "b"})
	m.table.Store(table)
	m.ready.Store(&map[string]bool{"a": true, "b": true})
	r := newShardRouter(m, "shards", "ns", 8443)
	theirs, ours := nodeOwnedBy(t, table, "b"), nodeOwnedBy(t, table, "a")

	req := asUser(httptest.NewRequest(http.MethodPost, watchmux.Path+"?timeout=5s", nil), "system:node:"+theirs, user.NodesGroup)
	w := httptest.NewRecorder()
	if !r.route(w, req, "get") {
		t.Fatal("a node another replica owns was served here")
	}
	wantLoc := "https://b.shards.ns.svc:8443" + watchmux.Path + "?timeout=5s"
	if w.Code != http.StatusTemporaryRedirect || w.Header().Get("Location") != wantLoc {
		t.Fatalf("%d Location %q, want 307 %q", w.Code, w.Header().Get("Location"), wantLoc)
	}
	var st metav1.Status
	if err := json.Unmarshal(w.Body.Bytes(), &st); err != nil {
		t.Fatal(err)
	}
	if st.Code != http.StatusTemporaryRedirect || st.Reason != StatusReasonNotOwner || st.Details == nil || st.Details.Name != "b" ||
		len(st.Details.Causes) != 1 || st.Details.Causes[0].Message != wantLoc {
		t.Fatalf("status %+v, want 307 %s naming b and the Location", st, StatusReasonNotOwner)
	}

	for _, tc := range []struct {
		name   string
		user   string
		groups []string
	}{
		{"its own node", "system:node:" + ours, []string{user.NodesGroup}},
		{"kube-proxy", "system:serviceaccount:kube-system:kube-proxy", nil},
		{"a node's name outside system:nodes", "system:node:" + theirs, nil},
	} {
		w := httptest.NewRecorder()
		if r.route(w, asUser(httptest.NewRequest(http.MethodPost, watchmux.Path, nil), tc.user, tc.groups...), "get") {
			t.Errorf("%s: redirected (%d %s), want served here", tc.name, w.Code, w.Header().Get("Location"))
		}
	}
}

// TestANodesConnectionEndsWhenItsNodeMoves: when a new table gives a
// node to another replica, its open connection here ends with 503 (the
// client resumes through the Service, at the new owner); connections of
// nodes still owned here, and of callers that are not nodes, stay.
func TestANodesConnectionEndsWhenItsNodeMoves(t *testing.T) {
	m := NewMembership("a", "shards", "ns")
	before := shard.NewTable([]string{"a"})
	m.table.Store(before)
	r := newShardRouter(m, "shards", "ns", 8443)
	r.moveSpread = 10 * time.Millisecond
	after := shard.NewTable([]string{"a", "b"})
	moving, staying := nodeOwnedBy(t, after, "b"), nodeOwnedBy(t, after, "a")

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	open := func(name string, groups ...string) chan *metav1.Status {
		end := make(chan *metav1.Status, 2)
		r.follow(ctx, asUser(httptest.NewRequest(http.MethodGet, watchmux.Path+"?watch=1", nil), name, groups...), end)
		return end
	}
	moved := open("system:node:"+moving, user.NodesGroup)
	kept := open("system:node:"+staying, user.NodesGroup)
	proxy := open("system:serviceaccount:kube-system:kube-proxy")

	m.table.Store(after)
	m.ready.Store(&map[string]bool{"a": true, "b": true})
	r.moved()
	select {
	case st := <-moved:
		if st.Code != http.StatusServiceUnavailable {
			t.Fatalf("moved node's connection ended with %d, want 503", st.Code)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the moved node's connection did not end")
	}
	r.moved() // a second change ends nothing twice
	select {
	case st := <-kept:
		t.Fatalf("an owned node's connection ended: %+v", st)
	case st := <-proxy:
		t.Fatalf("kube-proxy's connection ended: %+v", st)
	case st := <-moved:
		t.Fatalf("a connection ended twice: %+v", st)
	case <-time.After(100 * time.Millisecond):
	}
}

// TestANotReadyOwnersNodesAreServedByTheirSecondary: with the owner of a
// node not ready, the node is served by its secondary, which holds it;
// the owner ready again, the secondary sends it back (redirect, and its
// open connection ends); with neither ready, a replica that holds the
// node serves it and one that does not refuses it with 503.
func TestANotReadyOwnersNodesAreServedByTheirSecondary(t *testing.T) {
	table := shard.NewTable([]string{"a", "b", "c"})
	var node string
	for i := range 10000 {
		if n := fmt.Sprintf("node-%d", i); table.Owner(shard.Range(n)) == "b" && table.Secondary(shard.Range(n)) == "a" {
			node = n
			break
		}
	}
	routed := func(self string, ready map[string]bool) (code int, loc string) {
		m := NewMembership(self, "shards", "ns")
		m.table.Store(table)
		m.ready.Store(&ready)
		r := newShardRouter(m, "shards", "ns", 8443)
		w := httptest.NewRecorder()
		if !r.route(w, asUser(httptest.NewRequest(http.MethodPost, watchmux.Path, nil), "system:node:"+node, user.NodesGroup), "get") {
			return http.StatusOK, ""
		}
		return w.Code, w.Header().Get("Location")
	}
	all := map[string]bool{"a": true, "b": true, "c": true}
	ownerDown := map[string]bool{"a": true, "c": true}
	for _, tc := range []struct {
		name, self string
		ready      map[string]bool
		code       int
		to         string
	}{
		{"the owner, ready", "b", all, http.StatusOK, ""},
		{"the secondary, owner ready", "a", all, http.StatusTemporaryRedirect, "b"},
		{"the secondary, owner not ready", "a", ownerDown, http.StatusOK, ""},
		{"a third replica, owner not ready", "c", ownerDown, http.StatusTemporaryRedirect, "a"},
		{"the secondary, none ready", "a", map[string]bool{}, http.StatusOK, ""},
		{"a third replica, none ready", "c", map[string]bool{}, http.StatusServiceUnavailable, ""},
	} {
		code, loc := routed(tc.self, tc.ready)
		want := ""
		if tc.to != "" {
			want = "https://" + shard.Host(tc.to, "shards", "ns") + ":8443" + watchmux.Path
		}
		if code != tc.code || loc != want {
			t.Errorf("%s: %d %q, want %d %q", tc.name, code, loc, tc.code, want)
		}
	}
}
