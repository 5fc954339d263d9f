package controlplane

import (
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
)

// Gate is a TCP forwarder to kube-apiserver that is shut until Open:
// before, it closes every connection it accepts, as a node sees a
// control plane that is not up yet; after, it forwards. The Pod API's
// bootstrap test and `make demo` point a kubelet and the handover at it to
// play "kube-apiserver comes up" without restarting kube-apiserver.
type Gate struct {
	// URL is https://<address>, for a kubeconfig's server.
	URL string

	ln     net.Listener
	opened atomic.Bool
	wg     sync.WaitGroup
}

// StartGate listens on a free loopback port and forwards to target
// (host:port) once opened.
func StartGate(target string) (*Gate, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("gate to %s: %w", target, err)
	}
	g := &Gate{URL: "https://" + ln.Addr().String(), ln: ln}
	g.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if !g.opened.Load() {
				c.Close()
				continue
			}
			go forward(c, target)
		}
	})
	return g, nil
}

func forward(c net.Conn, target string) {
	defer c.Close()
	up, err := net.Dial("tcp", target)
	if err != nil {
		return
	}
	defer up.Close()
	go func() { _, _ = io.Copy(up, c); up.Close() }()
	_, _ = io.Copy(c, up)
}

// Open lets connections through from now on.
func (g *Gate) Open() { g.opened.Store(true) }

// Close stops accepting; forwarded connections end with their peers.
func (g *Gate) Close() {
	g.ln.Close()
	g.wg.Wait()
}
