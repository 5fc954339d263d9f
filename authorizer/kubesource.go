package authorizer

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
)

// KubeSource is the NodeSource of a hub replica: kube-apiserver, through
// client (protobuf is cheaper to decode, as for the cache's informers).
// Every read leaves resourceVersion unset, which makes it consistent: a
// list is served once kube-apiserver's watch cache has caught up with
// etcd (with its spec.nodeName index), a get from etcd.
func KubeSource(client kubernetes.Interface) NodeSource { return kubeSource{client} }

type kubeSource struct{ client kubernetes.Interface }

func (s kubeSource) NodePods(ctx context.Context, node string) ([]*corev1.Pod, error) {
	list, err := s.client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", node).String(),
	})
	if err != nil {
		return nil, err
	}
	pods := make([]*corev1.Pod, len(list.Items))
	for i := range list.Items {
		pods[i] = &list.Items[i]
	}
	return pods, nil
}

func (s kubeSource) AttachmentNode(ctx context.Context, name string) (string, error) {
	va, err := s.client.StorageV1().VolumeAttachments().Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	return va.Spec.NodeName, nil
}

func (s kubeSource) SliceNode(ctx context.Context, name string) (string, error) {
	slice, err := s.client.ResourceV1().ResourceSlices().Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return "", nil
	}
	if err != nil || slice.Spec.NodeName == nil {
		return "", err
	}
	return *slice.Spec.NodeName, nil
}
