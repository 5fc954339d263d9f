package server

import (
	"errors"
	"fmt"
	"net/http"

	toolscache "k8s.io/client-go/tools/cache"

	"github.com/nodeproxy/nodeproxy/cache"
	"github.com/nodeproxy/nodeproxy/graph"
)

// feedGraph registers g's handlers on the informers it learns from and
// returns a readiness check that passes once each handler has seen its
// informer's initial list. Informer sync alone is not enough: a handler
// registered on a synced informer still has the list to process.
func feedGraph(informers *cache.Informers, g *graph.Graph) (func(*http.Request) error, error) {
	handlers := map[string]toolscache.ResourceEventHandler{
		"pods":              g.PodHandler(),
		"persistentvolumes": g.PVHandler(),
		"volumeattachments": g.VolumeAttachmentHandler(),
		"resourceslices":    g.ResourceSliceHandler(),
	}
	var regs []toolscache.ResourceEventHandlerRegistration
	for _, gvr := range cache.Watched() {
		h, ok := handlers[gvr.Resource]
		if !ok {
			continue
		}
		reg, err := informers.Informer(gvr).AddEventHandler(h)
		if err != nil {
			return nil, fmt.Errorf("graph handler for %s: %w", gvr.Resource, err)
		}
		regs = append(regs, reg)
	}
	if len(regs) != len(handlers) {
		return nil, errors.New("an informer the graph needs is missing")
	}
	return func(*http.Request) error {
		for _, r := range regs {
			if !r.HasSynced() {
				return errors.New("the authorization graph has not processed every object yet")
			}
		}
		return nil
	}, nil
}
