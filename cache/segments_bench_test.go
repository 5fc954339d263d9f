package cache

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/nodeproxy/nodeproxy/test/workload"
)

// BenchmarkSegments measures what reading an object's protobuf costs the
// store at every write of a type kept as bytes, past encoding it: cutting
// it into segments (a Deployment's running pod, a 1 KiB secret, a Node
// with 30 images), and for a secret pointing its keys into the first
// segment; and the decode of one kept as bytes (typed), whose envelope is
// read first. docs/benchmarks.md has the figures.
//
//	go test ./cache -run '^$' -bench 'Segments' -benchmem -count 5
func BenchmarkSegments(b *testing.B) {
	pod := workload.DeploymentPod("shop", "web", 1, "node-1", workload.PodRunning)
	pod.ResourceVersion = "7"
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web", UID: "0b1a6c2e-4b8f-4a3e-9d6e-000000000001",
		ResourceVersion: "7", Labels: map[string]string{"app": "web"}}, Type: corev1.SecretTypeOpaque,
		Data: map[string][]byte{"password": []byte(strings.Repeat("x", 1024))}}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1", ResourceVersion: "7"},
		Status: corev1.NodeStatus{
			Conditions:   []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady"}},
			Addresses:    []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.1.1"}, {Type: corev1.NodeHostName, Address: "node-1"}},
			NodeInfo:     corev1.NodeSystemInfo{KubeletVersion: "v1.36.3", OperatingSystem: "linux", Architecture: "amd64"},
			VolumesInUse: []corev1.UniqueVolumeName{"kubernetes.io/csi/ebs.csi.aws.com^vol-1"},
		}}
	for i := range 30 {
		node.Status.Images = append(node.Status.Images, corev1.ContainerImage{
			Names: []string{"registry.example.com/team/service-" + strings.Repeat("x", i) + ":1.0"}, SizeBytes: 20_000_000})
	}
	for _, tc := range []struct {
		name   string
		kind   string
		obj    runtime.Object
		layout cuts
	}{
		{"pod", "Pod", pod, metadataSpecStatus},
		{"secret", "Secret", secret, metadataRest},
		{"node", "Node", node, nodeStatusWrites},
	} {
		whole, err := protobufOf("v1", tc.kind, tc.obj)
		if err != nil {
			b.Fatal(err)
		}
		if len(cutPoints(whole, tc.layout)) == 0 {
			b.Fatalf("%s: not cut", tc.name)
		}
		o, err := newObject(tc.obj)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(tc.name+"/cut", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				o.raw = splitSegments(whole, tc.layout)
				if tc.layout == metadataRest {
					o.keysInBytes(whole)
				}
			}
		})
		b.Run(tc.name+"/typed", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, _, err := decodeProtobuf(whole); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
