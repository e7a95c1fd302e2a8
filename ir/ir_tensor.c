/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ir_tensor.c: the type rules of the general-tensor ops that are neither
 * element-wise arithmetic nor layout: dropout and dropout_train (and the
 * generator their masks come from, which the kernels of every target and
 * the reference interpreter compute bit for bit).
 *
 * Dropout's generator is counter-based: element i's bit is a pure
 * function of (seed, step, i), so the mask does not depend on how a
 * kernel splits the elements over threads or GPU blocks, and the gradient
 * recomputes the same mask instead of storing it.
 */
#include <math.h>
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

/* ---- dropout's generator ---- */

/* splitmix64's finalizer (Steele, Lea, Flood 2014) */
static uint64_t mix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* a 32-bit bijective mixer (the "lowbias32" constants, Wellons 2018) */
static uint32_t mix32(uint32_t x) {
  x ^= x >> 16;
  x *= 0x7feb352du;
  x ^= x >> 15;
  x *= 0x846ca68bu;
  x ^= x >> 16;
  return x;
}

uint64_t ir_dropout_key(int64_t seed, int64_t step) { return mix64((uint64_t)seed ^ mix64((uint64_t)step)); }

uint32_t ir_dropout_hash(uint64_t key, int64_t i) {
  uint32_t h = mix32((uint32_t)(uint64_t)i ^ (uint32_t)key);
  h = mix32(h ^ (uint32_t)((uint64_t)i >> 32) ^ (uint32_t)(key >> 32));
  return h >> 8;
}

uint32_t ir_dropout_threshold(double rate) { return (uint32_t)llround(rate * 16777216.0); }

/* ---- type rules ---- */

bool ir_reduce_dims(ir_op op, const ir_type *x, const ir_attr *attr, bool *reduced, char *err, size_t errlen) {
  char sa[96];
  type_str(x, sa, sizeof sa);
  for (int d = 0; d < x->rank; d++) reduced[d] = false;
  if (attr->axes.n < 1 || attr->axes.n > x->rank)
    return FAIL("%s of %s needs 1 to %d axes, got %d", ir_op_name(op), sa, x->rank, attr->axes.n);
  for (int k = 0; k < attr->axes.n; k++) {
    int64_t a = attr->axes.v[k], d = a < 0 ? a + x->rank : a;
    if (d < 0 || d >= x->rank) return FAIL("%s axis %lld is not a dimension of %s", ir_op_name(op), (long long)a, sa);
    if (reduced[d]) return FAIL("%s axis %lld of %s is given twice", ir_op_name(op), (long long)a, sa);
    if (x->dims[d] == IR_DIM_BATCH)
      return FAIL("%s of %s over axis %lld would sum the batch dimension N; only the batch is symbolic: give it a "
                  "fixed size with --batch B (castor_compile_options.batch)",
                  ir_op_name(op), sa, (long long)a);
    reduced[d] = true;
  }
  return true;
}

/* The result of a reduction of x (reduced: ir_reduce_dims). */
static ir_type reduced_type(const ir_type *x, const bool *reduced, bool keepdims) {
  ir_type y = {x->dtype, 0, {0}};
  for (int d = 0; d < x->rank; d++)
    if (!reduced[d]) y.dims[y.rank++] = x->dims[d];
    else if (keepdims) y.dims[y.rank++] = 1;
  return y;
}

bool ir_infer_tensor(ir_op op, ir_node *const *srcs, int n_srcs, const ir_attr *attr, ir_type *out, char *err,
                     size_t errlen) {
  char sa[96], sb[96];
  ir_type_rule rule = ir_op_type_rule(op);
  if (rule == IR_TYPE_DROPOUT) {
    const ir_type *x = &srcs[0]->type;
    type_str(x, sa, sizeof sa);
    if (!dtype_is_float(x->dtype)) return FAIL("%s needs a float operand, got %s", ir_op_name(op), sa);
    if (!(attr->rate >= 0 && attr->rate < 1))
      return FAIL("%s rate must be in [0, 1) (the fraction of elements dropped), got %g", ir_op_name(op), attr->rate);
    if (n_srcs > 1) {
      const ir_type *t = &srcs[1]->type;
      type_str(t, sb, sizeof sb);
      if (t->rank != 0 || t->dtype != DT_I64)
        return FAIL("%s operand 2 (the training step) must be i64 [], got %s", ir_op_name(op), sb);
    }
    *out = *x;
    return true;
  }
  if (rule == IR_TYPE_REDUCE || rule == IR_TYPE_REDUCE_GRAD) {
    const ir_type *x = &srcs[rule == IR_TYPE_REDUCE ? 0 : 1]->type;
    bool reduced[IR_MAX_RANK];
    type_str(x, sa, sizeof sa);
    if (!dtype_is_float(x->dtype)) return FAIL("%s needs a float operand, got %s", ir_op_name(op), sa);
    if (attr->keepdims != 0 && attr->keepdims != 1)
      return FAIL("%s keepdims must be 0 or 1, got %lld", ir_op_name(op), (long long)attr->keepdims);
    if (!ir_reduce_dims(op, x, attr, reduced, err, errlen)) return false;
    ir_type y = reduced_type(x, reduced, attr->keepdims != 0);
    if (rule == IR_TYPE_REDUCE) {
      *out = y;
      return true;
    }
    const ir_type *dy = &srcs[0]->type;
    type_str(dy, sb, sizeof sb);
    if (!ir_type_eq(dy, &y)) {
      char sc[96];
      type_str(&y, sc, sizeof sc);
      return FAIL("%s dy %s must be the reduction's result %s (of x %s)", ir_op_name(op), sb, sc, sa);
    }
    *out = *x;
    return true;
  }
  if (rule == IR_TYPE_BROADCAST_TO) {
    const ir_type *x = &srcs[0]->type;
    const ir_shape *sh = &attr->shape;
    type_str(x, sa, sizeof sa);
    ir_type y = {x->dtype, sh->rank, {0}};
    for (int r = 0; r < sh->rank; r++) y.dims[r] = sh->dims[r];
    type_str(&y, sb, sizeof sb);
    if (sh->rank < x->rank || sh->rank > IR_MAX_RANK)
      return FAIL("%s cannot broadcast %s to %s: fewer dimensions", ir_op_name(op), sa, sb);
    for (int r = 0; r < sh->rank; r++)
      if ((sh->dims[r] < 0 && !(r == 0 && sh->dims[r] == IR_DIM_BATCH)))
        return FAIL("%s shape %s: dimension %d must be >= 0 (N only as dimension 0)", ir_op_name(op), sb, r);
    if (ir_type_is_batched(x) && (sh->rank != x->rank || sh->dims[0] != IR_DIM_BATCH))
      return FAIL("%s of %s to %s would move the batch dimension N out of dimension 0; only the batch is symbolic: "
                  "give it a fixed size with --batch B (castor_compile_options.batch)",
                  ir_op_name(op), sa, sb);
    for (int d = 0; d < x->rank; d++) {
      int64_t xd = x->dims[d], yd = sh->dims[d + sh->rank - x->rank];
      if (xd != 1 && xd != yd)
        return FAIL("%s cannot broadcast %s to %s: dimension %d is %lld, not 1 or %lld", ir_op_name(op), sa, sb, d,
                    (long long)xd, (long long)yd);
    }
    int64_t bytes;
    if (!ir_type_bytes(&y, 1, &bytes) || bytes > IR_MAX_TENSOR_BYTES)
      return FAIL("%s to %s: the result is too large", ir_op_name(op), sb);
    *out = y;
    return true;
  }
  return FAIL("%s: no general-tensor type rule", ir_op_name(op));
}

/* ---- split: strided_slice nodes ---- */

bool ir_split_check(const ir_type *x, int64_t axis, int n, const int64_t *sizes, char *err, size_t errlen) {
  char sa[96];
  type_str(x, sa, sizeof sa);
  int64_t d = axis < 0 ? axis + x->rank : axis;
  if (d < 0 || d >= x->rank) return FAIL("split axis %lld is not a dimension of %s", (long long)axis, sa);
  if (x->dims[d] == IR_DIM_BATCH)
    return FAIL("split of %s along axis %lld would cut the batch dimension N; only the batch is symbolic: give it a "
                "fixed size with --batch B (castor_compile_options.batch)",
                sa, (long long)axis);
  /* empty tensors: given sizes may be 0 (as many pieces as asked); equal pieces of 0 elements are empty */
  if (n < 1 || (!sizes && x->dims[d] > 0 && n > x->dims[d])) return FAIL("split of %s into %d pieces along axis %lld: 1 to %lld pieces", sa, n, (long long)axis, (long long)x->dims[d]);
  if (!sizes) {
    if (x->dims[d] % n != 0)
      return FAIL("split of %s into %d equal pieces along axis %lld: %lld is not a multiple of %d", sa, n,
                  (long long)axis, (long long)x->dims[d], n);
    return true;
  }
  int64_t total = 0;
  for (int k = 0; k < n; k++) {
    if (sizes[k] < 0) return FAIL("split of %s along axis %lld: piece %d has size %lld, not >= 0", sa, (long long)axis, k, (long long)sizes[k]);
    total += sizes[k];
  }
  if (total != x->dims[d])
    return FAIL("split of %s along axis %lld: the sizes add up to %lld, not %lld", sa, (long long)axis, (long long)total,
                (long long)x->dims[d]);
  return true;
}

void ir_build_split(ir_graph *g, const char *name, ir_node *x, int64_t axis, int n, const int64_t *sizes, diag_loc loc,
                    ir_node **out) {
  char err[256];
  CASTOR_ASSERT(ir_split_check(&x->type, axis, n, sizes, err, sizeof err));
  int rank = x->type.rank, d = (int)(axis < 0 ? axis + rank : axis);
  int64_t start = 0;
  for (int k = 0; k < n; k++) {
    int64_t size = sizes ? sizes[k] : x->type.dims[d] / n;
    ir_attr a = {.starts = {rank, {0}}, .ends = {rank, {0}}, .steps = {rank, {0}}};
    for (int r = 0; r < rank; r++) {
      bool batch = x->type.dims[r] == IR_DIM_BATCH;
      a.starts.v[r] = r == d ? start : 0;
      a.ends.v[r] = r == d ? start + size : batch ? 0 : x->type.dims[r];
      a.steps.v[r] = 1;
    }
    out[k] = ir_build_op(g, IR_OP_STRIDED_SLICE, arena_printf(g->arena, "%s.%d", name, k), &x, 1, &a, loc);
    start += size;
  }
}
