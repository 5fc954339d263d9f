package podapi

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"time"

	"golang.org/x/net/http2"
	"google.golang.org/protobuf/encoding/protowire"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
)

// podResources asks the kubelet which pods it has admitted, through its
// PodResources API: a gRPC service on a root-only unix socket in the
// kubelet's root directory (<root-dir>/pod-resources/kubelet.sock),
// served from the kubelet's own pod manager, with no API server and no
// authentication beyond the socket's mode. Its List answers the active
// pods the kubelet took from all its sources, by namespace and name, as
// soon as it took them: before any sandbox, volume or image, and also on
// a node whose network plugin is not ready yet (when the kubelet does not
// start pods that are not on the host network). The alternatives cost
// more or see less: the kubelet's /pods needs its authorization webhook,
// which needs the API server; <root-dir>/pods/<uid> and the runtime's
// sandboxes appear only once the pod starts, after the network check.
//
// It makes that one unary call itself, gRPC's framing over HTTP/2
// without TLS (golang.org/x/net/http2, which client-go links anyway) and
// the two fields it reads decoded with protowire, rather than through
// grpc-go and the generated client: the endpoint runs on every node,
// where every package it links is resident memory (docs/benchmarks.md,
// "The node endpoint's footprint").
type podResources struct {
	transport *http2.Transport
	client    *http.Client
}

// listTimeout bounds one List; the kubelet answers from memory.
const listTimeout = 5 * time.Second

// listMethod is PodResourcesLister's List (k8s.io/kubelet
// pkg/apis/podresources/v1, api.proto).
const listMethod = "/v1.PodResourcesLister/List"

// maxListResponse is grpc-go's default limit on a message a client
// receives, which the generated client had.
const maxListResponse = 4 << 20

func newPodResources(socket string) (*podResources, error) {
	if socket == "" {
		return nil, errors.New("kubelet PodResources socket: no path")
	}
	// Dialled at each call's need, not here: a kubelet that is not up
	// yet is an error of List, not of the endpoint's start.
	t := &http2.Transport{
		AllowHTTP: true,
		DialTLSContext: func(ctx context.Context, _, _ string, _ *tls.Config) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socket)
		},
	}
	return &podResources{transport: t, client: &http.Client{Transport: t}}, nil
}

// Admitted returns the namespace/name of every pod the kubelet has.
func (p *podResources) Admitted(ctx context.Context) (sets.Set[types.NamespacedName], error) {
	ctx, cancel := context.WithTimeout(ctx, listTimeout)
	defer cancel()
	resp, err := p.call(ctx, listMethod, nil)
	if err != nil {
		return nil, fmt.Errorf("list the kubelet's pods (PodResources): %w", err)
	}
	pods, err := parseListResponse(resp)
	if err != nil {
		return nil, fmt.Errorf("list the kubelet's pods (PodResources): %w", err)
	}
	return pods, nil
}

// call makes the unary gRPC call method with the encoded request req and
// returns the encoded response.
func (p *podResources) call(ctx context.Context, method string, req []byte) ([]byte, error) {
	// A message is a byte saying whether it is compressed (not here), its
	// length (4 bytes, big endian), then itself.
	framed := make([]byte, 5+len(req))
	binary.BigEndian.PutUint32(framed[1:5], uint32(len(req)))
	copy(framed[5:], req)
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://localhost"+method, bytes.NewReader(framed))
	if err != nil {
		return nil, err
	}
	hreq.Header.Set("Content-Type", "application/grpc")
	hreq.Header.Set("TE", "trailers")
	resp, err := p.client.Do(hreq)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("HTTP status %s", resp.Status)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, 5+maxListResponse+1))
	if err != nil {
		return nil, err
	}
	// The status comes in the trailers, or in the headers of a response
	// that has nothing else (an error before any message).
	status, message := resp.Trailer.Get("Grpc-Status"), resp.Trailer.Get("Grpc-Message")
	if status == "" {
		status, message = resp.Header.Get("Grpc-Status"), resp.Header.Get("Grpc-Message")
	}
	if status != "0" {
		if m, err := url.PathUnescape(message); err == nil {
			message = m
		}
		return nil, fmt.Errorf("gRPC status %q: %s", status, message)
	}
	if len(body) < 5 {
		return nil, fmt.Errorf("a response of %d bytes: no message", len(body))
	}
	if body[0] != 0 {
		return nil, errors.New("a compressed response, which was not asked for")
	}
	n := binary.BigEndian.Uint32(body[1:5])
	if n > maxListResponse {
		return nil, fmt.Errorf("a response of %d bytes, over the %d taken", n, maxListResponse)
	}
	if int(n) != len(body)-5 {
		return nil, fmt.Errorf("a response of %d bytes framed as %d", len(body)-5, n)
	}
	return body[5:], nil
}

// parseListResponse reads the namespace and name of each PodResources
// (field 1) of a ListPodResourcesResponse, skipping every other field.
func parseListResponse(b []byte) (sets.Set[types.NamespacedName], error) {
	out := sets.New[types.NamespacedName]()
	err := eachField(b, func(num protowire.Number, typ protowire.Type, v []byte) error {
		if num != 1 || typ != protowire.BytesType {
			return nil
		}
		var pod types.NamespacedName
		if err := eachField(v, func(num protowire.Number, typ protowire.Type, v []byte) error {
			switch {
			case num == 1 && typ == protowire.BytesType:
				pod.Name = string(v)
			case num == 2 && typ == protowire.BytesType:
				pod.Namespace = string(v)
			}
			return nil
		}); err != nil {
			return fmt.Errorf("pod_resources: %w", err)
		}
		out.Insert(pod)
		return nil
	})
	return out, err
}

// eachField calls f with each field of the encoded message b; v is the
// content of a length-delimited field, nil for others.
func eachField(b []byte, f func(num protowire.Number, typ protowire.Type, v []byte) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return fmt.Errorf("a field's tag: %w", protowire.ParseError(n))
		}
		b = b[n:]
		var v []byte
		if typ == protowire.BytesType {
			v, n = protowire.ConsumeBytes(b)
		} else {
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return fmt.Errorf("field %d: %w", num, protowire.ParseError(n))
		}
		b = b[n:]
		if err := f(num, typ, v); err != nil {
			return err
		}
	}
	return nil
}

func (p *podResources) Close() error {
	p.transport.CloseIdleConnections()
	return nil
}
