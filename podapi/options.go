package podapi

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	cliflag "k8s.io/component-base/cli/flag"
	"k8s.io/klog/v2"
)

// Options are the flags of the Pod API, in the "pod api" section of
// `nodeproxy node`.
type Options struct {
	Enabled            bool
	Socket             string
	AllowedUIDs        []uint
	StateDir           string
	KubeletAddress     string
	KubeletTokenFile   string
	HandoverKubeconfig string
	HandoverInterval   time.Duration
	HandoverTimeout    time.Duration
	// KubeletPodResources and KubeletTakeTimeout: see Config.
	KubeletPodResources string
	KubeletTakeTimeout  time.Duration
	AdmitBinary         string
}

// NewOptions returns the defaults: off; when on, root only.
func NewOptions() *Options {
	return &Options{
		Socket:           "/run/nodeproxy/pod-api.sock",
		AllowedUIDs:      []uint{0},
		StateDir:         "/var/lib/nodeproxy/pods",
		KubeletAddress:   "127.0.0.1:1011",
		KubeletTokenFile: "/var/lib/nodeproxy/pod-api-kubelet-token",
		HandoverInterval: 10 * time.Second,
		HandoverTimeout:  2 * time.Minute,
		// The kubelet's default root directory and socket name
		// (pkg/kubelet/apis/podresources, config.DefaultKubeletPodResourcesDirName).
		KubeletPodResources: "/var/lib/kubelet/pod-resources/kubelet.sock",
		// Above the kubelet's own fetch period (20 s), which the two more
		// fetches already wait for: the timeout matters only with a
		// shorter httpCheckFrequency.
		KubeletTakeTimeout: 30 * time.Second,
	}
}

// AddFlags adds the "pod api" section to fss.
func (o *Options) AddFlags(fss *cliflag.NamedFlagSets) {
	fs := fss.FlagSet("pod api")
	fs.BoolVar(&o.Enabled, "pod-api", o.Enabled,
		"Serve the Pod API: create and delete pods on this node without an API server, run by the kubelet through its HTTP pod source (staticPodURL), "+
			"and hand them to kube-apiserver once it is up. It runs arbitrary pods as root: see docs/operations.md before turning it on.")
	fs.StringVar(&o.Socket, "pod-api-socket", o.Socket,
		"Unix socket of the Pod API, created 0600 and owned by the endpoint's user (root), in a directory created 0700.")
	fs.UintSliceVar(&o.AllowedUIDs, "pod-api-allowed-uids", o.AllowedUIDs,
		"Local users (by uid, read from the socket's peer credentials) allowed to call the Pod API; others get 403 even if the socket's mode lets them connect.")
	fs.StringVar(&o.StateDir, "pod-api-state-dir", o.StateDir,
		"Where stored pods are kept, one file each, written atomically; it must survive reboots (not a tmpfs).")
	fs.StringVar(&o.KubeletAddress, "pod-api-kubelet-address", o.KubeletAddress,
		"host:port of the kubelet's pod source, plain HTTP: the kubelet's staticPodURL is http://<address>/pods. "+
			"Keep it on loopback and below port 1024, which only root may bind, so that no unprivileged process can stand in for it.")
	fs.StringVar(&o.KubeletTokenFile, "pod-api-kubelet-token-file", o.KubeletTokenFile,
		"Bearer token the kubelet must send (staticPodURLHeader Authorization: Bearer <token>). Generated (0600) if missing.")
	fs.StringVar(&o.HandoverKubeconfig, "pod-api-handover-kubeconfig", o.HandoverKubeconfig,
		"Kubeconfig of an identity allowed to create, and get, pods in the namespaces of the stored pods (not the node's: NodeRestriction lets a node create only mirror pods). "+
			"Empty: pods are never handed over.")
	fs.DurationVar(&o.HandoverInterval, "pod-api-handover-interval", o.HandoverInterval, "How often stored pods are tried for handover; failures back off from it up to 5m.")
	fs.DurationVar(&o.HandoverTimeout, "pod-api-handover-timeout", o.HandoverTimeout,
		"How long a pod being handed over waits for the kubelet to drop the static pod and delete its mirror pod before it is served locally again.")
	fs.StringVar(&o.KubeletPodResources, "pod-api-kubelet-pod-resources-socket", o.KubeletPodResources,
		"The kubelet's PodResources socket (<kubelet root-dir>/pod-resources/kubelet.sock), where the endpoint sees which pods the kubelet took. "+
			"A pod the kubelet keeps not taking (it refuses the whole served list when one pod fails its checks) is quarantined so that the others run. Empty: never.")
	fs.DurationVar(&o.KubeletTakeTimeout, "pod-api-kubelet-take-timeout", o.KubeletTakeTimeout,
		"How long, at least, a served pod may stay untaken by the kubelet, which must also have fetched its pods twice more, before it is quarantined.")
	fs.StringVar(&o.AdmitBinary, "pod-api-admit-binary", o.AdmitBinary,
		"The helper that checks each posted pod as kube-apiserver and the kubelet would ("+AdmitBinary+", shipped with the endpoint and of its version). "+
			"Empty: "+AdmitBinary+" beside the endpoint's binary, where make build and the node's image put it.")
}

// Validate returns every problem at once; none when the API is off.
func (o *Options) Validate() error {
	if !o.Enabled {
		return nil
	}
	var errs []error
	if !filepath.IsAbs(o.Socket) {
		errs = append(errs, fmt.Errorf("--pod-api-socket must be an absolute path, got %q", o.Socket))
	}
	if len(o.AllowedUIDs) == 0 {
		errs = append(errs, errors.New("--pod-api-allowed-uids must name at least one user"))
	}
	if o.StateDir == "" {
		errs = append(errs, errors.New("--pod-api-state-dir is required"))
	}
	if o.KubeletTokenFile == "" {
		errs = append(errs, errors.New("--pod-api-kubelet-token-file is required: the kubelet's fetch is authenticated"))
	}
	if host, port, err := net.SplitHostPort(o.KubeletAddress); err != nil {
		errs = append(errs, fmt.Errorf("--pod-api-kubelet-address must be host:port: %w", err))
	} else if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		errs = append(errs, fmt.Errorf("--pod-api-kubelet-address must be a loopback address: the kubelet's fetch is plain HTTP, got %q", host))
	} else if p, err := strconv.Atoi(port); err != nil || p < 0 || p > 65535 {
		errs = append(errs, fmt.Errorf("--pod-api-kubelet-address port must be between 0 and 65535, got %q", port))
	}
	if o.AdmitBinary != "" && !filepath.IsAbs(o.AdmitBinary) {
		errs = append(errs, fmt.Errorf("--pod-api-admit-binary must be an absolute path, got %q", o.AdmitBinary))
	}
	if o.KubeletPodResources != "" && !filepath.IsAbs(o.KubeletPodResources) {
		errs = append(errs, fmt.Errorf("--pod-api-kubelet-pod-resources-socket must be an absolute path, got %q", o.KubeletPodResources))
	}
	if o.KubeletTakeTimeout <= 0 {
		errs = append(errs, errors.New("--pod-api-kubelet-take-timeout must be positive"))
	}
	if o.HandoverInterval <= 0 || o.HandoverTimeout <= 0 {
		errs = append(errs, errors.New("--pod-api-handover-interval and --pod-api-handover-timeout must be positive"))
	}
	return errors.Join(errs...)
}

// Config reads (or generates) the kubelet's token and the handover
// kubeconfig.
func (o *Options) Config(node string) (Config, error) {
	token, err := ensureToken(o.KubeletTokenFile)
	if err != nil {
		return Config{}, err
	}
	cfg := Config{NodeName: node, StateDir: o.StateDir, KubeletToken: token,
		HandoverInterval: o.HandoverInterval, HandoverTimeout: o.HandoverTimeout,
		KubeletPodResources: o.KubeletPodResources, KubeletTakeTimeout: o.KubeletTakeTimeout,
		AdmitBinary: o.AdmitBinary}
	for _, uid := range o.AllowedUIDs {
		cfg.AllowedUIDs = append(cfg.AllowedUIDs, uint32(uid))
	}
	if o.HandoverKubeconfig != "" {
		if cfg.Handover, err = clientcmd.BuildConfigFromFlags("", o.HandoverKubeconfig); err != nil {
			return Config{}, fmt.Errorf("--pod-api-handover-kubeconfig %s: %w", o.HandoverKubeconfig, err)
		}
	}
	if _, port, _ := net.SplitHostPort(o.KubeletAddress); port != "0" {
		if p, _ := strconv.Atoi(port); p >= 1024 {
			klog.InfoS("Warning: the kubelet's pod source is on an unprivileged port, which any local user could bind while the endpoint is down and serve the kubelet pods of its own", "address", o.KubeletAddress)
		}
	}
	return cfg, nil
}

// ensureToken reads the token at path, or writes a new random one there
// (0600, atomically) if there is none.
func ensureToken(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err == nil {
		token := strings.TrimSpace(string(b))
		if len(token) < 32 {
			return "", fmt.Errorf("--pod-api-kubelet-token-file %s: the token must have at least 32 characters", path)
		}
		return token, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("--pod-api-kubelet-token-file: %w", err)
	}
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return "", fmt.Errorf("generate the kubelet's token: %w", err)
	}
	token := hex.EncodeToString(raw)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return "", fmt.Errorf("--pod-api-kubelet-token-file: %w", err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(token+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("--pod-api-kubelet-token-file: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return "", fmt.Errorf("--pod-api-kubelet-token-file: %w", err)
	}
	klog.InfoS("Generated the token for the kubelet's pod source", "file", path)
	return token, nil
}
