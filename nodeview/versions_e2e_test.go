package nodeview_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"

	"github.com/nodeproxy/nodeproxy/apis/bulk/v1alpha1"
	"github.com/nodeproxy/nodeproxy/test/testserver"
	"github.com/nodeproxy/nodeproxy/watchmux"
)

// TestEachVersionOfTheViewCarriesItsTypes: a view of v1alpha2 carries the
// node's own CSINode (and no other node's), one of v1alpha1 carries none
// and names no csinodes in its positions, which a client of v1alpha1
// could not read; a position of one version does not resume the other.
func TestEachVersionOfTheViewCarriesItsTypes(t *testing.T) {
	ctx := context.Background()
	admin := prepare(t)
	for _, name := range []string{"nv-csi", "nv-csi-other"} {
		if _, err := admin.StorageV1().CSINodes().Create(ctx, &storagev1.CSINode{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	srv := testserver.Start(t, cp, testserver.Options{})
	srv.WaitReady(t, 90*time.Second)
	session, err := watchmux.NewSession(ctx, nodeClient(t, srv.URL, "nv-csi"))
	if err != nil {
		t.Fatal(err)
	}
	defer session.Close()

	// open opens the view at version and returns its channel, the kinds
	// of its initial state's objects named after the node, and the
	// position that ends it.
	open := func(version, rv string) (*watchmux.SessionChannel, []string, string, error) {
		op := viewOf("nv-csi", rv)
		op.Resource.Version = version
		if rv == "" {
			op.Options.SendInitialEvents = ptr.To(true)
		}
		ch, err := session.WatchBatches(ctx, op)
		if err != nil {
			return nil, nil, "", err
		}
		var own []string
		for {
			select {
			case ev := <-ch.Events:
				var m metav1.PartialObjectMetadata
				if err := json.Unmarshal(ev.Object, &m); err != nil {
					t.Fatal(err)
				}
				switch {
				case ev.Type == watch.Bookmark:
					return ch, own, m.ResourceVersion, nil
				case strings.HasPrefix(m.Name, "nv-csi"):
					own = append(own, string(ev.Type)+" "+m.Kind+" "+m.Name)
				}
			case <-time.After(30 * time.Second):
				t.Fatalf("%s: no bookmark within 30 s", version)
			}
		}
	}

	_, own, first, err := open("v1alpha1", "")
	if err != nil {
		t.Fatal(err)
	}
	if len(own) != 0 || strings.Contains(first, "csinodes") {
		t.Errorf("v1alpha1: %v at %s; want no CSINode, no csinodes in the position", own, first)
	}
	ch, own, second, err := open("v1alpha2", "")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(own, ",") != "ADDED CSINode nv-csi" || !strings.Contains(second, "csinodes=") {
		t.Errorf("v1alpha2: %v at %s; want its own CSINode alone, and csinodes in the position", own, second)
	}
	// The node's CSINode changes as a CSI driver registers: the view
	// carries the change.
	csi, err := admin.StorageV1().CSINodes().Get(ctx, "nv-csi", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	csi.Spec.Drivers = []storagev1.CSINodeDriver{{Name: "csi.example.com", NodeID: "nv-csi"}}
	if _, err := admin.StorageV1().CSINodes().Update(ctx, csi, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	timeout := time.After(30 * time.Second)
	for modified := false; !modified; {
		select {
		case ev := <-ch.Events:
			modified = ev.Type == watch.Modified && strings.Contains(string(ev.Object), `"kind":"CSINode"`)
		case <-timeout:
			t.Fatal("the CSINode's change did not reach the v1alpha2 view")
		}
	}

	// A position resumes only the version it is of.
	for version, pos := range map[string]string{"v1alpha2": first, "v1alpha1": second} {
		if _, _, _, err := open(version, pos); !apierrors.IsInvalid(err) {
			t.Errorf("%s resumed from %s: %v; want 422 Invalid", version, pos, err)
		}
	}
	if _, _, _, err := open("v9", ""); err == nil {
		t.Error("a view of a version that does not exist opened")
	}
	if !v1alpha1.AllNodeViewTypes.Has(v1alpha1.NodeViewTypeIndex("csinodes")) {
		t.Fatal("csinodes is not a type of the view")
	}
}
