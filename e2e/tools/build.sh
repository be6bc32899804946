#!/usr/bin/env bash
# Usage: build.sh OUTPUT_DIR [TOOL...]
#
# Builds the tools capscale's checks and the demo run — etcd, kube-apiserver,
# kube-controller-manager, kube-scheduler, kubectl, the kubelet and kube-proxy (real nodes),
# kwok, helm, KEDA's
# operator and metrics server, whereabouts' CNI IPAM plugin and node-slice
# controller (real nodes with IPAM=whereabouts), and Karpenter with its KWOK
# cloud provider (the autoscaler tests); all of them
# unless TOOLs are named — from the Go module proxy, caches each tool module's
# binaries under ~/.cache/capscale keyed by its pinned versions, and links
# them into OUTPUT_DIR (with kwok's stage definitions when kwok is named). A
# cache hit costs a second; a cold build of the Kubernetes binaries takes
# about 7 minutes on 2 cores after capscale's own build (they share its
# dependency versions, so Go compiles those once), showing progress.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
out=${1:?usage: build.sh OUTPUT_DIR [TOOL...]}
shift
all=(etcd kwok helm kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet kube-proxy keda-operator keda-adapter whereabouts whereabouts-node-slice-controller karpenter)
tools=("$@")
# CAPSCALE_K8S=1.MINOR builds the control plane of an older minor, and
# capscale-scheduler for it, from e2e/tools/k8s-1.MINOR (hack/compat/genmodule.sh;
# the compatibility matrix, make test-compat). Empty: the repo's own minor.
k8s_mod=k8s
if [ -n "${CAPSCALE_K8S:-}" ]; then
  k8s_mod=k8s-$CAPSCALE_K8S
  [ -f "$here/$k8s_mod/go.mod" ] || { echo "build.sh: no tool module e2e/tools/$k8s_mod (hack/compat/genmodule.sh)" >&2; exit 2; }
  k8s_version=$(sed -n 's#^\s*k8s.io/kubernetes => k8s.io/kubernetes \(v[0-9.]*\(-[a-z]*\.[0-9]*\)\{0,1\}\)$#\1#p' "$here/$k8s_mod/go.mod")
  # A minor that needs a newer Go (1.38) builds with the approved toolchain.
  source "$here/gotoolchain.sh"
  gotoolchain "$(sed -n 's/^go \([0-9.]*\)$/\1/p' "$here/$k8s_mod/go.mod")"
  all=(kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet kube-proxy capscale-scheduler)
fi
[ ${#tools[@]} -gt 0 ] || tools=("${all[@]}")
for t in "${tools[@]}"; do
  [[ " ${all[*]} " == *" $t "* ]] || { echo "build.sh: unknown tool $t (known: ${all[*]})" >&2; exit 2; }
done
wanted() { [[ " ${tools[*]} " == *" $1 "* ]]; }
mkdir -p "$out"
out=$(cd "$out" && pwd)

k8s_version=${k8s_version:-v1.37.2}
k8s_minor=${k8s_version#v1.}
k8s_minor=${k8s_minor%%.*}
# Bump when the way binaries are built changes, so caches are not reused.
recipe=1
cache_root=${CAPSCALE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/capscale}/bin
export GOFLAGS=-mod=mod CGO_ENABLED=0

stamp=""
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  stamp+=" -X $pkg.gitVersion=$k8s_version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$k8s_minor -X $pkg.gitTreeState=clean"
done

# binname PACKAGE: the name go build -o DIR/ gives PACKAGE's binary, its last
# path element unless that is a major version (go.etcd.io/etcd/server/v3).
binname() {
  local p=$1 last=${1##*/}
  if [[ $last =~ ^v[0-9]+$ ]]; then p=${p%/*}; fi
  echo "${p##*/}"
}

# build MODULE_DIR BIN=PACKAGE...: builds each wanted BIN from PACKAGE in the
# tool module MODULE_DIR unless its cache entry has it, then links them.
build() {
  local mod=$1; shift
  local key dir spec total start=$SECONDS
  local -a specs=() missing=() pkgs=()
  for spec in "$@"; do wanted "${spec%%=*}" && specs+=("$spec"); done
  [ ${#specs[@]} -gt 0 ] || return 0
  key=$(cat "$here/$mod/go.mod" "$here/$mod/go.sum" <(go version) <(echo "$k8s_version $recipe") | sha256sum | cut -c1-16)
  dir="$cache_root/$mod-$key"
  for spec in "${specs[@]}"; do
    [ -x "$dir/${spec%%=*}" ] || { missing+=("$spec"); pkgs+=("${spec#*=}"); }
  done
  if [ ${#missing[@]} -gt 0 ]; then
    echo "building ${missing[*]%%=*} ($mod module) into $dir" >&2
    mkdir -p "$dir"
    # What Go has yet to compile with these flags (stale, and not a binary
    # Go can take from its build cache) is the total the progress counts to.
    echo "  $mod: counting the packages to compile" >&2
    total=$(cd "$here/$mod" && go list -deps -trimpath \
      -f '{{if and .Stale (ne .StaleReason "not installed but available in build cache")}}{{.ImportPath}}{{end}}' \
      "${pkgs[@]}" | grep -c .) || true
    # One go build for all of a module's binaries: their packages compile
    # in parallel and each link overlaps the others' compiles (a go build
    # per binary left a core idle through every link). They go to a
    # temporary directory, named after their package's last element, and
    # are renamed into place: an interrupted build never leaves a partial
    # binary in the cache.
    tmp="$dir/.build.$$"
    mkdir -p "$tmp"
    {
      (cd "$here/$mod" && go build -v -trimpath -ldflags "-s -w$stamp" -o "$tmp/" "${pkgs[@]}") ||
        { rm -rf "$tmp"; exit 1; }
      for spec in "${missing[@]}"; do
        mv -f "$tmp/$(binname "${spec#*=}")" "$dir/${spec%%=*}"
      done
      rmdir "$tmp"
      echo "=${missing[*]%%=*} built ($((SECONDS - start))s)"
    } 2>&1 | bash "$here/progress.sh" "$mod" "${total:-0}"
  fi
  for spec in "${specs[@]}"; do ln -sf "$dir/${spec%%=*}" "$out/${spec%%=*}"; done
}

if [ "$k8s_mod" != k8s ]; then
  build "$k8s_mod" kube-apiserver=k8s.io/kubernetes/cmd/kube-apiserver \
    kube-controller-manager=k8s.io/kubernetes/cmd/kube-controller-manager \
    kube-scheduler=k8s.io/kubernetes/cmd/kube-scheduler kubectl=k8s.io/kubernetes/cmd/kubectl \
    kubelet=k8s.io/kubernetes/cmd/kubelet kube-proxy=k8s.io/kubernetes/cmd/kube-proxy
  # capscale-scheduler is capscale's code: built every time, never cached
  # by go.mod's key (Go's build cache makes a rebuild a link).
  if wanted capscale-scheduler; then
    echo "building capscale-scheduler for Kubernetes $k8s_version" >&2
    rm -f "$out/capscale-scheduler"
    (cd "$here/$k8s_mod" && go build -trimpath -tags "k8s_1_$k8s_minor" -ldflags "-s -w$stamp ${CAPSCALE_LDFLAGS:-}" \
      -o "$out/capscale-scheduler" github.com/capscale/capscale/cmd/capscale-scheduler)
  fi
  echo "${tools[*]} (Kubernetes $k8s_version) ready in $out" >&2
  exit 0
fi
build etcd etcd=go.etcd.io/etcd/server/v3
build kwok kwok=sigs.k8s.io/kwok/cmd/kwok
build helm helm=helm.sh/helm/v3/cmd/helm
# KEDA's own operator and metrics server, for the tests next to a real KEDA.
build keda keda-operator=github.com/kedacore/keda/v2/cmd/operator keda-adapter=github.com/kedacore/keda/v2/cmd/adapter
# whereabouts v0.9.2: the IPAM that real nodes run with IPAM=whereabouts
# (its CNI plugin is its cmd package, hence the name given here).
build whereabouts whereabouts=github.com/k8snetworkplumbingwg/whereabouts/cmd \
  whereabouts-node-slice-controller=github.com/k8snetworkplumbingwg/whereabouts/cmd/nodeslicecontroller
# Karpenter with its KWOK cloud provider (its module's kwok/ main package),
# the node autoscaler of the autoscaler tests (e2e/tools/karpenter/go.mod says
# why this version).
build karpenter karpenter=sigs.k8s.io/karpenter/kwok
build k8s kube-apiserver=k8s.io/kubernetes/cmd/kube-apiserver \
  kube-controller-manager=k8s.io/kubernetes/cmd/kube-controller-manager \
  kube-scheduler=k8s.io/kubernetes/cmd/kube-scheduler kubectl=k8s.io/kubernetes/cmd/kubectl \
  kubelet=k8s.io/kubernetes/cmd/kubelet kube-proxy=k8s.io/kubernetes/cmd/kube-proxy

# kwok's standalone binary has no behaviour of its own: give it the "fast"
# stages its module ships (nodes Ready with lease heartbeats, pods Running),
# and capscale's for a deleted pod (kwok/kubelet-delete.yaml says why).
if wanted kwok; then
  kwokdir=$(cd "$here/kwok" && go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)
  stages="$out/kwok-stages.yaml.tmp"
  : >"$stages"
  for f in node/fast/node-initialize node/heartbeat-with-lease/node-heartbeat-with-lease \
           pod/fast/pod-ready pod/fast/pod-complete; do
    cat "$kwokdir/kustomize/stage/$f.yaml" >>"$stages"
    printf '\n---\n' >>"$stages"
  done
  # A deleted pod ends as the kubelet ends it: terminal first, then gone.
  cat "$here/kwok/kubelet-delete.yaml" >>"$stages"
  mv "$stages" "$out/kwok-stages.yaml"
fi
echo "${tools[*]} ready in $out" >&2
