/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fe_weights.h: what every frontend does with a weights file's tensor
 * (formats/safetensors.h): its values as f32, F16 and BF16 widened exactly
 * (util/half.h), and the non-finite values among them counted, for the
 * warning each frontend gives with its own location.
 */
#ifndef CASTOR_FRONTEND_FE_WEIGHTS_H
#define CASTOR_FRONTEND_FE_WEIGHTS_H

#include "formats/safetensors.h"

typedef struct fe_nonfinite {
  int64_t nan, pinf, ninf;
} fe_nonfinite;

/* t's numel values into dst as f32 (F32 copied, F16/BF16 widened), little-endian
 * and maybe unaligned in the file; returns the counts of NaN, +Inf and -Inf. */
fe_nonfinite fe_tensor_to_f32(const safetensors_tensor *t, float *dst);
/* "3 NaN, 1 +Inf, 2 -Inf", leaving out the zero counts. */
void fe_nonfinite_str(str_buf *b, fe_nonfinite nf);
static inline bool fe_nonfinite_any(fe_nonfinite nf) { return nf.nan + nf.pinf + nf.ninf > 0; }

#endif
