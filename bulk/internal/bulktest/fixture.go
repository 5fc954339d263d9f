// Package bulktest builds what the bulk packages' unit tests read: a
// cache fed by hand (no reflectors run; the fake clientset is never
// called), the graph fed by its pod store, and a catalog over both, as
// the hub wires them, with a delegated authorizer the test scripts.
// Only tests import it.
package bulktest

import (
	"context"
	"strconv"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/nodeproxy/nodeproxy/apis/bulk/v1alpha1"
	nodeauthorizer "github.com/nodeproxy/nodeproxy/authorizer"
	"github.com/nodeproxy/nodeproxy/bulk"
	"github.com/nodeproxy/nodeproxy/cache"
	"github.com/nodeproxy/nodeproxy/graph"
)

// Fixture is a cache, its graph and a catalog serving them.
type Fixture struct {
	Cache   *cache.Cache
	Graph   *graph.Graph
	Catalog *bulk.Catalog

	// The delegated authorizer records what other users were asked
	// about, fails with err when it is set, and otherwise allows only
	// what allow says.
	mu    sync.Mutex
	asked []authorizer.Attributes
	allow func(authorizer.Attributes) bool
	err   error
}

// New is a fixture whose stores keep logSize changes, every type listed
// (empty) at resourceVersion 1.
func New(t testing.TB, logSize int) *Fixture {
	t.Helper()
	c, err := cache.New(fake.NewClientset(), cache.Options{LogSize: logSize, EncodedEntries: 1024})
	if err != nil {
		t.Fatal(err)
	}
	f := &Fixture{Cache: c, Graph: graph.New(), allow: func(authorizer.Attributes) bool { return true }}
	c.Store(GVR("pods")).AddHandler(f.Graph.PodHandler())
	f.Catalog = bulk.NewCatalog(c, f.Graph, nodeauthorizer.New(f.Graph), authorizer.AuthorizerFunc(f.delegated))
	// kube-apiserver is where the cache is: nothing written by hand is
	// ever in flight.
	f.Catalog.AskLatest(cacheVersions{c})
	for _, r := range cache.Watched() {
		if err := c.Store(r).Replace(nil, "1"); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

// cacheVersions answers kube-apiserver's current resourceVersion of a
// type with the store's own: a cache that is never behind.
type cacheVersions struct{ c *cache.Cache }

func (v cacheVersions) LatestVersion(_ context.Context, r schema.GroupVersionResource) (uint64, error) {
	return v.c.Store(r).Snapshot().RV, nil
}

func (f *Fixture) delegated(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.asked = append(f.asked, a)
	switch {
	case f.err != nil:
		return authorizer.DecisionNoOpinion, "", f.err
	case f.allow(a):
		return authorizer.DecisionAllow, "", nil
	}
	return authorizer.DecisionNoOpinion, "RBAC says no", nil
}

// Allow has the delegated authorizer allow what allow says, and refuse
// the rest with "RBAC says no".
func (f *Fixture) Allow(allow func(authorizer.Attributes) bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.allow = allow
}

// Fail has the delegated authorizer fail with err; nil ends the failure.
func (f *Fixture) Fail(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.err = err
}

// Asked returns what the delegated authorizer was asked since the last
// call, and forgets it.
func (f *Fixture) Asked() []authorizer.Attributes {
	f.mu.Lock()
	defer f.mu.Unlock()
	asked := f.asked
	f.asked = nil
	return asked
}

// Add writes obj (a pod, secret, configmap or node) into its store.
func (f *Fixture) Add(t testing.TB, obj any) {
	t.Helper()
	var resource string
	switch obj.(type) {
	case *corev1.Pod:
		resource = "pods"
	case *corev1.Secret:
		resource = "secrets"
	case *corev1.ConfigMap:
		resource = "configmaps"
	case *corev1.Node:
		resource = "nodes"
	}
	if err := f.Cache.Store(GVR(resource)).Update(obj); err != nil {
		t.Fatal(err)
	}
}

// GVR is the served type named resource.
func GVR(resource string) schema.GroupVersionResource {
	for _, r := range cache.Resources {
		if r.Resource == resource {
			return r
		}
	}
	panic(resource)
}

// rv is the resourceVersion of the last object made; each test package
// has its own.
var rv = 100

// SkipVersions moves the versions of objects made from now on n ahead,
// clear of those made so far, and returns the last one skipped.
func SkipVersions(n int) uint64 {
	rv += n
	return uint64(rv)
}

// Meta is the metadata of a new object version: the next
// resourceVersion, and the label name=name.
func Meta(ns, name string) metav1.ObjectMeta {
	rv++
	return metav1.ObjectMeta{Namespace: ns, Name: name, ResourceVersion: strconv.Itoa(rv), Labels: map[string]string{"name": name}}
}

// Secret is a new version of secret ns/name.
func Secret(ns, name string) *corev1.Secret {
	return &corev1.Secret{ObjectMeta: Meta(ns, name), Data: map[string][]byte{"k": []byte("v")}}
}

// Pod is a new version of pod ns/name, bound to node, with a volume of
// each of secrets.
func Pod(ns, name, node string, secrets ...string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: Meta(ns, name), Spec: corev1.PodSpec{NodeName: node}}
	for _, s := range secrets {
		p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: s, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: s}}})
	}
	return p
}

// GetOp is an operation on the core type resource.
func GetOp(resource, ns string, opts metav1.ListOptions) v1alpha1.GetOperation {
	return v1alpha1.GetOperation{Resource: metav1.GroupVersionResource{Version: "v1", Resource: resource}, Namespace: ns, Options: opts}
}

// FieldOp is an operation on the core type resource with a field
// selector.
func FieldOp(resource, ns, fieldSelector string) v1alpha1.GetOperation {
	return GetOp(resource, ns, metav1.ListOptions{FieldSelector: fieldSelector})
}

// Identities: an admin, whom the delegated authorizer decides, and
// node-a, whom the graph decides.
var (
	Admin = &user.DefaultInfo{Name: "admin", Groups: []string{"system:authenticated"}}
	NodeA = &user.DefaultInfo{Name: "system:node:node-a", Groups: []string{user.NodesGroup, "system:authenticated"}}
)
