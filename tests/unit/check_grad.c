/* SPDX-License-Identifier: Apache-2.0 */
/*
 * check_grad.c: the training step's mathematics, in float64.
 *
 * The grad pass builds the step program; the float64 reference interpreter
 * (tests/ref) runs it with persistent state. These tests check
 *   - every gradient rule against central finite differences of the loss,
 *     on odd shapes, for every loss (layer_norm's too: over the batch's
 *     rows, and over a weight);
 *   - one step of each optimizer against Keras 3's formula written out
 *     independently here;
 *   - the dynamic loss scale's state machine: a non-finite gradient halves
 *     the scale and leaves every variable, slot and the step count
 *     bit-identical; 2000 finite steps double it; fixed and none never
 *     change it.
 * The CPU kernels of these ops are checked against the same reference by
 * check_optable.
 */
#include <check.h>

#include "tests/unit/test_support.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "passes/passes.h"
#include "tests/ref/ref.h"
#include "util/util.h"

enum { BATCH = 3 };

typedef struct step {
  ir_graph *g;
  ref_state st;
  double *x, *t; /* inputs */
  int n_out;
} step;

/* Parses `text`, runs `pipeline` with the training options, fills the
 * state with seeded values in [-scale, scale] (slots and scalars keep
 * their init) and makes inputs: x in [-1, 1], targets per the loss. */
static void step_init(step *s, const char *text, const char *pipeline, const pass_train_options *to, uint64_t seed) {
  memset(s, 0, sizeof *s);
  diag_sink *d = diag_sink_create();
  s->g = ir_parse("t.cir", text, strlen(text), d);
  ck_assert_msg(s->g, "parse: %s", diag_text(d));
  pass_options po;
  pass_options_init(&po);
  po.verify_each = true;
  po.train = *to;
  ck_assert_msg(pass_run_pipeline(s->g, pipeline, &po, d), "pipeline: %s", diag_text(d));
  diag_sink_destroy(d);
  ref_state_init(&s->st, s->g);
  rng r;
  rng_init(&r, seed);
  for (int i = 0; i < s->g->n_nodes; i++) { /* the model's weights: random */
    const ir_node *n = s->g->nodes[i];
    int64_t cnt;
    if (n->op != IR_OP_VARIABLE || n->attr.kind != IR_STATE_WEIGHT) continue; /* slots and scalars keep their init */
    double *v = ref_state_get(&s->st, n->attr.weight, &cnt);
    for (int64_t e = 0; e < cnt; e++) v[e] = ref_round(rng_uniform_f32(&r, -0.8f, 0.8f), n->type.dtype);
  }
  const ir_node *x = ir_graph_input(s->g, 0), *t = ir_graph_input(s->g, 1);
  int64_t nx, nt;
  ck_assert(ir_type_numel(&x->type, BATCH, &nx) && ir_type_numel(&t->type, BATCH, &nt));
  s->x = xmalloc((size_t)nx * sizeof *s->x), s->t = xmalloc((size_t)nt * sizeof *s->t);
  for (int64_t e = 0; e < nx; e++) s->x[e] = rng_uniform_f32(&r, -1, 1);
  if (x->type.dtype == DT_I32) /* indices (a gather's): -1 to 5, some outside a table of 5 rows */
    for (int64_t e = 0; e < nx; e++) s->x[e] = (double)(rng_next(&r) % 7) - 1;
  int64_t classes = ir_graph_input(s->g, 0) && t->type.rank == 1 ? s->g->outputs[0].value->type.dims[1] : 0;
  for (int64_t e = 0; e < nt; e++) s->t[e] = classes ? (double)(rng_next(&r) % (uint64_t)classes) : rng_uniform_f32(&r, 0, 1);
  if (to->loss == PASS_LOSS_XENT) /* one-hot-ish rows that sum to 1 */
    for (int64_t rr = 0; rr < BATCH; rr++) {
      int64_t c = t->type.dims[1];
      double sum = 0;
      for (int64_t j = 0; j < c; j++) sum += s->t[rr * c + j];
      for (int64_t j = 0; j < c; j++) s->t[rr * c + j] /= sum;
    }
  s->n_out = s->g->n_outputs;
}

static void step_fini(step *s) {
  ref_state_fini(&s->st);
  ir_graph_destroy(s->g);
  free(s->x), free(s->t);
}

/* Runs one step; outputs into out (caller frees with ref_outputs_free). */
static void step_run(step *s, double **out) {
  const double *in[] = {s->x, s->t};
  char err[256];
  ck_assert_msg(ref_run_state(s->g, BATCH, in, &s->st, out, err, sizeof err), "reference: %s", err);
}

static double loss_of(step *s) {
  double *out[16] = {0};
  step_run(s, out);
  double l = out[1][0];
  ref_outputs_free(out, s->n_out);
  return l;
}

/* Every gradient output against central differences of the loss. */
static void check_fd(const char *what, const char *text, const pass_train_options *to) {
  step s;
  step_init(&s, text, "verify,grad,dce", to, 17);
  double *out[16] = {0};
  ck_assert_int_le(s.n_out, 16);
  step_run(&s, out);
  int checked = 0;
  for (int k = 2; k < s.n_out; k++) {
    /* grad_<weight with . as _>: find the variable */
    const char *oname = s.g->outputs[k].name;
    double *v = NULL;
    int64_t cnt = 0;
    for (int i = 0; i < s.st.n && !v; i++) {
      char want[256];
      snprintf(want, sizeof want, "grad_%s", s.st.names[i]);
      for (char *p = want; *p; p++) *p = *p == '.' ? '_' : *p;
      if (strcmp(want, oname) == 0) v = s.st.values[i], cnt = s.st.counts[i];
    }
    ck_assert_msg(v, "%s: no variable for output %s", what, oname);
    for (int64_t e = 0; e < cnt; e++) {
      double h = 1e-5, keep = v[e];
      v[e] = keep + h;
      double lp = loss_of(&s);
      v[e] = keep - h;
      double lm = loss_of(&s);
      v[e] = keep;
      double fd = (lp - lm) / (2 * h), g = out[k][e];
      ck_assert_msg(fabs(fd - g) <= 1e-7 * fmax(1, fabs(g)), "%s: %s[%lld] = %.12g, finite differences %.12g", what,
                    oname, (long long)e, g, fd);
      checked++;
    }
  }
  ck_assert_msg(checked > 0, "%s: no gradients", what);
  ref_outputs_free(out, s.n_out);
  step_fini(&s);
}

static pass_train_options opts(pass_loss loss, bool logits) {
  pass_train_options o;
  pass_train_options_init(&o);
  o.loss = loss, o.from_logits = logits, o.optimizer = PASS_OPT_NONE;
  return o;
}

/* Every rule of grad.c but cast's appears in one of these models (a cast
 * rounds, even to f32 in the reference, which finite differences cannot
 * see through; the golden tests pin the casts of the backward graph). */
static const char mlp[] = "graph m policy=float32\n"
                          "%x = f32[N,5] input() {index=0}\n"
                          "%w1 = f32[5,7] const() {weight=\"a.kernel\", layer=a}  # a\n"
                          "%b1 = f32[7] const() {weight=\"a.bias\", layer=a}  # a\n"
                          "%m1 = f32[N,7] matmul(%x, %w1) {acc=f32, layer=a}  # a\n"
                          "%a1 = f32[N,7] add(%m1, %b1) {layer=a}  # a\n"
                          "%h1 = f32[N,7] tanh(%a1) {layer=a}  # a\n"
                          "%w2 = f32[7,6] const() {weight=\"b.kernel\", layer=b}  # b\n"
                          "%m2 = f32[N,6] matmul(%h1, %w2) {acc=f32, layer=b}  # b\n"
                          "%h2 = f32[N,6] sigmoid(%m2) {layer=b}  # b\n"
                          "%w3 = f32[6,3] const() {weight=\"c.kernel\", layer=c}  # c\n"
                          "%m3 = f32[N,3] matmul(%h2, %w3) {acc=f32, layer=c}  # c\n"
                          "%p = f32[N,3] softmax(%m3) {layer=c}  # c\n"
                          "output p = %p\n";

static const char branchy[] = "graph m policy=float32\n"
                              "%x = f32[N,5] input() {index=0}\n"
                              "%w1 = f32[5,5] const() {weight=\"a.kernel\", layer=a}  # a\n"
                              "%s = f32[5] const() {weight=\"a.scale\", layer=a}  # a\n"
                              "%m1 = f32[N,5] matmul(%x, %w1) {acc=f32, layer=a}  # a\n"
                              "%g = f32[N,5] gelu(%m1) {layer=a}  # a\n"
                              "%sc = f32[N,5] mul(%g, %s) {layer=a}  # a\n"
                              "%q = f32[N,5] mul(%sc, %m1) {layer=a}  # a\n"
                              "%r = f32[N,5] add(%q, %m1) {layer=a}  # a\n"
                              "%u = f32[N,5] silu(%r) {layer=a}  # a\n"
                              "%pd = f32[N,8] pad(%u) {shape=[N,8], layer=a}  # a\n"
                              "%re = f32[N,8] relu(%pd) {layer=a}  # a\n"
                              "%sl = f32[N,5] slice(%re) {shape=[N,5], layer=a}  # a\n"
                              "%w2 = f32[5,3] const() {weight=\"b.kernel\", layer=b}  # b\n"
                              "%y = f32[N,3] matmul(%sl, %w2) {acc=f32, layer=b}  # b\n"
                              "output y = %y\n";

/* layer_norm over an odd width (Keras LayerNormalization, the last axis):
 * x's gradient through layer_norm_grad (the dense before it, and the
 * residual add that fans its input out), gamma's through layer_norm_xhat
 * and sum_rows, beta's through sum_rows. */
static const char normed[] = "graph m policy=float32\n"
                             "%x = f32[N,5] input() {index=0}\n"
                             "%w1 = f32[5,7] const() {weight=\"a.kernel\", layer=a}  # a\n"
                             "%b1 = f32[7] const() {weight=\"a.bias\", layer=a}  # a\n"
                             "%m1 = f32[N,7] matmul(%x, %w1) {acc=f32, layer=a}  # a\n"
                             "%a1 = f32[N,7] add(%m1, %b1) {layer=a}  # a\n"
                             "%g = f32[7] const() {weight=\"n.gamma\", layer=n}  # n\n"
                             "%be = f32[7] const() {weight=\"n.beta\", layer=n}  # n\n"
                             "%n = f32[N,7] layer_norm(%a1, %g, %be) {axis=-1, epsilon=0.001, layer=n}  # n\n"
                             "%r = f32[N,7] add(%n, %a1) {layer=r}  # r\n"
                             "%h = f32[N,7] tanh(%r) {layer=r}  # r\n"
                             "%w2 = f32[7,3] const() {weight=\"c.kernel\", layer=c}  # c\n"
                             "%m2 = f32[N,3] matmul(%h, %w2) {acc=f32, layer=c}  # c\n"
                             "%p = f32[N,3] softmax(%m2) {layer=c}  # c\n"
                             "output p = %p\n";

/* layer_norm of a weight, not of the batch: over its last axis (gamma's
 * and beta's gradients sum the weight's rows) and over all of it (no sum). */
static const char weight_normed[] = "graph m policy=float32\n"
                                    "%x = f32[N,5] input() {index=0}\n"
                                    "%v = f32[5,3] const() {weight=\"a.kernel\", layer=a}  # a\n"
                                    "%g = f32[3] const() {weight=\"a.gamma\", layer=a}  # a\n"
                                    "%be = f32[3] const() {weight=\"a.beta\", layer=a}  # a\n"
                                    "%w = f32[5,3] layer_norm(%v, %g, %be) {axis=1, epsilon=0.01, layer=a}  # a\n"
                                    "%m = f32[N,3] matmul(%x, %w) {acc=f32, layer=a}  # a\n"
                                    "%v2 = f32[3,3] const() {weight=\"b.kernel\", layer=b}  # b\n"
                                    "%g2 = f32[3,3] const() {weight=\"b.gamma\", layer=b}  # b\n"
                                    "%be2 = f32[3,3] const() {weight=\"b.beta\", layer=b}  # b\n"
                                    "%w2 = f32[3,3] layer_norm(%v2, %g2, %be2) {axis=0, epsilon=0.01, layer=b}  # b\n"
                                    "%y = f32[N,3] matmul(%m, %w2) {acc=f32, layer=b}  # b\n"
                                    "output y = %y\n";

/* general tensors: layout ops. Every layout rule on odd shapes with
 * size-1 dimensions, on activations (batched) and on weights (a kernel
 * made of a concat of a weight and a transposed one): reshape, transpose,
 * strided_slice with steps, concat of three operands (one twice, so its
 * gradient adds), pad_constant with steps and a nonzero fill. */
static const char layout[] =
    "graph m policy=float32\n"
    "%x = f32[N,6] input() {index=0}\n"
    "%wa = f32[6,5] const() {weight=\"a.ka\", layer=a}  # a\n"
    "%wb = f32[7,6] const() {weight=\"a.kb\", layer=a}  # a\n"
    "%wbt = f32[6,7] transpose(%wb) {perm=[1,0], layer=a}  # a\n"
    "%w1 = f32[6,12] concat(%wa, %wbt) {axis=1, layer=a}  # a\n"
    "%m1 = f32[N,12] matmul(%x, %w1) {acc=f32, layer=a}  # a\n"
    "%r = f32[N,3,1,4] reshape(%m1) {shape=[N,3,1,4], layer=l}  # l\n"
    "%t = f32[N,4,3,1] transpose(%r) {perm=[0,3,1,2], layer=l}  # l\n"
    "%s = f32[N,2,3,1] strided_slice(%t) {starts=[0,1,0,0], ends=[0,4,3,1], steps=[1,2,1,1], layer=l}  # l\n"
    "%th = f32[N,2,3,1] tanh(%s) {layer=l}  # l\n"
    "%c = f32[N,10,3,1] concat(%t, %th, %t) {axis=-3, layer=l}  # l\n"
    "%p = f32[N,11,5,2] pad_constant(%c) {shape=[N,11,5,2], value=0.25, starts=[0,1,0,1], steps=[1,1,2,1], "
    "layer=l}  # l\n"
    "%f = f32[N,110] reshape(%p) {shape=[N,110], layer=l}  # l\n"
    "%w2 = f32[110,3] const() {weight=\"b.kernel\", layer=b}  # b\n"
    "%y = f32[N,3] matmul(%f, %w2) {acc=f32, layer=b}  # b\n"
    "output y = %y\n";

/* An embedding lookup (gather along axis 0 of a table, with repeated and
 * out-of-range indices): the table's gradient, the ordered scatter-add. */
static const char embedded[] =
    "graph m policy=float32\n"
    "%x = i32[N,4] input() {index=0}\n"
    "%e = f32[5,3] const() {weight=\"e.embeddings\", layer=e}  # e\n"
    "%g = f32[N,4,3] gather(%e, %x) {axis=0, layer=e}  # e\n"
    "%t = f32[N,4,3] tanh(%g) {layer=e}  # e\n"
    "%f = f32[N,12] reshape(%t) {shape=[N,12], layer=f}  # f\n"
    "%w = f32[12,3] const() {weight=\"d.kernel\", layer=d}  # d\n"
    "%y = f32[N,3] matmul(%f, %w) {acc=f32, layer=d}  # d\n"
    "output y = %y\n";

START_TEST(test_gradients_layout) {
  pass_train_options oe = opts(PASS_LOSS_SPARSE_XENT, true);
  check_fd("embedding, sparse cross-entropy from logits", embedded, &oe);

  pass_train_options o = opts(PASS_LOSS_SPARSE_XENT, true);
  check_fd("layout ops, sparse cross-entropy from logits", layout, &o);
  o = opts(PASS_LOSS_MSE, false);
  check_fd("layout ops, mean squared error", layout, &o);
}
END_TEST

START_TEST(test_gradients_layer_norm) {
  pass_train_options o = opts(PASS_LOSS_SPARSE_XENT, false);
  check_fd("layer_norm, sparse categorical cross-entropy", normed, &o);
  o = opts(PASS_LOSS_MSE, false);
  check_fd("layer_norm, mean squared error through the softmax", normed, &o);
  o = opts(PASS_LOSS_XENT, true);
  check_fd("layer_norm of weights, categorical cross-entropy from logits", weight_normed, &o);
}
END_TEST

START_TEST(test_gradients_sparse_xent) {
  pass_train_options o = opts(PASS_LOSS_SPARSE_XENT, false);
  check_fd("mlp, sparse categorical cross-entropy", mlp, &o);
}
END_TEST

START_TEST(test_gradients_categorical_xent) {
  pass_train_options o = opts(PASS_LOSS_XENT, false);
  check_fd("mlp, categorical cross-entropy", mlp, &o);
}
END_TEST

START_TEST(test_gradients_mse_through_softmax) {
  pass_train_options o = opts(PASS_LOSS_MSE, false);
  check_fd("mlp, mean squared error through the softmax", mlp, &o);
}
END_TEST

START_TEST(test_gradients_logits_every_rule) {
  pass_train_options o = opts(PASS_LOSS_SPARSE_XENT, true);
  check_fd("branchy, sparse cross-entropy from logits", branchy, &o);
  o = opts(PASS_LOSS_XENT, true);
  check_fd("branchy, categorical cross-entropy from logits", branchy, &o);
  o = opts(PASS_LOSS_MSE, false);
  check_fd("branchy, mean squared error", branchy, &o);
}
END_TEST

/* general tensors: the binary ops under numpy broadcasting, on odd shapes
 * with size-1 dimensions: sub of a [1,4] weight over the batch (sum_to
 * keeping the rank), maximum of a [4,1] and a [1,6] weight (an outer
 * broadcast: both gradients through sum_to), add of a scalar literal, div
 * by a [6] vector (sum_rows), minimum against a batched [N,1] column
 * (sum_to keeping N), pow of a positive [6] base to a [N,6] exponent. */
static const char broadcasty[] = "graph m policy=float32\n"
                                 "%x = f32[N,5] input() {index=0}\n"
                                 "%w1 = f32[5,4] const() {weight=\"a.kernel\", layer=a}\n"
                                 "%m1 = f32[N,4] matmul(%x, %w1) {acc=f32, layer=a}\n"
                                 "%s1 = f32[1,4] const() {weight=\"a.shift\", layer=a}\n"
                                 "%a1 = f32[N,4] sub(%m1, %s1) {layer=a}\n"
                                 "%h1 = f32[N,4] tanh(%a1) {layer=a}\n"
                                 "%wc = f32[4,1] const() {weight=\"b.col\", layer=b}\n"
                                 "%wr = f32[1,6] const() {weight=\"b.row\", layer=b}\n"
                                 "%c = f32[4,6] maximum(%wc, %wr) {layer=b}\n"
                                 "%m2 = f32[N,6] matmul(%h1, %c) {acc=f32, layer=b}\n"
                                 "%wd = f32[6] const() {weight=\"b.den\", layer=b}\n"
                                 "%one = f32[] literal() {value=1.5}\n"
                                 "%sq = f32[6] mul(%wd, %wd) {layer=b}\n"
                                 "%den = f32[6] add(%sq, %one) {layer=b}\n"
                                 "%dv = f32[N,6] div(%m2, %den) {layer=b}\n"
                                 "%wg = f32[5,1] const() {weight=\"g.kernel\", layer=g}\n"
                                 "%gate = f32[N,1] matmul(%x, %wg) {acc=f32, layer=g}\n"
                                 "%mn = f32[N,6] minimum(%dv, %gate) {layer=g}\n"
                                 "%wb = f32[6] const() {weight=\"p.base\", layer=p}\n"
                                 "%bsq = f32[6] mul(%wb, %wb) {layer=p}\n"
                                 "%base = f32[6] add(%bsq, %one) {layer=p}\n"
                                 "%pw = f32[N,6] pow(%base, %mn) {layer=p}\n"
                                 "%w3 = f32[6,3] const() {weight=\"c.kernel\", layer=c}\n"
                                 "%y = f32[N,3] matmul(%pw, %w3) {acc=f32, layer=c}\n"
                                 "output y = %y\n";

/* general tensors: every unary element-wise op's rule and select's, on
 * one [N,6] value (abs + 1.5 keeps log and the roots in their domain; a
 * relu condition makes select take both sides). */
static const char unaries[] = "graph m policy=float32\n"
                              "%x = f32[N,5] input() {index=0}\n"
                              "%w1 = f32[5,6] const() {weight=\"a.kernel\", layer=a}\n"
                              "%m = f32[N,6] matmul(%x, %w1) {acc=f32, layer=a}\n"
                              "%k = f32[] literal() {value=1.5}\n"
                              "%ab = f32[N,6] abs(%m) {layer=u}\n"
                              "%p = f32[N,6] add(%ab, %k) {layer=u}\n"
                              "%lg = f32[N,6] log(%p) {layer=u}\n"
                              "%sq = f32[N,6] sqrt(%p) {layer=u}\n"
                              "%rs = f32[N,6] rsqrt(%p) {layer=u}\n"
                              "%ex = f32[N,6] exp(%m) {layer=u}\n"
                              "%ng = f32[N,6] neg(%m) {layer=u}\n"
                              "%er = f32[N,6] erf(%m) {layer=u}\n"
                              "%lr = f32[N,6] leaky_relu(%m) {alpha=0.2, layer=u}\n"
                              "%el = f32[N,6] elu(%m) {alpha=1.1, layer=u}\n"
                              "%sp = f32[N,6] softplus(%m) {layer=u}\n"
                              "%hs = f32[N,6] hard_sigmoid(%m) {layer=u}\n"
                              "%cl = f32[N,6] clip(%m) {min_value=-0.3, max_value=0.4, layer=u}\n"
                              "%rl = f32[N,6] relu(%m) {layer=u}\n"
                              "%se = f32[N,6] select(%rl, %ex, %er) {layer=u}\n"
                              "%s1 = f32[N,6] add(%lg, %sq) {layer=u}\n"
                              "%s2 = f32[N,6] add(%s1, %rs) {layer=u}\n"
                              "%s3 = f32[N,6] add(%s2, %ng) {layer=u}\n"
                              "%s4 = f32[N,6] add(%s3, %lr) {layer=u}\n"
                              "%s5 = f32[N,6] add(%s4, %el) {layer=u}\n"
                              "%s6 = f32[N,6] add(%s5, %sp) {layer=u}\n"
                              "%s7 = f32[N,6] add(%s6, %hs) {layer=u}\n"
                              "%s8 = f32[N,6] add(%s7, %cl) {layer=u}\n"
                              "%s9 = f32[N,6] add(%s8, %se) {layer=u}\n"
                              "%w2 = f32[6,3] const() {weight=\"c.kernel\", layer=c}\n"
                              "%y = f32[N,3] matmul(%s9, %w2) {acc=f32, layer=c}\n"
                              "output y = %y\n";

START_TEST(test_gradients_unary) {
  pass_train_options o = opts(PASS_LOSS_XENT, true);
  check_fd("unaries, categorical cross-entropy from logits", unaries, &o);
}
END_TEST

START_TEST(test_gradients_broadcasting) {
  pass_train_options o = opts(PASS_LOSS_XENT, true);
  check_fd("broadcasty, categorical cross-entropy from logits", broadcasty, &o);
  o = opts(PASS_LOSS_MSE, false);
  check_fd("broadcasty, mean squared error", broadcasty, &o);
}
END_TEST

/* general tensors: dropout. In the step program each dropout of rate > 0
 * is dropout_train (the mask of ir_dropout_*, fixed within a run: without
 * an optimizer dropout.step is not advanced), so finite differences see
 * the same mask as the gradient: on an activation with size-1 dims, on a
 * weight (unbatched), and at rate 0 (the identity). */
static const char dropped[] =
    "graph m policy=float32\n"
    "%x = f32[N,5] input() {index=0}\n"
    "%w1 = f32[5,7] const() {weight=\"a.kernel\", layer=a}  # a\n"
    "%wd = f32[5,7] dropout(%w1) {rate=0.5, seed=3, layer=a}  # a\n"
    "%m1 = f32[N,7] matmul(%x, %wd) {acc=f32, layer=a}  # a\n"
    "%r = f32[N,7,1] reshape(%m1) {shape=[N,7,1], layer=d}  # d\n"
    "%d = f32[N,7,1] dropout(%r) {rate=0.4, seed=1, layer=d}  # d\n"
    "%t = f32[N,7,1] tanh(%d) {layer=d}  # d\n"
    "%z = f32[N,7,1] dropout(%t) {rate=0, seed=2, layer=z}  # z\n"
    "%f = f32[N,7] reshape(%z) {shape=[N,7], layer=z}  # z\n"
    "%w2 = f32[7,3] const() {weight=\"b.kernel\", layer=b}  # b\n"
    "%y = f32[N,3] matmul(%f, %w2) {acc=f32, layer=b}  # b\n"
    "output y = %y\n";

START_TEST(test_gradients_dropout) {
  pass_train_options o = opts(PASS_LOSS_SPARSE_XENT, true);
  check_fd("dropout, sparse cross-entropy from logits", dropped, &o);
  o = opts(PASS_LOSS_MSE, false);
  check_fd("dropout, mean squared error", dropped, &o);
}
END_TEST

/* The mask: each element kept with probability 1 - rate (over 2^20
 * elements, within 0.005), a new mask each step, every element kept at
 * rate 0, and the same bits for the same (seed, step, index). */
START_TEST(test_dropout_mask) {
  static const double rates[] = {0.1, 0.25, 0.5, 0.9};
  enum { COUNT = 1 << 20 };
  for (int k = 0; k < 4; k++) {
    uint32_t thr = ir_dropout_threshold(rates[k]);
    uint64_t key0 = ir_dropout_key(7, 0), key1 = ir_dropout_key(7, 1);
    int64_t kept = 0, same = 0;
    for (int64_t i = 0; i < COUNT; i++) {
      bool a = ir_dropout_hash(key0, i) >= thr, b = ir_dropout_hash(key1, i) >= thr;
      kept += a, same += a == b;
    }
    double frac = (double)kept / COUNT, p = 1 - rates[k];
    ck_assert_msg(fabs(frac - p) < 0.005, "rate %g: kept %g", rates[k], frac);
    /* independent masks agree on p^2 + (1-p)^2 of the elements */
    ck_assert_msg(fabs((double)same / COUNT - (p * p + (1 - p) * (1 - p))) < 0.005, "rate %g: steps 0 and 1 agree on %g",
                  rates[k], (double)same / COUNT);
  }
  ck_assert_uint_eq(ir_dropout_threshold(0), 0);
  ck_assert_uint_eq(ir_dropout_hash(ir_dropout_key(3, 5), (int64_t)1 << 40),
                    ir_dropout_hash(ir_dropout_key(3, 5), (int64_t)1 << 40));
  ck_assert_uint_ne(ir_dropout_key(3, 5), ir_dropout_key(3, 6));
  ck_assert_uint_ne(ir_dropout_key(3, 5), ir_dropout_key(4, 5));
}
END_TEST

/* general tensors: reductions over sets of axes (keepdims or not, size-1
 * dimensions among them), max and min (their gradient to the first
 * extreme element), a reduction of a weight, broadcast_to of an
 * activation and of a weight against the batch (sum_to back), a
 * log_softmax. */
static const char reduced[] =
    "graph m policy=float32\n"
    "%x = f32[N,6] input() {index=0}\n"
    "%w1 = f32[6,12] const() {weight=\"a.kernel\", layer=a}  # a\n"
    "%m1 = f32[N,12] matmul(%x, %w1) {acc=f32, layer=a}  # a\n"
    "%r = f32[N,3,1,4] reshape(%m1) {shape=[N,3,1,4], layer=r}  # r\n"
    "%s = f32[N,3,1,1] reduce_sum(%r) {axes=[2,3], keepdims=1, layer=r}  # r\n"
    "%mn = f32[N,3,1] reduce_mean(%r) {axes=[-1], keepdims=0, layer=r}  # r\n"
    "%mx = f32[N,1,1,4] reduce_max(%r) {axes=[1], keepdims=1, layer=r}  # r\n"
    "%mi = f32[N,1] reduce_min(%r) {axes=[3,1], keepdims=0, layer=r}  # r\n"
    "%b = f32[N,3,2,4] broadcast_to(%s) {shape=[N,3,2,4], layer=r}  # r\n"
    "%s2 = f32[N,3] reshape(%mn) {shape=[N,3], layer=r}  # r\n"
    "%mx2 = f32[N,4] reshape(%mx) {shape=[N,4], layer=r}  # r\n"
    "%b2 = f32[N,24] reshape(%b) {shape=[N,24], layer=r}  # r\n"
    "%ls = f32[N,24] log_softmax(%b2) {layer=r}  # r\n"
    "%th = f32[N,24] tanh(%ls) {layer=r}  # r\n"
    "%c = f32[N,32] concat(%s2, %mx2, %mi, %th) {axis=1, layer=r}  # r\n"
    "%w2 = f32[32,3] const() {weight=\"b.kernel\", layer=b}  # b\n"
    "%m2 = f32[N,3] matmul(%c, %w2) {acc=f32, layer=b}  # b\n"
    "%wb = f32[5,3] const() {weight=\"b.bias\", layer=b}  # b\n"
    "%wm = f32[1,3] reduce_max(%wb) {axes=[0], keepdims=1, layer=b}  # b\n"
    "%bb = f32[N,3] broadcast_to(%wm) {shape=[N,3], layer=b}  # b\n"
    "%y = f32[N,3] add(%m2, %bb) {layer=b}  # b\n"
    "output y = %y\n";

START_TEST(test_gradients_reductions) {
  pass_train_options o = opts(PASS_LOSS_SPARSE_XENT, true);
  check_fd("reductions, sparse cross-entropy from logits", reduced, &o);
  o = opts(PASS_LOSS_MSE, false);
  check_fd("reductions, mean squared error", reduced, &o);
}
END_TEST

/* general tensors: split (ir_build_split: strided_slice pieces) of an
 * activation into pieces of 2, 4 and 1 along the last axis, one piece
 * used twice and one through tanh: each piece's gradient, summed back.
 * And split's errors, naming the shape. */
START_TEST(test_gradients_split) {
  static const char base[] = "graph m policy=float32\n"
                             "%x = f32[N,5] input() {index=0}\n"
                             "%w1 = f32[5,7] const() {weight=\"a.kernel\", layer=a}  # a\n"
                             "%m1 = f32[N,7] matmul(%x, %w1) {acc=f32, layer=a}  # a\n"
                             "output y = %m1\n";
  diag_sink *d = diag_sink_create();
  ir_graph *g = ir_parse("t.cir", base, strlen(base), d);
  ck_assert_msg(g, "%s", diag_text(d));
  ir_node *m1 = ir_graph_find(g, "m1"), *p[3];
  const diag_loc nl = {0};
  char err[256];
  ck_assert(ir_split_check(&m1->type, -1, 3, (int64_t[]){2, 4, 1}, err, sizeof err));
  ir_build_split(g, "sp", m1, -1, 3, (int64_t[]){2, 4, 1}, nl, p);
  ck_assert_int_eq(p[0]->type.dims[1], 2);
  ck_assert_int_eq(p[1]->type.dims[1], 4);
  ck_assert_int_eq(p[2]->type.dims[1], 1);
  ir_node *t = ir_build_unary(g, IR_OP_TANH, "t", p[1], nl);
  ir_node *c = ir_build_op(g, IR_OP_CONCAT, "c", (ir_node *[]){p[2], t, p[0], p[0]}, 4, &(ir_attr){.axis = 1}, nl);
  ir_type wt = {DT_F32, 2, {9, 3}};
  ir_node *w2 = ir_build_const(g, "w2", &wt, "b.kernel", NULL, nl);
  g->outputs[0].value = ir_build_matmul(g, "y", c, w2, DT_F32, nl);
  str_buf b;
  str_buf_init(&b);
  ir_print(g, &b);
  pass_train_options o = opts(PASS_LOSS_SPARSE_XENT, true);
  check_fd("split, sparse cross-entropy from logits", str_buf_cstr(&b), &o);
  str_buf_fini(&b);
  /* equal pieces; the errors */
  ir_build_split(g, "eq", m1, 1, 7, NULL, nl, (ir_node *[7]){0});
  ck_assert(!ir_split_check(&m1->type, 1, 2, NULL, err, sizeof err));
  ck_assert_str_eq(err, "split of f32[N,7] into 2 equal pieces along axis 1: 7 is not a multiple of 2");
  ck_assert(!ir_split_check(&m1->type, 0, 1, NULL, err, sizeof err));
  ck_assert_msg(strstr(err, "split of f32[N,7] along axis 0 would cut the batch dimension N") && strstr(err, "--batch"), "%s", err);
  ck_assert(!ir_split_check(&m1->type, 2, 1, NULL, err, sizeof err));
  ck_assert_str_eq(err, "split axis 2 is not a dimension of f32[N,7]");
  ck_assert(!ir_split_check(&m1->type, 1, 2, (int64_t[]){3, 3}, err, sizeof err));
  ck_assert_str_eq(err, "split of f32[N,7] along axis 1: the sizes add up to 6, not 7");
  ck_assert(!ir_split_check(&m1->type, 1, 2, (int64_t[]){8, -1}, err, sizeof err));
  ck_assert_str_eq(err, "split of f32[N,7] along axis 1: piece 1 has size -1, not >= 0");
  ck_assert(ir_split_check(&m1->type, 1, 3, (int64_t[]){7, 0, 0}, err, sizeof err)); /* empty pieces */
  ck_assert(!ir_split_check(&m1->type, 1, 8, NULL, err, sizeof err));
  ir_graph_destroy(g);
  diag_sink_destroy(d);
}
END_TEST

/* ---- one optimizer step against Keras 3's formulas ---- */

typedef struct snapshot {
  double *w, *g;
  int64_t n;
} snapshot;

/* The gradient of a.kernel at the initial state (optimizer none, same seed). */
static snapshot grad_of(const char *text, pass_train_options o) {
  o.optimizer = PASS_OPT_NONE;
  step s;
  step_init(&s, text, "verify,grad,dce", &o, 5);
  double *out[16] = {0};
  step_run(&s, out);
  snapshot r;
  double *w = ref_state_get(&s.st, "a.kernel", &r.n);
  r.w = memcpy(xmalloc((size_t)r.n * sizeof *r.w), w, (size_t)r.n * sizeof *r.w);
  int k = 2; /* grad_a_kernel comes first: a.kernel is the first variable */
  ck_assert_str_eq(s.g->outputs[k].name, "grad_a_kernel");
  r.g = memcpy(xmalloc((size_t)r.n * sizeof *r.g), out[k], (size_t)r.n * sizeof *r.g);
  ref_outputs_free(out, s.n_out);
  step_fini(&s);
  return r;
}

START_TEST(test_optimizer_steps) {
  static const pass_optimizer opt[] = {PASS_OPT_SGD,     PASS_OPT_SGD,     PASS_OPT_SGD,     PASS_OPT_RMSPROP,
                                       PASS_OPT_RMSPROP, PASS_OPT_RMSPROP, PASS_OPT_RMSPROP, PASS_OPT_ADAM};
  static const double mom[] = {0, 0.9, 0.9, 0, 0.8, 0, 0.8, 0};
  static const bool nest[] = {false, false, true, false, false, false, false, false};
  static const bool cent[] = {false, false, false, false, false, true, true, false};
  for (int c = 0; c < 8; c++) {
    pass_train_options o = opts(PASS_LOSS_SPARSE_XENT, false);
    o.optimizer = opt[c], o.momentum = mom[c], o.nesterov = nest[c], o.centered = cent[c];
    snapshot before = grad_of(mlp, o);
    step s;
    step_init(&s, mlp, "verify,grad,dce", &o, 5);
    for (int k = 0; k < 2; k++) { /* two steps: slots and the step count matter on the second */
      double *out[16] = {0};
      double *g = NULL;
      if (k == 1) { /* the gradient at the current weights */
        step t;
        pass_train_options on = o;
        on.optimizer = PASS_OPT_NONE;
        step_init(&t, mlp, "verify,grad,dce", &on, 5);
        const char *weights[] = {"a.kernel", "a.bias", "b.kernel", "c.kernel"};
        for (int q = 0; q < 4; q++) {
          int64_t n;
          double *to = ref_state_get(&t.st, weights[q], &n);
          memcpy(to, ref_state_get(&s.st, weights[q], &n), (size_t)n * 8);
        }
        double *o2[16] = {0};
        step_run(&t, o2);
        g = memcpy(xmalloc((size_t)before.n * 8), o2[2], (size_t)before.n * 8);
        ref_outputs_free(o2, t.n_out);
        step_fini(&t);
      }
      step_run(&s, out);
      ref_outputs_free(out, s.n_out);
      int64_t n;
      double *w = ref_state_get(&s.st, "a.kernel", &n);
      double steps = ref_state_get(&s.st, "optimizer.iterations", &n)[0];
      ck_assert_msg(steps == k + 1, "%s: optimizer.iterations %g after step %d", pass_optimizer_name(opt[c]), steps, k + 1);
      /* Keras 3, keras/src/optimizers/{sgd,rmsprop,adam}.py, written out */
      static double m[64], v[64], a[64];
      if (k == 0) memset(m, 0, sizeof m), memset(v, 0, sizeof v), memset(a, 0, sizeof a);
      const double *gg = k == 0 ? before.g : g;
      for (int64_t e = 0; e < before.n; e++) {
        double want, lr = opt[c] == PASS_OPT_SGD ? 0.01 : 0.001;
        if (opt[c] == PASS_OPT_SGD && mom[c] == 0) {
          want = before.w[e] - lr * gg[e];
        } else if (opt[c] == PASS_OPT_SGD) {
          m[e] = 0.9 * m[e] - lr * gg[e];
          want = before.w[e] + (nest[c] ? 0.9 * m[e] - lr * gg[e] : m[e]);
        } else if (opt[c] == PASS_OPT_RMSPROP) {
          v[e] = 0.9 * v[e] + 0.1 * gg[e] * gg[e];
          double den = v[e];
          if (cent[c]) a[e] = 0.9 * a[e] + 0.1 * gg[e], den -= a[e] * a[e];
          double inc = lr * gg[e] / sqrt(den + 1e-7);
          if (mom[c] > 0) inc = m[e] = mom[c] * m[e] + inc;
          want = before.w[e] - inc;
        } else {
          double t = k + 1, alpha = lr * sqrt(1 - pow(0.999, t)) / (1 - pow(0.9, t));
          m[e] += 0.1 * (gg[e] - m[e]);
          v[e] += 0.001 * (gg[e] * gg[e] - v[e]);
          want = before.w[e] - alpha * m[e] / (sqrt(v[e]) + 1e-7);
        }
        ck_assert_msg(fabs(w[e] - want) <= 1e-12 * fmax(1, fabs(want)), "%s%s%s step %d: w[%lld] = %.15g, want %.15g",
                      pass_optimizer_name(opt[c]), cent[c] ? " centered" : "",
                      mom[c] ? (nest[c] ? " nesterov" : " momentum") : "", k + 1,
                      (long long)e, w[e], want);
        before.w[e] = want;
      }
      free(g);
    }
    step_fini(&s);
    free(before.w), free(before.g);
  }
}
END_TEST

/* ---- the loss scale ---- */

static double scalar(step *s, const char *name) {
  int64_t n;
  double *v = ref_state_get(&s->st, name, &n);
  ck_assert_msg(v && n == 1, "no state %s", name);
  return v[0];
}

START_TEST(test_loss_scale_state_machine) {
  pass_train_options o = opts(PASS_LOSS_SPARSE_XENT, false);
  o.optimizer = PASS_OPT_ADAM;
  o.loss_scale = 0; /* dynamic under float32: the same machine */
  step s;
  step_init(&s, mlp, "verify,grad,dce", &o, 9);
  ck_assert_double_eq(scalar(&s, "optimizer.loss_scale"), 32768);
  double *out[16] = {0};
  /* a finite step: applied, counted */
  step_run(&s, out);
  ref_outputs_free(out, s.n_out);
  ck_assert_double_eq(scalar(&s, "optimizer.iterations"), 1);
  ck_assert_double_eq(scalar(&s, "optimizer.good_steps"), 1);
  /* a NaN in the input: every variable and slot bit-identical, the scale halves */
  ref_state before;
  ref_state_init(&before, s.g);
  for (int i = 0; i < s.st.n; i++) memcpy(before.values[i], s.st.values[i], (size_t)s.st.counts[i] * 8);
  double keep = s.x[4];
  s.x[4] = NAN;
  step_run(&s, out);
  ck_assert_msg(isnan(out[1][0]), "the loss of a NaN input is NaN");
  ref_outputs_free(out, s.n_out);
  s.x[4] = keep;
  for (int i = 0; i < s.st.n; i++) {
    const char *nm = s.st.names[i];
    if (!strcmp(nm, "optimizer.loss_scale") || !strcmp(nm, "optimizer.good_steps")) continue;
    ck_assert_msg(memcmp(before.values[i], s.st.values[i], (size_t)s.st.counts[i] * 8) == 0,
                  "%s changed on a rejected step", nm);
  }
  ck_assert_double_eq(scalar(&s, "optimizer.loss_scale"), 16384);
  ck_assert_double_eq(scalar(&s, "optimizer.good_steps"), 0);
  ck_assert_double_eq(scalar(&s, "optimizer.iterations"), 1);
  ref_state_fini(&before);
  /* 2000 finite steps double it (Keras: counter == period - 1 -> double, reset) */
  for (int k = 0; k < 1999; k++) {
    step_run(&s, out);
    ref_outputs_free(out, s.n_out);
  }
  ck_assert_double_eq(scalar(&s, "optimizer.loss_scale"), 16384);
  ck_assert_double_eq(scalar(&s, "optimizer.good_steps"), 1999);
  step_run(&s, out);
  ref_outputs_free(out, s.n_out);
  ck_assert_double_eq(scalar(&s, "optimizer.loss_scale"), 32768);
  ck_assert_double_eq(scalar(&s, "optimizer.good_steps"), 0);
  ck_assert_double_eq(scalar(&s, "optimizer.iterations"), 2001);
  step_fini(&s);
}
END_TEST

START_TEST(test_loss_scale_fixed_and_none) {
  for (int c = 0; c < 2; c++) {
    pass_train_options o = opts(PASS_LOSS_SPARSE_XENT, false);
    o.optimizer = PASS_OPT_SGD;
    o.loss_scale = c == 0 ? 1 : 1024;
    step s, plain;
    step_init(&s, mlp, "verify,grad,dce", &o, 3);
    ck_assert_msg(ref_state_get(&s.st, "optimizer.loss_scale", &(int64_t){0}) == NULL, "a fixed scale is no state");
    pass_train_options on = o;
    on.loss_scale = 1;
    step_init(&plain, mlp, "verify,grad,dce", &on, 3);
    double *out[16] = {0};
    step_run(&s, out);
    ref_outputs_free(out, s.n_out);
    step_run(&plain, out);
    ref_outputs_free(out, plain.n_out);
    /* scaled by 1024 then divided by it: the same update (to rounding) */
    int64_t n;
    double *a = ref_state_get(&s.st, "a.kernel", &n), *b = ref_state_get(&plain.st, "a.kernel", &n);
    for (int64_t e = 0; e < n; e++) ck_assert_msg(fabs(a[e] - b[e]) <= 1e-14, "scale %g: w[%lld]", o.loss_scale, (long long)e);
    /* a NaN step is applied (Keras applies it: no dynamic scale) */
    s.x[0] = NAN;
    step_run(&s, out);
    ref_outputs_free(out, s.n_out);
    ck_assert_msg(isnan(ref_state_get(&s.st, "a.kernel", &n)[0]), "fixed scale %g: a NaN step applies", o.loss_scale);
    ck_assert_double_eq(scalar(&s, "optimizer.iterations"), 2);
    step_fini(&s), step_fini(&plain);
  }
}
END_TEST

/* general tensors: dense on a rank-3 input (matmul over leading
 * dimensions: matmul_nt and matmul_tn on [N, T, C]) and batch_matmul with
 * every pair of transpose flags, leading dimensions broadcast (a [1, ..]
 * and an unbatched operand of lower rank) and size-1 dimensions. */
static const char attention_like[] =
    "graph m policy=float32\n"
    "%x = f32[N,4,5] input() {index=0}\n"
    "%wq = f32[5,6] const() {weight=\"q.kernel\", layer=q}  # q\n"
    "%bq = f32[6] const() {weight=\"q.bias\", layer=q}  # q\n"
    "%mq = f32[N,4,6] matmul(%x, %wq) {acc=f32, layer=q}  # q\n"
    "%q = f32[N,4,6] add(%mq, %bq) {layer=q}  # q\n"
    "%wk = f32[5,6] const() {weight=\"k.kernel\", layer=k}  # k\n"
    "%k = f32[N,4,6] matmul(%x, %wk) {acc=f32, layer=k}  # k\n"
    "%q4 = f32[N,4,2,3] reshape(%q) {shape=[N,4,2,3], layer=a}  # a\n"
    "%qh = f32[N,2,4,3] transpose(%q4) {perm=[0,2,1,3], layer=a}  # a\n"
    "%k4 = f32[N,4,2,3] reshape(%k) {shape=[N,4,2,3], layer=a}  # a\n"
    "%kh = f32[N,2,4,3] transpose(%k4) {perm=[0,2,1,3], layer=a}  # a\n"
    "%s = f32[N,2,4,4] batch_matmul(%qh, %kh) {acc=f32, transpose_a=0, transpose_b=1, layer=a}  # a\n"
    "%p = f32[N,2,4,4] softmax(%s) {layer=a}  # a\n"
    "%o = f32[N,2,4,3] batch_matmul(%p, %kh) {acc=f32, transpose_a=0, transpose_b=0, layer=a}  # a\n"
    "%o2 = f32[N,2,4,3] batch_matmul(%p, %qh) {acc=f32, transpose_a=1, transpose_b=0, layer=a}  # a\n"
    "%c = f32[1,5,4] const() {weight=\"a.c\", layer=a}  # a\n"
    "%o3 = f32[N,2,3,5] batch_matmul(%o2, %c) {acc=f32, transpose_a=1, transpose_b=1, layer=a}  # a\n"
    "%e = f32[3,1] const() {weight=\"a.e\", layer=a}  # a\n"
    "%o4 = f32[N,2,4,1] batch_matmul(%o, %e) {acc=f32, transpose_a=0, transpose_b=0, layer=a}  # a\n"
    "%f1 = f32[N,24] reshape(%o) {shape=[N,24], layer=f}  # f\n"
    "%f3 = f32[N,30] reshape(%o3) {shape=[N,30], layer=f}  # f\n"
    "%f4 = f32[N,8] reshape(%o4) {shape=[N,8], layer=f}  # f\n"
    "%f = f32[N,62] concat(%f1, %f3, %f4) {axis=1, layer=f}  # f\n"
    "%w = f32[62,3] const() {weight=\"d.kernel\", layer=d}  # d\n"
    "%y = f32[N,3] matmul(%f, %w) {acc=f32, layer=d}  # d\n"
    "output y = %y\n";

/* general tensors: layer_norm over the last axis of [N, T, C], and over
 * the last two of [N, A, T, C]: gamma and beta summed over N and T. */
static const char normed_rank3[] =
    "graph m policy=float32\n"
    "%x = f32[N,4,5] input() {index=0}\n"
    "%w = f32[5,6] const() {weight=\"a.kernel\", layer=a}  # a\n"
    "%h = f32[N,4,6] matmul(%x, %w) {acc=f32, layer=a}  # a\n"
    "%g = f32[6] const() {weight=\"n.gamma\", layer=n}  # n\n"
    "%b = f32[6] const() {weight=\"n.beta\", layer=n}  # n\n"
    "%l = f32[N,4,6] layer_norm(%h, %g, %b) {axis=-1, epsilon=0.001, layer=n}  # n\n"
    "%r = f32[N,2,2,6] reshape(%l) {shape=[N,2,2,6], layer=n2}  # n2\n"
    "%g2 = f32[2,6] const() {weight=\"n2.gamma\", layer=n2}  # n2\n"
    "%b2 = f32[2,6] const() {weight=\"n2.beta\", layer=n2}  # n2\n"
    "%l2 = f32[N,2,2,6] layer_norm(%r, %g2, %b2) {axis=2, epsilon=0.001, layer=n2}  # n2\n"
    "%f = f32[N,24] reshape(%l2) {shape=[N,24], layer=f}  # f\n"
    "%w2 = f32[24,3] const() {weight=\"d.kernel\", layer=d}  # d\n"
    "%y = f32[N,3] matmul(%f, %w2) {acc=f32, layer=d}  # d\n"
    "output y = %y\n";

/* attention masks (frontend/fe_attention.c's lowering): the scores
 * selected by an attention mask [N, 1, T, S] (relu of a slice of x: about
 * half its elements 0, a row of x's batch masked whole by chance or not)
 * and by the causal mask built from literals, -3e4 where masked, then the
 * softmax's probabilities selected again (0 where masked): the gradient
 * flows through select's operand b only where the mask attends. */
static const char masked_attention[] =
    "graph m policy=float32\n"
    "%x = f32[N,4,5] input() {index=0}\n"
    "%wq = f32[5,6] const() {weight=\"q.kernel\", layer=q}  # q\n"
    "%q = f32[N,4,6] matmul(%x, %wq) {acc=f32, layer=q}  # q\n"
    "%wk = f32[5,6] const() {weight=\"k.kernel\", layer=k}  # k\n"
    "%k = f32[N,4,6] matmul(%x, %wk) {acc=f32, layer=k}  # k\n"
    "%q4 = f32[N,4,2,3] reshape(%q) {shape=[N,4,2,3], layer=a}  # a\n"
    "%qh = f32[N,2,4,3] transpose(%q4) {perm=[0,2,1,3], layer=a}  # a\n"
    "%k4 = f32[N,4,2,3] reshape(%k) {shape=[N,4,2,3], layer=a}  # a\n"
    "%kh = f32[N,2,4,3] transpose(%k4) {perm=[0,2,1,3], layer=a}  # a\n"
    "%s = f32[N,2,4,4] batch_matmul(%qh, %kh) {acc=f32, transpose_a=0, transpose_b=1, layer=a}  # a\n"
    "%xs = f32[N,4,4] strided_slice(%x) {starts=[0,0,1], ends=[0,4,5], steps=[1,1,1], layer=a}  # a\n"
    "%mr = f32[N,4,4] relu(%xs) {layer=a}  # a\n"
    "%m = f32[N,1,4,4] reshape(%mr) {shape=[N,1,4,4], layer=a}  # a\n"
    "%one = f32[] literal() {value=1, layer=a}  # a\n"
    "%zero = f32[] literal() {value=0, layer=a}  # a\n"
    "%first = f32[1] broadcast_to(%one) {shape=[1], layer=a}  # a\n"
    "%zeros = f32[3] broadcast_to(%zero) {shape=[3], layer=a}  # a\n"
    "%ones = f32[3] broadcast_to(%one) {shape=[3], layer=a}  # a\n"
    "%period = f32[7] concat(%first, %zeros, %ones) {axis=0, layer=a}  # a\n"
    "%tiled = f32[4,7] broadcast_to(%period) {shape=[4,7], layer=a}  # a\n"
    "%flat = f32[28] reshape(%tiled) {shape=[28], layer=a}  # a\n"
    "%cut = f32[24] strided_slice(%flat) {starts=[0], ends=[24], steps=[1], layer=a}  # a\n"
    "%rows = f32[4,6] reshape(%cut) {shape=[4,6], layer=a}  # a\n"
    "%causal = f32[4,4] strided_slice(%rows) {starts=[0,0], ends=[4,4], steps=[1,1], layer=a}  # a\n"
    "%fill = f32[] literal() {value=-30000, layer=a}  # a\n"
    "%s1 = f32[N,2,4,4] select(%m, %s, %fill) {layer=a}  # a\n"
    "%s2 = f32[N,2,4,4] select(%causal, %s1, %fill) {layer=a}  # a\n"
    "%p = f32[N,2,4,4] softmax(%s2) {layer=a}  # a\n"
    "%p1 = f32[N,2,4,4] select(%m, %p, %zero) {layer=a}  # a\n"
    "%p2 = f32[N,2,4,4] select(%causal, %p1, %zero) {layer=a}  # a\n"
    "%o = f32[N,2,4,3] batch_matmul(%p2, %kh) {acc=f32, transpose_a=0, transpose_b=0, layer=a}  # a\n"
    "%f = f32[N,24] reshape(%o) {shape=[N,24], layer=f}  # f\n"
    "%w = f32[24,3] const() {weight=\"d.kernel\", layer=d}  # d\n"
    "%y = f32[N,3] matmul(%f, %w) {acc=f32, layer=d}  # d\n"
    "output y = %y\n";

START_TEST(test_gradients_masked_attention) {
  pass_train_options o = opts(PASS_LOSS_SPARSE_XENT, true);
  check_fd("masked attention, sparse cross-entropy from logits", masked_attention, &o);
  o = opts(PASS_LOSS_MSE, false);
  check_fd("masked attention, mean squared error", masked_attention, &o);
}
END_TEST

START_TEST(test_gradients_layer_norm_rank3) {
  pass_train_options o = opts(PASS_LOSS_SPARSE_XENT, true);
  check_fd("layer_norm on rank 3 and 4, sparse cross-entropy from logits", normed_rank3, &o);
}
END_TEST

START_TEST(test_gradients_batched_matmul) {
  pass_train_options o = opts(PASS_LOSS_SPARSE_XENT, true);
  check_fd("dense on rank 3 and batch_matmul, sparse cross-entropy from logits", attention_like, &o);
  o = opts(PASS_LOSS_MSE, false);
  check_fd("dense on rank 3 and batch_matmul, mean squared error", attention_like, &o);
}
END_TEST

static Suite *grad_suite(void) {
  Suite *s = suite_create("grad");
  TCase *tc = tcase_create("grad");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_gradients_sparse_xent);
  tcase_add_test(tc, test_gradients_categorical_xent);
  tcase_add_test(tc, test_gradients_mse_through_softmax);
  tcase_add_test(tc, test_gradients_logits_every_rule);
  tcase_add_test(tc, test_gradients_broadcasting);
  tcase_add_test(tc, test_gradients_unary);
  tcase_add_test(tc, test_gradients_layer_norm);
  tcase_add_test(tc, test_gradients_layout);
  tcase_add_test(tc, test_gradients_dropout); /* general tensors */
  tcase_add_test(tc, test_dropout_mask);
  tcase_add_test(tc, test_gradients_reductions);
  tcase_add_test(tc, test_gradients_split);
  tcase_add_test(tc, test_optimizer_steps);
  tcase_add_test(tc, test_loss_scale_state_machine);
  tcase_add_test(tc, test_loss_scale_fixed_and_none);
  tcase_add_test(tc, test_gradients_batched_matmul); /* general tensors */
  tcase_add_test(tc, test_gradients_layer_norm_rank3);
  tcase_add_test(tc, test_gradients_masked_attention); /* attention masks */
  suite_add_tcase(s, tc);
  return s;
}

int main(void) { return check_run(grad_suite()); }
