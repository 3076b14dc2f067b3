# Two entry points a newcomer needs: `make demo` (the main job) and `make test` (the whole suite).
# Both build a private virtualenv on first use, so a fresh machine needs only Python 3.11 and make.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: demo simulate test typecheck layers unit controlplane clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/kruntimes demo

simulate: $(STAMP)
	$(BIN)/kruntimes simulate examples/weighted-scoring.yaml

typecheck: $(STAMP)
	$(BIN)/mypy

# The layering contracts in .importlinter (pure is pure, the framework imports no plugin, no cycles).
layers: $(STAMP)
	$(BIN)/lint-imports --no-cache

# kube-apiserver and etcd for the real-server tests, from the pinned Go modules in hack/controlplane:
# built once (about 6 minutes and 2.8 GB of memory on two cores) into ~/.cache/kruntimes/tools.
controlplane:
	@bash hack/controlplane/build.sh >/dev/null

unit: $(STAMP) controlplane
	$(BIN)/pytest -n 2 -q

test: typecheck layers unit

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .hypothesis
