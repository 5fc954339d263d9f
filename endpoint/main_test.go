package endpoint_test

import (
	"os"
	"testing"
	"time"

	"k8s.io/client-go/transport"

	"github.com/nodeproxy/nodeproxy/test/controlplane"
	"github.com/nodeproxy/nodeproxy/test/testserver"
)

// cp is this package's control plane: etcd and kube-apiserver with the
// Node and RBAC authorizers and the NodeRestriction admission plugin, as
// a kubeadm cluster runs them, so that the kubelets' writes through the
// endpoints are checked as the node's.
var (
	cp  *controlplane.ControlPlane
	bin string // nodeproxy, built from this tree, for hubs run as processes
)

func TestMain(m *testing.M) {
	// client-go checks the kubelet's certificate file for a rotation every
	// five minutes; the rotation test cannot wait that long.
	transport.CertCallbackRefreshDuration = time.Second
	os.Exit(testserver.RunTestsWithNodeproxy(m, controlplane.Options{
		ExtraAPIServerArgs: []string{"--enable-admission-plugins=NodeRestriction"},
	}, &cp, &bin))
}
