package bench

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
)

// kubeletRound is one round of a side: the same pods brought up,
// through an update of every secret, and deleted; they mount their
// objects, or as many emptyDir volumes in their place (bare pods).
type kubeletRound struct {
	mounting bool
	// apiCPU and hubCPU are the servers' CPU over the whole round.
	apiCPU, hubCPU time.Duration
	// heap (kube-apiserver's live heap) and goroutines (its goroutines)
	// are read once the pods are Running.
	heap       int64
	goroutines float64
	// upTook is from creating the pods to the last one Running.
	upTook time.Duration
	// latencies are from a secret's update to its file's new content,
	// for every pod that mounts it; none for bare pods.
	latencies []time.Duration
	// requests are what kube-apiserver was asked over the round.
	requests requestCounts
	// took is how long the round lasted: more than its length when its
	// work did not fit.
	took time.Duration
}

// roundLabel marks the pods of a round.
const roundLabel = "bench.nodeproxy.io/round"

// round runs round k. Its three parts each end at a fixed offset from
// its start whatever the pods' kind, so that both kinds hear the same
// background traffic; a part whose work takes longer delays the rest
// and is counted (kubeletRound.took).
func (s *sideRun) round(ctx context.Context, k int, mounting bool) (r kubeletRound, err error) {
	l := s.env.Kubelets
	kind := "bare"
	if mounting {
		kind = "mounting"
	}
	s.env.progressf("kubelets (%s): round %d, %d %s pods", s.way, k, l.Nodes*l.PodsPerNode, kind)
	r.mounting = mounting
	quarter := l.Round / 4
	began := time.Now()
	apiStart, hubStart, err := serverUsage(s.t)
	if err != nil {
		return r, err
	}
	before, err := ScrapeAPIServer(ctx, s.admin.CoreV1().RESTClient())
	if err != nil {
		return r, err
	}

	files, err := s.createPods(ctx, k, mounting)
	if err != nil {
		return r, err
	}
	if err := s.waitPods(ctx, k, corev1.PodRunning); err != nil {
		return r, err
	}
	r.upTook = time.Since(began)
	m, err := afterGC(ctx, s.admin.CoreV1().RESTClient())
	if err != nil {
		return r, err
	}
	r.heap, r.goroutines = int64(m.Sum("go_memstats_heap_alloc_bytes")), m.Sum("go_goroutines")
	if err := sleepUntil(ctx, began.Add(quarter)); err != nil {
		return r, err
	}

	value := "v" + strconv.Itoa(k)
	updated, err := s.updateSecrets(ctx, value)
	if err != nil {
		return r, err
	}
	if r.latencies, err = waitFiles(ctx, files, value, updated); err != nil {
		return r, err
	}
	if err := sleepUntil(ctx, began.Add(3*quarter)); err != nil {
		return r, err
	}

	if err := s.admin.CoreV1().Pods(s.ns).DeleteCollection(ctx, metav1.DeleteOptions{}, roundPods(k)); err != nil {
		return r, fmt.Errorf("delete the pods: %w", err)
	}
	if err := s.waitPods(ctx, k, ""); err != nil {
		return r, err
	}
	if err := sleepUntil(ctx, began.Add(l.Round)); err != nil {
		return r, err
	}
	apiEnd, hubEnd, err := serverUsage(s.t)
	if err != nil {
		return r, err
	}
	after, err := ScrapeAPIServer(ctx, s.admin.CoreV1().RESTClient())
	if err != nil {
		return r, err
	}
	r.requests = requestsIn(after).minus(requestsIn(before))
	r.apiCPU, r.hubCPU = apiEnd.CPU-apiStart.CPU, hubEnd.CPU-hubStart.CPU
	r.took = time.Since(began)
	s.env.progressf("kubelets (%s): round %d done: kube-apiserver CPU %.2fs, hub CPU %.2fs, pods up in %.1fs, took %.1fs",
		s.way, k, r.apiCPU.Seconds(), r.hubCPU.Seconds(), r.upTook.Seconds(), r.took.Seconds())
	return r, nil
}

// mountedFile is one secret's file in one pod.
type mountedFile struct {
	path   string
	secret string
}

// createPods creates round k's pods, mounting their objects or as many
// emptyDir volumes, and returns the secret files the kubelets will
// write.
func (s *sideRun) createPods(ctx context.Context, k int, mounting bool) ([]mountedFile, error) {
	l := s.env.Kubelets
	var files []mountedFile
	for i, n := range s.nodes {
		for p := range l.PodsPerNode {
			var volumes []corev1.Volume
			var mounts []corev1.VolumeMount
			for o := range l.ObjectsPerPod {
				name := objectName(i, p, o)
				var src corev1.VolumeSource
				if !mounting {
					// The same volumes, local: the pods weigh the same in
					// every write, read and event, and the kubelet mounts as
					// many volumes; only the objects are missing.
					src.EmptyDir = &corev1.EmptyDirVolumeSource{}
				} else if isSecret(l, o) {
					src.Secret = &corev1.SecretVolumeSource{SecretName: name}
				} else {
					src.ConfigMap = &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: name}}
				}
				volumes = append(volumes, corev1.Volume{Name: name, VolumeSource: src})
				mounts = append(mounts, corev1.VolumeMount{Name: name, MountPath: "/mnt/" + name})
			}
			pod := simulatedPod(s.ns, fmt.Sprintf("r%d-%d-%d", k, i, p), n.Name, volumes)
			pod.Labels = map[string]string{roundLabel: strconv.Itoa(k)}
			pod.Spec.Containers[0].VolumeMounts = mounts
			created, err := s.admin.CoreV1().Pods(s.ns).Create(ctx, pod, metav1.CreateOptions{})
			if err != nil {
				return nil, fmt.Errorf("create pod %s: %w", pod.Name, err)
			}
			if !mounting {
				continue
			}
			for _, secret := range s.secrets[i][p] {
				files = append(files, mountedFile{path: n.Kubelet.SecretVolumeFile(created.UID, secret, "value"), secret: secret})
			}
		}
	}
	return files, nil
}

// waitPods waits for every pod of round k to be in phase, or, for the
// empty phase, to be gone.
func (s *sideRun) waitPods(ctx context.Context, k int, phase corev1.PodPhase) error {
	want := s.env.Kubelets.Nodes * s.env.Kubelets.PodsPerNode
	if phase == "" {
		want = 0
	}
	var last string
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		opts := roundPods(k)
		opts.ResourceVersion = "0"
		pods, err := s.admin.CoreV1().Pods(s.ns).List(ctx, opts)
		if err != nil {
			last = err.Error()
			return false, nil
		}
		ready := 0
		for _, p := range pods.Items {
			if p.Status.Phase == phase {
				ready++
			}
		}
		last = fmt.Sprintf("%d of %d pods, %d %s", len(pods.Items), want, ready, phase)
		return len(pods.Items) == want && ready == want, nil
	})
	if err != nil {
		if phase == "" {
			phase = "deleted"
		}
		return fmt.Errorf("round %d's pods not %s (%s): %w", k, phase, last, err)
	}
	return nil
}

func roundPods(k int) metav1.ListOptions {
	return metav1.ListOptions{LabelSelector: roundLabel + "=" + strconv.Itoa(k)}
}

// updateSecrets sets every secret's value, one at a time as a writer
// would, and returns when each was written.
func (s *sideRun) updateSecrets(ctx context.Context, value string) (map[string]time.Time, error) {
	patch := fmt.Appendf(nil, `{"stringData":{"value":%q}}`, value)
	updated := map[string]time.Time{}
	for _, pods := range s.secrets {
		for _, names := range pods {
			for _, name := range names {
				updated[name] = time.Now()
				if _, err := s.admin.CoreV1().Secrets(s.ns).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
					return nil, fmt.Errorf("update secret %s: %w", name, err)
				}
			}
		}
	}
	return updated, nil
}

// waitFiles waits for every file to hold value and returns, for each,
// the time from its secret's update to the first look that saw it.
func waitFiles(ctx context.Context, files []mountedFile, value string, updated map[string]time.Time) ([]time.Duration, error) {
	var latencies []time.Duration
	pending := files
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 5*time.Minute, true, func(context.Context) (bool, error) {
		now := time.Now()
		left := pending[:0]
		for _, f := range pending {
			if b, err := os.ReadFile(f.path); err == nil && string(b) == value {
				latencies = append(latencies, now.Sub(updated[f.secret]))
				continue
			}
			left = append(left, f)
		}
		pending = left
		return len(pending) == 0, nil
	}); err != nil {
		return nil, fmt.Errorf("%d of %d files without the update: %w", len(pending), len(files), err)
	}
	return latencies, nil
}

func sleepUntil(ctx context.Context, t time.Time) error {
	select {
	case <-time.After(time.Until(t)):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// objectsCost is what the mounted objects cost kube-apiserver and the
// hub: for each pair of rounds, the mounting round's reading less the
// bare round's, and the median of that over the pairs. A pair's rounds
// ran back to back on the same kubelets, so the difference leaves out
// what both pay (the pods, their status, node heartbeats, the secrets'
// writes).
type objectsCost struct {
	cpu, hubCPU time.Duration
	// cpuLow and cpuHigh are the pairs' lowest and highest CPU
	// difference: the spread the median is taken from.
	cpuLow, cpuHigh      time.Duration
	heap                 int64
	goroutines           float64
	bareCPU, mountingCPU time.Duration
	upTook               time.Duration
	// requests are the median difference in what kube-apiserver was
	// asked, by verb and resource.
	requests requestCounts
}

func (s kubeletSide) objectsCost() objectsCost {
	var c objectsCost
	var cpu, hubCPU, bareCPU, mountingCPU, upTook []time.Duration
	var heap []int64
	var goroutines []float64
	var requests [][2]requestCounts
	for i := 0; i+1 < len(s.rounds); i += 2 {
		bare, mounting := s.rounds[i], s.rounds[i+1]
		if bare.mounting {
			bare, mounting = mounting, bare
		}
		cpu = append(cpu, mounting.apiCPU-bare.apiCPU)
		hubCPU = append(hubCPU, mounting.hubCPU-bare.hubCPU)
		heap = append(heap, mounting.heap-bare.heap)
		goroutines = append(goroutines, mounting.goroutines-bare.goroutines)
		bareCPU = append(bareCPU, bare.apiCPU)
		mountingCPU = append(mountingCPU, mounting.apiCPU)
		upTook = append(upTook, mounting.upTook)
		requests = append(requests, [2]requestCounts{bare.requests, mounting.requests})
	}
	c.requests = medianDifference(requests)
	c.cpu, c.hubCPU, c.bareCPU, c.mountingCPU, c.upTook = median(cpu), median(hubCPU), median(bareCPU), median(mountingCPU), median(upTook)
	c.heap, c.goroutines = median(heap), median(goroutines)
	if len(cpu) > 0 {
		c.cpuLow, c.cpuHigh = slices.Min(cpu), slices.Max(cpu)
	}
	return c
}

// median of xs, the mean of the middle two for an even count; zero for
// none.
func median[T int64 | float64 | time.Duration](xs []T) T {
	if len(xs) == 0 {
		var zero T
		return zero
	}
	xs = slices.Clone(xs)
	slices.Sort(xs)
	n := len(xs)
	return (xs[(n-1)/2] + xs[n/2]) / 2
}

// latencies pools the mounting rounds' update latencies.
func (s kubeletSide) latencies() []time.Duration {
	var all []time.Duration
	for _, r := range s.rounds {
		all = append(all, r.latencies...)
	}
	return all
}

// overran counts the rounds that took longer than their length.
func (s kubeletSide) overran() int {
	n := 0
	for _, r := range s.rounds {
		if r.took > s.roundLength+time.Second {
			n++
		}
	}
	return n
}
