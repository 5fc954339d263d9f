package authorizer

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
)

// DefaultPeerTimeout bounds one forwarded review. The owner answers an
// allow in microseconds, but may refresh its graph before a refusal
// (refresh.go: a consistent list of the node's pods, a few hundred
// milliseconds on a quiet type, more on a loaded replica), so a bound
// tighter than that would give up on healthy owners. A peer that is down
// refuses the connection at once and costs nothing; only one that hangs
// costs the whole bound. Two of them (owner, then secondary) and the
// consistent list (DefaultConsistentTimeout) stay within the 3 s
// webhook timeout of the shipped AuthorizationConfiguration, with half a
// second left for kube-apiserver's own round trip.
const DefaultPeerTimeout = 750 * time.Millisecond

// Peer failures, as the metric names them.
var (
	errPeerTimeout     = errors.New("no answer within the deadline")
	errPeerUnreachable = errors.New("unreachable")
	errPeerStatus      = errors.New("answered with an error status")
	errPeerMalformed   = errors.New("answered with something other than a SubjectAccessReview")
)

// Peers forwards SubjectAccessReviews to the replicas that hold a node.
type Peers struct {
	// Client reaches the other replicas over TLS with this replica's
	// own credentials (the hub's ServiceAccount token) and the CA that
	// signed their serving certificates. The receivers authenticate and
	// authorize it as any caller of the webhook path.
	Client *http.Client
	// Self is this replica's name, sent in ForwardedHeader.
	Self string
	// Timeout bounds one forwarded review (DefaultPeerTimeout if zero).
	Timeout time.Duration
}

// forward posts body, the review as kube-apiserver sent it, to the
// webhook of the replica at base, marked as forwarded, and returns the
// replica's answer as it gave it.
func (p *Peers) forward(ctx context.Context, base string, body []byte) (*authorizationv1.SubjectAccessReviewStatus, error) {
	timeout := p.Timeout
	if timeout <= 0 {
		timeout = DefaultPeerTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+WebhookPath, bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("forward to %s: %w: %w", base, errPeerUnreachable, err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	req.Header.Set(ForwardedHeader, p.Self)
	resp, err := p.Client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("forward to %s: %w: %w", base, errPeerTimeout, err)
		}
		return nil, fmt.Errorf("forward to %s: %w: %w", base, errPeerUnreachable, err)
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(io.LimitReader(resp.Body, MaxReviewBytes+1))
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("forward to %s: %w: %w", base, errPeerTimeout, err)
		}
		return nil, fmt.Errorf("forward to %s: reading the answer: %w: %w", base, errPeerUnreachable, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("forward to %s: %w: %s", base, errPeerStatus, resp.Status)
	}
	review := &authorizationv1.SubjectAccessReview{}
	if err := json.Unmarshal(answer, review); err != nil || len(answer) > MaxReviewBytes {
		return nil, fmt.Errorf("forward to %s: %w: %w", base, errPeerMalformed, err)
	}
	if review.APIVersion != authorizationv1.SchemeGroupVersion.String() || review.Kind != "SubjectAccessReview" {
		return nil, fmt.Errorf("forward to %s: %w: apiVersion %q, kind %q", base, errPeerMalformed, review.APIVersion, review.Kind)
	}
	return &review.Status, nil
}

// peerFailure is a forwarding error's label for the metric.
func peerFailure(err error) string {
	switch {
	case errors.Is(err, errPeerTimeout):
		return "timeout"
	case errors.Is(err, errPeerStatus):
		return "status"
	case errors.Is(err, errPeerMalformed):
		return "malformed"
	}
	return "unreachable"
}
