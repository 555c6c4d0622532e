#!/usr/bin/env bash
# Regenerates vectors.v10.jsonl: upstream LWS v0.10.0's own revision code run over
# ../vectors.json (the same specs the v0.9.0 reference hashes). Not run by the suite, which
# reads the checked-in output.
#
# The Go module proxy serves sigs.k8s.io/lws v0.10.0's .info and .mod but refuses its zip
# (403 "This module version is not available"). Then the source is taken
# from a git repository of kubernetes-sigs/lws named by LWS_GIT (a .git directory or a bare
# repository holding the tag v0.10.0), and used only if the tag's commit is the one the
# proxy's .info names for v0.10.0.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
export GOTOOLCHAIN=local GOFLAGS=-mod=mod
cp "$here/main.go" "$here/go.mod" "$work/"
[ -f "$here/go.sum" ] && cp "$here/go.sum" "$work/"
if ! (cd "$work" && go mod download sigs.k8s.io/lws@v0.10.0 2>/dev/null); then
  if [ -z "${LWS_GIT:-}" ]; then
    echo "sigs.k8s.io/lws@v0.10.0 does not download here; set LWS_GIT to a git repository of kubernetes-sigs/lws" >&2
    exit 1
  fi
  proxy="$(go env GOPROXY | cut -d, -f1)"
  want="$(curl -fsS "$proxy/sigs.k8s.io/lws/@v/v0.10.0.info" | sed -n 's/.*"Hash":"\([0-9a-f]*\)".*/\1/p')"
  got="$(git --git-dir="$LWS_GIT" rev-parse 'v0.10.0^{commit}')"
  if [ -z "$want" ] || [ "$want" != "$got" ]; then
    echo "tag v0.10.0 in $LWS_GIT is $got, the module proxy names ${want:-nothing}" >&2
    exit 1
  fi
  mkdir "$work/lws"
  # Only what the import needs (a partial mirror may lack large files elsewhere, e.g. site/).
  git --git-dir="$LWS_GIT" archive v0.10.0 -- go.mod go.sum LICENSE api pkg test | tar -x -C "$work/lws"
  (cd "$work" && go mod edit -replace sigs.k8s.io/lws=./lws)
fi
(cd "$work" && go mod tidy && go build -o lwsref10 .)
"$work/lwsref10" hash "$here/../vectors.json" > "$here/vectors.v10.jsonl"
echo "wrote $here/vectors.v10.jsonl ($(wc -l < "$here/vectors.v10.jsonl") vectors)"
