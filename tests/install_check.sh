#!/usr/bin/env bash
# Installs a build into a temporary prefix, then builds tests/install/consumer.c against
# the installed handgrad four ways, and runs each: pkg-config (shared, then static) and
# find_package (handgrad::handgrad, then handgrad::handgrad_static). A shared link must
# load libhandgrad.so from the prefix; a static one must not need it at all.
# usage: install_check.sh BUILD_DIR C_COMPILER
set -euo pipefail
build=$1 cc=$2
src=$(cd "$(dirname "$0")/install" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "install_check: $*" >&2; exit 1; }

prefix=$tmp/prefix
cmake --install "$build" --prefix "$prefix" >"$tmp/install.log" || { cat "$tmp/install.log"; fail "cmake --install failed"; }
pc=$(find "$prefix" -name handgrad.pc)
[ -n "$pc" ] || fail "no handgrad.pc under the prefix"
libdir=$(dirname "$(dirname "$pc")")
for f in include/handgrad.h include/handgrad_data.h include/handgrad_dist.h include/handgrad_ext.h bin/handgrad; do
  [ -f "$prefix/$f" ] || fail "the install lacks $f"
done
for f in libhandgrad.a libhandgrad.so cmake/handgrad/handgradConfig.cmake; do
  [ -e "$libdir/$f" ] || fail "the install lacks $libdir/$f"
done
# only the public API is exported from the shared library
extra=$(nm -D --defined-only "$libdir/libhandgrad.so" | awk '{print $3}' | grep -v '^hg_' | grep -v '^\.gomp_critical' || true)
[ -z "$extra" ] || fail "libhandgrad.so exports symbols outside the API: $(echo $extra | head -c 300)"
"$prefix/bin/handgrad" --help >/dev/null || fail "the installed handgrad command does not run"

# needs_lib EXE yes|no: whether EXE loads libhandgrad.so (from the prefix when yes)
needs_lib() {
  local found
  found=$(ldd "$1" | awk '/libhandgrad\.so/ {print $3}')
  if [ "$2" = yes ]; then
    [ "$(readlink -f "$found")" = "$(readlink -f "$libdir/libhandgrad.so")" ] || fail "$1 loads '$found', not the installed libhandgrad.so"
  else
    [ -z "$found" ] || fail "$1 is linked statically but loads $found"
  fi
}
run() { "$1" || fail "$1 failed"; }

export PKG_CONFIG_PATH=$libdir/pkgconfig
[ "$(pkg-config --modversion handgrad)" = "$("$prefix/bin/handgrad" --version | awk '{print $2}')" ] ||
  fail "pkg-config's version differs from the command's"
# shellcheck disable=SC2046
"$cc" -o "$tmp/pc_shared" "$src/consumer.c" $(pkg-config --cflags --libs handgrad) -lm -Wl,-rpath,"$libdir"
needs_lib "$tmp/pc_shared" yes
run "$tmp/pc_shared"
# shellcheck disable=SC2046
"$cc" -o "$tmp/pc_static" "$src/consumer.c" $(pkg-config --cflags handgrad) \
  $(pkg-config --static --libs handgrad | sed 's/-lhandgrad\b/-l:libhandgrad.a/') -lm
needs_lib "$tmp/pc_static" no
run "$tmp/pc_static"

for kind in shared static; do
  flag=OFF
  [ $kind = static ] && flag=ON
  cmake -S "$src" -B "$tmp/cm_$kind" -DCMAKE_C_COMPILER="$cc" -DCMAKE_PREFIX_PATH="$prefix" -DHG_STATIC=$flag \
    >"$tmp/cm_$kind.log" 2>&1 || { cat "$tmp/cm_$kind.log"; fail "find_package ($kind) failed"; }
  cmake --build "$tmp/cm_$kind" >>"$tmp/cm_$kind.log" 2>&1 || { cat "$tmp/cm_$kind.log"; fail "building against handgrad::handgrad ($kind) failed"; }
  needs_lib "$tmp/cm_$kind/consumer" $([ $kind = shared ] && echo yes || echo no)
  run "$tmp/cm_$kind/consumer"
done
echo "install_check: installed, and built and ran a program against it four ways"
