package main

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// prefixed indents progress lines from the control plane and the
// comparison under the demo's own steps.
func prefixed(prefix string, w io.Writer) io.Writer { return &prefixWriter{prefix: prefix, w: w} }

type prefixWriter struct {
	prefix string
	w      io.Writer
}

func (p *prefixWriter) Write(b []byte) (int, error) {
	text := strings.TrimRight(string(b), "\n")
	_, err := io.WriteString(p.w, p.prefix+strings.ReplaceAll(text, "\n", "\n"+p.prefix)+"\n")
	return len(b), err
}

// step begins a step of the demo.
func (d *demo) step(format string, args ...any) {
	elapsed := time.Since(d.began).Round(time.Second)
	fmt.Fprintf(d.out, "\n==> %d:%02d "+format+"\n", append([]any{int(elapsed.Minutes()), int(elapsed.Seconds()) % 60}, args...)...)
}

// say prints one line of a step, indented under it.
func (d *demo) say(format string, args ...any) {
	fmt.Fprintf(d.out, "    "+format+"\n", args...)
}
