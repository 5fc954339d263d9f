package cache

import (
	"encoding/json"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// BenchmarkBytesPerSecret measures the heap one cached secret of 1 KiB
// costs: the decoded object (decoded from JSON, as the reflector decodes
// it, so its strings and maps are allocated as they are in production)
// and what the store adds (the Object record, both trees, the snapshot).
//
//	go test ./cache -run '^$' -bench BytesPerSecret -benchtime 1x
func BenchmarkBytesPerSecret(b *testing.B) {
	const n = 100000
	template := `{"metadata":{"name":"secret-%d","namespace":"ns%d","uid":"0b1a6c2e-4b8f-4a3e-9d6e-%012d",` +
		`"resourceVersion":"%d","creationTimestamp":"2026-11-22T10:00:00Z","labels":{"app":"web"}},` +
		`"type":"Opaque","data":{"password":"%s"}}`
	value := []byte(strings.Repeat("x", 1024))
	encoded, _ := json.Marshal(value) // base64 of 1 KiB, quoted
	for b.Loop() {
		object, store := heapPerObject(b, served[1], n, func(i int) interface{} {
			var s corev1.Secret
			raw := fmt.Sprintf(template, i, i%200, i, i+2, strings.Trim(string(encoded), `"`))
			if err := json.Unmarshal([]byte(raw), &s); err != nil {
				b.Fatal(err)
			}
			return &s
		})
		b.ReportMetric(object+store, "cached-B/secret")
		b.ReportMetric(object, "object-B/secret")
		b.ReportMetric(store, "store-overhead-B/secret")
	}
}

// heapPerObject decodes n objects with decode, caches them in a store of
// r, and returns the heap each costs decoded and what the store adds.
func heapPerObject(b *testing.B, r resource, n int, decode func(i int) interface{}) (object, store float64) {
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	base := heap()
	objects := make([]interface{}, n)
	for i := range n {
		objects[i] = decode(i)
	}
	decoded := heap()
	s := newStore(r, DefaultLogSize)
	if err := s.Replace(objects, strconv.Itoa(n+2)); err != nil {
		b.Fatal(err)
	}
	objects = nil
	cached := heap()
	runtime.KeepAlive(s)
	return float64(decoded-base) / float64(n), float64(int64(cached)-int64(decoded)) / float64(n)
}

// BenchmarkBytesPerPod measures the heap one cached pod costs, as
// BenchmarkBytesPerSecret does for secrets, for a pod shaped like a
// typical Deployment's once running: one container with resources, probes,
// five environment variables and three mounts (a secret, a configmap, the
// projected service-account token), owner reference, labels, the
// scheduler's tolerations and a status with conditions and one container
// status. Its JSON is about 4.5 KB; pods with more containers, env and
// annotations cost more, roughly in proportion to their JSON.
//
//	go test ./cache -run '^$' -bench BytesPerPod -benchtime 1x
func BenchmarkBytesPerPod(b *testing.B) {
	const n = 30000
	raw, err := json.Marshal(typicalPod())
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		object, store := heapPerObject(b, served[0], n, func(i int) interface{} {
			var p corev1.Pod
			if err := json.Unmarshal(raw, &p); err != nil {
				b.Fatal(err)
			}
			// Names and versions of their own, as a list would give them.
			p.Name, p.Namespace = fmt.Sprintf("web-%d", i), fmt.Sprintf("ns%d", i%200)
			p.UID = types.UID(fmt.Sprintf("0b1a6c2e-4b8f-4a3e-9d6e-%012d", i))
			p.ResourceVersion = strconv.Itoa(i + 2)
			p.Spec.NodeName = fmt.Sprintf("node-%d", i%1000)
			return &p
		})
		b.ReportMetric(float64(len(raw)), "json-B/pod")
		b.ReportMetric(object+store, "cached-B/pod")
		b.ReportMetric(object, "object-B/pod")
		b.ReportMetric(store, "store-overhead-B/pod")
	}
}

func typicalPod() *corev1.Pod {
	env := make([]corev1.EnvVar, 5)
	for i := range env {
		env[i] = corev1.EnvVar{Name: fmt.Sprintf("SETTING_%d", i), Value: fmt.Sprintf("value-of-setting-%d", i)}
	}
	now := metav1.NewTime(time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC))
	probe := &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt32(8080)}},
		PeriodSeconds: 10, TimeoutSeconds: 1, SuccessThreshold: 1, FailureThreshold: 3}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName: "web-7d9c8b6f5-", CreationTimestamp: now,
			Labels:          map[string]string{"app": "web", "pod-template-hash": "7d9c8b6f5"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-7d9c8b6f5", UID: "5c1d2e3f-0000-4000-8000-000000000001", Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}},
		},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{
				Name: "web", Image: "registry.example.com/team/web:1.42.0", Env: env,
				Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolTCP}},
				Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: apiresource.MustParse("100m"), corev1.ResourceMemory: apiresource.MustParse("128Mi")},
					Limits:   corev1.ResourceList{corev1.ResourceMemory: apiresource.MustParse("256Mi")},
				},
				VolumeMounts: []corev1.VolumeMount{
					{Name: "config", MountPath: "/etc/web"}, {Name: "credentials", MountPath: "/var/run/secrets/web", ReadOnly: true},
					{Name: "kube-api-access-x7k2p", MountPath: "/var/run/secrets/kubernetes.io/serviceaccount", ReadOnly: true},
				},
				LivenessProbe: probe, ReadinessProbe: probe,
				TerminationMessagePath: "/dev/termination-log", TerminationMessagePolicy: corev1.TerminationMessageReadFile,
				ImagePullPolicy: corev1.PullIfNotPresent,
			}},
			Volumes: []corev1.Volume{
				{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "web-config"}, DefaultMode: ptr.To[int32](420)}}},
				{Name: "credentials", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "web-credentials", DefaultMode: ptr.To[int32](420)}}},
				{Name: "kube-api-access-x7k2p", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{DefaultMode: ptr.To[int32](420), Sources: []corev1.VolumeProjection{
					{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token", ExpirationSeconds: ptr.To[int64](3607)}},
					{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "kube-root-ca.crt"}, Items: []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}}}},
					{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{{Path: "namespace", FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.namespace"}}}}},
				}}}},
			},
			RestartPolicy: corev1.RestartPolicyAlways, TerminationGracePeriodSeconds: ptr.To[int64](30), DNSPolicy: corev1.DNSClusterFirst,
			ServiceAccountName: "web", SchedulerName: "default-scheduler", Priority: ptr.To[int32](0),
			SecurityContext: &corev1.PodSecurityContext{},
			Tolerations: []corev1.Toleration{
				{Key: "node.kubernetes.io/not-ready", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](300)},
				{Key: "node.kubernetes.io/unreachable", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](300)},
			},
		},
		Status: corev1.PodStatus{
			Phase: corev1.PodRunning, HostIP: "10.0.3.17", PodIP: "10.244.3.41", StartTime: &now, QOSClass: corev1.PodQOSBurstable,
			HostIPs: []corev1.HostIP{{IP: "10.0.3.17"}}, PodIPs: []corev1.PodIP{{IP: "10.244.3.41"}},
			Conditions: []corev1.PodCondition{
				{Type: corev1.PodReadyToStartContainers, Status: corev1.ConditionTrue, LastTransitionTime: now},
				{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: now},
				{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
				{Type: corev1.ContainersReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
				{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: now},
			},
			ContainerStatuses: []corev1.ContainerStatus{{
				Name: "web", Ready: true, Started: ptr.To(true), Image: "registry.example.com/team/web:1.42.0",
				ImageID:     "registry.example.com/team/web@sha256:4f1c3a0d5e6b7c8d9e0f1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e8f9a0b1c2d",
				ContainerID: "containerd://7b1f0e2d3c4b5a69788796a5b4c3d2e1f0a9b8c7d6e5f4a3b2c1d0e9f8a7b6c5",
				State:       corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}},
			}},
		},
	}
}
