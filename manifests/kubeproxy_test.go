package manifests

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/clientcmd"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/nodeproxy/nodeproxy/nodeinstall"
)

// TestKubeProxyComponentChangesOnlyServerAndCA: the kube-proxy component,
// on kube-proxy as kubeadm deploys it, points kube-proxy's kubeconfig at
// the node endpoint as `nodeproxy node install` sets it up (its port, its
// CA file) and changes nothing else of it: the token, and so kube-proxy's
// own identity, stay. The DaemonSet mounts that CA file where the
// kubeconfig names it.
func TestKubeProxyComponentChangesOnlyServerAndCA(t *testing.T) {
	node := nodeinstall.DefaultConfig()
	wantServer := fmt.Sprintf("https://127.0.0.1:%d", node.Port)
	wantCA := filepath.Join(node.CertDir, "ca.crt")

	_, out := build(t, "testdata/kube-proxy")
	var cm corev1.ConfigMap
	var ds appsv1.DaemonSet
	for _, doc := range strings.Split(string(out), "\n---\n") {
		var meta struct{ Kind string }
		if err := sigsyaml.Unmarshal([]byte(doc), &meta); err != nil {
			t.Fatal(err)
		}
		switch meta.Kind {
		case "ConfigMap":
			if err := sigsyaml.Unmarshal([]byte(doc), &cm); err != nil {
				t.Fatal(err)
			}
		case "DaemonSet":
			if err := sigsyaml.Unmarshal([]byte(doc), &ds); err != nil {
				t.Fatal(err)
			}
		}
	}
	kubeconfig, err := clientcmd.Load([]byte(cm.Data["kubeconfig.conf"]))
	if err != nil {
		t.Fatalf("kube-proxy's kubeconfig.conf: %v", err)
	}
	cluster := kubeconfig.Clusters["default"]
	if cluster == nil || cluster.Server != wantServer || cluster.CertificateAuthority != wantCA {
		t.Errorf("kube-proxy's cluster: %+v, want server %s and CA %s", cluster, wantServer, wantCA)
	}
	user := kubeconfig.AuthInfos["default"]
	if user == nil || user.TokenFile != "/var/run/secrets/kubernetes.io/serviceaccount/token" ||
		user.ClientCertificate != "" || user.ClientCertificateData != nil || user.Token != "" {
		t.Errorf("kube-proxy's credential changed: %+v", user)
	}
	if !strings.Contains(cm.Data["config.conf"], "kubeconfig: /var/lib/kube-proxy/kubeconfig.conf") {
		t.Errorf("kube-proxy's config.conf no longer names its kubeconfig: %s", cm.Data["config.conf"])
	}

	spec := ds.Spec.Template.Spec
	mounted := false
	for _, m := range spec.Containers[0].VolumeMounts {
		if m.MountPath == wantCA && m.ReadOnly {
			for _, v := range spec.Volumes {
				mounted = mounted || v.Name == m.Name && v.HostPath != nil && v.HostPath.Path == wantCA
			}
		}
	}
	if !mounted {
		t.Errorf("the DaemonSet does not mount the node's %s read-only where the kubeconfig names it: %+v", wantCA, spec.Volumes)
	}
	if len(spec.Containers[0].VolumeMounts) != 4 || len(spec.Volumes) != 4 || !spec.HostNetwork || spec.ServiceAccountName != "kube-proxy" {
		t.Errorf("the DaemonSet changed beyond the CA's mount: %d mounts, %d volumes, hostNetwork %v, account %q",
			len(spec.Containers[0].VolumeMounts), len(spec.Volumes), spec.HostNetwork, spec.ServiceAccountName)
	}
}
