#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# tests/emulated-cpu.sh: the unit test suites on an emulated CPU that lacks
# this machine's newer instructions (by default an AVX2-only AMD EPYC Milan,
# Zen 3: AVX2, FMA, F16C, no AVX-512), under QEMU's user-mode emulator. From
# the repository root:
#
#   tests/emulated-cpu.sh [--long] [QEMU_CPU] [BUILD_DIR]    # EPYC-Milan build-emu-EPYC-Milan
#
# The short form (the default, which .ci/run runs) leaves out the suites
# tests/CMakeLists.txt labels `emulated-long` (whole samples, frontends,
# diagnostics, the cuda target: each named there with the reason its work
# is covered in the short form), and runs one in two cases of the long
# shape sweeps of check_conv, check_optable and check_rnn (every case runs
# natively, on every CPU path the host has); --long runs them all.
#
# Why: the JIT targets the host CPU, so a suite run on an AVX-512 machine
# exercises the AVX-512 host path (and, through CASTOR_CPU / NAME@x86-64-v3
# tests, the AVX2 and SSE kernels under a *named* CPU), but never the host
# detection of a lesser CPU. Under QEMU the process sees the emulated CPU's
# CPUID, so castor detects it as the host (check_gemm prints "CPU path host
# (LLVM cpu znver3): GEMM kernel avx"), and an AVX-512 instruction anywhere
# in the code would fault, because QEMU 7.2's TCG does not implement AVX-512.
#
# Configures BUILD_DIR with CMAKE_CROSSCOMPILING_EMULATOR, so that ctest runs
# every test program built by this project through qemu-x86_64 -cpu QEMU_CPU,
# builds it and runs the check_* suites, sample_train and the golden tests
# (whose castor and castor-opt are wrappers that run them through QEMU:
# tests/CMakeLists.txt). Left out: the NAME@x86-64-v3 and NAME@x86-64
# suites, whose named CPUs compile the same kernels on any host (the native
# suite runs them); check_cuda_emu and check_train_cuda, the PTX emulator
# (the latter against the CPU's step, which check_train runs here), whose
# work does not depend on the CPU path and which take too long under
# emulation; and the
# few tests driven by other shell scripts (AOT builds, DOT, PTX), which run
# natively. About 10-20x slower than native: on 2 cores the short form took
# 9.6 minutes (.ci/run on a clean clone, 2026-11-26) and 21 once the
# recurrent suites came (2026-11-29), before the sweeps were halved; the
# long form takes some 35.
# Installs qemu-user when run as root.
set -eu
LABEL_EXCLUDE="-LE emulated-long"
# the short form runs one in 2 cases of the long shape sweeps of check_conv,
# check_conv_group (one in 2 of its case and CPU path pairs), check_optable
# and check_rnn (test_case_runs, tests/unit/test_support.h)
CASTOR_TEST_STRIDE=2
if [ "${1:-}" = --long ]; then
  LABEL_EXCLUDE=
  CASTOR_TEST_STRIDE=1
  shift
fi
export CASTOR_TEST_STRIDE
CPU=${1:-EPYC-Milan}
BUILD=${2:-build-emu-$CPU}
QCPU=$CPU
# EPYC Milan without the CPUID bits QEMU's TCG cannot emulate (it would warn
# about each on every process's stderr, which the golden tests compare)
[ "$CPU" = EPYC-Milan ] && QCPU="EPYC-Milan,-pcid,-invpcid,-rdseed,-sha-ni,-rdpid,-fsrm,-fxsr-opt,-misalignsse,-3dnowprefetch,-osvw,-topoext,-perfctr-core,-clzero,-xsaveerptr,-wbnoinvd,-ibpb,-ibrs,-amd-stibp,-amd-ssbd,-nrip-save,-xsavec,-xsaves"
if ! command -v qemu-x86_64 >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q qemu-user >/dev/null
  else
    echo "tests/emulated-cpu.sh: qemu-x86_64 is missing (apt-get install qemu-user)" >&2
    exit 1
  fi
fi
cmake -S . -B "$BUILD" -DCASTOR_WERROR=ON "-DCMAKE_CROSSCOMPILING_EMULATOR=qemu-x86_64;-cpu;$QCPU" >/dev/null
cmake --build "$BUILD" -j2 >/dev/null
ctest --test-dir "$BUILD" -j2 -R '^check_|^sample_train|^golden_' -E 'check_cuda_emu|check_train_cuda|@x86-64' $LABEL_EXCLUDE --timeout 3000 --output-on-failure
