package nodeview_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/nodeproxy/nodeproxy/apis/bulk/v1alpha1"
	"github.com/nodeproxy/nodeproxy/hub"
	"github.com/nodeproxy/nodeproxy/test/controlplane"
	"github.com/nodeproxy/nodeproxy/test/forwarder"
	"github.com/nodeproxy/nodeproxy/test/testserver"
	"github.com/nodeproxy/nodeproxy/watchmux"
)

var cp *controlplane.ControlPlane

func TestMain(m *testing.M) {
	os.Exit(testserver.RunTests(m, controlplane.Options{}, &cp))
}

const ns = "nodeview-e2e"

// secretsLag is how far replica b's cache trails kube-apiserver on
// secrets: well past the lag between replicas a resume allows for, well
// within the 3 s it waits.
const secretsLag = 700 * time.Millisecond

// nodeCopy is a node view's consumer as the node endpoint will be: the
// objects it holds, by "Kind ns/name", at their resourceVersions. It
// fails the test on an event that would repeat or skip a change.
type nodeCopy struct {
	t    *testing.T
	held map[string]string
	log  []string
}

func (c *nodeCopy) apply(ev watchmux.Event) string {
	c.t.Helper()
	if ev.Type == watch.Error {
		c.t.Fatalf("ERROR %d %s", ev.Status.Code, ev.Status.Message)
	}
	var m struct {
		Kind     string `json:"kind"`
		Metadata struct {
			Namespace, Name, ResourceVersion string
			Annotations                      map[string]string
		} `json:"metadata"`
		Data map[string]string `json:"data"`
	}
	if err := json.Unmarshal(ev.Object, &m); err != nil {
		c.t.Fatal(err)
	}
	if ev.Type == watch.Bookmark {
		line := "BOOKMARK"
		if token, ok := m.Metadata.Annotations[v1alpha1.NodeViewProgressAnnotation]; ok {
			line = "BOOKMARK progress=" + token
		}
		c.log = append(c.log, line)
		return line
	}
	key := m.Kind + " " + m.Metadata.Namespace + "/" + m.Metadata.Name
	_, held := c.held[key]
	switch ev.Type {
	case watch.Added, v1alpha1.NodeViewEntered:
		if held {
			c.t.Errorf("%s %s, held already: repeated", ev.Type, key)
		}
		c.held[key] = m.Metadata.ResourceVersion
	case watch.Modified:
		if !held {
			c.t.Errorf("MODIFIED %s, not held: its ADDED or ENTERED was lost", key)
		}
		c.held[key] = m.Metadata.ResourceVersion
	case watch.Deleted, v1alpha1.NodeViewLeft:
		if !held {
			c.t.Errorf("%s %s, not held", ev.Type, key)
		}
		if ev.Type == v1alpha1.NodeViewLeft && m.Data != nil {
			c.t.Errorf("LEFT %s carries the secret's data", key)
		}
		delete(c.held, key)
	}
	line := string(ev.Type) + " " + key
	c.log = append(c.log, line)
	return line
}

// until applies events until one reads line, and fails after 30 s.
func (c *nodeCopy) until(events <-chan watchmux.Event, line string) {
	c.t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case ev, ok := <-events:
			if !ok {
				c.t.Fatalf("the view closed before %q; events: %s", line, strings.Join(c.log, " | "))
			}
			if c.apply(ev) == line {
				return
			}
		case <-timeout:
			c.t.Fatalf("no %q within 30 s; events: %s", line, strings.Join(c.log, " | "))
		}
	}
}

// ours is the copy restricted to the test's namespace: kube-apiserver's
// own objects (the kubernetes Service) are in every view too.
func (c *nodeCopy) ours() []string {
	var out []string
	for k, rv := range c.held {
		if strings.Contains(k, " "+ns+"/") {
			out = append(out, k+"@"+rv)
		}
	}
	slices.Sort(out)
	return out
}

func viewOf(node, rv string) v1alpha1.GetOperation {
	return v1alpha1.GetOperation{Resource: v1alpha1.NodeViewResourceV1alpha2,
		Options: metav1.ListOptions{FieldSelector: "metadata.name=" + node, ResourceVersion: rv}}
}

func nodeClient(t *testing.T, host, node string) *rest.Config {
	t.Helper()
	cfg, err := cp.NodeConfig(node)
	if err != nil {
		t.Fatal(err)
	}
	return &rest.Config{Host: host, TLSClientConfig: rest.TLSClientConfig{
		CertData: cfg.CertData, KeyData: cfg.KeyData, CAFile: cp.ServingCA.CertPath,
	}}
}

func podUsing(name, node, secretName string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.PodSpec{
			NodeName:                     node,
			AutomountServiceAccountToken: ptr.To(false),
			Containers:                   []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}},
			Volumes: []corev1.Volume{{Name: "s", VolumeSource: corev1.VolumeSource{
				Secret: &corev1.SecretVolumeSource{SecretName: secretName}}}},
		},
	}
}

func secretOf(name, value string) *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, StringData: map[string]string{"v": value}}
}

// TestNodeViewAgainstKubeAPIServer follows node nv-a's view through a
// Service of two hub replicas: its pod's secret arrives before the pod,
// a secret another node uses never arrives, deleting the pod takes the
// secret out, and when the replica serving the view goes, the view
// resumes on the other with nothing lost or repeated: the copy ends
// equal to a view opened afresh.
func TestNodeViewAgainstKubeAPIServer(t *testing.T) {
	ctx := context.Background()
	admin := prepare(t)
	a := testserver.Start(t, cp, testserver.Options{})
	a.WaitReady(t, 90*time.Second)
	// b starts later, as in a rolling update: it lists every type at a
	// later version than a, so its change logs begin after a's versions
	// of the types nobody changes (runtime classes, CSI drivers), and a
	// view moving to it needs kube-apiserver to show they did not change.
	createSecret(t, admin, secretOf("before-b", "1"))
	// b's cache also lags on secrets, as a loaded replica's does: a view
	// moving to it must wait for the secrets it holds.
	b := testserver.Start(t, cp, testserver.Options{Configure: func(o *hub.Options) {
		o.KubeTransportWrapper = testserver.LagWatches("secrets", secretsLag)
	}})
	b.WaitReady(t, 90*time.Second)
	addrA, addrB := strings.TrimPrefix(a.URL, "https://"), strings.TrimPrefix(b.URL, "https://")
	fwd, err := forwarder.Start(addrA)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = fwd.Close() })

	// Another node's pod and secret, there before the view opens and
	// changed after.
	createSecret(t, admin, secretOf("theirs", "1"))
	createPod(t, admin, podUsing("pod-b", "nv-b", "theirs"))

	resumes := make(chan watchmux.Resume, 8)
	session, err := watchmux.NewSession(ctx, nodeClient(t, "https://"+fwd.Addr(), "nv-a"), watchmux.WithKeepalive(2*time.Second),
		watchmux.WithResumeObserver(func(r watchmux.Resume) { resumes <- r }))
	if err != nil {
		t.Fatal(err)
	}
	defer session.Close()
	op := viewOf("nv-a", "")
	op.Options.SendInitialEvents = ptr.To(true)
	ch, err := session.WatchBatches(ctx, op)
	if err != nil {
		t.Fatal(err)
	}
	c := &nodeCopy{t: t, held: map[string]string{}}
	c.until(ch.Events, "BOOKMARK")

	createSecret(t, admin, secretOf("mine", "1"))
	createPod(t, admin, podUsing("pod-a", "nv-a", "mine"))
	c.until(ch.Events, "ADDED Pod "+ns+"/pod-a")
	if i, j := slices.Index(c.log, "ENTERED Secret "+ns+"/mine"), slices.Index(c.log, "ADDED Pod "+ns+"/pod-a"); i < 0 || i > j {
		t.Fatalf("the pod's secret did not arrive before the pod: %s", strings.Join(c.log, " | "))
	}
	if _, err := admin.CoreV1().Secrets(ns).Update(ctx, secretOf("theirs", "2"), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.CoreV1().Secrets(ns).Update(ctx, secretOf("mine", "2"), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	c.until(ch.Events, "MODIFIED Secret "+ns+"/mine")

	if err := admin.CoreV1().Pods(ns).Delete(ctx, "pod-a", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
	c.until(ch.Events, "LEFT Secret "+ns+"/mine")
	if i, j := slices.Index(c.log, "DELETED Pod "+ns+"/pod-a"), slices.Index(c.log, "LEFT Secret "+ns+"/mine"); i < 0 || i > j {
		t.Fatalf("the secret left before its pod: %s", strings.Join(c.log, " | "))
	}
	c.until(ch.Events, "BOOKMARK")
	// A secret the view holds that b's lagging cache does not have yet
	// when the view moves.
	createSecret(t, admin, secretOf("fresh", "1"))
	createPod(t, admin, podUsing("pod-fresh", "nv-a", "fresh"))
	c.until(ch.Events, "ADDED Pod "+ns+"/pod-fresh")
	c.until(ch.Events, "BOOKMARK")
	waitsBefore := secretsReadWaits(t, b)

	// Replica a goes (its connections reset, as on SIGKILL); what
	// changes meanwhile must reach the copy through replica b.
	fwd.Add(addrB)
	fwd.Remove(addrA)
	fwd.Cut(addrA)
	createSecret(t, admin, secretOf("next", "1"))
	createPod(t, admin, podUsing("pod-a2", "nv-a", "next"))
	if _, err := admin.CoreV1().Secrets(ns).Update(ctx, secretOf("next", "2"), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	c.until(ch.Events, "ADDED Pod "+ns+"/pod-a2")
	// The marker: once its pod is in the copy, so is every change
	// before it.
	createSecret(t, admin, secretOf("marker", "1"))
	createPod(t, admin, podUsing("pod-marker", "nv-a", "marker"))
	c.until(ch.Events, "ADDED Pod "+ns+"/pod-marker")
	c.until(ch.Events, "BOOKMARK")

	select {
	case r := <-resumes:
		if r.Outcome != watchmux.ResumeReopened || !strings.HasPrefix(r.ResourceVersion, "secrets=") {
			t.Fatalf("the view resumed %s from %q, want reopened from its last bookmark's position", r.Outcome, r.ResourceVersion)
		}
	default:
		t.Fatal("the view never moved to replica b")
	}

	if secretsReadWaits(t, b) == waitsBefore {
		t.Error("the resume on b did not wait for b's lagging cache of secrets: the lag was not tested")
	}

	fresh, err := watchmux.Dial(ctx, nodeClient(t, b.URL, "nv-a"))
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	fch, err := fresh.Watch(ctx, op)
	if err != nil {
		t.Fatal(err)
	}
	truth := &nodeCopy{t: t, held: map[string]string{}}
	truth.until(fch.Events, "BOOKMARK")
	if got, want := c.ours(), truth.ours(); !slices.Equal(got, want) {
		t.Fatalf("after the move the copy holds\n  %v\na view opened now holds\n  %v\nevents: %s", got, want, strings.Join(c.log, " | "))
	}
	for _, k := range c.ours() {
		if strings.Contains(k, "theirs") || strings.Contains(k, "pod-b") {
			t.Errorf("nv-a's view holds %s, another node's", k)
		}
	}
	for _, line := range c.log {
		if strings.Contains(line, "theirs") || strings.Contains(line, "pod-b") {
			t.Errorf("nv-a's view carried %q", line)
		}
	}

	// Another node's view is refused.
	other, err := fresh.Watch(ctx, viewOf("nv-b", ""))
	if err == nil {
		t.Fatalf("nv-a opened nv-b's view: channel %d", other.ID)
	}
	if !strings.Contains(err.Error(), "only its own view") {
		t.Errorf("nv-a asking for nv-b's view: %v", err)
	}
}

// prepare installs the hub's RBAC and the test's namespace, and returns
// an admin client of kube-apiserver.
func prepare(t *testing.T) kubernetes.Interface {
	t.Helper()
	testserver.InstallRBAC(t, cp)
	if err := cp.EnsureNamespace(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	admin, err := kubernetes.NewForConfig(cp.AdminConfig())
	if err != nil {
		t.Fatal(err)
	}
	return admin
}

// secretsReadWaits is how many resumes srv held until its cache of
// secrets caught up (nodeproxy_nodeview_resume_settles_total).
func secretsReadWaits(t *testing.T, srv *testserver.Server) float64 {
	t.Helper()
	m, err := controlplane.Scrape(context.Background(), srv.Client(t, cp.AdminConfig()), srv.URL+"/metrics")
	if err != nil {
		t.Fatal(err)
	}
	return m.Sum("nodeproxy_nodeview_resume_settles_total", "resource", "secrets", "how", "caught_up")
}

func createSecret(t *testing.T, c kubernetes.Interface, s *corev1.Secret) {
	t.Helper()
	if _, err := c.CoreV1().Secrets(ns).Create(context.Background(), s, metav1.CreateOptions{}); err != nil {
		t.Fatal(fmt.Errorf("create secret %s: %w", s.Name, err))
	}
}

func createPod(t *testing.T, c kubernetes.Interface, p *corev1.Pod) {
	t.Helper()
	if _, err := c.CoreV1().Pods(ns).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
		t.Fatal(fmt.Errorf("create pod %s: %w", p.Name, err))
	}
}
