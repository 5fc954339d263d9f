package podapi

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// validatePod checks a posted pod, after defaulting, with kube-apiserver's
// rules for the fields it names (k8s.io/kubernetes pkg/apis/core/validation
// ValidatePodCreate, with the same field paths and error types), and with
// the kubelet's rules for static pods (pkg/kubelet/config/common.go: no
// reference to an API object, since there may be no API server). It
// covers what a bootstrap pod uses; kube-apiserver checks the rest at
// handover, and a refusal there is shown in the pod's state. Why not
// import pkg/apis/core/validation itself: see docs/architecture.md.
func validatePod(pod *corev1.Pod, node string) field.ErrorList {
	var errs field.ErrorList
	meta := field.NewPath("metadata")
	if pod.Name == "" {
		errs = append(errs, field.Required(meta.Child("name"), "name or generateName is required"))
	} else {
		for _, msg := range apimachineryvalidation.NameIsDNSSubdomain(pod.Name, false) {
			errs = append(errs, field.Invalid(meta.Child("name"), pod.Name, msg))
		}
	}
	if pod.GenerateName != "" {
		errs = append(errs, field.Forbidden(meta.Child("generateName"), "not supported by the Pod API: give a name"))
	}
	for _, msg := range apimachineryvalidation.ValidateNamespaceName(pod.Namespace, false) {
		errs = append(errs, field.Invalid(meta.Child("namespace"), pod.Namespace, msg))
	}
	if pod.UID != "" {
		errs = append(errs, field.Forbidden(meta.Child("uid"), "assigned by the Pod API"))
	}
	if len(pod.OwnerReferences) > 0 {
		errs = append(errs, field.Forbidden(meta.Child("ownerReferences"), "a pod of the Pod API has no owner until a controller in the API adopts it"))
	}
	errs = append(errs, metav1validation.ValidateLabels(pod.Labels, meta.Child("labels"))...)
	errs = append(errs, apimachineryvalidation.ValidateAnnotations(pod.Annotations, meta.Child("annotations"))...)
	for _, key := range []string{corev1.MirrorPodAnnotationKey, annotationSource, annotationUID} {
		if _, ok := pod.Annotations[key]; ok {
			errs = append(errs, field.Forbidden(meta.Child("annotations").Key(key), "set by the Pod API or the kubelet"))
		}
	}
	return append(errs, validateSpec(&pod.Spec, node, field.NewPath("spec"))...)
}

var (
	restartPolicies = sets.New(corev1.RestartPolicyAlways, corev1.RestartPolicyOnFailure, corev1.RestartPolicyNever)
	dnsPolicies     = sets.New(corev1.DNSClusterFirst, corev1.DNSClusterFirstWithHostNet, corev1.DNSDefault, corev1.DNSNone)
	pullPolicies    = sets.New(corev1.PullAlways, corev1.PullIfNotPresent, corev1.PullNever)
	protocols       = sets.New(corev1.ProtocolTCP, corev1.ProtocolUDP, corev1.ProtocolSCTP)
)

func validateSpec(spec *corev1.PodSpec, node string, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	if spec.NodeName != "" && spec.NodeName != node {
		errs = append(errs, field.Invalid(path.Child("nodeName"), spec.NodeName, fmt.Sprintf("the Pod API runs pods on this node only (%s)", node)))
	}
	if spec.ServiceAccountName != "" {
		errs = append(errs, field.Forbidden(path.Child("serviceAccountName"), "a pod of the Pod API may not reference API objects (static pods may not reference serviceaccounts)"))
	}
	if len(spec.ResourceClaims) > 0 {
		errs = append(errs, field.Forbidden(path.Child("resourceClaims"), "a pod of the Pod API may not reference API objects (static pods may not reference resourceclaims)"))
	}
	if !restartPolicies.Has(spec.RestartPolicy) {
		errs = append(errs, field.NotSupported(path.Child("restartPolicy"), spec.RestartPolicy, sets.List(restartPolicies)))
	}
	if !dnsPolicies.Has(spec.DNSPolicy) {
		errs = append(errs, field.NotSupported(path.Child("dnsPolicy"), spec.DNSPolicy, sets.List(dnsPolicies)))
	}
	volumes := sets.New[string]()
	for i, v := range spec.Volumes {
		vp := path.Child("volumes").Index(i)
		errs = append(errs, validateUniqueName(v.Name, volumes, vp.Child("name"))...)
		errs = append(errs, validateVolumeSource(v.VolumeSource, vp)...)
	}
	if len(spec.Containers) == 0 {
		errs = append(errs, field.Required(path.Child("containers"), ""))
	}
	names := sets.New[string]()
	for _, list := range []struct {
		name       string
		containers []corev1.Container
	}{{"initContainers", spec.InitContainers}, {"containers", spec.Containers}} {
		for i := range list.containers {
			errs = append(errs, validateContainer(&list.containers[i], names, volumes, path.Child(list.name).Index(i))...)
		}
	}
	if len(spec.EphemeralContainers) > 0 {
		errs = append(errs, field.Forbidden(path.Child("ephemeralContainers"), "cannot be set on create"))
	}
	return errs
}

// validateVolumeSource allows the sources a static pod may use: none
// that needs an API object. The list is an allow-list, so that a source
// added to the API later is refused until it is known to be safe.
func validateVolumeSource(src corev1.VolumeSource, path *field.Path) field.ErrorList {
	n := 0
	var errs field.ErrorList
	if src.HostPath != nil {
		n++
		if src.HostPath.Path == "" {
			errs = append(errs, field.Required(path.Child("hostPath", "path"), ""))
		}
	}
	if src.EmptyDir != nil {
		n++
	}
	if src.DownwardAPI != nil {
		n++
	}
	if src.Projected != nil {
		n++
		for i, s := range src.Projected.Sources {
			if s.DownwardAPI == nil || s.Secret != nil || s.ConfigMap != nil || s.ServiceAccountToken != nil || s.ClusterTrustBundle != nil || s.PodCertificate != nil {
				errs = append(errs, field.Forbidden(path.Child("projected", "sources").Index(i),
					"a pod of the Pod API may project only downwardAPI: static pods may not reference API objects"))
			}
		}
	}
	switch {
	case n == 0 && (src.Secret != nil || src.ConfigMap != nil || src.PersistentVolumeClaim != nil || src.Ephemeral != nil || src.CSI != nil):
		errs = append(errs, field.Forbidden(path, "a pod of the Pod API may not reference API objects (static pods may not): use hostPath, emptyDir, downwardAPI or projected downwardAPI"))
	case n == 0:
		errs = append(errs, field.Required(path, "must specify a volume type: the Pod API accepts hostPath, emptyDir, downwardAPI and projected downwardAPI"))
	case n > 1:
		errs = append(errs, field.Forbidden(path, "may not specify more than 1 volume type"))
	}
	return errs
}

func validateContainer(c *corev1.Container, names, volumes sets.Set[string], path *field.Path) field.ErrorList {
	errs := validateUniqueName(c.Name, names, path.Child("name"))
	if strings.TrimSpace(c.Image) == "" {
		errs = append(errs, field.Required(path.Child("image"), ""))
	} else if c.Image != strings.TrimSpace(c.Image) {
		errs = append(errs, field.Invalid(path.Child("image"), c.Image, "must not have leading or trailing whitespace"))
	}
	if !pullPolicies.Has(c.ImagePullPolicy) {
		errs = append(errs, field.NotSupported(path.Child("imagePullPolicy"), c.ImagePullPolicy, sets.List(pullPolicies)))
	}
	if c.TerminationMessagePolicy != corev1.TerminationMessageReadFile && c.TerminationMessagePolicy != corev1.TerminationMessageFallbackToLogsOnError {
		errs = append(errs, field.Required(path.Child("terminationMessagePolicy"), ""))
	}
	ports := sets.New[string]()
	for i, p := range c.Ports {
		pp := path.Child("ports").Index(i)
		if p.Name != "" {
			for _, msg := range validation.IsValidPortName(p.Name) {
				errs = append(errs, field.Invalid(pp.Child("name"), p.Name, msg))
			}
			if ports.Has(p.Name) {
				errs = append(errs, field.Duplicate(pp.Child("name"), p.Name))
			}
			ports.Insert(p.Name)
		}
		if p.ContainerPort == 0 {
			errs = append(errs, field.Required(pp.Child("containerPort"), ""))
		} else {
			for _, msg := range validation.IsValidPortNum(int(p.ContainerPort)) {
				errs = append(errs, field.Invalid(pp.Child("containerPort"), p.ContainerPort, msg))
			}
		}
		if p.HostPort != 0 {
			for _, msg := range validation.IsValidPortNum(int(p.HostPort)) {
				errs = append(errs, field.Invalid(pp.Child("hostPort"), p.HostPort, msg))
			}
		}
		if !protocols.Has(p.Protocol) {
			errs = append(errs, field.NotSupported(pp.Child("protocol"), p.Protocol, sets.List(protocols)))
		}
	}
	for i, e := range c.Env {
		ep := path.Child("env").Index(i)
		if e.Name == "" {
			errs = append(errs, field.Required(ep.Child("name"), ""))
		} else {
			for _, msg := range validation.IsEnvVarName(e.Name) {
				errs = append(errs, field.Invalid(ep.Child("name"), e.Name, msg))
			}
		}
		if e.ValueFrom != nil && (e.ValueFrom.SecretKeyRef != nil || e.ValueFrom.ConfigMapKeyRef != nil) {
			errs = append(errs, field.Forbidden(ep.Child("valueFrom"), "a pod of the Pod API may not reference API objects (static pods may not reference secrets or configmaps)"))
		}
	}
	if len(c.EnvFrom) > 0 {
		errs = append(errs, field.Forbidden(path.Child("envFrom"), "a pod of the Pod API may not reference API objects (static pods may not reference secrets or configmaps)"))
	}
	for i, m := range c.VolumeMounts {
		mp := path.Child("volumeMounts").Index(i)
		if m.Name == "" {
			errs = append(errs, field.Required(mp.Child("name"), ""))
		} else if !volumes.Has(m.Name) {
			errs = append(errs, field.NotFound(mp.Child("name"), m.Name))
		}
		if m.MountPath == "" {
			errs = append(errs, field.Required(mp.Child("mountPath"), ""))
		}
	}
	for name, limit := range c.Resources.Limits {
		if req, ok := c.Resources.Requests[name]; ok && req.Cmp(limit) > 0 {
			errs = append(errs, field.Invalid(path.Child("resources", "requests").Key(string(name)), req.String(),
				fmt.Sprintf("must be less than or equal to %s limit of %s", name, limit.String())))
		}
	}
	return errs
}

// validateFullName checks <pod>-<node>, the name the pod has on the node
// and in the API.
func validateFullName(name string) field.ErrorList {
	var errs field.ErrorList
	for _, msg := range apimachineryvalidation.NameIsDNSSubdomain(name, false) {
		errs = append(errs, field.Invalid(field.NewPath("metadata", "name"), name, "with the node's name appended: "+msg))
	}
	return errs
}

// validateUniqueName checks the name of a volume or a container: a DNS
// label, not taken in seen, which it joins.
func validateUniqueName(name string, seen sets.Set[string], path *field.Path) field.ErrorList {
	if name == "" {
		return field.ErrorList{field.Required(path, "")}
	}
	var errs field.ErrorList
	for _, msg := range validation.IsDNS1123Label(name) {
		errs = append(errs, field.Invalid(path, name, msg))
	}
	if seen.Has(name) {
		errs = append(errs, field.Duplicate(path, name))
	}
	seen.Insert(name)
	return errs
}
