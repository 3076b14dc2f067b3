#!/usr/bin/env bash
# Renders the Kubernetes types upstream kruntimes' CRDs embed (PodTemplateSpec, VolumeSource, EnvVar,
# ResourceList, LabelSelector, Condition, Duration, Time) with the controller-gen and k8s.io/api
# versions upstream's CRDs are generated with, into tests/crds/kubernetes_types.json, then rewrites the
# schemas of deploy/crds/ from tests/crds/upstream.py (descriptions kept) and copies them to the dev
# cluster's package data. Run it after changing tests/crds/upstream.py, or these versions to follow
# upstream (upstream's Makefile names its controller-gen; its go.mod, its k8s.io/api).
# Test and build infrastructure only: needs Go and the Go module proxy, once.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
CONTROLLER_GEN_VERSION=v0.17.3
K8S_API_VERSION="$(awk '$1 == "k8s.io/api" {print $2}' "$here/go.mod")"

out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
# `go run pkg@version` builds controller-gen from its own go.mod, as upstream's `go install` does.
(cd "$here" && GOFLAGS="-mod=readonly" go run "sigs.k8s.io/controller-tools/cmd/controller-gen@$CONTROLLER_GEN_VERSION" \
    crd paths=./coretypes/... output:crd:artifacts:config="$out")
cd "$repo"
"${PYTHON:-.venv/bin/python}" -m tests.crds.regenerate \
    --controller-gen "$CONTROLLER_GEN_VERSION" --k8s-api "$K8S_API_VERSION" "$out"/*.yaml
