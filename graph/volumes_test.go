package graph

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ClaimVolumes names every PV bound to a claim and their kubelet-visible
// secrets, whether or not a pod uses the claim (a replica that does not
// hold the claim's node has no pod for it), and forgets a PV once it is
// unbound or deleted.
func TestClaimVolumesAreThePVsBoundToTheClaim(t *testing.T) {
	g := New()
	bound := func(name, claimNS, claim, secret string) *corev1.PersistentVolume {
		return &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PersistentVolumeSpec{
			ClaimRef: &corev1.ObjectReference{Namespace: claimNS, Name: claim},
			PersistentVolumeSource: corev1.PersistentVolumeSource{FlexVolume: &corev1.FlexPersistentVolumeSource{
				Driver: "d", SecretRef: &corev1.SecretReference{Name: secret}}},
		}}
	}
	g.AddPV(bound("pv-a", "ns", "claim", "flex-a"))
	g.AddPV(bound("pv-b", "ns", "claim", "flex-b"))
	g.AddPV(bound("pv-c", "other", "claim", "flex-c"))
	claim := ObjectRef{Kind: PersistentVolumeClaim, Namespace: "ns", Name: "claim"}

	pvs, secrets := g.ClaimVolumes(claim)
	names := func(refs []ObjectRef) []string {
		var out []string
		for _, r := range refs {
			out = append(out, r.String())
		}
		slices.Sort(out)
		return out
	}
	if got, want := names(pvs), []string{"persistentvolume pv-a", "persistentvolume pv-b"}; !slices.Equal(got, want) {
		t.Errorf("volumes %q, want %q", got, want)
	}
	if got, want := names(secrets), []string{"secret ns/flex-a", "secret ns/flex-b"}; !slices.Equal(got, want) {
		t.Errorf("secrets %q, want %q", got, want)
	}

	unbound := bound("pv-a", "ns", "claim", "flex-a")
	unbound.Spec.ClaimRef = nil
	g.AddPV(unbound)
	g.DeletePV("pv-b")
	if pvs, secrets := g.ClaimVolumes(claim); len(pvs) != 0 || len(secrets) != 0 {
		t.Errorf("after unbinding and deleting: volumes %v, secrets %v", pvs, secrets)
	}
	if pvs, _ := g.ClaimVolumes(ObjectRef{Kind: PersistentVolumeClaim, Namespace: "ns", Name: "never"}); pvs != nil {
		t.Errorf("a claim no PV names: %v", pvs)
	}
}
