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

	corev1 "k8s.io/api/core/v1"
)

// The endpoint serves core/v1 only. Its scheme holds those types, Status
// and the watch event, rather than client-go's scheme of every API group:
// the endpoint runs on every node, and what it links it keeps in memory.
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
	utilruntime.Must(corev1.AddToScheme(scheme))
	// Status, ListOptions (and its query parameters), WatchEvent under v1.
	metav1.AddToGroupVersion(scheme, coreV1)
}

// writeObject encodes obj in the media type req negotiates, as
// kube-apiserver answers a get or a list. An Accept header the endpoint
// cannot honour is 406.
func writeObject(w http.ResponseWriter, req *http.Request, status int, obj runtime.Object) {
	_, info, err := negotiation.NegotiateOutputMediaType(req, codecs, negotiation.DefaultEndpointRestrictions)
	if err != nil {
		info = jsonInfo()
		status, obj = http.StatusNotAcceptable, statusOf(err)
	}
	w.Header().Set("Content-Type", info.MediaType)
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	if err := codecs.EncoderForVersion(info.Serializer, coreV1).Encode(obj, w); err != nil {
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
