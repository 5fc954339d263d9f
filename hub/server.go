package hub

import (
	"context"
	"fmt"
	"slices"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/registry/rest"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/apiserver/pkg/server/healthz"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	restclient "k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/nodeproxy/nodeproxy/apis/bulk/v1alpha1"
	"github.com/nodeproxy/nodeproxy/authorizer"
	"github.com/nodeproxy/nodeproxy/bulk"
	bulkget "github.com/nodeproxy/nodeproxy/bulk/get"
	bulkwatch "github.com/nodeproxy/nodeproxy/bulk/watch"
	"github.com/nodeproxy/nodeproxy/cache"
	"github.com/nodeproxy/nodeproxy/graph"
	"github.com/nodeproxy/nodeproxy/nodeview"
	"github.com/nodeproxy/nodeproxy/passthrough"
	"github.com/nodeproxy/nodeproxy/watchmux"
)

// Server is a running nodeproxy: the generic API server, the informers
// behind it, the authorization graph they feed and the webhook that
// answers from it.
type Server struct {
	generic     *genericapiserver.GenericAPIServer
	cache       *cache.Cache
	rbac        *rbacChanges
	watcher     *bulkwatch.Watcher
	views       *nodeview.Views
	watchServer *watchmux.Server
	// members follows the replicas of a sharded hub; nil unsharded.
	members *Membership
	holder  *shardHolder
	// listClient lists the replicas' EndpointSlices once, before the
	// cache starts; nil unsharded.
	listClient kubernetes.Interface
	// drainTimeout bounds the wait for bulk watch connections to end.
	drainTimeout time.Duration
}

// New builds the server. It starts nothing.
func (c *Config) New() (*Server, error) {
	// The cache's reflectors ask for protobuf, which every cached type
	// has: the cache keeps pods as protobuf (docs/architecture.md,
	// "Objects as kube-apiserver's bytes"), and it is smaller on the wire
	// and cheaper to decode than JSON.
	informerConfig := restclient.CopyConfig(c.Kube)
	informerConfig.ContentType = runtime.ContentTypeProtobuf
	informerConfig.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	client, err := kubernetes.NewForConfig(informerConfig)
	if err != nil {
		return nil, fmt.Errorf("client for informers: %w", err)
	}
	objects, err := cache.New(client, c.Cache)
	if err != nil {
		return nil, fmt.Errorf("cache: %w", err)
	}
	generic, err := c.Generic.Complete(nil).New("nodeproxy", genericapiserver.NewEmptyDelegate())
	if err != nil {
		return nil, fmt.Errorf("generic API server: %w", err)
	}
	g := graph.New()
	if err := FeedGraph(objects, g); err != nil {
		return nil, err
	}
	graph.RegisterMetrics()
	authorizer.RegisterMetrics()
	bulk.RegisterMetrics()
	bulkget.RegisterMetrics()
	bulkwatch.RegisterMetrics()
	registerMetrics()
	// One metadata client for the questions the checks ask kube-apiserver
	// (the node authorizer's list of a node's pods; a type's latest
	// version and its progress, for consistent reads and resumes). No
	// client-side rate limit: each check bounds its own requests (one in
	// flight per node, at most --node-refresh-max-concurrent; one per
	// type), and client-go's
	// default (5/s, burst 10) only added waits for a token
	// (docs/operations.md, "Freshness").
	metaConfig := restclient.CopyConfig(c.Kube)
	metaConfig.QPS = -1
	meta, err := metadata.NewForConfig(metaConfig)
	if err != nil {
		return nil, fmt.Errorf("metadata client for the authorizer's and the bulk watch's checks: %w", err)
	}
	nodes := authorizer.New(g)
	if c.Refresh.Timeout > 0 {
		r, err := newRefresher(meta, objects, c.Refresh)
		if err != nil {
			return nil, err
		}
		nodes = authorizer.NewRefreshing(g, r)
	}
	webhook := &authorizer.Webhook{Authorizer: nodes}
	var members *Membership
	if c.Shard.Service != "" {
		members = NewMembership(c.Shard.Member, c.Shard.Service, c.Shard.Namespace)
		if webhook.Shards, err = shardedWebhook(c, members, objects, g); err != nil {
			return nil, err
		}
	}
	generic.Handler.NonGoRestfulMux.Handle(authorizer.WebhookPath, webhook)
	catalog := bulk.NewCatalog(objects, g, nodes, withoutCredentialID{c.Generic.Authorization.Authorizer})
	catalog.AskLatest(latestVersions{client: meta})
	if c.UncachedTypes {
		passthrough.RegisterMetrics()
		uncached, err := passthrough.NewClient(c.Kube)
		if err != nil {
			return nil, err
		}
		catalog.ServeUncached(uncached)
	}
	if err := installBulkAPI(generic, bulkget.NewGetter(catalog), c.BulkGet); err != nil {
		return nil, err
	}
	watcher := bulkwatch.NewWatcher(catalog, g, c.Watcher)
	rbac, err := newRBACChanges(client, watcher.Recheck)
	if err != nil {
		return nil, err
	}
	views, err := nodeview.NewViews(objects, g, c.Watcher.BookmarkInterval)
	if err != nil {
		return nil, fmt.Errorf("node views: %w", err)
	}
	// A progress request is answered only once every type is shown as
	// fresh as kube-apiserver, as a consistent bulk read is, with the
	// same questions and probes.
	views.ProveFreshness(catalog, c.NodeViewHeardWithin)
	channels := channelRouter{views: nodeview.NewHandler(views, latestVersions{client: meta}), watches: watcher}
	if len(c.NodeViewVersions) > 0 {
		channels.viewVersions = sets.New(c.NodeViewVersions...)
	}
	watchServer := watchmux.NewServer(channels, c.Watch)
	c.router.watch.Store(watchServer)
	bound := newBoundObjects()
	for _, gvr := range cache.Watched() {
		if slices.Contains(boundResources, gvr.Resource) {
			objects.Store(gvr).AddHandler(bound.handler())
		}
	}
	// Bound tokens are checked locally against the cache as far as the
	// node views trust it (--node-view-heard-within).
	c.router.reauth.Store(newReauthenticator(c.Generic.Authentication.Authenticator, bound, newCachedObjects(objects, c.NodeViewHeardWithin, catalog), c.ReauthenticateInterval, ages{direct: c.MaxConnectionAge, aggregated: c.AggregatedMaxConnectionAge, frontProxy: c.Generic.Authentication.RequestHeaderConfig}))

	// Ready only once every type has been listed into the cache and the
	// graph: before that the cache would answer "not found" for objects
	// that exist, and the authorizer refuse what it should allow. Not
	// ready again while a type has been unable to list and watch for
	// longer than CacheMaxWatchOutage.
	if err := generic.AddReadyzChecks(
		healthz.NamedCheck("cache-sync", cacheSynced(objects)),
		healthz.NamedCheck("cache-watch", cacheWatching(objects, c.CacheMaxWatchOutage)),
		healthz.NamedCheck("client-ca", clientCAsLoaded(c.Generic.SecureServing.ClientCA, c.ClientCASources)),
	); err != nil {
		return nil, fmt.Errorf("readiness check: %w", err)
	}
	s := &Server{generic: generic, cache: objects, rbac: rbac, watcher: watcher, views: views, watchServer: watchServer, drainTimeout: c.Watch.DrainTimeout()}
	if c.Shard.Service != "" {
		s.members = members
		objects.Store(discoveryv1.SchemeGroupVersion.WithResource("endpointslices")).AddHandler(s.members.Handler())
		router := newShardRouter(s.members, c.Shard.Service, c.Shard.Namespace, c.ShardPort)
		router.bookmark = func() {
			views.Step()
			views.Bookmark()
		}
		c.router.shard.Store(router)
		s.holder = newShardHolder(objects, s.members)
		s.listClient = client
	}
	if err := generic.AddPostStartHook("nodeproxy-start-cache", s.startCache); err != nil {
		return nil, fmt.Errorf("cache start hook: %w", err)
	}
	return s, nil
}

// installBulkAPI serves bulk.k8s.io/v1alpha1: discovery, OpenAPI and the
// create verb on bulkgetoperations come from the generic server.
func installBulkAPI(generic *genericapiserver.GenericAPIServer, getter *bulkget.Getter, limits bulkget.Limits) error {
	info := genericapiserver.NewDefaultAPIGroupInfo(v1alpha1.GroupName, scheme, metav1.ParameterCodec, codecs)
	info.VersionedResourcesStorageMap[v1alpha1.SchemeGroupVersion.Version] = map[string]rest.Storage{
		"bulkgetoperations": bulkget.NewREST(getter, limits),
	}
	if err := generic.InstallAPIGroup(&info); err != nil {
		return fmt.Errorf("install %s: %w", v1alpha1.SchemeGroupVersion, err)
	}
	return nil
}

// Membership follows the replicas of a sharded hub, for what holds or
// serves a share of the nodes (OnChange); nil when unsharded.
func (s *Server) Membership() *Membership { return s.members }

// membershipListTimeout bounds the first list of the replicas'
// EndpointSlices, retried every second meanwhile: a replica that cannot
// read them in a minute (its RBAC, kube-apiserver down) fails its start
// and is restarted, rather than serving nodes it cannot know it owns.
const membershipListTimeout = time.Minute

func (s *Server) startCache(ctx genericapiserver.PostStartHookContext) error {
	if s.members != nil {
		var last error
		err := wait.PollUntilContextTimeout(ctx, time.Second, membershipListTimeout, true, func(ctx context.Context) (bool, error) {
			last = s.members.List(ctx, s.listClient)
			if last != nil {
				klog.ErrorS(last, "Listing the hub's replicas; trying again")
			}
			return last == nil, nil
		})
		if err != nil {
			return fmt.Errorf("the hub's replicas: %w (last: %w)", err, last)
		}
		if err := s.holder.start(ctx); err != nil {
			return fmt.Errorf("hold the shard table's ranges: %w", err)
		}
		go s.holder.run(ctx)
		go s.members.Run(ctx)
	}
	s.cache.Start(ctx)
	go s.rbac.run(ctx, s.watcher.RBACWatched)
	// The watch dispatchers follow the stores' change logs from where the
	// stores are once synced; before that there is nothing to follow.
	go func() {
		if !toolscache.WaitForCacheSync(ctx.Done(), func() bool { return len(s.cache.Unsynced()) == 0 }) {
			return
		}
		go s.views.Run(ctx)
		s.watcher.Run(ctx)
	}()
	return nil
}

// Run serves until ctx ends, then stops accepting requests, drains the ones
// in flight and returns.
func (s *Server) Run(ctx context.Context) error {
	defer s.cache.Wait()
	// On shutdown, bulk watch clients get ERROR 503 on every channel and a
	// close frame, and resubscribe elsewhere, while the listener drains.
	// Run returns only once every connection has ended, or
	// watchmux.Options.DrainTimeout (30 s by default) has passed: the
	// process exiting sooner cut connections before their close frame.
	drained := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		defer close(drained)
		if s.views != nil {
			// Every node view's position as this replica leaves it, so
			// that the next replica resumes from it: a view whose own
			// objects did not change is otherwise bookmarked a minute
			// apart, and a position older than the next replica's
			// change log costs the node the view afresh.
			s.views.Step()
			s.views.Bookmark()
			klog.InfoS("Bookmarked every node view at this replica's position before shutdown", "position", s.views.Position())
		}
		dctx, cancel := context.WithTimeout(context.Background(), s.drainTimeout)
		defer cancel()
		if err := s.watchServer.Shutdown(dctx); err != nil {
			klog.ErrorS(err, "Bulk watch connections did not all end cleanly on shutdown")
		}
	})
	err := s.generic.PrepareRun().RunWithContext(ctx)
	if !stop() { // the shutdown started: wait for it
		<-drained
	}
	return err
}
