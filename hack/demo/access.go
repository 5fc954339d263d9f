package main

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/nodeproxy/nodeproxy/test/controlplane"
)

// showNodeAccess reads as node-a and node-b, with their client
// certificates, through kube-apiserver: what the pods on each node use is
// readable by that node alone.
func showNodeAccess(ctx context.Context, cp *controlplane.ControlPlane) error {
	node := func(name string) (kubernetes.Interface, error) {
		cfg, err := cp.NodeConfig(name)
		if err != nil {
			return nil, err
		}
		return kubernetes.NewForConfig(cfg)
	}
	a, err := node("node-a")
	if err != nil {
		return err
	}
	b, err := node("node-b")
	if err != nil {
		return err
	}
	// The graph learns of the pods through its informers a moment after
	// they are created.
	_ = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := a.CoreV1().Secrets(demoNamespace).Get(ctx, "db-password", metav1.GetOptions{})
		return err == nil, nil
	})
	for _, q := range []struct {
		who  string
		what string
		call func() error
	}{
		{"node-a", "get secret demo/db-password", func() error {
			_, err := a.CoreV1().Secrets(demoNamespace).Get(ctx, "db-password", metav1.GetOptions{})
			return err
		}},
		{"node-b", "get secret demo/db-password", func() error {
			_, err := b.CoreV1().Secrets(demoNamespace).Get(ctx, "db-password", metav1.GetOptions{})
			return err
		}},
		{"node-b", "get configmap demo/batch-config", func() error {
			_, err := b.CoreV1().ConfigMaps(demoNamespace).Get(ctx, "batch-config", metav1.GetOptions{})
			return err
		}},
		{"node-a", "list secrets in demo", func() error {
			_, err := a.CoreV1().Secrets(demoNamespace).List(ctx, metav1.ListOptions{})
			return err
		}},
		{"node-a", "list pods with spec.nodeName=node-a", func() error {
			_, err := a.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=node-a"})
			return err
		}},
	} {
		verdict := "allowed"
		if err := q.call(); err != nil {
			if !apierrors.IsForbidden(err) {
				return fmt.Errorf("%s %s: %w", q.who, q.what, err)
			}
			verdict = "403 Forbidden"
		}
		fmt.Printf("    %-7s %-40s %s\n", q.who, q.what, verdict)
	}
	return nil
}
