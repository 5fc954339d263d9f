package charts

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"helm.sh/helm/v4/pkg/action"
	"helm.sh/helm/v4/pkg/chart/common/util"
	chartv2 "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"helm.sh/helm/v4/pkg/kube"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/dynamic"

	"github.com/nodeproxy/nodeproxy/test/testserver"
)

// helmTimeout bounds each action; nothing is waited for (no hooks, and
// the harness runs no controllers, so no pod would ever be ready), so
// this only covers a loaded machine's API calls.
const helmTimeout = 2 * time.Minute

// everything turns on every optional piece, on the production sizing.
func everything(t *testing.T) map[string]any {
	t.Helper()
	return util.MergeTables(valuesOf(t, `
authorizationWebhook: {enabled: true}
prometheus: {enabled: true}
node: {enabled: true}
hub: {uncachedTypes: true}
kubeProxy: {rbac: true}
podAPIHandover: {rbac: true}
`), valuesFile(t, "nodeproxy/values-production.yaml"))
}

// TestInstallUpgradeUninstall runs Helm's install, upgrade and uninstall
// actions (the helm command's code) against the harness's kube-apiserver:
// install with the defaults into a namespace Helm creates; a server-side
// dry-run upgrade with every optional piece, which kube-apiserver
// validates and admits without storing; that upgrade for real; an
// upgrade back to the defaults, which deletes what they leave out; and
// uninstall, which leaves nothing of the release. cert-manager's and the
// Prometheus Operator's kinds come from the minimal CRDs the manifests
// tests serve them with (manifests/testdata), so the objects are created
// for real; nothing acts on them, and with no controller the Deployment
// and DaemonSet start no pod.
func TestInstallUpgradeUninstall(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	h := newHelmRelease(ctx, t)
	dyn := h.dyn
	h.install(map[string]any{})
	expect(ctx, t, dyn, "after install", map[gvrName]bool{
		deployment: true, apiService: true, authReader: true, servingCert: true,
		daemonSet: false, serviceMonitor: false, apiserverFiles: false,
	})
	if got := replicas(ctx, t, dyn); got != 2 {
		t.Errorf("after install: %d replicas, want the default 2", got)
	}

	upgrade := h.upgrade
	upgrade(everything(t), action.DryRunServer, false)
	expect(ctx, t, dyn, "after a server-side dry-run upgrade", map[gvrName]bool{daemonSet: false, serviceMonitor: false})

	upgrade(everything(t), action.DryRunNone, false)
	expect(ctx, t, dyn, "after the upgrade to everything", map[gvrName]bool{
		deployment: true, daemonSet: true, serviceMonitor: true, prometheusRule: true, scrapeConfig: true,
		apiserverFiles: true, uncachedRole: true, kubeProxyBinding: true, handoverRole: true,
	})
	if got := replicas(ctx, t, dyn); got != 3 {
		t.Errorf("after the upgrade: %d replicas, want values-production.yaml's 3", got)
	}

	upgrade(map[string]any{}, action.DryRunNone, true)
	if got := replicas(ctx, t, dyn); got != 2 {
		t.Errorf("after the upgrade back: %d replicas, want the default 2", got)
	}
	expect(ctx, t, dyn, "after the upgrade back to the defaults", map[gvrName]bool{
		deployment: true, daemonSet: false, serviceMonitor: false, prometheusRule: false, scrapeConfig: false,
		apiserverFiles: false, uncachedRole: false, kubeProxyBinding: false, handoverRole: false,
	})

	h.uninstall()
	expect(ctx, t, dyn, "after uninstall", map[gvrName]bool{
		deployment: false, apiService: false, authReader: false, servingCert: false, informersRole: false,
	})
}

// helmRelease runs Helm's actions on the release nodeproxy against the
// harness's kube-apiserver, as the helm command does with an admin
// kubeconfig; each fails the test on error.
type helmRelease struct {
	ctx context.Context
	t   *testing.T
	cfg *action.Configuration
	ch  *chartv2.Chart
	dyn dynamic.Interface
}

// newHelmRelease serves the kinds the chart renders beyond the built-in
// ones (cert-manager's and the Prometheus Operator's, through the
// minimal CRDs the manifests tests use), creates the namespace the
// node endpoints' scrape config goes in, and loads the chart.
func newHelmRelease(ctx context.Context, t *testing.T) *helmRelease {
	t.Helper()
	if err := cp.ApplyFiles(ctx, manifestsDir+"/testdata/cert-manager-crds.yaml", manifestsDir+"/testdata/prometheus-operator-crds.yaml"); err != nil {
		t.Fatal(err)
	}
	// kube-prometheus's namespace, where the node endpoints' scrape
	// config goes; the chart does not create it.
	if err := cp.EnsureNamespace(ctx, "monitoring"); err != nil {
		t.Fatal(err)
	}
	kubeconfig := testserver.AdminKubeconfig(t, cp, "")
	flags := genericclioptions.NewConfigFlags(false)
	flags.KubeConfig = &kubeconfig
	ns := namespace
	flags.Namespace = &ns
	cfg := action.NewConfiguration()
	cfg.SetLogger(slog.DiscardHandler)
	if err := cfg.Init(flags, namespace, "secret"); err != nil {
		t.Fatal(err)
	}
	ch, err := loader.Load(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	return &helmRelease{ctx: ctx, t: t, cfg: cfg, ch: ch, dyn: dynamic.NewForConfigOrDie(cp.AdminConfig())}
}

// install installs the release with vals into a namespace Helm creates.
func (h *helmRelease) install(vals map[string]any) {
	h.t.Helper()
	install := action.NewInstall(h.cfg)
	install.ReleaseName, install.Namespace, install.CreateNamespace = releaseName, namespace, true
	install.WaitStrategy, install.Timeout = kube.HookOnlyStrategy, helmTimeout
	if _, err := install.RunWithContext(h.ctx, h.ch, vals); err != nil {
		h.t.Fatalf("helm install: %v", err)
	}
}

// upgrade upgrades the release to vals. reset: --reset-values; without
// it, Helm keeps the release's values when an upgrade gives none.
func (h *helmRelease) upgrade(vals map[string]any, dryRun action.DryRunStrategy, reset bool) {
	h.t.Helper()
	u := action.NewUpgrade(h.cfg)
	u.Namespace, u.DryRunStrategy, u.ResetValues = namespace, dryRun, reset
	u.WaitStrategy, u.Timeout = kube.HookOnlyStrategy, helmTimeout
	if _, err := u.RunWithContext(h.ctx, releaseName, h.ch, vals); err != nil {
		h.t.Fatalf("helm upgrade (dry run %s): %v", dryRun, err)
	}
}

// uninstall uninstalls the release and checks that Helm lists none.
func (h *helmRelease) uninstall() {
	h.t.Helper()
	uninstall := action.NewUninstall(h.cfg)
	uninstall.WaitStrategy, uninstall.Timeout = kube.HookOnlyStrategy, helmTimeout
	if _, err := uninstall.Run(releaseName); err != nil {
		h.t.Fatalf("helm uninstall: %v", err)
	}
	releases, err := action.NewList(h.cfg).Run()
	if err != nil {
		h.t.Fatal(err)
	}
	if len(releases) != 0 {
		h.t.Errorf("after uninstall Helm still lists %d releases", len(releases))
	}
}

// gvrName is an object the install test looks for.
type gvrName struct {
	gvr             schema.GroupVersionResource
	namespace, name string
}

var (
	deployment       = gvrName{schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}, namespace, "nodeproxy"}
	daemonSet        = gvrName{schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "daemonsets"}, namespace, "nodeproxy-node"}
	apiService       = gvrName{schema.GroupVersionResource{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices"}, "", "v1alpha1.bulk.k8s.io"}
	authReader       = gvrName{schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "rolebindings"}, "kube-system", "nodeproxy:extension-apiserver-authentication-reader"}
	informersRole    = gvrName{schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterroles"}, "", "nodeproxy:informers"}
	uncachedRole     = gvrName{schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterroles"}, "", "nodeproxy:uncached-types"}
	handoverRole     = gvrName{schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterroles"}, "", "nodeproxy:podapi-handover"}
	kubeProxyBinding = gvrName{schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterrolebindings"}, "", "nodeproxy:bulk-kube-proxy"}
	statefulSet      = gvrName{schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "statefulsets"}, namespace, "nodeproxy"}
	shardsService    = gvrName{schema.GroupVersionResource{Version: "v1", Resource: "services"}, namespace, "nodeproxy-shards"}
	peersBinding     = gvrName{schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterrolebindings"}, "", "nodeproxy:authorize-peers"}
	servingCert      = gvrName{schema.GroupVersionResource{Group: "cert-manager.io", Version: "v1", Resource: "certificates"}, namespace, "nodeproxy-serving"}
	serviceMonitor   = gvrName{schema.GroupVersionResource{Group: "monitoring.coreos.com", Version: "v1", Resource: "servicemonitors"}, namespace, "nodeproxy"}
	prometheusRule   = gvrName{schema.GroupVersionResource{Group: "monitoring.coreos.com", Version: "v1", Resource: "prometheusrules"}, namespace, "nodeproxy"}
	scrapeConfig     = gvrName{schema.GroupVersionResource{Version: "v1", Resource: "secrets"}, "monitoring", "nodeproxy-node-scrape-config"}
	apiserverFiles   = gvrName{schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, namespace, "nodeproxy-kube-apiserver-files"}
)

// expect checks that each object exists or not.
func expect(ctx context.Context, t *testing.T, dyn dynamic.Interface, when string, want map[gvrName]bool) {
	t.Helper()
	for o, exists := range want {
		_, err := dyn.Resource(o.gvr).Namespace(o.namespace).Get(ctx, o.name, metav1.GetOptions{})
		switch {
		case err == nil && !exists:
			t.Errorf("%s: %s %s/%s exists", when, o.gvr.Resource, o.namespace, o.name)
		case apierrors.IsNotFound(err) && exists:
			t.Errorf("%s: %s %s/%s does not exist", when, o.gvr.Resource, o.namespace, o.name)
		case err != nil && !apierrors.IsNotFound(err):
			t.Errorf("%s: get %s %s/%s: %v", when, o.gvr.Resource, o.namespace, o.name, err)
		}
	}
}

// replicas returns the hub Deployment's spec.replicas.
func replicas(ctx context.Context, t *testing.T, dyn dynamic.Interface) int64 {
	t.Helper()
	return replicasOf(ctx, t, dyn, deployment)
}

// replicasOf returns the spec.replicas of the workload o.
func replicasOf(ctx context.Context, t *testing.T, dyn dynamic.Interface, o gvrName) int64 {
	t.Helper()
	d, err := dyn.Resource(o.gvr).Namespace(o.namespace).Get(ctx, o.name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	spec, _ := d.Object["spec"].(map[string]any)
	n, _ := spec["replicas"].(int64)
	return n
}
