package nodeview

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/endpoints/request"

	"github.com/nodeproxy/nodeproxy/apis/bulk/v1alpha1"
	"github.com/nodeproxy/nodeproxy/bulk"
	"github.com/nodeproxy/nodeproxy/cache"
	"github.com/nodeproxy/nodeproxy/graph"
)

// workload makes random writes on a small cluster of two nodes, where
// pods, the objects they use and the volumes bound to their claims come
// and go: every path into and out of a view, in every order etcd can put
// them.
type workload struct {
	rng     *rand.Rand
	k       cluster
	objects map[string]runtime.Object // "resource name" -> current object
}

func newWorkload(seed uint64) *workload {
	return &workload{rng: rand.New(rand.NewPCG(seed, 1)), objects: map[string]runtime.Object{}}
}

func (w *workload) pick(names ...string) string { return names[w.rng.IntN(len(names))] }

func (w *workload) put(gvr schema.GroupVersionResource, name string, obj runtime.Object) write {
	w.objects[gvr.Resource+" "+name] = obj
	return w.k.put(gvr, obj.DeepCopyObject())
}

// next is one write: a create, an update or a delete. Services come and
// go in the pods' namespaces, in another that only pods using nothing
// (q0, q1) bring into a view, and in default, which every view holds.
func (w *workload) next() write {
	for {
		switch w.rng.IntN(11) {
		case 9:
			ns := w.pick("ns", "other", metav1.NamespaceDefault)
			name := w.pick("w0", "w1")
			svc := serviceIn(ns, name)
			svc.Labels = map[string]string{"v": fmt.Sprint(w.rng.IntN(100))}
			return w.put(servicesGVR, ns+"/"+name, svc)
		case 10:
			name := w.pick("q0", "q1")
			if old, ok := w.objects["pods other/"+name]; ok {
				p := old.(*corev1.Pod).DeepCopy()
				p.Labels = map[string]string{"v": fmt.Sprint(w.rng.IntN(100))}
				return w.put(podsGVR, "other/"+name, p)
			}
			p := pod(name, w.pick("n1", "n2"))
			p.Namespace = "other"
			return w.put(podsGVR, "other/"+name, p)
		case 0:
			name := w.pick("s0", "s1", "s2", "s3")
			return w.put(secretsGVR, name, secret(name, fmt.Sprint(w.rng.IntN(100))))
		case 1:
			name := w.pick("c0", "c1", "c2")
			return w.put(cmGVR, name, configMap(name, fmt.Sprint(w.rng.IntN(100))))
		case 2:
			name := w.pick("a0", "a1")
			return w.put(saGVR, name, serviceAccount(name))
		case 3:
			name := w.pick("d0", "d1")
			return w.put(pvcGVR, name, claim(name))
		case 4:
			name := w.pick("v0", "v1")
			return w.put(pvGVR, name, pv(name, w.pick("", "d0", "d1"), w.pick("s3", "s4")))
		case 5, 6:
			name := w.pick("p0", "p1", "p2", "p3", "p4", "p5")
			if old, ok := w.objects["pods "+name]; ok {
				p := old.(*corev1.Pod).DeepCopy()
				p.Labels = map[string]string{"v": fmt.Sprint(w.rng.IntN(100))}
				return w.put(podsGVR, name, p)
			}
			var uses []string
			for range w.rng.IntN(4) {
				uses = append(uses, w.pick("secret/s0", "secret/s1", "secret/s2", "configmap/c0", "configmap/c1", "configmap/c2", "claim/d0", "claim/d1", "sa/a0", "sa/a1"))
			}
			return w.put(podsGVR, name, pod(name, w.pick("n1", "n2"), uses...))
		case 7:
			name := w.pick("n1", "n2")
			return w.put(nodesGVR, name, node(name, fmt.Sprint(w.rng.IntN(100))))
		case 8:
			// A delete of anything that exists.
			keys := make([]string, 0, len(w.objects))
			for key := range w.objects {
				keys = append(keys, key)
			}
			if len(keys) == 0 {
				continue
			}
			slices.Sort(keys)
			key := keys[w.rng.IntN(len(keys))]
			obj := w.objects[key]
			delete(w.objects, key)
			resource, _, _ := strings.Cut(key, " ")
			return w.k.del(gvrOf(resource), obj.DeepCopyObject())
		}
	}
}

func gvrOf(resource string) schema.GroupVersionResource {
	return types[typeIndex(resource)].gvr
}

// check compares c's copy with the view at its position, as a view
// opened now on r holds it before the live graph has its say: after every
// batch, the consumer holds exactly that, every object at its version
// there, except the objects the live graph no longer lets the node
// reach, which a view withholds until the change that took them away
// reaches it (the graph takes changes in before the cache shows them,
// and a pod change held back for a lagging store lets it run ahead).
func check(t *testing.T, r *replica, c *consumer, when string) {
	t.Helper()
	truth := &consumer{t: t, node: c.node, held: map[string]uint64{}}
	v := newView(c.node, v1alpha1.AllNodeViewTypes, &truth.sink, allowAll{}, r.views)
	truth.sink.onClose = func() { r.views.remove(v) }
	r.views.join(v, Position{}, false)
	r.views.Step()
	c.read()
	truth.read()
	truth.sink.Close(nil)
	got, want := c.reachable(r, c.held), c.reachable(r, truth.held)
	if !slices.Equal(got, want) {
		t.Fatalf("%s: the consumer holds\n  %s\nthe view is\n  %s\nevents: %s", when, strings.Join(got, " "), strings.Join(want, " "), strings.Join(c.log, " | "))
	}
}

// allowAll is a live graph that lets every node reach everything.
type allowAll struct{}

func (allowAll) Reachable(string, graph.ObjectRef) bool { return true }

// TestResumeOnAnotherReplicaLosesAndRepeatsNothing follows n1's view on
// replica A through random writes, loses the connection in the middle
// of a batch (events sent after the last bookmark never applied), and
// resumes from the last bookmark's position on replica B, which takes
// the same writes at other moments and steps at other boundaries, and
// may not have reached the position yet when the view asks to resume,
// and never gets the bookmarks of quiet types A's watch got.
// The consumer fails the test on any event that repeats or skips a
// change (consumer.read), and after every batch on either replica must
// hold exactly the view at its position.
func TestResumeOnAnotherReplicaLosesAndRepeatsNothing(t *testing.T) {
	for seed := range uint64(80) {
		t.Run(fmt.Sprint("seed ", seed), func(t *testing.T) {
			w := newWorkload(seed)
			a, b := newReplica(t, 1<<16), newReplica(t, 1<<16)
			var writes []write
			for range 120 {
				writes = append(writes, w.next())
			}
			c := a.open("n1", nil)
			c.watchOrder(a)
			cut := 20 + w.rng.IntN(80)
			marked := 0 // writes A had taken in at c's last bookmark
			for i := range cut {
				a.write(writes[i])
				if w.rng.IntN(4) == 0 {
					// A bookmark of a quiet type that only A's watch gets:
					// B must resume without it.
					rv := writes[i].obj.(metav1.Object).GetResourceVersion()
					if err := a.cache.Store(gvrOf(w.pick("runtimeclasses", "csidrivers", "serviceaccounts", "persistentvolumes"))).Bookmark(rv); err != nil {
						t.Fatal(err)
					}
				}
				if w.rng.IntN(3) == 0 {
					a.views.Step()
					c.read()
					marked = i + 1
					check(t, a, c, fmt.Sprintf("replica A after write %d", i))
				}
			}
			// A sends the rest of the writes up to cut; the connection is
			// lost before the batch's bookmark is applied.
			a.views.Step()
			c.sink.take()
			c.sink.Close(nil)

			// B has taken in some of the writes, maybe fewer than the
			// position needs; the resume waits for it.
			behind := w.rng.IntN(marked + 1)
			for i := range behind {
				b.write(writes[i])
			}
			b.views.Step()
			resumed := c.resumeOn(b)
			b.views.Step()
			c.read()
			for i := behind; i < len(writes); i++ {
				b.write(writes[i])
				if w.rng.IntN(3) == 0 || i == len(writes)-1 {
					b.views.Step()
					c.read()
					if i+1 >= marked {
						check(t, b, c, fmt.Sprintf("replica B after write %d", i))
					}
				}
			}
			if !resumed.joined {
				t.Fatal("the view never joined replica B")
			}
		})
	}
}

// resumeOn opens c's view again on r from its last bookmark's position,
// as watchmux.Session reopens a channel on another replica.
func (c *consumer) resumeOn(r *replica) *view {
	from := c.position()
	c.sink = recordingSink{}
	c.watchOrder(r)
	v := newView(c.node, v1alpha1.AllNodeViewTypes, &c.sink, r.graph, r.views)
	c.sink.onClose = func() { r.views.remove(v) }
	r.views.join(v, from, true)
	return v
}

// watchOrder makes c fail the test on a pod that arrives before an
// object it uses that r's cache holds: the view's ordering rule.
func (c *consumer) watchOrder(r *replica) {
	c.exists = func(i int, ns, name string) bool {
		_, ok := r.cache.Store(types[i].gvr).Snapshot().Get(ns, name)
		return ok
	}
	c.live = func(ref graph.ObjectRef) bool { return r.graph.Reachable(c.node, ref) }
	c.services = func(ns string) []string {
		var names []string
		r.cache.Store(servicesGVR).Snapshot().Ascend(ns, ns, "", func(o *cache.Object) bool {
			names = append(names, o.Name)
			return true
		})
		return names
	}
}

// fakeProgress answers bulk.Progress as kube-apiserver would for a type
// whose last change up to through was at changed (0: none after from).
type fakeProgress struct {
	changed, through uint64
	asked            int
}

func (f *fakeProgress) Progress(_ context.Context, _ schema.GroupVersionResource, from uint64) (uint64, uint64, error) {
	f.asked++
	return max(from, f.changed), f.through, nil
}

// TestResumeOnAReplicaThatListedAtAnotherVersion: the replicas listed
// runtime classes, which nobody changes, at different versions, as
// replicas started at different times do. Moving to one that listed
// later, its change log cannot show the state at the position's version;
// moving to one that listed earlier, its store is behind the position's
// and will not move before its next bookmark. Either way the view
// resumes when kube-apiserver shows the type did not change in between.
// When it did, or when nobody can be asked, the later replica sends the
// view afresh for the consumer to replace its copy with (want 0, no
// wantRuntimeRV), and the earlier one refuses (504) until it catches up.
func TestResumeOnAReplicaThatListedAtAnotherVersion(t *testing.T) {
	later := map[string]string{"runtimeclasses": "40"}
	for _, tc := range []struct {
		name          string
		aListed       map[string]string
		bListed       map[string]string
		progress      *fakeProgress
		want          int32
		wantRuntimeRV string
	}{
		{"to a later replica: no change since", nil, later, &fakeProgress{through: 45}, 0, "runtimeclasses=40"},
		{"to a later replica: changed since", nil, later, &fakeProgress{changed: 20, through: 45}, 0, ""},
		{"to a later replica: nobody to ask", nil, later, nil, 0, ""},
		{"to an earlier replica: no change since", later, nil, &fakeProgress{through: 45}, 0, "runtimeclasses=1"},
		{"to an earlier replica: changed since", later, nil, &fakeProgress{changed: 20, through: 45}, 504, ""},
		{"to an earlier replica: nobody to ask", later, nil, nil, 504, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var k cluster
			a := newReplicaListedAt(t, 256, tc.aListed)
			b := newReplicaListedAt(t, 256, tc.bListed)
			ws := []write{k.put(secretsGVR, secret("s", "a")), k.put(podsGVR, pod("p", "n1", "secret/s"))}
			c := a.open("n1", nil)
			step(a, c, ws...)
			for _, w := range ws {
				b.write(w)
			}
			b.views.Step()

			var progress bulk.Progress
			if tc.progress != nil {
				progress = tc.progress
			}
			c.sink = recordingSink{}
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			ctx = request.WithUser(ctx, &user.DefaultInfo{Name: "system:node:n1", Groups: []string{"system:nodes"}})
			run, st := NewHandler(b.views, progress).Open(ctx, selector("metadata.name=n1", c.pos), &c.sink)
			if st == nil {
				run()
				b.views.Step()
				st = c.sink.closed
			}
			if got := codeOf(st); got != tc.want {
				t.Fatalf("got %d %v, want %d", got, st, tc.want)
			}
			if tc.want != 0 {
				return
			}
			if tc.wantRuntimeRV == "" {
				lines := c.read()
				if len(lines) == 0 || lines[len(lines)-1] != "BOOKMARK initial-events-end" {
					t.Fatalf("the resume: %v, want the view afresh, ending with the initial state's bookmark", lines)
				}
				check(t, b, c, "after the view afresh")
				return
			}
			expect(t, "the resume", c.read(), "BOOKMARK")
			if !strings.Contains(c.pos, tc.wantRuntimeRV+",") {
				t.Errorf("position %s: want %s, B's version", c.pos, tc.wantRuntimeRV)
			}
			k.rv = 50 // etcd moved on meanwhile
			expect(t, "a runtime class created on B", step(b, c, k.put(rcGVR, &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: "runc"}, Handler: "runc"})),
				"ADDED RuntimeClass runc", "BOOKMARK")
			check(t, b, c, "after the resume")
			if tc.progress.asked != 1 {
				t.Errorf("kube-apiserver asked %d times, want once", tc.progress.asked)
			}
		})
	}
}
