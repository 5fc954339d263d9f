// Package kubeproto reads kube-apiserver's protobuf encoding of API
// objects in place: the envelope every object and list is written in, and
// the fields of a message, each where it lies in the bytes.
//
// kube-apiserver writes an object in protobuf as a four-byte magic,
// "k8s\x00", then a runtime.Unknown message (k8s.io/apimachinery's
// generated.proto):
//
//	"k8s\x00" | Unknown{ typeMeta 1: {apiVersion 1, kind 2}, raw 2: <object>,
//	                     contentEncoding 3, contentType 4 }
//	<object>  = { metadata 1: ObjectMeta, spec 2, status 3, ... }
//
// and go-to-protobuf numbers every API type's fields in order, so an
// object's metadata is its field 1 and ObjectMeta's fields have the
// numbers below, part of the API's compatibility promise.
//
// The hub's cache cuts the bytes of an object it keeps as bytes where its
// writes change them, the node endpoint reads the head of every object it
// copies and rewrites its resourceVersion, and the bulk watch client reads
// each event's resourceVersion and annotations. Each reads a few fields
// and serves the rest of the bytes as they are: decoding them would cost
// the typed object's allocations (several times the bytes) only to encode
// it again. This package is the one place that knows the envelope's layout
// and walks a message's fields, with protowire's parsing of tags, varints
// and lengths; it imports nothing else, so that the node endpoint's binary,
// which links it, links none of the hub.
//
// Every function takes bytes from the network or a store and never
// panics on them: truncated or malformed input is an error.
package kubeproto
