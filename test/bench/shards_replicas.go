package bench

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/nodeproxy/nodeproxy/shard"
	"github.com/nodeproxy/nodeproxy/test/controlplane"
	"github.com/nodeproxy/nodeproxy/test/forwarder"
)

// shardsServiceNamespace is the hub's namespace, where its headless
// Service is.
const shardsServiceNamespace = "nodeproxy"

// shardReplicas are the sharded replicas of a run, behind a forwarder
// that plays their Service.
type shardReplicas struct {
	env  *Env
	kube kubernetes.Interface
	fwd  *forwarder.Forwarder
	cp   *controlplane.ControlPlane
	// live are the replicas by ordinal; a killed one stays, stopped.
	live  []*controlplane.Nodeproxy
	ports []int
}

// startShards creates the headless Service and one ready EndpointSlice a
// replica (the endpoints controller's part, played by the bench: every
// replica knows its peers from its first list, as in a StatefulSet that
// has been up a while), then starts the replicas together and puts them
// behind a forwarder.
func startShards(ctx context.Context, env *Env, local *Local, kube kubernetes.Interface, load ShardsLoad) (*shardReplicas, error) {
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: shardsService, Namespace: shardsServiceNamespace},
		Spec:       corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Ports: []corev1.ServicePort{{Name: "https", Port: 443}}},
	}
	if _, err := kube.CoreV1().Services(shardsServiceNamespace).Create(ctx, svc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("create the headless Service: %w", err)
	}
	ports, err := controlplane.FreePorts(load.Replicas)
	if err != nil {
		return nil, err
	}
	for i, port := range ports {
		if err := applyEndpointSlice(ctx, kube, shardEndpointSlice(shardMember(i), port, true)); err != nil {
			return nil, err
		}
	}
	fwd, err := forwarder.Start()
	if err != nil {
		return nil, err
	}
	s := &shardReplicas{env: env, kube: kube, fwd: fwd, cp: local.ControlPlane, live: make([]*controlplane.Nodeproxy, load.Replicas), ports: ports}
	env.progressf("shards: starting %d sharded replicas", load.Replicas)
	errs := make(chan error, load.Replicas)
	var wg sync.WaitGroup
	for i := range load.Replicas {
		wg.Go(func() {
			np, err := local.Hub.StartReplicaNamed(ctx, ports[i], shardMember(i), []string{shardHost(i)},
				"--shard-service="+shardsService, "--shard-member="+shardMember(i), "--shard-namespace="+shardsServiceNamespace)
			if err != nil {
				errs <- fmt.Errorf("start replica %s: %w", shardMember(i), err)
				return
			}
			s.live[i] = np
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		s.stop()
		return nil, err
	}
	for _, np := range s.live {
		fwd.Add(addrOf(np))
	}
	return s, nil
}

// shardHost is replica i's stable name, where a redirect sends a node.
func shardHost(i int) string {
	return shard.Host(shardMember(i), shardsService, shardsServiceNamespace)
}

// dial reaches the replicas by their stable names, standing in for the
// cluster's DNS (a redirect names the replica it sends a node to, on the
// redirecting replica's port: the bench's replicas each have their own,
// so the name alone decides), and anything else as asked.
func (s *shardReplicas) dial(ctx context.Context, network, address string) (net.Conn, error) {
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		return nil, err
	}
	for i := range s.live {
		if host == shardHost(i) {
			address = "127.0.0.1:" + strconv.Itoa(s.ports[i])
		}
	}
	return (&net.Dialer{}).DialContext(ctx, network, address)
}

// kill ends replica i as a lost node would (SIGKILL), and does what the
// endpoints controller then does: its endpoint not ready, out of the
// Service.
func (s *shardReplicas) kill(ctx context.Context, i int) error {
	np := s.live[i]
	s.fwd.Remove(addrOf(np))
	np.Process.Kill()
	return applyEndpointSlice(ctx, s.kube, shardEndpointSlice(shardMember(i), s.ports[i], false))
}

func (s *shardReplicas) stop() {
	for _, np := range s.live {
		if np != nil {
			np.Process.Kill()
		}
	}
	_ = s.fwd.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i := range s.ports {
		_ = s.kube.DiscoveryV1().EndpointSlices(shardsServiceNamespace).Delete(ctx, shardsService+"-"+shardMember(i), metav1.DeleteOptions{})
	}
}
