#!/usr/bin/env bash
# Installs capscale into the cluster of the current kubeconfig:
#   1. preflight: refuses to take v1beta1.external.metrics.k8s.io from another
#      adapter (KEDA, prometheus-adapter) unless REPLACE=true (take over, drop
#      it) or DELEGATE=true (record it as capscale's delegate, on the
#      APIService, and forward every metric not named capscale-* to it;
#      hack/uninstall.sh gives it back);
#   2. kubectl apply -k deploy/. No certificate to make: the metrics adapter
#      creates its CA and serving certificate (Secret capscale-serving-cert,
#      which the workload API serves too), rotates them, and writes the
#      APIService's caBundle (docs/install.md "Certificates").
# Environment: KUBECTL (kubectl), METRICS_ADAPTER (the metrics-adapter binary,
# default _output/bin/metrics-adapter from `make build`), REPLACE=true,
# DELEGATE=true, DELEGATE_CA_FILE=FILE (the CA that verifies the delegate,
# when its APIService has no caBundle),
# DRY_RUN=server|client (passed to kubectl apply; nothing is changed),
# RENDER_TO=FILE (also write the manifests as applied).
set -euo pipefail
cd "$(dirname "$0")/.."

KUBECTL=${KUBECTL:-kubectl}
METRICS_ADAPTER=${METRICS_ADAPTER:-_output/bin/metrics-adapter}
dry=()
case "${DRY_RUN:-}" in
  "") ;;
  server|client) dry=(--dry-run="$DRY_RUN") ;;
  *) echo "install: DRY_RUN must be server or client, got '$DRY_RUN'" >&2; exit 2 ;;
esac
for tool in "$KUBECTL"; do
  command -v "$tool" >/dev/null || { echo "install: $tool is required" >&2; exit 2; }
done
[ -x "$METRICS_ADAPTER" ] || { echo "install: $METRICS_ADAPTER not found: run 'make build' or set METRICS_ADAPTER" >&2; exit 2; }

kubeconfig=()
[ -n "${KUBECONFIG:-}" ] && kubeconfig=(--kubeconfig="${KUBECONFIG%%:*}")
mode=()
[ "${REPLACE:-}" = true ] && mode+=(--replace)
if [ "${DELEGATE:-}" = true ]; then
  mode+=(--delegate)
  [ -n "${DELEGATE_CA_FILE:-}" ] && mode+=(--delegate-ca-file="$DELEGATE_CA_FILE")
  [ ${#dry[@]} -gt 0 ] && mode+=(--dry-run)
fi
echo "== preflight"
"$METRICS_ADAPTER" preflight "${kubeconfig[@]}" "${mode[@]}"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

echo "== kubectl apply -k deploy/"
"$KUBECTL" kustomize deploy/ >"$tmp/capscale.yaml"
[ -n "${RENDER_TO:-}" ] && cp "$tmp/capscale.yaml" "$RENDER_TO"
"$KUBECTL" apply "${dry[@]}" -f "$tmp/capscale.yaml"
echo "== done${DRY_RUN:+ (dry run: $DRY_RUN)}"
