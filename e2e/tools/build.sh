#!/usr/bin/env bash
# Builds the control-plane binaries the e2e harness runs (etcd, kube-apiserver,
# kube-controller-manager, kube-scheduler, kubectl, kwok) from the Go module
# proxy, caches them under ~/.cache/capscale keyed by the pinned versions, and
# links them into OUTPUT_DIR together with kwok's stage definitions.
# A cache hit costs a second; a cold build takes about 15 minutes on 2 cores.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
out=${1:?usage: build.sh OUTPUT_DIR}
mkdir -p "$out"
out=$(cd "$out" && pwd)

k8s_version=v1.37.1
# Bump when the way binaries are built changes, so caches are not reused.
recipe=1
key=$(cat "$here"/*/go.mod "$here"/*/go.sum <(go version) <(echo "$k8s_version $recipe") | sha256sum | cut -c1-16)
cache=${CAPSCALE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/capscale}/bin/$key
bins=(etcd kube-apiserver kube-controller-manager kube-scheduler kubectl kwok)

have_all() { for b in "${bins[@]}"; do [ -x "$cache/$b" ] || return 1; done; }

export GOFLAGS=-mod=mod
if ! have_all; then
  echo "building control-plane binaries into $cache (cold: ~15 min on 2 cores)" >&2
  tmp="$cache.tmp.$$"
  mkdir -p "$tmp"
  trap 'rm -rf "$tmp"' EXIT
  export CGO_ENABLED=0
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

# kwok's standalone binary has no behaviour of its own: give it the "fast"
# stages its module ships (nodes Ready with lease heartbeats, pods Running).
kwokdir=$(cd "$here/kwok" && go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)
stages="$out/kwok-stages.yaml.tmp"
: >"$stages"
for f in node/fast/node-initialize node/heartbeat-with-lease/node-heartbeat-with-lease \
         pod/fast/pod-ready pod/fast/pod-complete pod/fast/pod-delete; do
  cat "$kwokdir/kustomize/stage/$f.yaml" >>"$stages"
  printf '\n---\n' >>"$stages"
done
mv "$stages" "$out/kwok-stages.yaml"
echo "control-plane binaries ready in $out" >&2
