package cache

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/nodeproxy/nodeproxy/shard"
)

// fakeAPIServer is pods at versions, written by one writer that hands
// each change to the store as a reflector would, in order, and listed
// consistently: what Hold needs of kube-apiserver, for a test of the
// store's logic under concurrency (the real one: hold_e2e_test.go).
type fakeAPIServer struct {
	mu   sync.Mutex
	rv   uint64
	pods map[string]*corev1.Pod
}

func (f *fakeAPIServer) write(t *testing.T, s *Store, rnd *rand.Rand, nodes []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rv++
	name := fmt.Sprintf("p%d", rnd.IntN(80))
	p, exists := f.pods[name]
	switch {
	case exists && rnd.IntN(3) == 0:
		delete(f.pods, name)
		must(t, s.Delete(shardPod(name, p.Spec.NodeName, f.rv)))
	case exists:
		p = shardPod(name, p.Spec.NodeName, f.rv)
		f.pods[name] = p
		must(t, s.Update(p.DeepCopy()))
	default:
		p = shardPod(name, nodes[rnd.IntN(len(nodes))], f.rv)
		f.pods[name] = p
		must(t, s.Add(p.DeepCopy()))
	}
	s.UpdateResourceVersion(fmt.Sprint(f.rv))
}

func (f *fakeAPIServer) list(_ context.Context, _ *Store, keep func(*Object) bool) ([]*Object, uint64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []*Object
	for _, p := range f.pods {
		o, err := newObject(p.DeepCopy())
		if err != nil {
			return nil, 0, err
		}
		if keep(o) {
			out = append(out, o)
		}
	}
	return out, f.rv, nil
}

// TestHoldWhileTheReflectorWrites changes the held ranges over and over
// while pods on a dozen nodes churn, and checks that the store ends
// holding exactly the pods of the nodes held, and that a reader of a
// node held throughout follows it through the log. Run with -race.
func TestHoldWhileTheReflectorWrites(t *testing.T) {
	nodes := nodesInDistinctRanges(12)
	always := nodes[0]
	c, s, _ := shardedPods(t, shard.NodesSet(nodes[:4]...))
	api := &fakeAPIServer{pods: map[string]*corev1.Pod{}}
	c.list = api.list
	must(t, s.Replace(nil, "0"))
	start := s.Snapshot()

	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		rnd := rand.New(rand.NewPCG(1, 2))
		for range 4000 {
			api.write(t, s, rnd, nodes)
		}
		close(done)
	})
	rnd := rand.New(rand.NewPCG(3, 4))
	var last shard.Set
	for holds := 0; ; holds++ {
		select {
		case <-done:
		default:
			held := []string{always}
			for _, n := range nodes[1:] {
				if rnd.IntN(2) == 0 {
					held = append(held, n)
				}
			}
			last = shard.NodesSet(held...)
			must(t, c.Hold(context.Background(), last))
			continue
		}
		t.Logf("%d holds", holds)
		break
	}
	wg.Wait()

	want := map[string]uint64{}
	for name, p := range api.pods {
		if last.HasNode(p.Spec.NodeName) {
			want["default/"+name], _ = parseRV(p.ResourceVersion)
		}
	}
	if got := contents(s.Snapshot()); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("the store holds\n %v\nkube-apiserver has, of the nodes held,\n %v", got, want)
	}

	// The node held throughout: its changes since the start, replayed,
	// are its pods now.
	events, err := s.Snapshot().Changes(start.RV)
	if err != nil {
		t.Fatal(err)
	}
	followed := map[string]uint64{}
	for _, e := range events {
		if e.Object.NodeName != always {
			continue
		}
		switch e.Type {
		case watch.Deleted:
			delete(followed, e.Object.Name)
		default:
			followed[e.Object.Name] = e.Object.RV
		}
	}
	now := map[string]uint64{}
	s.Snapshot().AscendNode(always, "", "", "", func(o *Object) bool { now[o.Name] = o.RV; return true })
	if fmt.Sprint(followed) != fmt.Sprint(now) {
		t.Errorf("following %s through the log gives\n %v\nits pods are\n %v", always, followed, now)
	}
}
