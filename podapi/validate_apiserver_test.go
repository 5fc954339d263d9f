package podapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// bootstrapPod is a static control-plane pod as kubeadm writes one: host
// network, hostPath volumes, three probes, requests, env (one from the
// downward API), a seccomp profile, a toleration and
// system-node-critical.
func bootstrapPod() *corev1.Pod {
	probe := func(path string, delay int32) *corev1.Probe {
		return &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
			Host: "127.0.0.1", Path: path, Port: intstr.FromInt32(6443), Scheme: corev1.URISchemeHTTPS}},
			InitialDelaySeconds: delay, TimeoutSeconds: 15, PeriodSeconds: 10, FailureThreshold: 8}
	}
	hostPath := func(name, path string) corev1.Volume {
		return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{
			Path: path, Type: ptr.To(corev1.HostPathDirectoryOrCreate)}}}
	}
	return &corev1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: "kube-apiserver", Namespace: metav1.NamespaceSystem,
			Labels:      map[string]string{"component": "kube-apiserver", "tier": "control-plane"},
			Annotations: map[string]string{"kubeadm.kubernetes.io/kube-apiserver.advertise-address.endpoint": "10.0.0.1:6443"}},
		Spec: corev1.PodSpec{
			HostNetwork:                  true,
			AutomountServiceAccountToken: ptr.To(false),
			PriorityClassName:            "system-node-critical",
			SecurityContext:              &corev1.PodSecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
			Tolerations:                  []corev1.Toleration{{Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute}},
			Volumes:                      []corev1.Volume{hostPath("ca-certs", "/etc/ssl/certs"), hostPath("k8s-certs", "/etc/kubernetes/pki")},
			Containers: []corev1.Container{{
				Name:    "kube-apiserver",
				Image:   "registry.k8s.io/kube-apiserver:v1.36.3",
				Command: []string{"kube-apiserver", "--advertise-address=10.0.0.1", "--etcd-servers=https://127.0.0.1:2379"},
				Env: []corev1.EnvVar{{Name: "GOMAXPROCS", Value: "2"},
					{Name: "NODE_IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.hostIP"}}}},
				Ports:     []corev1.ContainerPort{{Name: "https", ContainerPort: 6443, HostPort: 6443, Protocol: corev1.ProtocolTCP}},
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m")}},
				VolumeMounts: []corev1.VolumeMount{{Name: "ca-certs", MountPath: "/etc/ssl/certs", ReadOnly: true},
					{Name: "k8s-certs", MountPath: "/etc/kubernetes/pki", ReadOnly: true}},
				LivenessProbe:  probe("/livez", 10),
				ReadinessProbe: probe("/readyz", 0),
				StartupProbe:   probe("/livez", 10),
			}},
		},
	}
}

// agreementCase is one pod, the bootstrap pod with one change.
type agreementCase struct {
	name   string
	change func(*corev1.Pod)
	// valid says the pod is meant to be accepted; otherwise it has one
	// defect, which both should refuse naming the same field.
	valid bool
	// podAPIOnly says why the Pod API refuses a pod kube-apiserver
	// accepts: the kubelet's rules for static pods, which kube-apiserver
	// does not apply to the pods it stores.
	podAPIOnly string
	// apiServerOnly says why kube-apiserver refuses a pod the Pod API
	// accepts: what only it can know.
	apiServerOnly string
}

func c0(p *corev1.Pod) *corev1.Container { return &p.Spec.Containers[0] }

func agreementCases() []agreementCase {
	q := resource.MustParse
	staticRule := "static pods may not reference API objects (the kubelet's rule, pkg/kubelet/config/common.go); kube-apiserver accepts it for a pod it stores"
	return []agreementCase{
		// Valid pods of a bootstrap.
		{name: "kube-apiserver as kubeadm writes it", valid: true, change: func(*corev1.Pod) {}},
		{name: "etcd with a data directory and exec and tcp probes", valid: true, change: func(p *corev1.Pod) {
			p.Name, p.Labels = "etcd", map[string]string{"component": "etcd"}
			p.Spec.Volumes = []corev1.Volume{{Name: "etcd-data", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/var/lib/etcd", Type: ptr.To(corev1.HostPathDirectoryOrCreate)}}}}
			c := c0(p)
			c.Name, c.Image = "etcd", "registry.k8s.io/etcd:3.6.8-0"
			c.VolumeMounts = []corev1.VolumeMount{{Name: "etcd-data", MountPath: "/var/lib/etcd"}}
			c.Ports = nil
			c.Resources = corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: q("100m"), corev1.ResourceMemory: q("100Mi")}}
			c.LivenessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"etcdctl", "endpoint", "health"}}}}
			c.ReadinessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(2379)}}}
			c.StartupProbe = nil
		}},
		{name: "hardened: non-root, read-only root, no capabilities, limits", valid: true, change: func(p *corev1.Pod) {
			p.Spec.SecurityContext.RunAsNonRoot = ptr.To(true)
			p.Spec.SecurityContext.RunAsUser = ptr.To[int64](65532)
			p.Spec.SecurityContext.FSGroup = ptr.To[int64](65532)
			c0(p).SecurityContext = &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false), ReadOnlyRootFilesystem: ptr.To(true),
				Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}, Add: []corev1.Capability{"NET_BIND_SERVICE"}}}
			c0(p).Resources.Limits = corev1.ResourceList{corev1.ResourceCPU: q("1"), corev1.ResourceMemory: q("1Gi")}
		}},
		{name: "privileged, host PID and IPC, ClusterFirstWithHostNet", valid: true, change: func(p *corev1.Pod) {
			p.Spec.HostPID, p.Spec.HostIPC, p.Spec.DNSPolicy = true, true, corev1.DNSClusterFirstWithHostNet
			c0(p).SecurityContext = &corev1.SecurityContext{Privileged: ptr.To(true)}
		}},
		{name: "pod network, hostPort, emptyDir, downward API volumes, init and sidecar containers", valid: true, change: func(p *corev1.Pod) {
			p.Spec.HostNetwork = false
			p.Spec.RestartPolicy = corev1.RestartPolicyOnFailure
			c0(p).Ports = []corev1.ContainerPort{{Name: "http", ContainerPort: 80, HostPort: 8080}}
			p.Spec.Volumes = append(p.Spec.Volumes,
				corev1.Volume{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory, SizeLimit: ptr.To(q("64Mi"))}}},
				corev1.Volume{Name: "podinfo", VolumeSource: corev1.VolumeSource{DownwardAPI: &corev1.DownwardAPIVolumeSource{Items: []corev1.DownwardAPIVolumeFile{
					{Path: "labels", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels"}}}}}},
				corev1.Volume{Name: "projected", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
					{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{{Path: "name", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}}}}}}})
			c0(p).VolumeMounts = append(c0(p).VolumeMounts, corev1.VolumeMount{Name: "scratch", MountPath: "/tmp"},
				corev1.VolumeMount{Name: "podinfo", MountPath: "/etc/podinfo"}, corev1.VolumeMount{Name: "projected", MountPath: "/etc/projected", SubPath: "name"})
			p.Spec.InitContainers = []corev1.Container{
				{Name: "init", Image: "busybox:1.37", Command: []string{"true"}},
				{Name: "sidecar", Image: "busybox:1.37", RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways),
					ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"true"}}}}}}
		}},
		{name: "custom DNS, host aliases, node selector, more tolerations, lifecycle, deadlines", valid: true, change: func(p *corev1.Pod) {
			p.Spec.DNSPolicy = corev1.DNSNone
			p.Spec.DNSConfig = &corev1.PodDNSConfig{Nameservers: []string{"10.0.0.10"}, Searches: []string{"cluster.local"},
				Options: []corev1.PodDNSConfigOption{{Name: "ndots", Value: ptr.To("2")}}}
			p.Spec.HostAliases = []corev1.HostAlias{{IP: "10.0.0.1", Hostnames: []string{"control-plane.local"}}}
			p.Spec.NodeSelector = map[string]string{"kubernetes.io/os": "linux"}
			p.Spec.Tolerations = append(p.Spec.Tolerations,
				corev1.Toleration{Key: "node-role.kubernetes.io/control-plane", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
				corev1.Toleration{Key: "node.kubernetes.io/not-ready", Operator: corev1.TolerationOpEqual, Value: "", Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](300)})
			p.Spec.TerminationGracePeriodSeconds = ptr.To[int64](60)
			p.Spec.ActiveDeadlineSeconds = ptr.To[int64](3600)
			p.Spec.Hostname, p.Spec.Subdomain = "cp-0", "control-plane"
			p.Spec.OS = &corev1.PodOS{Name: corev1.Linux}
			c0(p).Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: 5}}}
			c0(p).ImagePullPolicy = corev1.PullIfNotPresent
			c0(p).TerminationMessagePolicy = corev1.TerminationMessageFallbackToLogsOnError
		}},
		{name: "bound to this node", valid: true, change: func(p *corev1.Pod) { p.Spec.NodeName = agreementNode }},

		// metadata
		{name: "name not a DNS subdomain", change: func(p *corev1.Pod) { p.Name = "Kube_APIServer" }},
		{name: "no name", change: func(p *corev1.Pod) { p.Name = "" }},
		{name: "name too long with the node's", change: func(p *corev1.Pod) { p.Name = strings.Repeat("a", 250) }},
		{name: "label key invalid", change: func(p *corev1.Pod) { p.Labels["tier/role/x"] = "a" }},
		{name: "label value too long", change: func(p *corev1.Pod) { p.Labels["tier"] = strings.Repeat("a", 64) }},
		{name: "annotation key invalid", change: func(p *corev1.Pod) { p.Annotations["not a key"] = "a" }},
		{name: "generateName", podAPIOnly: "the Pod API names pods itself (<pod>-<node>); generateName would make the name unknowable to the caller",
			change: func(p *corev1.Pod) { p.GenerateName = "kube-apiserver-" }},
		{name: "mirror pod annotation", podAPIOnly: "set by the kubelet on the mirror pods it creates; a pod posted with it would pass for one",
			change: func(p *corev1.Pod) { p.Annotations[corev1.MirrorPodAnnotationKey] = "x" }},
		{name: "Pod API annotation", podAPIOnly: "set by the Pod API itself", change: func(p *corev1.Pod) { p.Annotations[annotationUID] = "x" }},
		// containers
		{name: "no containers", change: func(p *corev1.Pod) { p.Spec.Containers = nil }},
		{name: "container name not a DNS label", change: func(p *corev1.Pod) { c0(p).Name = "Kube_APIServer" }},
		{name: "duplicate container name", change: func(p *corev1.Pod) {
			p.Spec.InitContainers = []corev1.Container{{Name: "kube-apiserver", Image: "busybox:1.37"}}
		}},
		{name: "no image", change: func(p *corev1.Pod) { c0(p).Image = "" }},
		{name: "image with whitespace", change: func(p *corev1.Pod) { c0(p).Image = " registry.k8s.io/kube-apiserver:v1.36.3" }},
		{name: "pull policy unknown", change: func(p *corev1.Pod) { c0(p).ImagePullPolicy = "Sometimes" }},
		{name: "termination message policy unknown", change: func(p *corev1.Pod) { c0(p).TerminationMessagePolicy = "Sometimes" }},
		{name: "ephemeral containers on create", change: func(p *corev1.Pod) {
			p.Spec.EphemeralContainers = []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debug", Image: "busybox:1.37"}}}
		}},
		{name: "init container restartPolicy unknown", change: func(p *corev1.Pod) {
			p.Spec.InitContainers = []corev1.Container{{Name: "init", Image: "busybox:1.37", RestartPolicy: ptr.To(corev1.ContainerRestartPolicy("Sometimes"))}}
		}},
		{name: "readiness probe on an init container", change: func(p *corev1.Pod) {
			p.Spec.InitContainers = []corev1.Container{{Name: "init", Image: "busybox:1.37",
				ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"true"}}}}}}
		}},
		// ports
		{name: "containerPort missing", change: func(p *corev1.Pod) { c0(p).Ports[0].ContainerPort, c0(p).Ports[0].HostPort = 0, 0 }},
		{name: "containerPort out of range", change: func(p *corev1.Pod) { c0(p).Ports[0].ContainerPort, c0(p).Ports[0].HostPort = 70000, 70000 }},
		{name: "hostPort not containerPort on the host network", change: func(p *corev1.Pod) { c0(p).Ports[0].HostPort = 443 }},
		{name: "port protocol unknown", change: func(p *corev1.Pod) { c0(p).Ports[0].Protocol = "HTTP" }},
		{name: "port name invalid", change: func(p *corev1.Pod) { c0(p).Ports[0].Name = "Web_Port" }},
		{name: "duplicate port name", change: func(p *corev1.Pod) {
			c0(p).Ports = append(c0(p).Ports, corev1.ContainerPort{Name: "https", ContainerPort: 6444, HostPort: 6444})
		}},
		// volumes and mounts
		{name: "volume name invalid", change: func(p *corev1.Pod) { p.Spec.Volumes[0].Name, c0(p).VolumeMounts[0].Name = "CA_Certs", "CA_Certs" }},
		{name: "duplicate volume name", change: func(p *corev1.Pod) { p.Spec.Volumes[1].Name = "ca-certs"; c0(p).VolumeMounts = c0(p).VolumeMounts[:1] }},
		// v1 defaulting makes a volume without a source an emptyDir.
		{name: "volume without a source", valid: true, change: func(p *corev1.Pod) { p.Spec.Volumes[0].HostPath = nil }},
		{name: "volume with two sources", change: func(p *corev1.Pod) { p.Spec.Volumes[0].EmptyDir = &corev1.EmptyDirVolumeSource{} }},
		{name: "hostPath without a path", change: func(p *corev1.Pod) { p.Spec.Volumes[0].HostPath.Path = "" }},
		{name: "hostPath with ..", change: func(p *corev1.Pod) { p.Spec.Volumes[0].HostPath.Path = "/etc/../root" }},
		{name: "hostPath type unknown", change: func(p *corev1.Pod) { p.Spec.Volumes[0].HostPath.Type = ptr.To(corev1.HostPathType("Folder")) }},
		// Neither checks the medium; the kubelet fails the volume's setup.
		{name: "emptyDir medium unknown", valid: true, change: func(p *corev1.Pod) {
			p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: "Disk"}}})
		}},
		{name: "downward API volume of an unknown field", change: func(p *corev1.Pod) {
			p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "podinfo", VolumeSource: corev1.VolumeSource{DownwardAPI: &corev1.DownwardAPIVolumeSource{
				Items: []corev1.DownwardAPIVolumeFile{{Path: "x", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.secrets"}}}}}})
		}},
		{name: "secret volume", podAPIOnly: staticRule, change: func(p *corev1.Pod) {
			p.Spec.Volumes[0].HostPath, p.Spec.Volumes[0].Secret = nil, &corev1.SecretVolumeSource{SecretName: "certs"}
		}},
		{name: "configMap volume", podAPIOnly: staticRule, change: func(p *corev1.Pod) {
			p.Spec.Volumes[0].HostPath = nil
			p.Spec.Volumes[0].ConfigMap = &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "certs"}}
		}},
		{name: "projected service account token", podAPIOnly: staticRule, change: func(p *corev1.Pod) {
			p.Spec.Volumes[0].HostPath = nil
			p.Spec.Volumes[0].Projected = &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token"}}}}
		}},
		{name: "mount of no volume", change: func(p *corev1.Pod) { c0(p).VolumeMounts[0].Name = "nothing" }},
		{name: "mount without a path", change: func(p *corev1.Pod) { c0(p).VolumeMounts[0].MountPath = "" }},
		{name: "two mounts at one path", change: func(p *corev1.Pod) { c0(p).VolumeMounts[1].MountPath = "/etc/ssl/certs" }},
		{name: "absolute subPath", change: func(p *corev1.Pod) { c0(p).VolumeMounts[0].SubPath = "/certs" }},
		{name: "subPath with ..", change: func(p *corev1.Pod) { c0(p).VolumeMounts[0].SubPath = "../certs" }},
		// probes and lifecycle
		{name: "probe without a handler", change: func(p *corev1.Pod) { c0(p).LivenessProbe.HTTPGet = nil }},
		{name: "probe with two handlers", change: func(p *corev1.Pod) {
			c0(p).LivenessProbe.TCPSocket = &corev1.TCPSocketAction{Port: intstr.FromInt32(6443)}
		}},
		{name: "probe period negative", change: func(p *corev1.Pod) { c0(p).LivenessProbe.PeriodSeconds = -1 }},
		{name: "liveness success threshold not 1", change: func(p *corev1.Pod) { c0(p).LivenessProbe.SuccessThreshold = 2 }},
		{name: "probe port 0", change: func(p *corev1.Pod) { c0(p).ReadinessProbe.HTTPGet.Port = intstr.FromInt32(0) }},
		// A port name is checked for its form only, not against the ports.
		{name: "probe port name unknown", valid: true, change: func(p *corev1.Pod) { c0(p).ReadinessProbe.HTTPGet.Port = intstr.FromString("metrics") }},
		{name: "probe scheme unknown", change: func(p *corev1.Pod) { c0(p).ReadinessProbe.HTTPGet.Scheme = "FTP" }},
		{name: "preStop without a handler", change: func(p *corev1.Pod) {
			c0(p).Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{}}
		}},
		// resources
		{name: "request above limit", change: func(p *corev1.Pod) { c0(p).Resources.Limits = corev1.ResourceList{corev1.ResourceCPU: q("100m")} }},
		{name: "negative request", change: func(p *corev1.Pod) { c0(p).Resources.Requests[corev1.ResourceCPU] = q("-1") }},
		{name: "resource name unknown", change: func(p *corev1.Pod) { c0(p).Resources.Requests["gpus"] = q("1") }},
		// env
		{name: "env name invalid", change: func(p *corev1.Pod) { c0(p).Env[0].Name = "A=B" }},
		{name: "env name empty", change: func(p *corev1.Pod) { c0(p).Env[0].Name = "" }},
		{name: "env value and valueFrom", change: func(p *corev1.Pod) { c0(p).Env[1].Value = "10.0.0.1" }},
		{name: "env fieldRef of an unknown field", change: func(p *corev1.Pod) { c0(p).Env[1].ValueFrom.FieldRef.FieldPath = "status.nodeIP" }},
		{name: "env from a secret", podAPIOnly: staticRule, change: func(p *corev1.Pod) {
			c0(p).Env[1].ValueFrom = &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "s"}, Key: "k"}}
		}},
		{name: "envFrom a configMap", podAPIOnly: staticRule, change: func(p *corev1.Pod) {
			c0(p).EnvFrom = []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "c"}}}}
		}},
		// securityContext
		{name: "runAsUser negative", change: func(p *corev1.Pod) { c0(p).SecurityContext = &corev1.SecurityContext{RunAsUser: ptr.To[int64](-1)} }},
		{name: "pod runAsGroup negative", change: func(p *corev1.Pod) { p.Spec.SecurityContext.RunAsGroup = ptr.To[int64](-1) }},
		{name: "privileged without privilege escalation", change: func(p *corev1.Pod) {
			c0(p).SecurityContext = &corev1.SecurityContext{Privileged: ptr.To(true), AllowPrivilegeEscalation: ptr.To(false)}
		}},
		{name: "Localhost seccomp without a profile", change: func(p *corev1.Pod) {
			p.Spec.SecurityContext.SeccompProfile = &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeLocalhost}
		}},
		{name: "sysctl name invalid", change: func(p *corev1.Pod) {
			p.Spec.SecurityContext.Sysctls = []corev1.Sysctl{{Name: "net/ipv4/../x", Value: "1"}}
		}},
		// pod-level fields
		{name: "restartPolicy unknown", change: func(p *corev1.Pod) { p.Spec.RestartPolicy = "Sometimes" }},
		{name: "dnsPolicy unknown", change: func(p *corev1.Pod) { p.Spec.DNSPolicy = "Sometimes" }},
		{name: "dnsPolicy None without dnsConfig", change: func(p *corev1.Pod) { p.Spec.DNSPolicy = corev1.DNSNone }},
		{name: "four nameservers", change: func(p *corev1.Pod) {
			p.Spec.DNSConfig = &corev1.PodDNSConfig{Nameservers: []string{"10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4"}}
		}},
		{name: "nameserver not an IP", change: func(p *corev1.Pod) { p.Spec.DNSConfig = &corev1.PodDNSConfig{Nameservers: []string{"dns.local"}} }},
		{name: "host alias IP invalid", change: func(p *corev1.Pod) { p.Spec.HostAliases = []corev1.HostAlias{{IP: "10.0.0", Hostnames: []string{"a"}}} }},
		{name: "hostname not a DNS label", change: func(p *corev1.Pod) { p.Spec.Hostname = "CP_0" }},
		{name: "activeDeadlineSeconds 0", change: func(p *corev1.Pod) { p.Spec.ActiveDeadlineSeconds = ptr.To[int64](0) }},
		{name: "toleration Exists with a value", change: func(p *corev1.Pod) { p.Spec.Tolerations[0].Value = "x" }},
		{name: "toleration key invalid", change: func(p *corev1.Pod) { p.Spec.Tolerations[0].Key = "a b" }},
		{name: "toleration effect unknown", change: func(p *corev1.Pod) { p.Spec.Tolerations[0].Effect = "Sometimes" }},
		{name: "nodeSelector label invalid", change: func(p *corev1.Pod) { p.Spec.NodeSelector = map[string]string{"a b": "c"} }},
		{name: "os name unknown", change: func(p *corev1.Pod) { p.Spec.OS = &corev1.PodOS{Name: "plan9"} }},
		{name: "another node", podAPIOnly: "the Pod API runs pods on its own node only",
			change: func(p *corev1.Pod) { p.Spec.NodeName = "another-node" }},
		{name: "service account", podAPIOnly: staticRule, change: func(p *corev1.Pod) { p.Spec.ServiceAccountName = "default" }},
		{name: "imagePullSecrets", podAPIOnly: staticRule, change: func(p *corev1.Pod) {
			p.Spec.ImagePullSecrets = []corev1.LocalObjectReference{{Name: "registry"}}
		}},
		{name: "priority class that does not exist", apiServerOnly: "the Priority admission plugin resolves the class among the API's PriorityClasses, which a node without an API server cannot read",
			change: func(p *corev1.Pod) { p.Spec.PriorityClassName = "bootstrap-critical" }},
		{name: "priority set by the caller", apiServerOnly: "the Priority admission plugin forbids a priority that does not come from the class; the kubelet, which runs no admission, accepts it",
			change: func(p *corev1.Pod) { p.Spec.Priority = ptr.To[int32](1) }},
	}
}

// agreementNode is the node the agreement pods are for.
const agreementNode = "podapi-agreement"

// TestValidationAgreesWithKubeAPIServer runs every pod of
// agreementCases through the Pod API's checks (what POST runs: the
// helper, nodeproxy-node-podadmit) and
// through kube-apiserver's (a server-side dry-run create, bound to the
// node, as the handover creates it), and requires that they agree: both
// accept, or both refuse naming the same field (one path a prefix of the
// other). Where they cannot agree, the case says why.
func TestValidationAgreesWithKubeAPIServer(t *testing.T) {
	ctx := context.Background()
	admin := kubernetes.NewForConfigOrDie(cp.AdminConfig())
	if err := cp.EnsureNamespace(ctx, metav1.NamespaceSystem); err != nil { // its default ServiceAccount
		t.Fatal(err)
	}
	admit, err := newAdmitter(ctx, testAdmitBinary)
	if err != nil {
		t.Fatal(err)
	}
	var agreed, explained int
	var disagreed []string
	for _, tc := range agreementCases() {
		t.Run(tc.name, func(t *testing.T) {
			pod := bootstrapPod()
			tc.change(pod)
			body, err := json.Marshal(pod)
			if err != nil {
				t.Fatal(err)
			}
			var serr error // not a nil *StatusError in an error
			_, status, err := admit.admit(ctx, body, agreementNode)
			if err != nil {
				t.Fatal(err)
			}
			if status != nil {
				serr = status
			}
			podAPI := statusFields(serr)
			apiErr := dryRunCreate(ctx, admin, pod)
			apiServer := statusFields(apiErr)
			verdict := func(refused bool, fields []string) string {
				if !refused {
					return "accepts"
				}
				return fmt.Sprintf("refuses %v", fields)
			}
			got := fmt.Sprintf("Pod API %s, kube-apiserver %s", verdict(serr != nil, podAPI), verdict(apiErr != nil, apiServer))
			switch {
			case tc.valid && serr == nil && apiErr == nil:
				agreed++
			case tc.valid:
				disagreed = append(disagreed, tc.name)
				t.Errorf("a valid pod: %s\nPod API: %v\nkube-apiserver: %v", got, serr, apiErr)
			case tc.podAPIOnly != "" && serr != nil && apiErr == nil:
				explained++
				t.Logf("%s: the Pod API only: %s", got, tc.podAPIOnly)
			case tc.apiServerOnly != "" && serr == nil && apiErr != nil:
				explained++
				t.Logf("%s: kube-apiserver only: %s", got, tc.apiServerOnly)
			case tc.podAPIOnly == "" && tc.apiServerOnly == "" && serr != nil && apiErr != nil && sameField(podAPI, apiServer):
				agreed++
			default:
				disagreed = append(disagreed, tc.name)
				t.Errorf("%s\nPod API: %v\nkube-apiserver: %v", got, serr, apiErr)
			}
		})
	}
	t.Logf("%d of %d pods: the Pod API and kube-apiserver agree; %d differ for the reason the case gives; %d disagree %v",
		agreed, len(agreementCases()), explained, len(disagreed), disagreed)
}

// dryRunCreate creates pod in kube-apiserver with dryRun=All, as the
// handover would: named <pod>-<node> and bound to the node. The body is
// sent as JSON so that kube-apiserver, not client-go, sees what was
// posted.
func dryRunCreate(ctx context.Context, client kubernetes.Interface, pod *corev1.Pod) error {
	p := pod.DeepCopy()
	if p.Name != "" {
		p.Name += "-" + agreementNode
	}
	if p.Spec.NodeName == "" {
		p.Spec.NodeName = agreementNode
	}
	ns := p.Namespace
	if ns == "" {
		ns = metav1.NamespaceDefault
	}
	body, err := json.Marshal(p)
	if err != nil {
		return err
	}
	return client.CoreV1().RESTClient().Post().Namespace(ns).Resource("pods").
		Param("dryRun", metav1.DryRunAll).Body(body).SetHeader("Content-Type", "application/json").Do(ctx).Error()
}

// statusFields are the fields a refusal names.
func statusFields(err error) []string {
	var status apierrors.APIStatus
	if err == nil || !errors.As(err, &status) {
		return nil
	}
	var out []string
	if d := status.Status().Details; d != nil {
		for _, c := range d.Causes {
			if c.Field != "" && !slices.Contains(out, c.Field) {
				out = append(out, c.Field)
			}
		}
	}
	return out
}

// sameField: some field of a is b's or contains it, or the other way
// round (spec.volumes[0] and spec.volumes[0].hostPath name one volume).
func sameField(a, b []string) bool {
	within := func(x, y string) bool {
		return x == y || strings.HasPrefix(y, x+".") || strings.HasPrefix(y, x+"[")
	}
	for _, x := range a {
		for _, y := range b {
			if within(x, y) || within(y, x) {
				return true
			}
		}
	}
	return false
}

// TestAgreementCasesHaveOneVerdict keeps the table honest: a case is
// valid, or has one defect, and says why only if it is an exception.
func TestAgreementCasesHaveOneVerdict(t *testing.T) {
	for _, tc := range agreementCases() {
		if tc.valid && (tc.podAPIOnly != "" || tc.apiServerOnly != "") || tc.podAPIOnly != "" && tc.apiServerOnly != "" {
			t.Errorf("%s: valid, Pod API only and kube-apiserver only exclude each other", tc.name)
		}
	}
}
