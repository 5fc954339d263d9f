package watch_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/nodeproxy/nodeproxy/apis/bulk/v1alpha1"
	"github.com/nodeproxy/nodeproxy/test/bulke2e"
	"github.com/nodeproxy/nodeproxy/test/testserver"
	"github.com/nodeproxy/nodeproxy/watchmux"
)

func selector(resource, namespace, fieldSelector string, opts metav1.ListOptions) v1alpha1.GetOperation {
	opts.FieldSelector = fieldSelector
	return v1alpha1.GetOperation{Resource: metav1.GroupVersionResource{Version: "v1", Resource: resource}, Namespace: namespace, Options: opts}
}

// nextEvent waits for ch's next event that is not a periodic bookmark.
func nextEvent(t *testing.T, ch *watchmux.Channel) (watchmux.Event, metav1.ObjectMeta) {
	t.Helper()
	for {
		select {
		case ev, ok := <-ch.Events:
			if !ok {
				t.Fatalf("channel %d closed", ch.ID)
			}
			var obj struct{ Metadata metav1.ObjectMeta }
			if ev.Type != watch.Error {
				if err := json.Unmarshal(ev.Object, &obj); err != nil {
					t.Fatalf("channel %d: %v: %s", ch.ID, err, ev.Object)
				}
			}
			if ev.Type == watch.Bookmark && obj.Metadata.Annotations[metav1.InitialEventsAnnotationKey] != "true" {
				continue
			}
			return ev, obj.Metadata
		case <-time.After(30 * time.Second):
			t.Fatalf("channel %d: no event within 30s", ch.ID)
		}
	}
}

func expect(t *testing.T, ch *watchmux.Channel, typ watch.EventType, name string) metav1.ObjectMeta {
	t.Helper()
	ev, meta := nextEvent(t, ch)
	if ev.Type != typ || (name != "" && meta.Name != name) {
		t.Fatalf("channel %d: got %s %s (%+v), want %s %s", ch.ID, ev.Type, meta.Name, ev.Status, typ, name)
	}
	return meta
}

// TestBulkWatchEndToEnd: node-a holds one websocket through
// kube-apiserver's aggregator and watches its pod's secret and configmap
// and its pods; sees changes; is refused node-b's secret without harm to
// its other channels; resumes after a reconnect without losing a change;
// and gets ERROR 403 on the secret's channel when its pod is deleted.
func TestBulkWatchEndToEnd(t *testing.T) {
	srv := bulke2e.StartNodeproxy(t, cp, npPort)
	ns := bulke2e.Workload(t, cp)
	ctx := context.Background()
	admin := kubernetes.NewForConfigOrDie(cp.AdminConfig())
	nodeA, err := cp.NodeConfig("node-a")
	if err != nil {
		t.Fatal(err)
	}
	// Until nodeproxy has pod a, node-a is refused: wait for it.
	testserver.Eventually(t, 30*time.Second, "node-a's pod in the cache", func(context.Context) error {
		code, _, status := bulke2e.Direct(t, srv, nodeA).Post(t, bulke2e.Request(bulke2e.Op("secrets", ns, "metadata.name=secret-a")))
		if code != http.StatusCreated {
			return apierrors.FromObject(status)
		}
		return nil
	})

	c, err := watchmux.Dial(ctx, nodeA)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	initial := metav1.ListOptions{SendInitialEvents: ptr.To(true), AllowWatchBookmarks: true}
	secretCh, err := c.Watch(ctx, selector("secrets", ns, "metadata.name=secret-a", initial))
	if err != nil {
		t.Fatal(err)
	}
	cmCh, err := c.Watch(ctx, selector("configmaps", ns, "metadata.name=cm-a", initial))
	if err != nil {
		t.Fatal(err)
	}
	podCh, err := c.Watch(ctx, selector("pods", ns, "spec.nodeName=node-a", initial))
	if err != nil {
		t.Fatal(err)
	}
	expect(t, secretCh, watch.Added, "secret-a")
	expect(t, secretCh, watch.Bookmark, "")
	expect(t, cmCh, watch.Added, "cm-a")
	cmSeen := expect(t, cmCh, watch.Bookmark, "")
	expect(t, podCh, watch.Added, "a")
	expect(t, podCh, watch.Bookmark, "")

	t.Run("an admin's update arrives as MODIFIED", func(t *testing.T) {
		s, err := admin.CoreV1().Secrets(ns).Get(ctx, "secret-a", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		s.Data["password"] = []byte("rotated")
		if _, err := admin.CoreV1().Secrets(ns).Update(ctx, s, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		ev, _ := nextEvent(t, secretCh)
		var got corev1.Secret
		if ev.Type != watch.Modified || json.Unmarshal(ev.Object, &got) != nil || string(got.Data["password"]) != "rotated" {
			t.Fatalf("got %s %s", ev.Type, ev.Object)
		}
	})

	t.Run("another node's secret is refused, other channels live", func(t *testing.T) {
		_, err := c.Watch(ctx, selector("secrets", ns, "metadata.name=secret-b", metav1.ListOptions{}))
		if !apierrors.IsForbidden(err) {
			t.Fatalf("watching node-b's secret: %v", err)
		}
		cm, err := admin.CoreV1().ConfigMaps(ns).Get(ctx, "cm-a", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cm.Data = map[string]string{"k": "v1"}
		if _, err := admin.CoreV1().ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		cmSeen = expect(t, cmCh, watch.Modified, "cm-a")
	})

	t.Run("a resubscribe from the last resourceVersion after a reconnect loses nothing", func(t *testing.T) {
		_ = c.Close()
		cm, err := admin.CoreV1().ConfigMaps(ns).Get(ctx, "cm-a", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cm.Data = map[string]string{"k": "changed while disconnected"}
		if _, err := admin.CoreV1().ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		c, err = watchmux.Dial(ctx, nodeA)
		if err != nil {
			t.Fatal(err)
		}
		cmCh, err = c.Watch(ctx, selector("configmaps", ns, "metadata.name=cm-a", metav1.ListOptions{ResourceVersion: cmSeen.ResourceVersion}))
		if err != nil {
			t.Fatal(err)
		}
		ev, _ := nextEvent(t, cmCh)
		var got corev1.ConfigMap
		if ev.Type != watch.Modified || json.Unmarshal(ev.Object, &got) != nil || got.Data["k"] != "changed while disconnected" {
			t.Fatalf("after resubscribing from %s: %s %s", cmSeen.ResourceVersion, ev.Type, ev.Object)
		}
		if secretCh, err = c.Watch(ctx, selector("secrets", ns, "metadata.name=secret-a", metav1.ListOptions{})); err != nil {
			t.Fatal(err)
		}
		expect(t, secretCh, watch.Added, "secret-a")
		if podCh, err = c.Watch(ctx, selector("pods", ns, "spec.nodeName=node-a", metav1.ListOptions{})); err != nil {
			t.Fatal(err)
		}
		expect(t, podCh, watch.Added, "a")
	})

	t.Run("deleting the pod ends the secret's channel with 403", func(t *testing.T) {
		if err := admin.CoreV1().Pods(ns).Delete(ctx, "a", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
			t.Fatal(err)
		}
		ev, _ := nextEvent(t, secretCh)
		if ev.Type != watch.Error || ev.Status.Code != http.StatusForbidden {
			t.Fatalf("secret channel after the pod's deletion: %s %+v", ev.Type, ev.Status)
		}
		if _, open := <-secretCh.Events; open {
			t.Error("events after ERROR")
		}
		// A MODIFIED (deletionTimestamp set) may come first.
		for {
			ev, meta := nextEvent(t, podCh)
			if ev.Type == watch.Deleted && meta.Name == "a" {
				break
			}
			if ev.Type != watch.Modified {
				t.Fatalf("pods channel after the deletion: %s %s", ev.Type, meta.Name)
			}
		}
	})

	t.Run("directly over mTLS", func(t *testing.T) {
		direct := &rest.Config{Host: srv.URL, TLSClientConfig: rest.TLSClientConfig{
			CertData: nodeA.CertData, KeyData: nodeA.KeyData, CAFile: cp.ServingCA.CertPath,
		}}
		dc, err := watchmux.Dial(ctx, direct)
		if err != nil {
			t.Fatal(err)
		}
		defer dc.Close()
		ch, err := dc.Watch(ctx, selector("pods", ns, "spec.nodeName=node-a", metav1.ListOptions{}))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := dc.Watch(ctx, selector("pods", ns, "spec.nodeName=node-b", metav1.ListOptions{})); !apierrors.IsForbidden(err) {
			t.Fatalf("node-b's pods: %v", err)
		}
		_ = ch
	})
}
