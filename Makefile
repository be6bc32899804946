# capscale — `make help` lists the targets.
SHELL := /usr/bin/env bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

OUT        ?= _output
BIN        := $(OUT)/bin
NODES      ?= 5
GO         ?= go
E2E_FLAGS  ?=
VERSION    ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS    := -s -w -X github.com/capscale/capscale/internal/version.Version=$(VERSION)

export CGO_ENABLED ?= 0

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z0-9_-]+:.*## / {printf "  \033[36m%-16s\033[0m %s\n", $$1, $$2}' $(MAKEFILE_LIST)

# Debian packages the targets use: gcc (go test -race needs cgo), openssl
# (docs/keda.md's client-certificate commands), git (version stamping); for the
# real nodes (e2e/plane/realnode*.go): containerd and runc (the container
# runtime), containernetworking-plugins (bridge and host-local, the node's
# IPAM), iproute2 (ip, for the node's bridge) and nftables (the tests check
# that a real node leaves the host's ruleset as it found it).
DEB_PACKAGES := gcc libc6-dev openssl git containerd runc containernetworking-plugins iproute2 nftables

.PHONY: deps
deps: ## Install the Debian packages the tests need, if any is missing (apt-get).
	@missing=""; for p in $(DEB_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  if [ "$$(id -u)" = 0 ]; then sudo=""; else sudo=sudo; fi; \
	  $$sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y -qq $$missing; \
	fi

# capscale-scheduler (kube-scheduler + the UnderlayIP plugin) is its own Go
# module: k8s.io/kubernetes needs replace directives the main module must not
# carry. Built with the control plane's flags (-trimpath, CGO_ENABLED=0, the
# same module versions as e2e/tools/k8s) so Go reuses its compiled packages,
# and stamped with the Kubernetes version it is.
SCHED_MOD  := cmd/capscale-scheduler
K8S_STAMP  := $(foreach p,k8s.io/component-base/version k8s.io/client-go/pkg/version,-X $(p).gitVersion=v1.37.2 -X $(p).gitMajor=1 -X $(p).gitMinor=37 -X $(p).gitTreeState=clean)
STALE      := -f '{{if and .Stale (ne .StaleReason "not installed but available in build cache")}}{{.ImportPath}}{{end}}'

.PHONY: build
build: ## Build capscale's binaries (extender, metrics-adapter, workload-api, controller, kubectl-capscale, capscale-scheduler) into _output/bin.
	@mkdir -p $(BIN)
	@echo "building capscale's binaries into $(BIN)"
	@total=$$($(GO) list -deps -trimpath $(STALE) ./cmd/... | grep -c .) || true; \
	$(GO) build -v -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/ ./cmd/... 2>&1 | bash e2e/tools/progress.sh capscale "$$total"
	@cd $(SCHED_MOD) && total=$$($(GO) list -deps -trimpath $(STALE) . | grep -c .) || true; \
	$(GO) build -v -trimpath -ldflags '$(LDFLAGS) $(K8S_STAMP)' -o $(abspath $(BIN))/ . 2>&1 | bash $(abspath e2e/tools/progress.sh) capscale-scheduler "$$total"

.PHONY: control-plane
control-plane: ## Build (or link from ~/.cache/capscale) etcd, kube-*, kubectl, the kubelet, kube-proxy and whereabouts (real nodes) and kwok into _output/bin.
	@bash e2e/tools/build.sh $(BIN) etcd kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet kube-proxy kwok whereabouts whereabouts-node-slice-controller

.PHONY: karpenter
karpenter: ## Build (or link from ~/.cache/capscale) Karpenter with its KWOK cloud provider into _output/bin (local-up KARPENTER=1, the autoscaler tests).
	@bash e2e/tools/build.sh $(BIN) karpenter

.PHONY: keda
keda: ## Build (or link from ~/.cache/capscale) KEDA's operator and metrics server, at the version capscale requires, into _output/bin.
	@bash e2e/tools/build.sh $(BIN) keda-operator keda-adapter

.PHONY: deploy-tools
deploy-tools: ## Build (or link from ~/.cache/capscale) helm and kubectl, which deploy/'s unit tests run, into _output/bin.
	@bash e2e/tools/build.sh $(BIN) helm kubectl

# When make began, so that make test's last line can say how long all before
# the suite took (hack/beside.sh).
TEST_START := $(shell date +%s)

.PHONY: test
# The Cilium checks run at nice 19 beside the end-to-end suite (hack/beside.sh):
# cold, they are a build of Cilium's dependency graph (BENCHMARKS.md), and the
# suite's planes leave a large part of both cores idle.
test: unit fuzz e2e-tools ## Unit tests with -race, every fuzz target briefly, then the end-to-end suite with the Cilium checks beside it.
	CAPSCALE_TEST_START=$(TEST_START) bash hack/beside.sh $(OUT)/test-cilium.log "$(MAKE) --no-print-directory test-cilium" -- \
	  env CAPSCALE_BIN_DIR=$(abspath $(BIN)) bash hack/e2e.sh $(E2E_FLAGS)

.PHONY: test-unit
test-unit: unit test-cilium ## Every unit test: make unit, then make test-cilium.

.PHONY: unit
unit: deps deploy-tools ## Unit tests: go test -race ./... (deploy/'s run helm and kubectl on the chart and manifests), the scheduler plugin's module and hack/oci.
	CGO_ENABLED=1 CAPSCALE_BIN_DIR=$(abspath $(BIN)) $(GO) test -race -count=1 ./...
	@# Without -race, with the build's flags: race-instrumenting kube-scheduler's
	@# whole dependency graph would be a second cold compile; the plugin's own
	@# decisions run under -race in the main module (schedplugin/).
	cd $(SCHED_MOD) && CGO_ENABLED=0 $(GO) test -trimpath -count=1 ./...
	cd hack/oci && $(GO) test -count=1 ./...

.PHONY: test-cilium
test-cilium: ## The presets on CiliumNodes written by Cilium v1.20.2's own code (controller/capacitysource/ciliumcheck).
	@# Its own module writes them (Cilium's dependency graph, k8s.io v0.36; without -race:
	@# BENCHMARKS.md, its cold build), capscale's presets count them.
	fx=$$(mktemp -d) && (cd controller/capacitysource/ciliumcheck && CAPSCALE_CILIUM_FIXTURES=$$fx $(GO) test -count=1 -timeout 20m ./...) \
		&& CAPSCALE_CILIUM_FIXTURES=$$fx $(GO) test -count=1 -run '^TestPresetsOnCiliumWritten$$' ./controller/capacitysource/; rc=$$?; rm -rf $$fx; exit $$rc

# An execution count, not a duration: with a duration, Go <1.27's fuzz
# coordinator can report its own deadline as a failure on a loaded machine
# (golang/go#75804), which failed CI with no failing input.
FUZZTIME ?= 20000x

.PHONY: fuzz
fuzz: ## Run every fuzz target for FUZZTIME (20000 executions) each, so that a decoder regression fails CI.
	@set -e; grep -rl --include='*_test.go' '^func Fuzz' . | grep -v '^./_output/' | sort | while read -r file; do \
	  for f in $$(sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*/\1/p' $$file); do \
	    echo "fuzz $$(dirname $$file) $$f ($(FUZZTIME))"; \
	    $(GO) test -run '^$$' -fuzz "^$$f\$$" -fuzztime $(FUZZTIME) ./$$(dirname $$file); \
	  done; \
	done

# make release (issue 44): the kubectl plugin's archives and krew manifest
# (hack/release), the image for IMAGE_PLATFORMS with capscale-scheduler for
# every supported minor (COMPAT_MINORS), and the Helm chart packaged with
# that version; with REGISTRY=host:port[/path], the image goes to
# $(REGISTRY)/capscale:$(RELEASE_VERSION) and the chart beside it as the OCI
# artifact $(REGISTRY)/charts/capscale:$(RELEASE_VERSION without v), whose
# image.repository is that image, so `helm install capscale
# oci://$(REGISTRY)/charts/capscale --version ...` needs nothing else.
# VERSION is the one version string: the chart's appVersion (its version
# without the v), deploy/'s image tag and this (deploy/'s TestOneVersion).
RELEASE_VERSION ?= $(shell cat VERSION)
PLATFORMS       ?= linux/amd64,linux/arm64,darwin/amd64,darwin/arm64,windows/amd64
# The Kubernetes minors below this repo's own that capscale-scheduler is
# built for (e2e/tools/k8s-1.MINOR); make test-compat runs each.
COMPAT_MINORS   ?= 1.35,1.36
.PHONY: release
release: release-kubectl ## kubectl-capscale archives, the image and the Helm chart (RELEASE_VERSION=v0.1.0); REGISTRY=host:port pushes image and chart there.
	$(MAKE) --no-print-directory image VERSION=$(RELEASE_VERSION) SCHEDULER_MINORS=$(COMPAT_MINORS) IMAGE_OUT=$(OUT)/release/image
	$(MAKE) --no-print-directory release-chart

.PHONY: release-kubectl
release-kubectl: ## Build kubectl-capscale for PLATFORMS into _output/release with its krew manifest (RELEASE_VERSION=v0.1.0).
	$(GO) run ./hack/release --version $(RELEASE_VERSION) --platforms $(PLATFORMS) --out $(OUT)/release \
	  --ldflags '-X github.com/capscale/capscale/internal/version.Version=$(RELEASE_VERSION)'

.PHONY: release-chart
release-chart: deploy-tools ## Package the Helm chart as capscale-$(RELEASE_VERSION).tgz into _output/release; REGISTRY=... pushes it to oci://$(REGISTRY)/charts.
	@rm -rf $(OUT)/release/chart && mkdir -p $(OUT)/release/chart && cp -r deploy/helm/capscale $(OUT)/release/chart/
	@# The packaged chart names the image it was released with.
	$(if $(REGISTRY),sed -i 's#^  repository: ghcr.io/capscale/capscale$$#  repository: $(REGISTRY)/capscale#' $(OUT)/release/chart/capscale/values.yaml && \
	  grep -q '^  repository: $(REGISTRY)/capscale$$' $(OUT)/release/chart/capscale/values.yaml)
	$(BIN)/helm package $(OUT)/release/chart/capscale --version $(RELEASE_VERSION:v%=%) --app-version $(RELEASE_VERSION) -d $(OUT)/release
	$(if $(REGISTRY),$(BIN)/helm push $(OUT)/release/capscale-$(RELEASE_VERSION:v%=%).tgz oci://$(REGISTRY)/charts $(if $(filter true,$(REGISTRY_INSECURE)),--plain-http))

.PHONY: e2e
e2e: e2e-tools ## End-to-end tests against a real local control plane (Karpenter and helm for the autoscaler tests).
	CAPSCALE_BIN_DIR=$(abspath $(BIN)) bash hack/e2e.sh $(E2E_FLAGS)

.PHONY: e2e-tools
e2e-tools: deps control-plane keda karpenter deploy-tools ## Everything the end-to-end suite runs beside capscale's own binaries.

# The compatibility matrix (issue 44), outside make test: each minor's
# control plane (COMPAT_MINORS, built from e2e/tools/k8s-1.MINOR: a cold
# minor is a full Kubernetes build) and this repo's, each running the
# scheduling modes, the adapter with HPAs and the rotating certificates;
# README.md's table is rewritten from the results (hack/compat/run.sh).
.PHONY: test-compat
test-compat: deps ## The compatibility matrix: COMPAT_MINORS and this repo's minor, each mode and the adapter on that minor's plane; rewrites README.md's table.
	bash hack/compat/run.sh $(subst $(comma), ,$(COMPAT_MINORS)) 1.37

comma := ,

.PHONY: bench
# The Go benchmarks' output is kept in $(OUT)/gobench.txt and printed again
# as rows of BENCHMARKS.md's table, as the benche2e scenarios print theirs.
GOBENCH := $(GO) test -run '^$$' -bench . -benchmem -count 1 ./extender/... ./metricsadapter/...
bench: build control-plane ## Handler and provider benchmarks, external-metrics GET load vs the framework's floor, forwarding overhead in delegation mode (prints rows for BENCHMARKS.md's table).
	$(GOBENCH) | tee $(OUT)/gobench.txt
	$(GO) run ./e2e/cmd/benche2e --scenario gobench --gobench-command "$(GOBENCH)" < $(OUT)/gobench.txt
	$(GO) build -o $(BIN)/test-adapter sigs.k8s.io/custom-metrics-apiserver/test-adapter
	$(GO) run ./e2e/cmd/benche2e --bin-dir $(BIN) --scenario metrics
	$(GO) run ./e2e/cmd/benche2e --bin-dir $(BIN) --scenario delegate

# bench-e2e runs --scenario all (throughput, reaction, memory); KEDA at
# scale needs KEDA's binaries too and has its own target, bench-keda.
.PHONY: bench-e2e
bench-e2e: build control-plane ## On real local planes: scheduling throughput with vs without the extender, reaction time, memory at 5000 nodes (prints figures and rows for BENCHMARKS.md's table).
	$(GO) build -o $(BIN)/nullextender ./e2e/cmd/nullextender
	cd $(SCHED_MOD) && $(GO) build -trimpath -ldflags '$(LDFLAGS) $(K8S_STAMP)' -o $(abspath $(BIN))/capscale-scheduler-null ./nullplugin
	$(GO) run ./e2e/cmd/benche2e --bin-dir $(BIN) $(BENCH_E2E_FLAGS)

# KEDA at scale (issue 27): N ScaledObjects on capscale's external scaler
# through KEDA's real operator, beside N HPAs on capscale's APIService, one
# after the other on one plane; BENCH_KEDA_FLAGS adds flags, e.g.
# "--scaled-objects 100 --keda-rounds 3" or "--keda-sides keda".
.PHONY: bench-keda
bench-keda: build control-plane keda ## KEDA's operator on capscale's scaler (300 ScaledObjects) beside capscale's APIService: GetMetrics latency, CPU per call, load change to desired replicas (prints rows for BENCHMARKS.md's table).
	$(GO) run ./e2e/cmd/benche2e --bin-dir $(BIN) --scenario keda $(BENCH_KEDA_FLAGS)

# The soak (issue 30): each scheduling mode under churn and faults, every
# invariant checked each second; then its charts (e2e/tools/soakplot, its
# own module so that gonum/plot stays out of capscale's).
SOAK_NODES    ?= 1000
SOAK_DURATION ?= 60m
SOAK_MODES    ?= extender,native,plugin
# The kwok nodes renew their Lease every quarter of it: 120s keeps 1000
# nodes' renewals light; 5000 nodes want 240s on a 2-core machine.
SOAK_NODE_LEASE ?= 120s
.PHONY: soak
soak: build control-plane ## Soak each mode (SOAK_MODES) at SOAK_NODES kwok nodes for SOAK_DURATION under churn and faults; CSVs, charts and verdicts in _output/soak.
	$(GO) run ./e2e/cmd/benche2e --bin-dir $(BIN) --scenario soak --nodes $(SOAK_NODES) --soak-duration $(SOAK_DURATION) --soak-modes $(SOAK_MODES) --soak-out $(abspath $(OUT))/soak --node-lease $(SOAK_NODE_LEASE)
	cd e2e/tools/soakplot && $(GO) run . $$(ls -d $(abspath $(OUT))/soak/*-$(SOAK_NODES))

STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2

.PHONY: lint
lint: ## No compiled binary tracked by git; gofmt, go vet and staticcheck (unit and e2e builds).
	$(GO) run ./hack/trackedbinaries
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) vet -tags e2e ./e2e/...
	$(GO) run $(STATICCHECK) ./...
	$(GO) run $(STATICCHECK) -tags e2e ./...
	cd $(SCHED_MOD) && $(GO) vet ./... && $(GO) run $(STATICCHECK) ./...
	cd hack/oci && $(GO) vet ./... && $(GO) run $(STATICCHECK) ./...
	cd controller/capacitysource/ciliumcheck && $(GO) vet ./... && $(GO) run $(STATICCHECK) ./...

# Scheduling mode of local-up and demo: plugin (capscale-scheduler as the
# plane's scheduler), extender or native (docs/choosing-a-mode.md).
MODE       ?= plugin
# Real nodes of local-up (kubelet + containerd + a CNI bridge each; root and
# make deps) and the pod IPs each holds (docs/development.md "Real nodes").
REAL_NODES ?= 0
# IPAM=whereabouts: the real nodes' IPs come from whereabouts' node slices,
# and capscale-controller reads each node's capacity from its
# NodeSlicePool (the chart's whereabouts-node-slice capacity source): a real
# IPAM in one command (docs/development.md "Real nodes"). Its slices hold
# 2, 6, 14, 30, 62 or 126 IPs.
IPAM ?= host-local
REAL_NODE_CAPACITY ?= $(if $(filter whereabouts,$(IPAM)),6,10)
# CHART=1: a cluster to install the Helm chart into, not capscale started
# (docs/getting-started.md): REAL_NODES real nodes (3 unless given), the
# first of them the system node, the service network, a local OCI registry
# holding capscale's image (linux/amd64) and chart as make release pushes
# them, and a load index. Root, as REAL_NODES.
CHART ?= 0
ifneq ($(CHART),0)
REAL_NODES := $(if $(filter 0,$(REAL_NODES)),3,$(REAL_NODES))
endif
# SERVICE_NETWORK=1: the real nodes' pods reach Services and the apiserver
# (kube-proxy and the Service kubernetes; docs/development.md).
SERVICE_NETWORK ?= 0
# KARPENTER=1: Karpenter with its KWOK cloud provider grows the plane
# (deploy/examples/karpenter/; docs/growing-the-cluster.md).
KARPENTER ?= 0
# PUBLISH_CAPACITY=1 (MODE=extender): the extender publishes each node's
# capacity in its status too, as the chart's extender.publishCapacity, so
# that Karpenter sees the IPs (docs/growing-the-cluster.md).
PUBLISH_CAPACITY ?= 0

.PHONY: local-up
local-up: build control-plane $(if $(filter-out 0,$(REAL_NODES)),deps) $(if $(filter-out 0,$(KARPENTER) $(CHART)),deploy-tools) $(if $(filter-out 0,$(KARPENTER)),karpenter) ## Start the local plane with capscale wired in (NODES=5, MODE=plugin|extender|native|dra, REAL_NODES=0, REAL_NODE_CAPACITY=10, IPAM=host-local|whereabouts, SERVICE_NETWORK=0, KARPENTER=0, PUBLISH_CAPACITY=0), or with CHART=1 a cluster for the Helm chart; writes _output/local/{kubeconfig,env}.
	$(GO) build -o $(BIN)/localplane ./e2e/cmd/localplane
	$(if $(filter-out 0,$(CHART)),cd hack/oci && $(GO) build -o $(abspath $(BIN))/oci .)
	$(BIN)/localplane up --dir $(OUT)/local --bin-dir $(BIN) --nodes $(NODES) --mode $(MODE) \
	  --real-nodes $(REAL_NODES) --real-node-capacity $(REAL_NODE_CAPACITY) --ipam $(IPAM) \
	  $(if $(filter-out 0,$(SERVICE_NETWORK)),--service-network) $(if $(filter-out 0,$(KARPENTER)),--karpenter) $(if $(filter-out 0,$(PUBLISH_CAPACITY)),--publish-capacity) $(if $(ADAPTER_CONFIG),--adapter-config $(ADAPTER_CONFIG)) \
	  $(if $(filter-out 0,$(CHART)),--chart --chart-version $(RELEASE_VERSION:v%=%))
	@# CHART=1: the image and the chart into the plane's registry, as make release pushes them.
	$(if $(filter-out 0,$(CHART)),. $(OUT)/local/env && $(MAKE) --no-print-directory image IMAGE_PLATFORMS=linux/amd64 VERSION=$(RELEASE_VERSION) REGISTRY=$$REGISTRY && $(MAKE) --no-print-directory release-chart REGISTRY=$$REGISTRY)
	@echo "source $(OUT)/local/env   # then: kubectl get nodes"

.PHONY: local-down
local-down: ## Stop everything local-up started (real nodes: their processes, mounts, cgroups, bridges and files too).
	@if [ -x $(BIN)/localplane ]; then $(BIN)/localplane down --dir $(OUT)/local; else $(GO) run ./e2e/cmd/localplane down --dir $(OUT)/local; fi

.PHONY: demo
demo: ## Build capscale and the control plane (not helm), start the local plane (MODE=plugin|extender|native) and walk through what capscale does.
	@MODE=$(MODE) bash hack/demo.sh

# The image (issue 44): no container engine and no base image. Every binary
# is built static (CGO_ENABLED=0, -trimpath) for each of IMAGE_PLATFORMS, and
# hack/oci (go-containerregistry, its own module) puts them in one image per
# platform, one layer per binary at /NAME, user 65532:65532, OCI labels, an
# SPDX SBOM per platform attached as a referrer, and the index over them,
# written as an OCI image layout to IMAGE_OUT; REGISTRY=host:port[/path]
# also pushes it there as $(REGISTRY)/capscale:$(VERSION) (REGISTRY_INSECURE=true:
# plain HTTP, for the local registry).
IMAGE_OUT        ?= $(OUT)/image
IMAGE_PLATFORMS  ?= linux/amd64,linux/arm64
IMAGE_BIN        := $(OUT)/image-bin
REGISTRY         ?=
REGISTRY_INSECURE ?= $(if $(filter 127.0.0.1:% localhost:%,$(REGISTRY)),true,false)
REVISION         := $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
SOURCE_EPOCH     := $(shell git log -1 --format=%ct 2>/dev/null || echo 0)
# capscale-scheduler for older Kubernetes minors (hack/compat/genmodule.sh):
# /capscale-scheduler-1.MINOR beside /capscale-scheduler (this repo's minor).
# make release puts every supported minor in; make image only this one.
SCHEDULER_MINORS ?=
OCI              := cd hack/oci && $(GO) run .

.PHONY: image
image: ## Build the image without a container engine: OCI layout in IMAGE_OUT (_output/image), pushed to REGISTRY if set (IMAGE_PLATFORMS, SCHEDULER_MINORS).
	@rm -rf $(IMAGE_BIN)
	@for p in $$(echo $(IMAGE_PLATFORMS) | tr , ' '); do \
	  os=$${p%/*}; arch=$${p#*/}; dir=$(abspath $(IMAGE_BIN))/$${os}_$$arch; mkdir -p $$dir; \
	  echo "building capscale's binaries for $$p"; \
	  GOOS=$$os GOARCH=$$arch CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $$dir/ ./cmd/...; \
	  (cd $(SCHED_MOD) && GOOS=$$os GOARCH=$$arch CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS) $(K8S_STAMP)' -o $$dir/capscale-scheduler .); \
	  for m in $$(echo $(SCHEDULER_MINORS) | tr , ' '); do \
	    echo "building capscale-scheduler for Kubernetes $$m ($$p)"; \
	    GOOS=$$os GOARCH=$$arch CAPSCALE_LDFLAGS='$(LDFLAGS)' CAPSCALE_K8S=$$m bash e2e/tools/build.sh $$dir/.k8s-$$m capscale-scheduler >/dev/null; \
	    mv $$dir/.k8s-$$m/capscale-scheduler $$dir/capscale-scheduler-$$m; rm -rf $$dir/.k8s-$$m; \
	  done; \
	done
	$(OCI) image --bin-dir $(abspath $(IMAGE_BIN)) --out $(abspath $(IMAGE_OUT)) --platforms $(IMAGE_PLATFORMS) \
	  --version $(VERSION) --revision $(REVISION) --created $(SOURCE_EPOCH) \
	  $(if $(REGISTRY),--push $(REGISTRY)/capscale --insecure=$(REGISTRY_INSECURE))

.PHONY: registry
registry: ## Serve a local OCI registry (go-containerregistry's) on REGISTRY_ADDR (127.0.0.1:5000) until Ctrl-C.
	$(OCI) registry --addr $(or $(REGISTRY_ADDR),127.0.0.1:5000)

.PHONY: clean
clean: local-down ## Stop the local plane and remove _output (the binary cache in ~/.cache/capscale stays).
	rm -rf $(OUT)
