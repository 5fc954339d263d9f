package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// +genclient
// +genclient:nonNamespaced
// +genclient:onlyVerbs=create
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// BulkGetOperation lists, in one request, the objects each of its
// operations selects. It is created, never stored: the answer comes back
// in status, one result per operation, in order.
type BulkGetOperation struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   BulkGetOperationSpec   `json:"spec"`
	Status BulkGetOperationStatus `json:"status,omitempty"`
}

// BulkGetOperationSpec is what to list.
type BulkGetOperationSpec struct {
	// Operations are answered in order; each may name a different resource.
	// +listType=atomic
	Operations []GetOperation `json:"operations"`
}

// GetOperation selects objects of one resource type, with the options of
// a list request. It is also the selector of a bulk watch channel.
type GetOperation struct {
	// Resource is the resource type, for example {group: "", version: v1,
	// resource: secrets}.
	Resource metav1.GroupVersionResource `json:"resource"`
	// Namespace limits the operation to one namespace; empty means all
	// namespaces, and must be empty for cluster-scoped resources.
	// +optional
	Namespace string `json:"namespace,omitempty"`
	// Options are those of a list request: labelSelector, fieldSelector,
	// resourceVersion, limit and continue; for watch channels also
	// allowWatchBookmarks and sendInitialEvents.
	// +optional
	Options metav1.ListOptions `json:"options,omitempty"`
}

// BulkGetOperationStatus holds the answer.
type BulkGetOperationStatus struct {
	// Results has one list per operation, in the order of spec.operations,
	// each shaped like the resource's own list (kind SecretList, ...).
	// +listType=atomic
	// +optional
	Results []runtime.RawExtension `json:"results,omitempty"`
}
