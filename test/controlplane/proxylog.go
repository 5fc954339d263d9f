package controlplane

import (
	"bytes"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"
)

// ProxyKind is a kind of object a hollow proxy watches.
type ProxyKind string

const (
	ProxyService       ProxyKind = "Service"
	ProxyEndpointSlice ProxyKind = "EndpointSlice"
	ProxyServiceCIDR   ProxyKind = "ServiceCIDR"
)

// ProxyKinds are the kinds a hollow proxy watches, one watch each.
var ProxyKinds = []ProxyKind{ProxyService, ProxyEndpointSlice, ProxyServiceCIDR}

// ProxyEventType is what a hollow proxy's log says happened.
type ProxyEventType string

const (
	// ProxyAdded, ProxyUpdated and ProxyDeleted are a handler call
	// (OnServiceAdd, OnEndpointSliceUpdate, ...).
	ProxyAdded   ProxyEventType = "Added"
	ProxyUpdated ProxyEventType = "Updated"
	ProxyDeleted ProxyEventType = "Deleted"
	// ProxyChanged is ServiceCIDRConfig's one handler call
	// (OnServiceCIDRsChanged) for an add, update or delete alike, and
	// once more when its informer has synced.
	ProxyChanged ProxyEventType = "Changed"
	// ProxySynced is an informer's first full sync ("Caches are synced"):
	// the watch is open and its initial state has reached the handlers.
	ProxySynced ProxyEventType = "Synced"
	// ProxyRefused is a list or watch the server refused (403 Forbidden);
	// Detail has the reflector's error.
	ProxyRefused ProxyEventType = "Refused"
)

// ProxyEvent is one line of a hollow proxy's log that says what it
// received.
type ProxyEvent struct {
	Kind ProxyKind
	Type ProxyEventType
	// Object is "namespace/name" where the line names it. In v1.36.3 only
	// OnEndpointSliceAdd does (pkg/proxy/config/config.go); every other
	// handler line names no object, and none carries a resourceVersion.
	Object string
	// Detail is the error of a ProxyRefused event.
	Detail string
	// At is when the line was read from the process, not the time klog
	// printed in it: the moment a test could know.
	At time.Time
}

// proxyLines are the messages of pkg/proxy/config (v1.36.3) that say a
// handler was called, and what it was given. The handler names are
// upstream's: an EndpointSlice's deletion logs "OnEndpointsDelete".
var proxyLines = map[string]struct {
	kind ProxyKind
	typ  ProxyEventType
}{
	"Calling handler.OnServiceAdd":          {ProxyService, ProxyAdded},
	"Calling handler.OnServiceUpdate":       {ProxyService, ProxyUpdated},
	"Calling handler.OnServiceDelete":       {ProxyService, ProxyDeleted},
	"Calling handler.OnEndpointSliceAdd":    {ProxyEndpointSlice, ProxyAdded},
	"Calling handler.OnEndpointSliceUpdate": {ProxyEndpointSlice, ProxyUpdated},
	"Calling handler.OnEndpointsDelete":     {ProxyEndpointSlice, ProxyDeleted},
	"Calling handler.OnServiceCIDRsChanged": {ProxyServiceCIDR, ProxyChanged},
}

// proxySyncers are the controller names pkg/proxy/config gives
// WaitForNamedCacheSync, which logs "Caches are synced" with them.
var proxySyncers = map[string]ProxyKind{
	"service config":        ProxyService,
	"endpoint slice config": ProxyEndpointSlice,
	"serviceCIDR config":    ProxyServiceCIDR,
}

// proxyResources name the kinds in the reflector's errors ("failed to
// list *v1.Service: services is forbidden: ...").
var proxyResources = map[string]ProxyKind{
	"services":       ProxyService,
	"endpointslices": ProxyEndpointSlice,
	"servicecidrs":   ProxyServiceCIDR,
}

// klogLine is klog's text format: severity, date, time, thread, file:line,
// then the message, quoted when structured (InfoS), and key="value" pairs.
var klogLine = regexp.MustCompile(`^[IWEF]\d{4} [0-9:.]+\s+\d+ [^ \]]+\] "((?:[^"\\]|\\.)*)"(.*)$`)

// klogValue finds key="value" (or key=value) among a line's pairs.
func klogValue(pairs, key string) string {
	i := strings.Index(pairs, " "+key+"=")
	if i < 0 {
		return ""
	}
	v := pairs[i+len(key)+2:]
	if strings.HasPrefix(v, `"`) {
		// The value is Go-quoted (strconv.Quote): find the closing quote
		// past escaped ones, and unquote.
		for j := 1; j < len(v); j++ {
			switch v[j] {
			case '\\':
				j++
			case '"':
				if u, err := strconv.Unquote(v[:j+1]); err == nil {
					return u
				}
				return v[1:j]
			}
		}
		return v[1:]
	}
	if j := strings.IndexByte(v, ' '); j >= 0 {
		return v[:j]
	}
	return v
}

// forbidden finds, in a reflector's error, the resource refused:
// `services is forbidden: User "..." cannot list resource "services"`.
// The resource comes with its group, if any: endpointslices.discovery.k8s.io.
var forbidden = regexp.MustCompile(`(\w+)(?:\.[\w.]+)? is forbidden: `)

// parseProxyLine is the event one log line reports, if any.
func parseProxyLine(line string) (ProxyEvent, bool) {
	m := klogLine.FindStringSubmatch(line)
	if m == nil {
		return ProxyEvent{}, false
	}
	msg, pairs := m[1], m[2]
	if l, ok := proxyLines[msg]; ok {
		e := ProxyEvent{Kind: l.kind, Type: l.typ}
		if e.Kind == ProxyEndpointSlice && e.Type == ProxyAdded {
			e.Object = klogValue(pairs, "endpoints")
		}
		return e, true
	}
	if msg == "Caches are synced" {
		if k, ok := proxySyncers[klogValue(pairs, "controller")]; ok {
			return ProxyEvent{Kind: k, Type: ProxySynced}, true
		}
		return ProxyEvent{}, false
	}
	// The reflector reports a refused list or watch as an error whose
	// text names the resource; the line's message varies with the path
	// taken (WatchList, then a plain list), the error does not.
	if f := forbidden.FindStringSubmatch(pairs); f != nil {
		if k, ok := proxyResources[f[1]]; ok {
			return ProxyEvent{Kind: k, Type: ProxyRefused, Detail: klogValue(pairs, "err")}, true
		}
	}
	return ProxyEvent{}, false
}

// ProxyLog is a hollow proxy's output read as it arrives: the events its
// lines report, in order. It is an io.Writer for StartProcessTee.
//
// What the log can say is what kube-proxy's config package logs at V(4),
// and that is little: which kind, which handler, and for an
// EndpointSlice's add only, which object. It never names a Service, an
// updated or deleted EndpointSlice, or a resourceVersion. And every
// ConfigSyncPeriod (30 s, fixed by kubemark) each informer resyncs: it
// calls the update handler once per object it holds, with the object
// unchanged, a line the same as a real update's. So:
//
//   - an Added or Deleted count is exact: resyncs add and delete nothing,
//     and a relist after a broken watch adds or deletes only what changed
//     meanwhile;
//   - an Updated count is not: it includes the resyncs. One update is
//     proven by bracketing it between two named adds, where a resync
//     cannot log a single line (ControlPlane.WaitHollowProxiesSawUpdate).
type ProxyLog struct {
	mu      sync.Mutex
	events  []ProxyEvent
	partial []byte
}

// NewProxyLog returns an empty log.
func NewProxyLog() *ProxyLog { return &ProxyLog{} }

// Write takes the process's output, split into lines anywhere.
func (l *ProxyLog) Write(b []byte) (int, error) {
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.partial = append(l.partial, b...)
	for {
		i := bytes.IndexByte(l.partial, '\n')
		if i < 0 {
			break
		}
		if e, ok := parseProxyLine(string(l.partial[:i])); ok {
			e.At = now
			l.events = append(l.events, e)
		}
		l.partial = l.partial[i+1:]
	}
	// Keep the unfinished line in a buffer of its own size, so the
	// consumed prefix can be collected.
	l.partial = append([]byte(nil), l.partial...)
	return len(b), nil
}

// Len is the number of events so far: a mark for Since.
func (l *ProxyLog) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.events)
}

// Since returns the events from mark (a Len) on.
func (l *ProxyLog) Since(mark int) []ProxyEvent {
	l.mu.Lock()
	defer l.mu.Unlock()
	if mark > len(l.events) {
		return nil
	}
	return append([]ProxyEvent(nil), l.events[mark:]...)
}

// Events returns every event so far.
func (l *ProxyLog) Events() []ProxyEvent { return l.Since(0) }

// Synced reports whether kind's informer has synced.
func (l *ProxyLog) Synced(kind ProxyKind) bool {
	return CountProxyEvents(l.Events(), kind, ProxySynced) > 0
}

// CountProxyEvents is how many of events are of kind and typ.
func CountProxyEvents(events []ProxyEvent, kind ProxyKind, typ ProxyEventType) int {
	n := 0
	for _, e := range events {
		if e.Kind == kind && e.Type == typ {
			n++
		}
	}
	return n
}
