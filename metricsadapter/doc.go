// Package metricsadapter is capscale's external-metrics adapter for
// HorizontalPodAutoscalers. Its parts, each a package:
//
//   - config: the --config file (sources and step policies), strict decoding,
//     field-named validation and reload on change;
//   - source: one background poller per third-party load-index endpoint; the
//     last good sample is kept with its sample time, and past maxAge a read
//     is an error (or the configured fallback), never 0;
//   - policy: the pure QPS rule (ceil(total / single-pod QPS)) and the
//     load-step rule (step up above one threshold, down below another, within
//     [min, max], never down while a pod is younger than minPodAge, at most
//     one step per interval);
//   - provider: the sigs.k8s.io/custom-metrics-apiserver
//     ExternalMetricsProvider that answers from the sources and informer
//     caches only;
//   - kedascaler: KEDA's external-scaler gRPC protocol over that same
//     provider, for clusters where KEDA keeps the APIService.
//
// The binary is cmd/metrics-adapter.
package metricsadapter
