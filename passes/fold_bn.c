/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fold_bn.c: batch normalization folded into the contraction before it,
 * at inference.
 *
 * In:  a verified graph before autocast (every float f32), so the fold is
 *      done in float32 whatever the policy.
 * Out: each batch_norm(x, gamma, beta, mean, var) whose x is a conv2d or a
 *      matmul, or such a contraction plus a bias add, where
 *        - the contraction (and the add) has no other use and is no graph
 *          output,
 *        - its weight is a constant of no other use, [.., O] with O = C,
 *          the bias (if any) a [C] constant,
 *        - mean and var are [C] constants of no other use, gamma and beta
 *          [C] constants or [] literals,
 *      becomes add(contraction, bias') with the contraction's weight w'
 *      (k = gamma / sqrt(var + epsilon), per output channel o):
 *        w'[.., o] = w[.., o] * k[o]
 *        bias'[o]  = (bias[o] - mean[o]) * k[o] + beta[o]   (bias 0 if none)
 *      computed in double and rounded once to f32. The weight constant
 *      keeps its weight key and is renamed %<name>.bn_folded; the mean's
 *      constant becomes bias' (%<batch_norm>.bias, the batch norm's weight
 *      key .bias); the add takes the batch_norm's name, so the layer's output
 *      keeps its name, and the contraction's layer and policy, so autocast
 *      gives it the contraction's dtype as the contraction's own bias add. What no longer has a use is left for
 *      dce. Constants without data (text IR) fold into constants without
 *      data, as fold-constants does.
 * A contraction that will compute in float16 or bfloat16 under a mixed
 * policy (its compute dtype, unless --fp32-layers or --fp32-ops force it to
 * f32; under float16 and bfloat16, all-16-bit, the fold stays) keeps
 * its batch norm, as Keras does: Keras rounds the kernel to 16 bits and
 * normalizes the convolution's sums in float32
 * (keras/src/layers/normalization/batch_normalization.py upcasts its input),
 * so a kernel scaled before its rounding gives other bits (MobileNetV2 under
 * mixed_bfloat16: 3.1e-2 from Keras folded, 0 unfolded at batch 1;
 * docs/keras.md). autocast then gives the contraction f32 sums for the
 * batch norm and rounds the batch norm's result to 16 bits; the batch norm
 * joins the contraction's kernel as its epilogue (cg_plan.c).
 * A training step keeps its batch norms (the training pipelines do not run
 * this pass: their statistics are the batch's).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "passes/passes.h"

/* gamma or beta: a [C] f32 constant (data may be NULL), or a [] literal */
static bool channel_operand(const ir_node *n, int64_t c) {
  if (n->type.dtype != DT_F32) return false;
  if (n->op == IR_OP_LITERAL) return n->type.rank == 0;
  return n->op == IR_OP_CONST && n->type.rank == 1 && n->type.dims[0] == c;
}

static double channel_value(const ir_node *n, int64_t o) {
  return n->op == IR_OP_LITERAL ? n->attr.value : ((const float *)n->attr.data)[o];
}

static const char *fresh(ir_graph *g, hmap *names, const char *base) {
  const char *name = base;
  for (int k = 1; hmap_get_str(names, name, strlen(name)); k++) name = arena_printf(g->arena, "%s.%d", base, k);
  if (name == base) name = arena_strdup(g->arena, base);
  hmap_put_str(names, name, strlen(name), (void *)name);
  return name;
}

/* Will the contraction compute in a 16-bit dtype (what autocast decides for
 * an allow op) under a mixed policy, whose variables stay float32? Under the
 * all-16-bit policies (float16, bfloat16) the fold stays: every weight is
 * 16-bit there, as the user asked (an edge build's weights are half of
 * float32's: tests/aot/aot_edge_cnn.sh), and Keras keeps the batch norm's
 * own variables in 16 bits too. */
static bool computes_16bit_mixed(const ir_graph *g, const pass_context *ctx, const ir_node *cv) {
  ir_policy p = cv->policy != IR_POLICY_NONE ? cv->policy : g->policy;
  ir_dtype t = ir_policy_compute_dtype(p);
  if ((t != DT_F16 && t != DT_BF16) || ir_policy_variable_dtype(p) != DT_F32) return false;
  return !ctx->opts || !pass_autocast_forces_f32(&ctx->opts->autocast, cv);
}

/* Folds batch_norm n; false (nothing changed) when the pattern does not hold. */
static bool fold_one(ir_graph *g, pass_context *ctx, ir_node *n, const int *uses, hmap *names) {
  ir_node *x = n->srcs[0], *gamma = n->srcs[1], *beta = n->srcs[2], *mean = n->srcs[3], *var = n->srcs[4];
  ir_node *bias = NULL, *add = NULL, *cv = x;
  if (x->op == IR_OP_ADD && uses[x->id] == 1) {
    add = x;
    cv = x->srcs[0], bias = x->srcs[1];
    if (bias->op != IR_OP_CONST) return false;
  }
  if ((cv->op != IR_OP_CONV2D && cv->op != IR_OP_MATMUL) || uses[cv->id] != 1 || cv->type.dtype != DT_F32)
    return false;
  if (computes_16bit_mixed(g, ctx, cv)) return false;
  ir_node *w = cv->srcs[1];
  if (w->op != IR_OP_CONST || uses[w->id] != 1 || w->type.dtype != DT_F32) return false;
  int64_t c = w->type.dims[w->type.rank - 1], numel = 1;
  if (cv->type.dims[cv->type.rank - 1] != c || n->type.rank != cv->type.rank) return false;
  if (bias && (bias->type.dtype != DT_F32 || bias->type.rank != 1 || bias->type.dims[0] != c)) return false;
  if (mean->op != IR_OP_CONST || var->op != IR_OP_CONST || uses[mean->id] != 1) return false;
  if (!channel_operand(mean, c) || !channel_operand(var, c) || !channel_operand(gamma, c) || !channel_operand(beta, c))
    return false;
  for (int r = 0; r < w->type.rank; r++) numel *= w->type.dims[r];
  bool data = w->attr.data && mean->attr.data && var->attr.data && (!bias || bias->attr.data) &&
              (gamma->op == IR_OP_LITERAL || gamma->attr.data) && (beta->op == IR_OP_LITERAL || beta->attr.data);
  if (data) {
    double *k = xmalloc((size_t)c * sizeof *k);
    float *nb = arena_alloc_aligned(g->arena, (size_t)c * sizeof *nb, 64);
    float *nw = arena_alloc_aligned(g->arena, (size_t)numel * sizeof *nw, 64);
    const float *ow = w->attr.data;
    for (int64_t o = 0; o < c; o++) {
      double v = ((const float *)var->attr.data)[o], m = ((const float *)mean->attr.data)[o];
      k[o] = channel_value(gamma, o) / sqrt(v + n->attr.epsilon);
      double b0 = bias ? ((const float *)bias->attr.data)[o] : 0;
      nb[o] = (float)((b0 - m) * k[o] + channel_value(beta, o));
    }
    for (int64_t e = 0; e < numel; e++) nw[e] = (float)(ow[e] * k[e % c]); /* the last dimension is O */
    free(k);
    w->attr.data = nw;
    mean->attr.data = nb;
  } else {
    w->attr.data = NULL;
    mean->attr.data = NULL;
  }
  const char *layer = n->layer ? n->layer : n->name;
  ir_graph_rename(g, w, fresh(g, names, arena_printf(g->arena, "%s.bn_folded", w->name)));
  w->note = arena_printf(g->arena, "%s, times %s's gamma / sqrt(moving_variance + epsilon)",
                         w->layer ? w->layer : w->attr.weight, layer);
  ir_graph_rename(g, mean, fresh(g, names, arena_printf(g->arena, "%s.bias", n->name)));
  mean->attr.weight = arena_printf(g->arena, "%s.bias", layer);
  mean->layer = cv->layer, mean->policy = cv->policy;
  mean->note = arena_printf(g->arena, "%s folded: (bias - moving_mean) * gamma / sqrt(moving_variance + epsilon) + beta",
                            layer);
  /* the batch_norm becomes the add: same name, layer and position */
  n->op = IR_OP_ADD;
  n->n_srcs = 2;
  n->srcs[0] = cv, n->srcs[1] = mean;
  for (int s = 2; s < IR_MAX_SRCS; s++) n->srcs[s] = NULL;
  memset(&n->attr, 0, sizeof n->attr);
  n->layer = cv->layer, n->policy = cv->policy; /* the contraction's bias add: its dtype follows it */
  n->note = arena_printf(g->arena, "%s folded into %s", layer, cv->layer ? cv->layer : cv->name);
  (void)add; /* dead now: dce */
  return true;
}

bool pass_fold_bn_run(ir_graph *g, pass_context *ctx) {
  bool any = false;
  for (int i = 0; i < g->n_nodes && !any; i++) any = g->nodes[i]->op == IR_OP_BATCH_NORM;
  if (!any) return true;
  ir_graph_renumber(g);
  int *uses = ir_graph_use_counts(g);
  hmap names;
  hmap_init(&names, HMAP_STRINGS);
  hmap_reserve(&names, 2 * (size_t)g->n_nodes);
  for (int i = 0; i < g->n_nodes; i++) hmap_put_str(&names, g->nodes[i]->name, strlen(g->nodes[i]->name), g->nodes[i]);
  for (int i = 0; i < g->n_nodes; i++) {
    ir_node *n = g->nodes[i];
    if (n->op != IR_OP_BATCH_NORM || !fold_one(g, ctx, n, uses, &names)) continue;
    /* uses change only for nodes no other batch_norm's pattern reads: the
     * contraction keeps 1, the old add and the other statistics lose theirs */
  }
  hmap_fini(&names);
  free(uses);
  return true;
}
