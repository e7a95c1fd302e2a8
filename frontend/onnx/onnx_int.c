/* SPDX-License-Identifier: Apache-2.0 */
/*
 * onnx_int.c: integer and boolean tensors at run time (issue 36): the
 * lowerings of the ops that compare, combine masks and look values up by a
 * run-time or constant index, once the constant evaluator (onnx_fold.c) has
 * folded the shape arithmetic. Token ids and attention masks (int64, int32,
 * bool graph inputs) are IR values of those dtypes; castor's i1 is ONNX's
 * bool. A float operand of a comparison is read in f32 (autocast never
 * retypes an integer or boolean result).
 *
 * In: the node being imported (im->node), its inputs defined. Out: its
 * outputs defined as IR values, or one located error.
 */
#include <string.h>

#include "frontend/onnx/internal.h"

/* ONNX's element type of an IR dtype castor computes in, and back. */
static bool ir_dtype_of_onnx(int onnx, ir_dtype *out) {
  switch (onnx) {
  case ONNX_FLOAT: *out = DT_F32; return true;
  case ONNX_INT64: *out = DT_I64; return true;
  case ONNX_INT32: *out = DT_I32; return true;
  case ONNX_BOOL: *out = DT_I1; return true;
  default: return false;
  }
}

/* The IR node of value v (a run-time value, or a host constant made an IR
 * constant in its own dtype: int64, int32 and bool keep theirs, other
 * integers widen to int64). */
static ir_node *operand(imp *im, imp_val *v) {
  if (!v) return NULL;
  if (v->node || !v->k || !oi_int_like(v->k->dtype)) return oi_operand(im, v);
  ir_type t;
  if (!oi_dims_of(im, v->k, &t)) return NULL;
  if (t.rank == 0) t.rank = 1, t.dims[0] = 1; /* a scalar constant: one element */
  ir_dtype dt = v->k->dtype == ONNX_INT32 ? DT_I32 : v->k->dtype == ONNX_BOOL ? DT_I1 : DT_I64;
  t.dtype = dt;
  size_t n = (size_t)v->k->numel, es = dtype_size(dt);
  void *data = arena_alloc_aligned(im->g->arena, n ? n * es : es, 64);
  if (dt == DT_I64)
    for (size_t i = 0; i < n; i++) ((int64_t *)data)[i] = oi_elem_i64(v->k, (int64_t)i);
  else if (n)
    memcpy(data, v->k->data, n * es);
  return v->node = oi_host_node(im, v, v->name, &t, data);
}

ir_node *oi_int_operand(imp *im, imp_val *v) { return operand(im, v); }

static const char *type_text(imp *im, const ir_node *x) {
  return arena_printf(im->g->arena, "%s", dtype_name(x->type.dtype));
}

/* Equal, Less, Greater, LessOrEqual, GreaterOrEqual: Greater and
 * GreaterOrEqual are less and less_equal with the operands swapped. */
bool oi_lower_compare(imp *im, const onnx_node *n, const op_row *row) {
  ir_node *a = operand(im, oi_input(im, 0)), *b = operand(im, oi_input(im, 1));
  if (!a || !b) return false;
  if (a->type.dtype != b->type.dtype)
    return FAIL(im, "%s of %s and %s: ONNX compares tensors of one type", n->op_type, type_text(im, a), type_text(im, b));
  bool swap = str_eq(n->op_type, "Greater") || str_eq(n->op_type, "GreaterOrEqual");
  ir_node *ab[2] = {swap ? b : a, swap ? a : b};
  return oi_define_output(im, 0, oi_build(im, row->ir, NULL, ab, 2, NULL));
}

/* And, Or, Xor (two bool operands), Not (one). */
bool oi_lower_logic(imp *im, const onnx_node *n, const op_row *row) {
  int k = row->ir == IR_OP_LOGICAL_NOT ? 1 : 2;
  ir_node *ab[2] = {NULL, NULL};
  for (int i = 0; i < k; i++) {
    if (!(ab[i] = operand(im, oi_input(im, i)))) return false;
    if (ab[i]->type.dtype != DT_I1)
      return FAIL(im, "%s of a %s tensor: ONNX's %s takes bool tensors", n->op_type, type_text(im, ab[i]), n->op_type);
  }
  return oi_define_output(im, 0, oi_build(im, row->ir, NULL, ab, k, NULL));
}

/* IsNaN of a float value. */
bool oi_lower_is_nan(imp *im, const onnx_node *n, const op_row *row) {
  ir_node *x = operand(im, oi_input(im, 0));
  if (!x) return false;
  if (!dtype_is_float(x->type.dtype)) return FAIL(im, "%s of a %s tensor", n->op_type, type_text(im, x));
  return oi_define_output(im, 0, oi_build(im, row->ir, NULL, &x, 1, NULL));
}

/* Cast at run time: among float32, int64, int32 and bool (castor's graphs
 * are float32 until the policy retypes them). */
bool oi_lower_cast_int(imp *im, int64_t to) {
  ir_dtype dt;
  ir_node *x = operand(im, oi_input(im, 0));
  if (!x) return false;
  if (!ir_dtype_of_onnx((int)to, &dt))
    return UNSUPPORTED(im, "Cast to %s: castor computes in float32 (its policy chooses 16-bit types), int64, "
                           "int32 and bool", onnx_dtype_name((int)to));
  if (x->type.dtype == dt) return oi_define_output(im, 0, x);
  ir_attr a = {.to = dt};
  return oi_define_output(im, 0, oi_build(im, IR_OP_CAST, NULL, &x, 1, &a));
}

/* x[..., i, ...] of a run-time x along axis ax at one constant index i
 * (already in range): a strided slice of width 1, then without the axis. */
static ir_node *take_one(imp *im, ir_node *x, int ax, int64_t i, bool keep) {
  int rank = x->type.rank;
  ir_attr s = {.starts = {.n = rank}, .ends = {.n = rank}, .steps = {.n = rank}};
  for (int r = 0; r < rank; r++) {
    s.starts.v[r] = 0, s.steps.v[r] = 1;
    s.ends.v[r] = x->type.dims[r] == IR_DIM_BATCH ? 0 : x->type.dims[r];
  }
  s.starts.v[ax] = i, s.ends.v[ax] = i + 1;
  ir_node *y = oi_build(im, IR_OP_STRIDED_SLICE, "take", &x, 1, &s);
  if (!y || keep) return y;
  ir_attr a = {.shape = {.rank = rank - 1}};
  for (int r = 0, o = 0; r < rank; r++)
    if (r != ax) a.shape.dims[o++] = x->type.dims[r];
  return oi_build(im, IR_OP_RESHAPE, NULL, &y, 1, &a);
}

enum { TAKE_MAX = 64 }; /* constant indices of a run-time value taken as slices */

/* Gather at run time: the data a constant table (an embedding) or a
 * run-time value without the batch, the indices run-time or constant
 * (IR gather: negative indices count from the end); or the data a run-time
 * value with the batch and the indices a constant (x[:, 0], a few picked
 * rows): slices joined by a concat. */
bool oi_lower_gather(imp *im, const onnx_node *n, const op_row *row) {
  (void)n, (void)row;
  int64_t axis;
  if (!oi_attr_int(im, "axis", 0, &axis)) return false;
  imp_val *vd = oi_input(im, 0), *vi = oi_input(im, 1);
  if (!vd || !vi) return false;
  ir_node *x = operand(im, vd);
  if (!x) return false;
  int ax;
  if (!oi_norm_axis(im, axis, x->type.rank, "Gather axis", &ax)) return false;
  const onnx_tensor *k = oi_host_const(im, 1);
  if (k && !oi_int_like(k->dtype)) return FAIL(im, "Gather's indices are %s; ONNX indexes by int32 or int64", onnx_dtype_name(k->dtype));
  if (ir_type_is_batched(&x->type) && k) {
    if (ax == 0) return UNSUPPORTED(im, "Gather along the batch dimension N: compile with --batch B");
    int64_t d = x->type.dims[ax];
    if (k->numel > TAKE_MAX)
      return UNSUPPORTED(im, "Gather of %lld constant indices from a value with the batch N (at most %d): compile "
                             "with --batch B", (long long)k->numel, TAKE_MAX);
    ir_node *parts[TAKE_MAX];
    for (int64_t i = 0; i < k->numel; i++) {
      int64_t v = oi_elem_i64(k, i);
      if (v < -d || v >= d)
        return FAIL(im, "Gather index %lld is outside [-%lld, %lld) (axis %d of the data)", (long long)v, (long long)d,
                    (long long)d, ax);
      if (!(parts[i] = take_one(im, x, ax, v < 0 ? v + d : v, k->rank > 0))) return false;
    }
    if (k->rank == 0) return oi_define_output(im, 0, parts[0]);
    ir_node *y = parts[0];
    if (k->numel > 1) {
      ir_attr c = {.axis = ax};
      if (k->numel > IR_MAX_SRCS)
        return UNSUPPORTED(im, "Gather of %lld constant indices from a value with the batch N: compile with --batch B",
                           (long long)k->numel);
      if (!(y = oi_build(im, IR_OP_CONCAT, "join", parts, (int)k->numel, &c))) return false;
    }
    if (k->rank == 1) return oi_define_output(im, 0, y);
    ir_attr a = {.shape = {.rank = 0}};
    for (int r = 0; r < ax; r++) a.shape.dims[a.shape.rank++] = x->type.dims[r];
    for (int r = 0; r < k->rank; r++) a.shape.dims[a.shape.rank++] = k->dims[r];
    for (int r = ax + 1; r < x->type.rank; r++) a.shape.dims[a.shape.rank++] = x->type.dims[r];
    if (a.shape.rank > IR_MAX_RANK) return UNSUPPORTED(im, "Gather's result has rank %d", a.shape.rank);
    return oi_define_output(im, 0, oi_build(im, IR_OP_RESHAPE, NULL, &y, 1, &a));
  }
  ir_node *b = operand(im, vi);
  if (!b) return false;
  if (b->type.dtype != DT_I64 && b->type.dtype != DT_I32)
    return FAIL(im, "Gather's indices are %s; ONNX indexes by int32 or int64", type_text(im, b));
  if (k) { /* constant indices into a table without the batch: checked here */
    int64_t d = x->type.dims[ax];
    for (int64_t i = 0; i < k->numel; i++) {
      int64_t v = oi_elem_i64(k, i);
      if (v < -d || v >= d)
        return FAIL(im, "Gather index %lld is outside [-%lld, %lld) (axis %d of the data)", (long long)v, (long long)d,
                    (long long)d, ax);
    }
  }
  ir_attr g = {.axis = ax};
  ir_node *y = oi_build(im, IR_OP_GATHER, NULL, (ir_node *[]){x, b}, 2, &g);
  if (!y) return false;
  if (k && k->rank == 0) { /* ONNX: a scalar index drops the axis */
    ir_attr a = {.shape = {.rank = 0}};
    for (int r = 0; r < x->type.rank; r++)
      if (r != ax) a.shape.dims[a.shape.rank++] = x->type.dims[r];
    y = oi_build(im, IR_OP_RESHAPE, "scalar", &y, 1, &a);
  }
  return oi_define_output(im, 0, y);
}

/* GatherND (batch_dims 0) of a run-time value without the batch by
 * constant indices: the indices made flat offsets at import (checked
 * against the data's dimensions, negatives from the end), then one gather
 * along the flattened leading dimensions. */
bool oi_lower_gather_nd(imp *im, const onnx_node *n, const op_row *row) {
  (void)n, (void)row;
  int64_t bd;
  if (!oi_attr_int(im, "batch_dims", 0, &bd)) return false;
  if (bd != 0) return UNSUPPORTED(im, "GatherND with batch_dims=%lld at run time (castor's: 0)", (long long)bd);
  ir_node *x = operand(im, oi_input(im, 0));
  if (!x) return false;
  const onnx_tensor *k = oi_host_const(im, 1);
  if (!k) return UNSUPPORTED(im, "GatherND with run-time indices: castor gathers by constant indices here");
  if (!oi_int_like(k->dtype) || k->dtype == ONNX_BOOL) return FAIL(im, "GatherND's indices are %s", onnx_dtype_name(k->dtype));
  if (ir_type_is_batched(&x->type))
    return UNSUPPORTED(im, "GatherND of a value with the batch dimension N: compile with --batch B");
  if (k->rank < 1) return FAIL(im, "GatherND's indices must have rank >= 1");
  int64_t m = k->dims[k->rank - 1];
  if (m < 1 || m > x->type.rank) return FAIL(im, "GatherND's index tuples have %lld entries; the data has rank %d", (long long)m, x->type.rank);
  int64_t lead = 1, count = k->numel / m;
  for (int r = 0; r < m; r++) lead *= x->type.dims[r];
  int out_rank = k->rank - 1 + x->type.rank - (int)m;
  if (out_rank > IR_MAX_RANK || out_rank < 1) return UNSUPPORTED(im, "GatherND's result has rank %d", out_rank);
  if (count > OI_FOLD_MAX) return UNSUPPORTED(im, "GatherND of %lld index tuples", (long long)count);
  ir_type it = {DT_I64, 1, {count}};
  int64_t *flat = arena_alloc_aligned(im->g->arena, (size_t)(count ? count : 1) * sizeof *flat, 64);
  for (int64_t t = 0; t < count; t++) {
    int64_t off = 0;
    for (int r = 0; r < m; r++) {
      int64_t d = x->type.dims[r], v = oi_elem_i64(k, t * m + r);
      if (v < -d || v >= d)
        return FAIL(im, "GatherND index %lld is outside [-%lld, %lld) (dimension %d of the data)", (long long)v,
                    (long long)d, (long long)d, r);
      off = off * d + (v < 0 ? v + d : v);
    }
    flat[t] = off;
  }
  ir_attr a = {.shape = {.rank = 1 + x->type.rank - (int)m}};
  a.shape.dims[0] = lead;
  for (int r = (int)m; r < x->type.rank; r++) a.shape.dims[1 + r - m] = x->type.dims[r];
  ir_node *xf = x;
  if (m > 1 && !(xf = oi_build(im, IR_OP_RESHAPE, "rows", &x, 1, &a))) return false;
  ir_node *idx = ir_build_const(im->g, arena_printf(im->g->arena, "%s.index", im->layer), &it,
                                arena_printf(im->g->arena, "%s.index", im->layer), flat, im->loc);
  idx->layer = im->layer;
  idx->frozen = true;
  ir_node *y = oi_build(im, IR_OP_GATHER, NULL, (ir_node *[]){xf, idx}, 2, &(ir_attr){.axis = 0});
  if (!y) return false;
  ir_attr o = {.shape = {.rank = out_rank}};
  for (int r = 0; r < k->rank - 1; r++) o.shape.dims[r] = k->dims[r];
  for (int r = (int)m; r < x->type.rank; r++) o.shape.dims[k->rank - 1 + r - m] = x->type.dims[r];
  return oi_define_output(im, 0, oi_build(im, IR_OP_RESHAPE, "shape", &y, 1, &o));
}

/* Where with a run-time condition (bool) or run-time branches: select;
 * the branches of one dtype (float, or integers). */
bool oi_lower_where_rt(imp *im) {
  ir_node *c = operand(im, oi_input(im, 0)), *a = operand(im, oi_input(im, 1)), *b = operand(im, oi_input(im, 2));
  if (!c || !a || !b) return false;
  if (a->type.dtype != b->type.dtype)
    return FAIL(im, "Where of %s and %s: ONNX's branches have one type", type_text(im, a), type_text(im, b));
  return oi_define_output(im, 0, oi_build(im, IR_OP_SELECT, NULL, (ir_node *[]){c, a, b}, 3, NULL));
}

/* The operands of the node's element-wise float op (oi_eltwise_operands'
 * integer path): integers only where the op computes on them (Add, Sub,
 * Mul, Max, Min: IR_OPF_INTEGERS) and all of one type; anything else is
 * unsupported (castor computes that op on floats), not a model error. */
bool oi_check_numeric(imp *im, ir_node *const *srcs, int n) {
  const char *op = im->node->op_type;
  bool same = true;
  for (int i = 1; i < n; i++) same &= srcs[i]->type.dtype == srcs[0]->type.dtype;
  ir_dtype dt = srcs[0]->type.dtype;
  ir_op ir = im->row ? im->row->ir : IR_OP_COUNT;
  if (same && (dt == DT_I32 || dt == DT_I64) && ir != IR_OP_COUNT && (ir_op_flags(ir) & IR_OPF_INTEGERS) &&
      !str_eq(op, "Mean"))
    return true;
  str_buf b;
  str_buf_init(&b);
  for (int i = 0; i < n; i++) str_buf_printf(&b, "%s%s", i ? ", " : "", dtype_name(srcs[i]->type.dtype));
  const char *types = arena_printf(im->g->arena, "%s", str_buf_cstr(&b));
  str_buf_fini(&b);
  return UNSUPPORTED(im, "%s of %s tensors at run time: castor computes it on float tensors (on int64 and int32: "
                         "Add, Sub, Mul, Max, Min of one type)", op, types);
}
