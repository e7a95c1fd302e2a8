/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_grad.c: text IR (training ops included: a dumped training step
 * parses like any graph) through the grad pass and the training pipelines,
 * on every input that parses and verifies. Both training pipelines run
 * (PASS_PIPELINE_TRAIN and PASS_PIPELINE_TRAIN_PAD8), each on a fresh
 * parse, with the grad pass's options (loss, optimizer and its flags, the
 * loss scale, evaluation only) picked from the input's length and its last
 * byte, so every option meets every graph. Invariants: a pipeline that
 * succeeds leaves a graph that verifies and survives the text round trip
 * (print, parse, print: the same bytes); one that fails says why (an error).
 */
#include <string.h>

#include "tests/fuzz/fuzz.h"

#include "passes/passes.h"

/* The grad pass's options from k (the input's length and last byte). */
static void train_options(size_t k, pass_train_options *o) {
  static const pass_loss losses[] = {PASS_LOSS_SPARSE_XENT, PASS_LOSS_XENT, PASS_LOSS_MSE};
  static const pass_optimizer opts[] = {PASS_OPT_RMSPROP, PASS_OPT_ADAM, PASS_OPT_SGD, PASS_OPT_NONE};
  static const double scales[] = {-1, 0, 1, 1024};
  pass_train_options_init(o);
  o->loss = losses[k % 3];
  o->optimizer = opts[(k / 3) % 4];
  o->loss_scale = scales[(k / 12) % 4];
  o->from_logits = (k / 48) % 2;
  o->loss_only = (k / 96) % 5 == 0;
  if ((k / 480) % 2) { /* the optimizers' variants */
    o->momentum = 0.5;
    o->nesterov = o->optimizer == PASS_OPT_SGD;
    o->centered = o->optimizer == PASS_OPT_RMSPROP;
    o->loss_scale_min = 0.25;
  }
}

static void run(const uint8_t *data, size_t size, const char *pipeline) {
  diag_sink *d = diag_sink_create();
  ir_graph *g = ir_parse("fuzz.cir", (const char *)data, size, d);
  if (g && ir_verify(g, d)) {
    pass_options po;
    pass_options_init(&po);
    train_options(size + (size ? 7u * data[size - 1] : 0), &po.train);
    if (size % 7 == 3) po.autocast.fp32_ops = "matmul,softmax";
    int errors0 = diag_error_count(d);
    if (pass_run_pipeline(g, pipeline, &po, d)) {
      if (diag_error_count(d) > errors0) fuzz_fail("the pipeline succeeded with errors", diag_text(d));
      if (!ir_verify(g, d)) fuzz_fail("the training step does not verify", diag_text(d));
      str_buf a, b;
      str_buf_init(&a);
      str_buf_init(&b);
      ir_print(g, &a);
      diag_sink *d2 = diag_sink_create();
      ir_graph *g2 = ir_parse("after.cir", str_buf_cstr(&a), a.len, d2);
      if (!g2) fuzz_fail("the training step does not parse back", diag_text(d2));
      if (!ir_verify(g2, d2)) fuzz_fail("the training step parsed back does not verify", diag_text(d2));
      ir_print(g2, &b);
      if (a.len != b.len || memcmp(str_buf_cstr(&a), str_buf_cstr(&b), a.len) != 0)
        fuzz_fail("print-parse-print of the training step differs", str_buf_cstr(&b));
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
  run(data, size, PASS_PIPELINE_TRAIN);
  run(data, size, PASS_PIPELINE_TRAIN_PAD8);
  return 0;
}
