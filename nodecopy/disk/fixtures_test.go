package disk

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

const (
	testNode    = "node-a"
	testCluster = "sha256:0f1e2d3c"
	// secretValue is in every fixture secret: errors must never quote it.
	secretValue = "hunter2-do-not-log"
)

// testKey is a fixed key named by a word, so that two keys differ.
func testKey(word string) []byte {
	k := sha256.Sum256([]byte(word))
	return k[:]
}

// objectsOf returns n objects of the view, about size bytes of JSON each,
// cycling through a secret, a configmap and a pod as the node's view
// holds them.
func objectsOf(t testing.TB, n, size int) []Object {
	t.Helper()
	out := make([]Object, 0, n)
	for i := 0; i < n; i++ {
		meta := metav1.ObjectMeta{
			Name: fmt.Sprintf("obj-%d", i), Namespace: "default", UID: types.UID(fmt.Sprintf("7d6c5b4a-0000-4000-8000-%012d", i)),
			ResourceVersion: fmt.Sprint(700 + i), CreationTimestamp: metav1.NewTime(time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)),
			Labels: map[string]string{"app": "web", "tier": "<frontend>"},
		}
		fill := strings.Repeat("x", size)
		var obj any
		var resource string
		switch i % 3 {
		case 0:
			resource = "secrets"
			obj = &corev1.Secret{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"}, ObjectMeta: meta, Type: corev1.SecretTypeOpaque,
				Data: map[string][]byte{"password": []byte(secretValue), "blob": []byte(fill[:size*3/4])}}
		case 1:
			resource = "configmaps"
			obj = &corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"}, ObjectMeta: meta,
				Data: map[string]string{"app.conf": fill}}
		default:
			resource = "pods"
			obj = &corev1.Pod{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"}, ObjectMeta: meta, Spec: corev1.PodSpec{
				NodeName: testNode,
				Containers: []corev1.Container{{Name: "web", Image: "registry.k8s.io/pause:3.10",
					Env: []corev1.EnvVar{{Name: "FILL", Value: fill[:size/2]}}}},
				Volumes: []corev1.Volume{{Name: "s", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "obj-0"}}}},
			}}
		}
		raw, err := json.Marshal(obj)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, Object{Resource: resource, Raw: raw})
	}
	return out
}

func snapshotOf(t testing.TB, position string, n int) *Snapshot {
	t.Helper()
	return &Snapshot{
		Node: testNode, Cluster: testCluster, Position: position,
		SavedAt: time.Date(2026, 11, 26, 7, 0, 0, 0, time.UTC),
		Objects: objectsOf(t, n, 600),
	}
}

// openStore opens a store in a fresh directory.
func openStore(t *testing.T, key []byte) *Store {
	t.Helper()
	s, err := Open(t.TempDir()+"/view", key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func b64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

// roundTrip saves want to s, fails the test unless Load returns it as it
// was, and returns the file as saved.
func roundTrip(t *testing.T, s *Store, want *Snapshot) []byte {
	t.Helper()
	if err := s.Save(want); err != nil {
		t.Fatal(err)
	}
	got, err := s.Load(testNode, testCluster)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("loaded %+v\nsaved %+v", got, want)
	}
	b, err := os.ReadFile(s.Path())
	if err != nil {
		t.Fatal(err)
	}
	return b
}
