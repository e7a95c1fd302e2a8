/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_support.h: what every Check suite shares (tests/unit/test_support.c,
 * linked into each check_* executable).
 */
#ifndef CASTOR_TEST_SUPPORT_H
#define CASTOR_TEST_SUPPORT_H

#include <check.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "castor.h"

/* Runs every test of s (forking per test, CK_NORMAL output ending with
 * Check's summary line) and returns the process exit status: 0 when all
 * passed. nofork: run in the process (one CUDA context for all tests). */
int check_run(Suite *s);
int check_run_nofork(Suite *s);

/* For the suites that run once per CPU code path (ctest entries
 * NAME@CPU with $CASTOR_CPU set, tests/CMakeLists.txt): prints the path
 * the JIT compiles for on stderr, "SUITE: CPU path x86-64-v3 (...)", and
 * exits 77 (ctest: skipped) with the reason when this host cannot run it. */
void check_cpu_path(const char *suite);

/* The emulated CPU's short form (tests/emulated-cpu.sh sets
 * CASTOR_TEST_STRIDE=N; QEMU runs a suite about 20x slower) runs one in N
 * of the cases of the long sweeps that ask: case k (a counter over the
 * sweep, cases and dtypes together) runs when k % N == (k / N) % N: one in
 * N, the offset turning so that every inner loop's values get their turn
 * (N = 2: 0, 3, 4, 7, 8, ...). Unset (every
 * native run, and the emulated long form): every case runs. */
bool test_case_runs(size_t k);

/* max |got - want| over max |want| (1 when want is all zeros), the
 * imported-model suites' error measure. */
double test_rel_max_err(const float *got, const float *want, int64_t n);
/* tests/onnx/models/NAME (.npy) as a tensor; fails the test if it cannot. */
castor_tensor *test_load_onnx_npy(castor_context *ctx, const char *name);
/* The first rows rows of x, a new tensor. */
castor_tensor *test_first_rows(castor_context *ctx, const castor_tensor *x, int64_t rows);

#endif
