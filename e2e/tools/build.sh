#!/usr/bin/env bash
# Builds the tools the e2e suite and the demo run — etcd, kube-apiserver,
# kube-controller-manager, kube-scheduler, kubectl, kwok and helm — from the
# Go module proxy, caches each tool module's binaries under ~/.cache/capscale
# keyed by its pinned versions, and links them into OUTPUT_DIR together with
# kwok's stage definitions. A cache hit costs a second; a cold build of the
# Kubernetes binaries takes about 15 minutes on 2 cores.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
out=${1:?usage: build.sh OUTPUT_DIR}
mkdir -p "$out"
out=$(cd "$out" && pwd)

k8s_version=v1.37.1
# Bump when the way binaries are built changes, so caches are not reused.
recipe=1
cache_root=${CAPSCALE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/capscale}/bin
export GOFLAGS=-mod=mod CGO_ENABLED=0

stamp=""
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  stamp+=" -X $pkg.gitVersion=$k8s_version -X $pkg.gitMajor=1 -X $pkg.gitMinor=37 -X $pkg.gitTreeState=clean"
done

# build MODULE_DIR BIN=PACKAGE...: builds each BIN from PACKAGE in the tool
# module MODULE_DIR unless its cache entry is complete, then links them.
build() {
  local mod=$1; shift
  local key dir tmp bin pkg missing=0 start=$SECONDS
  key=$(cat "$here/$mod/go.mod" "$here/$mod/go.sum" <(go version) <(echo "$k8s_version $recipe") | sha256sum | cut -c1-16)
  dir="$cache_root/$mod-$key"
  for spec in "$@"; do [ -x "$dir/${spec%%=*}" ] || missing=1; done
  if [ "$missing" = 1 ]; then
    echo "building $mod tools into $dir" >&2
    tmp="$dir.tmp.$$"
    rm -rf "$tmp" && mkdir -p "$tmp"
    for spec in "$@"; do
      bin=${spec%%=*} pkg=${spec#*=}
      (cd "$here/$mod" && go build -trimpath -ldflags "-s -w$stamp" -o "$tmp/$bin" "$pkg") || { rm -rf "$tmp"; return 1; }
      echo "  $bin built ($((SECONDS - start))s)" >&2
    done
    rm -rf "$dir" && mv "$tmp" "$dir"
  fi
  for spec in "$@"; do ln -sf "$dir/${spec%%=*}" "$out/${spec%%=*}"; done
}

build etcd etcd=go.etcd.io/etcd/server/v3
build kwok kwok=sigs.k8s.io/kwok/cmd/kwok
build helm helm=helm.sh/helm/v3/cmd/helm
build k8s kube-apiserver=k8s.io/kubernetes/cmd/kube-apiserver \
  kube-controller-manager=k8s.io/kubernetes/cmd/kube-controller-manager \
  kube-scheduler=k8s.io/kubernetes/cmd/kube-scheduler kubectl=k8s.io/kubernetes/cmd/kubectl

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
echo "tools ready in $out" >&2
