package graph

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func secretVolume(name string) corev1.Volume {
	return corev1.Volume{Name: "v-" + name, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: name}}}
}

func refsOf(pod *corev1.Pod) []string {
	var out []string
	podReferences(pod, func(r ObjectRef) { out = append(out, r.String()) })
	slices.Sort(out)
	return slices.Compact(out)
}

func TestPodReferencesFollowEveryField(t *testing.T) {
	withSpec := func(spec corev1.PodSpec) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p"}, Spec: spec}
	}
	envFrom := []corev1.EnvFromSource{
		{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "s-envfrom"}}},
		{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cm-envfrom"}}},
	}
	env := []corev1.EnvVar{
		{Name: "A", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "s-env"}}}},
		{Name: "B", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "cm-env"}}}},
		{Name: "C", Value: "plain"},
		{Name: "D", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
	}
	vol := func(src corev1.VolumeSource) *corev1.Pod {
		return withSpec(corev1.PodSpec{Volumes: []corev1.Volume{{Name: "v", VolumeSource: src}}})
	}
	secretRef := &corev1.LocalObjectReference{Name: "s-vol"}
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		want []string
	}{
		{"service account", withSpec(corev1.PodSpec{ServiceAccountName: "sa"}), []string{"serviceaccount ns/sa"}},
		{"image pull secrets", withSpec(corev1.PodSpec{ImagePullSecrets: []corev1.LocalObjectReference{{Name: "pull"}, {Name: ""}}}), []string{"secret ns/pull"}},
		{"containers", withSpec(corev1.PodSpec{Containers: []corev1.Container{{EnvFrom: envFrom, Env: env}}}),
			[]string{"configmap ns/cm-env", "configmap ns/cm-envfrom", "secret ns/s-env", "secret ns/s-envfrom"}},
		{"init containers", withSpec(corev1.PodSpec{InitContainers: []corev1.Container{{EnvFrom: envFrom, Env: env}}}),
			[]string{"configmap ns/cm-env", "configmap ns/cm-envfrom", "secret ns/s-env", "secret ns/s-envfrom"}},
		{"ephemeral containers", withSpec(corev1.PodSpec{EphemeralContainers: []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{EnvFrom: envFrom, Env: env}}}}),
			[]string{"configmap ns/cm-env", "configmap ns/cm-envfrom", "secret ns/s-env", "secret ns/s-envfrom"}},
		{"secret volume", vol(corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "s-vol"}}), []string{"secret ns/s-vol"}},
		{"configmap volume", vol(corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cm-vol"}}}), []string{"configmap ns/cm-vol"}},
		{"projected", vol(corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
			{Secret: &corev1.SecretProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "s-proj"}}},
			{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "cm-proj"}}},
			{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token"}},
		}}}), []string{"configmap ns/cm-proj", "secret ns/s-proj"}},
		{"azure file", vol(corev1.VolumeSource{AzureFile: &corev1.AzureFileVolumeSource{SecretName: "s-vol"}}), []string{"secret ns/s-vol"}},
		{"cephfs", vol(corev1.VolumeSource{CephFS: &corev1.CephFSVolumeSource{SecretRef: secretRef}}), []string{"secret ns/s-vol"}},
		{"cinder", vol(corev1.VolumeSource{Cinder: &corev1.CinderVolumeSource{SecretRef: secretRef}}), []string{"secret ns/s-vol"}},
		{"flexvolume", vol(corev1.VolumeSource{FlexVolume: &corev1.FlexVolumeSource{SecretRef: secretRef}}), []string{"secret ns/s-vol"}},
		{"rbd", vol(corev1.VolumeSource{RBD: &corev1.RBDVolumeSource{SecretRef: secretRef}}), []string{"secret ns/s-vol"}},
		{"scaleio", vol(corev1.VolumeSource{ScaleIO: &corev1.ScaleIOVolumeSource{SecretRef: secretRef}}), []string{"secret ns/s-vol"}},
		{"iscsi", vol(corev1.VolumeSource{ISCSI: &corev1.ISCSIVolumeSource{SecretRef: secretRef}}), []string{"secret ns/s-vol"}},
		{"storageos", vol(corev1.VolumeSource{StorageOS: &corev1.StorageOSVolumeSource{SecretRef: secretRef}}), []string{"secret ns/s-vol"}},
		{"csi node publish", vol(corev1.VolumeSource{CSI: &corev1.CSIVolumeSource{NodePublishSecretRef: secretRef}}), []string{"secret ns/s-vol"}},
		{"pvc", vol(corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "claim"}}), []string{"persistentvolumeclaim ns/claim"}},
		{"generic ephemeral volume", vol(corev1.VolumeSource{Ephemeral: &corev1.EphemeralVolumeSource{}}), []string{"persistentvolumeclaim ns/p-v"}},
		{"volume without references", vol(corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}), nil},
		{"resource claim by name", withSpec(corev1.PodSpec{ResourceClaims: []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptr.To("claim-a")}}}), []string{"resourceclaim ns/claim-a"}},
		{"resource claim from template, not yet created", withSpec(corev1.PodSpec{ResourceClaims: []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: ptr.To("tmpl")}}}), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := refsOf(tc.pod); !slices.Equal(got, tc.want) {
				t.Errorf("references = %q, want %q", got, tc.want)
			}
		})
	}

	t.Run("resource claim from template, created", func(t *testing.T) {
		pod := withSpec(corev1.PodSpec{ResourceClaims: []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: ptr.To("tmpl")}}})
		pod.Status.ResourceClaimStatuses = []corev1.PodResourceClaimStatus{{Name: "gpu", ResourceClaimName: ptr.To("p-gpu-x7")}}
		pod.Status.ExtendedResourceClaimStatus = &corev1.PodExtendedResourceClaimStatus{ResourceClaimName: "p-extended"}
		want := []string{"resourceclaim ns/p-extended", "resourceclaim ns/p-gpu-x7"}
		if got := refsOf(pod); !slices.Equal(got, want) {
			t.Errorf("references = %q, want %q", got, want)
		}
	})
}

func TestPVSecretsAreTheKubeletVisibleOnes(t *testing.T) {
	ref := func(ns, name string) *corev1.SecretReference {
		return &corev1.SecretReference{Namespace: ns, Name: name}
	}
	pv := func(src corev1.PersistentVolumeSource) *corev1.PersistentVolume {
		return &corev1.PersistentVolume{
			ObjectMeta: metav1.ObjectMeta{Name: "pv"},
			Spec: corev1.PersistentVolumeSpec{
				PersistentVolumeSource: src,
				ClaimRef:               &corev1.ObjectReference{Namespace: "claim-ns", Name: "claim"},
			},
		}
	}
	for _, tc := range []struct {
		name string
		pv   *corev1.PersistentVolume
		want []string
	}{
		{"csi: node secrets, not controller secrets", pv(corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{
			ControllerPublishSecretRef: ref("x", "ctrl-publish"),
			ControllerExpandSecretRef:  ref("x", "ctrl-expand"),
			NodePublishSecretRef:       ref("x", "node-publish"),
			NodeStageSecretRef:         ref("x", "node-stage"),
			NodeExpandSecretRef:        ref("x", "node-expand"),
		}}), []string{"secret x/node-expand", "secret x/node-publish", "secret x/node-stage"}},
		{"azure file, namespace given", pv(corev1.PersistentVolumeSource{AzureFile: &corev1.AzureFilePersistentVolumeSource{SecretName: "az", SecretNamespace: ptr.To("other")}}), []string{"secret other/az"}},
		{"azure file, claim's namespace", pv(corev1.PersistentVolumeSource{AzureFile: &corev1.AzureFilePersistentVolumeSource{SecretName: "az"}}), []string{"secret claim-ns/az"}},
		{"cephfs defaults to claim's namespace", pv(corev1.PersistentVolumeSource{CephFS: &corev1.CephFSPersistentVolumeSource{SecretRef: ref("", "ceph")}}), []string{"secret claim-ns/ceph"}},
		{"cinder keeps its namespace", pv(corev1.PersistentVolumeSource{Cinder: &corev1.CinderPersistentVolumeSource{SecretRef: ref("", "cinder")}}), []string{"secret cinder"}},
		{"flexvolume", pv(corev1.PersistentVolumeSource{FlexVolume: &corev1.FlexPersistentVolumeSource{SecretRef: ref("", "flex")}}), []string{"secret claim-ns/flex"}},
		{"rbd", pv(corev1.PersistentVolumeSource{RBD: &corev1.RBDPersistentVolumeSource{SecretRef: ref("y", "rbd")}}), []string{"secret y/rbd"}},
		{"scaleio", pv(corev1.PersistentVolumeSource{ScaleIO: &corev1.ScaleIOPersistentVolumeSource{SecretRef: ref("", "sio")}}), []string{"secret claim-ns/sio"}},
		{"iscsi", pv(corev1.PersistentVolumeSource{ISCSI: &corev1.ISCSIPersistentVolumeSource{SecretRef: ref("", "iscsi")}}), []string{"secret claim-ns/iscsi"}},
		{"storageos", pv(corev1.PersistentVolumeSource{StorageOS: &corev1.StorageOSPersistentVolumeSource{SecretRef: &corev1.ObjectReference{Namespace: "z", Name: "sos"}}}), []string{"secret z/sos"}},
		{"hostpath has none", pv(corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/x"}}), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			pvSecrets(tc.pv, func(r ObjectRef) { got = append(got, r.String()) })
			slices.Sort(got)
			if !slices.Equal(got, tc.want) {
				t.Errorf("secrets = %q, want %q", got, tc.want)
			}
		})
	}
}
