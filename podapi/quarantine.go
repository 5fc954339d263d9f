package podapi

import (
	"context"
	"fmt"
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/klog/v2"
)

// The kubelet's HTTP pod source takes the served PodList whole or not at
// all: one pod that fails the kubelet's own decoding, defaulting or
// validation (pkg/kubelet/config/common.go tryDecodePodList) makes it
// drop the list and keep the pods of its last good one, and it does not
// parse the same bytes twice (http.go). One pod the Pod API accepted
// and the kubelet refuses (a gap in validate.go, a kubelet of another
// version, a record written by an older endpoint) would freeze every
// Pod API pod on the node: none added, none removed. The kubelet says so
// only in its log.
//
// So the endpoint watches what the kubelet took (kubeletView, the
// kubelet's PodResources list) against what it served: a served pod the
// kubelet still does not have after it fetched twice more since the
// first list that held it (and KubeletTakeTimeout passed) is taken to
// have been refused with its list, and the newest such pod is
// quarantined: no longer served, state Quarantined with the reason. The
// kubelet then parses the list without it and takes the others. When
// older pods of the same lists were not taken either, the blame is not
// certain: the quarantine is OnSuspicion and the pod is served again,
// alone, once the kubelet has taken every other pod; if it is the
// culprit, it is quarantined again, then for certain. A pod once taken
// is never judged again.

// kubeletView is what the quarantine needs of the kubelet.
type kubeletView interface {
	// Admitted returns the pods the kubelet has, from every source.
	Admitted(ctx context.Context) (sets.Set[types.NamespacedName], error)
}

// kubeletCheckInterval is how often served pods not yet taken are
// checked against the kubelet. A check is one List from the kubelet's
// memory, made only while such a pod exists; the decision needs two more
// fetches anyway (20 s each by default), so a second adds little.
const kubeletCheckInterval = time.Second

// firstServed is the first fetch that served a pod, and when.
type firstServed struct {
	seq int64
	at  time.Time
}

// noteServed records, for a fetch numbered seq, the pods it served: a pod
// keeps the first fetch of its current run of being served.
func (a *API) noteServed(seq int64, uids []types.UID) {
	a.servedMu.Lock()
	defer a.servedMu.Unlock()
	next := make(map[types.UID]firstServed, len(uids))
	for _, uid := range uids {
		if f, ok := a.served[uid]; ok {
			next[uid] = f
		} else {
			next[uid] = firstServed{seq: seq, at: time.Now()}
		}
	}
	a.served = next
}

func (a *API) firstServedOf(uid types.UID) (firstServed, bool) {
	a.servedMu.Lock()
	defer a.servedMu.Unlock()
	f, ok := a.served[uid]
	return f, ok
}

func (a *API) forgetServed(uid types.UID) {
	a.servedMu.Lock()
	defer a.servedMu.Unlock()
	delete(a.served, uid)
}

func (a *API) runKubeletWatch(ctx context.Context) {
	t := time.NewTicker(kubeletCheckInterval)
	defer t.Stop()
	for {
		a.checkKubelet(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// pending is a served pod the kubelet has not been seen to take.
type pending struct {
	r     Record
	first firstServed
	known bool // first is set: a fetch has served it
}

// checkKubelet is one round: note the pods the kubelet took, quarantine
// at most one it refused, or release one quarantined on suspicion.
func (a *API) checkKubelet(ctx context.Context) {
	records := a.store.List()
	var waiting []pending
	for _, r := range records {
		if r.State.served() && r.TakenByKubelet == nil {
			f, ok := a.firstServedOf(r.Pod.UID)
			waiting = append(waiting, pending{r: r, first: f, known: ok})
		}
	}
	if len(waiting) == 0 {
		a.releaseOne(records)
		return
	}
	admitted, err := a.kubelet.Admitted(ctx)
	if err != nil {
		// No answer, no decision: quarantining on a guess would stop pods
		// that run.
		kubeletDecisions.WithLabelValues("error").Inc()
		klog.V(2).InfoS("Pod API could not ask the kubelet which pods it has", "err", err)
		return
	}
	kubeletDecisions.WithLabelValues("checked").Inc()
	var stalled, untaken []pending
	for _, w := range waiting {
		if admitted.Has(types.NamespacedName{Namespace: w.r.Pod.Namespace, Name: w.r.Pod.Name}) {
			a.markTaken(w.r)
			continue
		}
		untaken = append(untaken, w)
		if w.known && a.fetchDone.Load() >= w.first.seq+2 && time.Since(w.first.at) >= a.cfg.KubeletTakeTimeout {
			stalled = append(stalled, w)
		}
	}
	if len(untaken) == 0 {
		a.releaseOne(a.store.List())
		return
	}
	if len(stalled) == 0 {
		return
	}
	// The newest stalled pod: the first list the kubelet refused held it,
	// and any pod served only later cannot be the cause.
	pick := slices.MaxFunc(stalled, func(x, y pending) int {
		if x.first.seq != y.first.seq {
			return int(x.first.seq - y.first.seq)
		}
		return x.r.Pod.CreationTimestamp.Compare(y.r.Pod.CreationTimestamp.Time)
	})
	suspects := 0
	for _, w := range untaken {
		if w.known && w.first.seq <= pick.first.seq {
			suspects++
		}
	}
	a.quarantine(pick, suspects > 1)
}

func (a *API) markTaken(r Record) {
	now := metav1.Now()
	wrote, err := a.store.Modify(r.Pod.UID, func(cur *Record) bool {
		if cur.TakenByKubelet != nil {
			return false
		}
		cur.TakenByKubelet = &now
		return true
	})
	if err != nil {
		klog.ErrorS(err, "Pod API could not record that the kubelet took a pod", "pod", klog.KObj(&r.Pod), "uid", r.Pod.UID)
		return
	}
	if wrote {
		kubeletDecisions.WithLabelValues("taken").Inc()
		klog.V(2).InfoS("Pod API: the kubelet took a pod", "pod", klog.KObj(&r.Pod), "uid", r.Pod.UID)
	}
}

func (a *API) quarantine(p pending, onSuspicion bool) {
	fetches := a.fetchDone.Load() - p.first.seq
	reason := fmt.Sprintf("the kubelet fetched %d pod lists holding this pod over %s and took none: it refuses a whole list when one pod in it fails its own checks, "+
		"and keeps running its last good list. Taken out of the list so that the other pods run; the kubelet's log says why "+
		"(\"Failed to read pods from URL\"). DELETE it and POST a corrected pod.", fetches, time.Since(p.first.at).Round(time.Second))
	decision := "quarantined"
	if onSuspicion {
		decision = "quarantined_on_suspicion"
		reason += " Other pods of those lists were not taken either: it will be served again, alone, once the kubelet has taken them."
	}
	wrote, err := a.store.Modify(p.r.Pod.UID, func(cur *Record) bool {
		if !cur.State.served() || cur.TakenByKubelet != nil {
			return false // changed meanwhile
		}
		cur.State, cur.Reason, cur.Since, cur.OnSuspicion = StateQuarantined, reason, metav1.Now(), onSuspicion
		return true
	})
	if err != nil {
		klog.ErrorS(err, "Pod API could not quarantine a pod", "pod", klog.KObj(&p.r.Pod), "uid", p.r.Pod.UID)
		return
	}
	if !wrote {
		return
	}
	a.forgetServed(p.r.Pod.UID)
	a.updateGauge()
	kubeletDecisions.WithLabelValues(decision).Inc()
	klog.InfoS("Pod API quarantined a pod the kubelet does not take", "pod", klog.KObj(&p.r.Pod), "uid", p.r.Pod.UID,
		"fetches", fetches, "onSuspicion", onSuspicion)
}

// releaseOne serves again the pod quarantined on suspicion the longest
// ago, once every served pod is taken: alone, so that the kubelet's
// answer to it is certain.
func (a *API) releaseOne(records []Record) {
	var oldest *Record
	for i := range records {
		r := &records[i]
		if r.State == StateQuarantined && r.OnSuspicion && (oldest == nil || r.Since.Before(&oldest.Since)) {
			oldest = r
		}
	}
	if oldest == nil {
		return
	}
	wrote, err := a.store.Modify(oldest.Pod.UID, func(cur *Record) bool {
		if cur.State != StateQuarantined || !cur.OnSuspicion {
			return false
		}
		cur.State, cur.Since, cur.OnSuspicion = StateLocal, metav1.Now(), false
		cur.Reason = "served again after a quarantine on suspicion: the kubelet has taken the other pods"
		return true
	})
	if err != nil {
		klog.ErrorS(err, "Pod API could not release a quarantined pod", "pod", klog.KObj(&oldest.Pod), "uid", oldest.Pod.UID)
		return
	}
	if wrote {
		a.forgetServed(oldest.Pod.UID)
		a.updateGauge()
		kubeletDecisions.WithLabelValues("released").Inc()
		klog.InfoS("Pod API serves a pod quarantined on suspicion again", "pod", klog.KObj(&oldest.Pod), "uid", oldest.Pod.UID)
	}
}
