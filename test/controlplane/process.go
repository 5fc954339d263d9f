package controlplane

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"
)

// stopGrace is how long a child gets between SIGTERM and SIGKILL. etcd and
// kube-apiserver stop in well under a second when idle; waiting longer only
// slows down every test package's exit.
const stopGrace = 5 * time.Second

// Process is one child program whose output goes to a log file and a
// bounded tail kept in memory for error messages.
type Process struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	tail    *tailBuffer
	done    chan struct{} // closed when the process has exited
	err     error         // exit status; valid after done is closed
}

// StartProcess starts bin with args. The kernel kills the child when the OS
// thread that started it dies (Pdeathsig), so no etcd or kube-apiserver
// outlives a test binary that panics, times out or is killed; Stop is the
// orderly path. Pdeathsig follows the thread, not the process (see
// golang/go#27505), so the starting goroutine stays locked to its thread
// until the child has exited: the runtime can then never retire that thread
// under a live child.
func StartProcess(name, bin string, args []string, logPath string) (*Process, error) {
	return StartProcessTee(name, bin, args, logPath, nil)
}

// StartProcessTee is StartProcess with the output also written to also
// (if not nil) as it arrives, for callers that read what the program
// reports while it runs (a hollow proxy's log lines). also is written from
// one goroutine, in order, and must not block: a child whose output is
// not drained stalls.
func StartProcessTee(name, bin string, args []string, logPath string, also io.Writer) (*Process, error) {
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open %s log: %w", name, err)
	}
	p := &Process{name: name, logPath: logPath, tail: newTailBuffer(40), done: make(chan struct{})}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Stdout = io.MultiWriter(logFile, p.tail)
	if also != nil {
		p.cmd.Stdout = io.MultiWriter(logFile, p.tail, also)
	}
	p.cmd.Stderr = p.cmd.Stdout
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		defer logFile.Close()
		if err := p.cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	if err := <-started; err != nil {
		return nil, fmt.Errorf("start %s (%s): %w", name, bin, err)
	}
	return p, nil
}

// Pid is the process's identifier, for reading its resource usage.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// SetNice sets the scheduling niceness of every thread of the process
// and of anything else in its process group (StartProcess makes it a
// group's leader); threads created later inherit it from the thread
// that creates them. The benchmark uses it to keep processes that would
// run on other machines in a cluster from taking CPU from kube-apiserver
// on this one.
func (p *Process) SetNice(n int) error {
	if err := syscall.Setpriority(syscall.PRIO_PGRP, p.cmd.Process.Pid, n); err != nil {
		return fmt.Errorf("nice %d for %s: %w", n, p.name, err)
	}
	return nil
}

// Binary is the path of the program p runs, for starting another like it.
func (p *Process) Binary() string { return p.cmd.Path }

// Exited reports whether the process has ended, and how.
func (p *Process) Exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.err
	default:
		return false, nil
	}
}

// Stop asks the process to end and waits for it, escalating to SIGKILL
// after stopGrace.
func (p *Process) Stop() { p.Terminate(stopGrace) }

// Terminate sends SIGTERM, as a kubelet stopping a pod does, and waits
// for the process to end, escalating to SIGKILL after grace.
func (p *Process) Terminate(grace time.Duration) { p.end(syscall.SIGTERM, grace) }

// end sends sig and waits for the process to end, escalating to SIGKILL
// on its process group after grace.
func (p *Process) end(sig syscall.Signal, grace time.Duration) {
	if ok, _ := p.Exited(); ok {
		return
	}
	_ = p.cmd.Process.Signal(sig)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	}
}

// Kill ends the process at once with SIGKILL, as a crash or an OOM kill
// would, and waits for it.
func (p *Process) Kill() {
	if ok, _ := p.Exited(); ok {
		return
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	<-p.done
}

// DumpGoroutines ends a Go process with SIGQUIT, on which the Go runtime
// writes every goroutine's stack to standard error (into the log) before
// it exits: where a process that stopped answering is stuck. It waits for
// the exit, escalating to SIGKILL after stopGrace.
func (p *Process) DumpGoroutines() { p.end(syscall.SIGQUIT, stopGrace) }

// Describe names the process, its log file and its last lines: what a
// developer needs to see when it did not get ready.
func (p *Process) Describe() string {
	return fmt.Sprintf("%s (log %s), last lines:\n%s", p.name, p.logPath, p.tail)
}

// tailBuffer keeps the last n lines written to it.
type tailBuffer struct {
	mu      sync.Mutex
	n       int
	lines   []string
	partial bytes.Buffer
}

func newTailBuffer(n int) *tailBuffer { return &tailBuffer{n: n} }

func (t *tailBuffer) Write(b []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.partial.Write(b)
	for {
		line, err := t.partial.ReadString('\n')
		if errors.Is(err, io.EOF) {
			// Put back the unfinished line for the next write.
			rest := line
			t.partial.Reset()
			t.partial.WriteString(rest)
			return len(b), nil
		}
		t.lines = append(t.lines, strings.TrimRight(line, "\n"))
		if len(t.lines) > t.n {
			t.lines = t.lines[len(t.lines)-t.n:]
		}
	}
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := strings.Join(t.lines, "\n")
	if t.partial.Len() > 0 {
		out += "\n" + t.partial.String()
	}
	return out
}

// WaitReady polls url until it answers 200, p exits, or readyTimeout
// passes; its error says which, with the tail of p's log.
func WaitReady(ctx context.Context, p *Process, client *http.Client, url string) error {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	last := "no answer yet"
	for {
		if done, err := p.Exited(); done {
			return fmt.Errorf("%s exited before it was ready (%v): %s", p.name, err, p.Describe())
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := client.Do(req)
		if err == nil {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = fmt.Sprintf("%s: %s", resp.Status, body)
		} else {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s not ready at %s (last answer: %s): %w; %s", p.name, url, last, ctx.Err(), p.Describe())
		case <-tick.C:
		}
	}
}

// Goroutines returns the stacks, from the goroutine dump DumpGoroutines
// left in the log at logPath, that mention substr.
func Goroutines(logPath, substr string) ([]string, error) {
	b, err := os.ReadFile(logPath)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", logPath, err)
	}
	var found []string
	for _, stanza := range strings.Split(string(b), "\n\n") {
		if strings.HasPrefix(stanza, "goroutine ") && strings.Contains(stanza, substr) {
			found = append(found, stanza)
		}
	}
	return found, nil
}
