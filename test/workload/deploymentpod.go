package workload

import (
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// PodStage is how far a Deployment's pod has come in its start, one
// stage per write kube-apiserver stores and a watch delivers.
type PodStage int

const (
	// PodCreated is the pod as its ReplicaSet controller created it, after
	// admission: defaults set, the service-account token volume and
	// mounts added, the not-ready/unreachable tolerations added, and the
	// QoS class in an otherwise empty status.
	PodCreated PodStage = iota
	// PodScheduled adds the scheduler's binding: spec.nodeName and the
	// PodScheduled condition.
	PodScheduled
	// PodStarting is the kubelet's first status write: host IPs, start
	// time, conditions, and both containers waiting in ContainerCreating.
	PodStarting
	// PodRunning is the kubelet's status once both containers run and are
	// ready: pod IPs, every condition true, container IDs and image IDs.
	PodRunning
)

// PodStages are a Deployment's pod's writes, in the order kube-apiserver
// stores them.
var PodStages = []PodStage{PodCreated, PodScheduled, PodStarting, PodRunning}

// DeploymentPod is the i-th pod of a Deployment named app in namespace,
// bound to node from PodScheduled on, at stage, shaped as kube-apiserver
// stores such a pod (managedFields aside): two containers (the
// application and a sidecar) with env, probes, resources and security
// contexts; a configmap and a secret volume plus the projected token; an
// owner reference to its ReplicaSet; a preferred anti-affinity across
// hosts; the scheduler's tolerations; and, from PodStarting on, a status
// as a kubelet writes it. Running, it is about 5.4 KB as compact JSON (2.5 KB as protobuf).
// resourceVersion is left to the caller, who orders the writes.
func DeploymentPod(namespace, app string, i int, node string, stage PodStage) *corev1.Pod {
	const hash = "7d9c8b6f5"
	created := metav1.NewTime(time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC))
	owner := app + "-" + hash
	name := fmt.Sprintf("%s-%05x", owner, i)
	labels := map[string]string{"app.kubernetes.io/name": app, "pod-template-hash": hash}
	token := "kube-api-access-" + fmt.Sprintf("%05x", i)[:5]
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, GenerateName: owner + "-", Namespace: namespace,
			UID:               types.UID(fmt.Sprintf("6f1c2d3e-4b5a-4c7d-9e8f-%012x", i)),
			CreationTimestamp: created, Labels: labels,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: owner,
				UID: "5c1d2e3f-0a1b-4c2d-8e3f-000000000001", Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}},
		},
		Spec: corev1.PodSpec{
			Volumes: []corev1.Volume{
				{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
					LocalObjectReference: corev1.LocalObjectReference{Name: app + "-config"}, DefaultMode: ptr.To[int32](420)}}},
				{Name: "credentials", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
					SecretName: app + "-credentials", DefaultMode: ptr.To[int32](420)}}},
				{Name: token, VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{DefaultMode: ptr.To[int32](420), Sources: []corev1.VolumeProjection{
					{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token", ExpirationSeconds: ptr.To[int64](3607)}},
					{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "kube-root-ca.crt"}, Items: []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}}}},
					{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{{Path: "namespace",
						FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.namespace"}}}}},
				}}}},
			},
			Containers: []corev1.Container{
				appContainer(app, token),
				sidecarContainer(token),
			},
			RestartPolicy: corev1.RestartPolicyAlways, TerminationGracePeriodSeconds: ptr.To[int64](30), DNSPolicy: corev1.DNSClusterFirst,
			ServiceAccountName: app, DeprecatedServiceAccount: app, SchedulerName: "default-scheduler",
			Priority: ptr.To[int32](0), EnableServiceLinks: ptr.To(true), PreemptionPolicy: ptr.To(corev1.PreemptLowerPriority),
			SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](10001),
				FSGroup: ptr.To[int64](10001), SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
			Affinity: &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
				PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{{Weight: 100, PodAffinityTerm: corev1.PodAffinityTerm{
					LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app.kubernetes.io/name": app}},
					TopologyKey:   "kubernetes.io/hostname",
				}}},
			}},
			Tolerations: []corev1.Toleration{
				{Key: "node.kubernetes.io/not-ready", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](300)},
				{Key: "node.kubernetes.io/unreachable", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](300)},
			},
		},
		Status: corev1.PodStatus{Phase: corev1.PodPending, QOSClass: corev1.PodQOSBurstable},
	}
	if stage >= PodScheduled {
		pod.Spec.NodeName = node
		pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: created}}
	}
	if stage >= PodStarting {
		kubeletStatus(pod, i, stage == PodRunning)
	}
	return pod
}

func appContainer(app, token string) corev1.Container {
	env := []corev1.EnvVar{
		{Name: "LOG_LEVEL", Value: "info"},
		{Name: "DATABASE_URL", Value: "postgres://shop-db:5432/shop"},
		{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.name"}}},
		{Name: "POD_IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "status.podIP"}}},
		{Name: "DATABASE_PASSWORD", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: app + "-credentials"}, Key: "password"}}},
	}
	probe := func(path string, period int32) *corev1.Probe {
		return &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: path, Port: intstr.FromString("http"), Scheme: corev1.URISchemeHTTP}},
			InitialDelaySeconds: 5, PeriodSeconds: period, TimeoutSeconds: 1, SuccessThreshold: 1, FailureThreshold: 3}
	}
	return corev1.Container{
		Name: app, Image: "registry.example.com/shop/" + app + ":1.42.0", Env: env,
		Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolTCP}},
		Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: apiresource.MustParse("250m"), corev1.ResourceMemory: apiresource.MustParse("256Mi")},
			Limits:   corev1.ResourceList{corev1.ResourceCPU: apiresource.MustParse("1"), corev1.ResourceMemory: apiresource.MustParse("512Mi")},
		},
		VolumeMounts: []corev1.VolumeMount{
			{Name: "config", MountPath: "/etc/" + app, ReadOnly: true},
			{Name: "credentials", MountPath: "/var/run/secrets/" + app, ReadOnly: true},
			{Name: token, MountPath: "/var/run/secrets/kubernetes.io/serviceaccount", ReadOnly: true},
		},
		LivenessProbe: probe("/livez", 10), ReadinessProbe: probe("/readyz", 5),
		TerminationMessagePath: "/dev/termination-log", TerminationMessagePolicy: corev1.TerminationMessageReadFile,
		ImagePullPolicy: corev1.PullIfNotPresent,
		SecurityContext: restrictedContainer(),
	}
}

func sidecarContainer(token string) corev1.Container {
	return corev1.Container{
		Name: "log-shipper", Image: "registry.example.com/platform/log-shipper:3.1.4",
		Env: []corev1.EnvVar{
			{Name: "NODE_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "spec.nodeName"}}},
		},
		Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: apiresource.MustParse("10m"), corev1.ResourceMemory: apiresource.MustParse("32Mi")},
			Limits:   corev1.ResourceList{corev1.ResourceMemory: apiresource.MustParse("64Mi")},
		},
		VolumeMounts:           []corev1.VolumeMount{{Name: token, MountPath: "/var/run/secrets/kubernetes.io/serviceaccount", ReadOnly: true}},
		TerminationMessagePath: "/dev/termination-log", TerminationMessagePolicy: corev1.TerminationMessageReadFile,
		ImagePullPolicy: corev1.PullIfNotPresent,
		SecurityContext: restrictedContainer(),
	}
}

// restrictedContainer is what the "restricted" Pod Security Standard asks
// of a container.
func restrictedContainer() *corev1.SecurityContext {
	return &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false), ReadOnlyRootFilesystem: ptr.To(true),
		Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}
}

// kubeletStatus writes the status a kubelet writes as the pod starts
// (running false: containers creating) or once it runs.
func kubeletStatus(pod *corev1.Pod, i int, running bool) {
	scheduled := pod.Status.Conditions[0].LastTransitionTime
	started := metav1.NewTime(scheduled.Add(time.Second))
	hostIP := fmt.Sprintf("10.0.%d.%d", i/250%250, i%250+1)
	s := &pod.Status
	s.HostIP, s.HostIPs, s.StartTime = hostIP, []corev1.HostIP{{IP: hostIP}}, &started
	notReady := func(t corev1.PodConditionType) corev1.PodCondition {
		return corev1.PodCondition{Type: t, Status: corev1.ConditionFalse, LastTransitionTime: started,
			Reason: "ContainersNotReady", Message: "containers with unready status: [" + pod.Spec.Containers[0].Name + " log-shipper]"}
	}
	s.Conditions = []corev1.PodCondition{
		{Type: corev1.PodReadyToStartContainers, Status: corev1.ConditionFalse, LastTransitionTime: started},
		{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: started},
		notReady(corev1.PodReady), notReady(corev1.ContainersReady),
		s.Conditions[0],
	}
	s.ContainerStatuses = nil
	for _, c := range pod.Spec.Containers {
		cs := corev1.ContainerStatus{Name: c.Name, Image: c.Image, Started: ptr.To(false),
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}}}
		s.ContainerStatuses = append(s.ContainerStatuses, cs)
	}
	if !running {
		return
	}
	ready := metav1.NewTime(started.Add(4 * time.Second))
	podIP := fmt.Sprintf("10.244.%d.%d", i/250%250, i%250+2)
	s.Phase, s.PodIP, s.PodIPs = corev1.PodRunning, podIP, []corev1.PodIP{{IP: podIP}}
	for j := range s.Conditions {
		if c := &s.Conditions[j]; c.Status == corev1.ConditionFalse {
			c.Status, c.Reason, c.Message, c.LastTransitionTime = corev1.ConditionTrue, "", "", ready
		}
	}
	for j := range s.ContainerStatuses {
		cs := &s.ContainerStatuses[j]
		cs.Ready, cs.Started = true, ptr.To(true)
		repo, _, _ := strings.Cut(cs.Image, ":")
		cs.ImageID = repo + fmt.Sprintf("@sha256:%064x", j+1)
		cs.ContainerID = fmt.Sprintf("containerd://%032x%032x", i, j+1)
		cs.State = corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: started}}
	}
}
