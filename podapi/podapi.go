package podapi

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
)

// Annotations the Pod API sets. The kubelet overwrites
// kubernetes.io/config.source with the source it read a pod from ("http"
// for staticPodURL: pkg/kubelet/config/config.go), so the seed's
// kubernetes.io/config.source: kubelet-api cannot survive; the tag is
// kept in an annotation of nodeproxy's own.
const (
	// annotationSource marks a pod created through the Pod API, on the
	// stored pod, the static pod, its mirror pod and the API pod.
	annotationSource = "podapi.nodeproxy.io/source"
	sourceValue      = "kubelet-api"
	// annotationUID is the stored pod's UID, on the API pod: how a
	// restarted endpoint recognises the API pod it created.
	annotationUID = "podapi.nodeproxy.io/uid"
)

// Config is what the Pod API needs.
type Config struct {
	// NodeName is this node: pods are named <pod>-<NodeName> and bound to it.
	NodeName string
	// StateDir holds the stored pods, one file each.
	StateDir string
	// AllowedUIDs are the local users (SO_PEERCRED of the unix socket)
	// that may call the API.
	AllowedUIDs []uint32
	// KubeletToken is the bearer token the kubelet sends with its fetch
	// of the pod source (staticPodURLHeader).
	KubeletToken string
	// Handover reaches kube-apiserver as an identity allowed to create
	// pods bound to this node (not the node's own: NodeRestriction lets a
	// node create only mirror pods). Nil: pods stay local.
	Handover *rest.Config
	// HandoverInterval is how often stored pods are tried; failures back
	// off from it up to maxBackoff.
	HandoverInterval time.Duration
	// HandoverTimeout bounds the wait for the kubelet to let go of a
	// static pod (fetch the source without it and delete its mirror pod);
	// past it the pod is served locally again.
	HandoverTimeout time.Duration
	// KubeletPodResources is the kubelet's PodResources socket, where the
	// endpoint sees which pods the kubelet took (see quarantine.go).
	// Empty: a pod the kubelet refuses is never quarantined.
	KubeletPodResources string
	// KubeletTakeTimeout is how long, at least, a served pod may stay
	// untaken by the kubelet (which must also have fetched twice more)
	// before it is quarantined.
	KubeletTakeTimeout time.Duration
	// AdmitBinary is the helper that checks posted pods (admit.go);
	// empty: AdmitBinary beside the running binary.
	AdmitBinary string
}

// API is the Pod API of one node.
type API struct {
	cfg    Config
	store  *Store
	client *apiPods // nil: no handover
	admit  *admitter
	// kubelet tells which pods the kubelet took; nil: no quarantine.
	kubelet      kubeletView
	closeKubelet func() error
	// served is, for each pod the last fetch served, the first fetch of
	// its current run of being served (quarantine.go).
	servedMu sync.Mutex
	served   map[types.UID]firstServed

	// fetchSeq numbers the kubelet's fetches as they start; fetchDone is
	// the highest number whose answer was written. A pod no longer served
	// at sequence m is gone from the kubelet's view once fetchDone > m.
	fetchSeq, fetchDone atomic.Int64

	mu sync.Mutex
	// handover holds each stored pod's progress in memory.
	handover map[string]*progress
}

// progress is the in-memory side of one pod's handover.
type progress struct {
	failures int
	next     time.Time
	// mark is fetchSeq when the pod stopped being served.
	mark int64
	// since is when the pod stopped being served.
	since time.Time
}

// New opens the store in cfg.StateDir.
func New(cfg Config) (*API, error) {
	if cfg.NodeName == "" {
		return nil, errors.New("pod API: the node name is required")
	}
	if cfg.KubeletToken == "" {
		return nil, errors.New("pod API: a token for the kubelet's fetches is required")
	}
	if cfg.HandoverInterval <= 0 {
		cfg.HandoverInterval = 10 * time.Second
	}
	if cfg.HandoverTimeout <= 0 {
		cfg.HandoverTimeout = 2 * time.Minute
	}
	if cfg.KubeletTakeTimeout <= 0 {
		cfg.KubeletTakeTimeout = 30 * time.Second
	}
	RegisterMetrics()
	s, err := OpenStore(cfg.StateDir)
	if err != nil {
		return nil, err
	}
	a := &API{cfg: cfg, store: s, handover: map[string]*progress{}, served: map[types.UID]firstServed{}}
	if a.admit, err = newAdmitter(context.Background(), cfg.AdmitBinary); err != nil {
		return nil, err
	}
	if cfg.Handover != nil {
		c := rest.CopyConfig(cfg.Handover)
		c.UserAgent = "nodeproxy-node/podapi"
		if a.client, err = newAPIPods(c); err != nil {
			return nil, fmt.Errorf("pod API handover client: %w", err)
		}
	}
	if cfg.KubeletPodResources != "" {
		pr, err := newPodResources(cfg.KubeletPodResources)
		if err != nil {
			return nil, err
		}
		a.kubelet, a.closeKubelet = pr, pr.Close
	}
	a.updateGauge()
	return a, nil
}

// Run serves the API on api (a unix socket, see ListenUnix), the
// kubelet's pod source on source, and hands pods over, until ctx ends.
func (a *API) Run(ctx context.Context, api, source net.Listener) error {
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return serveHTTP(ctx, api, a.Handler(), withPeerCred) })
	g.Go(func() error { return serveHTTP(ctx, source, a.SourceHandler(), nil) })
	if a.client != nil {
		g.Go(func() error { a.runHandover(ctx); return nil })
	} else {
		klog.InfoS("Pod API: no handover credential; pods stay local")
	}
	if a.kubelet != nil {
		g.Go(func() error { a.runKubeletWatch(ctx); return nil })
	} else {
		klog.InfoS("Pod API: no kubelet PodResources socket; a pod the kubelet refuses is not quarantined")
	}
	err := g.Wait()
	if a.closeKubelet != nil {
		_ = a.closeKubelet()
	}
	return err
}

func serveHTTP(ctx context.Context, ln net.Listener, h http.Handler, connContext func(context.Context, net.Conn) context.Context) error {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ConnContext: connContext,
		BaseContext: func(net.Listener) context.Context { return ctx }}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("pod API: serve on %s: %w", ln.Addr(), err)
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdown); err != nil {
		klog.ErrorS(err, "Shutting down the pod API", "address", ln.Addr().String())
	}
	return nil
}

// ListenUnix listens on a unix socket at path that only the process's
// own user can connect to (0600): the parent directory is created 0700 if
// missing, a stale socket is replaced, and the socket is made under a
// umask of 0177 so that it is never open to others, not even between
// bind and chmod.
func ListenUnix(path string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("pod API socket directory: %w", err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("remove stale pod API socket: %w", err)
	}
	old := syscall.Umask(0o177)
	ln, err := net.Listen("unix", path)
	syscall.Umask(old)
	if err != nil {
		return nil, fmt.Errorf("pod API socket: %w", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("pod API socket: %w", err)
	}
	return ln, nil
}
