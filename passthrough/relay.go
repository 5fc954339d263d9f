package passthrough

import (
	"encoding/json"
	"fmt"
	"io"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
)

// rawEvent is one event of a JSON watch stream, its object left as
// kube-apiserver encoded it (apiVersion and kind included): it is sent
// to the channel as it is, never decoded into a Go type.
type rawEvent struct {
	Type   watch.EventType `json:"type"`
	Object json.RawMessage `json:"object"`
}

// objectVersion is the part of an object relay reads: its version, the
// resume point.
type objectVersion struct {
	Metadata struct {
		ResourceVersion string `json:"resourceVersion"`
	} `json:"metadata"`
}

// relay sends the events of one upstream watch to the sink until the
// stream ends. It returns kube-apiserver's ERROR as a Status error,
// errSinkClosed if the channel closed, or why the stream ended (io.EOF:
// kube-apiserver ended it, at its timeout).
//
// A BOOKMARK, and once one has been seen every event, moves the resume
// point (lastRV). Bookmarks the channel did not ask for are not passed
// on; the one that ends an initial state is passed on only if the channel
// asked for the initial state (kube-apiserver sends it then).
func (u *upstream) relay(body io.Reader) error {
	dec := json.NewDecoder(body)
	room, _ := u.sink.(roomWaiter)
	for {
		// A new event each time: the sink keeps the object's bytes.
		var ev rawEvent
		if err := dec.Decode(&ev); err != nil {
			return fmt.Errorf("read the watch of %s: %w", u.t.Resource, err)
		}
		if ev.Type == watch.Error {
			var status metav1.Status
			if err := json.Unmarshal(ev.Object, &status); err != nil || status.Kind != "Status" {
				return apierrors.NewInternalError(fmt.Errorf("the watch of %s ended with an ERROR that is not a Status: %s", u.t.Resource, truncate(ev.Object)))
			}
			return &apierrors.StatusError{ErrStatus: status}
		}
		var meta objectVersion
		if err := json.Unmarshal(ev.Object, &meta); err != nil {
			return apierrors.NewInternalError(fmt.Errorf("the watch of %s sent a %s event that is not an object: %w", u.t.Resource, ev.Type, err))
		}
		forward := true
		switch ev.Type {
		case watch.Bookmark:
			u.lastRV = meta.Metadata.ResourceVersion
			forward = u.bookmarks
		case watch.Added, watch.Modified, watch.Deleted:
			if u.lastRV != "" {
				u.lastRV = meta.Metadata.ResourceVersion
			}
		default:
			return apierrors.NewInternalError(fmt.Errorf("the watch of %s sent an event of unknown type %q", u.t.Resource, ev.Type))
		}
		if !forward {
			continue
		}
		if room != nil && !room.WaitRoom() {
			return errSinkClosed
		}
		if !u.sink.Send(ev.Type, ev.Object) {
			return errSinkClosed
		}
	}
}

// truncate bounds what an error quotes of a malformed event.
func truncate(b []byte) string {
	const limit = 256
	if len(b) > limit {
		return string(b[:limit]) + "..."
	}
	return string(b)
}
