// Package watchmux will carry many watch channels over one websocket per
// client: framing, per-channel flow control, keepalive, and a Go client. It
// knows nothing of graphs or authorization.
//
// Nothing is implemented yet; see the issue "watchmux + bulk watch".
package watchmux
