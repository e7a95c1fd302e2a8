/* SPDX-License-Identifier: Apache-2.0 */
/*
 * onnx_lower.c: each ONNX op of onnx_ops.def lowered to castor's IR
 * (internal.h); the op table itself is in onnx_import.c.
 */
#include "frontend/onnx/internal.h"

#include "util/half.h"

#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- lowerings ---- */

bool oi_lower_identity(imp *im, const onnx_node *n, const op_row *row) {
  (void)row;
  imp_val *v = oi_input(im, 0);
  if (!v) return false;
  return oi_val_alias(im, n->outputs[0], v);
}

bool oi_lower_constant(imp *im, const onnx_node *n, const op_row *row) {
  (void)row;
  if (n->n_attrs != 1)
    return FAIL(im, "Constant needs exactly one of its value attributes, got %d attributes",
                n->n_attrs);
  const onnx_attr *a = &n->attrs[0];
  onnx_tensor *t;
  if (str_eq(a->name, "value")) {
    if (!oi_attr_typed(im, a, ONNX_ATTR_TENSOR)) return false;
    return oi_val_define(im, n->outputs[0], NULL, a->t);
  } else if (str_eq(a->name, "value_float")) {
    if (!oi_attr_typed(im, a, ONNX_ATTR_FLOAT)) return false;
    t = oi_host_tensor(im, ONNX_FLOAT, 0, NULL);
    *(float *)t->data = (float)a->f;
  } else if (str_eq(a->name, "value_int")) {
    if (!oi_attr_typed(im, a, ONNX_ATTR_INT)) return false;
    t = oi_host_tensor(im, ONNX_INT64, 0, NULL);
    *(int64_t *)t->data = a->i;
  } else if (str_eq(a->name, "value_floats")) {
    if (!oi_attr_typed(im, a, ONNX_ATTR_FLOATS)) return false;
    t = oi_host_tensor(im, ONNX_FLOAT, 1, (int64_t[]){a->n});
    if (a->n) memcpy((void *)t->data, a->floats, (size_t)a->n * sizeof(float));
  } else {
    if (!oi_attr_typed(im, a, ONNX_ATTR_INTS)) return false;
    t = oi_host_tensor(im, ONNX_INT64, 1, (int64_t[]){a->n});
    if (a->n) memcpy((void *)t->data, a->ints, (size_t)a->n * sizeof(int64_t));
  }
  return oi_val_define(im, n->outputs[0], NULL, t);
}

bool oi_lower_dropout(imp *im, const onnx_node *n, const op_row *row) {
  (void)row;
  /* inference: the identity; training_mode (input 3 from opset 12) must be false */
  if (oi_has_input(im, 2)) {
    const onnx_tensor *tm = oi_const_input(im, 2, "training_mode");
    if (!tm) return false;
    if (tm->numel != 1 || tm->dtype != ONNX_BOOL) return FAIL(im, "Dropout: training_mode is not one bool");
    /* training mode with a constant ratio 0 drops nothing: the identity too */
    const onnx_tensor *ratio = oi_has_input(im, 1) ? oi_const_input(im, 1, "ratio") : NULL;
    if (oi_has_input(im, 1) && !ratio) return false;
    bool zero = ratio && ratio->numel == 1 && !oi_int_like(ratio->dtype) && oi_elem_f64(ratio, 0) == 0;
    if (((const uint8_t *)tm->data)[0] && !zero)
      return UNSUPPORTED(im, "Dropout in training mode (ratio not a constant 0): castor imports ONNX models for "
                             "inference, where Dropout is the identity");
  }
  int64_t is_test = 1;
  if (!oi_attr_int(im, "is_test", 1, &is_test)) return false;
  if (!is_test)
    return UNSUPPORTED(im, "Dropout with is_test=0 (training): castor imports ONNX models for "
                           "inference, where Dropout is the identity");
  if (!oi_outputs_unused_from(im, 1, "the output (the mask exists only in training)")) return false;
  imp_val *v = oi_input(im, 0);
  if (!v) return false;
  return oi_val_alias(im, n->outputs[0], v);
}

/* An element-wise op of input 0 in whatever layout it is held in. */
static bool eltwise1(imp *im, ir_op op, const char *suffix, const ir_attr *attr) {
  imp_val *v = oi_input(im, 0);
  ir_node *x;
  oi_layout layout;
  ir_type cl;
  if (!oi_eltwise_operands(im, &v, 1, &x, &layout, &cl)) return false;
  return oi_define_output_as(im, 0, oi_build(im, op, suffix, &x, 1, attr), layout, &cl);
}

bool oi_lower_unary(imp *im, const onnx_node *n, const op_row *row) {
  (void)n;
  return eltwise1(im, row->ir, NULL, NULL);
}

bool oi_lower_binary(imp *im, const onnx_node *n, const op_row *row) {
  (void)n;
  imp_val *vals[2] = {oi_input(im, 0), oi_input(im, 1)};
  if (!vals[0] || !vals[1]) return false;
  ir_node *ab[2];
  oi_layout layout = OI_PLAIN;
  ir_type cl;
  if (im->opset < 7) { /* ONNX's order for the legacy broadcast rules */
    if (!(ab[0] = oi_operand(im, vals[0])) || !(ab[1] = oi_operand(im, vals[1]))) return false;
  } else if (!oi_eltwise_operands(im, vals, 2, ab, &layout, &cl)) {
    return false;
  }
  ir_node *a = ab[0], *b = ab[1];
  /* opset < 7: B broadcasts to A only with broadcast=1, aligned at axis
   * (default: B's dimensions are A's last ones, as numpy aligns them) */
  if (im->opset < 7) {
    int64_t bc, axis;
    if (!oi_attr_int(im, "broadcast", 0, &bc) || !oi_attr_int(im, "axis", INT64_MIN, &axis)) return false;
    if (!bc && !ir_type_eq(&a->type, &b->type))
      return FAIL(im, "%s (opset %lld) without broadcast=1 needs operands of one shape",
                  im->node->op_type, (long long)im->opset);
    if (bc && axis != INT64_MIN && axis != a->type.rank - b->type.rank)
      return UNSUPPORTED(im, "%s with broadcast=1 and axis=%lld (not B's trailing alignment) is "
                             "not supported", im->node->op_type, (long long)axis);
  }
  /* add and mul commute: the run-time value first, the broadcast operand second */
  if ((row->ir == IR_OP_ADD || row->ir == IR_OP_MUL) && a->op == IR_OP_CONST && b->op != IR_OP_CONST) {
    ir_node *t = a;
    a = b, b = t;
  }
  return oi_define_output_as(im, 0, oi_build(im, row->ir, NULL, (ir_node *[]){a, b}, 2, NULL), layout, &cl);
}

bool oi_lower_matmul(imp *im, const onnx_node *n, const op_row *row) {
  (void)n;
  imp_val *va = oi_input(im, 0), *vb = oi_input(im, 1);
  if (!va || !vb) return false;
  ir_node *a, *b;
  if (va->node && va->layout == OI_FLAT_CL && vb->k && vb->k->rank == 2 && vb->k->dims[0] == va->node->type.dims[1]) {
    /* a flattened channels-last input: B's rows permuted to match at import */
    const float *bf = oi_const_f32(im, vb->k);
    if (!bf) return false;
    int64_t K = vb->k->dims[0], P = vb->k->dims[1];
    ir_type bt = {.dtype = DT_F32, .rank = 2, .dims = {K, P}};
    a = va->node;
    b = ir_build_const(im->g, oi_ir_name(im, im->layer, "nhwc_rows"), &bt, arena_printf(im->g->arena, "%s'", vb->k->name),
                       oi_rows_from_flat_cl(im, &va->cl, bf, K, P), im->loc);
    b->layer = im->layer;
    b->frozen = !vb->param;
  } else {
    a = oi_operand(im, va), b = oi_operand(im, vb);
  }
  if (!a || !b) return false;
  ir_attr attr = {.acc = DT_F32};
  /* attention: A of rank >= 3 by a matrix B [K, P] without the batch (a
   * Linear layer on [N, T, C]) is matmul on A's flat rows, as Keras's Dense
   * on any rank: one GEMM over all rows of a launch, B pre-packed when it
   * is a weight, instead of batch_matmul's one GEMM per [T, C] item */
  if (a->type.rank >= 3 && b->type.rank == 2 && !ir_type_is_batched(&b->type))
    return oi_define_output(im, 0, oi_build(im, row->ir, NULL, (ir_node *[]){a, b}, 2, &attr));
  /* operands of rank >= 3: batch_matmul, the leading dimensions broadcast */
  if (a->type.rank >= 2 && b->type.rank >= 2 && (a->type.rank >= 3 || b->type.rank >= 3))
    return oi_define_output(im, 0, oi_build(im, IR_OP_BATCH_MATMUL, NULL, (ir_node *[]){a, b}, 2, &attr));
  if (a->type.rank != 2 || b->type.rank != 2 || ir_type_is_batched(&b->type))
    return UNSUPPORTED(im, "MatMul of %s by %s: castor multiplies a matrix [M, K] by a matrix [K, P] "
                           "without the batch, or batches of matrices (rank >= 3, batch_matmul); "
                           "1-D operands and two [N, K] matrices with the batch are not supported",
                       a->type.rank == 2 ? "a matrix" : a->type.rank == 1 ? "a vector" : "a batch of matrices",
                       b->type.rank == 2 ? "a batched matrix" : b->type.rank == 1 ? "a vector" : "a batch of matrices");
  return oi_define_output(im, 0, oi_build(im, row->ir, NULL, (ir_node *[]){a, b}, 2, &attr));
}


/* x^T of a matrix. */
static ir_node *transpose2(imp *im, const char *suffix, ir_node *x) {
  ir_attr a = {.perm = {.n = 2, .v = {1, 0}}};
  return x && x->type.rank == 2 ? oi_build(im, IR_OP_TRANSPOSE, suffix, &x, 1, &a) : x;
}

/* Gemm with run-time operands (B or C a graph input, or transA): each
 * operand as it is, transposes and scales as IR ops, C added with numpy
 * broadcasting. */
static bool gemm_runtime(imp *im, int64_t ta, int64_t tb, double alpha, double beta) {
  ir_node *a = oi_operand(im, oi_input(im, 0)), *b = oi_operand(im, oi_input(im, 1));
  if (!a || !b) return false;
  if (a->type.rank != 2 || b->type.rank != 2)
    return FAIL(im, "Gemm's A and B must be matrices, got ranks %d and %d", a->type.rank, b->type.rank);
  if (ta) a = transpose2(im, "a_t", a);
  if (tb) b = transpose2(im, "b_t", b);
  ir_attr attr = {.acc = DT_F32};
  bool more = alpha != 1.0 || oi_has_input(im, 2);
  ir_node *y = oi_build(im, IR_OP_MATMUL, more ? "matmul" : NULL, (ir_node *[]){a, b}, 2, &attr);
  if (y && alpha != 1.0)
    y = oi_build(im, IR_OP_MUL, oi_has_input(im, 2) ? "alpha" : NULL, (ir_node *[]){y, oi_scalar_const(im, "alpha", alpha)}, 2, NULL);
  if (!y || !oi_has_input(im, 2)) return oi_define_output(im, 0, y);
  ir_node *c = oi_operand(im, oi_input(im, 2));
  if (c && beta != 1.0) c = oi_build(im, IR_OP_MUL, "beta", (ir_node *[]){c, oi_scalar_const(im, "beta", beta)}, 2, NULL);
  return oi_define_output(im, 0, c ? oi_build(im, IR_OP_ADD, NULL, (ir_node *[]){y, c}, 2, NULL) : NULL);
}

/* Gemm: Y = alpha * A' B' + beta * C with A' = transA ? A^T : A, B' likewise.
 * B a constant and C a constant bias over the columns (a Linear layer): B'
 * is made at import (transposed, alpha folded into it) and beta * C becomes
 * the bias; any other form (transA, run-time B or C, a matrix C) is
 * gemm_runtime's. */
bool oi_lower_gemm(imp *im, const onnx_node *n, const op_row *row) {
  (void)n;
  int64_t ta, tb;
  double alpha, beta;
  if (!oi_attr_int(im, "transA", 0, &ta) || !oi_attr_int(im, "transB", 0, &tb) ||
      !oi_attr_float(im, "alpha", 1.0, &alpha) || !oi_attr_float(im, "beta", 1.0, &beta))
    return false;
  const onnx_tensor *b_k = oi_host_const(im, 1), *c_k = oi_host_const(im, 2);
  int64_t bp = b_k && b_k->rank == 2 ? b_k->dims[tb ? 0 : 1] : -1;
  bool c_bias = !oi_has_input(im, 2) ||
                (c_k && (c_k->numel == 1 || (c_k->rank == 1 && c_k->dims[0] == bp) ||
                         (c_k->rank == 2 && c_k->dims[0] == 1 && c_k->dims[1] == bp)));
  if (ta || !b_k || !c_bias) return gemm_runtime(im, ta, tb, alpha, beta);
  imp_val *va = oi_input(im, 0);
  oi_layout layout;
  ir_node *a = va ? oi_operand_as(im, va, &layout) : NULL;
  if (a && layout == OI_CL) a = oi_operand(im, va), layout = OI_PLAIN;
  const onnx_tensor *bt = oi_const_input(im, 1, "B");
  if (!a || !bt) return false;
  if (bt->rank != 2) return FAIL(im, "Gemm's B must be a matrix, got rank %d", bt->rank);
  const float *bf = oi_const_f32(im, bt);
  if (!bf) return false;
  int64_t K = tb ? bt->dims[1] : bt->dims[0], P = tb ? bt->dims[0] : bt->dims[1];
  float *w = arena_alloc_aligned(im->g->arena, (size_t)(K * P > 0 ? K * P : 1) * sizeof *w, 64);
  for (int64_t k = 0; k < K; k++)
    for (int64_t p = 0; p < P; p++)
      w[k * P + p] = (float)(alpha * (tb ? bf[p * K + k] : bf[k * P + p]));
  if (layout == OI_FLAT_CL) { /* a flattened channels-last A: B's rows permuted to match */
    if (K != a->type.dims[1]) return FAIL(im, "Gemm's B has %lld rows for A's %lld columns", (long long)K, (long long)a->type.dims[1]);
    w = (float *)oi_rows_from_flat_cl(im, &va->cl, w, K, P);
  }
  ir_type wt = {.dtype = DT_F32, .rank = 2, .dims = {K, P}};
  const char *wname = (tb || alpha != 1.0 || layout == OI_FLAT_CL) ? arena_printf(im->g->arena, "%s'", bt->name) : bt->name;
  ir_node *b = ir_build_const(im->g, oi_ir_name(im, im->layer, "gemm"), &wt, wname, w, im->loc);
  b->layer = im->layer;
  b->frozen = !oi_input(im, 1)->param;
  ir_attr attr = {.acc = DT_F32};
  ir_node *y = oi_build(im, row->ir, oi_has_input(im, 2) ? "matmul" : NULL, (ir_node *[]){a, b}, 2, &attr);
  if (!y || !oi_has_input(im, 2)) return oi_define_output(im, 0, y);
  const onnx_tensor *ct = oi_const_input(im, 2, "C");
  if (!ct) return false;
  const float *cf = oi_const_f32(im, ct);
  if (!cf) return false;
  /* C broadcasts to [M, P]: a bias over P (shape [P] or [1, P]) or a scalar */
  int64_t cn = ct->numel;
  bool row_bias = (ct->rank == 1 && ct->dims[0] == P) || (ct->rank == 2 && ct->dims[0] == 1 && ct->dims[1] == P);
  if (!row_bias && cn != 1)
    return UNSUPPORTED(im, "Gemm's C of %lld elements: castor supports a bias over the output's "
                           "columns ([%lld] or [1, %lld]) or a scalar", (long long)cn,
                       (long long)P, (long long)P);
  float *c = arena_alloc_aligned(im->g->arena, (size_t)(P ? P : 1) * sizeof *c, 64);
  for (int64_t p = 0; p < P; p++) c[p] = (float)(beta * cf[row_bias ? p : 0]);
  ir_type ctype = {.dtype = DT_F32, .rank = 1, .dims = {P}};
  const char *cname = (beta != 1.0 || !row_bias) ? arena_printf(im->g->arena, "%s'", ct->name) : ct->name;
  ir_node *cb = ir_build_const(im->g, oi_ir_name(im, im->layer, "bias"), &ctype, cname, c, im->loc);
  cb->layer = im->layer;
  cb->frozen = !oi_input(im, 2)->param;
  return oi_define_output(im, 0, oi_build(im, IR_OP_ADD, NULL, (ir_node *[]){y, cb}, 2, NULL));
}

bool oi_lower_softmax(imp *im, const onnx_node *n, const op_row *row) {
  /* Softmax and LogSoftmax (row->ir): the same axis rules */
  const char *what = arena_printf(im->g->arena, "%s axis", n->op_type);
  imp_val *v = oi_input(im, 0);
  if (!v) return false;
  if (v->node && v->layout != OI_PLAIN && !v->k) {
    /* channels last: softmax over ONNX's channel axis (opset 13) is over
     * castor's last; a flattened value's features in any order likewise */
    int64_t axis;
    int rank = v->node->type.rank, a = 0;
    if (!oi_attr_int(im, "axis", im->opset >= 13 ? -1 : 1, &axis) || !oi_norm_axis(im, axis, rank, what, &a))
      return false;
    if ((v->layout == OI_CL && a == 1 && im->opset >= 13) || (v->layout == OI_FLAT_CL && a == 1))
      return oi_define_output_as(im, 0, oi_build(im, row->ir, NULL, &v->node, 1, NULL), v->layout, &v->cl);
  }
  ir_node *x = oi_operand(im, v);
  if (!x) return false;
  /* opset 13: one axis (default -1); before: the input flattened to 2-D at
   * axis (default 1), softmax over the second part. Both are castor's
   * last-dimension softmax exactly when the axis is the last one. */
  int64_t axis;
  if (!oi_attr_int(im, "axis", im->opset >= 13 ? -1 : 1, &axis)) return false;
  int a = 0;
  if (!oi_norm_axis(im, axis, x->type.rank, what, &a)) return false;
  int R = x->type.rank;
  if (a == R - 1) return oi_define_output(im, 0, oi_build(im, row->ir, NULL, &x, 1, NULL));
  if (a == 0 && ir_type_is_batched(&x->type))
    return UNSUPPORTED(im, "%s over axis 0, the batch N%s: compile with --batch B", n->op_type,
                       im->opset >= 13 ? "" : " (opset < 13: over every axis)");
  ir_attr to = {0}, back = {0};
  ir_op move = IR_OP_TRANSPOSE;
  if (im->opset >= 13) { /* axis a swapped with the last, and back */
    to.perm.n = back.perm.n = R;
    for (int r = 0; r < R; r++) to.perm.v[r] = r == a ? R - 1 : r == R - 1 ? a : r;
    back.perm = to.perm;
  } else { /* the axes from a on flattened into one, and unflattened */
    move = IR_OP_RESHAPE;
    to.shape.rank = a + 1, to.shape.dims[a] = 1;
    for (int r = 0; r < R; r++) {
      if (r < a) to.shape.dims[r] = x->type.dims[r];
      else to.shape.dims[a] *= x->type.dims[r];
    }
    back.shape.rank = R;
    for (int r = 0; r < R; r++) back.shape.dims[r] = x->type.dims[r];
  }
  ir_node *y = oi_build(im, move, "moved", &x, 1, &to);
  y = y ? oi_build(im, row->ir, "softmax", &y, 1, NULL) : NULL;
  return y && oi_define_output(im, 0, oi_build(im, move, NULL, &y, 1, &back));
}

/* LayerNormalization's Mean and InvStdDev outputs (when a graph uses
 * them): reduce_mean over the axes from axis on, keeping them; InvStdDev
 * is rsqrt(mean((x - Mean)^2) + epsilon). Y stays one layer_norm. */
static bool layer_norm_stats(imp *im, const onnx_node *n, ir_node *x, int64_t axis, double eps) {
  int a0;
  if (!oi_norm_axis(im, axis, x->type.rank, "LayerNormalization axis", &a0)) return false;
  ir_attr ra = {.keepdims = 1};
  for (int r = a0; r < x->type.rank; r++) ra.axes.v[ra.axes.n++] = r;
  ir_node *mean = oi_build(im, IR_OP_REDUCE_MEAN, "mean", &x, 1, &ra);
  if (!mean) return false;
  if (n->n_outputs > 1 && *n->outputs[1] && !oi_define_output(im, 1, mean)) return false;
  if (n->n_outputs < 3 || !*n->outputs[2]) return true;
  ir_node *d = oi_build(im, IR_OP_SUB, "centered", (ir_node *[]){x, mean}, 2, NULL);
  if (d) d = oi_build(im, IR_OP_MUL, "squared", (ir_node *[]){d, d}, 2, NULL);
  if (d) d = oi_build(im, IR_OP_REDUCE_MEAN, "var", &d, 1, &ra);
  if (d) d = oi_build(im, IR_OP_ADD, "var_eps", (ir_node *[]){d, oi_scalar_const(im, "epsilon", eps)}, 2, NULL);
  return d && oi_define_output(im, 2, oi_build(im, IR_OP_RSQRT, "inv_std_dev", &d, 1, NULL));
}

bool oi_lower_layer_norm(imp *im, const onnx_node *n, const op_row *row) {
  (void)n;
  int64_t axis, stash;
  double eps;
  if (!oi_attr_int(im, "axis", -1, &axis) || !oi_attr_float(im, "epsilon", 1e-5, &eps) ||
      !oi_attr_int(im, "stash_type", 1, &stash))
    return false;
  if (stash != 1)
    return UNSUPPORTED(im, "LayerNormalization with stash_type=%lld: castor computes the "
                           "statistics in float32 (stash_type=1)", (long long)stash);
  ir_node *x = oi_operand(im, oi_input(im, 0)), *gamma = oi_operand(im, oi_input(im, 1));
  if (!x || !gamma) return false;
  if (n->n_outputs > 1 && !layer_norm_stats(im, n, x, axis, eps)) return false;
  ir_node *beta;
  if (oi_has_input(im, 2)) {
    beta = oi_operand(im, oi_input(im, 2));
  } else {
    int64_t cnt = 1;
    ir_type_numel(&gamma->type, 1, &cnt);
    float *z = arena_alloc_aligned(im->g->arena, (size_t)(cnt ? cnt : 1) * sizeof *z, 64);
    beta = ir_build_const(im->g, oi_ir_name(im, im->layer, "beta"), &gamma->type,
                          arena_printf(im->g->arena, "%s.zero_bias", im->layer), z, im->loc);
    beta->layer = im->layer;
    beta->frozen = true; /* no bias in the model (PyTorch's LayerNorm(bias=False)): zeros, not a weight */
  }
  ir_attr attr = {.axis = axis, .epsilon = eps};
  return oi_define_output(im, 0, oi_build(im, row->ir, NULL, (ir_node *[]){x, gamma, beta}, 3, &attr));
}

bool oi_lower_cast(imp *im, const onnx_node *n, const op_row *row) {
  (void)row;
  int64_t to;
  if (!oi_attr_int(im, "to", 0, &to)) return false;
  imp_val *v = oi_input(im, 0);
  if (!v) return false;
  /* castor's graphs are float32 until the policy retypes them; a cast to
   * float32 of a float32 value is the identity */
  if (to == ONNX_FLOAT && v->node && v->node->type.dtype == DT_F32) {
    imp_val r = *v;
    r.k = NULL;
    return oi_val_alias(im, n->outputs[0], &r);
  }
  if (to == ONNX_FLOAT && v->k && v->k->dtype == ONNX_FLOAT)
    return oi_val_define(im, n->outputs[0], NULL, v->k);
  if (to == ONNX_INT64 || to == ONNX_INT32 || to == ONNX_BOOL || (to == ONNX_FLOAT && v->node))
    return oi_lower_cast_int(im, to); /* integers and booleans (onnx_int.c) */
  return UNSUPPORTED(im, "Cast to %s: castor's ONNX import keeps tensors in float32 and "
                         "chooses 16-bit types by its policy (--policy)",
                     onnx_dtype_name((int)to));
}

/* ---- layout ops ---- */

/* Reshape's target shape (ONNX semantics: 0 copies the input's dimension
 * unless allowzero, one -1 is inferred, DIM_N is the batch) as an IR shape. */
static bool reshape_target(imp *im, const ir_type *x, const int64_t *want, int rank, bool allowzero,
                           ir_shape *out) {
  if (rank > IR_MAX_RANK) return UNSUPPORTED(im, "Reshape to rank %d: castor's tensors have at most %d dimensions", rank, IR_MAX_RANK);
  *out = (ir_shape){.rank = rank};
  int infer = -1;
  int64_t known = 1, total = 1;
  bool xb = ir_type_is_batched(x);
  for (int r = xb ? 1 : 0; r < x->rank; r++) total *= x->dims[r];
  for (int r = 0; r < rank; r++) {
    int64_t d = want[r];
    if (d == 0 && !allowzero) {
      if (r >= x->rank) return FAIL(im, "Reshape's shape copies dimension %d (0), which the input lacks", r);
      d = x->dims[r] == IR_DIM_BATCH ? DIM_N : x->dims[r];
    }
    if (d == DIM_N) {
      out->dims[r] = IR_DIM_BATCH;
      continue;
    }
    if (d == -1) {
      if (infer >= 0) return FAIL(im, "Reshape's shape has two -1 dimensions");
      infer = r;
      continue;
    }
    if (d < 0) return FAIL(im, "Reshape's shape has a negative dimension %lld", (long long)d);
    out->dims[r] = d;
    if (!size_mul_ok(known, d, &known)) return FAIL(im, "Reshape's shape is too large");
  }
  if (infer >= 0) {
    bool nb = false;
    for (int r = 0; r < rank; r++) nb |= out->dims[r] == IR_DIM_BATCH;
    if (xb && !nb && infer == 0 && known == total) { /* [-1, C] of [N, C, 1, 1]: the -1 is N */
      out->dims[0] = IR_DIM_BATCH;
      return true;
    }
    if (xb && !nb)
      return UNSUPPORTED(im, "Reshape with -1 of an input with the batch N (the -1 would absorb N and other "
                             "dimensions): only the batch is symbolic and it stays dimension 0; compile with --batch B");
    if (known == 0 || total % known)
      return FAIL(im, "Reshape cannot infer -1: %lld elements per sample into %lld", (long long)total, (long long)known);
    out->dims[infer] = total / known;
  }
  return true;
}

bool oi_lower_reshape(imp *im, const onnx_node *n, const op_row *row) {
  (void)n, (void)row;
  imp_val *v = oi_input(im, 0);
  const onnx_tensor *st = v ? oi_const_input(im, 1, "shape") : NULL;
  int64_t want[ONNX_MAX_RANK], allowzero;
  int rank;
  if (!st || !oi_const_ints(im, st, "shape", want, ONNX_MAX_RANK, &rank)) return false;
  if (!oi_attr_int(im, "allowzero", 0, &allowzero)) return false;
  if (v->k && !v->node) { /* a constant: folded */
    ir_type t;
    if (!oi_dims_of(im, v->k, &t)) return false;
    ir_shape s;
    if (!reshape_target(im, &t, want, rank, allowzero != 0, &s)) return false;
    int64_t numel = 1;
    for (int r = 0; r < s.rank; r++) numel *= s.dims[r];
    if (numel != v->k->numel) return FAIL(im, "Reshape of %lld elements to %lld", (long long)v->k->numel, (long long)numel);
    return oi_val_define(im, im->node->outputs[0], NULL, oi_host_reshaped(im, v->k, s.rank, s.dims));
  }
  ir_attr attr = {0};
  if (v->node && v->layout == OI_CL && !v->k) {
    /* [N, C, S..] to [N, C*S] (PyTorch's x.view(x.size(0), -1)): flattened
     * in channels-last order, for the next MatMul or Gemm to absorb */
    ir_type t = {.dtype = DT_F32};
    oi_onnx_dims(v, &t.rank, t.dims);
    if (!reshape_target(im, &t, want, rank, allowzero != 0, &attr.shape)) return false;
    int64_t rest = 1;
    for (int r = 1; r < t.rank; r++) rest *= t.dims[r];
    bool done = false;
    if (attr.shape.rank == 2 && attr.shape.dims[0] == t.dims[0] && attr.shape.dims[1] == rest &&
        !oi_flatten_cl(im, v, &done))
      return false;
    if (done) return true;
  }
  ir_node *x = oi_operand(im, v);
  if (!x) return false;
  if (!reshape_target(im, &x->type, want, rank, allowzero != 0, &attr.shape)) return false;
  return oi_define_output(im, 0, oi_build(im, IR_OP_RESHAPE, NULL, &x, 1, &attr));
}

/* The concat of srcs [0, c) along attr's axis: the one an earlier Concat of
 * the import built of the same values, else a new one (suffix as
 * oi_build's). DenseNet's layers 9 to 24 of a block begin with the same 8
 * features, which a part of each one's tree (below) joins, and layer 8 of a
 * block joins just those: one copy, not 17. */
static ir_node *concat_of(imp *im, ir_node **srcs, int c, const ir_attr *attr, const char *suffix) {
  str_buf key;
  str_buf_init(&key);
  str_buf_printf(&key, "%lld:", (long long)attr->axis);
  for (int j = 0; j < c; j++) str_buf_printf(&key, "%p,", (void *)srcs[j]);
  ir_node *y = hmap_get_str(&im->concat_parts, key.data, key.len);
  if (!y && (y = oi_build(im, IR_OP_CONCAT, suffix, srcs, c, attr)))
    hmap_put_str(&im->concat_parts, arena_strndup(im->g->arena, key.data, key.len), key.len, y);
  str_buf_fini(&key);
  return y;
}

/* A reshape of run-time x to dims (N where x has it). */
static bool reshape_to(imp *im, ir_node *x, int rank, const int64_t *dims) {
  ir_attr attr = {.shape = {.rank = rank}};
  for (int r = 0; r < rank; r++) attr.shape.dims[r] = dims[r];
  return oi_define_output(im, 0, oi_build(im, IR_OP_RESHAPE, NULL, &x, 1, &attr));
}

bool oi_lower_flatten(imp *im, const onnx_node *n, const op_row *row) {
  (void)n, (void)row;
  imp_val *v = oi_input(im, 0);
  int64_t axis;
  if (!v || !oi_attr_int(im, "axis", 1, &axis)) return false;
  if (v->node && v->layout == OI_CL && (axis == 1 || axis == 1 - v->node->type.rank)) {
    bool done;
    if (!oi_flatten_cl(im, v, &done)) return false;
    if (done) return true;
  }
  ir_node *x = oi_operand(im, v);
  if (!x) return false;
  int a = 0;
  if (axis < -x->type.rank || axis > x->type.rank)
    return FAIL(im, "Flatten axis %lld is out of range for rank %d", (long long)axis, x->type.rank);
  a = (int)(axis < 0 ? axis + x->type.rank : axis);
  int64_t d[2] = {1, 1};
  bool nb = false;
  for (int r = 0; r < x->type.rank; r++) {
    if (x->type.dims[r] == IR_DIM_BATCH) {
      if (r >= a || a != 1)
        return UNSUPPORTED(im, "Flatten at axis %d of an input with the batch N would fold N into another "
                               "dimension; compile with --batch B", a);
      nb = true;
      continue;
    }
    d[r < a ? 0 : 1] *= x->type.dims[r];
  }
  if (nb) d[0] = IR_DIM_BATCH;
  return reshape_to(im, x, 2, d);
}

bool oi_lower_squeeze_unsqueeze(imp *im, const onnx_node *n, const op_row *row) {
  (void)row;
  ir_node *x = oi_operand(im, oi_input(im, 0));
  if (!x) return false;
  int64_t axes[ONNX_MAX_RANK];
  int na;
  if (!oi_axes_of(im, 1, axes, &na)) return false;
  bool unsq = str_eq(n->op_type, "Unsqueeze");
  int in_rank = x->type.rank, rank = unsq ? in_rank + (na > 0 ? na : 0) : in_rank;
  if (unsq && na < 1) return FAIL(im, "Unsqueeze needs axes");
  if (rank > IR_MAX_RANK) return UNSUPPORTED(im, "Unsqueeze to rank %d: castor's tensors have at most %d dimensions", rank, IR_MAX_RANK);
  bool mark[IR_MAX_RANK + ONNX_MAX_RANK] = {0};
  for (int i = 0; i < na; i++) {
    int a = 0;
    if (!oi_norm_axis(im, axes[i], rank, unsq ? "Unsqueeze axis" : "Squeeze axis", &a)) return false;
    if (mark[a]) return FAIL(im, "%s axis %lld is given twice", n->op_type, (long long)axes[i]);
    if (!unsq && x->type.dims[a] != 1)
      return FAIL(im, "Squeeze axis %d has size %s, not 1", a,
                  x->type.dims[a] == IR_DIM_BATCH ? "N (the batch)" : arena_printf(im->g->arena, "%lld", (long long)x->type.dims[a]));
    mark[a] = true;
  }
  int64_t dims[IR_MAX_RANK];
  int out = 0;
  if (unsq) {
    for (int r = 0, k = 0; r < rank; r++) dims[out++] = mark[r] ? 1 : x->type.dims[k++];
  } else {
    for (int r = 0; r < in_rank; r++)
      if (!(na < 0 ? x->type.dims[r] == 1 : mark[r])) dims[out++] = x->type.dims[r];
  }
  return reshape_to(im, x, out, dims);
}

bool oi_lower_transpose(imp *im, const onnx_node *n, const op_row *row) {
  (void)n, (void)row;
  imp_val *v = oi_input(im, 0);
  const onnx_attr *p = oi_attr_find(im, "perm");
  if (v && p && v->node && v->layout == OI_CL && !v->k && p->type == ONNX_ATTR_INTS && p->n == v->node->type.rank) {
    /* NCHW to NHWC of a value castor holds as NHWC: the value itself */
    bool same = true;
    for (int r = 0; r < p->n; r++) same &= p->ints[r] == (r == 0 ? 0 : r == p->n - 1 ? 1 : r + 1);
    if (same) return oi_val_define(im, im->node->outputs[0], v->node, NULL);
  }
  ir_node *x = oi_operand(im, v);
  if (!x) return false;
  ir_attr attr = {.perm = {.n = x->type.rank}};
  if (p) {
    if (!oi_attr_typed(im, p, ONNX_ATTR_INTS)) return false;
    if (p->n != x->type.rank) return FAIL(im, "Transpose's perm has %d entries for a rank-%d input", p->n, x->type.rank);
    for (int r = 0; r < p->n; r++) attr.perm.v[r] = p->ints[r];
  } else {
    for (int r = 0; r < x->type.rank; r++) attr.perm.v[r] = x->type.rank - 1 - r;
  }
  return oi_define_output(im, 0, oi_build(im, IR_OP_TRANSPOSE, NULL, &x, 1, &attr));
}

bool oi_lower_concat(imp *im, const onnx_node *n, const op_row *row) {
  (void)row;
  int64_t axis;
  if (!oi_attr_int(im, "axis", INT64_MIN, &axis)) return false;
  if (axis == INT64_MIN) return FAIL(im, "Concat needs its axis attribute");
  if (n->n_inputs < 1) return FAIL(im, "Concat needs at least one input");
  ir_node **srcs = arena_alloc(im->g->arena, (size_t)n->n_inputs * sizeof *srcs);
  imp_val **vals = arena_alloc(im->g->arena, (size_t)n->n_inputs * sizeof *vals);
  for (int i = 0; i < n->n_inputs; i++)
    if (!(vals[i] = oi_input(im, i))) return false;
  oi_layout layout;
  ir_type cl;
  if (!oi_eltwise_operands(im, vals, n->n_inputs, srcs, &layout, &cl)) return false;
  if (layout == OI_FLAT_CL) /* joined features would mix two orders */
    for (int i = 0; i < n->n_inputs; i++)
      if (!(srcs[i] = oi_operand(im, vals[i]))) return false;
  int rank = srcs[0]->type.rank, a = 0;
  if (layout == OI_CL) { /* ONNX's axis a is castor's: C last, the spatial ones one earlier */
    if (!oi_norm_axis(im, axis, rank, "Concat axis", &a)) return false;
    for (int i = 0; i < n->n_inputs; i++)
      if (srcs[i]->type.rank != rank) return FAIL(im, "Concat's inputs differ in rank");
    axis = a == 0 ? 0 : a == 1 ? rank - 1 : a - 1;
  }
  ir_attr attr = {.axis = axis};
  /* more inputs than an IR node has sources (DenseNet joins up to 25):
   * a tree of concats, IR_MAX_SRCS at a time, each level one more copy */
  int m = n->n_inputs, level = 0;
  while (m > IR_MAX_SRCS) {
    int k = 0;
    level++;
    for (int i = 0; i < m; i += IR_MAX_SRCS, k++) {
      int c = m - i < IR_MAX_SRCS ? m - i : IR_MAX_SRCS;
      srcs[k] = c == 1 ? srcs[i] : concat_of(im, &srcs[i], c, &attr, arena_printf(im->g->arena, "part%d_%d", level, k));
      if (!srcs[k]) return false;
    }
    m = k;
  }
  ir_node *y = concat_of(im, srcs, m, &attr, NULL);
  return y && oi_define_output_as(im, 0, y, layout == OI_CL ? OI_CL : OI_PLAIN, NULL);
}

/* Slice: opset 1-9 with attributes starts, ends, axes; from 10 with inputs
 * (starts, ends, axes, steps). */
bool oi_lower_slice(imp *im, const onnx_node *n, const op_row *row) {
  (void)n, (void)row;
  ir_node *x = oi_operand(im, oi_input(im, 0));
  if (!x) return false;
  int rank = x->type.rank;
  int64_t st[ONNX_MAX_RANK], en[ONNX_MAX_RANK], ax[ONNX_MAX_RANK], sp[ONNX_MAX_RANK];
  int ns, ne, na = -1, nsp = -1;
  if (im->opset < 10) {
    const onnx_attr *a;
    if (!(a = oi_attr_find(im, "starts")) || !oi_attr_typed(im, a, ONNX_ATTR_INTS)) return a ? false : FAIL(im, "Slice needs starts");
    ns = a->n < ONNX_MAX_RANK ? a->n : ONNX_MAX_RANK;
    memcpy(st, a->ints, (size_t)ns * sizeof *st);
    if (!(a = oi_attr_find(im, "ends")) || !oi_attr_typed(im, a, ONNX_ATTR_INTS)) return a ? false : FAIL(im, "Slice needs ends");
    ne = a->n < ONNX_MAX_RANK ? a->n : ONNX_MAX_RANK;
    memcpy(en, a->ints, (size_t)ne * sizeof *en);
    if ((a = oi_attr_find(im, "axes"))) {
      if (!oi_attr_typed(im, a, ONNX_ATTR_INTS)) return false;
      na = a->n < ONNX_MAX_RANK ? a->n : ONNX_MAX_RANK;
      memcpy(ax, a->ints, (size_t)na * sizeof *ax);
    }
  } else {
    const onnx_tensor *t;
    if (!(t = oi_const_input(im, 1, "starts")) || !oi_const_ints(im, t, "starts", st, ONNX_MAX_RANK, &ns)) return false;
    if (!(t = oi_const_input(im, 2, "ends")) || !oi_const_ints(im, t, "ends", en, ONNX_MAX_RANK, &ne)) return false;
    if (oi_has_input(im, 3) && (!(t = oi_const_input(im, 3, "axes")) || !oi_const_ints(im, t, "axes", ax, ONNX_MAX_RANK, &na)))
      return false;
    if (oi_has_input(im, 4) && (!(t = oi_const_input(im, 4, "steps")) || !oi_const_ints(im, t, "steps", sp, ONNX_MAX_RANK, &nsp)))
      return false;
  }
  if (ns != ne || (na >= 0 && na != ns) || (nsp >= 0 && nsp != ns))
    return FAIL(im, "Slice's starts, ends, axes and steps differ in length (%d, %d, %d, %d)", ns, ne, na, nsp);
  ir_attr attr = {.starts = {.n = rank}, .ends = {.n = rank}, .steps = {.n = rank}};
  for (int r = 0; r < rank; r++) {
    attr.starts.v[r] = 0, attr.steps.v[r] = 1;
    attr.ends.v[r] = x->type.dims[r] == IR_DIM_BATCH ? 0 : x->type.dims[r];
  }
  bool seen[IR_MAX_RANK] = {0};
  for (int i = 0; i < ns; i++) {
    int a = 0;
    if (!oi_norm_axis(im, na >= 0 ? ax[i] : i, rank, "Slice axis", &a)) return false;
    if (seen[a]) return FAIL(im, "Slice axis %d is given twice", a);
    seen[a] = true;
    int64_t step = nsp >= 0 ? sp[i] : 1;
    if (step < 1) return UNSUPPORTED(im, "Slice with step %lld: castor slices with positive steps", (long long)step);
    if (x->type.dims[a] == IR_DIM_BATCH) {
      if (st[i] == 0 && en[i] >= INT32_MAX && step == 1) continue; /* the whole batch */
      return UNSUPPORTED(im, "Slice of the batch dimension N: compile with --batch B");
    }
    int64_t d = x->type.dims[a], s0 = st[i], e0 = en[i];
    /* ONNX clamps both to [0, d] after counting negatives from the end */
    if (s0 < 0) s0 += d;
    if (e0 < 0) e0 += d;
    s0 = s0 < 0 ? 0 : s0 > d ? d : s0;
    e0 = e0 < 0 ? 0 : e0 > d ? d : e0;
    if (e0 < s0) e0 = s0; /* empty tensors: a slice that keeps no element (docs/shapes.md) */
    attr.starts.v[a] = s0, attr.ends.v[a] = e0, attr.steps.v[a] = step;
  }
  return oi_define_output(im, 0, oi_build(im, IR_OP_STRIDED_SLICE, NULL, &x, 1, &attr));
}

/* Pad, mode constant: opset 2-10 with pads and value attributes; from 11
 * with inputs (pads, constant_value, and from 18 axes). */
bool oi_lower_pad(imp *im, const onnx_node *n, const op_row *row) {
  (void)n, (void)row;
  ir_node *x = oi_operand(im, oi_input(im, 0));
  if (!x) return false;
  int rank = x->type.rank;
  const onnx_attr *m = oi_attr_find(im, "mode");
  if (m && (!oi_attr_typed(im, m, ONNX_ATTR_STRING) || !str_eq(m->s, "constant")))
    return m->type == ONNX_ATTR_STRING ? UNSUPPORTED(im, "Pad mode '%s': castor pads with a constant", m->s) : false;
  int64_t pads[2 * ONNX_MAX_RANK], ax[ONNX_MAX_RANK];
  int np, na = -1;
  double value = 0;
  if (im->opset < 11) {
    const onnx_attr *a = oi_attr_find(im, "pads");
    if (!a) return FAIL(im, "Pad needs pads");
    if (!oi_attr_typed(im, a, ONNX_ATTR_INTS)) return false;
    if (a->n > 2 * ONNX_MAX_RANK) return FAIL(im, "Pad's pads has %d entries", a->n);
    np = a->n;
    memcpy(pads, a->ints, (size_t)np * sizeof *pads);
    if (!oi_attr_float(im, "value", 0, &value)) return false;
  } else {
    const onnx_tensor *t = oi_const_input(im, 1, "pads");
    if (!t || !oi_const_ints(im, t, "pads", pads, 2 * ONNX_MAX_RANK, &np)) return false;
    if (oi_has_input(im, 2)) {
      const onnx_tensor *cv = oi_const_input(im, 2, "constant_value");
      if (!cv) return false;
      if (cv->numel != 1) return FAIL(im, "Pad's constant_value must hold one element");
      value = oi_elem_f64(cv, 0);
    }
    if (oi_has_input(im, 3) && (!(t = oi_const_input(im, 3, "axes")) || !oi_const_ints(im, t, "axes", ax, ONNX_MAX_RANK, &na)))
      return false;
  }
  int naxes = na >= 0 ? na : rank;
  if (np != 2 * naxes) return FAIL(im, "Pad's pads has %d entries for %d axes (2 per axis)", np, naxes);
  ir_attr attr = {.shape = {.rank = rank}, .starts = {.n = rank}, .steps = {.n = rank}, .value = value};
  for (int r = 0; r < rank; r++) attr.shape.dims[r] = x->type.dims[r], attr.starts.v[r] = 0, attr.steps.v[r] = 1;
  for (int i = 0; i < naxes; i++) {
    int a = i;
    if (na >= 0 && !oi_norm_axis(im, ax[i], rank, "Pad axis", &a)) return false;
    int64_t b = pads[i], e = pads[i + naxes];
    if (b < 0 || e < 0) return UNSUPPORTED(im, "Pad with negative pads (cropping): castor pads only");
    if (x->type.dims[a] == IR_DIM_BATCH) {
      if (b || e) return UNSUPPORTED(im, "Pad of the batch dimension N: compile with --batch B");
      continue;
    }
    attr.shape.dims[a] = x->type.dims[a] + b + e, attr.starts.v[a] = b;
  }
  return oi_define_output(im, 0, oi_build(im, IR_OP_PAD_CONSTANT, NULL, &x, 1, &attr));
}

/* ---- element-wise ops beyond the first slice ---- */

/* A scalar float constant as an IR const node (broadcasts against anything). */
ir_node *oi_scalar_const(imp *im, const char *what, double v) {
  float *f = arena_alloc_aligned(im->g->arena, 64, 64);
  f[0] = (float)v;
  ir_type t = {.dtype = DT_F32, .rank = 1, .dims = {1}};
  const char *name = arena_printf(im->g->arena, "%s.%s", im->layer, what);
  ir_node *c = ir_build_const(im->g, oi_ir_name(im, name, "const"), &t, name, f, im->loc);
  c->layer = im->layer;
  c->frozen = true; /* an attribute's value (alpha, epsilon) or the importer's zero: no weight */
  return c;
}

/* Max, Min, Sum, Mean: variadic with broadcasting (opset 8+), folded
 * pairwise left to right; Mean divides the sum by the count. */
bool oi_lower_variadic(imp *im, const onnx_node *n, const op_row *row) {
  if (n->n_inputs < 1) return FAIL(im, "%s needs at least one input", n->op_type);
  imp_val **vals = arena_alloc(im->g->arena, (size_t)n->n_inputs * sizeof *vals);
  ir_node **srcs = arena_alloc(im->g->arena, (size_t)n->n_inputs * sizeof *srcs);
  for (int i = 0; i < n->n_inputs; i++)
    if (!(vals[i] = oi_input(im, i))) return false;
  oi_layout layout;
  ir_type cl;
  if (n->n_inputs == 1) return oi_val_alias(im, n->outputs[0], vals[0]);
  if (!oi_eltwise_operands(im, vals, n->n_inputs, srcs, &layout, &cl)) return false;
  ir_node *acc = srcs[0];
  for (int i = 1; i < n->n_inputs && acc; i++)
    acc = oi_build(im, row->ir, arena_printf(im->g->arena, "%d", i), (ir_node *[]){acc, srcs[i]}, 2, NULL);
  if (!acc) return false;
  if (str_eq(n->op_type, "Mean"))
    acc = oi_build(im, IR_OP_DIV, NULL, (ir_node *[]){acc, oi_scalar_const(im, "count", n->n_inputs)}, 2, NULL);
  return oi_define_output_as(im, 0, acc, layout, &cl);
}

bool oi_lower_reciprocal(imp *im, const onnx_node *n, const op_row *row) {
  (void)n, (void)row;
  ir_node *x = oi_operand(im, oi_input(im, 0));
  if (!x) return false;
  return oi_define_output(im, 0, oi_build(im, IR_OP_DIV, NULL, (ir_node *[]){oi_scalar_const(im, "one", 1), x}, 2, NULL));
}

bool oi_lower_alpha_unary(imp *im, const onnx_node *n, const op_row *row) {
  (void)n;
  double alpha;
  if (!oi_attr_float(im, "alpha", row->ir == IR_OP_LEAKY_RELU ? 0.01 : 1.0, &alpha)) return false;
  ir_attr attr = {.alpha = alpha};
  return eltwise1(im, row->ir, NULL, &attr);
}

/* HardSigmoid: max(0, min(1, alpha x + beta)) (ONNX's alpha 0.2; castor's
 * hard_sigmoid is Keras 3's, alpha 1/6), as mul, add and clip. */
bool oi_lower_hard_sigmoid(imp *im, const onnx_node *n, const op_row *row) {
  (void)n, (void)row;
  imp_val *v = oi_input(im, 0);
  double alpha, beta;
  ir_node *x;
  oi_layout layout;
  ir_type cl;
  if (!oi_attr_float(im, "alpha", 0.2, &alpha) || !oi_attr_float(im, "beta", 0.5, &beta) ||
      !oi_eltwise_operands(im, &v, 1, &x, &layout, &cl))
    return false;
  ir_node *y = oi_build(im, IR_OP_MUL, "scaled", (ir_node *[]){x, oi_scalar_const(im, "alpha", alpha)}, 2, NULL);
  if (!y) return false;
  y = oi_build(im, IR_OP_ADD, "shifted", (ir_node *[]){y, oi_scalar_const(im, "beta", beta)}, 2, NULL);
  ir_attr attr = {.min_value = 0, .max_value = 1};
  return y && oi_define_output_as(im, 0, oi_build(im, IR_OP_CLIP, NULL, &y, 1, &attr), layout, &cl);
}

/* Clip: opset < 11 with min and max attributes; from 11 with optional
 * inputs (constants). An absent bound is the float range's end. */
bool oi_lower_clip(imp *im, const onnx_node *n, const op_row *row) {
  (void)n, (void)row;
  double lo = -FLT_MAX, hi = FLT_MAX;
  if (im->opset < 11) {
    if (!oi_attr_float(im, "min", -FLT_MAX, &lo) || !oi_attr_float(im, "max", FLT_MAX, &hi)) return false;
  } else if ((oi_has_input(im, 1) && !oi_host_const(im, 1)) || (oi_has_input(im, 2) && !oi_host_const(im, 2))) {
    /* run-time bounds: maximum(x, min), then minimum(., max) */
    imp_val *vals[3] = {oi_input(im, 0), oi_has_input(im, 1) ? oi_input(im, 1) : NULL,
                        oi_has_input(im, 2) ? oi_input(im, 2) : NULL};
    ir_node *y = oi_operand(im, vals[0]);
    for (int k = 1; k <= 2 && y; k++) {
      if (!oi_has_input(im, k)) continue;
      ir_node *bound = oi_operand(im, vals[k]);
      if (!bound) return false;
      if (bound->type.rank > 1 || (bound->type.rank == 1 && bound->type.dims[0] != 1))
        return FAIL(im, "Clip's %s must hold one element", k == 1 ? "min" : "max");
      bool last = k == 2 || !oi_has_input(im, 2);
      y = oi_build(im, k == 1 ? IR_OP_MAXIMUM : IR_OP_MINIMUM, last ? NULL : "min", (ir_node *[]){y, bound}, 2, NULL);
    }
    return oi_define_output(im, 0, y);
  } else {
    for (int k = 1; k <= 2; k++) {
      if (!oi_has_input(im, k)) continue;
      const onnx_tensor *t = oi_const_input(im, k, k == 1 ? "min" : "max");
      if (!t) return false;
      if (t->numel != 1) return FAIL(im, "Clip's %s must hold one element", k == 1 ? "min" : "max");
      *(k == 1 ? &lo : &hi) = oi_elem_f64(t, 0);
    }
  }
  ir_attr attr = {.min_value = lo, .max_value = hi};
  return eltwise1(im, IR_OP_CLIP, NULL, &attr);
}

/* PRelu: x where x >= 0, slope * x elsewhere: relu(x) + slope * min(x, 0). */
bool oi_lower_prelu(imp *im, const onnx_node *n, const op_row *row) {
  (void)n, (void)row;
  imp_val *vals[2] = {oi_input(im, 0), oi_input(im, 1)};
  ir_node *xs[2];
  oi_layout layout;
  ir_type cl;
  if (!oi_eltwise_operands(im, vals, 2, xs, &layout, &cl)) return false;
  ir_node *x = xs[0], *slope = xs[1];
  ir_node *pos = oi_build(im, IR_OP_RELU, "pos", &x, 1, NULL);
  ir_node *neg = oi_build(im, IR_OP_MINIMUM, "neg", (ir_node *[]){x, oi_scalar_const(im, "zero", 0)}, 2, NULL);
  ir_node *sn = neg ? oi_build(im, IR_OP_MUL, "neg_scaled", (ir_node *[]){neg, slope}, 2, NULL) : NULL;
  return pos && sn && oi_define_output_as(im, 0, oi_build(im, IR_OP_ADD, NULL, (ir_node *[]){pos, sn}, 2, NULL), layout, &cl);
}

/* PRelu before opset 7: slope [C] (or [1]) per channel, axis 1 of x
 * [N, C, ..]: castor's last axis once x is held channels last. */
bool oi_lower_prelu_channels(imp *im, const onnx_node *n, const op_row *row) {
  (void)n, (void)row;
  imp_val *vx = oi_input(im, 0);
  ir_node *slope = oi_operand(im, oi_input(im, 1));
  if (!vx || !slope) return false;
  int rank;
  int64_t dims[ONNX_MAX_RANK];
  oi_onnx_dims(vx, &rank, dims);
  if (rank < 2 || slope->type.rank != 1 || (slope->type.dims[0] != 1 && slope->type.dims[0] != dims[1]))
    return FAIL(im, "PRelu (opset %lld) needs x [N, C, ..] and a slope [C] or [1]", (long long)im->opset);
  bool cl = rank >= 3 && vx->node;
  ir_node *x = cl ? oi_channels_last(im, vx) : oi_operand(im, vx);
  ir_node *pos = oi_build(im, IR_OP_RELU, "pos", &x, 1, NULL);
  ir_node *neg = oi_build(im, IR_OP_MINIMUM, "neg", (ir_node *[]){x, oi_scalar_const(im, "zero", 0)}, 2, NULL);
  ir_node *sn = neg ? oi_build(im, IR_OP_MUL, "neg_scaled", (ir_node *[]){neg, slope}, 2, NULL) : NULL;
  return pos && sn &&
         oi_define_output_as(im, 0, oi_build(im, IR_OP_ADD, NULL, (ir_node *[]){pos, sn}, 2, NULL), cl ? OI_CL : OI_PLAIN, NULL);
}

/* Where(cond, X, Y) with a constant condition (castor computes no booleans). */
bool oi_lower_where(imp *im, const onnx_node *n, const op_row *row) {
  (void)n, (void)row;
  imp_val *vc = oi_input(im, 0);
  if (!vc) return false;
  if (!vc->k || vc->node) return oi_lower_where_rt(im); /* a run-time condition (onnx_int.c) */
  for (int k = 1; k < 3; k++) {
    imp_val *vb = oi_input(im, k);
    if (!vb) return false;
    if (vb->k && !vb->node && oi_int_like(vb->k->dtype)) return oi_lower_where_rt(im); /* integer branches */
    if (vb->node && !dtype_is_float(vb->node->type.dtype)) return oi_lower_where_rt(im);
  }
  onnx_tensor *f = oi_host_tensor(im, ONNX_FLOAT, vc->k->rank, vc->k->dims);
  for (int64_t i = 0; i < f->numel; i++) ((float *)f->data)[i] = oi_elem_f64(vc->k, i) != 0;
  f->name = arena_printf(im->g->arena, "%s.cond", im->layer);
  imp_val cv = {.name = f->name, .k = f};
  ir_node *c = oi_operand(im, &cv), *a = oi_operand(im, oi_input(im, 1)), *b = oi_operand(im, oi_input(im, 2));
  return c && a && b && oi_define_output(im, 0, oi_build(im, IR_OP_SELECT, NULL, (ir_node *[]){c, a, b}, 3, NULL));
}


/* ---- general reductions: ReduceSum, ReduceMean, ReduceMax, ReduceMin ---- */

/* axes as an attribute (ReduceSum before opset 13, the others before 18)
 * or a constant input 1; none (or an empty list) reduces every axis, or,
 * with noop_with_empty_axes, is the identity. ReduceMean over exactly the
 * spatial axes of a channels-last value stays a global average pool
 * (onnx_layout.c); everything else runs on the plain (ONNX-order) value. */
bool oi_lower_reduce(imp *im, const onnx_node *n, const op_row *row) {
  imp_val *vx = oi_input(im, 0);
  if (!vx) return false;
  int64_t axes[ONNX_MAX_RANK], keep, noop;
  int na;
  if (!oi_axes_of(im, 1, axes, &na) || !oi_attr_int(im, "keepdims", 1, &keep) ||
      !oi_attr_int(im, "noop_with_empty_axes", 0, &noop))
    return false;
  bool composite = str_eq(n->op_type, "ReduceL1") || str_eq(n->op_type, "ReduceL2") ||
                   str_eq(n->op_type, "ReduceSumSquare") || str_eq(n->op_type, "ReduceLogSum");
  if (na <= 0 && noop && !composite) return oi_val_alias(im, n->outputs[0], vx);
  int rank;
  int64_t dims[ONNX_MAX_RANK];
  oi_onnx_dims(vx, &rank, dims);
  if (rank > IR_MAX_INTS) return UNSUPPORTED(im, "%s of a rank-%d tensor", n->op_type, rank);
  const char *what = arena_printf(im->g->arena, "%s axis", n->op_type);
  ir_attr a = {.keepdims = keep ? 1 : 0};
  unsigned seen = 0;
  if (na <= 0) {
    for (int r = 0; r < rank; r++) a.axes.v[a.axes.n++] = r;
    seen = (1u << rank) - 1;
  }
  for (int i = 0; i < na; i++) {
    int ax = 0;
    if (!oi_norm_axis(im, axes[i], rank, what, &ax)) return false;
    if (seen >> ax & 1) return FAIL(im, "%s: axis %lld given twice", n->op_type, (long long)axes[i]);
    seen |= 1u << ax;
    a.axes.v[a.axes.n++] = ax;
  }
  if (row->ir == IR_OP_REDUCE_MEAN && vx->node && !vx->k && vx->layout == OI_CL &&
      (rank == 3 || rank == 4) && seen == ((1u << rank) - 1) - 3u)
    return oi_lower_reduce_mean(im, n, row);
  /* ReduceL1, ReduceL2, ReduceSumSquare, ReduceLogSum: reduce_sum of
   * abs(x) or x*x, then sqrt or log */
  bool l1 = str_eq(n->op_type, "ReduceL1"), l2 = str_eq(n->op_type, "ReduceL2"),
       sq = str_eq(n->op_type, "ReduceSumSquare"), lg = str_eq(n->op_type, "ReduceLogSum");
  if ((l1 || l2 || sq || lg) && (rank == 0 || (na <= 0 && noop)))
    return UNSUPPORTED(im, "%s of a scalar or with noop_with_empty_axes", n->op_type);
  if (rank == 0) return oi_val_alias(im, n->outputs[0], vx); /* nothing to reduce */
  ir_node *x = oi_operand(im, vx);
  if (!x) return false;
  if (l1) x = oi_build(im, IR_OP_ABS, "abs", &x, 1, NULL);
  else if (l2 || sq) x = oi_build(im, IR_OP_MUL, "squared", (ir_node *[]){x, x}, 2, NULL);
  if (!x) return false;
  if (l2 || lg) {
    ir_node *y = oi_build(im, row->ir, "sum", &x, 1, &a);
    return y && oi_define_output(im, 0, oi_build(im, l2 ? IR_OP_SQRT : IR_OP_LOG, NULL, &y, 1, NULL));
  }
  return oi_define_output(im, 0, oi_build(im, row->ir, NULL, &x, 1, &a));
}

/* ---- Split: one strided_slice per output (ir_build_split) ---- */

/* x cut along `axis` (default 0) into as many pieces as the node has
 * outputs: of the sizes `split` (an attribute before opset 13, a constant
 * input after) or, without them, equal. On the plain (ONNX-order) value. */
bool oi_lower_split(imp *im, const onnx_node *n, const op_row *row) {
  (void)row;
  imp_val *vx = oi_input(im, 0);
  if (!vx) return false;
  int64_t axis, sizes[64];
  if (!oi_attr_int(im, "axis", 0, &axis)) return false;
  int ns = -1, no = n->n_outputs;
  if (no < 1 || no > 64) return UNSUPPORTED(im, "Split into %d outputs (castor splits into 1 to 64)", no);
  const onnx_attr *sa = oi_attr_find(im, "split");
  if (sa) {
    if (!oi_attr_typed(im, sa, ONNX_ATTR_INTS)) return false;
    if (sa->n > 64) return FAIL(im, "Split: split has %d sizes", sa->n);
    for (int i = 0; i < sa->n; i++) sizes[i] = sa->ints[i];
    ns = sa->n;
  } else if (oi_has_input(im, 1)) {
    const onnx_tensor *t = oi_const_input(im, 1, "split");
    if (!t || !oi_const_ints(im, t, "split", sizes, 64, &ns)) return false;
  }
  if (ns >= 0 && ns != no)
    return FAIL(im, "Split: %d sizes in split for %d outputs", ns, no);
  int64_t num = 0; /* opset 18-: num_outputs pieces of ceil(dim / num_outputs), the last the rest */
  if (!oi_attr_int(im, "num_outputs", 0, &num)) return false;
  if (oi_attr_find(im, "num_outputs") && ns >= 0) return FAIL(im, "Split: both num_outputs and split given");
  if (oi_attr_find(im, "num_outputs") && num != no)
    return FAIL(im, "Split: num_outputs is %lld but the node has %d outputs", (long long)num, no);
  if (im->opset >= 18 && ns < 0 && !oi_attr_find(im, "num_outputs"))
    return FAIL(im, "Split (opset %lld) needs num_outputs or split", (long long)im->opset);
  ir_node *x = oi_operand(im, vx);
  if (!x) return false;
  int a = 0;
  if (!oi_norm_axis(im, axis, x->type.rank, "Split axis", &a)) return false;
  if (num > 0 && x->type.dims[a] != IR_DIM_BATCH && x->type.dims[a] % num != 0) {
    int64_t chunk = (x->type.dims[a] + num - 1) / num;
    if (chunk * (num - 1) >= x->type.dims[a])
      return FAIL(im, "Split: %lld elements along axis %d into %lld pieces of %lld leaves the last empty",
                  (long long)x->type.dims[a], a, (long long)num, (long long)chunk);
    for (int i = 0; i < no; i++) sizes[i] = i < no - 1 ? chunk : x->type.dims[a] - chunk * (num - 1);
    ns = no;
  }
  char err[256];
  if (!ir_split_check(&x->type, a, no, ns >= 0 ? sizes : NULL, err, sizeof err))
    return FAIL(im, "Split: %s", err);
  ir_node *out[64];
  ir_build_split(im->g, oi_ir_name(im, im->layer, "split"), x, a, no, ns >= 0 ? sizes : NULL, im->loc, out);
  for (int i = 0; i < no; i++) {
    out[i]->layer = im->layer;
    if (!oi_define_output(im, i, out[i])) return false;
  }
  return true;
}

/* ---- transformers: Gelu (opset 20), Split by num_outputs (18-) ---- */

/* Gelu: approximate "none" is IR gelu (erf form); "tanh" is
 * x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) from IR mul, add, tanh. */
bool oi_lower_gelu(imp *im, const onnx_node *n, const op_row *row) {
  (void)n, (void)row;
  const onnx_attr *ap = oi_attr_find(im, "approximate");
  if (ap && !oi_attr_typed(im, ap, ONNX_ATTR_STRING)) return false;
  if (!ap || str_eq(ap->s, "none")) return eltwise1(im, IR_OP_GELU, NULL, NULL);
  if (!str_eq(ap->s, "tanh")) return FAIL(im, "Gelu: approximate is '%s'; ONNX has 'none' and 'tanh'", ap->s);
  imp_val *v = oi_input(im, 0);
  ir_node *x;
  oi_layout layout;
  ir_type cl;
  if (!oi_eltwise_operands(im, &v, 1, &x, &layout, &cl)) return false;
  ir_node *x3 = oi_build(im, IR_OP_MUL, "x2", (ir_node *[]){x, x}, 2, NULL);
  if (x3) x3 = oi_build(im, IR_OP_MUL, "x3", (ir_node *[]){x3, x}, 2, NULL);
  if (x3) x3 = oi_build(im, IR_OP_MUL, "cubic", (ir_node *[]){x3, oi_scalar_const(im, "c", 0.044715)}, 2, NULL);
  ir_node *t = x3 ? oi_build(im, IR_OP_ADD, "inner", (ir_node *[]){x, x3}, 2, NULL) : NULL;
  if (t) t = oi_build(im, IR_OP_MUL, "scaled", (ir_node *[]){t, oi_scalar_const(im, "k", 0.7978845608028654)}, 2, NULL);
  if (t) t = oi_build(im, IR_OP_TANH, "tanh", &t, 1, NULL);
  if (t) t = oi_build(im, IR_OP_ADD, "one_plus", (ir_node *[]){t, oi_scalar_const(im, "one", 1)}, 2, NULL);
  if (t) t = oi_build(im, IR_OP_MUL, "half_x", (ir_node *[]){t, x}, 2, NULL);
  return t && oi_define_output_as(im, 0, oi_build(im, IR_OP_MUL, NULL, (ir_node *[]){t, oi_scalar_const(im, "half", 0.5)}, 2, NULL),
                                  layout, &cl);
}

/* ---- activations from element-wise ops: Selu, Celu, Softsign, HardSwish ---- */

/* Selu: gamma elu(x, alpha); Celu: alpha elu(x / alpha, 1); Softsign:
 * x / (1 + |x|); HardSwish: x clip(x / 6 + 1/2, 0, 1). */
bool oi_lower_activation(imp *im, const onnx_node *n, const op_row *row) {
  (void)row;
  imp_val *v = oi_input(im, 0);
  ir_node *x, *y = NULL;
  oi_layout layout;
  ir_type cl;
  if (!oi_eltwise_operands(im, &v, 1, &x, &layout, &cl)) return false;
  if (str_eq(n->op_type, "Selu")) {
    double alpha, gamma;
    if (!oi_attr_float(im, "alpha", 1.67326319217681884765625, &alpha) ||
        !oi_attr_float(im, "gamma", 1.05070102214813232421875, &gamma))
      return false;
    ir_attr a = {.alpha = alpha};
    y = oi_build(im, IR_OP_ELU, "elu", &x, 1, &a);
    if (y) y = oi_build(im, IR_OP_MUL, NULL, (ir_node *[]){y, oi_scalar_const(im, "gamma", gamma)}, 2, NULL);
  } else if (str_eq(n->op_type, "Celu")) {
    double alpha;
    if (!oi_attr_float(im, "alpha", 1.0, &alpha)) return false;
    if (alpha == 0) return FAIL(im, "Celu with alpha 0");
    ir_attr a = {.alpha = 1.0};
    y = oi_build(im, IR_OP_DIV, "scaled", (ir_node *[]){x, oi_scalar_const(im, "alpha", alpha)}, 2, NULL);
    if (y) y = oi_build(im, IR_OP_ELU, "elu", &y, 1, &a);
    if (y) y = oi_build(im, IR_OP_MUL, NULL, (ir_node *[]){y, oi_scalar_const(im, "alpha_out", alpha)}, 2, NULL);
  } else if (str_eq(n->op_type, "Softsign")) {
    y = oi_build(im, IR_OP_ABS, "abs", &x, 1, NULL);
    if (y) y = oi_build(im, IR_OP_ADD, "one_plus", (ir_node *[]){y, oi_scalar_const(im, "one", 1)}, 2, NULL);
    if (y) y = oi_build(im, IR_OP_DIV, NULL, (ir_node *[]){x, y}, 2, NULL);
  } else { /* HardSwish */
    ir_attr c = {.min_value = 0, .max_value = 1};
    y = oi_build(im, IR_OP_MUL, "scaled", (ir_node *[]){x, oi_scalar_const(im, "sixth", 1.0 / 6)}, 2, NULL);
    if (y) y = oi_build(im, IR_OP_ADD, "shifted", (ir_node *[]){y, oi_scalar_const(im, "half", 0.5)}, 2, NULL);
    if (y) y = oi_build(im, IR_OP_CLIP, "gate", &y, 1, &c);
    if (y) y = oi_build(im, IR_OP_MUL, NULL, (ir_node *[]){x, y}, 2, NULL);
  }
  return y && oi_define_output_as(im, 0, y, layout, &cl);
}
