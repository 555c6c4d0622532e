#!/usr/bin/env bash
# Prints a directory holding Volcano's PodGroup and Queue CRDs (scheduling.volcano.sh/v1beta1),
# for the Volcano gang-scheduling e2e tests and upstream's Volcano specs: the checked-in copy
# (crds/, written by test/volcano/regen.sh from pinned versions, named in crds/VERSIONS), or
# a directory you provide.
#
#   test/volcano/crds.sh            (LWS_ROLLOUT_VOLCANO_CRDS=<dir> uses a directory you provide)
set -euo pipefail
if [ -n "${LWS_ROLLOUT_VOLCANO_CRDS:-}" ]; then echo "$LWS_ROLLOUT_VOLCANO_CRDS"; exit 0; fi
cd "$(dirname "${BASH_SOURCE[0]}")/crds" && pwd
