/* SPDX-License-Identifier: Apache-2.0 */
/* fe_weights.c: a weights file's tensor as f32, for every frontend (fe_weights.h). */
#include "frontend/fe_weights.h"

#include "util/half.h"

#include <math.h>
#include <string.h>

fe_nonfinite fe_tensor_to_f32(const safetensors_tensor *t, float *dst) {
  int64_t n = 1;
  for (int i = 0; i < t->rank; i++) n *= t->dims[i]; /* validated by the reader */
  const unsigned char *src = t->data;
  for (int64_t i = 0; i < n; i++) {
    switch (t->dtype) {
    case DT_F32: {
      uint32_t bits = (uint32_t)src[4 * i] | (uint32_t)src[4 * i + 1] << 8 |
                      (uint32_t)src[4 * i + 2] << 16 | (uint32_t)src[4 * i + 3] << 24;
      memcpy(&dst[i], &bits, sizeof bits);
      break;
    }
    case DT_F16:
      dst[i] = half_f16_to_f32((uint16_t)(src[2 * i] | src[2 * i + 1] << 8));
      break;
    case DT_BF16:
      dst[i] = half_bf16_to_f32((uint16_t)(src[2 * i] | src[2 * i + 1] << 8));
      break;
    case DT_I32:
    case DT_I64:
    case DT_I1:
    case DT_COUNT:
      CASTOR_UNREACHABLE(); /* the reader accepts float dtypes only */
    }
  }
  fe_nonfinite nf = {0, 0, 0};
  for (int64_t i = 0; i < n; i++)
    if (!isfinite(dst[i])) isnan(dst[i]) ? nf.nan++ : dst[i] > 0 ? nf.pinf++ : nf.ninf++;
  return nf;
}

void fe_nonfinite_str(str_buf *b, fe_nonfinite nf) {
  const char *sep = "";
  if (nf.nan) str_buf_printf(b, "%lld NaN", (long long)nf.nan), sep = ", ";
  if (nf.pinf) str_buf_printf(b, "%s%lld +Inf", sep, (long long)nf.pinf), sep = ", ";
  if (nf.ninf) str_buf_printf(b, "%s%lld -Inf", sep, (long long)nf.ninf);
}
