# The lws-rollout manager image, for release pipelines (docker buildx, kaniko, buildah).
# A statically linked (musl) binary on distroless/static: no shell, no libc, no package
# manager; runs as the distroless `nonroot` user (65532) and writes nothing to its root
# filesystem, so `readOnlyRootFilesystem: true` (the chart's default) just works.
# test/image/build.sh builds the same layout daemonlessly for the tests (docs/install.md).

FROM rust:1.95-bookworm AS build
RUN rustup target add x86_64-unknown-linux-musl \
 && apt-get update && apt-get install -y --no-install-recommends musl-tools \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
# Symbols are of no use in a container.
ENV CARGO_PROFILE_RELEASE_STRIP=symbols
# The same build as the tests' image and the benchmark: static, with the PGO profile (pgo/).
RUN cp "$(test/image/build-binary.sh)" /lws-rollout

FROM gcr.io/distroless/static-debian12:nonroot
ARG VERSION=0.1.0
LABEL org.opencontainers.image.title="lws-rollout" \
      org.opencontainers.image.description="LeaderWorkerSet controller with Kruise-Rollout compatible progressive delivery" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.source="https://github.com/lws-rollout/lws-rollout"
COPY --from=build /lws-rollout /lws-rollout
USER 65532:65532
# Health, readiness and /metrics; the admission webhook (TLS).
EXPOSE 8081 9443
ENTRYPOINT ["/lws-rollout"]
