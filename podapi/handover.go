package podapi

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
)

// maxBackoff caps the wait between two attempts at one pod after a
// refusal; unreachableBackoff after no answer, so that a pod waiting for
// kube-apiserver to come up is handed over soon after it does.
const (
	maxBackoff         = 5 * time.Minute
	unreachableBackoff = 30 * time.Second
)

// runHandover tries every stored pod each HandoverInterval, until ctx
// ends. See step.
func (a *API) runHandover(ctx context.Context) {
	t := time.NewTicker(a.cfg.HandoverInterval)
	defer t.Stop()
	for {
		for _, r := range a.store.List() {
			a.step(ctx, r)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// step moves one pod along its handover:
//
//	Local, HandoverFailed: a dry-run create of the API pod, as the
//	    handover identity, proves that kube-apiserver is up and would
//	    accept it (authorization, admission, validation); only then does
//	    the pod stop being served (HandingOver). An existing API pod that
//	    this endpoint created (a crash after the create) is adopted.
//	HandingOver: once the kubelet has fetched its pods without this one
//	    and its mirror pod (<pod>-<node>, which holds the name) is gone,
//	    the API pod is created, bound to the node (HandedOver). Past
//	    HandoverTimeout the pod is served locally again (HandoverFailed).
//	HandedOver: when the API pod is gone, deleted in the API, the
//	    record goes too.
//
// A refusal by kube-apiserver is HandoverFailed with its message; no
// answer at all leaves the state as it is with the error as Reason. Both
// back off.
func (a *API) step(ctx context.Context, r Record) {
	uid := string(r.Pod.UID)
	p := a.progress(uid)
	if time.Now().Before(p.next) {
		return
	}
	pods, ns := a.client, r.Pod.Namespace
	switch r.State {
	case StateLocal, StateHandoverFailed:
		_, err := pods.Create(ctx, a.apiPod(r), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			a.failed(r, p, "dry-run create of the API pod", err)
			return
		}
		existing, err := pods.Get(ctx, ns, r.Pod.Name)
		switch {
		case err == nil && existing.Annotations[corev1.MirrorPodAnnotationKey] == "":
			if existing.Annotations[annotationUID] == uid {
				a.handedOver(r, p, existing)
				return
			}
			a.failed(r, p, "", apierrors.NewAlreadyExists(podsResource, existing.Namespace+"/"+existing.Name))
			return
		case err != nil && !apierrors.IsNotFound(err):
			a.failed(r, p, "read the API pod", err)
			return
		}
		a.setState(r, StateHandingOver, "waiting for the kubelet to stop the static pod and delete its mirror pod")
		// Read after the change: a fetch numbered above mark started
		// after it, so it served the kubelet no longer this pod.
		p.mark, p.since = a.fetchSeq.Load(), time.Now()
		handovers.WithLabelValues("started").Inc()
		klog.InfoS("Pod API handing a pod over: no longer served to the kubelet", "pod", klog.KObj(&r.Pod), "uid", uid)
	case StateHandingOver:
		if p.since.IsZero() { // the endpoint restarted meanwhile
			p.mark, p.since = a.fetchSeq.Load(), time.Now()
		}
		if time.Since(p.since) > a.cfg.HandoverTimeout {
			handovers.WithLabelValues("timeout").Inc()
			a.failed(r, p, "", fmt.Errorf("the kubelet did not fetch its pods and delete the mirror pod within %s", a.cfg.HandoverTimeout))
			return
		}
		if a.fetchDone.Load() <= p.mark {
			return // the kubelet has not seen the pod go yet
		}
		existing, err := pods.Get(ctx, ns, r.Pod.Name)
		switch {
		case err == nil && existing.Annotations[corev1.MirrorPodAnnotationKey] != "":
			return // the kubelet deletes it at its next housekeeping
		case err == nil && existing.Annotations[annotationUID] == uid:
			a.handedOver(r, p, existing)
			return
		case err == nil:
			a.failed(r, p, "", apierrors.NewAlreadyExists(podsResource, existing.Namespace+"/"+existing.Name))
			return
		case !apierrors.IsNotFound(err):
			a.failed(r, p, "read the API pod", err)
			return
		}
		created, err := pods.Create(ctx, a.apiPod(r), metav1.CreateOptions{})
		if err != nil {
			if !apierrors.IsAlreadyExists(err) {
				a.failed(r, p, "create the API pod", err)
			}
			return
		}
		handoverSeconds.Observe(time.Since(p.since).Seconds())
		a.handedOver(r, p, created)
	case StateHandedOver:
		existing, err := pods.Get(ctx, ns, r.Pod.Name)
		if err == nil && existing.UID == r.APIUID {
			p.next = time.Now().Add(a.cfg.HandoverInterval)
			return
		}
		if err != nil && !apierrors.IsNotFound(err) {
			a.failed(r, p, "read the API pod", err)
			return
		}
		if _, err := a.store.Delete(r.Pod.UID); err != nil {
			klog.ErrorS(err, "Pod API could not remove the record of a pod deleted in the API", "pod", klog.KObj(&r.Pod), "uid", uid)
			return
		}
		a.forget(uid)
		a.updateGauge()
		handovers.WithLabelValues("removed").Inc()
		klog.InfoS("Pod API forgot a pod deleted in the API", "pod", klog.KObj(&r.Pod), "uid", uid, "apiUID", r.APIUID)
	}
}

// apiPod is the pod to create in the API: the stored one, bound to this
// node, with the stored UID in an annotation (the API assigns its own).
func (a *API) apiPod(r Record) *corev1.Pod {
	annotations := maps.Clone(r.Pod.Annotations)
	annotations[annotationUID] = string(r.Pod.UID)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: r.Pod.Name, Namespace: r.Pod.Namespace,
			Labels: maps.Clone(r.Pod.Labels), Annotations: annotations},
		Spec: *r.Pod.Spec.DeepCopy(),
	}
	pod.Spec.NodeName = a.cfg.NodeName
	return pod
}

func (a *API) handedOver(r Record, p *progress, api *corev1.Pod) {
	r.APIUID = api.UID
	p.failures, p.next = 0, time.Now().Add(a.cfg.HandoverInterval)
	a.setState(r, StateHandedOver, "")
	handovers.WithLabelValues("created").Inc()
	klog.InfoS("Pod API handed a pod over to kube-apiserver", "pod", klog.KObj(&r.Pod), "uid", r.Pod.UID, "apiUID", api.UID)
}

// failed records err and backs off. A refusal (a Status from
// kube-apiserver) is HandoverFailed and the pod is served locally;
// without an answer the state stays and only the reason changes.
func (a *API) failed(r Record, p *progress, doing string, err error) {
	if doing != "" {
		err = fmt.Errorf("%s: %w", doing, err)
	}
	p.failures++
	var status apierrors.APIStatus
	refused := errors.As(err, &status) || r.State == StateHandingOver
	backoff := min(a.cfg.HandoverInterval<<min(p.failures, 10), maxBackoff)
	if !refused {
		backoff = min(backoff, unreachableBackoff)
	}
	p.next = time.Now().Add(backoff)
	state, result := r.State, "unreachable"
	// A pod handed over is the API's: it is never served locally again.
	if refused && r.State != StateHandedOver {
		state, result = StateHandoverFailed, "refused"
		p.since = time.Time{}
	}
	handovers.WithLabelValues(result).Inc()
	klog.ErrorS(err, "Pod API handover", "pod", klog.KObj(&r.Pod), "uid", r.Pod.UID, "state", state, "retryIn", backoff)
	a.setState(r, state, err.Error())
}

// setState persists a change of state or reason.
func (a *API) setState(r Record, state State, reason string) {
	if r.State == state && r.Reason == reason {
		return
	}
	from := r.State
	if r.State != state {
		r.Since = metav1.Now()
	}
	r.State, r.Reason = state, reason
	if _, err := a.store.Modify(r.Pod.UID, func(cur *Record) bool {
		// r was read before the step's calls to kube-apiserver; a change
		// of state made meanwhile (a quarantine, a deletion) wins, and
		// the kubelet's watch may have noted the pod taken.
		if cur.State != from {
			return false
		}
		taken := cur.TakenByKubelet
		*cur = r
		if cur.TakenByKubelet == nil {
			cur.TakenByKubelet = taken
		}
		return true
	}); err != nil {
		klog.ErrorS(err, "Pod API could not record a pod's state", "pod", klog.KObj(&r.Pod), "uid", r.Pod.UID, "state", state)
		return
	}
	a.updateGauge()
}

func (a *API) progress(uid string) *progress {
	a.mu.Lock()
	defer a.mu.Unlock()
	p, ok := a.handover[uid]
	if !ok {
		p = &progress{}
		a.handover[uid] = p
	}
	return p
}

func (a *API) forget(uid string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.handover, uid)
}

func (a *API) updateGauge() {
	counts := map[State]float64{StateLocal: 0, StateHandingOver: 0, StateHandedOver: 0, StateHandoverFailed: 0, StateQuarantined: 0}
	for _, r := range a.store.List() {
		counts[r.State]++
	}
	for s, n := range counts {
		stored.WithLabelValues(string(s)).Set(n)
	}
}
