package authorizer_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	apiserverv1 "k8s.io/apiserver/pkg/apis/apiserver/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/nodeproxy/nodeproxy/test/controlplane"
	"github.com/nodeproxy/nodeproxy/test/testserver"
	"github.com/nodeproxy/nodeproxy/test/workload"
)

// TestSameDecisionsAsTheInTreeNodeAuthorizer is the parity proof: a
// kube-apiserver whose only authorizer is the in-tree Node authorizer, and
// nodeproxy fed from that same kube-apiserver, are asked the same
// SubjectAccessReviews about a varied workload, before and after churn, and
// must give the same answers.
func TestSameDecisionsAsTheInTreeNodeAuthorizer(t *testing.T) {
	ref := startNodeAuthorizerControlPlane(t)
	// nodeproxy reads as an admin: with the Node authorizer alone, nothing
	// else could list the cluster or review tokens. The refusal check is
	// off: it changes when a refusal is given, not what is decided once
	// both graphs are current, which is what this test compares, and with
	// it each of the hundreds of refusals asked one after another would
	// wait for a list of its node's pods (lag_e2e_test.go tests it).
	srv := testserver.Start(t, ref, testserver.Options{Identity: ref.AdminConfig(), Args: []string{"--node-refresh-timeout=0"}})
	srv.WaitReady(t, 90*time.Second)
	admin := clientset(t, ref.AdminConfig(), nil)
	proxy := []answerer{{name: "nodeproxy", client: srv.Client(t, ref.AdminConfig()), url: srv.URL}}

	objs := createVariedWorkload(t, ref, admin)
	sameAnswers(t, admin, "initial workload", objs.questions(), proxy, 30*time.Second)
	objs.churn(t, admin)
	sameAnswers(t, admin, "after churn", objs.questions(), proxy, 30*time.Second)
}

// startNodeAuthorizerControlPlane starts a kube-apiserver whose only
// authorizer is the in-tree Node authorizer: the reference.
func startNodeAuthorizerControlPlane(t *testing.T) *controlplane.ControlPlane {
	t.Helper()
	ref, err := controlplane.Start(context.Background(), controlplane.Options{
		Authorization: &apiserverv1.AuthorizationConfiguration{Authorizers: []apiserverv1.AuthorizerConfiguration{{Type: "Node", Name: "node"}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ref.Stop)
	return ref
}

// answerer is a nodeproxy webhook the differential asks.
type answerer struct {
	name, url string
	client    *http.Client
}

// sameAnswers asks the reference (admin's kube-apiserver) and every
// answerer each question, and fails unless every answer is the
// reference's, without a Deny or an error. Both sides learn the cluster
// through informers: it polls until they agree, within wait, and reports
// what still differs if they never do.
func sameAnswers(t *testing.T, admin kubernetes.Interface, phase string, questions []*authorizationv1.SubjectAccessReview, answerers []answerer, within time.Duration) {
	t.Helper()
	var mismatches []string
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, within, true, func(ctx context.Context) (bool, error) {
		mismatches = mismatches[:0]
		for _, q := range questions {
			want, err := admin.AuthorizationV1().SubjectAccessReviews().Create(ctx, q.DeepCopy(), metav1.CreateOptions{})
			if err != nil {
				return false, err
			}
			for _, a := range answerers {
				got, err := askProxy(ctx, a.client, a.url, q)
				if err != nil {
					return false, err
				}
				if got.Status.Allowed != want.Status.Allowed || got.Status.Denied || got.Status.EvaluationError != "" {
					mismatches = append(mismatches, fmt.Sprintf("%s asked %s: in-tree allowed=%v (%s), nodeproxy allowed=%v denied=%v (%s; %s)",
						a.name, describe(q), want.Status.Allowed, want.Status.Reason, got.Status.Allowed, got.Status.Denied, got.Status.Reason, got.Status.EvaluationError))
				}
			}
		}
		return len(mismatches) == 0, nil
	})
	if err != nil {
		t.Fatalf("%s: %d of %d answers differ (%v):\n%s", phase, len(mismatches), len(questions)*len(answerers), err, strings.Join(mismatches, "\n"))
	}
	t.Logf("%s: %d questions to each of %d answerers, every answer the in-tree authorizer's", phase, len(questions), len(answerers))
}

func askProxy(ctx context.Context, c *http.Client, url string, q *authorizationv1.SubjectAccessReview) (*authorizationv1.SubjectAccessReview, error) {
	q = q.DeepCopy()
	q.APIVersion, q.Kind = "authorization.k8s.io/v1", "SubjectAccessReview"
	body, err := json.Marshal(q)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/authorize", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("nodeproxy answered %s", resp.Status)
	}
	out := &authorizationv1.SubjectAccessReview{}
	return out, json.NewDecoder(resp.Body).Decode(out)
}

func describe(q *authorizationv1.SubjectAccessReview) string {
	r := q.Spec.ResourceAttributes
	if r == nil {
		return fmt.Sprintf("%s %s %s", q.Spec.User, q.Spec.NonResourceAttributes.Verb, q.Spec.NonResourceAttributes.Path)
	}
	sel := ""
	if r.FieldSelector != nil {
		sel = " fieldSelector=" + r.FieldSelector.RawSelector
	}
	return fmt.Sprintf("%s %s %s/%s/%s %s/%s%s", q.Spec.User, r.Verb, r.Group, r.Resource, r.Subresource, r.Namespace, r.Name, sel)
}

// varied is what createVariedWorkload made, by kind, for asking about.
type varied struct {
	nodes      []string
	namespaced map[string][]metav1.Object // resource -> objects
	cluster    map[string][]string        // resource -> names
	cluster0   *workload.Cluster
}

func createVariedWorkload(t *testing.T, cp *controlplane.ControlPlane, admin kubernetes.Interface) *varied {
	t.Helper()
	ctx := context.Background()
	shape := workload.Shape{
		Nodes: 3, PodsPerNode: 4, Namespaces: 2,
		UniqueSecretsPerPod: 1, UniqueConfigMapsPerPod: 1, UniquePVCsPerPod: 1,
		SharedSecretsPerPod: 1, SharedSecretsPerNamespace: 2,
		SharedConfigMapsPerPod: 1, SharedConfigMapsPerNamespace: 2,
		AttachmentsPerNode: 1, Seed: 7,
	}
	c, err := workload.Generate(shape)
	if err != nil {
		t.Fatal(err)
	}
	v := &varied{nodes: []string{"node0", "node1", "node2", "node-x"}, namespaced: map[string][]metav1.Object{}, cluster: map[string][]string{}, cluster0: c}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	for i := range shape.Namespaces {
		must(cp.EnsureNamespace(ctx, shape.Namespace(i)))
	}
	// Pods of every shape the reference follows, beside the generated ones.
	extra := []*corev1.Pod{
		{ObjectMeta: metav1.ObjectMeta{Namespace: "ns0", Name: "env-pod"}, Spec: corev1.PodSpec{
			NodeName: "node0", ImagePullSecrets: []corev1.LocalObjectReference{{Name: "pull-secret"}},
			InitContainers: []corev1.Container{{Name: "init", Image: "i", EnvFrom: []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "init-secret"}}}}}},
			Containers: []corev1.Container{{Name: "c", Image: "i", Env: []corev1.EnvVar{
				{Name: "A", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{Key: "k", LocalObjectReference: corev1.LocalObjectReference{Name: "env-secret"}}}},
				{Name: "B", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{Key: "k", LocalObjectReference: corev1.LocalObjectReference{Name: "env-cm"}}}},
			}}},
			Volumes: []corev1.Volume{
				{Name: "proj", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
					{Secret: &corev1.SecretProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "proj-secret"}}},
					{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "proj-cm"}}},
				}}}},
				{Name: "scratch", VolumeSource: corev1.VolumeSource{Ephemeral: &corev1.EphemeralVolumeSource{VolumeClaimTemplate: &corev1.PersistentVolumeClaimTemplate{
					Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
						Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: mustQuantity("1Gi")}}},
				}}}},
				{Name: "csi", VolumeSource: corev1.VolumeSource{CSI: &corev1.CSIVolumeSource{Driver: "d", NodePublishSecretRef: &corev1.LocalObjectReference{Name: "csi-secret"}}}},
			},
			ResourceClaims: []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptr.To("gpu-claim")}},
		}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "ns1", Name: "static-web-node1", Annotations: map[string]string{corev1.MirrorPodAnnotationKey: "hash"}},
			// Admission keeps mirror pods from referencing anything; the
			// pod itself is what its node may read.
			Spec: corev1.PodSpec{NodeName: "node1", Containers: []corev1.Container{{Name: "c", Image: "i"}}}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "ns1", Name: "pending"},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "i"}},
				Volumes: []corev1.Volume{{Name: "s", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "pending-secret"}}}}}},
	}
	pods := append(slices.Clone(c.Pods), extra...)
	for _, p := range pods {
		p = p.DeepCopy()
		p.UID = ""
		for i := range p.Spec.Containers {
			p.Spec.Containers[i].Name, p.Spec.Containers[i].Image = fmt.Sprintf("c%d", i), "registry.k8s.io/pause:3.10"
		}
		if len(p.Spec.Containers) == 0 {
			p.Spec.Containers = []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}
		}
		if p.Spec.ServiceAccountName != "" {
			_, err := admin.CoreV1().ServiceAccounts(p.Namespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: p.Spec.ServiceAccountName}}, metav1.CreateOptions{})
			must(err)
			v.namespaced["serviceaccounts"] = append(v.namespaced["serviceaccounts"], &metav1.ObjectMeta{Namespace: p.Namespace, Name: p.Spec.ServiceAccountName})
		}
		created, err := admin.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{})
		must(err)
		v.namespaced["pods"] = append(v.namespaced["pods"], created)
	}
	// Every object any pod or PV names, referenced or not, and some that no
	// pod names, as both kinds of question matter.
	for _, ns := range []string{"ns0", "ns1"} {
		for _, n := range []string{"secret0-shared", "secret1-shared", "pull-secret", "init-secret", "env-secret", "proj-secret", "csi-secret", "mirror-secret", "pending-secret", "unused-secret"} {
			v.namespaced["secrets"] = append(v.namespaced["secrets"], &metav1.ObjectMeta{Namespace: ns, Name: n})
		}
		for _, n := range []string{"configmap0-shared", "configmap1-shared", "env-cm", "proj-cm", "unused-cm"} {
			v.namespaced["configmaps"] = append(v.namespaced["configmaps"], &metav1.ObjectMeta{Namespace: ns, Name: n})
		}
		v.namespaced["persistentvolumeclaims"] = append(v.namespaced["persistentvolumeclaims"], &metav1.ObjectMeta{Namespace: ns, Name: "env-pod-scratch"})
		v.namespaced["resourceclaims"] = append(v.namespaced["resourceclaims"], &metav1.ObjectMeta{Namespace: ns, Name: "gpu-claim"})
	}
	for _, p := range c.Pods {
		for _, vol := range p.Spec.Volumes {
			switch {
			case vol.Secret != nil:
				v.namespaced["secrets"] = append(v.namespaced["secrets"], &metav1.ObjectMeta{Namespace: p.Namespace, Name: vol.Secret.SecretName})
			case vol.ConfigMap != nil:
				v.namespaced["configmaps"] = append(v.namespaced["configmaps"], &metav1.ObjectMeta{Namespace: p.Namespace, Name: vol.ConfigMap.Name})
			case vol.PersistentVolumeClaim != nil:
				v.namespaced["persistentvolumeclaims"] = append(v.namespaced["persistentvolumeclaims"], &metav1.ObjectMeta{Namespace: p.Namespace, Name: vol.PersistentVolumeClaim.ClaimName})
			}
		}
	}
	for _, pv := range c.PVs {
		pv = pv.DeepCopy()
		pv.Spec.Capacity = corev1.ResourceList{corev1.ResourceStorage: mustQuantity("1Gi")}
		pv.Spec.AccessModes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}
		pv.Spec.FlexVolume.Driver = "example.com/flex"
		_, err := admin.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{})
		must(err)
		v.cluster["persistentvolumes"] = append(v.cluster["persistentvolumes"], pv.Name)
		v.namespaced["secrets"] = append(v.namespaced["secrets"], &metav1.ObjectMeta{Namespace: pv.Spec.ClaimRef.Namespace, Name: pv.Spec.FlexVolume.SecretRef.Name})
	}
	for _, va := range c.Attachments {
		_, err := admin.StorageV1().VolumeAttachments().Create(ctx, &storagev1.VolumeAttachment{
			ObjectMeta: metav1.ObjectMeta{Name: va.Name},
			Spec: storagev1.VolumeAttachmentSpec{Attacher: "csi.example.com", NodeName: va.Spec.NodeName,
				Source: storagev1.VolumeAttachmentSource{PersistentVolumeName: ptr.To(c.PVs[0].Name)}},
		}, metav1.CreateOptions{})
		must(err)
		v.cluster["volumeattachments"] = append(v.cluster["volumeattachments"], va.Name)
	}
	for _, n := range []string{"node0", "node1"} {
		_, err := admin.ResourceV1().ResourceSlices().Create(ctx, &resourcev1.ResourceSlice{
			ObjectMeta: metav1.ObjectMeta{Name: "slice-" + n},
			Spec: resourcev1.ResourceSliceSpec{Driver: "gpu.example.com", NodeName: ptr.To(n),
				Pool: resourcev1.ResourcePool{Name: n, ResourceSliceCount: 1}},
		}, metav1.CreateOptions{})
		must(err)
		v.cluster["resourceslices"] = append(v.cluster["resourceslices"], "slice-"+n)
	}
	v.cluster["persistentvolumes"] = append(v.cluster["persistentvolumes"], "no-such-pv")
	v.cluster["volumeattachments"] = append(v.cluster["volumeattachments"], "no-such-attachment")
	v.cluster["resourceslices"] = append(v.cluster["resourceslices"], "no-such-slice")
	return v
}

func mustQuantity(s string) resource.Quantity { return resource.MustParse(s) }

// questions asks, for every node (and one the cluster has never seen),
// about every object, with the verbs and subresources the reference treats
// differently, plus list and watch with and without field selectors.
func (v *varied) questions() []*authorizationv1.SubjectAccessReview {
	var qs []*authorizationv1.SubjectAccessReview
	ask := func(node string, ra authorizationv1.ResourceAttributes) {
		ra.Version = "v1"
		qs = append(qs, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User: "system:node:" + node, Groups: []string{"system:nodes", "system:authenticated"}, ResourceAttributes: &ra,
		}})
	}
	groups := map[string]string{"resourceclaims": "resource.k8s.io", "resourceslices": "resource.k8s.io", "volumeattachments": "storage.k8s.io"}
	for _, node := range v.nodes {
		for resource, objs := range v.namespaced {
			for _, o := range objs {
				for _, verb := range []string{"get", "list", "watch", "update"} {
					ask(node, authorizationv1.ResourceAttributes{Verb: verb, Group: groups[resource], Resource: resource, Namespace: o.GetNamespace(), Name: o.GetName()})
				}
			}
		}
		for _, o := range v.namespaced["persistentvolumeclaims"] {
			ask(node, authorizationv1.ResourceAttributes{Verb: "patch", Resource: "persistentvolumeclaims", Subresource: "status", Namespace: o.GetNamespace(), Name: o.GetName()})
		}
		for _, o := range v.namespaced["serviceaccounts"] {
			ask(node, authorizationv1.ResourceAttributes{Verb: "create", Resource: "serviceaccounts", Subresource: "token", Namespace: o.GetNamespace(), Name: o.GetName()})
		}
		for resource, names := range v.cluster {
			for _, name := range names {
				for _, verb := range []string{"get", "delete"} {
					ask(node, authorizationv1.ResourceAttributes{Verb: verb, Group: groups[resource], Resource: resource, Name: name})
				}
			}
		}
		for _, other := range v.nodes {
			sel := &authorizationv1.FieldSelectorAttributes{RawSelector: "spec.nodeName=" + other}
			ask(node, authorizationv1.ResourceAttributes{Verb: "list", Resource: "pods", FieldSelector: sel})
			ask(node, authorizationv1.ResourceAttributes{Verb: "watch", Group: "resource.k8s.io", Resource: "resourceslices", FieldSelector: sel})
			ask(node, authorizationv1.ResourceAttributes{Verb: "get", Resource: "nodes", Name: other})
			ask(node, authorizationv1.ResourceAttributes{Verb: "update", Group: "coordination.k8s.io", Resource: "leases", Namespace: "kube-node-lease", Name: other})
			ask(node, authorizationv1.ResourceAttributes{Verb: "get", Group: "storage.k8s.io", Resource: "csinodes", Name: other})
		}
		for _, ra := range []authorizationv1.ResourceAttributes{
			{Verb: "list", Resource: "pods"},
			{Verb: "list", Resource: "secrets", Namespace: "ns0"},
			{Verb: "list", Resource: "nodes"},
			{Verb: "create", Resource: "pods", Namespace: "ns0"},
			{Verb: "patch", Resource: "pods", Subresource: "status", Namespace: "ns0", Name: "pod0-node0"},
			{Verb: "create", Resource: "pods", Subresource: "eviction", Namespace: "ns0", Name: "pod0-node0"},
			{Verb: "list", Resource: "services"},
			{Verb: "create", Resource: "events", Namespace: "ns0"},
			{Verb: "get", Resource: "endpoints", Namespace: "ns0", Name: "e"},
			{Verb: "get", Group: "apps", Resource: "deployments", Namespace: "ns0", Name: "d"},
			{Verb: "create", Group: "certificates.k8s.io", Resource: "certificatesigningrequests"},
			{Verb: "create", Group: "certificates.k8s.io", Resource: "podcertificaterequests", Namespace: "ns0"},
			{Verb: "list", Group: "node.k8s.io", Resource: "runtimeclasses"},
			{Verb: "create", Group: "resource.k8s.io", Resource: "resourceslices"},
		} {
			ask(node, ra)
		}
	}
	return qs
}

// churn deletes a pod, recreates one under the same name on another node,
// unbinds a PV, moves an attachment, deletes a slice, and adds an
// ephemeral container that reads a secret.
func (v *varied) churn(t *testing.T, admin kubernetes.Interface) {
	t.Helper()
	ctx := context.Background()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	now := &metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}
	must(admin.CoreV1().Pods("ns1").Delete(ctx, "pod1-node0", *now))
	moved := v.cluster0.Pods[0].DeepCopy() // pod0-node0
	must(admin.CoreV1().Pods(moved.Namespace).Delete(ctx, moved.Name, *now))
	moved.UID, moved.Spec.NodeName = "", "node2"
	moved.Spec.Containers = []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}
	_, err := admin.CoreV1().Pods(moved.Namespace).Create(ctx, moved, metav1.CreateOptions{})
	must(err)

	pv, err := admin.CoreV1().PersistentVolumes().Get(ctx, v.cluster0.PVs[1].Name, metav1.GetOptions{})
	must(err)
	pv.Spec.ClaimRef = nil
	_, err = admin.CoreV1().PersistentVolumes().Update(ctx, pv, metav1.UpdateOptions{})
	must(err)

	must(admin.StorageV1().VolumeAttachments().Delete(ctx, v.cluster0.Attachments[0].Name, *now))
	must(admin.ResourceV1().ResourceSlices().Delete(ctx, "slice-node1", *now))

	pod, err := admin.CoreV1().Pods("ns0").Get(ctx, "env-pod", metav1.GetOptions{})
	must(err)
	pod.Spec.EphemeralContainers = append(pod.Spec.EphemeralContainers, corev1.EphemeralContainer{EphemeralContainerCommon: corev1.EphemeralContainerCommon{
		Name: "debug", Image: "registry.k8s.io/pause:3.10", TerminationMessagePolicy: corev1.TerminationMessageReadFile,
		EnvFrom: []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "debug-secret"}}}},
	}})
	_, err = admin.CoreV1().Pods("ns0").UpdateEphemeralContainers(ctx, "env-pod", pod, metav1.UpdateOptions{})
	must(err)
	v.namespaced["secrets"] = append(v.namespaced["secrets"], &metav1.ObjectMeta{Namespace: "ns0", Name: "debug-secret"})
}
