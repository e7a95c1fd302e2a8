/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fold_empty.c: empty tensors (a dimension 0, as NumPy's and ONNX's).
 *
 * An op whose result is empty computes nothing: the planner gives it no
 * kernel. This pass rewrites the ops whose result is not empty although an
 * operand is, so that no kernel ever reads an empty operand:
 *
 *   reduce_sum / _mean / _max / _min over an empty axis: the identity of the
 *     reduction, as NumPy and ONNX (opset 18) define it: 0, NaN (0/0), -inf,
 *     +inf; a constant (broadcast_to [N, ..] of it when the result has N);
 *   matmul, batch_matmul with K = 0: zeros (the empty sum);
 *   pad (pad8), pad_constant of an empty x: the fill (0, {value});
 *   concat: the empty operands dropped (one operand left: a reshape to its
 *     own shape, a copy).
 *
 * Every other op of an empty operand has an empty result (element-wise
 * ops, layout ops, row-wise ops: the type rules say which take one), or its
 * type rule refuses it. An op whose result is empty becomes an empty
 * constant (broadcast_to [N, ..] of one with the batch N), so that what
 * only it read is dead (dce); an op with an empty operand and a non-empty
 * result that is none of the above is an error naming it.
 *
 * In:  a verified graph, first in every inference pipeline (training
 *      refuses empty tensors: pass grad) (all floats f32 or any
 *      dtype: constants are written in the node's dtype).
 * Out: the same results; no non-empty value reads an empty one.
 */
#include <math.h>
#include <string.h>

#include "passes/passes.h"
#include "util/dtype.h"

static bool any_empty_src(const ir_node *n) {
  for (int s = 0; s < n->n_srcs; s++)
    if (ir_type_is_empty(&n->srcs[s]->type)) return true;
  return false;
}

/* The value every element of n's result takes, or false if n is none of the
 * ops above with a fill. */
static bool fill_of(const ir_node *n, double *v) {
  ir_op op = n->op;
  if (op == IR_OP_REDUCE_MEAN) *v = NAN;
  else if (op == IR_OP_REDUCE_MAX) *v = -INFINITY;
  else if (op == IR_OP_REDUCE_MIN) *v = INFINITY;
  else if (op == IR_OP_PAD_CONSTANT) *v = n->attr.value;
  else if (op == IR_OP_REDUCE_SUM || op == IR_OP_MATMUL || op == IR_OP_BATCH_MATMUL || op == IR_OP_PAD) *v = 0;
  else return false;
  return true;
}

/* n becomes a constant of its type filled with v; with the batch N, a
 * broadcast_to of a [1, ..] constant inserted before it. */
static void make_fill(ir_graph *g, ir_node *n, double v) {
  ir_type t = n->type;
  bool batched = ir_type_is_batched(&t);
  if (batched) t.dims[0] = 1;
  int64_t numel = 0, bytes = 0;
  CASTOR_ASSERT(ir_type_numel(&t, 1, &numel) && ir_type_bytes(&t, 1, &bytes));
  void *data = arena_alloc_aligned(g->arena, (size_t)(bytes ? bytes : 1), 64);
  for (int64_t e = 0; e < numel; e++) dtype_store_double(t.dtype, data, e, v);
  const char *why = numel == 0 ? arena_printf(g->arena, "fold-empty: %s has no element", ir_op_name(n->op))
                                : arena_printf(g->arena, "fold-empty: %s of an empty operand is %g", ir_op_name(n->op), v);
  ir_node *k = n;
  if (batched) {
    k = ir_node_new(g, IR_OP_CONST, &t, NULL, 0, ir_graph_unique_name(g, arena_printf(g->arena, "%s.fill", n->name)),
                    n->loc);
    k->layer = n->layer;
    ir_graph_insert(g, n->id, k);
    n->op = IR_OP_BROADCAST_TO;
    memset(&n->attr, 0, sizeof n->attr);
    n->attr.shape.rank = n->type.rank;
    for (int r = 0; r < n->type.rank; r++) n->attr.shape.dims[r] = n->type.dims[r];
    n->n_srcs = 1;
    n->srcs[0] = k;
    n->note = why;
  } else {
    n->op = IR_OP_CONST;
    n->n_srcs = 0;
    memset(&n->attr, 0, sizeof n->attr);
  }
  k->attr.weight = k->name; /* a constant of the compiler's, named after its value */
  k->attr.data = data;
  k->note = why;
}

bool pass_fold_empty_run(ir_graph *g, pass_context *ctx) {
  bool ok = true;
  for (int i = 0; i < g->n_nodes; i++) {
    ir_node *n = g->nodes[i];
    if (ir_op_flags(n->op) & IR_OPF_LEAF || ir_op_writes(n->op)) continue;
    if (ir_type_is_empty(&n->type)) { /* nothing to compute: its operands may become dead (dce) */
      make_fill(g, n, 0);
      i = n->id;
      continue;
    }
    if (!any_empty_src(n)) continue;
    double v;
    if (n->op == IR_OP_CONCAT) { /* the empty pieces add nothing along the axis */
      int k = 0;
      for (int s = 0; s < n->n_srcs; s++)
        if (!ir_type_is_empty(&n->srcs[s]->type)) n->srcs[k++] = n->srcs[s];
      for (int s = k; s < n->n_srcs; s++) n->srcs[s] = NULL;
      n->n_srcs = k;
      if (k == 1) { /* a copy of the one piece left */
        n->op = IR_OP_RESHAPE;
        memset(&n->attr, 0, sizeof n->attr);
        n->attr.shape.rank = n->type.rank;
        for (int r = 0; r < n->type.rank; r++) n->attr.shape.dims[r] = n->type.dims[r];
      }
      n->note = "fold-empty: the empty operands of a concat dropped";
    } else if (fill_of(n, &v)) {
      make_fill(g, n, v);
      i = n->id; /* a constant may have been inserted before n */
    } else {
      diag_error_kind(ctx->diag, DIAG_KIND_UNSUPPORTED, n->loc,
                      "%%%s: %s of an empty operand has a non-empty result castor does not compute", n->name,
                      ir_op_name(n->op));
      ok = false;
    }
  }
  return ok;
}
