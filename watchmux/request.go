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
// JSON object, exactly one of watch, closeWatch and progress, a progress
// token of 1 to v1alpha1.MaxProgressTokenLength bytes. On error the
// request still carries the id if one could be read, so the refusal can
// name it.
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
	switch kinds(req) {
	case 1:
	case 0:
		return req, badRequest("a request has one of watch, closeWatch and progress")
	default:
		return req, badRequest("a request has one of watch, closeWatch and progress, not several")
	}
	if p := req.Progress; p != nil {
		if n := len(p.Token); n == 0 || n > v1alpha1.MaxProgressTokenLength {
			return req, badRequest(fmt.Sprintf("progress: the token is %d bytes; it must be 1 to %d", n, v1alpha1.MaxProgressTokenLength))
		}
	}
	return req, nil
}

// kinds counts what req asks for: one of watch, closeWatch and progress
// in a valid request.
func kinds(req v1alpha1.WatchRequest) int {
	n := 0
	for _, set := range []bool{req.Watch != nil, req.CloseWatch != nil, req.Progress != nil} {
		if set {
			n++
		}
	}
	return n
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
	case metav1.StatusReasonUnauthorized:
		return "unauthorized"
	}
	return "other"
}
