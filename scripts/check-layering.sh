#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# check-layering.sh [SOURCE_DIR]: checks the layering of docs/architecture.md
# ("Layers and rooms") over the source tree and exits 1 with one line per
# violation:
#   1. every `#include "..."` of a library folder names a header of a folder
#      that folder may use (the table below: the layers point one way, so no
#      include or call circle spans two folders);
#   2. codegen/cpu and codegen/nvptx never include each other; in codegen/,
#      x86 feature names and intrinsics appear only under codegen/cpu, PTX
#      instructions and NVVM intrinsics only under codegen/nvptx;
#   3. runtime/ (what every AOT executable links) uses no zlib and no
#      training-loop I/O;
#   4. with CC set (CI sets it), every header compiles on its own.
# tests/, bench/ and samples/ are not layers and are not checked.
set -u
src=$(cd "${1:-$(dirname "$0")/..}" && pwd)
cd "$src"
fails=0
fail() { echo "layering: $*"; fails=$((fails + 1)); }

# folder: the folders its files may include from (besides its own)
allowed() {
  case $1 in
  include) echo "" ;;
  util) echo "" ;;
  formats) echo "util" ;;
  ir) echo "util" ;;
  runtime) echo "util" ;;
  runtime/aot) echo "util formats runtime" ;;
  train) echo "util formats runtime" ;;
  frontend) echo "util formats ir frontend/cast frontend/keras frontend/onnx" ;;
  frontend/cast) echo "util formats ir frontend" ;;
  frontend/keras) echo "util formats ir frontend" ;;
  frontend/onnx) echo "util formats ir frontend" ;;
  passes) echo "util ir" ;;
  codegen) echo "util ir runtime" ;;
  codegen/kernel) echo "util ir runtime codegen" ;;
  codegen/cpu) echo "util ir runtime runtime/aot codegen codegen/kernel codegen/cpu/gemm" ;;
  codegen/cpu/gemm) echo "util ir runtime codegen codegen/kernel" ;;
  codegen/nvptx) echo "util ir runtime codegen codegen/kernel" ;;
  api) echo "include util formats ir frontend passes codegen runtime api/check" ;;
  api/check) echo "include util formats ir frontend passes codegen runtime api" ;;
  tools) echo "include util formats ir passes runtime train api" ;;
  *) echo "?" ;;
  esac
}

layers="include util formats ir runtime runtime/aot train frontend frontend/cast frontend/keras frontend/onnx passes codegen codegen/kernel
        codegen/cpu codegen/cpu/gemm codegen/nvptx api api/check tools"

for dir in $layers; do
  [ -d "$dir" ] || continue
  ok=" $dir $(allowed "$dir") "
  for f in "$dir"/*.c "$dir"/*.h "$dir"/*.def; do
    [ -f "$f" ] || continue
    # `#include "path"` lines; path is rooted at the source tree ("castor.h" is include/)
    grep -n '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' "$f" | while IFS= read -r line; do
      n=${line%%:*}
      inc=$(printf '%s\n' "$line" | sed 's/^[^"]*"\([^"]*\)".*/\1/')
      case $inc in
      castor.h) incdir=include ;;
      */*) incdir=${inc%/*} ;;
      *) incdir=$dir ;; # a bare name: a sibling
      esac
      if [ "$incdir" != "$dir" ] && [ ! -f "$inc" ] && [ "$inc" != castor.h ]; then
        echo "layering: $f:$n: includes \"$inc\", which is not a file of the source tree (write includes from the tree's root)"
        continue
      fi
      case $ok in
      *" $incdir "*) ;;
      *) echo "layering: $f:$n: $dir/ may not include \"$inc\" ($incdir/ is not below it; $dir/ may use: $(allowed "$dir"))" ;;
      esac
    done
  done
done >"${TMPDIR:-/tmp}/layering.$$"
if [ -s "${TMPDIR:-/tmp}/layering.$$" ]; then
  cat "${TMPDIR:-/tmp}/layering.$$"
  fails=$((fails + $(wc -l <"${TMPDIR:-/tmp}/layering.$$")))
fi
rm -f "${TMPDIR:-/tmp}/layering.$$"

# 2. target words in codegen/: x86 only in cpu/, PTX only in nvptx/
for f in $(find codegen -name '*.[ch]' -o -name '*.def' | sort); do
  case $f in
  codegen/cpu/*) ;;
  *) grep -nE '"[+-]?(avx|sse[0-9]|amx|fma|f16c)|llvm\.x86\.|cg_cpu_caps' "$f" | sed "s|^|layering: $f:|; s|\$| (x86 features belong in codegen/cpu/)|" ;;
  esac
  case $f in
  codegen/nvptx/*) ;;
  *) grep -nE 'ptx_kernel|llvm\.nvvm\.|mma\.sync|ldmatrix|cp\.async|nvptx64' "$f" | sed "s|^|layering: $f:|; s|\$| (PTX belongs in codegen/nvptx/)|" ;;
  esac
done >"${TMPDIR:-/tmp}/layering.$$"
if [ -s "${TMPDIR:-/tmp}/layering.$$" ]; then
  cat "${TMPDIR:-/tmp}/layering.$$"
  fails=$((fails + $(wc -l <"${TMPDIR:-/tmp}/layering.$$")))
fi
rm -f "${TMPDIR:-/tmp}/layering.$$"

# 3. the runtime is what a compiled program executes
if grep -nE '#[[:space:]]*include[[:space:]]*<zlib\.h>|gzopen|inflate' runtime/*.c runtime/*.h runtime/aot/*.c 2>/dev/null; then
  fail "runtime/ uses zlib (datasets and gzip belong in train/)"
fi

# 4. every header compiles on its own
if [ -n "${CC:-}" ]; then
  llvm_inc=$(llvm-config-19 --includedir 2>/dev/null || echo /usr/lib/llvm-19/include)
  tmp=$(mktemp -d "${TMPDIR:-/tmp}/castor-layering.XXXXXX")
  for dir in $layers; do
    for h in "$dir"/*.h; do
      [ -f "$h" ] || continue
      case $h in include/*) rel=${h#include/} ;; *) rel=$h ;; esac
      printf '#include "%s"\n#include "%s"\n' "$rel" "$rel" >"$tmp/one.c"
      if ! $CC -std=c11 -D_GNU_SOURCE -fsyntax-only -Wall -Wextra -Wpedantic -Werror -I. -Iinclude \
          -isystem "$llvm_inc" "$tmp/one.c" >"$tmp/err" 2>&1; then
        fail "$h does not compile on its own (or twice):"
        head -n 5 "$tmp/err"
      fi
    done
  done
  rm -rf "$tmp"
fi

if [ "$fails" -gt 0 ]; then
  echo "layering: $fails problem(s); the rules are in docs/architecture.md"
  exit 1
fi
echo "layering: ok"
