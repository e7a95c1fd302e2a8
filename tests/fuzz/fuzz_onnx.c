/*
 * fuzz_onnx.c: the ONNX frontend on arbitrary bytes: protobuf-c's decoding
 * with castor's capped allocator, the checks of formats/onnx_read.c and the
 * importer of frontend/onnx (fe_onnx_load). Invariants: a graph xor an
 * error, never both; a graph verifies and its text form parses back.
 * The bytes come from memory, so the model has no folder and external data
 * is an error: an input never reads a file of the machine it runs on. The
 * seeds (seeds/onnx) include graphs past 4 KB (If nested 32 and 1,000 deep,
 * a 300-node chain, a Sum of 1,000 inputs) and run.sh's -max_len is 256 KB,
 * so that the nesting and node limits and the import's loops are in reach.
 */
#include "tests/fuzz/fuzz.h"

#include <string.h>

#include "frontend/onnx/onnx_frontend.h"
#include "formats/onnx.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  diag_sink *d = diag_sink_create();
  fe_options o;
  fe_options_init(&o);
  ir_graph *g = fe_onnx_load("fuzz.onnx", (const char *)data, size, &o, d, NULL);
  if ((g != NULL) != (diag_error_count(d) == 0)) fuzz_fail("result and errors disagree", diag_text(d));
  if (g) {
    if (!ir_verify(g, d)) fuzz_fail("an imported graph does not verify", diag_text(d));
    str_buf b;
    str_buf_init(&b);
    ir_print(g, &b);
    diag_sink *d2 = diag_sink_create();
    ir_graph *back = ir_parse("fuzz.cir", str_buf_cstr(&b), strlen(str_buf_cstr(&b)), d2);
    if (!back) fuzz_fail("an imported graph's text does not parse back", diag_text(d2));
    ir_graph_destroy(back);
    diag_sink_destroy(d2);
    str_buf_fini(&b);
    ir_graph_destroy(g);
  }
  /* the same bytes as one TensorProto (ONNX's test data files) */
  arena *a = arena_create();
  onnx_tensor t;
  diag_sink *d3 = diag_sink_create();
  bool ok = onnx_tensor_read("fuzz.pb", data, size, a, &t, d3);
  if (ok != (diag_error_count(d3) == 0)) fuzz_fail("tensor: result and errors disagree", diag_text(d3));
  unsigned sum = 0;
  if (ok) {
    if ((int64_t)t.nbytes != t.numel * (int64_t)onnx_dtype_size(t.dtype) && t.dtype != ONNX_STRING)
      fuzz_fail("a tensor's size disagrees with its shape", t.name);
    const unsigned char *p = t.data;
    for (size_t k = 0; k < t.nbytes; k++) sum += p[k];
  }
  diag_sink_destroy(d3);
  arena_destroy(a);
  diag_sink_destroy(d);
  return (int)(sum & 0);
}
