#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# aot_cpu_check.sh BUILD_DIR MODEL.cast
#
# An executable checks the CPU before its first kernel: compiled for the
# AVX512-BF16 GEMM family (--cpu znver4) and run on a CPU without AVX-512
# (QEMU's user-mode emulator as an AVX2 AMD EPYC Milan, the CPU of
# tests/emulated-cpu.sh), it exits with status 1 and one clear error,
# never SIGILL (status 132); the same model compiled for x86-64-v3 runs
# there and prints what it prints natively. Skipped (77) without
# qemu-x86_64 (apt-get install qemu-user).
set -eu
bin=$(cd "$1" && pwd)
model=$(cd "$(dirname "$2")" && pwd)/$(basename "$2")
castor=$bin/castor
command -v qemu-x86_64 >/dev/null 2>&1 || { echo "aot_cpu_check: skipped: no qemu-x86_64 (apt-get install qemu-user)"; exit 77; }
# a sanitizer build links its executables with ASan, whose shadow memory QEMU's
# user mode cannot map (the run is killed): the release build covers this check
case "${CASTOR_TEST_LDFLAGS:-}" in
*-fsanitize*) echo "aot_cpu_check: skipped: sanitizer-linked executables do not run under qemu-x86_64 (the release build runs this test)"; exit 77 ;;
esac
# EPYC Milan less the CPUID bits QEMU's TCG cannot emulate (as in tests/emulated-cpu.sh)
qcpu="EPYC-Milan,-pcid,-invpcid,-rdseed,-sha-ni,-rdpid,-fsrm,-fxsr-opt,-misalignsse,-3dnowprefetch,-osvw,-topoext,-perfctr-core,-clzero,-xsaveerptr,-wbnoinvd,-ibpb,-ibrs,-amd-stibp,-amd-ssbd,-nrip-save,-xsavec,-xsaves"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/castor-aot-cpu.XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM
cd "$tmp"
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }

"$castor" build "$model" --policy mixed_bfloat16 --cpu znver4 -o bf16 || { echo "FAIL: castor build --cpu znver4" >&2; exit 1; }
"$castor" build "$model" --policy mixed_bfloat16 --cpu x86-64-v3 -o avx2 || { echo "FAIL: castor build --cpu x86-64-v3" >&2; exit 1; }

rc=0
qemu-x86_64 -cpu "$qcpu" ./bf16 --batch 3 >out.txt 2>err.txt || rc=$?
[ "$rc" = 1 ] || fail "bf16 executable on an AVX2 CPU: exit status $rc, want 1 (132 is SIGILL)"
want="bf16: error: this CPU lacks avx512f, which this executable's kernels use ("
case $(cat err.txt) in
"$want"*"cpu znver4): build it for this CPU (castor build --cpu=NAME, e.g. x86-64-v3)") ;;
*) fail "bf16 executable on an AVX2 CPU: stderr
  expected: $want...cpu znver4): build it for this CPU (castor build --cpu=NAME, e.g. x86-64-v3)
  got:      $(cat err.txt)" ;;
esac
[ ! -s out.txt ] || fail "bf16 executable on an AVX2 CPU printed output: $(cat out.txt)"

# the AVX2 build runs on both, with the same output
./avx2 --batch 3 >native.txt || fail "avx2 executable natively"
qemu-x86_64 -cpu "$qcpu" ./avx2 --batch 3 >emulated.txt 2>emulated.err || fail "avx2 executable on an AVX2 CPU: $(cat emulated.err)"
cmp -s native.txt emulated.txt || fail "avx2 executable: output differs under emulation"
# and the bf16 build runs where the host has the family
if ./bf16 --batch 3 >bf16.txt 2>bf16.err; then
  echo "aot_cpu_check: the bf16 build runs on this host"
elif grep -q "this CPU lacks" bf16.err; then
  echo "aot_cpu_check: this host lacks the bf16 family too: $(cat bf16.err)"
else
  fail "bf16 executable natively: $(cat bf16.err)"
fi

[ "$fails" = 0 ] || { echo "aot_cpu_check: $fails failure(s)" >&2; exit 1; }
echo "aot_cpu_check: ok"
