#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# aot_amx_check.sh BUILD_DIR MODEL.cast
#
# An executable of the AMX-BF16 GEMM family (--cpu sapphirerapids-amx)
# checks the CPU and asks Linux for the tile state before its first
# kernel: on a host without AMX it exits with status 1 and one clear error
# (never SIGILL, 132); on an AMX host, with the request refused
# (CASTOR_AMX_DENY=1) likewise, and granted it runs. The executable is
# built and its start-up checked on every x86-64 host; the run itself only
# on an AMX host (none has run it yet: docs/numerics.md).
set -eu
bin=$(cd "$1" && pwd)
model=$(cd "$(dirname "$2")" && pwd)/$(basename "$2")
castor=$bin/castor
case $(uname -m) in x86_64) ;; *) echo "aot_amx_check: skipped: not an x86-64 host"; exit 77 ;; esac
tmp=$(mktemp -d "${TMPDIR:-/tmp}/castor-aot-amx.XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM
cd "$tmp"
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }

"$castor" build "$model" --policy mixed_bfloat16 --cpu sapphirerapids-amx -o amx || { echo "FAIL: castor build --cpu sapphirerapids-amx" >&2; exit 1; }
"$castor" build "$model" --policy mixed_bfloat16 --cpu sapphirerapids-amx --emit=asm -o amx.s || { echo "FAIL: --emit=asm" >&2; exit 1; }
grep -q tdpbf16ps amx.s || fail "the executable's kernels have no tdpbf16ps"

rc=0
CASTOR_AMX_DENY=1 ./amx --batch 3 >out.txt 2>err.txt || rc=$?
[ "$rc" = 1 ] || fail "AMX executable with the tile state refused: exit status $rc, want 1 (132 is SIGILL)"
[ ! -s out.txt ] || fail "AMX executable with the tile state refused printed output: $(cat out.txt)"
case $(cat err.txt) in
"amx: error: this CPU lacks amx-"*", GEMM family amx-bf16): build it for this CPU (castor build --cpu=NAME, e.g. x86-64-v3)")
  no_amx=1 ;;
"amx: error: this executable's kernels use AMX tiles ("*"GEMM family amx-bf16), but the tile state request was refused on purpose (CASTOR_AMX_DENY=1): build it for another CPU (castor build --cpu=sapphirerapids runs the FMA family)")
  no_amx=0 ;;
*) fail "AMX executable with the tile state refused: stderr: $(cat err.txt)"; no_amx=1 ;;
esac

if [ "$no_amx" = 1 ]; then
  echo "aot_amx_check: this host has no AMX: the executable refused to start, as it should; its kernels were not run"
elif ./amx --batch 3 >run.txt 2>run.err; then
  echo "aot_amx_check: the AMX executable ran on this host: $(head -c 200 run.txt)"
else
  fail "AMX executable on an AMX host: $(cat run.err)"
fi
[ "$fails" = 0 ] || { echo "aot_amx_check: $fails failure(s)" >&2; exit 1; }
echo "aot_amx_check: ok"
