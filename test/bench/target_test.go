package bench

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/nodeproxy/nodeproxy/test/testserver"
)

// TestScenariosAgainstAKubeconfig runs the scenarios that take
// --kubeconfig against the harness's cluster as a kubeconfig sees it:
// nodeproxy registered as the bulk.k8s.io APIService, nodes played by
// impersonation through kube-apiserver, nodeproxy's process not measured.
// Each must measure, and leave nothing behind.
func TestScenariosAgainstAKubeconfig(t *testing.T) {
	np := startNodeproxy(t)
	ctx := context.Background()
	if err := cp.RegisterAPIService(ctx, testserver.Manifest(t, "apiservice.yaml"), np.Port); err != nil {
		t.Fatal(err)
	}
	target, err := KubeconfigTarget(cp.AdminConfig())
	if err != nil {
		t.Fatal(err)
	}
	if target.Nodeproxy.Measured() {
		t.Fatal("a kubeconfig's target claims to measure nodeproxy's process")
	}
	env := &Env{PhaseDuration: 10 * time.Millisecond, Watch: WatchLoad{Nodes: 3, ChannelsPerNode: 3, ObjectSize: 64, Updates: 10}, RevokeRate: 50}
	against, err := Lookup(nil, true)
	if err != nil {
		t.Fatal(err)
	}
	admin := kubernetes.NewForConfigOrDie(cp.AdminConfig())
	for _, s := range against {
		t.Run(s.Name, func(t *testing.T) {
			r, err := s.RunAgainst(ctx, env, target)
			if err != nil {
				t.Fatal(err)
			}
			figures := map[string]float64{}
			for _, f := range r.Figures {
				figures[f.Name] = f.Value
			}
			switch s.Name {
			case "bulkget":
				if figures["objects per node"] != 3 || len(r.Latencies) != 3 {
					t.Errorf("bulkget: %+v", r)
				}
				for _, l := range r.Latencies {
					if l.Count < 3 || l.P50 <= 0 {
						t.Errorf("bulkget latency %+v", l)
					}
				}
			case "fanout":
				if len(r.Latencies) != 1 || r.Latencies[0].Count < 3*3 || figures["events delivered"] <= 0 {
					t.Errorf("fanout: %+v", r)
				}
			case "revoke":
				if len(r.Latencies) != 1 || r.Latencies[0].Count != 3 || r.Latencies[0].P50 <= 0 {
					t.Errorf("revoke: %+v", r)
				}
			case "apiserver":
				if figures["watches on kube-apiserver, status quo"] < figures["watches on kube-apiserver, with nodeproxy"]+9 {
					t.Errorf("the status quo added fewer than 9 watches on kube-apiserver: %v", figures)
				}
				if _, ok := figures["channels on nodeproxy"]; ok {
					t.Errorf("reported nodeproxy's channels without measuring it: %v", figures)
				}
				if figures["CPU to open, kube-apiserver, status quo"] <= 0 {
					t.Errorf("kube-apiserver's CPU not read from its /metrics: %v", figures)
				}
			}
			// Namespaces terminate (there is no namespace controller in the
			// harness to finish them); nodes go at once.
			left, err := admin.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: benchLabel})
			if err != nil {
				t.Fatal(err)
			}
			if len(left.Items) > 0 {
				t.Errorf("%d simulated nodes left behind, the first %s", len(left.Items), left.Items[0].Name)
			}
			nss, err := admin.CoreV1().Namespaces().List(ctx, metav1.ListOptions{LabelSelector: benchLabel})
			if err != nil {
				t.Fatal(err)
			}
			for _, ns := range nss.Items {
				if ns.DeletionTimestamp == nil {
					t.Errorf("namespace %s left behind", ns.Name)
				}
			}
		})
	}
}
