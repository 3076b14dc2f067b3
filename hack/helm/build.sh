#!/usr/bin/env bash
# Builds helm from its pinned Go module, once, for the chart tests (tests/deploy/test_chart.py and
# tests/realserver/test_chart_install.py).
#
# Test infrastructure only, like hack/controlplane: the binary lands in a cache outside the work tree,
# keyed by version, so a second run finds it and builds nothing:
#     $KRUNTIMES_TOOLS_CACHE (default ~/.cache/kruntimes/tools)/helm-v4.3.2/helm
# Prints `helm=PATH` on standard output. A cold build takes a few minutes on two cores (6 min 12 s
# measured while other builds and tests ran).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cache="${KRUNTIMES_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kruntimes/tools}"

# The version lives in go.mod; this name only keys the cache and stamps `helm version`.
HELM_VERSION="$(awk '$1 == "require" && $2 == "helm.sh/helm/v4" {print $3}' "$here/go.mod")"

if ! command -v go >/dev/null; then
    echo "build.sh: Go is needed to build helm for the chart tests (see README, Set up)" >&2
    exit 2
fi

target="$cache/helm-$HELM_VERSION/helm"
mkdir -p "$(dirname "$target")"
# One build at a time: a second caller waits for the first one's result.
exec 9>"$target.lock"
flock 9
if [[ ! -x "$target" ]]; then
    echo "building helm $HELM_VERSION (once; cached in $cache)" >&2
    started=$SECONDS
    # -mod=readonly: go.sum is complete in the repository; nothing is resolved anew.
    (cd "$here" && CGO_ENABLED=0 GOFLAGS="-mod=readonly" go build -trimpath \
        -ldflags "-X helm.sh/helm/v4/internal/version.version=$HELM_VERSION \
-X helm.sh/helm/v4/internal/version.gitTreeState=clean" \
        -o "$target.partial" helm.sh/helm/v4/cmd/helm)
    mv "$target.partial" "$target"
    echo "built helm $HELM_VERSION in $((SECONDS - started)) s" >&2
fi
echo "helm=$target"
