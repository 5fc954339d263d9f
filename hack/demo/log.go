package main

import (
	"io"
	"os"
	"strings"
)

// prefixed indents progress lines from the control plane under the
// demo's own steps.
func prefixed(prefix string) io.Writer { return &prefixWriter{prefix: prefix, w: os.Stdout} }

type prefixWriter struct {
	prefix string
	w      io.Writer
}

func (p *prefixWriter) Write(b []byte) (int, error) {
	text := strings.TrimRight(string(b), "\n")
	_, err := io.WriteString(p.w, p.prefix+strings.ReplaceAll(text, "\n", "\n"+p.prefix)+"\n")
	return len(b), err
}
