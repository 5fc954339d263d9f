package admission

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// refusedByKubelet is the message of every static pod rule: the kubelet
// refuses a static pod that references an API object
// (pkg/kubelet/config/common.go, PreventStaticPodAPIReferences), since
// there may be no API server to read it from.
const refusedByKubelet = "a pod of the Pod API may not reference API objects: the kubelet refuses such static pods"

// validateStaticPod names, by field, each reference to an API object.
// Volumes are checked against an allow-list, so that a volume type added
// to the API later is refused until it is known not to need one.
func validateStaticPod(spec *corev1.PodSpec, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	if spec.ServiceAccountName != "" {
		errs = append(errs, field.Forbidden(path.Child("serviceAccountName"), refusedByKubelet+" (serviceaccounts)"))
	}
	if len(spec.ImagePullSecrets) > 0 {
		errs = append(errs, field.Forbidden(path.Child("imagePullSecrets"), refusedByKubelet+" (secrets)"))
	}
	if len(spec.ResourceClaims) > 0 {
		errs = append(errs, field.Forbidden(path.Child("resourceClaims"), refusedByKubelet+" (resourceclaims)"))
	}
	for i, v := range spec.Volumes {
		vp := path.Child("volumes").Index(i)
		switch {
		case v.HostPath != nil, v.EmptyDir != nil, v.DownwardAPI != nil, v.Image != nil:
		case v.Projected != nil:
			for j, s := range v.Projected.Sources {
				if s.DownwardAPI == nil || s.Secret != nil || s.ConfigMap != nil || s.ServiceAccountToken != nil || s.ClusterTrustBundle != nil || s.PodCertificate != nil {
					errs = append(errs, field.Forbidden(vp.Child("projected", "sources").Index(j), refusedByKubelet+": only downwardAPI may be projected"))
				}
			}
		default:
			errs = append(errs, field.Forbidden(vp, refusedByKubelet+": use hostPath, emptyDir, downwardAPI, image or projected downwardAPI"))
		}
	}
	for _, list := range []struct {
		name       string
		containers []corev1.Container
	}{{"initContainers", spec.InitContainers}, {"containers", spec.Containers}} {
		for i, c := range list.containers {
			cp := path.Child(list.name).Index(i)
			for j, e := range c.Env {
				if e.ValueFrom != nil && (e.ValueFrom.SecretKeyRef != nil || e.ValueFrom.ConfigMapKeyRef != nil) {
					errs = append(errs, field.Forbidden(cp.Child("env").Index(j).Child("valueFrom"), refusedByKubelet+" (secrets, configmaps)"))
				}
			}
			if len(c.EnvFrom) > 0 {
				errs = append(errs, field.Forbidden(cp.Child("envFrom"), refusedByKubelet+" (secrets, configmaps)"))
			}
		}
	}
	return errs
}
