/* SPDX-License-Identifier: Apache-2.0 */
/*
 * exec_values.h: the values the suites that run compiled programs share:
 * seeded inputs (splitmix64 in [-1, 1)), a tensor's element count at a
 * batch, and outputs of any float dtype read back as f32 (check_cuda,
 * and through exec_run.h check_cuda_emu and check_rnn_cuda). Static
 * functions: a suite includes it once.
 */
#ifndef CASTOR_TESTS_EXEC_VALUES_H
#define CASTOR_TESTS_EXEC_VALUES_H

#include <stdint.h>
#include <stdlib.h>

#include "runtime/runtime.h"
#include "util/half.h"
#include "util/util.h"

/* Seeded test values: splitmix64 mapped to [-1, 1), from rng_state. */
static uint64_t rng_state;
static float rng_f32(void) { /* splitmix64 -> [-1, 1) */
  uint64_t z = (rng_state += 0x9e3779b97f4a7c15u);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
  z ^= z >> 31;
  return (float)((double)(z >> 40) / (double)(1 << 23) - 1.0);
}

/* The elements of t with the batch dimension at `batch`. */
static int64_t numel(const rt_tensor_desc *t, int64_t batch) {
  int64_t n = 1;
  for (int r = 0; r < t->rank; r++) n *= t->dims[r] < 0 ? batch : t->dims[r];
  return n;
}

/* n values of t's dtype (f32, f16, bf16) at data as a new f32 array. */
static float *as_f32(const rt_tensor_desc *t, const void *data, int64_t n) {
  float *f = xmalloc((size_t)n * sizeof *f + 1);
  for (int64_t i = 0; i < n; i++) {
    if (t->dtype == DT_F32) f[i] = ((const float *)data)[i];
    else if (t->dtype == DT_F16) f[i] = half_f16_to_f32(((const uint16_t *)data)[i]);
    else f[i] = half_bf16_to_f32(((const uint16_t *)data)[i]);
  }
  return f;
}

#endif
