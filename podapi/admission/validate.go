package admission

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/kubernetes/pkg/api/legacyscheme"
	podutil "k8s.io/kubernetes/pkg/api/pod"
	api "k8s.io/kubernetes/pkg/apis/core"
	_ "k8s.io/kubernetes/pkg/apis/core/install" // v1 defaulting and conversion, in legacyscheme
	"k8s.io/kubernetes/pkg/apis/core/validation"
	"k8s.io/kubernetes/pkg/capabilities"
)

// SetDefaults applies kube-apiserver's v1 defaulting (the one the
// kubelet also applies to what its sources serve), so that the stored
// pod is the pod kube-apiserver would store.
func SetDefaults(pod *corev1.Pod) {
	if pod.Namespace == "" {
		pod.Namespace = "default"
	}
	legacyscheme.Scheme.Default(pod)
}

// Validate checks a posted pod, defaulted, three ways:
//
//   - the Pod API's own rules (metadata the Pod API or the kubelet sets,
//     this node only);
//   - the kubelet's rules for static pods (pkg/kubelet/config/common.go:
//     no reference to an API object, since there may be no API server),
//     named by field;
//   - kube-apiserver's validation itself, ValidatePodCreate of
//     k8s.io/kubernetes pkg/apis/core/validation, on the pod as the
//     kubelet and the handover see it (named <pod>-<node>, bound to the
//     node): the code both the kubelet (on what its HTTP source serves)
//     and kube-apiserver (at handover) run, so what passes here passes
//     there, with the same field paths and messages. docs/architecture.md
//     has what linking it costs.
func Validate(pod *corev1.Pod, node string) field.ErrorList {
	errs := validateOwnRules(pod, node)
	static := validateStaticPod(&pod.Spec, field.NewPath("spec"))
	errs = append(errs, static...)
	kube, refs := kubeValidate(pod, node)
	errs = append(errs, kube...)
	if len(static) == 0 && refs != "" {
		// A reference validateStaticPod does not know by name (a volume
		// type added later): the kubelet's own check still refuses it.
		errs = append(errs, field.Forbidden(field.NewPath("spec"), "static pods may not reference "+refs))
	}
	return errs
}

// kubeValidate runs ValidatePodCreate on the internal form of pod, and
// the kubelet's HasAPIObjectReference, which reports the first kind of
// API object the pod references.
func kubeValidate(pod *corev1.Pod, node string) (field.ErrorList, string) {
	// As the kubelet does at start (cmd/kubelet/app/server.go): it runs
	// privileged containers from any source, and ValidatePodCreate refuses
	// them unless told so. Once per process; later calls are no-ops.
	capabilities.Initialize(capabilities.Capabilities{AllowPrivileged: true})
	p := pod.DeepCopy()
	if p.Name != "" {
		p.Name += "-" + node
	}
	p.Spec.NodeName = node
	internal := &api.Pod{}
	if err := legacyscheme.Scheme.Convert(p, internal, nil); err != nil {
		return field.ErrorList{field.InternalError(field.NewPath(""), fmt.Errorf("convert to the internal Pod: %w", err))}, ""
	}
	opts := podutil.GetValidationOptionsFromPodSpecAndMeta(&internal.Spec, nil, &internal.ObjectMeta, nil)
	errs := validation.ValidatePodCreate(internal, opts)
	_, refs, err := podutil.HasAPIObjectReference(internal)
	if err != nil {
		refs = err.Error()
	}
	return errs, refs
}

// validateOwnRules: what the Pod API sets itself, and this node only.
func validateOwnRules(pod *corev1.Pod, node string) field.ErrorList {
	var errs field.ErrorList
	meta := field.NewPath("metadata")
	if pod.GenerateName != "" {
		errs = append(errs, field.Forbidden(meta.Child("generateName"), "not supported by the Pod API: give a name"))
	}
	if pod.UID != "" {
		errs = append(errs, field.Forbidden(meta.Child("uid"), "assigned by the Pod API"))
	}
	if len(pod.OwnerReferences) > 0 {
		errs = append(errs, field.Forbidden(meta.Child("ownerReferences"), "a pod of the Pod API has no owner until a controller in the API adopts it"))
	}
	for _, key := range ReservedAnnotations {
		if _, ok := pod.Annotations[key]; ok {
			errs = append(errs, field.Forbidden(meta.Child("annotations").Key(key), "set by the Pod API or the kubelet"))
		}
	}
	if pod.Spec.NodeName != "" && pod.Spec.NodeName != node {
		errs = append(errs, field.Invalid(field.NewPath("spec", "nodeName"), pod.Spec.NodeName, fmt.Sprintf("the Pod API runs pods on this node only (%s)", node)))
	}
	return errs
}
