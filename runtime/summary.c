/* SPDX-License-Identifier: Apache-2.0 */
/*
 * summary.c: the one-line description of an output tensor that `castor run`
 * and AOT executables print ("predictions: f32[4,10] min .. max .. mean ..
 * argmax [..]"). One function, so the two stay byte-identical (the AOT tests
 * compare them).
 *
 * NaN and Inf are never hidden: min, max and mean are over the finite
 * values, and when there are others the line counts them ("; 3 NaN, 1 +Inf
 * (min, max and mean of the 4 finite values)"). argmax skips NaN. Float16
 * and bfloat16 tensors are summarized like float32 ones.
 */
#include <inttypes.h>
#include <math.h>

#include "util/half.h"
#include "runtime/runtime.h"

static bool is_float(rt_dtype t) { return t == DT_F32 || t == DT_F16 || t == DT_BF16; }

/* Element i of a float tensor (is_float). */
static float at(rt_dtype t, const void *data, int64_t i) {
  if (t == DT_F16) return half_f16_to_f32(((const uint16_t *)data)[i]);
  if (t == DT_BF16) return half_bf16_to_f32(((const uint16_t *)data)[i]);
  return ((const float *)data)[i];
}

static int64_t numel(int rank, const int64_t *dims) {
  int64_t n = 1;
  for (int r = 0; r < rank; r++) n *= dims[r];
  return n;
}

bool rt_tensor_nonfinite(rt_dtype dtype, int rank, const int64_t *dims, const void *data, int64_t out[3]) {
  out[0] = out[1] = out[2] = 0;
  if (!is_float(dtype)) return false;
  int64_t n = numel(rank, dims);
  for (int64_t i = 0; i < n; i++) {
    float x = at(dtype, data, i);
    if (!isfinite(x)) out[isnan(x) ? 0 : x > 0 ? 1 : 2]++;
  }
  return out[0] + out[1] + out[2] > 0;
}

void rt_nonfinite_str(str_buf *out, const int64_t counts[3]) {
  static const char *const what[3] = {"NaN", "+Inf", "-Inf"};
  const char *sep = "";
  for (int k = 0; k < 3; k++)
    if (counts[k]) str_buf_printf(out, "%s%" PRId64 " %s", sep, counts[k], what[k]), sep = ", ";
}

void rt_tensor_summary(str_buf *out, const char *name, rt_dtype dtype, int rank, const int64_t *dims,
                       const void *data) {
  str_buf_printf(out, "%s: %s[", name, dtype_name(dtype));
  int64_t n = numel(rank, dims);
  for (int r = 0; r < rank; r++) str_buf_printf(out, "%s%" PRId64, r ? "," : "", dims[r]);
  str_buf_putc(out, ']');
  if (!is_float(dtype)) {
    str_buf_putc(out, '\n');
    return;
  }
  if (n == 0) { /* empty tensors: no min, max, mean or argmax to show */
    str_buf_puts(out, " (empty)\n");
    return;
  }
  double lo = INFINITY, hi = -INFINITY, sum = 0;
  int64_t finite = 0, bad[3];
  for (int64_t i = 0; i < n; i++) {
    double x = at(dtype, data, i);
    if (!isfinite(x)) continue;
    lo = x < lo ? x : lo;
    hi = x > hi ? x : hi;
    sum += x;
    finite++;
  }
  bool any_bad = rt_tensor_nonfinite(dtype, rank, dims, data, bad);
  if (any_bad && finite == 0) {
    str_buf_putc(out, ' ');
    rt_nonfinite_str(out, bad);
    str_buf_puts(out, " (no finite values)\n");
    return;
  }
  str_buf_printf(out, " min %.6g max %.6g mean %.6g", n ? lo : 0.0, n ? hi : 0.0, finite ? sum / (double)finite : 0.0);
  if (rank >= 1) {
    int64_t rows = dims[0], cols = n / (rows ? rows : 1), show = rows < 8 ? rows : 8;
    str_buf_puts(out, " argmax [");
    for (int64_t r = 0; r < show; r++) {
      int64_t best = 0;
      for (int64_t j = 1; j < cols; j++) {
        float b = at(dtype, data, r * cols + best), x = at(dtype, data, r * cols + j);
        if (x > b || (isnan(b) && !isnan(x))) best = j;
      }
      str_buf_printf(out, "%s%" PRId64, r ? ", " : "", best);
    }
    str_buf_puts(out, rows > show ? ", ...]" : "]");
  }
  if (any_bad) {
    str_buf_puts(out, "; ");
    rt_nonfinite_str(out, bad);
    str_buf_printf(out, " (min, max and mean of the %" PRId64 " finite values)", finite);
  }
  str_buf_putc(out, '\n');
}

bool rt_check_indices(const rt_tensor_desc *t, const int64_t *dims, const void *data, diag_sink *d) {
  if ((t->index_limit <= 0 && t->length_limit <= 0) || dtype_is_float(t->dtype) || t->dtype == DT_I1) return true;
  int64_t n = 1;
  for (int r = 0; r < t->rank; r++) n *= dims[r];
  int64_t lim = t->index_limit, len = t->length_limit;
  for (int64_t i = 0; i < n; i++) {
    int64_t v = t->dtype == DT_I64 ? ((const int64_t *)data)[i] : ((const int32_t *)data)[i];
    bool index_ok = lim <= 0 || (v >= -lim && v < lim), length_ok = len <= 0 || (v >= 0 && v <= len);
    if (index_ok && length_ok) continue;
    str_buf at;
    str_buf_init(&at);
    int64_t c[RT_MAX_RANK], q = i;
    for (int r = t->rank - 1; r >= 0; r--) c[r] = dims[r] ? q % dims[r] : 0, q = dims[r] ? q / dims[r] : 0;
    for (int r = 0; r < t->rank; r++) str_buf_printf(&at, "%s%lld", r ? ", " : "", (long long)c[r]);
    if (!index_ok)
      diag_error_kind(d, DIAG_KIND_INVALID_ARGUMENT, (diag_loc){0},
                      "input '%s' [%s] = %lld is outside [-%lld, %lld), the rows of the table that gather '%s' reads "
                      "(a negative index counts from the end)", t->name, str_buf_cstr(&at), (long long)v,
                      (long long)lim, (long long)lim, t->index_user ? t->index_user : "?");
    else
      diag_error_kind(d, DIAG_KIND_INVALID_ARGUMENT, (diag_loc){0},
                      "input '%s' [%s] = %lld is outside [0, %lld], the sequence lengths of the %lld steps that '%s' "
                      "scans", t->name, str_buf_cstr(&at), (long long)v, (long long)len, (long long)len,
                      t->length_user ? t->length_user : "?");
    str_buf_fini(&at);
    return false;
  }
  return true;
}
