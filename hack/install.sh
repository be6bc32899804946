#!/usr/bin/env bash
# Installs capscale into the cluster of the current kubeconfig:
#   1. preflight: refuses to take v1beta1.external.metrics.k8s.io from another
#      adapter (KEDA, prometheus-adapter) unless REPLACE=true (take over, drop
#      it) or DELEGATE=true (record it as capscale's delegate, on the
#      APIService, and forward every metric not named capscale-* to it;
#      hack/uninstall.sh gives it back);
#   2. the serving certificate of the adapter and workload API (Secret
#      capscale-serving-cert; an existing one is kept, so re-runs keep the
#      same caBundle);
#   3. kubectl apply -k deploy/ with the APIService's caBundle filled in
#      before it is applied, so the aggregator verifies the adapter's TLS.
# Environment: KUBECTL (kubectl), METRICS_ADAPTER (the metrics-adapter binary,
# default _output/bin/metrics-adapter from `make build`), REPLACE=true,
# DELEGATE=true, DELEGATE_CA_FILE=FILE (the CA that verifies the delegate,
# when its APIService has no caBundle),
# DRY_RUN=server|client (passed to kubectl apply; nothing is changed),
# RENDER_TO=FILE (also write the manifests as applied, caBundle filled in).
set -euo pipefail
cd "$(dirname "$0")/.."

KUBECTL=${KUBECTL:-kubectl}
METRICS_ADAPTER=${METRICS_ADAPTER:-_output/bin/metrics-adapter}
NS=capscale-system
SECRET=capscale-serving-cert
dry=()
case "${DRY_RUN:-}" in
  "") ;;
  server|client) dry=(--dry-run="$DRY_RUN") ;;
  *) echo "install: DRY_RUN must be server or client, got '$DRY_RUN'" >&2; exit 2 ;;
esac
for tool in "$KUBECTL" openssl base64; do
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

echo "== serving certificate (Secret $NS/$SECRET)"
if "$KUBECTL" -n "$NS" get secret "$SECRET" >/dev/null 2>&1; then
  echo "   keeping the existing Secret"
  "$KUBECTL" -n "$NS" get secret "$SECRET" -o jsonpath='{.data.ca\.crt}' | base64 -d >"$tmp/ca.crt"
  [ -s "$tmp/ca.crt" ] || { echo "install: Secret $NS/$SECRET has no ca.crt: delete it or add the CA" >&2; exit 1; }
else
  sans="DNS:capscale-metrics-adapter.$NS.svc,DNS:capscale-workload-api.$NS.svc"
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 3650 \
    -subj "/CN=capscale-ca" -keyout "$tmp/ca.key" -out "$tmp/ca.crt" 2>/dev/null
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
    -subj "/CN=capscale-metrics-adapter.$NS.svc" -keyout "$tmp/tls.key" -out "$tmp/tls.csr" 2>/dev/null
  printf 'subjectAltName=%s\nextendedKeyUsage=serverAuth\n' "$sans" >"$tmp/ext"
  openssl x509 -req -in "$tmp/tls.csr" -CA "$tmp/ca.crt" -CAkey "$tmp/ca.key" -CAcreateserial \
    -days 825 -extfile "$tmp/ext" -out "$tmp/tls.crt" 2>/dev/null
  "$KUBECTL" apply "${dry[@]}" -f deploy/namespace.yaml
  "$KUBECTL" -n "$NS" create secret generic "$SECRET" --from-file=tls.crt="$tmp/tls.crt" \
    --from-file=tls.key="$tmp/tls.key" --from-file=ca.crt="$tmp/ca.crt" --dry-run=client -o yaml |
    "$KUBECTL" apply "${dry[@]}" -f -
fi

echo "== kubectl apply -k deploy/"
ca=$(base64 -w0 <"$tmp/ca.crt")
"$KUBECTL" kustomize deploy/ >"$tmp/capscale.yaml"
grep -q '^  caBundle: ""$' "$tmp/capscale.yaml" || { echo "install: the APIService in deploy/ has no empty caBundle to fill" >&2; exit 1; }
sed -i "s|^  caBundle: \"\"\$|  caBundle: $ca|" "$tmp/capscale.yaml"
[ -n "${RENDER_TO:-}" ] && cp "$tmp/capscale.yaml" "$RENDER_TO"
"$KUBECTL" apply "${dry[@]}" -f "$tmp/capscale.yaml"
echo "== done${DRY_RUN:+ (dry run: $DRY_RUN)}"
