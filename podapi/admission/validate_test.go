package admission

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// validPod is the smallest pod the Pod API accepts, defaulted.
func validPod() *corev1.Pod {
	p := &corev1.Pod{}
	p.APIVersion, p.Kind = "v1", "Pod"
	p.Name = "etcd"
	p.Spec.Containers = []corev1.Container{{Name: "etcd", Image: "registry.k8s.io/etcd:3.6.8-0"}}
	SetDefaults(p)
	return p
}

// TestValidatePod: each invalid pod is refused with the field
// kube-apiserver names for it (validate_apiserver_test.go checks many
// against kube-apiserver itself), or the static pod rule it breaks.
func TestValidatePod(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(*corev1.Pod)
		field  string // "" for valid
	}{
		{"valid", func(*corev1.Pod) {}, ""},
		{"valid with hostPath, emptyDir and a port", func(p *corev1.Pod) {
			p.Spec.Volumes = []corev1.Volume{
				{Name: "data", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/var/lib/etcd"}}},
				{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			}
			p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "data", MountPath: "/var/lib/etcd"}}
			p.Spec.Containers[0].Ports = []corev1.ContainerPort{{Name: "client", ContainerPort: 2379, Protocol: corev1.ProtocolTCP}}
		}, ""},
		{"this node's name", func(p *corev1.Pod) { p.Spec.NodeName = "node-a" }, ""},
		{"no name", func(p *corev1.Pod) { p.Name = "" }, "metadata.name"},
		{"bad name", func(p *corev1.Pod) { p.Name = "Etcd_1" }, "metadata.name"},
		{"generateName", func(p *corev1.Pod) { p.GenerateName = "etcd-" }, "metadata.generateName"},
		{"bad namespace", func(p *corev1.Pod) { p.Namespace = "Kube_System" }, "metadata.namespace"},
		{"uid given", func(p *corev1.Pod) { p.UID = "x" }, "metadata.uid"},
		{"bad label", func(p *corev1.Pod) { p.Labels = map[string]string{"a b": "c"} }, "metadata.labels"},
		{"mirror annotation", func(p *corev1.Pod) {
			p.Annotations = map[string]string{corev1.MirrorPodAnnotationKey: "x"}
		}, "metadata.annotations[kubernetes.io/config.mirror]"},
		{"other node", func(p *corev1.Pod) { p.Spec.NodeName = "node-b" }, "spec.nodeName"},
		{"service account", func(p *corev1.Pod) { p.Spec.ServiceAccountName = "default" }, "spec.serviceAccountName"},
		{"no containers", func(p *corev1.Pod) { p.Spec.Containers = nil }, "spec.containers"},
		{"no image", func(p *corev1.Pod) { p.Spec.Containers[0].Image = "" }, "spec.containers[0].image"},
		{"bad container name", func(p *corev1.Pod) { p.Spec.Containers[0].Name = "Etcd" }, "spec.containers[0].name"},
		{"duplicate container", func(p *corev1.Pod) {
			p.Spec.InitContainers = []corev1.Container{p.Spec.Containers[0]}
		}, "spec.initContainers[0].name"},
		{"imagePullSecrets", func(p *corev1.Pod) {
			p.Spec.ImagePullSecrets = []corev1.LocalObjectReference{{Name: "registry"}}
		}, "spec.imagePullSecrets"},
		{"hostPort not containerPort on the host network", func(p *corev1.Pod) {
			p.Spec.HostNetwork = true
			p.Spec.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 2379, HostPort: 2380, Protocol: corev1.ProtocolTCP}}
		}, "spec.containers[0].ports[0].hostPort"},
		{"bad restart policy", func(p *corev1.Pod) { p.Spec.RestartPolicy = "Sometimes" }, "spec.restartPolicy"},
		{"port out of range", func(p *corev1.Pod) {
			p.Spec.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 70000, Protocol: corev1.ProtocolTCP}}
		}, "spec.containers[0].ports[0].containerPort"},
		{"bad env name", func(p *corev1.Pod) {
			p.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "A=B", Value: "c"}}
		}, "spec.containers[0].env[0].name"},
		{"env from a secret", func(p *corev1.Pod) {
			p.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "P", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{Key: "k"}}}}
		}, "spec.containers[0].env[0].valueFrom"},
		{"mount of no volume", func(p *corev1.Pod) {
			p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}
		}, "spec.containers[0].volumeMounts[0].name"},
		{"secret volume", func(p *corev1.Pod) {
			p.Spec.Volumes = []corev1.Volume{{Name: "s", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "s"}}}}
		}, "spec.volumes[0]"},
		{"projected service account token", func(p *corev1.Pod) {
			p.Spec.Volumes = []corev1.Volume{{Name: "t", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
				Sources: []corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token"}}}}}}}
		}, "spec.volumes[0].projected.sources[0]"},
		{"duplicate volume", func(p *corev1.Pod) {
			v := corev1.Volume{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}
			p.Spec.Volumes = []corev1.Volume{v, v}
		}, "spec.volumes[1].name"},
		{"requests above limits", func(p *corev1.Pod) {
			p.Spec.Containers[0].Resources = corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2")},
				Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")},
			}
		}, "spec.containers[0].resources.requests"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := validPod()
			tc.change(p)
			errs := Validate(p, "node-a")
			if tc.field == "" {
				if len(errs) > 0 {
					t.Fatalf("refused a valid pod: %v", errs)
				}
				return
			}
			if len(errs) == 0 {
				t.Fatalf("accepted; want %s refused", tc.field)
			}
			if !slices.ContainsFunc(errs, func(e *field.Error) bool { return e.Field == tc.field }) {
				t.Errorf("refused %v; want an error on %s", errs, tc.field)
			}
		})
	}
}
