// Package v1alpha1 holds the bulk.k8s.io/v1alpha1 API: BulkGetOperation,
// one request that lists objects of several resource types at once, as
// ../shared/seeds/bulk-watch-proposal.txt describes. The same selector
// (GetOperation) opens a bulk watch channel.
//
// zz_generated.*.go are made by `make generate`; do not edit them.
//
// +k8s:deepcopy-gen=package
// +k8s:openapi-gen=true
// +k8s:openapi-model-package=io.k8s.bulk.v1alpha1
// +groupName=bulk.k8s.io
package v1alpha1
