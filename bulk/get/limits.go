package get

// Limits bound what one bulk get request may cost the hub.
type Limits struct {
	// MaxAnswerBytes bounds the results of one request, in bytes of JSON.
	// A larger answer is refused with 413 before anything is written.
	// Streamed, an answer costs the hub a reference per item beyond the
	// cache, so the bound is on what it costs to write: the hub's CPU and
	// the link, not its memory.
	MaxAnswerBytes int64
	// MaxInFlightPerUser bounds the bulk gets one identity may have in
	// flight; beyond it a request gets 429 with Retry-After.
	MaxInFlightPerUser int
}

// DefaultLimits returns the defaults.
func DefaultLimits() Limits {
	return Limits{
		// 64 MiB: 160 times what a kubelet with 110 pods reads at start
		// (100 objects of 1-4 KiB, about 400 KiB), and 64 of the largest
		// object etcd stores. Streamed, an answer costs no memory per byte;
		// what is left is writing it, a few seconds of one connection at
		// the rate measured through kube-apiserver's aggregator
		// (docs/benchmarks.md, "What one answer costs the hub").
		MaxAnswerBytes: 64 << 20,
		// 16: the node endpoint turns each kubelet GET into a bulk get,
		// and a kubelet starting pods issues them in bursts (client-go's
		// default burst is 10 per client); a named bulk get is answered in
		// well under a millisecond (docs/benchmarks.md, "A kubelet's bulk
		// get"), so 16 in flight is never the limit of a kubelet, only of a
		// caller that holds requests open.
		MaxInFlightPerUser: 16,
	}
}
