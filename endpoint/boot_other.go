//go:build !linux

package endpoint

import "time"

// bootClock is unknown off Linux: a copy's age across restarts is the
// wall clock's.
func bootClock() (id string, since time.Duration, ok bool) { return "", 0, false }

// wallClockSynced is unknown off Linux: a wall clock proves no age.
var wallClockSynced = func() bool { return false }
