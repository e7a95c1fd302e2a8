/*
 * helpers.c: functions generated code may call and the JIT must resolve.
 *
 * LLVM 19 lowers fptrunc float -> bfloat on x86 to a call of __truncsfbf2,
 * which Debian 12's libgcc lacks; castor's own kernels round to bf16 with
 * integer ops, but any LLVM-generated conversion still finds this one.
 * It returns the bf16 bits in the low half of an xmm register, as the
 * x86-64 ABI passes __bf16 (here declared as float and reinterpreted).
 */
#include <string.h>

#include "../util/half.h"
#include "runtime.h"

static float castor_truncsfbf2(float x) {
  uint16_t h = half_f32_to_bf16(x);
  uint32_t u = h; /* upper bits are ignored by the caller */
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

static const rt_symbol helper_symbols[] = {
    {"__truncsfbf2", (void (*)(void))castor_truncsfbf2},
    {0, 0},
};

const rt_symbol *rt_helper_symbols(void) { return helper_symbols; }
