package cache

import (
	"testing"
	"unsafe"

	"k8s.io/apimachinery/pkg/labels"
)

// TestLabelsSelectAsTheirMap: every selector selects the interned labels
// exactly when it selects their map.
func TestLabelsSelectAsTheirMap(t *testing.T) {
	sets := []map[string]string{
		nil,
		{},
		{"app": "web"},
		{"app": "web", "pod-template-hash": "7d9c8b6f5", "tier": ""},
		{"app.kubernetes.io/name": "web", "b": "x", "a": "y"},
	}
	selectors := []string{"", "app", "!app", "app=web", "app!=web", "app in (web, db)", "app notin (web)",
		"tier=", "tier", "a=y,b=x", "a=y,b=z", "app.kubernetes.io/name=web", "zzz", "!zzz", "0"}
	for _, m := range sets {
		l := internLabels(m)
		for _, s := range selectors {
			sel, err := labels.Parse(s)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := sel.Matches(l), sel.Matches(labels.Set(m)); got != want {
				t.Errorf("%q on %v: %v, its map %v", s, m, got, want)
			}
		}
		if got := l.Map(); len(got) != len(m) || !labels.Equals(got, m) {
			t.Errorf("%v reads back as %v", m, got)
		}
	}
}

// TestEqualLabelsAreOneString: objects with equal labels share one copy.
func TestEqualLabelsAreOneString(t *testing.T) {
	a := internLabels(map[string]string{"app": "web", "pod-template-hash": "7d9c8b6f5"})
	b := internLabels(map[string]string{"pod-template-hash": "7d9c8b6f5", "app": "web"})
	if a != b || unsafe.StringData(a.h.Value()) != unsafe.StringData(b.h.Value()) {
		t.Errorf("equal labels are two copies")
	}
	if a == internLabels(map[string]string{"app": "web"}) {
		t.Errorf("other labels are the same")
	}
}
