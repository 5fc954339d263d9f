package endpoint

import (
	"fmt"
	"net/http"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/endpoints/handlers/negotiation"
	"k8s.io/klog/v2"

	"github.com/nodeproxy/nodeproxy/nodecopy"
)

// writeCopyObject answers a get with o, one of the copy's objects. A
// client that negotiates protobuf (the kubelet, by default) gets a
// protobuf object's bytes as the copy keeps them, which are what
// kube-apiserver's protobuf encoder writes for it; any other client, or
// an object the copy keeps as JSON, gets it decoded and encoded as
// kube-apiserver would (writeObjectIn).
func writeCopyObject(w http.ResponseWriter, req *http.Request, o *nodecopy.Object, gv schema.GroupVersion) {
	if nodecopy.IsProtobuf(o.Raw) && negotiatesProtobuf(req) {
		copyWritten(false).Inc()
		writeProtobuf(w, o.Raw)
		return
	}
	obj, err := runtime.Decode(deserializer, o.Raw)
	if err != nil {
		writeError(w, req, apierrors.NewInternalError(fmt.Errorf("decode the copy's object: %w", err)))
		return
	}
	copyWritten(true).Inc()
	writeObjectIn(w, req, http.StatusOK, obj, gv)
}

// writeCopyList answers a list with objs, the copy's objects, at rv: for
// a client that negotiates protobuf, made of the objects' bytes as the
// copy keeps them where it keeps them all as protobuf
// (nodecopy.ProtobufList); else the objects decoded into a typed list
// and encoded as kube-apiserver would.
func writeCopyList(w http.ResponseWriter, req *http.Request, gvk schema.GroupVersionKind, objs []*nodecopy.Object, rv uint64) {
	gv := gvk.GroupVersion()
	if negotiatesProtobuf(req) {
		if b, err := nodecopy.ProtobufList(gv.String(), gvk.Kind, rv, objs); err == nil {
			copyWritten(false).Add(float64(len(objs)))
			writeProtobuf(w, b)
			return
		}
	}
	out, err := listOf(gvk, objs, rv)
	if err != nil {
		writeError(w, req, apierrors.NewInternalError(err))
		return
	}
	copyWritten(true).Add(float64(len(objs)))
	writeObjectIn(w, req, http.StatusOK, out, gv)
}

// negotiatesProtobuf says whether req's answer is to be in
// kube-apiserver's protobuf.
func negotiatesProtobuf(req *http.Request) bool {
	_, info, err := negotiation.NegotiateOutputMediaType(req, codecs, negotiation.DefaultEndpointRestrictions)
	return err == nil && info.MediaType == runtime.ContentTypeProtobuf
}

// writeProtobuf answers 200 with b, an object or a list in
// kube-apiserver's protobuf, with the headers kube-apiserver sends.
func writeProtobuf(w http.ResponseWriter, b []byte) {
	w.Header().Set("Content-Type", runtime.ContentTypeProtobuf)
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	if _, err := w.Write(b); err != nil {
		klog.V(2).InfoS("Writing a response to the kubelet", "err", err)
	}
}
