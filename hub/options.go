package hub

import (
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	genericoptions "k8s.io/apiserver/pkg/server/options"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/transport"
	cliflag "k8s.io/component-base/cli/flag"
	logsapi "k8s.io/component-base/logs/api/v1"
	netutils "k8s.io/utils/net"

	"github.com/nodeproxy/nodeproxy/apis/bulk/v1alpha1"
	"github.com/nodeproxy/nodeproxy/authorizer"
	bulkget "github.com/nodeproxy/nodeproxy/bulk/get"
	bulkwatch "github.com/nodeproxy/nodeproxy/bulk/watch"
	"github.com/nodeproxy/nodeproxy/cache"
	"github.com/nodeproxy/nodeproxy/watchmux"

	_ "k8s.io/component-base/logs/json/register" // --logging-format=json
)

func init() {
	// The logging flags consult these gates; k8s.io/apiserver does not
	// register them, kube-apiserver's own feature list does.
	utilruntime.Must(logsapi.AddFeatureGates(utilfeature.DefaultMutableFeatureGate))
}

// DefaultSecurePort is where nodeproxy serves when --secure-port is not
// given: above 1024 so the server needs no privilege, and unlike 443 free
// on a developer's machine.
const DefaultSecurePort = 8443

// Options are what the flags of `nodeproxy serve` fill.
type Options struct {
	SecureServing  *genericoptions.SecureServingOptionsWithLoopback
	Authentication *genericoptions.DelegatingAuthenticationOptions
	Authorization  *genericoptions.DelegatingAuthorizationOptions
	Logs           *logsapi.LoggingConfiguration

	// Kubeconfig is the file nodeproxy's cache uses to reach
	// kube-apiserver, and the default of the delegated authentication and
	// authorization kubeconfigs. Empty means the in-cluster configuration.
	Kubeconfig string
	// ConnectTimeout bounds the check, before serving, that kube-apiserver
	// answers.
	ConnectTimeout time.Duration
	// ShutdownDelay keeps serving after SIGTERM while /readyz already
	// fails, so that load balancers stop sending before the listener closes.
	ShutdownDelay time.Duration
	// Cache sizes the object cache.
	Cache cache.Options
	// CacheMaxWatchOutage is how long a type may be unable to list and
	// watch kube-apiserver before /readyz fails; 0 never fails it.
	CacheMaxWatchOutage time.Duration
	// Watch bounds each bulk watch connection.
	Watch watchmux.Options
	// Watcher tunes the bulk watch's bookmarks and re-authorization.
	Watcher bulkwatch.Options
	// ReauthenticateInterval is how often, at most, the caller of each
	// open bulk watch connection is authenticated again;
	// MaxConnectionAge how long a connection lives at most (jittered
	// down by up to a quarter), AggregatedMaxConnectionAge one through
	// kube-apiserver's aggregator, whose caller the hub cannot
	// authenticate again.
	ReauthenticateInterval     time.Duration
	MaxConnectionAge           time.Duration
	AggregatedMaxConnectionAge time.Duration
	// BulkGet bounds each bulk get.
	BulkGet bulkget.Limits
	// UncachedTypes has bulk operations on types nodeproxy does not cache
	// answered by kube-apiserver as the caller (impersonation), instead of
	// refused. It needs the grant of manifests/components/uncached-types.
	UncachedTypes bool
	// Refresh tunes how the node authorizer brings its graph up to date
	// with kube-apiserver before refusing a node; Timeout 0 turns it off.
	Refresh authorizer.RefreshOptions
	// NodeViewHeardWithin: a progress request of a node view is answered
	// at the cache's versions of each type whose watch works and heard
	// from kube-apiserver within it; other types are shown fresh by
	// asking kube-apiserver. 0 asks at every request. The same bound
	// says which types' cache the local re-authentication of bound
	// ServiceAccount tokens may read (0: every check is a TokenReview).
	NodeViewHeardWithin time.Duration
	// NodeViewVersions are the versions of the node view served; empty:
	// every version this release has.
	NodeViewVersions []string
	// Shard makes the hub one replica of several that each serve a
	// share of the nodes; its zero value is unsharded.
	Shard ShardOptions

	// KubeTransportWrapper, when set, wraps the transport of every request
	// to kube-apiserver made with --kubeconfig (the cache's lists and
	// watches). No flag sets it: tests and benchmarks use it to make a
	// replica lag behind kube-apiserver on purpose.
	KubeTransportWrapper transport.WrapperFunc
}

// DefaultCacheMaxWatchOutage is how long a type may fail to list and
// watch before /readyz fails. Longer than a kube-apiserver restart (about
// 3 s from kill to ready on the harness, tens of seconds for a static pod
// on a loaded control-plane node) plus the reflectors' catch-up (two capped
// waits of ReflectorBackoff, about 6 s; docs/operations.md, "Freshness",
// has the measured catch-up), so that a restart, which every replica sees at
// once, never takes the whole fleet out of its Service; short enough that
// a replica cut off from kube-apiserver alone (its network, its
// credentials) stops taking new connections within a minute while its
// peers serve fresh data. Connections already open stay: readiness only
// steers new ones.
const DefaultCacheMaxWatchOutage = 60 * time.Second

// NewOptions returns the defaults of `nodeproxy serve`.
func NewOptions() *Options {
	o := &Options{
		SecureServing:       genericoptions.NewSecureServingOptions().WithLoopback(),
		Authentication:      genericoptions.NewDelegatingAuthenticationOptions(),
		Authorization:       genericoptions.NewDelegatingAuthorizationOptions(),
		Logs:                logsapi.NewLoggingConfiguration(),
		ConnectTimeout:      10 * time.Second,
		Cache:               cache.Options{LogSize: cache.DefaultLogSize, EncodedEntries: cache.DefaultEncodedEntries},
		CacheMaxWatchOutage: DefaultCacheMaxWatchOutage,
		Watch:               watchmux.DefaultOptions(),
		Watcher:             bulkwatch.DefaultOptions(),
		// A revoked credential stops reading within a minute and the
		// token cache's 10 s, where kube-apiserver stops it within its
		// own 10 s cache for new requests and ends its watches within
		// 30 to 60 minutes.
		ReauthenticateInterval: time.Minute,
		// kube-apiserver's watch cache bookmarks a watch about every
		// minute; half a minute more allows for its jitter and a busy
		// replica, and bounds how stale a cut-off watch can be served.
		NodeViewHeardWithin: 90 * time.Second,
		// A direct connection's caller is authenticated again every
		// minute, and its channels authorized again on RBAC's changes:
		// its age bounds only what neither sees (an authorization
		// webhook's change of mind), and every reconnection costs
		// kube-apiserver a TokenReview and a SubjectAccessReview per
		// channel (docs/operations.md, "Re-authorization"). Through the
		// aggregator the age is the only re-check of the caller: an
		// hour, the longest kube-apiserver keeps one of its own watches.
		MaxConnectionAge:           6 * time.Hour,
		AggregatedMaxConnectionAge: time.Hour,
		BulkGet:                    bulkget.DefaultLimits(),
		Refresh:                    authorizer.DefaultRefreshOptions(),
	}
	o.SecureServing.BindPort = DefaultSecurePort
	// No default directory: without --cert-dir or --tls-cert-file the
	// self-signed serving certificate lives in memory, so the server runs on
	// a read-only root filesystem.
	o.SecureServing.ServerCert.CertDirectory = ""
	return o
}

// Flags returns the flags of `nodeproxy serve` in named sections, printed
// section by section in --help.
func (o *Options) Flags() cliflag.NamedFlagSets {
	var fss cliflag.NamedFlagSets
	o.SecureServing.AddFlags(fss.FlagSet("secure serving"))
	o.Authentication.AddFlags(fss.FlagSet("authentication"))
	o.Authorization.AddFlags(fss.FlagSet("authorization"))

	fs := fss.FlagSet("kubernetes")
	fs.StringVar(&o.Kubeconfig, "kubeconfig", o.Kubeconfig,
		"kubeconfig file for the watches that feed nodeproxy's cache, and the default of "+
			"--authentication-kubeconfig and --authorization-kubeconfig. Empty: the in-cluster configuration.")
	fs.DurationVar(&o.ConnectTimeout, "kube-api-connect-timeout", o.ConnectTimeout,
		"How long to wait at start for kube-apiserver to answer before giving up with an error.")

	fs = fss.FlagSet("cache")
	fs.IntVar(&o.Cache.LogSize, "cache-log-size", o.Cache.LogSize,
		"Changes kept per resource type. A watch or exact-version list from a resourceVersion older than "+
			"the log reaches gets 410 Expired and must relist.")
	fs.IntVar(&o.Cache.EncodedEntries, "cache-encoded-entries", o.Cache.EncodedEntries,
		"Encoded object versions kept so that an object many nodes read is serialized once.")
	fs.BoolVar(&o.Cache.RestartLogOnRelist, "cache-relist-expires-watches", o.Cache.RestartLogOnRelist,
		"When a type must be listed again (kube-apiserver restarted, or compacted past the hub's watch), end every "+
			"watch channel of the type with 410 Expired, as kube-apiserver's watch contract would, instead of carrying "+
			"channels on with the difference, which collapses the states in between (docs/api.md). Every client then "+
			"relists at once: only for clients that must see every version.")
	fs.DurationVar(&o.CacheMaxWatchOutage, "cache-max-watch-outage", o.CacheMaxWatchOutage,
		"How long a resource type may be unable to list and watch kube-apiserver before /readyz fails (check cache-watch), "+
			"so that traffic goes to replicas that can. 0: never.")

	fs = fss.FlagSet("node authorizer")
	fs.DurationVar(&o.Refresh.Timeout, "node-refresh-timeout", o.Refresh.Timeout,
		"Before refusing a node an object one of its pods could reference, nodeproxy lists that node's pods from kube-apiserver "+
			"(metadata only) and waits for its graph to have them, then decides again, so that a replica whose watch lags "+
			"never refuses what kube-apiserver has just shown the node. This bounds that wait; past it the refusal stands. "+
			"0: refuse at once, as the in-tree Node authorizer does.")
	fs.DurationVar(&o.Refresh.MinInterval, "node-refresh-min-interval", o.Refresh.MinInterval,
		"Least time between two lists of the same node's pods, so that a node spamming forbidden reads costs kube-apiserver "+
			"at most one small list per interval.")
	fs.IntVar(&o.Refresh.MaxConcurrent, "node-refresh-max-concurrent", o.Refresh.MaxConcurrent,
		"Lists of nodes' pods in flight at once across nodes; a refusal finding none free within --node-refresh-timeout stands.")

	fs = fss.FlagSet("bulk get")
	fs.Int64Var(&o.BulkGet.MaxAnswerBytes, "bulk-get-max-answer-bytes", o.BulkGet.MaxAnswerBytes,
		"Largest answer, in bytes of JSON, one bulk get may have; a request whose answer would be larger is refused with 413 "+
			"before anything is written. Answers are written from the cache's encoded objects, so this bounds the time and "+
			"bandwidth an answer takes, not memory.")
	fs.IntVar(&o.BulkGet.MaxInFlightPerUser, "bulk-get-max-in-flight-per-user", o.BulkGet.MaxInFlightPerUser,
		"Bulk gets one caller (one node) may have in flight; beyond it a request is refused with 429 and Retry-After, "+
			"so that one caller cannot take the hub from the others.")

	fs.BoolVar(&o.UncachedTypes, "bulk-uncached-types", o.UncachedTypes,
		"Answer bulk operations on resource types nodeproxy does not cache (any type kube-apiserver serves: other built-in "+
			"types, CRDs, aggregated APIs) by listing them from kube-apiserver as the caller, through impersonation. Needs the "+
			"impersonation grant of manifests/components/uncached-types (docs/operations.md). Off: such operations get 422.")

	fs = fss.FlagSet("bulk watch")
	fs.IntVar(&o.Watch.MaxChannels, "watch-max-channels", o.Watch.MaxChannels,
		"Channels one connection may hold open; beyond it a watch request is refused with 429.")
	fs.IntVar(&o.Watch.MaxPending, "watch-max-pending", o.Watch.MaxPending,
		"Watch requests one connection may have being authorized and started at once; beyond it a request is refused with 429.")
	fs.IntVar(&o.Watch.ChannelQueue, "watch-channel-queue", o.Watch.ChannelQueue,
		"Events one channel may have waiting to be written (about 80 bytes each; objects are shared). "+
			"A channel past it is closed with ERROR 410 and its client resubscribes.")
	fs.Int64Var(&o.Watch.ReadLimit, "watch-read-limit", o.Watch.ReadLimit,
		"Largest message, in bytes, a client may send; a larger one closes the connection (1009).")
	fs.DurationVar(&o.Watch.WriteTimeout, "watch-write-timeout", o.Watch.WriteTimeout,
		"A write to a client that takes longer ends its connection.")
	fs.DurationVar(&o.Watch.PingInterval, "watch-ping-interval", o.Watch.PingInterval,
		"How often the server pings each connection; a client silent for two intervals is disconnected.")
	fs.DurationVar(&o.Watcher.BookmarkInterval, "watch-bookmark-interval", o.Watcher.BookmarkInterval,
		"How often channels that asked for bookmarks (allowWatchBookmarks) get one, and node views whose position moved without an event.")
	fs.DurationVar(&o.NodeViewHeardWithin, "node-view-heard-within", o.NodeViewHeardWithin,
		"A node view's progress request (a node's consistent read of its copy) is answered at the cache's version of each type whose watch of kube-apiserver works and "+
			"heard from it (an event, a bookmark: about every minute) within this; any other type is first shown as fresh as kube-apiserver by asking it "+
			"(its resourceVersion, a probe), and a type that cannot be shown so in 4 s leaves the request unanswered, the node then reading elsewhere. "+
			"0 asks kube-apiserver at every request, which costs it a question and a probe a type each time (docs/operations.md, \"Freshness\"). "+
			"The same bound says which types' cache stands in for kube-apiserver when a bound ServiceAccount token on an open connection is authenticated again locally; 0 reviews every such token at every check.")
	fs.StringSliceVar(&o.NodeViewVersions, "node-view-versions", o.NodeViewVersions,
		"Versions of the node view this replica serves (of v1alpha1, v1alpha2); empty: every one. A node endpoint asks for the "+
			"newest and, refused, opens v1alpha1 until its connection comes up again. While replicas of two releases serve side by side, "+
			"pin the new ones to the versions the old ones serve: an endpoint moving between them would otherwise replace its copy "+
			"of the view afresh at each change of version (docs/operations.md, \"Replicas and rollouts\").")
	fs.DurationVar(&o.Watcher.ReauthorizeInterval, "watch-reauthorize-interval", o.Watcher.ReauthorizeInterval,
		"How often, jittered down by up to a quarter, every open channel kube-apiserver decides (of users other than nodes, and of nodes on types the graph does not decide, such as endpointslices) "+
			"is authorized again whatever changed; a channel no longer allowed ends with ERROR 403. 0 (the default): only when an RBAC change names the channel's user "+
			"(the hub watches RBAC), and when the connection reaches --watch-max-connection-age, as kube-apiserver authorizes its own watches only when they start. "+
			"Set it (1m was the default before) where an authorization webhook or ABAC can take access away: their changes are not seen. "+
			"Each round costs a SubjectAccessReview per distinct caller and selection (docs/operations.md, \"Re-authorization\").")
	fs.DurationVar(&o.ReauthenticateInterval, "watch-reauthenticate-interval", o.ReauthenticateInterval,
		"How often, at most (jittered down by up to a quarter), the caller of each open bulk watch connection (channels and node views) is authenticated again, "+
			"as kube-apiserver would authenticate it now (a token through the delegated TokenReview and its cache; a ServiceAccount token bound to a Pod, Secret or Node, between reviews, locally from its claims and the cache, "+
			"with one TokenReview of a token of each class an interval; a client certificate against the client CA and its NotAfter); "+
			"it is also checked when its certificate or token expires. A credential that no longer authenticates ends every channel with ERROR 401 and closes the connection.")
	fs.DurationVar(&o.MaxConnectionAge, "watch-max-connection-age", o.MaxConnectionAge,
		"How long a bulk watch connection made directly to the hub lives at most (jittered down by up to a quarter): then every channel ends with ERROR 503 and the client resumes them on a new connection, "+
			"authenticated and authorized afresh. Its caller is authenticated again every --watch-reauthenticate-interval and its channels authorized again on RBAC's changes; "+
			"the age bounds what neither sees (an authorization webhook's or ABAC's change). Each reconnection costs a TokenReview (for a token) and a SubjectAccessReview per channel kube-apiserver decides.")
	fs.DurationVar(&o.AggregatedMaxConnectionAge, "watch-max-aggregated-connection-age", o.AggregatedMaxConnectionAge,
		"How long a bulk watch connection through kube-apiserver's aggregator lives at most (jittered likewise). The hub knows its caller only by the front proxy's certificate and headers, "+
			"so this age is when the caller's own credential is checked again (by kube-apiserver, as the client reconnects): the default is the longest kube-apiserver keeps a watch of its own.")

	o.Shard.AddFlags(fss.FlagSet("sharding"))

	fs = fss.FlagSet("lifecycle")
	fs.DurationVar(&o.ShutdownDelay, "shutdown-delay-duration", o.ShutdownDelay,
		"After SIGTERM, keep serving this long with /readyz failing before closing the listener, "+
			"so that endpoints are updated before connections are refused.")

	logsapi.AddFlags(o.Logs, fss.FlagSet("logging"))
	return fss
}

// maxTokenCacheTTL is kube-apiserver's own cache of token authentication
// results (--token-webhook-cache-ttl's default, and its service account
// token cache's): the longest nodeproxy may trust a token's last review.
const maxTokenCacheTTL = 10 * time.Second

// rbacRecheckAfter are the delays, from the hub seeing an RBAC change, of
// the two rounds that authorize again the open channels of the users it
// names. The first comes once the delegated authorizer's cached "allowed"
// answers from before the change have expired (allowTTL,
// --authorization-webhook-cache-authorized-ttl), plus 2 s for
// kube-apiserver's own RBAC informers, fed like the hub's from its watch
// cache, to have heard of it. The second, a minute later, catches a
// kube-apiserver whose RBAC heard up to a minute after the hub (another
// replica's watch cache behind, a watch being re-established), and an
// "allowed" the hub's authorizer cached from it meanwhile.
func rbacRecheckAfter(allowTTL time.Duration) []time.Duration {
	return []time.Duration{allowTTL + 2*time.Second, allowTTL + time.Minute}
}

// Complete fills the defaults that depend on other options.
func (o *Options) Complete() error {
	if o.Authentication.RemoteKubeConfigFile == "" {
		o.Authentication.RemoteKubeConfigFile = o.Kubeconfig
	}
	if o.Authorization.RemoteKubeConfigFile == "" {
		o.Authorization.RemoteKubeConfigFile = o.Kubeconfig
	}
	if o.Watcher.RBACRecheckAfter == nil {
		o.Watcher.RBACRecheckAfter = rbacRecheckAfter(o.Authorization.AllowCacheTTL)
	}
	return o.Shard.complete(os.Getenv, os.Hostname, os.ReadFile)
}

// Validate returns every problem with the options at once.
func (o *Options) Validate() error {
	var errs []error
	errs = append(errs, o.SecureServing.Validate()...)
	errs = append(errs, o.Authentication.Validate()...)
	errs = append(errs, o.Authorization.Validate()...)
	if o.SecureServing.BindPort == 0 {
		// The library allows 0 to turn serving off; nodeproxy is nothing
		// without it.
		errs = append(errs, errors.New("--secure-port must not be 0: nodeproxy serves only over TLS"))
	}
	ck := o.SecureServing.ServerCert.CertKey
	if (ck.CertFile == "") != (ck.KeyFile == "") {
		errs = append(errs, errors.New("--tls-cert-file and --tls-private-key-file must be given together"))
	}
	rh := o.Authentication.RequestHeader
	if rh.ClientCAFile == "" && len(rh.AllowedNames) > 0 && o.Authentication.SkipInClusterLookup {
		errs = append(errs, errors.New("--requestheader-allowed-names needs --requestheader-client-ca-file when --authentication-skip-lookup is set: no front proxy could ever be trusted"))
	}
	if o.Authentication.CacheTTL > maxTokenCacheTTL {
		errs = append(errs, fmt.Errorf("--authentication-token-webhook-cache-ttl must be at most %s (kube-apiserver's own token cache): "+
			"a token revoked there would read through nodeproxy for as long; got %s", maxTokenCacheTTL, o.Authentication.CacheTTL))
	}
	if o.ConnectTimeout <= 0 {
		errs = append(errs, fmt.Errorf("--kube-api-connect-timeout must be positive, got %s", o.ConnectTimeout))
	}
	if o.ShutdownDelay < 0 {
		errs = append(errs, fmt.Errorf("--shutdown-delay-duration must not be negative, got %s", o.ShutdownDelay))
	}
	if o.Cache.LogSize <= 0 {
		errs = append(errs, fmt.Errorf("--cache-log-size must be positive, got %d", o.Cache.LogSize))
	}
	if o.CacheMaxWatchOutage < 0 {
		errs = append(errs, fmt.Errorf("--cache-max-watch-outage must not be negative, got %s", o.CacheMaxWatchOutage))
	}
	if o.Refresh.Timeout < 0 || o.Refresh.MinInterval < 0 {
		errs = append(errs, fmt.Errorf("--node-refresh-timeout and --node-refresh-min-interval must not be negative, got %s and %s",
			o.Refresh.Timeout, o.Refresh.MinInterval))
	}
	if o.Refresh.MaxConcurrent <= 0 {
		errs = append(errs, fmt.Errorf("--node-refresh-max-concurrent must be positive, got %d", o.Refresh.MaxConcurrent))
	}
	if o.Cache.EncodedEntries <= 0 {
		errs = append(errs, fmt.Errorf("--cache-encoded-entries must be positive, got %d", o.Cache.EncodedEntries))
	}
	for _, f := range []struct {
		flag  string
		value int64
	}{
		{"--bulk-get-max-answer-bytes", o.BulkGet.MaxAnswerBytes},
		{"--bulk-get-max-in-flight-per-user", int64(o.BulkGet.MaxInFlightPerUser)},
		{"--watch-max-channels", int64(o.Watch.MaxChannels)},
		{"--watch-max-pending", int64(o.Watch.MaxPending)},
		{"--watch-channel-queue", int64(o.Watch.ChannelQueue)},
		{"--watch-read-limit", o.Watch.ReadLimit},
		{"--watch-write-timeout", int64(o.Watch.WriteTimeout)},
		{"--watch-ping-interval", int64(o.Watch.PingInterval)},
		{"--watch-bookmark-interval", int64(o.Watcher.BookmarkInterval)},
		{"--watch-reauthenticate-interval", int64(o.ReauthenticateInterval)},
		{"--watch-max-connection-age", int64(o.MaxConnectionAge)},
		{"--watch-max-aggregated-connection-age", int64(o.AggregatedMaxConnectionAge)},
	} {
		if f.value <= 0 {
			errs = append(errs, fmt.Errorf("%s must be positive", f.flag))
		}
	}
	if o.Watcher.ReauthorizeInterval < 0 {
		errs = append(errs, fmt.Errorf("--watch-reauthorize-interval: %s is negative (0 re-checks only on RBAC changes)", o.Watcher.ReauthorizeInterval))
	}
	if o.NodeViewHeardWithin < 0 {
		errs = append(errs, fmt.Errorf("--node-view-heard-within: %s is negative (0 asks kube-apiserver at every progress request)", o.NodeViewHeardWithin))
	}
	for _, v := range o.NodeViewVersions {
		if _, ok := v1alpha1.NodeViewTypesOf(v); !ok {
			errs = append(errs, fmt.Errorf("--node-view-versions: %q is not a version of the node view", v))
		}
	}
	errs = append(errs, o.Shard.validate()...)
	if err := logsapi.Validate(o.Logs, utilfeature.DefaultFeatureGate, nil); len(err) > 0 {
		errs = append(errs, err.ToAggregate())
	}
	return errors.Join(errs...)
}

// selfSignedCert makes an in-memory serving certificate when none was
// given, valid for localhost, 127.0.0.1 and the in-cluster Service names.
func (o *Options) selfSignedCert() error {
	return o.SecureServing.MaybeDefaultWithSelfSignedCerts("localhost",
		[]string{"nodeproxy", "nodeproxy.nodeproxy", "nodeproxy.nodeproxy.svc"},
		[]net.IP{netutils.ParseIPSloppy("127.0.0.1")})
}
