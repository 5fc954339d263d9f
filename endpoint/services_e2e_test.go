package endpoint_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/nodeproxy/nodeproxy/test/testserver"
)

// TestKubeletsServicesFromTheCopyAreThoseOfItsPodsNamespaces reads
// services through the endpoint as the kubelet's informer does (every
// service, spec.clusterIP!=None; a list, then a watch from its version),
// answered from the copy: default's kubernetes Service and none of a
// namespace without a pod of the node; the namespace's service arrives
// on the open watch, ADDED, when the node's first pod there is created
// (the variables of a pod with enableServiceLinks), and is out of the
// list once its last pod is gone. kube-proxy, with its token, lists
// every service from the hub through the same endpoint, never from the
// copy. The hollow kubelet's containers run in
// a fake runtime that keeps no environment, so this reads what the
// kubelet's getServiceEnvVarMap would read.
func TestKubeletsServicesFromTheCopyAreThoseOfItsPodsNamespaces(t *testing.T) {
	ctx := context.Background()
	hub := startHub(t)
	kp, err := cp.ClientCA.ClientCert("system:node:node-svc", []string{"system:nodes"}, "", "")
	if err != nil {
		t.Fatal(err)
	}
	admin := kubernetes.NewForConfigOrDie(cp.AdminConfig())
	web, other := fmt.Sprintf("endpoint-svc-%d", runs.Add(1)), fmt.Sprintf("endpoint-svc-%d", runs.Add(1))
	for _, ns := range []string{web, other} {
		if err := cp.EnsureNamespace(ctx, ns); err != nil {
			t.Fatal(err)
		}
		if _, err := admin.CoreV1().Services(ns).Create(ctx, &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: "api"},
			Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	n := startNodeWith(t, "node-svc", nodeSpec{hub: hub.URL, kubelet: kp})
	kubelet := kubernetes.NewForConfigOrDie(n.kubelet)
	notHeadless := metav1.ListOptions{FieldSelector: fields.OneTermNotEqualSelector("spec.clusterIP", "None").String()}
	fromCopy := `nodeproxy_node_requests_total{path="copy",resource="services",verb="list"}`
	list := func() ([]string, string, error) {
		before := metric(t, n, fromCopy)
		l, err := kubelet.CoreV1().Services(metav1.NamespaceAll).List(ctx, notHeadless)
		if err != nil {
			return nil, "", err
		}
		if metric(t, n, fromCopy) == before {
			return nil, "", fmt.Errorf("the list was not answered from the copy")
		}
		var got []string
		for _, s := range l.Items {
			got = append(got, s.Namespace+"/"+s.Name)
		}
		return got, l.ResourceVersion, nil
	}

	var rv string
	testserver.Eventually(t, 60*time.Second, "the copy's services, before the node has a pod", func(context.Context) error {
		got, at, err := list()
		if err != nil {
			return err
		}
		if !slices.Contains(got, "default/kubernetes") || slices.Contains(got, web+"/api") || slices.Contains(got, other+"/api") {
			return fmt.Errorf("services %v: want default/kubernetes, none of %s or %s", got, web, other)
		}
		rv = at
		return nil
	})
	opts := notHeadless
	opts.ResourceVersion, opts.AllowWatchBookmarks = rv, true
	w, err := kubelet.CoreV1().Services(metav1.NamespaceAll).Watch(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()

	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p"},
		Spec: corev1.PodSpec{
			NodeName: "node-svc", EnableServiceLinks: new(true), AutomountServiceAccountToken: new(false),
			Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}},
		},
	}
	if _, err := admin.CoreV1().Pods(web).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	timeout := time.After(30 * time.Second)
	for added := false; !added; {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatal("the watch of services ended before the namespace's service came")
			}
			if s, _ := ev.Object.(*corev1.Service); s != nil && s.Namespace == other {
				t.Fatalf("%s %s/%s, of a namespace where the node has no pod", ev.Type, s.Namespace, s.Name)
			}
			s, _ := ev.Object.(*corev1.Service)
			added = ev.Type == watch.Added && s != nil && s.Namespace == web && s.Name == "api"
		case <-timeout:
			t.Fatalf("the watch of services from %s did not see %s/api enter with the namespace's first pod", rv, web)
		}
	}
	got, _, err := list()
	if err != nil || !slices.Contains(got, web+"/api") || slices.Contains(got, other+"/api") {
		t.Fatalf("services with a pod in %s: %v, %v; want %s/api and none of %s", web, got, err, web, other)
	}

	// kube-proxy, with its own token, needs every service: through the
	// same endpoint it lists them from the hub, never from the copy.
	proxy := asClient(n, proxierToken(t, web, "kube-proxy", true))
	copyServed := metric(t, n, fromCopy)
	testserver.Eventually(t, 30*time.Second, "kube-proxy's services, every one, from the hub", func(ctx context.Context) error {
		l, err := proxy.CoreV1().Services(metav1.NamespaceAll).List(ctx, notHeadless)
		if err != nil {
			return err
		}
		var names []string
		for _, s := range l.Items {
			names = append(names, s.Namespace+"/"+s.Name)
		}
		if !slices.Contains(names, web+"/api") || !slices.Contains(names, other+"/api") {
			return fmt.Errorf("kube-proxy's services %v: want %s/api and %s/api", names, web, other)
		}
		if got := metric(t, n, `nodeproxy_node_client_requests_total{path="hub",resource="services",verb="list"}`); got == "0" {
			return fmt.Errorf("kube-proxy's list did not come from the hub")
		}
		return nil
	})
	if got := metric(t, n, fromCopy); got != copyServed {
		t.Errorf("the copy answered %s lists of services during kube-proxy's, want none (%s before)", got, copyServed)
	}

	if err := admin.CoreV1().Pods(web).Delete(ctx, "p", metav1.DeleteOptions{GracePeriodSeconds: new(int64(0))}); err != nil {
		t.Fatal(err)
	}
	testserver.Eventually(t, 30*time.Second, "the namespace's service out of the copy after its last pod", func(context.Context) error {
		got, _, err := list()
		if err != nil {
			return err
		}
		if slices.Contains(got, web+"/api") || !slices.Contains(got, "default/kubernetes") {
			return fmt.Errorf("services %v: want default/kubernetes and not %s/api", got, web)
		}
		return nil
	})
}
