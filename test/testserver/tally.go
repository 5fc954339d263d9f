package testserver

import (
	"fmt"
	"strings"
)

// eventuallyErrors bounds how many distinct errors Eventually reports.
const eventuallyErrors = 8

// errorTally counts the distinct errors of a poll, keeping the order in
// which each was first seen.
type errorTally struct {
	order  []string
	counts map[string]int
	extra  int // errors past the first eventuallyErrors distinct ones
}

func (e *errorTally) add(err error) {
	if err == nil {
		return
	}
	msg := err.Error()
	if e.counts == nil {
		e.counts = map[string]int{}
	}
	if _, ok := e.counts[msg]; !ok {
		if len(e.order) == eventuallyErrors {
			e.extra++
			return
		}
		e.order = append(e.order, msg)
	}
	e.counts[msg]++
}

func (e *errorTally) String() string {
	if len(e.order) == 0 {
		return "no error seen"
	}
	if len(e.order) == 1 {
		return e.order[0]
	}
	var b strings.Builder
	for _, msg := range e.order {
		fmt.Fprintf(&b, "\n\t%dx %s", e.counts[msg], msg)
	}
	if e.extra > 0 {
		fmt.Fprintf(&b, "\n\tand %d more", e.extra)
	}
	return b.String()
}
