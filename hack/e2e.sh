#!/usr/bin/env bash
# Usage: hack/e2e.sh [go test flags...]   (make e2e; E2E_FLAGS are the flags)
#
# The end-to-end suite. With flags (E2E_FLAGS='-run TestX'), one go test.
# Without, the whole suite as three go test processes at once: the suite
# spends most of its time waiting on planes (two shards left the two cores
# about half idle, BENCHMARKS.md), so planes side by side take a fraction of
# the wall time while every test still runs against its own plane. Shard a
# holds every test that uses the host itself (real nodes: containerd, CNI
# bridges and one pod range; the local-up scripts), so that no two of them
# run at once; shard b a list balanced by hand against the rest; shard c
# everything else (-skip a|b), so a new test always runs somewhere.
# E2E_SHARDS=1 runs the whole suite in one process.
set -euo pipefail
cd "$(dirname "$0")/.."
timeout=${E2E_TIMEOUT:-50m}
# -trimpath as make build and the suite's own build of capscale's binaries
# (e2e/main_test.go): the test binary then takes the ~800 packages it shares
# with them (client-go and the rest) from the build cache instead of
# compiling each a second time with other flags.
run_tests() { go test -trimpath -tags e2e -count=1 -timeout "$timeout" -v "$@" ./e2e/; }

if [ $# -gt 0 ] || [ "${E2E_SHARDS:-3}" = 1 ]; then
  run_tests "$@"
  exit
fi

# The test binary is compiled once, not by each shard: on a cold cache two
# go test processes compile the same packages side by side.
out=_output/e2e
mkdir -p "$out"
go test -trimpath -tags e2e -c -o "$out/e2e.test" ./e2e/
# Called only with & (a subshell of its own), which it becomes: the pid the
# traps below kill is the test process itself.
run_shard() { cd e2e && exec "../$out/e2e.test" -test.count=1 -test.timeout "$timeout" -test.v "$@"; }

host='TestRealNode.*|TestLocalUpDown|TestLocalUpPublishCapacity'
balanced='TestSoakShort|TestKarpenter.*|TestAdapter.*|TestRealKEDA.*|TestKEDA.*|TestSchedulingFailover'
# TestKarpenterENIGrowth builds Cilium's enipool, so it runs last in its
# shard: by then, under make test, the Cilium checks beside the suite have
# compiled Cilium's dependency graph (hack/beside.sh), which a cold CI cache
# would otherwise compile twice at once.
cilium='TestKarpenterENIGrowth'
start=$SECONDS
rm -f "$out"/shard-*.rc
# shard NAME RUN...: each RUN (a quoted list of test flags) one test process
# after the other, in a subshell of its own that forwards TERM to the one
# running; the shard's verdict and its own time go to shard-NAME.rc. The
# verdicts are read from those files, not from wait: bash has answered
# "pid N is not a child of this shell" for two shards that had run to the
# end (CI, 2026-12-02).
shard() {
  local name=$1
  shift
  {
    trap 'kill "$child" 2>/dev/null; exit 143' TERM
    rc=0 began=$SECONDS
    for args in "$@"; do
      eval "run_shard $args" & child=$!
      wait "$child" || rc=1
    done
    echo "$rc $((SECONDS - began))" >"$out/shard-$name.rc"
    exit "$rc"
  } >"$out/shard-$name.log" 2>&1 &
  pids+=($!)
}
pids=()
trap 'kill "${pids[@]}" 2>/dev/null; wait' INT TERM
shard a "-test.run '^($host)\$'"
shard b "-test.run '^($balanced)\$' -test.skip '^($cilium)\$'" "-test.run '^($cilium)\$'"
shard c "-test.skip '^($host|$balanced)\$'"
logs=("$out"/shard-{a,b,c}.log)
echo "e2e: three shards running; logs in ${logs[*]}"
# Each test's verdict as it comes; the whole logs once all are done.
tail -q --pid=$$ -n +1 -F "${logs[@]}" 2>/dev/null | grep --line-buffered -E '^--- (PASS|FAIL)' &
follow=$!
for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
kill "$follow" 2>/dev/null || true
rc=0
verdicts=()
for s in a b c; do
  if read -r src secs <"$out/shard-$s.rc" 2>/dev/null; then
    verdict=passed
    [ "$src" = 0 ] || { verdict=failed; rc=1; }
    verdicts+=("shard $s: $verdict in $secs s")
  else
    verdicts+=("shard $s: no verdict (its process ended without one)")
    rc=1
  fi
done
# The verdicts and each failure's last lines first, the whole logs after,
# and the same report once more on stderr at the very end: a CI log cut to
# its head, its tail or its stderr still says which tests failed and why.
report() {
  echo "===== e2e summary: $((SECONDS - start)) s ====="
  printf '%s\n' "${verdicts[@]}"
  cat "$out"/shard-*.log | awk '/^--- PASS/ {n++} END {print n+0 " top-level tests passed"}'
  grep -hE '^--- FAIL' "$out"/shard-*.log || true
  awk -f hack/e2e-failures.awk "$out"/shard-*.log
}
report
for s in a b c; do
  echo "===== shard $s ($out/shard-$s.log) ====="
  cat "$out/shard-$s.log"
done
report >&2
exit $rc
