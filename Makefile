# Two entry points a newcomer needs: `make demo` (the main job) and `make test` (the whole suite).
# Both build a private virtualenv on first use, so a fresh machine needs only Python 3.11, 3.12 or
# 3.13 and make (PYTHON=python3.12 picks another interpreter than python3).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
# What fills a new venv (a variable so that tests of the rebuild rules below need no network).
INSTALL ?= $(BIN)/python -m pip install --quiet --upgrade pip && $(BIN)/python -m pip install --quiet -e '.[dev]'

.PHONY: demo simulate test typecheck layers unit controlplane clean FORCE

# An interpreter is known by its version and the real path of its binary; a venv's python reports
# the interpreter it was made from.
IDENTIFY := import os, sys; print(sys.version.split()[0], os.path.realpath(sys._base_executable))
WANT := $(shell $(PYTHON) -c '$(IDENTIFY)' 2>/dev/null)
HAVE := $(shell [ -x $(BIN)/python ] && $(BIN)/python -c '$(IDENTIFY)' 2>/dev/null)

# A venv made from another interpreter than $(PYTHON) (or whose interpreter is gone) is remade.
ifneq ($(HAVE),$(WANT))
$(STAMP): FORCE
endif

# A venv without its stamp was left half-made by an install that failed: it is removed and made
# again, as is one from another interpreter, each with one line saying why.
$(STAMP): pyproject.toml
	@[ -n "$(WANT)" ] || { echo "$(PYTHON) does not run: set PYTHON to a Python 3.11, 3.12 or 3.13" >&2; exit 1; }
	@if [ -d $(VENV) ] && [ "$(HAVE)" != "$(WANT)" ]; then \
		echo "$(VENV) was made by $(if $(HAVE),Python $(word 1,$(HAVE)) ($(word 2,$(HAVE))),an interpreter that no longer runs), not by $(PYTHON) (Python $(word 1,$(WANT))): making it again"; \
		rm -rf $(VENV); \
	elif [ -d $(VENV) ] && [ ! -e $(STAMP) ]; then \
		echo "$(VENV) was left half-made by an install that failed: making it again"; \
		rm -rf $(VENV); \
	fi
	$(PYTHON) -m venv $(VENV)
	$(INSTALL)
	touch $(STAMP)

FORCE:

demo: $(STAMP)
	$(BIN)/kruntimes demo

simulate: $(STAMP)
	$(BIN)/kruntimes simulate examples/weighted-scoring.yaml

# Every supported version: pyproject's python_version is the oldest, the others are named here.
typecheck: $(STAMP)
	$(BIN)/mypy
	$(BIN)/mypy --python-version 3.12
	$(BIN)/mypy --python-version 3.13

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
