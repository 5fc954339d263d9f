package controlplane

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
)

// proxyDeliveryTimeout bounds each wait for hollow proxies to log a
// change. Against an idle kube-apiserver a change reaches their handlers
// in milliseconds; the bound is for a loaded two-core machine and, later,
// a node endpoint in between.
const proxyDeliveryTimeout = 2 * time.Minute

// ProxyMarks are each proxy's log position at one moment (ProxyLog.Len),
// so that a check reads only what came after.
type ProxyMarks map[*HollowProxy]int

// MarkHollowProxies takes the proxies' positions now.
func MarkHollowProxies(proxies []*HollowProxy) ProxyMarks {
	m := ProxyMarks{}
	for _, p := range proxies {
		m[p] = p.Log.Len()
	}
	return m
}

// WaitHollowProxies polls until check returns nil for every proxy. It
// gives up after proxyDeliveryTimeout, or at once if a proxy exits; the
// error names what for, each proxy still failing, why, and its log's
// tail.
func WaitHollowProxies(ctx context.Context, proxies []*HollowProxy, what string, check func(*HollowProxy) error) error {
	var (
		mu   sync.Mutex
		errs = map[*HollowProxy]error{}
	)
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, proxyDeliveryTimeout, true, func(context.Context) (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		clear(errs)
		for _, p := range proxies {
			if done, err := p.Process.Exited(); done {
				return false, fmt.Errorf("hollow proxy %s exited (%v); %s", p.Name, err, p.Process.Describe())
			}
			if err := check(p); err != nil {
				errs[p] = err
			}
		}
		return len(errs) == 0, nil
	})
	if err == nil {
		return nil
	}
	mu.Lock()
	defer mu.Unlock()
	var lines []string
	for _, p := range proxies {
		if e := errs[p]; e != nil {
			lines = append(lines, fmt.Sprintf("%s: %v; %s", p.Name, e, p.Process.Describe()))
		}
	}
	return fmt.Errorf("%s: %w; %d of %d proxies short:\n%s", what, err, len(lines), len(proxies), strings.Join(lines, "\n"))
}

// ProxySaw is a check for WaitHollowProxies: the proxy logged, since its
// mark, at least n events of kind and typ, each naming object when object
// is not "" (only EndpointSlice adds name one, see ProxyEvent.Object).
func ProxySaw(marks ProxyMarks, kind ProxyKind, typ ProxyEventType, object string, n int) func(*HollowProxy) error {
	return func(p *HollowProxy) error {
		got := 0
		for _, e := range p.Log.Since(marks[p]) {
			if e.Kind == kind && e.Type == typ && (object == "" || e.Object == object) {
				got++
			}
		}
		if got < n {
			name := ""
			if object != "" {
				name = " " + object
			}
			return fmt.Errorf("%d of %d %s %s%s", got, n, kind, typ, name)
		}
		return nil
	}
}

// A fence is an EndpointSlice of a unique name, created to be seen. A
// hollow proxy logs its add by name, and its EndpointSlice informer hands
// events to the handlers in the order of the watch (kube-apiserver sends
// them in resourceVersion order; client-go's DeltaFIFO pops keys in the
// order they were queued and one goroutine calls the handlers): once a
// proxy has logged the fence's add, every EndpointSlice event sent
// before it has reached the handlers. That is the only event a hollow
// proxy names; fences turn it into a barrier for the others.
const fenceLabel = "nodeproxy.test/proxy-fence"

// createFence creates a fence in ns and returns "ns/name".
func createFence(ctx context.Context, client kubernetes.Interface, ns string) (string, error) {
	es, err := client.DiscoveryV1().EndpointSlices(ns).Create(ctx, &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name: "proxy-fence-" + utilrand.String(8),
			// Not service.kubernetes.io/headless, which kube-proxy's
			// selector leaves out.
			Labels: map[string]string{fenceLabel: "true"},
		},
		AddressType: discoveryv1.AddressTypeIPv4,
	}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("create fence endpointslice in %s: %w", ns, err)
	}
	return ns + "/" + es.Name, nil
}

// deleteFence deletes the fence named "ns/name".
func deleteFence(ctx context.Context, client kubernetes.Interface, fence string) error {
	ns, name, _ := strings.Cut(fence, "/")
	if err := client.DiscoveryV1().EndpointSlices(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete fence endpointslice %s: %w", fence, err)
	}
	return nil
}

// fenceAt is the position of the fence's add in events, -1 if absent.
func fenceAt(events []ProxyEvent, fence string) int {
	for i, e := range events {
		if e.Kind == ProxyEndpointSlice && e.Type == ProxyAdded && e.Object == fence {
			return i
		}
	}
	return -1
}

// WaitHollowProxiesCaughtUp returns once every proxy has handled every
// EndpointSlice change kube-apiserver had made when it was called: it
// creates a fence in ns (which must exist), waits until every proxy has
// logged its add, then deletes it and waits until every proxy has logged
// an EndpointSlice delete after it, so that it leaves nothing behind and
// a later count of deletes starts clean. It says nothing of Services or
// ServiceCIDRs, which arrive on watches of their own.
func (cp *ControlPlane) WaitHollowProxiesCaughtUp(ctx context.Context, proxies []*HollowProxy, ns string) error {
	admin, err := kubernetes.NewForConfig(cp.admin)
	if err != nil {
		return fmt.Errorf("admin client: %w", err)
	}
	marks := MarkHollowProxies(proxies)
	fence, err := createFence(ctx, admin, ns)
	if err != nil {
		return err
	}
	waitErr := WaitHollowProxies(ctx, proxies, "fence "+fence, ProxySaw(marks, ProxyEndpointSlice, ProxyAdded, fence, 1))
	if err := deleteFence(ctx, admin, fence); err != nil {
		return errors.Join(waitErr, err)
	}
	if waitErr != nil {
		return waitErr
	}
	return WaitHollowProxies(ctx, proxies, "fence "+fence+" deleted", func(p *HollowProxy) error {
		events := p.Log.Since(marks[p])
		if at := fenceAt(events, fence); CountProxyEvents(events[at+1:], ProxyEndpointSlice, ProxyDeleted) == 0 {
			return fmt.Errorf("no EndpointSlice delete after %s", fence)
		}
		return nil
	})
}

// proxyBallast is how many EndpointSlices WaitHollowProxiesSawUpdate
// keeps in its namespace so that each resync logs at least two updates.
// A resync calls the update handler, in one run, for the objects the
// informer holds: with client-go 1.36's AtomicFIFO (on by default) for
// every one, queued behind the events before it; without, for those with
// no event queued. The ballast never changes once the proxies hold it,
// so it counts either way: with two, every resync logs two lines or
// more, and a single update line between two fences is the update.
const proxyBallast = 2

// proxyUpdateAttempts bounds how often WaitHollowProxiesSawUpdate updates
// again because a resync (every 30 s, each taking a moment) fell between
// its fences. Two in a row are already unlikely; three leaves room for a
// slow machine.
const proxyUpdateAttempts = 3

// WaitHollowProxiesSawUpdate proves that an update of an EndpointSlice
// reached every proxy's handlers, which its log cannot say directly: the
// update line names no object, and a resync every 30 s logs the same line
// for every object the proxy holds. So it brackets update between two
// fences in ns (after making sure ns holds proxyBallast EndpointSlices the
// proxies see) and counts the proxy's update lines between them: exactly
// one is the update, none means it never arrived, and more means a resync
// fell in between, when it calls update again (up to
// proxyUpdateAttempts). update must change an EndpointSlice the proxies
// see, a different change each call: an update that changes nothing is
// no event.
func (cp *ControlPlane) WaitHollowProxiesSawUpdate(ctx context.Context, proxies []*HollowProxy, ns string, update func(ctx context.Context) error) error {
	admin, err := kubernetes.NewForConfig(cp.admin)
	if err != nil {
		return fmt.Errorf("admin client: %w", err)
	}
	if err := ensureBallast(ctx, admin, ns); err != nil {
		return err
	}
	// Every ballast slice must be in every proxy's informer before the
	// first fence, or a resync could log fewer than two lines.
	if err := cp.WaitHollowProxiesCaughtUp(ctx, proxies, ns); err != nil {
		return err
	}
	for attempt := 1; ; attempt++ {
		ambiguous, err := cp.bracketUpdate(ctx, admin, proxies, ns, update)
		if err != nil || len(ambiguous) == 0 {
			return err
		}
		if attempt == proxyUpdateAttempts {
			return fmt.Errorf("update between fences %d times, a resync fell in between every time on %s", attempt, strings.Join(ambiguous, ", "))
		}
	}
}

// bracketUpdate is one attempt of WaitHollowProxiesSawUpdate: it returns
// the proxies whose count was ambiguous, or an error if one logged none.
func (cp *ControlPlane) bracketUpdate(ctx context.Context, admin kubernetes.Interface, proxies []*HollowProxy, ns string, update func(ctx context.Context) error) (ambiguous []string, err error) {
	marks := MarkHollowProxies(proxies)
	var fences []string
	defer func() {
		for _, f := range fences {
			if derr := deleteFence(context.WithoutCancel(ctx), admin, f); derr != nil {
				err = errors.Join(err, derr)
			}
		}
	}()
	for i := range 2 {
		if i == 1 {
			if err := update(ctx); err != nil {
				return nil, fmt.Errorf("update: %w", err)
			}
		}
		fence, err := createFence(ctx, admin, ns)
		if err != nil {
			return nil, err
		}
		fences = append(fences, fence)
		if err := WaitHollowProxies(ctx, proxies, "fence "+fence, ProxySaw(marks, ProxyEndpointSlice, ProxyAdded, fence, 1)); err != nil {
			return nil, err
		}
	}
	var lost []string
	for _, p := range proxies {
		events := p.Log.Since(marks[p])
		between := events[fenceAt(events, fences[0])+1 : fenceAt(events, fences[1])]
		switch n := CountProxyEvents(between, ProxyEndpointSlice, ProxyUpdated); {
		case n == 0:
			lost = append(lost, p.Name)
		case n > 1:
			ambiguous = append(ambiguous, p.Name)
		}
	}
	if len(lost) > 0 {
		return nil, fmt.Errorf("no EndpointSlice update logged between fences %s and %s by %s", fences[0], fences[1], strings.Join(lost, ", "))
	}
	return ambiguous, nil
}

// ensureBallast creates the proxyBallast EndpointSlices in ns if missing.
// They stay, labelled fenceLabel=ballast; DeleteProxyFences removes them.
func ensureBallast(ctx context.Context, client kubernetes.Interface, ns string) error {
	for i := range proxyBallast {
		_, err := client.DiscoveryV1().EndpointSlices(ns).Create(ctx, &discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{
				Name:   fmt.Sprintf("proxy-ballast-%d", i),
				Labels: map[string]string{fenceLabel: "ballast"},
			},
			AddressType: discoveryv1.AddressTypeIPv4,
		}, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create ballast endpointslice in %s: %w", ns, err)
		}
	}
	return nil
}

// DeleteProxyFences deletes what the waits above left in ns: the ballast,
// and fences a failed wait could not delete.
func (cp *ControlPlane) DeleteProxyFences(ctx context.Context, ns string) error {
	admin, err := kubernetes.NewForConfig(cp.admin)
	if err != nil {
		return fmt.Errorf("admin client: %w", err)
	}
	if err := admin.DiscoveryV1().EndpointSlices(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: fenceLabel}); err != nil {
		return fmt.Errorf("delete fences in %s: %w", ns, err)
	}
	return nil
}
