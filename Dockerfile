# The lws-rollout manager image, for release pipelines (docker buildx, kaniko, buildah), for
# linux/amd64 and linux/arm64:
#
#   docker buildx build --platform linux/amd64,linux/arm64 -t <registry>/lws-rollout:<tag> --push .
#
# The release binary (glibc) on distroless/cc: no shell, no package manager; runs as the
# distroless `nonroot` user (65532) and writes nothing to its root filesystem, so
# `readOnlyRootFilesystem: true` (the chart's default) just works. Both platforms are built on
# the amd64 build machine (arm64 with Debian's cross toolchain), by the same script that builds
# the binary the e2e suite runs and the benchmark measures (test/image/build-binary.sh);
# test/image/build.sh builds the same layout daemonlessly for the tests (docs/install.md).

FROM --platform=linux/amd64 rust:1.95-bookworm AS build
ARG TARGETARCH
WORKDIR /src
COPY . .
# Symbols are of no use in a container.
ENV CARGO_PROFILE_RELEASE_STRIP=symbols
RUN cp "$(test/image/build-binary.sh "$TARGETARCH")" /lws-rollout

FROM gcr.io/distroless/cc-debian12:nonroot
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
