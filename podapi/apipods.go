package podapi

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/rest"
)

// apiPods are the handover's calls on kube-apiserver's pods. A REST
// client of core/v1 in a scheme of its own, not client-go's clientset:
// the clientset's scheme and typed clients register and link every API
// group, and the endpoint runs on every node, where what it links is
// resident memory (docs/benchmarks.md, "The node endpoint's footprint").
type apiPods struct {
	rest   rest.Interface
	params runtime.ParameterCodec
}

func newAPIPods(cfg *rest.Config) (*apiPods, error) {
	// A scheme of core/v1, and of the options of a get and a create.
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		return nil, fmt.Errorf("pods client scheme: %w", err)
	}
	metav1.AddToGroupVersion(scheme, corev1.SchemeGroupVersion)
	c := rest.CopyConfig(cfg)
	c.GroupVersion, c.APIPath = &corev1.SchemeGroupVersion, "/api"
	c.NegotiatedSerializer = serializer.NewCodecFactory(scheme).WithoutConversion()
	if c.UserAgent == "" {
		c.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	rc, err := rest.RESTClientFor(c)
	if err != nil {
		return nil, fmt.Errorf("pods client: %w", err)
	}
	return &apiPods{rest: rc, params: runtime.NewParameterCodec(scheme)}, nil
}

// Get reads the pod namespace/name.
func (p *apiPods) Get(ctx context.Context, namespace, name string) (*corev1.Pod, error) {
	pod := &corev1.Pod{}
	err := p.rest.Get().Namespace(namespace).Resource("pods").Name(name).
		VersionedParams(&metav1.GetOptions{}, p.params).Do(ctx).Into(pod)
	return pod, err
}

// Create creates pod in its namespace.
func (p *apiPods) Create(ctx context.Context, pod *corev1.Pod, opts metav1.CreateOptions) (*corev1.Pod, error) {
	created := &corev1.Pod{}
	err := p.rest.Post().Namespace(pod.Namespace).Resource("pods").
		VersionedParams(&opts, p.params).Body(pod).Do(ctx).Into(created)
	return created, err
}
