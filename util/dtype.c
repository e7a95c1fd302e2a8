/* SPDX-License-Identifier: Apache-2.0 */
/*
 * dtype.c: the dtype table (dtypes.def) and element conversions.
 */
#include "util/dtype.h"

#include <string.h>

#include "util/half.h"
#include "util/util.h"

static const struct {
  const char *name;
  int size;
  bool is_float;
} dtype_table[DT_COUNT] = {
#define DTYPE(e, name, size, isfloat) [DT_##e] = {#name, size, isfloat},
#include "util/dtypes.def"
#undef DTYPE
};

const char *dtype_name(dtype_id t) { return (unsigned)t < DT_COUNT ? dtype_table[t].name : "?"; }
int dtype_size(dtype_id t) { return dtype_table[t].size; }
bool dtype_is_float(dtype_id t) { return dtype_table[t].is_float; }

bool dtype_from_name(const char *s, size_t n, dtype_id *out) {
  for (int i = 0; i < DT_COUNT; i++)
    if (strlen(dtype_table[i].name) == n && !memcmp(s, dtype_table[i].name, n)) return *out = (dtype_id)i, true;
  return false;
}

void dtype_store_double(dtype_id t, void *dst, int64_t i, double v) {
  switch (t) {
  case DT_F32: ((float *)dst)[i] = (float)v; return;
  case DT_F16: ((uint16_t *)dst)[i] = half_f32_to_f16((float)v); return;
  case DT_BF16: ((uint16_t *)dst)[i] = half_f32_to_bf16((float)v); return;
  case DT_I32: ((int32_t *)dst)[i] = (int32_t)v; return;
  case DT_I64: ((int64_t *)dst)[i] = (int64_t)v; return;
  case DT_I1: ((uint8_t *)dst)[i] = v != 0; return;
  case DT_COUNT: break;
  }
  CASTOR_UNREACHABLE();
}

double dtype_load_double(dtype_id t, const void *src, int64_t i) {
  switch (t) {
  case DT_F32: return ((const float *)src)[i];
  case DT_F16: return half_f16_to_f32(((const uint16_t *)src)[i]);
  case DT_BF16: return half_bf16_to_f32(((const uint16_t *)src)[i]);
  case DT_I32: return ((const int32_t *)src)[i];
  case DT_I64: return (double)((const int64_t *)src)[i];
  case DT_I1: return ((const uint8_t *)src)[i] != 0;
  case DT_COUNT: break;
  }
  CASTOR_UNREACHABLE();
  return 0;
}
