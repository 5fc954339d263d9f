package controlplane

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
)

// ToolsDirEnv overrides where the kube-apiserver and etcd binaries are kept.
const ToolsDirEnv = "NODEPROXY_TOOLS_DIR"

// Binaries are the paths of the programs a control plane runs.
type Binaries struct {
	KubeAPIServer string
	Etcd          string
}

// tool is one program built from the tools module.
type tool struct {
	name    string
	pkg     string
	ldflags string
	// local is the directory, in hack/tools, of a program of nodeproxy's
	// own: its binary's name carries a hash of its sources, so that a
	// change to them builds it anew (the tools directory is keyed by the
	// pinned versions only).
	local string
}

// tools lists what hack/tools/go.mod pins. The version stamp makes
// kube-apiserver report v1.36.3 instead of v0.0.0 in /version, which clients
// such as kubectl print and warn about.
var tools = []tool{
	{name: "kube-apiserver", pkg: "k8s.io/kubernetes/cmd/kube-apiserver",
		ldflags: "-s -w -X k8s.io/component-base/version.gitVersion=v1.36.3 -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=36"},
	{name: "etcd", pkg: "go.etcd.io/etcd/server/v3", ldflags: "-s -w"},
	{name: "kubectl", pkg: "k8s.io/kubernetes/cmd/kubectl",
		ldflags: "-s -w -X k8s.io/component-base/version.gitVersion=v1.36.3 -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=36"},
	// The hollow kubelet: real kubelet code with a fake container runtime
	// (kubemark --morph=kubelet), the client the node endpoint is proven with.
	{name: "kubemark", pkg: "k8s.io/kubernetes/cmd/kubemark",
		ldflags: "-s -w -X k8s.io/component-base/version.gitVersion=v1.36.3 -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=36"},
	// The hollow kubelet with its HTTP pod source (staticPodURL) set,
	// which kubemark hard-codes empty: the Pod API's kubelet.
	{name: "hollowkubelet", pkg: "github.com/nodeproxy/nodeproxy/hack/tools/hollowkubelet", local: "hollowkubelet",
		ldflags: "-s -w -X k8s.io/component-base/version.gitVersion=v1.36.3 -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=36"},
	{name: "deepcopy-gen", pkg: "k8s.io/code-generator/cmd/deepcopy-gen", ldflags: "-s -w"},
	{name: "openapi-gen", pkg: "k8s.io/kube-openapi/cmd/openapi-gen", ldflags: "-s -w"},
}

// RepoRoot finds the nodeproxy checkout that holds the working directory:
// tests run in package directories and make runs at the top, so walking up
// to hack/tools/go.mod finds it from both.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("working directory: %w", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "hack", "tools", "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("hack/tools/go.mod not found above the working directory: run from a nodeproxy checkout")
		}
		dir = parent
	}
}

// ToolsDir is where the binaries for the pins in root/hack/tools live: the
// user cache directory, keyed by the versions of k8s.io/kubernetes and etcd
// the tools module requires, so a change of pin builds anew, adding a
// generator to the module does not rebuild kube-apiserver, and every
// checkout on the machine shares one build.
func ToolsDir(root string) (string, error) {
	if d := os.Getenv(ToolsDirEnv); d != "" {
		return d, nil
	}
	mod, err := os.ReadFile(filepath.Join(root, "hack", "tools", "go.mod"))
	if err != nil {
		return "", fmt.Errorf("read tools module: %w", err)
	}
	k8s, etcd := requiredVersion(mod, "k8s.io/kubernetes"), requiredVersion(mod, "go.etcd.io/etcd/server/v3")
	if k8s == "" || etcd == "" {
		return "", errors.New("hack/tools/go.mod must require k8s.io/kubernetes and go.etcd.io/etcd/server/v3")
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("user cache directory: %w", err)
	}
	return filepath.Join(cache, "nodeproxy", "tools", "k8s-"+k8s+"-etcd-"+etcd), nil
}

// requiredVersion finds "<module> <version>" in a go.mod's require lines.
func requiredVersion(gomod []byte, module string) string {
	for _, line := range strings.Split(string(gomod), "\n") {
		fields := strings.Fields(strings.TrimPrefix(strings.TrimSpace(line), "require "))
		if len(fields) >= 2 && fields[0] == module {
			return fields[1]
		}
	}
	return ""
}

// EnsureBinaries returns the kube-apiserver and etcd binaries, building
// whichever is missing. A cold build takes about ten minutes on two cores;
// go's build progress and errors go to log.
func EnsureBinaries(ctx context.Context, log io.Writer) (Binaries, error) {
	paths, err := EnsureTools(ctx, log, "kube-apiserver", "etcd")
	if err != nil {
		return Binaries{}, err
	}
	return Binaries{KubeAPIServer: paths["kube-apiserver"], Etcd: paths["etcd"]}, nil
}

// EnsureTools returns the paths of the named tools of hack/tools, building
// whichever is missing. An exclusive file lock makes test binaries of
// several packages, started at once by `go test ./...`, wait for one build
// instead of racing to make two.
func EnsureTools(ctx context.Context, log io.Writer, names ...string) (map[string]string, error) {
	root, err := RepoRoot()
	if err != nil {
		return nil, err
	}
	dir, err := ToolsDir(root)
	if err != nil {
		return nil, err
	}
	paths := map[string]string{}
	var wanted []tool
	for _, name := range names {
		i := slices.IndexFunc(tools, func(t tool) bool { return t.name == name })
		if i < 0 {
			return nil, fmt.Errorf("unknown tool %q", name)
		}
		file, err := tools[i].file(root)
		if err != nil {
			return nil, err
		}
		paths[name] = filepath.Join(dir, file)
		if !exists(paths[name]) {
			wanted = append(wanted, tools[i])
		}
	}
	if len(wanted) == 0 {
		return paths, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create tools directory: %w", err)
	}
	unlock, err := lockFile(filepath.Join(dir, ".lock"))
	if err != nil {
		return nil, err
	}
	defer unlock()
	for _, t := range wanted {
		out := paths[t.name]
		if exists(out) { // built by another process while we waited for the lock
			continue
		}
		fmt.Fprintf(log, "building %s into %s (kube-apiserver takes about ten minutes on two cores)\n", t.name, dir)
		tmp := out + ".tmp"
		cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags", t.ldflags, "-o", tmp, t.pkg)
		cmd.Dir = filepath.Join(root, "hack", "tools")
		cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=readonly")
		tail := newTailBuffer(64)
		cmd.Stdout = io.MultiWriter(log, tail)
		cmd.Stderr = io.MultiWriter(log, tail)
		if err := cmd.Run(); err != nil {
			_ = os.Remove(tmp)
			return nil, fmt.Errorf("build %s from hack/tools: %w\n%s", t.name, err, tail)
		}
		// Rename last, so a build cut short never leaves a binary that looks whole.
		if err := os.Rename(tmp, out); err != nil {
			return nil, fmt.Errorf("install %s: %w", t.name, err)
		}
	}
	return paths, nil
}

// file is the tool's binary's name in the tools directory: its name, and
// for a local tool the hash of its sources.
func (t tool) file(root string) (string, error) {
	if t.local == "" {
		return t.name, nil
	}
	srcs, err := filepath.Glob(filepath.Join(root, "hack", "tools", t.local, "*.go"))
	if err != nil || len(srcs) == 0 {
		return "", fmt.Errorf("sources of %s in hack/tools/%s: none found (%v)", t.name, t.local, err)
	}
	h := sha256.New()
	for _, src := range srcs { // sorted by Glob
		b, err := os.ReadFile(src)
		if err != nil {
			return "", fmt.Errorf("sources of %s: %w", t.name, err)
		}
		fmt.Fprintf(h, "%s %d\n", filepath.Base(src), len(b))
		h.Write(b)
	}
	return t.name + "-" + hex.EncodeToString(h.Sum(nil))[:12], nil
}

func exists(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.Mode().IsRegular()
}

func lockFile(path string) (unlock func(), err error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open lock %s: %w", path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, nil
}
