/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz.h: what the fuzz targets of tests/fuzz/ share. Each fuzz_<name>.c
 * defines LLVMFuzzerTestOneInput; built with clang's -fsanitize=fuzzer
 * (CASTOR_FUZZ=ON) it is a libFuzzer binary, built with replay_main.c it
 * is a plain program that runs the given files once each (the regression
 * inputs in tests/fuzz/regress/, run by ctest in every build).
 *
 * A target aborts (fuzz_fail) only on a broken invariant: a crash, a
 * sanitizer report or a leak is found by the tools themselves.
 */
#ifndef CASTOR_FUZZ_H
#define CASTOR_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Prints "fuzz: invariant broken: WHAT" and the detail, then aborts. */
static inline void fuzz_fail(const char *what, const char *detail) {
  fprintf(stderr, "fuzz: invariant broken: %s\n%s\n", what, detail ? detail : "");
  abort();
}

#endif
