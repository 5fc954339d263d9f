// Package liveheap reads how much of the heap is live, for the
// benchmarks that measure what an object, a view or a connection costs:
// the difference of two readings, over as many of them as were made in
// between.
package liveheap

import (
	"runtime"
	"runtime/metrics"
)

// Bytes forces a collection and returns what it found live:
// runtime/metrics' /gc/heap/live:bytes, the quantity a running hub
// exports as go_gc_heap_live_bytes, so that a benchmark in process and
// a reading of the hub from outside measure the same thing. Two
// collections, so that what the first left for finalizers or freed
// late (a sync.Pool's victim cache) is gone too.
func Bytes() uint64 {
	runtime.GC()
	runtime.GC()
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}
