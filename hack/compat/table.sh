#!/usr/bin/env bash
# Usage: hack/compat/table.sh RESULTS.tsv FILE.md
# Rewrites FILE's block between "<!-- BEGIN GENERATED: compat -->" and
# "<!-- END GENERATED -->" as a table of the compatibility matrix's last run
# (hack/compat/run.sh): one row per minor, one column per check.
set -euo pipefail
results=$1 file=$2
table=$(mktemp)
{
  echo "| Kubernetes | extender mode | native mode | plugin mode | HPA on capscale's metrics | rotating certificates | MutatingAdmissionPolicy | Helm install on real nodes | run |"
  echo "|---|---|---|---|---|---|---|---|---|"
  for minor in $(cut -f1 "$results" | sort -uV); do
    row() { awk -F'\t' -v m="$minor" -v c="$1" '$1 == m && $3 == c { print $4 }' "$results" | tail -1; }
    ver=$(awk -F'\t' -v m="$minor" '$1 == m { print $2 }' "$results" | tail -1)
    commit=$(awk -F'\t' -v m="$minor" '$1 == m { print $6 }' "$results" | tail -1)
    cell() { case "$1" in pass) echo "✅ tested";; FAIL) echo "❌ failed";; "") echo "not run";; *) echo "$1";; esac; }
    map=$(row map)
    case "$map" in v1) map="✅ served (v1)";; v1beta1|v1alpha1) map="off by default ($map)";; none) map="❌ not served";; FAIL) map="❌ check failed";; "") map="not run";; esac
    echo "| $ver | $(cell "$(row extender)") | $(cell "$(row native)") | $(cell "$(row plugin)") | $(cell "$(row hpa)") | $(cell "$(row certs)") | $map | $(cell "$(row helm)") | $commit |"
  done
} >"$table"
awk -v table="$table" '
  /^<!-- BEGIN GENERATED: compat -->$/ { print; while ((getline line < table) > 0) print line; skip = 1; next }
  /^<!-- END GENERATED -->$/ && skip { skip = 0 }
  !skip { print }
' "$file" >"$file.new"
mv "$file.new" "$file"
rm -f "$table"
