/* SPDX-License-Identifier: Apache-2.0 */
/*
 * check_keras_vit.c: the transformer sample (samples/fashion_vit.cast)
 * against real Keras 3 (JAX), from the goldens of tests/golden/train/vit/
 * (generate_vit.py, run once by hand; its docstring says what each file
 * holds). The sample's text is read as it is, with a weights statement
 * added (init.safetensors, shared with Keras), so the goldens follow the
 * sample.
 *
 *   - inference: Model.predict on 16 images under float32, mixed_float16
 *     and mixed_bfloat16;
 *   - training: three Adam steps (Keras's defaults) by train_on_batch,
 *     the loss of each step, every variable after it, and under
 *     mixed_float16 the dynamic loss scale (Keras's LossScaleOptimizer,
 *     from 2^15), under float32 and mixed_float16.
 *
 * Bounds (normalized error, max |got - want| / max |want|; measured on
 * 2026-11-26, AMD EPYC (znver5 path), in parentheses): inference float32
 * 1e-5 (3.4e-7), mixed_float16 5e-3 (5.5e-4), mixed_bfloat16 3e-2
 * (6.5e-3); training, the worst variable over three steps: float32 1e-4
 * (6.6e-6), mixed_float16 2e-2 (7.9e-3: Adam divides each gradient
 * element by its own magnitude, so an element whose float16 gradient is
 * near zero moves by up to the learning rate, 1e-3, either way, about 1e-2
 * of a bias drawn from [-0.1, 0.1]); the loss relative to itself: float32
 * 1e-5, mixed_float16 5e-3 (measured 2.0e-6, 4.0e-5). The key projection's
 * bias is compared as described below.
 */
#include <check.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/unit/test_support.h"
#include "castor.h"
#include "formats/safetensors.h"
#include "util/util.h"

#define GOLD CASTOR_SOURCE_DIR "/tests/golden/train/vit"
#define SAMPLE CASTOR_SOURCE_DIR "/samples/fashion_vit.cast"

static const char *const fwd_policies[] = {"float32", "mixed_float16", "mixed_bfloat16"};

static double fwd_bound(const char *policy) {
  return !strcmp(policy, "float32") ? 1e-5 : !strcmp(policy, "mixed_float16") ? 5e-3 : 3e-2;
}

static double normalized(const float *got, const float *want, int64_t n) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < n; i++) {
    double d = fabs((double)got[i] - want[i]);
    if (isnan(d)) return INFINITY;
    num = d > num ? d : num;
    den = fabs(want[i]) > den ? fabs(want[i]) : den;
  }
  return num / (den > 0 ? den : 1);
}

/* The sample with `weights "init.safetensors"` after its model line. */
static castor_model *load_sample(castor_context *ctx) {
  FILE *f = fopen(SAMPLE, "rb");
  ck_assert_msg(f, "cannot open %s", SAMPLE);
  char *text = xmalloc(1 << 16);
  size_t n = fread(text, 1, (1 << 16) - 1, f);
  fclose(f);
  text[n] = 0;
  const char *model = strstr(text, "\nmodel fashion_vit\n");
  ck_assert_msg(model, "the sample has no 'model fashion_vit' line");
  const char *after = model + strlen("\nmodel fashion_vit\n");
  static const char weights[] = "weights \"init.safetensors\"\n";
  size_t head = (size_t)(after - text), total = n + sizeof weights - 1;
  char *src = xmalloc(total + 1);
  memcpy(src, text, head);
  memcpy(src + head, weights, sizeof weights - 1);
  memcpy(src + head + sizeof weights - 1, after, n - head);
  src[total] = 0;
  castor_model *m = NULL;
  ck_assert_msg(castor_model_load_string(ctx, GOLD "/fashion_vit.cast", src, total, NULL, &m) == CASTOR_OK, "%s",
                castor_context_last_error(ctx));
  free(src), free(text);
  return m;
}

START_TEST(test_keras_vit_inference) {
  const char *policy = fwd_policies[_i];
  castor_context *ctx;
  castor_program *p;
  ck_assert_int_eq(castor_context_create(&ctx), CASTOR_OK);
  castor_model *m = load_sample(ctx);
  castor_compile_options o;
  castor_compile_options_init(&o);
  o.policy = policy;
  ck_assert_msg(castor_compile(m, &o, &p) == CASTOR_OK, "%s: %s", policy, castor_context_last_error(ctx));
  castor_tensor *x = NULL, *want = NULL, *outs[1] = {NULL};
  ck_assert_int_eq(castor_tensor_load_npy(ctx, GOLD "/fwd_x.npy", &x), CASTOR_OK);
  char path[512];
  snprintf(path, sizeof path, GOLD "/fwd_out-%s.npy", policy);
  ck_assert_int_eq(castor_tensor_load_npy(ctx, path, &want), CASTOR_OK);
  castor_tensor *ins[] = {x};
  ck_assert_msg(castor_program_run(p, ins, 1, outs, 1) == CASTOR_OK, "%s", castor_context_last_error(ctx));
  int64_t n = castor_tensor_numel(want);
  ck_assert_int_eq(castor_tensor_numel(outs[0]), n);
  ck_assert_int_eq(castor_tensor_dtype(outs[0]), CASTOR_F32); /* the float32 softmax */
  double e = normalized(castor_tensor_data(outs[0]), castor_tensor_data(want), n);
  if (getenv("CASTOR_TEST_VERBOSE")) fprintf(stderr, "inference %s: %.2g\n", policy, e);
  ck_assert_msg(e <= fwd_bound(policy), "%s: normalized error %g vs Keras's predict (bound %g)", policy, e,
                fwd_bound(policy));
  castor_tensor_destroy(outs[0]), castor_tensor_destroy(x), castor_tensor_destroy(want);
  castor_program_destroy(p);
  castor_model_destroy(m);
  castor_context_destroy(ctx);
}
END_TEST

enum { BATCH = 8, STEPS = 3, IMG = 28 * 28, VARIABLES = 39 };

static const char *const train_policies[] = {"float32", "mixed_float16"};

static float scalar_of(const safetensors_file *st, const char *name) {
  const safetensors_tensor *t = safetensors_find(st, name);
  ck_assert_msg(t && t->dtype == DT_F32 && t->nbytes == 4, "no scalar %s", name);
  return *(const float *)t->data;
}

START_TEST(test_keras_vit_training) {
  const char *policy = train_policies[_i];
  bool f32 = !strcmp(policy, "float32");
  double bound = f32 ? 1e-4 : 2e-2, loss_bound = f32 ? 1e-5 : 5e-3;
  castor_context *ctx;
  castor_program *p;
  ck_assert_int_eq(castor_context_create(&ctx), CASTOR_OK);
  castor_model *m = load_sample(ctx);
  castor_compile_options o;
  castor_compile_options_init(&o);
  o.policy = policy;
  castor_train_options to;
  castor_train_options_init(&to);
  to.optimizer = "adam";
  to.learning_rate = 1e-3;
  ck_assert_msg(castor_compile_train(m, &o, &to, &p) == CASTOR_OK, "%s: %s", policy, castor_context_last_error(ctx));
  castor_tensor *xs = NULL, *ys = NULL, *x = NULL, *y = NULL;
  ck_assert_int_eq(castor_tensor_load_npy(ctx, GOLD "/train_x.npy", &xs), CASTOR_OK);
  ck_assert_int_eq(castor_tensor_load_npy(ctx, GOLD "/train_y.npy", &ys), CASTOR_OK);
  ck_assert_int_eq(castor_tensor_create(ctx, CASTOR_F32, 3, (int64_t[]){BATCH, 28, 28}, &x), CASTOR_OK);
  ck_assert_int_eq(castor_tensor_create(ctx, CASTOR_I32, 1, (int64_t[]){BATCH}, &y), CASTOR_OK);
  double worst = 0;
  for (int k = 1; k <= STEPS; k++) {
    memcpy(castor_tensor_data(x), (float *)castor_tensor_data(xs) + (k - 1) * BATCH * IMG, BATCH * IMG * sizeof(float));
    memcpy(castor_tensor_data(y), (int32_t *)castor_tensor_data(ys) + (k - 1) * BATCH, BATCH * sizeof(int32_t));
    castor_tensor *ins[] = {x, y}, *outs[2] = {NULL, NULL};
    ck_assert_msg(castor_program_run(p, ins, 2, outs, 2) == CASTOR_OK, "%s", castor_context_last_error(ctx));
    char path[512];
    snprintf(path, sizeof path, GOLD "/%s/step%d.safetensors", policy, k);
    diag_sink *d = diag_sink_create();
    safetensors_file st;
    ck_assert_msg(safetensors_read(path, (diag_loc){0}, d, &st), "%s", diag_text(d));
    diag_sink_destroy(d);
    double loss = *(float *)castor_tensor_data(outs[1]), wl = scalar_of(&st, "loss");
    if (getenv("CASTOR_TEST_VERBOSE")) fprintf(stderr, "%s step %d: loss %.9g, Keras %.9g\n", policy, k, loss, wl);
    ck_assert_msg(fabs(loss - wl) <= loss_bound * fabs(wl), "%s step %d: loss %.9g, Keras %.9g", policy, k, loss, wl);
    castor_tensor *scale = NULL;
    bool dynamic = castor_program_get_state(p, "optimizer.loss_scale", &scale) == CASTOR_OK;
    ck_assert_int_eq(dynamic, !f32); /* Keras wraps Adam in a LossScaleOptimizer under mixed_float16 only */
    if (dynamic) {
      ck_assert_int_eq(castor_tensor_dtype(scale), CASTOR_F32);
      float got = *(const float *)castor_tensor_data(scale);
      ck_assert_msg(got == scalar_of(&st, "loss_scale"), "%s step %d: loss scale %g, Keras %g", policy, k, got,
                    scalar_of(&st, "loss_scale"));
      castor_tensor_destroy(scale);
    }
    int compared = 0;
    for (int i = 0; i < st.n_tensors; i++) {
      const safetensors_tensor *g = &st.tensors[i];
      if (!strcmp(g->name, "loss") || !strcmp(g->name, "loss_scale")) continue;
      castor_tensor *t = NULL;
      ck_assert_msg(castor_program_get_state(p, g->name, &t) == CASTOR_OK, "%s: castor has no state %s: %s", policy,
                    g->name, castor_context_last_error(ctx));
      ck_assert_int_eq(castor_tensor_dtype(t), CASTOR_F32);
      ck_assert_int_eq(castor_tensor_nbytes(t), (size_t)g->nbytes);
      double e = normalized(castor_tensor_data(t), g->data, g->nbytes / 4);
      /* the key projection's bias: its gradient is 0 up to rounding (it adds
       * one constant to each query's scores, which the softmax removes), and
       * Adam moves it by up to its learning rate per step in the direction
       * of that rounding, in Keras as in castor: within 2 * k * lr */
      if (strstr(g->name, ".key.bias")) {
        const float *gv = g->data, *cv = castor_tensor_data(t);
        double diff = 0;
        for (int64_t j = 0; j < g->nbytes / 4; j++) diff = fmax(diff, fabs((double)cv[j] - gv[j]));
        ck_assert_msg(diff <= 2 * k * 1e-3 * (1 + 1e-3), "%s step %d: %s differs by %g (bound %g)", policy, k, g->name,
                      diff, 2 * k * 1e-3);
        e = 0;
      }
      worst = e > worst ? e : worst;
      ck_assert_msg(e <= bound, "%s step %d: %s normalized error %g vs Keras (bound %g)", policy, k, g->name, e, bound);
      compared++;
      castor_tensor_destroy(t);
    }
    ck_assert_msg(compared == VARIABLES, "%s: %d variables compared", policy, compared);
    safetensors_fini(&st);
    castor_tensor_destroy(outs[0]), castor_tensor_destroy(outs[1]);
  }
  if (getenv("CASTOR_TEST_VERBOSE")) fprintf(stderr, "training %s: worst variable error %.2g\n", policy, worst);
  castor_tensor_destroy(x), castor_tensor_destroy(y), castor_tensor_destroy(xs), castor_tensor_destroy(ys);
  castor_program_destroy(p);
  castor_model_destroy(m);
  castor_context_destroy(ctx);
}
END_TEST

int main(void) {
  check_cpu_path("check_keras_vit");
  Suite *s = suite_create("keras_vit");
  TCase *tc = tcase_create("keras_vit");
  tcase_set_timeout(tc, 300);
  tcase_add_loop_test(tc, test_keras_vit_inference, 0, 3);
  tcase_add_loop_test(tc, test_keras_vit_training, 0, 2);
  suite_add_tcase(s, tc);
  return check_run(s);
}
