/* SPDX-License-Identifier: Apache-2.0 */
/*
 * aot_host.c: run a model compiled ahead of time from C, with neither the
 * castor library nor LLVM: only the object file and header that
 * `castor build --emit=obj` made, and castor's small static runtime.
 *
 *   castor build samples/mnist_mlp_small.cast --emit=obj -o mnist_mlp_small.o
 *   cc -I. samples/aot_host.c mnist_mlp_small.o -Lbuild -lcastor_runtime -lcastor_util \
 *      -lm -lpthread -o aot_host                  # or $(pkg-config --libs castor-runtime)
 *   ./aot_host [BATCH [INPUT_OUT.npy OUTPUT_OUT.npy]]
 *
 * Feeds a deterministic batch, prints the predicted classes and, if asked,
 * writes the input and the output as float32 .npy files (for comparing
 * with `castor run --input`).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mnist_mlp_small.h"

/* A 2-D float32 .npy file (format 1.0). */
static int save_npy(const char *path, const float *x, int64_t rows, int64_t cols) {
  char header[128];
  int n = snprintf(header, sizeof header, "{'descr': '<f4', 'fortran_order': False, 'shape': (%lld, %lld), }",
                   (long long)rows, (long long)cols);
  int pad = 64 - (10 + n + 1) % 64; /* the header ends in '\n' on a 64-byte boundary */
  FILE *f = fopen(path, "wb");
  if (!f) return perror(path), 1;
  uint16_t len = (uint16_t)(n + pad + 1);
  fwrite("\x93NUMPY\x01\x00", 1, 8, f);
  fputc(len & 0xff, f), fputc(len >> 8, f);
  fputs(header, f);
  for (int i = 0; i < pad; i++) fputc(' ', f);
  fputc('\n', f);
  fwrite(x, sizeof *x, (size_t)(rows * cols), f);
  return fclose(f) != 0;
}

int main(int argc, char **argv) {
  int64_t batch = argc > 1 ? atoll(argv[1]) : 4;
  if (batch < 1) return fprintf(stderr, "aot_host: BATCH must be positive\n"), 1;
  const int64_t in_cols = MNIST_MLP_SMALL_DIGITS_ROW_ELEMS, out_cols = MNIST_MLP_SMALL_PREDICTIONS_ROW_ELEMS;
  float *digits = malloc(sizeof(float) * (size_t)(batch * in_cols));
  float *predictions = malloc(sizeof(float) * (size_t)(batch * out_cols));
  void *scratch = aligned_alloc(64, (size_t)MNIST_MLP_SMALL_SCRATCH_BYTES(batch) + 64);
  if (!digits || !predictions || !scratch) return fprintf(stderr, "aot_host: out of memory\n"), 1;
  uint32_t s = 12345; /* a small LCG: values in [-1, 1) */
  for (int64_t i = 0; i < batch * in_cols; i++) {
    s = s * 1664525u + 1013904223u;
    digits[i] = (float)(s >> 8) / (float)(1u << 23) - 1.0f;
  }

  int rc = mnist_mlp_small_run(digits, predictions, batch, scratch);
  if (rc != 0) return fprintf(stderr, "aot_host: mnist_mlp_small_run failed with %d\n", rc), 1;

  printf("predictions: f32[%lld,%lld] argmax [", (long long)batch, (long long)out_cols);
  for (int64_t r = 0; r < batch; r++) {
    int64_t best = 0;
    for (int64_t j = 1; j < out_cols; j++)
      if (predictions[r * out_cols + j] > predictions[r * out_cols + best]) best = j;
    printf("%s%lld", r ? ", " : "", (long long)best);
  }
  printf("]\n");
  if (argc > 3 && (save_npy(argv[2], digits, batch, in_cols) || save_npy(argv[3], predictions, batch, out_cols)))
    return 1;
  free(digits), free(predictions), free(scratch);
  return 0;
}
