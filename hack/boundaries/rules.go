package boundaries

import (
	"fmt"
	"sort"
	"strings"
)

// Module is nodeproxy's module path. Patterns without a dot in their
// first element are relative to it.
const Module = "github.com/nodeproxy/nodeproxy"

// A Rule constrains what the packages matching From link.
type Rule struct {
	// Name says what the rule keeps, as a test failure prints it.
	Name string
	// Why is the reason, printed with a violation.
	Why string
	// From selects the packages the rule is about. Each pattern must
	// match at least one package, so that a rename cannot switch a rule
	// off unnoticed.
	From []string
	// Within, if not nil, lists all that the packages may link of this
	// module besides themselves (empty: nothing); anything else of the
	// module is a violation.
	Within []string
	// Never lists packages, of this module or not, that must not be
	// linked.
	Never []string
}

// Core are the packages the two components share.
var Core = []string{"cache", "graph", "authorizer", "watchmux"}

// Rules are nodeproxy's boundaries. A pattern is a package path, relative
// to Module unless its first element has a dot (an external module) or it
// is a standard library package; "x/..." matches x and every package
// below it.
var Rules = []Rule{
	{
		Name:   "the core's arrows point one way",
		Why:    "data flows informers -> cache -> graph -> authorizer -> bulk: the cache and the graph hold state and know no consumer",
		From:   []string{"cache", "graph"},
		Within: []string{"internal/kubeproto", "shard"},
	},
	{
		Name:   "the shard table is a leaf",
		Why:    "which replica serves which node is a pure function of the replicas' names: the cache, the authorizer and the hub all read it, and it reads none of them",
		From:   []string{"shard"},
		Within: []string{},
	},
	{
		Name: "kube-apiserver's protobuf is read by a leaf",
		Why: "the cache, watchmux and the node endpoint's copy read the envelope and fields with internal/kubeproto: " +
			"whatever it links, the hub and every node carry, so it links the standard library and protowire alone",
		From:   []string{"internal/kubeproto"},
		Within: []string{},
		Never: []string{"k8s.io/...", "sigs.k8s.io/...", "github.com/...", "golang.org/x/...", "gopkg.in/...",
			"google.golang.org/protobuf/proto", "google.golang.org/protobuf/reflect/...", "google.golang.org/protobuf/types/...",
			"google.golang.org/protobuf/encoding/prototext", "google.golang.org/protobuf/encoding/protojson", "google.golang.org/grpc/..."},
	},
	{
		Name:   "a token's claims are read by both rooms",
		Why:    "satoken reads a ServiceAccount token's claims for the hub's checks and the node endpoint's: it links nothing of either",
		From:   []string{"satoken"},
		Within: []string{},
	},
	{
		Name:   "the authorizer reads only the graph",
		Why:    "its decisions are the in-tree Node authorizer's, from the graph alone",
		From:   []string{"authorizer"},
		Within: []string{"graph", "shard"},
	},
	{
		Name:   "watchmux is a transport",
		Why:    "the node endpoint links watchmux: whatever it links, every node carries",
		From:   []string{"watchmux"},
		Within: []string{"apis/...", "internal/kubeproto"},
	},
	{
		Name:   "the bulk API links only the core and the passthrough",
		Why:    "bulk get and bulk watch are the hub's handlers; the hub wires them, never the reverse",
		From:   []string{"bulk/...", "passthrough"},
		Within: []string{"cache", "graph", "authorizer", "watchmux", "internal/kubeproto", "shard", "apis/...", "bulk/...", "passthrough"},
	},
	{
		Name:   "the node view links only the core and the bulk API",
		Why:    "the node view is one of the hub's handlers, beside bulk get and bulk watch; the hub wires it, never the reverse",
		From:   []string{"nodeview"},
		Within: []string{"cache", "graph", "authorizer", "watchmux", "internal/kubeproto", "shard", "apis/...", "bulk", "passthrough"}, // passthrough through bulk
	},
	{
		Name:   "the hub links no harness and no node endpoint",
		Why:    "the hub and the node endpoint are two rooms: the endpoint is the hub's client, and the hub does not know it exists",
		From:   []string{"hub"},
		Within: []string{"cache", "graph", "authorizer", "watchmux", "internal/kubeproto", "shard", "apis/...", "bulk/...", "passthrough", "nodeview", "satoken"},
	},
	{
		Name: "the node endpoint does not link the hub's internals",
		Why: "the endpoint runs on every node and talks to the hub only through the bulk protocol (watchmux and " +
			"apis/bulk), as the kubelet talks to kube-apiserver through client-go",
		From: []string{"endpoint/...", "podapi/...", "nodeinstall", "nodecopy/...", "internal/nodecmd", "cmd/nodeproxy-node",
			"cmd/nodeproxy-node-podadmit"},
		Within: []string{"watchmux", "apis/...", "endpoint/...", "podapi/...", "nodeinstall", "nodecopy/...", "internal/...", "satoken"},
	},
	{
		Name: "the node endpoint links no k8s.io/kubernetes",
		Why: "the initialisation of its packages (every feature gate, the internal API's scheme, the image reference " +
			"regexps) is resident memory on every node; the Pod API checks posted pods with kube-apiserver's code in " +
			"a process of its own, nodeproxy-node-podadmit (podapi/admission)",
		From:  []string{"cmd/nodeproxy-node", "podapi", "endpoint/...", "nodecopy/..."},
		Never: []string{"k8s.io/kubernetes/..."},
	},
	{
		Name: "the node endpoint links no clientset",
		Why: "client-go's clientset, its scheme and its informers register and link every API group, which every node " +
			"would keep resident; the endpoint's packages use REST clients of the groups they read (endpoint/codec.go, podapi/apipods.go)",
		From:  []string{"cmd/nodeproxy-node"},
		Never: []string{"k8s.io/client-go/kubernetes/...", "k8s.io/client-go/informers/...", "k8s.io/client-go/applyconfigurations/..."},
	},
	{
		Name: "no product binary links the harness, plotting or the image builder",
		Why: "nodeproxy runs in every hub replica and nodeproxy-node on every node: the local control plane, " +
			"synthetic workloads, benchmark scenarios, charts and image assembly are for tests, nodeproxy-bench " +
			"and make image",
		From: []string{"cmd/nodeproxy", "cmd/nodeproxy-node", "cmd/nodeproxy-node-podadmit"},
		Never: []string{
			"test/...", "hack/...", "testing",
			"gonum.org/v1/plot/...", "github.com/ajstarks/svgo/...", "github.com/schollz/progressbar/...",
			"github.com/google/go-containerregistry/...", "sigs.k8s.io/kustomize/...", "github.com/cockroachdb/datadriven/...",
		},
	},
}

// A Violation is one forbidden dependency.
type Violation struct {
	Rule    string
	Why     string
	Package string
	Links   string
}

func (v Violation) String() string {
	return fmt.Sprintf("%s links %s: breaks %q (%s)", v.Package, v.Links, v.Rule, v.Why)
}

// Check applies rules to deps, which maps each package of the module to
// everything it links (go list's Deps: transitive, test files excluded),
// by full import path. It returns every violation, sorted, and an error
// if a rule's From pattern matches no package.
func Check(rules []Rule, deps map[string][]string) ([]Violation, error) {
	var out []Violation
	for _, r := range rules {
		for _, from := range r.From {
			matched := false
			for pkg, linked := range deps {
				if !match(from, pkg) {
					continue
				}
				matched = true
				for _, d := range linked {
					if why, bad := r.forbids(pkg, d); bad {
						out = append(out, Violation{Rule: r.Name, Why: why, Package: pkg, Links: d})
					}
				}
			}
			if !matched {
				return nil, fmt.Errorf("rule %q: %q matches no package of %s: renamed or removed? Update the rule", r.Name, from, Module)
			}
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Package != out[j].Package {
			return out[i].Package < out[j].Package
		}
		return out[i].Links < out[j].Links
	})
	return out, nil
}

// forbids says whether a package pkg of the rule may not link dep.
func (r Rule) forbids(pkg, dep string) (string, bool) {
	for _, n := range r.Never {
		if match(n, dep) {
			return r.Why, true
		}
	}
	if r.Within == nil || dep == pkg || !inModule(dep) {
		return "", false
	}
	for _, w := range r.Within {
		if match(w, dep) {
			return "", false
		}
	}
	return r.Why, true
}

func inModule(pkg string) bool { return pkg == Module || strings.HasPrefix(pkg, Module+"/") }

// match says whether pkg, a full import path, matches pattern.
func match(pattern, pkg string) bool {
	full := pattern
	if first, _, _ := strings.Cut(pattern, "/"); !strings.Contains(first, ".") && !isStd(pattern) {
		full = Module + "/" + pattern
	}
	if prefix, ok := strings.CutSuffix(full, "/..."); ok {
		return pkg == prefix || strings.HasPrefix(pkg, prefix+"/")
	}
	return pkg == full
}

// std are the standard library packages rules name.
var std = map[string]bool{"testing": true}

func isStd(pattern string) bool { return std[pattern] }
