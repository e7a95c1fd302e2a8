/* SPDX-License-Identifier: Apache-2.0 */
/*
 * history.h: the metrics of a training run, as `castor train --history
 * OUT.csv --plot OUT.svg` writes them: one record per epoch and a trace of
 * the loss scale over steps, written as CSV and drawn as SVG (by castor
 * itself, no plotting dependency). docs/training-data.md shows both.
 *
 * CSV (--history OUT.csv). One header line, then one row per epoch:
 *   epoch,loss[,accuracy][,val_loss[,val_accuracy]],seconds,seconds_per_sample
 *        [,loss_scale,steps_skipped]
 * Columns of metrics the run does not have are left out, as Keras's
 * CSVLogger does; epoch counts from 1, as the progress lines print it
 * (CSVLogger counts from 0). Metrics print with 9 significant digits
 * (exact for float32), the loss scale exactly, NaN and infinities as
 * "nan", "inf", "-inf" (what Python's float() and pandas read).
 * With loss scaling, the trace goes to a second file beside it (a CSV file
 * holds one table): OUT.loss_scale.csv (".csv" replaced; rt_history_
 * scale_csv_path), header step,epoch,loss_scale,steps_skipped, one row per
 * recorded step: the scale that step used and the skips before it.
 * Both files are replaced atomically (util/atomic_file.h), one after the
 * other.
 *
 * SVG (--plot OUT.svg): stacked panels sharing one style: loss and
 * val_loss against epochs; accuracy and val_accuracy against epochs (when
 * the run has accuracy); the loss scale against steps on a log2 axis, as a
 * step function with the skipped steps marked (with loss scaling: a point
 * is marked when the next point's steps_skipped grows, the last point when
 * the last epoch's total is larger than its own count, so the trace should
 * hold every step, as castor train records it). Each
 * panel has a frame, grid lines at "nice" ticks (1, 2, 5 x 10^k), tick
 * labels, axis titles and a legend. Non-finite values break a line instead
 * of bending the axis. Valid standalone XML (checked with xmllint in the
 * tests), viewable in any browser.
 */
#ifndef CASTOR_HISTORY_H
#define CASTOR_HISTORY_H

#include "runtime/runtime.h"

typedef struct rt_epoch_record {
  int64_t epoch;             /* 1-based */
  double loss, accuracy;     /* training metrics, mean over the epoch */
  double val_loss, val_accuracy;
  double seconds;            /* wall time of the epoch, validation included */
  double seconds_per_sample; /* training time per training sample */
  double loss_scale;         /* at the end of the epoch */
  int64_t steps_skipped;     /* non-finite steps so far, since the start */
} rt_epoch_record;

typedef struct rt_scale_point {
  int64_t step;          /* 1-based, counted over the whole run */
  int64_t epoch;         /* 1-based */
  double loss_scale;     /* the scale this step used */
  int64_t steps_skipped; /* skipped steps before this one */
} rt_scale_point;

typedef struct rt_history {
  bool has_accuracy, has_validation, has_loss_scale;
  rt_epoch_record *epochs;
  int64_t n_epochs, cap_epochs;
  rt_scale_point *scale;
  int64_t n_scale, cap_scale;
} rt_history;

/* Which columns and panels exist. */
void rt_history_init(rt_history *h, bool has_accuracy, bool has_validation, bool has_loss_scale);
void rt_history_fini(rt_history *h); /* NULL is a no-op */
void rt_history_add_epoch(rt_history *h, const rt_epoch_record *r);
/* One point of the loss-scale trace; the caller may record every step or
 * only some (the plot draws a step function through what it is given);
 * steps must increase. */
void rt_history_add_scale(rt_history *h, int64_t step, int64_t epoch, double loss_scale,
                          int64_t steps_skipped);

/* The texts of the two CSV files and of the SVG (appended to out). */
void rt_history_csv(const rt_history *h, str_buf *out);
void rt_history_scale_csv(const rt_history *h, str_buf *out);
void rt_history_svg(const rt_history *h, const char *title, str_buf *out);

/* "run.csv" -> "run.loss_scale.csv", "run" -> "run.loss_scale.csv".
 * Caller frees. */
char *rt_history_scale_csv_path(const char *csv_path);

/* Writes the epochs CSV to csv_path and, with loss scaling, the trace to
 * scale_path (NULL: rt_history_scale_csv_path(csv_path)). I/O errors are
 * DIAG_KIND_IO errors at the file. */
bool rt_history_write_csv(const rt_history *h, const char *csv_path, const char *scale_path,
                          diag_sink *d);
/* Writes the SVG plot; title (may be NULL) is escaped. */
bool rt_history_write_svg(const rt_history *h, const char *path, const char *title,
                          diag_sink *d);

#endif
