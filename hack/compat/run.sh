#!/usr/bin/env bash
# Usage: hack/compat/run.sh MINOR...   (make test-compat; e.g. 1.35 1.36 1.37)
#
# The compatibility matrix (issue 44): for each Kubernetes minor, the
# control plane of that minor (e2e/tools/k8s-1.MINOR, or the repo's own
# e2e/tools/k8s) and capscale-scheduler built for it, then a row of
# end-to-end tests on that plane — extender and native mode with that
# minor's stock kube-scheduler, plugin mode with capscale-scheduler of
# that minor, the adapter behind the aggregator with HPAs, the adapter's
# own rotating certificate, and which admission APIs the minor serves.
# Each minor's tests run in one go test under the plane lock. Results go to
# _output/compat/results.tsv
# and into README.md's table (between its GENERATED compat markers).
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
out=$root/_output/compat
mkdir -p "$out"
results=$out/results.tsv
own=$(sed -n 's/^k8s_version=\${k8s_version:-\(v[0-9.]*\)}$/\1/p' e2e/tools/build.sh)
commit=$(git rev-parse --short HEAD)
[ "$(git status --porcelain --untracked-files=no | wc -l)" = 0 ] || commit="$commit+changes"
# One column per check: name, the e2e test (-run pattern), what it shows.
checks=(
  "extender|^TestSchedulingBurst$/^extender$|burst of underlay pods, stock kube-scheduler + extender"
  "native|^TestSchedulingBurst$/^native$|burst, stock kube-scheduler counting Node capacity"
  "plugin|^TestSchedulingBurst$/^plugin$|burst, capscale-scheduler built for the minor"
  "hpa|^TestAdapterLoadStep$|HPAs on the adapter's metrics through the aggregator"
  "certs|^TestAdapterManagedCert$|certificate rotation under HPA reads, caBundle put back"
  "map|^TestCompatAdmissionAPIs$|MutatingAdmissionPolicy served (issue 43's chart needs it)"
  "helm|^TestRealNodeHelmInstall$|helm install oci:// on real nodes of the minor (its kubelet and kube-proxy): each mode's burst, an HPA reading, upgrade, uninstall"
)

: >"$results.new"
for minor in "$@"; do
  dir=$out/bin-$minor
  mkdir -p "$dir"
  bash e2e/tools/build.sh "$dir" etcd kwok helm >/dev/null
  if [ "v$minor" = "$(echo "$own" | cut -d. -f1-2)" ]; then
    bash e2e/tools/build.sh "$dir" kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet kube-proxy >/dev/null
    (cd cmd/capscale-scheduler && CGO_ENABLED=0 go build -trimpath -o "$dir/capscale-scheduler" .)
    version=$own
  else
    CAPSCALE_K8S=$minor bash e2e/tools/build.sh "$dir" >/dev/null
    version=$(sed -n 's#^\s*k8s.io/kubernetes => k8s.io/kubernetes \(v[0-9.]*\(-[a-z]*\.[0-9]*\)\{0,1\}\)$#\1#p' "e2e/tools/k8s-$minor/go.mod")
  fi
  # One go test per minor, under the plane lock once: fewer waits for the
  # lock on a shared machine. Each check's result is read from -v's lines.
  log=$out/$minor.log
  start=$SECONDS
  pattern=$(for c in "${checks[@]}"; do IFS='|' read -r _ run _ <<<"$c"; echo "${run%%/*}"; done | sort -u | paste -sd'|' | sed 's/\^//g; s/\$//g')
  CAPSCALE_BIN_DIR=$dir CAPSCALE_SCHEDULER_BIN=$dir/capscale-scheduler \
    flock /tmp/capscale-plane.lock go test -tags e2e -count=1 -timeout 60m -v -run "^($pattern)\$" ./e2e/ >"$log" 2>&1 || true
  elapsed=$((SECONDS - start))
  for c in "${checks[@]}"; do
    IFS='|' read -r name run _ <<<"$c"
    test=$(echo "$run" | sed 's/\^//g; s/\$//g')
    if grep -q -- "^\s*--- PASS: $test " "$log"; then
      result=pass
      if [ "$name" = map ]; then
        result=$(sed -n 's/.*compat: MutatingAdmissionPolicy \([a-z0-9]*\).*/\1/p' "$log" | head -1)
      fi
    elif grep -q -- "^\s*--- FAIL: $test " "$log"; then
      result=FAIL
    else
      result=FAIL # not run: the suite stopped or did not build
    fi
    printf '%s\t%s\t%s\t%s\t%ds\t%s\n' "$minor" "$version" "$name" "$result" "$elapsed" "$commit" | tee -a "$results.new"
  done
done
# Keep the other minors' last rows.
if [ -f "$results" ]; then
  for minor in "$@"; do sed -i "/^$minor\t/d" "$results"; done
  cat "$results" >>"$results.new"
fi
sort -t$'\t' -k1,1V -s "$results.new" >"$results"
rm -f "$results.new"
bash hack/compat/table.sh "$results" README.md
grep -q $'\tFAIL\t' "$results" && { echo "test-compat: failures above (logs in $out)"; exit 1; }
echo "test-compat: every check passed; README.md's table rewritten"
