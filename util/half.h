/*
 * half.h: bit-exact float16 / bfloat16 <-> float32 conversions on the host.
 * Narrowing rounds to nearest, ties to even, keeps NaN quiet (sign and top
 * payload bits kept) and produces subnormals and infinities as IEEE 754
 * requires, matching NumPy's float16 and ml_dtypes' bfloat16.
 */
#ifndef CASTOR_HALF_H
#define CASTOR_HALF_H

#include <stdint.h>

float half_f16_to_f32(uint16_t h);
uint16_t half_f32_to_f16(float f);
float half_bf16_to_f32(uint16_t h);
uint16_t half_f32_to_bf16(float f);

#endif
