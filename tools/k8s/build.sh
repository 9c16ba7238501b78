#!/usr/bin/env bash
# Build the local control plane (kube-apiserver, kube-scheduler, kube-controller-manager, etcd,
# kwok) and kubectl (for
# `kubectl kustomize deploy/` / `kubectl apply -k deploy/` in tests and docs/install.md) from the Go modules
# in this folder, into a cache outside the clone keyed by the versions in versions.env:
#   ${XDG_CACHE_HOME:-$HOME/.cache}/topo-scheduler/k8s/<versions>/
# Only missing binaries are built, so a second run (or CI on the same machine) reuses them.
# Prints the cache folder as its last line.
#
# A cold build downloads a few hundred modules from the Go module proxy and compiles Kubernetes:
# about 6 minutes on 2 quiet cores, over half an hour on a loaded machine (docs/control-plane.md;
# kube-controller-manager adds 1 to 2 minutes, as it shares most packages with kube-apiserver).
# Go's own module and build caches live in the home folder, so a rebuild after a version bump is
# mostly linking.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=versions.env
source "$here/versions.env"
key="k8s-${KUBERNETES_VERSION}_etcd-${ETCD_VERSION}_kwok-${KWOK_VERSION}"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/topo-scheduler/k8s/$key"

need_go() {
  local msg="Go >= 1.26 is needed to build the local Kubernetes control plane (tools/k8s)."
  # The official tarball installs into /usr/local/go without touching PATH: look there too.
  if ! command -v go >/dev/null 2>&1 && [ -x /usr/local/go/bin/go ]; then
    export PATH="/usr/local/go/bin:$PATH"
  fi
  if ! command -v go >/dev/null 2>&1; then
    echo "ERROR: $msg 'go' is not on PATH." >&2
    echo "Install it (https://go.dev/dl/ or your distribution's golang package), then re-run." >&2
    exit 1
  fi
  local minor
  minor="$(go env GOVERSION | sed -E 's/^go1\.([0-9]+).*/\1/')"
  if [ "${minor:-0}" -lt 26 ]; then
    echo "ERROR: $msg Found $(go env GOVERSION)." >&2
    exit 1
  fi
}

mkdir -p "$cache"
missing=()
for bin in kube-apiserver etcd kube-scheduler kube-controller-manager kwok kwok-stages.yaml kubectl; do
  [ -e "$cache/$bin" ] || missing+=("$bin")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "control plane binaries cached in $cache"
  echo "$cache"
  exit 0
fi

need_go
echo "building ${missing[*]} into $cache"
echo "(a cold build takes 6 to 40 minutes on 2 cores, kube-apiserver most of it; later runs reuse the cache)"
export CGO_ENABLED=0
# Only the module proxy is reachable here, not the checksum database: go.sum (committed) pins
# every module's hash, and the proxy serves the zips those hashes are checked against.
export GOSUMDB=off
export GOFLAGS=-mod=readonly
# -s -w drop the symbol tables (smaller binaries); -X stamps the versions each binary reports.
k8s_ldflags="-s -w -X k8s.io/component-base/version.gitVersion=${KUBERNETES_VERSION}"
k8s_ldflags+=" -X k8s.io/component-base/version.gitMajor=1"
k8s_ldflags+=" -X k8s.io/component-base/version.gitMinor=$(echo "$KUBERNETES_VERSION" | cut -d. -f2)"
k8s_ldflags+=" -X k8s.io/component-base/version.gitTreeState=clean"
etcd_ldflags="-s -w -X go.etcd.io/etcd/api/v3/version.GitSHA=${ETCD_VERSION}"
kwok_ldflags="-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=${KWOK_VERSION#v}"

build() {  # build <name> <module dir> <package> <ldflags>
  local name="$1" dir="$2" pkg="$3" ldflags="$4" start=$SECONDS
  echo "$(date +%T) building $name ($pkg)"
  (cd "$here/$dir" && go build -trimpath -ldflags "$ldflags" -o "$cache/$name.tmp.$$" "$pkg")
  mv "$cache/$name.tmp.$$" "$cache/$name"  # atomic: a concurrent run never sees half a binary
  echo "$(date +%T) built $name in $((SECONDS - start)) s"
}

# KWOK >= v0.8 has no built-in stages: its own "fast" stages (the ones v0.7 used by default:
# nodes initialized and heartbeating with a lease, pods ready at once, completed, deleted), read
# from the module KWOK is built from, into one --config file beside the binary.
kwok_stages() {
  local dir stages="node/fast/node-initialize.yaml node/heartbeat-with-lease/node-heartbeat-with-lease.yaml"
  stages+=" pod/fast/pod-ready.yaml pod/fast/pod-complete.yaml pod/fast/pod-delete.yaml"
  dir="$(cd "$here/kwok" && go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)"
  for stage in $stages; do
    cat "$dir/kustomize/stage/$stage"
    echo "---"
  done > "$cache/kwok-stages.yaml.tmp.$$"
  mv "$cache/kwok-stages.yaml.tmp.$$" "$cache/kwok-stages.yaml"
  echo "$(date +%T) wrote kwok-stages.yaml"
}

# One at a time: linking kube-apiserver alone takes 2-4 GB of memory.
for bin in "${missing[@]}"; do
  case "$bin" in
    kube-apiserver)
      build kube-apiserver apiserver k8s.io/kubernetes/cmd/kube-apiserver "$k8s_ldflags" ;;
    kube-scheduler)
      build kube-scheduler apiserver k8s.io/kubernetes/cmd/kube-scheduler "$k8s_ldflags" ;;
    kube-controller-manager)  # the plane runs only its DRA controllers (resourceclaim, GC)
      build kube-controller-manager apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
        "$k8s_ldflags" ;;
    kubectl) build kubectl apiserver k8s.io/kubernetes/cmd/kubectl "$k8s_ldflags" ;;
    etcd) build etcd apiserver go.etcd.io/etcd/server/v3 "$etcd_ldflags" ;;
    kwok) build kwok kwok sigs.k8s.io/kwok/cmd/kwok "$kwok_ldflags" ;;
    kwok-stages.yaml) kwok_stages ;;
  esac
done
echo "control plane binaries cached in $cache ($(du -sh "$cache" | cut -f1))"
echo "$cache"
