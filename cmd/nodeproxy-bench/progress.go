package main

import (
	"io"
	"os"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"

	"github.com/nodeproxy/nodeproxy/test/bench"
)

// progressBars draws a bar per long phase on w when w is a terminal; on
// anything else (a log, CI) it returns nil and the phases print one line
// each.
func progressBars(w io.Writer) func(total int, what string) bench.Counter {
	if f, ok := w.(*os.File); !ok || !term.IsTerminal(int(f.Fd())) {
		return nil
	}
	return func(total int, what string) bench.Counter { return newBar(w, total, what) }
}

func newBar(w io.Writer, total int, what string) bench.Counter {
	return barCounter{progressbar.NewOptions(total,
		progressbar.OptionSetWriter(w),
		progressbar.OptionSetDescription(what),
		progressbar.OptionShowCount(),
		progressbar.OptionSetWidth(30),
		progressbar.OptionThrottle(100*time.Millisecond),
		progressbar.OptionOnCompletion(func() { _, _ = io.WriteString(w, "\n") }),
	)}
}

type barCounter struct{ bar *progressbar.ProgressBar }

func (b barCounter) Add(n int) { _ = b.bar.Add(n) }

// Done completes the bar even if the phase ended early, so the next line
// starts on its own.
func (b barCounter) Done() { _ = b.bar.Finish() }
