package watch_test

import (
	"os"
	"testing"

	"github.com/nodeproxy/nodeproxy/test/controlplane"
	"github.com/nodeproxy/nodeproxy/test/testserver"
)

// The end-to-end tests run kube-apiserver and nodeproxy as bulke2e
// describes, one control plane for this package.

var (
	cp     *controlplane.ControlPlane
	npPort int
)

func TestMain(m *testing.M) { os.Exit(testserver.RunBehindWebhook(m, &cp, &npPort)) }
