/* SPDX-License-Identifier: Apache-2.0 */
/*
 * check_keras_resume.c: resuming training from the optimizer variables of
 * a .keras file (docs/keras.md, "Resuming training"), against real Keras 3.
 *
 * tests/golden/keras-models/generate_resume.py trains a small model for
 * three steps in Keras (Adam float32, Adam mixed_float16 with its
 * LossScaleOptimizer, SGD with momentum, RMSprop mixed_bfloat16), saves it
 * with its optimizer, loads it back in Keras and trains one more step.
 * Here castor_compile_train on the saved file must resume: iterations 3,
 * the slots and the loss scale as saved; then the same fourth step leaves
 * each trainable weight as Keras's within the bound of the policy
 * (normalized error max |castor - keras| / max |keras|; measured
 * 2026-11-26 on an AVX-512 host, CASTOR_TEST_VERBOSE=1 prints them):
 *   float32          1e-5
 *   mixed_float16    5e-3
 *   mixed_bfloat16   3e-2
 * and the same step from a fresh optimizer (the file's variables zeroed)
 * must not match (the comparison can fail).
 */
#include "castor.h"

#include "tests/unit/test_support.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DIR CASTOR_SOURCE_DIR "/tests/golden/keras-models"

static const struct {
  const char *name;
  double bound;
  double loss_scale; /* 0: none */
} cases[] = {{"adam-float32", 1e-5, 0},
             {"adam-mixed_float16", 5e-3, 32768},
             {"sgd_momentum-float32", 1e-5, 0},
             {"rmsprop-mixed_bfloat16", 3e-2, 0}};

static int64_t iterations(castor_program *p) {
  castor_tensor *t = NULL;
  ck_assert_int_eq(castor_program_get_state(p, "optimizer.iterations", &t), CASTOR_OK);
  int64_t v = *(int64_t *)castor_tensor_data(t);
  castor_tensor_destroy(t);
  return v;
}

/* One step on samples 48..63; the worst normalized error of the trainable
 * weights against Keras's fourth step. */
static double step_and_compare(castor_context *ctx, castor_program *p, const char *name) {
  castor_tensor *xs, *ys, *x, *y;
  ck_assert_int_eq(castor_tensor_load_npy(ctx, DIR "/resume.x.npy", &xs), CASTOR_OK);
  ck_assert_int_eq(castor_tensor_load_npy(ctx, DIR "/resume.y.npy", &ys), CASTOR_OK);
  int64_t xd[] = {16, 6}, yd[] = {16};
  ck_assert_int_eq(castor_tensor_create(ctx, CASTOR_F32, 2, xd, &x), CASTOR_OK);
  ck_assert_int_eq(castor_tensor_create(ctx, CASTOR_I32, 1, yd, &y), CASTOR_OK);
  memcpy(castor_tensor_data(x), (float *)castor_tensor_data(xs) + 48 * 6, 16 * 6 * sizeof(float));
  memcpy(castor_tensor_data(y), (int32_t *)castor_tensor_data(ys) + 48, 16 * sizeof(int32_t));
  castor_tensor *ins[] = {x, y}, *outs[2] = {NULL, NULL};
  ck_assert_msg(castor_program_run(p, ins, 2, outs, 2) == CASTOR_OK, "%s", castor_context_last_error(ctx));
  double worst = 0;
  int n = 0;
  for (int i = 0; i < castor_program_num_states(p); i++) {
    if (castor_program_state_kind(p, i) != CASTOR_STATE_TRAINABLE) continue;
    castor_tensor_info info;
    ck_assert_int_eq(castor_program_state_info(p, i, &info), CASTOR_OK);
    char path[512];
    snprintf(path, sizeof path, "%s/resume-%s.after.%s.npy", DIR, name, info.name);
    castor_tensor *want, *got;
    ck_assert_msg(castor_tensor_load_npy(ctx, path, &want) == CASTOR_OK, "%s", castor_context_last_error(ctx));
    ck_assert_int_eq(castor_program_get_state(p, info.name, &got), CASTOR_OK);
    ck_assert_int_eq(castor_tensor_dtype(got), CASTOR_F32);
    ck_assert_int_eq(castor_tensor_numel(got), castor_tensor_numel(want));
    const float *a = castor_tensor_data(got), *b = castor_tensor_data(want);
    double err = 0, mag = 0;
    for (int64_t k = 0; k < castor_tensor_numel(want); k++) {
      err = fmax(err, fabs((double)a[k] - b[k]));
      mag = fmax(mag, fabs((double)b[k]));
    }
    worst = fmax(worst, err / mag);
    castor_tensor_destroy(want), castor_tensor_destroy(got);
    n++;
  }
  ck_assert_int_eq(n, 4); /* hidden and logits: kernel and bias */
  for (int k = 0; k < 2; k++) castor_tensor_destroy(outs[k]);
  castor_tensor_destroy(xs), castor_tensor_destroy(ys), castor_tensor_destroy(x), castor_tensor_destroy(y);
  return worst;
}

START_TEST(test_resume) {
  const char *name = cases[_i].name;
  castor_context *ctx;
  ck_assert_int_eq(castor_context_create(&ctx), CASTOR_OK);
  char path[512];
  snprintf(path, sizeof path, "%s/resume-%s.keras", DIR, name);
  castor_model *m;
  ck_assert_msg(castor_model_load_file(ctx, path, NULL, &m) == CASTOR_OK, "%s", castor_context_last_error(ctx));
  castor_program *p;
  ck_assert_msg(castor_compile_train(m, NULL, NULL, &p) == CASTOR_OK, "%s", castor_context_last_error(ctx));
  ck_assert_int_eq(iterations(p), 3); /* resumed, as saved after three steps */
  castor_tensor *t = NULL;
  if (cases[_i].loss_scale) {
    ck_assert_int_eq(castor_program_get_state(p, "optimizer.loss_scale", &t), CASTOR_OK);
    ck_assert(*(float *)castor_tensor_data(t) == (float)cases[_i].loss_scale);
    castor_tensor_destroy(t);
  }
  double worst = step_and_compare(ctx, p, name);
  if (getenv("CASTOR_TEST_VERBOSE")) fprintf(stderr, "resume %s: %.2e\n", name, worst);
  ck_assert_msg(worst <= cases[_i].bound, "%s: normalized error %.3g > %.3g", name, worst, cases[_i].bound);
  ck_assert_int_eq(iterations(p), 4);
  castor_program_destroy(p);

  /* the control: the same step from a fresh optimizer does not give Keras's weights */
  ck_assert_msg(castor_compile_train(m, NULL, NULL, &p) == CASTOR_OK, "%s", castor_context_last_error(ctx));
  for (int i = 0; i < castor_program_num_states(p); i++) {
    castor_state_kind k = castor_program_state_kind(p, i);
    castor_tensor_info info;
    ck_assert_int_eq(castor_program_state_info(p, i, &info), CASTOR_OK);
    if (k != CASTOR_STATE_SLOT && strcmp(info.name, "optimizer.iterations") != 0) continue;
    ck_assert_int_eq(castor_program_get_state(p, info.name, &t), CASTOR_OK);
    memset(castor_tensor_data(t), 0, (size_t)castor_tensor_numel(t) * (info.dtype == CASTOR_I64 ? 8 : 4));
    ck_assert_int_eq(castor_program_set_state(p, info.name, t), CASTOR_OK);
    castor_tensor_destroy(t);
  }
  double fresh = step_and_compare(ctx, p, name);
  ck_assert_msg(fresh > 10 * cases[_i].bound, "%s: a fresh optimizer's step matches Keras's resumed one (%.3g)", name,
                fresh);
  castor_program_destroy(p);
  castor_model_destroy(m);
  castor_context_destroy(ctx);
}
END_TEST

/* Optimizer variables that do not fit: CASTOR_ERR_PARSE and one error naming the dataset */
START_TEST(test_bad) {
  static const struct {
    const char *file, *msg;
  } bad[] = {
      {"resume_bad_count", "/optimizer/vars has 10 variables, castor's sgd for this model has 6 (2 scalars, then the "
                           "slots of each trainable weight in Keras's order)"},
      {"resume_bad_shape", "optimizer variable '/optimizer/vars/2' is [6, 9], castor's hidden.kernel.momentum for it "
                           "is [6, 8]\n"},
  };
  castor_context *ctx;
  ck_assert_int_eq(castor_context_create(&ctx), CASTOR_OK);
  char path[512];
  snprintf(path, sizeof path, "%s/%s.keras", DIR, bad[_i].file);
  castor_model *m;
  ck_assert_msg(castor_model_load_file(ctx, path, NULL, &m) == CASTOR_OK, "%s", castor_context_last_error(ctx));
  castor_program *p = NULL;
  ck_assert_int_eq(castor_compile_train(m, NULL, NULL, &p), CASTOR_ERR_PARSE);
  ck_assert(p == NULL);
  const char *err = castor_context_last_error(ctx);
  ck_assert_msg(strstr(err, bad[_i].msg) && strstr(err, path) == err, "%s", err);
  castor_model_destroy(m);
  castor_context_destroy(ctx);
}
END_TEST

static Suite *keras_resume_suite(void) {
  Suite *s = suite_create("keras_resume");
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, 120);
  tcase_add_loop_test(tc, test_resume, 0, (int)(sizeof cases / sizeof *cases));
  tcase_add_loop_test(tc, test_bad, 0, 2);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) { return check_run(keras_resume_suite()); }
