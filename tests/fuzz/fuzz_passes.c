/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_passes.c: the pass pipelines on every input that parses and
 * verifies. Both pipelines the compiler runs (the default and the pad8 one)
 * run on a fresh parse each. Invariants: a pipeline that succeeds leaves a
 * graph that verifies and survives the text round trip; one that fails
 * says why (an error). Autocast's options vary with the input's length so
 * that --fp32-ops and --keep-16bit-outputs are covered too.
 */
#include <string.h>

#include "tests/fuzz/fuzz.h"

#include "passes/passes.h"

static void run(const uint8_t *data, size_t size, const char *pipeline) {
  diag_sink *d = diag_sink_create();
  ir_graph *g = ir_parse("fuzz.cir", (const char *)data, size, d);
  if (g && ir_verify(g, d)) {
    pass_options po;
    pass_options_init(&po);
    if (size % 3 == 1) po.autocast.fp32_ops = "matmul,softmax";
    if (size % 5 == 2) po.autocast.keep_16bit_outputs = true;
    int errors0 = diag_error_count(d);
    if (pass_run_pipeline(g, pipeline, &po, d)) {
      if (diag_error_count(d) > errors0) fuzz_fail("the pipeline succeeded with errors", diag_text(d));
      if (!ir_verify(g, d)) fuzz_fail("the pipeline's result does not verify", diag_text(d));
      str_buf a, b;
      str_buf_init(&a);
      str_buf_init(&b);
      ir_print(g, &a);
      diag_sink *d2 = diag_sink_create();
      ir_graph *g2 = ir_parse("after.cir", str_buf_cstr(&a), a.len, d2);
      if (!g2) fuzz_fail("the pipeline's result does not parse back", diag_text(d2));
      ir_print(g2, &b);
      if (a.len != b.len || memcmp(str_buf_cstr(&a), str_buf_cstr(&b), a.len) != 0)
        fuzz_fail("print-parse-print of the pipeline's result differs", str_buf_cstr(&b));
      ir_graph_destroy(g2);
      diag_sink_destroy(d2);
      str_buf_fini(&a);
      str_buf_fini(&b);
    } else if (diag_error_count(d) == errors0) {
      fuzz_fail("the pipeline failed without an error", diag_text(d));
    }
  }
  ir_graph_destroy(g);
  diag_sink_destroy(d);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  run(data, size, PASS_PIPELINE_DEFAULT);
  run(data, size, PASS_PIPELINE_PAD8);
  return 0;
}
