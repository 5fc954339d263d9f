package podapi

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// testAPI runs the API of cfg (AllowedUIDs: this process's user if
// none; StateDir: a temporary one if none) on a unix socket in a
// temporary directory, until the test ends. call reaches the API;
// source is the kubelet's URL.
func testAPI(t *testing.T, cfg Config) (api *API, call func(method, path, body string) (int, []byte), source string) {
	t.Helper()
	src, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return testAPIOn(t, cfg, src)
}

// testAPIOn is testAPI with the source on src, for a kubelet started
// before the API.
func testAPIOn(t *testing.T, cfg Config, src net.Listener) (api *API, call func(method, path, body string) (int, []byte), source string) {
	t.Helper()
	dir := t.TempDir()
	if cfg.AllowedUIDs == nil {
		cfg.AllowedUIDs = []uint32{uint32(os.Getuid())}
	}
	if cfg.AdmitBinary == "" {
		cfg.AdmitBinary = testAdmitBinary
	}
	if cfg.StateDir == "" {
		cfg.StateDir = filepath.Join(dir, "pods")
	}
	api, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "run", "pod-api.sock")
	ln, err := ListenUnix(sock)
	if err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(sock); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("socket: %v, mode %v; want 0600", err, st.Mode().Perm())
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- api.Run(ctx, ln, src) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	client := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	call = func(method, path, body string) (int, []byte) {
		t.Helper()
		req, err := http.NewRequest(method, "http://pod-api"+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	return api, call, "http://" + src.Addr().String() + "/pods"
}

const testToken = "secret-token-secret-token-secret-token"

const etcdYAML = `apiVersion: v1
kind: Pod
metadata:
  name: etcd
  namespace: kube-system
  labels: {component: etcd}
spec:
  hostNetwork: true
  containers:
  - name: etcd
    image: registry.k8s.io/etcd:3.6.8-0
`

// TestAPI: a pod is stored under <pod>-<node> with a UID and the Pod
// API's tag, served to the kubelet (with its token only) under the name
// the kubelet suffixes, listed with its state, refused when invalid or
// taken, and deleted by UID.
func TestAPI(t *testing.T) {
	_, call, source := testAPI(t, Config{NodeName: "node-a", KubeletToken: testToken})

	code, body := call("POST", "/pods", etcdYAML)
	if code != http.StatusCreated {
		t.Fatalf("POST: %d %s", code, body)
	}
	var r Record
	if err := json.Unmarshal(body, &r); err != nil {
		t.Fatal(err)
	}
	if r.Pod.Name != "etcd-node-a" || r.Pod.Namespace != "kube-system" || r.Pod.UID == "" || r.State != StateLocal ||
		r.Pod.Annotations[annotationSource] != sourceValue {
		t.Fatalf("stored %+v", r)
	}

	code, body = call("POST", "/pods", etcdYAML)
	if code != http.StatusConflict || !strings.Contains(string(body), `"reason":"AlreadyExists"`) {
		t.Errorf("POST again: %d %s, want 409 AlreadyExists", code, body)
	}
	code, body = call("POST", "/pods", strings.Replace(etcdYAML, "image: registry.k8s.io/etcd:3.6.8-0", `image: ""`, 1))
	var status metav1.Status
	_ = json.Unmarshal(body, &status)
	if code != http.StatusUnprocessableEntity || status.Reason != metav1.StatusReasonInvalid || status.Details == nil ||
		len(status.Details.Causes) == 0 || status.Details.Causes[0].Field != "spec.containers[0].image" {
		t.Errorf("POST without an image: %d %s, want 422 naming spec.containers[0].image", code, body)
	}
	code, body = call("POST", "/pods", strings.Replace(etcdYAML, "hostNetwork", "hostNetwrk", 1))
	if code != http.StatusBadRequest || !strings.Contains(string(body), "hostNetwrk") {
		t.Errorf("POST with an unknown field: %d %s, want 400 naming it", code, body)
	}
	code, body = call("POST", "/pods", `{"apiVersion":"v1","kind":"Service","metadata":{"name":"x"}}`)
	if code != http.StatusBadRequest {
		t.Errorf("POST a Service: %d %s, want 400", code, body)
	}

	if code, _ := fetchSource(t, source, ""); code != http.StatusUnauthorized {
		t.Errorf("source without a token: %d, want 401", code)
	}
	if code, _ := fetchSource(t, source, "Bearer wrong"); code != http.StatusUnauthorized {
		t.Errorf("source with a wrong token: %d, want 401", code)
	}
	code, list := fetchSource(t, source, "Bearer "+testToken)
	if code != http.StatusOK || list.Kind != "PodList" || len(list.Items) != 1 || list.Items[0].Name != "etcd" || list.Items[0].UID != r.Pod.UID {
		t.Fatalf("source: %d %+v, want one pod etcd (the kubelet appends -node-a) with the stored UID", code, list)
	}

	code, body = call("GET", "/pods", "")
	var stored StoredPodList
	if err := json.Unmarshal(body, &stored); code != http.StatusOK || err != nil || len(stored.Items) != 1 || stored.Items[0].State != StateLocal {
		t.Fatalf("GET: %d %s", code, body)
	}
	if code, _ := call("DELETE", "/pods/nope", ""); code != http.StatusNotFound {
		t.Errorf("DELETE of no pod: %d, want 404", code)
	}
	if code, body := call("DELETE", "/pods/"+string(r.Pod.UID), ""); code != http.StatusOK {
		t.Fatalf("DELETE: %d %s", code, body)
	}
	if _, list := fetchSource(t, source, "Bearer "+testToken); len(list.Items) != 0 {
		t.Errorf("source after DELETE: %+v", list.Items)
	}
}

// TestAPIRefusesOtherUsers: a caller whose user is not allowed gets 403,
// even over a socket it could connect to.
func TestAPIRefusesOtherUsers(t *testing.T) {
	_, call, _ := testAPI(t, Config{NodeName: "node-a", KubeletToken: testToken, AllowedUIDs: []uint32{uint32(os.Getuid()) + 1}})
	for _, c := range []struct{ method, path, body string }{{"POST", "/pods", etcdYAML}, {"GET", "/pods", ""}, {"DELETE", "/pods/x", ""}} {
		code, body := call(c.method, c.path, c.body)
		if code != http.StatusForbidden || !strings.Contains(string(body), "may not use the Pod API") {
			t.Errorf("%s %s: %d %s, want 403", c.method, c.path, code, body)
		}
	}
}

// fetchSource GETs the kubelet's source with the Authorization header
// auth ("" for none).
func fetchSource(t *testing.T, source, auth string) (int, *corev1.PodList) {
	t.Helper()
	req, _ := http.NewRequest("GET", source, nil)
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	list := &corev1.PodList{}
	_ = json.NewDecoder(resp.Body).Decode(list)
	return resp.StatusCode, list
}

// TestAPIRestart: a second API opened on the same state directory, as
// after a restart of the endpoint or the node, has the pod and serves it.
func TestAPIRestart(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pods")
	_, call, _ := testAPI(t, Config{NodeName: "node-a", KubeletToken: testToken, StateDir: dir})
	if code, body := call("POST", "/pods", etcdYAML); code != http.StatusCreated {
		t.Fatalf("POST: %d %s", code, body)
	}
	_, call, source := testAPI(t, Config{NodeName: "node-a", KubeletToken: testToken, StateDir: dir})
	if _, list := fetchSource(t, source, "Bearer "+testToken); len(list.Items) != 1 || list.Items[0].Name != "etcd" {
		t.Fatalf("source after the restart: %+v", list.Items)
	}
	code, body := call("GET", "/pods", "")
	if code != http.StatusOK || !strings.Contains(string(body), `"name":"etcd-node-a"`) || !strings.Contains(string(body), "no handover credential") {
		t.Errorf("GET after the restart: %d %s", code, body)
	}
}
