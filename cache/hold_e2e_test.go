package cache

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/component-base/metrics/testutil"
	"k8s.io/utils/ptr"

	"github.com/nodeproxy/nodeproxy/shard"
	"github.com/nodeproxy/nodeproxy/test/controlplane"
)

const shardNamespace = "shard-e2e"

// churn writes pods on nodes through kube-apiserver until stop closes:
// creates (half of them unbound, then bound with a Binding, as the
// scheduler binds), label patches, and deletions.
type churn struct {
	client kubernetes.Interface
	nodes  []string
	rnd    *rand.Rand
	next   int
	pods   []string
	writes atomic.Int64
}

func (c *churn) run(t *testing.T, ctx context.Context, stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		default:
		}
		if err := c.once(ctx); err != nil {
			t.Error(err)
			return
		}
	}
}

func (c *churn) once(ctx context.Context) error {
	pods := c.client.CoreV1().Pods(shardNamespace)
	writes := c.writes.Add(1)
	switch op := c.rnd.IntN(4); {
	case op == 0 || len(c.pods) < 40:
		name := fmt.Sprintf("p%d", c.next)
		c.next++
		node := c.nodes[c.rnd.IntN(len(c.nodes))]
		unbound := c.rnd.IntN(2) == 0
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}},
		}
		if !unbound {
			p.Spec.NodeName = node
		}
		if _, err := pods.Create(ctx, p, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create pod %s: %w", name, err)
		}
		if unbound {
			b := &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: name}, Target: corev1.ObjectReference{Kind: "Node", Name: node}}
			if err := pods.Bind(ctx, b, metav1.CreateOptions{}); err != nil {
				return fmt.Errorf("bind pod %s: %w", name, err)
			}
		}
		c.pods = append(c.pods, name)
	case op == 1:
		i := c.rnd.IntN(len(c.pods))
		name := c.pods[i]
		c.pods = append(c.pods[:i], c.pods[i+1:]...)
		if err := pods.Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
			return fmt.Errorf("delete pod %s: %w", name, err)
		}
	default:
		name := c.pods[c.rnd.IntN(len(c.pods))]
		patch := fmt.Sprintf(`{"metadata":{"labels":{"write":"%d"}}}`, writes)
		if _, err := pods.Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			return fmt.Errorf("patch pod %s: %w", name, err)
		}
	}
	return nil
}

// churnFor runs c until it has made writes more, and returns.
func churnFor(t *testing.T, ctx context.Context, c *churn, writes int, during func()) {
	t.Helper()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	start := c.writes.Load()
	wg.Go(func() { c.run(t, ctx, stop) })
	if during != nil {
		during()
	}
	for c.writesSince(start) < writes && !t.Failed() {
		time.Sleep(20 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
}

func (c *churn) writesSince(start int64) int { return int(c.writes.Load() - start) }

// heldOfKubeAPIServer lists the test's pods and Nodes consistently and
// returns those of nodes in held, "pod name@rv" and "node name@rv",
// and the list's version.
func heldOfKubeAPIServer(t *testing.T, ctx context.Context, client kubernetes.Interface, held shard.Set) ([]string, uint64) {
	t.Helper()
	pods, err := client.CoreV1().Pods(shardNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, p := range pods.Items {
		if p.Spec.NodeName != "" && held.HasNode(p.Spec.NodeName) {
			out = append(out, "pod "+p.Name+"@"+p.ResourceVersion)
		}
	}
	nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes.Items {
		if strings.HasPrefix(n.Name, "shard-node-") && held.HasNode(n.Name) {
			out = append(out, "node "+n.Name+"@"+n.ResourceVersion)
		}
	}
	sort.Strings(out)
	rv, err := parseRV(nodes.ResourceVersion)
	if err != nil {
		t.Fatal(err)
	}
	return out, rv
}

// heldOfCache is what c holds of the same, once its pods have reached
// rv. (The test's Nodes never change after the cache starts, and their
// store's version moves only with bookmarks, about once a minute.)
func heldOfCache(t *testing.T, ctx context.Context, c *Cache, rv uint64) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var out []string
	for _, kind := range []string{"pods", "nodes"} {
		snap := c.Store(corev1.SchemeGroupVersion.WithResource(kind)).Snapshot()
		if kind == "pods" {
			var err error
			if snap, err = c.Store(corev1.SchemeGroupVersion.WithResource(kind)).Await(ctx, rv); err != nil {
				t.Fatalf("the cache's %s never reached %d: %v", kind, rv, err)
			}
		}
		snap.Ascend("", "", "", func(o *Object) bool {
			switch {
			case kind == "pods" && o.Namespace == shardNamespace:
				out = append(out, fmt.Sprintf("pod %s@%d", o.Name, o.RV))
			case kind == "nodes" && strings.HasPrefix(o.Name, "shard-node-"):
				out = append(out, fmt.Sprintf("node %s@%d", o.Name, o.RV))
			}
			return true
		})
	}
	sort.Strings(out)
	return out
}

func compareHeld(t *testing.T, when string, got, want []string) {
	t.Helper()
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("%s: the cache holds\n %v\nkube-apiserver has, of the held nodes,\n %v", when, got, want)
	}
}

// TestShardedCacheHoldsExactlyItsNodesOfKubeAPIServer runs a cache that
// holds a third of 30 nodes against a real kube-apiserver while their
// pods churn, then acquires another third during the churn. After each
// phase the cache holds exactly kube-apiserver's pods and Nodes of the
// nodes held; the change log has no event of an acquired node at or
// below the version its range is held since, and none of a node never
// held.
func TestShardedCacheHoldsExactlyItsNodesOfKubeAPIServer(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cp, err := controlplane.Start(ctx, controlplane.Options{Log: os.Stderr})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cp.Stop)
	client, err := kubernetes.NewForConfig(cp.AdminConfig())
	if err != nil {
		t.Fatal(err)
	}
	if err := cp.EnsureNamespace(ctx, shardNamespace); err != nil {
		t.Fatal(err)
	}
	nodes := make([]string, 30)
	for i := range nodes {
		nodes[i] = fmt.Sprintf("shard-node-%d", i)
		if _, err := client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodes[i]}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	first, second := shard.NodesSet(nodes[:10]...), shard.NodesSet(nodes[:20]...)
	acquired := second.Minus(first)

	ch := &churn{client: client, nodes: nodes, rnd: rand.New(rand.NewPCG(7, 38))}
	churnFor(t, ctx, ch, 100, nil)

	c, err := New(client, Options{LogSize: 1 << 16, EncodedEntries: 1024, Held: &first})
	if err != nil {
		t.Fatal(err)
	}
	c.Start(ctx)
	defer c.Wait()
	defer cancel()
	for len(c.Unsynced()) > 0 {
		time.Sleep(20 * time.Millisecond)
	}
	pods := c.Store(corev1.SchemeGroupVersion.WithResource("pods"))
	start := pods.Snapshot().RV

	churnFor(t, ctx, ch, 300, nil)
	want, rv := heldOfKubeAPIServer(t, ctx, client, first)
	compareHeld(t, "a third held", heldOfCache(t, ctx, c, rv), want)

	before := pods.Snapshot().RV
	churnFor(t, ctx, ch, 300, func() {
		time.Sleep(200 * time.Millisecond) // into the churn
		if err := c.Hold(ctx, second); err != nil {
			t.Error(err)
		}
	})
	want, rv = heldOfKubeAPIServer(t, ctx, client, second)
	compareHeld(t, "two thirds held, one of them acquired during the churn", heldOfCache(t, ctx, c, rv), want)

	events, err := pods.Snapshot().Changes(start)
	if err != nil {
		t.Fatal(err)
	}
	var acquiredEvents int
	for _, e := range events {
		node := e.Object.NodeName
		switch {
		case !second.HasNode(node):
			t.Errorf("%s of pod %s at %d: its node %q was never held", e.Type, e.Object.Name, e.RV, node)
		case acquired.HasNode(node) && e.RV <= pods.HeldSince(node):
			t.Errorf("%s of pod %s at %d, at or below its node's HeldSince %d", e.Type, e.Object.Name, e.RV, pods.HeldSince(node))
		case acquired.HasNode(node):
			acquiredEvents++
		}
	}
	since := pods.HeldSince(nodes[10])
	if since <= before {
		t.Errorf("HeldSince of an acquired node = %d, not after the store's version before Hold, %d", since, before)
	}
	buffered, err := testutil.GetCounterMetricValue(shardFiltered.WithLabelValues("pods", "pending"))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%.0f pod changes buffered during the acquisition", buffered)
	t.Logf("%d events since the first list, %d of acquired nodes after their HeldSince %d; %d writes", len(events), acquiredEvents, since, ch.writes.Load())
	if acquiredEvents == 0 {
		t.Error("no event of an acquired node after the acquisition: the churn did not test the log after it")
	}
}
