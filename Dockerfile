# One image with all six binaries: extender, metrics-adapter, workload-api,
# controller, kubectl-capscale (the kubectl plugin, for `kubectl cp` or a
# debug container), and capscale-scheduler (kube-scheduler with the UnderlayIP
# plugin; its own Go module in cmd/capscale-scheduler).
# The build stage runs the same `make build` as CI.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
COPY cmd/capscale-scheduler/go.mod cmd/capscale-scheduler/go.sum ./cmd/capscale-scheduler/
RUN go mod download && cd cmd/capscale-scheduler && go mod download
COPY . .
ARG VERSION=dev
RUN make build VERSION=${VERSION} CGO_ENABLED=0 OUT=/out

FROM gcr.io/distroless/static:nonroot
COPY --from=build /out/bin/extender /out/bin/metrics-adapter /out/bin/workload-api /out/bin/controller /out/bin/kubectl-capscale /out/bin/capscale-scheduler /
USER 65532:65532
# No default entrypoint: each Deployment names its binary (/extender,
# /metrics-adapter, /workload-api, /controller, /capscale-scheduler).
