#!/usr/bin/env bash
# Provides Prometheus for the local cluster's metrics (docs/local-cluster.md, "Metrics") and
# prints the path of the binary: Debian's package, pinned, unpacked into the cache — not
# installed, so no service of the package is set up or started.
#
#   test/cluster/build-prometheus.sh
#
# Order of preference:
#   1. $LWS_ROLLOUT_PROMETHEUS_BIN, a prometheus binary you provide;
#   2. the cache ~/.cache/lws-rollout/prometheus-<version>/ from an earlier run;
#   3. `apt-get download` of the pinned package (seconds).
# Fails with one line (and exit 1) when none works; up.sh then starts the cluster without
# Prometheus and says why.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

die() { echo "lws-rollout prometheus: $*" >&2; exit 1; }

if [ -n "${LWS_ROLLOUT_PROMETHEUS_BIN:-}" ]; then
  [ -x "$LWS_ROLLOUT_PROMETHEUS_BIN" ] || die "LWS_ROLLOUT_PROMETHEUS_BIN=$LWS_ROLLOUT_PROMETHEUS_BIN is not an executable"
  echo "$LWS_ROLLOUT_PROMETHEUS_BIN"; exit 0
fi

DIR="$CACHE_ROOT/prometheus-$PROMETHEUS_DEB_VERSION"
OUT="$DIR/root/usr/bin/prometheus"
STAMP="$DIR/.complete"
if [ -x "$OUT" ] && [ -f "$STAMP" ]; then echo "$OUT"; exit 0; fi

command -v apt-get >/dev/null 2>&1 || die "no apt-get to fetch Debian's prometheus $PROMETHEUS_DEB_VERSION; set LWS_ROLLOUT_PROMETHEUS_BIN"
mkdir -p "$DIR"
exec 9>"$DIR/.lock"
flock 9
if [ -x "$OUT" ] && [ -f "$STAMP" ]; then echo "$OUT"; exit 0; fi
cd "$DIR"
rm -f ./*.deb
if ! apt-get download "prometheus=$PROMETHEUS_DEB_VERSION" >download.log 2>&1; then
  # A fresh machine has no package lists yet.
  apt-get update >>download.log 2>&1 || true
  apt-get download "prometheus=$PROMETHEUS_DEB_VERSION" >>download.log 2>&1 \
    || die "cannot download Debian's prometheus=$PROMETHEUS_DEB_VERSION ($(tail -n 1 download.log))"
fi
rm -rf root
dpkg-deb -x ./prometheus_*.deb root
"$OUT" --version >/dev/null 2>&1 || die "$OUT does not run: $("$OUT" --version 2>&1 | tail -n 1)"
touch "$STAMP"
echo "$OUT"
