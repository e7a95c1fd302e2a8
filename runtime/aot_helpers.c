/*
 * aot_helpers.c: the runtime helpers of runtime/helpers.c under their real
 * symbol names, for code compiled ahead of time. The JIT resolves generated
 * calls through rt_helper_symbols(); an AOT object instead links against
 * these (libcastor_runtime.a). They are weak, so a libgcc that has them
 * (GCC 13 and later) or the program's own definitions win.
 */
#include "../util/half.h"
#include "runtime.h"

float __truncsfbf2(float x) __attribute__((weak));

/* LLVM 19 lowers float -> bfloat on x86 to this call; the bf16 bits are
 * returned in the low half of xmm0, as the x86-64 ABI passes __bf16. */
float __truncsfbf2(float x) {
  union {
    uint32_t u;
    float f;
  } r = {half_f32_to_bf16(x)};
  return r.f;
}
