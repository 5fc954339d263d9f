package endpoint

import (
	"bytes"
	"errors"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/nodeproxy/nodeproxy/nodecopy"
	"github.com/nodeproxy/nodeproxy/nodecopy/disk"
)

// offlineEndpoint is an endpoint whose node is offline (no hub
// connection, kube-apiserver's /readyz failed a moment ago), serving f.
func offlineEndpoint(f *viewFollower) *Endpoint {
	ready := &readiness{hub: f.hub, at: time.Now(), err: errors.New("kube-apiserver unreachable"), view: f, offlineMaxAge: DefaultOfflineMaxAge}
	return &Endpoint{hub: f.hub, view: f, ready: ready, offlineMaxAge: DefaultOfflineMaxAge}
}

// restored is a follower with the copy snap persisted, loaded as at a
// start.
func restored(t *testing.T, snap *disk.Snapshot) *viewFollower {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "node-view")
	store, err := disk.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	snap.Node, snap.Cluster, snap.Position = "node-a", "cluster", viewPosition(10)
	if err := store.Save(snap); err != nil {
		t.Fatal(err)
	}
	f := newViewFollower(&Hub{up: make(chan struct{})}, "node-a")
	f.store, f.cluster = store, "cluster"
	f.restore()
	if _, whole := f.copy.Position(); !whole {
		t.Fatal("the persisted copy was not loaded")
	}
	return f
}

// TestACopyWhoseAgeCannotBeProvenIsNotServedOffline: a copy saved in an
// earlier boot has only the wall clock to say its age, and a wall clock
// proves nothing unless the kernel holds it synchronized; one that says
// the copy was saved in the future was set back since, and the copy may
// be a week old. Offline, such a copy is not served, whatever its wall
// clock age; it is still the position the view resumes from.
func TestACopyWhoseAgeCannotBeProvenIsNotServedOffline(t *testing.T) {
	thisBoot, sinceBoot, _ := bootClock() // the harness runs on Linux
	for _, tc := range []struct {
		name   string
		snap   disk.Snapshot
		synced bool
		served bool
	}{
		{"saved in the future by the wall clock", disk.Snapshot{SavedAt: time.Now().Add(7 * 24 * time.Hour), BootID: "an-earlier-boot", BootTime: time.Hour}, true, false},
		{"an earlier boot, the wall clock not synchronized", disk.Snapshot{SavedAt: time.Now().Add(-time.Hour), BootID: "an-earlier-boot"}, false, false},
		{"an earlier boot, the wall clock synchronized", disk.Snapshot{SavedAt: time.Now().Add(-time.Hour), BootID: "an-earlier-boot"}, true, true},
		{"an earlier boot, proven older than --offline-max-age", disk.Snapshot{SavedAt: time.Now().Add(-DefaultOfflineMaxAge - time.Hour)}, true, false},
		{"this boot, whatever the wall clock", disk.Snapshot{SavedAt: time.Now().Add(7 * 24 * time.Hour), BootID: thisBoot, BootTime: sinceBoot - time.Second}, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synced := wallClockSynced
			wallClockSynced = func() bool { return tc.synced }
			t.Cleanup(func() { wallClockSynced = synced })
			f := restored(t, &tc.snap)
			e := offlineEndpoint(f)
			if mode, ok := e.copyMode(); ok != tc.served {
				t.Errorf("copyMode %q, %t; want served %t", mode, ok, tc.served)
			}
			rec := httptest.NewRecorder()
			e.ready.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
			if want := map[bool]int{true: http.StatusOK, false: http.StatusServiceUnavailable}[tc.served]; rec.Code != want {
				t.Errorf("/readyz %d %q offline; want %d", rec.Code, rec.Body, want)
			}
			if pos, _ := f.copy.Position(); pos != viewPosition(10) {
				t.Errorf("the copy's position %q; want the saved one to resume from", pos)
			}
		})
	}
}

// TestAPersistedCopyKeepsEachObjectInItsEncoding: a copy holding a pod
// as the hub's protobuf and a secret as JSON (observed of kube-apiserver,
// or from an older hub) is saved and loaded as the same bytes, each in
// its own encoding, and the loaded copy selects the pod by its node.
func TestAPersistedCopyKeepsEachObjectInItsEncoding(t *testing.T) {
	pod := &corev1.Pod{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", ResourceVersion: "7", Labels: map[string]string{"app": "web"}},
		Spec:       corev1.PodSpec{NodeName: "node-a"}}
	var podBytes bytes.Buffer
	if err := protobuf.NewSerializer(scheme, scheme).Encode(pod, &podBytes); err != nil {
		t.Fatal(err)
	}
	secret := []byte(`{"apiVersion":"v1","kind":"Secret","metadata":{"namespace":"ns","name":"s","resourceVersion":"5"}}`)
	f := restored(t, &disk.Snapshot{})
	if _, err := f.copy.Apply(nodecopy.Batch{Initial: true, Position: viewPosition(20), Events: []nodecopy.Event{
		{Type: watch.Added, Object: secret}, {Type: watch.Added, Object: podBytes.Bytes()},
	}}); err != nil {
		t.Fatal(err)
	}
	f.unproven = false // followed the hub since it was loaded
	if err := f.save(); err != nil {
		t.Fatal(err)
	}
	g := newViewFollower(&Hub{up: make(chan struct{})}, "node-a")
	g.store, g.cluster = f.store, f.cluster
	g.restore()
	pods, _, err := g.copy.List(nodecopy.TypeIndex("", "pods"), nodecopy.Filter{Fields: fields.OneTermEqualSelector("spec.nodeName", "node-a")})
	if err != nil || len(pods) != 1 || !bytes.Equal(pods[0].Raw, podBytes.Bytes()) || pods[0].Labels["app"] != "web" {
		t.Errorf("the loaded copy's pods on node-a: %v (%v), want p as the protobuf saved", pods, err)
	}
	secrets, _, err := g.copy.List(nodecopy.TypeIndex("", "secrets"), nodecopy.Filter{})
	if err != nil || len(secrets) != 1 || !bytes.Equal(secrets[0].Raw, secret) {
		t.Errorf("the loaded copy's secrets: %v (%v), want s as the JSON saved", secrets, err)
	}
}
