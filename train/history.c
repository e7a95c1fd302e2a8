/* SPDX-License-Identifier: Apache-2.0 */
/*
 * history.c: the per-epoch metrics and the loss-scale trace of a training
 * run, and their CSV files (see history.h for the columns). The SVG plot of
 * the same history is in history_svg.c.
 */
#include "train/history.h"

#include "util/atomic_file.h"

#include <math.h>
#include <string.h>

void rt_history_init(rt_history *h, bool has_accuracy, bool has_validation, bool has_loss_scale) {
  *h = (rt_history){.has_accuracy = has_accuracy, .has_validation = has_validation,
                    .has_loss_scale = has_loss_scale};
}

void rt_history_fini(rt_history *h) {
  if (!h) return;
  free(h->epochs);
  free(h->scale);
  *h = (rt_history){0};
}

void rt_history_add_epoch(rt_history *h, const rt_epoch_record *r) {
  if (h->n_epochs == h->cap_epochs) {
    h->cap_epochs = h->cap_epochs ? 2 * h->cap_epochs : 16;
    h->epochs = xrealloc(h->epochs, (size_t)h->cap_epochs * sizeof *h->epochs);
  }
  h->epochs[h->n_epochs++] = *r;
}

void rt_history_add_scale(rt_history *h, int64_t step, int64_t epoch, double loss_scale,
                          int64_t steps_skipped) {
  CASTOR_ASSERT(h->n_scale == 0 || step > h->scale[h->n_scale - 1].step);
  if (h->n_scale == h->cap_scale) {
    h->cap_scale = h->cap_scale ? 2 * h->cap_scale : 256;
    h->scale = xrealloc(h->scale, (size_t)h->cap_scale * sizeof *h->scale);
  }
  h->scale[h->n_scale++] = (rt_scale_point){step, epoch, loss_scale, steps_skipped};
}

/* %.9g for finite values (exact for float32), else nan / inf / -inf. */
static void put_num(str_buf *b, double v, const char *fmt) {
  if (isnan(v)) str_buf_puts(b, "nan");
  else if (isinf(v)) str_buf_puts(b, v > 0 ? "inf" : "-inf");
  else str_buf_printf(b, fmt, v);
}

void rt_history_csv(const rt_history *h, str_buf *out) {
  str_buf_puts(out, "epoch,loss");
  if (h->has_accuracy) str_buf_puts(out, ",accuracy");
  if (h->has_validation) str_buf_puts(out, h->has_accuracy ? ",val_loss,val_accuracy" : ",val_loss");
  str_buf_puts(out, ",seconds,seconds_per_sample");
  if (h->has_loss_scale) str_buf_puts(out, ",loss_scale,steps_skipped");
  str_buf_putc(out, '\n');
  for (int64_t i = 0; i < h->n_epochs; i++) {
    const rt_epoch_record *r = &h->epochs[i];
    str_buf_printf(out, "%lld,", (long long)r->epoch);
    put_num(out, r->loss, "%.9g");
    if (h->has_accuracy) str_buf_putc(out, ','), put_num(out, r->accuracy, "%.9g");
    if (h->has_validation) {
      str_buf_putc(out, ','), put_num(out, r->val_loss, "%.9g");
      if (h->has_accuracy) str_buf_putc(out, ','), put_num(out, r->val_accuracy, "%.9g");
    }
    str_buf_putc(out, ','), put_num(out, r->seconds, "%.6f");
    str_buf_putc(out, ','), put_num(out, r->seconds_per_sample, "%.9g");
    if (h->has_loss_scale) {
      str_buf_putc(out, ','), put_num(out, r->loss_scale, "%.17g");
      str_buf_printf(out, ",%lld", (long long)r->steps_skipped);
    }
    str_buf_putc(out, '\n');
  }
}

void rt_history_scale_csv(const rt_history *h, str_buf *out) {
  str_buf_puts(out, "step,epoch,loss_scale,steps_skipped\n");
  for (int64_t i = 0; i < h->n_scale; i++) {
    const rt_scale_point *p = &h->scale[i];
    str_buf_printf(out, "%lld,%lld,", (long long)p->step, (long long)p->epoch);
    put_num(out, p->loss_scale, "%.17g");
    str_buf_printf(out, ",%lld\n", (long long)p->steps_skipped);
  }
}

char *rt_history_scale_csv_path(const char *csv_path) {
  size_t n = strlen(csv_path);
  str_buf b;
  str_buf_init(&b);
  if (n >= 4 && strcmp(csv_path + n - 4, ".csv") == 0) n -= 4;
  str_buf_append(&b, csv_path, n);
  str_buf_puts(&b, ".loss_scale.csv");
  return str_buf_take(&b);
}

bool rt_history_write_csv(const rt_history *h, const char *csv_path, const char *scale_path,
                          diag_sink *d) {
  str_buf b;
  str_buf_init(&b);
  rt_history_csv(h, &b);
  bool ok = atomic_file_write_all(csv_path, b.data, b.len, d);
  if (ok && h->has_loss_scale) {
    char *derived = scale_path ? NULL : rt_history_scale_csv_path(csv_path);
    str_buf_clear(&b);
    rt_history_scale_csv(h, &b);
    ok = atomic_file_write_all(scale_path ? scale_path : derived, b.data, b.len, d);
    free(derived);
  }
  str_buf_fini(&b);
  return ok;
}
