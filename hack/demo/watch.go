package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/nodeproxy/nodeproxy/apis/bulk/v1alpha1"
	"github.com/nodeproxy/nodeproxy/test/controlplane"
	"github.com/nodeproxy/nodeproxy/watchmux"
)

// tourNodes hold a bulk watch each for the whole tour.
var tourNodes = []string{"node-a", "node-b", "node-c"}

// heard is an event of one of the demo's channels and the node that heard
// it.
type heard struct {
	node, label string
	watchmux.Event
}

// expect is an event the script waits for: a node hearing a type of event
// on any of its channels.
type expect struct {
	node string
	typ  watch.EventType
}

// watchTour is the nodes' connections and the one place that prints what
// they hear.
type watchTour struct {
	ctx   context.Context
	conns map[string]*watchmux.Client
	// events carries every channel's events to until, which prints
	// them; while the script acts between two calls of until they wait
	// in the channels' own buffers (watchmux.ClientEventBuffer).
	events chan heard
}

// showBulkWatch is the product at work: every node of tourNodes holds one
// websocket through kube-apiserver, with a channel per object its pods use
// and one on its pods; an admin changes things and the demo prints what
// each node hears as it hears it.
func showBulkWatch(ctx context.Context, cp *controlplane.ControlPlane, kube kubernetes.Interface) error {
	// Ends the channels' forwarders when the tour returns.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	t := &watchTour{ctx: ctx, conns: map[string]*watchmux.Client{}, events: make(chan heard)}
	for _, node := range tourNodes {
		cfg, err := cp.NodeConfig(node)
		if err != nil {
			return err
		}
		conn, err := watchmux.Dial(ctx, cfg)
		if err != nil {
			return fmt.Errorf("%s's bulk watch connection: %w", node, err)
		}
		defer conn.Close()
		t.conns[node] = conn
	}
	fmt.Printf("    %s each open one websocket through kube-apiserver's aggregator\n", strings.Join(tourNodes, ", "))

	for _, c := range []struct{ node, label string }{
		{"node-a", "secret demo/db-password"},
		{"node-a", "configmap demo/web-config"},
		{"node-a", "pods on node-a"},
		{"node-b", "configmap demo/batch-config"},
		{"node-b", "pods on node-b"},
		{"node-c", "pods on node-c"},
	} {
		if err := t.watch(c.node, c.label); err != nil {
			return err
		}
	}
	// The initial state of each channel ends with a bookmark.
	if err := t.until("the initial state of their channels",
		expect{"node-a", watch.Bookmark}, expect{"node-a", watch.Bookmark}, expect{"node-a", watch.Bookmark},
		expect{"node-b", watch.Bookmark}, expect{"node-b", watch.Bookmark}, expect{"node-c", watch.Bookmark}); err != nil {
		return err
	}

	fmt.Println("    admin creates pod demo/api-0 on node-c; it uses secret demo/db-password, as web-0 on node-a does")
	if _, err := kube.CoreV1().Pods(demoNamespace).Create(ctx, pod("api-0", "node-c", secretVolume("db-password")), metav1.CreateOptions{}); err != nil {
		return err
	}
	if err := t.until("the new pod", expect{"node-c", watch.Added}); err != nil {
		return err
	}
	fmt.Println("    node-c, seeing api-0, asks for a channel on the secret it uses")
	if err := t.watch("node-c", "secret demo/db-password"); err != nil {
		return err
	}
	if err := t.until("the secret", expect{"node-c", watch.Added}, expect{"node-c", watch.Bookmark}); err != nil {
		return err
	}

	fmt.Println("    admin updates secret demo/db-password")
	if err := rotate(ctx, kube, "rotated"); err != nil {
		return err
	}
	if err := t.until("the update", expect{"node-a", watch.Modified}, expect{"node-c", watch.Modified}); err != nil {
		return err
	}

	fmt.Println("    node-b asks on its websocket for a channel on secret demo/db-password, which no pod of node-b uses")
	_, err := t.conns["node-b"].Watch(ctx, selector("secret demo/db-password"))
	if err == nil {
		return fmt.Errorf("node-b was allowed to watch a secret none of its pods uses")
	}
	fmt.Printf("        node-b is refused: %v\n", err)

	fmt.Println("    admin deletes pod demo/web-0; api-0 on node-c still uses the secret")
	if err := kube.CoreV1().Pods(demoNamespace).Delete(ctx, "web-0", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		return err
	}
	// web-0 was node-a's only pod: its secret and configmap channels
	// close, and its pods channel hears the deletion.
	if err := t.until("the end of node-a's channels",
		expect{"node-a", watch.Error}, expect{"node-a", watch.Error}, expect{"node-a", watch.Deleted}); err != nil {
		return err
	}

	fmt.Println("    admin updates secret demo/db-password again: node-c alone still has a channel on it")
	if err := rotate(ctx, kube, "rotated again"); err != nil {
		return err
	}
	return t.until("the second update", expect{"node-c", watch.Modified})
}

// watch opens a channel on node's connection, with its initial state and
// bookmarks, and forwards its events to the printer.
func (t *watchTour) watch(node, label string) error {
	sel := selector(label)
	sel.Options.SendInitialEvents = ptr.To(true)
	sel.Options.AllowWatchBookmarks = true
	ch, err := t.conns[node].Watch(t.ctx, sel)
	if err != nil {
		return fmt.Errorf("%s watching %s: %w", node, label, err)
	}
	fmt.Printf("    %s channel %d: %s\n", node, ch.ID, label)
	// watchmux gives each channel its own Go channel of events; this
	// goroutine merges it into the printer's.
	go func() {
		for ev := range ch.Events {
			select {
			case t.events <- heard{node, label, ev}:
			case <-t.ctx.Done():
				return
			}
		}
	}()
	return nil
}

// until prints what the nodes hear, as they hear it, until each of want
// has been heard.
func (t *watchTour) until(what string, want ...expect) error {
	const patience = 15 * time.Second
	timeout := time.After(patience)
	for len(want) > 0 {
		select {
		case h := <-t.events:
			fmt.Printf("        %s hears on %-29s %s\n", h.node, h.label+":", describe(h.Event))
			if i := slices.Index(want, expect{h.node, h.Type}); i >= 0 {
				want = slices.Delete(want, i, i+1)
			}
		case <-timeout:
			return fmt.Errorf("the nodes did not hear %s within %s: still waiting for %v", what, patience, want)
		case <-t.ctx.Done():
			return t.ctx.Err()
		}
	}
	return nil
}

// selector is the bulk watch selector of one of the tour's channel
// labels: "secret demo/<name>", "configmap demo/<name>" or
// "pods on <node>".
func selector(label string) v1alpha1.GetOperation {
	kind, name, _ := strings.Cut(label, " ")
	if node, ok := strings.CutPrefix(name, "on "); ok {
		return v1alpha1.GetOperation{Resource: core("pods"), Options: metav1.ListOptions{FieldSelector: "spec.nodeName=" + node}}
	}
	return v1alpha1.GetOperation{Resource: core(kind + "s"), Namespace: demoNamespace,
		Options: metav1.ListOptions{FieldSelector: "metadata.name=" + strings.TrimPrefix(name, demoNamespace+"/")}}
}

func core(resource string) metav1.GroupVersionResource {
	return metav1.GroupVersionResource{Version: "v1", Resource: resource}
}

// rotate changes secret demo/db-password's password to value.
func rotate(ctx context.Context, kube kubernetes.Interface, value string) error {
	secret, err := kube.CoreV1().Secrets(demoNamespace).Get(ctx, "db-password", metav1.GetOptions{})
	if err != nil {
		return err
	}
	secret.StringData = map[string]string{"password": value}
	_, err = kube.CoreV1().Secrets(demoNamespace).Update(ctx, secret, metav1.UpdateOptions{})
	return err
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
