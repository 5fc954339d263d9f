package nodeview_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"

	"github.com/nodeproxy/nodeproxy/apis/bulk/v1alpha1"
	"github.com/nodeproxy/nodeproxy/test/testserver"
	"github.com/nodeproxy/nodeproxy/watchmux"
)

// TestProgressRequestAgainstKubeAPIServer: a service is written, and as
// soon as the hub's cache has it (a bulk watch channel of services on
// the same connection, fed by the same cache, shows it) the node asks
// its view for progress: the service's ADDED comes before the answer,
// whether the view had taken it in when the request came or not. Asking
// a bulk watch channel, or a channel that is not open, is refused.
func TestProgressRequestAgainstKubeAPIServer(t *testing.T) {
	ctx := context.Background()
	admin := prepare(t)
	hub := testserver.Start(t, cp, testserver.Options{})
	hub.WaitReady(t, 90*time.Second)
	client, err := watchmux.Dial(ctx, nodeClient(t, hub.URL, "nv-p"))
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	op := viewOf("nv-p", "")
	op.Options.SendInitialEvents = ptr.To(true)
	view, err := client.Watch(ctx, op)
	if err != nil {
		t.Fatal(err)
	}
	c := &nodeCopy{t: t, held: map[string]string{}}
	c.until(view.Events, "BOOKMARK")
	services, err := client.Watch(ctx, v1alpha1.GetOperation{
		Resource: metav1.GroupVersionResource{Version: "v1", Resource: "services"}, Namespace: ns,
		Options: metav1.ListOptions{ResourceVersion: ""},
	})
	if err != nil {
		t.Fatal(err)
	}

	// A quiet view answers too.
	if err := client.RequestProgress(ctx, view.ID, "quiet"); err != nil {
		t.Fatal(err)
	}
	c.until(view.Events, "BOOKMARK progress=quiet")

	for i := range 5 {
		name := fmt.Sprintf("progress-%d", i)
		if _, err := admin.CoreV1().Services(ns).Create(ctx, &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: name + ".example.com"},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		awaitService(t, services, name)
		token := fmt.Sprintf("after-%d", i)
		if err := client.RequestProgress(ctx, view.ID, token); err != nil {
			t.Fatal(err)
		}
		c.until(view.Events, "BOOKMARK progress="+token)
		added, answer := slices.Index(c.log, "ADDED Service "+ns+"/"+name), slices.Index(c.log, "BOOKMARK progress="+token)
		if added < 0 || added > answer {
			t.Fatalf("the answer to %s came before the service the cache had when it was asked: %s", token, strings.Join(c.log, " | "))
		}
	}

	for _, tc := range []struct {
		name    string
		channel int64
		code    int32
	}{
		{"a bulk watch channel", services.ID, http.StatusBadRequest},
		{"a channel not open", 9999, http.StatusNotFound},
	} {
		err := client.RequestProgress(ctx, tc.channel, "refused")
		var status *apierrors.StatusError
		if !errors.As(err, &status) || status.ErrStatus.Code != tc.code {
			t.Errorf("a progress request to %s: %v, want %d", tc.name, err, tc.code)
		}
	}
}

// awaitService reads a bulk watch channel of services until name's
// ADDED, and fails after 30 s.
func awaitService(t *testing.T, ch *watchmux.Channel, name string) {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case ev, ok := <-ch.Events:
			if !ok || ev.Type == watch.Error {
				t.Fatalf("the services channel ended: %v", ev.Status)
			}
			var m metav1.PartialObjectMetadata
			if err := json.Unmarshal(ev.Object, &m); err != nil {
				t.Fatal(err)
			}
			if ev.Type == watch.Added && m.Name == name {
				return
			}
		case <-timeout:
			t.Fatalf("service %s not in the hub's cache within 30 s", name)
		}
	}
}
