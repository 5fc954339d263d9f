package server

import (
	"context"
	"fmt"

	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/apiserver/pkg/server/healthz"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/nodeproxy/nodeproxy/authorizer"
	"github.com/nodeproxy/nodeproxy/cache"
	"github.com/nodeproxy/nodeproxy/graph"
)

// Server is a running nodeproxy: the generic API server, the informers
// behind it, the authorization graph they feed and the webhook that
// answers from it.
type Server struct {
	generic   *genericapiserver.GenericAPIServer
	informers *cache.Informers
}

// New builds the server. It starts nothing.
func (c *Config) New() (*Server, error) {
	client, err := kubernetes.NewForConfig(c.Kube)
	if err != nil {
		return nil, fmt.Errorf("client for informers: %w", err)
	}
	informers, err := cache.NewInformers(client)
	if err != nil {
		return nil, err
	}
	generic, err := c.Generic.Complete(nil).New("nodeproxy", genericapiserver.NewEmptyDelegate())
	if err != nil {
		return nil, fmt.Errorf("generic API server: %w", err)
	}
	g := graph.New()
	graphSynced, err := feedGraph(informers, g)
	if err != nil {
		return nil, err
	}
	graph.RegisterMetrics()
	authorizer.RegisterMetrics()
	generic.Handler.NonGoRestfulMux.Handle(authorizer.WebhookPath, &authorizer.Webhook{Authorizer: authorizer.New(g)})

	// Ready only once every informer has listed and the graph has taken in
	// the lists: before that the cache would answer "not found" for
	// objects that exist, and the authorizer refuse what it should allow.
	if err := generic.AddReadyzChecks(
		healthz.NewInformerSyncHealthz(informers),
		healthz.NamedCheck("graph-sync", graphSynced),
		healthz.NamedCheck("client-ca", clientCAsLoaded(c.Generic.SecureServing.ClientCA, c.ClientCASources)),
	); err != nil {
		return nil, fmt.Errorf("readiness check: %w", err)
	}
	s := &Server{generic: generic, informers: informers}
	if err := generic.AddPostStartHook("nodeproxy-start-informers", s.startInformers); err != nil {
		return nil, fmt.Errorf("informer start hook: %w", err)
	}
	return s, nil
}

func (s *Server) startInformers(ctx genericapiserver.PostStartHookContext) error {
	s.informers.Start(ctx.Done())
	klog.InfoS("Informers started")
	return nil
}

// Run serves until ctx ends, then stops accepting requests, drains the ones
// in flight and returns.
func (s *Server) Run(ctx context.Context) error {
	defer s.informers.Shutdown()
	return s.generic.PrepareRun().RunWithContext(ctx)
}
