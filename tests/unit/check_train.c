/* SPDX-License-Identifier: Apache-2.0 */
/*
 * check_train.c: training steps compiled for the CPU (castor_compile_train)
 * against the float64 reference interpreter running the same step graph
 * with the same state, step after step, under every policy and optimizer;
 * a model with layer_normalization, whose loss goes down under float32 and
 * mixed_float16; results bit-identical for any thread count; the state API
 * and its errors.
 *
 * Bounds (normalized error: max |got - want| / max |want|, over each
 * variable after the steps; relative error of the loss of each step), with
 * what they measured on 2026-11-23 (AMD EPYC, AVX-512):
 *   float32: 1e-5 for both (measured: loss 4.2e-8, weights 3.3e-6 with
 *   Adam, whose normalized steps amplify f32 differences of tiny gradients)
 *   16-bit policies: loss 1e-4, weights 2e-2 (measured: loss 2.1e-5,
 *   weights 7.1e-3 for bfloat16 variables, whose ulp is 2^-8: one rounding
 *   that lands on the other side of a boundary moves a weight by an ulp)
 */
#include <check.h>

#include "tests/unit/test_support.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/internal.h"
#include "castor.h"
#include "passes/passes.h"
#include "tests/ref/ref.h"
#include "util/util.h"

static const char *model_text = "model tiny\n"
                                "x = input(shape=[13])\n"
                                "h = dense(x, units=19, activation=relu, name=h)\n"
                                "g = dense(h, units=11, activation=tanh, name=g)\n"
                                "logits = dense(g, units=5, name=logits)\n"
                                "p = activation(logits, softmax, dtype=float32)\n"
                                "output p\n";

/* The same shapes with a Keras LayerNormalization after the first dense
 * (its gradient: layer_norm_grad, and sum_rows for gamma and beta). */
static const char *ln_model_text = "model tiny_ln\n"
                                   "x = input(shape=[13])\n"
                                   "h = dense(x, units=19, name=h)\n"
                                   "n = layer_normalization(h, name=n)\n"
                                   "a = activation(n, relu)\n"
                                   "g = dense(a, units=11, activation=tanh, name=g)\n"
                                   "logits = dense(g, units=5, name=logits)\n"
                                   "p = activation(logits, softmax, dtype=float32)\n"
                                   "output p\n";

/* general tensors: Keras Dropout between the layers (rate 0 too: the identity) */
static const char *do_model_text = "model tiny_do\n"
                                   "x = input(shape=[13])\n"
                                   "h = dense(x, units=19, activation=relu, name=h)\n"
                                   "d = dropout(h, rate=0.3, name=d)\n"
                                   "g = dense(d, units=11, activation=tanh, name=g)\n"
                                   "z = dropout(g, rate=0, name=z)\n"
                                   "logits = dense(z, units=5, name=logits)\n"
                                   "p = activation(logits, softmax, dtype=float32)\n"
                                   "output p\n";

/* general tensors: log_softmax as the last dense's activation (fused in
 * its GEMM's epilogue), trained as logits (softmax of log_softmax is the
 * softmax), and a log_softmax layer inside the network */
static const char *lsm_model_text = "model tiny_lsm\n"
                                    "x = input(shape=[13])\n"
                                    "h = dense(x, units=19, activation=log_softmax, name=h)\n"
                                    "g = dense(h, units=11, activation=tanh, name=g)\n"
                                    "l = activation(g, log_softmax)\n"
                                    "logits = dense(l, units=5, activation=log_softmax, name=logits)\n"
                                    "output logits\n";

enum { BATCH = 37, IN = 13, CLASSES = 5, STEPS = 3 };

typedef struct capture {
  ir_graph *g;
} capture;

static castor_status keep_graph(const ir_graph *g, const cg_backend *be, const cg_backend_options *bo, void *arg,
                                diag_sink *d) {
  (void)be, (void)bo, (void)d;
  ir_graph *c = ir_graph_clone(g);
  /* a clone shares constant data with g, which the driver frees after this
   * call: 16-bit variables' converted data lives in g's arena, so copy it */
  for (int i = 0; i < c->n_nodes; i++) {
    ir_node *n = c->nodes[i];
    int64_t bytes;
    if (n->op != IR_OP_VARIABLE || !n->attr.data || !ir_type_bytes(&n->type, 1, &bytes)) continue;
    n->attr.data = memcpy(arena_alloc(c->arena, (size_t)bytes + 1), n->attr.data, (size_t)bytes);
  }
  ((capture *)arg)->g = c;
  return CASTOR_OK;
}

typedef struct run {
  castor_context *ctx;
  castor_model *m;
  castor_program *p;
  ir_graph *g; /* the step graph the program was compiled from */
  ref_state st;
} run;

static void run_init_text(run *r, const char *text, const char *policy, const castor_train_options *to, int threads) {
  memset(r, 0, sizeof *r);
  ck_assert_int_eq(castor_context_create(&r->ctx), CASTOR_OK);
  ck_assert_int_eq(castor_model_load_string(r->ctx, "tiny.cast", text, strlen(text), NULL, &r->m), CASTOR_OK);
  castor_compile_options o;
  castor_compile_options_init(&o);
  o.policy = policy;
  o.threads = threads;
  o.verify_each = 1;
  castor_status st = castor_compile_train(r->m, &o, to, &r->p);
  ck_assert_msg(st == CASTOR_OK, "%s: %s", policy, castor_context_last_error(r->ctx));
  castor_driver_options d;
  castor_driver_options_init(&d);
  d.train = to;
  capture cap = {0};
  ck_assert_int_eq(castor_compile_to(r->m, &o, &d, keep_graph, &cap), CASTOR_OK);
  r->g = cap.g;
  ref_state_init(&r->st, r->g);
}

static void run_init(run *r, const char *policy, const castor_train_options *to, int threads) {
  run_init_text(r, model_text, policy, to, threads);
}

static void run_fini(run *r) {
  ref_state_fini(&r->st);
  ir_graph_destroy(r->g);
  castor_program_destroy(r->p);
  castor_model_destroy(r->m);
  castor_context_destroy(r->ctx);
}

static castor_tensor *tensor(castor_context *ctx, castor_dtype dt, int rank, const int64_t *dims) {
  castor_tensor *t = NULL;
  ck_assert_int_eq(castor_tensor_create(ctx, dt, rank, dims, &t), CASTOR_OK);
  return t;
}

/* Batch k of a seeded dataset: x in [0, 1), labels in [0, CLASSES): random,
 * or learnable (the argmax of a fixed projection of x). */
static void batch_of(int k, bool learnable, float *x, int32_t *y) {
  rng r;
  rng_init(&r, 100 + (uint64_t)k);
  for (int i = 0; i < BATCH * IN; i++) x[i] = rng_uniform_f32(&r, 0, 1);
  for (int i = 0; i < BATCH; i++) y[i] = (int32_t)(rng_next(&r) % CLASSES);
  if (!learnable) return;
  float w[IN * CLASSES];
  rng_init(&r, 7);
  for (int i = 0; i < IN * CLASSES; i++) w[i] = rng_uniform_f32(&r, -1, 1);
  for (int i = 0; i < BATCH; i++) {
    float best = -1e30f;
    for (int c = 0; c < CLASSES; c++) {
      float s = 0;
      for (int j = 0; j < IN; j++) s += x[i * IN + j] * w[j * CLASSES + c];
      if (s > best) best = s, y[i] = c;
    }
  }
}

static void batch(int k, float *x, int32_t *y) { batch_of(k, false, x, y); }

/* One step on both; returns the loss each computed. */
static void step_of(run *r, int k, bool learnable, double *got_loss, double *want_loss) {
  int64_t xd[] = {BATCH, IN}, yd[] = {BATCH};
  castor_tensor *x = tensor(r->ctx, CASTOR_F32, 2, xd), *y = tensor(r->ctx, CASTOR_I32, 1, yd);
  batch_of(k, learnable, castor_tensor_data(x), castor_tensor_data(y));
  castor_tensor *ins[] = {x, y}, *outs[2] = {NULL, NULL};
  ck_assert_msg(castor_program_run(r->p, ins, 2, outs, 2) == CASTOR_OK, "run: %s", castor_context_last_error(r->ctx));
  ck_assert_int_eq(castor_tensor_rank(outs[1]), 0);
  *got_loss = *(float *)castor_tensor_data(outs[1]);
  double *rx = ref_from_f32(castor_tensor_data(x), BATCH * IN), *ry = xmalloc(BATCH * sizeof *ry);
  for (int i = 0; i < BATCH; i++) ry[i] = ((int32_t *)castor_tensor_data(y))[i];
  const double *rin[] = {rx, ry};
  double *want[2] = {NULL, NULL};
  char err[256];
  ck_assert_msg(ref_run_state(r->g, BATCH, rin, &r->st, want, err, sizeof err), "reference: %s", err);
  *want_loss = want[1][0];
  ref_outputs_free(want, 2);
  free(rx), free(ry);
  for (int i = 0; i < 2; i++) castor_tensor_destroy(outs[i]);
  castor_tensor_destroy(x), castor_tensor_destroy(y);
}

static void step(run *r, int k, double *got_loss, double *want_loss) { step_of(r, k, false, got_loss, want_loss); }

/* Normalized error of state `name` against the reference's. */
static double state_error(run *r, const char *name) {
  castor_tensor *t = NULL;
  ck_assert_msg(castor_program_get_state(r->p, name, &t) == CASTOR_OK, "%s", castor_context_last_error(r->ctx));
  int64_t n = castor_tensor_numel(t), rn = 0;
  double *want = ref_state_get(&r->st, name, &rn);
  ck_assert_msg(want && rn == n, "reference state %s", name);
  float *got = xmalloc((size_t)n * sizeof *got);
  const void *d = castor_tensor_data(t);
  for (int64_t i = 0; i < n; i++)
    got[i] = castor_tensor_dtype(t) == CASTOR_F32 ? ((const float *)d)[i]
             : castor_tensor_dtype(t) == CASTOR_I64 ? (float)((const int64_t *)d)[i]
                                                     : (float)dtype_load_double((rt_dtype)castor_tensor_dtype(t), d, i);
  double e = ref_normalized_error(got, want, n);
  free(got);
  castor_tensor_destroy(t);
  return e;
}

static void check_against_reference_with(const char *policy, const char *optimizer, double momentum, int centered) {
  castor_train_options to;
  castor_train_options_init(&to);
  to.optimizer = optimizer;
  to.momentum = momentum;
  to.centered = centered;
  run r;
  run_init(&r, policy, &to, 2);
  bool f32 = strcmp(policy, "float32") == 0;
  double loss_bound = f32 ? 1e-5 : 1e-4, w_bound = f32 ? 1e-5 : 2e-2;
  for (int k = 0; k < STEPS; k++) {
    double got, want;
    step(&r, k, &got, &want);
    ck_assert_msg(fabs(got - want) <= loss_bound * fabs(want), "%s %s (momentum %g%s) step %d: loss %.9g, reference %.9g",
                  policy, optimizer, momentum, centered ? ", centered" : "", k + 1, got, want);
  }
  static const char *const weights[] = {"h.kernel", "h.bias", "g.kernel", "g.bias", "logits.kernel", "logits.bias"};
  for (int w = 0; w < 6; w++) {
    double e = state_error(&r, weights[w]);
    ck_assert_msg(e <= w_bound, "%s %s (momentum %g%s): %s after %d steps: normalized error %g", policy, optimizer,
                  momentum, centered ? ", centered" : "", weights[w], STEPS, e);
  }
  ck_assert_double_eq(state_error(&r, "optimizer.iterations"), 0);
  run_fini(&r);
}

static void check_against_reference(const char *policy, const char *optimizer) {
  check_against_reference_with(policy, optimizer, 0, 0);
}

/* A model with layer_normalization, trained on the CPU under float32 and
 * mixed_float16: the first steps against the reference (every weight,
 * gamma and beta included, within the bounds above), then 60 steps on a
 * learnable task over 8 batches, whose loss must go down (mean of the last
 * 8 steps below 0.8 of the first 8's; measured on every CPU path: 1.18 ->
 * 0.21 under both policies; weights within 2.8e-6 of the reference under
 * float32, 4.3e-5 under mixed_float16). */
static void check_layer_norm_training(const char *policy) {
  castor_train_options to;
  castor_train_options_init(&to);
  to.optimizer = "adam";
  to.learning_rate = 0.01;
  run r;
  run_init_text(&r, ln_model_text, policy, &to, 2);
  bool f32 = strcmp(policy, "float32") == 0;
  double loss_bound = f32 ? 1e-5 : 1e-4, w_bound = f32 ? 1e-5 : 2e-2;
  enum { TRAIN_STEPS = 60, WINDOW = 8 };
  double first = 0, last = 0;
  for (int k = 0; k < TRAIN_STEPS; k++) {
    double got, want;
    step_of(&r, k % WINDOW, true, &got, &want);
    if (k < STEPS)
      ck_assert_msg(fabs(got - want) <= loss_bound * fabs(want), "layer_norm %s step %d: loss %.9g, reference %.9g",
                    policy, k + 1, got, want);
    if (k == STEPS - 1) {
      static const char *const weights[] = {"h.kernel", "h.bias", "n.gamma", "n.beta", "g.kernel", "logits.kernel"};
      for (int w = 0; w < 6; w++) {
        double e = state_error(&r, weights[w]);
        ck_assert_msg(e <= w_bound, "layer_norm %s: %s after %d steps: normalized error %g", policy, weights[w], STEPS, e);
      }
    }
    if (k < WINDOW) first += got / WINDOW;
    if (k >= TRAIN_STEPS - WINDOW) last += got / WINDOW;
  }
  ck_assert_msg(last < 0.8 * first, "layer_norm %s: the loss went from %.4f to %.4f in %d steps", policy, first, last,
                TRAIN_STEPS);
  castor_tensor *it = NULL;
  ck_assert_int_eq(castor_program_get_state(r.p, "optimizer.iterations", &it), CASTOR_OK);
  ck_assert_msg(*(int64_t *)castor_tensor_data(it) > TRAIN_STEPS / 2, "%s: %lld steps applied", policy,
                (long long)*(int64_t *)castor_tensor_data(it));
  castor_tensor_destroy(it);
  run_fini(&r);
}

START_TEST(test_layer_norm_float32) { check_layer_norm_training("float32"); }
END_TEST
START_TEST(test_layer_norm_mixed_float16) { check_layer_norm_training("mixed_float16"); }
END_TEST

/* general tensors: dropout trains on the CPU as the reference computes it
 * (the same masks: the loss of each step and every weight after them
 * within the bounds above), under float32 and mixed_float16; dropout.step
 * counts the steps; rate 0 adds no dropout_train. */
static void check_dropout_training(const char *policy, bool lsm) {
  castor_train_options to;
  castor_train_options_init(&to);
  to.optimizer = lsm ? "sgd" : "adam"; /* sgd: Adam's normalized steps amplify the f32 rounding of tiny gradients */
  to.from_logits = lsm;
  run r;
  run_init_text(&r, lsm ? lsm_model_text : do_model_text, policy, &to, 2);
  int n_train = 0;
  for (int i = 0; i < r.g->n_nodes; i++)
    n_train += r.g->nodes[i]->op == (lsm ? IR_OP_LOG_SOFTMAX_GRAD : IR_OP_DROPOUT_TRAIN);
  ck_assert_int_eq(n_train, lsm ? 3 : 2); /* d's forward and its gradient; or the gradients of 3 log_softmax */
  bool f32 = strcmp(policy, "float32") == 0;
  double loss_bound = f32 ? 1e-5 : 1e-4, w_bound = f32 ? 1e-5 : 2e-2;
  for (int k = 0; k < STEPS; k++) {
    double got, want;
    step(&r, k, &got, &want);
    ck_assert_msg(fabs(got - want) <= loss_bound * fabs(want), "dropout %s step %d: loss %.9g, reference %.9g", policy,
                  k + 1, got, want);
  }
  static const char *const weights[] = {"h.kernel", "h.bias", "g.kernel", "g.bias", "logits.kernel", "logits.bias"};
  for (int w = 0; w < 6; w++) {
    double e = state_error(&r, weights[w]);
    ck_assert_msg(e <= w_bound, "dropout %s: %s after %d steps: normalized error %g", policy, weights[w], STEPS, e);
  }
  if (!lsm) {
    castor_tensor *st = NULL;
    ck_assert_int_eq(castor_program_get_state(r.p, "dropout.step", &st), CASTOR_OK);
    ck_assert_int_eq(*(int64_t *)castor_tensor_data(st), STEPS);
    castor_tensor_destroy(st);
  }
  run_fini(&r);
}

START_TEST(test_dropout_float32) { check_dropout_training("float32", false); }
END_TEST
START_TEST(test_dropout_mixed_float16) { check_dropout_training("mixed_float16", false); }
END_TEST
START_TEST(test_log_softmax_float32) { check_dropout_training("float32", true); }
END_TEST
START_TEST(test_log_softmax_mixed_float16) { check_dropout_training("mixed_float16", true); }
END_TEST

START_TEST(test_float32_rmsprop) { check_against_reference("float32", "rmsprop"); }
END_TEST
START_TEST(test_float32_adam) { check_against_reference("float32", "adam"); }
END_TEST
START_TEST(test_float32_sgd) { check_against_reference("float32", "sgd"); }
END_TEST
START_TEST(test_mixed_float16_rmsprop) { check_against_reference("mixed_float16", "rmsprop"); }
END_TEST
START_TEST(test_mixed_bfloat16_adam) { check_against_reference("mixed_bfloat16", "adam"); }
END_TEST
START_TEST(test_float16_sgd) { check_against_reference("float16", "sgd"); }
END_TEST
START_TEST(test_bfloat16_rmsprop) { check_against_reference("bfloat16", "rmsprop"); }
END_TEST
/* RMSprop's variants: momentum, centered, both; 16-bit slots under bfloat16 */
START_TEST(test_float32_rmsprop_variants) {
  check_against_reference_with("float32", "rmsprop", 0.9, 0);
  check_against_reference_with("float32", "rmsprop", 0, 1);
  check_against_reference_with("float32", "rmsprop", 0.9, 1);
}
END_TEST
START_TEST(test_16bit_rmsprop_variants) {
  check_against_reference_with("bfloat16", "rmsprop", 0.9, 1);
  check_against_reference_with("mixed_float16", "rmsprop", 0.5, 1);
}
END_TEST

/* The same steps on 1 and on 3 threads: every state bit-identical (the
 * model with layer_normalization too; the first model also under
 * mixed_bfloat16, whose GEMMs take the K-pair family where the CPU has
 * it). */
START_TEST(test_threads_bit_identical) {
  const char *const texts[] = {model_text, ln_model_text, model_text, do_model_text};
  for (int m = 0; m < 4; m++) {
    castor_train_options to;
    castor_train_options_init(&to);
    to.optimizer = "adam";
    run a, b;
    const char *policy = m == 2 ? "mixed_bfloat16" : "mixed_float16"; /* bf16: the K-pair GEMMs */
    run_init_text(&a, texts[m], policy, &to, 1);
    run_init_text(&b, texts[m], policy, &to, 3);
    setenv("CASTOR_PARALLEL_MIN_WORK", "0", 1); /* split even these tiny launches */
    for (int k = 0; k < STEPS; k++) {
      double ga, gb, w;
      step(&a, k, &ga, &w);
      step(&b, k, &gb, &w);
      ck_assert_msg(ga == gb, "model %d step %d: loss %.9g on 1 thread, %.9g on 3", m, k + 1, ga, gb);
    }
    for (int i = 0; i < castor_program_num_states(a.p); i++) {
      castor_tensor_info info;
      ck_assert_int_eq(castor_program_state_info(a.p, i, &info), CASTOR_OK);
      castor_tensor *ta = NULL, *tb = NULL;
      ck_assert_int_eq(castor_program_get_state(a.p, info.name, &ta), CASTOR_OK);
      ck_assert_int_eq(castor_program_get_state(b.p, info.name, &tb), CASTOR_OK);
      ck_assert_msg(memcmp(castor_tensor_data(ta), castor_tensor_data(tb), castor_tensor_nbytes(ta)) == 0,
                    "model %d: state %s differs between 1 and 3 threads", m, info.name);
      castor_tensor_destroy(ta), castor_tensor_destroy(tb);
    }
    unsetenv("CASTOR_PARALLEL_MIN_WORK");
    run_fini(&a), run_fini(&b);
  }
}
END_TEST

/* The dynamic loss scale on the CPU: a NaN batch is skipped (every
 * variable and slot bit-identical, the scale halved); the learning rate is
 * a run-time scalar the host sets. */
START_TEST(test_loss_scale_skip_and_state_api) {
  castor_train_options to;
  castor_train_options_init(&to);
  to.optimizer = "adam";
  run r;
  run_init(&r, "mixed_float16", &to, 2);
  ck_assert_int_eq(castor_program_num_states(r.p), 2 * 6 * 1 + 6 + 4); /* weights, m, v; lr, steps, scale, good */
  /* each state's kind, from the compiler: the weights trainable, Adam's
   * slots, the four scalars; no non-trainable variable in this model */
  int kinds[4] = {0};
  for (int i = 0; i < castor_program_num_states(r.p); i++) {
    castor_state_kind k = castor_program_state_kind(r.p, i);
    ck_assert(k >= CASTOR_STATE_TRAINABLE && k <= CASTOR_STATE_SCALAR);
    kinds[k]++;
    castor_tensor_info si;
    ck_assert_int_eq(castor_program_state_info(r.p, i, &si), CASTOR_OK);
    ck_assert_msg((k == CASTOR_STATE_SCALAR) == !strncmp(si.name, "optimizer.", 10), "%s: kind %d", si.name, k);
  }
  ck_assert_int_eq(kinds[CASTOR_STATE_TRAINABLE], 6);
  ck_assert_int_eq(kinds[CASTOR_STATE_NONTRAINABLE], 0);
  ck_assert_int_eq(kinds[CASTOR_STATE_SLOT], 12);
  ck_assert_int_eq(kinds[CASTOR_STATE_SCALAR], 4);
  ck_assert_int_eq(castor_program_state_kind(r.p, -1), CASTOR_STATE_INVALID);
  ck_assert_int_eq(castor_program_state_kind(r.p, castor_program_num_states(r.p)), CASTOR_STATE_INVALID);
  ck_assert_int_eq(castor_program_state_kind(NULL, 0), CASTOR_STATE_INVALID);
  double l, w;
  step(&r, 0, &l, &w);
  int n = castor_program_num_states(r.p);
  castor_tensor **before = xcalloc((size_t)n, sizeof *before);
  castor_tensor_info info;
  for (int i = 0; i < n; i++) {
    ck_assert_int_eq(castor_program_state_info(r.p, i, &info), CASTOR_OK);
    ck_assert_int_eq(castor_program_get_state(r.p, info.name, &before[i]), CASTOR_OK);
  }
  int64_t xd[] = {BATCH, IN}, yd[] = {BATCH};
  castor_tensor *x = tensor(r.ctx, CASTOR_F32, 2, xd), *y = tensor(r.ctx, CASTOR_I32, 1, yd);
  batch(1, castor_tensor_data(x), castor_tensor_data(y));
  ((float *)castor_tensor_data(x))[5] = NAN;
  castor_tensor *ins[] = {x, y}, *outs[2] = {NULL, NULL};
  ck_assert_int_eq(castor_program_run(r.p, ins, 2, outs, 2), CASTOR_OK);
  ck_assert_msg(isnan(*(float *)castor_tensor_data(outs[1])), "the loss of a NaN batch is NaN");
  for (int i = 0; i < n; i++) {
    ck_assert_int_eq(castor_program_state_info(r.p, i, &info), CASTOR_OK);
    castor_tensor *now = NULL;
    ck_assert_int_eq(castor_program_get_state(r.p, info.name, &now), CASTOR_OK);
    bool same = memcmp(castor_tensor_data(now), castor_tensor_data(before[i]), castor_tensor_nbytes(now)) == 0;
    if (!strcmp(info.name, "optimizer.loss_scale")) {
      ck_assert_float_eq(*(float *)castor_tensor_data(now), 16384.0f);
    } else if (!strcmp(info.name, "optimizer.good_steps")) {
      ck_assert_int_eq(*(int64_t *)castor_tensor_data(now), 0);
    } else {
      ck_assert_msg(same, "%s changed on a skipped step", info.name);
    }
    castor_tensor_destroy(now);
    castor_tensor_destroy(before[i]);
  }
  free(before);
  for (int i = 0; i < 2; i++) castor_tensor_destroy(outs[i]);
  /* set the learning rate; wrong shapes and names are errors */
  castor_tensor *lr = tensor(r.ctx, CASTOR_F32, 0, NULL);
  *(float *)castor_tensor_data(lr) = 0.25f;
  ck_assert_int_eq(castor_program_set_state(r.p, "optimizer.learning_rate", lr), CASTOR_OK);
  castor_tensor *back = NULL;
  ck_assert_int_eq(castor_program_get_state(r.p, "optimizer.learning_rate", &back), CASTOR_OK);
  ck_assert_float_eq(*(float *)castor_tensor_data(back), 0.25f);
  castor_tensor_destroy(back);
  ck_assert_int_eq(castor_program_set_state(r.p, "h.kernel", lr), CASTOR_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(castor_context_last_error(r.ctx), "error: state h.kernel is f32[13,19], the tensor is f32[]\n");
  ck_assert_int_eq(castor_program_get_state(r.p, "nope", &back), CASTOR_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(castor_context_last_error(r.ctx), "error: tiny has no state 'nope'\n");
  castor_tensor_destroy(lr), castor_tensor_destroy(x), castor_tensor_destroy(y);
  run_fini(&r);
}
END_TEST

/* ---- the loss scale below 1: which layer overflowed first ---- */

static const char *reg_text = "model reg\n"
                              "policy mixed_float16\n"
                              "features = input(shape=[12])\n"
                              "h = dense(features, units=8, activation=relu, name=hidden)\n"
                              "out = dense(h, units=5, name=out)\n"
                              "output out\n";

/* x in [-1, 1) times x_scale, targets of size 1e6: mean squared error's
 * gradients overflow float16 in the last layer even unscaled. */
static void reg_batch(castor_context *ctx, float x_scale, castor_tensor **x, castor_tensor **y) {
  rng r;
  rng_init(&r, 7);
  *x = tensor(ctx, CASTOR_F32, 2, (int64_t[]){8, 12});
  *y = tensor(ctx, CASTOR_F32, 2, (int64_t[]){8, 5});
  for (int i = 0; i < 8 * 12; i++) ((float *)castor_tensor_data(*x))[i] = x_scale * rng_uniform_f32(&r, -1, 1);
  for (int i = 0; i < 8 * 5; i++) ((float *)castor_tensor_data(*y))[i] = 1e6f * rng_uniform_f32(&r, -1, 1);
}

START_TEST(test_find_overflow) {
  castor_context *ctx;
  castor_model *m;
  castor_program *p = NULL;
  ck_assert_int_eq(castor_context_create(&ctx), CASTOR_OK);
  ck_assert_int_eq(castor_model_load_string(ctx, "reg.cast", reg_text, strlen(reg_text), NULL, &m), CASTOR_OK);
  castor_train_options to;
  castor_train_options_init(&to);
  to.loss = "mean_squared_error";
  ck_assert_int_eq(castor_compile_train(m, NULL, &to, &p), CASTOR_OK);
  castor_tensor *x, *y, *outs[2] = {NULL, NULL}, *t = NULL;
  reg_batch(ctx, 1, &x, &y);
  { /* a step needs a sample: an empty batch is refused, the state untouched */
    castor_tensor *x0 = tensor(ctx, CASTOR_F32, 2, (int64_t[]){0, 12}), *y0 = tensor(ctx, CASTOR_F32, 2, (int64_t[]){0, 5});
    ck_assert_int_eq(castor_program_run(p, (castor_tensor *[]){x0, y0}, 2, outs, 2), CASTOR_ERR_INVALID_ARGUMENT);
    ck_assert_msg(strstr(castor_context_last_error(ctx), "is a training step: its batch must hold at least 1 sample, got 0"),
                  "%s", castor_context_last_error(ctx));
    ck_assert_ptr_null(outs[0]);
    castor_tensor_destroy(x0), castor_tensor_destroy(y0);
  }
  float used = 0, now = 32768;
  for (int k = 0; k < 40 && now >= 1; k++) { /* every step rejected: the scale halves to below 1 */
    used = now;
    ck_assert_int_eq(castor_program_run(p, (castor_tensor *[]){x, y}, 2, outs, 2), CASTOR_OK);
    for (int i = 0; i < 2; i++) castor_tensor_destroy(outs[i]), outs[i] = NULL;
    ck_assert_int_eq(castor_program_get_state(p, "optimizer.loss_scale", &t), CASTOR_OK);
    now = *(float *)castor_tensor_data(t);
    castor_tensor_destroy(t);
  }
  ck_assert_float_eq(used, 1.0f);
  ck_assert_float_eq(now, 0.5f);
  castor_overflow_report r;
  ck_assert_int_eq(castor_program_find_overflow(p, m, NULL, &to, used, x, y, &r), CASTOR_OK);
  ck_assert_str_eq(r.layer, "out"); /* the backward pass computes out's gradients first */
  ck_assert_int_eq(r.numel, 45);    /* kernel and bias */
  ck_assert(r.nonfinite > 0 && r.nonfinite <= 45);
  ck_assert(r.loss_finite);
  ck_assert_int_ge(r.layers, 1);
  /* at a scale small enough every gradient is finite */
  ck_assert_int_eq(castor_program_find_overflow(p, m, NULL, &to, 0x1p-10, x, y, &r), CASTOR_OK);
  ck_assert_str_eq(r.layer, "");
  ck_assert_int_eq(r.layers, 0);
  /* inputs that overflow the forward pass: the loss itself */
  castor_tensor *xb, *yb;
  reg_batch(ctx, 60000, &xb, &yb);
  ck_assert_int_eq(castor_program_find_overflow(p, m, NULL, &to, 1, xb, yb, &r), CASTOR_OK);
  ck_assert(!r.loss_finite);
  /* misuse */
  ck_assert_int_eq(castor_program_find_overflow(p, m, NULL, &to, 0, x, y, &r), CASTOR_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(castor_context_last_error(ctx),
                   "error: castor_program_find_overflow: loss scale 0 is not a positive number\n");
  ck_assert_int_eq(castor_program_find_overflow(p, m, NULL, &to, 1, y, x, &r), CASTOR_ERR_INVALID_ARGUMENT);
  ck_assert_int_eq(castor_program_find_overflow(NULL, m, NULL, &to, 1, x, y, &r), CASTOR_ERR_INVALID_ARGUMENT);
  castor_tensor_destroy(xb), castor_tensor_destroy(yb), castor_tensor_destroy(x), castor_tensor_destroy(y);
  castor_program_destroy(p);
  castor_model_destroy(m);
  castor_context_destroy(ctx);
}
END_TEST

/* castor train says it once, at the step the scale fell below 1. */
START_TEST(test_train_cli_overflow_warning) {
  castor_context *ctx;
  ck_assert_int_eq(castor_context_create(&ctx), CASTOR_OK);
  char dir[] = "/tmp/castor_overflow_XXXXXX", path[256], cmd[1024];
  ck_assert(mkdtemp(dir) != NULL);
  castor_tensor *x, *y;
  reg_batch(ctx, 1, &x, &y);
  snprintf(path, sizeof path, "%s/x.npy", dir);
  ck_assert_int_eq(castor_tensor_save_npy(x, path), CASTOR_OK);
  snprintf(path, sizeof path, "%s/y.npy", dir);
  ck_assert_int_eq(castor_tensor_save_npy(y, path), CASTOR_OK);
  snprintf(path, sizeof path, "%s/reg.cast", dir);
  FILE *f = fopen(path, "w");
  ck_assert(f && fputs(reg_text, f) >= 0 && fclose(f) == 0);
  snprintf(cmd, sizeof cmd,
           "cd %s && %s/castor train reg.cast --x x.npy --y y.npy --loss mean_squared_error --epochs 20 "
           "--batch-size 8 > out.txt 2> err.txt",
           dir, CASTOR_BINARY_DIR);
  ck_assert_msg(system(cmd) == 0, "failed: %s", cmd);
  snprintf(path, sizeof path, "%s/err.txt", dir);
  char *err;
  size_t len;
  ck_assert(str_read_file(path, &err, &len));
  const char *want = "castor: warning: step 16: the loss scale fell below 1 (to 0.5): the gradients of layer 'out' "
                     "overflow first (";
  const char *at = strstr(err, want);
  ck_assert_msg(at, "no warning in:\n%s", err);
  ck_assert_msg(!strstr(at + 1, "castor: warning"), "warned twice:\n%s", err);
  ck_assert_msg(strstr(at, " not finite at scale 1") && strstr(at, "`castor check --train` counts every layer's\n"),
                "%s", err);
  free(err);
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  ck_assert(system(cmd) == 0);
  castor_tensor_destroy(x), castor_tensor_destroy(y);
  castor_context_destroy(ctx);
}
END_TEST

START_TEST(test_train_option_errors) {
  castor_context *ctx;
  castor_model *m;
  castor_program *p = NULL;
  ck_assert_int_eq(castor_context_create(&ctx), CASTOR_OK);
  ck_assert_int_eq(castor_model_load_string(ctx, "tiny.cast", model_text, strlen(model_text), NULL, &m), CASTOR_OK);
  castor_train_options to;
  castor_train_options_init(&to);
  to.optimizer = "adagrad";
  ck_assert_int_eq(castor_compile_train(m, NULL, &to, &p), CASTOR_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(castor_context_last_error(ctx),
                   "error: --optimizer: unknown optimizer 'adagrad' (optimizers: sgd, rmsprop, adam, adamw, none)\n");
  castor_train_options_init(&to);
  to.loss_scale = "lots";
  ck_assert_int_eq(castor_compile_train(m, NULL, &to, &p), CASTOR_ERR_INVALID_ARGUMENT);
  castor_train_options_init(&to);
  to.learning_rate = -1;
  ck_assert_int_eq(castor_compile_train(m, NULL, &to, &p), CASTOR_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(castor_context_last_error(ctx), "error: --learning-rate: '-1' is not a number in [1e-30, 1e+30]\n");
  /* an inference program has no state */
  ck_assert_int_eq(castor_compile(m, NULL, &p), CASTOR_OK);
  ck_assert_int_eq(castor_program_num_states(p), 0);
  castor_tensor *t = NULL;
  ck_assert_int_eq(castor_program_get_state(p, "h.kernel", &t), CASTOR_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(castor_context_last_error(ctx), "error: tiny has no state 'h.kernel' (it is not a training program)\n");
  castor_program_destroy(p);
  castor_model_destroy(m);
  castor_context_destroy(ctx);
}
END_TEST

/* training options: Keras's optimizer arguments out of range, through the
 * API: errors naming the field and its range */
START_TEST(test_train_options_api_errors) {
  castor_context *ctx;
  castor_model *m;
  castor_program *p = NULL;
  ck_assert_int_eq(castor_context_create(&ctx), CASTOR_OK);
  ck_assert_int_eq(castor_model_load_string(ctx, "tiny.cast", model_text, strlen(model_text), NULL, &m), CASTOR_OK);
  static const int64_t up_down[] = {10, 5}, two[] = {10, 20};
  static const double rates[] = {0.1, 0.01, 0.001};
  static const struct {
    const char *field, *want;
  } cases[] = {
      {"beta_1", "error: castor_train_options.beta_1 must be in (0, 1) (0: Keras's 0.9), got 1.5\n"},
      {"epsilon", "error: castor_train_options.epsilon must be in (0, 1] (0: Keras's 1e-7), got -1\n"},
      {"weight_decay", "error: castor_train_options.weight_decay must be in [0, 1e30] (0: Keras's 0.004), got -0.5\n"},
      {"growth", "error: castor_train_options.loss_scale_growth_steps must be in [1, 10^9] (0: Keras's 2000), got -3\n"},
      {"schedule", "error: castor_train_options.lr_schedule: unknown schedule 'step' (schedules: exponential_decay, "
                   "cosine_decay, piecewise_constant_decay)\n"},
      {"stray", "error: castor_train_options.decay_rate (exponential_decay) is set, but lr_schedule is cosine_decay\n"},
      {"decay_steps", "error: castor_train_options.decay_steps must be > 0 for exponential_decay, got 0\n"},
      {"increasing", "error: castor_train_options.boundaries must be strictly increasing: boundaries[1] = 5 follows 10\n"},
      {"count", "error: castor_train_options.values: piecewise_constant_decay needs one value more than boundaries "
                "(2 boundaries, so 3 values), got 2\n"},
      {"clip", "error: grad: only one of --clipnorm, --clipvalue and --global-clipnorm can be set (Keras: only one of "
               "clipnorm, clipvalue and global_clipnorm)\n"},
      {"wd_adam", "error: grad: --weight-decay is not an option of adam (adamw takes it)\n"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    castor_train_options to;
    castor_train_options_init(&to);
    const char *f = cases[i].field;
    if (!strcmp(f, "beta_1")) to.optimizer = "adam", to.beta_1 = 1.5;
    else if (!strcmp(f, "epsilon")) to.epsilon = -1;
    else if (!strcmp(f, "weight_decay")) to.optimizer = "adamw", to.weight_decay = -0.5;
    else if (!strcmp(f, "growth")) to.loss_scale_growth_steps = -3;
    else if (!strcmp(f, "schedule")) to.lr_schedule = "step";
    else if (!strcmp(f, "stray")) to.lr_schedule = "cosine_decay", to.decay_steps = 5, to.decay_rate = 0.5;
    else if (!strcmp(f, "decay_steps")) to.lr_schedule = "exponential_decay", to.decay_rate = 0.5;
    else if (!strcmp(f, "increasing"))
      to.lr_schedule = "piecewise_constant_decay", to.boundaries = up_down, to.n_boundaries = 2, to.values = rates,
      to.n_values = 3;
    else if (!strcmp(f, "count"))
      to.lr_schedule = "piecewise_constant_decay", to.boundaries = two, to.n_boundaries = 2, to.values = rates,
      to.n_values = 2;
    else if (!strcmp(f, "clip")) to.clipnorm = 1, to.clipvalue = 1;
    else to.optimizer = "adam", to.weight_decay = 0.1;
    ck_assert_int_eq(castor_compile_train(m, NULL, &to, &p), CASTOR_ERR_INVALID_ARGUMENT);
    ck_assert_str_eq(castor_context_last_error(ctx), cases[i].want);
  }
  castor_model_destroy(m);
  castor_context_destroy(ctx);
}
END_TEST

static Suite *train_suite(void) {
  Suite *s = suite_create("train");
  TCase *tc = tcase_create("train");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_train_options_api_errors); /* training options */
  tcase_add_test(tc, test_float32_rmsprop);
  tcase_add_test(tc, test_float32_adam);
  tcase_add_test(tc, test_float32_sgd);
  tcase_add_test(tc, test_mixed_float16_rmsprop);
  tcase_add_test(tc, test_mixed_bfloat16_adam);
  tcase_add_test(tc, test_float16_sgd);
  tcase_add_test(tc, test_bfloat16_rmsprop);
  tcase_add_test(tc, test_find_overflow);
  tcase_add_test(tc, test_train_cli_overflow_warning);
  tcase_add_test(tc, test_float32_rmsprop_variants);
  tcase_add_test(tc, test_16bit_rmsprop_variants);
  tcase_add_test(tc, test_layer_norm_float32);
  tcase_add_test(tc, test_layer_norm_mixed_float16);
  tcase_add_test(tc, test_threads_bit_identical);
  tcase_add_test(tc, test_dropout_float32); /* general tensors */
  tcase_add_test(tc, test_dropout_mixed_float16);
  tcase_add_test(tc, test_log_softmax_float32);
  tcase_add_test(tc, test_log_softmax_mixed_float16);
  tcase_add_test(tc, test_loss_scale_skip_and_state_api);
  tcase_add_test(tc, test_train_option_errors);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  check_cpu_path("check_train");
  return check_run(train_suite());
}
