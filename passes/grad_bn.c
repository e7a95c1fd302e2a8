/* SPDX-License-Identifier: Apache-2.0 */
/*
 * grad_bn.c: batch normalization's training form (grad_bn.h). For each
 * batch_norm(x, gamma, beta, moving_mean, moving_variance):
 *
 *   mean     = bn_mean(x)                  over every dimension but the last, in order
 *   centered = x - mean
 *   var      = bn_mean(centered * centered)  biased, two-pass (ops.moments)
 *   y        = batch_norm(x, gamma, beta, mean, var)
 *
 * in f32 (batch_norm is always f32; the statistics are summed in f64 and
 * rounded once). grad.c then differentiates y through the batch's
 * statistics and updates the moving ones after the optimizer.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "passes/grad_bn.h"

/* base, else base.1, base.2, ...: the first name not in names (grad.c's rule) */
static const char *fresh(ir_graph *g, hmap *names, const char *base) {
  const char *name = base;
  for (int k = 1; hmap_get_str(names, name, strlen(name)); k++) name = arena_printf(g->arena, "%s.%d", base, k);
  if (name == base) name = arena_strdup(g->arena, base);
  hmap_put_str(names, name, strlen(name), (void *)name);
  return name;
}

static ir_node *helper(ir_graph *g, hmap *names, const ir_node *bn, ir_op o, const char *suffix, ir_node *a,
                       ir_node *b, const ir_attr *attr, const char *note) {
  char base[512];
  snprintf(base, sizeof base, "%s.%s", bn->name, suffix);
  ir_node *srcs[2] = {a, b};
  ir_node *n = ir_build_op(g, o, fresh(g, names, base), srcs, b ? 2 : 1, attr, bn->loc);
  n->layer = bn->layer;
  n->policy = bn->policy;
  n->note = note;
  return n;
}

/* [C], C the last dimension of x */
static bool is_channel_vector(const ir_type *t, const ir_type *x) {
  return t->rank == 1 && x->rank >= 1 && t->dims[0] == x->dims[x->rank - 1] && t->dims[0] != IR_DIM_BATCH;
}

bool grad_bn_training(ir_graph *g, hmap *names, diag_sink *d, arena *a, grad_bn **out, int *n_out) {
  int n_bn = 0, old = g->n_nodes;
  *out = NULL, *n_out = 0;
  for (int i = 0; i < old; i++) n_bn += g->nodes[i]->op == IR_OP_BATCH_NORM;
  if (n_bn == 0) return true;
  grad_bn *r = arena_alloc(a, (size_t)n_bn * sizeof *r);
  int k = 0;
  for (int i = 0; i < old; i++) {
    ir_node *n = g->nodes[i];
    if (n->op != IR_OP_BATCH_NORM) continue;
    ir_node *x = n->srcs[0], *mm = n->srcs[3], *mv = n->srcs[4];
    if (mm->op != IR_OP_CONST || mv->op != IR_OP_CONST) {
      diag_error_kind(d, DIAG_KIND_UNSUPPORTED, n->loc,
                      "batch_norm (%%%s): a training step needs its moving statistics as weights (moving_mean, "
                      "moving_variance), got %%%s and %%%s", n->name, mm->name, mv->name);
      return false;
    }
    if (!is_channel_vector(&mm->type, &x->type) || !is_channel_vector(&mv->type, &x->type) || x->type.rank < 2 ||
        !dtype_is_float(x->type.dtype) || mm->type.dtype != x->type.dtype || mv->type.dtype != x->type.dtype) {
      diag_error_kind(d, DIAG_KIND_UNSUPPORTED, n->loc,
                      "batch_norm (%%%s): a training step normalizes over x's last (channel) dimension; its moving "
                      "statistics %%%s and %%%s must be [C] of x's dtype for an x of rank >= 2", n->name, mm->name,
                      mv->name);
      return false;
    }
    ir_attr ma = {0};
    ma.shape.rank = 1;
    ma.shape.dims[0] = mm->type.dims[0];
    const char *layer = n->layer ? n->layer : n->name;
    ir_node *mean = helper(g, names, n, IR_OP_BN_MEAN, "batch_mean", x, NULL, &ma,
                           arena_printf(g->arena, "%s: the batch's mean (training)", layer));
    ir_node *xc = helper(g, names, n, IR_OP_SUB, "centered", x, mean, &(ir_attr){0}, NULL);
    ir_node *sq = helper(g, names, n, IR_OP_MUL, "squared", xc, xc, &(ir_attr){0}, NULL);
    ir_node *var = helper(g, names, n, IR_OP_BN_MEAN, "batch_variance", sq, NULL, &ma,
                          arena_printf(g->arena, "%s: the batch's biased variance (training)", layer));
    r[k++] = (grad_bn){n, mm, mv, mean, var, xc};
    n->srcs[3] = mean, n->srcs[4] = var;
  }
  /* the new nodes (appended, 4 per batch_norm) go just before theirs */
  ir_node **order = xmalloc((size_t)g->n_nodes * sizeof *order);
  int m = 0, b = 0;
  for (int i = 0; i < old; i++) {
    if (b < n_bn && g->nodes[i] == r[b].bn) {
      for (int h = 0; h < 4; h++) order[m++] = g->nodes[old + 4 * b + h];
      b++;
    }
    order[m++] = g->nodes[i];
  }
  CASTOR_ASSERT(m == g->n_nodes && b == n_bn);
  memcpy(g->nodes, order, (size_t)m * sizeof *order);
  free(order);
  ir_graph_renumber(g);
  *out = r, *n_out = n_bn;
  return true;
}
