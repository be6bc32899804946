#!/usr/bin/env bash
# The first part of make demo, on a real node (make local-up REAL_NODES=1):
# the failure capscale prevents, then capscale preventing it, on one screen.
# Expects the local plane's env ($KUBECONFIG, $REAL_NODES, $REAL_NODE_IMAGE).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=_output/bin
k() { "$BIN/kubectl" "$@"; }
bold() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
say() { printf '   %s\n' "$*"; }
node=${REAL_NODES%% *}

# pods NAME_PREFIX IPS: 11 pods of the real nodes' image on $node, each
# asking for IPS underlay IPs (0: none).
pods() {
  for i in $(seq -w 0 10); do
    cat <<YAML
apiVersion: v1
kind: Pod
metadata: {name: $1-$i, namespace: real, labels: {demo: $1}}
spec:
  nodeSelector: {kubernetes.io/hostname: $node}
  automountServiceAccountToken: false
  terminationGracePeriodSeconds: 1
  containers:
  - name: web
    image: $REAL_NODE_IMAGE
    imagePullPolicy: Never
YAML
    if [ "$2" != 0 ]; then printf '    resources: {limits: {capscale.io/underlay-ip: "%s"}}\n' "$2"; fi
    echo ---
  done
}
count() { k -n real get pods -l "demo=$1" --no-headers 2>/dev/null | awk -v s="$2" '$3 == s' | wc -l; }
# settle NAME RUNNING OTHER_STATUS: waits until RUNNING pods run and one is in OTHER_STATUS.
settle() {
  for _ in $(seq 1 120); do
    [ "$(count "$1" Running)" -eq "$2" ] && [ "$(count "$1" "$3")" -eq 1 ] && return 0
    sleep 1
  done
  echo "   (gave up waiting: $(k -n real get pods -l "demo=$1" --no-headers | awk '{print $3}' | sort | uniq -c | tr '\n' ' '))"
  return 1
}
# stuck NAME: the pod that is not Running, and what its last event says.
stuck() {
  local pod
  pod=$(k -n real get pods -l "demo=$1" --no-headers | awk '$3 != "Running" {print $1; exit}')
  printf '   %-10s %s\n' "$pod" "$(k -n real get events --field-selector "involvedObject.name=$pod,reason=$2" \
    -o jsonpath='{.items[-1:].message}' | sed 's/rpc error: code = Unknown desc = //' | cut -c1-230)"
}

bold "0. The failure capscale prevents, on a real node ($node: a kubelet, containerd, and a CNI range of ${REAL_NODE_CAPACITY:-10} IPs)"
k create namespace real >/dev/null
for _ in $(seq 1 30); do k -n real get serviceaccount default >/dev/null 2>&1 && break; sleep 1; done
say "Without capscale: 11 pods that do not ask for underlay IPs. The scheduler sees room for 110 pods and places all 11;"
say "the node's IPAM has 10 addresses:"
pods stock 0 | k apply -f - >/dev/null
settle stock 10 ContainerCreating || true
say "$(count stock Running) Running, $(count stock ContainerCreating) ContainerCreating; the 11th, in the IPAM's words:"
stuck stock FailedCreatePodSandBox
k -n real delete pods -l demo=stock --wait=true >/dev/null
say "With capscale: the same 11 pods, each asking for capscale.io/underlay-ip: 1 (the node's label says 10):"
pods ip 1 | k apply -f - >/dev/null
settle ip 10 Pending || true
say "$(count ip Running) Running, $(count ip Pending) Pending, never started; in the scheduler's words:"
stuck ip FailedScheduling
k -n real delete pods -l demo=ip --wait=true >/dev/null
# The rest of the demo runs images that exist nowhere, for the kwok nodes:
# keep its pods off the real node.
k taint node "$node" demo=kwok-only:NoSchedule --overwrite >/dev/null
say "(The rest of the demo runs on kwok nodes; $node is tainted so that its pods, whose images do not exist, stay off it.)"
