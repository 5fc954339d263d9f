package nodeview

import (
	"encoding/json"
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/component-base/metrics/testutil"
)

// TestProtobufAndJSONViewsCarryTheSameObjects opens a node's view twice,
// one asking for protobuf (the node endpoint) and one not (an older
// endpoint), and puts both through the same changes: each gets the same
// events, in the same order, of the same objects; the protobuf view's
// objects come as protobuf, and a pod's status write reaches it without
// a decode.
func TestProtobufAndJSONViewsCarryTheSameObjects(t *testing.T) {
	r := newReplica(t, 256)
	var k cluster
	p1 := pod("p1", "n1", "secret/s1", "configmap/c1")
	for _, w := range []write{
		k.put(secretsGVR, secret("s1", "a")),
		k.put(secretsGVR, secret("s2", "a")),
		k.put(cmGVR, configMap("c1", "a")),
		k.put(nodesGVR, node("n1", "a")),
		k.put(servicesGVR, service("web")),
		k.put(podsGVR, p1),
	} {
		r.write(w)
	}
	inJSON, inProtobuf := r.openIn("n1", nil, false), r.openIn("n1", nil, true)
	r.views.Step()
	same := func(what string) {
		t.Helper()
		j, p := inJSON.read(), inProtobuf.read()
		expect(t, what+": events", p, j...)
		if len(j) == 0 {
			t.Fatalf("%s: no events", what)
		}
		for i := range inJSON.objects {
			var a, b map[string]any
			if err := json.Unmarshal(inJSON.objects[i].object, &a); err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(inProtobuf.objects[i].object, &b); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(a, b) {
				t.Errorf("%s: %s differs:\n JSON view     %s\n protobuf view %s", what, j[min(i, len(j)-1)], inJSON.objects[i].object, inProtobuf.objects[i].object)
			}
		}
		inJSON.objects, inProtobuf.objects = nil, nil
	}
	same("initial state")

	sameSpec := func() float64 {
		v, err := testutil.GetCounterMetricValue(podReadCounters[1])
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	before := sameSpec()
	p1 = p1.DeepCopy()
	p1.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.0.7", Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
	r.write(k.put(podsGVR, p1))
	r.views.Step()
	same("a status write")
	if got := sameSpec() - before; got != 2 {
		t.Errorf("a status write read its references %v times from the version before, want 2 (one per view)", got)
	}

	p1 = p1.DeepCopy()
	p1.Spec.Volumes = append(p1.Spec.Volumes, corev1.Volume{Name: "more", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "s2"}}})
	r.write(k.put(podsGVR, p1))
	r.views.Step()
	same("a spec change that uses one more secret")

	r.write(k.put(secretsGVR, secret("s1", "b")))
	r.write(k.del(podsGVR, p1.DeepCopy()))
	r.views.Step()
	same("a secret's change, then the pod's deletion")

	if inProtobuf.protobufEvents == 0 {
		t.Error("the protobuf view was sent no protobuf")
	}
}
