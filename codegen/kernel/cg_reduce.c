/*
 * cg_reduce.c: the index maps of the general-tensor reductions and of
 * broadcast_to, in the kernel kit for every target (cg_index_map.c's
 * cg_reindex_value dispatches here by type rule).
 *
 * Contract: as cg_index_map.c's maps: op's value at flat result index i
 * (i64), one f32, not yet rounded to op's dtype. A reduction's result
 * element loops over its group of x in row-major order of the reduced
 * coordinates, so its sum, and the first maximal element that the max's
 * gradient routes to, are the same for any split of the result over
 * threads or GPU blocks, and the same as the reference's order.
 */
#include <math.h>

#include "codegen/kernel/cg_kit.h"

#define B (e->b)

/* strides of t's dimensions in elements (dims[0] never multiplies: N
 * needs no value) */
static void strides_of(const ir_type *t, int64_t *st) {
  int64_t s = 1;
  for (int d = t->rank - 1; d >= 0; d--) {
    st[d] = s;
    if (d > 0) s *= t->dims[d];
  }
}

static void unflatten(cg_emitter *e, const ir_type *t, LLVMValueRef i, LLVMValueRef *coord) {
  LLVMValueRef rem = i;
  for (int r = t->rank - 1; r >= 1; r--) {
    coord[r] = LLVMBuildSRem(B, rem, cg_i64(e, t->dims[r]), "");
    rem = LLVMBuildSDiv(B, rem, cg_i64(e, t->dims[r]), "");
  }
  if (t->rank > 0) coord[0] = rem;
}

/* The reduction's dimensions of x, and for each kept dimension of x the
 * dimension of y that holds its coordinate. */
typedef struct red_shape {
  bool reduced[IR_MAX_RANK];
  int ydim[IR_MAX_RANK]; /* x's kept dimension d: y's dimension */
  int64_t xst[IR_MAX_RANK], total;
} red_shape;

static void red_shape_of(const ir_node *op, const ir_type *xt, red_shape *rs) {
  char err[256];
  CASTOR_ASSERT(ir_reduce_dims(op->op, xt, &op->attr, rs->reduced, err, sizeof err));
  strides_of(xt, rs->xst);
  rs->total = 1;
  for (int d = 0, yd = 0; d < xt->rank; d++) {
    if (rs->reduced[d]) {
      rs->total *= xt->dims[d];
      if (op->attr.keepdims) yd++;
      continue;
    }
    rs->ydim[d] = yd++;
  }
}

/* x's flat index of reduced position t (row-major over the reduced
 * dimensions) from base */
static LLVMValueRef group_index(cg_emitter *e, const ir_type *xt, const red_shape *rs, LLVMValueRef base, LLVMValueRef t) {
  LLVMValueRef xi = base, r = t;
  int last = -1;
  for (int d = 0; d < xt->rank; d++)
    if (rs->reduced[d]) last = d;
  for (int d = xt->rank - 1; d >= 0; d--) {
    if (!rs->reduced[d]) continue;
    bool first = true;
    for (int k = 0; k < d; k++) first &= !rs->reduced[k];
    LLVMValueRef coord = first ? r : LLVMBuildURem(B, r, cg_i64(e, xt->dims[d]), "");
    if (!first) r = LLVMBuildUDiv(B, r, cg_i64(e, xt->dims[d]), "");
    xi = LLVMBuildAdd(B, xi, LLVMBuildMul(B, coord, cg_i64(e, rs->xst[d]), ""), "");
  }
  (void)last;
  return xi;
}

/* A scan of x's group from base: the sum, or the extreme (first maximal
 * or minimal; the first NaN wins and sticks) and where it is. */
static void scan_group(cg_kctx *c, const ir_node *op, const ir_node *x, const red_shape *rs, LLVMValueRef base,
                       bool extreme, bool is_max, LLVMValueRef *out_val, LLVMValueRef *out_at) {
  cg_emitter *e = c->e;
  const ir_type *xt = &x->type;
  LLVMValueRef acc = cg_entry_alloca(c, e->f32, "red.acc"), at = cg_entry_alloca(c, e->i64, "red.at");
  LLVMValueRef first = group_index(e, xt, rs, base, cg_i64(e, 0));
  LLVMBuildStore(B, extreme ? cg_emit_load(e, xt->dtype, cg_elem_ptr(c, x, first), 1, x->name) : cg_const(e, e->f32, 0.0), acc);
  LLVMBuildStore(B, first, at);
  cg_loop lt = cg_loop_begin(c, cg_i64(e, extreme ? 1 : 0), cg_i64(e, rs->total), 1, "red.t");
  LLVMValueRef xi = group_index(e, xt, rs, base, lt.iv);
  LLVMValueRef v = cg_emit_load(e, xt->dtype, cg_elem_ptr(c, x, xi), 1, x->name);
  LLVMValueRef a = LLVMBuildLoad2(B, e->f32, acc, "");
  if (!extreme) {
    LLVMBuildStore(B, LLVMBuildFAdd(B, a, v, ""), acc);
  } else {
    LLVMValueRef better = LLVMBuildFCmp(B, is_max ? LLVMRealOGT : LLVMRealOLT, v, a, "");
    LLVMValueRef nan = LLVMBuildAnd(B, LLVMBuildFCmp(B, LLVMRealUNO, v, v, ""), LLVMBuildFCmp(B, LLVMRealORD, a, a, ""), "");
    LLVMValueRef wins = LLVMBuildOr(B, better, nan, "");
    LLVMBuildStore(B, LLVMBuildSelect(B, wins, v, a, ""), acc);
    LLVMBuildStore(B, LLVMBuildSelect(B, wins, xi, LLVMBuildLoad2(B, e->i64, at, ""), ""), at);
  }
  cg_loop_end(c, &lt);
  (void)op;
  *out_val = LLVMBuildLoad2(B, e->f32, acc, "");
  *out_at = LLVMBuildLoad2(B, e->i64, at, "");
}

/* Each reduction's scan, one row per op of the reduce and reduce-grad
 * type rules: a reduction without a row is an assertion, never a sum. */
static const struct reduce_row {
  bool known;
  bool extreme; /* the first maximal or minimal element, else the sum */
  bool is_max;
  bool mean;    /* the sum over the group's size */
} reduce_rows[IR_OP_COUNT] = {
    [IR_OP_REDUCE_SUM] = {true, false, false, false},
    [IR_OP_REDUCE_MEAN] = {true, false, false, true},
    [IR_OP_REDUCE_MAX] = {true, true, true, false},
    [IR_OP_REDUCE_MIN] = {true, true, false, false},
    [IR_OP_REDUCE_MAX_GRAD] = {true, true, true, false},
    [IR_OP_REDUCE_MIN_GRAD] = {true, true, false, false},
};

static const struct reduce_row *reduce_row_of(ir_op o) {
  CASTOR_ASSERT(o >= 0 && o < IR_OP_COUNT && reduce_rows[o].known);
  return &reduce_rows[o];
}

/* reduce_sum, reduce_mean, reduce_max, reduce_min: y's element i */
static LLVMValueRef reduce_value(cg_kctx *c, const ir_node *op, LLVMValueRef i) {
  cg_emitter *e = c->e;
  const ir_node *x = op->srcs[0];
  const ir_type *xt = &x->type, *yt = &op->type;
  red_shape rs;
  red_shape_of(op, xt, &rs);
  LLVMValueRef yc[IR_MAX_RANK], base = cg_i64(e, 0);
  unflatten(e, yt, i, yc);
  for (int d = 0; d < xt->rank; d++)
    if (!rs.reduced[d]) base = LLVMBuildAdd(B, base, LLVMBuildMul(B, yc[rs.ydim[d]], cg_i64(e, rs.xst[d]), ""), "");
  const struct reduce_row *row = reduce_row_of(op->op);
  LLVMValueRef v, at;
  scan_group(c, op, x, &rs, base, row->extreme, row->is_max, &v, &at);
  if (row->mean) v = LLVMBuildFDiv(B, v, cg_const(e, e->f32, (double)rs.total), op->name);
  return v;
}

/* reduce_max_grad, reduce_min_grad: x's element i gets dy of its group if
 * it is the group's first extreme element */
static LLVMValueRef reduce_grad_value(cg_kctx *c, const ir_node *op, LLVMValueRef i) {
  cg_emitter *e = c->e;
  const ir_node *dy = op->srcs[0], *x = op->srcs[1];
  const ir_type *xt = &x->type, *yt = &dy->type;
  red_shape rs;
  red_shape_of(op, xt, &rs);
  int64_t yst[IR_MAX_RANK];
  strides_of(yt, yst);
  LLVMValueRef xc[IR_MAX_RANK], base = cg_i64(e, 0), yi = cg_i64(e, 0);
  unflatten(e, xt, i, xc);
  for (int d = 0; d < xt->rank; d++) {
    if (rs.reduced[d]) continue;
    base = LLVMBuildAdd(B, base, LLVMBuildMul(B, xc[d], cg_i64(e, rs.xst[d]), ""), "");
    yi = LLVMBuildAdd(B, yi, LLVMBuildMul(B, xc[d], cg_i64(e, yst[rs.ydim[d]]), ""), "");
  }
  LLVMValueRef v, at;
  const struct reduce_row *row = reduce_row_of(op->op);
  CASTOR_ASSERT(row->extreme); /* the gradient routes to the extreme element */
  scan_group(c, op, x, &rs, base, true, row->is_max, &v, &at);
  LLVMValueRef g = cg_emit_load(e, yt->dtype, cg_elem_ptr(c, dy, yi), 1, dy->name);
  return LLVMBuildSelect(B, LLVMBuildICmp(B, LLVMIntEQ, at, i, ""), g, cg_const(e, e->f32, 0.0), op->name);
}

/* broadcast_to: x's coordinate is y's along the dimensions it has, 0 where
 * it has 1 */
static LLVMValueRef broadcast_value(cg_kctx *c, const ir_node *op, LLVMValueRef i) {
  cg_emitter *e = c->e;
  const ir_node *x = op->srcs[0];
  const ir_type *xt = &x->type, *yt = &op->type;
  int64_t xst[IR_MAX_RANK];
  strides_of(xt, xst);
  LLVMValueRef yc[IR_MAX_RANK], xi = cg_i64(e, 0);
  unflatten(e, yt, i, yc);
  for (int d = 0; d < xt->rank; d++)
    if (xt->dims[d] != 1) xi = LLVMBuildAdd(B, xi, LLVMBuildMul(B, yc[d + yt->rank - xt->rank], cg_i64(e, xst[d]), ""), "");
  return cg_emit_load(e, xt->dtype, cg_elem_ptr(c, x, xi), 1, op->name);
}

LLVMValueRef cg_tensor_value(cg_kctx *c, const ir_node *op, LLVMValueRef i) {
  ir_type_rule rule = ir_op_type_rule(op->op);
  if (rule == IR_TYPE_REDUCE) return reduce_value(c, op, i);
  if (rule == IR_TYPE_REDUCE_GRAD) return reduce_grad_value(c, op, i);
  CASTOR_ASSERT(rule == IR_TYPE_BROADCAST_TO);
  return broadcast_value(c, op, i);
}
