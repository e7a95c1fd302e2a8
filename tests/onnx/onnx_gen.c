/*
 * onnx_gen.c: writes the generated ONNX models of the robustness tests and
 * of bench/compile's import benchmark (tests/onnx/onnx_wire.h), so that no
 * large or hostile model file is committed:
 *
 *   onnx_gen deep LEVELS OUT     If inside If, LEVELS deep (issue 41 item 1:
 *                                3,000 levels are a 94 KB file)
 *   onnx_gen chain N OUT         x [batch, 16] through N Relu nodes
 *   onnx_gen sum N OUT           one Sum node of N inputs (x, N times)
 *   onnx_gen external NUMEL OUT  an Add of x [batch, 4] and an initializer of
 *                                NUMEL floats whose data is the external file
 *                                'w.bin' beside OUT (a 1 TiB tensor: 2^38)
 *
 * Exit status 0, or 2 with a message on bad arguments or a write error.
 */
#include "tests/onnx/onnx_wire.h"

#include <errno.h>

static int usage(void) {
  fprintf(stderr, "usage: onnx_gen deep LEVELS OUT | chain N OUT | sum N OUT | external NUMEL OUT\n");
  return 2;
}

int main(int argc, char **argv) {
  if (argc != 4) return usage();
  char *end;
  errno = 0;
  long long n = strtoll(argv[2], &end, 10);
  if (errno || *end || n < 1 || n > (1ll << 40)) return usage();
  wbuf model = {0};
  if (!strcmp(argv[1], "deep") && n <= 1000000) wbuf_deep_if(&model, (int)n);
  else if (!strcmp(argv[1], "chain") && n <= 100000000) wbuf_chain_model(&model, n);
  else if (!strcmp(argv[1], "sum") && n <= 100000000) wbuf_sum_model(&model, n);
  else if (!strcmp(argv[1], "external")) wbuf_external_model(&model, n, "w.bin");
  else return usage();
  FILE *f = fopen(argv[3], "wb");
  if (!f || fwrite(model.data, 1, model.len, f) != model.len || fclose(f) != 0) {
    fprintf(stderr, "onnx_gen: cannot write '%s': %s\n", argv[3], strerror(errno));
    return 2;
  }
  wbuf_free(&model);
  return 0;
}
