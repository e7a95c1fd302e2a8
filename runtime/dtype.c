/*
 * dtype.c: sizes and names of the runtime's element types. rt_dtype mirrors
 * ir_dtype and castor_dtype value for value; the runtime cannot include the
 * IR, so the table is repeated here (names match ir_dtypes.def).
 */
#include "runtime.h"

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
