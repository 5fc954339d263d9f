package nodeview

import (
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodeproxy/nodeproxy/graph"
)

// podIn is pod with namespace ns.
func podIn(ns, name, node string, uses ...string) *corev1.Pod {
	p := pod(name, node, uses...)
	p.Namespace = ns
	return p
}

func TestNamespaceServicesEnterBeforeItsFirstPodAndLeaveAfterItsLast(t *testing.T) {
	r := newReplica(t, 256)
	var k cluster
	c := r.open("n1", nil)
	other := r.open("n2", nil)
	expect(t, "the initial state: default's services, none of a namespace without a pod of the node",
		step(r, c, k.put(servicesGVR, serviceIn("default", "kubernetes")), k.put(servicesGVR, serviceIn("web", "front"))),
		"ADDED Service default/kubernetes", "BOOKMARK initial-events-end")
	expect(t, "another node's view", other.read(), "ADDED Service default/kubernetes", "BOOKMARK initial-events-end")

	expect(t, "a service of a namespace without a pod of the node", step(r, c, k.put(servicesGVR, serviceIn("web", "back"))))
	expect(t, "the namespace's first pod", step(r, c, k.put(podsGVR, podIn("web", "p1", "n1"))),
		"ENTERED Service web/back", "ENTERED Service web/front", "ADDED Pod web/p1", "BOOKMARK")
	expect(t, "a second pod", step(r, c, k.put(podsGVR, podIn("web", "p2", "n1"))), "ADDED Pod web/p2", "BOOKMARK")
	expect(t, "a service of the namespace changes, is created, is deleted",
		step(r, c, k.put(servicesGVR, serviceIn("web", "front")), k.put(servicesGVR, serviceIn("web", "api")), k.del(servicesGVR, serviceIn("web", "back"))),
		"MODIFIED Service web/front", "ADDED Service web/api", "DELETED Service web/back", "BOOKMARK")
	expect(t, "one of two pods goes", step(r, c, k.del(podsGVR, podIn("web", "p1", "n1"))), "DELETED Pod web/p1", "BOOKMARK")
	expect(t, "the last pod goes", step(r, c, k.del(podsGVR, podIn("web", "p2", "n1"))),
		"DELETED Pod web/p2", "LEFT Service web/api", "LEFT Service web/front", "BOOKMARK")
	expect(t, "a service of the namespace the node left", step(r, c, k.put(servicesGVR, serviceIn("web", "front"))))
	expect(t, "another node's view throughout", other.read())
	if refs := r.views.reached.len(); refs != 0 {
		t.Errorf("%d objects in the index of what views reach after the last pod went, want 0", refs)
	}

	// Created in one step with its pod, after it in etcd's order: the
	// view takes in services before pods, so the service still enters
	// first.
	expect(t, "a pod, then a service of its namespace, in one step",
		step(r, c, k.put(podsGVR, podIn("db", "p3", "n1")), k.put(servicesGVR, serviceIn("db", "sql"))),
		"ENTERED Service db/sql", "ADDED Pod db/p3", "BOOKMARK")
	// LEFT carries the identity alone, never the service's state
	// (consumer.read fails the test otherwise).
	expect(t, "the namespace's last pod goes as a pod of default comes", step(r, c, k.del(podsGVR, podIn("db", "p3", "n1")), k.put(podsGVR, podIn("default", "p4", "n1"))),
		"DELETED Pod db/p3", "LEFT Service db/sql", "ADDED Pod default/p4", "BOOKMARK")
}

// TestResumeAcrossANamespaceEntry: the consumer's connection is lost in
// the batch that brought a namespace's first pod, after the services
// entered and before the bookmark; the resume, on another replica, sends
// them again before the pod, and one from after the batch sends nothing
// of them again.
func TestResumeAcrossANamespaceEntry(t *testing.T) {
	var k cluster
	a, b := newReplica(t, 256), newReplica(t, 256)
	both := func(ws ...write) {
		for _, w := range ws {
			a.write(w)
			b.write(w)
		}
	}
	both(k.put(servicesGVR, serviceIn("web", "front")), k.put(servicesGVR, serviceIn("default", "kubernetes")))
	c := a.open("n1", nil)
	c.watchOrder(a)
	expect(t, "the initial state", step(a, c), "ADDED Service default/kubernetes", "BOOKMARK initial-events-end")

	both(k.put(podsGVR, podIn("web", "p1", "n1")))
	a.views.Step()
	if got := c.sink.take(); len(got) != 3 {
		t.Fatalf("the batch of the namespace's first pod: %d events, want ENTERED, ADDED and the bookmark", len(got))
	}
	c.sink.Close(nil) // lost before the consumer applied it

	b.views.Step()
	c.resumeOn(b)
	b.views.Step()
	expect(t, "the resume from before the entry", c.read(), "ENTERED Service web/front", "ADDED Pod web/p1", "BOOKMARK")
	check(t, b, c, "after the resume")

	c.sink.Close(nil)
	c.resumeOn(a)
	a.views.Step()
	expect(t, "a resume from after the entry", c.read(), "BOOKMARK")
	expect(t, "a change of the service after it", step(a, c, k.put(servicesGVR, serviceIn("web", "front"))), "MODIFIED Service web/front", "BOOKMARK")
	check(t, a, c, "after the second resume")
}

func TestNamespacePathsAreNoKindOfTheGraph(t *testing.T) {
	for _, k := range graph.Kinds() {
		if k >= namespaceKind {
			t.Errorf("graph kind %s is %d, at or above namespaceKind (%d): a view would take its objects for namespaces", k, k, namespaceKind)
		}
	}
}
