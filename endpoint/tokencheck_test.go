package endpoint

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// TestTokenCheckReadsKubeAPIServersAnswer: only a 401 refuses the token;
// any other Status kube-apiserver chose to give came after it
// authenticated the token; no answer, a 5xx or a 429 says nothing, and
// the hub serves the read.
func TestTokenCheckReadsKubeAPIServersAnswer(t *testing.T) {
	review := schema.GroupResource{Group: "authentication.k8s.io", Resource: "selfsubjectreviews"}
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"created", nil, tokenAccepted},
		{"401", apierrors.NewUnauthorized("Unauthorized"), tokenRefused},
		{"401 wrapped", fmt.Errorf("ask: %w", apierrors.NewUnauthorized("Unauthorized")), tokenRefused},
		{"403: authenticated, not allowed", apierrors.NewForbidden(review, "", errors.New("no")), tokenAccepted},
		{"404: authenticated, API off", apierrors.NewNotFound(review, ""), tokenAccepted},
		{"429", apierrors.NewTooManyRequests("busy", 1), tokenError},
		{"500", apierrors.NewInternalError(errors.New("etcd")), tokenError},
		{"503", apierrors.NewServiceUnavailable("shutting down"), tokenError},
		{"timeout", fmt.Errorf("ask: %w", context.DeadlineExceeded), tokenError},
		{"unreachable", &net.OpError{Op: "dial", Err: errors.New("connection refused")}, tokenError},
		{"anything else", errors.New("garbled answer"), tokenError},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tokenResult(tc.err); got != tc.want {
				t.Errorf("tokenResult(%v) = %s, want %s", tc.err, got, tc.want)
			}
		})
	}
}
