// Package charts holds nodeproxy's Helm chart (charts/nodeproxy) and, in
// its tests, what proves it: rendered with Helm's own Go packages
// (helm.sh/helm/v4, the code the helm command runs) for the settings of
// each kustomization under manifests/ and compared with kustomize's build
// object by object, so that the two cannot drift; linted; refused with a
// message naming the value for bad values; and installed, upgraded and
// uninstalled against the harness's kube-apiserver. The hub's pod is one
// template (_hub-pod.tpl) that the Deployment and, sharded, the
// StatefulSet both run; a test holds the two pods equal but for what
// sharding adds, for every hub value. It has no code: the chart is the
// product.
package charts
