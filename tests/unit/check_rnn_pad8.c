/* SPDX-License-Identifier: Apache-2.0 */
/*
 * check_rnn_pad8.c: pad8 of recurrent layers' units (passes/pad8.c). Under
 * the 16-bit policies an LSTM, GRU or SimpleRNN whose units are not a
 * multiple of 8 runs on round8(units), each gate's block padded with zero
 * columns; the padded state lanes stay exactly 0 and the unpadded units'
 * bits do not change:
 *
 * - the graph: every 16-bit scan runs on a multiple of 8 units after pad8
 *   (and float32 scans are left alone);
 * - the float64 reference interpreter gives the same bits with and without
 *   pad8 (tests/golden/pad8's lstm60.cast and rnn_chain.cast: LSTM, GRU with
 *   the reset gate before and after, go_backwards, SimpleRNN, Bidirectional);
 * - the CPU JIT gives the same bits with and without pad8, on 1 and 3
 *   threads, under the four 16-bit policies;
 * - training (castor_compile_train with pad8: the forward scans padded, the
 *   gradients not) takes the same steps, bit for bit;
 * - castor check on an LSTM(60) with --pad8 reports the lstm layer's row
 *   with the same error as without, verdict OK (it crashed on a recurrent
 *   layer's zero literal before).
 */
#include <check.h>

#include "tests/unit/test_support.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "castor.h"
#include "frontend/frontend.h"
#include "passes/passes.h"
#include "tests/ref/ref.h"
#include "util/util.h"

#define DIR CASTOR_SOURCE_DIR "/tests/golden/pad8"

static const char *const models[] = {"lstm60", "rnn_chain"};
static const char *const policies16[] = {"mixed_float16", "mixed_bfloat16", "float16", "bfloat16"};

static char *read_model(const char *name, size_t *len) {
  char path[1024], *text;
  snprintf(path, sizeof path, "%s/%s.cast", DIR, name);
  ck_assert_msg(str_read_file(path, &text, len), "cannot read %s", path);
  return text;
}

/* The model through `pipeline` under `policy`, or fails the test. */
static ir_graph *lower(const char *name, const char *policy, const char *pipeline, diag_sink *d) {
  size_t len;
  char *text = read_model(name, &len);
  ir_graph *g = fe_load_mem(name, text, len, NULL, d, NULL);
  free(text);
  ck_assert_msg(g, "%s: %s", name, diag_text(d));
  ck_assert(ir_policy_from_name(policy, strlen(policy), &g->policy));
  pass_options po;
  pass_options_init(&po);
  po.verify_each = true;
  ck_assert_msg(pass_run_pipeline(g, pipeline, &po, d), "%s %s: %s", name, policy, diag_text(d));
  return g;
}

static bool is_scan(const ir_node *n) { return ir_rnn_gates(n->op) > 0 && ir_rnn_forward(n->op) == IR_OP_COUNT; }

/* Units of every scan: multiples of 8 after pad8 under a 16-bit policy;
 * float32 keeps lstm60's 60. */
START_TEST(test_pad8_graph) {
  diag_sink *d = diag_sink_create();
  for (size_t mi = 0; mi < 2; mi++)
    for (size_t pi = 0; pi < 2; pi++) {
      ir_graph *g = lower(models[mi], policies16[pi], PASS_PIPELINE_PAD8, d);
      int scans = 0;
      for (int i = 0; i < g->n_nodes; i++) {
        const ir_node *n = g->nodes[i];
        if (!is_scan(n)) continue;
        scans++;
        int64_t h = n->srcs[1]->type.dims[0];
        ck_assert_msg(h % 8 == 0 && n->type.dims[n->type.rank - 1] == h && n->srcs[1]->type.dims[1] % 8 == 0,
                      "%s %s: %%%s runs on %lld units", models[mi], policies16[pi], n->name, (long long)h);
      }
      ck_assert_int_eq(scans, mi == 0 ? 1 : 5); /* rnn_chain: g, g2, s, bi forward and backward */
      ir_graph_destroy(g);
    }
  ir_graph *g = lower("lstm60", "float32", PASS_PIPELINE_PAD8, d);
  for (int i = 0; i < g->n_nodes; i++)
    if (is_scan(g->nodes[i])) ck_assert_int_eq(g->nodes[i]->srcs[1]->type.dims[0], 60);
  ir_graph_destroy(g);
  diag_sink_destroy(d);
}
END_TEST

/* pad8 changes shapes, never values: the float64 reference's outputs are
 * the same bits (padded products and biases are zeros, the padded lanes'
 * states zeros, each 16-bit rounding the same). */
START_TEST(test_pad8_reference_same_bits) {
  diag_sink *d = diag_sink_create();
  for (size_t mi = 0; mi < 2; mi++)
    for (size_t pi = 0; pi < 2; pi++) {
      ir_graph *plain = lower(models[mi], policies16[pi], PASS_PIPELINE_DEFAULT, d);
      ir_graph *padded = lower(models[mi], policies16[pi], PASS_PIPELINE_PAD8, d);
      enum { B = 3 };
      int64_t n = 0;
      ck_assert(ir_type_numel(&ir_graph_input(plain, 0)->type, B, &n));
      double *x = malloc((size_t)n * sizeof *x);
      rng r;
      rng_init(&r, 31);
      for (int64_t i = 0; i < n; i++) x[i] = rng_uniform(&r) * 4 - 2;
      double *want[8], *got[8];
      char err[256];
      ck_assert_msg(ref_run(plain, B, (const double *const *)&x, want, err, sizeof err), "%s", err);
      ck_assert_msg(ref_run(padded, B, (const double *const *)&x, got, err, sizeof err), "%s", err);
      for (int o = 0; o < plain->n_outputs; o++) {
        int64_t m = 0;
        ck_assert(ir_type_numel(&plain->outputs[o].value->type, B, &m));
        for (int64_t i = 0; i < m; i++)
          ck_assert_msg(want[o][i] == got[o][i], "%s %s output %d [%lld]: %.17g with pad8, %.17g without", models[mi],
                        policies16[pi], o, (long long)i, got[o][i], want[o][i]);
      }
      ref_outputs_free(want, plain->n_outputs);
      ref_outputs_free(got, padded->n_outputs);
      free(x);
      ir_graph_destroy(plain), ir_graph_destroy(padded);
    }
  diag_sink_destroy(d);
}
END_TEST

static castor_model *load(castor_context *ctx, const char *name) {
  char path[1024];
  snprintf(path, sizeof path, "%s/%s.cast", DIR, name);
  castor_model *m;
  ck_assert_msg(castor_model_load_file(ctx, path, NULL, &m) == CASTOR_OK, "%s", castor_context_last_error(ctx));
  return m;
}

/* A seeded input of the program's input 0 with `batch` rows. */
static castor_tensor *random_input(castor_context *ctx, castor_program *p, int64_t batch, uint64_t seed) {
  castor_tensor_info info;
  castor_program_input_info(p, 0, &info);
  int64_t dims[8];
  for (int r = 0; r < info.rank; r++) dims[r] = r ? info.dims[r] : batch;
  castor_tensor *x;
  ck_assert_int_eq(castor_tensor_create(ctx, CASTOR_F32, info.rank, dims, &x), CASTOR_OK);
  rng r;
  rng_init(&r, seed);
  float *xp = castor_tensor_data(x);
  for (int64_t i = 0; i < castor_tensor_numel(x); i++) xp[i] = rng_uniform_f32(&r, -2, 2);
  return x;
}

static void assert_same(castor_tensor *a, castor_tensor *b, const char *what) {
  ck_assert_msg(castor_tensor_nbytes(a) == castor_tensor_nbytes(b) &&
                    !memcmp(castor_tensor_data(a), castor_tensor_data(b), castor_tensor_nbytes(a)),
                "%s: pad8 changes the result", what);
}

/* The JIT: no pad8, pad8, pad8 on 3 threads; every output the same bits. */
START_TEST(test_pad8_jit_same_bits) {
  castor_context *ctx;
  ck_assert_int_eq(castor_context_create(&ctx), CASTOR_OK);
  for (size_t mi = 0; mi < 2; mi++) {
    castor_model *m = load(ctx, models[mi]);
    for (size_t pi = 0; pi < 4; pi++) {
      castor_tensor *x = NULL, *out[3][4] = {{0}};
      int n_out = 0;
      for (int v = 0; v < 3; v++) {
        castor_compile_options o;
        castor_compile_options_init(&o);
        o.policy = policies16[pi];
        o.pad8 = v > 0;
        o.threads = v == 2 ? 3 : 1;
        castor_program *p;
        ck_assert_msg(castor_compile(m, &o, &p) == CASTOR_OK, "%s", castor_context_last_error(ctx));
        n_out = castor_program_num_outputs(p);
        ck_assert_int_le(n_out, 4);
        if (!x) x = random_input(ctx, p, 5, 7 + pi);
        ck_assert_msg(castor_program_run(p, &x, 1, out[v], n_out) == CASTOR_OK, "%s", castor_context_last_error(ctx));
        castor_program_destroy(p);
      }
      for (int o = 0; o < n_out; o++) {
        char what[160];
        snprintf(what, sizeof what, "%s under %s, output %d", models[mi], policies16[pi], o);
        assert_same(out[0][o], out[1][o], what);
        assert_same(out[0][o], out[2][o], what);
        for (int v = 0; v < 3; v++) castor_tensor_destroy(out[v][o]);
      }
      castor_tensor_destroy(x);
    }
    castor_model_destroy(m);
  }
  castor_context_destroy(ctx);
}
END_TEST

/* Training with pad8: the forward scans run padded, the backward ones not
 * (pad8 pads forward recurrent ops only); three Adam steps on one batch give
 * the same losses and weights bit for bit. */
START_TEST(test_pad8_train_same_bits) {
  static const char text[] = "model t\n"
                             "compile loss=sparse_categorical_crossentropy, optimizer=adam\n"
                             "x = input(shape=[6, 5])\n"
                             "h = lstm(x, units=12, return_sequences=true, name=l)\n"
                             "g = gru(h, units=10, name=g)\n"
                             "y = dense(g, units=3, name=d)\n"
                             "p = activation(y, softmax, dtype=float32)\n"
                             "output p\n";
  static const char *const weights[] = {"l.kernel", "l.recurrent_kernel", "l.bias", "g.recurrent_kernel", "d.kernel"};
  castor_context *ctx;
  ck_assert_int_eq(castor_context_create(&ctx), CASTOR_OK);
  castor_model *m;
  ck_assert_msg(castor_model_load_string(ctx, "t.cast", text, strlen(text), NULL, &m) == CASTOR_OK, "%s",
                castor_context_last_error(ctx));
  for (size_t pi = 0; pi < 2; pi++) {
    castor_program *step[2];
    float loss[2][3];
    castor_tensor *x = NULL, *y = NULL;
    for (int v = 0; v < 2; v++) {
      castor_compile_options o;
      castor_compile_options_init(&o);
      o.policy = policies16[pi];
      o.pad8 = v;
      castor_train_options to;
      castor_train_options_init(&to);
      ck_assert_msg(castor_compile_train(m, &o, &to, &step[v]) == CASTOR_OK, "%s", castor_context_last_error(ctx));
      if (!x) {
        x = random_input(ctx, step[v], 8, 3);
        ck_assert_int_eq(castor_tensor_create(ctx, CASTOR_I32, 1, (int64_t[]){8}, &y), CASTOR_OK);
        for (int i = 0; i < 8; i++) ((int32_t *)castor_tensor_data(y))[i] = (i * 5) % 3;
      }
      castor_tensor *in[2] = {x, y};
      for (int s = 0; s < 3; s++) {
        castor_tensor *out[2] = {NULL, NULL};
        ck_assert_msg(castor_program_run(step[v], in, 2, out, 2) == CASTOR_OK, "%s", castor_context_last_error(ctx));
        loss[v][s] = *(const float *)castor_tensor_data(out[1]);
        ck_assert_msg(isfinite(loss[v][s]), "%s step %d: loss %g", policies16[pi], s, (double)loss[v][s]);
        castor_tensor_destroy(out[0]), castor_tensor_destroy(out[1]);
      }
    }
    for (int s = 0; s < 3; s++)
      ck_assert_msg(loss[0][s] == loss[1][s], "%s step %d: loss %.9g with pad8, %.9g without", policies16[pi], s,
                    (double)loss[1][s], (double)loss[0][s]);
    for (size_t w = 0; w < sizeof weights / sizeof *weights; w++) {
      castor_tensor *a, *b;
      ck_assert_int_eq(castor_program_get_state(step[0], weights[w], &a), CASTOR_OK);
      ck_assert_int_eq(castor_program_get_state(step[1], weights[w], &b), CASTOR_OK);
      char what[160];
      snprintf(what, sizeof what, "%s: %s after 3 steps", policies16[pi], weights[w]);
      assert_same(a, b, what);
      castor_tensor_destroy(a), castor_tensor_destroy(b);
    }
    castor_program_destroy(step[0]), castor_program_destroy(step[1]);
    castor_tensor_destroy(x), castor_tensor_destroy(y);
  }
  castor_model_destroy(m);
  castor_context_destroy(ctx);
}
END_TEST

/* castor check --pad8 on the LSTM(60): the lstm layer's row compares the
 * same value as without pad8 (lstm.h_T, after the slice back) with the same
 * error, and the verdict is OK. */
START_TEST(test_pad8_check_report) {
  castor_context *ctx;
  ck_assert_int_eq(castor_context_create(&ctx), CASTOR_OK);
  castor_model *m = load(ctx, "lstm60");
  castor_check_layer row[2];
  for (int v = 0; v < 2; v++) {
    castor_check_options o;
    castor_check_options_init(&o);
    o.compile.policy = "mixed_float16";
    o.compile.pad8 = v;
    o.batch = 4;
    castor_check_report *r;
    ck_assert_msg(castor_check(m, &o, NULL, 0, &r) == CASTOR_OK, "%s", castor_context_last_error(ctx));
    castor_check_summary s;
    castor_check_report_summary(r, &s);
    ck_assert_msg(s.verdict == CASTOR_CHECK_OK, "pad8=%d:\n%s", v, castor_check_report_format(r, CASTOR_CHECK_TEXT));
    int found = 0;
    for (int i = 0; i < castor_check_report_num_layers(r); i++) {
      castor_check_layer l;
      ck_assert_int_eq(castor_check_report_layer(r, i, &l), CASTOR_OK);
      if (strcmp(l.layer, "lstm")) continue;
      found = 1;
      row[v] = l;
      ck_assert_msg(l.compared && l.dtype == CASTOR_F16 && l.rel_error > 0 && l.rel_error < 4e-3 && l.not_finite == 0,
                    "pad8=%d: lstm row %s (%s) compared %d, rel err %g", v, l.value, l.op, l.compared, l.rel_error);
      ck_assert_str_eq(l.value, "lstm.h_T");
    }
    ck_assert_msg(found, "pad8=%d: no lstm row:\n%s", v, castor_check_report_format(r, CASTOR_CHECK_TEXT));
    const char *text = castor_check_report_format(r, CASTOR_CHECK_TEXT);
    ck_assert_msg(strstr(text, "\nlstm ") != NULL, "no lstm line:\n%s", text);
    castor_check_report_destroy(r);
  }
  ck_assert_msg(row[0].rel_error == row[1].rel_error && row[0].max_abs_error == row[1].max_abs_error,
                "lstm: rel err %g with pad8, %g without", row[1].rel_error, row[0].rel_error);
  castor_model_destroy(m);
  castor_context_destroy(ctx);
}
END_TEST

int main(void) {
  Suite *s = suite_create("rnn_pad8");
  TCase *tc = tcase_create("pad8");
  tcase_set_timeout(tc, 300); /* JIT compiles */
  tcase_add_test(tc, test_pad8_graph);
  tcase_add_test(tc, test_pad8_reference_same_bits);
  tcase_add_test(tc, test_pad8_jit_same_bits);
  tcase_add_test(tc, test_pad8_train_same_bits);
  tcase_add_test(tc, test_pad8_check_report);
  suite_add_tcase(s, tc);
  return check_run(s);
}
