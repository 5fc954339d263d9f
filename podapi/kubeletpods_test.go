package podapi

import (
	"context"
	"net"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// lister is a PodResources server that answers List with pods, or err.
type lister struct {
	podresourcesv1.UnimplementedPodResourcesListerServer
	pods []*podresourcesv1.PodResources
	err  error
}

func (l *lister) List(context.Context, *podresourcesv1.ListPodResourcesRequest) (*podresourcesv1.ListPodResourcesResponse, error) {
	return &podresourcesv1.ListPodResourcesResponse{PodResources: l.pods}, l.err
}

// serveLister serves l with grpc-go, as the kubelet does, on a unix
// socket, and returns the socket's path.
func serveLister(t *testing.T, l *lister) string {
	t.Helper()
	socket := filepath.Join(t.TempDir(), "kubelet.sock")
	ln, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	podresourcesv1.RegisterPodResourcesListerServer(srv, l)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	return socket
}

// TestPodResourcesAgainstGRPC: the hand-made List reads what grpc-go's
// server sends, the generated encoding included (containers, devices and
// all, which it skips), and reports its errors.
func TestPodResourcesAgainstGRPC(t *testing.T) {
	ctx := context.Background()
	l := &lister{pods: []*podresourcesv1.PodResources{
		{Name: "etcd-node-a", Namespace: "kube-system", Containers: []*podresourcesv1.ContainerResources{{
			Name: "etcd", CpuIds: []int64{0, 1},
			Devices: []*podresourcesv1.ContainerDevices{{ResourceName: "example.com/gpu", DeviceIds: []string{"gpu0"}}},
			Memory:  []*podresourcesv1.ContainerMemory{{MemoryType: "memory", Size: 1 << 30}},
		}}},
		{Name: "web", Namespace: "default"},
		{Name: "no-namespace"},
	}}
	p, err := newPodResources(serveLister(t, l))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	got, err := p.Admitted(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := sets.New(types.NamespacedName{Namespace: "kube-system", Name: "etcd-node-a"},
		types.NamespacedName{Namespace: "default", Name: "web"}, types.NamespacedName{Name: "no-namespace"})
	if !got.Equal(want) {
		t.Errorf("Admitted = %v, want %v", got.UnsortedList(), want.UnsortedList())
	}

	l.pods = nil
	if got, err = p.Admitted(ctx); err != nil || got.Len() != 0 {
		t.Errorf("no pods: Admitted = %v, %v; want none, no error", got.UnsortedList(), err)
	}

	l.err = status.Error(codes.Unavailable, "the pod manager is 100% busy")
	if _, err = p.Admitted(ctx); err == nil || !strings.Contains(err.Error(), `gRPC status "14": the pod manager is 100% busy`) {
		t.Errorf("an error status: %v, want status 14 and its message", err)
	}
}

func TestPodResourcesNoKubelet(t *testing.T) {
	p, err := newPodResources(filepath.Join(t.TempDir(), "kubelet.sock"))
	if err != nil {
		t.Fatalf("a socket not there yet is an error of List, not of the start: %v", err)
	}
	defer p.Close()
	if _, err := p.Admitted(context.Background()); err == nil {
		t.Error("Admitted without a kubelet: no error")
	}
}

func TestParseListResponseRefusesTruncation(t *testing.T) {
	// pod_resources, length 10, but 3 bytes follow.
	if _, err := parseListResponse([]byte{0x0a, 10, 0x0a, 1, 'a'}); err == nil {
		t.Error("a truncated response parsed")
	}
}
