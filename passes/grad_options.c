/* SPDX-License-Identifier: Apache-2.0 */
/*
 * grad_options.c: the grad pass's options (pass_train_options): their
 * defaults, the loss and optimizer names, and the key=value form that
 * castor-opt and the API's training options use (pass_train_option). The
 * pass itself is grad.c.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "passes/passes.h"

static const diag_loc no_loc = {0};

void pass_train_options_init(pass_train_options *o) {
  memset(o, 0, sizeof *o);
  o->learning_rate = -1;
  o->loss_scale = -1;
  o->weight_decay = -1;
}

static const char *const loss_names[] = {
    [PASS_LOSS_SPARSE_XENT] = "sparse_categorical_crossentropy",
    [PASS_LOSS_XENT] = "categorical_crossentropy",
    [PASS_LOSS_MSE] = "mean_squared_error",
};
static const char *const optimizer_names[] = {
    [PASS_OPT_SGD] = "sgd", [PASS_OPT_RMSPROP] = "rmsprop", [PASS_OPT_ADAM] = "adam", [PASS_OPT_NONE] = "none",
    [PASS_OPT_ADAMW] = "adamw"};

bool pass_loss_from_name(const char *s, pass_loss *out) {
  for (int i = 0; i < (int)(sizeof loss_names / sizeof *loss_names); i++)
    if (loss_names[i] && strcmp(s, loss_names[i]) == 0) return *out = (pass_loss)i, true;
  if (strcmp(s, "mse") == 0) return *out = PASS_LOSS_MSE, true; /* Keras's alias */
  return false;
}

bool pass_optimizer_from_name(const char *s, pass_optimizer *out) {
  for (int i = 0; i < (int)(sizeof optimizer_names / sizeof *optimizer_names); i++)
    if (optimizer_names[i] && strcmp(s, optimizer_names[i]) == 0) return *out = (pass_optimizer)i, true;
  return false;
}

const char *pass_loss_name(pass_loss l) { return loss_names[l]; }
const char *pass_optimizer_name(pass_optimizer o) { return optimizer_names[o]; }

static bool number(const char *v, double lo, double hi, double *out) {
  char *end;
  double x = strtod(v, &end);
  if (!*v || *end || !(x >= lo && x <= hi)) return false;
  *out = x;
  return true;
}

bool pass_train_option(pass_train_options *o, const char *key, const char *v, diag_sink *d) {
  double x = 0;
  bool ok = true;
  if (!strcmp(key, "loss")) {
    if (!strcmp(v, "sparse_categorical_crossentropy_from_logits")) o->loss = PASS_LOSS_SPARSE_XENT, o->from_logits = true;
    else ok = pass_loss_from_name(v, &o->loss);
    if (!ok) {
      diag_error_kind(d, DIAG_KIND_INVALID_ARGUMENT, no_loc,
                      "--loss: unknown loss '%s' (losses: sparse_categorical_crossentropy, categorical_crossentropy, "
                      "mean_squared_error)", v);
      return false;
    }
  } else if (!strcmp(key, "optimizer")) {
    if (!pass_optimizer_from_name(v, &o->optimizer)) {
      diag_error_kind(d, DIAG_KIND_INVALID_ARGUMENT, no_loc,
                      "--optimizer: unknown optimizer '%s' (optimizers: sgd, rmsprop, adam, adamw, none)", v);
      return false;
    }
  } else if (!strcmp(key, "loss-scale")) {
    if (!strcmp(v, "dynamic")) o->loss_scale = 0;
    else if (!strcmp(v, "none")) o->loss_scale = 1;
    else if (number(v, 0x1p-24, 0x1p64, &x)) o->loss_scale = x;
    else ok = false;
    if (!ok) {
      diag_error_kind(d, DIAG_KIND_INVALID_ARGUMENT, no_loc,
                      "--loss-scale: '%s' is not dynamic, none or a number in [2^-24, 2^64]", v);
      return false;
    }
  } else {
    static const struct { const char *key; double lo, hi; size_t off; } nums[] = {
        {"learning-rate", 1e-30, 1e30, offsetof(pass_train_options, learning_rate)},
        {"momentum", 0, 0.999999, offsetof(pass_train_options, momentum)},
        {"rho", 1e-9, 0.999999, offsetof(pass_train_options, rho)},
        {"beta-1", 1e-9, 0.999999, offsetof(pass_train_options, beta_1)},
        {"beta-2", 1e-9, 0.999999, offsetof(pass_train_options, beta_2)},
        {"epsilon", 1e-30, 1, offsetof(pass_train_options, epsilon)},
        {"loss-scale-min", 0x1p-24, 0x1p64, offsetof(pass_train_options, loss_scale_min)},
        /* training options */
        {"weight-decay", 0, 1e30, offsetof(pass_train_options, weight_decay)},
        {"loss-scale-initial", 0x1p-24, 0x1p64, offsetof(pass_train_options, loss_scale_initial)},
        {"loss-scale-growth-steps", 1, 1e9, offsetof(pass_train_options, loss_scale_growth_steps)},
        {"clipnorm", 1e-30, 1e30, offsetof(pass_train_options, clipnorm)},
        {"clipvalue", 1e-30, 1e30, offsetof(pass_train_options, clipvalue)},
        {"global-clipnorm", 1e-30, 1e30, offsetof(pass_train_options, global_clipnorm)},
    };
    for (size_t i = 0; i < sizeof nums / sizeof *nums; i++) {
      if (strcmp(key, nums[i].key) != 0) continue;
      bool whole = nums[i].off == offsetof(pass_train_options, loss_scale_growth_steps);
      if (!number(v, nums[i].lo, nums[i].hi, &x) || (whole && x != floor(x))) {
        if (whole) {
          diag_error_kind(d, DIAG_KIND_INVALID_ARGUMENT, no_loc, "--%s: '%s' is not a whole number in [1, 10^9]", key, v);
          return false;
        }
        diag_error_kind(d, DIAG_KIND_INVALID_ARGUMENT, no_loc, "--%s: '%s' is not a number in [%g, %g]", key, v,
                        nums[i].lo, nums[i].hi);
        return false;
      }
      *(double *)((char *)o + nums[i].off) = x;
      return true;
    }
    diag_error_kind(d, DIAG_KIND_INVALID_ARGUMENT, no_loc, "unknown training option '--%s'", key);
    return false;
  }
  return true;
}

/* Keras 3's default learning rate of each optimizer. */
