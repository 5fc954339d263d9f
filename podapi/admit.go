package podapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	npcli "github.com/nodeproxy/nodeproxy/internal/cli"
)

// AdmitBinary is the name of the helper that checks posted pods
// (cmd/nodeproxy-node-podadmit, package podapi/admission), looked for
// beside the running binary unless --pod-api-admit-binary names it.
const AdmitBinary = "nodeproxy-node-podadmit"

// admitTimeout bounds one run of the helper, which takes a fraction of a
// second (docs/benchmarks.md, "The node endpoint's footprint"); the
// margin is for a node busy starting its pods, as at bootstrap.
const admitTimeout = 30 * time.Second

// admitter runs the helper that decodes, defaults and validates a posted
// pod. A process of its own for each POST, so that the endpoint does not
// link k8s.io/kubernetes, whose packages' initialisation is resident
// memory on every node although the Pod API is off by default
// (docs/architecture.md, "The Pod API"). One at a time: pods are posted
// rarely (a node's bootstrap), and each run holds the helper's memory,
// about what the endpoint holds idle, while it lasts.
type admitter struct {
	path string
	one  chan struct{}
}

// newAdmitter finds the helper (path, or AdmitBinary beside this binary)
// and checks that it is of this binary's version: the checks it makes
// are the endpoint's, and an older helper left beside a newer endpoint
// would make other ones.
func newAdmitter(ctx context.Context, path string) (*admitter, error) {
	if path == "" {
		self, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("find this binary, to run %s beside it: %w", AdmitBinary, err)
		}
		path = filepath.Join(filepath.Dir(self), AdmitBinary)
	}
	ctx, cancel := context.WithTimeout(ctx, admitTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, path, "--version").Output()
	if err != nil {
		return nil, fmt.Errorf("pod API: the helper that checks posted pods, %s (shipped beside nodeproxy-node; --pod-api-admit-binary): %w", path, err)
	}
	if v, want := strings.TrimSpace(string(out)), npcli.Version(); v != want {
		return nil, fmt.Errorf("pod API: the helper that checks posted pods, %s, is version %q, not this binary's %q", path, v, want)
	}
	return &admitter{path: path, one: make(chan struct{}, 1)}, nil
}

// admit returns the pod to store for body, named <pod>-<node>, or the
// Status refusing it; an error when the helper could not check it.
func (a *admitter) admit(ctx context.Context, body []byte, node string) (*corev1.Pod, *apierrors.StatusError, error) {
	select {
	case a.one <- struct{}{}:
		defer func() { <-a.one }()
	case <-ctx.Done():
		return nil, nil, fmt.Errorf("wait to check the pod: %w", ctx.Err())
	}
	ctx, cancel := context.WithTimeout(ctx, admitTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, a.path, "--node", node)
	cmd.Stdin = bytes.NewReader(body)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, nil, fmt.Errorf("check the pod with %s: %w: %s", a.path, err, strings.TrimSpace(stderr.String()))
	}
	var kind metav1.TypeMeta
	if err := json.Unmarshal(out, &kind); err != nil {
		return nil, nil, fmt.Errorf("the answer of %s: %w", a.path, err)
	}
	switch kind.Kind {
	case "Pod":
		pod := &corev1.Pod{}
		if err := json.Unmarshal(out, pod); err != nil {
			return nil, nil, fmt.Errorf("the pod %s answered: %w", a.path, err)
		}
		return pod, nil, nil
	case "Status":
		s := metav1.Status{}
		if err := json.Unmarshal(out, &s); err != nil {
			return nil, nil, fmt.Errorf("the refusal %s answered: %w", a.path, err)
		}
		s.TypeMeta = metav1.TypeMeta{}
		return nil, &apierrors.StatusError{ErrStatus: s}, nil
	}
	return nil, nil, errors.New("the answer of " + a.path + " is neither a Pod nor a Status")
}
