package graph

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/component-base/metrics/testutil"
)

// step is one write to a multiReach in the tables below: paths paths from
// the object to node id.
type step struct {
	id    uint32
	paths int32
}

func joins(ids ...uint32) []step {
	out := make([]step, len(ids))
	for i, id := range ids {
		out[i] = step{id, 1}
	}
	return out
}

func leaves(ids ...uint32) []step {
	out := make([]step, len(ids))
	for i, id := range ids {
		out[i] = step{id, 0}
	}
	return out
}

func span(from, to uint32) []uint32 {
	var out []uint32
	for id := from; id < to; id++ {
		out = append(out, id)
	}
	return out
}

// newMultiReach starts a set as Graph.setPathsLocked does when a second
// node reaches an object.
func newMultiReach(a, b uint32) *multiReach {
	return newMultiReachLocked(nil, a, b, 1, 1)
}

// checkSet fails t unless m holds exactly want (paths by id), keeps its
// member count, and costs what it holds: the sorted form 4 bytes a member,
// the bitmap no more words than members.
func checkSet(t *testing.T, m *multiReach, want map[uint32]int32) {
	t.Helper()
	s := m.set.Load()
	if int(m.n) != len(want) {
		t.Fatalf("n = %d, want %d", m.n, len(want))
	}
	var got []uint32
	m.eachLocked(func(id uint32, paths int32) {
		got = append(got, id)
		if paths != want[id] {
			t.Errorf("paths to %d = %d, want %d", id, paths, want[id])
		}
	})
	if !slices.IsSorted(got) || len(got) != len(want) {
		t.Fatalf("members %v, not the %d wanted in order", got, len(want))
	}
	top := uint32(0)
	for id := range want {
		top = max(top, id)
	}
	for id := range top + 130 {
		if s.has(id) != (want[id] > 0) {
			t.Fatalf("has(%d) = %v, want %v", id, s.has(id), want[id] > 0)
		}
		if p := m.pathsLocked(id); p != want[id] {
			t.Fatalf("pathsLocked(%d) = %d, want %d", id, p, want[id])
		}
	}
	var added, removed []uint32
	if s.changes != nil && len(s.changes) == 0 {
		t.Fatal("changes published empty")
	}
	for _, c := range s.changes {
		if id := uint32(c >> 1); c&1 == 0 {
			added = append(added, id)
		} else {
			removed = append(removed, id)
		}
	}
	changes := len(s.changes)
	switch {
	case s.bits != nil && (s.ids != nil || s.changes != nil):
		t.Fatal("both forms at once")
	case s.bits != nil && len(s.bits) > int(m.n):
		t.Fatalf("bitmap of %d words for %d members", len(s.bits), m.n)
	case s.bits == nil && len(s.ids)+len(added)-len(removed) != int(m.n):
		t.Fatalf("sorted form of %d ids, %d added and %d removed for %d members", len(s.ids), len(added), len(removed), m.n)
	case s.bits == nil && changes*changes > 2*len(s.ids):
		t.Fatalf("%d changes kept beside %d sorted ids", changes, len(s.ids))
	case !slices.IsSorted(s.changes):
		t.Fatalf("changes not sorted: %v", s.changes)
	}
	for _, id := range removed {
		if !slices.Contains(s.ids, id) {
			t.Fatalf("%d removed but not in the sorted ids", id)
		}
	}
	for _, id := range added {
		if slices.Contains(s.ids, id) {
			t.Fatalf("%d added but already in the sorted ids", id)
		}
	}
	extra := 0
	for _, p := range want {
		if p > 1 {
			extra++
		}
	}
	if len(m.extra) != extra || (extra == 0 && m.extra != nil) {
		t.Fatalf("extra counts %v for %d members with more than one path", m.extra, extra)
	}
}

func TestSharedSetTakesTheSmallerForm(t *testing.T) {
	for _, tc := range []struct {
		name       string
		first      [2]uint32
		steps      []step
		wantBitmap bool
	}{
		{"two nodes far apart stay sorted", [2]uint32{49_999, 99_999}, nil, false},
		{"ten nodes among 100,000 ids stay sorted", [2]uint32{0, 99_999}, joins(span(1, 9)...), false},
		{"three nodes within 64 ids are one bitmap word", [2]uint32{0, 1}, joins(2), true},
		{"nodes joining in id order keep one bitmap", [2]uint32{0, 1}, joins(span(2, 1_000)...), true},
		{"a far node joining a small bitmap makes it sorted", [2]uint32{0, 1}, joins(2, 3, 4, 99_999), false},
		{"a bitmap left by most of its nodes becomes sorted", [2]uint32{0, 1},
			append(joins(span(2, 640)...), leaves(span(5, 640)...)...), false},
		{"a sorted set that grows dense becomes a bitmap", [2]uint32{1_000, 2_000},
			joins(span(0, 300)...), true},
		{"counts beyond one path are kept and dropped", [2]uint32{3, 900},
			[]step{{3, 4}, {900, 2}, {3, 1}, {77, 3}, {900, 1}}, false},
		{"a member leaving with several paths drops its count", [2]uint32{0, 1},
			append(joins(span(2, 100)...), step{50, 5}, step{50, 0}), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newMultiReach(tc.first[0], tc.first[1])
			want := map[uint32]int32{tc.first[0]: 1, tc.first[1]: 1}
			checkSet(t, m, want)
			for _, st := range tc.steps {
				m.setPathsLocked(st.id, st.paths)
				if st.paths > 0 {
					want[st.id] = st.paths
				} else {
					delete(want, st.id)
				}
				checkSet(t, m, want)
			}
			if got := m.set.Load().bits != nil; got != tc.wantBitmap {
				t.Fatalf("bitmap form = %v, want %v", got, tc.wantBitmap)
			}
		})
	}
}

// TestSharedSetAgreesWithAMap drives sets through random writes over id
// spaces of several sizes, so that they cross between forms in every
// direction, and checks them against a map after each write.
func TestSharedSetAgreesWithAMap(t *testing.T) {
	for _, ids := range []uint32{256, 1_000, 100_000} {
		t.Run(fmt.Sprintf("ids=%d", ids), func(t *testing.T) {
			r := rand.New(rand.NewPCG(uint64(ids), 37))
			m := newMultiReach(0, ids-1)
			want := map[uint32]int32{0: 1, ids - 1: 1}
			forms := map[string]int{}
			for i := range 3_000 {
				// Phases of joining and leaving, so the set both fills and
				// empties; a set of one is what the graph turns back into
				// a one-node entry, so it is not written below two.
				id := r.Uint32N(ids)
				paths := int32(0)
				if (i/500)%2 == 0 || r.IntN(4) == 0 {
					paths = 1 + r.Int32N(3)
				}
				if paths == 0 && want[id] > 0 && len(want) <= 2 {
					continue
				}
				m.setPathsLocked(id, paths)
				if paths > 0 {
					want[id] = paths
				} else {
					delete(want, id)
				}
				if i%50 == 0 || ids == 256 {
					checkSet(t, m, want)
				}
				switch s := m.set.Load(); {
				case s.bits != nil:
					forms["bitmap"]++
				case s.changes != nil:
					forms["sorted with changes"]++
				default:
					forms["sorted"]++
				}
			}
			checkSet(t, m, want)
			if forms["sorted with changes"] == 0 || (ids < 100_000 && forms["bitmap"] == 0) {
				t.Fatalf("the writes did not go through every form: %v", forms)
			}
		})
	}
}

func TestSharedSetMetricsFollowTheForms(t *testing.T) {
	RegisterMetrics()
	gauge := func(form string) float64 {
		var v float64
		var err error
		if form == "" {
			v, err = testutil.GetGaugeMetricValue(sharedNodes)
		} else {
			v, err = testutil.GetGaugeMetricValue(sharedObjects.WithLabelValues(form))
		}
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	sorted0, bitmap0, nodes0 := gauge("sorted"), gauge("bitmap"), gauge("")
	want := func(stage string, sorted, bitmap, nodes float64) {
		t.Helper()
		if s, b, n := gauge("sorted")-sorted0, gauge("bitmap")-bitmap0, gauge("")-nodes0; s != sorted || b != bitmap || n != nodes {
			t.Fatalf("%s: shared objects sorted %+v, bitmap %+v, their nodes %+v; want %+v, %+v, %+v", stage, s, b, n, sorted, bitmap, nodes)
		}
	}
	g := New()
	pod := func(name string, node int, secret string) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name},
			Spec:       corev1.PodSpec{NodeName: fmt.Sprintf("n%d", node), Volumes: []corev1.Volume{secretVolume(secret)}},
		}
	}
	for i := range 256 { // node ids 0..255, each with a secret of its own
		g.AddPod(pod(fmt.Sprintf("own%d", i), i, fmt.Sprintf("own%d", i)))
	}
	want("nodes with a secret each", 0, 0, 0)
	g.AddPod(pod("a", 0, "shared"))
	g.AddPod(pod("b", 255, "shared"))
	want("two nodes far apart", 1, 0, 2)
	for i := 1; i <= 20; i++ {
		g.AddPod(pod(fmt.Sprintf("fill%d", i), i, "shared"))
	}
	want("22 nodes among 256 ids", 0, 1, 22)
	for i := 1; i <= 20; i++ {
		g.DeletePod("ns", fmt.Sprintf("fill%d", i))
	}
	want("two nodes again", 1, 0, 2)
	g.DeletePod("ns", "b")
	want("one node", 0, 0, 0)
}
