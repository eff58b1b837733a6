# syntax=docker/dockerfile:1
# verifysvc for GPU nodes (deploy/overlays/gpu): the CUDA build
# (tools/cuda_build.sh: LibTorch 2.11 + CUDA 13, kernels/cuda for sm_90),
# run on bookworm-slim against the torch 2.11 wheel's libraries and the
# NVIDIA runtime libraries it depends on (PyPI), as a non-root user. The
# node's driver comes from the NVIDIA container toolkit. Build from the
# repository root:
#
#   docker build -f deploy/docker/verifysvc-cuda.Dockerfile \
#     -t lookahead/verifysvc-cuda:0.1.0 .

# grpc_health_probe, which the pods' probes run: it checks grpc.health.v1
# over TLS (the kubelet's own gRPC probe speaks plaintext only). Built from
# source at a pinned version, static (no cgo).
FROM golang:1.24-bookworm AS probe
RUN CGO_ENABLED=0 GOBIN=/out \
    go install github.com/grpc-ecosystem/grpc-health-probe@v0.4.61

FROM debian:bookworm AS build
ENV LOOKAHEAD_MODEL_DIR=/opt/lookahead/models
WORKDIR /src
# nvcc from NVIDIA's Debian 12 repository (the CUDA 13.0 toolkit).
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates curl \
    && curl -fsSLo /tmp/keyring.deb \
        https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/cuda-keyring_1.1-1_all.deb \
    && dpkg -i /tmp/keyring.deb && apt-get update \
    && apt-get install -y --no-install-recommends cuda-toolkit-13-0 \
    && ln -sfn /usr/local/cuda-13.0 /usr/local/cuda
COPY tools/setup.sh tools/setup.sh
RUN tools/setup.sh && rm -rf /var/lib/apt/lists/*
COPY . .
RUN --mount=type=cache,target=/root/.cache/bazel \
    tools/cuda_build.sh \
    && install -D -m 0755 .bazel-cuda/bin/verifysvc/verifysvc /out/verifysvc

FROM debian:bookworm-slim
RUN apt-get update \
    && apt-get install -y --no-install-recommends \
        libabsl20220623 libgrpc++1.51 libgrpc29 libprotobuf32 libre2-9 \
        python3-venv \
    && rm -rf /var/lib/apt/lists/*
# LibTorch 2.11 with CUDA 13.0 and its NVIDIA libraries, from PyPI.
RUN python3 -m venv /opt/torch \
    && /opt/torch/bin/pip install --no-cache-dir torch==2.11.0 \
    && rm -rf /opt/torch/lib/python3*/site-packages/torch/include
ENV LD_LIBRARY_PATH=/opt/torch/lib/python3.11/site-packages/torch/lib
RUN groupadd --system --gid 10001 lookahead \
    && useradd --system --uid 10001 --gid 10001 --no-create-home \
        --home-dir /nonexistent --shell /usr/sbin/nologin lookahead
COPY --from=build /opt/lookahead/models/SmolLM2-135M-Instruct.Q4_1.gguf \
    /opt/lookahead/models/
COPY --from=build /out/verifysvc /usr/local/bin/verifysvc
COPY --from=probe /out/grpc-health-probe /usr/local/bin/grpc_health_probe
ENV LOOKAHEAD_MODEL_DIR=/opt/lookahead/models
USER 10001:10001
EXPOSE 50051 8000 9090
ENTRYPOINT ["/usr/local/bin/verifysvc"]
