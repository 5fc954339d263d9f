package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/nodeproxy/nodeproxy/test/controlplane"
)

// podAPINode is the demo's node with no API server.
const podAPINode = "bootstrap-node"

// bootstrapPodYAML is what an operator would post: a static
// control-plane-like pod that needs nothing from an API server.
const bootstrapPodYAML = `apiVersion: v1
kind: Pod
metadata:
  name: etcd
  namespace: %s
  labels: {component: etcd}
spec:
  hostNetwork: true
  automountServiceAccountToken: false
  containers:
  - name: etcd
    image: registry.k8s.io/etcd:3.6.8-0
    volumeMounts: [{name: data, mountPath: /var/lib/etcd}]
  volumes: [{name: data, hostPath: {path: /var/lib/etcd, type: DirectoryOrCreate}}]
`

// storedPod is the part of a Pod API record the demo prints.
type storedPod struct {
	Pod    corev1.Pod `json:"pod"`
	State  string     `json:"state"`
	Reason string     `json:"reason"`
	APIUID types.UID  `json:"apiUID"`
}

// showPodAPI plays the seed's bootstrap: a node endpoint with the Pod API
// and a hollow kubelet whose API server is behind a shut gate (the node
// sees none), a pod posted on the API's unix socket and run by the
// kubelet, then the gate opened (kube-apiserver comes up) and the pod
// handed over to it. The endpoint's own proxying reaches kube-apiserver
// directly; only the kubelet and the handover go through the gate, which
// is all the Pod API depends on.
func (d *demo) showPodAPI(ctx context.Context) error {
	cp, kube := d.cp, d.admin
	dir := filepath.Join(d.dir, podAPINode)
	gate, err := controlplane.StartGate(strings.TrimPrefix(cp.URL, "https://"))
	if err != nil {
		return err
	}
	defer gate.Close()
	if err := cp.ApplyFiles(ctx, filepath.Join(d.root, "manifests", "podapi-handover", "rbac.yaml")); err != nil {
		return err
	}
	handover, err := cp.UserConfig("nodeproxy:podapi-handover")
	if err != nil {
		return err
	}
	handover.Host = gate.URL
	handoverKubeconfig := filepath.Join(dir, "podapi-handover.kubeconfig")
	if err := controlplane.WriteKubeconfig(handover, handoverKubeconfig); err != nil {
		return err
	}
	nodeCfg, err := cp.NodeConfig(podAPINode)
	if err != nil {
		return err
	}
	nodeCfg.Host = gate.URL
	kubeletKubeconfig := filepath.Join(dir, "kubelet.kubeconfig")
	if err := controlplane.WriteKubeconfig(nodeCfg, kubeletKubeconfig); err != nil {
		return err
	}
	// The token file is written here, so that the kubelet, which starts
	// first, has it; the endpoint reads it rather than making one.
	token := "demo-kubelet-token-" + strconv.FormatInt(time.Now().UnixNano(), 36) + "-0123456789"
	tokenFile := filepath.Join(dir, "pod-api-kubelet-token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		return err
	}
	ports, err := controlplane.FreePorts(1)
	if err != nil {
		return err
	}
	source := "127.0.0.1:" + strconv.Itoa(ports[0])
	kubelet, err := controlplane.StartHollowKubelet(ctx, d.tools["hollowkubelet"], controlplane.HollowKubeletOptions{
		Name: podAPINode, Kubeconfig: kubeletKubeconfig, Dir: filepath.Join(dir, "kubelet"),
		ExtraArgs: []string{"--static-pod-url=http://" + source + "/pods", "--static-pod-url-header=Authorization: Bearer " + token,
			"--http-check-frequency=2s"},
	})
	if err != nil {
		return err
	}
	defer kubelet.Stop()
	socket := filepath.Join(dir, "run", "pod-api.sock")
	command := append(controlplane.LeanNodeEndpointCommand(d.o.nodeproxy),
		"--pod-api",
		"--pod-api-socket="+socket,
		"--pod-api-allowed-uids="+strconv.Itoa(os.Getuid()),
		"--pod-api-state-dir="+filepath.Join(dir, "pods"),
		"--pod-api-kubelet-address="+source,
		"--pod-api-kubelet-token-file="+tokenFile,
		"--pod-api-handover-kubeconfig="+handoverKubeconfig,
		"--pod-api-handover-interval=1s",
		"--pod-api-kubelet-pod-resources-socket="+kubelet.PodResourcesSocket(),
	)
	endpoint, err := cp.StartNodeEndpoint(ctx, command, podAPINode, filepath.Join(dir, "endpoint"), d.hub.URL)
	if err != nil {
		return err
	}
	defer endpoint.Process.Stop()
	d.say("%s: a hollow kubelet whose pods come from its endpoint's Pod API (staticPodURL), kube-apiserver out of its reach", podAPINode)

	api := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", socket)
	}}}
	d.say("$ curl -s --unix-socket %s -X POST --data-binary @etcd.yaml http://localhost/pods", socket)
	var posted storedPod
	if err := callPodAPI(ctx, api, http.MethodPost, "/pods", fmt.Sprintf(bootstrapPodYAML, demoNamespace), http.StatusCreated, &posted); err != nil {
		return err
	}
	d.say("201: %s/%s, state %s", posted.Pod.Namespace, posted.Pod.Name, posted.State)
	started := time.Now()
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		return kubelet.Runs(ctx, posted.Pod.UID) == nil, nil
	}); err != nil {
		return fmt.Errorf("the posted pod not running on the kubelet: %w", err)
	}
	var rec storedPod
	if err := callPodAPI(ctx, api, http.MethodGet, "/pods/"+string(posted.Pod.UID), "", http.StatusOK, &rec); err != nil {
		return err
	}
	d.say("Running on the kubelet as a static pod %.1f s later, with no API server (state %s)", time.Since(started).Seconds(), rec.State)

	d.say("kube-apiserver comes within reach")
	gate.Open()
	opened := time.Now()
	var apiPod *corev1.Pod
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := kube.CoreV1().Pods(demoNamespace).Get(ctx, posted.Pod.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		if _, mirror := p.Annotations[corev1.MirrorPodAnnotationKey]; mirror || p.Status.Phase != corev1.PodRunning {
			return false, nil
		}
		apiPod = p
		return true, nil
	}); err != nil {
		return fmt.Errorf("the pod not handed over: %w", err)
	}
	if err := callPodAPI(ctx, api, http.MethodGet, "/pods/"+string(posted.Pod.UID), "", http.StatusOK, &rec); err != nil {
		return err
	}
	d.say("%.1f s later the pod is handed over: %s/%s Running in kube-apiserver on %s, state %s (docs/api.md, \"The Pod API\")",
		time.Since(opened).Seconds(), apiPod.Namespace, apiPod.Name, apiPod.Spec.NodeName, rec.State)
	return nil
}

// callPodAPI makes one request of the Pod API and decodes the answer into
// out, or says what came back instead of want.
func callPodAPI(ctx context.Context, c *http.Client, method, path, body string, want int, out any) error {
	req, err := http.NewRequestWithContext(ctx, method, "http://pod-api"+path, strings.NewReader(body))
	if err != nil {
		return err
	}
	resp, err := c.Do(req)
	if err != nil {
		return fmt.Errorf("Pod API %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("Pod API %s %s: %w", method, path, err)
	}
	if resp.StatusCode != want {
		return fmt.Errorf("Pod API %s %s: %s: %s", method, path, resp.Status, b)
	}
	return json.Unmarshal(b, out)
}
