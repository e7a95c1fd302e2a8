/*
 * compile.c: a .keras file's compile_config as castor train's defaults
 * (fe_train_defaults): the loss, the optimizer with its hyperparameters
 * (inside a LossScaleOptimizer, whose dynamic scale castor implements with
 * Keras's defaults), the metrics. A value castor does not implement (an
 * optimizer class it lacks, weight decay, clipping, EMA, gradient
 * accumulation, a learning-rate schedule, a hyperparameter other than
 * the default castor has no option for yet) is an error naming the key,
 * never ignored.
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

/* Keys of an optimizer's config: what castor takes, what must keep its
 * default until castor implements it, and what does not change training. */
static bool read_optimizer(kr_model *m, const json_value *opt, fe_train_defaults *td, int depth) {
  if (opt->kind == JSON_STR) {
    const char *s = opt->s;
    if (!strcmp(s, "adam") || !strcmp(s, "sgd") || !strcmp(s, "rmsprop")) {
      snprintf(td->optimizer, sizeof td->optimizer, "%s", s);
      return true;
    }
    kr_unsupported(m, "compile_config: optimizer '%s' is not supported (castor trains with sgd, "
                "rmsprop and adam)", s);
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
    for (int i = 0; i < cfg->n; i++) {
      const char *k = cfg->keys[i];
      const json_value *v = &cfg->items[i];
      double x;
      if (!strcmp(k, "inner_optimizer") || !strcmp(k, "name")) continue;
      if (!strcmp(k, "initial_scale") && num(v, &x) && x == 32768.0) continue;
      if (!strcmp(k, "dynamic_growth_steps") && num(v, &x) && x == 2000.0) continue;
      if (!strcmp(k, "ema_momentum")) continue; /* used only with use_ema (checked if true) */
      if (!strcmp(k, "use_ema") && v->kind == JSON_LIT && v->lit == 't') {
        kr_unsupported(m, "compile_config: optimizer option 'use_ema' is not supported");
        return false;
      }
      if (kr_is_null(v) || (v->kind == JSON_LIT && v->lit == 'f')) continue; /* unset options */
      kr_unsupported(m, "compile_config: LossScaleOptimizer's '%s' is not supported (castor's dynamic "
                  "loss scale starts at 32768 and doubles after 2000 good steps)", k);
      return false;
    }
    const json_value *inner = json_field(cfg, "inner_optimizer");
    if (!inner) {
      kr_error(m, "compile_config: LossScaleOptimizer has no inner_optimizer");
      return false;
    }
    snprintf(td->loss_scale, sizeof td->loss_scale, "dynamic");
    return read_optimizer(m, inner, td, 1);
  }
  const char *name = !strcmp(c, "Adam") ? "adam" : !strcmp(c, "SGD") ? "sgd" : !strcmp(c, "RMSprop") ? "rmsprop" : NULL;
  if (!name) {
    kr_unsupported(m, "compile_config: optimizer class '%s' is not supported (castor trains with SGD, "
                "RMSprop, Adam, and LossScaleOptimizer around them)", c);
    return false;
  }
  snprintf(td->optimizer, sizeof td->optimizer, "%s", name);
  /* key, the value castor implements (NAN: any number, taken), which optimizer */
  static const struct {
    const char *key;
    double fixed; /* -1: taken (a number); else the only value castor implements */
    const char *only; /* NULL: every optimizer */
  } keys[] = {
      {"learning_rate", -1, NULL}, {"momentum", -1, NULL},
      {"beta_1", 0.9, "adam"},     {"beta_2", 0.999, "adam"},
      {"epsilon", 1e-7, NULL},     {"rho", 0.9, "rmsprop"},
      {"weight_decay", 0, NULL},
  };
  for (int i = 0; i < cfg->n; i++) {
    const char *k = cfg->keys[i];
    const json_value *v = &cfg->items[i];
    double x;
    if (!strcmp(k, "name")) continue;
    if (!strcmp(k, "learning_rate") && v->kind == JSON_OBJ) {
      const json_value *sc = json_field(v, "class_name");
      kr_unsupported(m, "compile_config: learning_rate: a learning-rate schedule (%s) is not supported",
                  sc && sc->kind == JSON_STR ? sc->s : "an object");
      return false;
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
    /* options that only matter when set, and do not change a step when unset */
    static const char *const unset_ok[] = {"clipnorm", "global_clipnorm", "clipvalue",
                                           "loss_scale_factor", "gradient_accumulation_steps",
                                           "ema_momentum", "ema_overwrite_frequency"};
    bool handled = false;
    for (size_t u = 0; u < sizeof unset_ok / sizeof *unset_ok && !handled; u++) {
      if (strcmp(k, unset_ok[u]) != 0) continue;
      handled = true;
      bool ema = !strncmp(k, "ema_", 4); /* used only with use_ema, refused above */
      if (!ema && !kr_is_null(v)) {
        kr_unsupported(m, "compile_config: optimizer option '%s' is not supported (castor implements "
                    "no gradient clipping, loss scale factor or gradient accumulation)", k);
        return false;
      }
    }
    if (handled) continue;
    for (size_t q = 0; q < sizeof keys / sizeof *keys && !handled; q++) {
      if (strcmp(k, keys[q].key) != 0) continue;
      handled = true;
      if (kr_is_null(v) && keys[q].fixed == 0) continue; /* weight_decay: null */
      if (!num(v, &x)) {
        kr_error(m, "compile_config: optimizer '%s' is %s, not a number", k, json_kind_name(v->kind));
        return false;
      }
      if (keys[q].fixed < 0) {
        if (!strcmp(k, "learning_rate")) td->learning_rate = x;
        else if (!strcmp(name, "adam")) {
          if (x != 0) return kr_unsupported(m, "compile_config: Adam has no option 'momentum'"), false;
        } else td->momentum = x;
        continue;
      }
      if (keys[q].only && strcmp(keys[q].only, name) != 0) {
        kr_unsupported(m, "compile_config: optimizer option '%s' is not supported for %s", k, c);
        return false;
      }
      /* the default, as the float32 Keras stores it or the double it wrote */
      if (x == keys[q].fixed || (float)x == (float)keys[q].fixed) continue;
      kr_unsupported(m, "compile_config: optimizer option '%s' = %g is not supported (castor uses "
                  "Keras's default, %g)", k, x, keys[q].fixed);
      return false;
    }
    if (!handled) {
      kr_unsupported(m, "compile_config: optimizer option '%s' is not supported", k);
      return false;
    }
  }
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

