/* SPDX-License-Identifier: Apache-2.0 */
/*
 * grad.c: the training step. Reverse-mode automatic differentiation of a
 * model graph plus a loss, followed by the optimizer's update: one graph,
 * one program per training step (docs/training.md). The per-op backward
 * rules are in grad_rules.c (grad_internal.h: what the two share).
 *
 * In:  a verified model graph after autocast (and cast-cleanup), with one
 *      output, the model's prediction; its weights are constants.
 * Out: the step graph:
 *      - every weight becomes a variable (persistent state) in Keras's
 *        variable dtype: f32 under float32 and the mixed policies (their
 *        16-bit copies are the forward graph's casts, made each step, as
 *        Keras casts variables when a layer is called), the compute dtype
 *        under float16/bfloat16 (the casts that made it fold into it);
 *      - a second input, the targets: int32 class indices [N] for sparse
 *        categorical cross-entropy, else the prediction's shape;
 *      - the loss, an f32 [] output named "loss", after the model's output;
 *      - the backward graph: for each forward node whose value depends on a
 *        variable, in reverse schedule order, its local gradient rule
 *        (below), with an add where a value fans out. Each backward node
 *        computes in its forward node's dtype, so it is the exact transpose
 *        of the mixed-precision forward program, as JAX differentiates
 *        Keras's: the gradient of a 16-bit matmul is a 16-bit matmul that
 *        accumulates in f32, and the transpose of each autocast cast is a
 *        cast back, whose note names the forward cast and its reason;
 *      - the optimizer: learning rate, step count and loss scale are
 *        variables too (run-time scalars the host may read and set), the
 *        slots are variables of each weight's type, and one update op per
 *        weight applies Keras 3's formula in place. With a dynamic loss
 *        scale (Keras's LossScaleOptimizer), all_finite over the scaled
 *        gradients gates every update, the step count and the scale's own
 *        update: a rejected step changes nothing but the scale, on the
 *        device, with no round trip to the host.
 *
 * Gradient rules (dy: the gradient of the node's value):
 *   matmul(a, b)   da = matmul_nt(dy, b), db = matmul_tn(a, dy), acc f32
 *   add(a, b)      da = dy; db = dy, or sum_rows(dy) for a bias vector
 *   mul(a, b)      da = dy * b; db = dy * a, or sum_rows(dy * a)
 *   relu, gelu, silu: <op>_grad(dy, x); sigmoid, tanh: <op>_grad(dy, y)
 *   softmax        softmax_grad(dy, y); when it feeds the cross-entropy
 *                  loss directly, xent_grad gives the logits' gradient
 *   layer_norm(x, gamma, beta)
 *                  dx = layer_norm_grad(x, gamma, dy), in the forward op's
 *                  dtype with f32 statistics: (1/sigma) (g - mean(g) -
 *                  xhat mean(g xhat)), g = dy gamma, per row;
 *                  dgamma = sum_rows(dy * layer_norm_xhat(x)),
 *                  dbeta = sum_rows(dy): sum_rows needs x [N, C] (an x
 *                  with more dimensions before the normalized ones is an
 *                  error, as for a broadcast bias)
 *   cast           cast(dy) back to the operand's dtype
 *   pad / slice    slice / pad of dy
 *   reshape        reshape(dy) to the operand's shape
 *   transpose      transpose(dy) by the inverse permutation
 *   concat         each operand: strided_slice(dy), its block along the axis
 *   strided_slice  pad_constant(dy) with value 0 at the same starts and steps
 *   pad_constant   strided_slice(dy) of the block it placed
 *   gather(a, b)   da = gather_grad(dy, b), the ordered scatter-add; the
 *                  int32 indices b have none
 *   batch_norm(x, gamma, beta, mean, var) in a training step (grad_bn.c
 *                  gave it the batch's statistics): with inv = 1 / sqrt(var
 *                  + eps), xhat = (x - mean) inv, the full gradient through
 *                  the statistics dx = gamma inv (dy - bn_mean(dy) - xhat
 *                  bn_mean(dy xhat)); dgamma = sum(dy xhat), dbeta =
 *                  sum(dy), summed to their shape
 *   dropout        (a training step makes each dropout of rate > 0 a
 *                  dropout_train reading dropout.step, a training scalar
 *                  the optimizer's step advances) dx = dropout_train(dy,
 *                  step): the same mask and scale; rate 0: dx = dy
 *   reduce_sum / reduce_mean
 *                  dx = broadcast_to(dy, reshaped to keep the reduced
 *                  dimensions as 1) to x's shape (times 1/count: mean)
 *   reduce_max / reduce_min
 *                  dx = reduce_max_grad / reduce_min_grad(dy, x): dy to
 *                  the first extreme element of each group
 *   broadcast_to   dx = sum_to(dy) to x's shape (as a broadcast operand)
 *   log_softmax    dx = log_softmax_grad(dy, y) = dy - exp(y) sum(dy), per row
 *   lstm / gru / simple_rnn (recurrent layers: backpropagation through time)
 *                  g = <op>_grad(operands, y, dy): dxp = its first G*H
 *                  columns; dr = matmul_tn(h_{t-1}, du) over every row
 *                  (gru with its reset gate before: (g h_{t-1}) for h's
 *                  block); drb = sum_to(du); no gradient to initial states
 */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/half.h"
#include "passes/grad_bn.h"
#include "passes/grad_internal.h"
#include "passes/passes.h"

static const diag_loc no_loc = {0};

/* ir_graph_unique_name's answer (base, else base.1, base.2, ...: the first
 * name no node has) from a set of the graph's names instead of a scan of
 * the graph per new node, which made the pass quadratic in depth (10,000
 * layers: 80 s). Exact because every node the pass adds takes its name
 * from here and none is removed or renamed while it runs. */
static const char *unique_name(grad_state *s, const char *base) {
  const char *name = base;
  for (int k = 1; hmap_get_str(s->names, name, strlen(name)); k++) name = arena_printf(s->g->arena, "%s.%d", base, k);
  if (name == base) name = arena_strdup(s->g->arena, base);
  hmap_put_str(s->names, name, strlen(name), (void *)name);
  return name;
}

bool grad_fail(grad_state *s, diag_kind kind, diag_loc loc, const char *fmt, const char *a, const char *b) {
  diag_error_kind(s->ctx->diag, kind, loc, fmt, a, b);
  return false;
}

static double default_lr(pass_optimizer o) { return o == PASS_OPT_SGD ? 0.01 : 0.001; }

/* ---- building ---- */

/* A value name derived from a weight key: the key's characters that a name
 * may not hold ([A-Za-z_][A-Za-z0-9_.]*, ir/README.md) become '_', so that
 * `weight="out.ker?el"` gives %out.ker_el.momentum; the key itself stays
 * exact in the weight attribute. */
static const char *safe_name(grad_state *s, const char *key) {
  bool lead = (key[0] >= 'a' && key[0] <= 'z') || (key[0] >= 'A' && key[0] <= 'Z') || key[0] == '_';
  char *n = arena_printf(s->g->arena, "%s%s", lead ? "" : "_", key);
  for (char *p = n; *p; p++)
    if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '_' ||
          *p == '.'))
      *p = '_';
  return n;
}

static ir_node *leaf(grad_state *s, ir_op op, const char *name, ir_type t) {
  ir_node *n = ir_node_new(s->g, op, &t, NULL, 0, unique_name(s, name), no_loc);
  ir_graph_append(s->g, n);
  return n;
}

/* A variable of kind k that starts as `init` everywhere (slots, training
 * scalars). */
static ir_node *state(grad_state *s, ir_state_kind k, const char *weight, ir_type t, double init,
                      const char *note) {
  const char *name = safe_name(s, weight);
  ir_node *n = leaf(s, IR_OP_VARIABLE, name, t);
  n->attr.weight = strcmp(name, weight) == 0 ? n->name : arena_strdup(s->g->arena, weight);
  n->attr.init = init;
  n->attr.kind = k;
  n->note = note;
  return n;
}

ir_node *grad_literal(grad_state *s, const char *name, ir_dtype dt, double v) {
  ir_node *n = leaf(s, IR_OP_LITERAL, name, (ir_type){dt, 0, {0}});
  n->attr.value = v;
  return n;
}

/* A backward node serving forward node `fwd`: its layer, named `name`. */
ir_node *grad_named_op(grad_state *s, ir_op o, const ir_node *fwd, const char *name, ir_node *const *srcs, int n,
                         const ir_attr *attr) {
  ir_node *r = ir_build_op(s->g, o, unique_name(s, name), srcs, n, attr, fwd ? fwd->loc : no_loc);
  if (fwd) {
    r->layer = fwd->layer;
    r->policy = fwd->policy;
    r->note = fwd->layer ? arena_printf(s->g->arena, "%s", fwd->layer) : NULL;
  }
  return r;
}

/* A gradient serving forward node `fwd`, named d.<base>. */
ir_node *grad_op(grad_state *s, ir_op o, const ir_node *fwd, const char *base, ir_node *const *srcs, int n,
                   const ir_attr *attr) {
  char name[512];
  snprintf(name, sizeof name, "d.%s", base);
  return grad_named_op(s, o, fwd, name, srcs, n, attr);
}

/* Adds a gradient contribution to forward node x's adjoint. */
void grad_accumulate(grad_state *s, ir_node *x, ir_node *d) {
  if (!s->needs[x->id]) return;
  ir_node *prev = s->adjoint[x->id];
  CASTOR_ASSERT(ir_type_eq(&d->type, &x->type));
  s->adjoint[x->id] = prev ? grad_op(s, IR_OP_ADD, x, x->name, (ir_node *[]){prev, d}, 2, &(ir_attr){0}) : d;
}

/* ---- weights become variables ---- */

static ir_policy policy_of(const ir_graph *g, const ir_node *n) {
  return n->policy != IR_POLICY_NONE ? n->policy : g->policy;
}

/* Constant c becomes a variable in its layer's variable dtype vd. When vd
 * is 16-bit, c's casts to vd become the variable itself (their data
 * converted here, rounding to nearest even as fold-constants does). */
static void make_variable(grad_state *s, ir_node *c, int uses) {
  ir_dtype vd = ir_policy_variable_dtype(policy_of(s->g, c));
  c->op = IR_OP_VARIABLE;
  c->attr.init = 0;
  c->attr.kind = IR_STATE_WEIGHT; /* every loaded weight is trained (nontrainable ones come with batch norm) */
  if (vd == c->type.dtype || c->type.dtype != DT_F32) return;
  if (uses > 1) return; /* also used as it is (a layer of another policy shares it: fuzz_grad): stays f32 */
  ir_node *cast = NULL;
  for (int i = c->id + 1; i < s->n_fwd && !cast; i++) {
    ir_node *u = s->g->nodes[i];
    if (u->op == IR_OP_CAST && u->srcs[0] == c && u->type.dtype == vd) cast = u;
  }
  if (!cast) return; /* used in f32 only (a layer with dtype=float32 would have its own policy) */
  if (c->attr.data) {
    int64_t n = 0;
    CASTOR_ASSERT(ir_type_numel(&c->type, 1, &n));
    uint16_t *d = arena_alloc_aligned(s->g->arena, (size_t)n * 2 + 2, 64);
    const float *f = c->attr.data;
    for (int64_t i = 0; i < n; i++) d[i] = vd == DT_F16 ? half_f32_to_f16(f[i]) : half_f32_to_bf16(f[i]);
    c->attr.data = d;
  }
  c->type.dtype = vd;
  c->note = arena_printf(s->g->arena, "%s (variable in %s: %s policy)", c->layer ? c->layer : c->attr.weight,
                         dtype_name(vd), ir_policy_name(policy_of(s->g, c)));
  ir_graph_replace_uses(s->g, cast, c); /* the cast is dead now */
}

/* ---- the loss ---- */

/* The softmax the prediction is (through casts), or NULL. */
static ir_node *softmax_of(ir_node *p) {
  while (p->op == IR_OP_CAST) p = p->srcs[0];
  return p->op == IR_OP_SOFTMAX ? p : NULL;
}

/* ---- the optimizer ---- */

typedef struct opt_scalars {
  ir_node *lr, *scale, *ok, *steps;
} opt_scalars;

/* all_finite over the gradients, 8 operands a node, chained. */
static ir_node *all_finite(grad_state *s, ir_node **grads, int n) {
  ir_node *ok = NULL;
  for (int i = 0; i < n;) {
    ir_node *srcs[IR_MAX_SRCS];
    int k = 0;
    if (ok) srcs[k++] = ok;
    while (k < IR_MAX_SRCS && i < n) srcs[k++] = grads[i++];
    ok = ir_build_op(s->g, IR_OP_ALL_FINITE, unique_name(s, "grads_finite"), srcs, k, &(ir_attr){0},
                     no_loc);
    ok->note = "the loss scale's check: every scaled gradient finite";
  }
  return ok;
}

static void update(grad_state *s, ir_node *w, ir_node *gw, const opt_scalars *sc) {
  const pass_train_options *o = s->o;
  ir_node *srcs[IR_MAX_SRCS];
  ir_attr attr = {0};
  ir_op uop;
  int n = 0;
  char slot[512];
  srcs[n++] = w;
#define SLOT(suffix)                                                                              \
  (snprintf(slot, sizeof slot, "%s." suffix, w->attr.weight),                                     \
   srcs[n++] = state(s, IR_STATE_SLOT, slot, w->type, 0,                                          \
                     arena_printf(s->g->arena, "%s's " suffix, w->attr.weight)))
  switch (o->optimizer) {
  case PASS_OPT_SGD:
    if (o->momentum > 0) {
      uop = IR_OP_SGD_MOMENTUM;
      SLOT("momentum");
      attr.momentum = o->momentum;
      attr.nesterov = o->nesterov;
    } else {
      uop = IR_OP_SGD;
    }
    break;
  case PASS_OPT_RMSPROP: /* operands w, v, [a], [m]: one op per variant */
    SLOT("velocity");
    if (o->centered) SLOT("average_gradient");
    if (o->momentum > 0) SLOT("momentum");
    uop = o->centered ? (o->momentum > 0 ? IR_OP_RMSPROP_CENTERED_MOMENTUM : IR_OP_RMSPROP_CENTERED)
                      : (o->momentum > 0 ? IR_OP_RMSPROP_MOMENTUM : IR_OP_RMSPROP);
    attr.momentum = o->momentum;
    attr.rho = o->rho > 0 ? o->rho : 0.9;
    attr.epsilon = o->epsilon > 0 ? o->epsilon : 1e-7;
    break;
  case PASS_OPT_ADAM:
  case PASS_OPT_ADAMW: /* AdamW: Adam after Keras's decoupled weight decay */
    uop = o->optimizer == PASS_OPT_ADAMW ? IR_OP_ADAMW : IR_OP_ADAM;
    if (uop == IR_OP_ADAMW) attr.weight_decay = o->weight_decay >= 0 ? o->weight_decay : 0.004;
    SLOT("momentum");
    SLOT("velocity");
    attr.beta_1 = o->beta_1 > 0 ? o->beta_1 : 0.9;
    attr.beta_2 = o->beta_2 > 0 ? o->beta_2 : 0.999;
    attr.epsilon = o->epsilon > 0 ? o->epsilon : 1e-7;
    break;
  case PASS_OPT_NONE:
  default: CASTOR_UNREACHABLE(); return;
  }
#undef SLOT
  srcs[n++] = gw;
  srcs[n++] = sc->lr;
  srcs[n++] = sc->scale;
  srcs[n++] = sc->ok;
  if (uop == IR_OP_ADAM || uop == IR_OP_ADAMW) srcs[n++] = sc->steps;
  char name[512];
  snprintf(name, sizeof name, "%s.updated", safe_name(s, w->attr.weight));
  ir_node *u = ir_build_op(s->g, uop, unique_name(s, name), srcs, n, &attr, w->loc);
  u->layer = w->layer;
  u->note = arena_printf(s->g->arena, "%s: %s update in %s", w->layer ? w->layer : w->attr.weight,
                         pass_optimizer_name(o->optimizer), dtype_name(w->type.dtype));
}

/* An output name from a weight key: dense_1.kernel -> grad_dense_1_kernel. */
static const char *grad_output_name(grad_state *s, const char *weight) {
  char *n = arena_printf(s->g->arena, "grad_%s", safe_name(s, weight));
  for (char *p = n; *p; p++)
    if (*p == '.') *p = '_';
  return n;
}

/* general tensors: dropout. In a training step each dropout of rate > 0
 * becomes dropout_train, which reads the step count dropout.step (a
 * training scalar, put first in the schedule); the optimizer's step
 * advances it by one every step, applied or not, so each step draws new
 * masks (Keras's seed generator). Without an optimizer (gradients only)
 * it stays where the host sets it: one mask per program run, as a
 * gradient check needs. Returns the step variable, or NULL if no dropout
 * trains. Runs before the forward nodes are numbered. */
static ir_node *dropout_to_train(grad_state *s) {
  ir_graph *g = s->g;
  ir_node *step = NULL;
  for (int i = 0; i < g->n_nodes; i++) {
    ir_node *n = g->nodes[i];
    if (n->op != IR_OP_DROPOUT || n->attr.rate == 0) continue;
    if (!step) {
      ir_type i64s = {DT_I64, 0, {0}};
      step = ir_node_new(g, IR_OP_VARIABLE, &i64s, NULL, 0, unique_name(s, "dropout.step"), no_loc);
      step->attr.weight = step->name;
      step->attr.kind = IR_STATE_SCALAR;
      step->note = "training steps run so far: seeds each step's dropout masks";
      ir_graph_insert(g, 0, step);
      i++; /* n moved one place on */
    }
    n->op = IR_OP_DROPOUT_TRAIN;
    n->srcs[n->n_srcs++] = step;
  }
  return step;
}

static bool grad_run(ir_graph *g, pass_context *ctx, hmap *names) {
  const pass_train_options *o = &ctx->opts->train;
  grad_state s = {g, ctx, o, g->n_nodes, NULL, NULL, names};
  /* a model may hold nontrainable variables (Keras Normalization's stored statistics); a training
   * program has trainable ones, slots and scalars */
  for (int i = 0; i < g->n_nodes; i++)
    if ((g->nodes[i]->op == IR_OP_VARIABLE && g->nodes[i]->attr.kind != IR_STATE_NONTRAINABLE) ||
        ir_op_writes(g->nodes[i]->op))
      return grad_fail(&s, DIAG_KIND_INVALID_MODEL, g->nodes[i]->loc,
                  "grad: %s is a training program already (%%%s)", g->name, g->nodes[i]->name);
  if (o->optimizer != PASS_OPT_NONE && !o->loss_only) { /* Keras's optimizers take no other's options */
    bool adam = o->optimizer == PASS_OPT_ADAM || o->optimizer == PASS_OPT_ADAMW;
    const char *flag = o->momentum > 0 && adam                             ? "--momentum"
                       : o->nesterov && o->optimizer != PASS_OPT_SGD       ? "--nesterov"
                       : o->centered && o->optimizer != PASS_OPT_RMSPROP   ? "--centered"
                       : o->weight_decay >= 0 && o->optimizer != PASS_OPT_ADAMW ? "--weight-decay"
                       : (o->beta_1 > 0 || o->beta_2 > 0) && !adam          ? (o->beta_1 > 0 ? "--beta-1" : "--beta-2")
                       : o->rho > 0 && o->optimizer != PASS_OPT_RMSPROP     ? "--rho"
                       : o->epsilon > 0 && o->optimizer == PASS_OPT_SGD     ? "--epsilon"
                                                                             : NULL;
    if ((o->clipnorm > 0) + (o->clipvalue > 0) + (o->global_clipnorm > 0) > 1) { /* Keras raises the same */
      diag_error_kind(ctx->diag, DIAG_KIND_INVALID_ARGUMENT, no_loc,
                      "grad: only one of --clipnorm, --clipvalue and --global-clipnorm can be set (Keras: only one "
                      "of clipnorm, clipvalue and global_clipnorm)");
      return false;
    }
    if (flag) {
      const char *who = !strcmp(flag, "--momentum")       ? "sgd and rmsprop take it"
                        : !strcmp(flag, "--nesterov")     ? "sgd takes it"
                        : !strcmp(flag, "--centered")     ? "rmsprop takes it"
                        : !strcmp(flag, "--weight-decay") ? "adamw takes it"
                        : !strcmp(flag, "--rho")          ? "rmsprop takes it"
                        : !strcmp(flag, "--epsilon")      ? "rmsprop, adam and adamw take it"
                                                          : "adam and adamw take it";
      diag_error_kind(ctx->diag, DIAG_KIND_INVALID_ARGUMENT, no_loc, "grad: %s is not an option of %s (%s)", flag,
                      pass_optimizer_name(o->optimizer), who);
      return false;
    }
  }
  if (g->n_outputs != 1) {
    diag_error_kind(ctx->diag, DIAG_KIND_INVALID_MODEL, no_loc,
                    "grad: training needs a model with one output (the prediction), %s has %d", g->name, g->n_outputs);
    return false;
  }
  ir_node *pred = g->outputs[0].value;
  const char *pred_name = g->outputs[0].name;
  /* a prediction per sample (fuzz_grad: a weight as the output): [N, classes],
   * or under a bound batch (--batch B: no input has N) [B, classes] */
  ir_node *in0 = ir_graph_input(g, 0);
  bool bound = in0 && !ir_type_is_batched(&in0->type) && in0->type.rank >= 1;
  int64_t want_rows = bound ? in0->type.dims[0] : IR_DIM_BATCH;
  if (pred->type.rank != 2 || !dtype_is_float(pred->type.dtype) || pred->type.dims[0] != want_rows ||
      pred->type.dims[1] == IR_DIM_BATCH) {
    char t[96];
    str_buf b;
    str_buf_init(&b);
    ir_type_print(&pred->type, &b);
    snprintf(t, sizeof t, "%s", str_buf_cstr(&b));
    str_buf_fini(&b);
    return grad_fail(&s, DIAG_KIND_INVALID_MODEL, pred->loc,
                "grad: the model output %s is %s; the losses need [N, classes] predictions", pred_name, t);
  }
  /* CNN: batch normalization trains on the batch's statistics */
  grad_bn *bns = NULL;
  int n_bn = 0;
  if (!o->loss_only && !grad_bn_training(g, names, ctx->diag, ctx->scratch, &bns, &n_bn)) return false;
  ir_node *dropout_step = o->loss_only ? NULL : dropout_to_train(&s); /* general tensors */
  s.n_fwd = g->n_nodes;
  ir_graph_renumber(g);
  s.needs = arena_alloc(ctx->scratch, (size_t)s.n_fwd + 1);
  s.adjoint = arena_alloc(ctx->scratch, ((size_t)s.n_fwd + 1) * sizeof *s.adjoint);

  /* weights -> variables; which values depend on one */
  int *uses = ir_graph_use_counts(g);
  for (int i = 0; i < s.n_fwd; i++) {
    ir_node *c = g->nodes[i];
    if (c->op != IR_OP_CONST || c->frozen) continue; /* trainable=false: an ONNX Constant node's value */
    if (dtype_is_float(c->type.dtype)) {
      make_variable(&s, c, uses[i]);
    } else if (c->attr.weight) { /* Keras: only floating-point variables train (fuzz_grad: an i64 kernel) */
      diag_warning(ctx->diag, c->loc, "grad: weight %s is %s: only float weights train; it stays a constant",
                   c->attr.weight, dtype_name(c->type.dtype));
    }
  }
  free(uses);
  /* CNN: batch normalization's moving statistics: nontrainable variables */
  for (int i = 0; i < n_bn; i++) bns[i].moving_mean->attr.kind = bns[i].moving_var->attr.kind = IR_STATE_NONTRAINABLE;
  for (int i = 0; i < s.n_fwd; i++) { /* evaluation: batch_norm keeps them as operands */
    ir_node *n = g->nodes[i];
    if (n->op != IR_OP_BATCH_NORM) continue;
    for (int k = 3; k < 5; k++)
      if (n->srcs[k]->op == IR_OP_VARIABLE) n->srcs[k]->attr.kind = IR_STATE_NONTRAINABLE;
  }
  int n_vars = 0;
  for (int i = 0; i < s.n_fwd; i++) {
    ir_node *n = g->nodes[i];
    s.needs[i] = n->op == IR_OP_VARIABLE && n->attr.kind == IR_STATE_WEIGHT; /* not dropout.step */
    n_vars += s.needs[i];
    for (int k = 0; k < n->n_srcs; k++) s.needs[i] |= s.needs[n->srcs[k]->id];
  }
  if (n_vars == 0)
    return grad_fail(&s, DIAG_KIND_INVALID_MODEL, no_loc, "grad: %s has no weights to train%s", g->name, "");

  /* targets, seed, loss */
  int64_t classes = pred->type.dims[1];
  bool sparse = o->loss == PASS_LOSS_SPARSE_XENT;
  int64_t rows = pred->type.dims[0]; /* N, or the bound batch (--batch) */
  ir_type tt = sparse ? (ir_type){DT_I32, 1, {rows}} : (ir_type){DT_F32, 2, {rows, classes}};
  ir_node *targets = ir_build_input(g, unique_name(&s, "targets"), &tt, ir_graph_num_inputs(g), no_loc);
  targets->note = sparse ? "class indices" : "targets";
  ir_node *p32 = pred;
  if (pred->type.dtype != DT_F32) { /* losses are f32 (--keep-16bit-outputs) */
    p32 = ir_build_cast(g, unique_name(&s, "loss_input"), pred, DT_F32, no_loc);
    p32->note = "autocast: the loss runs in f32";
  }
  bool dynamic = o->loss_scale < 0 ? g->policy == IR_POLICY_MIXED_FLOAT16 : o->loss_scale == 0;
  const double eps = 1e-7; /* keras.config.epsilon() */
  ir_op loss_op, grad_op;
  ir_node *wrt = p32, *grad_in = p32; /* the gradient op gives wrt's gradient */
  if (o->loss == PASS_LOSS_MSE) {
    loss_op = IR_OP_MSE, grad_op = IR_OP_MSE_GRAD;
  } else if (o->from_logits) {
    loss_op = IR_OP_XENT_LOGITS, grad_op = IR_OP_XENT_LOGITS_GRAD;
  } else {
    ir_node *sm = softmax_of(pred);
    if (!sm)
      return grad_fail(&s, DIAG_KIND_UNSUPPORTED, pred->loc,
                  "grad: %s on probabilities needs a model whose output %s is a softmax; a model that outputs logits trains with from_logits (castor train --from-logits)",
                  pass_loss_name(o->loss), pred_name);
    loss_op = IR_OP_XENT, grad_op = IR_OP_XENT_GRAD;
    wrt = sm->srcs[0], grad_in = sm; /* the fused softmax + cross-entropy gradient */
  }
  ir_attr la = {.epsilon = ir_op_attrs(loss_op) & A(epsilon) ? eps : 0};
  ir_node *loss = ir_build_op(g, loss_op, unique_name(&s, "loss"), (ir_node *[]){p32, targets}, 2, &la, no_loc);
  loss->note = arena_printf(g->arena, "%s%s, mean over the batch", pass_loss_name(o->loss), o->from_logits ? " (from logits)" : "");
  if (o->loss_only) { /* evaluation */
    ir_graph_add_output(g, "loss", loss);
    return true;
  }
  if (!dynamic && (o->loss_scale_initial > 0 || o->loss_scale_growth_steps > 0)) {
    diag_error_kind(ctx->diag, DIAG_KIND_INVALID_ARGUMENT, no_loc,
                    "grad: %s is an option of the dynamic loss scale; this step has %s (--loss-scale dynamic, or "
                    "the mixed_float16 policy, makes one)",
                    o->loss_scale_initial > 0 ? "--loss-scale-initial" : "--loss-scale-growth-steps",
                    o->loss_scale > 0 && o->loss_scale != 1 ? "a fixed loss scale" : "no loss scaling");
    return false;
  }
  ir_node *seed = dynamic ? state(&s, IR_STATE_SCALAR, "optimizer.loss_scale", (ir_type){DT_F32, 0, {0}},
                                  o->loss_scale_initial > 0 ? o->loss_scale_initial : 32768,
                                  o->loss_scale_initial > 0 ? "dynamic loss scale (Keras LossScaleOptimizer, initial_scale)"
                                                            : "dynamic loss scale (Keras LossScaleOptimizer: starts at 2^15)")
                          : grad_literal(&s, "loss_scale", DT_F32, o->loss_scale > 0 ? o->loss_scale : 1);
  if (!dynamic) seed->note = o->loss_scale > 0 && o->loss_scale != 1 ? "fixed loss scale" : "no loss scaling";
  ir_node *dz = ir_build_op(g, grad_op, unique_name(&s, "d.loss"), (ir_node *[]){grad_in, targets, seed}, 3,
                            &la, no_loc);
  dz->note = dynamic || o->loss_scale != 1 ? "the loss's gradient, times the loss scale" : "the loss's gradient";
  if (wrt == p32 && p32 != pred) { /* a 16-bit prediction: back through the loss's cast */
    ir_node *back = ir_build_cast(g, unique_name(&s, "d.loss_input"), dz, pred->type.dtype, no_loc);
    back->note = arena_printf(g->arena, "autocast: the loss's gradient back to %s", dtype_name(pred->type.dtype));
    dz = back, wrt = pred;
  }
  CASTOR_ASSERT(wrt->id < s.n_fwd && ir_type_eq(&dz->type, &wrt->type));
  s.adjoint[wrt->id] = dz;

  /* backward, in reverse schedule order */
  for (int i = wrt->id; i >= 0; i--) {
    ir_node *n = g->nodes[i];
    if (!s.adjoint[i] || !s.needs[i]) continue;
    if (!grad_backward(&s, n)) return false;
  }

  /* the variables' gradients, in schedule order */
  ir_node **vars = arena_alloc(ctx->scratch, (size_t)n_vars * sizeof *vars);
  ir_node **grads = arena_alloc(ctx->scratch, (size_t)n_vars * sizeof *grads);
  int n_upd = 0;
  for (int i = 0; i < s.n_fwd; i++) {
    ir_node *v = g->nodes[i];
    if (v->op != IR_OP_VARIABLE || !s.adjoint[i]) continue;
    vars[n_upd] = v, grads[n_upd] = s.adjoint[i];
    n_upd++;
  }
  if (n_upd == 0) /* Keras: "No gradients provided for any variable" */
    return grad_fail(&s, DIAG_KIND_INVALID_MODEL, pred->loc,
                "grad: no gradients for any weight: the loss (%s) of the output %s depends on none of them",
                pass_loss_name(o->loss), pred_name);
  for (int i = 0; i < s.n_fwd && n_upd < n_vars; i++) /* Keras: "Gradients do not exist for variables ..." */
    if (g->nodes[i]->op == IR_OP_VARIABLE && g->nodes[i]->attr.kind == IR_STATE_WEIGHT && !s.adjoint[i])
      diag_warning(ctx->diag, g->nodes[i]->loc,
                   "grad: weight %s does not reach the output %s: it has no gradient and is not trained",
                   g->nodes[i]->attr.weight, pred_name);
  ir_graph_add_output(g, "loss", loss);
  if (o->optimizer == PASS_OPT_NONE) {
    for (int k = 0; k < n_upd; k++) ir_graph_add_output(g, grad_output_name(&s, vars[k]->attr.weight), grads[k]);
    return true;
  }
  opt_scalars sc = {0};
  ir_type f32s = {DT_F32, 0, {0}}, i64s = {DT_I64, 0, {0}};
  sc.lr = state(&s, IR_STATE_SCALAR, "optimizer.learning_rate", f32s,
                o->learning_rate > 0 ? o->learning_rate : default_lr(o->optimizer),
                "learning rate (set by the host between steps)");
  sc.steps = state(&s, IR_STATE_SCALAR, "optimizer.iterations", i64s, 0,
                   "applied steps (Keras optimizer.iterations)");
  sc.scale = seed;
  sc.ok = dynamic ? all_finite(&s, grads, n_upd) : grad_literal(&s, "apply", DT_I1, 1);
  if (!dynamic) sc.ok->note = "every step applies (no dynamic loss scale)";
  /* training options: gradient clipping, on the unscaled gradients after
   * the dynamic scale's check (Keras: LossScaleOptimizer unscales, then
   * the inner optimizer clips). clipvalue clips each scaled gradient to
   * the scale times the value; a clipped norm enters the update as a
   * larger scale to divide by (clip_scale). */
  ir_node *zero = o->clipnorm > 0 || o->global_clipnorm > 0 ? grad_literal(&s, "zero", DT_F32, 0) : NULL;
  ir_node *global = NULL;
  if (o->global_clipnorm > 0) {
    ir_node *q = zero;
    for (int k = 0; k < n_upd;) {
      ir_node *srcs[IR_MAX_SRCS] = {q, sc.scale};
      int n = 2;
      while (n < IR_MAX_SRCS && k < n_upd) srcs[n++] = grads[k++];
      q = ir_build_op(g, IR_OP_GRAD_NORM_SQ, unique_name(&s, "grads_norm_sq"), srcs, n, &(ir_attr){0}, no_loc);
      q->note = "the unscaled gradients' squared global norm (Keras global_clipnorm)";
    }
    global = ir_build_op(g, IR_OP_CLIP_SCALE, unique_name(&s, "clip_scale"), (ir_node *[]){sc.scale, q}, 2,
                         &(ir_attr){.clipnorm = o->global_clipnorm}, no_loc);
    global->note = "the loss scale, times the global norm / global_clipnorm where that is above 1";
  }
  for (int k = 0; k < n_upd; k++) {
    opt_scalars sk = sc;
    ir_node *gk = grads[k];
    const char *base = safe_name(&s, vars[k]->attr.weight);
    if (o->clipvalue > 0) {
      gk = ir_build_op(g, IR_OP_CLIP_VALUE, unique_name(&s, arena_printf(g->arena, "%s.clipped", base)),
                       (ir_node *[]){gk, sc.scale}, 2, &(ir_attr){.clipvalue = o->clipvalue}, no_loc);
      gk->layer = vars[k]->layer;
      gk->note = "Keras clipvalue, on the unscaled gradient";
    } else if (o->clipnorm > 0) {
      ir_node *q = ir_build_op(g, IR_OP_GRAD_NORM_SQ, unique_name(&s, arena_printf(g->arena, "%s.norm_sq", base)),
                               (ir_node *[]){zero, sc.scale, gk}, 3, &(ir_attr){0}, no_loc);
      sk.scale = ir_build_op(g, IR_OP_CLIP_SCALE, unique_name(&s, arena_printf(g->arena, "%s.clip_scale", base)),
                             (ir_node *[]){sc.scale, q}, 2, &(ir_attr){.clipnorm = o->clipnorm}, no_loc);
      q->layer = sk.scale->layer = vars[k]->layer;
      sk.scale->note = "Keras clipnorm: the loss scale, times the gradient's norm / clipnorm where that is above 1";
    } else if (global) {
      sk.scale = global;
    }
    update(&s, vars[k], gk, &sk);
  }
  for (int k = 0; k < n_bn; k++) { /* CNN: every step, as Keras's layer call assigns them */
    for (int w = 0; w < 2; w++) {
      ir_node *v = w ? bns[k].moving_var : bns[k].moving_mean, *x = w ? bns[k].var : bns[k].mean;
      if (!ir_type_eq(&v->type, &x->type)) /* a moving statistic also used elsewhere in 16 bits (fuzz_grad) */
        return grad_fail(&s, DIAG_KIND_UNSUPPORTED, v->loc,
                    "grad: batch norm's moving statistic %s became a %s variable; it must stay in the batch's "
                    "statistics' dtype (f32)", v->attr.weight ? v->attr.weight : v->name, dtype_name(v->type.dtype));
      char name[512];
      snprintf(name, sizeof name, "%s.updated", safe_name(&s, v->attr.weight ? v->attr.weight : v->name));
      ir_node *u = ir_build_op(g, IR_OP_MOVING_UPDATE, unique_name(&s, name), (ir_node *[]){v, x}, 2,
                               &(ir_attr){.momentum = bns[k].bn->attr.momentum}, bns[k].bn->loc);
      u->layer = bns[k].bn->layer;
      u->note = arena_printf(g->arena, "%s: moving %s = moving * %g + batch's * (1 - %g)",
                             u->layer ? u->layer : bns[k].bn->name, w ? "variance" : "mean",
                             bns[k].bn->attr.momentum, bns[k].bn->attr.momentum);
    }
  }
  ir_node *cs = ir_build_op(g, IR_OP_COUNT_STEP, unique_name(&s, "optimizer.iterations.updated"),
                            (ir_node *[]){sc.steps, sc.ok}, 2, &(ir_attr){0}, no_loc);
  cs->note = "counts applied steps only";
  if (dropout_step) { /* general tensors: every step, applied or not, draws new masks */
    ir_node *dc = ir_build_op(g, IR_OP_COUNT_STEP, unique_name(&s, "dropout.step.updated"),
                              (ir_node *[]){dropout_step, grad_literal(&s, "always", DT_I1, 1)}, 2, &(ir_attr){0}, no_loc);
    dc->note = "counts every step";
  }
  if (dynamic) {
    ir_node *good = state(&s, IR_STATE_SCALAR, "optimizer.good_steps", i64s, 0,
                          "consecutive finite steps (Keras step_counter)");
    int64_t period = o->loss_scale_growth_steps > 0 ? (int64_t)o->loss_scale_growth_steps : 2000;
    ir_attr lsa = {.period = period, .min_scale = o->loss_scale_min > 0 ? o->loss_scale_min : 0};
    ir_node *lu = ir_build_op(g, IR_OP_LOSS_SCALE_UPDATE, unique_name(&s, "optimizer.loss_scale.updated"),
                              (ir_node *[]){seed, good, sc.ok}, 3, &lsa, no_loc);
    lu->note = arena_printf(g->arena, "doubles after %lld finite steps, halves on a non-finite one", (long long)period);
  }
  return true;
}

bool pass_grad_run(ir_graph *g, pass_context *ctx) {
  /* empty tensors: a step's mean over no element is 0/0, and its gradients of empty values have no rule */
  for (int i = 0; i < g->n_nodes; i++)
    if (ir_type_is_empty(&g->nodes[i]->type)) {
      str_buf t;
      str_buf_init(&t);
      ir_type_print(&g->nodes[i]->type, &t);
      diag_error_kind(ctx->diag, DIAG_KIND_UNSUPPORTED, g->nodes[i]->loc,
                      "grad: %%%s is an empty tensor (%s); castor trains only models without empty tensors",
                      g->nodes[i]->name, str_buf_cstr(&t));
      str_buf_fini(&t);
      return false;
    }
  /* one variable per weight key: the step's states, slots and gradient
   * outputs are named after it (fuzz_grad: two weights of one key gave two
   * outputs grad_<key>) */
  hmap keys;
  hmap_init(&keys, HMAP_STRINGS);
  const ir_node *first = NULL, *dup = NULL;
  for (int i = 0; i < g->n_nodes && !dup; i++) {
    const ir_node *n = g->nodes[i];
    if (n->op != IR_OP_CONST || !n->attr.weight || n->frozen) continue; /* trainable=false: stays a constant */
    first = hmap_put_str(&keys, n->attr.weight, strlen(n->attr.weight), (void *)n);
    if (first) dup = n;
  }
  hmap_fini(&keys);
  if (dup) {
    diag_error_kind(ctx->diag, DIAG_KIND_INVALID_MODEL, dup->loc,
                    "grad: %%%s and %%%s are one weight '%s'; a training step needs one value per weight key",
                    first->name, dup->name, dup->attr.weight);
    return false;
  }
  hmap names;
  hmap_init(&names, HMAP_STRINGS);
  hmap_reserve(&names, 4 * (size_t)g->n_nodes);
  for (int i = 0; i < g->n_nodes; i++) hmap_put_str(&names, g->nodes[i]->name, strlen(g->nodes[i]->name), g->nodes[i]);
  bool ok = grad_run(g, ctx, &names);
  hmap_fini(&names);
  return ok;
}
