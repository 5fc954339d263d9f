package graph

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

// TestScripts runs the scenarios under testdata/. Each script drives one
// graph through writes and prints what nodes can reach and which changes
// observers saw. Regenerate expectations with:
//
//	go test ./graph -run TestScripts -rewrite
func TestScripts(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		g := New()
		var seen []Change
		g.Observe(func(cs []Change) { seen = append(seen, cs...) })
		pods := map[string]*corev1.Pod{}
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			args := map[string]string{}
			for _, a := range d.CmdArgs {
				args[a.Key] = strings.Join(a.Vals, ",")
			}
			switch d.Cmd {
			case "pod":
				pod := scriptPod(args)
				old := pods[pod.Namespace+"/"+pod.Name]
				if _, ok := args["update"]; ok {
					g.UpdatePod(old, pod)
				} else {
					g.AddPod(pod)
				}
				pods[pod.Namespace+"/"+pod.Name] = pod
			case "delete-pod":
				ns, name, _ := strings.Cut(args["name"], "/")
				g.DeletePod(ns, name)
				delete(pods, args["name"])
			case "pv":
				g.AddPV(scriptPV(args))
			case "delete-pv":
				g.DeletePV(args["name"])
			case "attachment":
				g.AddVolumeAttachment(args["name"], args["node"])
			case "delete-attachment":
				g.DeleteVolumeAttachment(args["name"])
			case "slice":
				g.AddResourceSlice(args["name"], args["node"])
			case "delete-slice":
				g.DeleteResourceSlice(args["name"])
			case "reach":
				return reachDump(g, args["node"])
			case "changes":
				out := changeDump(seen)
				seen = nil
				return out
			case "size":
				var b strings.Builder
				for _, k := range Kinds() {
					if n := g.Len(k); n > 0 {
						fmt.Fprintf(&b, "%s: %d\n", k, n)
					}
				}
				if b.Len() == 0 {
					return "empty\n"
				}
				return b.String()
			default:
				t.Fatalf("%s: unknown command %q", d.Pos, d.Cmd)
			}
			return ""
		})
	})
}

func list(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

// scriptPod builds a pod from arguments: name=ns/name node= uid=
// secrets= configmaps= pvcs= ephemeral= sa= claims= mirror.
func scriptPod(args map[string]string) *corev1.Pod {
	ns, name, _ := strings.Cut(args["name"], "/")
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(args["uid"])},
		Spec:       corev1.PodSpec{NodeName: args["node"], ServiceAccountName: args["sa"]},
	}
	if _, ok := args["mirror"]; ok {
		pod.Annotations = map[string]string{corev1.MirrorPodAnnotationKey: "x"}
	}
	for _, s := range list(args["secrets"]) {
		pod.Spec.Volumes = append(pod.Spec.Volumes, secretVolume(s))
	}
	for _, c := range list(args["configmaps"]) {
		pod.Spec.Containers = append(pod.Spec.Containers, corev1.Container{EnvFrom: []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: c}}}}})
	}
	for _, c := range list(args["pvcs"]) {
		pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: "pvc-" + c, VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: c}}})
	}
	for _, v := range list(args["ephemeral"]) {
		pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: v, VolumeSource: corev1.VolumeSource{Ephemeral: &corev1.EphemeralVolumeSource{}}})
	}
	for _, c := range list(args["claims"]) {
		pod.Spec.ResourceClaims = append(pod.Spec.ResourceClaims, corev1.PodResourceClaim{Name: c, ResourceClaimName: ptr.To(c)})
	}
	for _, e := range list(args["debug"]) {
		pod.Spec.EphemeralContainers = append(pod.Spec.EphemeralContainers, corev1.EphemeralContainer{EphemeralContainerCommon: corev1.EphemeralContainerCommon{
			Name: "debug", EnvFrom: []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: e}}}},
		}})
	}
	return pod
}

// scriptPV builds a PV: name= claim=ns/name secrets=ns/name,...
func scriptPV(args map[string]string) *corev1.PersistentVolume {
	pv := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: args["name"]}}
	if c := args["claim"]; c != "" {
		ns, name, _ := strings.Cut(c, "/")
		pv.Spec.ClaimRef = &corev1.ObjectReference{Namespace: ns, Name: name}
	}
	csi := &corev1.CSIPersistentVolumeSource{Driver: "d"}
	for i, s := range list(args["secrets"]) {
		ns, name, _ := strings.Cut(s, "/")
		ref := &corev1.SecretReference{Namespace: ns, Name: name}
		switch i {
		case 0:
			csi.NodePublishSecretRef = ref
		case 1:
			csi.NodeStageSecretRef = ref
		default:
			csi.NodeExpandSecretRef = ref
		}
	}
	if c := args["controller-secret"]; c != "" {
		ns, name, _ := strings.Cut(c, "/")
		csi.ControllerPublishSecretRef = &corev1.SecretReference{Namespace: ns, Name: name}
	}
	pv.Spec.CSI = csi
	return pv
}

// reachDump lists what node reaches, by walking every shard: a test-only
// view, the graph itself never enumerates.
func reachDump(g *Graph, node string) string {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []string
	n := g.nodes.get(node)
	slots := g.objects.slots.Load().ptrs
	for i := range slots {
		e := slots[i].Load()
		if e == nil || e == g.objects.tomb || n == nil {
			continue
		}
		if p := g.pathsLocked(e, n.id); p > 0 {
			if !g.Reachable(node, e.ref()) {
				panic(fmt.Sprintf("%s has %d paths to %s but is not Reachable", e.ref(), p, node))
			}
			out = append(out, fmt.Sprintf("%s (paths %d)", e.ref(), p))
		}
	}
	if len(out) == 0 {
		return "nothing\n"
	}
	slices.Sort(out)
	return strings.Join(out, "\n") + "\n"
}

func changeDump(cs []Change) string {
	if len(cs) == 0 {
		return "none\n"
	}
	var b strings.Builder
	for _, c := range cs {
		sign := "-"
		if c.Reachable {
			sign = "+"
		}
		fmt.Fprintf(&b, "%s %s %s\n", sign, c.Node, c.Object)
	}
	return b.String()
}
