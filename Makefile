# The two everyday commands: `make synth STACK=dev` and `make test`. Both create .venv first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STACK ?= dev
OUT ?= out/$(STACK)

.PHONY: venv synth test bench clean

$(BIN)/.installed: requirements.txt requirements-dev.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -r requirements-dev.txt
	touch $@

venv: $(BIN)/.installed

synth: venv
	$(BIN)/python -m components.synth --stack $(STACK) --out $(OUT)

test: venv
	$(BIN)/python -m pytest -q -n auto --durations=10 tests

clean:
	rm -rf out .pytest_cache
