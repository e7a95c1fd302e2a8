/* SPDX-License-Identifier: Apache-2.0 */
/*
 * train_options.c: the training options of castor train, evaluate and
 * dump --train (train_options.h).
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/train_options.h"

const char cli_train_options_help[] =
    "  --optimizer O         rmsprop (default), adam, adamw or sgd, with Keras's defaults\n"
    "  --learning-rate LR    (default: sgd 0.01, else 0.001)\n"
    "  --momentum M          sgd's and rmsprop's momentum (default 0: none)\n"
    "  --nesterov            sgd: Nesterov momentum\n"
    "  --centered            rmsprop: centered (by the gradients' moving mean)\n"
    "  --loss L              sparse_categorical_crossentropy (default),\n"
    "                        categorical_crossentropy or mean_squared_error\n"
    "  --from-logits         the model outputs logits, not probabilities\n"
    "  --loss-scale S        dynamic (default under mixed_float16), none, or a number\n"
    "  --loss-scale-min S    the dynamic scale's floor\n"
    "  --loss-scale-initial S, --loss-scale-growth-steps N\n"
    "                        the dynamic scale's start (2^15) and the finite steps\n"
    "                        after which it doubles (2000)\n"
    "  --beta-1 B, --beta-2 B, --epsilon E\n"
    "                        adam's and adamw's (0.9, 0.999, 1e-7; epsilon: rmsprop's too)\n"
    "  --weight-decay W      adamw's decoupled weight decay (0.004)\n"
    "  --clipnorm C, --global-clipnorm C, --clipvalue C\n"
    "                        clip each gradient's norm, their global norm, or each\n"
    "                        element, unscaled (Keras's; at most one)\n"
    "  --lr-schedule S       exponential_decay (--decay-steps N --decay-rate R\n"
    "                        [--staircase]), cosine_decay (--decay-steps N [--alpha A]\n"
    "                        [--warmup-target T --warmup-steps W]) or\n"
    "                        piecewise_constant_decay (--boundaries B1,B2,...\n"
    "                        --values V0,V1,...): Keras's schedules, from --learning-rate\n";

void cli_train_options_init(cli_train_options *t) {
  memset(t, 0, sizeof *t);
  castor_train_options_init(&t->to);
}

/* A number option in a range with open or closed ends ("(0, 1)"):
 * "--beta-1 must be in (0, 1), got '1'". */
static bool range_opt(const char *opt, const char *v, bool missing, double lo, bool lo_open, double hi, bool hi_open,
                      const char *range, double *out) {
  char *end;
  errno = 0;
  double x = missing ? NAN : strtod(v, &end);
  if (missing || !*v || *end || errno == ERANGE || isnan(x)) {
    cli_error("%s needs a number in %s, got '%s'", opt, range, missing ? "" : v);
    return false;
  }
  if (!((lo_open ? x > lo : x >= lo) && (hi_open ? x < hi : x <= hi))) {
    cli_error("%s must be in %s, got '%s'", opt, range, v);
    return false;
  }
  *out = x;
  return true;
}

/* --boundaries 100,200 (whole steps, strictly increasing) or --values
 * 0.1,0.01,0.001 (rates); n: how many. */
static bool list_opt(const char *opt, const char *v, bool missing, bool ints, int cap, int64_t *iv, double *dv, int *n) {
  *n = 0;
  if (missing || !*v) return cli_error("%s needs a comma-separated list, got ''", opt), false;
  for (const char *p = v;;) {
    char *end;
    errno = 0;
    if (*n == cap) return cli_error("%s takes at most %d entries", opt, cap), false;
    if (ints) {
      long long x = strtoll(p, &end, 10);
      if (end == p || (*end && *end != ',') || errno || x < 0)
        return cli_error("%s needs whole numbers of steps >= 0, comma-separated, got '%s'", opt, v), false;
      if (*n > 0 && x <= iv[*n - 1])
        return cli_error("%s must be strictly increasing: %lld follows %lld", opt, x, (long long)iv[*n - 1]), false;
      iv[(*n)++] = x;
    } else {
      double x = strtod(p, &end);
      if (end == p || (*end && *end != ',') || errno || !(x > 0 && x <= 1e30))
        return cli_error("%s needs learning rates in (0, 1e30], comma-separated, got '%s'", opt, v), false;
      dv[(*n)++] = x;
    }
    if (!*end) return true;
    p = end + 1;
  }
}

static bool parse_double(const char *s, double lo, double hi, double *out) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (!*s || *end || errno || !(v >= lo && v <= hi)) return false;
  *out = v;
  return true;
}

/* A usage error, printed; the parse fails. */
#define CLI_FAIL(...) (cli_error(__VA_ARGS__), CLI_OPT_ERROR)

cli_opt_result cli_train_options_parse(cli_train_options *t, int argc, char **argv, int *ip) {
  int i = *ip;
  const char *a = argv[i], *v;
  bool missing = false;
  int64_t n;
  double d;
#define OPT(name) ((v = str_opt_arg(argc, argv, &i, name, &missing)) != NULL || missing)
#define NEED(what) \
  if (missing) return CLI_FAIL("%s needs %s", a, what)
  if (OPT("--optimizer")) {
    NEED("sgd, rmsprop, adam or adamw");
    t->to.optimizer = v;
  } else if (OPT("--loss")) {
    NEED("a loss name");
    t->to.loss = v;
  } else if (OPT("--loss-scale")) {
    NEED("dynamic, none or a number");
    t->to.loss_scale = v;
  } else if (!strcmp(a, "--from-logits")) {
    t->to.from_logits = 1;
  } else if (!strcmp(a, "--nesterov")) {
    t->to.nesterov = 1;
  } else if (!strcmp(a, "--centered")) {
    t->to.centered = 1;
  } else if (OPT("--learning-rate")) {
    if (!missing && parse_double(v, 0, INFINITY, &d) && d > 1e30)
      return CLI_FAIL("--learning-rate must be at most 1e30, got '%s'", v);
    if (!missing && parse_double(v, 0, INFINITY, &d) && d > 0 && d < 1e-30)
      return CLI_FAIL("--learning-rate must be at least 1e-30, got '%s'", v);
    if (missing || !parse_double(v, 1e-30, 1e30, &d)) return CLI_FAIL("--learning-rate needs a positive number, got '%s'", missing ? "" : v);
    t->to.learning_rate = d;
  } else if (OPT("--momentum")) {
    if (missing || !parse_double(v, 0, 0.999999, &d)) return CLI_FAIL("--momentum needs a number in [0, 1), got '%s'", missing ? "" : v);
    t->to.momentum = d;
  } else if (OPT("--loss-scale-min")) {
    if (!missing && parse_double(v, 0, INFINITY, &d) && d > 0 && !(d >= 0x1p-24 && d <= 0x1p64))
      return CLI_FAIL("--loss-scale-min must be from 2^-24 to 2^64, got '%s'", v);
    if (missing || !parse_double(v, 0x1p-24, 0x1p64, &d)) return CLI_FAIL("--loss-scale-min needs a positive number, got '%s'", missing ? "" : v);
    t->to.loss_scale_min = d;
  } else if (OPT("--beta-1")) { /* training options */
    if (!range_opt("--beta-1", v, missing, 0, true, 1, true, "(0, 1)", &t->to.beta_1)) return CLI_OPT_ERROR;
  } else if (OPT("--beta-2")) {
    if (!range_opt("--beta-2", v, missing, 0, true, 1, true, "(0, 1)", &t->to.beta_2)) return CLI_OPT_ERROR;
  } else if (OPT("--epsilon")) {
    if (!range_opt("--epsilon", v, missing, 0, true, 1, false, "(0, 1]", &t->to.epsilon)) return CLI_OPT_ERROR;
  } else if (OPT("--weight-decay")) {
    if (!range_opt("--weight-decay", v, missing, 0, true, 1e30, false, "(0, 1e30] (adam is adamw without it)",
                   &t->to.weight_decay))
      return CLI_OPT_ERROR;
  } else if (OPT("--loss-scale-initial")) {
    if (!range_opt("--loss-scale-initial", v, missing, 0x1p-24, false, 0x1p64, false, "[2^-24, 2^64]",
                   &t->to.loss_scale_initial))
      return CLI_OPT_ERROR;
  } else if (OPT("--loss-scale-growth-steps")) {
    if (!cli_parse_int("--loss-scale-growth-steps", v, missing, 1, 1000000000, "10^9", "a positive integer", &n)) return CLI_OPT_ERROR;
    t->to.loss_scale_growth_steps = n;
  } else if (OPT("--clipnorm")) {
    if (!range_opt("--clipnorm", v, missing, 0, true, 1e30, false, "(0, 1e30]", &t->to.clipnorm)) return CLI_OPT_ERROR;
  } else if (OPT("--clipvalue")) {
    if (!range_opt("--clipvalue", v, missing, 0, true, 1e30, false, "(0, 1e30]", &t->to.clipvalue)) return CLI_OPT_ERROR;
  } else if (OPT("--global-clipnorm")) {
    if (!range_opt("--global-clipnorm", v, missing, 0, true, 1e30, false, "(0, 1e30]", &t->to.global_clipnorm)) return CLI_OPT_ERROR;
  } else if (OPT("--lr-schedule")) {
    if (missing || (strcmp(v, "exponential_decay") && strcmp(v, "cosine_decay") && strcmp(v, "piecewise_constant_decay")))
      return CLI_FAIL("--lr-schedule takes exponential_decay, cosine_decay or piecewise_constant_decay, got '%s'",
                       missing ? "" : v);
    t->to.lr_schedule = v;
  } else if (OPT("--decay-steps")) {
    if (!cli_parse_int("--decay-steps", v, missing, 1, INT64_C(1) << 53, "2^53", "a positive integer", &n)) return CLI_OPT_ERROR;
    t->to.decay_steps = n;
  } else if (OPT("--decay-rate")) {
    if (!range_opt("--decay-rate", v, missing, 0, true, 1e30, false, "(0, 1e30]", &t->to.decay_rate)) return CLI_OPT_ERROR;
  } else if (!strcmp(a, "--staircase")) {
    t->to.staircase = 1;
  } else if (OPT("--alpha")) {
    if (!range_opt("--alpha", v, missing, 0, false, 1, false, "[0, 1]", &t->to.alpha)) return CLI_OPT_ERROR;
  } else if (OPT("--warmup-target")) {
    if (!range_opt("--warmup-target", v, missing, 0, true, 1e30, false, "(0, 1e30]", &t->to.warmup_target)) return CLI_OPT_ERROR;
  } else if (OPT("--warmup-steps")) {
    if (!cli_parse_int("--warmup-steps", v, missing, 0, INT64_C(1) << 53, "2^53", "an integer >= 0", &n)) return CLI_OPT_ERROR;
    t->to.warmup_steps = n;
  } else if (OPT("--boundaries")) {
    if (!list_opt("--boundaries", v, missing, true, 64, t->boundaries, NULL, &t->to.n_boundaries)) return CLI_OPT_ERROR;
    t->to.boundaries = t->boundaries;
  } else if (OPT("--values")) {
    if (!list_opt("--values", v, missing, false, 65, NULL, t->values, &t->to.n_values)) return CLI_OPT_ERROR;
    t->to.values = t->values;
  } else {
    return CLI_OPT_NONE;
  }
#undef OPT
#undef NEED
  *ip = i;
  return CLI_OPT_TAKEN;
}

bool cli_train_options_check(const cli_train_options *t) {
  {
    const char *sc = t->to.lr_schedule ? t->to.lr_schedule : "";
    bool ex = !strcmp(sc, "exponential_decay"), co = !strcmp(sc, "cosine_decay"), pw = !strcmp(sc, "piecewise_constant_decay");
    const char *stray = !ex && t->to.decay_rate != 0 ? "--decay-rate needs --lr-schedule exponential_decay"
                        : !ex && t->to.staircase ? "--staircase needs --lr-schedule exponential_decay"
                        : !ex && !co && t->to.decay_steps ? "--decay-steps needs --lr-schedule exponential_decay or cosine_decay"
                        : !co && t->to.alpha != 0 ? "--alpha needs --lr-schedule cosine_decay"
                        : !co && t->to.warmup_target != 0 ? "--warmup-target needs --lr-schedule cosine_decay"
                        : !co && t->to.warmup_steps ? "--warmup-steps needs --lr-schedule cosine_decay"
                        : !pw && t->to.n_boundaries ? "--boundaries needs --lr-schedule piecewise_constant_decay"
                        : !pw && t->to.n_values ? "--values needs --lr-schedule piecewise_constant_decay"
                        : (ex || co) && !t->to.decay_steps ? (ex ? "--lr-schedule exponential_decay needs --decay-steps"
                                                                 : "--lr-schedule cosine_decay needs --decay-steps")
                        : ex && t->to.decay_rate == 0 ? "--lr-schedule exponential_decay needs --decay-rate"
                        : co && t->to.warmup_steps && t->to.warmup_target == 0
                            ? "--warmup-steps needs --warmup-target (the rate the warmup reaches)"
                        : pw && !t->to.n_boundaries ? "--lr-schedule piecewise_constant_decay needs --boundaries and --values"
                        : pw && t->to.learning_rate != 0
                            ? "--learning-rate and --lr-schedule piecewise_constant_decay exclude each other (--values are the rates)"
                                                  : NULL;
    if (stray) {
      cli_error("%s", stray);
      return false;
    }
    if (pw && t->to.n_values != t->to.n_boundaries + 1) {
      cli_error("--values needs one rate more than --boundaries (%d boundaries, so %d values), got %d",
                t->to.n_boundaries, t->to.n_boundaries + 1, t->to.n_values);
      return false;
    }
  }
  return true;
}
