package bench

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// TestShardsScenario runs the shards scenario small, against real hub
// processes: three sharded replicas hold their shares of the pods (as the
// table says, to the pod), every node's view opened through the Service
// lands on its owner, and the owner of a third of the nodes killed under
// pod writes loses, repeats and reopens nothing.
func TestShardsScenario(t *testing.T) {
	np := startNodeproxy(t)
	target := localTarget(t, np)
	// Pods of other nodes, as other tests of this package leave them
	// in its control plane: a replica holds every pod its ranges take,
	// the scenario's or not, and the figures count them all.
	kube, err := kubernetes.NewForConfig(target.Admin)
	if err != nil {
		t.Fatal(err)
	}
	ctx0 := context.Background()
	if _, err := kube.CoreV1().Namespaces().Create(ctx0, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shards-other"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	if _, err := kube.CoreV1().ServiceAccounts("shards-other").Create(ctx0, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	for i := range 10 {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "other-" + strconv.Itoa(i)},
			Spec: corev1.PodSpec{NodeName: "other-node-" + strconv.Itoa(i), Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}}}
		if _, err := kube.CoreV1().Pods("shards-other").Create(ctx0, p, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	env := &Env{Progress: os.Stderr, Shards: ShardsLoad{Nodes: 24, PodsPerNode: 5, Replicas: 3, WriteRate: 40, Settle: 2 * time.Second}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	r, err := runShards(ctx, env, target)
	if err != nil {
		t.Fatal(err)
	}
	figures := map[string]float64{}
	for _, f := range r.Figures {
		figures[f.Name] = f.Value
		t.Logf("%s: %.1f %s", f.Name, f.Value, f.Unit)
	}
	for i := range 3 {
		name := shardMember(i)
		if got, want := figures[name+": pods held (owned and warm)"], figures[name+": pods held, by the table"]; got != want {
			t.Errorf("%s holds %.0f pods; its table says %.0f", name, got, want)
		}
	}
	if figures["unsharded: pods held"] < 24*5+10 {
		t.Errorf("the unsharded replica holds %.0f pods, not every one", figures["unsharded: pods held"])
	}
	for name, v := range figures {
		if strings.HasPrefix(name, "owner killed: events ") || strings.HasPrefix(name, "owner killed: views reopened") || strings.HasPrefix(name, "owner killed: views ended") {
			if v != 0 {
				t.Errorf("%s: %.0f", name, v)
			}
		}
	}
	if figures["owner killed: views on the killed replica"] == 0 || figures["owner killed: pod writes"] == 0 {
		t.Errorf("nothing measured: %.0f views on the killed replica, %.0f writes",
			figures["owner killed: views on the killed replica"], figures["owner killed: pod writes"])
	}
}
