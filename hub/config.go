package hub

import (
	"context"
	"fmt"
	"net/http"
	"time"

	openapinamer "k8s.io/apiserver/pkg/endpoints/openapi"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/apiserver/pkg/util/compatibility"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/nodeproxy/nodeproxy/apis/bulk/openapi"
	"github.com/nodeproxy/nodeproxy/authorizer"
	bulkget "github.com/nodeproxy/nodeproxy/bulk/get"
	bulkwatch "github.com/nodeproxy/nodeproxy/bulk/watch"
	"github.com/nodeproxy/nodeproxy/cache"
	"github.com/nodeproxy/nodeproxy/watchmux"
)

// MaxRequestBodyBytes bounds a request body: 1 MiB holds bulk.MaxOperations
// operations of up to 1 KiB each. Larger bodies get 413 Request Entity Too
// Large, as from kube-apiserver.
const MaxRequestBodyBytes = 1 << 20

// Config is what New needs to build a Server, and nothing more.
type Config struct {
	Generic *genericapiserver.Config
	// Kube is the configuration the cache's watches use.
	Kube  *rest.Config
	Cache cache.Options
	// CacheMaxWatchOutage bounds how long a type may fail to list and
	// watch before the server reports not ready; 0 never.
	CacheMaxWatchOutage time.Duration
	// Watch and Watcher tune the bulk watch.
	Watch   watchmux.Options
	Watcher bulkwatch.Options
	// BulkGet bounds each bulk get.
	BulkGet bulkget.Limits
	// UncachedTypes: see Options.UncachedTypes.
	UncachedTypes bool
	// Refresh tunes how the node authorizer brings its graph up to date
	// before a refusal; a zero Timeout never does.
	Refresh authorizer.RefreshOptions
	// NodeViewVersions are the versions of the node view served; nil:
	// every one.
	NodeViewVersions []string
	// NodeViewHeardWithin is Options'.
	NodeViewHeardWithin time.Duration
	// ReauthenticateInterval, MaxConnectionAge and
	// AggregatedMaxConnectionAge: see Options.
	ReauthenticateInterval, MaxConnectionAge, AggregatedMaxConnectionAge time.Duration
	// Shard is the sharding of the replicas (a zero Service: unsharded),
	// and ShardPort the port every replica serves on, which a redirect
	// names.
	Shard     ShardOptions
	ShardPort int
	// router hands bulk watch upgrades to the watch server New makes.
	router *upgradeRouter
	// ClientCASources counts the CA sources client certificates are
	// verified against (the client CA, the front-proxy CA), for the
	// readiness check that waits for them to load.
	ClientCASources int
}

// Config checks that kube-apiserver answers, then builds the server's
// configuration from the completed and validated options.
func (o *Options) Config(ctx context.Context) (*Config, error) {
	kube, err := o.kubeConfig()
	if err != nil {
		return nil, err
	}
	if o.KubeTransportWrapper != nil {
		kube.Wrap(o.KubeTransportWrapper)
	}
	if err := reachable(ctx, kube, o); err != nil {
		return nil, err
	}
	if err := o.selfSignedCert(); err != nil {
		return nil, fmt.Errorf("self-signed serving certificate: %w", err)
	}

	generic := genericapiserver.NewConfig(codecs)
	generic.EffectiveVersion = compatibility.DefaultBuildEffectiveVersion()
	generic.ShutdownDelayDuration = o.ShutdownDelay
	router := &upgradeRouter{}
	generic.BuildHandlerChainFunc = func(api http.Handler, c *genericapiserver.Config) http.Handler {
		return buildHandlerChain(router.wrap(api), c)
	}
	// The only bodies nodeproxy reads are bulk gets (MaxOperations
	// operations of a few hundred bytes each) and SubjectAccessReviews
	// (the webhook has its own, smaller limit).
	generic.MaxRequestBodyBytes = MaxRequestBodyBytes
	namer := openapinamer.NewDefinitionNamer(scheme)
	generic.OpenAPIConfig = genericapiserver.DefaultOpenAPIConfig(openapi.GetOpenAPIDefinitions, namer)
	generic.OpenAPIConfig.Info.Title = "nodeproxy"
	generic.OpenAPIV3Config = genericapiserver.DefaultOpenAPIV3Config(openapi.GetOpenAPIDefinitions, namer)
	generic.OpenAPIV3Config.Info.Title = "nodeproxy"
	if err := o.SecureServing.ApplyTo(&generic.SecureServing, &generic.LoopbackClientConfig); err != nil {
		return nil, fmt.Errorf("secure serving: %w", err)
	}
	if err := o.Authentication.ApplyTo(&generic.Authentication, generic.SecureServing, nil); err != nil {
		return nil, fmt.Errorf("delegated authentication: %w", err)
	}
	generic.Authentication.Authenticator = newCertCachingAuthenticator(generic.Authentication.Authenticator, generic.Authentication.RequestHeaderConfig)
	if err := o.Authorization.ApplyTo(&generic.Authorization); err != nil {
		return nil, fmt.Errorf("delegated authorization: %w", err)
	}
	generic.Authorization.Authorizer, err = withHealthOnlyForAnonymous(o.Authorization.AlwaysAllowPaths, generic.Authorization.Authorizer)
	if err != nil {
		return nil, fmt.Errorf("authorization chain: %w", err)
	}
	sources := 0
	lookup := !o.Authentication.SkipInClusterLookup
	if o.Authentication.ClientCert.ClientCA != "" || lookup {
		sources++
	}
	if o.Authentication.RequestHeader.ClientCAFile != "" || lookup {
		sources++
	}
	return &Config{Generic: generic, Kube: kube, Cache: o.Cache, CacheMaxWatchOutage: o.CacheMaxWatchOutage, Watch: o.Watch, Watcher: o.Watcher, BulkGet: o.BulkGet, UncachedTypes: o.UncachedTypes, Refresh: o.Refresh, NodeViewVersions: o.NodeViewVersions, NodeViewHeardWithin: o.NodeViewHeardWithin, ClientCASources: sources, router: router,
		Shard: o.Shard, ShardPort: o.SecureServing.BindPort,
		ReauthenticateInterval: o.ReauthenticateInterval, MaxConnectionAge: o.MaxConnectionAge, AggregatedMaxConnectionAge: o.AggregatedMaxConnectionAge}, nil
}

func (o *Options) kubeConfig() (*rest.Config, error) {
	if o.Kubeconfig == "" {
		cfg, err := rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("no --kubeconfig given and not running in a cluster: %w", err)
		}
		return cfg, nil
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", o.Kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("load --kubeconfig %s: %w", o.Kubeconfig, err)
	}
	return cfg, nil
}

// reachable asks kube-apiserver for its version within --kube-api-connect-
// timeout. Without it a wrong kubeconfig surfaces much later, and less
// clearly: as a hang in the delegated authentication's first lookup, or as
// a server that never gets ready.
func reachable(ctx context.Context, kube *rest.Config, o *Options) error {
	cfg := rest.CopyConfig(kube)
	cfg.Timeout = o.ConnectTimeout
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("client for kube-apiserver at %s: %w", kube.Host, err)
	}
	ctx, cancel := context.WithTimeout(ctx, o.ConnectTimeout)
	defer cancel()
	if err := client.Discovery().RESTClient().Get().AbsPath("/version").Do(ctx).Error(); err != nil {
		return fmt.Errorf("kube-apiserver at %s does not answer: %w", kube.Host, err)
	}
	return nil
}
