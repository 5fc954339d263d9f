package server

import (
	"context"
	"fmt"

	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/apiserver/pkg/server/healthz"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/nodeproxy/nodeproxy/cache"
)

// Server is a running nodeproxy: the generic API server and the informers
// behind it.
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
	// Ready only once every informer has listed: before that the cache
	// would answer "not found" for objects that exist.
	if err := generic.AddReadyzChecks(healthz.NewInformerSyncHealthz(informers)); err != nil {
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
