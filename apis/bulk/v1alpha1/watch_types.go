package v1alpha1

import (
	"encoding/json"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
)

// The bulk watch protocol: a websocket upgrade of
// GET /apis/bulk.k8s.io/v1alpha1/bulkgetoperations?watch=1 with subprotocol
// WatchSubprotocol, then one JSON object per text message. The client
// sends WatchRequests; the server sends ServerMessages: a response to each
// request, and the events of each channel the client opened.
//
// A request opens a channel (Watch), closes one (CloseWatch), or asks a
// channel for a bookmark (Progress). Only a channel whose stream takes
// progress requests (a node view) accepts Progress; its answer is the
// response, then, on the channel, a BOOKMARK annotated with the request's
// token whose position is at or past everything the server's cache held
// when the request came (NodeViewProgressAnnotation). Other channels
// refuse it with 400; a channel not open on the connection, with 404.

// WatchSubprotocol is the websocket subprotocol of the bulk watch.
const WatchSubprotocol = "bulk.k8s.io.v1alpha1+json"

// WatchSubprotocolProtobuf is WatchSubprotocol with one addition: a
// channel may ask (Watch.ContentType) for its objects in kube-apiserver's
// protobuf encoding, and the server may then send an event of it as a
// binary message: the event's ServerMessage without its object, as JSON,
// a newline, then the object's bytes (the "k8s\x00" magic and a
// runtime.Unknown, as kube-apiserver encodes an object). Every text
// message keeps its meaning. A client offers both subprotocols, this one
// first; a server that knows only WatchSubprotocol picks that one, and
// every event comes as JSON.
const WatchSubprotocolProtobuf = "bulk.k8s.io.v1alpha1+json+protobuf"

// ContentTypeProtobuf is kube-apiserver's protobuf media type, the one
// Watch.ContentType other than JSON.
const ContentTypeProtobuf = "application/vnd.kubernetes.protobuf"

// WatchRequest is a client's message: exactly one of Watch, CloseWatch
// and Progress.
//
// +k8s:deepcopy-gen=false
// +k8s:openapi-gen=false
type WatchRequest struct {
	// ID is chosen by the client and echoed in the response.
	ID int64 `json:"id"`
	// Watch opens a channel.
	Watch *Watch `json:"watch,omitempty"`
	// CloseWatch closes a channel the client opened.
	CloseWatch *CloseWatch `json:"closeWatch,omitempty"`
	// Progress asks a channel the client opened for a bookmark.
	Progress *ProgressRequest `json:"progress,omitempty"`
}

// Watch asks for a channel of the events of the objects Selector selects,
// one resource type per channel. Selector.Options are those of a watch:
// resourceVersion, allowWatchBookmarks, sendInitialEvents, the selectors.
//
// +k8s:deepcopy-gen=false
// +k8s:openapi-gen=false
type Watch struct {
	Selector GetOperation `json:"selector"`
	// ContentType is how the client would have the channel's objects:
	// "" or application/json, or, on a connection of
	// WatchSubprotocolProtobuf only, ContentTypeProtobuf. It is a wish:
	// the server may send any event as JSON (an ERROR always is).
	ContentType string `json:"contentType,omitempty"`
}

// CloseWatch closes Channel; no event of it follows the response.
//
// +k8s:deepcopy-gen=false
// +k8s:openapi-gen=false
type CloseWatch struct {
	Channel int64 `json:"channel"`
}

// MaxProgressTokenLength bounds a ProgressRequest's Token, in bytes: the
// token comes back in an annotation of every bookmark that answers it,
// and a client needs no more than a counter or a UUID (36 bytes) to
// match an answer to its request.
const MaxProgressTokenLength = 64

// ProgressRequest asks Channel for a BOOKMARK that answers it: on a node
// view, a bookmark annotated NodeViewProgressAnnotation: Token, whose
// position is at or past everything the server's cache held when the
// request came, sent after every change the view takes in up to there
// (docs/api.md, "The node view", "Progress requests"). Token is the
// client's, 1 to MaxProgressTokenLength bytes. The response to the
// request comes before the bookmark; a request whose channel does not
// take progress requests (a bulk watch channel) is refused with 400.
//
// +k8s:deepcopy-gen=false
// +k8s:openapi-gen=false
type ProgressRequest struct {
	Channel int64  `json:"channel"`
	Token   string `json:"token"`
}

// ServerMessage is a server's message: a Response, or an event of Channel.
//
// +k8s:deepcopy-gen=false
// +k8s:openapi-gen=false
type ServerMessage struct {
	Response *WatchResponse `json:"response,omitempty"`

	// Channel, Type and Object are an event: ADDED, MODIFIED, DELETED and
	// BOOKMARK carry the object; ERROR carries a metav1.Status and is the
	// channel's last event.
	Channel int64           `json:"channel,omitempty"`
	Type    watch.EventType `json:"type,omitempty"`
	Object  json.RawMessage `json:"object,omitempty"`
}

// WatchResponse answers the request RequestID: the channel opened or
// closed, or why the request was refused.
//
// +k8s:deepcopy-gen=false
// +k8s:openapi-gen=false
type WatchResponse struct {
	RequestID int64          `json:"requestID"`
	Channel   int64          `json:"channel,omitempty"`
	Error     *metav1.Status `json:"error,omitempty"`
}
