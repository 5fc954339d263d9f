package bench

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/endpoints/request"

	nodeauthorizer "github.com/nodeproxy/nodeproxy/authorizer"
	"github.com/nodeproxy/nodeproxy/bulk"
	"github.com/nodeproxy/nodeproxy/cache"
	"github.com/nodeproxy/nodeproxy/graph"
	"github.com/nodeproxy/nodeproxy/internal/server"
	"github.com/nodeproxy/nodeproxy/internal/workload"
	"github.com/nodeproxy/nodeproxy/watchmux"
)

// inProcess is nodeproxy's bulk watch path in this process, over a cache
// whose stores are written from the generated cluster where informers
// would write them: the same stores, graph, authorizer, dispatchers and
// websockets over TLS as `nodeproxy serve`, without kube-apiserver. There
// is no authentication: a connection is the node its X-Bench-Node header
// names.
type inProcess struct {
	cache *cache.Cache
	graph *graph.Graph
	// URL is the bulk watch endpoint, wss://...; TLS trusts the server.
	URL string
	TLS *tls.Config

	rv   atomic.Uint64 // resourceVersion of the next write
	stop func()
}

var (
	podsGVR        = schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	secretsGVR     = schema.GroupVersionResource{Version: "v1", Resource: "secrets"}
	configmapsGVR  = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	nodesGVR       = schema.GroupVersionResource{Version: "v1", Resource: "nodes"}
	pvsGVR         = schema.GroupVersionResource{Version: "v1", Resource: "persistentvolumes"}
	attachmentsGVR = schema.GroupVersionResource{Group: "storage.k8s.io", Version: "v1", Resource: "volumeattachments"}
)

// startInProcess lists c into a detached cache (with a secret or
// configmap of objectSize bytes for every one a pod uses) and serves bulk
// watches of it until ctx ends or stop is called.
func startInProcess(ctx context.Context, c *workload.Cluster, objectSize int) (*inProcess, error) {
	objects, err := cache.NewDetached(cache.Options{LogSize: cache.DefaultLogSize, EncodedEntries: cache.DefaultEncodedEntries})
	if err != nil {
		return nil, err
	}
	p := &inProcess{cache: objects, graph: graph.New()}
	if err := server.FeedGraph(objects, p.graph); err != nil {
		return nil, err
	}
	p.rv.Store(2)
	data := map[string][]byte{"data": []byte(strings.Repeat("x", objectSize))}
	secrets, configmaps := map[[2]string]bool{}, map[[2]string]bool{}
	for _, pod := range c.Pods {
		for _, v := range pod.Spec.Volumes {
			switch {
			case v.Secret != nil:
				secrets[[2]string{pod.Namespace, v.Secret.SecretName}] = true
			case v.ConfigMap != nil:
				configmaps[[2]string{pod.Namespace, v.ConfigMap.Name}] = true
			}
		}
	}
	meta := func(ns, name string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Namespace: ns, Name: name, ResourceVersion: "1"}
	}
	lists := map[schema.GroupVersionResource][]any{}
	for k := range secrets {
		lists[secretsGVR] = append(lists[secretsGVR], &corev1.Secret{ObjectMeta: meta(k[0], k[1]), Data: data})
	}
	for k := range configmaps {
		lists[configmapsGVR] = append(lists[configmapsGVR], &corev1.ConfigMap{ObjectMeta: meta(k[0], k[1]), Data: map[string]string{"data": string(data["data"])}})
	}
	lists[nodesGVR] = listed(c.Nodes)
	lists[podsGVR] = listed(c.Pods)
	lists[pvsGVR] = listed(c.PVs)
	lists[attachmentsGVR] = listed(c.Attachments)
	for _, gvr := range cache.Watched() {
		if err := objects.Store(gvr).Replace(lists[gvr], "1"); err != nil {
			return nil, fmt.Errorf("list %s: %w", gvr.Resource, err)
		}
	}

	// Only nodes connect; anyone else is refused, as RBAC would refuse a
	// stranger.
	nobody := authorizer.AuthorizerFunc(func(context.Context, authorizer.Attributes) (authorizer.Decision, string, error) {
		return authorizer.DecisionNoOpinion, "not a node", nil
	})
	getter := bulk.NewGetter(objects, p.graph, nodeauthorizer.New(p.graph), nobody)
	watcher := bulk.NewWatcher(getter, p.graph, bulk.DefaultWatcherOptions())
	ctx, cancel := context.WithCancel(ctx)
	go watcher.Run(ctx)
	mux := watchmux.NewServer(watcher, watchmux.DefaultOptions())
	hs := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		node := r.Header.Get("X-Bench-Node")
		u := &user.DefaultInfo{Name: "system:node:" + node, Groups: []string{user.NodesGroup, user.AllAuthenticated}}
		mux.ServeHTTP(w, r.WithContext(request.WithUser(r.Context(), u)))
	}))
	hs.EnableHTTP2 = false
	hs.StartTLS()
	p.URL = "wss" + strings.TrimPrefix(hs.URL, "https") + watchmux.Path + "?watch=1"
	p.TLS = hs.Client().Transport.(*http.Transport).TLSClientConfig.Clone()
	p.stop = func() {
		mux.Shutdown()
		hs.Close()
		cancel()
	}
	return p, nil
}

// updateSecret writes a new version of a secret, as an informer would
// deliver an update: with the next resourceVersion.
func (p *inProcess) updateSecret(ns, name string, size int, round int) error {
	rv := p.rv.Add(1)
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, ResourceVersion: strconv.FormatUint(rv, 10)},
		Data:       map[string][]byte{"data": []byte(strings.Repeat("x", size)), "round": []byte(strconv.Itoa(round))},
	}
	return p.cache.Store(secretsGVR).Update(s)
}

// deletePod deletes a pod, as an informer would deliver the deletion.
func (p *inProcess) deletePod(pod *corev1.Pod) error {
	pod = pod.DeepCopy()
	pod.ResourceVersion = strconv.FormatUint(p.rv.Add(1), 10)
	return p.cache.Store(podsGVR).Delete(pod)
}

func metav1GVR(resource string) metav1.GroupVersionResource {
	return metav1.GroupVersionResource{Version: "v1", Resource: resource}
}

// fieldSelector selects one object by name, changes only.
func fieldSelector(name string) metav1.ListOptions {
	no := false
	return metav1.ListOptions{FieldSelector: "metadata.name=" + name, SendInitialEvents: &no}
}

// listed copies objs as a list would deliver them, at resourceVersion 1,
// leaving the generated cluster (which other scenarios read) untouched.
func listed[T runtime.Object](objs []T) []any {
	out := make([]any, len(objs))
	for i, o := range objs {
		o := o.DeepCopyObject()
		if m, err := apimeta.Accessor(o); err == nil {
			m.SetResourceVersion("1")
		}
		out[i] = o
	}
	return out
}
