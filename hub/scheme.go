package hub

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"

	"github.com/nodeproxy/nodeproxy/apis/bulk/v1alpha1"
)

var (
	// scheme holds the types nodeproxy's server encodes: the unversioned
	// meta types the generic server answers with (Status, APIVersions,
	// APIGroupList, ...) and bulk.k8s.io.
	scheme = runtime.NewScheme()
	codecs = serializer.NewCodecFactory(scheme)
)

func init() {
	metav1.AddToGroupVersion(scheme, schema.GroupVersion{Version: "v1"})
	unversioned := schema.GroupVersion{Group: "", Version: "v1"}
	scheme.AddUnversionedTypes(unversioned,
		&metav1.Status{},
		&metav1.APIVersions{},
		&metav1.APIGroupList{},
		&metav1.APIGroup{},
		&metav1.APIResourceList{},
	)
	utilruntime.Must(v1alpha1.AddToScheme(scheme))
	// The generic server decodes requests into an internal version and
	// encodes responses from it. bulk.k8s.io has one version, so its
	// types are their own internal version: no conversion code, and a
	// second version would bring real internal types.
	scheme.AddKnownTypes(schema.GroupVersion{Group: v1alpha1.GroupName, Version: runtime.APIVersionInternal}, &v1alpha1.BulkGetOperation{})
}
