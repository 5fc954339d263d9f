package prometheus_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/nodeproxy/nodeproxy/test/controlplane"
	"github.com/nodeproxy/nodeproxy/test/testserver"
)

var (
	cp *controlplane.ControlPlane
	// The hub (nodeproxy) and the node endpoint alone (nodeproxy-node),
	// built from the tree under test.
	hubBin, nodeBin string
	// hubPort is where the hub serves, known before kube-apiserver starts
	// so that its authorization webhook points at it.
	hubPort int
)

// TestMain runs one control plane whose kube-apiserver asks the hub's
// webhook about node identities, as the authorization-webhook overlay
// configures it, so that kube-apiserver's webhook metrics (which an alert
// reads) describe calls to a real hub.
func TestMain(m *testing.M) {
	ports, err := controlplane.FreePorts(1)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	hubPort = ports[0]
	root, err := controlplane.RepoRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(testserver.RunTestsWithCommands(m, controlplane.Options{
		AuthorizationFor: controlplane.WebhookAuthorization(
			filepath.Join(root, filepath.FromSlash(controlplane.AuthorizationConfigManifest)),
			fmt.Sprintf("https://127.0.0.1:%d/authorize", hubPort), testserver.WebhookUser, false),
	}, &cp, map[string]*string{"nodeproxy": &hubBin, "nodeproxy-node": &nodeBin}))
}
