/* SPDX-License-Identifier: Apache-2.0 */
/*
 * check_deep.c: deep models (issue 14 item 2). Compile time must grow
 * linearly with depth, so a model of thousands of layers compiles and runs
 * here within the per-test timeout, bit-identical for any thread count and
 * against the float64 reference; kernels that differ only in their buffers
 * share one compiled body (codegen/cpu/cg_kernel_share.c), in the JIT and in
 * the AOT wrappers; and a graph past IR_MAX_NODES is a clear error.
 *
 * No timing is asserted (speed is bench/compile/'s business): a quadratic
 * stage shows up here as the test running past Check's timeout.
 *
 * Bound: normalized error below 1e-4, looser than check_e2e's 1e-5 for one
 * layer because f32 rounding errors compound over the depth, by however
 * much the random network amplifies them. Measured on this model: 3.4e-7
 * at 250 layers, 4.6e-7 at 500, 1.7e-6 at 1000, 1.0e-5 at 2000 (the
 * test's depth), 1.2e-7 at 4000. A wrong kernel (a shared body reading
 * another layer's weights) gives errors of order 1.
 */
#include <check.h>

#include "tests/unit/test_support.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "castor.h"
#include "codegen/codegen.h"
#include "frontend/frontend.h"
#include "passes/passes.h"
#include "tests/ref/ref.h"

/* A model of `depth` dense layers of `units`: tanh layers, every third one
 * with a residual add of the value three layers back, every fifth with
 * relu instead, and a softmax head. Caller frees. */
static char *deep_model(int depth, int units) {
  str_buf b;
  str_buf_init(&b);
  str_buf_printf(&b, "model deep\nx0 = input(shape=[%d])\n", units);
  for (int i = 1; i <= depth; i++) {
    const char *act = i % 5 == 0 ? "relu" : "tanh";
    if (i % 3 == 0 && i >= 3) {
      str_buf_printf(&b, "h%d = dense(x%d, units=%d, activation=%s)\n", i, i - 1, units, act);
      str_buf_printf(&b, "x%d = add(h%d, x%d)\n", i, i, i - 3);
    } else {
      str_buf_printf(&b, "x%d = dense(x%d, units=%d, activation=%s)\n", i, i - 1, units, act);
    }
  }
  str_buf_printf(&b, "y = dense(x%d, units=10, activation=softmax)\noutput y\n", depth);
  return str_buf_take(&b);
}

START_TEST(test_deep_model_numerics) {
  enum { DEPTH = 2000, UNITS = 16, BATCH = 5 };
  char *text = deep_model(DEPTH, UNITS);
  diag_sink *d = diag_sink_create();
  fe_options fo;
  fe_options_init(&fo);
  fo.seed = 3;
  ir_graph *g = fe_load_mem("deep.cast", text, strlen(text), &fo, d, NULL);
  ck_assert_msg(g != NULL, "load:\n%s", diag_text(d));
  pass_options po;
  pass_options_init(&po);
  ck_assert_msg(pass_run_pipeline(g, PASS_PIPELINE_DEFAULT, &po, d), "passes:\n%s", diag_text(d));
  rt_program *p = cg_compile_cpu(g, NULL, d);
  ck_assert_msg(p != NULL, "codegen:\n%s", diag_text(d));

  /* shared bodies: thousands of launches, a handful of distinct kernels */
  int distinct = 0, with_table = 0;
  for (int i = 0; i < p->n_launches; i++) {
    bool seen = false;
    for (int j = 0; j < i && !seen; j++) seen = p->launches[j].fn == p->launches[i].fn;
    distinct += !seen;
    with_table += p->launches[i].n_args > 0;
  }
  ck_assert_msg(p->n_launches > DEPTH && distinct <= 12 && with_table > DEPTH - 12,
                "%d launches, %d distinct kernel functions, %d with a buffer table", p->n_launches, distinct,
                with_table);

  float *in = malloc(BATCH * UNITS * sizeof *in), *out1 = malloc(BATCH * 10 * sizeof *out1),
        *out2 = malloc(BATCH * 10 * sizeof *out2);
  rng r;
  rng_init(&r, 17);
  for (int i = 0; i < BATCH * UNITS; i++) in[i] = rng_uniform_f32(&r, -2.0f, 2.0f);
  const void *ins[] = {in};
  ck_assert_msg(rt_program_run_threads(p, 1, BATCH, ins, (void *const[]){out1}, NULL, d), "run:\n%s", diag_text(d));
  ck_assert_msg(rt_program_run_threads(p, 2, BATCH, ins, (void *const[]){out2}, NULL, d), "run:\n%s", diag_text(d));
  ck_assert_msg(memcmp(out1, out2, BATCH * 10 * sizeof *out1) == 0, "1 and 2 threads differ");

  double *in64 = ref_from_f32(in, BATCH * UNITS), *want[1] = {NULL};
  char err[256];
  ck_assert_msg(ref_run(g, BATCH, (const double *const[]){in64}, want, err, sizeof err), "ref: %s", err);
  ref_cmp c = ref_compare_normalized(out1, want[0], BATCH * 10);
  char buf[256];
  ck_assert_msg(c.error < 1e-4, "%d layers vs the float64 reference: %s", DEPTH, ref_cmp_str(&c, buf, sizeof buf));
  double spread = 0; /* the softmax must not be uniform: the signal survived the depth */
  for (int i = 0; i < 10; i++) spread = fmax(spread, fabs(want[0][i] - 0.1));
  ck_assert_msg(spread > 1e-3, "the reference output is flat (%g): the test would not see wrong kernels", spread);

  ref_outputs_free(want, 1);
  free(in64), free(in), free(out1), free(out2), free(text);
  rt_program_destroy(p);
  ir_graph_destroy(g);
  diag_sink_destroy(d);
}
END_TEST

/* Sharing a body changes no bit: the same model compiled with and without
 * sharing gives identical outputs (and the shared program really shares),
 * in f32 and under mixed policies (casts in the epilogues; pad8's pads and
 * slices as kernels of their own). */
static const struct {
  const char *policy, *pipeline;
} sharing_cases[] = {
    {"float32", PASS_PIPELINE_DEFAULT},
    {"mixed_float16", PASS_PIPELINE_PAD8},
    {"mixed_bfloat16", PASS_PIPELINE_DEFAULT},
};

START_TEST(test_sharing_same_bits) {
  enum { DEPTH = 30, UNITS = 20, BATCH = 7 };
  char *text = deep_model(DEPTH, UNITS);
  diag_sink *d = diag_sink_create();
  fe_options fo;
  fe_options_init(&fo);
  ir_graph *g = fe_load_mem("deep.cast", text, strlen(text), &fo, d, NULL);
  ck_assert_msg(g != NULL, "load:\n%s", diag_text(d));
  const char *policy = sharing_cases[_i].policy;
  ck_assert(ir_policy_from_name(policy, strlen(policy), &g->policy));
  pass_options po;
  pass_options_init(&po);
  ck_assert_msg(pass_run_pipeline(g, sharing_cases[_i].pipeline, &po, d), "passes:\n%s", diag_text(d));
  float *in = malloc(BATCH * UNITS * sizeof *in), *out[2];
  rng r;
  rng_init(&r, 5);
  for (int i = 0; i < BATCH * UNITS; i++) in[i] = rng_uniform_f32(&r, -2.0f, 2.0f);
  int tables[2];
  for (int share = 0; share < 2; share++) {
    cg_options o;
    cg_options_init(&o);
    o.no_kernel_sharing = !share;
    rt_program *p = cg_compile_cpu(g, &o, d);
    ck_assert_msg(p != NULL, "codegen:\n%s", diag_text(d));
    tables[share] = 0;
    for (int i = 0; i < p->n_launches; i++) tables[share] += p->launches[i].n_args > 0;
    out[share] = malloc(BATCH * 10 * sizeof(float));
    ck_assert_msg(rt_program_run(p, BATCH, (const void *const[]){in}, (void *const[]){out[share]}, NULL, d),
                  "run:\n%s", diag_text(d));
    rt_program_destroy(p);
  }
  ck_assert_msg(tables[0] == 0 && tables[1] > DEPTH / 2, "%s: launches with a table: %d unshared, %d shared",
                policy, tables[0], tables[1]);
  for (int i = 0; i < BATCH * 10; i++)
    ck_assert_msg(memcmp(&out[0][i], &out[1][i], sizeof(float)) == 0, "%s: output %d: %.9g unshared, %.9g shared",
                  policy, i, out[0][i], out[1][i]);
  free(out[0]), free(out[1]), free(in), free(text);
  ir_graph_destroy(g);
  diag_sink_destroy(d);
}
END_TEST

/* Training steps share bodies too (matmul_tn, sum_rows, the losses, the
 * optimizer updates): three steps of a deep model's training program
 * compiled with and without sharing leave the same bits in every output
 * and every state (weights, slots, scalars), for each optimizer under
 * float32 and under mixed_float16 with its dynamic loss scale, and the
 * shared program shares its update and reduction kernels (more launches
 * with a table than layers). */
static const struct {
  const char *policy, *optimizer, *loss;
} train_sharing_cases[] = {
    {"float32", "sgd", "mean_squared_error"},
    {"float32", "adam", "categorical_crossentropy"},
    {"mixed_float16", "rmsprop", "sparse_categorical_crossentropy"},
    {"mixed_bfloat16", "adam", "mean_squared_error"},
};

START_TEST(test_train_sharing_same_bits) {
  enum { DEPTH = 12, UNITS = 12, BATCH = 6, STEPS = 3 };
  char *text = deep_model(DEPTH, UNITS);
  diag_sink *d = diag_sink_create();
  fe_options fo;
  fe_options_init(&fo);
  fo.seed = 7;
  ir_graph *g = fe_load_mem("deep.cast", text, strlen(text), &fo, d, NULL);
  ck_assert_msg(g != NULL, "load:\n%s", diag_text(d));
  const char *policy = train_sharing_cases[_i].policy;
  ck_assert(ir_policy_from_name(policy, strlen(policy), &g->policy));
  pass_options po;
  pass_options_init(&po);
  ck_assert(pass_train_option(&po.train, "loss", train_sharing_cases[_i].loss, d));
  ck_assert(pass_train_option(&po.train, "optimizer", train_sharing_cases[_i].optimizer, d));
  if (!strcmp(train_sharing_cases[_i].optimizer, "sgd")) po.train.momentum = 0.9, po.train.nesterov = true;
  if (!strcmp(train_sharing_cases[_i].optimizer, "rmsprop")) po.train.centered = true;
  ck_assert(pass_train_option(&po.train, "learning-rate", "0.05", d));
  ck_assert_msg(pass_run_pipeline(g, PASS_PIPELINE_TRAIN, &po, d), "passes:\n%s", diag_text(d));
  bool sparse = !strcmp(train_sharing_cases[_i].loss, "sparse_categorical_crossentropy");
  float x[BATCH * UNITS], y[BATCH * 10];
  int32_t cls[BATCH];
  rng r;
  rng_init(&r, 11);
  for (int i = 0; i < BATCH * UNITS; i++) x[i] = rng_uniform_f32(&r, -2.0f, 2.0f);
  for (int i = 0; i < BATCH * 10; i++) y[i] = rng_uniform_f32(&r, 0.0f, 1.0f);
  for (int i = 0; i < BATCH; i++) cls[i] = i % 10;
  const void *in[] = {x, sparse ? (const void *)cls : (const void *)y};
  rt_program *p[2];
  void **states[2];
  float *loss[2];
  int tables[2];
  for (int share = 0; share < 2; share++) {
    cg_options o;
    cg_options_init(&o);
    o.no_kernel_sharing = !share;
    p[share] = cg_compile_cpu(g, &o, d);
    ck_assert_msg(p[share] != NULL, "codegen:\n%s", diag_text(d));
    tables[share] = 0;
    for (int i = 0; i < p[share]->n_launches; i++) tables[share] += p[share]->launches[i].n_args > 0;
    states[share] = calloc((size_t)p[share]->n_states + 1, sizeof(void *));
    for (int i = 0; i < p[share]->n_states; i++) {
      states[share][i] = malloc((size_t)rt_state_bytes(p[share], i));
      rt_state_init(p[share], i, states[share][i]);
    }
    ck_assert_int_eq(p[share]->n_outputs, 2);
    float *pred = malloc(BATCH * 10 * sizeof *pred);
    loss[share] = malloc(STEPS * sizeof(float));
    for (int s = 0; s < STEPS; s++)
      ck_assert_msg(rt_program_run_state(p[share], 2, BATCH, in, (void *const[]){pred, &loss[share][s]}, states[share],
                                         NULL, d),
                    "run:\n%s", diag_text(d));
    free(pred);
  }
  /* kernels with a body of their own: the head's, the loss's, the first
   * layer's (13 to 21 here); before the updates and reductions shared, 5
   * more per layer */
  int own = p[1]->n_launches - tables[1];
  ck_assert_msg(tables[0] == 0 && own < 2 * DEPTH, "%s %s: launches with a table: %d unshared, %d of %d shared",
                policy, train_sharing_cases[_i].optimizer, tables[0], tables[1], p[1]->n_launches);
  ck_assert_int_eq(p[0]->n_states, p[1]->n_states);
  for (int s = 0; s < STEPS; s++)
    ck_assert_msg(memcmp(&loss[0][s], &loss[1][s], sizeof(float)) == 0, "%s: step %d's loss: %.9g unshared, %.9g shared",
                  policy, s, loss[0][s], loss[1][s]);
  for (int i = 0; i < p[0]->n_states; i++) {
    ck_assert_str_eq(p[0]->states[i].t.name, p[1]->states[i].t.name);
    int64_t bytes = rt_state_bytes(p[0], i);
    ck_assert_msg(memcmp(states[0][i], states[1][i], (size_t)bytes) == 0, "%s %s: state %s differs after %d steps",
                  policy, train_sharing_cases[_i].optimizer, p[0]->states[i].t.name, STEPS);
  }
  for (int share = 0; share < 2; share++) {
    for (int i = 0; i < p[share]->n_states; i++) free(states[share][i]);
    free(states[share]);
    free(loss[share]);
    rt_program_destroy(p[share]);
  }
  free(text);
  ir_graph_destroy(g);
  diag_sink_destroy(d);
}
END_TEST

/* A deep model's training step compiles in time linear in depth too (issue
 * 26 item 12): 3,000 layers compile and train one step within the timeout
 * (before, 5 kernels per layer had a body of their own, ~50 ms each, and
 * the grad pass scanned the graph per new node), with a finite loss. */
START_TEST(test_deep_train_step) {
  enum { DEPTH = 3000, UNITS = 8, BATCH = 4 };
  char *text = deep_model(DEPTH, UNITS);
  castor_context *ctx;
  ck_assert(castor_context_create(&ctx) == CASTOR_OK);
  castor_model *m = NULL;
  castor_program *step = NULL;
  ck_assert_msg(castor_model_load_string(ctx, "deep.cast", text, strlen(text), NULL, &m) == CASTOR_OK, "%s",
                castor_context_last_error(ctx));
  castor_train_options to;
  castor_train_options_init(&to);
  to.optimizer = "sgd";
  to.loss = "mean_squared_error";
  ck_assert_msg(castor_compile_train(m, NULL, &to, &step) == CASTOR_OK, "%s", castor_context_last_error(ctx));
  castor_tensor *in[2], *out[2] = {NULL, NULL};
  ck_assert(castor_tensor_create(ctx, CASTOR_F32, 2, (int64_t[]){BATCH, UNITS}, &in[0]) == CASTOR_OK);
  ck_assert(castor_tensor_create(ctx, CASTOR_F32, 2, (int64_t[]){BATCH, 10}, &in[1]) == CASTOR_OK);
  float *x = castor_tensor_data(in[0]), *y = castor_tensor_data(in[1]);
  for (int i = 0; i < BATCH * UNITS; i++) x[i] = (float)(i % 7) / 7.0f - 0.5f;
  for (int i = 0; i < BATCH * 10; i++) y[i] = i % 10 == i / 10 ? 1.0f : 0.0f;
  ck_assert_msg(castor_program_run(step, in, 2, out, 2) == CASTOR_OK, "%s", castor_context_last_error(ctx));
  float loss = *(const float *)castor_tensor_data(out[1]);
  ck_assert_msg(isfinite(loss) && loss > 0, "loss %g", loss);
  for (int i = 0; i < 2; i++) castor_tensor_destroy(in[i]), castor_tensor_destroy(out[i]);
  castor_program_destroy(step);
  castor_model_destroy(m);
  castor_context_destroy(ctx);
  free(text);
}
END_TEST

/* A chain of n dense layers of one unit, no activation: 1 + 4n nodes
 * (input; per layer kernel, bias, matmul, add). */
static char *unit_chain(int n) {
  str_buf b;
  str_buf_init(&b);
  str_buf_puts(&b, "model big\nx0 = input(shape=[1])\n");
  for (int i = 1; i <= n; i++) str_buf_printf(&b, "x%d = dense(x%d, units=1)\n", i, i - 1);
  str_buf_printf(&b, "output x%d\n", n);
  return str_buf_take(&b);
}

START_TEST(test_node_cap) {
  castor_context *ctx;
  ck_assert(castor_context_create(&ctx) == CASTOR_OK);
  /* (IR_MAX_NODES - 1) / 4 layers: at most IR_MAX_NODES nodes, compiles */
  int under = (IR_MAX_NODES - 1) / 4, over = under + 1;
  char *text = unit_chain(under);
  castor_model *m = NULL;
  castor_program *p = NULL;
  ck_assert_msg(castor_model_load_string(ctx, "under.cast", text, strlen(text), NULL, &m) == CASTOR_OK, "%s",
                castor_context_last_error(ctx));
  castor_status st = castor_compile(m, NULL, &p);
  ck_assert_msg(st == CASTOR_OK, "%d layers: %s", under, castor_context_last_error(ctx));
  castor_program_destroy(p);
  castor_model_destroy(m);
  free(text);

  text = unit_chain(over);
  ck_assert(castor_model_load_string(ctx, "over.cast", text, strlen(text), NULL, &m) == CASTOR_OK);
  p = NULL;
  st = castor_compile(m, NULL, &p);
  ck_assert_msg(st == CASTOR_ERR_UNSUPPORTED && p == NULL, "%d layers: %s", over, castor_status_string(st));
  ck_assert_str_eq(castor_context_last_error(ctx),
                   "over.cast:25002:10: error: the model's graph has 100001 nodes, more than the 100000 castor "
                   "compiles (IR_MAX_NODES); this layer is past the limit\n"
                   "x25000 = dense(x24999, units=1)\n"
                   "         ^\n");
  castor_model_destroy(m);
  free(text);
  castor_context_destroy(ctx);
}
END_TEST

static Suite *deep_suite(void) {
  Suite *s = suite_create("deep");
  TCase *tc = tcase_create("deep");
  tcase_set_timeout(tc, 300); /* a loaded machine and sanitizers: several times the 10 s these take alone */
  tcase_add_test(tc, test_deep_model_numerics);
  tcase_add_loop_test(tc, test_sharing_same_bits, 0, (int)(sizeof sharing_cases / sizeof sharing_cases[0]));
  tcase_add_test(tc, test_node_cap);
  tcase_add_test(tc, test_deep_train_step);
  tcase_add_loop_test(tc, test_train_sharing_same_bits, 0,
                      (int)(sizeof train_sharing_cases / sizeof train_sharing_cases[0]));
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  return check_run(deep_suite());
}
