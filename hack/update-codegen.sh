#!/usr/bin/env bash
# Regenerates deepcopy functions and OpenAPI definitions of apis/.
# Run through `make generate`; `make verify-codegen` checks the tree is
# up to date. The generators are built from hack/tools like the test
# binaries, once per machine.
set -euo pipefail
cd "$(dirname "$0")/.."

tools=$(go run ./hack/buildtools deepcopy-gen openapi-gen)
header=hack/boilerplate.go.txt

"$tools/deepcopy-gen" --go-header-file "$header" --output-file zz_generated.deepcopy.go \
  ./apis/bulk/v1alpha1

"$tools/openapi-gen" --go-header-file "$header" \
  --output-dir apis/bulk/openapi --output-pkg github.com/nodeproxy/nodeproxy/apis/bulk/openapi \
  --output-file zz_generated.openapi.go --output-model-name-file zz_generated.model_name.go \
  --readonly-pkg k8s.io/apimachinery/pkg/apis/meta/v1 --readonly-pkg k8s.io/apimachinery/pkg/runtime --readonly-pkg k8s.io/apimachinery/pkg/version \
  --report-filename hack/api-rule-violations.list \
  k8s.io/apimachinery/pkg/apis/meta/v1 k8s.io/apimachinery/pkg/runtime k8s.io/apimachinery/pkg/version \
  ./apis/bulk/v1alpha1
