/* SPDX-License-Identifier: Apache-2.0 */
/*
 * check_train.c: castor_check_train (castor check --train; castor.h), the
 * gradients of one batch against float16's range, and its report as text
 * and JSON.
 *
 * The gradient program is the training step without its update: the grad
 * pass with optimizer none (castor_driver_options.gradients), compiled
 * through the one compile driver under float32 with no loss scale, so its
 * outputs grad_<weight> are the reference gradients, unscaled. Each
 * gradient element g is counted as float16 would hold it, unscaled and
 * multiplied by the loss scale (the counts of castor_check's range
 * columns: round to zero at |x| <= 2^-25, subnormal below 2^-14, overflow
 * above 65504), per layer: the weight key up to its last '.'.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/check/check_internal.h"

#define F16_MAX 65504.0
#define F16_MIN_NORMAL 0x1p-14
#define F16_ZERO 0x1p-25

static bool same_shape(castor_tensor *t, const castor_tensor_info *info) {
  if (castor_tensor_dtype(t) != info->dtype || castor_tensor_rank(t) != info->rank) return false;
  const int64_t *d = castor_tensor_dims(t);
  for (int k = 1; k < info->rank; k++)
    if (d[k] != info->dims[k]) return false;
  return true;
}

static void shape_text(char *buf, size_t n, castor_dtype dt, int rank, const int64_t *dims) {
  int w = snprintf(buf, n, "%s[", castor_dtype_name(dt));
  for (int k = 0; k < rank && w > 0 && (size_t)w < n; k++)
    w += dims[k] < 0 ? snprintf(buf + w, n - (size_t)w, "%sN", k ? "," : "")
                     : snprintf(buf + w, n - (size_t)w, "%s%lld", k ? "," : "", (long long)dims[k]);
  if (w > 0 && (size_t)w < n) snprintf(buf + w, n - (size_t)w, "]");
}

/* The layer of gradient output grad_<key, '.' as '_'>: the weight key of
 * the state that names it, up to its last '.'. */
static const char *grad_layer(arena *a, castor_program *p, const char *output) {
  for (int s = 0; s < castor_program_num_states(p); s++) {
    castor_tensor_info si;
    castor_program_state_info(p, s, &si);
    char *key = arena_strdup(a, si.name), *mangled = arena_strdup(a, si.name);
    for (char *c = mangled; *c; c++)
      if (*c == '.') *c = '_';
    if (strcmp(mangled, output + 5) != 0) continue;
    char *dot = strrchr(key, '.');
    if (dot) *dot = 0;
    return key;
  }
  return arena_strdup(a, output + 5);
}

static castor_status check_io(castor_context *ctx, castor_program *p, castor_tensor *x, castor_tensor *y) {
  castor_tensor_info in, tgt, out;
  castor_program_input_info(p, 0, &in);
  castor_program_input_info(p, 1, &tgt);
  castor_program_output_info(p, 0, &out);
  char want[128], got[128];
  const struct { castor_tensor *t; const castor_tensor_info *info; const char *what; } io[] = {
      {x, &in, "x: input"}, {y, &tgt, "y: input"}};
  for (int i = 0; i < 2; i++) {
    if (same_shape(io[i].t, io[i].info)) continue;
    shape_text(want, sizeof want, io[i].info->dtype, io[i].info->rank, io[i].info->dims);
    shape_text(got, sizeof got, castor_tensor_dtype(io[i].t), castor_tensor_rank(io[i].t), castor_tensor_dims(io[i].t));
    return chk_fail(ctx, "%s '%s': expected %s, got %s", io[i].what, io[i].info->name, want, got);
  }
  int64_t n = castor_tensor_dims(x)[0];
  if (n < 1) return chk_fail(ctx, "x has no samples");
  if (castor_tensor_dims(y)[0] != n)
    return chk_fail(ctx, "x has %lld samples and y %lld", (long long)n, (long long)castor_tensor_dims(y)[0]);
  if (tgt.dtype == CASTOR_I32) {
    const int32_t *c = castor_tensor_data(y);
    int64_t classes = out.dims[out.rank - 1];
    for (int64_t i = 0; i < n; i++)
      if (c[i] < 0 || c[i] >= classes)
        return chk_fail(ctx, "label %d at index %lld is outside [0, %lld)", c[i], (long long)i, (long long)classes);
  }
  return CASTOR_OK;
}

/* The loss scale the "scaled" counts use. */
static double scale_of(const castor_train_options *t) {
  if (!t->loss_scale || !strcmp(t->loss_scale, "dynamic")) return 32768;
  if (!strcmp(t->loss_scale, "none")) return 1;
  return strtod(t->loss_scale, NULL);
}

static void count(castor_check_grad_layer *l, const float *g, int64_t n, double scale) {
  l->numel += n;
  for (int64_t e = 0; e < n; e++) {
    double a = fabs(g[e]), s = a * scale;
    if (!isfinite(a) || a == 0) continue;
    if (a > l->max_abs) l->max_abs = a;
    if (l->min_abs == 0 || a < l->min_abs) l->min_abs = a;
    if (a <= F16_ZERO) l->zero++;
    else if (a < F16_MIN_NORMAL) l->subnormal++;
    if (s > F16_MAX) l->scaled_overflow++;
    else if (s <= F16_ZERO) l->scaled_zero++;
    else if (s < F16_MIN_NORMAL) l->scaled_subnormal++;
  }
}

/* A share for people: "0%", "80.0%", or "0.0020%" below 0.1%, so that one
 * element in 50000 does not read as 0. */
static const char *share(char buf[24], int64_t n, int64_t of) {
  double p = of ? 100.0 * (double)n / (double)of : 0;
  if (n == 0) snprintf(buf, 24, "0%%");
  else if (p >= 0.1) snprintf(buf, 24, "%.1f%%", p);
  else snprintf(buf, 24, "%.2g%%", p);
  return buf;
}

static void verdict(castor_check_report *r) {
  castor_check_summary *s = &r->sum;
  double gmax = 0, gmin = 0;
  const castor_check_grad_layer *worst_zero = NULL, *worst_scaled = NULL, *worst_over = NULL;
  for (int i = 0; i < r->n_grads; i++) {
    const castor_check_grad_layer *l = &r->grads[i];
    if (l->max_abs > gmax) gmax = l->max_abs;
    if (l->min_abs > 0 && (gmin == 0 || l->min_abs < gmin)) gmin = l->min_abs;
    double f = l->numel ? (double)l->zero / (double)l->numel : 0;
    if (l->zero && (!worst_zero || f > (double)worst_zero->zero / (double)worst_zero->numel)) worst_zero = l;
    if (l->scaled_zero && (!worst_scaled || l->scaled_zero * worst_scaled->numel > worst_scaled->scaled_zero * l->numel))
      worst_scaled = l;
    if (l->scaled_overflow && (!worst_over || l->scaled_overflow * worst_over->numel > worst_over->scaled_overflow * l->numel))
      worst_over = l;
  }
  /* fixed scales that flush nothing (gmin * S > 2^-25) and overflow nothing (gmax * S <= 65504) */
  s->fixed_scale_min = gmin > 0 ? exp2(floor(log2(F16_ZERO / gmin)) + 1) : 1;
  if (s->fixed_scale_min < 1) s->fixed_scale_min = 1;
  s->fixed_scale_max = gmax > 0 ? exp2(floor(log2(F16_MAX / gmax))) : 0x1p64;
  s->scaling_needed = worst_zero != NULL;
  s->verdict = worst_scaled || worst_over ? CASTOR_CHECK_OFF : CASTOR_CHECK_OK;
  str_buf b;
  str_buf_init(&b);
  char sc[32], fx[96], p1[24], p2[24], p3[24];
  snprintf(sc, sizeof sc, "%g", s->loss_scale);
  if (s->loss_scale > 1 && exp2(round(log2(s->loss_scale))) == s->loss_scale)
    snprintf(sc, sizeof sc, "2^%d", (int)round(log2(s->loss_scale)));
  if (s->fixed_scale_min <= s->fixed_scale_max)
    snprintf(fx, sizeof fx, "a fixed scale from 2^%d to 2^%d would do on this batch",
             (int)round(log2(s->fixed_scale_min)), (int)round(log2(s->fixed_scale_max)));
  else
    snprintf(fx, sizeof fx, "no fixed scale keeps every gradient in range");
  if (worst_over)
    str_buf_printf(&b, "loss scale %s too large: %s of %s's gradients overflow float16 scaled; %s", sc,
                   share(p1, worst_over->scaled_overflow, worst_over->numel), worst_over->layer, fx);
  else if (worst_zero)
    str_buf_printf(&b, "loss scaling needed: %s of %s's gradients flush to zero unscaled, %s scaled at %s%s; %s",
                   share(p1, worst_zero->zero, worst_zero->numel), worst_zero->layer,
                   share(p2, worst_zero->scaled_zero, worst_zero->numel), sc,
                   worst_scaled ? arena_printf(r->arena, " (%s: %s)", worst_scaled->layer,
                                               share(p3, worst_scaled->scaled_zero, worst_scaled->numel))
                                : "",
                   fx);
  else
    str_buf_printf(&b, "no scaling needed: no gradient flushes to zero in float16 unscaled; %s", fx);
  s->train_verdict = arena_strdup(r->arena, str_buf_cstr(&b));
  str_buf_fini(&b);
}

/* Compiles m's gradient program (the step without its update; outputs
 * the model's, "loss", then grad_<weight>), takes the weights of
 * weights_from when given, and runs it on (x, y): *out_p and *out_outs
 * (n_out tensors) for the caller to free. who names the caller in errors. */
static castor_status run_gradients(castor_context *ctx, const char *who, castor_model *m,
                                   const castor_compile_options *co, const castor_train_options *to,
                                   castor_program *weights_from, castor_tensor *x, castor_tensor *y,
                                   castor_program **out_p, castor_tensor ***out_outs, int *n_out) {
  castor_driver_options d;
  castor_driver_options_init(&d);
  d.train = to;
  d.gradients = true;
  castor_program *p = NULL;
  castor_status st = castor_compile_driver(m, co, &d, &p);
  if (st != CASTOR_OK) return st;
  if (castor_program_num_inputs(p) != 2) {
    int n_in = castor_program_num_inputs(p) - 1;
    castor_program_destroy(p);
    return chk_fail(ctx, "%s needs a model with one input, it has %d", who, n_in);
  }
  if ((weights_from && (st = castor_program_copy_weights(p, weights_from)) != CASTOR_OK) ||
      (st = check_io(ctx, p, x, y)) != CASTOR_OK) {
    castor_program_destroy(p);
    return st;
  }
  *n_out = castor_program_num_outputs(p);
  castor_tensor **outs = xcalloc((size_t)*n_out, sizeof *outs);
  castor_tensor *ins[] = {x, y};
  if ((st = castor_program_run(p, ins, 2, outs, *n_out)) != CASTOR_OK) {
    free(outs);
    castor_program_destroy(p);
    return st;
  }
  *out_p = p, *out_outs = outs;
  return CASTOR_OK;
}

castor_status castor_check_train(castor_model *m, const castor_check_options *opts, const castor_train_options *topts,
                                 castor_tensor *x, castor_tensor *y, castor_check_report **out_report) {
  castor_context *ctx = castor_model_context(m);
  if (!ctx) return CASTOR_ERR_INVALID_ARGUMENT;
  if (!out_report) return chk_fail(ctx, "castor_check_train: NULL out_report");
  *out_report = NULL;
  if (!x || !y) return chk_fail(ctx, "castor_check_train: x and y are required (features and targets)");
  castor_check_options dco;
  if (!opts) castor_check_options_init(&dco), opts = &dco;
  castor_train_options dto;
  if (!topts) castor_train_options_init(&dto), topts = &dto;
  double scale = scale_of(topts);
  if (!(scale > 0) || !isfinite(scale))
    return chk_fail(ctx, "loss scale '%s' is not dynamic, none or a positive number", topts->loss_scale);
  castor_compile_options co = opts->compile;
  co.policy = "float32";
  co.fp32_ops = co.fp32_layers = NULL;
  castor_train_options to = *topts;
  to.loss_scale = "none";
  castor_program *p = NULL;
  castor_tensor **outs = NULL;
  int n_out = 0;
  castor_status st = run_gradients(ctx, "castor check --train", m, &co, &to, NULL, x, y, &p, &outs, &n_out);
  if (st != CASTOR_OK) return st;
  castor_check_report *r = NULL;
  {
    r = xcalloc(1, sizeof *r);
    r->arena = arena_create();
    str_buf_init(&r->text);
    const ir_graph *g = castor_model_graph(m);
    r->sum.train = 1;
    r->sum.model = arena_strdup(r->arena, g->name);
    ir_policy pol = g->policy;
    if (opts->compile.policy) ir_policy_from_name(opts->compile.policy, strlen(opts->compile.policy), &pol);
    r->sum.policy = ir_policy_name(pol);
    r->sum.batch = castor_tensor_dims(x)[0];
    r->sum.loss_scale = scale;
    r->sum.warnings = "";
    r->grads = xcalloc((size_t)n_out + 1, sizeof *r->grads);
    for (int o = 0; o < n_out; o++) {
      castor_tensor_info info;
      castor_program_output_info(p, o, &info);
      if (!strcmp(info.name, "loss")) r->sum.loss = *(const float *)castor_tensor_data(outs[o]);
      if (strncmp(info.name, "grad_", 5) != 0) continue;
      const char *layer = grad_layer(r->arena, p, info.name);
      int k = 0;
      while (k < r->n_grads && strcmp(r->grads[k].layer, layer)) k++;
      if (k == r->n_grads) r->grads[r->n_grads++].layer = layer;
      count(&r->grads[k], castor_tensor_data(outs[o]), castor_tensor_numel(outs[o]), scale);
    }
    verdict(r);
  }
  for (int o = 0; o < n_out; o++) castor_tensor_destroy(outs[o]);
  free(outs);
  castor_program_destroy(p);
  *out_report = r;
  castor_context_begin(ctx);
  return castor_context_finish(ctx, CASTOR_OK);
}

int castor_check_report_num_grad_layers(const castor_check_report *r) { return r ? r->n_grads : 0; }

castor_status castor_check_report_grad_layer(const castor_check_report *r, int i, castor_check_grad_layer *out) {
  if (!r || !out || i < 0 || i >= r->n_grads) return CASTOR_ERR_INVALID_ARGUMENT;
  *out = r->grads[i];
  return CASTOR_OK;
}

/* ---- the report ---- */

void chk_format_train_text(castor_check_report *r, str_buf *out) {
  const castor_check_summary *s = &r->sum;
  str_buf_printf(out, "castor check --train: %s, gradients of one batch of %lld in float32 (loss %.6g) against "
                      "float16, loss scale %g\n",
                 s->model, (long long)s->batch, s->loss, s->loss_scale);
  int w = 16; /* the layer column: as wide as the longest name */
  for (int i = 0; i < r->n_grads; i++)
    if ((int)strlen(r->grads[i].layer) > w) w = (int)strlen(r->grads[i].layer);
  str_buf_printf(out, "%-*s %-9s %-9s %-9s | %-8s %-8s | %-8s %-8s %s\n", w, "layer", "elements", "max |g|",
                 "min |g|", "->0", "subnorm", "->0 sc", "subn sc", ">max sc");
  for (int i = 0; i < r->n_grads; i++) {
    const castor_check_grad_layer *l = &r->grads[i];
    char mx[32], mn[32], c[5][24];
    snprintf(mx, sizeof mx, "%.2e", l->max_abs);
    snprintf(mn, sizeof mn, "%.2e", l->min_abs);
    const int64_t v[5] = {l->zero, l->subnormal, l->scaled_zero, l->scaled_subnormal, l->scaled_overflow};
    for (int k = 0; k < 5; k++) share(c[k], v[k], l->numel);
    str_buf_printf(out, "%-*s %-9lld %-9s %-9s | %-8s %-8s | %-8s %-8s %s\n", w, l->layer, (long long)l->numel,
                   l->max_abs ? mx : "0", l->min_abs ? mn : "0", c[0], c[1], c[2], c[3], c[4]);
  }
  str_buf_puts(out, "(shares of the layer's gradient elements: ->0 non-zero and rounding to zero in float16\n"
                    " (|g| <= 2^-25), subnorm subnormal (|g| < 2^-14 = 6.1e-5); sc: the same of g * loss scale,\n"
                    " and >max: above 65504)\n");
  str_buf_printf(out, "verdict: %s\n", s->train_verdict);
}

void chk_format_train_json(castor_check_report *r, str_buf *out) {
  const castor_check_summary *s = &r->sum;
  str_buf_printf(out, "{\n  \"model\": \"%s\",\n  \"policy\": \"%s\",\n  \"mode\": \"train\",\n  \"batch\": %lld,\n"
                      "  \"loss\": %.9g,\n  \"loss_scale\": %.9g,\n  \"layers\": [",
                 s->model, s->policy, (long long)s->batch, s->loss, s->loss_scale);
  for (int i = 0; i < r->n_grads; i++) {
    const castor_check_grad_layer *l = &r->grads[i];
    str_buf_printf(out,
                   "%s\n    {\"layer\": \"%s\", \"numel\": %lld, \"max_abs\": %.6g, \"min_abs\": %.6g, "
                   "\"zero\": %lld, \"subnormal\": %lld, \"scaled_zero\": %lld, \"scaled_subnormal\": %lld, "
                   "\"scaled_overflow\": %lld}",
                   i ? "," : "", l->layer, (long long)l->numel, l->max_abs, l->min_abs, (long long)l->zero,
                   (long long)l->subnormal, (long long)l->scaled_zero, (long long)l->scaled_subnormal,
                   (long long)l->scaled_overflow);
  }
  str_buf_printf(out, "\n  ],\n  \"scaling_needed\": %s,\n  \"fixed_scale_min\": %.9g,\n  \"fixed_scale_max\": %.9g,\n"
                      "  \"verdict\": \"%s\",\n  \"message\": \"%s\"\n}\n",
                 s->scaling_needed ? "true" : "false", s->fixed_scale_min, s->fixed_scale_max,
                 s->verdict == CASTOR_CHECK_OK ? "ok" : "off", s->train_verdict);
}

/* ---- the first overflow of a rejected step (castor train's warning) ---- */

castor_status castor_program_find_overflow(castor_program *step, castor_model *m, const castor_compile_options *opts,
                                           const castor_train_options *topts, double loss_scale, castor_tensor *x,
                                           castor_tensor *y, castor_overflow_report *out) {
  castor_context *ctx = m ? castor_model_context(m) : NULL;
  if (!step || !m || !x || !y || !out) return CASTOR_ERR_INVALID_ARGUMENT;
  memset(out, 0, sizeof *out);
  if (!(loss_scale > 0) || !isfinite(loss_scale))
    return chk_fail(ctx, "castor_program_find_overflow: loss scale %g is not a positive number", loss_scale);
  char scale[64];
  snprintf(scale, sizeof scale, "%.17g", loss_scale);
  castor_train_options to;
  if (topts) to = *topts;
  else castor_train_options_init(&to);
  to.loss_scale = scale;
  castor_program *p = NULL;
  castor_tensor **outs = NULL;
  int n_out = 0;
  castor_status st =
      run_gradients(ctx, "castor_program_find_overflow", m, opts, &to, step, x, y, &p, &outs, &n_out);
  if (st != CASTOR_OK) return st;
  {
    arena *a = arena_create();
    out->loss_finite = 1;
    /* the outputs follow the variables' forward order: the backward pass
     * computes the last one's gradient first; a layer's weights are
     * adjacent */
    const char *prev = NULL;
    int64_t bad = 0, numel = 0;
    for (int o = n_out - 1; o >= -1; o--) {
      castor_tensor_info info = {0};
      if (o >= 0) castor_program_output_info(p, o, &info);
      if (o >= 0 && !strcmp(info.name, "loss"))
        out->loss_finite = isfinite(*(const float *)castor_tensor_data(outs[o])) != 0;
      bool grad = o >= 0 && !strncmp(info.name, "grad_", 5);
      const char *layer = grad ? grad_layer(a, p, info.name) : NULL;
      if (prev && (!layer || strcmp(layer, prev) != 0)) { /* prev's gradients are all counted */
        if (bad && out->layers++ == 0) {
          snprintf(out->layer, sizeof out->layer, "%s", prev);
          out->nonfinite = bad, out->numel = numel;
        }
        prev = NULL, bad = numel = 0;
      }
      if (!grad) continue;
      prev = layer;
      const void *g = castor_tensor_data(outs[o]);
      int64_t n = castor_tensor_numel(outs[o]);
      castor_dtype dt = castor_tensor_dtype(outs[o]);
      uint16_t exp16 = dt == CASTOR_F16 ? 0x7c00 : 0x7f80; /* 16-bit: an all-ones exponent */
      for (int64_t i = 0; i < n; i++)
        bad += dt == CASTOR_F32 ? !isfinite(((const float *)g)[i]) : (((const uint16_t *)g)[i] & exp16) == exp16;
      numel += n;
    }
    arena_destroy(a);
    castor_context_begin(ctx);
    st = castor_context_finish(ctx, CASTOR_OK);
  }
  for (int o = 0; o < n_out; o++) castor_tensor_destroy(outs[o]);
  free(outs);
  castor_program_destroy(p);
  return st;
}
