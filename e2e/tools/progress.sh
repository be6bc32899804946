#!/usr/bin/env bash
# Usage: go build -v ... 2>&1 | progress.sh LABEL TOTAL
#
# Reads `go build -v` output (a package per line, as it is compiled) and shows
# "LABEL: N/TOTAL packages compiled, elapsed" — redrawn every second on a
# terminal, a line every 30 s otherwise — so a long compile is never silent.
# TOTAL is what `go list -deps` reports stale (0 if unknown). Lines with a
# space or a '#' (compiler errors, downloads) pass through; "=text" lines are
# printed as they are.
set -euo pipefail

label=${1:?usage: progress.sh LABEL TOTAL} total=${2:-0}
n=0 start=$SECONDS shown=$SECONDS line="" partial="" rc=0 tty=0
[ -t 2 ] && tty=1
status() {
  local of=$((n > total ? n : total)) t=$((SECONDS - start))
  if ((of == 0)); then
    printf '  %s: nothing to compile (all in Go'"'"'s build cache), linking, %dm%02ds' "$label" $((t / 60)) $((t % 60))
  else
    printf '  %s: %d/%d packages compiled, %dm%02ds' "$label" "$n" "$of" $((t / 60)) $((t % 60))
  fi
}
while :; do
  rc=0
  IFS= read -r -t 1 line || rc=$?
  if ((rc > 128)); then # timed out: keep any partial line for the next read
    partial+=$line
  else
    line=$partial$line partial=""
    case $line in
      '') ;;
      =*) ((tty)) && printf '\r\033[K' >&2
        printf '  %s\n' "${line#=}" >&2 ;;
      *' '* | '#'*) ((tty)) && printf '\r\033[K' >&2
        printf '%s\n' "$line" >&2 ;;
      *) n=$((n + 1)) ;;
    esac
    ((rc == 0)) || break # end of input
  fi
  if ((tty)); then
    printf '\r\033[K%s' "$(status)" >&2
  elif ((SECONDS - shown >= 30)); then
    shown=$SECONDS
    printf '%s\n' "$(status)" >&2
  fi
done
((tty)) && printf '\r\033[K' >&2
printf '  %s: %d packages compiled in %dm%02ds\n' "$label" "$n" $(((SECONDS - start) / 60)) $(((SECONDS - start) % 60)) >&2
