/*
 * dtype.c: sizes and names of the runtime's element types. rt_dtype mirrors
 * ir_dtype and castor_dtype value for value; the runtime cannot include the
 * IR, so the table is repeated here (names match ir_dtypes.def).
 */
#include "runtime.h"

#include "../util/half.h"

int rt_dtype_size(rt_dtype t) {
  switch (t) {
  case RT_F32: return 4;
  case RT_F16: return 2;
  case RT_BF16: return 2;
  case RT_I32: return 4;
  case RT_I64: return 8;
  case RT_I1: return 1;
  }
  CASTOR_UNREACHABLE();
  return 0;
}

const char *rt_dtype_name(rt_dtype t) {
  switch (t) {
  case RT_F32: return "f32";
  case RT_F16: return "f16";
  case RT_BF16: return "bf16";
  case RT_I32: return "i32";
  case RT_I64: return "i64";
  case RT_I1: return "i1";
  }
  return "?";
}

void rt_store_double(rt_dtype t, void *dst, int64_t i, double v) {
  switch (t) {
  case RT_F32: ((float *)dst)[i] = (float)v; return;
  case RT_F16: ((uint16_t *)dst)[i] = half_f32_to_f16((float)v); return;
  case RT_BF16: ((uint16_t *)dst)[i] = half_f32_to_bf16((float)v); return;
  case RT_I32: ((int32_t *)dst)[i] = (int32_t)v; return;
  case RT_I64: ((int64_t *)dst)[i] = (int64_t)v; return;
  case RT_I1: ((uint8_t *)dst)[i] = v != 0; return;
  }
  CASTOR_UNREACHABLE();
}

double rt_load_double(rt_dtype t, const void *src, int64_t i) {
  switch (t) {
  case RT_F32: return ((const float *)src)[i];
  case RT_F16: return half_f16_to_f32(((const uint16_t *)src)[i]);
  case RT_BF16: return half_bf16_to_f32(((const uint16_t *)src)[i]);
  case RT_I32: return ((const int32_t *)src)[i];
  case RT_I64: return (double)((const int64_t *)src)[i];
  case RT_I1: return ((const uint8_t *)src)[i] != 0;
  }
  CASTOR_UNREACHABLE();
  return 0;
}
