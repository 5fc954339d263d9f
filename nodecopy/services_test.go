package nodecopy

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/watch"

	"github.com/nodeproxy/nodeproxy/apis/bulk/v1alpha1"
)

var services = v1alpha1.NodeViewTypeIndex("services")

func service(ns, name string, rv int) []byte { return obj("Service", ns, name, rv, "") }

func podIn(ns, name string, rv int) []byte {
	return obj("Pod", ns, name, rv, `,"spec":{"nodeName":"node-a"}`)
}

// TestAServiceEnteringWithItsNamespacesFirstPodReachesAListWatch: the
// kubelet listed the services at 10, when the copy held none of
// namespace web; the namespace's first pod brings web/front, created at
// 5, in a batch that leaves the services' version at 10 (only pods
// moved). A watch from the list's version, opened before or after the
// batch, sees it ADDED, at the version it entered at; a watch of it by
// name from 10 does not (its reader read it elsewhere, as before).
func TestAServiceEnteringWithItsNamespacesFirstPodReachesAListWatch(t *testing.T) {
	c := New("node-a")
	mustApply(t, c, Batch{Initial: true, Position: position(10, nil), Events: []Event{{watch.Added, service("default", "kubernetes", 3)}}})
	before, err := c.WatchFrom(services, Filter{}, 10)
	if err != nil {
		t.Fatal(err)
	}
	mustApply(t, c, Batch{Position: position(10, map[string]int{"pods": 12}), Events: []Event{
		{v1alpha1.NodeViewEntered, service("web", "front", 5)}, {watch.Added, podIn("web", "p", 12)},
	}})
	after, err := c.WatchFrom(services, Filter{}, 10)
	if err != nil {
		t.Fatal(err)
	}
	for what, w := range map[string]*Watch{"opened before the batch": before, "opened after it": after} {
		changes := nextChanges(t, w)
		if describe(changes) != "ADDED front@10" {
			t.Errorf("a watch of every service from 10, %s: %q, want ADDED front@10", what, describe(changes))
		} else if !strings.Contains(string(changes[0].Object.Raw), `"resourceVersion":"10"`) {
			t.Errorf("%s: the object says %s, want the version it entered at", what, changes[0].Object.Raw)
		}
	}
	byName, _ := c.WatchFrom(services, Filter{Namespace: "web", Name: "front"}, 10)
	if got := next(t, byName); got != "" {
		t.Errorf("a watch of web/front by name from 10: %q, want nothing", got)
	}
	list, at, _ := c.List(services, Filter{})
	if names(list) != "kubernetes@3 front@5" && names(list) != "front@5 kubernetes@3" || at != 10 {
		t.Errorf("the list: %q at %d", names(list), at)
	}
}

func nextChanges(t *testing.T, w *Watch) []Change {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	changes, _, _ := w.Next(ctx)
	return changes
}

// TestAServiceLeavingWithItsNamespacesLastPodIsNoDeletion: LEFT takes it
// out of the copy and out of lists; a watch of every service goes on
// without it (no DELETED: the service was not deleted), one by name ends;
// and no floor is kept, so that it comes back with the namespace's next
// pod at the state it has then, however old.
func TestAServiceLeavingWithItsNamespacesLastPodIsNoDeletion(t *testing.T) {
	c := New("node-a")
	mustApply(t, c, Batch{Initial: true, Position: position(10, nil), Events: []Event{
		{watch.Added, service("web", "front", 5)}, {watch.Added, podIn("web", "p", 8)},
	}})
	all, _ := c.WatchFrom(services, Filter{}, 10)
	byName, _ := c.WatchFrom(services, Filter{Namespace: "web", Name: "front"}, 10)
	mustApply(t, c, Batch{Position: position(10, map[string]int{"pods": 12}), Events: []Event{
		{watch.Deleted, podIn("web", "p", 12)}, {v1alpha1.NodeViewLeft, service("web", "front", 10)},
	}})
	if got := next(t, all); got != "" {
		t.Errorf("a watch of every service: %q, want nothing", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if _, _, err := byName.Next(ctx); !errors.Is(err, ErrLeft) {
		t.Errorf("a watch of web/front by name: %v, want ErrLeft", err)
	}
	if list, _, _ := c.List(services, Filter{}); len(list) != 0 {
		t.Errorf("the list after the service left: %q", names(list))
	}
	if gones := c.Gones(); len(gones) != 0 {
		t.Errorf("floors kept for a service that left: %v", gones)
	}
	mustApply(t, c, Batch{Position: position(10, map[string]int{"pods": 14}), Events: []Event{
		{v1alpha1.NodeViewEntered, service("web", "front", 5)}, {watch.Added, podIn("web", "q", 14)},
	}})
	if list, _, _ := c.List(services, Filter{}); names(list) != "front@5" {
		t.Errorf("the list after the namespace's next pod: %q, want front@5", names(list))
	}
}

// TestServicesServedElsewhereStayInsideTheView: kube-apiserver served
// the kubelet every service while the hub was away; the copy takes in
// those of default and of the namespaces of its pods, and passes over
// the others, which the view would never take out again. A deletion is
// a floor whatever its namespace.
func TestServicesServedElsewhereStayInsideTheView(t *testing.T) {
	c := New("node-a")
	mustApply(t, c, Batch{Initial: true, Position: position(10, nil), Events: []Event{{watch.Added, podIn("web", "p", 8)}}})
	refused, changed, passed := c.ObserveList(services, Filter{}, 30, [][]byte{
		service("default", "kubernetes", 3), service("web", "front", 20), service("shop", "cart", 21), service("shop", "pay", 22),
	})
	if len(refused) != 0 || changed != 2 || passed != 2 {
		t.Fatalf("observe the list: refused %v, %d changed, %d passed over; want 2 changed, 2 passed over", refused, changed, passed)
	}
	list, _, _ := c.List(services, Filter{})
	var got []string
	for _, o := range list {
		got = append(got, o.Namespace+"/"+o.Name)
	}
	if strings.Join(got, " ") != "default/kubernetes web/front" && strings.Join(got, " ") != "web/front default/kubernetes" {
		t.Errorf("the copy's services: %v, want default/kubernetes and web/front", got)
	}
	if _, changed, passed := c.Observe([]Observed{{watch.Deleted, service("shop", "cart", 31)}}); changed != 0 || passed != 0 {
		t.Errorf("a deletion outside the view: %d changed, %d passed over; want a floor, neither", changed, passed)
	}
	// The namespace's first pod, from a replica whose services are from
	// before the deletion: the deleted service does not come back.
	mustApply(t, c, Batch{Position: position(10, map[string]int{"pods": 32}), Events: []Event{
		{v1alpha1.NodeViewEntered, service("shop", "cart", 21)}, {v1alpha1.NodeViewEntered, service("shop", "pay", 22)}, {watch.Added, podIn("shop", "s", 32)},
	}})
	if o, _, _ := c.Get(services, "shop", "cart"); o != nil {
		t.Errorf("shop/cart, seen deleted at 31, came back at %d", o.RV)
	}
	if o, _, _ := c.Get(services, "shop", "pay"); o == nil {
		t.Error("shop/pay did not enter with the namespace's first pod")
	}
}

// TestAViewAfreshTakesOutAServiceAsLeft: a view afresh without a service
// the copy holds (its namespace lost its last pod meanwhile) is LEFT, not
// a deletion; one it brings that the copy lacked though it is older than
// the copy's version entered, and a watch of every service sees it.
func TestAViewAfreshTakesOutAServiceAsLeft(t *testing.T) {
	c := New("node-a")
	mustApply(t, c, Batch{Initial: true, Position: position(10, nil), Events: []Event{
		{watch.Added, service("web", "front", 5)}, {watch.Added, podIn("web", "p", 8)},
	}})
	all, _ := c.WatchFrom(services, Filter{}, 10)
	mustApply(t, c, Batch{Initial: true, Position: position(40, nil), Events: []Event{
		{watch.Added, service("shop", "cart", 7)}, {watch.Added, podIn("shop", "s", 38)},
	}})
	if got := next(t, all); got != "ADDED cart@40" {
		t.Errorf("a watch of every service across the view afresh: %q, want cart ADDED at 40 and nothing of front", got)
	}
}
