/* SPDX-License-Identifier: Apache-2.0 */
/*
 * helpers.c: functions generated code may call.
 *
 * LLVM 19 lowers fptrunc float -> bfloat on x86 to a call of __truncsfbf2,
 * which Debian 12's libgcc lacks; castor's own kernels round to bf16 with
 * integer ops, but any LLVM-generated conversion still finds this one: the
 * JIT resolves it through rt_helper_symbols(), and code compiled ahead of
 * time links it from libcastor_runtime.a under its real name. It is weak,
 * so a libgcc that has it (GCC 13 and later) or the program's own wins.
 * It returns the bf16 bits in the low half of xmm0, as the x86-64 ABI
 * passes __bf16 (declared here as float and reinterpreted).
 */
#include <string.h>

#include "util/half.h"
#include "runtime/runtime.h"

float __truncsfbf2(float x) __attribute__((weak));

float __truncsfbf2(float x) {
  uint32_t u = half_f32_to_bf16(x); /* the caller ignores the upper bits */
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

static const rt_symbol helper_symbols[] = {
    {"__truncsfbf2", (void (*)(void))__truncsfbf2},
    {0, 0},
};

const rt_symbol *rt_helper_symbols(void) { return helper_symbols; }
