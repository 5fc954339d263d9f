package nodeinstall

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"path/filepath"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"
)

// memoryLimit is the endpoint container's memory limit.
const memoryLimit = "256Mi"

// staticPod is the endpoint as the kubelet runs it from its manifest
// directory. certDir holds the kubelet's client certificate (from the
// direct kubeconfig), mounted read-only; nothing else of the host is.
//
// hubCA is the hub's CA, written to CertDir: its digest is an annotation,
// so that a new CA changes the manifest and the kubelet restarts the
// endpoint with it.
func (c *Config) staticPod(kubeletCertDir string, hubCA []byte) ([]byte, error) {
	limit := resource.MustParse(memoryLimit)
	// The Go runtime's soft limit at 90% of the container's: near it the
	// collector works harder and returns memory rather than the kubelet
	// killing the endpoint at the limit, with 10% left for what the
	// runtime does not count (the binary's own pages). In whole MiB, as
	// an operator would write it.
	softLimit := resource.NewQuantity((limit.Value()/10*9)&^(1<<20-1), resource.BinarySI)
	hostPath := func(name, path string, typ corev1.HostPathType) corev1.Volume {
		return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: path, Type: &typ}}}
	}
	probe := func(path string) *corev1.Probe {
		return &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
			Host: "127.0.0.1", Port: intstr.FromInt32(int32(c.Port)), Path: path, Scheme: corev1.URISchemeHTTPS,
		}}, PeriodSeconds: 10, FailureThreshold: 3}
	}
	pod := &corev1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{
			Name: "nodeproxy-node", Namespace: "kube-system",
			Labels: map[string]string{"app.kubernetes.io/name": "nodeproxy-node", "app.kubernetes.io/part-of": "nodeproxy"},
		},
		Spec: corev1.PodSpec{
			// The kubelet reaches it on 127.0.0.1; the hub by its
			// Service name, hence the cluster's DNS on the host network.
			HostNetwork:       true,
			DNSPolicy:         corev1.DNSClusterFirstWithHostNet,
			PriorityClassName: "system-node-critical",
			Containers: []corev1.Container{{
				Name:            "node",
				Image:           c.Image,
				ImagePullPolicy: corev1.PullIfNotPresent,
				// The image's entrypoint is the node endpoint
				// (nodeproxy-node: make image's nodeproxy-node:dev).
				Args: []string{
					"--node-name=" + c.NodeName,
					"--secure-port=" + strconv.Itoa(c.Port),
					"--kubeconfig=" + c.DirectKubeconfig,
					"--client-ca-file=" + c.ClientCAFile,
					"--cert-dir=" + c.CertDir,
					"--hub-url=" + c.HubURL,
					"--node-view-dir=" + nodeViewDir,
					"--memory-limit=" + softLimit.String(),
				},
				LivenessProbe:  probe("/livez"),
				ReadinessProbe: probe("/readyz"),
				Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("64Mi")},
					Limits:   corev1.ResourceList{corev1.ResourceMemory: limit},
				},
				SecurityContext: &corev1.SecurityContext{
					// Root, to read the kubelet's 0600 certificate; nothing more.
					// Said here, since the image runs as 65532.
					RunAsUser:                ptr.To(int64(0)),
					AllowPrivilegeEscalation: ptr.To(false),
					ReadOnlyRootFilesystem:   ptr.To(true),
					Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
				},
				VolumeMounts: []corev1.VolumeMount{
					{Name: "kubeconfig", MountPath: c.DirectKubeconfig, ReadOnly: true},
					{Name: "client-ca", MountPath: c.ClientCAFile, ReadOnly: true},
					{Name: "kubelet-pki", MountPath: kubeletCertDir, ReadOnly: true},
					{Name: "certs", MountPath: c.CertDir},
					{Name: "run", MountPath: runDir},
				},
			}},
			Volumes: []corev1.Volume{
				hostPath("kubeconfig", c.DirectKubeconfig, corev1.HostPathFile),
				hostPath("client-ca", c.ClientCAFile, corev1.HostPathFile),
				hostPath("kubelet-pki", kubeletCertDir, corev1.HostPathDirectory),
				hostPath("certs", c.CertDir, corev1.HostPathDirectoryOrCreate),
				// The kubelet creates it 0755; the endpoint creates the
				// copy's directory in it, root-only.
				hostPath("run", runDir, corev1.HostPathDirectoryOrCreate),
			},
		},
	}
	if c.HubURL != "" {
		args := &pod.Spec.Containers[0].Args
		*args = append(*args, "--hub-ca-file="+c.hubCAFile())
		sum := sha256.Sum256(hubCA)
		pod.Annotations = map[string]string{hubCAAnnotation: hex.EncodeToString(sum[:])}
	}
	out, err := yaml.Marshal(pod)
	if err != nil {
		return nil, fmt.Errorf("static pod manifest: %w", err)
	}
	return append([]byte("# Written by nodeproxy node install; removed by nodeproxy node uninstall.\n"), out...), nil
}

// runDir is the endpoint's directory on the node's tmpfs, and
// nodeViewDir the copy of the node's view in it (docs/operations.md,
// "Secrets at rest on the node").
const (
	runDir      = "/run/nodeproxy"
	nodeViewDir = runDir + "/node-view"
)

// hubCAAnnotation carries the digest of the hub's CA the endpoint was
// started with.
const hubCAAnnotation = "nodeproxy.io/hub-ca-sha256"

// kubeletCertDir is the directory of the client certificate a kubeconfig's
// current user presents: the kubelet's, which rotates there.
func kubeletCertDir(certFile string) string { return filepath.Dir(certFile) }
