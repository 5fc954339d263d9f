package hub_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/nodeproxy/nodeproxy/hub"
)

// TestRelistExpiresWatchesOnlyWhenAsked: channels carry on across a relist
// unless the operator asks for kube-apiserver's contract (every version, or
// 410), which the flag sets on the cache (its effect: cache/testdata/
// relist-restart-log).
func TestRelistExpiresWatchesOnlyWhenAsked(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want bool
	}{
		{nil, false},
		{[]string{"--cache-relist-expires-watches"}, true},
		{[]string{"--cache-relist-expires-watches=false"}, false},
	} {
		o := parseFlags(t, tc.args)
		if o.Cache.RestartLogOnRelist != tc.want {
			t.Errorf("%v: RestartLogOnRelist = %v, want %v", tc.args, o.Cache.RestartLogOnRelist, tc.want)
		}
	}
}

// TestNodeViewVersionsAreTheViewsOwn: --node-view-versions pins the
// versions of the node view a replica serves (empty: every one), and
// refuses a version the view does not have.
func TestNodeViewVersionsAreTheViewsOwn(t *testing.T) {
	for _, tc := range []struct {
		args  []string
		want  []string
		valid bool
	}{
		{nil, nil, true},
		{[]string{"--node-view-versions=v1alpha1"}, []string{"v1alpha1"}, true},
		{[]string{"--node-view-versions=v1alpha1,v1alpha2"}, []string{"v1alpha1", "v1alpha2"}, true},
		{[]string{"--node-view-versions=v1"}, []string{"v1"}, false},
	} {
		o := parseFlags(t, tc.args)
		if !slices.Equal(o.NodeViewVersions, tc.want) {
			t.Errorf("%v: NodeViewVersions = %v, want %v", tc.args, o.NodeViewVersions, tc.want)
		}
		err := o.Validate()
		if got := err == nil || !strings.Contains(err.Error(), "--node-view-versions"); got != tc.valid {
			t.Errorf("%v: valid %v, want %v (%v)", tc.args, got, tc.valid, err)
		}
	}
}

// parseFlags is the options `nodeproxy serve` args makes.
func parseFlags(t *testing.T, args []string) *hub.Options {
	t.Helper()
	o := hub.NewOptions()
	fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
	for _, f := range o.Flags().FlagSets {
		fs.AddFlagSet(f)
	}
	if err := fs.Parse(args); err != nil {
		t.Fatalf("%v: %v", args, err)
	}
	return o
}
