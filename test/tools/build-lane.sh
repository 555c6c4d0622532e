#!/usr/bin/env bash
# Runs tool builds one after another and records what each printed, for test/run-tests.sh,
# which runs two of these lanes in the background beside the Rust builds: cold, most of a build
# is waiting on one core (a link) or on the module proxy, and another build fills the gap.
#
#   test/tools/build-lane.sh OUT_DIR NAME=COMMAND...
#
# For each NAME: OUT_DIR/NAME holds the command's stdout (a tool's path) and OUT_DIR/NAME.rc
# its exit code. A failing build does not stop the lane: the caller decides what each missing
# tool means. The command's stderr (its progress and errors) passes through.
set -uo pipefail
OUT=$1
shift
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
for step in "$@"; do
  name=${step%%=*}
  # shellcheck disable=SC2086
  ${step#*=} >"$OUT/$name"
  echo $? >"$OUT/$name.rc"
done
