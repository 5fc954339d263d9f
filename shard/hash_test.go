package shard

import (
	"strconv"
	"testing"

	"k8s.io/apimachinery/pkg/sharding"
)

// The hash is kube-apiserver's, so that a range is what a KEP-5866 shard
// selector on the node name would select.
func TestHashIsKubeAPIServersHashField(t *testing.T) {
	for _, name := range []string{"", "node-1", "ip-10-0-12-7.ec2.internal", "gke-pool-a-3f9c"} {
		if got, want := strconv.FormatUint(Hash(name), 16), sharding.HashField(name); leftPad(got) != want {
			t.Errorf("Hash(%q) = %s, HashField = %s", name, leftPad(got), want)
		}
		if Hash(name) != HashBytes([]byte(name)) {
			t.Errorf("HashBytes(%q) differs from Hash", name)
		}
	}
}

func leftPad(hex string) string {
	for len(hex) < 16 {
		hex = "0" + hex
	}
	return hex
}

// Names that differ only in their last characters (a pool's numbered
// nodes) spread over the ranges: FNV-1a alone would put them in a few.
func TestNumberedNodesSpreadOverTheRanges(t *testing.T) {
	seen := map[int]int{}
	for i := range 1000 {
		seen[Range("hollow-node-"+strconv.Itoa(i))]++
	}
	// 1,000 names thrown at random into 4,096 ranges fill
	// 4096*(1-e^(-1000/4096)), about 884 of them.
	if len(seen) < 850 {
		t.Errorf("1,000 numbered nodes fall in %d of %d ranges, not about 884", len(seen), Ranges)
	}
	raw := map[uint64]bool{}
	for i := range 1000 {
		raw[Hash("hollow-node-"+strconv.Itoa(i))>>rangeShift] = true
	}
	t.Logf("1,000 numbered nodes: %d ranges mixed, %d by FNV-1a's own top bits", len(seen), len(raw))
}

func BenchmarkHash(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		_ = Range("ip-10-0-12-7.ec2.internal")
	}
}
