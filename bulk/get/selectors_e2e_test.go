package get_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	nodev1 "k8s.io/api/node/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/nodeproxy/nodeproxy/apis/bulk/v1alpha1"
	"github.com/nodeproxy/nodeproxy/test/bulke2e"
	"github.com/nodeproxy/nodeproxy/test/testserver"
)

// selectorCase is one list, asked of kube-apiserver and of the hub.
type selectorCase struct {
	resource       schema.GroupVersionResource
	namespaced     bool // in the test's namespace; else every namespace, or cluster-scoped
	fields, labels string
}

var (
	servicesGVR       = corev1.SchemeGroupVersion.WithResource("services")
	endpointSlicesGVR = discoveryv1.SchemeGroupVersion.WithResource("endpointslices")
	serviceCIDRsGVR   = networkingv1.SchemeGroupVersion.WithResource("servicecidrs")
	runtimeClassesGVR = nodev1.SchemeGroupVersion.WithResource("runtimeclasses")
	csiDriversGVR     = storagev1.SchemeGroupVersion.WithResource("csidrivers")
	nodesGVR          = corev1.SchemeGroupVersion.WithResource("nodes")
	secretsGVR        = corev1.SchemeGroupVersion.WithResource("secrets")
)

// selectorCases are the selectors kubelets and kube-proxy send, and around
// them every operator on every field kube-apiserver selects these types
// by, including != and = on a field that is empty (an ExternalName
// service has no clusterIP) and on one a cluster-scoped type does not have
// (metadata.namespace).
var selectorCases = []selectorCase{
	// the kubelet's service informer
	{resource: servicesGVR, fields: "spec.clusterIP!=None"},
	// kube-proxy's
	{resource: servicesGVR, labels: "!service.kubernetes.io/service-proxy-name", fields: "spec.clusterIP!=None"},
	{resource: servicesGVR, namespaced: true, labels: "!service.kubernetes.io/service-proxy-name", fields: "spec.clusterIP!=None"},
	{resource: servicesGVR, namespaced: true},
	{resource: servicesGVR, namespaced: true, fields: "spec.clusterIP=None"},
	{resource: servicesGVR, namespaced: true, fields: "spec.clusterIP="},
	{resource: servicesGVR, namespaced: true, fields: "spec.clusterIP!="},
	{resource: servicesGVR, namespaced: true, fields: "spec.clusterIP==None"},
	{resource: servicesGVR, namespaced: true, fields: "spec.type=NodePort"},
	{resource: servicesGVR, namespaced: true, fields: "spec.type!=ClusterIP,metadata.name!=nodeport"},
	{resource: servicesGVR, namespaced: true, fields: "metadata.name=plain"},
	{resource: servicesGVR, namespaced: true, fields: "metadata.namespace!=elsewhere"},
	{resource: servicesGVR, namespaced: true, fields: "metadata.namespace=elsewhere"},
	{resource: servicesGVR, namespaced: true, labels: "service.kubernetes.io/service-proxy-name"},
	{resource: servicesGVR, namespaced: true, labels: "service.kubernetes.io/service-proxy-name in (other,third)"},
	{resource: servicesGVR, namespaced: true, labels: "service.kubernetes.io/service-proxy-name notin (other)"},
	{resource: servicesGVR, namespaced: true, labels: "tier=gold,tier!=silver"},
	// kube-proxy's endpointslice informer
	{resource: endpointSlicesGVR, labels: "!service.kubernetes.io/headless"},
	{resource: endpointSlicesGVR, namespaced: true, labels: "!service.kubernetes.io/headless"},
	{resource: endpointSlicesGVR, namespaced: true, labels: "service.kubernetes.io/headless"},
	{resource: endpointSlicesGVR, namespaced: true, labels: "kubernetes.io/service-name in (plain)"},
	{resource: endpointSlicesGVR, namespaced: true, fields: "metadata.name!=es-plain"},
	{resource: serviceCIDRsGVR},
	{resource: serviceCIDRsGVR, fields: "metadata.name!=kubernetes"},
	{resource: runtimeClassesGVR},
	{resource: runtimeClassesGVR, fields: "metadata.name=rc-a"},
	{resource: runtimeClassesGVR, fields: "metadata.name!=rc-a"},
	{resource: runtimeClassesGVR, fields: "metadata.namespace=x"},
	{resource: runtimeClassesGVR, fields: "metadata.namespace!=x"},
	{resource: runtimeClassesGVR, fields: "metadata.namespace="},
	{resource: runtimeClassesGVR, labels: "tier"},
	{resource: csiDriversGVR},
	{resource: csiDriversGVR, fields: "metadata.name!=a.example.com", labels: "!tier"},
	// a Secret's type, which the hub reads from its index (secrets are
	// kept as bytes): one without data, and one whose type names none
	// of kube-apiserver's
	{resource: secretsGVR, namespaced: true},
	{resource: secretsGVR, namespaced: true, fields: "type=Opaque"},
	{resource: secretsGVR, namespaced: true, fields: "type==kubernetes.io/tls"},
	{resource: secretsGVR, namespaced: true, fields: "type!=Opaque"},
	{resource: secretsGVR, namespaced: true, fields: "type=example.com/custom"},
	{resource: secretsGVR, namespaced: true, fields: "type="},
	// kubectl's and controllers' selectors of cordoned nodes: the hub
	// keeps Nodes as bytes, with spec.unschedulable beside them.
	{resource: nodesGVR, fields: "spec.unschedulable=true"},
	{resource: nodesGVR, fields: "spec.unschedulable!=true"},
	{resource: nodesGVR, fields: "spec.unschedulable=false"},
	{resource: nodesGVR, fields: "spec.unschedulable==true,metadata.name!=nobody"},
	{resource: secretsGVR, namespaced: true, fields: "type!="},
	{resource: secretsGVR, namespaced: true, fields: "type!=Opaque,metadata.name!=tls"},
	{resource: secretsGVR, namespaced: true, fields: "type=Opaque", labels: "tier=gold"},
}

// refusedCases are field selectors kube-apiserver does not know.
var refusedCases = []selectorCase{
	{resource: servicesGVR, namespaced: true, fields: "spec.externalName=example.com"},
	{resource: endpointSlicesGVR, namespaced: true, fields: "addressType=IPv4"},
	{resource: runtimeClassesGVR, fields: "handler=a"},
	{resource: csiDriversGVR, fields: "spec.attachRequired=true"},
	{resource: serviceCIDRsGVR, fields: "metadata.name=kubernetes,spec.cidrs=10.0.0.0/24"},
	{resource: nodesGVR, fields: "metadata.namespace=x"},
	{resource: secretsGVR, namespaced: true, fields: "data.password=x"},
}

// TestSelectorsAsKubeAPIServerEvaluatesThem creates services, endpoint
// slices, secrets, runtime classes, CSI drivers and a service CIDR, then asks
// kube-apiserver and the hub the same lists, once the hub holds every
// object made: the hub must select the same objects, in the same order,
// and refuse what kube-apiserver refuses with its status and its words.
func TestSelectorsAsKubeAPIServerEvaluatesThem(t *testing.T) {
	srv := bulke2e.StartNodeproxy(t, cp, npPort)
	ctx := context.Background()
	ns := bulke2e.Namespace("selectors")
	if err := cp.EnsureNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	admin := kubernetes.NewForConfigOrDie(cp.AdminConfig())
	createClusterWideObjects(t, admin, ns)
	dyn := dynamic.NewForConfigOrDie(cp.AdminConfig())
	hub := bulke2e.Direct(t, srv, cp.AdminConfig())

	// The hub's stores move on with their own type's changes, not with
	// kube-apiserver's revision: wait until each holds every object made,
	// then compare each selection once.
	for _, gvr := range []schema.GroupVersionResource{servicesGVR, endpointSlicesGVR, serviceCIDRsGVR, runtimeClassesGVR, csiDriversGVR, nodesGVR} {
		everything := selectorCase{resource: gvr}
		testserver.Eventually(t, 30*time.Second, "the hub holds every "+gvr.Resource, func(ctx context.Context) error {
			return sameSelection(ctx, t, dyn, hub, everything, "")
		})
	}
	testserver.Eventually(t, 30*time.Second, "the hub holds every secret of "+ns, func(ctx context.Context) error {
		return sameSelection(ctx, t, dyn, hub, selectorCase{resource: secretsGVR, namespaced: true}, ns)
	})
	for _, tc := range selectorCases {
		t.Run(tc.String(), func(t *testing.T) {
			if err := sameSelection(ctx, t, dyn, hub, tc, ns); err != nil {
				t.Error(err)
			}
		})
	}
	for _, tc := range refusedCases {
		t.Run("refused "+tc.String(), func(t *testing.T) {
			namespace := tc.namespace(ns)
			_, err := dyn.Resource(tc.resource).Namespace(namespace).List(ctx, metav1.ListOptions{FieldSelector: tc.fields})
			var want *apierrors.StatusError
			if !errors.As(err, &want) || want.ErrStatus.Code != http.StatusBadRequest {
				t.Fatalf("kube-apiserver answered %v; the case expects its 400", err)
			}
			code, _, got := hub.Post(t, tc.request(namespace))
			wantMessage := "spec.operations[0].options.fieldSelector: " + want.ErrStatus.Message
			if code != int(want.ErrStatus.Code) || got.Reason != want.ErrStatus.Reason || got.Message != wantMessage {
				t.Errorf("hub: %d %s %q; kube-apiserver: %d %s %q", code, got.Reason, got.Message, want.ErrStatus.Code, want.ErrStatus.Reason, wantMessage)
			}
		})
	}
}

// sameSelection asks kube-apiserver and the hub for tc and compares what
// they select.
func sameSelection(ctx context.Context, t *testing.T, dyn dynamic.Interface, hub bulke2e.Endpoint, tc selectorCase, ns string) error {
	namespace := tc.namespace(ns)
	list, err := dyn.Resource(tc.resource).Namespace(namespace).List(ctx, metav1.ListOptions{FieldSelector: tc.fields, LabelSelector: tc.labels})
	if err != nil {
		return fmt.Errorf("kube-apiserver: %w", err)
	}
	var want []string
	for _, o := range list.Items {
		want = append(want, o.GetNamespace()+"/"+o.GetName())
	}
	code, out, status := hub.Post(t, tc.request(namespace))
	if code != http.StatusCreated {
		return fmt.Errorf("hub: %d %v", code, status)
	}
	if got := keys(t, out); !slices.Equal(got, want) {
		return fmt.Errorf("hub selects %v; kube-apiserver %v", got, want)
	}
	return nil
}

func (tc selectorCase) String() string {
	s := tc.resource.Resource
	if tc.namespaced {
		s += " in a namespace"
	}
	return s + " fields=" + tc.fields + " labels=" + tc.labels
}

func (tc selectorCase) namespace(ns string) string {
	if tc.namespaced {
		return ns
	}
	return ""
}

// request is the bulk get of tc in namespace.
func (tc selectorCase) request(namespace string) string {
	op := v1alpha1.GetOperation{
		Resource:  metav1.GroupVersionResource{Group: tc.resource.Group, Version: tc.resource.Version, Resource: tc.resource.Resource},
		Namespace: namespace,
		Options:   metav1.ListOptions{FieldSelector: tc.fields, LabelSelector: tc.labels},
	}
	b, err := json.Marshal(op)
	if err != nil {
		panic(err)
	}
	return bulke2e.Request(string(b))
}

// keys are result 0's objects as namespace/name, in the order listed.
func keys(t *testing.T, out *v1alpha1.BulkGetOperation) []string {
	t.Helper()
	var list struct {
		Items []struct {
			Metadata metav1.ObjectMeta `json:"metadata"`
		} `json:"items"`
	}
	if err := json.Unmarshal(out.Status.Results[0].Raw, &list); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, it := range list.Items {
		got = append(got, it.Metadata.Namespace+"/"+it.Metadata.Name)
	}
	return got
}

// createClusterWideObjects makes, in ns: services of each kind (one
// headless, one ExternalName without a clusterIP, one for another proxy),
// endpoint slices with and without the headless label, and secrets of
// three types (Opaque with and without data, TLS, and a type of the
// user's own); and, cluster
// wide, two runtime classes, two CSI drivers and a service CIDR. The
// cluster-wide ones are made once per control plane.
func createClusterWideObjects(t *testing.T, admin kubernetes.Interface, ns string) {
	t.Helper()
	ctx := context.Background()
	port := []corev1.ServicePort{{Port: 80}}
	services := []*corev1.Service{
		{ObjectMeta: metav1.ObjectMeta{Name: "plain", Labels: map[string]string{"tier": "gold"}}, Spec: corev1.ServiceSpec{Ports: port}},
		{ObjectMeta: metav1.ObjectMeta{Name: "headless", Labels: map[string]string{"tier": "silver"}}, Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Ports: port}},
		{ObjectMeta: metav1.ObjectMeta{Name: "external"}, Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "example.com"}},
		{ObjectMeta: metav1.ObjectMeta{Name: "nodeport"}, Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, Ports: port}},
		{ObjectMeta: metav1.ObjectMeta{Name: "other-proxy", Labels: map[string]string{"service.kubernetes.io/service-proxy-name": "other"}}, Spec: corev1.ServiceSpec{Ports: port}},
		{ObjectMeta: metav1.ObjectMeta{Name: "third-proxy", Labels: map[string]string{"service.kubernetes.io/service-proxy-name": "third"}}, Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Ports: port}},
	}
	for _, s := range services {
		if _, err := admin.CoreV1().Services(ns).Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	endpointSlices := []*discoveryv1.EndpointSlice{
		{ObjectMeta: metav1.ObjectMeta{Name: "es-plain", Labels: map[string]string{discoveryv1.LabelServiceName: "plain"}}, AddressType: discoveryv1.AddressTypeIPv4},
		{ObjectMeta: metav1.ObjectMeta{Name: "es-headless", Labels: map[string]string{discoveryv1.LabelServiceName: "headless", corev1.IsHeadlessService: ""}}, AddressType: discoveryv1.AddressTypeIPv4},
		{ObjectMeta: metav1.ObjectMeta{Name: "es-nolabels"}, AddressType: discoveryv1.AddressTypeIPv6},
	}
	for _, s := range endpointSlices {
		if _, err := admin.DiscoveryV1().EndpointSlices(ns).Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range []*corev1.Node{
		{ObjectMeta: metav1.ObjectMeta{Name: ns + "-cordoned"}, Spec: corev1.NodeSpec{Unschedulable: true}},
		{ObjectMeta: metav1.ObjectMeta{Name: ns + "-open"}},
	} {
		if _, err := admin.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	tls := map[string][]byte{corev1.TLSCertKey: []byte("cert"), corev1.TLSPrivateKeyKey: []byte("key")}
	for _, s := range []*corev1.Secret{
		{ObjectMeta: metav1.ObjectMeta{Name: "opaque", Labels: map[string]string{"tier": "gold"}}, Data: map[string][]byte{"password": []byte("x")}},
		{ObjectMeta: metav1.ObjectMeta{Name: "empty"}, Type: corev1.SecretTypeOpaque},
		{ObjectMeta: metav1.ObjectMeta{Name: "tls", Labels: map[string]string{"tier": "gold"}}, Type: corev1.SecretTypeTLS, Data: tls},
		{ObjectMeta: metav1.ObjectMeta{Name: "tls-2"}, Type: corev1.SecretTypeTLS, Data: tls},
		{ObjectMeta: metav1.ObjectMeta{Name: "custom"}, Type: "example.com/custom", Data: map[string][]byte{"k": []byte("v")}},
	} {
		if _, err := admin.CoreV1().Secrets(ns).Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	create := func(err error) {
		t.Helper()
		if err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	for _, rc := range []*nodev1.RuntimeClass{
		{ObjectMeta: metav1.ObjectMeta{Name: "rc-a", Labels: map[string]string{"tier": "gold"}}, Handler: "a"},
		{ObjectMeta: metav1.ObjectMeta{Name: "rc-b"}, Handler: "b"},
	} {
		_, err := admin.NodeV1().RuntimeClasses().Create(ctx, rc, metav1.CreateOptions{})
		create(err)
	}
	for _, d := range []*storagev1.CSIDriver{
		{ObjectMeta: metav1.ObjectMeta{Name: "a.example.com", Labels: map[string]string{"tier": "gold"}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "b.example.com"}, Spec: storagev1.CSIDriverSpec{AttachRequired: ptr.To(false)}},
	} {
		_, err := admin.StorageV1().CSIDrivers().Create(ctx, d, metav1.CreateOptions{})
		create(err)
	}
	_, err := admin.NetworkingV1().ServiceCIDRs().Create(ctx, &networkingv1.ServiceCIDR{
		ObjectMeta: metav1.ObjectMeta{Name: "extra"},
		Spec:       networkingv1.ServiceCIDRSpec{CIDRs: []string{"10.200.0.0/24"}},
	}, metav1.CreateOptions{})
	create(err)
}
