// Package relay writes a hub channel's events to one client's watch, as
// kube-apiserver writes a watch response: each event framed and encoded in
// the media type the client negotiated (JSON, or protobuf with
// ";stream=watch", as the kubelet and kube-proxy ask).
//
//	watchmux.Event (the hub's bytes) --Writer.Write--> frame --> the client's response
//
// Invariant: what the client reads is byte for byte what kube-apiserver
// would send for the same object in the same media type.
package relay
