package shard

// Ranges is how many ranges the hash space is cut into: enough that
// rendezvous over them gives each replica its share within a few percent
// (NewTable), and few enough that a range, the unit that moves when a
// replica comes or goes, holds whole nodes (about 25 at 100,000).
const Ranges = 4096

// rangeShift keeps a mixed hash's top 12 bits.
const rangeShift = 64 - 12

// FNV-1a 64's parameters (hash/fnv's), inlined so that hashing a name
// allocates nothing: every pod event a replica reads is hashed.
const (
	fnvOffset64 = 14695981039346656037
	fnvPrime64  = 1099511628211
)

// Hash is the FNV-1a 64 hash of a node name: kube-apiserver's HashField
// (k8s.io/apimachinery/pkg/sharding) as a number.
func Hash(node string) uint64 {
	h := uint64(fnvOffset64)
	for i := 0; i < len(node); i++ {
		h ^= uint64(node[i])
		h *= fnvPrime64
	}
	return h
}

// HashBytes is Hash of a name still in the bytes it was read from.
func HashBytes(node []byte) uint64 {
	h := uint64(fnvOffset64)
	for _, b := range node {
		h ^= uint64(b)
		h *= fnvPrime64
	}
	return h
}

// Range is the range a node's name falls in.
func Range(node string) int { return RangeOfHash(Hash(node)) }

// RangeOfHash is the range a node name's Hash falls in: the top bits of
// the hash once mixed (splitmix64's finalizer). Why mixed: FNV-1a's last
// bytes reach its top bits only through carries, so names that differ in
// their last characters (hollow-node-1 to hollow-node-999, a pool's
// node-17 and node-18) share their top bits, and contiguous ranges of
// the raw hash would put most of a pool on one replica. Mixed, they
// spread; the cost is that a range is no longer a contiguous slice of
// HashField's space, which a KEP-5866 selector could name (see Bounds).
func RangeOfHash(h uint64) int { return int(mix(h) >> rangeShift) }

// mix is splitmix64's finalizer: every input bit reaches every output
// bit.
func mix(z uint64) uint64 {
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}
