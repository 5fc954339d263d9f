package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestProgressBar(t *testing.T) {
	var out bytes.Buffer
	if progressBars(&out) != nil {
		t.Error("a bar on something that is not a terminal")
	}
	bar := newBar(&out, 4, "fanout: 4 nodes connecting")
	for range 4 {
		bar.Add(1)
	}
	bar.Done()
	if s := out.String(); !strings.Contains(s, "fanout: 4 nodes connecting") || !strings.Contains(s, "4/4") || !strings.HasSuffix(s, "\n") {
		t.Errorf("bar drew %q", s)
	}
}
