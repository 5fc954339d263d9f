package cache

import (
	"encoding/json"
	"fmt"
	"reflect"
	"runtime"
	"strconv"
	"testing"
	"time"
	"unsafe"

	corev1 "k8s.io/api/core/v1"
	apiresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
)

// decodePod decodes p from its JSON, as the reflector hands the store a
// freshly decoded object that shares nothing with the last one.
func decodePod(t testing.TB, p *corev1.Pod) *corev1.Pod {
	t.Helper()
	raw, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	var out corev1.Pod
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatal(err)
	}
	return &out
}

func sameSlice[T any](a, b []T) bool {
	return len(a) > 0 && len(b) > 0 && unsafe.SliceData(a) == unsafe.SliceData(b)
}

func sameString(a, b string) bool {
	return a != "" && unsafe.StringData(a) == unsafe.StringData(b)
}

// TestANewVersionSharesWhatItHoldsUnchanged: a version keeps what
// was decoded, reuses the previous version's unchanged parts, and
// leaves the previous version as it was.
func TestANewVersionSharesWhatItHoldsUnchanged(t *testing.T) {
	base := scenarioPod(0, 20, "Pending")
	tests := []struct {
		name   string
		change func(p *corev1.Pod)
		// shared and own say which parts next must take from prev, and
		// which it must keep of its own.
		shared, own func(next, prev *corev1.Pod) bool
	}{{
		name:   "a status write shares the spec",
		change: func(p *corev1.Pod) { runningStatus(p) },
		shared: func(n, p *corev1.Pod) bool {
			return sameSlice(n.Spec.Volumes, p.Spec.Volumes) && sameSlice(n.Spec.Containers, p.Spec.Containers) &&
				sameString(n.Name, p.Name) && sameString(string(n.UID), string(p.UID)) &&
				reflect.ValueOf(n.Labels).UnsafePointer() == reflect.ValueOf(p.Labels).UnsafePointer()
		},
		own: func(n, p *corev1.Pod) bool { return !sameSlice(n.Status.ContainerStatuses, p.Status.ContainerStatuses) },
	}, {
		name: "one volume changed shares the others, not the list",
		change: func(p *corev1.Pod) {
			p.Spec.Volumes[3].Secret.SecretName = "changed"
		},
		shared: func(n, p *corev1.Pod) bool {
			return n.Spec.Volumes[2].Secret == p.Spec.Volumes[2].Secret && sameString(n.Spec.Volumes[3].Name, p.Spec.Volumes[3].Name)
		},
		own: func(n, p *corev1.Pod) bool {
			return !sameSlice(n.Spec.Volumes, p.Spec.Volumes) && n.Spec.Volumes[3].Secret != p.Spec.Volumes[3].Secret
		},
	}, {
		name: "a resource quantity and a time are shared whole or kept",
		change: func(p *corev1.Pod) {
			p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{corev1.ResourceMemory: apiresource.MustParse("512Mi")}
			p.CreationTimestamp = metav1.NewTime(p.CreationTimestamp.Add(time.Second))
		},
		shared: func(n, p *corev1.Pod) bool {
			return reflect.ValueOf(n.Spec.Containers[0].Resources.Requests).UnsafePointer() ==
				reflect.ValueOf(p.Spec.Containers[0].Resources.Requests).UnsafePointer()
		},
		own: func(n, p *corev1.Pod) bool {
			return reflect.ValueOf(n.Spec.Containers[0].Resources.Limits).UnsafePointer() !=
				reflect.ValueOf(p.Spec.Containers[0].Resources.Limits).UnsafePointer() && !n.CreationTimestamp.Equal(&p.CreationTimestamp)
		},
	}, {
		name:   "a list grown by one shares its first elements",
		change: func(p *corev1.Pod) { p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "more"}) },
		shared: func(n, p *corev1.Pod) bool { return n.Spec.Volumes[0].Secret == p.Spec.Volumes[0].Secret },
		own:    func(n, p *corev1.Pod) bool { return len(n.Spec.Volumes) == len(p.Spec.Volumes)+1 },
	}, {
		name:   "nil and empty stay apart",
		change: func(p *corev1.Pod) { p.Spec.ImagePullSecrets = []corev1.LocalObjectReference{} },
		shared: func(n, p *corev1.Pod) bool { return sameSlice(n.Spec.Volumes, p.Spec.Volumes) },
		own:    func(n, p *corev1.Pod) bool { return n.Spec.ImagePullSecrets != nil && p.Spec.ImagePullSecrets == nil },
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			prev := decodePod(t, base)
			changed := base.DeepCopy()
			tt.change(changed)
			next := changed.DeepCopy() // json drops the empty slice of one case; what the decoder gave is what must stay
			if tt.name != "nil and empty stay apart" {
				next = decodePod(t, changed)
			}
			wantNext, wantPrev := next.DeepCopy(), prev.DeepCopy()
			slimVersion(next, prev)
			if !reflect.DeepEqual(next, wantNext) {
				t.Errorf("the new version changed in sharing")
			}
			if !reflect.DeepEqual(prev, wantPrev) {
				t.Errorf("the previous version changed in sharing")
			}
			if !tt.shared(next, prev) {
				t.Errorf("an unchanged part is not shared")
			}
			if !tt.own(next, prev) {
				t.Errorf("a changed part is shared")
			}
		})
	}
}

// TestAVersionsListsAreCutToLength: the decoder's spare capacity goes,
// whether or not there is a version before, and nothing else changes.
func TestAVersionsListsAreCutToLength(t *testing.T) {
	cutToLength := func(p *corev1.Pod) bool {
		return cap(p.Spec.Volumes) == len(p.Spec.Volumes) && cap(p.Spec.Containers[0].VolumeMounts) == len(p.Spec.Containers[0].VolumeMounts) &&
			cap(p.Spec.Volumes[20].Projected.Sources) == len(p.Spec.Volumes[20].Projected.Sources) && cap(p.Status.Conditions) == len(p.Status.Conditions)
	}
	first := scenarioPod(0, 20, corev1.PodPending)
	startingStatus(first)
	second := first.DeepCopy()
	second.Spec.Volumes = append(second.Spec.Volumes, corev1.Volume{Name: "more"})
	second.Status.Conditions = append(second.Status.Conditions, corev1.PodCondition{Type: "More"})
	for _, tt := range []struct {
		name       string
		next, prev *corev1.Pod
	}{
		{"no version before", decodePod(t, first), nil},
		{"a version before, lists grown", decodePod(t, second), decodePod(t, first)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if cutToLength(tt.next) {
				t.Fatal("the decoder left no spare capacity to cut")
			}
			want := tt.next.DeepCopy()
			var prev any
			if tt.prev != nil {
				slimVersion(tt.prev, nil) // as the store took it in
				prev = tt.prev
			}
			slimVersion(tt.next, prev)
			if !reflect.DeepEqual(tt.next, want) {
				t.Errorf("the version changed in slimming")
			}
			if !cutToLength(tt.next) {
				t.Errorf("lists left longer than their length")
			}
		})
	}
}

// TestTheStoreSharesUnchangedPartsOfEveryVersion: updates, deletions
// and relists of the store reuse the previous version's parts, and what
// readers see is what was decoded.
//
// Pods are kept as bytes (TestPodsAreKeptAsBytes); this is the sharing
// of every type kept decoded, on pods kept decoded.
func TestTheStoreSharesUnchangedPartsOfEveryVersion(t *testing.T) {
	s := newStore(served[0], 16)
	s.asBytes = false
	first := scenarioPod(0, 4, "Pending")
	first.ResourceVersion = "2"
	if err := s.Replace([]interface{}{decodePod(t, first)}, "2"); err != nil {
		t.Fatal(err)
	}
	running := first.DeepCopy()
	runningStatus(running)
	running.ResourceVersion = "3"
	if err := s.Update(decodePod(t, running)); err != nil {
		t.Fatal(err)
	}
	gone := running.DeepCopy()
	gone.ResourceVersion = "4"
	if err := s.Delete(decodePod(t, gone)); err != nil {
		t.Fatal(err)
	}
	events, err := s.Snapshot().Changes(2)
	if err != nil {
		t.Fatal(err)
	}
	if len(events) != 2 || events[0].Type != watch.Modified || events[1].Type != watch.Deleted {
		t.Fatalf("events %v, want MODIFIED then DELETED", events)
	}
	for i, want := range []*corev1.Pod{decodePod(t, running), decodePod(t, gone)} {
		got := events[i].Object.obj.(*corev1.Pod)
		if !reflect.DeepEqual(got.Spec, want.Spec) || !reflect.DeepEqual(got.Status, want.Status) || got.ResourceVersion != want.ResourceVersion {
			t.Errorf("event %d holds another object than was decoded", i)
		}
		if !sameSlice(got.Spec.Volumes, events[0].Prev.obj.(*corev1.Pod).Spec.Volumes) {
			t.Errorf("event %d does not share the first version's volumes", i)
		}
	}
	if got := events[0].Object; !sameString(got.Name, events[0].Prev.Name) || got.NodeName != first.Spec.NodeName {
		t.Errorf("the key fields are not the shared object's")
	}
}

// scenarioPod is a pod shaped as the nodeview scenario's (test/bench):
// a pod of node i that mounts objects secrets and configmaps of its own
// (half each), as its kubelet first sees it; with, besides, what most
// pods have and the scenario's do without: the projected
// service-account token kube-apiserver adds, and resources.
func scenarioPod(i, objects int, phase corev1.PodPhase) *corev1.Pod {
	now := metav1.NewTime(time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC))
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: fmt.Sprintf("r1-%d-0", i), Namespace: "bench-nodeview", CreationTimestamp: now, ResourceVersion: "2",
			UID: types.UID(fmt.Sprintf("0b1a6c2e-4b8f-4a3e-9d6e-%012d", i)), Labels: map[string]string{"bench.nodeproxy.io/round": "1"},
		},
		Spec: corev1.PodSpec{
			NodeName: fmt.Sprintf("node-%d", i),
			Containers: []corev1.Container{{
				Name: "c", Image: "registry.k8s.io/pause:3.10", ImagePullPolicy: corev1.PullIfNotPresent,
				Resources:              corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: apiresource.MustParse("1m")}},
				TerminationMessagePath: "/dev/termination-log", TerminationMessagePolicy: corev1.TerminationMessageReadFile,
			}},
			RestartPolicy: corev1.RestartPolicyAlways, TerminationGracePeriodSeconds: ptr.To[int64](30), DNSPolicy: corev1.DNSClusterFirst,
			ServiceAccountName: "default", SchedulerName: "default-scheduler", Priority: ptr.To[int32](0),
			SecurityContext: &corev1.PodSecurityContext{}, EnableServiceLinks: ptr.To(true), PreemptionPolicy: ptr.To(corev1.PreemptLowerPriority),
			Tolerations: []corev1.Toleration{
				{Key: "node.kubernetes.io/not-ready", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](300)},
				{Key: "node.kubernetes.io/unreachable", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](300)},
			},
		},
		Status: corev1.PodStatus{Phase: phase, QOSClass: corev1.PodQOSBurstable},
	}
	for o := range objects {
		name := fmt.Sprintf("n%d-p0-o%d", i, o)
		src := corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: name}, DefaultMode: ptr.To[int32](420)}}
		if o < objects/2 {
			src = corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: name, DefaultMode: ptr.To[int32](420)}}
		}
		pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: name, VolumeSource: src})
		pod.Spec.Containers[0].VolumeMounts = append(pod.Spec.Containers[0].VolumeMounts, corev1.VolumeMount{Name: name, MountPath: "/mnt/" + name})
	}
	token := "kube-api-access-" + strconv.Itoa(i%100000)
	pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: token, VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{DefaultMode: ptr.To[int32](420), Sources: []corev1.VolumeProjection{
		{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token", ExpirationSeconds: ptr.To[int64](3607)}},
		{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "kube-root-ca.crt"}, Items: []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}}}},
		{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{{Path: "namespace", FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.namespace"}}}}},
	}}}})
	pod.Spec.Containers[0].VolumeMounts = append(pod.Spec.Containers[0].VolumeMounts, corev1.VolumeMount{Name: token, MountPath: "/var/run/secrets/kubernetes.io/serviceaccount", ReadOnly: true})
	return pod
}

// startingStatus and runningStatus are the statuses a kubelet writes as
// the pod starts: its containers creating, then running.
func startingStatus(p *corev1.Pod) {
	now := metav1.NewTime(time.Date(2026, 11, 22, 10, 0, 1, 0, time.UTC))
	p.Status = corev1.PodStatus{
		Phase: corev1.PodPending, HostIP: "10.0.3.17", HostIPs: []corev1.HostIP{{IP: "10.0.3.17"}}, StartTime: &now, QOSClass: corev1.PodQOSBurstable,
		Conditions: []corev1.PodCondition{
			{Type: corev1.PodReadyToStartContainers, Status: corev1.ConditionFalse, LastTransitionTime: now},
			{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.PodReady, Status: corev1.ConditionFalse, LastTransitionTime: now, Reason: "ContainersNotReady", Message: "containers with unready status: [c]"},
			{Type: corev1.ContainersReady, Status: corev1.ConditionFalse, LastTransitionTime: now, Reason: "ContainersNotReady", Message: "containers with unready status: [c]"},
			{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: now},
		},
		ContainerStatuses: []corev1.ContainerStatus{{Name: "c", Image: "registry.k8s.io/pause:3.10", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}}}},
	}
}

func runningStatus(p *corev1.Pod) {
	startingStatus(p)
	now := metav1.NewTime(time.Date(2026, 11, 22, 10, 0, 3, 0, time.UTC))
	p.Status.Phase, p.Status.PodIP, p.Status.PodIPs = corev1.PodRunning, "10.244.3.41", []corev1.PodIP{{IP: "10.244.3.41"}}
	for i := range p.Status.Conditions {
		if c := &p.Status.Conditions[i]; c.Status == corev1.ConditionFalse {
			c.Status, c.Reason, c.Message, c.LastTransitionTime = corev1.ConditionTrue, "", "", now
		}
	}
	p.Status.ContainerStatuses = []corev1.ContainerStatus{{
		Name: "c", Ready: true, Started: ptr.To(true), Image: "registry.k8s.io/pause:3.10", ImageID: "registry.k8s.io/pause@sha256:ee6521f290b2168b6e0935a181d4cff9be1ac3f505666ef0e3c98fae8199917a",
		ContainerID: "containerd://7b1f0e2d3c4b5a69788796a5b4c3d2e1f0a9b8c7d6e5f4a3b2c1d0e9f8a7b6c5",
		State:       corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}},
	}}
}

// BenchmarkBytesPerPodHistory measures what the change log holds for a
// pod kept decoded (slimVersion's sharing; the hub keeps pods as bytes,
// BenchmarkBytesPerPod), shaped as the nodeview scenario's (20 secrets
// and configmaps mounted, and the service-account token most pods
// mount) as its kubelet starts it: the list's version, then the two status writes
// (containers creating, running), each decoded afresh as the reflector
// decodes it; heap after a forced collection, with every version in the
// log, less the heap before the list. It also gives the writer's time
// per update, sharing included, and for scale the time the update took
// to decode (from JSON here; the hub's reflectors decode JSON too).
//
//	go test ./cache -run '^$' -bench BytesPerPodHistory -benchtime 1x -count 3
func BenchmarkBytesPerPodHistory(b *testing.B) {
	const n = 2000
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	versions := func(i int) [3][]byte {
		var out [3][]byte
		p := scenarioPod(i, 20, corev1.PodPending)
		for v, status := range []func(*corev1.Pod){func(*corev1.Pod) {}, startingStatus, runningStatus} {
			status(p)
			p.ResourceVersion = strconv.Itoa(2 + v*n + i)
			raw, err := json.Marshal(p)
			if err != nil {
				b.Fatal(err)
			}
			out[v] = raw
		}
		return out
	}
	raws := make([][3][]byte, n)
	for i := range raws {
		raws[i] = versions(i)
	}
	decode := func(raw []byte) *corev1.Pod {
		var p corev1.Pod
		if err := json.Unmarshal(raw, &p); err != nil {
			b.Fatal(err)
		}
		return &p
	}
	for b.Loop() {
		base := heap()
		s := newStore(served[0], DefaultLogSize*2) // every version of the run stays in the log
		s.asBytes = false                          // slimVersion's sharing: BenchmarkBytesPerPod has pods as the hub keeps them
		list := make([]interface{}, n)
		for i := range list {
			list[i] = decode(raws[i][0])
		}
		if err := s.Replace(list, strconv.Itoa(n+1)); err != nil {
			b.Fatal(err)
		}
		list = nil
		listed := heap()
		var took, decoding time.Duration
		for v := 1; v < 3; v++ {
			for i := range raws {
				start := time.Now()
				p := decode(raws[i][v])
				decoding += time.Since(start)
				start = time.Now()
				if err := s.Update(p); err != nil {
					b.Fatal(err)
				}
				took += time.Since(start)
			}
		}
		after := heap()
		runtime.KeepAlive(s)
		b.ReportMetric(float64(listed-base)/n, "listed-B/pod")
		b.ReportMetric(float64(int64(after)-int64(listed))/(2*n), "B/update")
		b.ReportMetric(float64(int64(after)-int64(base))/n, "B/pod-with-history")
		b.ReportMetric(float64(took.Nanoseconds())/(2*n), "ns/update")
		b.ReportMetric(float64(decoding.Nanoseconds())/(2*n), "decode-ns/update")
	}
}

// BenchmarkAt measures what At costs for a state the log did not keep,
// at its worst: the change right after a kept one, checkpointEvery-1
// changes undone from the next, in a store of 10,000 pods (both trees).
//
//	go test ./cache -run '^$' -bench 'At$'
func BenchmarkAt(b *testing.B) {
	const n = 10000
	s := newStore(served[0], DefaultLogSize)
	list := make([]interface{}, n)
	pod := func(i int, rv uint64) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p" + strconv.Itoa(i), ResourceVersion: strconv.FormatUint(rv, 10)},
			Spec:       corev1.PodSpec{NodeName: "node-" + strconv.Itoa(i%500)},
		}
	}
	for i := range list {
		list[i] = pod(i, 1)
	}
	if err := s.Replace(list, "1"); err != nil {
		b.Fatal(err)
	}
	for rv := uint64(2); rv < 2+2*checkpointEvery; rv++ {
		if err := s.Update(pod(int(rv)*37%n, rv)); err != nil {
			b.Fatal(err)
		}
	}
	snap := s.Snapshot()
	want := uint64(1 + checkpointEvery + 1) // the change after the first kept state
	for b.Loop() {
		at, err := snap.At(want)
		if err != nil || at.RV != want {
			b.Fatalf("At(%d): %v", want, err)
		}
	}
}
