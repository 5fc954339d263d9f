package graph

import (
	corev1 "k8s.io/api/core/v1"
)

// PodUses calls visit for every object a pod bound to a node lets that
// node reach besides the pod itself, with duplicates: exactly what AddPod
// records, so that a consumer that follows one node's objects from the
// cache (package nodeview) decides reachability by the graph's own rules,
// not a copy of them. A mirror pod grants nothing: the kubelet made it
// from a static manifest, and its references are not the API's to vouch
// for.
func PodUses(pod *corev1.Pod, visit func(ObjectRef)) {
	if _, mirror := pod.Annotations[corev1.MirrorPodAnnotationKey]; mirror {
		return
	}
	podReferences(pod, visit)
}

// PVSecrets calls visit for the secrets a bound PersistentVolume lets the
// nodes that reach it read: what AddPV records (see pvSecrets).
func PVSecrets(pv *corev1.PersistentVolume, visit func(ObjectRef)) { pvSecrets(pv, visit) }

// podReferences calls visit for every object a pod grants its node, with
// duplicates: the service account, secrets, configmaps, PVCs (including
// the PVCs of generic ephemeral volumes) and resource claims. These are the
// references the in-tree Node authorizer follows, field for field.
func podReferences(pod *corev1.Pod, visit func(ObjectRef)) {
	ns := pod.Namespace
	ref := func(kind Kind, name string) {
		if name != "" {
			visit(ObjectRef{Kind: kind, Namespace: ns, Name: name})
		}
	}

	ref(ServiceAccount, pod.Spec.ServiceAccountName)
	for _, s := range pod.Spec.ImagePullSecrets {
		ref(Secret, s.Name)
	}
	for i := range pod.Spec.InitContainers {
		containerReferences(pod.Spec.InitContainers[i].EnvFrom, pod.Spec.InitContainers[i].Env, ref)
	}
	for i := range pod.Spec.Containers {
		containerReferences(pod.Spec.Containers[i].EnvFrom, pod.Spec.Containers[i].Env, ref)
	}
	for i := range pod.Spec.EphemeralContainers {
		c := &pod.Spec.EphemeralContainers[i].EphemeralContainerCommon
		containerReferences(c.EnvFrom, c.Env, ref)
	}
	for i := range pod.Spec.Volumes {
		volumeReferences(pod, &pod.Spec.Volumes[i], ref)
	}
	for i := range pod.Spec.ResourceClaims {
		if name := resourceClaimName(pod, &pod.Spec.ResourceClaims[i]); name != nil {
			ref(ResourceClaim, *name)
		}
	}
	if st := pod.Status.ExtendedResourceClaimStatus; st != nil {
		ref(ResourceClaim, st.ResourceClaimName)
	}
}

func containerReferences(envFrom []corev1.EnvFromSource, env []corev1.EnvVar, ref func(Kind, string)) {
	for _, e := range envFrom {
		if e.SecretRef != nil {
			ref(Secret, e.SecretRef.Name)
		}
		if e.ConfigMapRef != nil {
			ref(ConfigMap, e.ConfigMapRef.Name)
		}
	}
	for _, e := range env {
		if e.ValueFrom == nil {
			continue
		}
		if e.ValueFrom.SecretKeyRef != nil {
			ref(Secret, e.ValueFrom.SecretKeyRef.Name)
		}
		if e.ValueFrom.ConfigMapKeyRef != nil {
			ref(ConfigMap, e.ValueFrom.ConfigMapKeyRef.Name)
		}
	}
}

// volumeReferences visits what one volume refers to. API validation gives
// a volume exactly one source; like the reference, each of the three
// questions (which secret, which configmap, which claim) takes the first
// source that answers it.
func volumeReferences(pod *corev1.Pod, v *corev1.Volume, ref func(Kind, string)) {
	src := &v.VolumeSource
	switch {
	case src.AzureFile != nil:
		ref(Secret, src.AzureFile.SecretName)
	case src.CephFS != nil:
		if src.CephFS.SecretRef != nil {
			ref(Secret, src.CephFS.SecretRef.Name)
		}
	case src.Cinder != nil:
		if src.Cinder.SecretRef != nil {
			ref(Secret, src.Cinder.SecretRef.Name)
		}
	case src.FlexVolume != nil:
		if src.FlexVolume.SecretRef != nil {
			ref(Secret, src.FlexVolume.SecretRef.Name)
		}
	case src.Projected != nil:
		for _, p := range src.Projected.Sources {
			if p.Secret != nil {
				ref(Secret, p.Secret.Name)
			}
		}
	case src.RBD != nil:
		if src.RBD.SecretRef != nil {
			ref(Secret, src.RBD.SecretRef.Name)
		}
	case src.Secret != nil:
		ref(Secret, src.Secret.SecretName)
	case src.ScaleIO != nil:
		if src.ScaleIO.SecretRef != nil {
			ref(Secret, src.ScaleIO.SecretRef.Name)
		}
	case src.ISCSI != nil:
		if src.ISCSI.SecretRef != nil {
			ref(Secret, src.ISCSI.SecretRef.Name)
		}
	case src.StorageOS != nil:
		if src.StorageOS.SecretRef != nil {
			ref(Secret, src.StorageOS.SecretRef.Name)
		}
	case src.CSI != nil:
		if src.CSI.NodePublishSecretRef != nil {
			ref(Secret, src.CSI.NodePublishSecretRef.Name)
		}
	}
	switch {
	case src.Projected != nil:
		for _, p := range src.Projected.Sources {
			if p.ConfigMap != nil {
				ref(ConfigMap, p.ConfigMap.Name)
			}
		}
	case src.ConfigMap != nil:
		ref(ConfigMap, src.ConfigMap.Name)
	}
	switch {
	case src.PersistentVolumeClaim != nil:
		ref(PersistentVolumeClaim, src.PersistentVolumeClaim.ClaimName)
	case src.Ephemeral != nil:
		// A generic ephemeral volume's PVC is named <pod>-<volume> by the
		// ephemeral volume controller.
		ref(PersistentVolumeClaim, pod.Name+"-"+v.Name)
	}
}

// resourceClaimName is the name of the ResourceClaim a pod's claim entry
// stands for: given directly, or, for a claim made from a template, the
// name recorded in the pod's status once the claim exists (nil before).
func resourceClaimName(pod *corev1.Pod, c *corev1.PodResourceClaim) *string {
	if c.ResourceClaimName != nil {
		return c.ResourceClaimName
	}
	if c.ResourceClaimTemplateName != nil {
		for _, st := range pod.Status.ResourceClaimStatuses {
			if st.Name == c.Name {
				return st.ResourceClaimName
			}
		}
	}
	return nil
}

// pvSecrets calls visit for the secrets a PV shows the kubelet: those the
// kubelet needs to mount or expand it. Controller-only secrets (CSI
// controller publish and expand) are not visited. A secret reference
// without a namespace is in the namespace of the PV's claim.
func pvSecrets(pv *corev1.PersistentVolume, visit func(ObjectRef)) {
	claimNS := ""
	if pv.Spec.ClaimRef != nil {
		claimNS = pv.Spec.ClaimRef.Namespace
	}
	ref := func(ns, name string) {
		if name != "" {
			visit(ObjectRef{Kind: Secret, Namespace: ns, Name: name})
		}
	}
	orClaimNS := func(ns string) string {
		if ns == "" {
			return claimNS
		}
		return ns
	}
	src := &pv.Spec.PersistentVolumeSource
	switch {
	case src.AzureFile != nil:
		ns := claimNS
		if src.AzureFile.SecretNamespace != nil && *src.AzureFile.SecretNamespace != "" {
			ns = *src.AzureFile.SecretNamespace
		}
		ref(ns, src.AzureFile.SecretName)
	case src.CephFS != nil:
		if r := src.CephFS.SecretRef; r != nil {
			ref(orClaimNS(r.Namespace), r.Name)
		}
	case src.Cinder != nil:
		if r := src.Cinder.SecretRef; r != nil {
			ref(r.Namespace, r.Name)
		}
	case src.FlexVolume != nil:
		if r := src.FlexVolume.SecretRef; r != nil {
			ref(orClaimNS(r.Namespace), r.Name)
		}
	case src.RBD != nil:
		if r := src.RBD.SecretRef; r != nil {
			ref(orClaimNS(r.Namespace), r.Name)
		}
	case src.ScaleIO != nil:
		if r := src.ScaleIO.SecretRef; r != nil {
			ref(orClaimNS(r.Namespace), r.Name)
		}
	case src.ISCSI != nil:
		if r := src.ISCSI.SecretRef; r != nil {
			ref(orClaimNS(r.Namespace), r.Name)
		}
	case src.StorageOS != nil:
		if r := src.StorageOS.SecretRef; r != nil {
			ref(r.Namespace, r.Name)
		}
	case src.CSI != nil:
		for _, r := range []*corev1.SecretReference{src.CSI.NodePublishSecretRef, src.CSI.NodeStageSecretRef, src.CSI.NodeExpandSecretRef} {
			if r != nil {
				ref(r.Namespace, r.Name)
			}
		}
	}
}
