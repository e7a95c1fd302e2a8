/* SPDX-License-Identifier: Apache-2.0 */
/*
 * history_svg.c: draws a training history as one SVG document (see
 * history.h for the panels). Written by hand, no plotting library: a panel
 * is a frame, grid lines and labels at nice ticks, a legend, and the
 * series as polylines (broken where a value is not finite) or, for the
 * loss scale, as a step function on a log2 axis.
 *
 * Everything that comes from outside (the title) is escaped for XML, and
 * bytes that XML 1.0 cannot hold (control characters, invalid UTF-8)
 * become '?', so the document is always well-formed.
 */
#include "train/history.h"

#include "util/atomic_file.h"

#include <math.h>
#include <string.h>

enum { WIDTH = 760, PANEL_H = 270, TITLE_H = 34, LEFT = 78, RIGHT = 24, TOP = 34, BOTTOM = 46 };
enum { MAX_MARKERS = 60 }; /* circles on every point up to this many epochs */

static const char *const C_TRAIN = "#1f77b4", *const C_VAL = "#ff7f0e", *const C_SCALE = "#2ca02c",
                         *const C_SKIP = "#d62728";

/* ---- text ---- */

static void put_escaped(str_buf *b, const char *s) {
  size_t n = strlen(s);
  for (size_t i = 0; i < n;) {
    unsigned char c = (unsigned char)s[i];
    size_t k = str_utf8_len(s + i, n - i);
    if (c == '&') str_buf_puts(b, "&amp;");
    else if (c == '<') str_buf_puts(b, "&lt;");
    else if (c == '>') str_buf_puts(b, "&gt;");
    else if (c == '"') str_buf_puts(b, "&quot;");
    else if (k == 0 || (c < 0x20 && c != '\t' && c != '\n') || c == 0x7f) str_buf_putc(b, '?');
    else str_buf_append(b, s + i, k);
    i += k ? k : 1;
  }
}

static void put_label(str_buf *b, double x, double y, const char *anchor, const char *extra,
                      const char *text) {
  str_buf_printf(b, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"%s\"%s>", x, y, anchor, extra);
  put_escaped(b, text);
  str_buf_puts(b, "</text>\n");
}

/* ---- axes ---- */

typedef struct axis {
  double lo, hi, step;
  bool log2; /* values are exponents of 2 */
  int decimals;
} axis;

/* Ticks at 1, 2 or 5 x 10^k covering [lo, hi], about five of them;
 * integer axes (epochs, steps) never tick between integers. */
static void nice_axis(double lo, double hi, bool integer, axis *a) {
  *a = (axis){0};
  if (!(hi > lo)) { /* one value, or none */
    double pad = integer ? 0.5 : lo != 0 ? fabs(lo) * 0.1 : 1;
    lo -= pad, hi += pad;
  }
  double raw = (hi - lo) / 5, mag = pow(10, floor(log10(raw))), f = raw / mag;
  double step = (f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10) * mag;
  if (integer && step < 1) step = 1;
  a->step = step;
  a->lo = integer && hi - lo <= 1 ? lo : floor(lo / step) * step;
  a->hi = integer && hi - lo <= 1 ? hi : ceil(hi / step) * step;
  a->decimals = step >= 1 ? 0 : (int)ceil(-log10(step) - 1e-9);
  if (integer) { /* keep the first and last points off the frame */
    double pad = (a->hi - a->lo) * 0.03;
    a->lo -= pad, a->hi += pad;
  }
}

static void log2_axis(double lo_exp, double hi_exp, axis *a) {
  *a = (axis){.log2 = true};
  a->lo = floor(lo_exp), a->hi = ceil(hi_exp);
  if (a->hi - a->lo < 2) a->lo -= 1, a->hi += 1;
  a->step = ceil((a->hi - a->lo) / 8);
  a->lo -= 0.25 * a->step, a->hi += 0.25 * a->step; /* lines off the frame */
}

typedef struct panel {
  double top; /* of the plot area */
  axis x, y;
} panel;

static double px(const panel *p, double x) {
  return LEFT + (x - p->x.lo) / (p->x.hi - p->x.lo) * (WIDTH - LEFT - RIGHT);
}
static double py(const panel *p, double y) {
  double h = PANEL_H - TOP - BOTTOM;
  return p->top + h - (y - p->y.lo) / (p->y.hi - p->y.lo) * h;
}

static void put_tick_label(str_buf *b, const axis *a, double v, double x, double y,
                           const char *anchor) {
  str_buf_printf(b, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"%s\">", x, y, anchor);
  if (a->log2) str_buf_printf(b, "2<tspan dy=\"-6\" font-size=\"9\">%.0f</tspan>", v);
  else str_buf_printf(b, "%.*f", a->decimals, fabs(v) < a->step * 1e-9 ? 0.0 : v);
  str_buf_puts(b, "</text>\n");
}

/* Frame, grid, ticks, axis titles and the panel title. */
static void put_frame(str_buf *b, const panel *p, const char *title, const char *xlabel,
                      const char *ylabel) {
  double h = PANEL_H - TOP - BOTTOM, right = WIDTH - RIGHT, bottom = p->top + h;
  put_label(b, LEFT, p->top - 12, "start", " font-weight=\"bold\"", title);
  str_buf_puts(b, "<g stroke=\"#dddddd\" stroke-width=\"1\">\n");
  for (int axis_i = 0; axis_i < 2; axis_i++) {
    const axis *a = axis_i ? &p->y : &p->x;
    for (double t = ceil(a->lo / a->step - 1e-9) * a->step; t <= a->hi + a->step * 1e-9;
         t += a->step) {
      if (axis_i) str_buf_printf(b, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\"/>\n", LEFT,
                                 py(p, t), (int)right, py(p, t));
      else str_buf_printf(b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>\n", px(p, t),
                          p->top, px(p, t), bottom);
    }
  }
  str_buf_puts(b, "</g>\n");
  str_buf_printf(b, "<rect x=\"%d\" y=\"%.1f\" width=\"%d\" height=\"%.1f\" fill=\"none\" "
                    "stroke=\"#333333\"/>\n", LEFT, p->top, WIDTH - LEFT - RIGHT, h);
  for (double t = ceil(p->x.lo / p->x.step - 1e-9) * p->x.step;
       t <= p->x.hi + p->x.step * 1e-9; t += p->x.step)
    put_tick_label(b, &p->x, t, px(p, t), bottom + 16, "middle");
  for (double t = ceil(p->y.lo / p->y.step - 1e-9) * p->y.step;
       t <= p->y.hi + p->y.step * 1e-9; t += p->y.step)
    put_tick_label(b, &p->y, t, LEFT - 6, py(p, t) + 4, "end");
  put_label(b, (LEFT + right) / 2, bottom + 36, "middle", "", xlabel);
  str_buf_printf(b, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"middle\" "
                    "transform=\"rotate(-90 %d %.1f)\">", 18, p->top + h / 2, 18, p->top + h / 2);
  put_escaped(b, ylabel);
  str_buf_puts(b, "</text>\n");
}

typedef struct legend_item {
  const char *name, *color, *dash;
  bool marker_only;
} legend_item;

/* A one-row legend in the panel's header line, right-aligned, so it never
 * hides data. Widths are estimated from the text length (7 px a byte). */
static void put_legend(str_buf *b, const panel *p, const legend_item *items, int n) {
  double x = WIDTH - RIGHT, y = p->top - 12;
  for (int i = 0; i < n; i++) x -= 40 + 7.0 * (double)strlen(items[i].name);
  str_buf_puts(b, "<g class=\"legend\">\n");
  for (int i = 0; i < n; i++) {
    if (items[i].marker_only)
      str_buf_printf(b, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3.5\" fill=\"%s\"/>\n", x + 11,
                     y - 4, items[i].color);
    else
      str_buf_printf(b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" "
                        "stroke-width=\"2\"%s/>\n", x, y - 4, x + 22, y - 4, items[i].color,
                     items[i].dash);
    put_label(b, x + 28, y, "start", "", items[i].name);
    x += 40 + 7.0 * (double)strlen(items[i].name);
  }
  str_buf_puts(b, "</g>\n");
}

/* ---- panels ---- */

/* Finite range of a metric over the epochs; false if none is finite. */
static bool metric_range(const rt_history *h, size_t off, double *lo, double *hi) {
  bool any = false;
  for (int64_t i = 0; i < h->n_epochs; i++) {
    double v = *(const double *)((const char *)&h->epochs[i] + off);
    if (!isfinite(v)) continue;
    if (!any || v < *lo) *lo = v;
    if (!any || v > *hi) *hi = v;
    any = true;
  }
  return any;
}

/* One metric against epochs: polylines, broken at non-finite values. */
static void put_metric(str_buf *b, const panel *p, const rt_history *h, size_t off,
                       const char *name, const char *color, const char *dash) {
  bool open = false;
  for (int64_t i = 0; i < h->n_epochs; i++) {
    double v = *(const double *)((const char *)&h->epochs[i] + off);
    if (!isfinite(v)) {
      if (open) str_buf_puts(b, "\"/>\n");
      open = false;
      continue;
    }
    if (!open)
      str_buf_printf(b, "<polyline data-series=\"%s\" fill=\"none\" stroke=\"%s\" "
                        "stroke-width=\"2\"%s points=\"", name, color, dash);
    str_buf_printf(b, "%s%.1f,%.1f", open ? " " : "", px(p, (double)h->epochs[i].epoch), py(p, v));
    open = true;
  }
  if (open) str_buf_puts(b, "\"/>\n");
  if (h->n_epochs > MAX_MARKERS) return;
  for (int64_t i = 0; i < h->n_epochs; i++) {
    double v = *(const double *)((const char *)&h->epochs[i] + off);
    if (isfinite(v))
      str_buf_printf(b, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"/>\n",
                     px(p, (double)h->epochs[i].epoch), py(p, v), color);
  }
}

static void put_metric_panel(str_buf *b, const rt_history *h, double top, const char *title,
                             const char *ylabel, size_t train_off, size_t val_off,
                             const char *train_name, const char *val_name) {
  panel p = {.top = top + TOP};
  double x0 = h->n_epochs ? (double)h->epochs[0].epoch : 1;
  double x1 = h->n_epochs ? (double)h->epochs[h->n_epochs - 1].epoch : 1;
  nice_axis(x0, x1, true, &p.x);
  double lo = 0, hi = 1, vlo = 0, vhi = 1;
  bool any = metric_range(h, train_off, &lo, &hi);
  if (h->has_validation && metric_range(h, val_off, &vlo, &vhi)) {
    lo = any && lo < vlo ? lo : vlo, hi = any && hi > vhi ? hi : vhi;
    any = true;
  }
  nice_axis(lo, hi, false, &p.y);
  put_frame(b, &p, title, "epoch", ylabel);
  if (!any)
    put_label(b, WIDTH / 2.0, p.top + 60, "middle", " fill=\"#666666\"", "no finite values");
  put_metric(b, &p, h, train_off, train_name, C_TRAIN, "");
  legend_item items[2] = {{train_name, C_TRAIN, "", false},
                          {val_name, C_VAL, " stroke-dasharray=\"6 3\"", false}};
  if (h->has_validation) put_metric(b, &p, h, val_off, val_name, C_VAL, items[1].dash);
  put_legend(b, &p, items, h->has_validation ? 2 : 1);
}

/* The loss scale against steps: a step function on a log2 axis, and a dot
 * on each step that was skipped (where the skip count grows). */
static void put_scale_panel(str_buf *b, const rt_history *h, double top) {
  panel p = {.top = top + TOP};
  double s0 = h->n_scale ? (double)h->scale[0].step : 1;
  double s1 = h->n_scale ? (double)h->scale[h->n_scale - 1].step : 1;
  nice_axis(s0, s1, true, &p.x);
  double lo = 0, hi = 0;
  bool any = false;
  for (int64_t i = 0; i < h->n_scale; i++) {
    double v = h->scale[i].loss_scale;
    if (!(v > 0) || !isfinite(v)) continue;
    double e = log2(v);
    if (!any || e < lo) lo = e;
    if (!any || e > hi) hi = e;
    any = true;
  }
  log2_axis(lo, hi, &p.y);
  put_frame(b, &p, "loss scale", "step", "loss scale (log2)");
  if (!any)
    put_label(b, WIDTH / 2.0, p.top + 60, "middle", " fill=\"#666666\"", "no loss-scale values");
  bool open = false;
  for (int64_t i = 0; i < h->n_scale; i++) {
    double v = h->scale[i].loss_scale;
    if (!(v > 0) || !isfinite(v)) {
      if (open) str_buf_puts(b, "\"/>\n");
      open = false;
      continue;
    }
    double x = px(&p, (double)h->scale[i].step), y = py(&p, log2(v));
    /* only where the scale changes, and at the ends */
    bool change = i == 0 || !open || h->scale[i - 1].loss_scale != v || i == h->n_scale - 1;
    if (!open)
      str_buf_printf(b, "<polyline data-series=\"loss_scale\" fill=\"none\" stroke=\"%s\" "
                        "stroke-width=\"2\" points=\"%.1f,%.1f", C_SCALE, x, y);
    else if (change)
      str_buf_printf(b, " %.1f,%.1f %.1f,%.1f", x, py(&p, log2(h->scale[i - 1].loss_scale)), x, y);
    open = true;
  }
  if (open) str_buf_puts(b, "\"/>\n");
  bool skips = false;
  /* point a was skipped when the next point's count (the skips before it)
   * grows, or, after the last point, the run's total at its last epoch */
  int64_t total = h->n_epochs ? h->epochs[h->n_epochs - 1].steps_skipped : -1;
  for (int64_t i = 1; i <= h->n_scale; i++) {
    const rt_scale_point *a = &h->scale[i - 1];
    int64_t next = i < h->n_scale ? h->scale[i].steps_skipped : total;
    if (next <= a->steps_skipped || !(a->loss_scale > 0) || !isfinite(a->loss_scale))
      continue;
    str_buf_printf(b, "<circle data-series=\"skipped\" cx=\"%.1f\" cy=\"%.1f\" r=\"3\" "
                      "fill=\"%s\"/>\n", px(&p, (double)a->step), py(&p, log2(a->loss_scale)),
                   C_SKIP);
    skips = true;
  }
  legend_item items[2] = {{"loss scale", C_SCALE, "", false}, {"skipped step", C_SKIP, "", true}};
  put_legend(b, &p, items, skips ? 2 : 1);
}

void rt_history_svg(const rt_history *h, const char *title, str_buf *out) {
  int panels = 1 + h->has_accuracy + h->has_loss_scale;
  int height = TITLE_H + panels * PANEL_H;
  str_buf_printf(out, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
                      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
                      "viewBox=\"0 0 %d %d\" font-family=\"sans-serif\" font-size=\"12\">\n",
                 WIDTH, height, WIDTH, height);
  str_buf_puts(out, "<title>");
  put_escaped(out, title ? title : "training history");
  str_buf_puts(out, "</title>\n");
  str_buf_printf(out, "<rect width=\"%d\" height=\"%d\" fill=\"white\"/>\n", WIDTH, height);
  put_label(out, WIDTH / 2.0, 22, "middle", " font-size=\"15\" font-weight=\"bold\"",
            title ? title : "training history");
  double top = TITLE_H;
  put_metric_panel(out, h, top, "loss", "loss", offsetof(rt_epoch_record, loss),
                   offsetof(rt_epoch_record, val_loss), "loss", "val_loss");
  top += PANEL_H;
  if (h->has_accuracy) {
    put_metric_panel(out, h, top, "accuracy", "accuracy", offsetof(rt_epoch_record, accuracy),
                     offsetof(rt_epoch_record, val_accuracy), "accuracy", "val_accuracy");
    top += PANEL_H;
  }
  if (h->has_loss_scale) put_scale_panel(out, h, top);
  str_buf_puts(out, "</svg>\n");
}

bool rt_history_write_svg(const rt_history *h, const char *path, const char *title,
                          diag_sink *d) {
  str_buf b;
  str_buf_init(&b);
  rt_history_svg(h, title, &b);
  bool ok = atomic_file_write_all(path, b.data, b.len, d);
  str_buf_fini(&b);
  return ok;
}
