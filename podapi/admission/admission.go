// Package admission is what the Pod API checks a posted pod with before
// it stores it: v1 decoding (strict), kube-apiserver's v1 defaulting,
// ValidatePodCreate of k8s.io/kubernetes linked, the kubelet's static
// pod rules and the Pod API's own (validate.go).
//
// It runs in a process of its own, nodeproxy-node-podadmit, which the
// endpoint starts for each posted pod, and is linked by nothing the
// endpoint runs: k8s.io/kubernetes' packages register every feature gate
// and compile the image reference regexps at start, resident memory on
// every node although the Pod API is off by default (docs/architecture.md,
// "The Pod API"; hack/boundaries keeps it out of nodeproxy-node).
//
//	podapi (endpoint) --the posted body, stdin--> nodeproxy-node-podadmit --Admit--> stdout: the pod to store, or the Status refusing it
package admission

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"
)

// ReservedAnnotations are set by the Pod API or the kubelet, never by the
// poster: the mirror pod's, the Pod API's source tag and the stored
// pod's UID on the API pod (podapi's annotationSource and annotationUID;
// its tests hold them equal).
var ReservedAnnotations = []string{corev1.MirrorPodAnnotationKey, "podapi.nodeproxy.io/source", "podapi.nodeproxy.io/uid"}

// Admit decodes, defaults and validates a posted pod, and names it
// <pod>-<node>: all that POST checks before it stores. A refusal is the
// Status to answer with.
func Admit(body []byte, node string) (*corev1.Pod, *apierrors.StatusError) {
	pod, err := Decode(body)
	if err != nil {
		return nil, apierrors.NewBadRequest(err.Error())
	}
	SetDefaults(pod)
	if errs := Validate(pod, node); len(errs) > 0 {
		return nil, apierrors.NewInvalid(schema.GroupKind{Kind: "Pod"}, pod.Name, errs)
	}
	pod.Name += "-" + node
	return pod, nil
}

// Decode reads a v1 Pod from JSON or YAML, refusing fields a v1 Pod does
// not have (kube-apiserver's strict field validation).
func Decode(body []byte) (*corev1.Pod, error) {
	pod := &corev1.Pod{}
	if err := yaml.UnmarshalStrict(body, pod); err != nil {
		return nil, fmt.Errorf("not a v1 Pod: %w", err)
	}
	if pod.APIVersion != "v1" || pod.Kind != "Pod" {
		return nil, fmt.Errorf("apiVersion v1, kind Pod expected, got apiVersion %q, kind %q", pod.APIVersion, pod.Kind)
	}
	return pod, nil
}
