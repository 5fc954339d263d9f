package passthrough

import (
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clocktesting "k8s.io/utils/clock/testing"
)

// fakeDiscovery serves lists by group/version and counts requests.
type fakeDiscovery struct {
	lists map[string]*metav1.APIResourceList
	calls int
}

func (f *fakeDiscovery) ServerResourcesForGroupVersion(gv string) (*metav1.APIResourceList, error) {
	f.calls++
	if l, ok := f.lists[gv]; ok {
		return l, nil
	}
	return nil, apierrors.NewNotFound(schema.GroupResource{}, gv)
}

// TestResolverFindsTypesCreatedAfterStartAndBoundsDiscovery: a miss asks
// discovery again only once MinRefreshInterval has passed, then finds a
// type that appeared meanwhile; subresources are never types.
func TestResolverFindsTypesCreatedAfterStartAndBoundsDiscovery(t *testing.T) {
	d := &fakeDiscovery{lists: map[string]*metav1.APIResourceList{
		"apps/v1": {APIResources: []metav1.APIResource{
			{Name: "deployments", Kind: "Deployment", Namespaced: true, Verbs: []string{"list", "watch"}},
			{Name: "deployments/status", Kind: "Deployment", Namespaced: true, Verbs: []string{"get"}},
		}},
	}}
	clock := clocktesting.NewFakePassiveClock(time.Unix(0, 0))
	r := NewResolver(d)
	r.clock = clock
	widgets := schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}

	steps := []struct {
		name      string
		gvr       schema.GroupVersionResource
		advance   time.Duration
		add       bool // the CRD appears before this step
		found     bool
		callsThen int
	}{
		{"a built-in type", schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}, 0, false, true, 1},
		{"again: cached", schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}, 0, false, true, 1},
		{"a subresource", schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments/status"}, 0, false, false, 1},
		{"an unknown group", widgets, 0, false, false, 2},
		{"created, but asked within the interval", widgets, MinRefreshInterval / 2, true, false, 2},
		{"asked after the interval", widgets, MinRefreshInterval, false, true, 3},
		{"an unknown resource of a known group", schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "nope"}, 0, false, false, 4},
		{"again, within the interval", schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "nope"}, 0, false, false, 4},
	}
	for _, s := range steps {
		clock.SetTime(clock.Now().Add(s.advance))
		if s.add {
			d.lists["example.com/v1"] = &metav1.APIResourceList{APIResources: []metav1.APIResource{{Name: "widgets", Kind: "Widget", Namespaced: true, Verbs: []string{"list"}}}}
		}
		typ, found, err := r.Resolve(s.gvr)
		if err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if found != s.found || d.calls != s.callsThen {
			t.Errorf("%s: found %v after %d discovery calls, want %v after %d", s.name, found, d.calls, s.found, s.callsThen)
		}
		if found && (typ.Kind == "" || !typ.Supports("list")) {
			t.Errorf("%s: type %+v", s.name, typ)
		}
	}
}
