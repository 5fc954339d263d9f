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

// WatchSubprotocol is the websocket subprotocol of the bulk watch.
const WatchSubprotocol = "bulk.k8s.io.v1alpha1+json"

// WatchRequest is a client's message: exactly one of Watch and CloseWatch.
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
}

// Watch asks for a channel of the events of the objects Selector selects,
// one resource type per channel. Selector.Options are those of a watch:
// resourceVersion, allowWatchBookmarks, sendInitialEvents, the selectors.
//
// +k8s:deepcopy-gen=false
// +k8s:openapi-gen=false
type Watch struct {
	Selector GetOperation `json:"selector"`
}

// CloseWatch closes Channel; no event of it follows the response.
//
// +k8s:deepcopy-gen=false
// +k8s:openapi-gen=false
type CloseWatch struct {
	Channel int64 `json:"channel"`
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
