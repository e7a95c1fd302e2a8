#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# aot_exe.sh BUILD_DIR MODEL.cast full|quick
#
# `castor build` of MODEL into an executable: its outputs are bit-identical
# to `castor run`'s (random and .npy inputs, several batches and threads),
# it links no LLVM, and (full) its errors, --help and every --emit kind
# are exactly as documented.
set -eu
bin=$(cd "$1" && pwd)
model=$(cd "$(dirname "$2")" && pwd)/$(basename "$2")
mode=$3
castor=$bin/castor
mk=$bin/tests/aot_make_npy
name=$(basename "$model" .cast)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/castor-aot-test.XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM
cd "$tmp"
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }

# expect_err "exact stderr" command...: exit status 1 and exactly that message
expect_err() {
  want=$1
  shift
  if "$@" >out.txt 2>err.txt; then
    fail "succeeded, expected an error: $*"
    return
  fi
  got=$(cat err.txt)
  [ "$got" = "$want" ] || fail "$*
  expected: $want
  got:      $got"
}

"$castor" build "$model" -o "$name" || { echo "FAIL: castor build" >&2; exit 1; }
[ -x "$name" ] || fail "no executable $name"

# no LLVM at run time
if ldd "./$name" | grep -i llvm; then fail "$name links LLVM"; fi
if ldd "./$name" | grep -E "libz\.so"; then fail "$name links zlib (datasets are train/, not the runtime)"; fi
# ... and it runs with LLVM hidden from the loader: in a private mount
# namespace every libLLVM on the machine is covered by an empty file and
# /usr/lib/llvm-* by empty directories (needs root and unshare; skipped
# with a note otherwise)
if [ "$(id -u)" = 0 ] && command -v unshare >/dev/null 2>&1 && unshare -m true 2>/dev/null; then
  "$castor" run "$model" --batch 2 --seed 3 --output jit_hidden.npy >/dev/null
  : >empty
  if unshare -m sh -c '
      for d in /usr/lib/llvm-*; do [ -d "$d" ] && mount -t tmpfs none "$d"; done
      for f in /usr/lib/*/libLLVM*.so* /usr/lib/llvm-*/lib/libLLVM*.so*; do
        [ -f "$f" ] && mount --bind "$PWD/empty" "$f" 2>/dev/null
      done
      if ls /usr/lib/llvm-19/lib/libLLVM* >/dev/null 2>&1; then echo "LLVM still visible" >&2; exit 2; fi
      exec "./'"$name"'" --batch 2 --seed 3 --output aot_hidden.npy' >hidden.txt 2>&1; then
    cmp jit_hidden.npy aot_hidden.npy || fail "with LLVM hidden: outputs differ"
  else
    fail "$name does not run with LLVM hidden from the loader: $(cat hidden.txt)"
  fi
else
  echo "note: not root or no unshare: skipped running $name with LLVM hidden" >&2
fi

# random inputs: same seed, same summary lines and outputs as castor run
for batch in 1 3; do
  "$castor" run "$model" --batch $batch --seed 7 --output jit.npy >jit.txt
  "./$name" --batch $batch --seed 7 --output aot.npy >aot.txt
  cmp jit.npy aot.npy || fail "random batch $batch: outputs differ"
  cmp jit.txt aot.txt || fail "random batch $batch: summaries differ: $(cat jit.txt) / $(cat aot.txt)"
done

# .npy inputs, f32 and f16 (converted on the way in), several thread counts
"$mk" x.npy f32 3 5 784
"$mk" x16.npy f16 4 2 784
for x in x.npy x16.npy; do
  "$castor" run "$model" --input $x --output jit.npy >jit.txt
  for t in 1 2 3; do
    "./$name" --input $x --output aot.npy --threads $t >aot.txt
    cmp jit.npy aot.npy || fail "$x, $t threads: outputs differ"
    cmp jit.txt aot.txt || fail "$x, $t threads: summaries differ"
  done
done

if [ "$mode" = full ]; then
  # --help describes the inputs and outputs
  "./$name" --help >help.txt || fail "--help failed"
  grep -q "^  digits  *f32\[N,784\]$" help.txt || fail "--help lacks the input: $(cat help.txt)"
  grep -q "^  predictions  *f32\[N,10\]$" help.txt || fail "--help lacks the output"

  # input errors, exactly
  "$mk" x783.npy f32 1 4 783
  "$mk" xi.npy i32 1 4 784
  "$mk" x1.npy f32 1 784
  head -c 100 x.npy >trunc.npy
  head -c 5000 x.npy >short.npy
  expect_err "nope.npy: error: cannot open: No such file or directory" "./$name" --input nope.npy
  expect_err "x783.npy: error: input 'digits' expects f32[N,784], got f32[4,783]" "./$name" --input x783.npy
  expect_err "xi.npy: error: input 'digits' expects f32[N,784], got i32[4,784]" "./$name" --input xi.npy
  expect_err "x1.npy: error: input 'digits' expects f32[N,784], got f32[784]" "./$name" --input x1.npy
  expect_err "trunc.npy: error: truncated .npy header: it declares 118 bytes, the file has 90" "./$name" --input trunc.npy
  expect_err "short.npy: error: truncated .npy 'short.npy': shape (5, 784) needs 15680 bytes of data, file has 4872" "./$name" --input short.npy
  expect_err "$name: error: model 'mnist_mlp_small' has 1 input(s), got 2 --input file(s)" \
    "./$name" --input x.npy --input x.npy
  expect_err "$name: error: --batch 2 does not match the batch of the --input files (5)" \
    "./$name" --input x.npy --batch 2
  expect_err "$name: error: --threads needs an integer from 1 to 1024, got '0'" "./$name" --threads 0
  expect_err "$name: error: unknown option '--bogus' (see $name --help)" "./$name" --bogus
  expect_err "no-such-dir/y.npy: error: cannot open for writing: No such file or directory" \
    "./$name" --input x.npy --output no-such-dir/y.npy

  # every --emit kind
  "$castor" build "$model" --emit=ir >ir.txt
  "$castor" dump "$model" >dump.txt
  cmp ir.txt dump.txt || fail "--emit=ir differs from castor dump"
  "$castor" build "$model" --emit=llvm -o m.ll
  grep -q "^define i32 @${name}_run(ptr readonly %digits, ptr %predictions, i64 %batch, ptr %scratch)" m.ll ||
    fail "--emit=llvm: no ${name}_run"
  grep -q "castor_aot_entry" m.ll && fail "--emit=llvm: an object for linking has no entry"
  # the object's kernels are the JIT's optimized LLVM IR, function for function
  "$castor" dump "$model" --emit=llvm >jit.ll
  awk '/^define/{f=1} f{print} /^}/{f=0}' jit.ll | sed 's/^define internal /define /' >jit.fn
  awk '/^define/ && !/_run\(|_scratch_bytes\(/{f=1} f{print} /^}/{f=0}' m.ll | sed 's/^define internal /define /' >aot.fn
  [ -s jit.fn ] && cmp jit.fn aot.fn || fail "--emit=llvm kernels differ from the JIT's"
  "$castor" build "$model" --emit=asm -o m.s
  grep -q "^${name}_run:" m.s || fail "--emit=asm: no ${name}_run"
  "$castor" build "$model" --emit=obj -o sub.o --prefix=my_model
  [ -f sub.o ] && [ -f sub.h ] || fail "--emit=obj: no sub.o + sub.h"
  nm --defined-only -g sub.o | awk '{print $3}' | sort >syms.txt
  printf 'my_model_run\nmy_model_scratch_bytes\n' | cmp - syms.txt || fail "--emit=obj exports: $(cat syms.txt)"
  grep -q "int my_model_run(const float \*digits, float \*predictions, int64_t batch, void \*scratch);" sub.h ||
    fail "sub.h: no run function"
  printf '#include "sub.h"\nint main(void) { return MY_MODEL_DIGITS_ROW_ELEMS != 784 || my_model_scratch_bytes(0) != -1; }\n' >use.c
  cc -std=c11 -Wall -Wextra -Werror -pedantic -c use.c || fail "sub.h does not compile"
  if command -v c++ >/dev/null 2>&1; then
    cp use.c use.cc && c++ -Wall -Werror -c use.cc || fail "sub.h does not compile as C++"
  fi

  # command errors, exactly
  expect_err "castor: error: --emit=ptx needs --target=cuda" \
    "$castor" build "$model" --emit=ptx
  expect_err "castor: error: --emit takes exe, obj, ir, llvm, asm or ptx, got 'elf'" "$castor" build "$model" --emit=elf
  expect_err "castor: error: cannot write 'no-such-dir/m': No such file or directory" \
    "$castor" build "$model" -o no-such-dir/m
  expect_err "castor: error: cannot write '.': it is a directory" "$castor" build "$model" -o .
  expect_err "castor: error: --prefix '2x' is not a usable C identifier (try 'm_2x')" \
    "$castor" build "$model" --emit=obj -o p.o --prefix=2x
  expect_err "castor: error: cannot run the C compiler 'no-such-cc': No such file or directory (install one, or set \$CC)" \
    env CC=no-such-cc "$castor" build "$model" -o m2
  [ -e m2 ] && fail "a failed link left m2 behind"
  expect_err "castor: error: cannot read model file 'missing.cast': No such file or directory" "$castor" build missing.cast
fi

# the temporary object is gone
ls "${TMPDIR:-/tmp}" | grep -q "^castor-build-" && echo "note: castor-build-* temporaries exist in ${TMPDIR:-/tmp} (maybe a parallel run)"
[ $fails -eq 0 ] || { echo "$fails failure(s)" >&2; exit 1; }
echo "aot_exe $name ($mode): ok"
