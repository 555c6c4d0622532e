#!/usr/bin/env bash
# Builds crane (github.com/google/go-containerregistry, cmd/crane) at the pinned version from
# its Go module and prints the binary's path (cached under ~/.cache/lws-rollout/crane-<version>/).
# The image test uses it to build the manager image daemonlessly as an OCI layout.
# $LWS_ROLLOUT_CRANE overrides with a crane you provide.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/gobuild-lib.sh"
CRANE_VERSION=v0.21.9
if [ -n "${LWS_ROLLOUT_CRANE:-}" ]; then
  [ -x "$LWS_ROLLOUT_CRANE" ] || die "LWS_ROLLOUT_CRANE=$LWS_ROLLOUT_CRANE is not an executable"
  echo "$LWS_ROLLOUT_CRANE"; exit 0
fi
go_tool_build crane github.com/google/go-containerregistry "$CRANE_VERSION" \
  github.com/google/go-containerregistry/cmd/crane
