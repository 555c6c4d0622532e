#!/usr/bin/env bash
# Builds the manager image without a container engine, as an OCI image layout, and prints the
# layout's path. The same image the Dockerfile describes: one layer holding the statically
# linked (musl) release binary at /lws-rollout, user 65532:65532, entrypoint /lws-rollout, the
# OCI labels, ports 8081 and 9443. The Dockerfile's distroless/static base adds only
# /etc/passwd, CA certificates and tzdata, none of which the binary reads (it trusts the
# cluster's CA from its ServiceAccount), so this image starts from an empty base instead:
# base images cannot be downloaded here.
#
#   test/image/build.sh [OUT_DIR]     (default: target/image)
#
# crane (test/tools/build-crane.sh) assembles it: `crane registry serve` on loopback (its PID
# recorded and stopped on exit), `crane append` (the layer on an empty OCI base), `crane
# mutate` (config), `crane pull --format=oci` (the layout).
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
. "$REPO/test/cluster/lib.sh"
log() { echo "[image $(date +%H:%M:%S)] $*" >&2; }
die() { echo "lws-rollout image: $*" >&2; exit 1; }
OUT="${1:-$REPO/target/image}"
VERSION=$(sed -n 's/^version = "\(.*\)"/\1/p' "$REPO/Cargo.toml" | head -n1)

CRANE=$("$REPO/test/tools/build-crane.sh")
BIN=$("$REPO/test/image/build-binary.sh")

WORK=$(mktemp -d "${TMPDIR:-/tmp}/lws-rollout-image.XXXXXX")
REG_PID=
cleanup() {
  if [ -n "$REG_PID" ]; then kill "$REG_PID" 2>/dev/null || true; wait "$REG_PID" 2>/dev/null || true; fi
  rm -rf "$WORK"
}
trap cleanup EXIT

# The layer: /lws-rollout, root-owned and world-executable (the non-root user runs it).
mkdir -p "$WORK/root"
install -m 0755 "$BIN" "$WORK/root/lws-rollout"
# Symbols are a third of the binary and of no use in a container.
if command -v strip >/dev/null 2>&1; then strip --strip-all "$WORK/root/lws-rollout"; fi
tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -C "$WORK/root" -cf "$WORK/layer.tar" lws-rollout

PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])' 2>/dev/null \
  || echo $((20000 + RANDOM % 20000)))
"$CRANE" registry serve --address "127.0.0.1:$PORT" >"$WORK/registry.log" 2>&1 &
REG_PID=$!
for _ in $(seq 1 100); do
  curl -sf "http://127.0.0.1:$PORT/v2/" >/dev/null 2>&1 && break
  kill -0 "$REG_PID" 2>/dev/null || die "crane registry serve exited: $(tail -n 3 "$WORK/registry.log")"
  sleep 0.1
done
curl -sf "http://127.0.0.1:$PORT/v2/" >/dev/null || die "crane registry on 127.0.0.1:$PORT did not answer"

REF="127.0.0.1:$PORT/lws-rollout:$VERSION"
c() { "$CRANE" --insecure "$@" >>"$WORK/crane.log" 2>&1 || die "crane $1 failed: $(tail -n 5 "$WORK/crane.log")"; }
c append --oci-empty-base -f "$WORK/layer.tar" -t "$REF"
c mutate "$REF" -t "$REF" --set-platform linux/amd64 --user 65532:65532 --entrypoint /lws-rollout \
  --exposed-ports 8081/tcp --exposed-ports 9443/tcp \
  -l org.opencontainers.image.title=lws-rollout \
  -l "org.opencontainers.image.description=LeaderWorkerSet controller with Kruise-Rollout compatible progressive delivery" \
  -l org.opencontainers.image.licenses=Apache-2.0 \
  -l "org.opencontainers.image.version=$VERSION" \
  -l org.opencontainers.image.source=https://github.com/lws-rollout/lws-rollout
rm -rf "$OUT"
c pull --format=oci "$REF" "$OUT"
log "image layout: $OUT"
echo "$OUT"
