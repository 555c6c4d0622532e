#!/usr/bin/env bash
# Builds Helm (helm.sh/helm/v3, cmd/helm) at the pinned version from its Go module and prints
# the binary's path (cached under ~/.cache/lws-rollout/helm-<version>/). There is no Helm
# package or binary download here. $LWS_ROLLOUT_HELM overrides with a helm you provide.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/gobuild-lib.sh"
HELM_VERSION=v3.21.4
if [ -n "${LWS_ROLLOUT_HELM:-}" ]; then
  [ -x "$LWS_ROLLOUT_HELM" ] || die "LWS_ROLLOUT_HELM=$LWS_ROLLOUT_HELM is not an executable"
  echo "$LWS_ROLLOUT_HELM"; exit 0
fi
# The version Helm reports (`helm version`) is stamped the way Helm's Makefile does.
go_tool_build helm helm.sh/helm/v3 "$HELM_VERSION" helm.sh/helm/v3/cmd/helm \
  "-X helm.sh/helm/v3/internal/version.version=$HELM_VERSION"
