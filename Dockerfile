# syntax=docker/dockerfile:1
# The kruntimes scheduler image: `kruntimes scheduler` on a slim CPython 3.11, as a non-root user.
#
#   make image                      # docker build -t kruntimes-scheduler:VERSION . (VERSION: src/kruntimes/__init__.py)
#   make image REGISTRY=registry.example.com/team    # tagged registry.example.com/team/kruntimes-scheduler:VERSION
#
# Reproducible from pins: the base image tag (pin it by digest in CI: PYTHON_IMAGE=python@sha256:...),
# deploy/build-requirements.lock (the build backend) and deploy/requirements.lock (every runtime
# dependency, installed with --no-deps so nothing unpinned is resolved). No dev dependencies.
ARG PYTHON_IMAGE=python:3.11.7-slim-bookworm

# --- build: a wheel of the project and a virtualenv holding exactly the locked runtime set ---------
FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
COPY deploy/build-requirements.lock deploy/requirements.lock ./deploy/
# The runtime venv has no pip or setuptools of its own: the build stage's pip installs into it.
RUN python -m pip install --no-deps -r deploy/build-requirements.lock \
 && python -m venv --without-pip /opt/kruntimes \
 && python -m pip --python /opt/kruntimes/bin/python install --no-deps --only-binary=:all: -r deploy/requirements.lock
COPY pyproject.toml README.md LICENSE ./
COPY src ./src
RUN python -m pip wheel --no-deps --no-build-isolation --wheel-dir /wheels . \
 && python -m pip --python /opt/kruntimes/bin/python install --no-deps /wheels/kruntimes-*.whl \
 && python -m pip --python /opt/kruntimes/bin/python check \
 && /opt/kruntimes/bin/python -m compileall -q /opt/kruntimes/lib

# --- runtime -----------------------------------------------------------------------------------------
FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="kruntimes-scheduler" \
      org.opencontainers.image.description="Binds kruntimes Runs to warm Runtime Pods" \
      org.opencontainers.image.licenses="Apache-2.0"
# A numeric UID/GID so that Kubernetes can verify runAsNonRoot without reading /etc/passwd;
# the account exists too, for libraries that look the user up.
RUN groupadd --system --gid 65532 kruntimes \
 && useradd --system --uid 65532 --gid 65532 --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin kruntimes
COPY --from=build /opt/kruntimes /opt/kruntimes
# The root filesystem is read-only in the cluster: bytecode is compiled at build time, HOME and
# scratch space are /tmp (an emptyDir in deploy/scheduler/deployment.yaml).
ENV PATH=/opt/kruntimes/bin:${PATH} \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp
USER 65532:65532
EXPOSE 8080 8081
ENTRYPOINT ["kruntimes", "scheduler"]
