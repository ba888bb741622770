# headcount: `make help` lists the targets.

GO        ?= go
BIN       ?= bin
BINARIES  := wsnode cleaner httpapi
# Generous: the Redis-backed and end-to-end tests are slow under -race on 2 cores.
TEST_TIMEOUT ?= 20m
FUZZTIME  ?= 10s
BENCHTIME ?= 2s

# golangci-lint is pinned and built from source into .tools (gitignored),
# one directory per version, so a bump rebuilds it and nothing else does.
GOLANGCI_LINT_VERSION := v2.15.0
GOLANGCI_LINT_DIR     := $(CURDIR)/.tools/golangci-lint-$(GOLANGCI_LINT_VERSION)
GOLANGCI_LINT         := $(GOLANGCI_LINT_DIR)/golangci-lint

# helm, pinned and built the same way, for make k8s-validate (the chart in
# deploy/helm/headcount). Its release build stamps its version and the
# Kubernetes version of its client-go (v0.37: 1.37), which helm template and
# helm lint assume without a cluster; go install stamps neither (1.20 then),
# so these flags do what helm's own Makefile does.
HELM_VERSION      := v3.22.0
HELM_KUBE_VERSION := 1.37
HELM_DIR          := $(CURDIR)/.tools/helm-$(HELM_VERSION)
HELM              := $(HELM_DIR)/helm
HELM_LDFLAGS      := -X helm.sh/helm/v3/internal/version.version=$(HELM_VERSION) \
	$(foreach p,pkg/chartutil pkg/lint/rules,-X helm.sh/helm/v3/$(p).k8sVersionMajor=$(word 1,$(subst ., ,$(HELM_KUBE_VERSION))) -X helm.sh/helm/v3/$(p).k8sVersionMinor=$(word 2,$(subst ., ,$(HELM_KUBE_VERSION))))

.PHONY: all help build test test-short lint tools fuzz run bench tidy clean deps chaos soak image image-push image-test image-release-check k8s-validate k8s-validate-server k8s-sim

all: lint test ## Lint, then run every test (what CI runs)

help: ## Show this help
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z0-9_-]+:.*## / {printf "  %-12s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

# --version prints the VCS revision: Go stamps it in a clone (-buildvcs=auto
# overrides a GOFLAGS=-buildvcs=false), and the link-time values cover a git
# worktree. make image stamps its binaries the same way (deploy/image).
VERSION_LDFLAGS = $(shell bash scripts/version-ldflags.sh)

build: ## Build bin/wsnode, bin/cleaner, bin/httpapi (stamped with the VCS revision)
	$(GO) build -buildvcs=auto -ldflags "$(VERSION_LDFLAGS)" -o $(BIN)/ $(addprefix ./cmd/,$(BINARIES))

deps: ## Install what the tests need (redis-server, Node.js and test/compat's npm packages, chromium, postgresql, mariadb-server, prometheus); make run installs only redis-server
	@bash scripts/ensure-deps.sh

# The tests mostly wait, on Redis and on the processes they start: under
# -race a unit package keeps about half a core busy and the end-to-end
# package (most of its tests parallel, two at a time) about one. So one
# package more than there are cores runs at a time, where go test's
# default is one per core: on two cores the end-to-end package then holds
# one slot of three, not one of two, and make test took 6 min 10 s, not
# 8 min 21 s. (Four packages at a time, each running four tests at once,
# overloaded two cores: tests waiting on a socket timed out.) The longest
# packages are named first so that they start first: a long one started
# last finishes alone after the rest.
TEST_PACKAGES_AT_ONCE := $(shell echo $$(( $$(nproc 2>/dev/null || echo 1) + 1 )))
LONGEST_TESTS := ./test/e2e/ ./pkg/counts/ ./pkg/wsnode/ ./pkg/admission/ ./pkg/webhook/ ./pkg/appsdb/

# Then the lock-order check: wsnode's and evloop.Conn's mutexes check their
# order only when built with -tags lockorder (pkg/lockorder), so
# TestLockOrder and the checker's own tests run again so built (under a
# minute on 2 cores, most of it building the package again).
test: deps ## Run every test with -race against real Redis (installs deps first)
	$(GO) test -race -count=1 -p $(TEST_PACKAGES_AT_ONCE) -timeout $(TEST_TIMEOUT) $(LONGEST_TESTS) ./...
	$(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) -tags lockorder ./pkg/lockorder/
	$(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) -tags lockorder -run '^TestLockOrder$$' ./pkg/wsnode/

test-short: ## Quick loop: go test -short (skips the Redis and end-to-end tests)
	$(GO) test -short -count=1 ./...

lint: $(GOLANGCI_LINT) ## gofmt (must list nothing), go vet (also of the lock-order build), then golangci-lint (.golangci.yml; built on first use)
	@files=$$(find . -name '*.go' -not -path './test/compat/node_modules/*' -not -path './test/peer/node_modules/*' -not -path './.run/*' -not -path './bin/*' -not -path './.tools/*' | xargs gofmt -l); \
	if [ -n "$$files" ]; then echo "gofmt: these files need formatting (run gofmt -w):"; echo "$$files"; exit 1; fi
	$(GO) vet ./...
	$(GO) vet -tags lockorder ./pkg/lockorder/ ./pkg/evloop/ ./pkg/wsnode/
	$(GOLANGCI_LINT) run ./...

tools: $(GOLANGCI_LINT) $(HELM) ## Build the pinned golangci-lint and helm into .tools (make lint and make k8s-validate do this when they are missing)

# go install of a version ignores this module's go.mod: the linter's own
# pinned dependencies build it (1 to 6 minutes on 2 cores, most of it
# downloading modules on a fresh machine).
$(GOLANGCI_LINT):
	GOBIN=$(GOLANGCI_LINT_DIR) $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)

# 2 to 3 minutes on 2 cores the first time (2m40s with an empty build
# cache and the modules downloaded), most of it compiling the Kubernetes
# client packages.
$(HELM):
	GOBIN=$(HELM_DIR) $(GO) install -ldflags "$(HELM_LDFLAGS)" helm.sh/helm/v3/cmd/helm@$(HELM_VERSION)

fuzz: ## Run each Fuzz* target for FUZZTIME (default 10s)
	@GO="$(GO)" FUZZTIME="$(FUZZTIME)" bash scripts/fuzz.sh

run: ## Start a local cluster: redis, 2 wsnodes, 2 cleaners, httpapi (Ctrl-C stops it)
	@GO="$(GO)" bash scripts/run-local.sh

bench: ## Run the counts benchmarks and write BENCHMARKS.md
	@GO="$(GO)" BENCHTIME="$(BENCHTIME)" bash scripts/bench.sh

tidy: ## go mod tidy
	$(GO) mod tidy

clean: ## Remove bin/, .run/ and test/coverage files (not the linter in .tools)
	rm -rf $(BIN) .run
	rm -f coverage.out coverage.html *.coverprofile

CHAOS_DURATION ?= 2m
CHAOS_SEED     ?=
CLUSTER        ?=
SOAK_DURATION  ?= 1h
SOAK_CSV       ?=
# The soak's go test timeout: its duration, then a few minutes of end checks
# and return to the baseline. Raise it with SOAK_DURATION (the test refuses
# to start with less than the duration + 5m).
SOAK_TIMEOUT   ?= 80m

chaos: ## Chaos suite: real processes, faults in seeded random order (CHAOS_DURATION=2m, CHAOS_SEED=, CLUSTER=1: Redis Cluster), then make soak
	CHAOS_DURATION=$(CHAOS_DURATION) CHAOS_SEED=$(CHAOS_SEED) HC_CHAOS_CLUSTER=$(CLUSTER) HC_CHAOS=1 $(GO) test -count=1 -run TestChaos -timeout 15m -v ./test/e2e/
	@$(MAKE) --no-print-directory soak

soak: ## Soak: steady churn on real processes; heaps, goroutines, fds and Redis back to baseline (SOAK_DURATION=1h, SOAK_CSV=samples.csv)
	SOAK_DURATION=$(SOAK_DURATION) SOAK_CSV=$(if $(SOAK_CSV),$(abspath $(SOAK_CSV))) HC_SOAK=1 $(GO) test -count=1 -run '^TestSoak$$' -timeout $(SOAK_TIMEOUT) -v ./test/e2e/

IMAGE     ?= headcount:dev
PLATFORMS ?= linux/amd64,linux/arm64
IMAGE_TAR ?= $(BIN)/headcount-image.tar
# Every time in the image is the commit's, so that two builds of one commit
# give the same digest (reproducible-builds.org's variable; set it to override).
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null || echo 0)
IMAGE_BUILD = cd deploy/image && SOURCE_DATE_EPOCH=$(SOURCE_DATE_EPOCH) $(GO) run . -root ../.. -go $(GO) -image $(IMAGE) -platforms $(PLATFORMS)

# deploy/image is a module of its own (go-containerregistry stays out of
# this one); it needs no Docker. The first build cross-compiles the three
# binaries once per platform: minutes on 2 cores, then seconds.
image: ## Build IMAGE (headcount:dev) for PLATFORMS (linux/amd64,linux/arm64) into IMAGE_TAR (bin/headcount-image.tar), an OCI layout tarball; no Docker needed
	@bash scripts/ensure-deps.sh image
	$(IMAGE_BUILD) -out $(abspath $(IMAGE_TAR))

image-push: ## Build IMAGE and push it to its registry (credentials: docker's config and helpers, then GITHUB_TOKEN for ghcr.io)
	@bash scripts/ensure-deps.sh image
	$(IMAGE_BUILD) -push

image-test: ## deploy/image's tests: build the image twice (same digest), check its files and config, run its binaries (1 to 2 minutes on 2 cores)
	@bash scripts/ensure-deps.sh image
	cd deploy/image && $(GO) test -count=1 -timeout 15m .

image-release-check: ## Print the version of the release tag TAG (v1.2.3), or fail unless it is v + the chart's appVersion
	@if [ -z "$(TAG)" ]; then echo "make image-release-check: give TAG=vX.Y.Z" >&2; exit 2; fi
	@cd deploy/image && $(GO) run . -root ../.. -release-tag "$(TAG)"

k8s-validate: $(HELM) ## Render every deploy/k8s overlay and the Helm chart (helm lint and template: defaults, each example), decode strictly with k8s.io/api, run the semantic checks and their tests, the chart/kustomize drift test among them (offline)
	cd deploy/k8s/validate && $(GO) run ./cmd/k8s-validate -root .. -helm $(HELM) && HELM=$(HELM) $(GO) test -count=1 .

k8s-validate-server: $(HELM) ## Build kube-apiserver and etcd once (.cache/k8s-server), then server-side dry-run every overlay and the chart's renders on loopback
	@GO="$(GO)" HELM="$(HELM)" bash deploy/k8s/validate/server.sh

k8s-sim: $(HELM) ## Install, upgrade, drain... the Helm chart with helm in a simulated cluster (kube-apiserver, controller-manager, scheduler, kwok's fake nodes) on loopback; first run builds them (25 minutes on 2 busy cores), then about 70 s
	@GO="$(GO)" HELM="$(HELM)" bash deploy/k8s/validate/sim.sh
