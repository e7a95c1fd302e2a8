/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ir_rnn.c: the type rules of the recurrent ops (IR_TYPE_RNN): simple_rnn,
 * gru and lstm, scans over time (the batch dimension N symbolic or static) whose input projection xp = x W + b is a
 * matmul before them (ir_ops.def documents each). The rule checks every
 * operand's shape against xp's [N,T,G*H] and r's [H,G*H], so that a state
 * of the wrong shape is the frontend's located error, never a kernel's
 * out-of-bounds read.
 *
 * Operands, in order: xp, r, then (gru) the recurrent bias rb [G*H], then
 * the initial states [N,H] (lstm: h0, c0), then optionally the mask i1
 * [N,T] (Keras's: false skips the step). The result is every step's
 * state: [N,T,H] (lstm [N,T,2,H]: h then c), in xp's dtype.
 *
 * lstm_train, lstm with a reserve, is lstm's rule with [N,T,6,H]: h, c,
 * then the step's four activated gates.
 *
 * Their gradient ops (IR_TYPE_RNN_GRAD: simple_rnn_grad, gru_grad,
 * lstm_grad) take the forward op's operands but its mask, then its result
 * y (lstm_grad: lstm's or lstm_train's) and dy of lstm's result type, then
 * the forward's mask if it has one; the result is [N,T,2*G*H + 2*H]
 * (ir_ops.def's layout).
 */
#include <stdio.h>

#include "ir/ir.h"

/* A static dimension as text, for a message (one at a time). */
static const char *dim_text(int64_t v) {
  static _Thread_local char buf[24];
  snprintf(buf, sizeof buf, "%lld", (long long)v);
  return buf;
}

#define FAIL(...) (snprintf(err, errlen, __VA_ARGS__), false)

/* The gates and states of each recurrent op: a table, not a switch over
 * every op (an op not listed is not recurrent: 0). */
static const struct {
  int gates, states;
  bool has_rb;  /* a recurrent bias operand after r */
  ir_op fwd;    /* a gradient op's forward op (0 for a forward op) */
  bool reserve; /* the result also holds each step's activated gates (lstm_train) */
} rnn_ops[IR_OP_COUNT] = {
    [IR_OP_SIMPLE_RNN] = {1, 1, false, 0},
    [IR_OP_GRU] = {3, 1, true, 0},
    [IR_OP_LSTM] = {4, 2, false, 0},
    [IR_OP_SIMPLE_RNN_GRAD] = {1, 1, false, IR_OP_SIMPLE_RNN},
    [IR_OP_GRU_GRAD] = {3, 1, true, IR_OP_GRU},
    [IR_OP_LSTM_GRAD] = {4, 2, false, IR_OP_LSTM},
    [IR_OP_LSTM_TRAIN] = {4, 2, false, 0, true},
};

int ir_rnn_gates(ir_op op) { return op >= 0 && op < IR_OP_COUNT ? rnn_ops[op].gates : 0; }

int ir_rnn_states(ir_op op) { return op >= 0 && op < IR_OP_COUNT ? rnn_ops[op].states : 0; }

ir_op ir_rnn_forward(ir_op op) {
  return op >= 0 && op < IR_OP_COUNT && rnn_ops[op].fwd ? rnn_ops[op].fwd : IR_OP_COUNT;
}

bool ir_rnn_reserve(ir_op op) { return op >= 0 && op < IR_OP_COUNT && rnn_ops[op].reserve; }

int64_t ir_rnn_grad_width(ir_op op, int64_t h) { return 2 * (int64_t)ir_rnn_gates(op) * h + 2 * h; }

int ir_rnn_n_operands(ir_op op) {
  if (!ir_rnn_gates(op)) return 0;
  return 2 + (rnn_ops[op].has_rb ? 1 : 0) + rnn_ops[op].states + (rnn_ops[op].fwd ? 2 : 0);
}

const ir_node *ir_rnn_mask(const ir_node *n) {
  int k = ir_rnn_n_operands(n->op);
  return k && n->n_srcs == k + 1 ? n->srcs[k] : NULL;
}

static void shape_of(const ir_type *t, char *buf, size_t n) {
  str_buf b;
  str_buf_init(&b);
  ir_type_print(t, &b);
  snprintf(buf, n, "%s", str_buf_cstr(&b));
  str_buf_fini(&b);
}

/* The mask operand, if n_srcs has one more than `base`: i1 [N,T] of xp's N and T. */
static bool check_mask(ir_op op, ir_node *const *srcs, int n_srcs, int base, char *err, size_t errlen) {
  if (n_srcs != base && n_srcs != base + 1)
    return FAIL("%s takes %d operands (%d with a mask), got %d", ir_op_name(op), base, base + 1, n_srcs);
  if (n_srcs == base) return true;
  const ir_type *m = &srcs[base]->type, *xp = &srcs[0]->type;
  if (m->dtype != DT_I1 || m->rank != 2 || m->dims[0] != xp->dims[0] || m->dims[1] != xp->dims[1]) {
    char sa[96], sb[96];
    shape_of(m, sa, sizeof sa), shape_of(xp, sb, sizeof sb);
    return FAIL("%s mask (operand %d) must be i1 [%s, %lld] (batch, time) for the input projection %s, got %s",
                ir_op_name(op), base + 1, ir_type_is_batched(xp) ? "N" : dim_text(xp->dims[0]),
                (long long)xp->dims[1], sb, sa);
  }
  return true;
}

bool ir_infer_rnn(ir_op op, ir_node *const *srcs, int n_srcs, const ir_attr *attr, ir_type *out, char *err,
                  size_t errlen) {
  char sa[96], sb[96];
  int gates = ir_rnn_gates(op);
  CASTOR_ASSERT(gates > 0);
  int base = 2 + (rnn_ops[op].has_rb ? 1 : 0) + rnn_ops[op].states;
  if (n_srcs != base && n_srcs != base + 1)
    return FAIL("%s takes %d operands (%d with a mask), got %d", ir_op_name(op), base, base + 1, n_srcs);
  const ir_type *xp = &srcs[0]->type, *r = &srcs[1]->type;
  shape_of(xp, sa, sizeof sa), shape_of(r, sb, sizeof sb);
  if (!dtype_is_float(xp->dtype)) return FAIL("%s input projection must be float, got %s", ir_op_name(op), sa);
  if (xp->rank != 3)
    return FAIL("%s input projection must be [N, T, %d*H] (batch, time, gates), got %s", ir_op_name(op), gates, sa);
  if (r->rank != 2 || ir_type_is_batched(r) || r->dims[1] != (int64_t)gates * r->dims[0] || r->dims[0] < 1)
    return FAIL("%s recurrent kernel must be [H, %d*H] without the batch dimension, got %s", ir_op_name(op), gates,
                sb);
  int64_t h = r->dims[0];
  if (xp->dims[2] != gates * h)
    return FAIL("%s input projection %s does not match the recurrent kernel %s: its last dimension must be %lld",
                ir_op_name(op), sa, sb, (long long)(gates * h));
  if (xp->dims[1] < 1) return FAIL("%s needs at least one time step, got %s", ir_op_name(op), sa);
  int k = 2;
  if (rnn_ops[op].has_rb) {
    const ir_type *rb = &srcs[k++]->type;
    shape_of(rb, sb, sizeof sb);
    if (rb->rank != 1 || rb->dims[0] != gates * h)
      return FAIL("%s recurrent bias must be [%lld], got %s", ir_op_name(op), (long long)(gates * h), sb);
  }
  if (!check_mask(op, srcs, n_srcs, base, err, errlen)) return false;
  n_srcs = base;
  for (int s = 0; s < n_srcs; s++)
    if (srcs[s]->type.dtype != xp->dtype) {
      shape_of(&srcs[s]->type, sb, sizeof sb);
      return FAIL("%s operands must share one float dtype: operand %d is %s, the input projection %s", ir_op_name(op),
                  s + 1, sb, sa);
    }
  for (; k < n_srcs; k++) {
    const ir_type *st = &srcs[k]->type;
    shape_of(st, sb, sizeof sb);
    if (st->rank != 2 || st->dims[0] != xp->dims[0] || st->dims[1] != h)
      return FAIL("%s initial state (operand %d) must be [%s, %lld], got %s", ir_op_name(op), k + 1,
                  ir_type_is_batched(xp) ? "N" : dim_text(xp->dims[0]), (long long)h, sb);
  }
  if (attr->reverse < 0 || attr->reverse > 2 || (attr->reset_after != 0 && attr->reset_after != 1))
    return FAIL("%s reverse must be 0, 1 or 2 and reset_after 0 or 1", ir_op_name(op));
  *out = *xp;
  if (rnn_ops[op].states == 2) {
    out->rank = 4;
    out->dims[2] = 2 + (rnn_ops[op].reserve ? gates : 0);
    out->dims[3] = h;
  } else {
    out->dims[2] = h;
  }
  return true;
}

/* The forward op's rule on the leading operands, then y and dy of its result's type. */
bool ir_infer_rnn_grad(ir_op op, ir_node *const *srcs, int n_srcs, const ir_attr *attr, ir_type *out, char *err,
                       size_t errlen) {
  ir_op fwd = ir_rnn_forward(op);
  CASTOR_ASSERT(fwd != IR_OP_COUNT);
  int n_fwd = 2 + (rnn_ops[op].has_rb ? 1 : 0) + rnn_ops[op].states;
  if (n_srcs != n_fwd + 2 && n_srcs != n_fwd + 3)
    return FAIL("%s takes %d operands (%d with a mask), got %d", ir_op_name(op), n_fwd + 2, n_fwd + 3, n_srcs);
  ir_type y;
  if (!ir_infer_rnn(fwd, srcs, n_fwd, attr, &y, err, errlen)) return false;
  char sa[96], sb[96];
  shape_of(&y, sa, sizeof sa);
  if (!check_mask(op, srcs, n_srcs, n_fwd + 2, err, errlen)) return false;
  /* y may be the training forward's (lstm_train: the gates after h and c) */
  ir_type yr = y;
  if (fwd == IR_OP_LSTM) yr.dims[2] += ir_rnn_gates(fwd);
  for (int k = n_fwd; k < n_fwd + 2; k++) {
    const ir_type *t = &srcs[k]->type;
    bool same = t->dtype == y.dtype && t->rank == y.rank, reserve = k == n_fwd && fwd == IR_OP_LSTM;
    for (int r = 0; same && r < y.rank; r++) same = t->dims[r] == y.dims[r] || (reserve && t->dims[r] == yr.dims[r]);
    if (!same) {
      shape_of(t, sb, sizeof sb);
      return FAIL("%s %s must be %s (%s's result), got %s", ir_op_name(op), k == n_fwd ? "y" : "dy", sa,
                  ir_op_name(fwd), sb);
    }
  }
  *out = srcs[0]->type;
  out->dims[2] = ir_rnn_grad_width(op, srcs[1]->type.dims[0]);
  return true;
}
