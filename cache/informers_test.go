package cache

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"
)

func TestStripManagedFields(t *testing.T) {
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{
		Name:          "s",
		ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationApply}},
	}}
	out, err := StripManagedFields(secret)
	if err != nil {
		t.Fatal(err)
	}
	if got := out.(*corev1.Secret); got.ManagedFields != nil || got.Name != "s" {
		t.Errorf("after transform: name %q, managedFields %v", got.Name, got.ManagedFields)
	}

	tomb := toolscache.DeletedFinalStateUnknown{Key: "ns/s", Obj: secret}
	if out, err := StripManagedFields(tomb); err != nil || out.(toolscache.DeletedFinalStateUnknown).Key != "ns/s" {
		t.Errorf("tombstone: %v, %v", out, err)
	}
	if out, err := StripManagedFields("not an object"); err != nil || out != "not an object" {
		t.Errorf("non-object: %v, %v", out, err)
	}
}
