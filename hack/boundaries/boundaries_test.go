package boundaries

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// buildTags are the tags the Makefile and the image build with
// (BUILDTAGS): the rules hold for the binaries as shipped.
const buildTags = "grpcnotrace"

// maxNodeBinaryBytes bounds nodeproxy-node as the image carries it
// (linux/amd64, static, stripped). It runs on every node, where most of
// its mapped pages are resident: the bound leaves room for the endpoint
// to grow (about 9%) and fails if it links the clientset, the hub's
// server stack or k8s.io/kubernetes (the Pod API's checks, which
// nodeproxy-node-podadmit runs) again (docs/benchmarks.md, "Binary
// sizes", "The node endpoint's footprint").
const maxNodeBinaryBytes = 24_500_000

// moduleRoot is the directory of go.mod, two levels up from here.
func moduleRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("no go.mod at %s: %v", root, err)
	}
	return root
}

// listDeps runs go list over the module: each package and everything it
// links.
func listDeps(t *testing.T) map[string][]string {
	t.Helper()
	cmd := exec.Command("go", "list", "-tags", buildTags, "-f", "{{.ImportPath}} {{join .Deps \" \"}}", "./...")
	cmd.Dir = moduleRoot(t)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	deps := map[string][]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 0 {
			deps[fields[0]] = fields[1:]
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return deps
}

func TestModuleKeepsItsBoundaries(t *testing.T) {
	violations, err := Check(Rules, listDeps(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range violations {
		t.Error(v)
	}
}

// TestCheckReportsForbiddenLinks feeds Check made-up dependencies, one
// broken rule at a time, so that a rule that can never fire is caught.
func TestCheckReportsForbiddenLinks(t *testing.T) {
	m := func(p string) string { return Module + "/" + p }
	clean := map[string][]string{
		m("cache"):                       {"sync", m("shard")},
		m("shard"):                       {"k8s.io/api/discovery/v1"},
		m("graph"):                       {"sync"},
		m("authorizer"):                  {m("graph")},
		m("watchmux"):                    {m("apis/bulk/v1alpha1")},
		m("apis/bulk/v1alpha1"):          nil,
		m("bulk"):                        {m("cache"), m("graph"), m("authorizer")},
		m("bulk/get"):                    {m("bulk"), m("cache")},
		m("passthrough"):                 nil,
		m("nodeview"):                    {m("bulk"), m("cache"), m("graph"), m("watchmux")},
		m("hub"):                         {m("bulk"), m("bulk/get"), m("watchmux"), m("cache"), m("nodeview"), m("satoken")},
		m("endpoint"):                    {m("watchmux"), m("apis/bulk/v1alpha1"), m("satoken")},
		m("satoken"):                     {"encoding/json"},
		m("podapi"):                      nil,
		m("nodeinstall"):                 nil,
		m("nodecopy/disk"):               nil,
		m("internal/nodecmd"):            {m("endpoint"), m("podapi"), m("nodeinstall"), m("internal/cli")},
		m("internal/cli"):                nil,
		m("cmd/nodeproxy"):               {m("hub"), m("internal/nodecmd"), "net/http"},
		m("cmd/nodeproxy-node"):          {m("internal/nodecmd"), m("endpoint")},
		m("podapi/admission"):            {"k8s.io/kubernetes/pkg/apis/core/validation"},
		m("cmd/nodeproxy-node-podadmit"): {m("podapi/admission"), m("internal/cli"), "k8s.io/kubernetes/pkg/apis/core/validation"},
		m("test/controlplane"):           {"testing"},
		m("internal/kubeproto"):          {"google.golang.org/protobuf/encoding/protowire"},
	}
	if v, err := Check(Rules, clean); err != nil || len(v) != 0 {
		t.Fatalf("a clean module: violations %v, error %v", v, err)
	}
	for _, tc := range []struct {
		name     string
		pkg, dep string
	}{
		{"the cache imports a consumer", "cache", m("graph")},
		{"the shard table imports the cache", "shard", m("cache")},
		{"the graph imports the harness", "graph", m("test/controlplane")},
		{"the authorizer imports the hub", "authorizer", m("hub")},
		{"watchmux imports the cache", "watchmux", m("cache")},
		{"the protobuf reader imports apimachinery", "internal/kubeproto", "k8s.io/apimachinery/pkg/runtime"},
		{"the protobuf reader imports the cache", "internal/kubeproto", m("cache")},
		{"bulk imports the hub", "bulk/get", m("hub")},
		{"the node view imports the bulk watch", "nodeview", m("bulk/watch")},
		{"the node view imports the hub", "nodeview", m("hub")},
		{"the graph imports the node view", "graph", m("nodeview")},
		{"the node endpoint imports the node view", "endpoint", m("nodeview")},
		{"the hub imports the node endpoint", "hub", m("endpoint")},
		{"the token claims import the hub", "satoken", m("hub")},
		{"the hub imports the harness", "hub", m("test/workload")},
		{"the node endpoint imports the cache", "endpoint", m("cache")},
		{"the node endpoint imports the graph", "podapi", m("graph")},
		{"the node view's copy imports the cache", "nodecopy/disk", m("cache")},
		{"the node command imports the authorizer", "internal/nodecmd", m("authorizer")},
		{"the node endpoint imports the hub", "cmd/nodeproxy-node", m("hub")},
		{"a product binary links the harness", "cmd/nodeproxy", m("test/controlplane")},
		{"a product binary links plotting", "cmd/nodeproxy", "gonum.org/v1/plot/vg"},
		{"a product binary links the image builder", "cmd/nodeproxy", m("hack/image/oci")},
		{"a product binary links go-containerregistry", "cmd/nodeproxy-node", "github.com/google/go-containerregistry/pkg/v1"},
		{"a product binary links package testing", "cmd/nodeproxy-node", "testing"},
		{"the node endpoint links the clientset", "cmd/nodeproxy-node", "k8s.io/client-go/kubernetes"},
		{"the node endpoint links k8s.io/kubernetes", "cmd/nodeproxy-node", "k8s.io/kubernetes/pkg/features"},
		{"the Pod API links kube-apiserver's validation", "podapi", "k8s.io/kubernetes/pkg/apis/core/validation"},
		{"the Pod API's helper links plotting", "cmd/nodeproxy-node-podadmit", "gonum.org/v1/plot/vg"},
		{"the node endpoint links the clientset's scheme", "cmd/nodeproxy-node", "k8s.io/client-go/kubernetes/scheme"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			deps := map[string][]string{}
			for k, v := range clean {
				deps[k] = v
			}
			deps[m(tc.pkg)] = append(append([]string(nil), clean[m(tc.pkg)]...), tc.dep)
			v, err := Check(Rules, deps)
			if err != nil {
				t.Fatal(err)
			}
			if len(v) != 1 || v[0].Package != m(tc.pkg) || v[0].Links != tc.dep {
				t.Fatalf("want one violation, %s links %s; got %v", tc.pkg, tc.dep, v)
			}
		})
	}
	t.Run("a rule that matches no package", func(t *testing.T) {
		deps := map[string][]string{}
		for k, v := range clean {
			if k != m("watchmux") {
				deps[k] = v
			}
		}
		if _, err := Check(Rules, deps); err == nil {
			t.Fatal("a rule about watchmux checked a module without watchmux: want an error")
		}
	})
}

// TestNodeBinaryStaysSmall builds nodeproxy-node as the image does and
// holds it to maxNodeBinaryBytes.
func TestNodeBinaryStaysSmall(t *testing.T) {
	out := filepath.Join(t.TempDir(), "nodeproxy-node")
	cmd := exec.Command("go", "build", "-trimpath", "-tags", buildTags, "-ldflags", "-s -w -buildid=", "-o", out, "./cmd/nodeproxy-node")
	cmd.Dir = moduleRoot(t)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
	if output, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/nodeproxy-node: %v\n%s", err, output)
	}
	fi, err := os.Stat(out)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("nodeproxy-node (linux/amd64, stripped): %d bytes, bound %d", fi.Size(), maxNodeBinaryBytes)
	if fi.Size() > maxNodeBinaryBytes {
		t.Errorf("nodeproxy-node is %d bytes, more than the %d allowed: what did it start linking? (go version -m; go list -deps ./cmd/nodeproxy-node)",
			fi.Size(), maxNodeBinaryBytes)
	}
}
