//go:build tools

// Package tools pins the versions of the programs nodeproxy's tests run
// against, a real kube-apiserver a real etcd and kubectl, and of the code
// generators `make generate` runs; test/controlplane builds them from
// source. It lives in its own module so that the product's go.mod carries
// none of k8s.io/kubernetes's dependencies.
package tools

import (
	_ "go.etcd.io/etcd/server/v3"
	_ "k8s.io/code-generator/cmd/deepcopy-gen"
	_ "k8s.io/kube-openapi/cmd/openapi-gen"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kubemark"
)
