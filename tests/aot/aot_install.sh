#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# aot_install.sh BUILD_DIR SOURCE_DIR
#
# `cmake --install` into a temporary prefix, then: libcastor.so exports
# only castor_* symbols; samples/host.c builds against the install through
# pkg-config and through find_package(castor) and runs, bit-identical to
# castor run; the installed castor builds an executable and an object with
# the AOT runtime it finds next to itself; the Python module imports from
# the prefix and runs the model.
set -eu
bin=$(cd "$1" && pwd)
src=$(cd "$2" && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/castor-aot-test.XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM
cd "$tmp"
fail() { echo "FAIL: $*" >&2; exit 1; }
if [ -n "${CASTOR_TEST_LDFLAGS:-}" ]; then
  echo "skipped: a sanitizer build installs sanitized libraries that plain consumers cannot link"
  exit 77
fi
model=$src/samples/mnist_mlp_small.cast
prefix=$tmp/prefix

cmake --install "$bin" --prefix "$prefix" >install.log || { cat install.log; fail "cmake --install"; }
libdir=$(ls -d "$prefix"/lib*/libcastor.so | head -1 | xargs dirname)
for f in bin/castor include/castor.h; do [ -e "$prefix/$f" ] || fail "not installed: $f"; done
for f in libcastor.a pkgconfig/castor.pc pkgconfig/castor-runtime.pc cmake/castor/castorConfig.cmake \
         castor/libcastor_aot_main.a castor/libcastor_formats.a castor/libcastor_runtime.a castor/libcastor_util.a; do
  [ -e "$libdir/$f" ] || fail "not installed: $libdir/$f"
done
other=$(nm -D --defined-only "$libdir/libcastor.so" | awk '$2 ~ /[TDBR]/ {print $3}' | grep -v '^castor_' | grep -vxE '_init|_fini|__bss_start|_edata|_end' || true)
[ -z "$other" ] || fail "libcastor.so exports more than castor_*: $other"

"$bin/tests/aot_make_npy" x.npy f32 5 3 784
"$bin/castor" run "$model" --input x.npy --output ref.npy >/dev/null

# pkg-config
export PKG_CONFIG_PATH="$libdir/pkgconfig"
# shellcheck disable=SC2046
${CC:-cc} "$src/samples/host.c" $(pkg-config --cflags castor) -o host_pc $(pkg-config --libs castor) \
  -Wl,-rpath,"$libdir" || fail "building host.c through pkg-config"
./host_pc "$model" x.npy y_pc.npy >/dev/null || fail "host_pc"
cmp y_pc.npy ref.npy || fail "host_pc output differs from castor run"

# find_package(castor)
cmake -S "$src/tests/aot/find_package" -B fp -DCMAKE_PREFIX_PATH="$prefix" -DCASTOR_SAMPLE="$src/samples/host.c" \
  -DCMAKE_BUILD_RPATH="$libdir" >fp.log || { cat fp.log; fail "find_package(castor) configure"; }
cmake --build fp >>fp.log 2>&1 || { cat fp.log; fail "find_package(castor) build"; }
for h in host_shared host_static; do
  "fp/$h" "$model" x.npy "y_$h.npy" >/dev/null || fail "$h"
  cmp "y_$h.npy" ref.npy || fail "$h output differs from castor run"
done
ldd fp/host_shared | grep -q "$libdir/libcastor.so" || fail "host_shared does not use the installed libcastor.so"

# the installed castor finds its AOT runtime next to itself
"$prefix/bin/castor" build "$model" -o m || fail "installed castor build"
./m --input x.npy --output y_m.npy >/dev/null && cmp y_m.npy ref.npy || fail "installed build: output differs"
"$prefix/bin/castor" build "$model" --emit=obj -o m.o || fail "installed castor build --emit=obj"
grep -q -- "-L$libdir/castor " m.h || fail "m.h does not link from $libdir/castor: $(grep -- -L m.h)"
# shellcheck disable=SC2046
${CC:-cc} -I. -x c - -x none m.o $(pkg-config --libs castor-runtime) -o m_obj <<'C' || fail "linking through castor-runtime.pc"
#include "m.h"
int main(void) { return mnist_mlp_small_scratch_bytes(1) <= 0; }
C
./m_obj || fail "m_obj"

# the Python module: installed beside the library, it finds the installed
# libcastor.so through its _config.py (no CASTOR_LIB) and runs the model
# bit-identically to castor run (Debian's python3-numpy; skipped without)
pkg=$(find "$prefix" -path '*/castor/_config.py' | head -1)
[ -n "$pkg" ] || fail "the Python package is not installed"
if /usr/bin/python3 -c "import numpy" 2>/dev/null; then
  site=$(dirname "$(dirname "$pkg")")
  CASTOR_LIB= PYTHONPATH="$site" /usr/bin/python3 - "$model" "$prefix" <<'PY' || fail "the installed Python module"
import sys, numpy as np, castor
model, prefix = sys.argv[1], sys.argv[2]
assert castor.LIBRARY_PATH.startswith(prefix), castor.LIBRARY_PATH
y = castor.compile(model)(np.load("x.npy"))
assert np.array_equal(y, np.load("ref.npy")), "output differs from castor run"
PY
else
  echo "aot_install: python3-numpy not installed; the Python module's import is not checked"
fi
echo "aot_install: ok"
