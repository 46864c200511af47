# The two everyday commands: `make synth STACK=dev` and `make test`. Both create .venv first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STACK ?= dev
OUT ?= out/$(STACK)

.PHONY: venv lint synth lock test e2e bench clean verify router-venv

# `pip install -e .` puts the `rocm-stack` command in the venv; the targets below run `python -m tools.cli`, i.e.
# this checkout's code whatever checkout an editable install points at.
# synth needs only what `pulumi up` needs; the tests add their tools (and CPU torch) on top.
$(BIN)/.runtime: requirements.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -r requirements.txt
	$(BIN)/pip install --quiet --no-deps -e .
	touch $@

$(BIN)/.installed: $(BIN)/.runtime requirements-dev.txt
	$(BIN)/pip install --quiet -r requirements-dev.txt
	touch $@

venv: $(BIN)/.installed

synth: $(BIN)/.runtime
	$(BIN)/python -m tools.cli synth --stack $(STACK) --out $(OUT)

# The placement lock of STACK (stacks/placement.$(STACK).yaml): commit it. RELOCK="HOST[/CONTAINER] ..." places those anew.
lock: $(BIN)/.runtime
	$(BIN)/python -m tools.cli lock --stack $(STACK) $(foreach r,$(RELOCK),--relock $(r))

# Day 2: run the stack's host preflight and GPU check per partition again on the deployed Docker hosts.
verify: $(BIN)/.runtime
	$(BIN)/python -m tools.verify --stack $(STACK)

# Code checks first (seconds): lint, types, the import contract between the folders.
lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports

test: venv lint
	$(BIN)/python -m pytest -q -n auto --durations=10 tests

# The vLLM production-stack router's own environment for tests/e2e/test_e2e_router.py (which skips without it):
# Python >= 3.12 (its pyproject.toml) with its pinned requirements at the tag the stack deploys, read from the
# mirror that the session tool `fetch github:vllm-project/production-stack` brings.
ROUTER_PYTHON ?= $(firstword $(wildcard $(HOME)/.pyenv/versions/3.12*/bin/python) python3.12)
ROUTER_MIRROR ?= /work/.mirror/vllm-project+production-stack/repo
router-venv:
	$(ROUTER_PYTHON) -m venv .venv-router
	git -C $(ROUTER_MIRROR) show vllm-stack-0.1.12:src/vllm_router/requirements.txt > .venv-router/requirements.txt
	.venv-router/bin/pip install --quiet -r .venv-router/requirements.txt

# The end-to-end tests alone (also part of `make test`): a real Docker daemon, as root (tests/e2e/harness.py).
e2e: venv
	$(BIN)/python -m pytest -q --durations=0 tests/e2e

# The scale benchmark (issue 8): 1 to 1,000 GPU hosts under the mock engine against a flat baseline; minutes.
bench: venv
	$(BIN)/python -m bench

clean:
	rm -rf out .pytest_cache .venv-router
