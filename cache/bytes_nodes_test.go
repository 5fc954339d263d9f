package cache

import (
	"encoding/binary"
	"fmt"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// statusNode is a Node as its kubelet writes it at resourceVersion rv:
// a heartbeat in its Ready condition at beat, images images, and volumes
// in use (status fields after the images).
func statusNode(rv, beat, images int) *corev1.Node {
	at := metav1.NewTime(time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC).Add(time.Duration(beat) * 10 * time.Second))
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "node-1", UID: "3e1f0c2a-7b6d-4c5e-9f8a-000000000001", ResourceVersion: strconv.Itoa(rv),
			Labels:        map[string]string{"kubernetes.io/hostname": "node-1"},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubelet", Operation: metav1.ManagedFieldsOperationUpdate}}},
		Spec: corev1.NodeSpec{PodCIDR: "10.1.2.0/24", ProviderID: "aws:///eu-west-1a/i-0123456789abcdef0"},
		Status: corev1.NodeStatus{
			Conditions:   []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: at, Reason: "KubeletReady"}},
			Addresses:    []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.1.1"}},
			VolumesInUse: []corev1.UniqueVolumeName{"kubernetes.io/csi/ebs.csi.aws.com^vol-0123"},
		},
	}
	for j := range images {
		repo := fmt.Sprintf("registry.example.com/team/service-%d", j)
		n.Status.Images = append(n.Status.Images, corev1.ContainerImage{Names: []string{repo + ":1.0", repo + "@sha256:" + fmt.Sprintf("%064x", j)}, SizeBytes: int64(j+1) << 20})
	}
	return n
}

// statusWritesBytes are a NodeStatus's fields from its addresses to its
// images (nodeStatusWrites) as its protobuf encoding holds them: each
// field's tag, length and value, and nothing else.
func statusWritesBytes(t *testing.T, n *corev1.Node) string {
	t.Helper()
	var b []byte
	field := func(num byte, m interface{ Marshal() ([]byte, error) }) {
		v, err := m.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		b = append(binary.AppendUvarint(append(b, num<<3|2), uint64(len(v))), v...)
	}
	for i := range n.Status.Addresses {
		field(5, &n.Status.Addresses[i])
	}
	field(6, &n.Status.DaemonEndpoints)
	field(7, &n.Status.NodeInfo)
	for i := range n.Status.Images {
		field(8, &n.Status.Images[i])
	}
	return string(b)
}

// TestANodeStatusWriteSharesItsImages: a node store keeps each version
// as kube-apiserver's bytes; a heartbeat (a condition's time) shares the
// version before's images (with its addresses and node info) and what
// follows them, and an image pulled makes that middle segment anew. Each version reads back as
// the object written, SameSpec never takes a Node's shared images for a
// spec, and spec.unschedulable is read beside the bytes.
func TestANodeStatusWriteSharesItsImages(t *testing.T) {
	s := newStore(resource{gvr: corev1.SchemeGroupVersion.WithResource("nodes"), kind: "Node"}, 16)
	listed, heartbeat, pulled := statusNode(2, 0, 3), statusNode(3, 1, 3), statusNode(4, 1, 4)
	cordoned := statusNode(5, 1, 4)
	cordoned.Spec.Unschedulable = true
	if err := s.Replace([]interface{}{listed.DeepCopy()}, "2"); err != nil {
		t.Fatal(err)
	}
	for _, n := range []*corev1.Node{heartbeat, pulled, cordoned} {
		if err := s.Update(n.DeepCopy()); err != nil {
			t.Fatal(err)
		}
	}
	events, err := s.Snapshot().Changes(2)
	if err != nil {
		t.Fatal(err)
	}
	if len(events) != 3 {
		t.Fatalf("%d events, want 3", len(events))
	}
	for i, want := range []*corev1.Node{heartbeat, pulled, cordoned} {
		o := events[i].Object
		if o.raw.empty() || o.obj != nil {
			t.Fatalf("version %s is kept decoded", want.ResourceVersion)
		}
		typedAsWritten(t, o, want)
		if o.Unschedulable() != want.Spec.Unschedulable {
			t.Errorf("version %s: unschedulable %v, want %v", want.ResourceVersion, o.Unschedulable(), want.Spec.Unschedulable)
		}
	}
	first, beat, pull := events[0].Prev.raw, events[0].Object.raw, events[1].Object.raw
	if !sameString(beat.part[1], first.part[1]) || !sameString(beat.part[2], first.part[2]) {
		t.Error("a heartbeat does not share the images, and what follows them, with the version before")
	}
	if sameString(beat.part[0], first.part[0]) {
		t.Error("a heartbeat shares the segment its conditions are in")
	}
	if sameString(pull.part[1], beat.part[1]) || !sameString(pull.part[2], beat.part[2]) {
		t.Error("an image pulled does not make the middle segment anew, or the rest of the status another")
	}
	if events[0].Object.SameSpec(events[0].Prev) {
		t.Error("SameSpec takes a Node's shared images for its spec")
	}
}
