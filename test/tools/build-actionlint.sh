#!/usr/bin/env bash
# Builds actionlint (github.com/rhysd/actionlint, cmd/actionlint) at the pinned version from
# its Go module and prints the binary's path (cached under ~/.cache/lws-rollout/actionlint-<version>/).
# It lints the release workflow (.github/workflows/); $LWS_ROLLOUT_ACTIONLINT overrides with
# an actionlint you provide.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/gobuild-lib.sh"
ACTIONLINT_VERSION=v1.7.12
if [ -n "${LWS_ROLLOUT_ACTIONLINT:-}" ]; then
  [ -x "$LWS_ROLLOUT_ACTIONLINT" ] || die "LWS_ROLLOUT_ACTIONLINT=$LWS_ROLLOUT_ACTIONLINT is not an executable"
  echo "$LWS_ROLLOUT_ACTIONLINT"; exit 0
fi
go_tool_build actionlint github.com/rhysd/actionlint "$ACTIONLINT_VERSION" github.com/rhysd/actionlint/cmd/actionlint
