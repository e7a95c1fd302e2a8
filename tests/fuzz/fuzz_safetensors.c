/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_safetensors.c: the safetensors reader on arbitrary bytes (the file
 * in memory, safetensors_read_mem). Invariants: success or an error,
 * never both; every tensor of a success lies inside the data the reader
 * kept (read here byte by byte, so ASan sees any overrun), with its size
 * equal to its element count times its dtype's size, and no two overlap.
 */
#include "tests/fuzz/fuzz.h"

#include "formats/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  diag_sink *d = diag_sink_create();
  safetensors_file st;
  bool ok = safetensors_read_mem("fuzz.safetensors", data, size, (diag_loc){0}, d, &st);
  if (ok != (diag_error_count(d) == 0)) fuzz_fail("result and errors disagree", diag_text(d));
  unsigned sum = 0;
  for (int i = 0; ok && i < st.n_tensors; i++) {
    const safetensors_tensor *t = &st.tensors[i];
    int64_t n = 1;
    for (int r = 0; r < t->rank; r++) n *= t->dims[r];
    if (n * dtype_size(t->dtype) != t->nbytes) fuzz_fail("a tensor's size disagrees with its shape", t->name);
    if (t->offset < 0 || t->offset + t->nbytes > (int64_t)st.blob_len)
      fuzz_fail("a tensor lies outside the data", t->name);
    const unsigned char *p = t->data;
    for (int64_t k = 0; k < t->nbytes; k++) sum += p[k];
    if (safetensors_find(&st, t->name) != t) fuzz_fail("a key is not found, or twice", t->name);
  }
  if (ok) safetensors_fini(&st);
  diag_sink_destroy(d);
  return (int)(sum & 0); /* sum keeps the reads */
}
