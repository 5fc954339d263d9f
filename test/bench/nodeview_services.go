package bench

import (
	"context"
	"fmt"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/nodeproxy/nodeproxy/test/controlplane"
)

// servicesPerNamespace is how many of NodeViewLoad.Services each of
// their namespaces holds: a node's pods in two of them put 200 services
// in its view, whatever the cluster's number.
const servicesPerNamespace = 100

// serviceNamespaces are the namespaces of the cluster's services, and
// podNamespaces those of them where each node gets a pod.
func (l NodeViewLoad) serviceNamespaces(run string) []string {
	n := (l.Services + servicesPerNamespace - 1) / servicesPerNamespace
	out := make([]string, n)
	for k := range out {
		out[k] = fmt.Sprintf("%s-svc-%d", run, k)
	}
	return out
}

func (l NodeViewLoad) podNamespaces(run string) []string {
	nss := l.serviceNamespaces(run)
	return nss[:min(2, len(nss))]
}

// createServices creates l.Services services, servicesPerNamespace to a
// namespace of the run's, and l.EndpointSlices endpoint slices spread
// over them: the cluster's load that a view carries only the part of
// that its node's pods' namespaces hold.
func (s *sideRun) createServices(ctx context.Context, l NodeViewLoad) error {
	if l.Services == 0 {
		return nil
	}
	nss := l.serviceNamespaces(s.ns)
	for _, ns := range nss {
		if err := controlplane.EnsureNamespace(ctx, s.admin, ns, map[string]string{benchLabel: s.ns}); err != nil {
			return err
		}
	}
	s.env.progressf("nodeview: %d services and %d endpoint slices in %d namespaces", l.Services, l.EndpointSlices, len(nss))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(16)
	for i := range l.Services {
		ns, name := nss[i/servicesPerNamespace], fmt.Sprintf("svc-%d", i)
		g.Go(func() error {
			_, err := s.admin.CoreV1().Services(ns).Create(gctx, &corev1.Service{
				ObjectMeta: metav1.ObjectMeta{Name: name},
				Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80}}, Selector: map[string]string{"app": name}},
			}, metav1.CreateOptions{})
			if err != nil {
				return fmt.Errorf("create service %s/%s: %w", ns, name, err)
			}
			return nil
		})
	}
	for i := range l.EndpointSlices {
		svc := i % l.Services
		ns, name := nss[svc/servicesPerNamespace], fmt.Sprintf("svc-%d-%d", svc, i)
		g.Go(func() error {
			_, err := s.admin.DiscoveryV1().EndpointSlices(ns).Create(gctx, &discoveryv1.EndpointSlice{
				ObjectMeta:  metav1.ObjectMeta{Name: name, Labels: map[string]string{discoveryv1.LabelServiceName: fmt.Sprintf("svc-%d", svc)}},
				AddressType: discoveryv1.AddressTypeIPv4,
				Endpoints: []discoveryv1.Endpoint{{Addresses: []string{fmt.Sprintf("10.%d.%d.%d", 1+i>>16&0xff, i>>8&0xff, i&0xff)},
					Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
				Ports: []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](8080)}},
			}, metav1.CreateOptions{})
			if err != nil {
				return fmt.Errorf("create endpoint slice %s/%s: %w", ns, name, err)
			}
			return nil
		})
	}
	return g.Wait()
}

// createNamespacePods gives each node a pod, using nothing, in each of
// l.podNamespaces: with its pods in the run's namespace, the node has
// pods in three, and its view the services of those and of default.
func (s *viewSide) createNamespacePods(ctx context.Context, l NodeViewLoad) error {
	for _, ns := range l.podNamespaces(s.ns) {
		for _, n := range s.nodes {
			pod := simulatedPod(ns, "env-"+n.Name, n.Name, nil)
			if _, err := s.admin.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
				return fmt.Errorf("create pod %s/%s: %w", ns, pod.Name, err)
			}
		}
	}
	return nil
}
