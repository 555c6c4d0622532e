# Debian packages for the image scripts: fetched by pinned version, unpacked, never installed
# (no service set up, nothing outside the cache touched). Sourced, not executed.
# shellcheck shell=bash

IMAGE_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=versions.env
. "$IMAGE_DIR/versions.env"

# deb_fetch NAME VERSION ARCH DIR: NAME=VERSION of ARCH (amd64, arm64 or all) into DIR; prints
# the file's path. The URL comes from apt's own lists (so apt's mirror and its proxy settings
# hold); another architecture's package is the same pool path with its own suffix, which apt
# does not list unless the machine is set up for that architecture.
deb_fetch() {
  local name=$1 version=$2 arch=$3 dir=$4 line uri sum file
  mkdir -p "$dir"
  line=$(apt-get download --print-uris "$name=$version" 2>/dev/null | head -n1)
  if [ -z "$line" ]; then
    # A fresh machine has no package lists yet.
    apt-get update >/dev/null 2>&1 || true
    line=$(apt-get download --print-uris "$name=$version" 2>/dev/null | head -n1)
  fi
  [ -n "$line" ] || { echo "lws-rollout image: Debian's $name=$version is not in apt's lists" >&2; return 1; }
  uri=$(echo "$line" | sed -n "s/^'\([^']*\)'.*/\1/p")
  sum=$(echo "$line" | sed -n 's/.* SHA256:\([0-9a-f]*\).*/\1/p')
  case "$uri" in
    *_all.deb|*_"$arch".deb) ;;
    # Only the listed architecture's checksum is known; the other's file is checked by size > 0.
    *) uri="${uri%_*.deb}_$arch.deb"; sum="" ;;
  esac
  file="$dir/$(basename "$uri" | sed 's/%2[bB]/+/g; s/%3[aA]/:/g')"
  if [ ! -s "$file" ]; then
    curl -fsSL --retry 3 -o "$file.part" "$uri" \
      || { echo "lws-rollout image: cannot download $uri" >&2; return 1; }
    if [ -n "$sum" ] && ! echo "$sum  $file.part" | sha256sum -c --quiet - >/dev/null 2>&1; then
      rm -f "$file.part"; echo "lws-rollout image: $uri does not match apt's checksum" >&2; return 1
    fi
    mv "$file.part" "$file"
  fi
  echo "$file"
}

# deb_unpack DIR FILE...: the packages' files under DIR.
deb_unpack() {
  local dir=$1; shift
  mkdir -p "$dir"
  local f
  for f in "$@"; do dpkg-deb -x "$f" "$dir"; done
}
