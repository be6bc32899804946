#!/usr/bin/env bash
# Measures a cold `make demo` as a fresh machine sees it: a clone of HEAD in
# a temporary directory with empty HOME, GOCACHE, GOMODCACHE and
# ~/.cache/capscale. Prints the build time (make build control-plane) and the
# walkthrough time (make demo on what was built), then stops the plane.
# It takes ~20 min of both cores: run it on an otherwise quiet machine.
set -u
repo=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT
git clone -q "$repo" "$work/repo"
cd "$work/repo"
export HOME=$work/home GOPATH=$work/home/go XDG_CACHE_HOME=$work/home/.cache
export GOCACHE=$XDG_CACHE_HOME/go-build GOMODCACHE=$GOPATH/pkg/mod GOFLAGS=-modcacherw
mkdir -p "$HOME"
echo "load at start: $(cut -d' ' -f1-3 /proc/loadavg)"
t0=$(date +%s)
make --no-print-directory build control-plane || exit 1
t1=$(date +%s)
make --no-print-directory demo
rc=$?
t2=$(date +%s)
make --no-print-directory local-down >/dev/null 2>&1
echo "cold build: $((t1 - t0)) s; walkthrough: $((t2 - t1)) s (rc $rc); load at end: $(cut -d' ' -f1-3 /proc/loadavg)"
exit $rc
