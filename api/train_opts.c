/* SPDX-License-Identifier: Apache-2.0 */
/*
 * train_opts.c: the Keras optimizer arguments of castor_train_options
 * (beta_1, beta_2, epsilon, weight_decay, the dynamic loss scale's start
 * and growth, the learning-rate schedules): their ranges, checked once for
 * the API and the CLI, and what the grad pass and the program's schedule
 * get from them (castor.h documents each field).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/internal.h"
#include "passes/passes.h"
#include "runtime/lr_schedule.h"

static bool bad(diag_sink *d, const char *fmt, const char *field, double v, const char *range) {
  diag_error_kind(d, DIAG_KIND_INVALID_ARGUMENT, (diag_loc){0}, fmt, field, range, v);
  return false;
}

/* v in the range (lo, hi) with open or closed ends; 0 is "the default"
 * and never checked. */
static bool in_range(diag_sink *d, const char *field, double v, double lo, bool lo_open, double hi, bool hi_open,
                     const char *range) {
  if (v == 0) return true;
  bool ok = (lo_open ? v > lo : v >= lo) && (hi_open ? v < hi : v <= hi);
  return ok || bad(d, "castor_train_options.%s must be in %s, got %g", field, v, range);
}

static bool schedule_ok(const castor_train_options *t, diag_sink *d) {
  const diag_loc no = {0};
  const char *s = t->lr_schedule;
  bool exp = s && !strcmp(s, "exponential_decay"), cos = s && !strcmp(s, "cosine_decay"),
       pw = s && !strcmp(s, "piecewise_constant_decay");
  if (s && !exp && !cos && !pw) {
    diag_error_kind(d, DIAG_KIND_INVALID_ARGUMENT, no,
                    "castor_train_options.lr_schedule: unknown schedule '%s' (schedules: exponential_decay, "
                    "cosine_decay, piecewise_constant_decay)", s);
    return false;
  }
  /* a field of another schedule is a mistake, not something to ignore */
  const char *stray = !exp && t->decay_rate != 0     ? "decay_rate (exponential_decay)"
                      : !exp && t->staircase         ? "staircase (exponential_decay)"
                      : !exp && !cos && t->decay_steps ? "decay_steps (exponential_decay, cosine_decay)"
                      : !cos && t->alpha != 0        ? "alpha (cosine_decay)"
                      : !cos && t->warmup_target != 0 ? "warmup_target (cosine_decay)"
                      : !cos && t->warmup_steps      ? "warmup_steps (cosine_decay)"
                      : !pw && (t->n_boundaries || t->boundaries) ? "boundaries (piecewise_constant_decay)"
                      : !pw && (t->n_values || t->values) ? "values (piecewise_constant_decay)"
                                                     : NULL;
  if (stray) {
    diag_error_kind(d, DIAG_KIND_INVALID_ARGUMENT, no, "castor_train_options.%s is set, but lr_schedule is %s", stray,
                    s ? s : "none (a constant learning rate)");
    return false;
  }
  if (exp || cos) {
    if (t->decay_steps <= 0) {
      diag_error_kind(d, DIAG_KIND_INVALID_ARGUMENT, no, "castor_train_options.decay_steps must be > 0 for %s, got %lld",
                      s, (long long)t->decay_steps);
      return false;
    }
  }
  if (exp && !(t->decay_rate > 0 && t->decay_rate <= 1e30))
    return bad(d, "castor_train_options.%s must be in %s for exponential_decay, got %g", "decay_rate", t->decay_rate,
               "(0, 1e30]");
  if (cos) {
    if (!(t->alpha >= 0 && t->alpha <= 1)) return bad(d, "castor_train_options.%s must be in %s, got %g", "alpha", t->alpha, "[0, 1]");
    if (!(t->warmup_target >= 0 && t->warmup_target <= 1e30))
      return bad(d, "castor_train_options.%s must be in %s (0: no warmup), got %g", "warmup_target", t->warmup_target,
                 "(0, 1e30]");
    if (t->warmup_steps < 0 || (t->warmup_steps > 0 && t->warmup_target == 0)) {
      diag_error_kind(d, DIAG_KIND_INVALID_ARGUMENT, no,
                      t->warmup_steps < 0 ? "castor_train_options.warmup_steps must be >= 0, got %lld"
                                          : "castor_train_options.warmup_steps (%lld) needs warmup_target, the rate the warmup reaches",
                      (long long)t->warmup_steps);
      return false;
    }
  }
  if (pw) {
    if (t->learning_rate != 0) {
      diag_error_kind(d, DIAG_KIND_INVALID_ARGUMENT, no,
                      "castor_train_options.learning_rate must stay 0 with piecewise_constant_decay: its values "
                      "are the rates");
      return false;
    }
    if (t->n_boundaries < 1 || !t->boundaries) {
      diag_error_kind(d, DIAG_KIND_INVALID_ARGUMENT, no,
                      "castor_train_options.boundaries: piecewise_constant_decay needs at least one boundary");
      return false;
    }
    if (t->n_values != t->n_boundaries + 1 || !t->values) {
      diag_error_kind(d, DIAG_KIND_INVALID_ARGUMENT, no,
                      "castor_train_options.values: piecewise_constant_decay needs one value more than boundaries "
                      "(%d boundaries, so %d values), got %d", t->n_boundaries, t->n_boundaries + 1, t->n_values);
      return false;
    }
    for (int i = 0; i < t->n_boundaries; i++) {
      if (t->boundaries[i] < 0 || (i > 0 && t->boundaries[i] <= t->boundaries[i - 1])) {
        diag_error_kind(d, DIAG_KIND_INVALID_ARGUMENT, no,
                        i > 0 && t->boundaries[i] >= 0
                            ? "castor_train_options.boundaries must be strictly increasing: boundaries[%d] = %lld "
                              "follows %lld"
                            : "castor_train_options.boundaries must be >= 0: boundaries[%d] = %lld",
                        i, (long long)t->boundaries[i], i > 0 ? (long long)t->boundaries[i - 1] : 0LL);
        return false;
      }
    }
    for (int i = 0; i < t->n_values; i++)
      if (!(t->values[i] > 0 && t->values[i] <= 1e30)) {
        diag_error_kind(d, DIAG_KIND_INVALID_ARGUMENT, no,
                        "castor_train_options.values must be learning rates in (0, 1e30]: values[%d] = %g", i,
                        t->values[i]);
        return false;
      }
  }
  return true;
}

bool castor_train_opts_apply(const castor_train_options *t, pass_train_options *o, diag_sink *d) {
  if (!in_range(d, "beta_1", t->beta_1, 0, true, 1, true, "(0, 1) (0: Keras's 0.9)") ||
      !in_range(d, "beta_2", t->beta_2, 0, true, 1, true, "(0, 1) (0: Keras's 0.999)") ||
      !in_range(d, "epsilon", t->epsilon, 0, true, 1, false, "(0, 1] (0: Keras's 1e-7)") ||
      !in_range(d, "weight_decay", t->weight_decay, 0, false, 1e30, false, "[0, 1e30] (0: Keras's 0.004)") ||
      !in_range(d, "loss_scale_initial", t->loss_scale_initial, 0x1p-24, false, 0x1p64, false,
                "[2^-24, 2^64] (0: Keras's 2^15)") ||
      !in_range(d, "clipnorm", t->clipnorm, 0, true, 1e30, false, "(0, 1e30] (0: none)") ||
      !in_range(d, "clipvalue", t->clipvalue, 0, true, 1e30, false, "(0, 1e30] (0: none)") ||
      !in_range(d, "global_clipnorm", t->global_clipnorm, 0, true, 1e30, false, "(0, 1e30] (0: none)"))
    return false;
  if (t->loss_scale_growth_steps < 0 || t->loss_scale_growth_steps > 1000000000) {
    diag_error_kind(d, DIAG_KIND_INVALID_ARGUMENT, (diag_loc){0},
                    "castor_train_options.loss_scale_growth_steps must be in [1, 10^9] (0: Keras's 2000), got %lld",
                    (long long)t->loss_scale_growth_steps);
    return false;
  }
  if (!schedule_ok(t, d)) return false;
  if (t->beta_1 > 0) o->beta_1 = t->beta_1;
  if (t->beta_2 > 0) o->beta_2 = t->beta_2;
  if (t->epsilon > 0) o->epsilon = t->epsilon;
  if (t->weight_decay > 0) o->weight_decay = t->weight_decay;
  if (t->loss_scale_initial > 0) o->loss_scale_initial = t->loss_scale_initial;
  if (t->loss_scale_growth_steps > 0) o->loss_scale_growth_steps = (double)t->loss_scale_growth_steps;
  o->clipnorm = t->clipnorm, o->clipvalue = t->clipvalue, o->global_clipnorm = t->global_clipnorm;
  return true;
}

void castor_train_opts_schedule(const castor_train_options *t, double default_lr, rt_lr_schedule *out) {
  memset(out, 0, sizeof *out);
  out->initial = t->learning_rate > 0 ? t->learning_rate : default_lr;
  const char *s = t->lr_schedule;
  if (!s) return;
  if (!strcmp(s, "exponential_decay")) {
    out->kind = RT_LR_EXPONENTIAL;
    out->decay_steps = t->decay_steps, out->decay_rate = t->decay_rate, out->staircase = t->staircase != 0;
  } else if (!strcmp(s, "cosine_decay")) {
    out->kind = RT_LR_COSINE;
    out->decay_steps = t->decay_steps, out->alpha = t->alpha;
    out->warmup = t->warmup_target > 0, out->warmup_target = t->warmup_target, out->warmup_steps = t->warmup_steps;
  } else {
    out->kind = RT_LR_PIECEWISE;
    out->n_boundaries = t->n_boundaries;
    out->boundaries = xmalloc((size_t)t->n_boundaries * sizeof *out->boundaries);
    out->values = xmalloc((size_t)t->n_values * sizeof *out->values);
    memcpy(out->boundaries, t->boundaries, (size_t)t->n_boundaries * sizeof *out->boundaries);
    memcpy(out->values, t->values, (size_t)t->n_values * sizeof *out->values);
  }
}
