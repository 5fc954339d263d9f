// Package workload generates synthetic clusters: nodes, pods and the
// objects they reference, named so that a test can tell from a name who
// may read it. Benchmarks feed the same objects to nodeproxy's graph and to
// whatever they compare it with; `nodeproxy-bench` will build on it.
//
// Names follow the in-tree Node authorizer's benchmarks, so figures can be
// set side by side: pod<p>-node<n> in namespace ns<p mod namespaces>, its
// secret<i>-pod<p>-node<n>, configmap<i>-..., pvc<i>-... bound to
// pv<i>-pod<p>-node<n>-ns<k> whose FlexVolume secret is secret-pv<i>-...,
// and secret<i>-shared / configmap<i>-shared used by many pods.
package workload

import (
	"errors"
	"fmt"
	"math/rand"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Shape is the size of a synthetic cluster.
type Shape struct {
	Nodes       int
	PodsPerNode int
	Namespaces  int

	UniqueSecretsPerPod    int
	UniqueConfigMapsPerPod int
	UniquePVCsPerPod       int // each bound to its own PV with a secret

	// Shared objects: each pod picks SharedXPerPod of the
	// SharedXPerNamespace objects of its namespace (at least as many as it
	// picks).
	SharedSecretsPerPod          int
	SharedSecretsPerNamespace    int
	SharedConfigMapsPerPod       int
	SharedConfigMapsPerNamespace int

	AttachmentsPerNode int

	// Seed makes the choice of shared objects repeatable.
	Seed int64
}

// ReferenceShape is the shape of the in-tree Node authorizer's
// BenchmarkAuthorization and BenchmarkPopulation*: 500 nodes x 200 pods in
// 200 namespaces, each pod with a unique configmap, a unique secret, a
// shared secret and a unique PVC bound to a PV with a secret; 20 volume
// attachments per node.
func ReferenceShape() Shape {
	return Shape{
		Nodes: 500, PodsPerNode: 200, Namespaces: 200,
		UniqueSecretsPerPod: 1, UniqueConfigMapsPerPod: 1, UniquePVCsPerPod: 1,
		SharedSecretsPerPod: 1,
		AttachmentsPerNode:  20,
		Seed:                12345,
	}
}

// Validate refuses shapes that cannot be generated.
func (s Shape) Validate() error {
	var errs []error
	positive := func(name string, v int) {
		if v <= 0 {
			errs = append(errs, fmt.Errorf("%s must be positive, got %d", name, v))
		}
	}
	notNegative := func(name string, v int) {
		if v < 0 {
			errs = append(errs, fmt.Errorf("%s must not be negative, got %d", name, v))
		}
	}
	positive("nodes", s.Nodes)
	positive("pods per node", s.PodsPerNode)
	positive("namespaces", s.Namespaces)
	for name, v := range map[string]int{
		"unique secrets per pod": s.UniqueSecretsPerPod, "unique configmaps per pod": s.UniqueConfigMapsPerPod,
		"unique PVCs per pod": s.UniquePVCsPerPod, "shared secrets per pod": s.SharedSecretsPerPod,
		"shared secrets per namespace": s.SharedSecretsPerNamespace, "shared configmaps per pod": s.SharedConfigMapsPerPod,
		"shared configmaps per namespace": s.SharedConfigMapsPerNamespace, "attachments per node": s.AttachmentsPerNode,
	} {
		notNegative(name, v)
	}
	return errors.Join(errs...)
}

// Cluster is a generated workload.
type Cluster struct {
	Nodes       []*corev1.Node
	Pods        []*corev1.Pod
	PVs         []*corev1.PersistentVolume
	Attachments []*storagev1.VolumeAttachment
}

// Generate builds the cluster of shape s.
func Generate(s Shape) (*Cluster, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	r := rand.New(rand.NewSource(s.Seed))
	c := &Cluster{
		Nodes:       make([]*corev1.Node, 0, s.Nodes),
		Pods:        make([]*corev1.Pod, 0, s.Nodes*s.PodsPerNode),
		PVs:         make([]*corev1.PersistentVolume, 0, s.Nodes*s.PodsPerNode*s.UniquePVCsPerPod),
		Attachments: make([]*storagev1.VolumeAttachment, 0, s.Nodes*s.AttachmentsPerNode),
	}
	for n := range s.Nodes {
		node := NodeName(n)
		c.Nodes = append(c.Nodes, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}})
		for p := range s.PodsPerNode {
			pod, pvs := s.pod(p, node, r)
			c.Pods = append(c.Pods, pod)
			c.PVs = append(c.PVs, pvs...)
		}
		for a := range s.AttachmentsPerNode {
			va := &storagev1.VolumeAttachment{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("attachment%d-%s", a, node)}}
			va.Spec.NodeName = node
			c.Attachments = append(c.Attachments, va)
		}
	}
	return c, nil
}

// NodeName is the name of the n-th node.
func NodeName(n int) string { return fmt.Sprintf("node%d", n) }

// Namespace is the namespace of the p-th pod of every node.
func (s Shape) Namespace(p int) string { return fmt.Sprintf("ns%d", p%s.Namespaces) }

// Pod builds the p-th pod of node, with the same names Generate gives it,
// for benchmarks that write one more pod into a populated graph.
func (s Shape) Pod(p int, node string) (*corev1.Pod, []*corev1.PersistentVolume) {
	return s.pod(p, node, rand.New(rand.NewSource(s.Seed)))
}

func (s Shape) pod(p int, node string, r *rand.Rand) (*corev1.Pod, []*corev1.PersistentVolume) {
	name := fmt.Sprintf("pod%d-%s", p, node)
	ns := s.Namespace(p)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, UID: types.UID(ns + "/" + name)},
		Spec: corev1.PodSpec{
			NodeName:           node,
			ServiceAccountName: fmt.Sprintf("svcacct%d-%s", p, node),
		},
	}
	volume := func(src corev1.VolumeSource) {
		pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: fmt.Sprintf("v%d", len(pod.Spec.Volumes)), VolumeSource: src})
	}
	for i := range s.UniqueSecretsPerPod {
		volume(corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: fmt.Sprintf("secret%d-%s", i, name)}})
	}
	for _, i := range subset(s.SharedSecretsPerPod, s.SharedSecretsPerNamespace, r) {
		volume(corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: fmt.Sprintf("secret%d-shared", i)}})
	}
	for i := range s.UniqueConfigMapsPerPod {
		volume(corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: fmt.Sprintf("configmap%d-%s", i, name)}}})
	}
	for _, i := range subset(s.SharedConfigMapsPerPod, s.SharedConfigMapsPerNamespace, r) {
		volume(corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: fmt.Sprintf("configmap%d-shared", i)}}})
	}
	var pvs []*corev1.PersistentVolume
	for i := range s.UniquePVCsPerPod {
		claim := fmt.Sprintf("pvc%d-%s", i, name)
		pv := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("pv%d-%s-%s", i, name, ns)}}
		pv.Spec.FlexVolume = &corev1.FlexPersistentVolumeSource{SecretRef: &corev1.SecretReference{Name: "secret-" + pv.Name}}
		pv.Spec.ClaimRef = &corev1.ObjectReference{Namespace: ns, Name: claim}
		pvs = append(pvs, pv)
		volume(corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}})
	}
	return pod, pvs
}

// subset picks n distinct indexes below max(n, of).
func subset(n, of int, r *rand.Rand) []int {
	if n == 0 {
		return nil
	}
	return r.Perm(max(n, of))[:n]
}

// Writer is what a generated cluster can be written into: nodeproxy's
// graph, or the reference's, in benchmarks.
type Writer interface {
	AddPod(*corev1.Pod)
	AddPV(*corev1.PersistentVolume)
	AddVolumeAttachment(name, node string)
}

// WriteTo adds every pod, then every PV, then every attachment to w, the
// order informers deliver them at start.
func (c *Cluster) WriteTo(w Writer) {
	for _, p := range c.Pods {
		w.AddPod(p)
	}
	for _, pv := range c.PVs {
		w.AddPV(pv)
	}
	for _, va := range c.Attachments {
		w.AddVolumeAttachment(va.Name, va.Spec.NodeName)
	}
}
