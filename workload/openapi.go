package workload

import (
	"encoding/json"
	"net/http"
	"sync"

	"k8s.io/klog/v2"
)

// obj is a JSON object literal; the document is plain data so that it reads
// like the JSON it serves.
type obj = map[string]any

func ref(name string) obj { return obj{"$ref": "#/components/schemas/" + name} }

func jsonBody(schema obj) obj {
	return obj{"content": obj{"application/json": obj{"schema": schema}}}
}

func resp(desc string, schema obj) obj {
	r := obj{"description": desc}
	if schema != nil {
		r["content"] = obj{"application/json": obj{"schema": schema}}
	}
	return r
}

// errorResponses are the answers every /v1 operation may give.
func errorResponses(extra map[string]string) obj {
	out := obj{
		"401": resp("no bearer token, or the apiserver refused it", ref("Error")),
		"403": resp("the apiserver refused the caller (RBAC or an admission policy); the message is the apiserver's", ref("Error")),
		"404": resp("no such object, or a resource this endpoint does not serve", ref("Error")),
		"429": resp("too many requests in flight (--max-requests-inflight); retry after Retry-After", ref("Error")),
		"503": resp("the apiserver is unavailable or throttling", ref("Error")),
	}
	for code, desc := range extra {
		out[code] = resp(desc, ref("Error"))
	}
	return out
}

func operation(summary, id string, params []any, body obj, ok string, okSchema obj, okCode string, errs map[string]string) obj {
	responses := errorResponses(errs)
	responses[okCode] = resp(ok, okSchema)
	op := obj{"summary": summary, "operationId": id, "parameters": params, "responses": responses, "security": []any{obj{"bearer": []any{}}}}
	if body != nil {
		op["requestBody"] = body
	}
	return op
}

func pathParam(name, desc string, enum ...string) obj {
	schema := obj{"type": "string"}
	if len(enum) > 0 {
		e := make([]any, len(enum))
		for i, v := range enum {
			e[i] = v
		}
		schema["enum"] = e
	}
	return obj{"name": name, "in": "path", "required": true, "description": desc, "schema": schema}
}

func workloadParams(resources ...string) []any {
	return []any{
		pathParam("namespace", "namespace of the workload"),
		pathParam("resource", "workload resource", resources...),
		pathParam("name", "name of the workload"),
	}
}

func intProp(desc string) obj { return obj{"type": "integer", "format": "int32", "description": desc} }
func int64Prop(desc string) obj {
	return obj{"type": "integer", "format": "int64", "description": desc}
}
func numberProp(desc string) obj { return obj{"type": "number", "description": desc} }
func stringProp(desc string) obj { return obj{"type": "string", "description": desc} }
func boolProp(desc string) obj   { return obj{"type": "boolean", "description": desc} }
func object(props obj, required ...string) obj {
	o := obj{"type": "object", "properties": props, "additionalProperties": false}
	if len(required) > 0 {
		r := make([]any, len(required))
		for i, v := range required {
			r[i] = v
		}
		o["required"] = r
	}
	return o
}

// openAPIDocument is the OpenAPI 3 description of the API. The test
// TestOpenAPICoversRoutes keeps it in step with the router.
func openAPIDocument() obj {
	const w = "/v1/namespaces/{namespace}/{resource}/{name}"
	const ew = "/v1/namespaces/{namespace}/elasticwebs/{name}"
	all := []string{"deployments", "statefulsets", "daemonsets"}
	sc := []string{"deployments", "statefulsets"}
	ewParams := []any{pathParam("namespace", "namespace of the elastic web"), pathParam("name", "name of the ElasticWeb, which its Deployment, Service and HPA share (a DNS-1035 label)")}
	amounts := obj{"type": "object", "description": "resource → amount: cpu in millicores, memory in bytes, pods and capscale.io/underlay-ip as counts",
		"additionalProperties": obj{"type": "integer", "format": "int64"}}
	hpaCond := object(obj{"type": stringProp(""), "status": stringProp(""), "reason": stringProp(""), "message": stringProp("")})

	return obj{
		"openapi": "3.0.3",
		"info": obj{
			"title":       "capscale workload lifecycle API",
			"version":     "v1",
			"description": "Restart, stop, start and scale workloads with a capacity computation, and write and read ElasticWeb resources. Every /v1 call acts as its caller: the API calls the apiserver with the caller's bearer token, and the apiserver's RBAC, admission and audit decide. Errors are {\"code\",\"reason\",\"message\"}.",
		},
		"components": obj{
			"securitySchemes": obj{"bearer": obj{"type": "http", "scheme": "bearer", "description": "a Kubernetes bearer token; the API passes it to the apiserver and never stores it"}},
			"schemas": obj{
				"Error": object(obj{"code": intProp("HTTP status"), "reason": stringProp("e.g. BadRequest, Forbidden, Conflict"), "message": stringProp("")}, "code", "reason", "message"),
				"RestartResponse": object(obj{
					"namespace": stringProp(""), "resource": stringProp(""), "name": stringProp(""),
					"restartedAt": stringProp("RFC3339Nano value of kubectl.kubernetes.io/restartedAt"),
					"generation":  int64Prop("object generation after the restart"),
				}),
				"RolloutStatus": object(obj{
					"namespace": stringProp(""), "resource": stringProp(""), "name": stringProp(""),
					"generation": int64Prop(""), "observedGeneration": int64Prop(""),
					"desired": intProp(""), "updated": intProp(""), "ready": intProp(""), "available": intProp(""),
					"complete": boolProp(""),
					"reason":   stringProp("why not complete: ObservedGenerationStale, Progressing, ProgressDeadlineExceeded, Paused, OnDeleteStrategy"),
					"message":  stringProp(""),
				}),
				"HPA": object(obj{
					"name": stringProp(""), "minReplicas": intProp(""), "maxReplicas": intProp(""),
					"currentReplicas": intProp(""), "desiredReplicas": intProp(""),
					"conditions": obj{"type": "array", "items": hpaCond},
				}),
				"StopResponse": object(obj{
					"namespace": stringProp(""), "resource": stringProp(""), "name": stringProp(""),
					"replicas":           intProp("always 0"),
					"rememberedReplicas": intProp("what start restores (annotation capscale.io/replicas-before-stop)"),
					"alreadyStopped":     boolProp("the call changed nothing"),
					"hpa":                ref("HPA"), "message": stringProp(""),
				}),
				"StartRequest": object(obj{"replicas": intProp("overrides the remembered count; at least 1")}),
				"StartResponse": object(obj{
					"namespace": stringProp(""), "resource": stringProp(""), "name": stringProp(""),
					"replicas":          intProp("replicas set"),
					"requestedReplicas": intProp("asked or remembered, before the HPA cap"),
					"source":            obj{"type": "string", "enum": []any{"body", "annotation", "current", "hpa"}, "description": "where the count came from; hpa means nothing was remembered and the HPA's minReplicas was used"},
					"cappedByHPA":       boolProp("the HPA's maxReplicas lowered the count"),
					"alreadyRunning":    boolProp(""),
					"hpa":               ref("HPA"), "message": stringProp(""),
				}),
				"ScaleRequest": object(obj{
					"replicas":  intProp("desired replicas, >= 0"),
					"adjustHPA": boolProp("move the bounds of the workload's HPA to include replicas"),
				}, "replicas"),
				"ScaleResponse": object(obj{
					"namespace": stringProp(""), "resource": stringProp(""), "name": stringProp(""),
					"replicas": intProp(""), "previousReplicas": intProp(""),
					"capacity": ref("Capacity"), "hpa": ref("HPA"),
					"warnings": obj{"type": "array", "items": obj{"type": "string"}, "description": "e.g. more replicas asked than fit"},
				}),
				"NodeCapacity": object(obj{
					"name": stringProp(""), "fits": int64Prop("more replicas this node takes"),
					"excluded":         stringProp("why the node takes none: unschedulable, NotReady, untolerated taint, node selector"),
					"limitingResource": stringProp(""),
					"allocatable":      amounts, "requested": amounts, "free": amounts,
					"usage": object(obj{"cpuMillis": int64Prop(""), "memoryBytes": int64Prop("")}),
				}),
				"Capacity": object(obj{
					"replicas":         int64Prop("how many more replicas fit, summed over nodes"),
					"limitingResource": obj{"type": "string", "enum": []any{"cpu", "memory", "pods", "capscale.io/underlay-ip"}},
					"reason":           stringProp(""),
					"perReplica":       amounts,
					"eligibleNodes":    intProp(""), "excludedNodes": intProp(""),
					"nodes":          obj{"type": "array", "items": ref("NodeCapacity")},
					"usageAvailable": boolProp("live usage from metrics.k8s.io is included"),
				}),
				"CapacityResponse": object(obj{
					"namespace": stringProp(""), "resource": stringProp(""), "name": stringProp(""),
					"currentReplicas": intProp(""), "capacity": ref("Capacity"),
					"usageMessage": stringProp("why live usage is missing"),
				}),
				"ElasticWebSpec": object(obj{
					"image": stringProp("container image, no whitespace"), "port": intProp("container and service port, 1..65535"),
					"singlePodQPS": numberProp("QPS one pod serves, > 0"), "totalQPS": numberProp("QPS to serve, >= 0"),
					"minReplicas": intProp("HPA minReplicas, default 1"),
					"maxReplicas": intProp("HPA maxReplicas (>= minReplicas), default max(10, 2 × ceil(totalQPS / singlePodQPS))"),
					"resources": object(obj{
						"requests": obj{"type": "object", "description": "e.g. {\"cpu\": \"100m\", \"memory\": \"64Mi\"}", "additionalProperties": obj{"type": "string"}},
						"limits":   obj{"type": "object", "additionalProperties": obj{"type": "string"}},
					}),
				}, "image", "port", "singlePodQPS", "totalQPS"),
				"Condition": object(obj{
					"type":    obj{"type": "string", "enum": []any{"Reconciled", "Ready"}},
					"status":  obj{"type": "string", "enum": []any{"True", "False", "Unknown"}},
					"reason":  stringProp("Reconciled: Applied, ObjectConflict, InvalidSpec, ApplyFailed; Ready: EnoughReplicas, Scaling"),
					"message": stringProp(""), "observedGeneration": int64Prop(""), "lastTransitionTime": stringProp("RFC3339"),
				}),
				"ElasticWebStatus": object(obj{
					"observedGeneration": int64Prop("the generation this status describes"),
					"qpsReplicas":        intProp("ceil(totalQPS / singlePodQPS), as the metrics adapter computes it"),
					"desiredReplicas":    intProp("the Deployment's spec.replicas, as the HPA set it"),
					"readyReplicas":      intProp(""),
					"realQPS":            numberProp("readyReplicas × singlePodQPS"),
					"nodePort":           intProp(""),
					"conditions":         obj{"type": "array", "items": ref("Condition")},
				}),
				"ElasticWeb": object(obj{
					"namespace": stringProp(""), "name": stringProp(""),
					"generation": int64Prop("the spec's generation; the status describes it when status.observedGeneration equals it"),
					"spec":       ref("ElasticWebSpec"), "status": ref("ElasticWebStatus"),
				}),
			},
		},
		"paths": obj{
			"/healthz":      obj{"get": obj{"summary": "liveness", "operationId": "healthz", "responses": obj{"200": obj{"description": "ok"}}}},
			"/readyz":       obj{"get": obj{"summary": "readiness: informers synced", "operationId": "readyz", "responses": obj{"200": obj{"description": "ready"}, "503": obj{"description": "informers not synced"}}}},
			"/metrics":      obj{"get": obj{"summary": "Prometheus metrics (capscale_workload_*)", "operationId": "metrics", "responses": obj{"200": obj{"description": "text exposition format"}}}},
			"/openapi.json": obj{"get": obj{"summary": "this document", "operationId": "openapi", "responses": obj{"200": obj{"description": "OpenAPI 3 document"}}}},
			w + "/restart": obj{"post": operation(
				"Rolling restart, like kubectl rollout restart with a sub-second restartedAt. Needs patch <resource>.",
				"restart", workloadParams(all...), nil, "restart accepted; pods roll", ref("RestartResponse"), "202",
				map[string]string{"409": "the Deployment is paused"})},
			w + "/rollout": obj{"get": operation(
				"Rollout status: desired, updated, ready, available, complete and why not. Needs get <resource>.",
				"rolloutStatus", workloadParams(all...), nil, "status", ref("RolloutStatus"), "200", nil)},
			w + "/stop": obj{"post": operation(
				"Scale to 0 remembering the count in capscale.io/replicas-before-stop; idempotent. Needs update <resource>/scale.",
				"stop", workloadParams(sc...), nil, "stopped (or already stopped)", ref("StopResponse"), "200",
				map[string]string{"409": "an HPA with minReplicas 0 would undo the stop"})},
			w + "/start": obj{"post": operation(
				"Restore the remembered (or given) count, at most the HPA's maxReplicas. Needs update <resource>/scale.",
				"start", workloadParams(sc...), obj{"required": false, "content": obj{"application/json": obj{"schema": ref("StartRequest")}}},
				"started (or already running)", ref("StartResponse"), "200",
				map[string]string{"400": "malformed body", "409": "nothing remembered and no replicas given", "413": "body too large", "415": "not JSON", "422": "invalid replicas"})},
			w + "/scale": obj{"put": operation(
				"Set replicas through the scale subresource and report capacity; scales even when it does not fit. Needs update <resource>/scale (and update horizontalpodautoscalers with adjustHPA).",
				"scale", append(workloadParams(sc...), obj{"name": "adjustHPA", "in": "query", "required": false, "schema": obj{"type": "boolean"}, "description": "move the HPA's bounds to include replicas"}),
				jsonBody(ref("ScaleRequest")), "scaled", ref("ScaleResponse"), "200",
				map[string]string{"400": "malformed body", "409": "an HPA manages the workload and adjustHPA was not asked", "413": "body too large", "415": "not JSON", "422": "invalid replicas"})},
			w + "/capacity": obj{"get": operation(
				"How many more replicas fit, node by node, with the limiting resource and live usage when metrics.k8s.io exists. Needs get <resource>.",
				"capacity", workloadParams(sc...), nil, "capacity", ref("CapacityResponse"), "200", nil)},
			ew: obj{
				"put": operation(
					"Server-side apply the ElasticWeb resource with the body as its spec (field manager capscale-workload-api); capscale-controller then keeps its Deployment, Service and HPA in shape. Spec fields the API set before and the body leaves out are removed. Needs get, create and patch on elasticwebs.capscale.io.",
					"applyElasticWeb", append(ewParams, obj{"name": "force", "in": "query", "required": false, "schema": obj{"type": "boolean"}, "description": "take over spec fields another manager (kubectl, GitOps) owns instead of answering 409"}),
					jsonBody(ref("ElasticWebSpec")), "applied; status is the controller's latest", ref("ElasticWeb"), "200",
					map[string]string{"400": "malformed body", "404": "the ElasticWeb CRD is not installed", "409": "another field manager owns a field the body sets (the message names it); retry with force=true to take it over", "413": "body too large", "415": "not JSON", "422": "the apiserver refused the spec; the message names each field, e.g. spec.singlePodQPS"}),
				"get": operation(
					"The ElasticWeb's spec and status (replicas, ready replicas, real QPS = ready × singlePodQPS, conditions). Needs get on elasticwebs.capscale.io.",
					"getElasticWeb", ewParams, nil, "the ElasticWeb", ref("ElasticWeb"), "200", nil),
			},
		},
	}
}

var (
	openAPIOnce sync.Once
	openAPIJSON []byte
)

func serveOpenAPI(w http.ResponseWriter, _ *http.Request) {
	openAPIOnce.Do(func() {
		b, err := json.MarshalIndent(openAPIDocument(), "", "  ")
		if err != nil {
			// The document is a constant; this cannot happen short of a bug,
			// which the tests would catch.
			klog.ErrorS(err, "Encoding the OpenAPI document failed")
		}
		openAPIJSON = b
	})
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(openAPIJSON)
}
