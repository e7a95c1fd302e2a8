/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ref_tensor.c: the float64 reference of the general-tensor ops that are
 * neither element-wise arithmetic nor layout: dropout (identity) and
 * dropout_train (the mask from ir/ir_tensor.c's generator, the one the
 * kernels reproduce bit for bit; the scaling in float64); the reductions
 * and their max/min gradients (one pass over x in order, each element to
 * its group); broadcast_to.
 * Written from the ops' semantics in ir/ir_ops.def.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "tests/ref/ref.h"

#define FAIL(...) (snprintf(err, errlen, __VA_ARGS__), false)

bool ref_eval_tensor(const ir_node *n, double *const *src, const int64_t *n_src, double *y, int64_t count,
                     int64_t batch, char *err, size_t errlen) {
  (void)batch;
  if (n->op == IR_OP_DROPOUT || n->op == IR_OP_DROPOUT_TRAIN) {
    if (n_src[0] != count) return FAIL("%s %%%s: operand size differs", ir_op_name(n->op), n->name);
    if (n->op == IR_OP_DROPOUT) {
      for (int64_t i = 0; i < count; i++) y[i] = src[0][i];
      return true;
    }
    uint64_t key = ir_dropout_key(n->attr.seed, (int64_t)src[1][0]);
    uint32_t thr = ir_dropout_threshold(n->attr.rate);
    double keep = (double)(float)(1.0 - n->attr.rate); /* the kernels' f32 keep probability */
    for (int64_t i = 0; i < count; i++) y[i] = ir_dropout_hash(key, i) >= thr ? src[0][i] / keep : 0.0;
    return true;
  }
  ir_type_rule rule = ir_op_type_rule(n->op);
  if (rule == IR_TYPE_REDUCE || rule == IR_TYPE_REDUCE_GRAD) {
    /* x's elements in row-major order; each to its group (y's element) */
    const ir_node *xn = n->srcs[rule == IR_TYPE_REDUCE ? 0 : 1];
    const double *x = src[rule == IR_TYPE_REDUCE ? 0 : 1];
    int64_t nx = n_src[rule == IR_TYPE_REDUCE ? 0 : 1], xd[IR_MAX_RANK], ny = 1;
    bool reduced[IR_MAX_RANK];
    if (!ir_reduce_dims(n->op, &xn->type, &n->attr, reduced, err, errlen)) return false;
    int rank = xn->type.rank;
    int64_t total = 1, check = 1;
    for (int d = 0; d < rank; d++) {
      xd[d] = xn->type.dims[d] == IR_DIM_BATCH ? batch : xn->type.dims[d];
      check *= xd[d];
      if (reduced[d]) total *= xd[d];
      else ny *= xd[d];
    }
    if (check != nx || (rule == IR_TYPE_REDUCE ? count : n_src[0]) != ny)
      return FAIL("%s %%%s: inconsistent sizes", ir_op_name(n->op), n->name);
    int64_t *group = malloc((size_t)(nx ? nx : 1) * sizeof *group);
    for (int64_t i = 0; i < nx; i++) { /* y's index: the kept coordinates, row-major */
      int64_t rem = i, g = 0, mul = 1;
      for (int d = rank - 1; d >= 0; d--) {
        int64_t cd = rem % xd[d];
        rem /= xd[d];
        if (!reduced[d]) g += cd * mul, mul *= xd[d];
      }
      group[i] = g;
    }
    bool mx = n->op == IR_OP_REDUCE_MAX || n->op == IR_OP_REDUCE_MAX_GRAD;
    bool extreme = n->op != IR_OP_REDUCE_SUM && n->op != IR_OP_REDUCE_MEAN;
    double *best = malloc((size_t)(ny ? ny : 1) * sizeof *best);
    int64_t *at = malloc((size_t)(ny ? ny : 1) * sizeof *at);
    for (int64_t o = 0; o < ny; o++) best[o] = 0, at[o] = -1;
    for (int64_t i = 0; i < nx; i++) { /* in order: the first extreme element, the first NaN */
      int64_t o = group[i];
      if (!extreme) {
        best[o] += x[i];
      } else if (at[o] < 0 || (mx ? x[i] > best[o] : x[i] < best[o]) || (isnan(x[i]) && !isnan(best[o]))) {
        best[o] = x[i], at[o] = i;
      }
    }
    if (rule == IR_TYPE_REDUCE) {
      for (int64_t o = 0; o < ny; o++) y[o] = n->op == IR_OP_REDUCE_MEAN ? best[o] / (double)total : best[o];
      if (extreme && total == 0) /* empty tensors: the max of nothing is -inf, the min +inf (ONNX opset 18) */
        for (int64_t o = 0; o < ny; o++) y[o] = mx ? -INFINITY : INFINITY;
    } else {
      for (int64_t i = 0; i < nx; i++) y[i] = at[group[i]] == i ? src[0][group[i]] : 0.0;
    }
    free(group), free(best), free(at);
    return true;
  }
  if (rule == IR_TYPE_BROADCAST_TO) {
    const ir_type *xt = &n->srcs[0]->type, *yt = &n->type;
    int64_t yd[IR_MAX_RANK], xd[IR_MAX_RANK], have = 1, want = 1;
    for (int d = 0; d < yt->rank; d++) yd[d] = yt->dims[d] == IR_DIM_BATCH ? batch : yt->dims[d], want *= yd[d];
    for (int d = 0; d < xt->rank; d++) xd[d] = xt->dims[d] == IR_DIM_BATCH ? batch : xt->dims[d], have *= xd[d];
    if (want != count || have != n_src[0]) return FAIL("broadcast_to %%%s: inconsistent sizes", n->name);
    int lead = yt->rank - xt->rank;
    for (int64_t i = 0; i < count; i++) {
      int64_t rem = i, xi = 0, mul = 1;
      for (int d = yt->rank - 1; d >= 0; d--) {
        int64_t cd = rem % yd[d];
        rem /= yd[d];
        if (d >= lead) {
          if (xd[d - lead] != 1) xi += cd * mul;
          mul *= xd[d - lead];
        }
      }
      y[i] = src[0][xi];
    }
    return true;
  }
  if (n->op == IR_OP_LOG_SOFTMAX || n->op == IR_OP_LOG_SOFTMAX_GRAD) { /* per row of the last dimension */
    const ir_type *t = &n->type;
    if (t->rank < 1 || n_src[0] != count) return FAIL("%s %%%s: operand size differs", ir_op_name(n->op), n->name);
    int64_t last = t->dims[t->rank - 1];
    for (int64_t r = 0; last > 0 && r < count / last; r++) {
      const double *a = src[0] + r * last;
      double *row = y + r * last, mx = -INFINITY, sum = 0;
      if (n->op == IR_OP_LOG_SOFTMAX) {
        for (int64_t j = 0; j < last; j++) mx = a[j] > mx ? a[j] : mx;
        for (int64_t j = 0; j < last; j++) sum += exp(a[j] - mx);
        for (int64_t j = 0; j < last; j++) row[j] = a[j] - mx - log(sum);
      } else {
        const double *b = src[1] + r * last;
        for (int64_t j = 0; j < last; j++) sum += a[j];
        for (int64_t j = 0; j < last; j++) row[j] = a[j] - exp(b[j]) * sum;
      }
    }
    return true;
  }
  return FAIL("%%%s: %s is not a general-tensor op of the reference", n->name, ir_op_name(n->op));
}
