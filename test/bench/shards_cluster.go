package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/nodeproxy/nodeproxy/test/controlplane"
)

// shardsConfigMaps are the configmaps the scenario's pods mount, a pod
// the (j mod shardsConfigMaps)th: the graph's edges, shared by many
// nodes as a Deployment's are.
const shardsConfigMaps = 100

// shardsCluster creates the scenario's cluster: Node objects, and pods
// bound to them, each mounting a configmap.
type shardsCluster struct {
	env  *Env
	kube kubernetes.Interface
	load ShardsLoad
}

func shardPod(node, j int) string { return "shards-pod-" + strconv.Itoa(node) + "-" + strconv.Itoa(j) }

// create makes what an earlier run did not.
func (c *shardsCluster) create(ctx context.Context) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: shardsNamespace}}
	if _, err := c.kube.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create namespace %s: %w", shardsNamespace, err)
	}
	// No controller manager runs here to make the namespace's default
	// ServiceAccount, which admission wants for every pod.
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: shardsNamespace}}
	if _, err := c.kube.CoreV1().ServiceAccounts(shardsNamespace).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create the default ServiceAccount of %s: %w", shardsNamespace, err)
	}
	if err := c.parallel(ctx, shardsConfigMaps, "configmaps", func(ctx context.Context, i int) error {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "shards-cm-" + strconv.Itoa(i), Namespace: shardsNamespace},
			Data: map[string]string{"config": "value-" + strconv.Itoa(i)}}
		_, err := c.kube.CoreV1().ConfigMaps(shardsNamespace).Create(ctx, cm, metav1.CreateOptions{})
		return err
	}); err != nil {
		return err
	}
	if err := c.parallel(ctx, c.load.Nodes, "nodes", func(ctx context.Context, i int) error {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: shardNode(i), Labels: map[string]string{"kubernetes.io/hostname": shardNode(i)}}}
		_, err := c.kube.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{})
		return err
	}); err != nil {
		return err
	}
	return c.parallel(ctx, c.load.Nodes*c.load.PodsPerNode, "pods", func(ctx context.Context, k int) error {
		node, j := k/c.load.PodsPerNode, k%c.load.PodsPerNode
		cm := "shards-cm-" + strconv.Itoa(j%shardsConfigMaps)
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: shardPod(node, j), Namespace: shardsNamespace, Labels: map[string]string{"app": "shards-" + strconv.Itoa(j)}},
			Spec: corev1.PodSpec{
				NodeName:   shardNode(node),
				Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10", VolumeMounts: []corev1.VolumeMount{{Name: "config", MountPath: "/etc/config"}}}},
				Volumes: []corev1.Volume{{Name: "config", VolumeSource: corev1.VolumeSource{
					ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: cm}}}}},
			},
		}
		_, err := c.kube.CoreV1().Pods(shardsNamespace).Create(ctx, p, metav1.CreateOptions{})
		return err
	})
}

// parallel runs create for 0..n-1, 16 at a time; objects that exist
// already are left as they are.
func (c *shardsCluster) parallel(ctx context.Context, n int, what string, create func(context.Context, int) error) error {
	bar := c.env.phase(n, "shards: creating %d %s", n, what)
	defer bar.Done()
	sem := make(chan struct{}, 16)
	errs := make(chan error, 1)
	var wg sync.WaitGroup
	for i := range n {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			wg.Wait()
			return ctx.Err()
		}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := create(ctx, i); err != nil && !apierrors.IsAlreadyExists(err) {
				select {
				case errs <- fmt.Errorf("create %s %d: %w", what, i, err):
				default:
				}
			}
			bar.Add(1)
		})
	}
	wg.Wait()
	select {
	case err := <-errs:
		return err
	default:
		return nil
	}
}

// replicaShape is what one replica holds.
type replicaShape struct {
	pods, heap float64
}

// replicaFootprint waits, at most 5 minutes, for np to hold pods pods,
// then reads its live heap: the median of three readings, each after a
// forced collection.
func replicaFootprint(ctx context.Context, np *controlplane.Nodeproxy, pods float64) (replicaShape, error) {
	var s replicaShape
	err := wait.PollUntilContextTimeout(ctx, time.Second, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		m, err := Scrape(ctx, np.Admin, np.URL+"/metrics")
		if err != nil {
			return false, nil
		}
		s.pods = m.Sum("nodeproxy_cache_objects", "resource", "pods")
		return s.pods >= pods, nil
	})
	if err != nil {
		return s, fmt.Errorf("holds %.0f pods, not %.0f: %w", s.pods, pods, err)
	}
	heaps := make([]float64, 0, 3)
	for range 3 {
		if err := forceGC(ctx, np); err != nil {
			return s, err
		}
		m, err := Scrape(ctx, np.Admin, np.URL+"/metrics")
		if err != nil {
			return s, err
		}
		heaps = append(heaps, m.Sum("go_gc_heap_live_bytes"))
		sleepCtx(ctx, hubHeapGap)
	}
	slices.Sort(heaps)
	s.heap = heaps[1]
	return s, nil
}

// forceGC has np collect its garbage (its /debug/pprof/heap?gc=1).
func forceGC(ctx context.Context, np *controlplane.Nodeproxy) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, np.URL+"/debug/pprof/heap?gc=1", nil)
	if err != nil {
		return err
	}
	resp, err := np.Admin.Do(req)
	if err != nil {
		return fmt.Errorf("force a garbage collection in %s: %w", np.URL, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("force a garbage collection in %s: %s", np.URL, resp.Status)
	}
	return nil
}

// shardEndpointSlice is the EndpointSlice the endpoints controller would
// keep for one replica of the headless Service: its stable name as
// hostname, its address, its port, and whether it is ready. One slice a
// replica, since the bench's replicas serve on ports of their own.
func shardEndpointSlice(member string, port int, ready bool) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name:      shardsService + "-" + member,
			Namespace: shardsServiceNamespace,
			Labels:    map[string]string{discoveryv1.LabelServiceName: shardsService, discoveryv1.LabelManagedBy: "nodeproxy-bench"},
		},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{
			// Not the replica's: kube-apiserver refuses loopback
			// addresses, and nothing dials these (the bench reaches
			// the replicas by name, shardReplicas.dial).
			Addresses:  []string{"10.0.0.1"},
			Hostname:   ptr.To(member),
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(ready), Serving: ptr.To(ready), Terminating: ptr.To(false)},
			TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: shardsServiceNamespace, Name: member},
		}},
		Ports: []discoveryv1.EndpointPort{{Name: ptr.To("https"), Port: ptr.To(int32(port)), Protocol: ptr.To(corev1.ProtocolTCP)}},
	}
}

// applyEndpointSlice creates or replaces s.
func applyEndpointSlice(ctx context.Context, kube kubernetes.Interface, s *discoveryv1.EndpointSlice) error {
	api := kube.DiscoveryV1().EndpointSlices(s.Namespace)
	old, err := api.Get(ctx, s.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		_, err = api.Create(ctx, s, metav1.CreateOptions{})
	case err == nil:
		s.ResourceVersion = old.ResourceVersion
		_, err = api.Update(ctx, s, metav1.UpdateOptions{})
	}
	if err != nil {
		return fmt.Errorf("endpointslice %s: %w", s.Name, err)
	}
	return nil
}
