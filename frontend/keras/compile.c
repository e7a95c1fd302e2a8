/*
 * compile.c: a .keras file's compile_config as castor train's defaults
 * (fe_train_defaults): the loss, the optimizer with its hyperparameters
 * (inside a LossScaleOptimizer, whose dynamic scale castor implements with
 * Keras's defaults), the metrics. A value castor does not implement (an
 * optimizer class it lacks, EMA, gradient accumulation, a learning-rate
 * schedule other than castor's three, weight decay outside Adam/AdamW,
 * RMSprop's rho) is an error naming the key, never ignored. Adam's betas
 * and epsilon, AdamW's weight decay, clipping, the schedules and the
 * LossScaleOptimizer's start and growth period map onto
 * castor_train_options (0: Keras's default).
 */
#include "frontend/keras/internal.h"

#include <stdio.h>
#include <string.h>

/* A number config value (int or float), or false. */
static bool num(const json_value *v, double *out) {
  if (!v || (v->kind != JSON_INT && v->kind != JSON_FLOAT)) return false;
  *out = v->num;
  return true;
}

/* A whole number (an int, or a float without a fraction) in [lo, hi]. */
static bool whole(const json_value *v, int64_t lo, int64_t hi, int64_t *out) {
  double x;
  if (!num(v, &x) || x != (double)(int64_t)x || x < (double)lo || x > (double)hi) return false;
  *out = (int64_t)x;
  return true;
}

/* A learning_rate that is a schedule object: castor's three (docs/training.md). */
static bool read_schedule(kr_model *m, const json_value *v, fe_train_defaults *td) {
  const json_value *sc = json_field(v, "class_name"), *cfg = json_field(v, "config");
  const char *c = sc && sc->kind == JSON_STR ? sc->s : "an object";
  const char *kind = !strcmp(c, "ExponentialDecay") ? "exponential_decay"
                     : !strcmp(c, "CosineDecay") ? "cosine_decay"
                     : !strcmp(c, "PiecewiseConstantDecay") ? "piecewise_constant_decay" : NULL;
  if (!kind) {
    kr_unsupported(m, "compile_config: learning_rate: a learning-rate schedule (%s) is not supported "
                   "(castor implements ExponentialDecay, CosineDecay and PiecewiseConstantDecay)", c);
    return false;
  }
  if (!cfg || cfg->kind != JSON_OBJ) {
    kr_error(m, "compile_config: learning_rate: %s has no config object", c);
    return false;
  }
  snprintf(td->lr_schedule, sizeof td->lr_schedule, "%s", kind);
  for (int i = 0; i < cfg->n; i++) {
    const char *k = cfg->keys[i];
    const json_value *x = &cfg->items[i];
    double d;
    bool ok = true;
    if (!strcmp(k, "name")) continue;
    if (!strcmp(k, "initial_learning_rate") && strcmp(kind, "piecewise_constant_decay") != 0)
      ok = num(x, &d) && d >= 1e-30 && d <= 1e30 && (td->learning_rate = d, true);
    else if (!strcmp(k, "decay_steps") && strcmp(kind, "piecewise_constant_decay") != 0)
      ok = whole(x, 1, INT64_C(1) << 53, &td->decay_steps);
    else if (!strcmp(k, "decay_rate") && !strcmp(kind, "exponential_decay"))
      ok = num(x, &d) && d > 0 && (td->decay_rate = d, true);
    else if (!strcmp(k, "staircase") && !strcmp(kind, "exponential_decay"))
      ok = x->kind == JSON_LIT && x->lit != 'n' && (td->staircase = x->lit == 't', true);
    else if (!strcmp(k, "alpha") && !strcmp(kind, "cosine_decay"))
      ok = num(x, &d) && d >= 0 && d <= 1 && (td->alpha = d, true);
    else if (!strcmp(k, "warmup_target") && !strcmp(kind, "cosine_decay"))
      ok = kr_is_null(x) || (num(x, &d) && d > 0 && (td->warmup_target = d, true));
    else if (!strcmp(k, "warmup_steps") && !strcmp(kind, "cosine_decay"))
      ok = whole(x, 0, INT64_C(1) << 53, &td->warmup_steps);
    else if (!strcmp(k, "boundaries") && !strcmp(kind, "piecewise_constant_decay")) {
      ok = x->kind == JSON_ARR && x->n >= 1 && x->n <= 64;
      for (int j = 0; ok && j < x->n; j++)
        ok = whole(&x->items[j], j ? td->boundaries[j - 1] + 1 : 0, INT64_C(1) << 53, &td->boundaries[j]);
      if (ok) td->n_boundaries = x->n;
    } else if (!strcmp(k, "values") && !strcmp(kind, "piecewise_constant_decay")) {
      ok = x->kind == JSON_ARR && x->n >= 2 && x->n <= 65;
      for (int j = 0; ok && j < x->n; j++) ok = num(&x->items[j], &td->values[j]) && td->values[j] > 0;
      if (ok) td->n_values = x->n;
    } else {
      kr_unsupported(m, "compile_config: learning_rate: %s's '%s' is not supported", c, k);
      return false;
    }
    if (!ok) {
      kr_unsupported(m, "compile_config: learning_rate: %s's '%s' is not a value castor implements "
                     "(docs/training.md gives each argument's range)", c, k);
      return false;
    }
  }
  if (td->warmup_target == 0) td->warmup_steps = 0; /* no warmup without a target, as Keras */
  if (!strcmp(kind, "piecewise_constant_decay") && td->n_values != td->n_boundaries + 1) {
    kr_error(m, "compile_config: learning_rate: PiecewiseConstantDecay has %d values for %d boundaries "
             "(one more value than boundaries)", td->n_values, td->n_boundaries);
    return false;
  }
  if (strcmp(kind, "piecewise_constant_decay") != 0 && (!td->decay_steps || td->learning_rate == 0 ||
                                                      (!strcmp(kind, "exponential_decay") && td->decay_rate == 0))) {
    kr_error(m, "compile_config: learning_rate: %s lacks initial_learning_rate, decay_steps or decay_rate", c);
    return false;
  }
  return true;
}

/* The LossScaleOptimizer's own keys: castor's dynamic loss scale with its
 * start and growth period. */
static bool read_loss_scale(kr_model *m, const json_value *cfg, fe_train_defaults *td) {
  for (int i = 0; i < cfg->n; i++) {
    const char *k = cfg->keys[i];
    const json_value *v = &cfg->items[i];
    double x;
    int64_t n;
    if (!strcmp(k, "inner_optimizer") || !strcmp(k, "name")) continue;
    if (!strcmp(k, "initial_scale")) {
      if (!num(v, &x) || !(x >= 0x1p-24 && x <= 0x1p64)) {
        kr_unsupported(m, "compile_config: LossScaleOptimizer's 'initial_scale' must be a number in "
                       "[2^-24, 2^64]");
        return false;
      }
      if (x != 32768.0) td->loss_scale_initial = x;
      continue;
    }
    if (!strcmp(k, "dynamic_growth_steps")) {
      if (!whole(v, 1, 1000000000, &n)) {
        kr_unsupported(m, "compile_config: LossScaleOptimizer's 'dynamic_growth_steps' must be a whole "
                       "number in [1, 10^9]");
        return false;
      }
      if (n != 2000) td->loss_scale_growth_steps = n;
      continue;
    }
    if (!strcmp(k, "ema_momentum")) continue; /* used only with use_ema (checked if true) */
    if (!strcmp(k, "use_ema") && v->kind == JSON_LIT && v->lit == 't') {
      kr_unsupported(m, "compile_config: optimizer option 'use_ema' is not supported");
      return false;
    }
    if (kr_is_null(v) || (v->kind == JSON_LIT && v->lit == 'f')) continue; /* unset options */
    kr_unsupported(m, "compile_config: LossScaleOptimizer's '%s' is not supported", k);
    return false;
  }
  return true;
}

/* An optimizer's keys: what castor takes, what must keep its default (an
 * option castor lacks), and what does not change training. */
static bool read_optimizer(kr_model *m, const json_value *opt, fe_train_defaults *td, int depth) {
  if (opt->kind == JSON_STR) {
    const char *s = opt->s;
    if (!strcmp(s, "adam") || !strcmp(s, "sgd") || !strcmp(s, "rmsprop") || !strcmp(s, "adamw")) {
      snprintf(td->optimizer, sizeof td->optimizer, "%s", s);
      return true;
    }
    kr_unsupported(m, "compile_config: optimizer '%s' is not supported (castor trains with sgd, "
                "rmsprop, adam and adamw)", s);
    return false;
  }
  const json_value *cls = opt->kind == JSON_OBJ ? json_field(opt, "class_name") : NULL;
  const json_value *cfg = opt->kind == JSON_OBJ ? json_field(opt, "config") : NULL;
  if (!cls || cls->kind != JSON_STR || !cfg || cfg->kind != JSON_OBJ) {
    kr_error(m, "compile_config: the optimizer is not a serialized optimizer (class_name and config)");
    return false;
  }
  const char *c = cls->s;
  if (!strcmp(c, "LossScaleOptimizer") && depth == 0) {
    if (!read_loss_scale(m, cfg, td)) return false;
    const json_value *inner = json_field(cfg, "inner_optimizer");
    if (!inner) {
      kr_error(m, "compile_config: LossScaleOptimizer has no inner_optimizer");
      return false;
    }
    snprintf(td->loss_scale, sizeof td->loss_scale, "dynamic");
    return read_optimizer(m, inner, td, 1);
  }
  const char *name = !strcmp(c, "Adam") ? "adam" : !strcmp(c, "AdamW") ? "adamw" : !strcmp(c, "SGD") ? "sgd"
                     : !strcmp(c, "RMSprop") ? "rmsprop" : NULL;
  if (!name) {
    kr_unsupported(m, "compile_config: optimizer class '%s' is not supported (castor trains with SGD, "
                "RMSprop, Adam, AdamW, and LossScaleOptimizer around them)", c);
    return false;
  }
  bool adam = !strcmp(name, "adam") || !strcmp(name, "adamw");
  snprintf(td->optimizer, sizeof td->optimizer, "%s", name);
  for (int i = 0; i < cfg->n; i++) {
    const char *k = cfg->keys[i];
    const json_value *v = &cfg->items[i];
    double x;
    if (!strcmp(k, "name")) continue;
    if (!strcmp(k, "learning_rate") && v->kind == JSON_OBJ) {
      if (!read_schedule(m, v, td)) return false;
      continue;
    }
    if (!strcmp(k, "nesterov") || !strcmp(k, "centered") || !strcmp(k, "amsgrad") || !strcmp(k, "use_ema")) {
      if (v->kind != JSON_LIT || v->lit == 'n') {
        kr_error(m, "compile_config: optimizer '%s' is not true or false", k);
        return false;
      }
      if (v->lit == 'f') continue;
      if (!strcmp(k, "nesterov") && !strcmp(name, "sgd")) { td->nesterov = true; continue; }
      if (!strcmp(k, "centered") && !strcmp(name, "rmsprop")) { td->centered = true; continue; }
      kr_unsupported(m, "compile_config: optimizer option '%s' is not supported", k);
      return false;
    }
    if (!strncmp(k, "ema_", 4)) continue; /* used only with use_ema, refused above */
    if (!strcmp(k, "loss_scale_factor") || !strcmp(k, "gradient_accumulation_steps")) {
      if (kr_is_null(v)) continue;
      kr_unsupported(m, "compile_config: optimizer option '%s' is not supported (castor implements no "
                     "loss scale factor or gradient accumulation)", k);
      return false;
    }
    if (kr_is_null(v) && (!strcmp(k, "weight_decay") || !strcmp(k, "clipnorm") || !strcmp(k, "clipvalue") ||
                          !strcmp(k, "global_clipnorm")))
      continue; /* unset */
    if (!num(v, &x)) {
      kr_error(m, "compile_config: optimizer '%s' is %s, not a number", k, json_kind_name(v->kind));
      return false;
    }
    /* the value as the float32 Keras stores it or the double it wrote */
#define IS(def) (x == (def) || (float)x == (float)(def))
    const char *range = NULL;
    if (!strcmp(k, "learning_rate")) {
      /* --learning-rate's range (tools/train_options.c): a value past it (1e400 reads as inf) is
       * this file's error, not the flag's */
      if (!(x >= 1e-30 && x <= 1e30)) range = "[1e-30, 1e+30]";
      else td->learning_rate = x;
    } else if (!strcmp(k, "momentum") && !adam) {
      if (!(x >= 0 && x < 1)) range = "[0, 1)";
      else td->momentum = x;
    } else if (!strcmp(k, "momentum") && x != 0) {
      return kr_unsupported(m, "compile_config: Adam has no option 'momentum'"), false;
    } else if (!strcmp(k, "momentum")) {
      continue;
    } else if ((!strcmp(k, "beta_1") || !strcmp(k, "beta_2")) && adam) {
      if (!(x > 0 && x < 1)) range = "(0, 1)";
      else if (!IS(k[5] == '1' ? 0.9 : 0.999)) *(k[5] == '1' ? &td->beta_1 : &td->beta_2) = x;
    } else if (!strcmp(k, "epsilon") && strcmp(name, "sgd") != 0) {
      if (!(x > 0 && x <= 1)) range = "(0, 1]";
      else if (!IS(1e-7)) td->epsilon = x;
    } else if (!strcmp(k, "rho") && !strcmp(name, "rmsprop")) {
      if (!IS(0.9)) {
        kr_unsupported(m, "compile_config: optimizer option 'rho' = %g is not supported (castor uses "
                       "Keras's default, 0.9)", x);
        return false;
      }
    } else if (!strcmp(k, "weight_decay")) {
      /* Keras decays every optimizer's weights the same way; castor
       * implements it as AdamW, which is Adam with weight_decay */
      if (x == 0) {
        if (!strcmp(name, "adamw")) snprintf(td->optimizer, sizeof td->optimizer, "adam");
      } else if (!adam) {
        kr_unsupported(m, "compile_config: optimizer option 'weight_decay' is not supported for %s "
                       "(castor implements it for Adam and AdamW)", c);
        return false;
      } else if (!(x > 0 && x <= 1e30)) {
        range = "(0, 1e30]";
      } else {
        snprintf(td->optimizer, sizeof td->optimizer, "adamw");
        td->weight_decay = x;
      }
    } else if (!strcmp(k, "clipnorm") || !strcmp(k, "clipvalue") || !strcmp(k, "global_clipnorm")) {
      if (!(x > 0 && x <= 1e30)) range = "(0, 1e30]";
      else *(!strcmp(k, "clipnorm") ? &td->clipnorm : !strcmp(k, "clipvalue") ? &td->clipvalue
                                                                              : &td->global_clipnorm) = x;
    } else if (!strcmp(k, "beta_1") || !strcmp(k, "beta_2") || !strcmp(k, "epsilon") || !strcmp(k, "rho")) {
      kr_unsupported(m, "compile_config: optimizer option '%s' is not supported for %s", k, c);
      return false;
    } else {
      kr_unsupported(m, "compile_config: optimizer option '%s' is not supported", k);
      return false;
    }
#undef IS
    if (range) {
      kr_unsupported(m, "compile_config: optimizer option '%s' = %g is not supported (castor takes %s)", k, x,
                     range);
      return false;
    }
  }
  if ((td->clipnorm > 0) + (td->clipvalue > 0) + (td->global_clipnorm > 0) > 1) {
    kr_error(m, "compile_config: the optimizer sets more than one of clipnorm, clipvalue and global_clipnorm");
    return false;
  }
  if (td->lr_schedule[0] && !strcmp(td->lr_schedule, "piecewise_constant_decay")) td->learning_rate = 0;
  return true;
}

/* Keras loss names (and their class names) castor trains with. */
static const struct {
  const char *name, *cls, *castor;
} losses[] = {
    {"sparse_categorical_crossentropy", "SparseCategoricalCrossentropy", "sparse_categorical_crossentropy"},
    {"categorical_crossentropy", "CategoricalCrossentropy", "categorical_crossentropy"},
    {"mean_squared_error", "MeanSquaredError", "mean_squared_error"},
    {"mse", NULL, "mean_squared_error"},
};

static bool read_loss(kr_model *m, const json_value *v, fe_train_defaults *td) {
  const char *name = NULL;
  const json_value *cfg = NULL;
  if (v->kind == JSON_STR) name = v->s;
  else if (v->kind == JSON_OBJ) {
    const json_value *cls = json_field(v, "class_name");
    cfg = json_field(v, "config");
    if (cls && cls->kind == JSON_STR) name = cls->s;
  }
  for (size_t i = 0; name && i < sizeof losses / sizeof *losses; i++) {
    if (strcmp(name, losses[i].name) != 0 && (!losses[i].cls || strcmp(name, losses[i].cls) != 0)) continue;
    snprintf(td->loss, sizeof td->loss, "%s", losses[i].castor);
    for (int k = 0; cfg && cfg->kind == JSON_OBJ && k < cfg->n; k++) {
      const char *key = cfg->keys[k];
      const json_value *x = &cfg->items[k];
      if (!strcmp(key, "name") || !strcmp(key, "dtype") || kr_is_null(x)) continue;
      if (!strcmp(key, "from_logits") && x->kind == JSON_LIT) { td->from_logits = x->lit == 't'; continue; }
      if (!strcmp(key, "reduction") && x->kind == JSON_STR && !strcmp(x->s, "sum_over_batch_size")) continue;
      if (!strcmp(key, "axis") && x->kind == JSON_INT && x->i == -1) continue;
      if (!strcmp(key, "label_smoothing") && (x->kind == JSON_INT || x->kind == JSON_FLOAT) && x->num == 0) continue;
      kr_unsupported(m, "compile_config: loss option '%s' of %s is not supported", key, name);
      return false;
    }
    return true;
  }
  if (v->kind == JSON_ARR || (v->kind == JSON_OBJ && !name))
    kr_unsupported(m, "compile_config: a loss per output or a custom loss is not supported");
  else
    kr_unsupported(m, "compile_config: loss '%s' is not supported (castor trains with "
                "sparse_categorical_crossentropy, categorical_crossentropy, mean_squared_error)",
                name ? name : json_kind_name(v->kind));
  return false;
}

static bool read_metrics(kr_model *m, const json_value *v, fe_train_defaults *td) {
  if (kr_is_null(v)) return true;
  if (v->kind != JSON_ARR) {
    kr_unsupported(m, "compile_config: metrics per output are not supported");
    return false;
  }
  for (int i = 0; i < v->n; i++) {
    const json_value *x = &v->items[i];
    const char *s = x->kind == JSON_STR ? x->s : NULL;
    if (x->kind == JSON_OBJ) {
      const json_value *c = json_field(x, "class_name");
      s = c && c->kind == JSON_STR ? c->s : NULL;
    }
    if (s && (!strcmp(s, "accuracy") || !strcmp(s, "acc") || !strcmp(s, "Accuracy") ||
              !strcmp(s, "CategoricalAccuracy") || !strcmp(s, "SparseCategoricalAccuracy"))) {
      td->accuracy = true;
      continue;
    }
    kr_unsupported(m, "compile_config: metric '%s' is not supported (castor reports accuracy)",
                s ? s : json_kind_name(x->kind));
    return false;
  }
  return true;
}

bool kr_read_compile(kr_model *m, const json_value *cc, fe_train_defaults *td) {
  if (kr_is_null(cc)) return true;
  if (cc->kind != JSON_OBJ) {
    kr_error(m, "config.json: compile_config is %s, not an object", json_kind_name(cc->kind));
    return false;
  }
  td->present = true;
  for (int i = 0; i < cc->n; i++) {
    const char *k = cc->keys[i];
    const json_value *v = &cc->items[i];
    bool ok = true;
    if (!strcmp(k, "optimizer")) ok = kr_is_null(v) || read_optimizer(m, v, td, 0);
    else if (!strcmp(k, "loss")) ok = kr_is_null(v) || read_loss(m, v, td);
    else if (!strcmp(k, "metrics")) ok = read_metrics(m, v, td);
    else if (!strcmp(k, "run_eagerly") || !strcmp(k, "steps_per_execution") || !strcmp(k, "jit_compile"))
      continue; /* how Keras runs a step, not what it computes */
    else if (!strcmp(k, "auto_scale_loss")) {
      /* true (Keras's default): a dynamic loss scale under mixed_float16,
       * which is castor's default too */
      if (v->kind == JSON_LIT && v->lit == 'f' && !td->loss_scale[0])
        snprintf(td->loss_scale, sizeof td->loss_scale, "none");
      else if (v->kind != JSON_LIT || v->lit == 'n')
        ok = (kr_error(m, "compile_config: auto_scale_loss is not true or false"), false);
    }
    else if (!kr_is_null(v)) {
      kr_unsupported(m, "compile_config: '%s' is not supported", k);
      ok = false;
    }
    if (!ok) return false;
  }
  return true;
}

