package cache

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
)

// TestSecretsAndConfigMapsAreKeptAsBytes: a secret's and a configmap's
// store keep each version as kube-apiserver's protobuf bytes, without
// managedFields, and no typed object; protobuf readers get those bytes,
// typed readers an object equal to what was decoded, JSON readers its
// JSON, and a secret's type is in the index, its name and UID in its
// own bytes. A write of metadata alone
// shares the data's bytes with the version before; a write of the data
// shares nothing (its metadata has a new resourceVersion).
func TestSecretsAndConfigMapsAreKeptAsBytes(t *testing.T) {
	big := []byte(strings.Repeat("x", 1024))
	for _, tc := range []struct {
		kind string
		// version is the object at rv: annotated from rv 3 on, its data
		// changed at rv 4, being deleted at rv 5.
		version func(rv string) runtime.Object
		typ     string
	}{
		{"Secret", func(rv string) runtime.Object {
			s := &corev1.Secret{ObjectMeta: versionMeta(rv), Type: corev1.SecretTypeTLS,
				Data: map[string][]byte{"tls.crt": big, "tls.key": []byte("key")}}
			if rv >= "4" {
				s.Data["tls.key"] = []byte("rotated")
			}
			return s
		}, string(corev1.SecretTypeTLS)},
		{"ConfigMap", func(rv string) runtime.Object {
			c := &corev1.ConfigMap{ObjectMeta: versionMeta(rv), Data: map[string]string{"config.yaml": string(big[:512])},
				BinaryData: map[string][]byte{"logo.png": {0x89, 'P', 'N', 'G'}}}
			if rv >= "4" {
				c.Data["config.yaml"] = "changed"
			}
			return c
		}, ""},
	} {
		t.Run(tc.kind, func(t *testing.T) {
			s := newStore(servedKind(t, tc.kind), 16)
			if !s.asBytes {
				t.Fatalf("%s are kept decoded", tc.kind)
			}
			if err := s.Replace([]interface{}{tc.version("2")}, "2"); err != nil {
				t.Fatal(err)
			}
			for _, rv := range []string{"3", "4"} {
				if err := s.Update(tc.version(rv)); err != nil {
					t.Fatal(err)
				}
			}
			if err := s.Delete(tc.version("5")); err != nil {
				t.Fatal(err)
			}
			events, err := s.Snapshot().Changes(2)
			if err != nil {
				t.Fatal(err)
			}
			if len(events) != 3 || events[2].Type != watch.Deleted {
				t.Fatalf("events %v, want MODIFIED, MODIFIED, DELETED", events)
			}
			enc, err := NewEncoder(16)
			if err != nil {
				t.Fatal(err)
			}
			for i, rv := range []string{"3", "4", "5"} {
				o, want := events[i].Object, tc.version(rv)
				if o.obj != nil {
					t.Errorf("version %s is kept decoded", rv)
				}
				got, err := enc.EncodeProtobuf(s, o)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, kubeAPIServerBytes(t, tc.version(rv), tc.kind)) {
					t.Errorf("version %s: the protobuf readers get other bytes than kube-apiserver's", rv)
				}
				accessor, _ := meta.Accessor(want)
				accessor.SetManagedFields(nil)
				typed, err := o.Typed()
				if err != nil {
					t.Fatal(err)
				}
				if !equality.Semantic.DeepEqual(typed, want) {
					t.Errorf("version %s: the typed readers get another object than was decoded: %s", rv, cmp.Diff(want, typed))
				}
				js, err := enc.Encode(s, o)
				if err != nil {
					t.Fatal(err)
				}
				fromJSON := reflect.New(reflect.TypeOf(want).Elem()).Interface().(runtime.Object)
				if err := json.Unmarshal(js, fromJSON); err != nil {
					t.Fatal(err)
				}
				want.GetObjectKind().SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind(tc.kind))
				if !equality.Semantic.DeepEqual(fromJSON, want) {
					t.Errorf("version %s: the JSON readers get another object than was decoded: %s", rv, cmp.Diff(want, fromJSON))
				}
				if o.SecretType() != tc.typ || o.UID != accessor.GetUID() || !reflect.DeepEqual(o.Labels.Map(), accessor.GetLabels()) ||
					!reflect.DeepEqual(o.Deleting, accessor.GetDeletionTimestamp()) {
					t.Errorf("version %s: the index says type %q, UID %q, labels %v, deleting %v", rv, o.SecretType(), o.UID, o.Labels, o.Deleting)
				}
			}
			for _, e := range events {
				if o := e.Object; !inBytes(o.Name, o.raw.part[0]) || !inBytes(string(o.UID), o.raw.part[0]) {
					t.Errorf("version %d: the index's name and UID are not its own metadata's bytes", o.RV)
				}
			}
			annotated, rewritten := events[0], events[1]
			if !sameString(annotated.Object.raw.part[1], annotated.Prev.raw.part[1]) {
				t.Errorf("a write of metadata alone does not share the data's bytes with the version before")
			}
			if sameString(rewritten.Object.raw.part[1], rewritten.Prev.raw.part[1]) || sameString(rewritten.Object.raw.part[0], rewritten.Prev.raw.part[0]) {
				t.Errorf("a write of the data shares bytes with the version before")
			}
		})
	}
}

// TestTheIndexFitsItsSizeClasses: the index costs what it did before a
// Secret's type joined it. An Object is allocated in the 112-byte size
// class and a word more would move every object to 128; the segments,
// where the type's handle lives, in the 64-byte class. (Go's size
// classes, runtime/sizeclasses.go.)
func TestTheIndexFitsItsSizeClasses(t *testing.T) {
	if got := unsafe.Sizeof(Object{}); got > 112 {
		t.Errorf("an Object is %d bytes, past the 112-byte size class", got)
	}
	if got := unsafe.Sizeof(segments{}); got > 64 {
		t.Errorf("an object's segments are %d bytes, past the 64-byte size class", got)
	}
}

// versionMeta is the metadata of the objects of TestSecretsAndConfigMapsAreKeptAsBytes
// at rv, with managedFields, which the store drops.
func versionMeta(rv string) metav1.ObjectMeta {
	m := metav1.ObjectMeta{Namespace: "shop", Name: "web", UID: "6f0e4c1a-8b3d-4f7e-9a2c-1d5e7f9b3c4a", ResourceVersion: rv,
		Labels:        map[string]string{"app": "web"},
		ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationApply}}}
	if rv >= "3" {
		m.Annotations = map[string]string{"checksum": "a1b2"}
	}
	if rv >= "5" {
		m.DeletionTimestamp = &metav1.Time{Time: time.Unix(1_800_000_000, 0)}
	}
	return m
}
