package endpoint

import (
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// bootClock is this boot's identity and the time since it began, by
// CLOCK_BOOTTIME, which counts suspended time and which nobody sets: the
// age of a copy saved in the same boot, whatever the wall clock did.
func bootClock() (id string, since time.Duration, ok bool) {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return "", 0, false
	}
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		return "", 0, false
	}
	return strings.TrimSpace(string(b)), time.Duration(ts.Nano()), true
}

// wallClockSynced reports whether the kernel holds the wall clock
// synchronized: an NTP client (chrony, systemd-timesyncd, ntpd) clears
// STA_UNSYNC while it disciplines the clock. Without that, the wall clock
// is whatever the RTC or an operator set, and proves no age. A variable
// for tests.
var wallClockSynced = func() bool {
	var tx unix.Timex
	state, err := unix.Adjtimex(&tx) // modes 0: read only
	return err == nil && state != unix.TIME_ERROR && tx.Status&unix.STA_UNSYNC == 0
}
