# syntax=docker/dockerfile:1
# draftsvc: built with Bazel from Debian bookworm packages (as tools/setup.sh
# sets up any developer machine), run as a non-root user on bookworm-slim with
# only the runtime libraries. Build from the repository root:
#
#   docker build -f deploy/docker/draftsvc.Dockerfile -t lookahead/draftsvc:0.1.0 .
#
# The build stage is the same as verifysvc's, so one builder shares it.

# grpc_health_probe, which the pods' probes run: it checks grpc.health.v1
# over TLS (the kubelet's own gRPC probe speaks plaintext only). Built from
# source at a pinned version, static (no cgo).
FROM golang:1.24-bookworm AS probe
RUN CGO_ENABLED=0 GOBIN=/out \
    go install github.com/grpc-ecosystem/grpc-health-probe@v0.4.61

FROM debian:bookworm AS build
ENV LOOKAHEAD_MODEL_DIR=/opt/lookahead/models
WORKDIR /src
# Debian build packages and the default model; the only network use. The
# Bazel build below is offline (WORKSPACE names local repositories only).
COPY tools/setup.sh tools/setup.sh
RUN tools/setup.sh && rm -rf /var/lib/apt/lists/*
COPY . .
RUN --mount=type=cache,target=/root/.cache/bazel \
    bazel build //draftsvc:draftsvc \
    && install -D -m 0755 .bazel/bin/draftsvc/draftsvc /out/draftsvc \
    && install -D -m 0755 .bazel/bin/draftsvc/sources/assistant/libdraftsvc_assistant.so \
        /out/libdraftsvc_assistant.so

FROM debian:bookworm-slim
# The libraries draftsvc links (objdump -p: NEEDED), nothing else. The
# assistant plugin beside it also needs LibTorch (libtorch1.13 and the ~1 GiB
# it pulls in), which this image leaves out: --assistant_model then fails the
# start naming the missing library. Add libtorch1.13 here to run one.
RUN apt-get update \
    && apt-get install -y --no-install-recommends \
        libabsl20220623 libgrpc++1.51 libgrpc29 libprotobuf32 librocksdb7.8 \
    && rm -rf /var/lib/apt/lists/*
RUN groupadd --system --gid 10001 lookahead \
    && useradd --system --uid 10001 --gid 10001 --no-create-home \
        --home-dir /nonexistent --shell /usr/sbin/nologin lookahead \
    && install -d -o 10001 -g 10001 /var/lib/lookahead
COPY --from=build /out/draftsvc /out/libdraftsvc_assistant.so /usr/local/bin/
COPY --from=probe /out/grpc-health-probe /usr/local/bin/grpc_health_probe
# Numeric, so that Kubernetes can verify runAsNonRoot.
USER 10001:10001
VOLUME /var/lib/lookahead
EXPOSE 50061 9091
# SIGTERM flushes RocksDB and exits; the binary handles it as PID 1.
ENTRYPOINT ["/usr/local/bin/draftsvc"]
CMD ["--db_path=/var/lib/lookahead/draftsvc-db"]
