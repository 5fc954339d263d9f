package watchmux

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/nodeproxy/nodeproxy/apis/bulk/v1alpha1"
)

// decodeRequest reads one client message strictly: known fields only, one
// JSON object, exactly one of watch and closeWatch. On error the request
// still carries the id if one could be read, so the refusal can name it.
func decodeRequest(data []byte) (v1alpha1.WatchRequest, *metav1.Status) {
	var req v1alpha1.WatchRequest
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		var id struct {
			ID int64 `json:"id"`
		}
		_ = json.Unmarshal(data, &id)
		return v1alpha1.WatchRequest{ID: id.ID}, badRequest(fmt.Sprintf("not a request: %v", err))
	}
	if _, err := dec.Token(); err != io.EOF {
		return req, badRequest("one JSON request per message: data after the request")
	}
	switch {
	case req.Watch != nil && req.CloseWatch != nil:
		return req, badRequest("a request has either watch or closeWatch, not both")
	case req.Watch == nil && req.CloseWatch == nil:
		return req, badRequest("a request has watch or closeWatch")
	}
	return req, nil
}

// contentType reads a Watch's ContentType: whether the channel's objects
// may go as protobuf, or why the request is refused.
func (c *conn) contentType(ct string) (protobuf bool, refused *metav1.Status) {
	switch ct {
	case "", runtime.ContentTypeJSON:
		return false, nil
	case v1alpha1.ContentTypeProtobuf:
		if !c.protobuf {
			return false, badRequest("contentType " + ct + " needs subprotocol " + v1alpha1.WatchSubprotocolProtobuf)
		}
		return true, nil
	}
	return false, badRequest(fmt.Sprintf("contentType %q: the objects of a channel are %s or %s", ct, runtime.ContentTypeJSON, v1alpha1.ContentTypeProtobuf))
}

func badRequest(msg string) *metav1.Status {
	return &metav1.Status{Code: http.StatusBadRequest, Reason: metav1.StatusReasonBadRequest, Message: msg}
}

func tooMany(format string, args ...any) *metav1.Status {
	return &metav1.Status{Code: http.StatusTooManyRequests, Reason: metav1.StatusReasonTooManyRequests, Message: fmt.Sprintf(format, args...)}
}

// reasonOf labels a closing status for metrics.
func reasonOf(s *metav1.Status) string {
	switch s.Reason {
	case metav1.StatusReasonExpired, metav1.StatusReasonGone:
		return "expired"
	case metav1.StatusReasonForbidden:
		return "forbidden"
	case metav1.StatusReasonServiceUnavailable:
		return "shutdown"
	}
	return "other"
}
