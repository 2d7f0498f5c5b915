# heatsink — finds hot keys in Redis and spreads their load.
#
# Every tool is pinned here and installed into ./bin on first use, built from
# the Go module proxy (prebuilt downloads are not reachable from CI machines).

CONTROLLER_GEN_VERSION ?= v0.23.0
HELM_VERSION           ?= v3.22.0
PROMTOOL_VERSION       ?= v0.316.0
K8S_VERSION            ?= 1.37.2
ETCD_VERSION           ?= 3.6.16

LOCALBIN       := $(CURDIR)/bin
CONTROLLER_GEN := $(LOCALBIN)/controller-gen-$(CONTROLLER_GEN_VERSION)
HELM           := $(LOCALBIN)/helm-$(HELM_VERSION)
PROMTOOL       := $(LOCALBIN)/promtool-$(PROMTOOL_VERSION)
ENVTEST_DIR    := $(LOCALBIN)/k8s/$(K8S_VERSION)
HEATSINK       := $(LOCALBIN)/heatsink

export KUBEBUILDER_ASSETS := $(ENVTEST_DIR)
export HEATSINK_BIN := $(HEATSINK)
export HELM_BIN := $(HELM)
export PROMTOOL_BIN := $(PROMTOOL)
export K8S_VERSION ETCD_VERSION

GO_TEST_FLAGS ?= -count=1 -timeout 30m

# VERSION is stamped into the binary (heatsink version).
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X github.com/heatsink-dev/heatsink/internal/version.Version=$(VERSION)

.PHONY: all
all: build

##@ General

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*##"; printf "\nUsage:\n  make \033[36m<target>\033[0m\n"} /^[a-zA-Z_0-9-]+:.*?##/ { printf "  \033[36m%-16s\033[0m %s\n", $$1, $$2 } /^##@/ { printf "\n\033[1m%s\033[0m\n", substr($$0, 5) } ' $(MAKEFILE_LIST)

##@ Development

.PHONY: generate
generate: $(CONTROLLER_GEN) ## Generate deepcopy code.
	$(CONTROLLER_GEN) object paths="./api/..."

.PHONY: manifests
manifests: $(CONTROLLER_GEN) ## Generate CRDs, RBAC and webhook manifests, and copy the CRDs into the chart.
	$(CONTROLLER_GEN) crd rbac:roleName=heatsink-manager webhook paths="./api/..." paths="./controllers/..." paths="./webhook/..." paths="./cmd/heatsink/..." \
		output:crd:artifacts:config=config/crd/bases \
		output:rbac:artifacts:config=config/rbac \
		output:webhook:artifacts:config=config/webhook
	hack/sync-chart-crds.sh
	hack/sync-chart-rbac.sh

.PHONY: fmt
fmt: ## Run gofmt.
	gofmt -w $$(git ls-files '*.go')

.PHONY: vet
vet: ## Run go vet.
	go vet ./...

.PHONY: verify
verify: generate manifests ## Regenerate everything and fail on any diff; check gofmt and go vet.
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || (echo "gofmt needed:"; gofmt -l $$(git ls-files '*.go'); exit 1)
	go vet ./...
	cd bench && go vet ./...
	@git diff --exit-code -- api config charts || (echo "generated files differ from the committed ones: run make generate manifests and commit" >&2; exit 1)
	@test -z "$$(git status --porcelain -- api config charts)" || (echo "untracked generated files:"; git status --porcelain -- api config charts; exit 1)

##@ Test

.PHONY: setup
setup: envtest redis clients build ## Do all set-up: control-plane binaries, redis-server, client libraries, the heatsink binary.

.PHONY: envtest
envtest: ## Build kube-apiserver, etcd and kubectl into bin/k8s/<version> (skipped when present).
	hack/setup-envtest.sh

.PHONY: redis
redis: ## Install redis-server, redis-tools, redis-sentinel and nutcracker when missing.
	hack/setup-redis.sh

.PHONY: clients
clients: ## Install the client libraries test/clients drives (python3-redis, ioredis into bin/node_modules) when missing.
	hack/setup-clients.sh

.PHONY: test
test: setup helm promtool ## Run every test after doing all set-up on a fresh machine.
	go test $(GO_TEST_FLAGS) ./...
	cd bench && go test $(GO_TEST_FLAGS) ./...

.PHONY: test-short
test-short: ## Run unit tests only (no API server, no Redis).
	go test -short -count=1 ./...

.PHONY: e2e
e2e: ## Install heatsink with Helm and kustomize into a real one-node Kubernetes on this machine (hack/cluster) and run the scenario; needs root.
	hack/e2e.sh

FUZZTIME ?= 30s
DIFF_SEEDS ?= 10
.PHONY: fuzz
fuzz: build ## Run every fuzz target for FUZZTIME (30s) each, then the differential harness for DIFF_SEEDS (10) long sequences per cell.
	hack/fuzz.sh $(FUZZTIME)
	HEATSINK_DIFF_SEEDS=$(DIFF_SEEDS) HEATSINK_DIFF_BATCHES=200 go test -count=1 -timeout 60m -run '^TestDifferential$$' ./test/differential/

.PHONY: bench
bench: setup ## Run every benchmark and write bench-report.md.
	hack/bench.sh

##@ Build

.PHONY: build
build: $(HEATSINK) ## Build the heatsink binary (manager, node agent, proxy subcommands).

.PHONY: $(HEATSINK)
$(HEATSINK):
	CGO_ENABLED=0 go build -ldflags "$(LDFLAGS)" -o $(HEATSINK) ./cmd/heatsink

.PHONY: demo
demo: setup ## Run the local end-to-end demo: a hot key detected and relieved.
	go build -o $(LOCALBIN)/heatsink-demo ./demo/heatsink-demo
	$(LOCALBIN)/heatsink-demo $(DEMO_FLAGS)

# IMAGE_VERSION is the release the image and its binary are stamped with:
# release.yaml's version without its "v", which is also the chart's
# appVersion, so that the chart's default image is the one built (VERSION,
# above, is a development build's git description).
IMAGE_VERSION ?= $(shell sed -n 's/^version: *v\{0,1\}\([^ #]*\).*/\1/p' release.yaml)
REVISION  ?= $(shell git rev-parse HEAD 2>/dev/null)
IMG       ?= ghcr.io/heatsink-dev/heatsink:$(IMAGE_VERSION)
IMAGE_DIR ?= $(CURDIR)/out/images
VERSION_LDFLAGS := -X github.com/heatsink-dev/heatsink/internal/version.Version=$(IMAGE_VERSION)

.PHONY: image
image: ## Build the OCI image without a Docker engine into out/images/heatsink.tar (go-containerregistry, pinned base).
	CGO_ENABLED=0 go build -trimpath -ldflags="-s -w $(VERSION_LDFLAGS)" -o $(IMAGE_DIR)/heatsink ./cmd/heatsink
	go run ./images/heatsink-image heatsink --binary $(IMAGE_DIR)/heatsink --version $(IMAGE_VERSION) \
		--revision $(REVISION) --tag $(IMG) --out $(IMAGE_DIR)/heatsink.tar
	HEATSINK_IMAGE_TAR=$(IMAGE_DIR)/heatsink.tar HEATSINK_IMAGE_REF=$(IMG) HEATSINK_VERSION=$(IMAGE_VERSION) \
		HEATSINK_REVISION=$(REVISION) go test -count=1 -run TestBuiltImage ./images

# REGISTRY is where a release is published: the image is REGISTRY/heatsink,
# the chart REGISTRY/charts/heatsink. The signatures name it, so make
# release and make publish take the same one.
REGISTRY    ?= ghcr.io/heatsink-dev
RELEASE_DIR ?= $(CURDIR)/out/release
SIGNING_KEY ?=

.PHONY: release
release: $(HELM) ## Build the release of release.yaml's VERSION into out/release: multi-arch images with SBOM, provenance and signature, chart, CLI, krew manifest (SIGNING_KEY=ecdsa.pem).
	hack/release.sh "$(VERSION)" "$(REGISTRY)" "$(SIGNING_KEY)" "$(RELEASE_DIR)" "$(HELM)"

.PHONY: publish
publish: ## Push out/release (images, signatures, SBOMs, provenance, chart) to REGISTRY.
	go run ./hack/release publish --from $(RELEASE_DIR)/oci --registry $(REGISTRY)

.PHONY: docker-build
docker-build: ## Build the container image with a Docker engine (make image needs none).
	docker build -t $(IMG) .

##@ Tools

$(CONTROLLER_GEN):
	@mkdir -p $(LOCALBIN)
	GOBIN=$(LOCALBIN) go install sigs.k8s.io/controller-tools/cmd/controller-gen@$(CONTROLLER_GEN_VERSION)
	mv $(LOCALBIN)/controller-gen $(CONTROLLER_GEN)

.PHONY: helm
helm: $(HELM) ## Build helm into bin/.
$(HELM):
	hack/setup-helm.sh $(HELM_VERSION) $(HELM)

.PHONY: promtool
promtool: $(PROMTOOL) ## Build Prometheus' promtool into bin/ (checks the alert rules).
$(PROMTOOL):
	hack/setup-promtool.sh $(PROMTOOL_VERSION) $(PROMTOOL)
