package cache

import (
	"fmt"
	"reflect"
	"slices"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	toolscache "k8s.io/client-go/tools/cache"
)

// Resources are the resource types the cache holds, in the order their
// informers are registered.
var Resources = []schema.GroupVersionResource{
	corev1.SchemeGroupVersion.WithResource("pods"),
	corev1.SchemeGroupVersion.WithResource("secrets"),
	corev1.SchemeGroupVersion.WithResource("configmaps"),
	corev1.SchemeGroupVersion.WithResource("persistentvolumeclaims"),
	corev1.SchemeGroupVersion.WithResource("persistentvolumes"),
	corev1.SchemeGroupVersion.WithResource("serviceaccounts"),
	corev1.SchemeGroupVersion.WithResource("nodes"),
}

// GraphResources are watched only to keep the authorization graph
// current: who a volume attachment or a resource slice belongs to. The
// cache serves none of them.
var GraphResources = []schema.GroupVersionResource{
	storagev1.SchemeGroupVersion.WithResource("volumeattachments"),
	resourcev1.SchemeGroupVersion.WithResource("resourceslices"),
}

// Watched is every resource nodeproxy has an informer for: Resources, then
// GraphResources.
func Watched() []schema.GroupVersionResource {
	return append(slices.Clone(Resources), GraphResources...)
}

// Informers are the shared informers for Resources and GraphResources.
type Informers struct {
	factory   informers.SharedInformerFactory
	informers map[schema.GroupVersionResource]toolscache.SharedIndexInformer
}

// NewInformers registers an informer for every resource in Resources and
// GraphResources on a factory of client. No periodic resync: nodeproxy
// reacts to changes only, and a resync would replay every object to every
// handler for nothing.
func NewInformers(client kubernetes.Interface) (*Informers, error) {
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTransform(StripManagedFields))
	inf := &Informers{factory: factory, informers: map[schema.GroupVersionResource]toolscache.SharedIndexInformer{}}
	for _, gvr := range Watched() {
		generic, err := factory.ForResource(gvr)
		if err != nil {
			return nil, fmt.Errorf("informer for %s: %w", gvr.Resource, err)
		}
		i := generic.Informer()
		if _, err := i.AddEventHandler(countingHandler(gvr.Resource)); err != nil {
			return nil, fmt.Errorf("metrics handler for %s: %w", gvr.Resource, err)
		}
		inf.informers[gvr] = i
	}
	return inf, nil
}

// Informer returns the informer of gvr, or nil if the cache does not hold
// that resource.
func (i *Informers) Informer(gvr schema.GroupVersionResource) toolscache.SharedIndexInformer {
	return i.informers[gvr]
}

// Start starts every informer; they stop when stopCh closes.
func (i *Informers) Start(stopCh <-chan struct{}) { i.factory.Start(stopCh) }

// WaitForCacheSync waits until every informer has synced or stopCh closes,
// and reports each informer's state. It is what the readiness check of
// k8s.io/apiserver (healthz.NewInformerSyncHealthz) asks.
func (i *Informers) WaitForCacheSync(stopCh <-chan struct{}) map[reflect.Type]bool {
	return i.factory.WaitForCacheSync(stopCh)
}

// Shutdown waits for every informer goroutine to end after stopCh closed.
func (i *Informers) Shutdown() { i.factory.Shutdown() }

// StripManagedFields is an informer transform that drops
// metadata.managedFields before an object is stored. The transform runs
// once per object on its way in, so every reader sees the smaller object.
func StripManagedFields(obj interface{}) (interface{}, error) {
	if _, isTombstone := obj.(toolscache.DeletedFinalStateUnknown); isTombstone {
		return obj, nil // its object was transformed when it was stored
	}
	accessor, err := meta.Accessor(obj)
	if err != nil {
		return obj, nil // not an API object: nothing to strip
	}
	accessor.SetManagedFields(nil)
	return obj, nil
}
