/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_npy.c: the .npy reader on arbitrary bytes (through fmemopen), then
 * the float32 conversion castor run applies to its inputs. Invariants:
 * success or an error, never both; a success holds exactly numel elements
 * (read here, so ASan sees any overrun).
 */
#include <stdio.h>

#include "tests/fuzz/fuzz.h"

#include "formats/npy.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size == 0) return 0; /* fmemopen refuses an empty buffer */
  FILE *f = fmemopen((void *)data, size, "rb");
  if (!f) return 0;
  diag_sink *d = diag_sink_create();
  npy_array a;
  bool ok = npy_read_stream(f, "fuzz.npy", &a, d);
  fclose(f);
  if (ok != (diag_error_count(d) == 0)) fuzz_fail("result and errors disagree", diag_text(d));
  unsigned sum = 0;
  if (ok) {
    const unsigned char *p = a.data;
    for (int64_t k = 0; k < a.nbytes; k++) sum += p[k];
    int errors0 = diag_error_count(d);
    bool conv = npy_to_f32(&a, "fuzz.npy", d);
    if (conv == (diag_error_count(d) > errors0)) fuzz_fail("conversion result and errors disagree", diag_text(d));
    if (conv) {
      const float *x = a.data;
      for (int64_t k = 0; k < a.numel; k++) sum += x[k] == x[k];
    }
  }
  npy_fini(&a);
  diag_sink_destroy(d);
  return (int)(sum & 0);
}
