package cache

import (
	"slices"
	"strings"
	"unique"

	"k8s.io/apimachinery/pkg/labels"
)

// Labels are an object's labels as the cache's index keeps them: one
// interned string of the sorted pairs, so that objects with the same
// labels (the pods of a ReplicaSet, every version of one object) share
// one copy, and an object pays 8 bytes for them where a map of three
// labels costs about 450 (docs/benchmarks.md, "The hub's heap per cached
// object"). The string goes once no object holds it (package unique).
// Label selectors read it as labels.Labels, without a map.
//
// Keys and values cannot hold a NUL (kube-apiserver validates both), so
// NUL separates them.
type Labels struct {
	h unique.Handle[string] // zero: no labels
}

var _ labels.Labels = Labels{}

// internLabels is m interned.
func internLabels(m map[string]string) Labels {
	if len(m) == 0 {
		return Labels{}
	}
	keys := make([]string, 0, len(m))
	n := 0
	for k, v := range m {
		keys = append(keys, k)
		n += len(k) + len(v) + 2
	}
	slices.Sort(keys)
	var b strings.Builder
	b.Grow(n)
	for _, k := range keys {
		b.WriteString(k)
		b.WriteByte(0)
		b.WriteString(m[k])
		b.WriteByte(0)
	}
	return Labels{unique.Make(b.String())}
}

// Lookup is the value of key, and whether the object has it.
func (l Labels) Lookup(key string) (string, bool) {
	if l == (Labels{}) {
		return "", false
	}
	for s := l.h.Value(); s != ""; {
		k, rest, _ := strings.Cut(s, "\x00")
		v, rest, _ := strings.Cut(rest, "\x00")
		if k == key {
			return v, true
		}
		if k > key {
			return "", false // sorted
		}
		s = rest
	}
	return "", false
}

// Has says whether the object has label key.
func (l Labels) Has(key string) bool {
	_, ok := l.Lookup(key)
	return ok
}

// Get is the value of label key, "" if the object has none.
func (l Labels) Get(key string) string {
	v, _ := l.Lookup(key)
	return v
}

// Map is a new map of the labels; nil for none.
func (l Labels) Map() map[string]string {
	if l == (Labels{}) {
		return nil
	}
	m := map[string]string{}
	for s := l.h.Value(); s != ""; {
		k, rest, _ := strings.Cut(s, "\x00")
		v, rest, _ := strings.Cut(rest, "\x00")
		m[k] = v
		s = rest
	}
	return m
}
