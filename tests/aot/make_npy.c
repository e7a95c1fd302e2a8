/* SPDX-License-Identifier: Apache-2.0 */
/*
 * make_npy.c: writes a seeded random .npy file for the AOT tests (no
 * Python needed): values uniform in [-1, 1) as castor run draws them.
 *
 *   aot_make_npy OUT.npy DTYPE SEED DIM...     DTYPE: f32, f16 or i32
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/npy.h"
#include "util/half.h"

int main(int argc, char **argv) {
  if (argc < 5 || argc - 4 > NPY_MAX_RANK) {
    fprintf(stderr, "usage: aot_make_npy OUT.npy f32|f16|i32 SEED DIM...\n");
    return 2;
  }
  dtype_id dt = !strcmp(argv[2], "f16") ? DT_F16 : !strcmp(argv[2], "i32") ? DT_I32 : DT_F32;
  int rank = argc - 4;
  int64_t dims[NPY_MAX_RANK], n = 1;
  for (int r = 0; r < rank; r++) n *= dims[r] = atoll(argv[4 + r]);
  char *data = xcalloc((size_t)n + 1, 4);
  rng g;
  rng_init(&g, strtoull(argv[3], NULL, 10));
  for (int64_t i = 0; i < n; i++) {
    float x = rng_uniform_f32(&g, -1.0f, 1.0f);
    if (dt == DT_F32) ((float *)data)[i] = x;
    else if (dt == DT_F16) ((uint16_t *)data)[i] = half_f32_to_f16(x);
    else ((int32_t *)data)[i] = (int32_t)(x * 100);
  }
  diag_sink *d = diag_sink_create();
  int rc = npy_write(argv[1], dt, rank, dims, data, d) ? 0 : 1;
  fputs(diag_text(d), stderr);
  diag_sink_destroy(d);
  free(data);
  return rc;
}
