package forwarder

import (
	"bufio"
	"errors"
	"net"
	"os"
	"strings"
	"testing"
	"time"
)

// backend answers each line with its name and the line.
func backend(t *testing.T, name string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					if _, err := c.Write([]byte(name + ":" + line)); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// ask sends a line on c and returns the answer, or the read's error.
func ask(c net.Conn, r *bufio.Reader) (string, error) {
	_ = c.SetDeadline(time.Now().Add(500 * time.Millisecond))
	if _, err := c.Write([]byte("hi\n")); err != nil {
		return "", err
	}
	s, err := r.ReadString('\n')
	return strings.TrimSpace(s), err
}

func dial(t *testing.T, f *Forwarder) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", f.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, bufio.NewReader(c)
}

func TestForwarderActsAsAService(t *testing.T) {
	a, b := backend(t, "a"), backend(t, "b")
	for _, tc := range []struct {
		name string
		// act is done to backend a after a connection to it is open.
		act func(f *Forwarder)
		// old is what the open connection sees next: an answer, or an
		// error that is a timeout (silence) or not (closed).
		oldAnswers, oldTimesOut bool
	}{
		{name: "removed: open connections stay", act: func(f *Forwarder) { f.Remove(a) }, oldAnswers: true},
		{name: "cut: open connections close", act: func(f *Forwarder) { f.Remove(a); f.Cut(a) }},
		{name: "blackholed: open connections go silent", act: func(f *Forwarder) { f.Remove(a); f.Blackhole(a) }, oldTimesOut: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := Start(a)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			old, oldR := dial(t, f)
			if got, err := ask(old, oldR); err != nil || got != "a:hi" {
				t.Fatalf("through the forwarder: %q, %v; want a:hi", got, err)
			}
			f.Add(b)
			tc.act(f)
			got, err := ask(old, oldR)
			var ne net.Error
			switch {
			case tc.oldAnswers && (err != nil || got != "a:hi"):
				t.Errorf("open connection: %q, %v; want a:hi", got, err)
			case tc.oldTimesOut && !(errors.As(err, &ne) && ne.Timeout() || errors.Is(err, os.ErrDeadlineExceeded)):
				t.Errorf("open connection: %q, %v; want silence", got, err)
			case !tc.oldAnswers && !tc.oldTimesOut && (err == nil || errors.As(err, &ne) && ne.Timeout()):
				t.Errorf("open connection: %q, %v; want it closed", got, err)
			}
			for range 3 {
				c, r := dial(t, f)
				if got, err := ask(c, r); err != nil || got != "b:hi" {
					t.Errorf("new connection: %q, %v; want b:hi (a is out of rotation)", got, err)
				}
			}
		})
	}
}

// TestForwarderSkipsADeadBackend: a backend that refuses connections is
// passed over for the next.
func TestForwarderSkipsADeadBackend(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	f, err := Start(dead, backend(t, "b"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for range 3 {
		c, r := dial(t, f)
		if got, err := ask(c, r); err != nil || got != "b:hi" {
			t.Errorf("%q, %v; want b:hi", got, err)
		}
	}
}
