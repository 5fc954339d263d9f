package relay

import (
	"bytes"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/streaming"
	"k8s.io/apimachinery/pkg/watch"
	restclientwatch "k8s.io/client-go/rest/watch"
)

// TestPassedThroughAsKubeAPIServerWrites: an object the hub sends in the
// watch's media type is written as it came, and the bytes are those of
// kube-apiserver's watch encoder (client-go's watch encoder, which
// kube-apiserver's WatchServer uses: the object encoded, embedded in a
// metav1.WatchEvent, framed) for the typed object; so are those of an
// object that came in the other encoding and was decoded and encoded
// again.
func TestPassedThroughAsKubeAPIServerWrites(t *testing.T) {
	for _, mediaType := range []string{runtime.ContentTypeProtobuf, runtime.ContentTypeJSON} {
		for _, obj := range []runtime.Object{endpointSlice(), secret()} {
			for _, typ := range []watch.EventType{watch.Added, watch.Modified, watch.Deleted, watch.Bookmark} {
				name := mediaType + "/" + obj.GetObjectKind().GroupVersionKind().Kind + "/" + string(typ)
				t.Run(name, func(t *testing.T) {
					info := streamInfo(t, mediaType)
					var want bytes.Buffer
					apiserver := restclientwatch.NewEncoder(
						streaming.NewEncoder(info.StreamSerializer.Framer.NewFrameWriter(&want),
							testCodecs.Encoders.EncoderForVersion(info.StreamSerializer.Serializer, testGV)),
						testCodecs.Encoders.EncoderForVersion(info.Serializer, gvOf(obj)))
					if err := apiserver.Encode(&watch.Event{Type: typ, Object: obj}); err != nil {
						t.Fatal(err)
					}
					for _, sent := range []string{runtime.ContentTypeProtobuf, runtime.ContentTypeJSON} {
						var got bytes.Buffer
						w := NewWriter(&got, info, testCodecs, gvOf(obj))
						written, err := w.Write(hubEvent(t, typ, obj, sent))
						if err != nil {
							t.Fatal(err)
						}
						if written.Type != typ || written.Reencoded != (sent != mediaType) {
							t.Errorf("the hub's %s: written %+v, want type %s, reencoded %v", sent, written, typ, sent != mediaType)
						}
						if !bytes.Equal(got.Bytes(), want.Bytes()) {
							t.Errorf("the hub's %s: wrote\n%q\nwant kube-apiserver's\n%q", sent, got.Bytes(), want.Bytes())
						}
					}
				})
			}
		}
	}
}

// TestWriterAsksForWhatItPassesThrough: only a protobuf watch asks the
// hub for protobuf.
func TestWriterAsksForWhatItPassesThrough(t *testing.T) {
	for mediaType, want := range map[string]bool{runtime.ContentTypeProtobuf: true, runtime.ContentTypeJSON: false} {
		if got := NewWriter(&bytes.Buffer{}, streamInfo(t, mediaType), testCodecs, testGV).Protobuf(); got != want {
			t.Errorf("%s: Protobuf() = %v, want %v", mediaType, got, want)
		}
	}
}

// TestUndecodableObjectEndsTheWatch: an object the endpoint cannot read
// becomes the watch's ERROR, an internal error, so the client lists again.
func TestUndecodableObjectEndsTheWatch(t *testing.T) {
	var out bytes.Buffer
	info := streamInfo(t, runtime.ContentTypeProtobuf)
	w := NewWriter(&out, info, testCodecs, testGV)
	written, err := w.Write(hubEventRaw(watch.Modified, []byte(`{"kind":"Secret","apiVersion":"v1","metadata":`)))
	if err != nil {
		t.Fatal(err)
	}
	if written.Type != watch.Error || !written.Reencoded {
		t.Fatalf("written %+v, want an ERROR", written)
	}
	dec := restclientwatch.NewDecoder(streaming.NewDecoder(info.StreamSerializer.Framer.NewFrameReader(nopCloser{&out}), info.StreamSerializer.Serializer), testCodecs.Decoder)
	typ, obj, err := dec.Decode()
	if err != nil {
		t.Fatal(err)
	}
	if typ != watch.Error || obj.GetObjectKind().GroupVersionKind().Kind != "Status" {
		t.Errorf("read %s %T, want an ERROR with a Status", typ, obj)
	}
}
