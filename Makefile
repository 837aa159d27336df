# jobvault: `make help` lists every target.
SHELL := /usr/bin/env bash
.SHELLFLAGS := -eu -o pipefail -c

GO ?= go
BIN ?= bin
IMG ?= ghcr.io/jobvault/jobvault:dev
# Where test/tools/build.sh caches testbed binaries (outside the work tree).
export JOBVAULT_CACHE ?= $(HOME)/.cache/jobvault
GOLANGCI_LINT_VERSION ?= v2.6.2
GOLANGCI_LINT := $(JOBVAULT_CACHE)/bin/golangci-lint-$(GOLANGCI_LINT_VERSION)/golangci-lint
CONTROLLER_GEN := $(JOBVAULT_CACHE)/bin/controller-gen-$(shell sed -n 's/^CONTROLLER_GEN_VERSION=//p' test/testbed/versions.env)/controller-gen
# Test timeout: a cold first run compiles large test binaries on 2 cores.
TEST_TIMEOUT ?= 60m
# Tests of one package run at most this many at a time (t.Parallel). The end-to-end tests that run
# in parallel mostly wait on the cluster, so more than the 2 cores here pay off.
TEST_PARALLEL ?= 3
# The long packages first, the others after them (./...): go test starts the runs in the order it
# is given, two at a time here (-p is the cores), so a long package listed late runs alone at the end.
# The order also keeps the three packages that take the real node's machine-wide lock from running
# at once, where one would wait for the other: test/testbed starts only after test/e2e/realnode and
# test/demo, which share one lane, have ended.
TEST_FIRST := ./test/e2e/archiver ./test/e2e/realnode ./test/demo ./test/e2e/chaos ./test/testbed \
	./test/e2e/deploy ./test/e2e/policy ./test/e2e/api
# How many inputs each fuzz target tries in make test, beyond its seed corpus (which go test always
# runs): a count, not a duration, which races Go's fuzz coordinator (golang/go#75804). About 10 to 20 s
# each here.
FUZZ_LAYOUT ?= 20000x
FUZZ_REDACT ?= 2000x
FUZZ_READLINES ?= 2000x

.PHONY: help
help: ## Show this help
	@awk 'BEGIN {FS = ":.*##"} /^[a-zA-Z_-]+:.*##/ {printf "  \033[36m%-14s\033[0m %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: build
build: ## Build the webhook and archiver binaries into bin/
	CGO_ENABLED=0 $(GO) build -trimpath -o $(BIN)/webhook ./webhook
	CGO_ENABLED=0 $(GO) build -trimpath -o $(BIN)/archiver ./archiver

.PHONY: testbed
testbed: ## Build and cache every testbed binary (kube-apiserver, etcd, Volcano with its admission webhook, KWOK, MinIO, GCS emulator)
	test/tools/build.sh

.PHONY: test
test: testbed ## Run every test against the real testbed (the README's test command)
	$(GO) test -count=1 -timeout $(TEST_TIMEOUT) -parallel $(TEST_PARALLEL) $(TEST_FIRST) ./...
	$(GO) test -count=1 -run '^$$' -fuzz '^FuzzLayout$$' -fuzztime $(FUZZ_LAYOUT) ./pkg/archive
	$(GO) test -count=1 -run '^$$' -fuzz '^FuzzRedact$$' -fuzztime $(FUZZ_REDACT) -fuzzminimizetime 0 ./pkg/record/redact
	$(GO) test -count=1 -run '^$$' -fuzz '^FuzzReadLines$$' -fuzztime $(FUZZ_READLINES) ./pkg/capture

.PHONY: test-scale
test-scale: testbed ## Run the scale proofs kept out of make test (live capture of 200 MiB through 1 MiB rotations; the archiver killed during 1,000 pod terminations)
	JOBVAULT_SCALE_PROOFS=1 $(GO) test -count=1 -timeout $(TEST_TIMEOUT) -run 'AtScale' -v ./test/e2e/archiver

.PHONY: test-unit
test-unit: ## Quick unit-only run for local iteration (no testbed parts; not what CI runs)
	$(GO) test -count=1 -short ./pkg/... ./webhook/... ./archiver/... ./certs/...

# The webhook's end-to-end benchmarks take -create-rates (VcJobs, default 20,50,100 per second) and
# -pod-create-rate (default 200 per second) after the package. The archiver's benchmarks take
# JOBVAULT_BENCH_FOLLOW_PODS and _SECONDS (1000 containers, 60 s), JOBVAULT_BENCH_CAPTURE_BYTES and
# _CHUNK_BYTES (512 MiB written 256 KiB every 50 ms), and JOBVAULT_BENCH_BURST_PODS and _PER_JOB
# (1000 pods in VcJobs of 10; JOBVAULT_BENCH_CPU_PROFILE=FILE saves the archiver's CPU profile over
# the drain). The node agent's (bench-agent, on the real node: root) take JOBVAULT_BENCH_AGENT_KIB_PER_SEC
# and _SECONDS (one container writing 4096 KiB/s for 20 s), _CONTAINERS (40, 10 a pod, scaled to 100)
# and _WINDOW_SECONDS (30). ReleaseThroughput runs with JOBVAULT_TESTBED_AUDIT_POD_STATUS=1: the API
# server's audit log then names who writes pods' status (issue 28, target 5).
.PHONY: bench
bench: testbed ## Run the benchmarks (print figures and ratios); the webhook's end-to-end one needs a cluster of its own
	$(GO) test -count=1 -run '^$$' -bench 'Handler' -benchtime 20000x -timeout $(TEST_TIMEOUT) ./test/performance
	$(GO) test -count=1 -run '^$$' -bench 'CreateVcJob|CreatePod' -benchtime 1000x -timeout $(TEST_TIMEOUT) ./test/performance
	$(GO) test -count=1 -run '^$$' -bench 'Follow1000|CaptureThroughput|ReleaseLatency' -benchtime 1x -timeout $(TEST_TIMEOUT) -v ./test/performance
	$(GO) test -count=1 -run '^$$' -bench 'Shards' -benchtime 1x -timeout $(TEST_TIMEOUT) -v ./test/performance
	JOBVAULT_TESTBED_AUDIT_POD_STATUS=1 $(GO) test -count=1 -run '^$$' -bench 'ReleaseThroughput' -benchtime 1x -timeout $(TEST_TIMEOUT) -v ./test/performance
	$(GO) test -count=1 -run '^$$' -bench 'CaptureLoadMisses' -benchtime 1x -timeout $(TEST_TIMEOUT) -v ./test/performance
	$(MAKE) bench-audit
	$(MAKE) bench-api
	$(MAKE) bench-agent
	$(MAKE) bench-agent-full

.PHONY: bench-agent
bench-agent: testbed ## Node agent against the API capture on the real node: CPU and RSS per 1 MiB/s and per 100 containers, the API server's load with and without; about 5 minutes
	$(GO) test -count=1 -run '^$$' -bench 'Agent' -benchtime 1x -timeout $(TEST_TIMEOUT) -v ./test/performance

# The node agent's proofs 1 and 2 (test/e2e/realnode) at the issue's size, too long for make test
# (which runs them at 5 MiB/s for 20 s, and with the store down as long as the GC takes): a
# container writing 20 MiB/s for 30 s through 1 MiB rotations beside a CPU stress process, the
# agent's archive and an API twin's side by side; a deleted pod's logs collected while the store is
# down 2 minutes. Each prints the bytes each side kept.
JOBVAULT_PROOF_AGENT_MIB_PER_SEC ?= 20
JOBVAULT_PROOF_AGENT_SECONDS ?= 30
JOBVAULT_PROOF_STORE_DOWN_SECONDS ?= 120
.PHONY: bench-agent-full
bench-agent-full: testbed ## Node agent proofs 1 and 2 at the issue's size on the real node (20 MiB/s for 30 s through 1 MiB rotations; the store down 2 minutes): the bytes each side kept; about 15 minutes
	JOBVAULT_PROOF_AGENT_MIB_PER_SEC=$(JOBVAULT_PROOF_AGENT_MIB_PER_SEC) JOBVAULT_PROOF_AGENT_SECONDS=$(JOBVAULT_PROOF_AGENT_SECONDS) \
	JOBVAULT_PROOF_STORE_DOWN_SECONDS=$(JOBVAULT_PROOF_STORE_DOWN_SECONDS) \
	  $(GO) test -count=1 -run '^(TestRealNodeAgentRotation|TestRealNodeAgentStoreDownWhileCollected)$$' -timeout 90m -v ./test/e2e/realnode

.PHONY: bench-audit
bench-audit: testbed ## Audit chain benchmarks: finalizations/s with the chain vs without; the full proof (3,000 chained jobs, 1,000 random tamperings, all detected) with verify time per 1,000 jobs
	$(GO) test -count=1 -run '^$$' -bench 'AuditFinalize|AuditVerify' -benchtime 1x -timeout $(TEST_TIMEOUT) -v ./test/performance

# JOBVAULT_BENCH_SIZE_JOBS and _PODS: the live VcJobs and tracked pods one archiver holds (the issue's
# 10,000 and 100,000 by default here; BenchmarkSize alone defaults to 2,000 and 20,000); _IDLE_SECONDS
# the idle window (30); _LIMIT_MIB the container memory limit the archiver runs as if in (1024);
# _HEAP_PROFILE=FILE saves its heap profile after its first backlog.
JOBVAULT_BENCH_SIZE_JOBS ?= 10000
JOBVAULT_BENCH_SIZE_PODS ?= 100000
.PHONY: bench-size
bench-size: testbed ## Benchmark one archiver holding 10,000 live VcJobs and 100,000 pods (cache, start-up backlog and restart, RSS, idle CPU); about 15 minutes
	JOBVAULT_BENCH_SIZE_JOBS=$(JOBVAULT_BENCH_SIZE_JOBS) JOBVAULT_BENCH_SIZE_PODS=$(JOBVAULT_BENCH_SIZE_PODS) \
	  $(GO) test -count=1 -run '^$$' -bench '^BenchmarkSize$$' -benchtime 1x -timeout $(TEST_TIMEOUT) -v ./test/performance

# JOBVAULT_BENCH_DB_JOBS, _TRANSITIONS and _LOGS size the load (1M, 10M, 20M: 16 GB of disk and
# about 40 min on 2 shared cores); JOBVAULT_BENCH_DB_DSN reuses a database an earlier run or
# test/tools/dbgen loaded; _SAMPLES (100), _PAGES (1000), _DELETE_BATCH (1000) tune the runs;
# _PLANS names the file of query plans.
.PHONY: bench-db
bench-db: ## Audit queries, keyset pagination and retention on 1M jobs, 10M transitions, 20M log rows (before/after migration 0009, the last of the audit-scale ones; plans to a file)
	$(GO) test -count=1 -run '^$$' -bench 'AuditDB' -benchtime 1x -timeout 3h -v ./test/performance

# The archive API (issue 27). bench-api streams a JOBVAULT_BENCH_API_LOG_MIB (1024) MiB log
# JOBVAULT_BENCH_API_LOG_ROUNDS (3) times through the aggregator and straight from MinIO,
# alternating. bench-api-list pages through the audit-scale database as bench-db loads it
# (JOBVAULT_BENCH_DB_JOBS, 1M; JOBVAULT_BENCH_DB_DSN reuses a loaded one), JOBVAULT_BENCH_API_PAGES
# (200) pages of 500 per list.
.PHONY: bench-api
bench-api: testbed ## Archive API: a 1 GiB log through the API against straight from MinIO (MB/s, ratio), the API server's RSS; about 5 minutes
	$(GO) test -count=1 -run '^$$' -bench 'ArchiveAPILog' -benchtime 1x -timeout $(TEST_TIMEOUT) -v ./test/performance

.PHONY: bench-api-list
bench-api-list: testbed ## Archive API: pages of 500 over 1M archived jobs (the audit-scale database), p50/p95 per page, with field selectors; about 20 minutes, most loading
	$(GO) test -count=1 -run '^$$' -bench 'ArchiveAPIList' -benchtime 1x -timeout 3h -v ./test/performance

# BenchmarkSustained takes JOBVAULT_BENCH_SUSTAINED_RATE (jobs/s, 20), _PODS (per job, 5), _MINUTES
# (15) and _OUTAGE (seconds of MinIO down in the middle, 120; 0 for none).
.PHONY: bench-sustained
bench-sustained: testbed ## Run the sustained-load benchmark (20 VcJobs/s of 5 pods for 15 minutes, a 2-minute MinIO outage in the middle)
	$(GO) test -count=1 -run '^$$' -bench 'Sustained' -benchtime 1x -timeout $(TEST_TIMEOUT) -v ./test/performance

# DEMO_ARGS: --store=s3 archives to a local MinIO instead of .demo/archive; --exit stops after the summary.
# REALNODE=1 (--real-node) also runs a job on the testbed's real node: kubelet, containerd, runc; root.
DEMO_ARGS ?=
REALNODE ?=
ifneq ($(REALNODE),)
DEMO_ARGS += --real-node
endif

# The demo needs the control plane and KWOK, MinIO only with --store=s3 and the kubelet only with
# --real-node; never the GCS emulator.
DEMO_BINARIES := kube-apiserver kube-controller-manager etcd vc-controller-manager vc-scheduler vc-webhook-manager kwok \
	$(if $(findstring --store=s3,$(DEMO_ARGS)),minio) $(if $(findstring --real-node,$(DEMO_ARGS)),kubelet)

.PHONY: demo
demo: ## Start a local stack, run sample jobs, print what was archived; Ctrl-C stops it (REALNODE=1: one job on a real kubelet)
	test/tools/build.sh $(DEMO_BINARIES)
	$(GO) run ./test/demo $(DEMO_ARGS)

.PHONY: demo-down
demo-down: ## Stop a running demo (and every process it started)
	@if [ -f .demo/demo.pid ]; then kill "$$(cat .demo/demo.pid)" && echo "demo stopped"; else echo "no demo running"; fi

.PHONY: fmt
fmt: ## Format the code
	$(GO) fmt ./...

.PHONY: vet
vet: ## Run go vet
	$(GO) vet ./...

.PHONY: lint
lint: $(GOLANGCI_LINT) ## Run golangci-lint (installed pinned into the cache)
	$(GOLANGCI_LINT) run ./...

$(GOLANGCI_LINT):
	GOBIN=$(dir $@) $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)

.PHONY: manifests
manifests: $(CONTROLLER_GEN) ## Regenerate the Volcano CRDs the testbed installs and the archive API's deepcopy functions
	cd test/tools/volcano && for g in batch/v1alpha1 bus/v1alpha1 scheduling/v1beta1 flow/v1alpha1 nodeinfo/v1alpha1; do \
	  $(CONTROLLER_GEN) crd:crdVersions=v1,generateEmbeddedObjectMeta=true,maxDescLen=0 \
	    paths=volcano.sh/apis/pkg/apis/$$g output:crd:dir=../../testbed/crds/volcano; done
	$(CONTROLLER_GEN) object paths=./pkg/apiserver/v1alpha1/...

$(CONTROLLER_GEN):
	GOBIN=$(dir $@) $(GO) install sigs.k8s.io/controller-tools/cmd/controller-gen@$(shell sed -n 's/^CONTROLLER_GEN_VERSION=//p' test/testbed/versions.env)

.PHONY: docs
docs: ## Regenerate docs/reference from the code: flags and CLI (--help), metrics, labels and annotations
	$(GO) run ./test/tools/docgen

.PHONY: verify
verify: manifests docs ## Regenerate and fail if anything changed
	$(GO) mod tidy
	git diff --exit-code

# OVERLAY: the kustomize directory to deploy (config/default, config/overlays/s3, config/overlays/gcs).
OVERLAY ?= config/overlays/s3

.PHONY: deploy
deploy: ## Deploy jobvault to the current kubectl context (OVERLAY=config/overlays/s3)
	kubectl apply --server-side -k $(OVERLAY)

.PHONY: undeploy
undeploy: ## Remove jobvault from the current kubectl context (see docs/operations.md: Upgrade and uninstall)
	kubectl delete --ignore-not-found -k $(OVERLAY)

.PHONY: docker-build
docker-build: ## Build the container image (needs a Docker engine)
	docker build -t $(IMG) .
