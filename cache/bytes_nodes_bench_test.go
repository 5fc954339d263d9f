package cache_test

import (
	"fmt"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/nodeproxy/nodeproxy/internal/liveheap"

	corev1 "k8s.io/api/core/v1"
	apiresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

var nodesGVR = corev1.SchemeGroupVersion.WithResource("nodes")

// kubeletNode is a Node as a kubelet registers and keeps it: the
// well-known labels, a few annotations, capacity and allocatable, five
// conditions, addresses, node info, and 30 images of two names each,
// heartbeat at beat.
func kubeletNode(i, beat int) *corev1.Node {
	name := fmt.Sprintf("node-%05d", i)
	at := metav1.NewTime(time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC).Add(time.Duration(beat) * 10 * time.Second))
	resources := corev1.ResourceList{
		corev1.ResourceCPU: apiresource.MustParse("16"), corev1.ResourceMemory: apiresource.MustParse("64Gi"),
		corev1.ResourcePods: apiresource.MustParse("110"), corev1.ResourceEphemeralStorage: apiresource.MustParse("200Gi"),
		"hugepages-2Mi": apiresource.MustParse("0"), "hugepages-1Gi": apiresource.MustParse("0"),
	}
	var conditions []corev1.NodeCondition
	for _, c := range []struct{ t, reason, message string }{
		{"MemoryPressure", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"},
		{"DiskPressure", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"},
		{"PIDPressure", "KubeletHasSufficientPID", "kubelet has sufficient PID available"},
		{"Ready", "KubeletReady", "kubelet is posting ready status"},
		{"NetworkUnavailable", "RouteCreated", "RouteController created a route"},
	} {
		status := corev1.ConditionFalse
		if c.t == "Ready" {
			status = corev1.ConditionTrue
		}
		conditions = append(conditions, corev1.NodeCondition{Type: corev1.NodeConditionType(c.t), Status: status,
			LastHeartbeatTime: at, LastTransitionTime: metav1.NewTime(at.Add(-time.Hour)), Reason: c.reason, Message: c.message})
	}
	var images []corev1.ContainerImage
	for j := range 30 {
		repo := fmt.Sprintf("registry.example.com/team-%d/service-%d", j%7, j)
		images = append(images, corev1.ContainerImage{Names: []string{
			repo + "@sha256:" + fmt.Sprintf("%064x", j), repo + ":1." + strconv.Itoa(j) + ".0"}, SizeBytes: int64(20_000_000 + j*1_000_000)})
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID(fmt.Sprintf("3e1f0c2a-7b6d-4c5e-9f8a-%012d", i)),
			ResourceVersion: strconv.Itoa(2 + i + beat*100000), CreationTimestamp: metav1.NewTime(at.Add(-24 * time.Hour)),
			Labels: map[string]string{
				"kubernetes.io/arch": "amd64", "kubernetes.io/os": "linux", "kubernetes.io/hostname": name,
				"node.kubernetes.io/instance-type": "m6i.4xlarge", "topology.kubernetes.io/region": "eu-west-1",
				"topology.kubernetes.io/zone": "eu-west-1" + string(rune('a'+i%3)), "node-role.kubernetes.io/worker": "",
			},
			Annotations: map[string]string{
				"node.alpha.kubernetes.io/ttl": "0", "volumes.kubernetes.io/controller-managed-attach-detach": "true",
				"csi.volume.kubernetes.io/nodeid": `{"ebs.csi.aws.com":"i-0123456789abcdef0"}`,
			}},
		Spec: corev1.NodeSpec{PodCIDR: "10.1.2.0/24", PodCIDRs: []string{"10.1.2.0/24"}, ProviderID: "aws:///eu-west-1a/i-0123456789abcdef0"},
		Status: corev1.NodeStatus{
			Capacity: resources, Allocatable: resources, Conditions: conditions,
			Addresses:       []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.1." + strconv.Itoa(i%250)}, {Type: corev1.NodeHostName, Address: name}},
			DaemonEndpoints: corev1.NodeDaemonEndpoints{KubeletEndpoint: corev1.DaemonEndpoint{Port: 10250}},
			NodeInfo: corev1.NodeSystemInfo{MachineID: fmt.Sprintf("%032x", i), SystemUUID: fmt.Sprintf("ec2%029x", i), BootID: fmt.Sprintf("%032x", i+1),
				KernelVersion: "6.1.0-27-cloud-amd64", OSImage: "Debian GNU/Linux 12 (bookworm)", ContainerRuntimeVersion: "containerd://2.1.4",
				KubeletVersion: "v1.36.3", OperatingSystem: "linux", Architecture: "amd64"},
			Images: images,
		},
	}
}

// BenchmarkBytesPerNode measures what a Node as a kubelet keeps it
// (kubeletNode) costs the hub: listed (cached-B/node), and then
// written again by ten heartbeats as watch events (hub-B/node, with the
// change log's history of the status writes). kept=hub keeps Nodes as
// bytes, kept=decoded as they were.
//
//	go test ./cache -run '^$' -bench BytesPerNode -benchtime 1x -count 3
func BenchmarkBytesPerNode(b *testing.B) {
	const n = 2000
	for _, kept := range representations {
		b.Run("kept="+string(kept), func(b *testing.B) {
			for b.Loop() {
				c := newCache(b, kept)
				base := liveheap.Bytes()
				list := make([]interface{}, n)
				for i := range list {
					list[i] = kubeletNode(i, 0)
				}
				if err := c.Store(nodesGVR).Replace(list, strconv.Itoa(2+n)); err != nil {
					b.Fatal(err)
				}
				list = nil
				cached := perObject(base, n)
				for beat := 1; beat <= 10; beat++ {
					for i := range n {
						if err := c.Store(nodesGVR).Update(kubeletNode(i, beat)); err != nil {
							b.Fatal(err)
						}
					}
				}
				hub := perObject(base, n)
				runtime.KeepAlive(c)
				b.ReportMetric(cached, "cached-B/node")
				b.ReportMetric(hub, "hub-B/node")
			}
		})
	}
}
