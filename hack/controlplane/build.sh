#!/usr/bin/env bash
# Builds the test suite's control plane (kube-apiserver and etcd) from pinned Go modules, once.
#
# Test infrastructure only: the product is Python. The binaries land in a cache outside the work tree,
# keyed by version, so a second run finds them and builds nothing:
#     $KRUNTIMES_TOOLS_CACHE (default ~/.cache/kruntimes/tools)/kube-apiserver-v1.37.2/kube-apiserver
#     $KRUNTIMES_TOOLS_CACHE/etcd-v3.6.16/etcd
# Prints the directory of each binary, one `NAME=PATH` per line, on standard output.
# A cold build takes about 6 minutes on two cores and peaks near 2.8 GB of memory.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cache="${KRUNTIMES_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kruntimes/tools}"

# The versions live in the modules' go.mod files; these names only key the cache.
KUBE_VERSION="$(awk '$1 == "require" && $2 == "k8s.io/kubernetes" {print $3}' "$here/kube-apiserver/go.mod")"
ETCD_VERSION="$(awk '$1 == "require" && $2 == "go.etcd.io/etcd/server/v3" {print $3}' "$here/etcd/go.mod")"

if ! command -v go >/dev/null; then
    echo "build.sh: Go is needed to build the test control plane (see README, Set up)" >&2
    exit 2
fi

build() {  # name, version, module dir, package, extra flags...
    local name="$1" version="$2" dir="$3" package="$4"; shift 4
    local target="$cache/$name-$version/$name"
    mkdir -p "$(dirname "$target")"
    # One build at a time per binary: a second caller waits for the first one's result.
    exec 9>"$target.lock"
    flock 9
    if [[ ! -x "$target" ]]; then
        echo "building $name $version (once; cached in $cache)" >&2
        local started=$SECONDS
        # -mod=readonly: go.sum is complete in the repository; nothing is resolved anew.
        (cd "$here/$dir" && GOFLAGS="-mod=readonly" go build -trimpath "$@" -o "$target.partial" "$package")
        mv "$target.partial" "$target"
        echo "built $name $version in $((SECONDS - started)) s" >&2
    fi
    exec 9>&-
    echo "$name=$target"
}

minor="${KUBE_VERSION#v1.}"; minor="${minor%%.*}"
build kube-apiserver "$KUBE_VERSION" kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver \
    -ldflags "-X k8s.io/component-base/version.gitVersion=$KUBE_VERSION \
-X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor \
-X k8s.io/component-base/version.gitTreeState=clean"
build etcd "$ETCD_VERSION" etcd .
