/*
 * onnx_fold.c: shape arithmetic evaluated at import (internal.h): nodes
 * whose inputs are all constants, and Shape of a run-time value.
 */
#include "frontend/onnx/internal.h"

#include "util/half.h"

#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- shape arithmetic, folded at import ----
 *
 * Exporters compute shapes in the graph (PyTorch's x.view(x.size(0), -1) is
 * Shape -> Gather -> Unsqueeze -> Concat -> Reshape). Nodes whose inputs
 * are all constants are evaluated here on the host, and Shape of a run-time
 * value is its (static) dims. The batch N of a run-time value travels
 * through these as the value DIM_N, which the ops that take shapes
 * (Reshape) understand; arithmetic on it is an error that asks for
 * --batch. */


bool oi_int_like(int dtype) {
  return dtype == ONNX_INT64 || dtype == ONNX_INT32 || dtype == ONNX_INT8 || dtype == ONNX_UINT8 ||
         dtype == ONNX_INT16 || dtype == ONNX_UINT16 || dtype == ONNX_UINT32 || dtype == ONNX_BOOL;
}

/* Element i of an integer or float constant as an int64 / a double. */
int64_t oi_elem_i64(const onnx_tensor *t, int64_t i) {
  const void *p = t->data;
  switch (t->dtype) {
  case ONNX_INT64: return ((const int64_t *)p)[i];
  case ONNX_INT32: return ((const int32_t *)p)[i];
  case ONNX_UINT32: return ((const uint32_t *)p)[i];
  case ONNX_INT16: return ((const int16_t *)p)[i];
  case ONNX_UINT16: return ((const uint16_t *)p)[i];
  case ONNX_INT8: return ((const int8_t *)p)[i];
  case ONNX_UINT8:
  case ONNX_BOOL: return ((const uint8_t *)p)[i];
  case ONNX_FLOAT: return (int64_t)((const float *)p)[i];
  case ONNX_DOUBLE: return (int64_t)((const double *)p)[i];
  default: return 0;
  }
}

double oi_elem_f64(const onnx_tensor *t, int64_t i) {
  const void *p = t->data;
  switch (t->dtype) {
  case ONNX_FLOAT: return ((const float *)p)[i];
  case ONNX_DOUBLE: return ((const double *)p)[i];
  case ONNX_FLOAT16: return half_f16_to_f32(((const uint16_t *)p)[i]);
  case ONNX_BFLOAT16: return half_bf16_to_f32(((const uint16_t *)p)[i]);
  default: return (double)oi_elem_i64(t, i);
  }
}

/* The integers of a 0-D or 1-D integer constant (axes, a shape, pads). */
bool oi_const_ints(imp *im, const onnx_tensor *t, const char *what, int64_t *out, int max, int *n) {
  if (t->rank > 1 || !oi_int_like(t->dtype))
    return FAIL(im, "%s's %s must be a 1-D integer tensor, got a %s tensor of rank %d",
                im->node->op_type, what, onnx_dtype_name(t->dtype), t->rank);
  if (t->numel > max)
    return UNSUPPORTED(im, "%s's %s has %lld elements; castor takes at most %d", im->node->op_type,
                       what, (long long)t->numel, max);
  *n = (int)t->numel;
  for (int i = 0; i < *n; i++) out[i] = oi_elem_i64(t, i);
  return true;
}

/* Axes from an attribute (opset < 13 style) or an optional input. */
bool oi_axes_of(imp *im, int input, int64_t *axes, int *n) {
  const onnx_attr *a = oi_attr_find(im, "axes");
  *n = -1; /* none given */
  if (a) {
    if (!oi_attr_typed(im, a, ONNX_ATTR_INTS)) return false;
    if (a->n > ONNX_MAX_RANK) return FAIL(im, "axes has %d elements", a->n);
    for (int i = 0; i < a->n; i++) axes[i] = a->ints[i];
    *n = a->n;
    return true;
  }
  if (oi_has_input(im, input)) {
    const onnx_tensor *t = oi_const_input(im, input, "axes");
    return t && oi_const_ints(im, t, "axes", axes, ONNX_MAX_RANK, n);
  }
  return true;
}

/* The dims of an input, constant or run-time (N as DIM_N). */
static void input_dims(const imp_val *v, int *rank, int64_t *dims) {
  if (v->k) {
    *rank = v->k->rank;
    for (int r = 0; r < *rank; r++) dims[r] = v->k->dims[r];
    return;
  }
  oi_onnx_dims(v, rank, dims);
  for (int r = 0; r < *rank; r++)
    if (dims[r] == IR_DIM_BATCH) dims[r] = DIM_N;
}

bool oi_lower_shape(imp *im, const onnx_node *n, const op_row *row) {
  (void)row;
  imp_val *v = oi_input(im, 0);
  if (!v) return false;
  int rank;
  int64_t dims[ONNX_MAX_RANK];
  input_dims(v, &rank, dims);
  int64_t start, end;
  if (!oi_attr_int(im, "start", 0, &start) || !oi_attr_int(im, "end", rank, &end)) return false;
  if (start < 0) start += rank;
  if (end < 0) end += rank;
  start = start < 0 ? 0 : start > rank ? rank : start;
  end = end < start ? start : end > rank ? rank : end;
  onnx_tensor *t = oi_host_tensor(im, ONNX_INT64, 1, (int64_t[]){end - start});
  for (int64_t r = start; r < end; r++) ((int64_t *)t->data)[r - start] = dims[r];
  return oi_val_define(im, n->outputs[0], NULL, t);
}

/* Size: the element count, folded from the static dims like Shape's
 * (a value with the symbolic batch N has none: --batch binds it). */
bool oi_lower_size(imp *im, const onnx_node *n, const op_row *row) {
  (void)row;
  imp_val *v = oi_input(im, 0);
  if (!v) return false;
  int rank;
  int64_t dims[ONNX_MAX_RANK], count = 1;
  input_dims(v, &rank, dims);
  for (int r = 0; r < rank; r++) {
    if (dims[r] == DIM_N)
      return UNSUPPORTED(im, "Size of a value with the symbolic batch N: give the batch a fixed size with --batch B");
    count *= dims[r];
  }
  onnx_tensor *t = oi_host_tensor(im, ONNX_INT64, 0, NULL);
  *(int64_t *)t->data = count;
  return oi_val_define(im, n->outputs[0], NULL, t);
}

static bool all_inputs_const(imp *im) {
  for (int i = 0; i < im->node->n_inputs; i++) {
    if (!*im->node->inputs[i]) continue;
    imp_val *v = oi_val_find(im, im->node->inputs[i]);
    if (!v || !v->k || v->node) return false;
  }
  return true;
}

/* Copies t's elements into a new host tensor of the given dims (same count). */
onnx_tensor *oi_host_reshaped(imp *im, const onnx_tensor *t, int rank, const int64_t *dims) {
  onnx_tensor *o = oi_host_tensor(im, t->dtype, rank, dims);
  if (o->nbytes) memcpy((void *)o->data, t->data, o->nbytes);
  return o;
}

static bool fold_unsqueeze(imp *im, const onnx_tensor *t) {
  int64_t axes[ONNX_MAX_RANK];
  int na;
  if (!oi_axes_of(im, 1, axes, &na)) return false;
  if (na < 1) return FAIL(im, "Unsqueeze needs axes");
  int rank = t->rank + na;
  if (rank > ONNX_MAX_RANK) return UNSUPPORTED(im, "Unsqueeze to rank %d", rank);
  bool ins[ONNX_MAX_RANK] = {0};
  for (int i = 0; i < na; i++) {
    int a = 0;
    if (!oi_norm_axis(im, axes[i], rank, "Unsqueeze axis", &a)) return false;
    if (ins[a]) return FAIL(im, "Unsqueeze axis %lld is given twice", (long long)axes[i]);
    ins[a] = true;
  }
  int64_t dims[ONNX_MAX_RANK];
  for (int r = 0, k = 0; r < rank; r++) dims[r] = ins[r] ? 1 : t->dims[k++];
  return oi_val_define(im, im->node->outputs[0], NULL, oi_host_reshaped(im, t, rank, dims));
}

static bool fold_squeeze(imp *im, const onnx_tensor *t) {
  int64_t axes[ONNX_MAX_RANK];
  int na;
  if (!oi_axes_of(im, 1, axes, &na)) return false;
  bool drop[ONNX_MAX_RANK] = {0};
  for (int r = 0; r < t->rank; r++) drop[r] = na < 0 && t->dims[r] == 1;
  for (int i = 0; i < na; i++) {
    int a = 0;
    if (!oi_norm_axis(im, axes[i], t->rank, "Squeeze axis", &a)) return false;
    if (t->dims[a] != 1) return FAIL(im, "Squeeze axis %d has size %lld, not 1", a, (long long)t->dims[a]);
    drop[a] = true;
  }
  int64_t dims[ONNX_MAX_RANK];
  int rank = 0;
  for (int r = 0; r < t->rank; r++)
    if (!drop[r]) dims[rank++] = t->dims[r];
  return oi_val_define(im, im->node->outputs[0], NULL, oi_host_reshaped(im, t, rank, dims));
}

static bool fold_concat(imp *im) {
  int64_t axis;
  if (!oi_attr_int(im, "axis", INT64_MIN, &axis)) return false;
  if (axis == INT64_MIN) return FAIL(im, "Concat needs its axis attribute");
  const onnx_tensor *first = NULL;
  int64_t total = 0;
  int a = 0;
  for (int i = 0; i < im->node->n_inputs; i++) {
    const onnx_tensor *t = oi_const_input(im, i, "input");
    if (!t) return false;
    if (!first) {
      first = t;
      if (!oi_norm_axis(im, axis, t->rank, "Concat axis", &a)) return false;
    } else if (t->dtype != first->dtype || t->rank != first->rank) {
      return FAIL(im, "Concat's inputs differ in type or rank");
    }
    for (int r = 0; r < t->rank; r++)
      if (r != a && t->dims[r] != first->dims[r]) return FAIL(im, "Concat's inputs differ in dimension %d", r);
    total += t->dims[a];
  }
  int64_t dims[ONNX_MAX_RANK];
  for (int r = 0; r < first->rank; r++) dims[r] = first->dims[r];
  dims[a] = total;
  onnx_tensor *o = oi_host_tensor(im, first->dtype, first->rank, dims);
  size_t es = onnx_dtype_size(first->dtype);
  int64_t outer = 1, inner = 1;
  for (int r = 0; r < a; r++) outer *= dims[r];
  for (int r = a + 1; r < first->rank; r++) inner *= dims[r];
  char *dst = (char *)o->data;
  for (int64_t q = 0; q < outer; q++)
    for (int i = 0; i < im->node->n_inputs; i++) {
      const onnx_tensor *t = oi_val_find(im, im->node->inputs[i])->k;
      size_t chunk = (size_t)(t->dims[a] * inner) * es;
      memcpy(dst, (const char *)t->data + (size_t)q * chunk, chunk);
      dst += chunk;
    }
  return oi_val_define(im, im->node->outputs[0], NULL, o);
}

/* A folded constant's size before it is allocated: at most 2^28 elements
 * (ConstantOfShape's cap), so that a Gather or a broadcast of two small
 * constants cannot make the import allocate gigabytes. */
static bool fold_size_ok(imp *im, int rank, const int64_t *dims) {
  int64_t numel = 1;
  for (int r = 0; r < rank; r++)
    if (!size_mul_ok(numel, dims[r], &numel) || numel > ((int64_t)1 << 28))
      return UNSUPPORTED(im, "%s folded to a constant of more than 2^28 elements", im->node->op_type);
  return true;
}

static bool fold_gather(imp *im, const onnx_tensor *data, const onnx_tensor *idx) {
  int64_t axis;
  if (!oi_attr_int(im, "axis", 0, &axis)) return false;
  int a = 0;
  if (!oi_norm_axis(im, axis, data->rank, "Gather axis", &a)) return false;
  if (!oi_int_like(idx->dtype)) return FAIL(im, "Gather's indices must be integers, got %s", onnx_dtype_name(idx->dtype));
  int rank = data->rank - 1 + idx->rank;
  if (rank > ONNX_MAX_RANK) return UNSUPPORTED(im, "Gather to rank %d", rank);
  int64_t dims[ONNX_MAX_RANK];
  int k = 0;
  for (int r = 0; r < a; r++) dims[k++] = data->dims[r];
  for (int r = 0; r < idx->rank; r++) dims[k++] = idx->dims[r];
  for (int r = a + 1; r < data->rank; r++) dims[k++] = data->dims[r];
  if (!fold_size_ok(im, rank, dims)) return false;
  onnx_tensor *o = oi_host_tensor(im, data->dtype, rank, dims);
  size_t es = onnx_dtype_size(data->dtype);
  int64_t outer = 1, inner = 1, n = data->dims[a];
  for (int r = 0; r < a; r++) outer *= data->dims[r];
  for (int r = a + 1; r < data->rank; r++) inner *= data->dims[r];
  char *dst = (char *)o->data;
  for (int64_t q = 0; q < outer; q++)
    for (int64_t j = 0; j < idx->numel; j++) {
      int64_t i = oi_elem_i64(idx, j);
      if (i < -n || i >= n)
        return FAIL(im, "Gather index %lld is out of range for a dimension of %lld", (long long)i, (long long)n);
      if (i < 0) i += n;
      memcpy(dst, (const char *)data->data + (size_t)((q * n + i) * inner) * es, (size_t)inner * es);
      dst += (size_t)inner * es;
    }
  return oi_val_define(im, im->node->outputs[0], NULL, o);
}

static bool fold_cast(imp *im, const onnx_tensor *t) {
  int64_t to;
  if (!oi_attr_int(im, "to", 0, &to)) return false;
  if (to != ONNX_INT64 && to != ONNX_INT32 && to != ONNX_FLOAT && to != ONNX_DOUBLE && to != ONNX_BOOL)
    return UNSUPPORTED(im, "Cast of a constant to %s", onnx_dtype_name((int)to));
  onnx_tensor *o = oi_host_tensor(im, (int)to, t->rank, t->dims);
  for (int64_t i = 0; i < t->numel; i++) {
    bool n = t->dtype == ONNX_INT64 && ((const int64_t *)t->data)[i] == DIM_N;
    if (n && to != ONNX_INT64)
      return UNSUPPORTED(im, "Cast of the batch dimension N to %s: compile with --batch", onnx_dtype_name((int)to));
    switch (to) {
    case ONNX_INT64: ((int64_t *)o->data)[i] = oi_elem_i64(t, i); break;
    case ONNX_INT32: ((int32_t *)o->data)[i] = (int32_t)oi_elem_i64(t, i); break;
    case ONNX_FLOAT: ((float *)o->data)[i] = (float)oi_elem_f64(t, i); break;
    case ONNX_DOUBLE: ((double *)o->data)[i] = oi_elem_f64(t, i); break;
    default: ((uint8_t *)o->data)[i] = oi_elem_f64(t, i) != 0; break;
    }
  }
  return oi_val_define(im, im->node->outputs[0], NULL, o);
}

/* numpy broadcasting of two host tensors' shapes. */
static bool bcast_dims(imp *im, const onnx_tensor *a, const onnx_tensor *b, int *rank, int64_t *dims) {
  *rank = a->rank > b->rank ? a->rank : b->rank;
  for (int r = 0; r < *rank; r++) {
    int ra = r - (*rank - a->rank), rb = r - (*rank - b->rank);
    int64_t da = ra >= 0 ? a->dims[ra] : 1, db = rb >= 0 ? b->dims[rb] : 1;
    if (da != db && da != 1 && db != 1)
      return FAIL(im, "%s's operands do not broadcast (dimension %d: %lld and %lld)", im->node->op_type, r,
                  (long long)da, (long long)db);
    dims[r] = da == 1 ? db : da;
  }
  return fold_size_ok(im, *rank, dims);
}

/* The flat index into t of result element i (t broadcast to rank/dims). */
static int64_t bcast_index(const onnx_tensor *t, int rank, const int64_t *dims, int64_t i) {
  int64_t idx = 0, stride = 1;
  for (int r = rank - 1; r >= 0; r--) {
    int64_t c = i % dims[r];
    i /= dims[r];
    int rt = r - (rank - t->rank);
    if (rt >= 0) {
      if (t->dims[rt] != 1) idx += c * stride;
      stride *= t->dims[rt];
    }
  }
  return idx;
}

static bool fold_arith(imp *im, const onnx_tensor *a, const onnx_tensor *b) {
  const char *op = im->node->op_type;
  int rank;
  int64_t dims[ONNX_MAX_RANK];
  if (!bcast_dims(im, a, b, &rank, dims)) return false;
  bool ints = oi_int_like(a->dtype) && oi_int_like(b->dtype);
  if (!ints && !((a->dtype == ONNX_FLOAT || a->dtype == ONNX_DOUBLE) && a->dtype == b->dtype))
    return UNSUPPORTED(im, "%s of constants of type %s and %s", op, onnx_dtype_name(a->dtype), onnx_dtype_name(b->dtype));
  onnx_tensor *o = oi_host_tensor(im, ints ? ONNX_INT64 : a->dtype, rank, dims);
  for (int64_t i = 0; i < o->numel; i++) {
    int64_t ia = bcast_index(a, rank, dims, i), ib = bcast_index(b, rank, dims, i);
    if (ints) {
      int64_t x = oi_elem_i64(a, ia), y = oi_elem_i64(b, ib), z;
      if (x == DIM_N || y == DIM_N)
        return UNSUPPORTED(im, "%s on the batch dimension N in a shape computation: castor keeps N "
                               "symbolic only where it stays the first dimension; compile with --batch",
                           op);
      if (str_eq(op, "Add")) z = x + y;
      else if (str_eq(op, "Sub")) z = x - y;
      else if (str_eq(op, "Mul")) z = x * y;
      else {
        if (y == 0) return FAIL(im, "Div of integer constants by zero");
        z = x / y; /* C and ONNX both truncate toward zero */
      }
      ((int64_t *)o->data)[i] = z;
    } else {
      double x = oi_elem_f64(a, ia), y = oi_elem_f64(b, ib);
      double z = str_eq(op, "Add") ? x + y : str_eq(op, "Sub") ? x - y : str_eq(op, "Mul") ? x * y : x / y;
      if (o->dtype == ONNX_FLOAT) ((float *)o->data)[i] = (float)z;
      else ((double *)o->data)[i] = z;
    }
  }
  return oi_val_define(im, im->node->outputs[0], NULL, o);
}

bool oi_lower_constant_of_shape(imp *im, const onnx_node *n, const op_row *row) {
  (void)row;
  const onnx_tensor *s = oi_const_input(im, 0, "shape");
  int64_t dims[ONNX_MAX_RANK];
  int rank;
  if (!s || !oi_const_ints(im, s, "shape", dims, ONNX_MAX_RANK, &rank)) return false;
  for (int r = 0; r < rank; r++)
    if (dims[r] < 0) return FAIL(im, "ConstantOfShape's shape has %s dimension", dims[r] == DIM_N ? "the batch N as a" : "a negative");
  const onnx_attr *v = oi_attr_find(im, "value");
  if (v && !oi_attr_typed(im, v, ONNX_ATTR_TENSOR)) return false;
  int dtype = v ? v->t->dtype : ONNX_FLOAT;
  if (v && v->t->numel != 1) return FAIL(im, "ConstantOfShape's value must hold one element");
  int64_t numel = 1;
  for (int r = 0; r < rank; r++)
    if (!size_mul_ok(numel, dims[r], &numel) || numel > ((int64_t)1 << 28))
      return UNSUPPORTED(im, "ConstantOfShape of more than 2^28 elements");
  onnx_tensor *o = oi_host_tensor(im, dtype, rank, dims);
  size_t es = onnx_dtype_size(dtype);
  for (int64_t i = 0; i < o->numel; i++)
    if (v) memcpy((char *)o->data + (size_t)i * es, v->t->data, es);
  return oi_val_define(im, n->outputs[0], NULL, o);
}

/* Slice (opset 10-: starts, ends, axes, steps as inputs) of a 1-D integer
 * constant: shape arithmetic (Slice(Shape(x), 0, axis)), numpy's rules
 * for the bounds. */
static bool fold_slice(imp *im, const onnx_tensor *t) {
  int64_t b[4] = {0, 0, 0, 1};
  const char *what[4] = {"starts", "ends", "axes", "steps"};
  for (int k = 1; k <= 4; k++) {
    if (!oi_has_input(im, k)) continue;
    const onnx_tensor *c = oi_const_input(im, k, what[k - 1]);
    int nc;
    if (!c || !oi_const_ints(im, c, what[k - 1], &b[k - 1], 1, &nc)) return false;
    if (nc != 1) return FAIL(im, "Slice of a 1-D constant: %s has %d values, not 1", what[k - 1], nc);
  }
  if (b[2] != 0 && b[2] != -1) return FAIL(im, "Slice of a 1-D constant along axis %lld", (long long)b[2]);
  int64_t d = t->dims[0], step = b[3], lo = b[0], hi = b[1];
  if (step == 0) return FAIL(im, "Slice: a step of 0");
  if (lo < 0) lo += d;
  if (hi < 0 && hi > INT64_MIN / 2) hi += d;
  if (step > 0) {
    lo = lo < 0 ? 0 : lo > d ? d : lo;
    hi = hi < 0 ? 0 : hi > d ? d : hi;
  } else {
    lo = lo < 0 ? -1 : lo > d - 1 ? d - 1 : lo;
    hi = hi < -1 ? -1 : hi > d - 1 ? d - 1 : hi;
  }
  int64_t n = 0, idx[ONNX_MAX_RANK * 2];
  for (int64_t i = lo; step > 0 ? i < hi : i > hi; i += step) {
    if (n == (int64_t)(sizeof idx / sizeof *idx)) return UNSUPPORTED(im, "Slice of a 1-D constant into more than %d values", (int)n);
    idx[n++] = i;
  }
  onnx_tensor *o = oi_host_tensor(im, t->dtype, 1, (int64_t[]){n});
  size_t es = onnx_dtype_size(t->dtype);
  for (int64_t i = 0; i < n; i++) memcpy((char *)o->data + (size_t)i * es, (const char *)t->data + (size_t)idx[i] * es, es);
  return oi_val_define(im, im->node->outputs[0], NULL, o);
}

/* Neg of an integer constant (shape arithmetic: -axis). */
static bool fold_neg(imp *im, const onnx_tensor *t) {
  onnx_tensor *o = oi_host_tensor(im, t->dtype, t->rank, t->dims);
  for (int64_t i = 0; i < t->numel; i++) {
    int64_t x = oi_elem_i64(t, i);
    if (t->dtype == ONNX_INT64 && x == DIM_N)
      return UNSUPPORTED(im, "Neg of the batch dimension N: compile with --batch");
    if (x == INT64_MIN || (t->dtype == ONNX_INT32 && x == INT32_MIN))
      return FAIL(im, "Neg of the integer constant %lld overflows", (long long)x);
    if (t->dtype == ONNX_INT64) ((int64_t *)o->data)[i] = -x;
    else ((int32_t *)o->data)[i] = (int32_t)-x;
  }
  return oi_val_define(im, im->node->outputs[0], NULL, o);
}

/* A node whose inputs are all constants, of an op that folds: evaluated
 * here. *folded says whether it was one. */
bool oi_try_fold(imp *im, const onnx_node *n, bool *folded) {
  *folded = false;
  if (!all_inputs_const(im) || n->n_inputs == 0) return true;
  const char *op = n->op_type;
  static const op_row folds[] = {
      {"Unsqueeze", 1, 0, NULL, IR_OP_COUNT, "axes"}, {"Squeeze", 1, 0, NULL, IR_OP_COUNT, "axes"},
      {"Concat", 1, 0, NULL, IR_OP_COUNT, "axis"},    {"Cast", 1, 0, NULL, IR_OP_COUNT, "to,saturate"},
      {"Gather", 1, 0, NULL, IR_OP_COUNT, "axis"},    {"Add", 1, 0, NULL, IR_OP_COUNT, ""},
      {"Sub", 1, 0, NULL, IR_OP_COUNT, ""},           {"Mul", 1, 0, NULL, IR_OP_COUNT, ""},
      {"Div", 1, 0, NULL, IR_OP_COUNT, ""},           {"Slice", 10, 0, NULL, IR_OP_COUNT, ""},
      {"Neg", 6, 0, NULL, IR_OP_COUNT, ""},
  };
  const op_row *row = NULL;
  for (size_t i = 0; i < sizeof folds / sizeof *folds && !row; i++)
    if (str_eq(folds[i].op_type, op)) row = &folds[i];
  if (!row) return true;
  imp_val *v0 = oi_input(im, 0);
  if (!v0) return false;
  const onnx_tensor *t = v0->k;
  if ((oi_int_like(t->dtype) || t->dtype == ONNX_DOUBLE || !str_eq(row->attrs, "")) && !oi_attrs_known(im, row))
    return false;
  if (str_eq(op, "Unsqueeze")) return (*folded = true), fold_unsqueeze(im, t);
  if (str_eq(op, "Squeeze")) return (*folded = true), fold_squeeze(im, t);
  if (str_eq(op, "Concat")) return (*folded = true), fold_concat(im);
  if (str_eq(op, "Cast")) return (*folded = true), fold_cast(im, t);
  if (str_eq(op, "Neg") && (t->dtype == ONNX_INT64 || t->dtype == ONNX_INT32)) return (*folded = true), fold_neg(im, t);
  if (str_eq(op, "Slice") && im->opset >= 10 && oi_int_like(t->dtype) && t->rank == 1)
    return (*folded = true), fold_slice(im, t);
  if (str_eq(op, "Gather")) {
    imp_val *v1 = oi_input(im, 1);
    return v1 && ((*folded = true), fold_gather(im, t, v1->k));
  }
  if ((str_eq(op, "Add") || str_eq(op, "Sub") || str_eq(op, "Mul") || str_eq(op, "Div")) &&
      (oi_int_like(t->dtype) || t->dtype == ONNX_DOUBLE)) {
    imp_val *v1 = oi_input(im, 1);
    return v1 && ((*folded = true), fold_arith(im, t, v1->k));
  }
  return true;
}

