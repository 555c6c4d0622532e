#!/usr/bin/env bash
# Provides what the arm64 build and its smoke test need on an amd64 machine and prints the
# directory holding them: `aarch64-linux-gnu-gcc` (Debian's cross compiler, a wrapper that
# points it at its unpacked sysroot: ring's C and the final link), `aarch64-linux-gnu-ar`,
# `qemu-aarch64-static` (runs the arm64 binary), and `sysroot/` (the cross libc). Debian's
# packages at the versions test/image/versions.env pins, unpacked into
# ~/.cache/lws-rollout/cross-aarch64-<gcc version>/ — not installed. Seconds when warm.
#
#   test/tools/build-cross-aarch64.sh
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
. "$REPO/test/image/lib.sh"
die() { echo "lws-rollout cross-aarch64: $*" >&2; exit 1; }
CACHE_ROOT="${LWS_ROLLOUT_CACHE:-$HOME/.cache/lws-rollout}"
DIR="$CACHE_ROOT/cross-aarch64-$DEB_CROSS_GCC_VERSION"
STAMP="$DIR/.complete"
if [ -f "$STAMP" ]; then echo "$DIR"; exit 0; fi
command -v apt-get >/dev/null 2>&1 || die "no apt-get to fetch Debian's cross toolchain"
mkdir -p "$DIR"
exec 9>"$DIR/.lock"
flock 9
if [ -f "$STAMP" ]; then echo "$DIR"; exit 0; fi

DEBS=()
add() { DEBS+=("$(deb_fetch "$1" "$2" "$3" "$DIR/debs")") || die "cannot fetch $1=$2"; }
add gcc-12-aarch64-linux-gnu "$DEB_CROSS_GCC_VERSION" amd64
add cpp-12-aarch64-linux-gnu "$DEB_CROSS_GCC_VERSION" amd64
add binutils-aarch64-linux-gnu "$DEB_CROSS_BINUTILS_VERSION" amd64
add libgcc-12-dev-arm64-cross "$DEB_CROSS_GCC_VERSION" all
add libgcc-s1-arm64-cross "$DEB_CROSS_GCC_VERSION" all
add libc6-arm64-cross "$DEB_CROSS_LIBC_VERSION" all
add libc6-dev-arm64-cross "$DEB_CROSS_LIBC_VERSION" all
add linux-libc-dev-arm64-cross "$DEB_CROSS_LINUX_VERSION" all
add qemu-user-static "$DEB_QEMU_USER_STATIC_VERSION" amd64
rm -rf "$DIR/sysroot"
deb_unpack "$DIR/sysroot" "${DEBS[@]}"

# The compiler finds its own parts relative to itself; its libc and the libc's linker scripts
# name absolute /usr/aarch64-linux-gnu paths, which --sysroot re-roots; binutils' shared
# libraries sit beside the host's, which the loader is told.
cat >"$DIR/aarch64-linux-gnu-gcc" <<WRAP
#!/bin/sh
LD_LIBRARY_PATH="$DIR/sysroot/usr/lib/x86_64-linux-gnu\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}" \\
  exec "$DIR/sysroot/usr/bin/aarch64-linux-gnu-gcc-12" --sysroot="$DIR/sysroot" "\$@"
WRAP
cat >"$DIR/aarch64-linux-gnu-ar" <<WRAP
#!/bin/sh
LD_LIBRARY_PATH="$DIR/sysroot/usr/lib/x86_64-linux-gnu\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}" \\
  exec "$DIR/sysroot/usr/bin/aarch64-linux-gnu-ar" "\$@"
WRAP
ln -sf "$DIR/sysroot/usr/bin/qemu-aarch64-static" "$DIR/qemu-aarch64-static"
chmod +x "$DIR/aarch64-linux-gnu-gcc" "$DIR/aarch64-linux-gnu-ar"

# A smoke test: a C program, compiled, linked and run under qemu.
printf '#include <stdio.h>\nint main(void){puts("ok");return 0;}\n' >"$DIR/smoke.c"
"$DIR/aarch64-linux-gnu-gcc" -o "$DIR/smoke" "$DIR/smoke.c" || die "the cross compiler does not build a C program"
[ "$("$DIR/qemu-aarch64-static" -L "$DIR/sysroot/usr/aarch64-linux-gnu" "$DIR/smoke")" = ok ] \
  || die "qemu-aarch64-static does not run an arm64 program here"
rm -rf "$DIR/debs"
touch "$STAMP"
echo "$DIR"
