package podapi

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// podResources asks the kubelet which pods it has admitted, through its
// PodResources API: a gRPC service on a root-only unix socket in the
// kubelet's root directory (<root-dir>/pod-resources/kubelet.sock),
// served from the kubelet's own pod manager, with no API server and no
// authentication beyond the socket's mode. Its List answers the active
// pods the kubelet took from all its sources, by namespace and name, as
// soon as it took them: before any sandbox, volume or image, and also on
// a node whose network plugin is not ready yet (when the kubelet does not
// start pods that are not on the host network). The alternatives cost
// more or see less: the kubelet's /pods needs its authorization webhook,
// which needs the API server; <root-dir>/pods/<uid> and the runtime's
// sandboxes appear only once the pod starts, after the network check.
type podResources struct {
	conn   *grpc.ClientConn
	client podresourcesv1.PodResourcesListerClient
}

// listTimeout bounds one List; the kubelet answers from memory.
const listTimeout = 5 * time.Second

func newPodResources(socket string) (*podResources, error) {
	// grpc.NewClient dials lazily: a kubelet that is not up yet is an
	// error of List, not of the endpoint's start.
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("kubelet PodResources socket %s: %w", socket, err)
	}
	return &podResources{conn: conn, client: podresourcesv1.NewPodResourcesListerClient(conn)}, nil
}

// Admitted returns the namespace/name of every pod the kubelet has.
func (p *podResources) Admitted(ctx context.Context) (sets.Set[types.NamespacedName], error) {
	ctx, cancel := context.WithTimeout(ctx, listTimeout)
	defer cancel()
	resp, err := p.client.List(ctx, &podresourcesv1.ListPodResourcesRequest{})
	if err != nil {
		return nil, fmt.Errorf("list the kubelet's pods (PodResources): %w", err)
	}
	out := sets.New[types.NamespacedName]()
	for _, r := range resp.GetPodResources() {
		out.Insert(types.NamespacedName{Namespace: r.GetNamespace(), Name: r.GetName()})
	}
	return out, nil
}

func (p *podResources) Close() error { return p.conn.Close() }
