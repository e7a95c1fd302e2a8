/* SPDX-License-Identifier: Apache-2.0 */
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

/* Copies t's elements into a new host tensor of the given dims (same count). */
onnx_tensor *oi_host_reshaped(imp *im, const onnx_tensor *t, int rank, const int64_t *dims) {
  onnx_tensor *o = oi_host_tensor(im, t->dtype, rank, dims);
  if (o->nbytes) memcpy((void *)o->data, t->data, o->nbytes);
  return o;
}

bool oi_lower_constant_of_shape(imp *im, const onnx_node *n, const op_row *row) {
  (void)row;
  const onnx_tensor *s = oi_const_input(im, 0, "shape");
  int64_t dims[ONNX_MAX_RANK];
  int rank;
  if (!s || !oi_const_ints(im, s, "shape", dims, ONNX_MAX_RANK, &rank)) return false;
  for (int r = 0; r < rank; r++)
    if (dims[r] == DIM_N)
      return UNSUPPORTED(im, "ConstantOfShape of a shape with the batch dimension N: compile with --batch B");
    else if (dims[r] < 0)
      return FAIL(im, "ConstantOfShape's shape has a negative dimension");
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


/* ---- the constant evaluator: ops that move data ----
 *
 * Each takes its inputs' host tensors (in[i] NULL for an omitted optional
 * input) and defines the node's outputs as host tensors. They copy
 * elements whole, so the batch N (DIM_N) passes through them unchanged. */

static bool ev_identity(imp *im, const oi_fold_row *row, const onnx_tensor *const *in, int n) {
  (void)row, (void)n;
  return oi_fold_define(im, 0, in[0]);
}

static bool ev_unsqueeze(imp *im, const oi_fold_row *row, const onnx_tensor *const *in, int n) {
  (void)row, (void)n;
  const onnx_tensor *t = in[0];
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
  return oi_fold_define(im, 0, oi_host_reshaped(im, t, rank, dims));
}

static bool ev_squeeze(imp *im, const oi_fold_row *row, const onnx_tensor *const *in, int n) {
  (void)row, (void)n;
  const onnx_tensor *t = in[0];
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
  return oi_fold_define(im, 0, oi_host_reshaped(im, t, rank, dims));
}

static bool ev_flatten(imp *im, const oi_fold_row *row, const onnx_tensor *const *in, int n) {
  (void)row, (void)n;
  const onnx_tensor *t = in[0];
  int64_t axis, d[2] = {1, 1};
  if (!oi_attr_int(im, "axis", 1, &axis)) return false;
  if (axis < -t->rank || axis > t->rank)
    return FAIL(im, "Flatten axis %lld is out of range for rank %d", (long long)axis, t->rank);
  if (axis < 0) axis += t->rank;
  for (int r = 0; r < t->rank; r++) d[r < axis ? 0 : 1] *= t->dims[r];
  return oi_fold_define(im, 0, oi_host_reshaped(im, t, 2, d));
}

static bool ev_concat(imp *im, const oi_fold_row *row, const onnx_tensor *const *in, int n) {
  (void)row;
  int64_t axis;
  if (!oi_attr_int(im, "axis", INT64_MIN, &axis)) return false;
  if (axis == INT64_MIN) return FAIL(im, "Concat needs its axis attribute");
  const onnx_tensor *first = in[0];
  int a = 0;
  if (!oi_norm_axis(im, axis, first->rank, "Concat axis", &a)) return false;
  int64_t dims[ONNX_MAX_RANK];
  for (int r = 0; r < first->rank; r++) dims[r] = first->dims[r];
  dims[a] = 0;
  for (int i = 0; i < n; i++) {
    const onnx_tensor *t = in[i];
    if (!t) return FAIL(im, "Concat's input %d is omitted", i + 1);
    if (t->dtype != first->dtype || t->rank != first->rank) return FAIL(im, "Concat's inputs differ in type or rank");
    for (int r = 0; r < t->rank; r++)
      if (r != a && t->dims[r] != first->dims[r]) return FAIL(im, "Concat's inputs differ in dimension %d", r);
    dims[a] += t->dims[a];
  }
  onnx_tensor *o = oi_fold_tensor(im, first->dtype, first->rank, dims);
  if (!o) return false;
  size_t es = onnx_dtype_size(first->dtype);
  int64_t outer = 1, inner = 1;
  for (int r = 0; r < a; r++) outer *= dims[r];
  for (int r = a + 1; r < first->rank; r++) inner *= dims[r];
  char *dst = (char *)o->data;
  for (int64_t q = 0; q < outer; q++)
    for (int i = 0; i < n; i++) {
      size_t chunk = (size_t)(in[i]->dims[a] * inner) * es;
      if (chunk) memcpy(dst, (const char *)in[i]->data + (size_t)q * chunk, chunk);
      dst += chunk;
    }
  return oi_fold_define(im, 0, o);
}

/* Cast and CastLike: among integer, bool and float types. */
static bool ev_cast(imp *im, const oi_fold_row *row, const onnx_tensor *const *in, int n) {
  (void)n;
  const onnx_tensor *t = in[0];
  int64_t to;
  if (str_eq(row->op, "CastLike")) to = in[1]->dtype;
  else if (!oi_attr_int(im, "to", 0, &to)) return false;
  if (!(oi_int_like((int)to) || oi_float_like((int)to)) || !(oi_int_like(t->dtype) || oi_float_like(t->dtype)))
    return UNSUPPORTED(im, "Cast of a %s constant to %s", onnx_dtype_name(t->dtype), onnx_dtype_name((int)to));
  onnx_tensor *o = oi_fold_tensor(im, (int)to, t->rank, t->dims);
  if (!o) return false;
  for (int64_t i = 0; i < t->numel; i++) {
    if (t->dtype == ONNX_INT64 && ((const int64_t *)t->data)[i] == DIM_N) {
      if (to != ONNX_INT64)
        return UNSUPPORTED(im, "Cast of the batch dimension N to %s: compile with --batch B", onnx_dtype_name((int)to));
      oi_elem_set_i64(o, i, DIM_N);
    } else if (oi_float_like(t->dtype)) {
      oi_elem_set_f64(o, i, oi_elem_f64(t, i));
    } else {
      oi_elem_set_i64(o, i, oi_elem_i64(t, i));
    }
  }
  return oi_fold_define(im, 0, o);
}

/* An index into a dimension of size d: negative from the end; out of
 * range an error naming it. */
static bool index_in(imp *im, int64_t i, int64_t d, const char *what, int64_t *out) {
  if (i < -d || i >= d)
    return FAIL(im, "%s index %lld is out of range for a dimension of %lld", what, (long long)i, (long long)d);
  *out = i < 0 ? i + d : i;
  return true;
}

static bool ev_gather(imp *im, const oi_fold_row *row, const onnx_tensor *const *in, int n) {
  (void)row, (void)n;
  const onnx_tensor *data = in[0], *idx = in[1];
  int64_t axis;
  if (!oi_attr_int(im, "axis", 0, &axis)) return false;
  int a = 0;
  if (!oi_norm_axis(im, axis, data->rank, "Gather axis", &a)) return false;
  if (!oi_int_like(idx->dtype) || idx->dtype == ONNX_BOOL)
    return FAIL(im, "Gather's indices must be integers, got %s", onnx_dtype_name(idx->dtype));
  int rank = data->rank - 1 + idx->rank;
  if (rank > ONNX_MAX_RANK) return UNSUPPORTED(im, "Gather to rank %d", rank);
  int64_t dims[ONNX_MAX_RANK];
  int k = 0;
  for (int r = 0; r < a; r++) dims[k++] = data->dims[r];
  for (int r = 0; r < idx->rank; r++) dims[k++] = idx->dims[r];
  for (int r = a + 1; r < data->rank; r++) dims[k++] = data->dims[r];
  onnx_tensor *o = oi_fold_tensor(im, data->dtype, rank, dims);
  if (!o) return false;
  size_t es = onnx_dtype_size(data->dtype);
  int64_t outer = 1, inner = 1, d = data->dims[a];
  for (int r = 0; r < a; r++) outer *= data->dims[r];
  for (int r = a + 1; r < data->rank; r++) inner *= data->dims[r];
  char *dst = (char *)o->data;
  for (int64_t q = 0; q < outer; q++)
    for (int64_t j = 0; j < idx->numel; j++) {
      int64_t i = 0;
      if (!index_in(im, oi_elem_i64(idx, j), d, "Gather", &i)) return false;
      if (inner) memcpy(dst, (const char *)data->data + (size_t)((q * d + i) * inner) * es, (size_t)inner * es);
      dst += (size_t)inner * es;
    }
  return oi_fold_define(im, 0, o);
}

/* The coordinates of flat index e in dims (row-major) and back. */
static void coords_of(int64_t e, int rank, const int64_t *dims, int64_t *c) {
  for (int r = rank - 1; r >= 0; r--) c[r] = dims[r] ? e % dims[r] : 0, e = dims[r] ? e / dims[r] : 0;
}
static int64_t flat_of(const int64_t *c, int rank, const int64_t *dims) {
  int64_t e = 0;
  for (int r = 0; r < rank; r++) e = e * dims[r] + c[r];
  return e;
}

/* GatherElements (out = data[.. idx ..] along axis) and ScatterElements
 * (a copy of data with updates written at idx along axis). */
static bool ev_elements(imp *im, const oi_fold_row *row, const onnx_tensor *const *in, int n) {
  (void)n;
  bool scatter = str_eq(row->op, "ScatterElements");
  const onnx_tensor *data = in[0], *idx = in[1], *upd = scatter ? in[2] : NULL;
  int64_t axis;
  if (!oi_attr_int(im, "axis", 0, &axis)) return false;
  int a = 0;
  if (!oi_norm_axis(im, axis, data->rank, "axis", &a)) return false;
  if (!oi_int_like(idx->dtype) || idx->dtype == ONNX_BOOL) return FAIL(im, "%s's indices must be integers", row->op);
  if (idx->rank != data->rank) return FAIL(im, "%s's indices have rank %d, the data %d", row->op, idx->rank, data->rank);
  if (scatter) {
    const onnx_attr *red = oi_attr_find(im, "reduction");
    if (red && !(red->type == ONNX_ATTR_STRING && str_eq(red->s, "none")))
      return UNSUPPORTED(im, "ScatterElements with a reduction (castor folds reduction='none')");
    if (upd->rank != idx->rank || upd->dtype != data->dtype) return FAIL(im, "ScatterElements' updates do not match its indices");
    for (int r = 0; r < idx->rank; r++)
      if (upd->dims[r] != idx->dims[r]) return FAIL(im, "ScatterElements' updates do not match its indices");
  }
  for (int r = 0; r < idx->rank; r++)
    if (r != a && idx->dims[r] > data->dims[r])
      return FAIL(im, "%s's indices are larger than the data in dimension %d", row->op, r);
  onnx_tensor *o = scatter ? oi_host_reshaped(im, data, data->rank, data->dims)
                           : oi_fold_tensor(im, data->dtype, idx->rank, idx->dims);
  if (!o) return false;
  size_t es = onnx_dtype_size(data->dtype);
  int64_t c[ONNX_MAX_RANK];
  for (int64_t e = 0; e < idx->numel; e++) {
    coords_of(e, idx->rank, idx->dims, c);
    if (!index_in(im, oi_elem_i64(idx, e), data->dims[a], row->op, &c[a])) return false;
    int64_t f = flat_of(c, data->rank, data->dims);
    if (scatter) memcpy((char *)o->data + (size_t)f * es, (const char *)upd->data + (size_t)e * es, es);
    else memcpy((char *)o->data + (size_t)e * es, (const char *)data->data + (size_t)f * es, es);
  }
  return oi_fold_define(im, 0, o);
}

/* GatherND (batch_dims 0) and ScatterND (reduction none): indices [.., k]
 * address slices of data's first k dims. */
static bool ev_nd(imp *im, const oi_fold_row *row, const onnx_tensor *const *in, int n) {
  (void)n;
  bool scatter = str_eq(row->op, "ScatterND");
  const onnx_tensor *data = in[0], *idx = in[1], *upd = scatter ? in[2] : NULL;
  int64_t bd = 0;
  if (!scatter && !oi_attr_int(im, "batch_dims", 0, &bd)) return false;
  if (bd != 0) return UNSUPPORTED(im, "GatherND with batch_dims %lld (castor folds 0)", (long long)bd);
  if (scatter) {
    const onnx_attr *red = oi_attr_find(im, "reduction");
    if (red && !(red->type == ONNX_ATTR_STRING && str_eq(red->s, "none")))
      return UNSUPPORTED(im, "ScatterND with a reduction (castor folds reduction='none')");
  }
  if (idx->rank < 1 || !oi_int_like(idx->dtype) || idx->dtype == ONNX_BOOL)
    return FAIL(im, "%s's indices must be an integer tensor of rank >= 1", row->op);
  int k = (int)idx->dims[idx->rank - 1];
  if (k < 0 || k > data->rank) return FAIL(im, "%s's index tuples have %d entries for data of rank %d", row->op, k, data->rank);
  int64_t inner = 1, tuples = 1;
  for (int r = k; r < data->rank; r++) inner *= data->dims[r];
  for (int r = 0; r < idx->rank - 1; r++) tuples *= idx->dims[r];
  int64_t dims[ONNX_MAX_RANK];
  int rank = 0;
  for (int r = 0; r < idx->rank - 1; r++) dims[rank++] = idx->dims[r];
  for (int r = k; r < data->rank; r++) {
    if (rank == ONNX_MAX_RANK) return UNSUPPORTED(im, "%s to more than %d dimensions", row->op, ONNX_MAX_RANK);
    dims[rank++] = data->dims[r];
  }
  if (scatter) {
    bool ok = upd->dtype == data->dtype && upd->rank == rank;
    for (int r = 0; ok && r < rank; r++) ok = upd->dims[r] == dims[r];
    if (!ok) return FAIL(im, "ScatterND's updates have the wrong shape");
  }
  onnx_tensor *o = scatter ? oi_host_reshaped(im, data, data->rank, data->dims) : oi_fold_tensor(im, data->dtype, rank, dims);
  if (!o) return false;
  size_t es = onnx_dtype_size(data->dtype), chunk = (size_t)inner * es;
  for (int64_t t = 0; t < tuples; t++) {
    int64_t off = 0;
    for (int j = 0; j < k; j++) {
      int64_t i = 0;
      if (!index_in(im, oi_elem_i64(idx, t * k + j), data->dims[j], row->op, &i)) return false;
      off = off * data->dims[j] + i;
    }
    if (!chunk) continue; /* empty slices: no data to move (and no buffers) */
    if (scatter) memcpy((char *)o->data + (size_t)off * chunk, (const char *)upd->data + (size_t)t * chunk, chunk);
    else memcpy((char *)o->data + (size_t)t * chunk, (const char *)data->data + (size_t)off * chunk, chunk);
  }
  return oi_fold_define(im, 0, o);
}

/* Slice: opset 10- takes starts, ends, axes, steps as inputs; before, as
 * attributes. numpy's rules for the bounds (INT64_MIN and INT64_MAX clamp). */
static bool ev_slice(imp *im, const oi_fold_row *row, const onnx_tensor *const *in, int n) {
  (void)row;
  const onnx_tensor *t = in[0];
  int64_t v[4][ONNX_MAX_RANK];
  int nv[4] = {-1, -1, -1, -1};
  const char *what[4] = {"starts", "ends", "axes", "steps"};
  for (int k = 0; k < 4; k++) {
    if (im->opset >= 10) {
      if (k + 1 < n && in[k + 1] && !oi_const_ints(im, in[k + 1], what[k], v[k], ONNX_MAX_RANK, &nv[k])) return false;
      continue;
    }
    const onnx_attr *a = k < 3 ? oi_attr_find(im, what[k]) : NULL;
    if (!a) continue;
    if (!oi_attr_typed(im, a, ONNX_ATTR_INTS)) return false;
    if (a->n > ONNX_MAX_RANK) return FAIL(im, "Slice's %s has %d elements", what[k], a->n);
    for (int i = 0; i < a->n; i++) v[k][i] = a->ints[i];
    nv[k] = a->n;
  }
  if (nv[0] < 0 || nv[1] != nv[0]) return FAIL(im, "Slice needs starts and ends of one length");
  if ((nv[2] >= 0 && nv[2] != nv[0]) || (nv[3] >= 0 && nv[3] != nv[0]))
    return FAIL(im, "Slice's axes and steps must have as many elements as its starts");
  int64_t lo[ONNX_MAX_RANK], step[ONNX_MAX_RANK], dims[ONNX_MAX_RANK];
  bool seen[ONNX_MAX_RANK] = {0};
  for (int r = 0; r < t->rank; r++) lo[r] = 0, step[r] = 1, dims[r] = t->dims[r];
  for (int i = 0; i < nv[0]; i++) {
    int a = i;
    if (nv[2] >= 0 && !oi_norm_axis(im, v[2][i], t->rank, "Slice axis", &a)) return false;
    if (nv[2] < 0 && i >= t->rank) return FAIL(im, "Slice has more starts than the data has dimensions");
    if (seen[a]) return FAIL(im, "Slice axis %d is given twice", a);
    seen[a] = true;
    int64_t d = t->dims[a], s = nv[3] >= 0 ? v[3][i] : 1, b = v[0][i], e = v[1][i];
    if (s == 0) return FAIL(im, "Slice: a step of 0");
    if (b < 0) b += d; /* INT64_MIN + d stays defined */
    if (e < 0) e += d;
    if (s > 0) {
      b = b < 0 ? 0 : b > d ? d : b;
      e = e < 0 ? 0 : e > d ? d : e;
    } else {
      b = b < 0 ? -1 : b > d - 1 ? d - 1 : b;
      e = e < -1 ? -1 : e > d - 1 ? d - 1 : e;
    }
    int64_t cnt = s > 0 ? (e > b ? (e - b + s - 1) / s : 0) : (b > e ? (b - e + (-s) - 1) / (-s) : 0);
    lo[a] = b, step[a] = s, dims[a] = cnt;
  }
  onnx_tensor *o = oi_fold_tensor(im, t->dtype, t->rank, dims);
  if (!o) return false;
  size_t es = onnx_dtype_size(t->dtype);
  int64_t c[ONNX_MAX_RANK];
  for (int64_t e = 0; e < o->numel; e++) {
    coords_of(e, t->rank, dims, c);
    for (int r = 0; r < t->rank; r++) c[r] = lo[r] + c[r] * step[r];
    memcpy((char *)o->data + (size_t)e * es, (const char *)t->data + (size_t)flat_of(c, t->rank, t->dims) * es, es);
  }
  return oi_fold_define(im, 0, o);
}

static bool ev_transpose(imp *im, const oi_fold_row *row, const onnx_tensor *const *in, int n) {
  (void)row, (void)n;
  const onnx_tensor *t = in[0];
  int64_t perm[ONNX_MAX_RANK], dims[ONNX_MAX_RANK], c[ONNX_MAX_RANK], s[ONNX_MAX_RANK];
  const onnx_attr *p = oi_attr_find(im, "perm");
  if (p && !oi_attr_typed(im, p, ONNX_ATTR_INTS)) return false;
  if (p && p->n != t->rank) return FAIL(im, "Transpose's perm has %d entries for rank %d", p->n, t->rank);
  bool used[ONNX_MAX_RANK] = {0};
  for (int r = 0; r < t->rank; r++) {
    perm[r] = p ? p->ints[r] : t->rank - 1 - r;
    if (perm[r] < 0 || perm[r] >= t->rank || used[perm[r]]) return FAIL(im, "Transpose's perm is not a permutation");
    used[perm[r]] = true;
    dims[r] = t->dims[perm[r]];
  }
  onnx_tensor *o = oi_fold_tensor(im, t->dtype, t->rank, dims);
  if (!o) return false;
  size_t es = onnx_dtype_size(t->dtype);
  for (int64_t e = 0; e < o->numel; e++) {
    coords_of(e, t->rank, dims, c);
    for (int r = 0; r < t->rank; r++) s[perm[r]] = c[r];
    memcpy((char *)o->data + (size_t)e * es, (const char *)t->data + (size_t)flat_of(s, t->rank, t->dims) * es, es);
  }
  return oi_fold_define(im, 0, o);
}

/* Expand (to a broadcast with a shape) and Tile (repeats). */
static bool ev_expand_tile(imp *im, const oi_fold_row *row, const onnx_tensor *const *in, int n) {
  (void)n;
  bool tile = str_eq(row->op, "Tile");
  const onnx_tensor *t = in[0];
  int64_t v[ONNX_MAX_RANK], dims[ONNX_MAX_RANK];
  int nv, rank;
  if (!oi_const_ints(im, in[1], tile ? "repeats" : "shape", v, ONNX_MAX_RANK, &nv)) return false;
  for (int i = 0; i < nv; i++)
    if (v[i] == DIM_N)
      return UNSUPPORTED(im, "%s to a shape with the batch dimension N: compile with --batch B", row->op);
  if (tile) {
    if (nv != t->rank) return FAIL(im, "Tile's repeats has %d entries for rank %d", nv, t->rank);
    rank = t->rank;
    for (int r = 0; r < rank; r++) {
      if (v[r] < 0) return FAIL(im, "Tile's repeats are negative");
      if (!size_mul_ok(t->dims[r], v[r], &dims[r]))
        return FAIL(im, "Tile's repeats (%lld) overflow a dimension of %lld", (long long)v[r], (long long)t->dims[r]);
    }
  } else {
    onnx_tensor shape = {.rank = nv};
    for (int i = 0; i < nv; i++) {
      if (v[i] < 0) return FAIL(im, "Expand's shape has a negative dimension %lld", (long long)v[i]);
      shape.dims[i] = v[i];
    }
    if (!oi_bcast_dims(im, (const onnx_tensor *[]){t, &shape}, 2, &rank, dims)) return false;
  }
  onnx_tensor *o = oi_fold_tensor(im, t->dtype, rank, dims);
  if (!o) return false;
  size_t es = onnx_dtype_size(t->dtype);
  int64_t c[ONNX_MAX_RANK];
  for (int64_t e = 0; e < o->numel; e++) {
    int64_t src;
    if (tile) {
      coords_of(e, rank, dims, c);
      for (int r = 0; r < rank; r++) c[r] %= t->dims[r];
      src = flat_of(c, rank, t->dims);
    } else {
      src = oi_bcast_index(t, rank, dims, e);
    }
    memcpy((char *)o->data + (size_t)e * es, (const char *)t->data + (size_t)src * es, es);
  }
  return oi_fold_define(im, 0, o);
}

/* NonZero: the coordinates [rank, count] of the non-zero elements. */
static bool ev_nonzero(imp *im, const oi_fold_row *row, const onnx_tensor *const *in, int n) {
  (void)row, (void)n;
  const onnx_tensor *t = in[0];
  int64_t count = 0, c[ONNX_MAX_RANK];
  for (int64_t e = 0; e < t->numel; e++) count += oi_elem_f64(t, e) != 0;
  onnx_tensor *o = oi_fold_tensor(im, ONNX_INT64, 2, (int64_t[]){t->rank, count});
  if (!o) return false;
  for (int64_t e = 0, j = 0; e < t->numel; e++) {
    if (oi_elem_f64(t, e) == 0) continue;
    coords_of(e, t->rank, t->dims, c);
    for (int r = 0; r < t->rank; r++) ((int64_t *)o->data)[r * count + j] = c[r];
    j++;
  }
  return oi_fold_define(im, 0, o);
}

/* ---- the table ---- */

static const oi_fold_row fold_rows[] = {
    /* data movement (this file) */
    {"Identity", 1, 1, ev_identity, OI_EV_NONE, ""},
    {"Unsqueeze", 1, 1, ev_unsqueeze, OI_EV_NONE, "axes"},
    {"Squeeze", 1, 1, ev_squeeze, OI_EV_NONE, "axes"},
    {"Flatten", 1, 1, ev_flatten, OI_EV_NONE, "axis"},
    {"Concat", 4, 1, ev_concat, OI_EV_NONE, "axis"},
    {"Cast", 6, 1, ev_cast, OI_EV_NONE, "to,saturate"},
    {"CastLike", 15, 2, ev_cast, OI_EV_NONE, "saturate"},
    {"Gather", 1, 2, ev_gather, OI_EV_NONE, "axis"},
    {"GatherElements", 11, 2, ev_elements, OI_EV_NONE, "axis"},
    {"ScatterElements", 11, 3, ev_elements, OI_EV_NONE, "axis,reduction"},
    {"GatherND", 11, 2, ev_nd, OI_EV_NONE, "batch_dims"},
    {"ScatterND", 11, 3, ev_nd, OI_EV_NONE, "reduction"},
    {"Slice", 1, 1, ev_slice, OI_EV_NONE, "starts,ends,axes"},
    {"Transpose", 1, 1, ev_transpose, OI_EV_NONE, "perm"},
    {"Expand", 8, 2, ev_expand_tile, OI_EV_NONE, ""},
    {"Tile", 6, 2, ev_expand_tile, OI_EV_NONE, ""},
    {"NonZero", 9, 1, ev_nonzero, OI_EV_NONE, ""},
    /* arithmetic (onnx_eval.c) */
    {"Add", 7, 2, oi_eval_elementwise, OI_EV_ADD, ""},
    {"Sub", 7, 2, oi_eval_elementwise, OI_EV_SUB, ""},
    {"Mul", 7, 2, oi_eval_elementwise, OI_EV_MUL, ""},
    {"Div", 7, 2, oi_eval_elementwise, OI_EV_DIV, ""},
    {"Mod", 10, 2, oi_eval_elementwise, OI_EV_MOD, "fmod"},
    {"Pow", 7, 2, oi_eval_elementwise, OI_EV_POW, ""},
    {"Max", 8, 1, oi_eval_elementwise, OI_EV_MAX, ""},
    {"Min", 8, 1, oi_eval_elementwise, OI_EV_MIN, ""},
    {"Equal", 7, 2, oi_eval_elementwise, OI_EV_EQ, ""},
    {"Less", 7, 2, oi_eval_elementwise, OI_EV_LT, ""},
    {"Greater", 7, 2, oi_eval_elementwise, OI_EV_GT, ""},
    {"LessOrEqual", 12, 2, oi_eval_elementwise, OI_EV_LE, ""},
    {"GreaterOrEqual", 12, 2, oi_eval_elementwise, OI_EV_GE, ""},
    {"And", 7, 2, oi_eval_elementwise, OI_EV_AND, ""},
    {"Or", 7, 2, oi_eval_elementwise, OI_EV_OR, ""},
    {"Xor", 7, 2, oi_eval_elementwise, OI_EV_XOR, ""},
    {"Not", 1, 1, oi_eval_elementwise, OI_EV_NOT, ""},
    {"Neg", 6, 1, oi_eval_elementwise, OI_EV_NEG, ""},
    {"Abs", 6, 1, oi_eval_elementwise, OI_EV_ABS, ""},
    {"Sign", 9, 1, oi_eval_elementwise, OI_EV_SIGN, ""},
    {"Sqrt", 6, 1, oi_eval_elementwise, OI_EV_SQRT, ""},
    {"Exp", 6, 1, oi_eval_elementwise, OI_EV_EXP, ""},
    {"Log", 6, 1, oi_eval_elementwise, OI_EV_LOG, ""},
    {"Reciprocal", 6, 1, oi_eval_elementwise, OI_EV_RECIP, ""},
    {"Floor", 6, 1, oi_eval_elementwise, OI_EV_FLOOR, ""},
    {"Ceil", 6, 1, oi_eval_elementwise, OI_EV_CEIL, ""},
    {"Round", 11, 1, oi_eval_elementwise, OI_EV_ROUND, ""},
    {"IsNaN", 9, 1, oi_eval_elementwise, OI_EV_ISNAN, ""},
    {"IsInf", 10, 1, oi_eval_elementwise, OI_EV_ISINF, ""},
    {"Where", 9, 3, oi_eval_where, OI_EV_NONE, ""},
    {"Range", 11, 3, oi_eval_range, OI_EV_NONE, ""},
    {"CumSum", 11, 2, oi_eval_cumsum, OI_EV_NONE, "exclusive,reverse"},
    {"Trilu", 14, 1, oi_eval_trilu, OI_EV_NONE, "upper"},
    {"ReduceSum", 1, 1, oi_eval_reduce, OI_EV_ADD, "axes,keepdims,noop_with_empty_axes"},
    {"ReduceProd", 1, 1, oi_eval_reduce, OI_EV_MUL, "axes,keepdims,noop_with_empty_axes"},
    {"ReduceMax", 1, 1, oi_eval_reduce, OI_EV_MAX, "axes,keepdims,noop_with_empty_axes"},
    {"ReduceMin", 1, 1, oi_eval_reduce, OI_EV_MIN, "axes,keepdims,noop_with_empty_axes"},
    {"ReduceMean", 1, 1, oi_eval_reduce, OI_EV_MEAN, "axes,keepdims,noop_with_empty_axes"},
};

/* A value the evaluator may read: a host constant that is not also a
 * run-time input (a float input bound where needed keeps its input). */
static const onnx_tensor *host_value(imp *im, const char *name) {
  imp_val *v = oi_val_find(im, name);
  if (!v || !v->k || (v->node && v->node->op != IR_OP_CONST)) return NULL;
  return v->k;
}

/* A node whose inputs are all host constants, of an op with a row:
 * evaluated here. *folded says whether it was one. */
bool oi_try_fold(imp *im, const onnx_node *n, bool *folded) {
  *folded = false;
  const oi_fold_row *row = NULL;
  for (size_t i = 0; i < sizeof fold_rows / sizeof *fold_rows && !row; i++)
    if (str_eq(fold_rows[i].op, n->op_type) && im->opset >= fold_rows[i].since) row = &fold_rows[i];
  if (!row || n->n_inputs < row->min_inputs || n->n_inputs == 0) return true;
  const onnx_tensor **in = arena_alloc(im->g->arena, (size_t)n->n_inputs * sizeof *in);
  for (int i = 0; i < n->n_inputs; i++) {
    in[i] = NULL;
    if (!*n->inputs[i]) {
      if (i < row->min_inputs) return true; /* a required input omitted: the lowering says so */
      continue;
    }
    if (!(in[i] = host_value(im, n->inputs[i]))) return true;
    if (in[i]->numel > OI_FOLD_MAX) return true; /* a large weight: the lowering's run-time op, as before */
  }
  if (!oi_attrs_known(im, &(op_row){row->op, row->since, 0, NULL, IR_OP_COUNT, row->attrs})) return false;
  *folded = true;
  bool param = false; /* a value folded from a parameter is one (a reshaped initializer) */
  for (int i = 0; i < n->n_inputs; i++) {
    const imp_val *v = *n->inputs[i] ? oi_val_find(im, n->inputs[i]) : NULL;
    param |= v && v->param;
  }
  im->defining_param = param;
  bool ok = row->eval(im, row, in, n->n_inputs);
  im->defining_param = false;
  return ok;
}
