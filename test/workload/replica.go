package workload

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Replica is the cluster of issue 37's replica sizing: Pods pods shaped as
// DeploymentPod, PodsPerNode to a node, in Deployments of a Secret and a
// ConfigMap of their own that every pod of the Deployment mounts (and
// reads in its env), DeploymentsPerNamespace to a namespace. The
// in-process benchmark (hub's BenchmarkReplicaHeap) and the run against
// kube-apiserver (BenchmarkReplicaHeapAgainstKubeAPIServer) build the
// same objects from it, so that their figures compare.
type Replica struct {
	Pods, PodsPerNode       int
	Deployments             int
	DeploymentsPerNamespace int
	// SecretSize and ConfigMapSize are the bytes of each Secret's and
	// ConfigMap's one value.
	SecretSize, ConfigMapSize int
}

// ReplicaOf is issue 37's shape at pods pods: 10 pods a node, 3 Secrets
// and 3 ConfigMaps for every 20 pods (150,000 each at 1,000,000 pods), 1 KiB
// secrets and 512 B configmaps, 10 Deployments a namespace.
func ReplicaOf(pods int) Replica {
	return Replica{Pods: pods, PodsPerNode: 10, Deployments: max(1, pods*3/20), DeploymentsPerNamespace: 10,
		SecretSize: 1024, ConfigMapSize: 512}
}

// Nodes is how many nodes the pods are spread over.
func (r Replica) Nodes() int { return (r.Pods + r.PodsPerNode - 1) / r.PodsPerNode }

// Namespaces is how many namespaces the Deployments are in.
func (r Replica) Namespaces() int {
	return (r.Deployments + r.DeploymentsPerNamespace - 1) / r.DeploymentsPerNamespace
}

// Namespace is namespace n's name.
func (r Replica) Namespace(n int) string { return fmt.Sprintf("replica-%d", n) }

// deployment is pod i's Deployment: consecutive pods share one, and so
// sit on consecutive nodes, as a Deployment's anti-affinity spreads them;
// each Secret and ConfigMap is then reached by several nodes, as a
// Deployment's are.
func (r Replica) deployment(i int) int { return int(int64(i) * int64(r.Deployments) / int64(r.Pods)) }

func (r Replica) app(d int) (namespace, app string) {
	return r.Namespace(d / r.DeploymentsPerNamespace), fmt.Sprintf("app%d", d)
}

// ServiceAccount is the one every pod of namespace n runs as: the
// namespace's "default", which kube-apiserver's ServiceAccount admission
// requires to exist before it admits a pod (kube-controller-manager makes
// it in a real cluster; the harness runs none).
func (r Replica) ServiceAccount(n int) *corev1.ServiceAccount {
	return &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: r.Namespace(n),
		UID: types.UID(fmt.Sprintf("3a4b5c6d-7e8f-4a1b-8c2d-%012x", n))}}
}

// CreatedPod is pod i as kube-apiserver stores it when created bound to
// its node: the status kube-apiserver resets a new pod's to (pending,
// its QoS class), whatever the request carried.
func (r Replica) CreatedPod(i int) *corev1.Pod {
	p := r.pod(i, PodScheduled)
	p.Status = corev1.PodStatus{Phase: corev1.PodPending, QOSClass: corev1.PodQOSBurstable}
	return p
}

// RunningPod is pod i once its kubelet has written its running status.
func (r Replica) RunningPod(i int) *corev1.Pod { return r.pod(i, PodRunning) }

func (r Replica) pod(i int, stage PodStage) *corev1.Pod {
	namespace, app := r.app(r.deployment(i))
	p := DeploymentPod(namespace, app, i, NodeName(i%r.Nodes()), stage)
	p.Spec.ServiceAccountName, p.Spec.DeprecatedServiceAccount = "default", "default"
	return p
}

// Secret is Deployment d's secret, the one its pods mount as
// "credentials" and read DATABASE_PASSWORD from.
func (r Replica) Secret(d int) *corev1.Secret {
	namespace, app := r.app(d)
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: app + "-credentials", Namespace: namespace,
			UID:    types.UID(fmt.Sprintf("0b1a6c2e-4b8f-4a3e-9d6e-%012x", d)),
			Labels: map[string]string{"app.kubernetes.io/name": app}},
		Type: corev1.SecretTypeOpaque,
		Data: map[string][]byte{"password": filler(d, r.SecretSize)},
	}
}

// ConfigMap is Deployment d's configmap, the one its pods mount as
// "config".
func (r Replica) ConfigMap(d int) *corev1.ConfigMap {
	namespace, app := r.app(d)
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: app + "-config", Namespace: namespace,
			UID:    types.UID(fmt.Sprintf("1c2b7d3f-5c9a-4b4f-8e7f-%012x", d)),
			Labels: map[string]string{"app.kubernetes.io/name": app}},
		Data: map[string]string{"config.yaml": string(filler(d, r.ConfigMapSize))},
	}
}

// filler is n printable bytes that differ from one object to the next.
func filler(seed, n int) []byte {
	b := make([]byte, n)
	x := uint32(seed)*2654435761 + 1
	for i := range b {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		b[i] = 'a' + byte(x%26)
	}
	return b
}
