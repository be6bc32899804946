{{/*
capscale.schedulerConfig: capscale-scheduler's KubeSchedulerConfiguration,
the ConfigMap's config.yaml; its checksum on the pods rolls them when it
changes, since kube-scheduler reads its configuration only at start.
*/}}
{{- define "capscale.schedulerConfig" -}}
{{- $ns := include "capscale.namespace" . }}
{{- $native := has .Values.extender.mode (list "native" "dra") }}
{{- $plugin := eq .Values.extender.mode "plugin" -}}
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
leaderElection:
  leaderElect: true
  resourceNamespace: {{ $ns }}
  resourceName: capscale-scheduler
{{- if $native }}
# Native and DRA mode: the profile of deploy/native/kube-scheduler-config.yaml.
profiles:
- schedulerName: capscale-scheduler
  pluginConfig:
  - name: NodeResourcesFit
    args:
      scoringStrategy:
        type: LeastAllocated
        resources:
        - name: cpu
          weight: 1
        - name: memory
          weight: 1
        - name: capscale.io/underlay-ip
          weight: 10
{{- else if $plugin }}
# Plugin mode: the profile of deploy/plugin/capscale-scheduler.yaml.
profiles:
- schedulerName: capscale-scheduler
  percentageOfNodesToScore: 100
  plugins:
    multiPoint:
      enabled:
      - name: UnderlayIP
        weight: 100
    postFilter:
      enabled:
      - name: UnderlayIP
    bind:
      enabled:
      - name: UnderlayIP
  pluginConfig:
  - name: UnderlayIP
    args:
      defaultCapacity: {{ int .Values.extender.defaultCapacity }}
      {{- if include "capscale.awaitMirror" . }}
      awaitCapacitySource: true
      {{- end }}
      {{- if include "capscale.schedulerReads" . }}
      capacitySources: /etc/capscale-capacity-sources/sources.yaml
      {{- end }}
  - name: NodeResourcesFit
    args:
      ignoredResources: [capscale.io/underlay-ip]
{{- else }}
profiles:
# Score every node so the one with most free IPs can win (docs/choosing-a-mode.md
# "Scheduling cost"); only pods naming this scheduler pay for it.
- schedulerName: capscale-scheduler
  percentageOfNodesToScore: 100
extenders:
- urlPrefix: http://127.0.0.1:8888
  # No prioritizeVerb: filter keeps only the nodes with the most free
  # IPs, so kube-scheduler's own scores break ties among those (docs/extender-mode.md
  # "What the verbs do").
  filterVerb: filter
  preemptVerb: preempt
  bindVerb: bind
  enableHTTPS: false
  nodeCacheCapable: true
  ignorable: false
  httpTimeout: 30s
  managedResources:
  - name: capscale.io/underlay-ip
    ignoredByScheduler: true
{{- end }}
{{- end }}
