package endpoint

import (
	"errors"
	"net/http"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apiserver/pkg/endpoints/handlers/negotiation"
	"k8s.io/klog/v2"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	nodev1 "k8s.io/api/node/v1"
	storagev1 "k8s.io/api/storage/v1"
)

// The endpoint's scheme holds the groups whose reads the hub may answer
// (core/v1, and the cluster-wide types of clusterWide), the node's Lease
// (coordination/v1, which the endpoint remembers: lease.go), Status and
// the watch event, rather than client-go's scheme of every API group: the
// endpoint runs on every node, and what it links it keeps in memory.
var (
	scheme       = runtime.NewScheme()
	codecFactory = serializer.NewCodecFactory(scheme)
	// codecs encodes as kube-apiserver does: JSON, YAML or protobuf as
	// the request negotiates.
	codecs         = codecFactory.WithoutConversion()
	deserializer   = codecFactory.UniversalDeserializer()
	parameterCodec = runtime.NewParameterCodec(scheme)
	coreV1         = schema.GroupVersion{Version: "v1"}
)

func init() {
	for _, add := range []func(*runtime.Scheme) error{
		corev1.AddToScheme, coordinationv1.AddToScheme, discoveryv1.AddToScheme, networkingv1.AddToScheme, nodev1.AddToScheme, storagev1.AddToScheme,
	} {
		utilruntime.Must(add(scheme))
	}
	// Status, ListOptions (and its query parameters), WatchEvent under v1.
	metav1.AddToGroupVersion(scheme, coreV1)
}

// writeObject encodes obj in the media type req negotiates, as
// kube-apiserver answers a get or a list. An Accept header the endpoint
// cannot honour is 406.
func writeObject(w http.ResponseWriter, req *http.Request, status int, obj runtime.Object) {
	writeObjectIn(w, req, status, obj, coreV1)
}

// writeObjectIn is writeObject for an object of group version gv.
func writeObjectIn(w http.ResponseWriter, req *http.Request, status int, obj runtime.Object, gv schema.GroupVersion) {
	_, info, err := negotiation.NegotiateOutputMediaType(req, codecs, negotiation.DefaultEndpointRestrictions)
	if err != nil {
		info = jsonInfo()
		status, obj = http.StatusNotAcceptable, statusOf(err)
	}
	w.Header().Set("Content-Type", info.MediaType)
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	if status == http.StatusNotAcceptable {
		gv = coreV1 // the Status
	}
	if err := codecs.EncoderForVersion(info.Serializer, gv).Encode(obj, w); err != nil {
		klog.V(2).InfoS("Writing a response to the kubelet", "err", err)
	}
}

// writeError answers err as a Status, with its code, as kube-apiserver
// words errors.
func writeError(w http.ResponseWriter, req *http.Request, err error) {
	s := statusOf(err)
	writeObject(w, req, int(s.Code), s)
}

// statusOf is err as a Status: an API error's own, or a 500.
func statusOf(err error) *metav1.Status {
	var api apierrors.APIStatus
	if errors.As(err, &api) {
		s := api.Status()
		return &s
	}
	return &apierrors.NewInternalError(err).ErrStatus
}

// jsonInfo is the serializer for answers that cannot be negotiated.
func jsonInfo() runtime.SerializerInfo {
	info, _ := runtime.SerializerInfoForMediaType(codecs.SupportedMediaTypes(), runtime.ContentTypeJSON)
	return info
}
