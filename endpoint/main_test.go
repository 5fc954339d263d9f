package endpoint_test

import (
	"os"
	"testing"

	"github.com/nodeproxy/nodeproxy/internal/controlplane"
	"github.com/nodeproxy/nodeproxy/internal/testserver"
)

// cp is this package's control plane: etcd and kube-apiserver with the
// Node and RBAC authorizers, as a kubeadm cluster runs them.
var cp *controlplane.ControlPlane

func TestMain(m *testing.M) {
	os.Exit(testserver.RunTests(m, controlplane.Options{}, &cp))
}
