# syntax=docker/dockerfile:1
# One image, one static binary: `heatsink manager`, `heatsink node-agent`,
# `heatsink sidecar` (the injected sidecar). One image rather than three: the
# three share almost all their code, a node pulls one layer for its node agent
# and every sidecar, and the versions can never skew.

# --- build -------------------------------------------------------------------
FROM --platform=$BUILDPLATFORM golang:1.26 AS build
ARG TARGETOS=linux
ARG TARGETARCH=amd64
WORKDIR /src
# Dependencies first, so that a source change reuses the module cache layer.
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH \
    go build -trimpath -ldflags="-s -w" -o /out/heatsink ./cmd/heatsink

# --- run ---------------------------------------------------------------------
# distroless/static: CA certificates, tzdata (schedules' time zones) and
# /etc/passwd with the nonroot user; no shell, no package manager.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/heatsink /heatsink
# 65532 is "nonroot"; numeric so that runAsNonRoot can be verified.
USER 65532:65532
ENTRYPOINT ["/heatsink"]
