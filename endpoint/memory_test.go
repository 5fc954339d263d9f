package endpoint_test

import (
	"math"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/nodeproxy/nodeproxy/endpoint"
)

// validOptions are options that pass Validate but for what a case sets.
func validOptions() *endpoint.Options {
	o := endpoint.NewOptions()
	o.NodeName, o.HubURL = "node-a", ""
	return o
}

func TestMemoryFlags(t *testing.T) {
	for _, tc := range []struct {
		name      string
		gcPercent int
		limit     string
		want      endpoint.Memory
		wantErr   string
	}{
		{name: "the defaults", gcPercent: endpoint.DefaultGCPercent, limit: "0", want: endpoint.Memory{GCPercent: endpoint.DefaultGCPercent}},
		{name: "a limit", gcPercent: 100, limit: "230Mi", want: endpoint.Memory{GCPercent: 100, Limit: 230 << 20}},
		{name: "the collector off under a limit", gcPercent: -1, limit: "64Mi", want: endpoint.Memory{GCPercent: -1, Limit: 64 << 20}},
		{name: "a decimal limit", gcPercent: 50, limit: "100M", want: endpoint.Memory{GCPercent: 50, Limit: 100_000_000}},
		{name: "the collector off without a limit", gcPercent: -1, limit: "0", wantErr: "--gc-percent=-1 turns the collector off until the soft memory limit: it needs --memory-limit"},
		{name: "a percentage too low", gcPercent: 5, limit: "0", wantErr: "--gc-percent must be -1 (off) or at least 10, got 5"},
		{name: "a negative percentage", gcPercent: -2, limit: "0", wantErr: "--gc-percent must be -1 (off) or at least 10, got -2"},
		{name: "a limit that does not parse", gcPercent: 50, limit: "lots", wantErr: `--memory-limit "lots": quantities must match`},
		{name: "a negative limit", gcPercent: 50, limit: "-64Mi", wantErr: `--memory-limit must be a non-negative number of bytes, got "-64Mi"`},
		{name: "a limit the endpoint reaches at once", gcPercent: 50, limit: "16Mi", wantErr: "--memory-limit must be 0 (none) or at least 32Mi, got 16Mi"},
		{name: "the collector off and a bad limit", gcPercent: -1, limit: "lots", wantErr: `--memory-limit "lots"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := validOptions()
			o.GCPercent, o.MemoryLimit = tc.gcPercent, tc.limit
			err := o.Validate()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Validate: %v, want an error with %q", err, tc.wantErr)
				}
				if strings.Count(err.Error(), "--") != strings.Count(tc.wantErr, "--") {
					t.Errorf("Validate: %v: more than the one problem", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Validate: %v", err)
			}
			if got := o.Memory(); got != tc.want {
				t.Errorf("Memory() = %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestMemoryApply sets the runtime from the flags, and leaves it to the
// environment's GOGC and GOMEMLIMIT when they are set.
func TestMemoryApply(t *testing.T) {
	gc0, limit0 := debug.SetGCPercent(100), debug.SetMemoryLimit(math.MaxInt64)
	t.Cleanup(func() { debug.SetGCPercent(gc0); debug.SetMemoryLimit(limit0) })
	env := map[string]string{}
	getenv := func(k string) string { return env[k] }

	got := endpoint.Memory{GCPercent: 40, Limit: 64 << 20}.Apply(getenv)
	if gc := debug.SetGCPercent(100); gc != 40 {
		t.Errorf("GOGC %d, want the flag's 40", gc)
	}
	if limit := debug.SetMemoryLimit(math.MaxInt64); limit != 64<<20 {
		t.Errorf("memory limit %d, want the flag's %d", limit, 64<<20)
	}
	if want := []any{"gcPercent", "40", "memoryLimit", "64Mi"}; !equalPairs(got, want) {
		t.Errorf("Apply said %v, want %v", got, want)
	}

	env["GOGC"], env["GOMEMLIMIT"] = "200", "1GiB"
	got = endpoint.Memory{GCPercent: 40, Limit: 64 << 20}.Apply(getenv)
	if gc := debug.SetGCPercent(100); gc != 100 {
		t.Errorf("GOGC %d with GOGC in the environment: the flag was applied", gc)
	}
	if limit := debug.SetMemoryLimit(math.MaxInt64); limit != math.MaxInt64 {
		t.Errorf("memory limit %d with GOMEMLIMIT in the environment: the flag was applied", limit)
	}
	if want := []any{"gcPercent", "GOGC from the environment (200)", "memoryLimit", "GOMEMLIMIT from the environment (1GiB)"}; !equalPairs(got, want) {
		t.Errorf("Apply said %v, want %v", got, want)
	}

	delete(env, "GOMEMLIMIT")
	got = endpoint.Memory{GCPercent: 40}.Apply(getenv)
	if limit := debug.SetMemoryLimit(math.MaxInt64); limit != math.MaxInt64 {
		t.Errorf("memory limit %d, want none", limit)
	}
	if want := []any{"gcPercent", "GOGC from the environment (200)", "memoryLimit", "none"}; !equalPairs(got, want) {
		t.Errorf("Apply said %v, want %v", got, want)
	}
}

func equalPairs(a, b []any) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
