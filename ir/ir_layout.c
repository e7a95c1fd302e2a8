/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ir_layout.c: the shape rules of the layout ops (general tensors):
 * reshape, transpose, concat, strided_slice, pad_constant. ir_infer_type
 * calls ir_infer_layout for their type rules; the index maps
 * (codegen/kernel/cg_index_map.c), the gradient rules (passes/grad.c) and
 * the reference interpreter read the same normalized bounds through
 * ir_strided_slice_bounds and ir_concat_axis, so a bound is decided once.
 *
 * The batch N is the one symbolic dimension and always dimension 0: a
 * layout op keeps it there or the graph is rejected, with a message that
 * names both shapes and points at --batch (static shapes), which binds N.
 */
#include <stdio.h>

#include "ir/ir.h"

#define FAIL(...) (snprintf(err, errlen, __VA_ARGS__), false)

static void type_str(const ir_type *t, char *buf, size_t n) {
  str_buf b;
  str_buf_init(&b);
  ir_type_print(t, &b);
  snprintf(buf, n, "%s", str_buf_cstr(&b));
  str_buf_fini(&b);
}

/* "[N,3,4]": a shape attribute as the text form writes it. */
static void shape_str(const ir_shape *s, char *buf, size_t n) {
  str_buf b;
  str_buf_init(&b);
  str_buf_putc(&b, '[');
  for (int r = 0; r < s->rank; r++) {
    if (r) str_buf_putc(&b, ',');
    if (s->dims[r] == IR_DIM_BATCH) str_buf_putc(&b, 'N');
    else str_buf_printf(&b, "%lld", (long long)s->dims[r]);
  }
  str_buf_putc(&b, ']');
  snprintf(buf, n, "%s", str_buf_cstr(&b));
  str_buf_fini(&b);
}

static void ints_str(const ir_attr_INTS *v, char *buf, size_t n) {
  str_buf b;
  str_buf_init(&b);
  str_buf_putc(&b, '[');
  for (int i = 0; i < v->n && i < IR_MAX_INTS; i++) str_buf_printf(&b, "%s%lld", i ? "," : "", (long long)v->v[i]);
  str_buf_putc(&b, ']');
  snprintf(buf, n, "%s", str_buf_cstr(&b));
  str_buf_fini(&b);
}

static const char batch_hint[] =
    "only the batch N is symbolic and it stays dimension 0; compile with --batch B to bind N (static shapes)";

static bool infer_reshape(const ir_type *x, const ir_shape *s, ir_type *out, char *err, size_t errlen) {
  char sx[96], ss[96];
  type_str(x, sx, sizeof sx), shape_str(s, ss, sizeof ss);
  if (s->rank < 0 || s->rank > IR_MAX_RANK) return FAIL("reshape of %s to rank %d: rank is 0..%d", sx, s->rank, IR_MAX_RANK);
  bool xb = ir_type_is_batched(x), sb = s->rank > 0 && s->dims[0] == IR_DIM_BATCH;
  if (xb != sb)
    return FAIL("reshape of %s to %s would move the batch dimension N %s; %s", sx, ss,
                xb ? "out of dimension 0" : "into a tensor that has none", batch_hint);
  int64_t have = 1, want = 1;
  if (!ir_type_inner_numel(x, &have)) return FAIL("reshape of %s: bad operand shape", sx);
  for (int r = sb ? 1 : 0; r < s->rank; r++) {
    if (s->dims[r] < 0) return FAIL("reshape of %s to %s: dimension %d must be >= 0 or N (first)", sx, ss, r);
    if (!size_mul_ok(want, s->dims[r], &want)) return FAIL("reshape of %s to %s: too many elements", sx, ss);
  }
  if (have != want)
    return FAIL("reshape of %s to %s: %lld elements%s cannot become %lld", sx, ss, (long long)have,
                xb ? " per batch row" : "", (long long)want);
  *out = (ir_type){x->dtype, s->rank, {0}};
  for (int r = 0; r < s->rank; r++) out->dims[r] = s->dims[r];
  return true;
}

static bool infer_transpose(const ir_type *x, const ir_attr_INTS *perm, ir_type *out, char *err, size_t errlen) {
  char sx[96], sp[96];
  type_str(x, sx, sizeof sx), ints_str(perm, sp, sizeof sp);
  if (perm->n != x->rank) return FAIL("transpose of %s: perm %s must list %d dimensions", sx, sp, x->rank);
  bool seen[IR_MAX_RANK] = {0};
  for (int r = 0; r < perm->n; r++) {
    int64_t p = perm->v[r];
    if (p < 0 || p >= x->rank || seen[p])
      return FAIL("transpose of %s: perm %s is not a permutation of 0..%d", sx, sp, x->rank - 1);
    seen[p] = true;
  }
  if (ir_type_is_batched(x) && perm->v[0] != 0)
    return FAIL("transpose of %s by perm %s would move the batch dimension N out of dimension 0; %s", sx, sp,
                batch_hint);
  *out = (ir_type){x->dtype, x->rank, {0}};
  for (int r = 0; r < x->rank; r++) out->dims[r] = x->dims[perm->v[r]];
  return true;
}

int ir_concat_axis(const ir_type *x, int64_t axis) {
  int64_t a = axis < 0 ? axis + x->rank : axis;
  return a >= 0 && a < x->rank ? (int)a : -1;
}

static bool infer_concat(ir_node *const *srcs, int n, int64_t axis, ir_type *out, char *err, size_t errlen) {
  const ir_type *x = &srcs[0]->type;
  char sx[96], sy[96];
  type_str(x, sx, sizeof sx);
  int a = ir_concat_axis(x, axis);
  if (a < 0) return FAIL("concat axis %lld is not a dimension of %s", (long long)axis, sx);
  if (a == 0 && ir_type_is_batched(x))
    return FAIL("concat along the batch dimension N of %s; %s", sx, batch_hint);
  *out = *x;
  for (int s = 1; s < n; s++) {
    const ir_type *y = &srcs[s]->type;
    type_str(y, sy, sizeof sy);
    bool ok = y->dtype == x->dtype && y->rank == x->rank;
    for (int r = 0; ok && r < x->rank; r++) ok = r == a || y->dims[r] == x->dims[r];
    if (!ok)
      return FAIL("concat along axis %d: operand %d %s does not match operand 1 %s (one dtype, one rank, equal "
                  "dimensions but the axis)", a, s + 1, sy, sx);
    if (!size_add_ok(out->dims[a], y->dims[a], &out->dims[a])) return FAIL("concat: dimension too large");
  }
  return true;
}

bool ir_strided_slice_bounds(const ir_type *x, const ir_attr *attr, int64_t *starts, int64_t *counts, char *err,
                             size_t errlen) {
  char sx[96], s1[96], s2[96], s3[96];
  type_str(x, sx, sizeof sx);
  ints_str(&attr->starts, s1, sizeof s1), ints_str(&attr->ends, s2, sizeof s2), ints_str(&attr->steps, s3, sizeof s3);
  if (attr->starts.n != x->rank || attr->ends.n != x->rank || attr->steps.n != x->rank)
    return FAIL("strided_slice of %s: starts %s, ends %s and steps %s must each list %d dimensions", sx, s1, s2, s3,
                x->rank);
  for (int r = 0; r < x->rank; r++) {
    int64_t st = attr->starts.v[r], en = attr->ends.v[r], step = attr->steps.v[r], d = x->dims[r];
    if (d == IR_DIM_BATCH) {
      if (st != 0 || en != 0 || step != 1)
        return FAIL("strided_slice of %s: the batch dimension N is taken whole (starts 0, ends 0, steps 1), got "
                    "starts %s, ends %s, steps %s; %s", sx, s1, s2, s3, batch_hint);
      starts[r] = 0, counts[r] = IR_DIM_BATCH;
      continue;
    }
    if (step < 1) return FAIL("strided_slice of %s: steps %s: dimension %d's step must be >= 1", sx, s3, r);
    if (st < 0) st += d;
    if (en < 0) en += d;
    st = st < 0 ? 0 : st > d ? d : st;
    en = en < 0 ? 0 : en > d ? d : en;
    /* en <= st: the dimension is empty (NumPy's and ONNX's slice of nothing) */
    starts[r] = st, counts[r] = en <= st ? 0 : (en - st + step - 1) / step;
  }
  return true;
}

static bool infer_strided_slice(const ir_type *x, const ir_attr *attr, ir_type *out, char *err, size_t errlen) {
  int64_t starts[IR_MAX_RANK], counts[IR_MAX_RANK];
  if (!ir_strided_slice_bounds(x, attr, starts, counts, err, errlen)) return false;
  *out = (ir_type){x->dtype, x->rank, {0}};
  for (int r = 0; r < x->rank; r++) out->dims[r] = counts[r];
  return true;
}

static bool infer_pad_constant(const ir_type *x, const ir_attr *attr, ir_type *out, char *err, size_t errlen) {
  char sx[96], ss[96], s1[96], s3[96];
  type_str(x, sx, sizeof sx), shape_str(&attr->shape, ss, sizeof ss);
  ints_str(&attr->starts, s1, sizeof s1), ints_str(&attr->steps, s3, sizeof s3);
  if (attr->shape.rank != x->rank || attr->starts.n != x->rank || attr->steps.n != x->rank)
    return FAIL("pad_constant of %s to %s: shape, starts %s and steps %s must each have %d dimensions", sx, ss, s1,
                s3, x->rank);
  if (!(attr->value > -1e300 && attr->value < 1e300))
    return FAIL("pad_constant of %s: value must be finite, got %g", sx, attr->value);
  for (int r = 0; r < x->rank; r++) {
    int64_t d = x->dims[r], want = attr->shape.dims[r], st = attr->starts.v[r], step = attr->steps.v[r];
    if ((d == IR_DIM_BATCH) != (want == IR_DIM_BATCH))
      return FAIL("pad_constant of %s to %s would move the batch dimension N; %s", sx, ss, batch_hint);
    if (d == IR_DIM_BATCH) {
      if (st != 0 || step != 1)
        return FAIL("pad_constant of %s: the batch dimension N is kept whole (starts 0, steps 1), got starts %s, "
                    "steps %s", sx, s1, s3);
      continue;
    }
    if (st < 0 || step < 1 || want < 0 || (d > 0 && st + (d - 1) * step >= want) || st > want)
      return FAIL("pad_constant of %s to %s: starts %s and steps %s place dimension %d outside the result", sx, ss,
                  s1, s3, r);
  }
  *out = (ir_type){x->dtype, x->rank, {0}};
  for (int r = 0; r < x->rank; r++) out->dims[r] = attr->shape.dims[r];
  return true;
}

bool ir_gather_type(const ir_type *a, const ir_type *b, int64_t axis, ir_type *out, int *out_axis, char *err,
                    size_t errlen) {
  char sa[96], sb[96];
  type_str(a, sa, sizeof sa), type_str(b, sb, sizeof sb);
  int ax = ir_concat_axis(a, axis);
  if (ax < 0) return FAIL("gather axis %lld is not a dimension of %s", (long long)axis, sa);
  if (ir_type_is_batched(a))
    return FAIL("gather from %s: the table must not have the batch dimension N; %s", sa, batch_hint);
  if (b->dtype != DT_I32 && b->dtype != DT_I64) return FAIL("gather from %s needs int32 or int64 indices, got %s", sa, sb);
  if (ir_type_is_batched(b) && ax > 0)
    return FAIL("gather from %s along axis %d by %s would put the batch dimension N at dimension %d; %s", sa, ax, sb,
                ax, batch_hint);
  if (a->rank - 1 + b->rank > IR_MAX_RANK)
    return FAIL("gather from %s by %s: the result's rank would exceed %d", sa, sb, IR_MAX_RANK);
  *out = (ir_type){a->dtype, 0, {0}};
  for (int r = 0; r < ax; r++) out->dims[out->rank++] = a->dims[r];
  for (int r = 0; r < b->rank; r++) out->dims[out->rank++] = b->dims[r];
  for (int r = ax + 1; r < a->rank; r++) out->dims[out->rank++] = a->dims[r];
  *out_axis = ax;
  return true;
}

static bool infer_gather_grad(ir_node *const *srcs, const ir_attr *attr, ir_type *out, char *err, size_t errlen) {
  const ir_type *dy = &srcs[0]->type, *b = &srcs[1]->type;
  ir_type table = {dy->dtype, attr->shape.rank, {0}}, want;
  for (int r = 0; r < attr->shape.rank && r < IR_MAX_RANK; r++) table.dims[r] = attr->shape.dims[r];
  int ax;
  if (attr->shape.rank < 1 || attr->shape.rank > IR_MAX_RANK || !ir_gather_type(&table, b, attr->axis, &want, &ax, err, errlen))
    return attr->shape.rank < 1 ? FAIL("gather_grad needs a table shape of rank >= 1") : false;
  if (!ir_type_eq(dy, &want)) {
    char sd[96], sw[96];
    type_str(dy, sd, sizeof sd), type_str(&want, sw, sizeof sw);
    return FAIL("gather_grad: dy %s must be the gather's result %s", sd, sw);
  }
  *out = table;
  return true;
}

bool ir_infer_layout(ir_op op, ir_node *const *srcs, int n_srcs, const ir_attr *attr, ir_type *out, char *err,
                     size_t errlen) {
  ir_type_rule rule = ir_op_type_rule(op);
  /* the kernels move elements of every dtype (integers and booleans: ONNX's
   * masks and ids); gather_grad sums, so its dy is float */
  if (rule == IR_TYPE_GATHER_GRAD && !dtype_is_float(srcs[0]->type.dtype)) {
    char sx[96];
    type_str(&srcs[0]->type, sx, sizeof sx);
    return FAIL("%s needs a float dy, got %s", ir_op_name(op), sx);
  }
  if (rule == IR_TYPE_RESHAPE) return infer_reshape(&srcs[0]->type, &attr->shape, out, err, errlen);
  if (rule == IR_TYPE_TRANSPOSE) return infer_transpose(&srcs[0]->type, &attr->perm, out, err, errlen);
  if (rule == IR_TYPE_CONCAT) return infer_concat(srcs, n_srcs, attr->axis, out, err, errlen);
  if (rule == IR_TYPE_STRIDED_SLICE) return infer_strided_slice(&srcs[0]->type, attr, out, err, errlen);
  if (rule == IR_TYPE_GATHER) {
    int ax;
    return ir_gather_type(&srcs[0]->type, &srcs[1]->type, attr->axis, out, &ax, err, errlen);
  }
  if (rule == IR_TYPE_GATHER_GRAD) return infer_gather_grad(srcs, attr, out, err, errlen);
  CASTOR_ASSERT(rule == IR_TYPE_PAD_CONSTANT);
  return infer_pad_constant(&srcs[0]->type, attr, out, err, errlen);
}
