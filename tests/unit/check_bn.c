/* SPDX-License-Identifier: Apache-2.0 */
/*
 * check_bn.c: batch normalization (Keras BatchNormalization) in training.
 *
 *   - the gradient through the batch's statistics (grad.c's full backward)
 *     against central differences of the float64 reference's loss, on odd
 *     shapes: a conv2d of 5 channels and a dense of 11 features before the
 *     batch_norm, so the gradient reaches the weights before it only
 *     through dx;
 *   - the moving statistics after CPU steps against Keras's formula
 *     written out here (moving * 0.99 + batch * 0.01, the batch's mean and
 *     biased variance over every axis but the channel's), and saved with
 *     the weights as nontrainable state;
 *   - CPU training steps against the reference step under float32 and the
 *     mixed policies (the statistics stay f32), and bit-identical on 1 and
 *     3 threads;
 *   - the training form's errors;
 *   - the fold at inference (passes/fold_bn.c): the folded model's outputs
 *     against the unfolded one's within f32 rounding, on the CPU.
 */
#include <check.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/unit/test_support.h"
#include "api/internal.h"
#include "codegen/cg_backend.h"
#include "castor.h"
#include "passes/passes.h"
#include "tests/ref/ref.h"
#include "util/util.h"

/* ---- gradients against finite differences (float64 reference) ---- */

enum { FD_BATCH = 3 };

/* conv2d (3x3 'same', 5 channels) -> batch_norm -> tanh -> dense -> softmax */
static const char conv_bn[] =
    "graph m policy=float32\n"
    "%x = f32[N,4,3,2] input() {index=0}\n"
    "%k = f32[3,3,2,5] const() {weight=\"c.kernel\", layer=c}  # c\n"
    "%c = f32[N,4,3,5] conv2d(%x, %k) {acc=f32, strides=[1,1], dilations=[1,1], pads=[1,1,1,1], layer=c}  # c\n"
    "%g = f32[5] const() {weight=\"b.gamma\", layer=b}  # b\n"
    "%be = f32[5] const() {weight=\"b.beta\", layer=b}  # b\n"
    "%mm = f32[5] const() {weight=\"b.moving_mean\", layer=b}  # b\n"
    "%mv = f32[5] const() {weight=\"b.moving_variance\", layer=b}  # b\n"
    "%b = f32[N,4,3,5] batch_norm(%c, %g, %be, %mm, %mv) {epsilon=0.001, momentum=0.99, layer=b}  # b\n"
    "%t = f32[N,4,3,5] tanh(%b) {layer=t}  # t\n"
    "%f = f32[N,60] reshape(%t) {shape=[N,60], layer=f}  # f\n"
    "%w = f32[60,3] const() {weight=\"d.kernel\", layer=d}  # d\n"
    "%y = f32[N,3] matmul(%f, %w) {acc=f32, layer=d}  # d\n"
    "%p = f32[N,3] softmax(%y) {layer=d}  # d\n"
    "output p = %p\n";

/* dense (11 features) -> batch_norm with a large epsilon -> sigmoid -> dense */
static const char dense_bn[] =
    "graph m policy=float32\n"
    "%x = f32[N,4] input() {index=0}\n"
    "%k = f32[4,11] const() {weight=\"a.kernel\", layer=a}  # a\n"
    "%h = f32[N,11] matmul(%x, %k) {acc=f32, layer=a}  # a\n"
    "%g = f32[11] const() {weight=\"b.gamma\", layer=b}  # b\n"
    "%be = f32[11] const() {weight=\"b.beta\", layer=b}  # b\n"
    "%mm = f32[11] const() {weight=\"b.moving_mean\", layer=b}  # b\n"
    "%mv = f32[11] const() {weight=\"b.moving_variance\", layer=b}  # b\n"
    "%b = f32[N,11] batch_norm(%h, %g, %be, %mm, %mv) {epsilon=0.25, momentum=0.9, layer=b}  # b\n"
    "%s = f32[N,11] sigmoid(%b) {layer=s}  # s\n"
    "%w = f32[11,3] const() {weight=\"d.kernel\", layer=d}  # d\n"
    "%y = f32[N,3] matmul(%s, %w) {acc=f32, layer=d}  # d\n"
    "output y = %y\n";

static double fd_loss(ir_graph *g, ref_state *st, const double *const *in, int n_out) {
  double *out[16] = {0};
  char err[256];
  ck_assert_msg(ref_run_state(g, FD_BATCH, in, st, out, err, sizeof err), "reference: %s", err);
  double l = out[1][0];
  ref_outputs_free(out, n_out);
  return l;
}

/* Every gradient output (grad_<weight>) of the step against central
 * differences of the loss; the moving statistics get none. */
static void check_fd(const char *what, const char *text, pass_loss loss) {
  diag_sink *d = diag_sink_create();
  ir_graph *g = ir_parse("t.cir", text, strlen(text), d);
  ck_assert_msg(g, "parse: %s", diag_text(d));
  pass_options po;
  pass_options_init(&po);
  po.verify_each = true;
  pass_train_options_init(&po.train);
  po.train.loss = loss, po.train.optimizer = PASS_OPT_NONE;
  ck_assert_msg(pass_run_pipeline(g, "verify,grad,dce", &po, d), "%s: %s", what, diag_text(d));
  diag_sink_destroy(d);
  ref_state st;
  ref_state_init(&st, g);
  rng r;
  rng_init(&r, 23);
  for (int i = 0; i < g->n_nodes; i++) {
    const ir_node *n = g->nodes[i];
    if (n->op != IR_OP_VARIABLE) continue;
    ck_assert_msg(strstr(n->attr.weight, "moving") ? n->attr.kind == IR_STATE_NONTRAINABLE
                                                   : n->attr.kind == IR_STATE_WEIGHT,
                  "%s: %s has kind %s", what, n->attr.weight, ir_state_kind_name(n->attr.kind));
    int64_t cnt;
    double *v = ref_state_get(&st, n->attr.weight, &cnt);
    for (int64_t e = 0; e < cnt; e++) v[e] = rng_uniform_f32(&r, -0.8f, 0.8f);
  }
  const ir_node *x = ir_graph_input(g, 0), *t = ir_graph_input(g, 1);
  int64_t nx, nt;
  ck_assert(ir_type_numel(&x->type, FD_BATCH, &nx) && ir_type_numel(&t->type, FD_BATCH, &nt));
  double *xv = xmalloc((size_t)nx * sizeof *xv), *tv = xmalloc((size_t)nt * sizeof *tv);
  for (int64_t e = 0; e < nx; e++) xv[e] = rng_uniform_f32(&r, -1, 1);
  for (int64_t e = 0; e < nt; e++) tv[e] = loss == PASS_LOSS_SPARSE_XENT ? (double)(rng_next(&r) % 3) : rng_uniform_f32(&r, 0, 1);
  const double *in[] = {xv, tv};
  double *out[16] = {0};
  char err[256];
  ck_assert_int_le(g->n_outputs, 16);
  ck_assert_msg(ref_run_state(g, FD_BATCH, in, &st, out, err, sizeof err), "reference: %s", err);
  int checked = 0, outputs = 0;
  for (int k = 2; k < g->n_outputs; k++, outputs++) {
    const char *oname = g->outputs[k].name;
    ck_assert_msg(!strstr(oname, "moving"), "%s: a gradient for %s", what, oname);
    double *v = NULL;
    int64_t cnt = 0;
    for (int i = 0; i < st.n && !v; i++) {
      char want[256];
      snprintf(want, sizeof want, "grad_%s", st.names[i]);
      for (char *p = want; *p; p++) *p = *p == '.' ? '_' : *p;
      if (strcmp(want, oname) == 0) v = st.values[i], cnt = st.counts[i];
    }
    ck_assert_msg(v, "%s: no variable for output %s", what, oname);
    for (int64_t e = 0; e < cnt; e++) {
      double h = 1e-5, keep = v[e];
      v[e] = keep + h;
      double lp = fd_loss(g, &st, in, g->n_outputs);
      v[e] = keep - h;
      double lm = fd_loss(g, &st, in, g->n_outputs);
      v[e] = keep;
      double fd = (lp - lm) / (2 * h), gr = out[k][e];
      ck_assert_msg(fabs(fd - gr) <= 1e-7 * fmax(1, fabs(gr)), "%s: %s[%lld] = %.12g, finite differences %.12g", what,
                    oname, (long long)e, gr, fd);
      checked++;
    }
  }
  ck_assert_msg(outputs == 4 && checked > 0, "%s: %d gradient outputs", what, outputs);
  ref_outputs_free(out, g->n_outputs);
  ref_state_fini(&st);
  free(xv), free(tv);
  ir_graph_destroy(g);
}

START_TEST(test_bn_gradients_fd) {
  check_fd("conv2d + batch_norm, sparse cross-entropy", conv_bn, PASS_LOSS_SPARSE_XENT);
  check_fd("dense + batch_norm, mean squared error", dense_bn, PASS_LOSS_MSE);
}
END_TEST

/* ---- CPU training steps ---- */

enum { BATCH = 9, H = 5, W = 4, C = 3, IMG = H * W * C, CLASSES = 4, STEPS = 3 };

/* conv2d of 7 channels, batch norm, relu, dense */
static const char *conv_text = "model bn\n"
                               "x = input(shape=[5, 4, 3])\n"
                               "c = conv2d(x, filters=7, kernel_size=3, padding=same, name=c)\n"
                               "b = batch_normalization(c, name=b)\n"
                               "a = activation(b, relu)\n"
                               "f = flatten(a)\n"
                               "logits = dense(f, units=4, name=logits)\n"
                               "p = activation(logits, softmax, dtype=float32)\n"
                               "output p\n";

/* batch norm of the input itself (its statistics are the data's) */
static const char *input_text = "model bn_in\n"
                                "x = input(shape=[5, 4, 3])\n"
                                "b = batch_normalization(x, momentum=0.9, epsilon=0.01, name=b)\n"
                                "f = flatten(b)\n"
                                "logits = dense(f, units=4, name=logits)\n"
                                "p = activation(logits, softmax, dtype=float32)\n"
                                "output p\n";

typedef struct run {
  castor_context *ctx;
  castor_model *m;
  castor_program *p;
  ir_graph *g;
  ref_state st;
} run;

static castor_status keep_graph(const ir_graph *g, const cg_backend *be, const cg_backend_options *bo, void *arg,
                                diag_sink *d) {
  (void)be, (void)bo, (void)d;
  ir_graph *c = ir_graph_clone(g);
  for (int i = 0; i < c->n_nodes; i++) { /* 16-bit variables' data lives in g's arena */
    ir_node *n = c->nodes[i];
    int64_t bytes;
    if (n->op != IR_OP_VARIABLE || !n->attr.data || !ir_type_bytes(&n->type, 1, &bytes)) continue;
    n->attr.data = memcpy(arena_alloc(c->arena, (size_t)bytes + 1), n->attr.data, (size_t)bytes);
  }
  *(ir_graph **)arg = c;
  return CASTOR_OK;
}

static void run_init(run *r, const char *text, const char *policy, int threads) {
  memset(r, 0, sizeof *r);
  ck_assert_int_eq(castor_context_create(&r->ctx), CASTOR_OK);
  ck_assert_int_eq(castor_model_load_string(r->ctx, "bn.cast", text, strlen(text), NULL, &r->m), CASTOR_OK);
  castor_compile_options o;
  castor_compile_options_init(&o);
  o.policy = policy;
  o.threads = threads;
  o.verify_each = 1;
  castor_train_options to;
  castor_train_options_init(&to);
  to.optimizer = "sgd";
  to.learning_rate = 0.1;
  ck_assert_msg(castor_compile_train(r->m, &o, &to, &r->p) == CASTOR_OK, "%s: %s", policy,
                castor_context_last_error(r->ctx));
  castor_driver_options d;
  castor_driver_options_init(&d);
  d.train = &to;
  ck_assert_int_eq(castor_compile_to(r->m, &o, &d, keep_graph, &r->g), CASTOR_OK);
  ref_state_init(&r->st, r->g);
}

static void run_fini(run *r) {
  ref_state_fini(&r->st);
  ir_graph_destroy(r->g);
  castor_program_destroy(r->p);
  castor_model_destroy(r->m);
  castor_context_destroy(r->ctx);
}

static void batch_of(int k, float *x, int32_t *y) {
  rng r;
  rng_init(&r, 300 + (uint64_t)k);
  for (int i = 0; i < BATCH * IMG; i++) x[i] = rng_uniform_f32(&r, -1, 3); /* mean 1, variance 4/3 */
  for (int i = 0; i < BATCH; i++) y[i] = (int32_t)(rng_next(&r) % CLASSES);
}

/* One step on the CPU and on the reference; the losses. */
static void step(run *r, int k, double *got, double *want) {
  castor_tensor *x = NULL, *y = NULL, *outs[2] = {NULL, NULL};
  ck_assert_int_eq(castor_tensor_create(r->ctx, CASTOR_F32, 4, (int64_t[]){BATCH, H, W, C}, &x), CASTOR_OK);
  ck_assert_int_eq(castor_tensor_create(r->ctx, CASTOR_I32, 1, (int64_t[]){BATCH}, &y), CASTOR_OK);
  batch_of(k, castor_tensor_data(x), castor_tensor_data(y));
  castor_tensor *ins[] = {x, y};
  ck_assert_msg(castor_program_run(r->p, ins, 2, outs, 2) == CASTOR_OK, "run: %s", castor_context_last_error(r->ctx));
  *got = *(float *)castor_tensor_data(outs[1]);
  double *rx = ref_from_f32(castor_tensor_data(x), BATCH * IMG), ry[BATCH];
  for (int i = 0; i < BATCH; i++) ry[i] = ((int32_t *)castor_tensor_data(y))[i];
  const double *rin[] = {rx, ry};
  double *w[2] = {NULL, NULL};
  char err[256];
  ck_assert_msg(ref_run_state(r->g, BATCH, rin, &r->st, w, err, sizeof err), "reference: %s", err);
  *want = w[1][0];
  ref_outputs_free(w, 2);
  free(rx);
  castor_tensor_destroy(outs[0]), castor_tensor_destroy(outs[1]);
  castor_tensor_destroy(x), castor_tensor_destroy(y);
}

static float *state_f32(run *r, const char *name, int64_t *n) {
  castor_tensor *t = NULL;
  ck_assert_msg(castor_program_get_state(r->p, name, &t) == CASTOR_OK, "%s", castor_context_last_error(r->ctx));
  ck_assert_int_eq(castor_tensor_dtype(t), CASTOR_F32);
  *n = castor_tensor_numel(t);
  float *v = memcpy(xmalloc((size_t)*n * 4), castor_tensor_data(t), (size_t)*n * 4);
  castor_tensor_destroy(t);
  return v;
}

/* The CPU's steps against the reference's, every state compared after. */
static void check_policy(const char *text, const char *policy) {
  run r;
  run_init(&r, text, policy, 2);
  bool f32 = strcmp(policy, "float32") == 0;
  for (int k = 0; k < STEPS; k++) {
    double got, want;
    step(&r, k, &got, &want);
    ck_assert_msg(fabs(got - want) <= (f32 ? 1e-5 : 2e-3) * fabs(want), "%s step %d: loss %.9g, reference %.9g",
                  policy, k + 1, got, want);
  }
  int moving = 0;
  for (int i = 0; i < castor_program_num_states(r.p); i++) {
    castor_tensor_info info;
    ck_assert_int_eq(castor_program_state_info(r.p, i, &info), CASTOR_OK);
    castor_state_kind kind = castor_program_state_kind(r.p, i);
    if (strstr(info.name, "moving")) {
      ck_assert_msg(kind == CASTOR_STATE_NONTRAINABLE, "%s: %s is not nontrainable", policy, info.name);
      ck_assert_msg(info.dtype == CASTOR_F32, "%s: %s is not f32", policy, info.name); /* f32 under every policy */
      moving++;
    }
    if (kind != CASTOR_STATE_TRAINABLE && kind != CASTOR_STATE_NONTRAINABLE) continue;
    castor_tensor *t = NULL;
    ck_assert_int_eq(castor_program_get_state(r.p, info.name, &t), CASTOR_OK);
    int64_t n = castor_tensor_numel(t), rn = 0;
    double *want = ref_state_get(&r.st, info.name, &rn);
    ck_assert_msg(want && rn == n, "reference state %s", info.name);
    float *got = xmalloc((size_t)n * 4);
    for (int64_t e = 0; e < n; e++) got[e] = (float)dtype_load_double((rt_dtype)castor_tensor_dtype(t), castor_tensor_data(t), e);
    /* normalized by the state's scale, at least 1: the bias before a batch
     * norm has a gradient of 0 (the mean takes it out), so the reference
     * keeps it near 0 while f32 rounding moves it by ~1e-9 */
    double err = 0, scale = 1;
    for (int64_t e = 0; e < n; e++) scale = fmax(scale, fabs(want[e]));
    for (int64_t e = 0; e < n; e++) err = fmax(err, fabs(got[e] - want[e]) / scale);
    ck_assert_msg(err <= (f32 ? 1e-5 : 2e-2), "%s: state %s normalized error %g", policy, info.name, err);
    free(got);
    castor_tensor_destroy(t);
  }
  ck_assert_int_eq(moving, 2);
  run_fini(&r);
}

START_TEST(test_bn_train_float32) { check_policy(conv_text, "float32"); }
END_TEST

START_TEST(test_bn_train_mixed) {
  check_policy(conv_text, "mixed_float16");
  check_policy(conv_text, "mixed_bfloat16");
}
END_TEST

/* Keras's moving statistics, written out: after one step from the
 * initializers (mean 0, variance 1), moving = init * m + batch * (1 - m)
 * with the batch's per-channel mean and biased variance of the input. */
START_TEST(test_bn_moving_statistics) {
  run r;
  run_init(&r, input_text, "mixed_float16", 2);
  double got, want;
  step(&r, 0, &got, &want);
  float x[BATCH * IMG];
  int32_t y[BATCH];
  batch_of(0, x, y);
  int64_t n;
  float *mm = state_f32(&r, "b.moving_mean", &n), *mv = state_f32(&r, "b.moving_variance", &n);
  ck_assert_int_eq(n, C);
  for (int c = 0; c < C; c++) {
    double s = 0, q = 0, cnt = BATCH * H * W;
    for (int i = c; i < BATCH * IMG; i += C) s += x[i];
    double mean = s / cnt;
    for (int i = c; i < BATCH * IMG; i += C) q += (x[i] - mean) * (x[i] - mean);
    double var = q / cnt, wm = 0.9 * 0 + mean * 0.1, wv = 0.9 * 1 + var * 0.1;
    ck_assert_msg(fabs(mm[c] - wm) <= 1e-6 && fabs(mv[c] - wv) <= 1e-6, "channel %d: moving mean %.9g variance %.9g, Keras's %.9g %.9g",
                  c, mm[c], mv[c], wm, wv);
  }
  free(mm), free(mv);
  /* saved with the weights, under their keys */
  char path[] = "/tmp/check_bn_XXXXXX";
  int fd = mkstemp(path);
  ck_assert_int_ge(fd, 0);
  ck_assert_msg(castor_program_save_weights(r.p, path) == CASTOR_OK, "%s", castor_context_last_error(r.ctx));
  FILE *f = fopen(path, "rb");
  char buf[4096] = {0};
  size_t got_n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  unlink(path);
  close(fd);
  ck_assert(got_n > 8);
  ck_assert_msg(strstr(buf + 8, "\"b.moving_mean\"") && strstr(buf + 8, "\"b.moving_variance\"") &&
                    strstr(buf + 8, "\"b.gamma\"") && strstr(buf + 8, "\"b.beta\""),
                "the saved header lacks batch norm's weights: %s", buf + 8);
  /* and loaded back: a new training program of the model starts from them */
  strcpy(path, "/tmp/check_bn_XXXXXX");
  int fd2 = mkstemp(path);
  ck_assert_int_ge(fd2, 0);
  ck_assert_int_eq(castor_program_save_weights(r.p, path), CASTOR_OK);
  castor_load_options lo;
  castor_load_options_init(&lo);
  lo.weights_path = path;
  castor_model *m2 = NULL;
  castor_program *p2 = NULL;
  ck_assert_msg(castor_model_load_string(r.ctx, "bn.cast", input_text, strlen(input_text), &lo, &m2) == CASTOR_OK, "%s",
                castor_context_last_error(r.ctx));
  castor_compile_options o;
  castor_compile_options_init(&o);
  castor_train_options to;
  castor_train_options_init(&to);
  ck_assert_msg(castor_compile_train(m2, &o, &to, &p2) == CASTOR_OK, "%s", castor_context_last_error(r.ctx));
  for (int w = 0; w < 2; w++) {
    const char *key = w ? "b.moving_variance" : "b.moving_mean";
    castor_tensor *a = NULL, *b = NULL;
    ck_assert_int_eq(castor_program_get_state(r.p, key, &a), CASTOR_OK);
    ck_assert_int_eq(castor_program_get_state(p2, key, &b), CASTOR_OK);
    ck_assert_msg(memcmp(castor_tensor_data(a), castor_tensor_data(b), castor_tensor_nbytes(a)) == 0,
                  "%s loaded back differs", key);
    castor_tensor_destroy(a), castor_tensor_destroy(b);
  }
  castor_program_destroy(p2);
  castor_model_destroy(m2);
  unlink(path);
  close(fd2);
  run_fini(&r);
}
END_TEST

/* 1 and 3 threads: every state and loss bit-identical (the batch's
 * statistics are sums in row order inside one launch). */
START_TEST(test_bn_threads_bit_identical) {
  run a, b;
  run_init(&a, conv_text, "mixed_float16", 1);
  run_init(&b, conv_text, "mixed_float16", 3);
  setenv("CASTOR_PARALLEL_MIN_WORK", "0", 1);
  for (int k = 0; k < STEPS; k++) {
    double ga, gb, w;
    step(&a, k, &ga, &w);
    step(&b, k, &gb, &w);
    ck_assert_msg(ga == gb, "step %d: loss %.9g on 1 thread, %.9g on 3", k + 1, ga, gb);
  }
  for (int i = 0; i < castor_program_num_states(a.p); i++) {
    castor_tensor_info info;
    ck_assert_int_eq(castor_program_state_info(a.p, i, &info), CASTOR_OK);
    castor_tensor *ta = NULL, *tb = NULL;
    ck_assert_int_eq(castor_program_get_state(a.p, info.name, &ta), CASTOR_OK);
    ck_assert_int_eq(castor_program_get_state(b.p, info.name, &tb), CASTOR_OK);
    ck_assert_msg(memcmp(castor_tensor_data(ta), castor_tensor_data(tb), castor_tensor_nbytes(ta)) == 0,
                  "state %s differs between 1 and 3 threads", info.name);
    castor_tensor_destroy(ta), castor_tensor_destroy(tb);
  }
  unsetenv("CASTOR_PARALLEL_MIN_WORK");
  run_fini(&a), run_fini(&b);
}
END_TEST

/* A batch_norm whose moving statistics are computed, not weights, cannot
 * train; the error names the node. */
START_TEST(test_bn_training_errors) {
  static const char text[] =
      "graph m policy=float32\n"
      "%x = f32[N,3] input() {index=0}\n"
      "%g = f32[3] const() {weight=\"b.gamma\", layer=b}  # b\n"
      "%be = f32[3] const() {weight=\"b.beta\", layer=b}  # b\n"
      "%mm = f32[3] const() {weight=\"b.moving_mean\", layer=b}  # b\n"
      "%mv = f32[3] abs(%mm) {layer=b}  # b\n"
      "%b = f32[N,3] batch_norm(%x, %g, %be, %mm, %mv) {epsilon=0.001, momentum=0.99, layer=b}  # b\n"
      "%p = f32[N,3] softmax(%b) {layer=b}  # b\n"
      "output p = %p\n";
  diag_sink *d = diag_sink_create();
  ir_graph *g = ir_parse("t.cir", text, strlen(text), d);
  ck_assert_msg(g, "%s", diag_text(d));
  pass_options po;
  pass_options_init(&po);
  pass_train_options_init(&po.train);
  ck_assert(!pass_run_pipeline(g, "verify,grad,dce", &po, d));
  ck_assert_msg(strstr(diag_text(d), "batch_norm (%b): a training step needs its moving statistics as weights"),
                "%s", diag_text(d));
  ir_graph_destroy(g);
  diag_sink_destroy(d);
}
END_TEST

/* ---- the fold at inference ---- */

/* conv2d with a bias -> batch_norm; dense without -> batch_norm without
 * scale and center (literals); both fold */
static const char fold_text[] =
    "graph m policy=float32\n"
    "%x = f32[N,5,4,3] input() {index=0}\n"
    "%k = f32[3,3,3,7] const() {weight=\"c.kernel\", layer=c}  # c\n"
    "%cb = f32[7] const() {weight=\"c.bias\", layer=c}  # c\n"
    "%cv = f32[N,5,4,7] conv2d(%x, %k) {acc=f32, strides=[1,1], dilations=[1,1], pads=[1,1,1,1], layer=c}  # c\n"
    "%c = f32[N,5,4,7] add(%cv, %cb) {layer=c}  # c\n"
    "%g = f32[7] const() {weight=\"b.gamma\", layer=b}  # b\n"
    "%be = f32[7] const() {weight=\"b.beta\", layer=b}  # b\n"
    "%mm = f32[7] const() {weight=\"b.moving_mean\", layer=b}  # b\n"
    "%mv = f32[7] const() {weight=\"b.moving_variance\", layer=b}  # b\n"
    "%b = f32[N,5,4,7] batch_norm(%c, %g, %be, %mm, %mv) {epsilon=0.001, momentum=0.99, layer=b}  # b\n"
    "%f = f32[N,140] reshape(%b) {shape=[N,140], layer=f}  # f\n"
    "%w = f32[140,11] const() {weight=\"d.kernel\", layer=d}  # d\n"
    "%h = f32[N,11] matmul(%f, %w) {acc=f32, layer=d}  # d\n"
    "%one = f32[] literal() {value=1}\n"
    "%zero = f32[] literal() {value=0}\n"
    "%m2 = f32[11] const() {weight=\"e.moving_mean\", layer=e}  # e\n"
    "%v2 = f32[11] const() {weight=\"e.moving_variance\", layer=e}  # e\n"
    "%y = f32[N,11] batch_norm(%h, %one, %zero, %m2, %v2) {epsilon=0.01, momentum=0.99, layer=e}  # e\n"
    "output y = %y\n";

/* The graph with seeded weights (variances in [0.2, 2]) through pipeline,
 * run on the CPU for a seeded batch of 6. */
static float *run_pipeline(const char *pipeline, int *n_bn, int64_t *ny) {
  diag_sink *d = diag_sink_create();
  ir_graph *g = ir_parse("fold.cir", fold_text, strlen(fold_text), d);
  ck_assert_msg(g, "%s", diag_text(d));
  rng r;
  rng_init(&r, 41);
  for (int i = 0; i < g->n_nodes; i++) {
    ir_node *n = g->nodes[i];
    if (n->op != IR_OP_CONST) continue;
    int64_t cnt = 0;
    ck_assert(ir_type_numel(&n->type, 1, &cnt));
    float *v = arena_alloc(g->arena, (size_t)cnt * 4);
    bool var = strstr(n->attr.weight, "variance") != NULL;
    for (int64_t e = 0; e < cnt; e++) v[e] = var ? rng_uniform_f32(&r, 0.2f, 2.0f) : rng_uniform_f32(&r, -1, 1);
    n->attr.data = v;
  }
  pass_options po;
  pass_options_init(&po);
  po.verify_each = true;
  ck_assert_msg(pass_run_pipeline(g, pipeline, &po, d), "%s: %s", pipeline, diag_text(d));
  *n_bn = 0;
  for (int i = 0; i < g->n_nodes; i++) *n_bn += g->nodes[i]->op == IR_OP_BATCH_NORM;
  enum { N = 6 };
  float x[N * 60];
  for (int e = 0; e < N * 60; e++) x[e] = rng_uniform_f32(&r, -2, 2);
  *ny = N * 11;
  float *y = xmalloc((size_t)*ny * 4);
  cg_backend_options bo;
  cg_backend_options_init(&bo);
  bo.threads = 2;
  cg_exec *ex = cg_backend_compile(&cg_backend_cpu, g, &bo, d);
  ck_assert_msg(ex, "compile: %s", diag_text(d));
  const void *ins[] = {x};
  void *outs[] = {y};
  ck_assert_msg(cg_backend_cpu.run(ex, N, ins, outs, d), "run: %s", diag_text(d));
  cg_exec_destroy(ex);
  ir_graph_destroy(g);
  diag_sink_destroy(d);
  return y;
}

START_TEST(test_bn_fold_matches) {
  int64_t ny;
  int n_unfolded, n_folded;
  float *a = run_pipeline("verify,autocast,cast-cleanup,fold-constants,dce", &n_unfolded, &ny);
  float *b = run_pipeline(PASS_PIPELINE_DEFAULT, &n_folded, &ny);
  ck_assert_int_eq(n_unfolded, 2);
  ck_assert_int_eq(n_folded, 0); /* both folded */
  double *want = ref_from_f32(a, ny);
  double e = ref_normalized_error(b, want, ny);
  ck_assert_msg(e <= 2e-6 && e > 0, "folded against unfolded: normalized error %g", e);
  free(want), free(a), free(b);
}
END_TEST

static Suite *bn_suite(void) {
  Suite *s = suite_create("bn");
  TCase *tc = tcase_create("bn");
  tcase_set_timeout(tc, 240);
  tcase_add_test(tc, test_bn_gradients_fd);
  tcase_add_test(tc, test_bn_train_float32);
  tcase_add_test(tc, test_bn_train_mixed);
  tcase_add_test(tc, test_bn_moving_statistics);
  tcase_add_test(tc, test_bn_threads_bit_identical);
  tcase_add_test(tc, test_bn_training_errors);
  tcase_add_test(tc, test_bn_fold_matches);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  check_cpu_path("check_bn");
  return check_run(bn_suite());
}
