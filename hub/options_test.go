package hub_test

import (
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
		o := hub.NewOptions()
		fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
		for _, f := range o.Flags().FlagSets {
			fs.AddFlagSet(f)
		}
		if err := fs.Parse(tc.args); err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		if o.Cache.RestartLogOnRelist != tc.want {
			t.Errorf("%v: RestartLogOnRelist = %v, want %v", tc.args, o.Cache.RestartLogOnRelist, tc.want)
		}
	}
}
