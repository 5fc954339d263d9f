package bench

import (
	"testing"
	"time"

	"github.com/google/pprof/profile"
)

// TestCPUByPartTakesTheFirstPartOnTheStack sums a hand-made CPU profile:
// a sample goes to the first part (in the parts' order) any function of
// its stack matches, whichever frame it is; the rest is "other".
func TestCPUByPartTakesTheFirstPartOnTheStack(t *testing.T) {
	fns := map[string]*profile.Function{}
	loc := func(names ...string) []*profile.Location {
		var out []*profile.Location
		for _, n := range names {
			f := fns[n]
			if f == nil {
				f = &profile.Function{ID: uint64(len(fns) + 1), Name: n}
				fns[n] = f
			}
			out = append(out, &profile.Location{ID: uint64(len(fns)), Line: []profile.Line{{Function: f}}})
		}
		return out
	}
	ms := func(n int64) []int64 { return []int64{n, n * int64(time.Millisecond)} }
	p := &profile.Profile{
		SampleType: []*profile.ValueType{{Type: "samples", Unit: "count"}, {Type: "cpu", Unit: "nanoseconds"}},
		Sample: []*profile.Sample{
			// A watch's encoding under its handler: delivery, though the
			// leaf is the encoder.
			{Location: loc("k8s.io/apimachinery/pkg/runtime/serializer/protobuf.(*Serializer).Encode",
				"k8s.io/apiserver/pkg/endpoints/handlers.(*WatchServer).HandleHTTP"), Value: ms(30)},
			// The cacher's dispatch, and a collection inside it (first
			// part wins over garbage collection, later in the order).
			{Location: loc("k8s.io/apiserver/pkg/storage/cacher.(*Cacher).dispatchEvents"), Value: ms(10)},
			{Location: loc("runtime.gcBgMarkWorker", "k8s.io/apiserver/pkg/storage/cacher.(*cacheWatcher).process"), Value: ms(5)},
			{Location: loc("runtime.gcBgMarkWorker"), Value: ms(20)},
			{Location: loc("k8s.io/apiserver/pkg/endpoints/handlers.PatchResource.func1"), Value: ms(40)},
		},
	}
	got := cpuByPart(p, apiCPUParts)
	want := map[string]time.Duration{
		"total":              105 * time.Millisecond,
		watchDelivery.name:   45 * time.Millisecond,
		"garbage collection": 20 * time.Millisecond,
		"other":              40 * time.Millisecond,
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %s, want %s", k, got[k], v)
		}
	}
	if len(got) != len(want) {
		t.Errorf("parts %v, want only %v", got, want)
	}
}
