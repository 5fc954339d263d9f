package endpoint

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
)

// readyProbeInterval is how long kube-apiserver's answer to the
// endpoint's /readyz probe is kept. /readyz is open to anyone who reaches
// the port (the metrics port listens on the network), and each probe is a
// request to kube-apiserver as the node, counted in the nodes' priority
// level: whatever the rate of calls, kube-apiserver sees at most one
// probe per interval per node. 10 s is the static pod's readiness period
// (nodeinstall's probe), so the kubelet sees an answer no staler than its
// own probing would make it.
const readyProbeInterval = 10 * time.Second

// readyProbeTimeout bounds one probe: kube-apiserver answers /readyz from
// memory; slower than this it is not a path worth sending the kubelet to.
const readyProbeTimeout = 2 * time.Second

// readiness answers /readyz: ready while the hub connection is up (state
// the endpoint has), or else while kube-apiserver answered its own
// /readyz to the node within the last readyProbeInterval. Callers never
// see kube-apiserver's error: the port is unauthenticated, and the text
// may say more about the control plane than a stranger should learn. It
// goes to the log, once per change.
type readiness struct {
	hub *Hub // nil: no hub configured
	api rest.Interface
	// view is the copy of the node's view (nil without a hub), ready to
	// serve offline for offlineMaxAge.
	view          *viewFollower
	offlineMaxAge time.Duration
	probe         sync.Mutex // held while one caller probes; the others wait for its answer

	mu  sync.Mutex
	at  time.Time // of the last probe; zero before the first, guarded by mu
	err error     // the last probe's answer, guarded by mu
}

func newReadiness(hub *Hub, api rest.Interface) *readiness {
	return &readiness{hub: hub, api: api}
}

func (r *readiness) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	if r.hub != nil && r.hub.Connected() {
		if r.view != nil && r.view.catchingUp() {
			// For the few seconds the copy takes to catch up after a
			// connection: a kubelet started now would read from hub
			// channels it then has to leave for the copy.
			http.Error(w, "not ready: catching up with the node's view", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok: hub connected"))
		return
	}
	if r.apiServerReady() != nil {
		if r.view != nil {
			if age, refused := r.view.servableOffline(r.offlineMaxAge); refused == "" {
				// Ready for the kubelet, which the copy serves; the
				// text says how old what it reads is.
				fmt.Fprintf(w, "ok: offline, serving a %d-second-old copy of the node's view (no hub connection, kube-apiserver unreachable)", int(age.Seconds()))
				return
			}
		}
		http.Error(w, "not ready: no hub connection, and kube-apiserver's /readyz did not answer ok (see the endpoint's log)", http.StatusServiceUnavailable)
		return
	}
	_, _ = w.Write([]byte("ok: through kube-apiserver"))
}

// apiServerReady returns the answer of the last probe of kube-apiserver's
// /readyz, probing again first if it is older than readyProbeInterval.
// Concurrent callers share one probe. The probe runs on its own context:
// a caller that leaves does not fail it for the others.
func (r *readiness) apiServerReady() error {
	if fresh, err := r.cached(); fresh {
		return err
	}
	r.probe.Lock()
	defer r.probe.Unlock()
	if fresh, err := r.cached(); fresh {
		return err // another caller probed while this one waited
	}
	ctx, cancel := context.WithTimeout(context.Background(), readyProbeTimeout)
	defer cancel()
	err := r.api.Get().AbsPath("/readyz").Do(ctx).Error()
	result := "ok"
	if err != nil {
		result = "error"
	}
	readyProbes.WithLabelValues(result).Inc()
	r.mu.Lock()
	changed := r.at.IsZero() || (err == nil) != (r.err == nil)
	r.at, r.err = time.Now(), err
	r.mu.Unlock()
	if changed {
		if err != nil {
			klog.ErrorS(err, "kube-apiserver's /readyz did not answer ok to the node; not ready while the hub is down too")
		} else {
			klog.InfoS("kube-apiserver's /readyz answers ok to the node")
		}
	}
	return err
}

// cached is the last probe's answer and whether it is recent enough.
func (r *readiness) cached() (fresh bool, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return !r.at.IsZero() && time.Since(r.at) < readyProbeInterval, r.err
}
