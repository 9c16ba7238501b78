#!/usr/bin/env bash
# Build Helm from the Go module in this folder (helm.sh/helm/v4, pinned by go.mod and go.sum), into
# a cache outside the clone keyed by the version in versions.env:
#   ${XDG_CACHE_HOME:-$HOME/.cache}/topo-scheduler/helm/helm-<version>/helm
# as tools/k8s/build.sh does for the control plane. Nothing is built when the binary is there.
# Prints the cache folder as its last line.
#
# A cold build downloads about 200 modules (540 MB) from the Go module proxy and compiles Helm
# and the client-go it embeds: 4.5 CPU-minutes (221 s user + 51 s system, measured with empty
# module and build caches), i.e. 5 min 11 s of wall time on 2 cores beside the control plane's
# build, 15.5 min on a machine with a load average of 30. Go's own module and build caches live
# in the home folder, so a rebuild after a version bump is mostly linking.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=versions.env
source "$here/versions.env"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/topo-scheduler/helm/helm-${HELM_VERSION}"

if [ -x "$cache/helm" ]; then
  echo "helm cached in $cache"
  echo "$cache"
  exit 0
fi

msg="Go >= 1.26 is needed to build Helm ${HELM_VERSION} (tools/helm; its go.mod says go 1.26)."
# The official tarball installs into /usr/local/go without touching PATH: look there too.
if ! command -v go >/dev/null 2>&1 && [ -x /usr/local/go/bin/go ]; then
  export PATH="/usr/local/go/bin:$PATH"
fi
if ! command -v go >/dev/null 2>&1; then
  echo "ERROR: $msg 'go' is not on PATH." >&2
  echo "Install it (https://go.dev/dl/ or your distribution's golang package), then re-run." >&2
  exit 1
fi
minor="$(go env GOVERSION | sed -E 's/^go1\.([0-9]+).*/\1/')"
if [ "${minor:-0}" -lt 26 ]; then
  echo "ERROR: $msg Found $(go env GOVERSION)." >&2
  exit 1
fi

mkdir -p "$cache"
echo "$(date +%T) building helm ${HELM_VERSION} into $cache"
start=$SECONDS
export CGO_ENABLED=0
# Only the module proxy is reachable here, not the checksum database: go.sum (committed) pins
# every module's hash, and the proxy serves the zips those hashes are checked against.
export GOSUMDB=off
export GOFLAGS=-mod=readonly
# -s -w drop the symbol tables; -X stamps the version `helm version` reports (Helm's own Makefile
# sets the same variable).
ldflags="-s -w -X helm.sh/helm/v4/internal/version.version=${HELM_VERSION}"
ldflags+=" -X helm.sh/helm/v4/internal/version.gitTreeState=clean"
(cd "$here" && go build -trimpath -ldflags "$ldflags" -o "$cache/helm.tmp.$$" helm.sh/helm/v4/cmd/helm)
mv "$cache/helm.tmp.$$" "$cache/helm"  # atomic: a concurrent run never sees half a binary
echo "$(date +%T) built helm in $((SECONDS - start)) s ($(du -sh "$cache" | cut -f1))"
echo "$cache"
