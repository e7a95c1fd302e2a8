/*
 * summary.c: the one-line description of an output tensor that `castor run`
 * and AOT executables print ("predictions: f32[4,10] min .. max .. mean ..
 * argmax [..]"). One function, so the two stay byte-identical (the AOT tests
 * compare them).
 */
#include <inttypes.h>
#include <math.h>

#include "runtime.h"

void rt_tensor_summary(str_buf *out, const char *name, rt_dtype dtype, int rank, const int64_t *dims,
                       const void *data) {
  str_buf_printf(out, "%s: %s[", name, rt_dtype_name(dtype));
  int64_t n = 1;
  for (int r = 0; r < rank; r++) str_buf_printf(out, "%s%" PRId64, r ? "," : "", dims[r]), n *= dims[r];
  str_buf_putc(out, ']');
  if (dtype != RT_F32) {
    str_buf_putc(out, '\n');
    return;
  }
  const float *x = data;
  double lo = INFINITY, hi = -INFINITY, sum = 0;
  for (int64_t i = 0; i < n; i++) {
    lo = x[i] < lo ? x[i] : lo;
    hi = x[i] > hi ? x[i] : hi;
    sum += x[i];
  }
  str_buf_printf(out, " min %.6g max %.6g mean %.6g", lo, hi, n ? sum / (double)n : 0.0);
  if (rank >= 1) {
    int64_t rows = dims[0], cols = n / (rows ? rows : 1), show = rows < 8 ? rows : 8;
    str_buf_puts(out, " argmax [");
    for (int64_t r = 0; r < show; r++) {
      int64_t best = 0;
      for (int64_t j = 1; j < cols; j++)
        if (x[r * cols + j] > x[r * cols + best]) best = j;
      str_buf_printf(out, "%s%" PRId64, r ? ", " : "", best);
    }
    str_buf_puts(out, rows > show ? ", ...]" : "]");
  }
  str_buf_putc(out, '\n');
}
