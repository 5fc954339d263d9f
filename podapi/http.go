package podapi

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/google/uuid"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
)

// maxBody bounds a posted pod; kube-apiserver's own limit is 3 MiB, a
// bootstrap pod is a few KiB.
const maxBody = 1 << 20

var podsResource = schema.GroupResource{Resource: "pods"}

// StoredPodList is GET /pods: every stored pod with its state.
type StoredPodList struct {
	metav1.TypeMeta `json:",inline"`
	Items           []Record `json:"items"`
}

// Handler is the API: POST /pods, GET /pods, GET and DELETE /pods/<uid>.
// Only callers whose user is in AllowedUIDs are served (see
// withPeerCred); the socket's mode already keeps others out, this is the
// check that holds if the mode is ever widened.
func (a *API) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /pods", a.create)
	mux.HandleFunc("GET /pods", a.list)
	mux.HandleFunc("GET /pods/{uid}", a.get)
	mux.HandleFunc("DELETE /pods/{uid}", a.delete)
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		uid, ok := req.Context().Value(peerUIDKey{}).(uint32)
		if !ok || !slices.Contains(a.cfg.AllowedUIDs, uid) {
			caller := "unknown"
			if ok {
				caller = strconv.FormatUint(uint64(uid), 10)
			}
			klog.InfoS("Pod API refused a caller", "uid", caller, "method", req.Method, "path", req.URL.Path)
			requests.WithLabelValues(operation(req), "403").Inc()
			writeStatus(w, apierrors.NewForbidden(podsResource, "", fmt.Errorf("local user %s may not use the Pod API (allowed: %v)", caller, a.cfg.AllowedUIDs)))
			return
		}
		mux.ServeHTTP(w, req)
	})
}

func operation(req *http.Request) string {
	switch {
	case req.Method == http.MethodPost:
		return "create"
	case req.Method == http.MethodDelete:
		return "delete"
	case strings.Trim(req.URL.Path, "/") == "pods":
		return "list"
	}
	return "get"
}

type peerUIDKey struct{}

// withPeerCred puts the connecting process's user (SO_PEERCRED) in the
// connection's context.
func withPeerCred(ctx context.Context, c net.Conn) context.Context {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return ctx
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return ctx
	}
	var uid uint32
	var credErr error
	found := false
	if err := raw.Control(func(fd uintptr) {
		var cred *ucred
		cred, credErr = getPeerCred(int(fd))
		if credErr == nil {
			uid, found = cred.Uid, true
		}
	}); err != nil || credErr != nil || !found {
		return ctx
	}
	return context.WithValue(ctx, peerUIDKey{}, uid)
}

func (a *API) create(w http.ResponseWriter, req *http.Request) {
	code := "201"
	defer func() { requests.WithLabelValues("create", code).Inc() }()
	fail := func(err *apierrors.StatusError) {
		code = strconv.Itoa(int(err.Status().Code))
		writeStatus(w, err)
	}
	body, err := io.ReadAll(io.LimitReader(req.Body, maxBody+1))
	if err != nil {
		fail(apierrors.NewBadRequest("read body: " + err.Error()))
		return
	}
	if len(body) > maxBody {
		fail(apierrors.NewRequestEntityTooLargeError(fmt.Sprintf("a pod is limited to %d bytes", maxBody)))
		return
	}
	pod, serr, err := a.admit.admit(req.Context(), body, a.cfg.NodeName)
	if err != nil {
		klog.ErrorS(err, "Pod API could not check a pod")
		fail(apierrors.NewInternalError(err))
		return
	}
	if serr != nil {
		fail(serr)
		return
	}
	r := a.newRecord(pod)
	if err := a.store.Add(r); err != nil {
		if errors.Is(err, errExists) {
			fail(apierrors.NewAlreadyExists(podsResource, pod.Namespace+"/"+pod.Name))
			return
		}
		klog.ErrorS(err, "Pod API could not store a pod", "pod", klog.KObj(pod))
		fail(apierrors.NewInternalError(err))
		return
	}
	a.updateGauge()
	klog.InfoS("Pod API stored a pod", "pod", klog.KObj(pod), "uid", pod.UID)
	writeJSON(w, http.StatusCreated, r)
}

// newRecord is the record of an accepted pod, named <pod>-<node>: a new
// UID, the Pod API's tag, no status.
func (a *API) newRecord(pod *corev1.Pod) Record {
	pod.UID = types.UID(uuid.NewString()) // a random (version 4) UID, as kube-apiserver gives a created object
	pod.CreationTimestamp = metav1.Now()
	if pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	pod.Annotations[annotationSource] = sourceValue
	pod.Status = corev1.PodStatus{}
	r := Record{Pod: *pod, State: StateLocal, Since: metav1.Now()}
	if a.client == nil {
		r.Reason = "no handover credential (--pod-api-handover-kubeconfig): the pod stays on this node"
	}
	return r
}

func (a *API) list(w http.ResponseWriter, _ *http.Request) {
	requests.WithLabelValues("list", "200").Inc()
	writeJSON(w, http.StatusOK, StoredPodList{
		TypeMeta: metav1.TypeMeta{APIVersion: "podapi.nodeproxy.io/v1alpha1", Kind: "StoredPodList"},
		Items:    a.store.List(),
	})
}

func (a *API) get(w http.ResponseWriter, req *http.Request) {
	r, ok := a.store.Get(types.UID(req.PathValue("uid")))
	if !ok {
		requests.WithLabelValues("get", "404").Inc()
		writeStatus(w, apierrors.NewNotFound(podsResource, req.PathValue("uid")))
		return
	}
	requests.WithLabelValues("get", "200").Inc()
	writeJSON(w, http.StatusOK, r)
}

// delete removes a stored pod that the API does not have: the kubelet
// stops it at its next fetch. A pod handed over is the API's: deleting it
// there removes it (and its record).
func (a *API) delete(w http.ResponseWriter, req *http.Request) {
	uid := types.UID(req.PathValue("uid"))
	r, ok := a.store.Get(uid)
	switch {
	case !ok:
		requests.WithLabelValues("delete", "404").Inc()
		writeStatus(w, apierrors.NewNotFound(podsResource, string(uid)))
		return
	case r.State == StateHandedOver:
		requests.WithLabelValues("delete", "409").Inc()
		writeStatus(w, apierrors.NewConflict(podsResource, r.Pod.Namespace+"/"+r.Pod.Name,
			fmt.Errorf("handed over to kube-apiserver as uid %s: delete it there", r.APIUID)))
		return
	case r.State == StateHandingOver:
		// Its API pod may be being created: deleting the record now could
		// leave that pod in the API with nothing here knowing of it.
		requests.WithLabelValues("delete", "409").Inc()
		writeStatus(w, apierrors.NewConflict(podsResource, r.Pod.Namespace+"/"+r.Pod.Name,
			errors.New("being handed over to kube-apiserver: delete it there once it is, or retry after --pod-api-handover-timeout")))
		return
	}
	if _, err := a.store.Delete(uid); err != nil {
		klog.ErrorS(err, "Pod API could not delete a pod", "pod", klog.KObj(&r.Pod), "uid", uid)
		requests.WithLabelValues("delete", "500").Inc()
		writeStatus(w, apierrors.NewInternalError(err))
		return
	}
	a.forget(string(uid))
	a.updateGauge()
	klog.InfoS("Pod API deleted a pod", "pod", klog.KObj(&r.Pod), "uid", uid)
	requests.WithLabelValues("delete", "200").Inc()
	writeJSON(w, http.StatusOK, metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status: metav1.StatusSuccess, Details: &metav1.StatusDetails{Name: r.Pod.Name, Kind: "pods", UID: uid}})
}

// SourceHandler is the kubelet's HTTP pod source (staticPodURL): GET
// with the bearer token answers the pods to run as a v1 PodList. Names
// are served without the -<node> suffix, which the kubelet appends to
// every static pod's name (pkg/kubelet/config/common.go), so that the
// kubelet and its mirror pod use <pod>-<node>, the stored name; UIDs are
// the stored ones, which the kubelet keeps, so DELETE by UID names what
// the kubelet runs.
func (a *API) SourceHandler() http.Handler {
	want := []byte("Bearer " + a.cfg.KubeletToken)
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method != http.MethodGet || req.URL.Path != "/pods" {
			http.NotFound(w, req)
			return
		}
		if subtle.ConstantTimeCompare([]byte(req.Header.Get("Authorization")), want) != 1 {
			fetches.WithLabelValues("unauthorized").Inc()
			writeStatus(w, apierrors.NewUnauthorized("the kubelet's pod source needs the bearer token of --pod-api-kubelet-token-file"))
			return
		}
		seq := a.fetchSeq.Add(1)
		list := &corev1.PodList{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "PodList"}, Items: []corev1.Pod{}}
		var uids []types.UID
		for _, r := range a.store.List() {
			if !r.State.served() {
				continue
			}
			uids = append(uids, r.Pod.UID)
			p := r.Pod
			p.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"}
			p.Name = strings.TrimSuffix(p.Name, "-"+a.cfg.NodeName)
			list.Items = append(list.Items, p)
		}
		a.noteServed(seq, uids)
		writeJSON(w, http.StatusOK, list)
		fetches.WithLabelValues("ok").Inc()
		for {
			done := a.fetchDone.Load()
			if seq <= done || a.fetchDone.CompareAndSwap(done, seq) {
				break
			}
		}
	})
}

func writeStatus(w http.ResponseWriter, err *apierrors.StatusError) {
	s := err.Status()
	s.TypeMeta = metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}
	writeJSON(w, int(s.Code), s)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	if err := json.NewEncoder(w).Encode(v); err != nil {
		klog.V(2).InfoS("Pod API: writing a response", "err", err)
	}
}
