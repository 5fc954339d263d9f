package charts

import (
	"os"
	"testing"

	"github.com/nodeproxy/nodeproxy/test/controlplane"
	"github.com/nodeproxy/nodeproxy/test/testserver"
)

var cp *controlplane.ControlPlane

func TestMain(m *testing.M) {
	os.Exit(testserver.RunTests(m, controlplane.Options{}, &cp))
}
