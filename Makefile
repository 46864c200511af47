# The everyday commands: `make synth STACK=dev` and `make test`; `make check` is what CI runs. Each creates .venv first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STACK ?= dev
OUT ?= out/$(STACK)

.PHONY: venv lint synth lock test check e2e bench clean verify upstream router-venv

# `pip install -e .` puts the `rocm-stack` command in the venv; the targets below run `python -m tools.cli`, i.e.
# this checkout's code whatever checkout an editable install points at.
# synth needs only what `pulumi up` needs; the tests add their tools (and CPU torch) on top.
$(BIN)/.runtime: requirements.txt pyproject.toml
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

# The fast set: every test but those marked slow (tests/e2e, scenarios and soaks on a real engine; the marker is
# registered in pyproject.toml, tests/suite_split.py says which are). `make check` runs every test: what CI runs.
test: venv lint
	$(BIN)/python -m pytest -q -n auto --durations=10 -m "not slow" tests

check: venv lint
	$(BIN)/python -m pytest -q -n auto --durations=20 tests

# The upstream sources the tests check the stack against (tests/upstream.txt: repository and pinned ref), fetched
# into UPSTREAM as bare git repositories (only what is missing; GitHub, or UPSTREAM_URL). Tests that need one skip
# without it, naming this target. One variable: the tests read it as $ROCM_STACK_UPSTREAM.
export ROCM_STACK_UPSTREAM ?= $(CURDIR)/.upstream
UPSTREAM_URL ?= https://github.com
upstream: venv
	$(BIN)/python tests/upstream_go.py $(UPSTREAM_URL)

# The vLLM production-stack router's own environment for tests/e2e/test_e2e_router.py (which skips without it):
# Python >= 3.12 (its pyproject.toml) with its pinned requirements at the tag the stack deploys (from `make upstream`).
ROUTER_PYTHON ?= $(firstword $(wildcard $(HOME)/.pyenv/versions/3.12*/bin/python) python3.12)
ROUTER_TAG := vllm-stack-0.1.12
router-venv: upstream
	$(ROUTER_PYTHON) -m venv .venv-router
	git --git-dir=$(ROCM_STACK_UPSTREAM)/vllm-project+production-stack/repo show \
		$(ROUTER_TAG):src/vllm_router/requirements.txt > .venv-router/requirements.txt
	.venv-router/bin/pip install --quiet -r .venv-router/requirements.txt

# The end-to-end tests alone (also part of `make check`): a real Docker daemon, as root (tests/e2e/harness.py).
e2e: venv
	$(BIN)/python -m pytest -q --durations=0 tests/e2e

# The scale benchmark (issue 8): 1 to 1,000 GPU hosts under the mock engine against a flat baseline; minutes.
bench: venv
	$(BIN)/python -m bench

clean:
	rm -rf out .pytest_cache .venv-router
