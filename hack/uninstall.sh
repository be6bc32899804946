#!/usr/bin/env bash
# Removes capscale from the cluster of the current kubeconfig and leaves the
# external-metrics APIService as capscale found it:
#   1. `metrics-adapter preflight --restore`: if capscale took
#      v1beta1.external.metrics.k8s.io over in delegation mode, it routes to
#      the recorded delegate (KEDA, prometheus-adapter) again, with exactly
#      the spec it had, before anything of capscale goes away;
#   2. kubectl delete of what `kubectl apply -k deploy/` created, the
#      namespace capscale-system (and the serving Secret) included; the
#      APIService only while it still routes to capscale.
# Environment: KUBECTL (kubectl), METRICS_ADAPTER (default
# _output/bin/metrics-adapter), DRY_RUN=server|client (nothing is changed).
set -euo pipefail
cd "$(dirname "$0")/.."

KUBECTL=${KUBECTL:-kubectl}
METRICS_ADAPTER=${METRICS_ADAPTER:-_output/bin/metrics-adapter}
NS=capscale-system
dry=()
preflight_dry=()
case "${DRY_RUN:-}" in
  "") ;;
  server|client) dry=(--dry-run="$DRY_RUN"); preflight_dry=(--dry-run) ;;
  *) echo "uninstall: DRY_RUN must be server or client, got '$DRY_RUN'" >&2; exit 2 ;;
esac
command -v "$KUBECTL" >/dev/null || { echo "uninstall: $KUBECTL is required" >&2; exit 2; }
[ -x "$METRICS_ADAPTER" ] || { echo "uninstall: $METRICS_ADAPTER not found: run 'make build' or set METRICS_ADAPTER" >&2; exit 2; }
kubeconfig=()
[ -n "${KUBECONFIG:-}" ] && kubeconfig=(--kubeconfig="${KUBECONFIG%%:*}")

echo "== give the external-metrics APIService back (preflight --restore)"
out=$("$METRICS_ADAPTER" preflight "${kubeconfig[@]}" --restore "${preflight_dry[@]}")
echo "$out"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$KUBECTL" kustomize deploy/ >"$tmp/capscale.yaml"
owner=$("$KUBECTL" get apiservice v1beta1.external.metrics.k8s.io --ignore-not-found \
  -o jsonpath='{.spec.service.namespace}/{.spec.service.name}')
if [[ "$out" == restored:* || "$owner" != "$NS/capscale-metrics-adapter" ]]; then
  # Someone else's now (restored, or never capscale's): keep it.
  echo "   the APIService routes to '${owner:-nobody}': keeping it"
  awk 'function flush() { if (doc !~ /(^|\n)kind: APIService\n/) printf "%s", doc; doc = "" }
       /^---$/ { flush(); print; next } { doc = doc $0 "\n" } END { flush() }' \
    "$tmp/capscale.yaml" >"$tmp/delete.yaml"
else
  cp "$tmp/capscale.yaml" "$tmp/delete.yaml"
fi
echo "== kubectl delete (capscale's objects)"
"$KUBECTL" delete "${dry[@]}" --ignore-not-found --wait=false -f "$tmp/delete.yaml"
echo "== done${DRY_RUN:+ (dry run: $DRY_RUN)}"
