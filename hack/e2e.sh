#!/usr/bin/env bash
# Usage: hack/e2e.sh [go test flags...]   (make e2e; E2E_FLAGS are the flags)
#
# The end-to-end suite. With flags (E2E_FLAGS='-run TestX'), one go test.
# Without, the whole suite as two go test processes at once, split by
# E2E_SHARD_A (a -run pattern) and its complement (-skip): the suite
# spends most of its time waiting on planes (about half a core on
# average), so two planes side by side take about half the wall time
# (BENCHMARKS.md) while every test still runs against its own plane. The
# real-node and local-up tests stay in one shard, so that no two of them
# run at once. E2E_SHARDS=1 runs the whole suite in one process.
set -euo pipefail
cd "$(dirname "$0")/.."
timeout=${E2E_TIMEOUT:-50m}
run_tests() { go test -tags e2e -count=1 -timeout "$timeout" -v "$@" ./e2e/; }

if [ $# -gt 0 ] || [ "${E2E_SHARDS:-2}" = 1 ]; then
  run_tests "$@"
  exit
fi

# The test binary is compiled once, not by each shard: on a cold cache two
# go test processes compile the same packages side by side.
out=_output/e2e
mkdir -p "$out"
go test -tags e2e -c -o "$out/e2e.test" ./e2e/
run_shard() { (cd e2e && exec "../$out/e2e.test" -test.count=1 -test.timeout "$timeout" -test.v "$@"); }

shard_a=${E2E_SHARD_A:-'^(TestSoakShort|TestRealNode.*|TestLocalUpDown|TestLocalUpPublishCapacity|TestSchedulingFailover|TestKarpenterNative|TestKarpenterExtenderPublished|TestKarpenterRuleModesSource)$'}
start=$SECONDS
pids=()
trap 'kill "${pids[@]}" 2>/dev/null; wait' INT TERM
run_shard -test.run "$shard_a" >"$out/shard-a.log" 2>&1 &
pids+=($!)
run_shard -test.skip "$shard_a" >"$out/shard-b.log" 2>&1 &
pids+=($!)
echo "e2e: two shards running; logs in $out/shard-a.log and $out/shard-b.log"
# Each test's verdict as it comes; the whole logs once both are done.
tail -q --pid=$$ -n +1 -F "$out/shard-a.log" "$out/shard-b.log" 2>/dev/null | grep --line-buffered -E '^--- (PASS|FAIL)' &
follow=$!
rc=0
wait "${pids[0]}" || rc=1
wait "${pids[1]}" || rc=1
kill "$follow" 2>/dev/null || true
# The verdicts and each failure's last lines first, the whole logs after,
# and the same report once more on stderr at the very end: a CI log cut to
# its head, its tail or its stderr still says which tests failed and why.
report() {
  echo "===== e2e summary: $((SECONDS - start)) s ====="
  cat "$out"/shard-*.log | awk '/^--- PASS/ {n++} END {print n+0 " top-level tests passed"}'
  grep -hE '^--- FAIL' "$out"/shard-*.log || true
  awk -f hack/e2e-failures.awk "$out"/shard-*.log
}
report
for s in a b; do
  echo "===== shard $s ($out/shard-$s.log) ====="
  cat "$out/shard-$s.log"
done
report >&2
exit $rc
