# Two entry points a newcomer needs: `make demo` (the main job) and `make test` (the whole suite).
# Both build a private virtualenv on first use, so a fresh machine needs only Python 3.11, 3.12 or
# 3.13 and make (PYTHON=python3.12 picks another interpreter than python3).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
# The project's one version (docs/release.md): the wheel's, the image's tag, the chart's.
VERSION := $(shell sed -n 's/^__version__ = "\(.*\)"$$/\1/p' src/kruntimes/__init__.py 2>/dev/null)
# Where `make image` tags the image: REGISTRY/kruntimes-scheduler:VERSION (no registry: a local name).
REGISTRY ?=
IMAGE := $(if $(REGISTRY),$(REGISTRY)/)kruntimes-scheduler:$(VERSION)
# What fills a new venv (a variable so that tests of the rebuild rules below need no network).
INSTALL ?= $(BIN)/python -m pip install --quiet --upgrade pip && $(BIN)/python -m pip install --quiet -e '.[dev]'

.PHONY: demo simulate test typecheck layers unit mutate controlplane helm wheel image chart clean FORCE

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

# helm for the chart tests, from the pinned Go module in hack/helm: built once (a few minutes).
helm:
	@bash hack/helm/build.sh >/dev/null

unit: $(STAMP) controlplane helm
	$(BIN)/pytest -n 2 -q

test: typecheck layers unit

# Mutation testing (docs/mutation.md), not part of `make test`: [tool.mutmut] in pyproject.toml says
# what is mutated and which tests run. MUTANTS narrows it to names (a glob), e.g.
# MUTANTS='kruntimes.pure.wakeups.*'; JOBS mutants run at once. Results stay in mutants/ so a second
# run tests only what changed; `.venv/bin/mutmut show NAME` prints one survivor's diff.
JOBS ?= 2
MUTANTS ?=
mutate: $(STAMP)
	HYPOTHESIS_PROFILE=mutation $(BIN)/mutmut run --max-children $(JOBS) $(MUTANTS)
	$(BIN)/mutmut results

# The release artefacts, in dist/ (docs/release.md: tag, wheel, image, chart).
wheel: $(STAMP)
	$(BIN)/python -m pip wheel --quiet --no-deps --wheel-dir dist .

image:
	docker build -t $(IMAGE) .

chart:
	@helm="$$(bash hack/helm/build.sh | sed -n 's/^helm=//p')" && "$$helm" package charts/kruntimes-scheduler --destination dist

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .hypothesis mutants
