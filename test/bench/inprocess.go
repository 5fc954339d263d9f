package bench

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/transport"

	"github.com/nodeproxy/nodeproxy/apis/bulk/v1alpha1"
	nodeauthorizer "github.com/nodeproxy/nodeproxy/authorizer"
	"github.com/nodeproxy/nodeproxy/bulk"
	bulkget "github.com/nodeproxy/nodeproxy/bulk/get"
	bulkwatch "github.com/nodeproxy/nodeproxy/bulk/watch"
	"github.com/nodeproxy/nodeproxy/cache"
	"github.com/nodeproxy/nodeproxy/graph"
	"github.com/nodeproxy/nodeproxy/hub"
	"github.com/nodeproxy/nodeproxy/test/workload"
	"github.com/nodeproxy/nodeproxy/watchmux"
)

// inProcess is nodeproxy's bulk watch path in this process, over a cache
// whose stores are written from the generated cluster where informers
// would write them: the same stores, graph, authorizer, dispatchers and
// websockets over TLS as `nodeproxy serve`, without kube-apiserver. There
// is no authentication: a request is the user its impersonation headers
// name, as client-go sets them (rest.Config.Impersonate).
type inProcess struct {
	cache *cache.Cache
	graph *graph.Graph
	// URL is the bulk watch endpoint, wss://...; TLS trusts the server.
	URL string
	TLS *tls.Config

	host string // https://...
	ca   []byte // PEM of the server's certificate

	rv   atomic.Uint64 // resourceVersion of the next write
	stop func()
}

// asNode is how node n's requests name it.
func asNode(n int) rest.ImpersonationConfig {
	return rest.ImpersonationConfig{UserName: "system:node:" + workload.NodeName(n), Groups: []string{user.NodesGroup, user.AllAuthenticated}}
}

// nodeConfig is node n's client configuration for p's bulk API.
func (p *inProcess) nodeConfig(n int) *rest.Config {
	return &rest.Config{
		Host:            p.host,
		TLSClientConfig: rest.TLSClientConfig{CAData: p.ca},
		QPS:             -1, // no client-side limit: the server is measured
		Impersonate:     asNode(n),
	}
}

// serveBulkGet answers a bulk get with nodeproxy's REST storage, as the
// generic API server does minus its filters: JSON in, JSON out, a Status
// on error.
func serveBulkGet(gets *bulkget.REST, w http.ResponseWriter, r *http.Request) {
	op := &v1alpha1.BulkGetOperation{}
	status := func(err error) {
		s := apierrors.NewBadRequest(err.Error()).ErrStatus
		if api, ok := err.(apierrors.APIStatus); ok {
			s = api.Status()
		}
		s.APIVersion, s.Kind = "v1", "Status"
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(int(s.Code))
		_ = json.NewEncoder(w).Encode(&s)
	}
	if err := json.NewDecoder(io.LimitReader(r.Body, 3<<20)).Decode(op); err != nil {
		status(fmt.Errorf("decode BulkGetOperation: %w", err))
		return
	}
	out, err := gets.Create(r.Context(), op, nil, nil)
	if err != nil {
		status(err)
		return
	}
	// The generic server streams the answer through its serializer; this
	// plain handler has none, so it takes the answer built in memory (its
	// in-flight slot is freed when the request ends).
	if co, ok := out.(runtime.CacheableObject); ok {
		out = co.GetObject()
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	_ = json.NewEncoder(w).Encode(out)
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
	if err := hub.FeedGraph(objects, p.graph); err != nil {
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
	catalog := bulk.NewCatalog(objects, p.graph, nodeauthorizer.New(p.graph), nobody)
	// There is no kube-apiserver: the cache is the cluster, and a
	// consistent read (resourceVersion "") is one of the cache as it
	// stands.
	catalog.AskLatest(storeVersions{objects})
	watcher := bulkwatch.NewWatcher(catalog, p.graph, bulkwatch.DefaultOptions())
	ctx, cancel := context.WithCancel(ctx)
	go watcher.Run(ctx)
	mux := watchmux.NewServer(watcher, watchmux.DefaultOptions())
	gets := bulkget.NewREST(bulkget.NewGetter(catalog), bulkget.DefaultLimits())
	hs := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u := &user.DefaultInfo{Name: r.Header.Get(transport.ImpersonateUserHeader), Groups: r.Header.Values(transport.ImpersonateGroupHeader)}
		if r.Method == http.MethodPost {
			serveBulkGet(gets, w, r.WithContext(request.WithUser(r.Context(), u)))
			return
		}
		// As the hub serves a connection: detached from its request,
		// under a context that carries the caller alone.
		conn, done := context.WithCancel(request.WithUser(context.Background(), u))
		mux.ServeDetached(conn, w, r, nil, done)
	}))
	hs.EnableHTTP2 = false
	hs.StartTLS()
	p.URL = "wss" + strings.TrimPrefix(hs.URL, "https") + watchmux.Path + "?watch=1"
	p.TLS = hs.Client().Transport.(*http.Transport).TLSClientConfig.Clone()
	p.host, p.ca = hs.URL, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: hs.Certificate().Raw})
	p.stop = func() {
		sctx, stop := context.WithTimeout(context.Background(), watchmux.DefaultOptions().DrainTimeout())
		_ = mux.Shutdown(sctx)
		stop()
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

// storeVersions answers "kube-apiserver's current resourceVersion" of a
// type with its store's: for an in-process hub whose cache is written by
// the benchmark itself, nothing is ever in flight.
type storeVersions struct{ c *cache.Cache }

func (v storeVersions) LatestVersion(_ context.Context, r schema.GroupVersionResource) (uint64, error) {
	return v.c.Store(r).Snapshot().RV, nil
}
