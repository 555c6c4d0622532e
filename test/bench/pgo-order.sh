#!/usr/bin/env bash
# Writes the link order of the shipped binary's functions (pgo/lws-rollout.order, docs/performance.md
# "Link order"): every function of BINARY that ran while the PGO profile was trained (or that the
# profile does not know: the precompiled standard library, musl, ring's assembly), hottest first.
# The linker puts these first, so the code the manager runs sits in one block and the functions
# that never ran stay out of its pages; what is missing from the list is simply placed after.
#
#   test/bench/pgo-order.sh BINARY PROFDATA > pgo/lws-rollout.order
#
# BINARY: a build of the same code with the same profile (its symbol names are the ones LTO
# gives, suffixes included; the linker does not change them). test/bench/pgo.sh runs this.
set -euo pipefail
BIN=$1
PROFILE=$2
SYSROOT=$(rustc --print sysroot)
TOOLS=$(ls -d "$SYSROOT"/lib/rustlib/*/bin 2>/dev/null | head -1)
PROFDATA="$TOOLS/llvm-profdata"
NM="$TOOLS/llvm-nm"
[ -x "$PROFDATA" ] && [ -x "$NM" ] || {
  echo "pgo-order: no llvm-profdata/llvm-nm under $SYSROOT (rustup component add llvm-tools)" >&2
  exit 1
}

counts=$(mktemp)
trap 'rm -f "$counts"' EXIT
# The highest block count of each profiled function, by its symbol name (a local function's
# profile name is "file;symbol").
"$PROFDATA" show --all-functions --counts "$PROFILE" | awk '
  /^  [^ ].*:$/ { name = substr($0, 3); sub(/:$/, "", name); n = split(name, part, ";"); name = part[n]; next }
  /Block counts:/ {
    s = $0; sub(/.*\[/, "", s); sub(/\].*/, "", s)
    k = split(s, v, ", "); max = 0
    for (i = 1; i <= k; i++) if (v[i] + 0 > max) max = v[i] + 0
    if (!(name in c) || max > c[name]) c[name] = max
    next
  }
  END { for (n in c) print c[n], n }' > "$counts"

# Functions of the binary: ran in training (by count, hottest first), then those the profile
# does not know; those it knows as never run are left out.
"$NM" --defined-only "$BIN" | awk '$2 ~ /^[tTW]$/ { print $3 }' | awk -v counts="$counts" '
  BEGIN { while ((getline line < counts) > 0) { split(line, f, " "); c[f[2]] = f[1] } }
  {
    base = $0; sub(/\.llvm\.[0-9]+$/, "", base); sub(/\.[0-9]+$/, "", base)
    if (base in c) { if (c[base] > 0) print c[base], $0 }
    else print -1, $0
  }' | sort -k1,1nr -k2,2 -s | awk '!seen[$2]++ { print $2 }'
