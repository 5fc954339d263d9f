package v1alpha1

import (
	"strings"
	"testing"
)

func TestAPositionNamesTheTypesOfAVersionOfTheView(t *testing.T) {
	first, _ := NodeViewTypesOf("v1alpha1")
	second, _ := NodeViewTypesOf("v1alpha2")
	csinodes := NodeViewTypeIndex("csinodes")
	if first.Has(csinodes) || !second.Has(csinodes) || second != AllNodeViewTypes {
		t.Fatalf("v1alpha1 %b, v1alpha2 %b: csinodes only in v1alpha2, which has every type", first, second)
	}
	if _, ok := NodeViewTypesOf("v1"); ok {
		t.Error("v1 is a version of the view")
	}
	var p NodeViewPosition
	for i := range p.At {
		p.Since[i], p.At[i] = uint64(10+i), uint64(20+i)
	}
	for _, types := range []NodeViewTypeSet{first, second} {
		p.Types = types
		s := p.String()
		if strings.Contains(s, "csinodes") != types.Has(csinodes) {
			t.Errorf("%b: %s", types, s)
		}
		got, err := ParseNodeViewPosition(s)
		if err != nil || got.Types != types {
			t.Fatalf("parse %s: %b, %v; want %b", s, got.Types, err, types)
		}
		for i := range p.At {
			if types.Has(i) && (got.At[i] != p.At[i] || got.Since[i] != p.Since[i]) {
				t.Errorf("parse %s: %s at %d-%d", s, NodeViewTypes[i].Resource, got.Since[i], got.At[i])
			}
		}
	}
	for s, want := range map[string]string{
		"secrets=1":                   "lacks configmaps",
		"secrets=1,secrets=2":         "twice",
		"leases=1":                    "not a type of the node view",
		strings.Repeat("x", 3):        "not resource=resourceVersion",
		"secrets=2-1,configmaps=1":    "after its resourceVersion",
		"csinodes=1,pods=1,secrets=1": "lacks configmaps",
	} {
		if _, err := ParseNodeViewPosition(s); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("parse %q: %v; want an error saying %q", s, err, want)
		}
	}
}
