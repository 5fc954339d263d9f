package controlplane

import (
	"strings"
	"testing"
)

// TestProxyLogReadsWhatHollowProxiesPrint parses lines a kubemark v1.36.3
// hollow proxy printed at -v=4 (copied from one run): the handler calls,
// the syncs and a refused list are events, everything else is not.
func TestProxyLogReadsWhatHollowProxiesPrint(t *testing.T) {
	for _, tc := range []struct {
		line string
		want *ProxyEvent // nil: not an event
	}{
		{`I1126 01:05:37.774889   12474 config.go:219] "Calling handler.OnServiceAdd"`, &ProxyEvent{Kind: ProxyService, Type: ProxyAdded}},
		{`I1126 01:06:07.775343   12474 config.go:236] "Calling handler.OnServiceUpdate"`, &ProxyEvent{Kind: ProxyService, Type: ProxyUpdated}},
		{`I1126 01:06:17.902896   12474 config.go:255] "Calling handler.OnServiceDelete"`, &ProxyEvent{Kind: ProxyService, Type: ProxyDeleted}},
		{`I1126 01:05:37.885144   12474 config.go:125] "Calling handler.OnEndpointSliceAdd" endpoints="default/s1-x"`, &ProxyEvent{Kind: ProxyEndpointSlice, Type: ProxyAdded, Object: "default/s1-x"}},
		{`I1126 01:05:37.891742   12474 config.go:142] "Calling handler.OnEndpointSliceUpdate"`, &ProxyEvent{Kind: ProxyEndpointSlice, Type: ProxyUpdated}},
		{`I1126 01:06:17.899942   12474 config.go:161] "Calling handler.OnEndpointsDelete"`, &ProxyEvent{Kind: ProxyEndpointSlice, Type: ProxyDeleted}},
		{`I1126 01:05:37.774919   12474 config.go:445] "Calling handler.OnServiceCIDRsChanged"`, &ProxyEvent{Kind: ProxyServiceCIDR, Type: ProxyChanged}},
		{`I1126 01:05:37.829112   12474 shared_informer.go:388] "Caches are synced" controller="service config"`, &ProxyEvent{Kind: ProxyService, Type: ProxySynced}},
		{`I1126 01:05:37.829153   12474 shared_informer.go:388] "Caches are synced" controller="endpoint slice config"`, &ProxyEvent{Kind: ProxyEndpointSlice, Type: ProxySynced}},
		{`I1126 01:05:37.829117   12474 shared_informer.go:388] "Caches are synced" controller="serviceCIDR config"`, &ProxyEvent{Kind: ProxyServiceCIDR, Type: ProxySynced}},
		{`E1126 01:05:37.840111   12480 reflector.go:227] "Failed to watch" err="failed to list *v1.Service: services is forbidden: User \"system:serviceaccount:kube-system:nobody\" cannot list resource \"services\" in API group \"\" at the cluster scope" reflector="k8s.io/client-go@v0.36.3/tools/cache/reflector.go:343" type="*v1.Service"`,
			&ProxyEvent{Kind: ProxyService, Type: ProxyRefused, Detail: `failed to list *v1.Service: services is forbidden: User "system:serviceaccount:kube-system:nobody" cannot list resource "services" in API group "" at the cluster scope`}},
		{`I1126 01:05:37.834613   12480 reflector.go:490] "Data couldn't be fetched in watchlist mode. Falling back to regular list." err="servicecidrs.networking.k8s.io is forbidden: User \"system:serviceaccount:kube-system:nobody\" cannot watch resource \"servicecidrs\" in API group \"networking.k8s.io\" at the cluster scope"`,
			&ProxyEvent{Kind: ProxyServiceCIDR, Type: ProxyRefused, Detail: `servicecidrs.networking.k8s.io is forbidden: User "system:serviceaccount:kube-system:nobody" cannot watch resource "servicecidrs" in API group "networking.k8s.io" at the cluster scope`}},
		// The handlers' synced calls say nothing "Caches are synced" does not.
		{`I1126 01:05:37.829438   12474 config.go:207] "Calling handler.OnServiceSynced()"`, nil},
		{`I1126 01:05:37.728818   12474 shared_informer.go:381] "Waiting for caches to sync" controller="service config"`, nil},
		{`I1126 01:05:37.718537   12474 hollow_node.go:186] Version: v1.36.3`, nil},
		{`E1126 01:05:37.832980   12480 event_broadcaster.go:270] "Server rejected event (will not retry!)" err="events.events.k8s.io is forbidden: User \"x\" cannot create resource \"events\""`, nil},
	} {
		got, ok := parseProxyLine(tc.line)
		switch {
		case tc.want == nil && ok:
			t.Errorf("%s\n  parsed as %+v, want no event", tc.line, got)
		case tc.want != nil && !ok:
			t.Errorf("%s\n  not parsed, want %+v", tc.line, *tc.want)
		case tc.want != nil && got != *tc.want:
			t.Errorf("%s\n  parsed as %+v, want %+v", tc.line, got, *tc.want)
		}
	}
}

// TestProxyLogJoinsLinesSplitAcrossWrites feeds a log in pieces that cut
// lines anywhere, as a pipe delivers them.
func TestProxyLogJoinsLinesSplitAcrossWrites(t *testing.T) {
	text := `I1126 01:05:37.774889   12474 config.go:219] "Calling handler.OnServiceAdd"` + "\n" +
		`I1126 01:05:37.885144   12474 config.go:125] "Calling handler.OnEndpointSliceAdd" endpoints="default/s1-x"` + "\n" +
		`I1126 01:05:37.885144   12474 config.go:125] "Calling handler.OnEndpointSliceAdd" endpoints="default/unfinished`
	l := NewProxyLog()
	for chunk := range strings.SplitSeq(text, "Add") {
		if _, err := l.Write([]byte(chunk + "Add")); err != nil {
			t.Fatal(err)
		}
	}
	got := l.Events()
	if len(got) != 2 || got[0].Kind != ProxyService || got[1].Object != "default/s1-x" {
		t.Errorf("events %+v, want a Service add and the add of default/s1-x (the unfinished line waits)", got)
	}
}
