package endpoint

import (
	"errors"
	"fmt"
	"runtime/debug"

	"k8s.io/apimachinery/pkg/api/resource"
)

// DefaultGCPercent is --gc-percent's default. The endpoint runs on every
// node with a live heap of a few megabytes and a low allocation rate, so
// a collection is short and frequent ones cost little CPU, while each
// point of headroom is memory on every node. docs/operations.md ("The
// node endpoint's memory") has the measurements behind the value.
const DefaultGCPercent = 25

// minGCPercent is the lowest --gc-percent taken other than -1: below it
// the collector would run after every few kilobytes of growth, a cost in
// CPU out of proportion with what it saves.
const minGCPercent = 10

// minMemoryLimit is the lowest --memory-limit taken: under load the
// endpoint's own Go memory is not far below it (docs/benchmarks.md, "The
// node endpoint's footprint"), and a soft limit near that keeps the
// collector running without pause, the thrash a soft limit is meant to
// avoid.
const minMemoryLimit = 32 << 20

// Memory is how the Go runtime manages the endpoint's memory.
type Memory struct {
	// GCPercent is GOGC; -1 is off.
	GCPercent int
	// Limit is the soft memory limit in bytes; 0 is none.
	Limit int64
}

// validateMemory checks --gc-percent and --memory-limit.
func (o *Options) validateMemory() error {
	var errs []error
	limit, err := o.memoryLimit()
	if err != nil {
		errs = append(errs, err)
	} else if limit != 0 && limit < minMemoryLimit {
		errs = append(errs, fmt.Errorf("--memory-limit must be 0 (none) or at least %s, got %s: under load the endpoint's own Go memory is 15 to 20 MiB, "+
			"and a limit that close keeps the collector running", resource.NewQuantity(minMemoryLimit, resource.BinarySI), o.MemoryLimit))
	}
	switch {
	case o.GCPercent == -1:
		if err == nil && limit == 0 {
			errs = append(errs, errors.New("--gc-percent=-1 turns the collector off until the soft memory limit: it needs --memory-limit"))
		}
	case o.GCPercent < minGCPercent:
		errs = append(errs, fmt.Errorf("--gc-percent must be -1 (off) or at least %d, got %d", minGCPercent, o.GCPercent))
	}
	return errors.Join(errs...)
}

// memoryLimit is --memory-limit in bytes.
func (o *Options) memoryLimit() (int64, error) {
	q, err := resource.ParseQuantity(o.MemoryLimit)
	if err != nil {
		return 0, fmt.Errorf("--memory-limit %q: %w", o.MemoryLimit, err)
	}
	limit, ok := q.AsInt64()
	if !ok || limit < 0 {
		return 0, fmt.Errorf("--memory-limit must be a non-negative number of bytes, got %q", o.MemoryLimit)
	}
	return limit, nil
}

// Memory returns the memory flags as the runtime takes them. Validate
// first: a limit that does not parse is none here.
func (o *Options) Memory() Memory {
	limit, _ := o.memoryLimit()
	return Memory{GCPercent: o.GCPercent, Limit: limit}
}

// Apply sets the collector's percentage and soft limit, each unless
// getenv (os.Getenv) has GOGC or GOMEMLIMIT: the runtime read those at
// start, and an operator's environment wins over a flag's default. It
// returns what it did, as key and value pairs to log.
func (m Memory) Apply(getenv func(string) string) []any {
	gc, limit := "GOGC from the environment", "GOMEMLIMIT from the environment"
	if v := getenv("GOGC"); v == "" {
		debug.SetGCPercent(m.GCPercent)
		gc = fmt.Sprint(m.GCPercent)
	} else {
		gc += " (" + v + ")"
	}
	if v := getenv("GOMEMLIMIT"); v == "" {
		if m.Limit > 0 {
			debug.SetMemoryLimit(m.Limit)
			limit = resource.NewQuantity(m.Limit, resource.BinarySI).String()
		} else {
			limit = "none"
		}
	} else {
		limit += " (" + v + ")"
	}
	return []any{"gcPercent", gc, "memoryLimit", limit}
}
