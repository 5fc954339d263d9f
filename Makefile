# nodeproxy's developer entry points. Every target works on a fresh
# machine with only Go and make: what it needs beyond that it builds,
# except that `make test` runs the real Prometheus and promtool, from the
# Debian package prometheus (.ci/run installs it; without it those tests
# fail, naming the package).

GO      ?= go
# -race on every test: nodeproxy is concurrent by design. The timeout
# covers a loaded 2-core machine; a warm run takes a few minutes.
TESTFLAGS ?= -race -count=1 -timeout 30m
# How long `make test` fuzzes each decoder beyond its seeds and its corpus
# in testdata/fuzz: the bulk watch request, the bulk get and the
# SubjectAccessReview.
# A count of executions, not a duration: Go 1.26's fuzz coordinator can
# fail a duration run at its deadline when a loaded machine starves the
# workers ("context deadline exceeded", no failing input;
# golang/go#75804, fixed in Go 1.27). A count has no deadline to race.
# 5000 is seconds a target (docs/benchmarks.md, "make test").
FUZZTIME ?= 5000x
# How long `make fuzz` fuzzes each of them.
FUZZLONG ?= 10m
# The fuzz targets, as package:target.
FUZZTARGETS = ./watchmux:FuzzDecodeRequest ./bulk/get:FuzzBulkGet ./authorizer:FuzzWebhook

# What --version prints: the commit, -dirty when the tree has changes.
VERSION ?= $(shell git describe --always --dirty 2>/dev/null || echo devel)
LDFLAGS := -X github.com/nodeproxy/nodeproxy/internal/cli.version=$(VERSION)
# grpcnotrace keeps golang.org/x/net/trace, and the html/template it
# imports, out of the binaries: text/template's reflection turns off the
# linker's removal of unused methods, and the hub links gRPC (through
# k8s.io/apiserver's server options), as does nodeproxy-node for the
# kubelet's PodResources API (podapi). What the tag saves is in
# docs/benchmarks.md, "Binary sizes"; hack/image/oci builds with it too.
BUILDTAGS := grpcnotrace

.PHONY: all build tools generate verify-codegen test fuzz demo bench image vet clean help

all: build

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-8s %s\n", $$1, $$2}'

build: ## build bin/nodeproxy (hub), bin/nodeproxy-node (the node endpoint alone, with nodeproxy-node-podadmit, its Pod API's checks) and bin/nodeproxy-bench
	$(GO) build -tags '$(BUILDTAGS)' -ldflags '$(LDFLAGS)' -o bin/nodeproxy ./cmd/nodeproxy
	$(GO) build -tags '$(BUILDTAGS)' -ldflags '$(LDFLAGS)' -o bin/nodeproxy-node ./cmd/nodeproxy-node
	$(GO) build -tags '$(BUILDTAGS)' -ldflags '$(LDFLAGS)' -o bin/nodeproxy-node-podadmit ./cmd/nodeproxy-node-podadmit
	$(GO) build -tags '$(BUILDTAGS)' -ldflags '$(LDFLAGS)' -o bin/nodeproxy-bench ./cmd/nodeproxy-bench

tools: ## build kube-apiserver, etcd and the hollow kubelets (kubemark, hack/tools/hollowkubelet) for tests and the demo (once per machine, ~15 min cold)
	$(GO) run ./hack/buildtools

generate: ## regenerate deepcopy and OpenAPI code of apis/ (zz_generated.*)
	hack/update-codegen.sh

verify-codegen: generate ## fail if generated code is not what `make generate` makes
	@git diff --exit-code -- apis hack/api-rule-violations.list || \
	  { echo "generated code is out of date: run make generate and commit"; exit 1; }

vet: ## gofmt and go vet
	@unformatted=$$(gofmt -l $$(git ls-files '*.go')); \
	  if [ -n "$$unformatted" ]; then echo "gofmt needed: $$unformatted"; exit 1; fi
	$(GO) vet ./...

test: tools verify-codegen vet ## run every test, with the race detector, against a real control plane
	$(GO) test $(TESTFLAGS) ./...
	@for t in $(FUZZTARGETS); do \
	  echo "$(GO) test -run '^$$' -fuzz $${t#*:} -fuzztime $(FUZZTIME) $${t%%:*}"; \
	  $(GO) test -run '^$$' -fuzz "^$${t#*:}$$" -fuzztime $(FUZZTIME) $${t%%:*} || exit 1; \
	done

fuzz: ## fuzz every decoder for FUZZLONG each (default 10m); a failing input lands in testdata/fuzz: commit it with the fix
	@for t in $(FUZZTARGETS); do \
	  echo "$(GO) test -run '^$$' -fuzz $${t#*:} -fuzztime $(FUZZLONG) $${t%%:*}"; \
	  $(GO) test -run '^$$' -fuzz "^$${t#*:}$$" -fuzztime $(FUZZLONG) $${t%%:*} || exit 1; \
	done

# What `make demo` is given: DEMOFLAGS=--exit ends it after its last step
# instead of waiting for Ctrl-C; `go run ./hack/demo --help` lists the rest.
DEMOFLAGS ?=

demo: tools build ## nodes behind endpoints through an outage, the Pod API, kube-apiserver's watches and CPU direct and behind endpoints (Ctrl-C stops it; DEMOFLAGS=--exit)
	$(GO) run ./hack/demo --nodeproxy=bin/nodeproxy $(DEMOFLAGS)

# What `make bench` runs: every scenario, apiserver, causal and failover
# included (they start a local control plane, as make demo does; causal
# adds about 40 s, failover about 100 s with its node-endpoint run).
BENCHSCENARIOS ?= authz graph bulkget fanout revoke apiserver causal failover

bench: tools build ## nodeproxy-bench: the in-tree Node authorizer's shape (100k pods), kube-apiserver side by side, graph-lag refusals on 2 replicas, hub failover (~4 min; BENCHFLAGS, BENCHSCENARIOS)
	bin/nodeproxy-bench --chart bin/bench.svg $(BENCHFLAGS) $(BENCHSCENARIOS)

image: ## build the images with only Go: the hub's (bin/image/) and the node endpoint's (bin/image-node/), OCI layout and docker tarballs, amd64 and arm64 (IMAGEFLAGS, NODEIMAGEFLAGS)
	$(GO) run ./hack/image --output bin/image --version $(VERSION) $(IMAGEFLAGS)
	$(GO) run ./hack/image --binary nodeproxy-node --output bin/image-node --version $(VERSION) $(NODEIMAGEFLAGS)

clean: ## remove build output (the tools cache stays; see docs/operations.md)
	rm -rf bin
