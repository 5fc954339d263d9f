package bench

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"k8s.io/client-go/rest"

	"github.com/nodeproxy/nodeproxy/test/controlplane"
)

// Usage is what a process has consumed so far.
type Usage struct {
	// CPU is user plus system time since the process started.
	CPU time.Duration
	// RSS is its resident memory now, in bytes.
	RSS int64
	// RunWait is how long its threads have waited, runnable, for a CPU
	// that other threads held (/proc/<pid>/task/*/schedstat, the
	// scheduler's run-queue delay), summed over the threads there are
	// now: on a machine it shares, what its CPU time does not show. It
	// is 0 where the kernel keeps no schedstats.
	RunWait time.Duration
	// Preempted counts the times its threads, runnable, were taken off
	// a CPU for another thread (nonvoluntary_ctxt_switches of
	// /proc/<pid>/task/*/status), summed over the threads there are now.
	Preempted int64
}

// clockTick is USER_HZ, the unit of /proc/<pid>/stat's times: 100 on
// every Linux architecture Go supports (the kernel scales to it whatever
// its own HZ).
const clockTick = 10 * time.Millisecond

// ReadUsage reads pid's CPU time and resident memory from /proc.
func ReadUsage(pid int) (Usage, error) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return Usage{}, fmt.Errorf("process %d: %w", pid, err)
	}
	// The command name, field 2, is in parentheses and may hold spaces:
	// count fields after its closing one. utime and stime are fields 14
	// and 15, so the 12th and 13th after it.
	rest := string(stat)
	if i := strings.LastIndexByte(rest, ')'); i >= 0 {
		rest = rest[i+1:]
	}
	f := strings.Fields(rest)
	if len(f) < 13 {
		return Usage{}, fmt.Errorf("process %d: /proc/%d/stat has %d fields after the name, want at least 13", pid, pid, len(f))
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return Usage{}, fmt.Errorf("process %d: utime %q, stime %q in /proc/%d/stat", pid, f[11], f[12], pid)
	}
	u := Usage{CPU: time.Duration(utime+stime) * clockTick}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return Usage{}, fmt.Errorf("process %d: %w", pid, err)
	}
	for line := range strings.SplitSeq(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				return Usage{}, fmt.Errorf("process %d: VmRSS %q: %w", pid, v, err)
			}
			u.RSS = kb << 10
		}
	}
	u.RunWait, u.Preempted, err = readThreads(pid)
	return u, err
}

// readThreads sums, over pid's threads, the run-queue delay
// (schedstat's second field, in nanoseconds) and the involuntary context
// switches.
func readThreads(pid int) (wait time.Duration, preempted int64, err error) {
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*", pid))
	if err != nil {
		return 0, 0, err
	}
	for _, t := range tasks {
		sched, err1 := os.ReadFile(filepath.Join(t, "schedstat"))
		status, err2 := os.ReadFile(filepath.Join(t, "status"))
		if err1 != nil || err2 != nil {
			continue // the thread ended between the glob and the read
		}
		f := strings.Fields(string(sched))
		if len(f) < 2 {
			return 0, 0, fmt.Errorf("%s/schedstat: %q, want three fields", t, sched)
		}
		ns, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("%s/schedstat: %w", t, err)
		}
		wait += time.Duration(ns)
		for line := range strings.SplitSeq(string(status), "\n") {
			if v, ok := strings.CutPrefix(line, "nonvoluntary_ctxt_switches:"); ok {
				n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
				if err != nil {
					return 0, 0, fmt.Errorf("%s/status: %q: %w", t, line, err)
				}
				preempted += n
			}
		}
	}
	return wait, preempted, nil
}

// machineBusy is the CPU time every process on the machine has used
// since boot, all CPUs together: /proc/stat's first line less idle and
// iowait (and the hypervisor's steal).
func machineBusy() (time.Duration, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 8 || f[0] != "cpu" {
		return 0, fmt.Errorf("/proc/stat begins %q, want the cpu line", line)
	}
	var busy int64
	// user nice system idle iowait irq softirq (steal, the hypervisor's,
	// is no process's here)
	for i, v := range f[1:8] {
		if i == 3 || i == 4 {
			continue
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/stat: %q: %w", v, err)
		}
		busy += n
	}
	return time.Duration(busy) * clockTick, nil
}

// Metrics are one scrape of a /metrics endpoint: the harness's, which
// its own tests read too.
type Metrics = controlplane.Metrics

// Scrape reads url's Prometheus text exposition with client.
func Scrape(ctx context.Context, client *http.Client, url string) (Metrics, error) {
	return controlplane.Scrape(ctx, client, url)
}

// ScrapeAPIServer reads kube-apiserver's /metrics through client (see
// controlplane.ScrapeAPIServer).
func ScrapeAPIServer(ctx context.Context, client rest.Interface) (Metrics, error) {
	return controlplane.ScrapeAPIServer(ctx, client)
}
