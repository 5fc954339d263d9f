package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/nodeproxy/nodeproxy/apis/bulk/v1alpha1"
	"github.com/nodeproxy/nodeproxy/internal/controlplane"
	"github.com/nodeproxy/nodeproxy/watchmux"
)

// labelled is an event of one of the demo's channels.
type labelled struct {
	label string
	watchmux.Event
}

// showBulkWatch is the product at work: node-a holds one websocket through
// kube-apiserver with a channel per object its pod uses and one on its
// pods; an admin changes things and the demo prints what node-a hears as
// it hears it.
func showBulkWatch(ctx context.Context, cp *controlplane.ControlPlane, kube kubernetes.Interface) error {
	nodeA, err := cp.NodeConfig("node-a")
	if err != nil {
		return err
	}
	conn, err := watchmux.Dial(ctx, nodeA)
	if err != nil {
		return fmt.Errorf("node-a's bulk watch connection: %w", err)
	}
	defer conn.Close()
	fmt.Println("    node-a opened one websocket through kube-apiserver's aggregator")

	events := make(chan labelled, 64)
	open := func(conn *watchmux.Client, label string, sel v1alpha1.GetOperation) error {
		sel.Options.SendInitialEvents = ptr.To(true)
		sel.Options.AllowWatchBookmarks = true
		ch, err := conn.Watch(ctx, sel)
		if err != nil {
			return err
		}
		fmt.Printf("    channel %d: %s\n", ch.ID, label)
		go func() {
			for ev := range ch.Events {
				events <- labelled{label, ev}
			}
		}()
		return nil
	}
	core := func(resource string) metav1.GroupVersionResource {
		return metav1.GroupVersionResource{Version: "v1", Resource: resource}
	}
	byName := func(name string) metav1.ListOptions {
		return metav1.ListOptions{FieldSelector: "metadata.name=" + name}
	}
	for _, c := range []struct {
		label string
		sel   v1alpha1.GetOperation
	}{
		{"secret demo/db-password", v1alpha1.GetOperation{Resource: core("secrets"), Namespace: demoNamespace, Options: byName("db-password")}},
		{"configmap demo/web-config", v1alpha1.GetOperation{Resource: core("configmaps"), Namespace: demoNamespace, Options: byName("web-config")}},
		{"pods on node-a", v1alpha1.GetOperation{Resource: core("pods"), Options: metav1.ListOptions{FieldSelector: "spec.nodeName=node-a"}}},
	} {
		if err := open(conn, c.label, c.sel); err != nil {
			return fmt.Errorf("node-a watching %s: %w", c.label, err)
		}
	}
	// until prints events as they come, until one satisfies done.
	until := func(what string, done func(labelled) bool) error {
		timeout := time.After(15 * time.Second)
		for {
			select {
			case ev := <-events:
				fmt.Printf("        node-a hears on %-26s %s\n", ev.label+":", describe(ev.Event))
				if done(ev) {
					return nil
				}
			case <-timeout:
				return fmt.Errorf("node-a did not hear %s within 15s", what)
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	initial := 0
	if err := until("the initial state of its channels", func(ev labelled) bool {
		if ev.Type == watch.Bookmark {
			initial++
		}
		return initial == 3
	}); err != nil {
		return err
	}

	fmt.Println("    admin creates pod demo/web-1 on node-a")
	if _, err := kube.CoreV1().Pods(demoNamespace).Create(ctx, pod("web-1", "node-a"), metav1.CreateOptions{}); err != nil {
		return err
	}
	if err := until("the new pod", func(ev labelled) bool { return ev.Type == watch.Added }); err != nil {
		return err
	}

	fmt.Println("    admin updates secret demo/db-password")
	secret, err := kube.CoreV1().Secrets(demoNamespace).Get(ctx, "db-password", metav1.GetOptions{})
	if err != nil {
		return err
	}
	secret.StringData = map[string]string{"password": "rotated"}
	if _, err := kube.CoreV1().Secrets(demoNamespace).Update(ctx, secret, metav1.UpdateOptions{}); err != nil {
		return err
	}
	if err := until("the update", func(ev labelled) bool { return ev.Type == watch.Modified }); err != nil {
		return err
	}

	fmt.Println("    node-b asks to watch secret demo/db-password, which no pod of node-b uses")
	nodeB, err := cp.NodeConfig("node-b")
	if err != nil {
		return err
	}
	connB, err := watchmux.Dial(ctx, nodeB)
	if err != nil {
		return fmt.Errorf("node-b's bulk watch connection: %w", err)
	}
	defer connB.Close()
	if _, err := connB.Watch(ctx, v1alpha1.GetOperation{Resource: core("secrets"), Namespace: demoNamespace, Options: byName("db-password")}); err != nil {
		fmt.Printf("        refused: %v\n", err)
	} else {
		return fmt.Errorf("node-b was allowed to watch node-a's secret")
	}

	fmt.Println("    admin deletes pod demo/web-0, the only pod that uses the secret and the configmap")
	if err := kube.CoreV1().Pods(demoNamespace).Delete(ctx, "web-0", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		return err
	}
	closed := 0
	return until("the end of its channels", func(ev labelled) bool {
		if ev.Type == watch.Error {
			closed++
		}
		return closed == 2
	})
}

// describe is one line about an event.
func describe(ev watchmux.Event) string {
	if ev.Type == watch.Error && ev.Status != nil {
		return fmt.Sprintf("ERROR %d %s", ev.Status.Code, ev.Status.Message)
	}
	var o struct {
		Metadata struct {
			Namespace, Name, ResourceVersion string
			Annotations                      map[string]string
		}
	}
	_ = json.Unmarshal(ev.Object, &o)
	m := o.Metadata
	if ev.Type == watch.Bookmark {
		s := "BOOKMARK at resourceVersion " + m.ResourceVersion
		if m.Annotations[metav1.InitialEventsAnnotationKey] == "true" {
			s += " (end of the initial state)"
		}
		return s
	}
	return strings.TrimSpace(fmt.Sprintf("%s %s/%s at resourceVersion %s", ev.Type, m.Namespace, m.Name, m.ResourceVersion))
}
