/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cpu_time_main.c: the driver bench/conv/cpu_time.py links with a model
 * object from `castor build --emit=obj`: runs the model REPEAT times on
 * one thread (the object's kernels are single-threaded) and prints the
 * thread CPU time of each run (CLOCK_THREAD_CPUTIME_ID: time the thread
 * ran, not the time other processes held the core), min and median, and
 * an FNV-1a hash of the output bits (the same for any build whose results
 * are bit-identical). Compiled with -DHDR="m.h" -DPFX=prefix -DXN=inputs
 * -DYN=outputs for a model of one f32 input and one f32 output, batch 32.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include HDR

#define CAT_(a, b) a##b
#define CAT(a, b) CAT_(a, b)
enum { BATCH = 32, MAX_REPEAT = 1000 };

static double cpu_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
  int reps = argc > 1 ? atoi(argv[1]) : 20;
  if (reps < 1 || reps > MAX_REPEAT) {
    fprintf(stderr, "usage: %s [REPEAT 1..%d]\n", argv[0], MAX_REPEAT);
    return 2;
  }
  int64_t sbytes = CAT(PFX, _scratch_bytes)(BATCH);
  float *x = aligned_alloc(64, (size_t)XN * 4), *y = aligned_alloc(64, (size_t)YN * 4);
  void *scratch = aligned_alloc(64, (size_t)(sbytes + 63) / 64 * 64 + 64);
  if (!x || !y || !scratch || sbytes < 0) return 1;
  uint32_t s = 1; /* inputs in [-1, 1) */
  for (int64_t i = 0; i < XN; i++) {
    s = s * 1664525u + 1013904223u;
    x[i] = (float)(s >> 8) * (2.0f / 16777216.0f) - 1.0f;
  }
  static double t[MAX_REPEAT];
  for (int r = 0; r < reps; r++) {
    double t0 = cpu_ms();
    if (CAT(PFX, _run)(x, y, BATCH, scratch) != 0) return 1;
    t[r] = cpu_ms() - t0;
  }
  qsort(t, (size_t)reps, sizeof t[0], cmp);
  uint64_t h = 1469598103934665603ull;
  for (int64_t i = 0; i < YN; i++) {
    uint32_t b;
    memcpy(&b, &y[i], 4);
    h = (h ^ b) * 1099511628211ull;
  }
  printf("min %.4f median %.4f hash %016llx\n", t[0], t[reps / 2], (unsigned long long)h);
  free(x), free(y), free(scratch);
  return 0;
}
