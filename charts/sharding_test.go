package charts

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"helm.sh/helm/v4/pkg/action"
	"helm.sh/helm/v4/pkg/chart/common/util"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// shardingOnly are what sharding.enabled adds to the hub's pod, as
// manifests/overlays/sharded adds them to the base's: the two flags, the
// pod's name and namespace, and the serving Secret's ca.crt.
var (
	shardingArgs  = []string{"--shard-service=nodeproxy-shards", "--shard-peer-ca-file=/etc/nodeproxy/tls/ca.crt"}
	shardingEnv   = []string{"POD_NAME", "POD_NAMESPACE"}
	shardingItems = []string{"ca.crt"}
)

// TestShardedHubRunsTheDeploymentsPodWithEveryHubValue: with
// sharding.enabled and every hub value set (the production sizing, the
// uncached types, extra flags, a nodeSelector, tolerations, a pull
// policy), the StatefulSet's pod is the Deployment's for the same values
// but for what sharding adds; so a hub value is never dropped for a
// sharded hub. The kustomize comparison covers the defaults only. Its
// replicas are sharding.replicas, not hub.replicas.
func TestShardedHubRunsTheDeploymentsPodWithEveryHubValue(t *testing.T) {
	vals := func(sharded bool) map[string]any {
		v := util.MergeTables(valuesOf(t, `
image: {pullPolicy: Always}
hub:
  extraArgs: [--v=4]
  nodeSelector: {node-role.kubernetes.io/control-plane: ""}
  tolerations: [{key: node-role.kubernetes.io/control-plane, effect: NoSchedule}]
`), everything(t))
		if sharded {
			v = util.MergeTables(valuesOf(t, "sharding: {enabled: true, replicas: 5}"), v)
		}
		return v
	}
	deployment := hubWorkload(t, vals(false), "Deployment")
	sts := hubWorkload(t, vals(true), "StatefulSet")
	if got := sts["spec"].(map[string]any)["replicas"]; got != 5.0 {
		t.Errorf("the StatefulSet's replicas are %v, want sharding.replicas's 5", got)
	}

	pod := sts["spec"].(map[string]any)["template"].(map[string]any)
	spec := pod["spec"].(map[string]any)
	c := spec["containers"].([]any)[0].(map[string]any)
	c["args"] = without(t, "args", c["args"].([]any), shardingArgs, func(a any) string { return a.(string) })
	c["env"] = without(t, "env", c["env"].([]any), shardingEnv, func(e any) string { return e.(map[string]any)["name"].(string) })
	secret := spec["volumes"].([]any)[0].(map[string]any)["secret"].(map[string]any)
	secret["items"] = without(t, "the serving Secret's items", secret["items"].([]any), shardingItems, func(i any) string { return i.(map[string]any)["key"].(string) })

	want := deployment["spec"].(map[string]any)["template"]
	if diff := cmp.Diff(want, pod); diff != "" {
		t.Errorf("the StatefulSet's pod differs from the Deployment's by more than sharding's additions (-Deployment +StatefulSet):\n%s", diff)
	}
}

// hubWorkload renders the chart with vals and returns its one hub
// workload, of kind, failing if the other kind is rendered too.
func hubWorkload(t *testing.T, vals map[string]any, kind string) object {
	t.Helper()
	manifest, err := renderChart(t, vals)
	if err != nil {
		t.Fatalf("render: %v", err)
	}
	var found []object
	for _, o := range decode(t, manifest) {
		if o["kind"] == "Deployment" || o["kind"] == "StatefulSet" {
			if md := o["metadata"].(map[string]any); md["name"] == "nodeproxy" {
				found = append(found, o)
			}
		}
	}
	if len(found) != 1 || found[0]["kind"] != kind {
		kinds := make([]string, 0, len(found))
		for _, o := range found {
			kinds = append(kinds, o["kind"].(string))
		}
		t.Fatalf("the chart renders the hub as %v, want one %s", kinds, kind)
	}
	return found[0]
}

// without returns list less the entries named names, failing unless each
// name is there once.
func without(t *testing.T, what string, list []any, names []string, name func(any) string) []any {
	t.Helper()
	for _, n := range names {
		if got := slices.IndexFunc(list, func(e any) bool { return name(e) == n }); got < 0 ||
			slices.IndexFunc(list[got+1:], func(e any) bool { return name(e) == n }) >= 0 {
			t.Errorf("the StatefulSet's %s hold %s other than once", what, n)
		}
	}
	return slices.DeleteFunc(slices.Clone(list), func(e any) bool { return slices.Contains(names, name(e)) })
}

// TestUpgradeToShardedAndBack runs Helm's actions against the harness's
// kube-apiserver: an installed hub upgraded with sharding.enabled (a
// server-side dry run, which kube-apiserver validates and admits without
// storing, then for real) runs as the StatefulSet behind the headless
// Service, with the peers' binding and the serving certificate naming
// the replicas, and its Deployment deleted; upgraded back to the
// defaults it is the Deployment again and none of the sharded objects is
// left; uninstall leaves nothing of either. With no controller in the
// harness, neither workload starts a pod.
func TestUpgradeToShardedAndBack(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	h := newHelmRelease(ctx, t)
	h.install(map[string]any{})
	sharded := valuesOf(t, "sharding: {enabled: true}")

	h.upgrade(sharded, action.DryRunServer, false)
	expect(ctx, t, h.dyn, "after a server-side dry-run upgrade to sharded", map[gvrName]bool{
		deployment: true, statefulSet: false, shardsService: false, peersBinding: false,
	})

	h.upgrade(sharded, action.DryRunNone, false)
	expect(ctx, t, h.dyn, "after the upgrade to sharded", map[gvrName]bool{
		deployment: false, statefulSet: true, shardsService: true, peersBinding: true, servingCert: true,
	})
	if got := replicasOf(ctx, t, h.dyn, statefulSet); got != 3 {
		t.Errorf("after the upgrade to sharded: %d replicas, want sharding.replicas's default 3", got)
	}
	cert, err := h.dyn.Resource(servingCert.gvr).Namespace(namespace).Get(ctx, servingCert.name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	names, _, _ := unstructured.NestedStringSlice(cert.Object, "spec", "dnsNames")
	if want := "*.nodeproxy-shards." + namespace + ".svc"; !slices.Contains(names, want) {
		t.Errorf("after the upgrade to sharded the serving certificate names %q, not %q", names, want)
	}

	h.upgrade(map[string]any{}, action.DryRunNone, true)
	expect(ctx, t, h.dyn, "after the upgrade back to the defaults", map[gvrName]bool{
		deployment: true, statefulSet: false, shardsService: false, peersBinding: false,
	})
	if got := replicas(ctx, t, h.dyn); got != 2 {
		t.Errorf("after the upgrade back: %d replicas, want the default 2", got)
	}

	h.uninstall()
	expect(ctx, t, h.dyn, "after uninstall", map[gvrName]bool{
		deployment: false, statefulSet: false, shardsService: false, peersBinding: false, servingCert: false,
	})
}
