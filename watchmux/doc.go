// Package watchmux carries many watch channels over one websocket per
// client: the framing, the channels, per-channel flow control, keepalive
// and shutdown on the server side, and a Go client. It knows nothing of
// graphs, caches or authorization: a Handler decides whether a channel
// opens and feeds it through a Sink.
//
// The protocol (subprotocol bulk.k8s.io.v1alpha1+json, one JSON object per
// text message; types in apis/bulk/v1alpha1):
//
//	client                                   server
//	{"id":1,"watch":{"selector":{...}}}  -->
//	                                     <-- {"response":{"requestID":1,"channel":7}}
//	                                     <-- {"channel":7,"type":"ADDED","object":{...}}
//	{"id":2,"progress":{"channel":7,"token":"t1"}}  -->   (a channel whose stream takes them: a node view)
//	                                     <-- {"response":{"requestID":2,"channel":7}}
//	                                     <-- {"channel":7,"type":"BOOKMARK","object":{...,"annotations":{"bulk.k8s.io/progress":"t1"}}}
//	{"id":3,"closeWatch":{"channel":7}}  -->
//	                                     <-- {"response":{"requestID":3,"channel":7}}
//
// A refused request gets {"response":{"requestID":N,"error":<Status>}}; an
// ERROR event carries a Status and is the last message of its channel.
// Channel identifiers are chosen by the server, per connection, and never
// reused.
//
// Under subprotocol bulk.k8s.io.v1alpha1+json+protobuf, which a client
// offers first and a server prefers, a watch may ask for
// "contentType":"application/vnd.kubernetes.protobuf"; its events whose
// objects the stream sends as kube-apiserver's protobuf (Sink.Protobuf)
// go as binary messages, {"channel":7,"type":"MODIFIED"}, a newline, the
// object's bytes. Peers that know only the JSON subprotocol pick it and
// see text messages alone.
//
// Inside a connection:
//
//	reader ----open/close----> channels (map, under mu)
//	   |                            |
//	   |    Handler.Open            | Sink.Send (never blocks)
//	   v                            v
//	responses ---------------> queue []frame (under mu)  --> writer --> websocket
//	                                                   ^          |
//	                                            wake (cap 1)      '-- ping every PingInterval
//
// Invariants:
//   - One writer per connection, and it is the only goroutine that
//     writes data frames; mu is never held across a network write.
//   - A channel's response is queued before any of its events, and its
//     ERROR (if any) after all of them; when a channel closes, its events
//     still queued are dropped.
//   - A stream never blocks: a channel with more than ChannelQueue events
//     waiting is closed with ERROR 410 ("too slow; resubscribe"), so a
//     slow client costs bounded memory and never holds back other
//     channels or connections. A stream whose source can wait (a watch on
//     kube-apiserver) may instead wait in the channel's WaitRoom before
//     each Send: it then holds back only itself, and never overflows. Event frames point at the encoded object
//     shared with the cache; fan-out copies nothing.
//   - A write that takes longer than WriteTimeout ends the connection; a
//     client silent for two PingIntervals too.
//   - Shutdown closes every channel with ERROR 503, then the connection
//     with close code 1001 (going away), so clients resubscribe elsewhere;
//     Shutdown returns when every connection has ended, or cuts those left
//     when its context ends.
//
// The Client mirrors the server: its reader never blocks either; a channel
// whose consumer leaves ClientEventBuffer events unread ends with ERROR 410
// and is closed on the server too. As on the server, a channel's initial
// state is not bounded: the client holds it whole for its consumer
// (client_initial.go), and only what follows it counts.
//
// A Session (session.go) is a Client that outlives its connections: it
// redials the same address (another replica behind a Service) and reopens
// every channel from the last resourceVersion its consumer saw. Its
// invariant: a consumer sees each change once, in order, or an ERROR
// (410: list again) that ends the channel; never a silent gap.
package watchmux
