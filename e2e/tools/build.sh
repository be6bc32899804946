#!/usr/bin/env bash
# Builds the control-plane binaries the e2e harness runs (etcd, kube-apiserver,
# kube-controller-manager, kube-scheduler, kubectl, kwok) from the Go module
# proxy, caches them under ~/.cache/capscale keyed by the pinned versions, and
# links them into the output directory. A cache hit costs a few seconds; a cold
# build takes about 15 minutes on 2 cores.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
out=${1:?usage: build.sh OUTPUT_DIR}
mkdir -p "$out"
out=$(cd "$out" && pwd)

k8s_version=v1.37.1
key=$(cat "$here"/build.sh "$here"/*/go.mod "$here"/*/go.sum <(go version) | sha256sum | cut -c1-16)
cache=${CAPSCALE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/capscale}/bin/$key
bins=(etcd kube-apiserver kube-controller-manager kube-scheduler kubectl kwok)

have_all() { for b in "${bins[@]}"; do [ -x "$cache/$b" ] || return 1; done; }

if ! have_all; then
  echo "building control-plane binaries into $cache (cold: ~15 min on 2 cores)" >&2
  tmp="$cache.tmp.$$"
  mkdir -p "$tmp"
  trap 'rm -rf "$tmp"' EXIT
  export CGO_ENABLED=0 GOFLAGS=-mod=mod
  stamp=""
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    stamp+=" -X $pkg.gitVersion=$k8s_version -X $pkg.gitMajor=1 -X $pkg.gitMinor=37 -X $pkg.gitTreeState=clean"
  done
  start=$SECONDS
  (cd "$here/etcd" && go build -trimpath -ldflags "-s -w" -o "$tmp/etcd" go.etcd.io/etcd/server/v3)
  echo "  etcd built ($((SECONDS - start))s)" >&2
  (cd "$here/kwok" && go build -trimpath -ldflags "-s -w" -o "$tmp/kwok" sigs.k8s.io/kwok/cmd/kwok)
  echo "  kwok built ($((SECONDS - start))s)" >&2
  for c in kube-apiserver kube-controller-manager kube-scheduler kubectl; do
    (cd "$here/k8s" && go build -trimpath -ldflags "-s -w$stamp" -o "$tmp/$c" "k8s.io/kubernetes/cmd/$c")
    echo "  $c built ($((SECONDS - start))s)" >&2
  done
  rm -rf "$cache"
  mv "$tmp" "$cache"
  trap - EXIT
fi

for b in "${bins[@]}"; do ln -sf "$cache/$b" "$out/$b"; done
echo "control-plane binaries ready in $out" >&2
