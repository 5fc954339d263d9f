package bulk

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/nodeproxy/nodeproxy/apis/bulk/v1alpha1"
	"github.com/nodeproxy/nodeproxy/cache"
)

func TestEveryServedTypeHasItsFields(t *testing.T) {
	for _, r := range cache.Resources {
		s, ok := selectableFields[r.Resource]
		if !ok {
			t.Errorf("%s: no selectable fields", r)
			continue
		}
		for f := range s.evaluated {
			if _, known := s.known[f]; !known {
				t.Errorf("%s: %s is evaluated but kube-apiserver does not know it", r, f)
			}
		}
	}
}

// TestServiceSelectorsOfKubeletAndKubeProxy evaluates the selectors the
// kubelet and kube-proxy send on services, set-based label selectors
// included, against services of each kind. (The same comparisons against
// kube-apiserver itself: bulk/get's TestSelectorsAsKubeAPIServerEvaluatesThem.)
func TestServiceSelectorsOfKubeletAndKubeProxy(t *testing.T) {
	c, err := cache.New(fake.NewClientset(), cache.Options{LogSize: 16, EncodedEntries: 16})
	if err != nil {
		t.Fatal(err)
	}
	store := c.Store(corev1.SchemeGroupVersion.WithResource("services"))
	stores := func(metav1.GroupVersionResource) *cache.Store { return store }
	svc := func(name, clusterIP string, labels map[string]string) *cache.Object {
		o, err := cache.NewObject(&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, Labels: labels, ResourceVersion: "1"},
			Spec: corev1.ServiceSpec{ClusterIP: clusterIP, Type: corev1.ServiceTypeClusterIP}})
		if err != nil {
			t.Fatal(err)
		}
		return o
	}
	objects := []*cache.Object{
		svc("plain", "10.0.0.1", nil),
		svc("headless", "None", nil),
		svc("external", "", nil),
		svc("other-proxy", "10.0.0.2", map[string]string{"service.kubernetes.io/service-proxy-name": "other"}),
	}
	for _, tc := range []struct {
		name, fields, labels string
		want                 []string
	}{
		{"kubelet", "spec.clusterIP!=None", "", []string{"plain", "external", "other-proxy"}},
		{"kube-proxy", "spec.clusterIP!=None", "!service.kubernetes.io/service-proxy-name", []string{"plain", "external"}},
		{"!= on an empty field", "spec.clusterIP!=", "", []string{"plain", "headless", "other-proxy"}},
		{"= on an empty field", "spec.clusterIP=", "", []string{"external"}},
		{"exists", "", "service.kubernetes.io/service-proxy-name", []string{"other-proxy"}},
		{"in", "", "service.kubernetes.io/service-proxy-name in (other, x)", []string{"other-proxy"}},
		{"notin selects the unlabelled too", "", "service.kubernetes.io/service-proxy-name notin (other)", []string{"plain", "headless", "external"}},
		{"type", "spec.type==ClusterIP,metadata.name!=plain", "", []string{"headless", "external", "other-proxy"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sel := &v1alpha1.GetOperation{Options: metav1.ListOptions{FieldSelector: tc.fields, LabelSelector: tc.labels}}
			q, errs, err := parseWatch(sel, stores, nil)
			if err != nil || len(errs) > 0 {
				t.Fatal(err, errs)
			}
			var got []string
			for _, o := range objects {
				if q.Matches(o, nil) {
					got = append(got, o.Name)
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("selected %v, want %v", got, tc.want)
			}
		})
	}
}
