# Two entry points a newcomer needs: `make demo` (the main job) and `make test` (the whole suite).
# Both build a private virtualenv on first use, so a fresh machine needs only Python 3.11 and make.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
# The project's one version (docs/release.md): the wheel's, the image's tag, the chart's.
VERSION := $(shell sed -n 's/^__version__ = "\(.*\)"$$/\1/p' src/kruntimes/__init__.py)
# Where `make image` tags the image: REGISTRY/kruntimes-scheduler:VERSION (no registry: a local name).
REGISTRY ?=
IMAGE := $(if $(REGISTRY),$(REGISTRY)/)kruntimes-scheduler:$(VERSION)

.PHONY: demo simulate test typecheck layers unit controlplane helm wheel image chart clean

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

# helm for the chart tests, from the pinned Go module in hack/helm: built once (a few minutes).
helm:
	@bash hack/helm/build.sh >/dev/null

unit: $(STAMP) controlplane helm
	$(BIN)/pytest -n 2 -q

test: typecheck layers unit

# The release artefacts, in dist/ (docs/release.md: tag, wheel, image, chart).
wheel: $(STAMP)
	$(BIN)/python -m pip wheel --quiet --no-deps --wheel-dir dist .

image:
	docker build -t $(IMAGE) .

chart:
	@helm="$$(bash hack/helm/build.sh | sed -n 's/^helm=//p')" && "$$helm" package charts/kruntimes-scheduler --destination dist

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .hypothesis
