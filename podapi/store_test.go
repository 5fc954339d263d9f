package podapi

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// storedImage is the image of the records' pods; the store checks
// nothing of a pod.
const storedImage = "registry.k8s.io/etcd:3.6.8-0"

func record(ns, name string, uid types.UID) Record {
	return Record{Pod: corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: uid},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "etcd", Image: storedImage}}},
	}, State: StateLocal}
}

// TestStore: records survive a reopen (the endpoint's or the node's
// restart), a name is taken once, a leftover temporary file is cleared,
// and a record that does not parse stops the open.
func TestStore(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pods")
	s, err := OpenStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(dir); err != nil || st.Mode().Perm() != 0o700 {
		t.Fatalf("store directory: %v, mode %v; want 0700", err, st.Mode().Perm())
	}
	if err := s.Add(record("default", "a-n", "uid-a")); err != nil {
		t.Fatal(err)
	}
	if err := s.Add(record("kube-system", "b-n", "uid-b")); err != nil {
		t.Fatal(err)
	}
	if err := s.Add(record("default", "a-n", "uid-c")); !errors.Is(err, errExists) {
		t.Fatalf("second default/a-n: %v, want errExists", err)
	}
	r, _ := s.Get("uid-b")
	r.State, r.Reason = StateHandoverFailed, "forbidden"
	if err := s.Update(r); err != nil {
		t.Fatal(err)
	}
	if ok, err := s.Delete("uid-a"); !ok || err != nil {
		t.Fatalf("delete: %v %v", ok, err)
	}
	if err := s.Update(record("default", "a-n", "uid-a")); err == nil {
		t.Fatal("update of a deleted record succeeded")
	}
	// An interrupted write leaves a temporary file, never a record.
	if err := os.WriteFile(filepath.Join(dir, tmpPrefix+"123"), []byte(`{"pod":`), 0o600); err != nil {
		t.Fatal(err)
	}

	s, err = OpenStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	list := s.List()
	if len(list) != 1 || list[0].Pod.UID != "uid-b" || list[0].State != StateHandoverFailed || list[0].Reason != "forbidden" {
		t.Fatalf("after reopen: %+v", list)
	}
	if list[0].Pod.Spec.Containers[0].Image != storedImage {
		t.Errorf("pod spec not kept: %+v", list[0].Pod.Spec)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("files after reopen: %v, want uid-b.json only", entries)
	}

	if err := os.WriteFile(filepath.Join(dir, "uid-x.json"), []byte(`{"pod":`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenStore(dir); err == nil {
		t.Error("a torn record was accepted")
	}
}

// TestStoreListOrder: by namespace, then name, as the kubelet is served.
func TestStoreListOrder(t *testing.T) {
	s, err := OpenStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []Record{record("b", "x", "1"), record("a", "y", "2"), record("a", "x", "3")} {
		if err := s.Add(r); err != nil {
			t.Fatal(err)
		}
	}
	var got []types.UID
	for _, r := range s.List() {
		got = append(got, r.Pod.UID)
	}
	if want := []types.UID{"3", "2", "1"}; !slices.Equal(got, want) {
		t.Errorf("order %v, want %v", got, want)
	}
}
