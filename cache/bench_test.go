package cache_test

import (
	"encoding/json"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nodeproxy/nodeproxy/internal/liveheap"

	corev1 "k8s.io/api/core/v1"
	apiresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/nodeproxy/nodeproxy/cache"
	"github.com/nodeproxy/nodeproxy/graph"
	"github.com/nodeproxy/nodeproxy/test/workload"
)

// These benchmarks measure the hub's live heap per cached object, in
// process: the heap after a forced collection, less the heap before, over
// the number of objects. Objects are decoded from JSON, as the hub's
// reflectors decode them, so that their strings, maps and slices are
// allocated as they are in production. They live outside package cache
// so that they can feed the authorization graph as the hub does
// (hub.FeedGraph), which the cache must not import.

// newCache is a cache of the default sizes that keeps its objects as the
// hub's does, or all decoded (kept).
func newCache(b *testing.B, kept representation) *cache.Cache {
	c, err := cache.NewDetached(cache.Options{LogSize: cache.DefaultLogSize, EncodedEntries: cache.DefaultEncodedEntries,
		KeepDecoded: kept == decoded})
	if err != nil {
		b.Fatal(err)
	}
	return c
}

// representation is how a benchmark's cache keeps objects: as the hub
// does (pods as bytes), or every one decoded, as before issue 37, to
// give both figures from one run.
type representation string

const (
	asTheHub representation = "hub"
	decoded  representation = "decoded"
)

var representations = []representation{decoded, asTheHub}

var (
	podsGVR       = corev1.SchemeGroupVersion.WithResource("pods")
	secretsGVR    = corev1.SchemeGroupVersion.WithResource("secrets")
	configmapsGVR = corev1.SchemeGroupVersion.WithResource("configmaps")
)

// perObject is the heap added since base, per object.
func perObject(since uint64, n int) float64 {
	return float64(int64(liveheap.Bytes())-int64(since)) / float64(n)
}

// decodeJSON decodes raw into a new object of example's type, as a
// reflector's decoder does.
func decodeJSON[T any](b *testing.B, raw []byte) *T {
	var o T
	if err := json.Unmarshal(raw, &o); err != nil {
		b.Fatal(err)
	}
	return &o
}

// BenchmarkBytesPerSecret measures the heap one cached secret of 1 KiB
// costs listed (the decoded object, and what the store adds: the Object
// record, the tree, the snapshot), and what a 1 KiB secret with a 512 B
// configmap (the pair) cost the hub when each arrives as a watch event,
// as a workload's objects do: objects, store and change log, over the
// first 20,000 pairs (hub-B/pair) and over 20,000 more
// (hub-B/pair-marginal). The change log holds its last DefaultLogSize
// changes of each type whatever the number of objects, so what it
// holds weighs on the first figure only: the second is what one more
// pair costs. kept=hub is the cache as the hub runs it, kept=decoded
// every object decoded.
//
//	go test ./cache -run '^$' -bench BytesPerSecret -benchtime 1x -count 3
func BenchmarkBytesPerSecret(b *testing.B) {
	for _, kept := range representations {
		b.Run("kept="+string(kept), func(b *testing.B) { benchmarkBytesPerSecret(b, kept) })
	}
}

func benchmarkBytesPerSecret(b *testing.B, kept representation) {
	const n = 20000
	secretTemplate := `{"metadata":{"name":"secret-%d","namespace":"ns%d","uid":"0b1a6c2e-4b8f-4a3e-9d6e-%012d",` +
		`"resourceVersion":"%d","creationTimestamp":"2026-11-22T10:00:00Z","labels":{"app":"web"}},` +
		`"type":"Opaque","data":{"password":"%s"}}`
	configMapTemplate := `{"metadata":{"name":"config-%d","namespace":"ns%d","uid":"1c2b7d3f-5c9a-4b4f-8e7f-%012d",` +
		`"resourceVersion":"%d","creationTimestamp":"2026-11-22T10:00:00Z","labels":{"app":"web"}},` +
		`"data":{"config.yaml":"%s"}}`
	secretData, _ := json.Marshal([]byte(strings.Repeat("x", 1024))) // base64 of 1 KiB, quoted
	configData := strings.Repeat("y", 512)
	secrets, configMaps := make([][]byte, 2*n), make([][]byte, 2*n)
	for i := range 2 * n {
		secrets[i] = fmt.Appendf(nil, secretTemplate, i, i%200, i, 2+2*i, strings.Trim(string(secretData), `"`))
		configMaps[i] = fmt.Appendf(nil, configMapTemplate, i, i%200, i, 3+2*i, configData)
	}
	for b.Loop() {
		// Listed secrets: the object, then what the store adds.
		c := newCache(b, kept)
		base := liveheap.Bytes()
		list := make([]interface{}, n)
		for i := range list {
			list[i] = decodeJSON[corev1.Secret](b, secrets[i])
		}
		decoded := liveheap.Bytes()
		if err := c.Store(secretsGVR).Replace(list, strconv.Itoa(2*n+2)); err != nil {
			b.Fatal(err)
		}
		list = nil
		object := float64(decoded-base) / n
		store := perObject(decoded, n)
		runtime.KeepAlive(c)
		c = nil

		// The pair, each object a watch event.
		c = newCache(b, kept)
		for _, s := range []*cache.Store{c.Store(secretsGVR), c.Store(configmapsGVR)} {
			if err := s.Replace(nil, "1"); err != nil {
				b.Fatal(err)
			}
		}
		add := func(from, to int) {
			for i := from; i < to; i++ {
				if err := c.Store(secretsGVR).Add(decodeJSON[corev1.Secret](b, secrets[i])); err != nil {
					b.Fatal(err)
				}
				if err := c.Store(configmapsGVR).Add(decodeJSON[corev1.ConfigMap](b, configMaps[i])); err != nil {
					b.Fatal(err)
				}
			}
		}
		base = liveheap.Bytes()
		add(0, n)
		first := liveheap.Bytes()
		add(n, 2*n)
		pair := float64(first-base) / n
		marginal := perObject(first, n)
		runtime.KeepAlive(c)

		b.ReportMetric(object+store, "cached-B/secret")
		b.ReportMetric(object, "object-B/secret")
		b.ReportMetric(store, "store-overhead-B/secret")
		b.ReportMetric(pair, "hub-B/pair")
		b.ReportMetric(marginal, "hub-B/pair-marginal")
	}
}

// BenchmarkBytesPerPod measures the heap one cached pod costs the hub,
// for two shapes: workload.DeploymentPod ("deployment": a real
// Deployment's pod as kube-apiserver stores it, two containers, about
// 5.4 KB of JSON) and typicalPod ("typical": one container, about 3.5 KB,
// the shape docs/operations.md's sizing formula was measured on). For
// each: listed and running, the object as decoded (object-B/pod) and
// once cached, with the store's records and trees (cached-B/pod; less
// than decoded where the store cuts decoded slices to length); what the
// authorization graph adds for it and the objects it references
// (graph-B/pod); and the change log's history once the pods have started
// as they do in a cluster, each written four times (created, scheduled,
// starting, running), each write a watch event (history-B/pod).
// hub-B/pod is all three together: the figure the hub's
// go_gc_heap_live_bytes gives before and after as many pods.
//
// 3,000 pods of 10 replicas per Deployment, 10 Deployments per
// namespace, 30 per node: the history is that of a log of
// DefaultLogSize changes over 12,000 writes, so it is the last third's.
// The log's size is fixed, so what it holds is spread over however many
// pods there are: hub-B/pod-marginal is what 3,000 pods more, written
// alike once the log is full, cost each (their changes take the place
// of older ones), which is what a pod costs a replica of any size.
//
//	go test ./cache -run '^$' -bench 'BytesPerPod$' -benchtime 1x -count 3
func BenchmarkBytesPerPod(b *testing.B) {
	const n = 3000
	shapes := []struct {
		name string
		pod  func(namespace, app string, i int, node string, stage workload.PodStage) *corev1.Pod
	}{
		{"deployment", workload.DeploymentPod},
		{"typical", typicalPodAt},
	}
	for _, shape := range shapes {
		for _, kept := range representations {
			b.Run("shape="+shape.name+"/kept="+string(kept), func(b *testing.B) {
				pod := func(i int, stage workload.PodStage) *corev1.Pod {
					return shape.pod(fmt.Sprintf("ns%d", i/100), fmt.Sprintf("app%d", i/10), i, workload.NodeName(i%(n/30)), stage)
				}
				benchmarkBytesPerPod(b, n, kept, pod)
			})
		}
	}
}

func benchmarkBytesPerPod(b *testing.B, n int, kept representation, pod func(i int, stage workload.PodStage) *corev1.Pod) {
	encode := func(p *corev1.Pod, rv int) []byte {
		p.ResourceVersion = strconv.Itoa(rv)
		raw, err := json.Marshal(p)
		if err != nil {
			b.Fatal(err)
		}
		return raw
	}
	// writes[s][i] is pod i's write at stage s, at resourceVersion
	// 2+s*2n+i: each stage for every pod, then the next; pods n to 2n
	// are the marginal ones, written after the first n.
	writes := make([][][]byte, len(workload.PodStages))
	for s, stage := range workload.PodStages {
		writes[s] = make([][]byte, 2*n)
		for i := range 2 * n {
			writes[s][i] = encode(pod(i, stage), 2+s*2*n+i)
		}
	}
	running := writes[len(writes)-1]
	last := strconv.Itoa(1 + len(writes)*2*n)
	list := func(c *cache.Cache) {
		objs := make([]interface{}, n)
		for i := range objs {
			objs[i] = decodeJSON[corev1.Pod](b, running[i])
		}
		if err := c.Store(podsGVR).Replace(objs, last); err != nil {
			b.Fatal(err)
		}
	}
	withGraph := func(c *cache.Cache) {
		c.Store(podsGVR).AddHandler(graph.New().PodHandler())
	}
	for b.Loop() {
		// Listed, no graph: the object, then the store.
		c := newCache(b, kept)
		base := liveheap.Bytes()
		decoded := make([]*corev1.Pod, n)
		for i := range decoded {
			decoded[i] = decodeJSON[corev1.Pod](b, running[i])
		}
		object := perObject(base, n)
		runtime.KeepAlive(decoded)
		decoded = nil
		list(c)
		cached := perObject(base, n)
		runtime.KeepAlive(c)

		// Listed, with the graph.
		c = newCache(b, kept)
		withGraph(c)
		base = liveheap.Bytes()
		list(c)
		listed := perObject(base, n)
		runtime.KeepAlive(c)

		// Written four times each, with the graph and the log.
		c = newCache(b, kept)
		withGraph(c)
		store := c.Store(podsGVR)
		if err := store.Replace(nil, "1"); err != nil {
			b.Fatal(err)
		}
		written := func(from, to int) { writeStages(b, store, writes, from, to) }
		base = liveheap.Bytes()
		written(0, n)
		first := liveheap.Bytes()
		hub := float64(int64(first)-int64(base)) / float64(n)
		// As many more: the log was full, so they take the place of
		// older changes in it, as a pod more does in a cluster past a
		// few thousand pods.
		written(n, 2*n)
		marginal := perObject(first, n)
		runtime.KeepAlive(c)

		b.ReportMetric(float64(len(running[0])), "json-B/pod")
		b.ReportMetric(object, "object-B/pod")
		b.ReportMetric(cached, "cached-B/pod")
		b.ReportMetric(listed-cached, "graph-B/pod")
		b.ReportMetric(hub-listed, "history-B/pod")
		b.ReportMetric(hub, "hub-B/pod")
		b.ReportMetric(marginal, "hub-B/pod-marginal")
	}
}

// writeStages writes pods from to to into store, each stage for every
// pod, then the next: writes[s][i] is pod i's JSON at stage s, created
// at the first stage and updated at the others, decoded as a
// reflector's decoder does.
func writeStages(b *testing.B, store *cache.Store, writes [][][]byte, from, to int) {
	for s := range writes {
		for i := from; i < to; i++ {
			p := decodeJSON[corev1.Pod](b, writes[s][i])
			write := store.Update
			if s == 0 {
				write = store.Add
			}
			if err := write(p); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// typicalPodAt is typicalPod named and placed as workload.DeploymentPod
// places its pods, at stage: unbound until scheduled, and pending with
// no status of the kubelet's until running.
func typicalPodAt(namespace, app string, i int, node string, stage workload.PodStage) *corev1.Pod {
	p := typicalPod()
	p.Namespace, p.Name = namespace, fmt.Sprintf("%s-7d9c8b6f5-%05x", app, i)
	p.UID = types.UID(fmt.Sprintf("0b1a6c2e-4b8f-4a3e-9d6e-%012d", i))
	if stage >= workload.PodScheduled {
		p.Spec.NodeName = node
	}
	if stage < workload.PodRunning {
		p.Status = corev1.PodStatus{Phase: corev1.PodPending, QOSClass: corev1.PodQOSBurstable}
	}
	return p
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

// BenchmarkLookup100Secrets measures a kubelet's bulk get's lookups
// alone: 100 secrets by name in a store of 20,000 (200 namespaces), as
// BenchmarkBulkGet100Named's fixture holds them, kept as the hub keeps
// them (a secret's name and namespace in its own bytes) and decoded.
//
//	go test ./cache -run '^$' -bench Lookup100Secrets -count 5
func BenchmarkLookup100Secrets(b *testing.B) {
	for _, kept := range representations {
		b.Run("kept="+string(kept), func(b *testing.B) {
			c := newCache(b, kept)
			s := c.Store(secretsGVR)
			value := []byte(strings.Repeat("x", 1024))
			for i := range 20000 {
				secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: fmt.Sprintf("ns%d", i%200), Name: fmt.Sprintf("secret-%d", i),
					UID: types.UID(fmt.Sprintf("0b1a6c2e-4b8f-4a3e-9d6e-%012d", i)), ResourceVersion: strconv.Itoa(2 + i)},
					Type: corev1.SecretTypeOpaque, Data: map[string][]byte{"data": value}}
				if err := s.Add(secret); err != nil {
					b.Fatal(err)
				}
			}
			snap := s.Snapshot()
			var keys [100][2]string
			for i := range keys {
				n := i * 199
				keys[i] = [2]string{fmt.Sprintf("ns%d", n%200), fmt.Sprintf("secret-%d", n)}
			}
			for b.Loop() {
				for _, k := range keys {
					if _, ok := snap.Get(k[0], k[1]); !ok {
						b.Fatal("missing")
					}
				}
			}
		})
	}
}
