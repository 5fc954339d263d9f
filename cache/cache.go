package cache

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	nodev1 "k8s.io/api/node/v1"
	resourcev1 "k8s.io/api/resource/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/nodeproxy/nodeproxy/shard"
)

// resource describes one cached type.
type resource struct {
	gvr        schema.GroupVersionResource
	kind       string
	namespaced bool
	byNode     bool // index by spec.nodeName
	example    runtime.Object
	client     func(kubernetes.Interface) rest.Interface
}

var (
	core    = func(c kubernetes.Interface) rest.Interface { return c.CoreV1().RESTClient() }
	storage = func(c kubernetes.Interface) rest.Interface { return c.StorageV1().RESTClient() }
	dra     = func(c kubernetes.Interface) rest.Interface { return c.ResourceV1().RESTClient() }
	disco   = func(c kubernetes.Interface) rest.Interface { return c.DiscoveryV1().RESTClient() }
	network = func(c kubernetes.Interface) rest.Interface { return c.NetworkingV1().RESTClient() }
	nodeAPI = func(c kubernetes.Interface) rest.Interface { return c.NodeV1().RESTClient() }
)

// served are the types nodeproxy serves: what kubelets read through the
// graph (pods down to serviceaccounts, and their Node), then the
// cluster-wide types every kubelet and kube-proxy watches whole (services,
// endpointslices, servicecidrs, runtimeclasses, csidrivers), each at the
// version kube-apiserver 1.36 serves by default and its clients ask for.
// graphOnly are the ones it watches only to keep the authorization graph
// current (who a volume attachment or a resource slice belongs to).
var (
	served = []resource{
		{corev1.SchemeGroupVersion.WithResource("pods"), "Pod", true, true, &corev1.Pod{}, core},
		{corev1.SchemeGroupVersion.WithResource("secrets"), "Secret", true, false, &corev1.Secret{}, core},
		{corev1.SchemeGroupVersion.WithResource("configmaps"), "ConfigMap", true, false, &corev1.ConfigMap{}, core},
		{corev1.SchemeGroupVersion.WithResource("persistentvolumeclaims"), "PersistentVolumeClaim", true, false, &corev1.PersistentVolumeClaim{}, core},
		{corev1.SchemeGroupVersion.WithResource("persistentvolumes"), "PersistentVolume", false, false, &corev1.PersistentVolume{}, core},
		{corev1.SchemeGroupVersion.WithResource("serviceaccounts"), "ServiceAccount", true, false, &corev1.ServiceAccount{}, core},
		{corev1.SchemeGroupVersion.WithResource("nodes"), "Node", false, false, &corev1.Node{}, core},
		{corev1.SchemeGroupVersion.WithResource("services"), "Service", true, false, &corev1.Service{}, core},
		{discoveryv1.SchemeGroupVersion.WithResource("endpointslices"), "EndpointSlice", true, false, &discoveryv1.EndpointSlice{}, disco},
		{networkingv1.SchemeGroupVersion.WithResource("servicecidrs"), "ServiceCIDR", false, false, &networkingv1.ServiceCIDR{}, network},
		{nodev1.SchemeGroupVersion.WithResource("runtimeclasses"), "RuntimeClass", false, false, &nodev1.RuntimeClass{}, nodeAPI},
		{storagev1.SchemeGroupVersion.WithResource("csidrivers"), "CSIDriver", false, false, &storagev1.CSIDriver{}, storage},
	}
	graphOnly = []resource{
		{storagev1.SchemeGroupVersion.WithResource("volumeattachments"), "VolumeAttachment", false, false, &storagev1.VolumeAttachment{}, storage},
		{resourcev1.SchemeGroupVersion.WithResource("resourceslices"), "ResourceSlice", false, false, &resourcev1.ResourceSlice{}, dra},
	}
	// viewOnly are carried by node views (nodeview) alone: each node's
	// own CSINode, which its kubelet reads once at start.
	viewOnly = []resource{
		{storagev1.SchemeGroupVersion.WithResource("csinodes"), "CSINode", false, false, &storagev1.CSINode{}, storage},
	}
	// unserved are the types cached that no bulk get or watch serves.
	unserved = append(slices.Clone(graphOnly), viewOnly...)
)

// Resources are the resource types the cache serves, in a fixed order.
var Resources = gvrs(served)

// GraphResources are cached only to keep the authorization graph current;
// nothing serves them.
var GraphResources = gvrs(graphOnly)

// ViewResources are cached only for the node views, which carry them;
// no bulk get or watch serves them.
var ViewResources = gvrs(viewOnly)

// Watched is every resource nodeproxy watches: Resources, then
// GraphResources, then ViewResources.
func Watched() []schema.GroupVersionResource {
	return append(append(slices.Clone(Resources), GraphResources...), ViewResources...)
}

func gvrs(rs []resource) []schema.GroupVersionResource {
	out := make([]schema.GroupVersionResource, len(rs))
	for i, r := range rs {
		out[i] = r.gvr
	}
	return out
}

// Options size the cache.
type Options struct {
	// LogSize is how many changes each store keeps for watches and
	// exact-version lists to resume from.
	LogSize int
	// EncodedEntries bounds the cache of encoded object versions.
	EncodedEntries int
	// Backoff is how the reflectors wait between failed lists and
	// watches; nil means ReflectorBackoff. The restart benchmark sets
	// client-go's default here to measure what it cost.
	Backoff *wait.Backoff
	// RestartLogOnRelist makes every relist start the change log over
	// (every watch from before it expires), as before relists were carried
	// on; the restart benchmark measures what that cost.
	RestartLogOnRelist bool
	// KeepDecoded makes every store keep its objects decoded, pods too,
	// as before the cache kept pods as bytes; the memory benchmarks set
	// it to measure the two side by side.
	KeepDecoded bool
	// Held, when set, makes the cache sharded: the per-node types
	// (pods, nodes, csinodes, volumeattachments, resourceslices) keep
	// only the objects of nodes in these ranges (held.go); Hold changes
	// them. nil: everything is held, as a single replica does.
	Held *shard.Set
	// List is how Hold lists a type for a detached cache (tests and
	// benchmarks feed it by hand): its objects and the list's version,
	// as a consistent list from kube-apiserver gives them. A cache made
	// by New lists from kube-apiserver and ignores it.
	List ListFunc
}

// ListFunc lists every object of gvr, consistently: at the
// resourceVersion returned, never older than any the cache has seen.
type ListFunc func(ctx context.Context, gvr schema.GroupVersionResource) ([]runtime.Object, string, error)

// Defaults.
const (
	// DefaultLogSize: kube-apiserver's watch cache keeps at least 75 s of
	// changes; 4096 changes per type is that long at 50 changes/s of one
	// type, more than a 5,000-node cluster's steady pod churn. Each entry
	// keeps the state after it reachable for exact-version lists: about
	// 3 KiB of tree nodes plus the object versions it replaced.
	DefaultLogSize = 4096
	// DefaultEncodedEntries: the objects many nodes read at once (a
	// namespace's kube-root-ca.crt, shared pull secrets) are few; 16384
	// versions of 1 KiB objects are 16 MiB.
	DefaultEncodedEntries = 16384
)

// Cache is nodeproxy's one copy of the cluster's objects: one Store per
// resource type, each kept current by its own reflector (one list and one
// watch on kube-apiserver per type, whatever the number of readers).
type Cache struct {
	stores     map[schema.GroupVersionResource]*Store
	reflectors []*toolscache.Reflector
	encoder    *Encoder
	wg         sync.WaitGroup
	// list lists a type for Hold's acquisitions; nil in a detached
	// cache (tests set it).
	list listFunc
	// holdMu makes Holds run one at a time.
	holdMu sync.Mutex
}

// New builds a cache of every Watched resource, read from kube-apiserver
// through client. Nothing runs until Start.
func New(client kubernetes.Interface, opts Options) (*Cache, error) {
	c, err := NewDetached(opts)
	if err != nil {
		return nil, err
	}
	c.list = clientLister(client)
	backoff := opts.Backoff
	if backoff == nil {
		b := ReflectorBackoff()
		backoff = &b
	}
	for _, r := range append(slices.Clone(served), unserved...) {
		lw := toolscache.ToListWatcherWithWatchListSemantics(
			toolscache.NewListWatchFromClient(r.client(client), r.gvr.Resource, "", fields.Everything()), client)
		store := c.stores[r.gvr]
		c.reflectors = append(c.reflectors, toolscache.NewReflectorWithOptions(newObservedListWatch(lw, store), r.example, store,
			toolscache.ReflectorOptions{Name: "nodeproxy-cache/" + r.gvr.Resource, Backoff: backoff}))
	}
	return c, nil
}

// NewDetached returns a cache with no reflectors: its stores are written
// by hand (Replace, then Add, Update, Delete), as a reflector would write
// them. `nodeproxy-bench` feeds it a generated cluster this way; Start
// does nothing.
func NewDetached(opts Options) (*Cache, error) {
	if opts.LogSize <= 0 {
		return nil, fmt.Errorf("change log size must be positive, got %d", opts.LogSize)
	}
	enc, err := NewEncoder(opts.EncodedEntries)
	if err != nil {
		return nil, err
	}
	RegisterMetrics()
	c := &Cache{stores: map[schema.GroupVersionResource]*Store{}, encoder: enc}
	if opts.List != nil {
		c.list = givenLister(opts.List)
	}
	for _, r := range append(slices.Clone(served), unserved...) {
		c.stores[r.gvr] = newStore(r, opts.LogSize)
		c.stores[r.gvr].restartLogOnRelist = opts.RestartLogOnRelist
		c.stores[r.gvr].asBytes = c.stores[r.gvr].asBytes && !opts.KeepDecoded
		if opts.Held != nil && c.stores[r.gvr].nodeOf != nil {
			c.stores[r.gvr].setHoldLocked(*opts.Held, new([shard.Ranges]uint64)) // nobody else has the store yet
		}
	}
	return c, nil
}

// Store returns the store of gvr, or nil if the cache does not hold it.
func (c *Cache) Store(gvr schema.GroupVersionResource) *Store { return c.stores[gvr] }

// Encoder is the cache of encoded object versions shared by every reader.
func (c *Cache) Encoder() *Encoder { return c.encoder }

// Start runs every reflector until ctx ends. Until then /metrics
// reports this cache's freshness.
func (c *Cache) Start(ctx context.Context) {
	reported.Store(c)
	context.AfterFunc(ctx, func() { reported.CompareAndSwap(c, nil) })
	for _, r := range c.reflectors {
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			r.RunWithContext(ctx)
		}()
	}
	klog.InfoS("Cache started", "resources", len(c.reflectors))
}

// Wait returns once every reflector started by Start has stopped.
func (c *Cache) Wait() { c.wg.Wait() }

// Unsynced names the resources whose first list has not been taken in;
// empty once the cache is ready to answer.
func (c *Cache) Unsynced() []string {
	var out []string
	for _, gvr := range Watched() {
		if !c.stores[gvr].HasSynced() {
			out = append(out, gvr.Resource)
		}
	}
	return out
}

// Freshness says how current each store is, in Watched order.
func (c *Cache) Freshness() []Freshness {
	now := time.Now()
	out := make([]Freshness, 0, len(c.stores))
	for _, gvr := range Watched() {
		out = append(out, c.stores[gvr].Freshness(now))
	}
	return out
}
