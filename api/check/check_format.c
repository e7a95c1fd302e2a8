/* SPDX-License-Identifier: Apache-2.0 */
/*
 * check_format.c: a castor_check report as text (the table castor check
 * prints), as JSON (castor check --json) and as Graphviz DOT (the build
 * under test's final graph, each value with its error; castor check
 * --graph). Reads the report, changes nothing.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "api/check/check_internal.h"

/* "0", "inf", "nan" or "1.23e-03" */
static const char *num(double x, char buf[32]) {
  if (x == 0) return "0";
  if (isnan(x)) return "nan";
  if (isinf(x)) return x > 0 ? "inf" : "-inf";
  snprintf(buf, 32, "%.2e", x);
  return buf;
}

static const char *verdict_name(castor_check_verdict v) {
  switch (v) {
  case CASTOR_CHECK_OK: return "ok";
  case CASTOR_CHECK_FIX: return "fix";
  case CASTOR_CHECK_NO_FIX: return "no_fix";
  case CASTOR_CHECK_REFERENCE_NOT_FINITE: return "reference_not_finite";
  case CASTOR_CHECK_OFF: return "off";
  }
  return "?";
}

static void put_coords(const castor_check_nonfinite *f, str_buf *out) {
  str_buf_putc(out, '[');
  for (int k = 0; k < f->rank; k++) str_buf_printf(out, "%s%lld", k ? "," : "", (long long)f->coords[k]);
  str_buf_putc(out, ']');
}

static void text_nonfinite(const char *what, const castor_check_nonfinite *f, str_buf *out) {
  char b[32];
  str_buf_printf(out, "%s: ", what);
  if (!f->found) {
    str_buf_puts(out, "none\n");
    return;
  }
  str_buf_printf(out, "layer %s, op %s, value %%%s, element %lld ", f->layer, f->op, f->value, (long long)f->index);
  put_coords(f, out);
  str_buf_printf(out, " = %s\n", num(f->x, b));
}

void chk_format_text(castor_check_report *r, str_buf *out) {
  const castor_check_summary *s = &r->sum;
  char b1[32], b2[32], b3[32];
  str_buf_printf(out, "castor check: %s, policy %s against float32, batch %lld, tolerance %s\n", s->model, s->policy,
                 (long long)s->batch, num(s->tolerance, b1));
  str_buf_printf(out, "%-16s %-5s %-24s %-9s %-9s %-7s | %-9s %-7s %-9s %-7s %s\n", "layer", "dtype", "value (op)",
                 "max abs", "rel err", "off", "max |x|", ">max", "subnorm", "->0", "NaN/Inf");
  for (int i = 0; i < r->n_layers; i++) {
    const castor_check_layer *l = &r->layers[i];
    char value[64], off[16];
    snprintf(value, sizeof value, "%s (%s)", l->value ? l->value : "-", l->op ? l->op : "-");
    snprintf(off, sizeof off, "%.1f%%", 100 * l->share_off);
    if (l->compared)
      str_buf_printf(out, "%-16s %-5s %-24s %-9s %-9s %-7s", l->layer, castor_dtype_name(l->dtype), value,
                     num(l->max_abs_error, b1), num(l->rel_error, b2), off);
    else
      str_buf_printf(out, "%-16s %-5s %-24s %-9s %-9s %-7s", l->layer, castor_dtype_name(l->dtype), value, "-", "-", "-");
    str_buf_printf(out, " | %-9s %-7lld %-9lld %-7lld %lld\n", num(l->act_max_abs, b3), (long long)l->act_overflow,
                   (long long)l->act_subnormal, (long long)l->act_zero, (long long)l->not_finite);
    if (l->weight_numel)
      str_buf_printf(out, "%-16s %-5s %-24s %-9s %-9s %-7s | %-9s %-7lld %-9lld %lld\n", "", "", "  weights", "",
                     "", "", num(l->weight_max_abs, b3), (long long)l->weight_overflow, (long long)l->weight_subnormal,
                     (long long)l->weight_zero);
  }
  str_buf_puts(out, "(max abs, rel err: of the value against float32; rel err = max |err| / max |float32 value|;\n"
                    " off: share of elements off by more than tolerance * max |float32 value|; range columns: the\n"
                    " float32 values against the limits of the layer's 16-bit dtype, bf16 for bf16 layers, else f16:\n"
                    " above its largest finite value, subnormal, rounding to zero)\n");
  text_nonfinite("first NaN/Inf", &s->first_bad, out);
  text_nonfinite("first NaN/Inf in float32", &s->reference_first_bad, out);
  switch (s->verdict) {
  case CASTOR_CHECK_OK:
    str_buf_printf(out, "verdict: OK: the outputs are within %s of float32 (worst normalized error %s)\n",
                   num(s->tolerance, b1), num(s->output_error, b2));
    break;
  case CASTOR_CHECK_FIX:
    str_buf_printf(out, "verdict: the outputs are off (worst normalized error %s > %s)\n", num(s->output_error, b1),
                   num(s->tolerance, b2));
    str_buf_printf(out, "fix: --fp32-layers=%s (verified: worst normalized error %s; %d builds tried)\n",
                   s->fp32_layers, num(s->fixed_output_error, b1), s->n_trials);
    break;
  case CASTOR_CHECK_NO_FIX:
    str_buf_printf(out,
                   "verdict: the outputs are off (worst normalized error %s > %s) and no set of layers in float32 "
                   "brings them within the tolerance (%d builds tried)\n",
                   num(s->output_error, b1), num(s->tolerance, b2), s->n_trials);
    break;
  case CASTOR_CHECK_REFERENCE_NOT_FINITE:
    str_buf_puts(out, "verdict: the float32 build's outputs are not finite either: not a precision problem "
                      "(look at the inputs and weights); --fp32-layers cannot fix it\n");
    break;
  case CASTOR_CHECK_OFF:
    str_buf_printf(out, "verdict: the outputs are off (worst normalized error %s > %s); no search asked\n",
                   num(s->output_error, b1), num(s->tolerance, b2));
    break;
  }
}

/* ---- JSON ---- */

static void json_str(str_buf *out, const char *s) {
  if (!s) {
    str_buf_puts(out, "null");
    return;
  }
  str_buf_putc(out, '"');
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    if (*p == '"' || *p == '\\') str_buf_printf(out, "\\%c", *p);
    else if (*p == '\n') str_buf_puts(out, "\\n");
    else if (*p < 0x20) str_buf_printf(out, "\\u%04x", *p);
    else str_buf_putc(out, (char)*p);
  }
  str_buf_putc(out, '"');
}

/* JSON has no NaN or Inf: those are null. */
static void json_num(str_buf *out, double x) {
  if (!isfinite(x)) str_buf_puts(out, "null");
  else str_buf_printf(out, "%.6g", x);
}

static void json_nonfinite(str_buf *out, const castor_check_nonfinite *f) {
  if (!f->found) {
    str_buf_puts(out, "null");
    return;
  }
  str_buf_puts(out, "{\"layer\": ");
  json_str(out, f->layer);
  str_buf_puts(out, ", \"op\": ");
  json_str(out, f->op);
  str_buf_puts(out, ", \"value\": ");
  json_str(out, f->value);
  str_buf_printf(out, ", \"index\": %lld, \"coords\": ", (long long)f->index);
  put_coords(f, out);
  str_buf_printf(out, ", \"x\": \"%s\"}", isnan(f->x) ? "nan" : f->x > 0 ? "inf" : "-inf");
}

static void json_range(str_buf *out, const char *what, int64_t n, double max_abs, int64_t over, int64_t sub,
                       int64_t zero) {
  str_buf_printf(out, "\"%s\": {\"numel\": %lld, \"max_abs\": ", what, (long long)n);
  json_num(out, max_abs);
  str_buf_printf(out, ", \"overflow\": %lld, \"subnormal\": %lld, \"zero\": %lld}", (long long)over, (long long)sub,
                 (long long)zero);
}

void chk_format_json(castor_check_report *r, str_buf *out) {
  const castor_check_summary *s = &r->sum;
  str_buf_puts(out, "{\n  \"model\": ");
  json_str(out, s->model);
  str_buf_puts(out, ",\n  \"policy\": ");
  json_str(out, s->policy);
  str_buf_printf(out, ",\n  \"reference\": \"float32\",\n  \"batch\": %lld,\n  \"tolerance\": ", (long long)s->batch);
  json_num(out, s->tolerance);
  str_buf_puts(out, ",\n  \"layers\": [");
  for (int i = 0; i < r->n_layers; i++) {
    const castor_check_layer *l = &r->layers[i];
    str_buf_puts(out, i ? ",\n    {\"layer\": " : "\n    {\"layer\": ");
    json_str(out, l->layer);
    str_buf_printf(out, ", \"dtype\": \"%s\", \"value\": ", castor_dtype_name(l->dtype));
    json_str(out, l->value);
    str_buf_puts(out, ", \"op\": ");
    json_str(out, l->op);
    str_buf_printf(out, ", \"numel\": %lld, \"compared\": %s, \"max_abs_error\": ", (long long)l->numel,
                   l->compared ? "true" : "false");
    json_num(out, l->max_abs_error);
    str_buf_puts(out, ", \"rel_error\": ");
    json_num(out, l->rel_error);
    str_buf_puts(out, ", \"share_off\": ");
    json_num(out, l->share_off);
    str_buf_printf(out, ", \"not_finite\": %lld, \"range\": {\"limits\": \"%s\", ", (long long)l->not_finite,
                   castor_dtype_name(l->limit_dtype));
    json_range(out, "activations", l->act_numel, l->act_max_abs, l->act_overflow, l->act_subnormal, l->act_zero);
    str_buf_puts(out, ", ");
    json_range(out, "weights", l->weight_numel, l->weight_max_abs, l->weight_overflow, l->weight_subnormal,
               l->weight_zero);
    str_buf_puts(out, "}}");
  }
  str_buf_puts(out, "\n  ],\n  \"first_not_finite\": ");
  json_nonfinite(out, &s->first_bad);
  str_buf_puts(out, ",\n  \"reference_first_not_finite\": ");
  json_nonfinite(out, &s->reference_first_bad);
  str_buf_puts(out, ",\n  \"output_error\": ");
  json_num(out, s->output_error);
  str_buf_printf(out, ",\n  \"verdict\": \"%s\",\n  \"fp32_layers\": ", verdict_name(s->verdict));
  json_str(out, s->fp32_layers);
  str_buf_puts(out, ",\n  \"fixed_output_error\": ");
  if (s->verdict == CASTOR_CHECK_FIX) json_num(out, s->fixed_output_error);
  else str_buf_puts(out, "null");
  str_buf_printf(out, ",\n  \"trials\": %d,\n  \"warnings\": ", s->n_trials);
  json_str(out, s->warnings ? s->warnings : "");
  str_buf_puts(out, "\n}\n");
}

/* ---- DOT ---- */

void chk_format_dot(castor_check_report *r, str_buf *out) {
  const chk_build *t = &r->test;
  char **extra = xcalloc((size_t)t->n + 1, sizeof *extra);
  bool *alarm = xcalloc((size_t)t->n + 1, sizeof *alarm);
  for (int i = 0; i < t->n; i++) {
    const chk_value *v = &t->v[i];
    str_buf b;
    str_buf_init(&b);
    char b1[32], b2[32];
    if (v->match >= 0)
      str_buf_printf(&b, "err %s (rel %s)", num(v->max_abs_err, b1), num(v->rel_err, b2));
    if (v->not_finite) str_buf_printf(&b, "%s%lld NaN/Inf", b.len ? ", " : "", (long long)v->not_finite);
    const castor_check_nonfinite *f = &r->sum.first_bad;
    if (f->found && !strcmp(f->value, v->name)) {
      str_buf_printf(&b, "\nfirst NaN/Inf here: element %lld ", (long long)f->index);
      put_coords(f, &b);
    }
    alarm[i] = v->not_finite > 0 || (v->match >= 0 && v->rel_err > r->sum.tolerance && v->op != IR_OP_CONST);
    extra[i] = str_buf_take(&b);
  }
  ir_print_dot(t->dot, (const char *const *)extra, alarm, out);
  for (int i = 0; i < t->n; i++) free(extra[i]);
  free(extra);
  free(alarm);
}
