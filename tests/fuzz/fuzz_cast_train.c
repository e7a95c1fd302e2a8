/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_cast_train.c: .cast text (a `compile` statement included: the
 * model's loss and optimizer) through the frontend and the training
 * pipeline to the training step's IR, by the compile driver castor dump
 * --train and castor train use (castor_compile_to in api/castor.c, which
 * merges the model's `compile` defaults into the options and runs
 * PASS_PIPELINE_TRAIN), stopping before code generation. The input's
 * length picks the variant: the training step, the evaluation program or
 * the gradients (castor check --train), under the model's policy or
 * another one, padded or not.
 *
 * Invariants: the model loads xor an error; the driver succeeds xor an
 * error (a message in the context); the graph it hands on verifies and
 * survives the text round trip (print, parse, verify, print: the same
 * bytes).
 *
 * The model is loaded twice: first by fe_load_mem with the Glorot init
 * capped at 1 MiB (fuzz_cast.c's cap, so that a large `units=` costs an
 * error, not seconds), and only if that succeeds through the public API,
 * which must then succeed too.
 */
#include <string.h>

#include "tests/fuzz/fuzz.h"

#include "api/internal.h"
#include "frontend/frontend.h"

/* castor_codegen_fn: the final graph's invariants, in place of code generation. */
static castor_status check_graph(const ir_graph *g, const cg_backend *be, const cg_backend_options *bo, void *arg,
                                 diag_sink *d) {
  (void)be, (void)bo, (void)arg;
  if (!ir_verify(g, d)) fuzz_fail("the training step does not verify", diag_text(d));
  str_buf a, b;
  str_buf_init(&a);
  str_buf_init(&b);
  ir_print(g, &a);
  diag_sink *d2 = diag_sink_create();
  ir_graph *g2 = ir_parse("step.cir", str_buf_cstr(&a), a.len, d2);
  if (!g2) fuzz_fail("the training step does not parse back", diag_text(d2));
  if (!ir_verify(g2, d2)) fuzz_fail("the training step parsed back does not verify", diag_text(d2));
  ir_print(g2, &b);
  if (a.len != b.len || memcmp(str_buf_cstr(&a), str_buf_cstr(&b), a.len) != 0)
    fuzz_fail("print-parse-print of the training step differs", str_buf_cstr(&b));
  ir_graph_destroy(g2);
  diag_sink_destroy(d2);
  str_buf_fini(&a);
  str_buf_fini(&b);
  return CASTOR_OK;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  diag_sink *d = diag_sink_create();
  fe_options o;
  fe_options_init(&o);
  o.max_init_bytes = 1 << 20;
  ir_graph *g = fe_load_mem("fuzz.cast", (const char *)data, size, &o, d, NULL);
  if (!g && diag_error_count(d) == 0) fuzz_fail("no graph and no error", diag_text(d));
  bool loads = g != NULL;
  ir_graph_destroy(g);
  diag_sink_destroy(d);
  if (!loads) return 0;

  castor_context *ctx;
  castor_model *m;
  castor_context_create(&ctx);
  if (castor_model_load_string(ctx, "fuzz.cast", (const char *)data, size, NULL, &m) != CASTOR_OK)
    fuzz_fail("the API does not load what the frontend loads", castor_context_last_error(ctx));
  static const char *policies[] = {NULL, "mixed_float16", "mixed_bfloat16", "float16"};
  castor_compile_options co;
  castor_compile_options_init(&co);
  co.policy = policies[size % 4];
  co.pad8 = (size / 4) % 2;
  castor_train_options to;
  castor_train_options_init(&to);
  castor_driver_options dopts;
  castor_driver_options_init(&dopts);
  dopts.train = &to;
  dopts.loss_only = (size / 8) % 3 == 1;
  dopts.gradients = (size / 8) % 3 == 2;
  castor_status st = castor_compile_to(m, &co, &dopts, check_graph, NULL);
  const char *err = castor_context_last_error(ctx);
  if (st != CASTOR_OK && (!err || !*err)) fuzz_fail("the training pipeline failed without an error", "");
  if (st == CASTOR_OK && err && *err) fuzz_fail("the training pipeline succeeded with an error", err);
  castor_model_destroy(m);
  castor_context_destroy(ctx);
  return 0;
}
