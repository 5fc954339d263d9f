package podapi

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	npcli "github.com/nodeproxy/nodeproxy/internal/cli"
	"github.com/nodeproxy/nodeproxy/podapi/admission"
	"github.com/nodeproxy/nodeproxy/test/controlplane"
)

// testAdmitBinary is the helper the tests' Pod APIs run, built by
// TestMain.
var testAdmitBinary string

// buildAdmitBinary builds cmd/nodeproxy-node-podadmit into dir, stamped
// with this test binary's version, as make build stamps both binaries
// with one.
func buildAdmitBinary(dir string) (string, error) {
	root, err := controlplane.RepoRoot()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, AdmitBinary)
	cmd := exec.Command("go", "build", "-ldflags", npcli.VersionLDFlag+npcli.Version(), "-o", bin, "./cmd/"+AdmitBinary)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/%s: %w\n%s", AdmitBinary, err, out)
	}
	return bin, nil
}

// TestAdmitRunsTheHelper: the helper's answers are the pod to store or
// the refusal, and a helper missing or of another version stops the
// Pod API at start.
func TestAdmitRunsTheHelper(t *testing.T) {
	ctx := context.Background()
	a, err := newAdmitter(ctx, testAdmitBinary)
	if err != nil {
		t.Fatal(err)
	}
	pod, refused, err := a.admit(ctx, []byte(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"etcd"},
		"spec":{"containers":[{"name":"etcd","image":"registry.k8s.io/etcd:3.6.8-0"}]}}`), "node-a")
	if err != nil || refused != nil {
		t.Fatalf("a valid pod: %v, %v", refused, err)
	}
	if pod.Name != "etcd-node-a" || pod.Namespace != "default" || pod.Spec.RestartPolicy != "Always" || pod.Spec.Containers[0].ImagePullPolicy != "IfNotPresent" {
		t.Errorf("the admitted pod is not named for the node and defaulted: %s/%s %+v", pod.Namespace, pod.Name, pod.Spec)
	}

	_, refused, err = a.admit(ctx, []byte(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"etcd"},"spec":{}}`), "node-a")
	if err != nil || refused == nil {
		t.Fatalf("a pod without containers: refused %v, %v", refused, err)
	}
	if s := refused.Status(); s.Code != http.StatusUnprocessableEntity || s.Details == nil || len(s.Details.Causes) != 1 || s.Details.Causes[0].Field != "spec.containers" {
		t.Errorf("a pod without containers: %+v, want 422 naming spec.containers", s)
	}
	_, refused, err = a.admit(ctx, []byte(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"etcd"},"spec":{"nodeNames":"x"}}`), "node-a")
	if err != nil || refused == nil || refused.Status().Code != http.StatusBadRequest {
		t.Errorf("a pod with an unknown field: %v, %v; want 400", refused, err)
	}

	dir := t.TempDir()
	if _, err := newAdmitter(ctx, filepath.Join(dir, "missing")); err == nil {
		t.Error("a missing helper was taken")
	}
	other := filepath.Join(dir, AdmitBinary)
	if err := os.WriteFile(other, []byte("#!/bin/sh\necho v0.0.0-other\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := newAdmitter(ctx, other); err == nil || !strings.Contains(err.Error(), "v0.0.0-other") {
		t.Errorf("a helper of another version: %v", err)
	}
}

// TestReservedAnnotationsAreThePodAPIs: the helper refuses the
// annotations the Pod API sets itself.
func TestReservedAnnotationsAreThePodAPIs(t *testing.T) {
	for _, key := range []string{annotationSource, annotationUID} {
		if !slices.Contains(admission.ReservedAnnotations, key) {
			t.Errorf("admission.ReservedAnnotations %v lacks %s", admission.ReservedAnnotations, key)
		}
	}
}
