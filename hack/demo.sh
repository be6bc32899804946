#!/usr/bin/env bash
# make demo: build capscale and the control-plane binaries the plane runs (not
# helm), start a local control plane with capscale wired in, and walk through
# what each component does with the real objects.
set -euo pipefail
cd "$(dirname "$0")/.."

BIN=_output/bin
LOCAL=_output/local
# Scheduling mode: plugin (capscale-scheduler is the plane's scheduler),
# extender or native; make demo MODE=... passes it.
MODE=${MODE:-plugin}
bold() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
say() { printf '   %s\n' "$*"; }
run() { printf '\033[36m$ %s\033[0m\n' "$*"; "$@"; }
k() { "$BIN/kubectl" "$@"; }

# wait_for DESCRIPTION TIMEOUT COMMAND...: polls COMMAND every second, printing
# a dot, so nothing sits silent.
wait_for() {
  local what=$1 timeout=$2; shift 2
  printf '   waiting for %s ' "$what"
  for ((i = 0; i < timeout; i++)); do
    if "$@" >/dev/null 2>&1; then printf ' done (%ss)\n' "$i"; return 0; fi
    printf '.'; sleep 1
  done
  printf ' gave up after %ss\n' "$timeout"; return 1
}

# Real nodes (a kubelet, its containerd and a CNI range of 10 IPs) need root
# and make deps' Debian packages; elsewhere the demo runs without them.
REAL_NODES=${REAL_NODES:-1}
if [ "$REAL_NODES" != 0 ] && [ "$(id -u)" != 0 ]; then
  echo "not root: the demo runs without a real node (REAL_NODES=0); its first part needs root and make deps"
  REAL_NODES=0
fi

bold "Building capscale and the control plane (the first time: ~15 min, cached afterwards)"
make --no-print-directory build control-plane
if [ "$REAL_NODES" != 0 ]; then make --no-print-directory deps; fi

if [ -f "$LOCAL/state.json" ]; then
  bold "A local plane is already running; restarting it"
  make --no-print-directory local-down
fi
bold "Starting a local control plane: etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok (5 nodes), $REAL_NODES real node(s), and capscale ($MODE mode)"
make --no-print-directory local-up NODES=5 MODE="$MODE" REAL_NODES="$REAL_NODES"
# shellcheck disable=SC1091
source "$LOCAL/env"
export KUBECONFIG
run k get nodes -o wide

if [ "$REAL_NODES" != 0 ]; then
  bash hack/demo-realnode.sh
fi

bold "1. Underlay-IP scheduling"
say "Each node holds at most 10 underlay IPs unless its capscale.io/underlay-ip-capacity annotation says otherwise."
run k annotate node kwok-node-000 capscale.io/underlay-ip-capacity=4 --overwrite
run k annotate node kwok-node-001 capscale.io/underlay-ip-capacity=0 --overwrite
say "Capacity now: 4 + 0 + 3 x 10 = 34 IPs. A Deployment of 40 pods, each asking for one IP:"
if [ "$REAL_NODES" != 0 ]; then say "(The tainted real node's 10 IPs stay free: the TOTAL below counts them.)"; fi
k create namespace demo >/dev/null
wait_for "the demo namespace's default ServiceAccount" 30 k -n demo get serviceaccount default
cat <<'YAML' | k apply -f -
apiVersion: apps/v1
kind: Deployment
metadata: {name: underlay, namespace: demo}
spec:
  replicas: 40
  selector: {matchLabels: {app: underlay}}
  template:
    metadata: {labels: {app: underlay}}
    spec:
      containers:
      - name: app
        image: registry.example/underlay:1
        resources:
          requests: {capscale.io/underlay-ip: "1"}
          limits: {capscale.io/underlay-ip: "1"}
YAML
bound() { [ "$(k -n demo get pods -l app=underlay --field-selector spec.nodeName!= -o name | wc -l)" -eq 34 ]; }
wait_for "34 pods bound" 90 bound
say "Where the IPs are, per node (kubectl capscale, the kubectl plugin, reads Nodes and Pods as you; never above capacity):"
kc() { PATH="$BIN:$PATH" k capscale "$@"; }
printf '\033[36m$ kubectl capscale ips\033[0m\n'
kc ips | sed 's/^/   /'
say "The 6 pods that do not fit stay Pending (WAITING on the TOTAL line), and say why:"
k -n demo get events --field-selector reason=FailedScheduling -o jsonpath='{.items[-1:].message}{"\n"}' | sed 's/^/   /'
if [ -z "${EXTENDER_URL:-}" ]; then
  say "Plugin mode: no extender ran; capscale-scheduler (kube-scheduler with the UnderlayIP plugin) placed them."
fi

bold "2. Autoscaling on a third-party load index (step policy)"
say "A load source answers {\"data\":{\"load_balance\":V}} at \$LOAD_SOURCE_URL; the adapter polls it every 2s."
say "Policy for demo/gpu-inference: above 0.8 add 3, below 0.5 remove 1, 1..20 replicas, no scale-down while a pod is younger than 20s, at most one step per 10s."
cat <<'YAML' | k apply -f -
apiVersion: apps/v1
kind: Deployment
metadata: {name: gpu-inference, namespace: demo}
spec:
  replicas: 1
  selector: {matchLabels: {app: gpu-inference}}
  template:
    metadata: {labels: {app: gpu-inference}}
    spec:
      containers: [{name: app, image: registry.example/gpu-inference:1}]
---
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata: {name: gpu-inference, namespace: demo}
spec:
  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: gpu-inference}
  minReplicas: 1
  maxReplicas: 20
  metrics:
  - type: External
    external:
      metric:
        name: capscale-desired-replicas
        selector: {matchLabels: {workload: gpu-inference, policy: load-step}}
      target: {type: AverageValue, averageValue: "1"}
  behavior:
    scaleUp: {stabilizationWindowSeconds: 0, tolerance: 0, policies: [{type: Pods, value: 3, periodSeconds: 1}]}
    scaleDown: {stabilizationWindowSeconds: 0, tolerance: 0, policies: [{type: Pods, value: 1, periodSeconds: 1}]}
YAML
replicas() { [ "$(k -n demo get deploy gpu-inference -o jsonpath='{.spec.replicas}')" -eq "$1" ]; }
CA=$CAPSCALE_CA_FILE
run curl -fsS --cacert "$CA" -X PUT --data 0.93 "$LOAD_SOURCE_URL"
index() { k get --raw "/apis/external.metrics.k8s.io/v1beta1/namespaces/demo/capscale-load-index?labelSelector=source%3Dgpu-load"; }
index_is() { index | grep -q "\"value\":\"$1\""; }
wait_for "the adapter's next poll" 15 index_is 930m
run index; echo
wait_for "the HPA to add 3 replicas (1 -> 4)" 60 replicas 4
run curl -fsS --cacert "$CA" -X PUT --data 0.3 "$LOAD_SOURCE_URL"
say "Load 0.3 is below 0.5, but the new pods are younger than 20s: no scale-down until they are older."
wait_for "the HPA to remove 1 replica (4 -> 3)" 90 replicas 3
hpa_status() { [ "$(k -n demo get hpa gpu-inference -o jsonpath='{.status.currentReplicas}')" -eq 3 ]; }
wait_for "the HPA status to catch up" 15 hpa_status
run k -n demo get hpa gpu-inference

bold "3. Replicas from QPS"
say "A web team knows its single-pod QPS (500) and expected total QPS (800): ceil(800/500) = 2 replicas."
cat <<'YAML' | k apply -f -
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: demo
  annotations: {capscale.io/single-pod-qps: "500", capscale.io/total-qps: "800"}
spec:
  replicas: 1
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers: [{name: app, image: registry.example/web:1}]
---
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata: {name: web, namespace: demo}
spec:
  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: web}
  minReplicas: 1
  maxReplicas: 10
  metrics:
  - type: External
    external:
      metric:
        name: capscale-desired-replicas
        selector: {matchLabels: {workload: web, policy: qps}}
      target: {type: AverageValue, averageValue: "1"}
  behavior:
    scaleUp: {stabilizationWindowSeconds: 0, tolerance: 0}
    scaleDown: {stabilizationWindowSeconds: 0, tolerance: 0}
YAML
web() { [ "$(k -n demo get deploy web -o jsonpath='{.spec.replicas}')" -eq "$1" ]; }
wait_for "web at 2 replicas" 60 web 2
run k -n demo annotate deploy web capscale.io/total-qps=1800 --overwrite
wait_for "web at ceil(1800/500) = 4 replicas" 60 web 4

bold "4. ElasticWeb: a web service as a Kubernetes resource"
say "Four values in a custom resource; capscale-controller keeps a Deployment, a Service and an HPA in shape."
shop_yaml='apiVersion: capscale.io/v1alpha1
kind: ElasticWeb
metadata: {name: shop, namespace: demo}
spec:
  image: registry.example/shop:1
  port: 8080
  singlePodQPS: 500
  totalQPS: 800'
printf '%s\n' "$shop_yaml" | sed 's/^/   /'
printf '%s\n' "$shop_yaml" | k apply -f -
ew_ready() { [ "$(k -n demo get elasticweb shop -o jsonpath='{.status.readyReplicas}/{.status.realQPS}')" = "$1" ]; }
wait_for "shop: 2 ready, REAL-QPS 1000" 90 ew_ready 2/1000
run k -n demo get elasticwebs
say "totalQPS 800 -> 1800: the adapter asks for ceil(1800/500) = 4, the HPA follows, the status shows it:"
run k -n demo patch elasticweb shop --type=merge -p '{"spec":{"totalQPS":1800}}'
for _ in $(seq 1 90); do
  line=$(k -n demo get elasticweb shop --no-headers)
  printf '   %s\n' "$line"
  ew_ready 4/2000 && break
  sleep 2
done
say "Delete its Service: the controller puts it back."
run k -n demo delete service shop
svc_back() { k -n demo get service shop; }
wait_for "the Service to come back" 30 svc_back
run k -n demo get service shop
say "An invalid spec is refused by the apiserver, naming the field:"
printf '\033[36m$ kubectl patch elasticweb shop -p {"spec":{"singlePodQPS":0}}\033[0m\n'
k -n demo patch elasticweb shop --type=merge -p '{"spec":{"singlePodQPS":0}}' 2>&1 | sed 's/^/   /' || true
run k -n demo get events --field-selector involvedObject.kind=ElasticWeb,involvedObject.name=shop

bold "5. The workload API (every call authenticated and authorized as the caller)"
k -n demo create serviceaccount console >/dev/null
k create rolebinding console-edit --clusterrole=edit --serviceaccount=demo:console -n demo >/dev/null
# The apiserver authorizes from its RBAC cache, which sees a new RoleBinding
# a moment later: wait until it does, or the first call is a 403.
console_can() { k auth can-i "$1" "$2" -n demo --as=system:serviceaccount:demo:console; }
wait_for "RBAC to let the console patch deployments" 30 console_can patch deployments.apps
TOKEN=$(k -n demo create token console --duration=24h)
api() { curl -sS --cacert "$CA" -H "Authorization: Bearer $TOKEN" "$@"; echo; }
run curl -sS --cacert "$CA" -X POST "$WORKLOAD_API_URL/v1/namespaces/demo/deployments/underlay/stop"; echo
say "(no token: 401). With the console's token:"
printf '\033[36m$ POST .../deployments/underlay/stop\033[0m\n'; api -X POST "$WORKLOAD_API_URL/v1/namespaces/demo/deployments/underlay/stop"
run k -n demo get deploy underlay -o jsonpath='{.spec.replicas} replicas, remembered: {.metadata.annotations.capscale\.io/replicas-before-stop}{"\n"}'
printf '\033[36m$ POST .../deployments/underlay/start\033[0m\n'; api -X POST "$WORKLOAD_API_URL/v1/namespaces/demo/deployments/underlay/start"
printf '\033[36m$ POST .../deployments/web/restart\033[0m\n'; api -X POST "$WORKLOAD_API_URL/v1/namespaces/demo/deployments/web/restart"
printf '\033[36m$ GET .../deployments/underlay/capacity\033[0m\n'
capacity=$(api "$WORKLOAD_API_URL/v1/namespaces/demo/deployments/underlay/capacity")
printf '   %s\n' "$(grep -o '"capacity":{"replicas":[0-9]*,"limitingResource":"[^"]*","reason":"[^"]*"' <<<"$capacity")"
say "The console writes ElasticWebs through the API (Role capscale-workload:elasticweb: the resource only, no Deployment rights):"
k create rolebinding console-elasticweb --clusterrole=capscale-workload:elasticweb --serviceaccount=demo:console -n demo >/dev/null
wait_for "RBAC to let the console patch elasticwebs" 30 console_can patch elasticwebs.capscale.io
printf '\033[36m$ PUT .../elasticwebs/cart {"image":"registry.example/cart:1","port":8080,"singlePodQPS":100,"totalQPS":300}\033[0m\n'
api -X PUT -H 'Content-Type: application/json' -d '{"image":"registry.example/cart:1","port":8080,"singlePodQPS":100,"totalQPS":300}' \
  "$WORKLOAD_API_URL/v1/namespaces/demo/elasticwebs/cart" | cut -c1-160
cart_ready() { [ "$(k -n demo get elasticweb cart -o jsonpath='{.status.readyReplicas}/{.status.realQPS}')" = "3/300" ]; }
wait_for "cart: 3 ready, REAL-QPS 300" 90 cart_ready
run k -n demo get elasticwebs
say "A bad spec: the apiserver's 422 names the field:"
api -X PUT -H 'Content-Type: application/json' -d '{"image":"registry.example/cart:1","port":8080,"singlePodQPS":0,"totalQPS":300}' \
  "$WORKLOAD_API_URL/v1/namespaces/demo/elasticwebs/cart"

bold "Explore"
cat <<EOT
   source $LOCAL/env              # KUBECONFIG, MODE, ADAPTER_URL, WORKLOAD_API_URL, LOAD_SOURCE_URL (EXTENDER_URL but in plugin mode)
   $BIN/kubectl get pods -A -o wide
   PATH=$BIN:\$PATH kubectl capscale ips -o wide                   # the IPs per node, with their holders
   PATH=$BIN:\$PATH kubectl capscale max deploy/underlay -n demo --dry-run
   curl -s --cacert \$CAPSCALE_CA_FILE -X PUT --data 0.95 \$LOAD_SOURCE_URL    # drive the load index
   TOKEN=$TOKEN
   curl -s --cacert \$CAPSCALE_CA_FILE -H "Authorization: Bearer \$TOKEN" \$WORKLOAD_API_URL/v1/namespaces/demo/deployments/web/rollout
   logs: $LOCAL/plane/logs/

   Stop everything with: make local-down
EOT

bold "Read next"
cat <<EOT
   README.md                 what capscale is, which scheduling mode to choose, how to install
   docs/choosing-a-mode.md   the three modes, what each costs, moving between them
   docs/metrics-adapter.md   sources, step policies and the HPAs that read them
   docs/workload-api.md      restart, stop, start, scale as the caller
   docs/kubectl.md           kubectl capscale: the IPs per node, and the same verbs from kubectl
   docs/architecture.md      the packages, and the path a request takes through each
   docs/README.md            every page
EOT
