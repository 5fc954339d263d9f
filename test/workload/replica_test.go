package workload

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// TestReplicaOfAMillionPodsIsIssue37s: the sizes docs/benchmarks.md
// quotes for ReplicaOf(1,000,000).
func TestReplicaOfAMillionPodsIsIssue37s(t *testing.T) {
	r := ReplicaOf(1_000_000)
	for _, c := range []struct {
		what      string
		got, want int
	}{
		{"nodes", r.Nodes(), 100_000},
		{"deployments (a Secret and a ConfigMap each)", r.Deployments, 150_000},
		{"namespaces", r.Namespaces(), 15_000},
	} {
		if c.got != c.want {
			t.Errorf("%s: %d, want %d", c.what, c.got, c.want)
		}
	}
}

// TestReplicaPodsMountTheirDeploymentsObjects: every pod mounts a Secret
// and a ConfigMap the replica has, in its namespace, and runs as its
// namespace's ServiceAccount; every Secret and ConfigMap is mounted, by
// pods on several nodes; every node has PodsPerNode pods.
func TestReplicaPodsMountTheirDeploymentsObjects(t *testing.T) {
	r := ReplicaOf(2000)
	type key struct{ namespace, name string }
	nodesOf := map[key]map[string]bool{}
	for d := range r.Deployments {
		s, m := r.Secret(d), r.ConfigMap(d)
		nodesOf[key{s.Namespace, s.Name}] = map[string]bool{}
		nodesOf[key{m.Namespace, m.Name}] = map[string]bool{}
		if len(s.Data["password"]) != r.SecretSize || len(m.Data["config.yaml"]) != r.ConfigMapSize {
			t.Fatalf("deployment %d: secret of %d B and configmap of %d B, want %d and %d",
				d, len(s.Data["password"]), len(m.Data["config.yaml"]), r.SecretSize, r.ConfigMapSize)
		}
	}
	accounts := map[key]bool{}
	for n := range r.Namespaces() {
		sa := r.ServiceAccount(n)
		accounts[key{sa.Namespace, sa.Name}] = true
	}
	podsOn := map[string]int{}
	for i := range r.Pods {
		created, p := r.CreatedPod(i), r.RunningPod(i)
		if created.Spec.NodeName != p.Spec.NodeName || created.Status.Phase != corev1.PodPending || p.Status.Phase != corev1.PodRunning {
			t.Fatalf("pod %d: created on %q %s, running on %q %s", i, created.Spec.NodeName, created.Status.Phase, p.Spec.NodeName, p.Status.Phase)
		}
		podsOn[p.Spec.NodeName]++
		if !accounts[key{p.Namespace, p.Spec.ServiceAccountName}] {
			t.Fatalf("pod %d runs as %s/%s, which the replica has not", i, p.Namespace, p.Spec.ServiceAccountName)
		}
		mounted := 0
		for _, v := range p.Spec.Volumes {
			name := ""
			switch {
			case v.Secret != nil:
				name = v.Secret.SecretName
			case v.ConfigMap != nil:
				name = v.ConfigMap.Name
			default:
				continue
			}
			nodes, ok := nodesOf[key{p.Namespace, name}]
			if !ok {
				t.Fatalf("pod %d mounts %s/%s, which the replica has not", i, p.Namespace, name)
			}
			nodes[p.Spec.NodeName] = true
			mounted++
		}
		if mounted != 2 {
			t.Fatalf("pod %d mounts %d of its Deployment's objects, want 2", i, mounted)
		}
	}
	for k, nodes := range nodesOf {
		if len(nodes) < 2 {
			t.Errorf("%s/%s is mounted on %d nodes, want several", k.namespace, k.name, len(nodes))
		}
	}
	if len(podsOn) != r.Nodes() {
		t.Errorf("pods on %d nodes, want %d", len(podsOn), r.Nodes())
	}
	for node, n := range podsOn {
		if n != r.PodsPerNode {
			t.Errorf("%s has %d pods, want %d", node, n, r.PodsPerNode)
		}
	}
}
