/* SPDX-License-Identifier: Apache-2.0 */
/*
 * grad_rules.c: the gradient pass's per-op backward rules (docs/training.md,
 * passes/grad.c's header comment): for each forward op, the ops that carry
 * its result's adjoint to its operands' adjoints.
 */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/half.h"
#include "passes/grad_bn.h"
#include "passes/passes.h"
#include "passes/grad_internal.h"

static ir_node *unary_grad(grad_state *s, ir_op o, const ir_node *fwd, ir_node *dy, ir_node *other) {
  return grad_op(s, o, fwd, fwd->srcs[0]->name, (ir_node *[]){dy, other}, 2, &(ir_attr){0});
}

static ir_node *reduce_to(grad_state *s, const ir_node *fwd, ir_node *d, const ir_node *x);

/* layer_norm(x, gamma, beta): dx = layer_norm_grad(x, gamma, dy); over
 * the rows, dgamma = sum_rows(dy * xhat) with xhat = layer_norm_xhat(x),
 * dbeta = sum_rows(dy) (no sum when x has no row dimension: an unbatched
 * x normalized over all of it). With more dimensions before the
 * normalized ones ([N, T, C]), dgamma and dbeta sum over all of them
 * (sum_to, in a fixed order). */
static bool layer_norm_backward(grad_state *s, ir_node *n, ir_node *dy) {
  ir_node *x = n->srcs[0], *gamma = n->srcs[1], *beta = n->srcs[2];
  ir_attr na = {.axis = n->attr.axis, .epsilon = n->attr.epsilon};
  if (s->needs[x->id])
    grad_accumulate(s, x, grad_op(s, IR_OP_LAYER_NORM_GRAD, n, x->name, (ir_node *[]){x, gamma, dy}, 3, &na));
  if (!s->needs[gamma->id] && !s->needs[beta->id]) return true;
  /* general tensors: summed over every dimension before the normalized
   * ones (reduce_to: sum_rows for [N, C], sum_to for [N, T, C] and more) */
  if (s->needs[gamma->id]) {
    char name[512];
    snprintf(name, sizeof name, "%s.xhat", n->name);
    ir_node *xhat = grad_named_op(s, IR_OP_LAYER_NORM_XHAT, n, name, &x, 1, &na);
    ir_node *dg = grad_op(s, IR_OP_MUL, n, gamma->name, (ir_node *[]){dy, xhat}, 2, &(ir_attr){0});
    grad_accumulate(s, gamma, reduce_to(s, n, dg, gamma));
  }
  if (s->needs[beta->id]) grad_accumulate(s, beta, reduce_to(s, n, dy, beta));
  return true;
}

/* ---- general tensors: layout ops ---- */

/* strided_slice(dy) taking x's block at starts[r] + c * steps[r], counts[r]
 * of them (IR_DIM_BATCH: N whole). */
static ir_node *slice_of(grad_state *s, const ir_node *fwd, const char *base, ir_node *dy, const int64_t *starts,
                         const int64_t *counts, const int64_t *steps) {
  ir_attr a = {0};
  int rank = dy->type.rank;
  a.starts.n = a.ends.n = a.steps.n = rank;
  for (int r = 0; r < rank; r++) {
    bool n = counts[r] == IR_DIM_BATCH;
    a.starts.v[r] = n ? 0 : starts[r];
    a.ends.v[r] = n ? 0 : starts[r] + (counts[r] - 1) * steps[r] + 1;
    a.steps.v[r] = n ? 1 : steps[r];
  }
  return grad_op(s, IR_OP_STRIDED_SLICE, fwd, base, &dy, 1, &a);
}

/* reshape: dy reshaped back; transpose: dy transposed by the inverse
 * permutation; concat: each operand's block of dy; strided_slice: dy placed
 * back into zeros (pad_constant); pad_constant: the block it placed. */
static bool layout_backward(grad_state *s, ir_node *n, ir_node *dy) {
  ir_node *a = n->srcs[0];
  const ir_type *at = &a->type;
  ir_type_rule rule = ir_op_type_rule(n->op);
  if (rule == IR_TYPE_RESHAPE) {
    ir_attr r = {.shape = {at->rank, {0}}};
    for (int d = 0; d < at->rank; d++) r.shape.dims[d] = at->dims[d];
    grad_accumulate(s, a, grad_op(s, IR_OP_RESHAPE, n, a->name, &dy, 1, &r));
  } else if (rule == IR_TYPE_TRANSPOSE) {
    ir_attr r = {.perm = {at->rank, {0}}};
    for (int d = 0; d < at->rank; d++) r.perm.v[n->attr.perm.v[d]] = d;
    grad_accumulate(s, a, grad_op(s, IR_OP_TRANSPOSE, n, a->name, &dy, 1, &r));
  } else if (rule == IR_TYPE_CONCAT) {
    int ax = ir_concat_axis(at, n->attr.axis);
    int64_t off = 0, starts[IR_MAX_RANK] = {0}, steps[IR_MAX_RANK], counts[IR_MAX_RANK];
    for (int k = 0; k < n->n_srcs; k++) {
      ir_node *x = n->srcs[k];
      for (int d = 0; d < at->rank; d++) starts[d] = d == ax ? off : 0, steps[d] = 1, counts[d] = x->type.dims[d];
      if (s->needs[x->id]) grad_accumulate(s, x, slice_of(s, n, x->name, dy, starts, counts, steps));
      off += x->type.dims[ax];
    }
  } else if (rule == IR_TYPE_STRIDED_SLICE) {
    int64_t starts[IR_MAX_RANK], counts[IR_MAX_RANK];
    char err[256];
    CASTOR_ASSERT(ir_strided_slice_bounds(at, &n->attr, starts, counts, err, sizeof err));
    ir_attr r = {.shape = {at->rank, {0}}, .value = 0};
    r.starts.n = r.steps.n = at->rank;
    for (int d = 0; d < at->rank; d++)
      r.shape.dims[d] = at->dims[d], r.starts.v[d] = starts[d], r.steps.v[d] = n->attr.steps.v[d];
    grad_accumulate(s, a, grad_op(s, IR_OP_PAD_CONSTANT, n, a->name, &dy, 1, &r));
  } else if (rule == IR_TYPE_GATHER) {
    ir_attr r = {.axis = n->attr.axis, .shape = {at->rank, {0}}};
    for (int d = 0; d < at->rank; d++) r.shape.dims[d] = at->dims[d];
    grad_accumulate(s, a, grad_op(s, IR_OP_GATHER_GRAD, n, a->name, (ir_node *[]){dy, n->srcs[1]}, 2, &r));
  } else {
    CASTOR_ASSERT(rule == IR_TYPE_PAD_CONSTANT);
    grad_accumulate(s, a, slice_of(s, n, a->name, dy, n->attr.starts.v, at->dims, n->attr.steps.v));
  }
  return true;
}

/* ---- general tensors: the binary ops under numpy broadcasting ---- */

/* d summed back to x's shape, over the dimensions x was broadcast along
 * (numpy's reduce-to-shape), in a fixed order: sum_rows for a vector over
 * the last dimension of a matrix, sum_to otherwise; d itself when x has
 * its shape. */
static ir_node *reduce_to(grad_state *s, const ir_node *fwd, ir_node *d, const ir_node *x) {
  bool same = d->type.rank == x->type.rank;
  for (int r = 0; same && r < x->type.rank; r++) same = d->type.dims[r] == x->type.dims[r];
  if (same) return d;
  ir_attr attr = {.acc = DT_F32};
  if (d->type.rank == 2 && x->type.rank == 1 && x->type.dims[0] == d->type.dims[1])
    return grad_op(s, IR_OP_SUM_ROWS, fwd, x->name, &d, 1, &attr);
  attr.shape.rank = x->type.rank;
  for (int r = 0; r < x->type.rank; r++) attr.shape.dims[r] = x->type.dims[r];
  return grad_op(s, IR_OP_SUM_TO, fwd, x->name, &d, 1, &attr);
}

static ir_node *negate(grad_state *s, const ir_node *fwd, const char *base, ir_node *d) {
  ir_node *m1 = grad_literal(s, "minus_one", d->type.dtype, -1.0);
  return grad_op(s, IR_OP_MUL, fwd, base, (ir_node *[]){d, m1}, 2, &(ir_attr){0});
}

/* add, sub, mul, div, maximum, minimum, pow of a and b broadcast to n's
 * shape: each operand's gradient at n's shape, then summed back to its own
 * (TF's rules: maximum's ties go to a, minimum's to a; pow's gradient for
 * its exponent is 0 where the base is <= 0). */
static bool binary_backward(grad_state *s, ir_node *n, ir_node *dy) {
  ir_node *a = n->srcs[0], *b = n->srcs[1], *da = NULL, *db = NULL;
  const ir_attr none = {0};
  bool na = s->needs[a->id], nb = s->needs[b->id];
  if (n->op == IR_OP_ADD) {
    da = dy, db = dy;
  } else if (n->op == IR_OP_SUB) {
    da = dy, db = nb ? negate(s, n, b->name, dy) : NULL;
  } else if (n->op == IR_OP_MUL) {
    if (na) da = grad_op(s, IR_OP_MUL, n, a->name, (ir_node *[]){dy, b}, 2, &none);
    if (nb) db = grad_op(s, IR_OP_MUL, n, b->name, (ir_node *[]){dy, a}, 2, &none);
  } else if (n->op == IR_OP_DIV) { /* da = dy / b; db = -dy * y / b */
    if (na) da = grad_op(s, IR_OP_DIV, n, a->name, (ir_node *[]){dy, b}, 2, &none);
    if (nb) {
      ir_node *t = grad_op(s, IR_OP_MUL, n, b->name, (ir_node *[]){dy, n}, 2, &none);
      db = negate(s, n, b->name, grad_op(s, IR_OP_DIV, n, b->name, (ir_node *[]){t, b}, 2, &none));
    }
  } else if (n->op == IR_OP_MAXIMUM || n->op == IR_OP_MINIMUM) {
    /* where a wins (a >= b, or a <= b): dy to a; elsewhere dy to b */
    bool mx = n->op == IR_OP_MAXIMUM;
    da = grad_op(s, IR_OP_SELECT_GE, n, a->name, (ir_node *[]){dy, mx ? a : b, mx ? b : a}, 3, &none);
    if (nb) db = grad_op(s, IR_OP_SUB, n, b->name, (ir_node *[]){dy, da}, 2, &none);
  } else {
    CASTOR_ASSERT(n->op == IR_OP_POW);
    if (na) da = grad_op(s, IR_OP_POW_GRAD, n, a->name, (ir_node *[]){dy, a, b}, 3, &none);
    if (nb) db = grad_op(s, IR_OP_POW_GRAD_EXP, n, b->name, (ir_node *[]){dy, a, n}, 3, &none);
  }
  if (na) grad_accumulate(s, a, reduce_to(s, n, da, a));
  if (nb) grad_accumulate(s, b, reduce_to(s, n, db, b));
  return true;
}

/* ---- general tensors: the unary element-wise ops and select ---- */

static ir_node *scaled(grad_state *s, const ir_node *fwd, const char *base, ir_node *d, double k) {
  ir_node *c = grad_literal(s, "k", d->type.dtype, k);
  return grad_op(s, IR_OP_MUL, fwd, base, (ir_node *[]){d, c}, 2, &(ir_attr){0});
}

/* The gradient of unary op n (y = n, x = its operand) for dy. */
static ir_node *unary_backward(grad_state *s, ir_node *n, ir_node *dy) {
  ir_node *x = n->srcs[0];
  const char *base = x->name;
  const ir_attr none = {0};
  ir_op helper = IR_OP_COUNT;
  if (n->op == IR_OP_EXP) return grad_op(s, IR_OP_MUL, n, base, (ir_node *[]){dy, n}, 2, &none); /* dy y */
  if (n->op == IR_OP_LOG) return grad_op(s, IR_OP_DIV, n, base, (ir_node *[]){dy, x}, 2, &none); /* dy / x */
  if (n->op == IR_OP_SQRT) return grad_op(s, IR_OP_DIV, n, base, (ir_node *[]){scaled(s, n, base, dy, 0.5), n}, 2, &none);
  if (n->op == IR_OP_RSQRT) { /* -dy y^3 / 2 */
    ir_node *y2 = grad_op(s, IR_OP_MUL, n, base, (ir_node *[]){n, n}, 2, &none);
    ir_node *y3 = grad_op(s, IR_OP_MUL, n, base, (ir_node *[]){y2, n}, 2, &none);
    return grad_op(s, IR_OP_MUL, n, base, (ir_node *[]){scaled(s, n, base, dy, -0.5), y3}, 2, &none);
  }
  if (n->op == IR_OP_NEG) return scaled(s, n, base, dy, -1.0);
  if (n->op == IR_OP_SOFTPLUS) { /* dy sigmoid(x) */
    ir_node *sg = grad_op(s, IR_OP_SIGMOID, n, base, &x, 1, &none);
    return grad_op(s, IR_OP_MUL, n, base, (ir_node *[]){dy, sg}, 2, &none);
  }
  if (n->op == IR_OP_ABS) helper = IR_OP_ABS_GRAD;
  else if (n->op == IR_OP_ERF) helper = IR_OP_ERF_GRAD;
  else if (n->op == IR_OP_LEAKY_RELU) helper = IR_OP_LEAKY_RELU_GRAD;
  else if (n->op == IR_OP_ELU) helper = IR_OP_ELU_GRAD;
  else if (n->op == IR_OP_HARD_SIGMOID) helper = IR_OP_HARD_SIGMOID_GRAD;
  else helper = IR_OP_CLIP_GRAD;
  CASTOR_ASSERT(n->op == IR_OP_CLIP || helper != IR_OP_CLIP_GRAD);
  return grad_op(s, helper, n, base, (ir_node *[]){dy, x}, 2, &n->attr); /* the same alpha or bounds */
}

/* select(c, a, b): dy where c holds to a, elsewhere to b, each summed back
 * to its shape; the condition has none. */
static bool select_backward(grad_state *s, ir_node *n, ir_node *dy) {
  ir_node *c = n->srcs[0], *a = n->srcs[1], *b = n->srcs[2];
  ir_node *zero = grad_literal(s, "zero", dy->type.dtype, 0.0);
  const ir_attr none = {0};
  if (s->needs[a->id])
    grad_accumulate(s, a, reduce_to(s, n, grad_op(s, IR_OP_SELECT, n, a->name, (ir_node *[]){c, dy, zero}, 3, &none), a));
  if (s->needs[b->id])
    grad_accumulate(s, b, reduce_to(s, n, grad_op(s, IR_OP_SELECT, n, b->name, (ir_node *[]){c, zero, dy}, 3, &none), b));
  return true;
}

/* general tensors: the reductions and broadcast_to (the rules above). */
static bool reduce_backward(grad_state *s, ir_node *n, ir_node *dy) {
  ir_node *x = n->srcs[0];
  const char *base = x->name;
  if (n->op == IR_OP_BROADCAST_TO) {
    grad_accumulate(s, x, reduce_to(s, n, dy, x));
    return true;
  }
  if (n->op == IR_OP_REDUCE_MAX || n->op == IR_OP_REDUCE_MIN) {
    ir_op g = n->op == IR_OP_REDUCE_MAX ? IR_OP_REDUCE_MAX_GRAD : IR_OP_REDUCE_MIN_GRAD;
    grad_accumulate(s, x, grad_op(s, g, n, base, (ir_node *[]){dy, x}, 2, &n->attr));
    return true;
  }
  bool reduced[IR_MAX_RANK];
  char err[256];
  CASTOR_ASSERT(ir_reduce_dims(n->op, &x->type, &n->attr, reduced, err, sizeof err));
  ir_attr keep = {.shape = {x->type.rank, {0}}}, to = {.shape = {x->type.rank, {0}}};
  int64_t count = 1;
  for (int d = 0; d < x->type.rank; d++) {
    keep.shape.dims[d] = reduced[d] ? 1 : x->type.dims[d];
    to.shape.dims[d] = x->type.dims[d];
    if (reduced[d]) count *= x->type.dims[d];
  }
  ir_node *d = dy;
  if (!n->attr.keepdims) d = grad_op(s, IR_OP_RESHAPE, n, base, &d, 1, &keep);
  d = grad_op(s, IR_OP_BROADCAST_TO, n, base, &d, 1, &to);
  if (n->op == IR_OP_REDUCE_MEAN) d = scaled(s, n, base, d, 1.0 / (double)count);
  grad_accumulate(s, x, d);
  return true;
}

/* ---- general tensors: batched matmul ----
 * y = A B with A = a or a^T ({transpose_a}), B = b or b^T: dA = dy B^T and
 * dB = A^T dy are batch_matmuls again, the flags choosing the transposes so
 * that each gradient comes out in its operand's stored orientation, at the
 * result's leading dimensions, then summed back to the operand's shape
 * over the dimensions it was broadcast along (reduce_to: a fixed order). */
static bool batch_matmul_backward(grad_state *s, ir_node *n, ir_node *dy) {
  ir_node *a = n->srcs[0], *b = n->srcs[1];
  int64_t ta = n->attr.transpose_a, tb = n->attr.transpose_b;
  if (s->needs[a->id]) { /* a: dy B^T, or stored transposed B dy^T */
    ir_attr at = {.acc = DT_F32, .transpose_a = ta ? tb : 0, .transpose_b = ta ? 1 : !tb};
    ir_node *srcs[2] = {ta ? b : dy, ta ? dy : b};
    grad_accumulate(s, a, reduce_to(s, n, grad_op(s, IR_OP_BATCH_MATMUL, n, a->name, srcs, 2, &at), a));
  }
  if (s->needs[b->id]) { /* b: A^T dy, or stored transposed dy^T A */
    ir_attr at = {.acc = DT_F32, .transpose_a = tb ? 1 : !ta, .transpose_b = tb ? ta : 0};
    ir_node *srcs[2] = {tb ? dy : a, tb ? a : dy};
    grad_accumulate(s, b, reduce_to(s, n, grad_op(s, IR_OP_BATCH_MATMUL, n, b->name, srcs, 2, &at), b));
  }
  return true;
}

/* ---- recurrent layers: backpropagation through time ----
 * g = <op>_grad(operands, y, dy) [N,T,2GH+2H] (ir_ops.def's layout); dxp its
 * first G*H columns; dr = matmul_tn(p1, du) (gru with its reset gate before:
 * p1 for the z and r blocks, p2 = g h for h's), summed over every row in
 * order; drb = sum_to(du). The initial states get no gradient: a state that
 * depends on a variable is refused. A mask goes to the gradient op as its
 * last operand (ir_ops.def). An f32 lstm becomes lstm_train where it can
 * (lstm_reserve, below). */
/* Whether lstm's result n feeds only slices of its h and c (dimension 2 in
 * [0, 2), counted from the start) and is no output: then widening it to
 * lstm_train's [N,T,6,H] changes no user's value or type. */
static bool lstm_only_sliced(const ir_graph *g, const ir_node *n) {
  for (int i = 0; i < g->n_outputs; i++)
    if (g->outputs[i].value == n) return false;
  for (int i = 0; i < g->n_nodes; i++) {
    const ir_node *u = g->nodes[i];
    for (int k = 0; k < u->n_srcs; k++) {
      if (u->srcs[k] != n) continue;
      const ir_attr *a = &u->attr;
      if (u->op != IR_OP_STRIDED_SLICE || a->starts.n != 4 || a->ends.n != 4 || a->starts.v[2] < 0 ||
          a->ends.v[2] < 1 || a->ends.v[2] > 2)
        return false;
    }
  }
  return true;
}

/* An f32 lstm whose result only its slices of h and c read becomes
 * lstm_train: the forward also writes each step's activated gates, and
 * lstm_grad reads them instead of recomputing h_{t-1} r (the same values,
 * so the same gradients bit for bit). Its users' gradients (pads of dy to
 * lstm's [N,T,2,H]) are built already: this rule runs after theirs. A 16-bit
 * lstm keeps recomputing them in f32 (its y is 16-bit). */
static void lstm_reserve(grad_state *s, ir_node *n) {
  if (n->op != IR_OP_LSTM || n->type.dtype != DT_F32 || !lstm_only_sliced(s->g, n)) return;
  ir_type t;
  char err[256];
  bool ok = ir_infer_type(IR_OP_LSTM_TRAIN, n->srcs, n->n_srcs, &n->attr, &t, err, sizeof err);
  CASTOR_ASSERT(ok);
  n->op = IR_OP_LSTM_TRAIN;
  n->type = t;
}

static bool rnn_backward(grad_state *s, ir_node *n, ir_node *dy) {
  int gates = ir_rnn_gates(n->op), states = ir_rnn_states(n->op), k = gates == 3 ? 3 : 2;
  for (int i = k; i < k + states; i++)
    if (s->needs[n->srcs[i]->id])
      return grad_fail(s, DIAG_KIND_UNSUPPORTED, n->loc,
                  "%%%s: its initial state %%%s depends on a weight; castor's backpropagation through time gives "
                  "no gradient to initial states", n->name, n->srcs[i]->name);
  static const ir_op grad_of[] = {[1] = IR_OP_SIMPLE_RNN_GRAD, [3] = IR_OP_GRU_GRAD, [4] = IR_OP_LSTM_GRAD};
  lstm_reserve(s, n);
  ir_node *srcs[IR_MAX_SRCS];
  int ns = 0, n_fwd = ir_rnn_n_operands(n->op);
  for (int i = 0; i < n_fwd; i++) srcs[ns++] = n->srcs[i];
  srcs[ns++] = n, srcs[ns++] = dy;
  if (ir_rnn_mask(n)) srcs[ns++] = n->srcs[n_fwd]; /* the mask last: no gradient, steps it skips pass dh */
  ir_node *g = grad_op(s, grad_of[gates], n, n->name, srcs, ns, &n->attr);
  int64_t h = n->srcs[1]->type.dims[0], gh = gates * h, nb = g->type.dims[0], t = g->type.dims[1];
  const int64_t steps[3] = {1, 1, 1};
#define COLS(base, c0, w) slice_of(s, n, base, g, (int64_t[]){0, 0, (c0)}, (int64_t[]){nb, t, (w)}, steps)
  ir_node *xp = n->srcs[0], *r = n->srcs[1];
  /* lstm and simple_rnn: dxp is du (the result's first two blocks are equal), so one slice serves
   * xp, r and nothing else copies it again */
  ir_node *dxp = s->needs[xp->id] || (gates != 3 && s->needs[r->id]) ? COLS(xp->name, 0, gh) : NULL;
  if (s->needs[xp->id]) grad_accumulate(s, xp, dxp);
  bool before = gates == 3 && !n->attr.reset_after;
  if (s->needs[r->id]) {
    ir_attr acc = {.acc = DT_F32};
    ir_node *p1 = COLS(arena_printf(s->g->arena, "%s.p1", n->name), 2 * gh, h), *dr;
    if (before) {
      ir_node *p2 = COLS(arena_printf(s->g->arena, "%s.p2", n->name), 2 * gh + h, h);
      ir_node *du_zr = COLS(arena_printf(s->g->arena, "%s.du_zr", n->name), gh, 2 * h);
      ir_node *du_h = COLS(arena_printf(s->g->arena, "%s.du_h", n->name), gh + 2 * h, h);
      ir_node *parts[2] = {grad_op(s, IR_OP_MATMUL_TN, n, arena_printf(s->g->arena, "%s.zr", r->name),
                              (ir_node *[]){p1, du_zr}, 2, &acc),
                           grad_op(s, IR_OP_MATMUL_TN, n, arena_printf(s->g->arena, "%s.h", r->name),
                              (ir_node *[]){p2, du_h}, 2, &acc)};
      dr = grad_op(s, IR_OP_CONCAT, n, r->name, parts, 2, &(ir_attr){.axis = 1});
    } else {
      ir_node *du = gates == 3 ? COLS(arena_printf(s->g->arena, "%s.du", n->name), gh, gh) : dxp;
      dr = grad_op(s, IR_OP_MATMUL_TN, n, r->name, (ir_node *[]){p1, du}, 2, &acc);
    }
    grad_accumulate(s, r, dr);
  }
  if (gates == 3 && s->needs[n->srcs[2]->id]) {
    ir_node *rb = n->srcs[2];
    ir_attr a = {.acc = DT_F32, .shape = {1, {gh}}};
    ir_node *du = COLS(arena_printf(s->g->arena, "%s.du", rb->name), gh, gh);
    grad_accumulate(s, rb, grad_op(s, IR_OP_SUM_TO, n, rb->name, &du, 1, &a));
  }
#undef COLS
  return true;
}

/* Propagates node n's adjoint to its operands (the rules above). */
/* ---- CNN: batch normalization ---- */

static ir_node *bn_op(grad_state *s, const ir_node *n, const char *base, ir_op o, ir_node *a, ir_node *b,
                      const ir_attr *attr) {
  ir_node *srcs[2] = {a, b};
  return grad_op(s, o, n, base, srcs, b ? 2 : 1, attr);
}

static bool batch_norm_backward(grad_state *s, ir_node *n, ir_node *dy) {
  ir_node *x = n->srcs[0], *gamma = n->srcs[1], *beta = n->srcs[2], *mean = n->srcs[3], *var = n->srcs[4];
  const ir_attr none = {0};
  if (!(mean->op == IR_OP_BN_MEAN && mean->srcs[0] == x && var->op == IR_OP_BN_MEAN))
    return grad_fail(s, DIAG_KIND_INTERNAL, n->loc, "grad: %s (%%%s) has no batch statistics (grad_bn.c)",
                ir_op_name(n->op), n->name);
  const char *base = n->name;
  ir_node *eps = grad_literal(s, "epsilon", var->type.dtype, n->attr.epsilon);
  ir_node *inv = bn_op(s, n, base, IR_OP_RSQRT, bn_op(s, n, base, IR_OP_ADD, var, eps, &none), NULL, &none);
  ir_node *xc = var->srcs[0]->srcs[0]; /* x - mean (grad_bn.c) */
  ir_node *xhat = bn_op(s, n, base, IR_OP_MUL, xc, inv, &none);
  ir_node *dyx = s->needs[gamma->id] || s->needs[x->id] ? bn_op(s, n, base, IR_OP_MUL, dy, xhat, &none) : NULL;
  if (s->needs[x->id]) { /* k (dy - mean(dy) - xhat mean(dy xhat)), k = gamma inv */
    ir_attr ma = {0};
    ma.shape.rank = mean->type.rank;
    for (int r = 0; r < mean->type.rank; r++) ma.shape.dims[r] = mean->type.dims[r];
    ir_node *k = bn_op(s, n, base, IR_OP_MUL, gamma, inv, &none);
    ir_node *m1 = bn_op(s, n, x->name, IR_OP_BN_MEAN, dy, NULL, &ma);
    ir_node *m2 = bn_op(s, n, x->name, IR_OP_BN_MEAN, dyx, NULL, &ma);
    ir_node *t = bn_op(s, n, x->name, IR_OP_SUB, dy, m1, &none);
    t = bn_op(s, n, x->name, IR_OP_SUB, t, bn_op(s, n, x->name, IR_OP_MUL, xhat, m2, &none), &none);
    grad_accumulate(s, x, bn_op(s, n, x->name, IR_OP_MUL, t, k, &none));
  }
  if (s->needs[gamma->id]) grad_accumulate(s, gamma, reduce_to(s, n, dyx, gamma));
  if (s->needs[beta->id]) grad_accumulate(s, beta, reduce_to(s, n, dy, beta));
  return true;
}

/* A transposed convolution y = conv2d_input_grad(a, w) (group_ for
 * groups) as a model op: y sums a's elements through w into the shape of
 * the convolution's input, so its gradient for a is that convolution of dy
 * (conv2d / group_conv2d with the same strides, dilations and pads: a
 * gather, no scatter), and for w the filter gradient of that convolution
 * with dy as its input and a as its output gradient. */
static bool conv_transpose_backward(grad_state *s, ir_node *n, ir_node *dy) {
  ir_node *a = n->srcs[0], *w = n->srcs[1];
  bool grouped = n->op == IR_OP_GROUP_CONV2D_INPUT_GRAD;
  ir_attr ca = {.acc = DT_F32, .strides = n->attr.strides, .dilations = n->attr.dilations, .pads = n->attr.pads};
  if (s->needs[a->id])
    grad_accumulate(s, a, grad_op(s, grouped ? IR_OP_GROUP_CONV2D : IR_OP_CONV2D, n, a->name, (ir_node *[]){dy, w}, 2, &ca));
  ca.shape.rank = w->type.rank;
  for (int r = 0; r < w->type.rank; r++) ca.shape.dims[r] = w->type.dims[r];
  if (s->needs[w->id])
    grad_accumulate(s, w, grad_op(s, grouped ? IR_OP_GROUP_CONV2D_FILTER_GRAD : IR_OP_CONV2D_FILTER_GRAD, n, w->name,
                        (ir_node *[]){dy, a}, 2, &ca));
  return true;
}

bool grad_backward(grad_state *s, ir_node *n) {
  ir_node *dy = s->adjoint[n->id];
  ir_node *a = n->n_srcs > 0 ? n->srcs[0] : NULL, *b = n->n_srcs > 1 ? n->srcs[1] : NULL;
  ir_attr acc = {.acc = DT_F32};
  if ((ir_op_attrs(n->op) & A(acc)) && ir_op_autocast(n->op) == IR_AC_ALLOW && a && dy &&
      n->type.dtype != a->type.dtype && dy->type.dtype != a->type.dtype) {
    /* a 16-bit contraction with f32 sums for its batch norm (autocast.c):
     * its gradient rules take dy in the operands' dtype, as the rounded
     * result's would be */
    ir_attr to = {.to = a->type.dtype};
    dy = grad_op(s, IR_OP_CAST, n, n->name, &dy, 1, &to);
    dy->layer = n->layer;
    dy->rule = n->rule;
  }
  switch (n->op) {
  case IR_OP_MATMUL:
    if (s->needs[a->id]) grad_accumulate(s, a, grad_op(s, IR_OP_MATMUL_NT, n, a->name, (ir_node *[]){dy, b}, 2, &acc));
    if (s->needs[b->id]) grad_accumulate(s, b, grad_op(s, IR_OP_MATMUL_TN, n, b->name, (ir_node *[]){a, dy}, 2, &acc));
    return true;
  case IR_OP_ADD:
  case IR_OP_MUL: return binary_backward(s, n, dy);
  case IR_OP_RELU: grad_accumulate(s, a, unary_grad(s, IR_OP_RELU_GRAD, n, dy, a)); return true;
  case IR_OP_GELU: grad_accumulate(s, a, unary_grad(s, IR_OP_GELU_GRAD, n, dy, a)); return true;
  case IR_OP_SILU: grad_accumulate(s, a, unary_grad(s, IR_OP_SILU_GRAD, n, dy, a)); return true;
  case IR_OP_SIGMOID: grad_accumulate(s, a, unary_grad(s, IR_OP_SIGMOID_GRAD, n, dy, n)); return true;
  case IR_OP_TANH: grad_accumulate(s, a, unary_grad(s, IR_OP_TANH_GRAD, n, dy, n)); return true;
  case IR_OP_SOFTMAX: grad_accumulate(s, a, unary_grad(s, IR_OP_SOFTMAX_GRAD, n, dy, n)); return true;
  case IR_OP_CAST: {
    if (!dtype_is_float(a->type.dtype) || !dtype_is_float(n->type.dtype))
      return true; /* integers and booleans have no gradient */
    ir_attr to = {.to = a->type.dtype};
    ir_node *d = grad_op(s, IR_OP_CAST, n, a->name, &dy, 1, &to);
    const char *layer = n->layer ? n->layer : a->name;
    d->layer = n->layer;
    d->rule = n->rule;
    d->note = arena_printf(s->g->arena, "autocast: %s gradient back to %s (transposes %%%s%s%s)", layer,
                           dtype_name(to.to), n->name, n->rule ? ": " : "", n->rule ? n->rule : "");
    grad_accumulate(s, a, d);
    return true;
  }
  case IR_OP_PAD:
  case IR_OP_SLICE: {
    ir_attr shape = {.shape = {a->type.rank, {0}}};
    for (int r = 0; r < a->type.rank; r++) shape.shape.dims[r] = a->type.dims[r];
    grad_accumulate(s, a, grad_op(s, n->op == IR_OP_PAD ? IR_OP_SLICE : IR_OP_PAD, n, a->name, &dy, 1, &shape));
    return true;
  }
  case IR_OP_LAYER_NORM: return layer_norm_backward(s, n, dy);
  case IR_OP_INPUT:
  case IR_OP_CONST:
  case IR_OP_VARIABLE:
  case IR_OP_LITERAL:
    return true; /* leaves: the adjoint is the result */
  case IR_OP_MATMUL_NT:
  case IR_OP_MATMUL_TN:
  case IR_OP_SUM_ROWS:
  case IR_OP_RELU_GRAD:
  case IR_OP_SIGMOID_GRAD:
  case IR_OP_TANH_GRAD:
  case IR_OP_GELU_GRAD:
  case IR_OP_SILU_GRAD:
  case IR_OP_SOFTMAX_GRAD:
  case IR_OP_LAYER_NORM_GRAD:
  case IR_OP_LAYER_NORM_XHAT:
  case IR_OP_XENT:
  case IR_OP_XENT_GRAD:
  case IR_OP_XENT_LOGITS:
  case IR_OP_XENT_LOGITS_GRAD:
  case IR_OP_MSE:
  case IR_OP_MSE_GRAD:
  case IR_OP_ALL_FINITE:
  case IR_OP_SGD:
  case IR_OP_SGD_MOMENTUM:
  case IR_OP_RMSPROP:
  case IR_OP_RMSPROP_MOMENTUM:
  case IR_OP_RMSPROP_CENTERED:
  case IR_OP_RMSPROP_CENTERED_MOMENTUM:
  case IR_OP_ADAM:
  case IR_OP_COUNT_STEP:
  case IR_OP_LOSS_SCALE_UPDATE:
  case IR_OP_ADAMW: /* training options */
  case IR_OP_GRAD_NORM_SQ:
  case IR_OP_CLIP_SCALE:
  case IR_OP_CLIP_VALUE:
    return grad_fail(s, DIAG_KIND_INVALID_MODEL, n->loc, "%s (%%%s) is part of a training program already: grad runs on a model",
                ir_op_name(n->op), n->name);
  /* general tensors: layout ops */
  case IR_OP_RESHAPE:
  case IR_OP_TRANSPOSE:
  case IR_OP_CONCAT:
  case IR_OP_STRIDED_SLICE:
  case IR_OP_PAD_CONSTANT:
  case IR_OP_GATHER: return layout_backward(s, n, dy);
  case IR_OP_GATHER_GRAD:
    return grad_fail(s, DIAG_KIND_INVALID_MODEL, n->loc, "%s (%%%s) is part of a training program already: grad runs on a model",
                ir_op_name(n->op), n->name);
  /* convolutional networks */
  case IR_OP_CONV2D: { /* dx gathers dy through w (no scatter); dw sums x's windows times dy over the batch */
    ir_attr ga = {.acc = DT_F32, .strides = n->attr.strides, .dilations = n->attr.dilations, .pads = n->attr.pads};
    ga.shape.rank = a->type.rank;
    for (int r = 0; r < a->type.rank; r++) ga.shape.dims[r] = a->type.dims[r];
    if (s->needs[a->id]) grad_accumulate(s, a, grad_op(s, IR_OP_CONV2D_INPUT_GRAD, n, a->name, (ir_node *[]){dy, b}, 2, &ga));
    ga.shape.rank = b->type.rank;
    for (int r = 0; r < b->type.rank; r++) ga.shape.dims[r] = b->type.dims[r];
    if (s->needs[b->id]) grad_accumulate(s, b, grad_op(s, IR_OP_CONV2D_FILTER_GRAD, n, b->name, (ir_node *[]){a, dy}, 2, &ga));
    return true;
  }
  case IR_OP_MAX_POOL2D:
  case IR_OP_AVG_POOL2D: { /* a gather per element of x: no scatter */
    ir_attr pa = {.pool = n->attr.pool, .strides = n->attr.strides, .pads = n->attr.pads};
    ir_op g = n->op == IR_OP_MAX_POOL2D ? IR_OP_MAX_POOL2D_GRAD : IR_OP_AVG_POOL2D_GRAD;
    grad_accumulate(s, a, grad_op(s, g, n, a->name, (ir_node *[]){dy, a}, 2, &pa));
    return true;
  }
  case IR_OP_CONV2D_INPUT_GRAD: /* a model's transposed convolution (Keras Conv2DTranspose, ONNX ConvTranspose) */
  case IR_OP_GROUP_CONV2D_INPUT_GRAD:
    return conv_transpose_backward(s, n, dy);
  case IR_OP_MAX_POOL2D_GRAD:
  case IR_OP_AVG_POOL2D_GRAD:
  case IR_OP_CONV2D_FILTER_GRAD:
  /* general tensors: gradient helpers */
  case IR_OP_SELECT_GE:
  case IR_OP_POW_GRAD:
  case IR_OP_POW_GRAD_EXP:
  case IR_OP_SUM_TO:
  case IR_OP_ABS_GRAD:
  case IR_OP_ERF_GRAD:
  case IR_OP_LEAKY_RELU_GRAD:
  case IR_OP_ELU_GRAD:
  case IR_OP_HARD_SIGMOID_GRAD:
  case IR_OP_CLIP_GRAD:
    return grad_fail(s, DIAG_KIND_INVALID_MODEL, n->loc, "%s (%%%s) is part of a training program already: grad runs on a model",
                ir_op_name(n->op), n->name);
  /* general tensors: element-wise */
  case IR_OP_SUB:
  case IR_OP_DIV:
  case IR_OP_MAXIMUM:
  case IR_OP_MINIMUM:
  case IR_OP_POW: return binary_backward(s, n, dy);
  case IR_OP_EXP:
  case IR_OP_LOG:
  case IR_OP_SQRT:
  case IR_OP_RSQRT:
  case IR_OP_NEG:
  case IR_OP_ABS:
  case IR_OP_ERF:
  case IR_OP_LEAKY_RELU:
  case IR_OP_ELU:
  case IR_OP_SOFTPLUS:
  case IR_OP_HARD_SIGMOID:
  case IR_OP_CLIP: grad_accumulate(s, a, unary_backward(s, n, dy)); return true;
  case IR_OP_SELECT: return select_backward(s, n, dy);
  /* CNN: batch normalization */
  case IR_OP_BATCH_NORM: return batch_norm_backward(s, n, dy);
  case IR_OP_BN_MEAN:
  case IR_OP_MOVING_UPDATE: return grad_fail(s, DIAG_KIND_INTERNAL, n->loc, "grad: %s (%%%s) is a training op", ir_op_name(n->op), n->name);
  /* general tensors: dropout (the same mask for the gradient) */
  case IR_OP_DROPOUT: grad_accumulate(s, a, dy); return true;
  case IR_OP_DROPOUT_TRAIN:
    grad_accumulate(s, a, grad_op(s, IR_OP_DROPOUT_TRAIN, n, a->name, (ir_node *[]){dy, b}, 2, &n->attr));
    return true;
  /* general tensors: reductions, broadcast_to */
  case IR_OP_REDUCE_SUM:
  case IR_OP_REDUCE_MEAN:
  case IR_OP_REDUCE_MAX:
  case IR_OP_REDUCE_MIN:
  case IR_OP_BROADCAST_TO: return reduce_backward(s, n, dy);
  case IR_OP_LOG_SOFTMAX: grad_accumulate(s, a, unary_grad(s, IR_OP_LOG_SOFTMAX_GRAD, n, dy, n)); return true;
  case IR_OP_REDUCE_MAX_GRAD:
  case IR_OP_REDUCE_MIN_GRAD:
  case IR_OP_LOG_SOFTMAX_GRAD:
    return grad_fail(s, DIAG_KIND_INVALID_MODEL, n->loc, "%s (%%%s) is part of a training program already: grad runs on a model",
                ir_op_name(n->op), n->name);
  /* convolutional networks: grouped convolution, as conv2d's rule with the group ops */
  case IR_OP_GROUP_CONV2D: {
    ir_attr ga = {.acc = DT_F32, .strides = n->attr.strides, .dilations = n->attr.dilations, .pads = n->attr.pads};
    ga.shape.rank = a->type.rank;
    for (int r = 0; r < a->type.rank; r++) ga.shape.dims[r] = a->type.dims[r];
    if (s->needs[a->id]) grad_accumulate(s, a, grad_op(s, IR_OP_GROUP_CONV2D_INPUT_GRAD, n, a->name, (ir_node *[]){dy, b}, 2, &ga));
    ga.shape.rank = b->type.rank;
    for (int r = 0; r < b->type.rank; r++) ga.shape.dims[r] = b->type.dims[r];
    if (s->needs[b->id]) grad_accumulate(s, b, grad_op(s, IR_OP_GROUP_CONV2D_FILTER_GRAD, n, b->name, (ir_node *[]){a, dy}, 2, &ga));
    return true;
  }
  case IR_OP_GROUP_CONV2D_FILTER_GRAD:
    return grad_fail(s, DIAG_KIND_INVALID_MODEL, n->loc, "%s (%%%s) is part of a training program already: grad runs on a model",
                ir_op_name(n->op), n->name);
  /* general tensors: batched matmul */
  case IR_OP_BATCH_MATMUL: return batch_matmul_backward(s, n, dy);
  /* recurrent layers: backpropagation through time */
  case IR_OP_SIMPLE_RNN:
  case IR_OP_GRU:
  case IR_OP_LSTM: return rnn_backward(s, n, dy);
  case IR_OP_SIMPLE_RNN_GRAD:
  case IR_OP_GRU_GRAD:
  case IR_OP_LSTM_GRAD:
  case IR_OP_LSTM_TRAIN:
    return grad_fail(s, DIAG_KIND_INVALID_MODEL, n->loc, "%s (%%%s) is part of a training program already: grad runs on a model",
                ir_op_name(n->op), n->name);
  /* integers and booleans: piecewise constant, so no gradient flows to
   * their operands (and none reaches them: their results are not float) */
  case IR_OP_EQUAL:
  case IR_OP_LESS:
  case IR_OP_LESS_EQUAL:
  case IR_OP_LOGICAL_AND:
  case IR_OP_LOGICAL_OR:
  case IR_OP_LOGICAL_XOR:
  case IR_OP_LOGICAL_NOT:
  case IR_OP_IS_NAN: return true;
  case IR_OP_COUNT: break;
  }
  CASTOR_UNREACHABLE();
  return false;
}
