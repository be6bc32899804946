#!/usr/bin/env bash
# Usage: hack/beside.sh LOG 'COMMAND' -- MAIN...   (make test)
#
# Runs COMMAND at nice 19, its output in LOG, while MAIN runs in the
# foreground, and fails if either fails. make test runs the Cilium checks
# beside the end-to-end suite: the suite mostly waits on its planes, so a
# build at nice 19 takes the cores they leave idle and yields them when a
# plane wants them. COMMAND's verdict is printed once both are done, on
# stderr after MAIN's own report; its log only if it failed, so that a
# passing COMMAND's lines do not push MAIN's report out of a CI log's tail.
# Last it prints where the time went: MAIN's, COMMAND's after MAIN ended,
# and, with CAPSCALE_TEST_START (make test's start, in seconds since the
# epoch), all that ran before it (a CI run over its limit says which part
# grew).
set -euo pipefail
if [ $# -lt 4 ] || [ "$3" != -- ]; then
  echo "usage: hack/beside.sh LOG 'COMMAND' -- MAIN..." >&2
  exit 2
fi
log=$1 cmd=$2
shift 3
mkdir -p "$(dirname "$log")"
# Its own session, so that an interrupt stops all it started.
setsid nice -n 19 bash -c "$cmd" >"$log" 2>&1 &
pid=$!
trap 'kill -- "-$pid" 2>/dev/null; exit 143' INT TERM
rc=0
start=$SECONDS
"$@" || rc=$?
main=$((SECONDS - start))
brc=0
wait "$pid" || brc=$?
after=$((SECONDS - start - main))
if [ "$brc" -ne 0 ]; then
  echo "===== beside: $cmd ($log) ====="
  cat "$log"
  echo "FAIL beside: $cmd exited $brc (its log: $log)" >&2
  [ "$rc" -ne 0 ] || rc=$brc
else
  echo "ok beside: $cmd (its log: $log)" >&2
fi
timing="timing: MAIN ${main} s, then ${after} s more for COMMAND"
if [ -n "${CAPSCALE_TEST_START:-}" ]; then
  total=$(($(date +%s) - CAPSCALE_TEST_START))
  timing="$timing; before them $((total - main - after)) s; in all $total s"
fi
echo "$timing (MAIN: $*; COMMAND: $cmd)" >&2
exit "$rc"
