/* SPDX-License-Identifier: Apache-2.0 */
/*
 * check_keras_compile.c: a .keras file's compile_config as castor train's
 * defaults (frontend/keras/compile.c), on files real Keras 3 saved
 * (tests/golden/keras-models/compile-*.keras, generate_compile.py): every
 * optimizer argument castor implements arrives in castor_train_options
 * (castor_model_train_options) with Keras's value; the ones castor lacks
 * are errors naming the key (tests/golden/keras-errors/compile_*).
 */
#include "castor.h"

#include "tests/unit/test_support.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define DIR CASTOR_SOURCE_DIR "/tests/golden/keras-models"

/* Keras stores float32 values as the doubles they widen to */
#define NEAR(a, b) (fabs((a) - (b)) <= 1e-7 * fabs(b))

static castor_model *load(castor_context *ctx, const char *name, castor_train_options *o) {
  char path[512];
  snprintf(path, sizeof path, "%s/compile-%s.keras", DIR, name);
  castor_model *m = NULL;
  castor_status st = castor_model_load_file(ctx, path, NULL, &m);
  ck_assert_msg(st == CASTOR_OK, "%s: %s", name, castor_context_last_error(ctx));
  castor_model_train_options(m, o);
  return m;
}

START_TEST(test_adamw) {
  castor_context *ctx;
  castor_context_create(&ctx);
  castor_train_options o;
  castor_model *m = load(ctx, "adamw", &o);
  ck_assert_str_eq(o.optimizer, "adamw");
  ck_assert_msg(NEAR(o.learning_rate, 0.003) && NEAR(o.weight_decay, 0.01) && NEAR(o.beta_1, 0.8) &&
                    NEAR(o.beta_2, 0.99) && NEAR(o.epsilon, 1e-6) && o.clipnorm == 1.0 && o.clipvalue == 0 &&
                    o.global_clipnorm == 0 && !o.lr_schedule,
                "adamw: lr %g wd %g b1 %g b2 %g eps %g clipnorm %g", o.learning_rate, o.weight_decay, o.beta_1,
                o.beta_2, o.epsilon, o.clipnorm);
  castor_model_destroy(m);
  /* Adam with weight_decay is AdamW in Keras 3 (the base optimizer decays) */
  m = load(ctx, "adam_wd", &o);
  ck_assert_str_eq(o.optimizer, "adamw");
  ck_assert_msg(NEAR(o.weight_decay, 0.02) && o.global_clipnorm == 2.0 && o.beta_1 == 0 && o.epsilon == 0,
                "adam_wd: wd %g global_clipnorm %g b1 %g eps %g", o.weight_decay, o.global_clipnorm, o.beta_1,
                o.epsilon);
  castor_model_destroy(m);
  castor_context_destroy(ctx);
}
END_TEST

START_TEST(test_schedules) {
  castor_context *ctx;
  castor_context_create(&ctx);
  castor_train_options o;
  castor_model *m = load(ctx, "expdecay", &o);
  ck_assert_str_eq(o.optimizer, "adam");
  ck_assert_str_eq(o.lr_schedule, "exponential_decay");
  ck_assert_msg(NEAR(o.learning_rate, 0.1) && o.decay_steps == 100 && NEAR(o.decay_rate, 0.9) && o.staircase &&
                    o.clipvalue == 0.5,
                "expdecay: lr %g steps %lld rate %g staircase %d clipvalue %g", o.learning_rate,
                (long long)o.decay_steps, o.decay_rate, o.staircase, o.clipvalue);
  castor_model_destroy(m);
  m = load(ctx, "cosine", &o);
  ck_assert_str_eq(o.optimizer, "sgd");
  ck_assert_str_eq(o.lr_schedule, "cosine_decay");
  ck_assert_msg(NEAR(o.learning_rate, 0.01) && o.decay_steps == 1000 && NEAR(o.alpha, 0.1) &&
                    NEAR(o.warmup_target, 0.1) && o.warmup_steps == 50 && NEAR(o.momentum, 0.9),
                "cosine: lr %g steps %lld alpha %g target %g warmup %lld momentum %g", o.learning_rate,
                (long long)o.decay_steps, o.alpha, o.warmup_target, (long long)o.warmup_steps, o.momentum);
  castor_model_destroy(m);
  m = load(ctx, "piecewise", &o);
  ck_assert_str_eq(o.optimizer, "rmsprop");
  ck_assert_str_eq(o.lr_schedule, "piecewise_constant_decay");
  ck_assert_msg(o.learning_rate == 0 && o.n_boundaries == 2 && o.boundaries[0] == 10 && o.boundaries[1] == 20 &&
                    o.n_values == 3 && NEAR(o.values[0], 0.1) && NEAR(o.values[1], 0.01) &&
                    NEAR(o.values[2], 0.001) && NEAR(o.epsilon, 1e-5),
                "piecewise: lr %g, %d boundaries, %d values, eps %g", o.learning_rate, o.n_boundaries, o.n_values,
                o.epsilon);
  castor_model_destroy(m);
  castor_context_destroy(ctx);
}
END_TEST

START_TEST(test_loss_scale) {
  castor_context *ctx;
  castor_context_create(&ctx);
  castor_train_options o;
  castor_model *m = load(ctx, "lso", &o);
  ck_assert_str_eq(o.optimizer, "adam");
  ck_assert_str_eq(o.loss_scale, "dynamic");
  ck_assert_msg(o.loss_scale_initial == 1024 && o.loss_scale_growth_steps == 100, "lso: initial %g growth %lld",
                o.loss_scale_initial, (long long)o.loss_scale_growth_steps);
  castor_model_destroy(m);
  castor_context_destroy(ctx);
}
END_TEST

/* What castor lacks stays an error naming the key. */
static const struct {
  const char *file, *msg;
} refused[] = {
    {"rho", "compile_config: optimizer option 'rho' = 0.8 is not supported (castor uses Keras's default, 0.9)"},
    {"sgd_wd", "compile_config: optimizer option 'weight_decay' is not supported for SGD (castor implements it for "
               "Adam and AdamW)"},
    {"inverse_time", "compile_config: learning_rate: a learning-rate schedule (InverseTimeDecay) is not supported "
                     "(castor implements ExponentialDecay, CosineDecay and PiecewiseConstantDecay)"},
};

START_TEST(test_refused) {
  castor_context *ctx;
  castor_context_create(&ctx);
  char path[512];
  snprintf(path, sizeof path, "%s/compile-%s.keras", DIR, refused[_i].file);
  castor_model *m = NULL;
  castor_status st = castor_model_load_file(ctx, path, NULL, &m);
  ck_assert_msg(st == CASTOR_ERR_UNSUPPORTED, "%s: %s", refused[_i].file, castor_status_string(st));
  ck_assert_msg(strstr(castor_context_last_error(ctx), refused[_i].msg), "%s:\n got  %s\n want %s", refused[_i].file,
                castor_context_last_error(ctx), refused[_i].msg);
  castor_context_destroy(ctx);
}
END_TEST

static Suite *keras_compile_suite(void) {
  Suite *s = suite_create("keras_compile");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, test_adamw);
  tcase_add_test(tc, test_schedules);
  tcase_add_test(tc, test_loss_scale);
  tcase_add_loop_test(tc, test_refused, 0, (int)(sizeof refused / sizeof refused[0]));
  suite_add_tcase(s, tc);
  return s;
}

int main(void) { return check_run(keras_compile_suite()); }
