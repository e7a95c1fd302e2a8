/* SPDX-License-Identifier: Apache-2.0 */
/*
 * check_empty.c: empty tensors (a dimension 0, as NumPy's and ONNX's) from
 * the IR to the CPU, against the float64 reference (tests/ref), which runs
 * the graph as written, before any pass (so the identities of a reduction
 * over nothing come from the oracle, not from pass fold-empty):
 *   - element-wise and layout ops of an empty operand give empty results,
 *     and no kernel runs for them;
 *   - reductions over an empty axis give their identity (sum 0, mean NaN,
 *     max -inf, min +inf), with and without the batch N;
 *   - matmul and batch_matmul over K = 0 give zeros (a bias after them: the
 *     bias);
 *   - concat drops its empty pieces, pad_constant of an empty x is its fill;
 *   - every program also runs an empty batch (N = 0);
 *   - ops castor does not compute on empty tensors, and negative dimensions,
 *     are clear errors.
 * Each case runs at 1 and 3 threads (the same bits).
 */
#include <check.h>

#include "tests/unit/test_support.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/cg_backend.h"
#include "passes/passes.h"
#include "tests/ref/ref.h"
#include "util/util.h"

static int64_t numel(const rt_tensor_desc *t, int64_t batch) {
  int64_t n = 1;
  for (int k = 0; k < t->rank; k++) n *= t->dims[k] < 0 ? batch : t->dims[k];
  return n;
}

static ir_graph *parse(const char *text) {
  diag_sink *d = diag_sink_create();
  ir_graph *g = ir_parse("t.cir", text, strlen(text), d);
  ck_assert_msg(g != NULL, "%s", diag_text(d));
  diag_sink_destroy(d);
  return g;
}

/* Runs the graph `text` (float32) through the default pipeline on the CPU
 * at each batch of `batches` (-1 ends the list), every output against the
 * reference on the graph as parsed; returns the number of kernel launches
 * of the compiled program. */
static int check_graph(const char *what, const char *text, const int64_t *batches) {
  ir_graph *g = parse(text), *orig = parse(text);
  diag_sink *d = diag_sink_create();
  pass_options po;
  pass_options_init(&po);
  po.verify_each = true;
  ck_assert_msg(pass_run_pipeline(g, PASS_PIPELINE_DEFAULT, &po, d), "%s: passes: %s", what, diag_text(d));
  int launches = -1;
  for (int bi = 0; batches[bi] >= 0; bi++) {
    int64_t batch = batches[bi];
    float *first[8] = {0};
    for (int t = 0; t < 2; t++) {
      cg_backend_options bo;
      cg_backend_options_init(&bo);
      bo.threads = t ? 3 : 1;
      setenv("CASTOR_PARALLEL_MIN_WORK", "0", 1);
      cg_exec *x = cg_backend_compile(&cg_backend_cpu, g, &bo, d);
      ck_assert_msg(x, "%s: compile: %s", what, diag_text(d));
      const rt_program *desc = x->desc;
      launches = desc->n_launches;
      ck_assert_int_le(desc->n_inputs, 8);
      ck_assert_int_le(desc->n_outputs, 8);
      float *in[8] = {0};
      double *in64[8] = {0};
      rng r;
      rng_init(&r, 7);
      for (int i = 0; i < desc->n_inputs; i++) {
        int64_t n = numel(&desc->inputs[i], batch);
        in[i] = xmalloc((size_t)n * 4 + 4);
        for (int64_t j = 0; j < n; j++) in[i][j] = rng_uniform_f32(&r, -1.0f, 1.0f);
        in64[i] = ref_from_f32(in[i], n);
      }
      void *out[8] = {0};
      for (int o = 0; o < desc->n_outputs; o++) { /* poisoned: what a run must write */
        int64_t n = numel(&desc->outputs[o], batch);
        out[o] = xmalloc((size_t)n * 4 + 4);
        for (int64_t k = 0; k < n; k++) ((float *)out[o])[k] = 12345.0f;
      }
      ck_assert_msg(cg_backend_cpu.run(x, batch, (const void *const *)in, out, d), "%s: run at batch %lld: %s",
                    what, (long long)batch, diag_text(d));
      unsetenv("CASTOR_PARALLEL_MIN_WORK");
      double *want[8] = {0};
      char err[256];
      ck_assert_msg(ref_run(orig, batch, (const double *const *)in64, want, err, sizeof err), "%s: reference: %s",
                    what, err);
      for (int o = 0; o < desc->n_outputs; o++) {
        int64_t n = numel(&desc->outputs[o], batch);
        ref_cmp e = ref_compare_normalized(out[o], want[o], n);
        char msg[256];
        ck_assert_msg(e.error <= 2e-6, "%s: output %s at batch %lld, %d threads: %s", what, desc->outputs[o].name,
                      (long long)batch, bo.threads, ref_cmp_str(&e, msg, sizeof msg));
        if (!first[o]) first[o] = out[o], out[o] = NULL;
        else ck_assert_msg(!memcmp(first[o], out[o], (size_t)n * 4), "%s: 1 and 3 threads differ", what);
        free(out[o]);
      }
      ref_outputs_free(want, desc->n_outputs);
      for (int i = 0; i < desc->n_inputs; i++) free(in[i]), free(in64[i]);
      cg_exec_destroy(x);
    }
    for (int o = 0; o < 8; o++) free(first[o]);
  }
  ck_assert_int_eq(diag_error_count(d), 0);
  diag_sink_destroy(d);
  ir_graph_destroy(g), ir_graph_destroy(orig);
  return launches;
}

static const int64_t batches[] = {2, 0, 5, -1};

/* element-wise and layout ops of empty operands: empty results, no kernel */
START_TEST(test_eltwise_layout) {
  const char *ordered = "graph e policy=float32\n"
                        "%x = f32[N,0,3] input() {index=0}\n"
                        "%z = f32[N,4] input() {index=1}\n"
                        "%z.s = f32[N,3] strided_slice(%z) {starts=[0,0], ends=[0,3], steps=[1,1]}\n"
                        "%z.3 = f32[N,1,3] reshape(%z.s) {shape=[N,1,3]}\n"
                        "%t = f32[N,0,3] tanh(%x)\n"
                        "%a = f32[N,0,3] add(%t, %x)\n"
                        "%b = f32[N,0,3] mul(%a, %z.3)\n"
                        "%tr = f32[N,3,0] transpose(%x) {perm=[0,2,1]}\n"
                        "%re = f32[N,0,2,5] reshape(%x) {shape=[N,0,2,5]}\n"
                        "%sl = f32[N,0] strided_slice(%z) {starts=[0,3], ends=[0,1], steps=[1,1]}\n"
                        "%sm = f32[N,0,3] softmax(%x)\n"
                        "%w = f32[N,4] relu(%z)\n"
                        "output b = %b\noutput tr = %tr\noutput re = %re\noutput sl = %sl\noutput sm = %sm\n"
                        "output x = %x\noutput w = %w\n";
  int launches = check_graph("element-wise and layout", ordered, batches);
  ck_assert_int_eq(launches, 1); /* relu(%z) only: %z.s and %z.3 feed only empty results (dce) */
}
END_TEST

/* reductions over an empty axis: the identity; over a full axis of an empty
 * tensor: empty */
START_TEST(test_reductions) {
  const char *text = "graph r policy=float32\n"
                     "%x = f32[N,0,4] input() {index=0}\n"
                     "%s = f32[3,0] input() {index=1}\n"
                     "%sum = f32[N,4] reduce_sum(%x) {axes=[1], keepdims=0}\n"
                     "%mean = f32[N,1,4] reduce_mean(%x) {axes=[1], keepdims=1}\n"
                     "%max = f32[N,4] reduce_max(%x) {axes=[1], keepdims=0}\n"
                     "%min = f32[N,4] reduce_min(%x) {axes=[-2], keepdims=0}\n"
                     "%inner = f32[N,0] reduce_sum(%x) {axes=[2], keepdims=0}\n"
                     "%ssum = f32[3] reduce_sum(%s) {axes=[1], keepdims=0}\n"
                     "%smax = f32[] reduce_max(%s) {axes=[0,1], keepdims=0}\n"
                     "%next = f32[N,4] add(%sum, %max)\n"
                     "output sum = %sum\noutput mean = %mean\noutput max = %max\noutput min = %min\n"
                     "output inner = %inner\noutput ssum = %ssum\noutput smax = %smax\noutput next = %next\n";
  check_graph("reductions", text, batches);
}
END_TEST

/* contractions over K = 0: zeros, then the bias */
START_TEST(test_matmul_k0) {
  const char *text = "graph m policy=float32\n"
                     "%a = f32[N,0] input() {index=0}\n"
                     "%w = f32[0,5] input() {index=1}\n"
                     "%bias = f32[5] input() {index=2}\n"
                     "%p = f32[N,3,0] input() {index=3}\n"
                     "%r = f32[N,4,0] input() {index=4}\n"
                     "%m = f32[N,5] matmul(%a, %w) {acc=f32}\n"
                     "%y = f32[N,5] add(%m, %bias)\n"
                     "%bm = f32[N,3,4] batch_matmul(%p, %r) {acc=f32, transpose_a=0, transpose_b=1}\n"
                     "%m0 = f32[N,3,5] matmul(%p, %w) {acc=f32}\n"
                     "output y = %y\noutput bm = %bm\noutput m0 = %m0\n";
  check_graph("matmul over K = 0", text, batches);
}
END_TEST

START_TEST(test_concat_pad) {
  const char *text = "graph c policy=float32\n"
                     "%a = f32[N,2] input() {index=0}\n"
                     "%e = f32[N,0] input() {index=1}\n"
                     "%b = f32[N,3] input() {index=2}\n"
                     "%c = f32[N,5] concat(%a, %e, %b) {axis=1}\n"
                     "%one = f32[N,2] concat(%e, %a, %e) {axis=-1}\n"
                     "%p = f32[N,3] pad_constant(%e) {shape=[N,3], starts=[0,1], steps=[1,1], value=1.5}\n"
                     "%q = f32[N,3] add(%p, %b)\n"
                     "output c = %c\noutput one = %one\noutput q = %q\n";
  check_graph("concat and pad_constant", text, batches);
}
END_TEST

/* A op castor does not compute on an empty tensor, and a negative
 * dimension: one error each, naming it. */
START_TEST(test_errors) {
  const char *text = "graph x policy=float32\n"
                     "%x = f32[N,4,4,0] input() {index=0}\n"
                     "%p = f32[N,2,2,0] max_pool2d(%x) {pool=[2,2], strides=[2,2], pads=[0,0,0,0]}\n"
                     "output p = %p\n";
  diag_sink *d = diag_sink_create();
  ck_assert_ptr_null(ir_parse("t.cir", text, strlen(text), d));
  ck_assert_msg(strstr(diag_text(d), "max_pool2d of the empty tensor f32[N,4,4,0] (operand 1): castor computes empty "
                                     "tensors only in element-wise, layout, reduction and matmul ops"),
                "%s", diag_text(d));
  diag_clear(d);
  ir_graph *g = ir_graph_create("neg");
  ir_type t = {DT_F32, 2, {IR_DIM_BATCH, 3}};
  ir_node *x = ir_build_input(g, "x", &t, 0, (diag_loc){0});
  ir_graph_add_output(g, "x", x);
  x->type.dims[1] = -3;
  pass_options po;
  pass_options_init(&po);
  ck_assert(!pass_run_pipeline(g, "verify", &po, d));
  ck_assert_msg(strstr(diag_text(d), "dimension 1 is -3; dimensions must be >= 0"), "%s", diag_text(d));
  ir_graph_destroy(g);
  /* training: refused, naming the empty value */
  diag_clear(d);
  g = parse("graph t policy=float32\n%x = f32[N,0] input() {index=0}\n%w = f32[0,2] const() {weight=\"w\"}\n"
            "%y = f32[N,2] matmul(%x, %w) {acc=f32}\noutput y = %y\n");
  ck_assert(!pass_run_pipeline(g, PASS_PIPELINE_TRAIN, &po, d));
  ck_assert_msg(strstr(diag_text(d), "grad: %x is an empty tensor (f32[N,0]); castor trains only models without empty "
                                     "tensors"), "%s", diag_text(d));
  ir_graph_destroy(g);
  diag_sink_destroy(d);
}
END_TEST

int main(void) {
  Suite *s = suite_create("empty");
  TCase *tc = tcase_create("empty");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_eltwise_layout);
  tcase_add_test(tc, test_reductions);
  tcase_add_test(tc, test_matmul_k0);
  tcase_add_test(tc, test_concat_pad);
  tcase_add_test(tc, test_errors);
  suite_add_tcase(s, tc);
  return check_run(s);
}
