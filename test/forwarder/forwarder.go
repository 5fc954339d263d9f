// Package forwarder stands in for a Kubernetes Service in tests and the
// benchmark: one TCP address in front of several hub replicas, each new
// connection sent to a live backend, bytes passed through untouched (TLS
// ends at the hub, as behind a ClusterIP Service).
//
// Why not give clients a list of addresses: a kubelet's node endpoint and
// every other client reach the hubs through one Service name, and the
// behaviour worth testing is the Service's: a redial lands on whichever
// replica is ready, and the client cannot tell which. The hubs' serving
// certificates name 127.0.0.1 and localhost, not a port, so they cover
// the forwarder's address too.
//
// What it leaves out: kube-proxy's endpoints follow readiness, with a
// delay; here the caller removes a backend (Remove) when it kills or
// stops it, and a dial to a dead backend falls through to the next, where
// a Service would send some connections to the dead pod until its
// endpoint goes (the client sees a refused dial and retries after its
// backoff). Blackhole plays a replica whose node vanished: its open
// connections go silent without being closed.
package forwarder

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"
	"time"

	"k8s.io/klog/v2"
)

// dialTimeout bounds a dial to one backend; on loopback a live backend
// answers in microseconds, so a second means it is gone.
const dialTimeout = time.Second

// Forwarder listens on one address and forwards each connection to a
// backend, round robin over those that accept.
type Forwarder struct {
	ln net.Listener

	mu       sync.Mutex
	backends []string           // guarded by mu
	next     int                // guarded by mu: round robin position
	conns    map[*pair]struct{} // guarded by mu
	closed   bool               // guarded by mu
	wg       sync.WaitGroup
}

// pair is one forwarded connection.
type pair struct {
	backend          string
	client, upstream net.Conn
	// silent is closed to stop passing bytes without closing either
	// side.
	silent chan struct{}
	once   sync.Once
}

// Start listens on 127.0.0.1 on a free port and forwards to backends
// (host:port).
func Start(backends ...string) (*Forwarder, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("forwarder listen: %w", err)
	}
	f := &Forwarder{ln: ln, backends: slices.Clone(backends), conns: map[*pair]struct{}{}}
	f.wg.Add(1)
	go f.accept()
	return f, nil
}

// Addr is the address clients dial, host:port.
func (f *Forwarder) Addr() string { return f.ln.Addr().String() }

// SetBackends replaces the backends new connections go to; open
// connections stay where they are.
func (f *Forwarder) SetBackends(backends ...string) {
	f.mu.Lock()
	f.backends = slices.Clone(backends)
	f.mu.Unlock()
}

// Remove takes backend out of rotation, as an endpoint leaves a Service
// when its pod stops being ready; open connections stay.
func (f *Forwarder) Remove(backend string) {
	f.mu.Lock()
	f.backends = slices.DeleteFunc(f.backends, func(b string) bool { return b == backend })
	f.mu.Unlock()
}

// Add puts backend (back) in rotation.
func (f *Forwarder) Add(backend string) {
	f.mu.Lock()
	if !slices.Contains(f.backends, backend) {
		f.backends = append(f.backends, backend)
	}
	f.mu.Unlock()
}

// Blackhole makes every open connection to backend go silent, neither
// passing bytes nor closing: what its clients see when the backend's
// node vanishes. Only their idle timeout notices.
func (f *Forwarder) Blackhole(backend string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for p := range f.conns {
		if p.backend == backend {
			p.once.Do(func() { close(p.silent) })
		}
	}
}

// Cut closes every open connection to backend at once: what its clients
// see when the backend's process is killed and its kernel resets the
// sockets.
func (f *Forwarder) Cut(backend string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for p := range f.conns {
		if p.backend == backend {
			p.client.Close()
			p.upstream.Close()
		}
	}
}

// Close stops listening and cuts every connection.
func (f *Forwarder) Close() error {
	f.mu.Lock()
	f.closed = true
	for p := range f.conns {
		p.client.Close()
		p.upstream.Close()
	}
	f.mu.Unlock()
	err := f.ln.Close()
	f.wg.Wait()
	return err
}

func (f *Forwarder) accept() {
	defer f.wg.Done()
	for {
		c, err := f.ln.Accept()
		if err != nil {
			return // closed
		}
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			f.serve(c)
		}()
	}
}

// pick returns the backends in the order to try them.
func (f *Forwarder) pick() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := len(f.backends)
	out := make([]string, 0, n)
	for i := range n {
		out = append(out, f.backends[(f.next+i)%n])
	}
	f.next++
	return out
}

func (f *Forwarder) serve(c net.Conn) {
	var up net.Conn
	var backend string
	for _, b := range f.pick() {
		ctx, cancel := context.WithTimeout(context.Background(), dialTimeout)
		var err error
		up, err = (&net.Dialer{}).DialContext(ctx, "tcp", b)
		cancel()
		if err == nil {
			backend = b
			break
		}
		klog.V(4).InfoS("Forwarder backend refused a connection; trying the next", "backend", b, "err", err)
	}
	if up == nil {
		c.Close() // no backend: the client sees its connection closed, as with no endpoints
		return
	}
	p := &pair{backend: backend, client: c, upstream: up, silent: make(chan struct{})}
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		c.Close()
		up.Close()
		return
	}
	f.conns[p] = struct{}{}
	f.mu.Unlock()
	var wg sync.WaitGroup
	wg.Go(func() { p.copy(up, c) })
	wg.Go(func() { p.copy(c, up) })
	wg.Wait()
	f.mu.Lock()
	delete(f.conns, p)
	f.mu.Unlock()
}

// copy passes bytes from src to dst until either ends, then closes both
// (so the other direction ends too), unless the pair went silent: then it
// stops passing bytes and holds both open until the forwarder closes.
func (p *pair) copy(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		select {
		case <-p.silent:
			// Hold both sockets open and pass nothing: a vanished node
			// sends no FIN and no RST.
			io.Copy(io.Discard, src) //nolint:errcheck // until Close
			return
		default:
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				err = werr
			}
		}
		if err != nil {
			if !errors.Is(err, net.ErrClosed) && !errors.Is(err, io.EOF) {
				klog.V(5).InfoS("Forwarded connection ended", "backend", p.backend, "err", err)
			}
			dst.Close()
			src.Close()
			return
		}
	}
}
