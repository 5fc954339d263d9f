package podapi

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/nodeproxy/nodeproxy/podapi/admission"
	"github.com/nodeproxy/nodeproxy/test/testserver"
)

// TestKubeletRefusedPodQuarantined: a real kubelet (the hollow one) with
// no API server runs a pod of the Pod API; then a record the kubelet
// refuses appears in the store (as one written by an endpoint whose
// checks were looser than this kubelet's would), and a good pod is posted
// after it. The kubelet refuses every list holding the bad pod, so
// without the quarantine the good pod would never start. With it: the
// newest untaken pod (the good one) is quarantined on suspicion, then
// the bad one for certain, then the good one is served again and runs;
// the first pod runs throughout, and GET says what happened and why.
func TestKubeletRefusedPodQuarantined(t *testing.T) {
	ctx := context.Background()
	n := runs.Add(1)
	node, ns := fmt.Sprintf("podapi-node-%d", n), fmt.Sprintf("podapi-%d", n)
	src, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	kubelet := startKubelet(t, node, startGate(t) /* never opened: no API server */, "http://"+src.Addr().String()+"/pods", testToken, time.Second)
	api, call, _ := testAPIOn(t, Config{NodeName: node, KubeletToken: testToken,
		KubeletPodResources: kubelet.PodResourcesSocket(),
		KubeletTakeTimeout:  2 * time.Second}, src)

	first := post(t, call, podJSON(ns, "first"))
	testserver.Eventually(t, 2*time.Minute, "the first pod running and noted taken", func(ctx context.Context) error {
		if err := kubelet.Runs(ctx, first.Pod.UID); err != nil {
			return err
		}
		if r := get(t, call, first.Pod.UID); r.TakenByKubelet == nil {
			return errors.New("running, not noted taken yet")
		}
		return nil
	})

	// A pod the kubelet's validation refuses (a container name that is no
	// DNS label), stored as an older endpoint could have stored it.
	badPod, err := admission.Decode([]byte(podJSON(ns, "bad")))
	if err != nil {
		t.Fatal(err)
	}
	badPod.Name = "bad-" + node
	badPod.Spec.Containers[0].Name = "Not_A_Label"
	admission.SetDefaults(badPod)
	bad := api.newRecord(badPod)
	if err := api.store.Add(bad); err != nil {
		t.Fatal(err)
	}
	good := post(t, call, podJSON(ns, "good"))

	testserver.Eventually(t, 2*time.Minute, "the good pod running, the bad one quarantined", func(ctx context.Context) error {
		if err := kubelet.Runs(ctx, good.Pod.UID); err != nil {
			return err
		}
		r := get(t, call, bad.Pod.UID)
		if r.State != StateQuarantined || r.OnSuspicion {
			return fmt.Errorf("bad pod: state %s, on suspicion %v", r.State, r.OnSuspicion)
		}
		if g := get(t, call, good.Pod.UID); g.TakenByKubelet == nil {
			return errors.New("the good pod runs, not noted taken yet")
		}
		return nil
	})
	r := get(t, call, bad.Pod.UID)
	if !strings.Contains(r.Reason, "took none") || !strings.Contains(r.Reason, "Failed to read pods from URL") {
		t.Errorf("bad pod's reason %q does not say that the kubelet refused it and where to read why", r.Reason)
	}
	t.Logf("bad pod: %s: %s", r.State, r.Reason)
	if g := get(t, call, good.Pod.UID); g.State != StateLocal {
		t.Errorf("good pod: state %s (%s); want Local", g.State, g.Reason)
	}
	if err := kubelet.Runs(ctx, first.Pod.UID); err != nil {
		t.Errorf("the first pod stopped: %v", err)
	}
	pods, err := kubelet.Pods(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods {
		if p.UID == bad.Pod.UID {
			t.Errorf("the kubelet has the bad pod")
		}
	}

	// Deleted through the Pod API, it is gone; the others stay.
	if code, body := call("DELETE", "/pods/"+string(bad.Pod.UID), ""); code != http.StatusOK {
		t.Fatalf("DELETE the quarantined pod: %d %s", code, body)
	}
	if code, _ := call("GET", "/pods/"+string(bad.Pod.UID), ""); code != http.StatusNotFound {
		t.Errorf("GET after DELETE: %d, want 404", code)
	}
	for _, uid := range []types.UID{first.Pod.UID, good.Pod.UID} {
		if err := kubelet.Runs(ctx, uid); err != nil {
			t.Errorf("after the DELETE: %v", err)
		}
	}
}
