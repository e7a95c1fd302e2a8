/* SPDX-License-Identifier: Apache-2.0 */
/*
 * dtype.h: the element types, one table for the whole project
 * (util/dtypes.def): the IR's (ir_dtype), the runtime's (rt_dtype) and the
 * public API's (castor_dtype, value for value; api/castor.c checks it) are
 * this one enum, so a dtype crosses layers without a conversion.
 */
#ifndef CASTOR_UTIL_DTYPE_H
#define CASTOR_UTIL_DTYPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The most dimensions a tensor has anywhere in castor: the IR's types
 * (IR_MAX_RANK), the runtime's tensors (RT_MAX_RANK) and the file formats
 * (NPY_MAX_RANK, SAFETENSORS_MAX_RANK) are all this one limit. */
enum { TENSOR_MAX_RANK = 6 };

typedef enum dtype_id {
#define DTYPE(e, name, size, isfloat) DT_##e,
#include "util/dtypes.def"
#undef DTYPE
  DT_COUNT
} dtype_id;

/* "f32", ...; "?" for a value outside the table */
const char *dtype_name(dtype_id t);
/* bytes per element */
int dtype_size(dtype_id t);
bool dtype_is_float(dtype_id t);
/* The dtype named by s[0..n), if any. */
bool dtype_from_name(const char *s, size_t n, dtype_id *out);
/* Element i of an array of dtype t, converted (rounding to nearest even;
 * integers truncate, i1 is v != 0). */
void dtype_store_double(dtype_id t, void *dst, int64_t i, double v);
double dtype_load_double(dtype_id t, const void *src, int64_t i);

#endif
