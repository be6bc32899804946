{{/*
Labels on every object: Helm's standard labels plus part-of. Objects that
kustomize labels with app.kubernetes.io/name add it after these.
*/}}
{{- define "capscale.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/part-of: capscale
{{- end }}

{{/*
Pod template labels: the selector (app.kubernetes.io/name, given as the
argument's "name") plus part-of, exactly as in deploy/. Selectors stay
app.kubernetes.io/name only, so they match the kustomize install's.
*/}}
{{- define "capscale.podLabels" -}}
app.kubernetes.io/name: {{ .name }}
app.kubernetes.io/part-of: capscale
{{- end }}

{{/*
The namespace of capscale's namespaced objects: the release's (helm -n),
as in KEDA's and metrics-server's charts. The chart creates no Namespace,
so helm uninstall never deletes one the operator made (helm install
--create-namespace is the way to have it made). The values namespace and
createNamespace, which chose and created it before, are refused with a
message that says so, not silently ignored.
*/}}
{{- define "capscale.namespace" -}}
{{- if hasKey .Values "namespace" -}}
{{- fail (printf "the value namespace is gone: capscale installs in the release's namespace; use helm install -n %s --create-namespace (a namespace of your own is left in place by helm uninstall)" (toString .Values.namespace)) -}}
{{- end -}}
{{- if hasKey .Values "createNamespace" -}}
{{- fail "the value createNamespace is gone: the chart creates no Namespace; use helm install -n NAMESPACE --create-namespace, or create it beforehand" -}}
{{- end -}}
{{ .Release.Namespace }}
{{- end }}

{{/*
capscale's image: repository@digest when image.digest is set (the digest
wins over the tag, as in ingress-nginx's chart), else repository:tag, the tag
defaulting to the chart's appVersion.
*/}}
{{- define "capscale.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}
{{- end }}

{{/* The pod-level security context of every capscale pod (podSecurityContext). */}}
{{- define "capscale.podSecurityContext" -}}
{{- with .Values.podSecurityContext }}
securityContext:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/*
A capscale pod template's metadata, given (dict "root" $ "name" NAME
"annotations" DICT): the selector labels plus podLabels (the schema keeps
the selector's keys out of it), the component's own annotations plus
podAnnotations (the component's win: they roll the pods on a change).
*/}}
{{- define "capscale.podMetadata" -}}
metadata:
  labels:
    {{- include "capscale.podLabels" (dict "name" .name) | nindent 4 }}
    {{- with .root.Values.podLabels }}
    {{- range $k, $_ := . }}
    {{- if has $k (list "app.kubernetes.io/name" "app.kubernetes.io/part-of") }}
    {{- fail (printf "podLabels: %s is the chart's own label (the Deployments select their pods by it); choose another key" $k) }}
    {{- end }}
    {{- end }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  {{- with merge (dict) (.annotations | default dict) .root.Values.podAnnotations }}
  annotations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end }}

{{/*
imagePullSecrets and priorityClassName on every capscale pod, given
(dict "root" $ "priority" COMPONENT'S): the component's priorityClassName,
else the global priorityClassName, else none.
*/}}
{{- define "capscale.podSpecValues" -}}
{{- with .root.Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .priority | default .root.Values.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- end }}

{{/*
--v=N for every capscale and kube-scheduler container when logVerbosity is
above 0, as a block-list item.
*/}}
{{- define "capscale.logVerbosity" -}}
{{- if gt (int .Values.logVerbosity) 0 }}
- --v={{ int .Values.logVerbosity }}
{{- end }}
{{- end }}

{{/*
The flags of the scheduler container after its binary, in every mode:
its configuration, /metrics, /livez and /readyz on the pod IP's secure port
(10259, authenticated and authorized), logVerbosity and
extender.kubeScheduler.extraArgs.
*/}}
{{- define "capscale.kubeSchedulerFlags" -}}
- --config=/etc/capscale/config.yaml
- --bind-address=0.0.0.0
- --secure-port=10259
{{- include "capscale.logVerbosity" . }}
{{- include "capscale.extraArgs" .Values.extender.kubeScheduler }}
{{- end }}

{{/* The security context of every capscale container (securityContext). */}}
{{- define "capscale.containerSecurityContext" -}}
{{- with .Values.securityContext }}
securityContext:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/*
A container's extra command-line arguments and environment, given a
component's values (extraArgs, extraEnv): the arguments as the tail of a
block list, the environment as an env: key.
*/}}
{{- define "capscale.extraArgs" -}}
{{- range .extraArgs }}
- {{ . | quote }}
{{- end }}
{{- end }}

{{- define "capscale.extraEnv" -}}
{{- with .extraEnv }}
env:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/*
Where a component's pods run, given (dict "v" VALUES "name" NAME): its
affinity, else replicas spread over nodes (preferred anti-affinity); its
topologySpreadConstraints, each selecting the component's pods when it names
no labelSelector; its nodeSelector and tolerations.
*/}}
{{- define "capscale.podPlacement" -}}
{{- $selector := dict "matchLabels" (dict "app.kubernetes.io/name" .name) }}
affinity:
{{- if .v.affinity }}
  {{- toYaml .v.affinity | nindent 2 }}
{{- else }}
  podAntiAffinity:
    preferredDuringSchedulingIgnoredDuringExecution:
    - weight: 100
      podAffinityTerm:
        topologyKey: kubernetes.io/hostname
        labelSelector: {matchLabels: {app.kubernetes.io/name: {{ .name }}}}
{{- end }}
{{- with .v.topologySpreadConstraints }}
topologySpreadConstraints:
{{- range . }}
{{- $c := deepCopy . }}
{{- if not (hasKey $c "labelSelector") }}{{ $_ := set $c "labelSelector" $selector }}{{ end }}
- {{- toYaml $c | nindent 2 }}
{{- end }}
{{- end }}
{{- with .v.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .v.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/*
A PodDisruptionBudget for a component of more than one replica, given
(dict "root" $ "name" NAME "replicas" N "pdb" ITS podDisruptionBudget): unless
pdb.enabled is false. By default minAvailable: 1, so a drain evicts one pod
at a time and a leader-elected component keeps a stand-by, a served one an
endpoint; pdb.minAvailable or pdb.maxUnavailable (not both, as the API
refuses) replace it. One replica gets none: it would block every drain.
*/}}
{{- define "capscale.podDisruptionBudget" -}}
{{- $p := .pdb | default dict }}
{{- if and (or (kindIs "invalid" $p.enabled) $p.enabled) (gt (int .replicas) 1) }}
{{- $min := $p.minAvailable }}
{{- $max := $p.maxUnavailable }}
{{- if and (not (kindIs "invalid" $min)) (not (kindIs "invalid" $max)) }}
{{- fail (printf "%s: podDisruptionBudget sets both minAvailable and maxUnavailable; a PodDisruptionBudget takes one of them: set the other to null" .name) }}
{{- end }}
{{- if and (kindIs "invalid" $min) (kindIs "invalid" $max) }}{{ $min = 1 }}{{ end }}
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: {{ .name }}
  namespace: {{ include "capscale.namespace" .root }}
  labels:
    {{- include "capscale.labels" .root | nindent 4 }}
spec:
  {{- if not (kindIs "invalid" $min) }}
  minAvailable: {{ include "capscale.intOrString" $min }}
  {{- else }}
  maxUnavailable: {{ include "capscale.intOrString" $max }}
  {{- end }}
  {{- with $p.unhealthyPodEvictionPolicy }}
  unhealthyPodEvictionPolicy: {{ . }}
  {{- end }}
  selector:
    matchLabels: {app.kubernetes.io/name: {{ .name }}}
{{- end }}
{{- end }}

{{/*
"true" when the render sees the cluster (helm install/upgrade, --dry-run=server):
kube-system always exists. helm template (Argo CD) and --dry-run=client see
nothing, and lookup then answers empty for everything.
*/}}
{{- define "capscale.clusterSeen" -}}
{{- if lookup "v1" "Namespace" "" "kube-system" }}true{{ end -}}
{{- end }}

{{/*
What the chart does with the APIService v1beta1.external.metrics.k8s.io,
from what the cluster holds (lookup):
"render" (absent, or this release's), "keep" (it routes to capscale
already: an earlier delegation or hack/install.sh; the adapter keeps its
caBundle), "delegate" (another adapter owns it and apiService.delegate is
true: the adapter takes it over at start), "off" (apiService.create=false),
"adapter" (a render that cannot see the cluster, helm template: the
APIService is left out, and the running adapter decides — it registers it
when none is, leaves another adapter's alone unless apiService.delegate).
With cert-manager the adapter does not keep the APIService, so a blind
render still renders it (docs/install.md). Another owner without
apiService.delegate fails the install, changing nothing.
*/}}
{{- define "capscale.apiService" -}}
{{- if not .Values.apiService.create -}}
off
{{- else -}}
{{- $api := lookup "apiregistration.k8s.io/v1" "APIService" "" "v1beta1.external.metrics.k8s.io" -}}
{{- $ns := include "capscale.namespace" . -}}
{{- if and (not (include "capscale.clusterSeen" .)) (not .Values.tls.certManager.enabled) -}}
adapter
{{- else if not $api -}}
render
{{- else if eq (dig "metadata" "annotations" "meta.helm.sh/release-name" "" $api) .Release.Name -}}
render
{{- else -}}
{{- $svc := dig "spec" "service" dict $api -}}
{{- $owner := "kube-apiserver itself (a local APIService)" -}}
{{- if $svc -}}{{- $owner = printf "%s/%s" (get $svc "namespace") (get $svc "name") -}}{{- end -}}
{{- if eq $owner (printf "%s/capscale-metrics-adapter" $ns) -}}
keep
{{- else if and .Values.apiService.delegate $svc -}}
delegate
{{- else -}}
{{- fail (printf "\n\ncapscale: the APIService v1beta1.external.metrics.k8s.io is served by %s, not capscale.\nInstalling would take external metrics away from it and from every HPA that uses them (KEDA ScaledObjects, prometheus-adapter rules): nothing was changed.\n- To share it (capscale serves the capscale-* metrics and forwards every other one to %s): --set apiService.delegate=true\n- To leave it alone and serve KEDA through capscale's external scaler instead, which is off by default (docs/keda.md \"KEDA keeps the APIService\"): --set apiService.create=false --set metricsAdapter.kedaScaler.enabled=true --set-file metricsAdapter.kedaScaler.clientCA=keda-ca.crt\n(docs/keda.md \"Installing next to KEDA or prometheus-adapter\")" $owner $owner) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end }}

{{/*
The resource each capacity-source preset reads (and its usedFrom's, which
is read in the source's namespace), for the mirror's RBAC. The
expressions live in capscale-controller (controller/capacitysource
presets.go); deploy/'s TestHelmCapacitySourcePresets keeps this table equal
to its resources.
*/}}
{{- define "capscale.capacityPresets" -}}
cilium-eni: {group: cilium.io, resource: ciliumnodes}
cilium-azure: {group: cilium.io, resource: ciliumnodes}
cilium-multi-pool: {group: cilium.io, resource: ciliumnodes}
azure-cns: {group: acn.azure.com, resource: nodenetworkconfigs, namespace: kube-system}
whereabouts-node-slice: {group: whereabouts.cni.cncf.io, resource: nodeslicepools, usedFrom: {group: whereabouts.cni.cncf.io, resource: ippools}}
{{- end }}

{{/*
The resources the configured capacity sources read, as YAML:
cluster: {"<group>/<resource>": true}, namespaced: {"<ns>": {"<group>/<resource>": true}}.
*/}}
{{- define "capscale.capacitySourceResources" -}}
{{- $presets := include "capscale.capacityPresets" . | fromYaml }}
{{- $cluster := dict }}
{{- $namespaced := dict }}
{{- range .Values.controller.capacitySources.sources }}
{{- $group := "" }}{{- $resource := "" }}{{- $ns := .namespace | default "" }}
{{- if .resource }}
{{- $group = .resource.group | default "" }}{{- $resource = .resource.resource }}
{{- else if .preset }}
{{- $p := get $presets .preset }}
{{- if not $p }}{{ fail (printf "controller.capacitySources: source %s: unknown preset %q" .name .preset) }}{{ end }}
{{- $group = $p.group }}{{- $resource = $p.resource }}{{- $ns = $ns | default ($p.namespace | default "") }}
{{- else }}
{{- fail (printf "controller.capacitySources: source %s needs a preset or a resource" .name) }}
{{- end }}
{{- $reads := list (dict "group" $group "resource" $resource "ns" $ns) }}
{{- /* Its usedFrom's: its own, else its preset's unless it says used. */}}
{{- if .usedFrom }}
{{- $reads = append $reads (dict "group" (.usedFrom.resource.group | default "") "resource" .usedFrom.resource.resource "ns" (.usedFrom.namespace | default "")) }}
{{- else if and .preset (not .used) }}
{{- $u := (get $presets .preset).usedFrom }}
{{- if $u }}{{ $reads = append $reads (dict "group" $u.group "resource" $u.resource "ns" (.namespace | default "")) }}{{ end }}
{{- end }}
{{- range $reads }}
{{- $key := printf "%s/%s" .group .resource }}
{{- if .ns }}
{{- $m := get $namespaced .ns | default dict }}
{{- $_ := set $m $key true }}
{{- $_ := set $namespaced .ns $m }}
{{- else }}
{{- $_ := set $cluster $key true }}
{{- end }}
{{- end }}
{{- end }}
{{- dict "cluster" $cluster "namespaced" $namespaced | toYaml }}
{{- end }}

{{/*
capscale-scheduler for the cluster's minor: the image holds /capscale-scheduler
(kube-scheduler v1.37 with the plugin) and /capscale-scheduler-1.MINOR for
each older minor make test-compat passes (make release builds them).
*/}}
{{- define "capscale.schedulerBinary" -}}
{{- $minor := .Capabilities.KubeVersion.Minor | trimSuffix "+" | int -}}
{{- if and (eq (.Capabilities.KubeVersion.Major | trimSuffix "+") "1") (has $minor (list 35 36)) -}}
/capscale-scheduler-1.{{ $minor }}
{{- else -}}
/capscale-scheduler
{{- end -}}
{{- end }}

{{/*
capscale.awaitMirror: "true" when the components must wait for the
capacity-source mirror (capacity sources on, awaitMirror not turned off).
*/}}
{{- define "capscale.awaitMirror" -}}
{{- $cs := .Values.controller.capacitySources -}}
{{- if and .Values.controller.enabled $cs.enabled (ne $cs.awaitMirror false) -}}true{{- end -}}
{{- end }}

{{/*
capscale.schedulerReads: "true" when capscale-scheduler reads the capacity
sources' objects itself (controller.capacitySources.schedulerReads): in
plugin mode the plugin's capacitySources argument, in extender mode the
extender's --capacity-sources; the file mounted, RBAC to read them. It needs
the wait for the mirror, which it then follows on its own. auto (the
default) is on in plugin mode with the wait; true is refused where it cannot
be, rather than quietly off.
*/}}
{{- define "capscale.schedulerReads" -}}
{{- $cs := .Values.controller.capacitySources -}}
{{- $v := $cs.schedulerReads -}}
{{- if eq (toString $v) "auto" -}}
{{- if and (eq .Values.extender.mode "plugin") (include "capscale.awaitMirror" .) -}}true{{- end -}}
{{- else if $v -}}
{{- if not (has .Values.extender.mode (list "plugin" "extender")) -}}
{{- fail (printf "controller.capacitySources.schedulerReads: capscale-scheduler reads the sources only in plugin and extender modes, not %s (native mode: publisherReads)" .Values.extender.mode) -}}
{{- end -}}
{{- if not (include "capscale.awaitMirror" .) -}}
{{- fail "controller.capacitySources.schedulerReads needs controller.enabled, controller.capacitySources.enabled and awaitMirror: the scheduler reads the sources in the place of the mirror it would wait for" -}}
{{- end -}}
true
{{- end -}}
{{- end }}

{{/*
capscale.publisherReads: "true" when native mode's capacity publisher reads
the capacity sources' objects itself (controller.capacitySources.publisherReads):
the extender's --capacity-sources, the file mounted, RBAC to read them. The
publisher then writes the mirror's annotations in the same Node status patch
as the capacity, so capscale-controller mirrors nothing (no flag, no Node
RBAC). It needs the wait for the mirror, whose place it takes, and the
extender that publishes. auto (the default) is on wherever it can be, native
mode with the wait; true is refused where it cannot, rather than quietly off.
*/}}
{{- define "capscale.publisherReads" -}}
{{- $cs := .Values.controller.capacitySources -}}
{{- $v := $cs.publisherReads -}}
{{- if eq (toString $v) "auto" -}}
{{- if and (eq .Values.extender.mode "native") (include "capscale.schedulerEnabled" .) (include "capscale.awaitMirror" .) -}}true{{- end -}}
{{- else if $v -}}
{{- if ne .Values.extender.mode "native" -}}
{{- fail (printf "controller.capacitySources.publisherReads: the capacity publisher reads the sources only in native mode, not %s" .Values.extender.mode) -}}
{{- end -}}
{{- if not (include "capscale.awaitMirror" .) -}}
{{- fail "controller.capacitySources.publisherReads needs controller.enabled, controller.capacitySources.enabled and awaitMirror: the publisher reads the sources in the place of the mirror it would wait for" -}}
{{- end -}}
{{- if not (include "capscale.schedulerEnabled" .) -}}
{{- fail "controller.capacitySources.publisherReads needs scheduler.enabled and extender.enabled: the publisher is capscale-scheduler's extender, and without it nothing would write the Nodes' capacity" -}}
{{- end -}}
true
{{- end -}}
{{- end }}

{{/*
capscale.schedulerReadsSources: "true" when the ServiceAccount
capscale-scheduler reads the sources' objects, in plugin mode (schedulerReads)
or in native mode (publisherReads): the RBAC is the same.
*/}}
{{- define "capscale.schedulerReadsSources" -}}
{{- if or (include "capscale.schedulerReads" .) (include "capscale.publisherReads" .) -}}true{{- end -}}
{{- end }}

{{/*
capscale.drawsAll: "true" when a capacity source is on whose pool serves
every pod: draws: all, or a preset that does not say otherwise.
*/}}
{{- define "capscale.drawsAll" -}}
{{- $cs := .Values.controller.capacitySources -}}
{{- if and .Values.controller.enabled $cs.enabled .Values.admissionPolicies.drawsAll -}}
{{- range $cs.sources -}}
{{- if or (eq (.draws | default "") "all") (and .preset (not .draws)) -}}true{{- end -}}
{{- end -}}
{{- end -}}
{{- end }}

{{/*
The stock kube-scheduler of the cluster's minor (extender and native mode):
the version-skew policy forbids a kube-scheduler newer than the apiserver.
The patch of each minor is the one the project builds and tests
(e2e/tools/k8s-1.MINOR, go.mod's k8s.io/kubernetes for the newest;
deploy/'s TestHelmKubeSchedulerFollowsMinor keeps them equal). A minor newer
than the table gets the newest, one minor older, which the policy allows.
extender.kubeScheduler.image.tag, when set, wins.
*/}}
{{- define "capscale.kubeSchedulerTags" -}}
"35": v1.35.8
"36": v1.36.5
"37": v1.37.2
{{- end }}

{{- define "capscale.kubeSchedulerImage" -}}
{{- $img := .Values.extender.kubeScheduler.image -}}
{{- $tag := $img.tag -}}
{{- if not $tag -}}
{{- $tags := include "capscale.kubeSchedulerTags" . | fromYaml -}}
{{- $tag = get $tags (.Capabilities.KubeVersion.Minor | trimSuffix "+") | default (get $tags "37") -}}
{{- end -}}
{{ $img.repository }}:{{ $tag }}
{{- end }}

{{/*
"true" when the cluster serves admissionregistration.k8s.io/v1
MutatingAdmissionPolicy (Kubernetes 1.36+). helm install reads the cluster's
resources; helm template knows only what --api-versions names (Argo CD
passes the cluster's): Helm's own list names groups, never kinds.
*/}}
{{- define "capscale.admissionServed" -}}
{{- if .Capabilities.APIVersions.Has "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy" }}true{{ end -}}
{{- end }}

{{/*
What every capscale MutatingAdmissionPolicy leaves alone, so that nothing the
cluster needs to recover waits on capscale (docs/underlay-pods.md "What the
policies never touch"):
- capscale.admissionNamespaces, the namespaceSelector's expression: pods in
  kube-system and in capscale's own namespace. The apiserver sets
  kubernetes.io/metadata.name on every Namespace itself, so no one can
  remove it or put it on another namespace.
- capscale.admissionPriority, a matchCondition: pods of the priority classes
  system-cluster-critical and system-node-critical, which mark what the
  cluster needs to recover wherever it runs (Karpenter, cilium-operator,
  metrics-server outside kube-system). A tenant's pod that uses them still
  escapes only the request: the rule charges every pod-network pod on a
  draws-all node (internal/underlay/draws.go), and a ResourceQuota with a
  PriorityClass scopeSelector is how an admin keeps tenants off them.
*/}}
{{- define "capscale.admissionNamespaces" -}}
- key: kubernetes.io/metadata.name
  operator: NotIn
  values: {{ list "kube-system" (include "capscale.namespace" .) | uniq | toJson }}
{{- end }}

{{- define "capscale.admissionPriority" -}}
- name: not-system-critical
  expression: |-
    !(object.spec.?priorityClassName.orValue('') in ['system-cluster-critical', 'system-node-critical'])
{{- end }}

{{/*
capscale.ipSchedulers: the schedulers that count capscale.io/underlay-ip, as
a CEL list; the IP policies give the request only to their pods. kube-scheduler's
NodeResourcesFit fails every node for a pod asking for an extended resource
that no Node advertises, which is the case in plugin and extender mode for
any framework-based scheduler capscale does not extend (a second profile,
Volcano, YuniKorn). capscale-scheduler counts it in every mode.
default-scheduler counts it in native mode (Node status carries the
capacity), and with admissionPolicies.schedulerName=false in extender mode,
which says capscale extends the cluster's default scheduler. With
admissionPolicies.schedulerName the routing policy of the same pair moves
every default-scheduler pod the IP policy matches to capscale-scheduler (the
two share every other condition), so default-scheduler is in the list
there too: whichever of the two the apiserver runs first, the pods that get
the request are exactly the pods that end up on a scheduler that counts it.
*/}}
{{- define "capscale.ipSchedulers" -}}
{{- if or .Values.admissionPolicies.schedulerName (ne .Values.extender.mode "plugin") -}}
['capscale-scheduler', 'default-scheduler']
{{- else -}}
['capscale-scheduler']
{{- end -}}
{{- end }}

{{/*
A ServiceMonitor in capscale's namespace selecting the Service labelled
app.kubernetes.io/name NAME, given (dict "root" $ "name" NAME "endpoints"
LIST): each endpoint scrapes /metrics every monitoring.serviceMonitor.interval
unless it says otherwise; monitoring.serviceMonitor.labels let Prometheus
select it (kube-prometheus-stack: release: <its release>).
*/}}
{{- define "capscale.serviceMonitor" -}}
{{- $sm := .root.Values.monitoring.serviceMonitor -}}
apiVersion: monitoring.coreos.com/v1
kind: ServiceMonitor
metadata:
  name: {{ .name }}
  namespace: {{ include "capscale.namespace" .root }}
  labels:
    {{- include "capscale.labels" .root | nindent 4 }}
    {{- with merge (dict) ($sm.labels | default dict) ($sm.additionalLabels | default dict) }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
spec:
  selector:
    matchLabels: {app.kubernetes.io/name: {{ .name }}}
  endpoints:
  {{- $common := dict "path" "/metrics" "interval" $sm.interval }}
  {{- with $sm.scrapeTimeout }}{{ $_ := set $common "scrapeTimeout" . }}{{ end }}
  {{- with $sm.relabelings }}{{ $_ := set $common "relabelings" . }}{{ end }}
  {{- with $sm.metricRelabelings }}{{ $_ := set $common "metricRelabelings" . }}{{ end }}
  {{- range .endpoints }}
  - {{- toYaml (merge (deepCopy .) $common) | nindent 4 }}
  {{- end }}
{{- end }}

{{/*
"true" when the extender runs native mode's capacity publisher
(--publish-capacity, its RBAC, templates/native-node-writes.yaml): in native
mode, and in extender mode with extender.publishCapacity, beside the rule,
so that a node autoscaler sees the IPs (docs/growing-the-cluster.md "Extender mode
with the publisher"). Plugin mode runs no extender: asking there fails.
*/}}
{{- define "capscale.dra" -}}
{{- if eq .Values.extender.mode "dra" -}}
{{- $minor := .Capabilities.KubeVersion.Minor | trimSuffix "+" | int -}}
{{- if or (ne (.Capabilities.KubeVersion.Major | trimSuffix "+") "1") (lt $minor 37) }}
{{- fail (printf "extender.mode=dra needs Kubernetes 1.37 or later, and this cluster is %s: before 1.37 DRAExtendedResource is beta and may be off (a DeviceClass's extendedResourceName then backs nothing, and pods asking for capscale.io/underlay-ip stay Pending on every node); use extender.mode=plugin or native (docs/dra.md)" .Capabilities.KubeVersion.Version) }}
{{- end -}}
{{- if .Values.extender.publishCapacity }}
{{- fail "extender.publishCapacity writes capscale.io/underlay-ip into Node status, and kube-scheduler counts a node's status before its devices: DRA mode publishes devices only" }}
{{- end -}}
true
{{- end -}}
{{- end }}

{{/*
"true" in DRA mode (extender.mode=dra): the extender publishes each node's
IPs as devices (--publish-devices, templates/dra.yaml's DeviceClass and
slice policy). Refused below Kubernetes 1.37, with why.
*/}}
{{- define "capscale.publishes" -}}
{{- $m := .Values.extender.mode -}}
{{- if and .Values.extender.publishCapacity (eq $m "plugin") }}
{{- fail "extender.publishCapacity runs the capacity publisher in the extender, and plugin mode runs none: use extender.mode=extender (or native, which always publishes)" }}
{{- end -}}
{{- if or (eq $m "native") (and (eq $m "extender") .Values.extender.publishCapacity) }}true{{ end -}}
{{- end }}

{{/*
"true" when native mode's release finalizer is on (templates/native-release.yaml).
extender.releaseFinalizer "auto" (the default) turns it on in native mode
where the cluster serves MutatingAdmissionPolicy v1 and the render sees the
cluster (helm install and upgrade), so that the uninstall hook that strips
the finalizer (templates/native-release-cleanup.yaml) is rendered with it;
a render that cannot see the cluster (helm template, Argo CD) runs no hook
and leaves it off. true asks for it: native mode and the policy kind or the
render fails; false turns it off.
*/}}
{{- define "capscale.releaseFinalizer" -}}
{{- $v := .Values.extender.releaseFinalizer -}}
{{- if eq (toString $v) "auto" -}}
{{- if and (has .Values.extender.mode (list "native" "dra")) (include "capscale.admissionServed" .) (include "capscale.clusterSeen" .) }}true{{ end -}}
{{- else if eq (toString $v) "true" -}}
{{- if not (has .Values.extender.mode (list "native" "dra")) }}
{{- fail "extender.releaseFinalizer is native mode's: plugin and extender mode hold a force-deleted pod's IPs themselves; set it only with extender.mode=native (or leave it auto)" }}
{{- end }}
{{- if not (include "capscale.admissionServed" .) }}
{{- fail "extender.releaseFinalizer needs the cluster to serve MutatingAdmissionPolicy (admissionregistration.k8s.io/v1, Kubernetes 1.36+); leave it auto to turn it on only there" }}
{{- end -}}
true
{{- else if ne (toString $v) "false" -}}
{{- fail (printf "extender.releaseFinalizer %v: want auto, true or false" $v) }}
{{- end -}}
{{- end }}

{{/*
The helm hook that runs `extender release-cleanup`, or "" for none:
pre-delete while the release finalizer is on, so that helm uninstall
strips it before the publisher goes; pre-upgrade when an upgrade turns it
off (or leaves native mode) while this release's policy is still in the
cluster. A render that cannot see the cluster renders no hook: applied as
plain objects it would strip the finalizer at install.
*/}}
{{- define "capscale.releaseCleanupHook" -}}
{{- if include "capscale.clusterSeen" . -}}
{{- if include "capscale.releaseFinalizer" . -}}
pre-delete
{{- else if .Release.IsUpgrade -}}
{{- $map := lookup "admissionregistration.k8s.io/v1" "MutatingAdmissionPolicy" "" "capscale-underlay-ip-release" -}}
{{- if and $map (eq (dig "metadata" "annotations" "meta.helm.sh/release-name" "" $map) .Release.Name) -}}
pre-upgrade
{{- end -}}
{{- end -}}
{{- end -}}
{{- end }}

{{/* An int-or-string value (minAvailable: 1 or "50%") as YAML. */}}
{{- define "capscale.intOrString" -}}
{{- if kindIs "string" . }}{{ quote . }}{{ else }}{{ int . }}{{ end }}
{{- end }}

{{/*
"true" when the chart runs capscale-scheduler: scheduler.enabled, and in
extender and native mode also extender.enabled, whose sidecar the scheduler
there is (the chart's old switch, kept for those modes). Plugin mode runs no
extender, so extender.enabled does not turn its scheduler off.
*/}}
{{- define "capscale.schedulerEnabled" -}}
{{- if and .Values.scheduler.enabled (or (eq .Values.extender.mode "plugin") .Values.extender.enabled) }}true{{ end -}}
{{- end }}

{{/*
capscale-scheduler's replicas: extender.replicas, the key every component
has; the deprecated extender.schedulerReplicas wins when set (NOTES.txt says
so), so that values written for older charts keep their count.
*/}}
{{- define "capscale.schedulerReplicas" -}}
{{- $e := .Values.extender -}}
{{- if kindIs "invalid" $e.schedulerReplicas }}{{ int $e.replicas }}{{ else }}{{ int $e.schedulerReplicas }}{{ end -}}
{{- end }}

{{/*
A Deployment's revisionHistoryLimit and strategy, given a component's
values: rendered only when set (revisionHistoryLimit: null and
updateStrategy: {} leave Kubernetes' defaults, 10 and RollingUpdate 25%/25%).
*/}}
{{- define "capscale.deploymentStrategy" -}}
{{- if not (kindIs "invalid" .revisionHistoryLimit) }}
revisionHistoryLimit: {{ int .revisionHistoryLimit }}
{{- end }}
{{- with .updateStrategy }}
strategy:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}
