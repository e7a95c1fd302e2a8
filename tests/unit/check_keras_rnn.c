/* SPDX-License-Identifier: Apache-2.0 */
/*
 * check_keras_rnn.c: Keras's recurrent layers (frontend/layers/rnn.c)
 * against real Keras 3, over tests/golden/keras-models' rnn files (made by
 * its generate_rnn.py with Keras 3.15.1 on JAX): each file compiled by
 * castor (CPU JIT) on Keras's inputs matches model.predict, every output,
 * by normalized error max|castor - keras| / max|keras|, within the bound of
 * the policy's compute dtype:
 *   float32          1e-6  (measured 2.7e-7)
 *   mixed_float16    5e-3  (1.6e-3: Keras rounds every gate's sum to f16;
 *                           castor sums a step's gates in f32 and rounds
 *                           the state, as tests/ref/ref_rnn.c does)
 *   mixed_bfloat16   4e-2  (1.5e-2: the same with 8 bits)
 * (measured 2026-11-29, CASTOR_TEST_VERBOSE=1 prints each output's error)
 * and training (backpropagation through time, passes/grad.c): three steps
 * of Keras's train_on_batch from the same file (LSTM SGD and GRU Adam in
 * float32, a Bidirectional GRU into a SimpleRNN going backwards with Adam,
 * LSTM Adam under mixed_float16 with its loss scale, GRU with its reset
 * gate before under mixed_bfloat16 with SGD): each step's loss and every
 * trainable weight after it (normalized error) within
 *   float32 1e-5 (measured 4.6e-7), mixed_float16 5e-3 (1.6e-3),
 *   mixed_bfloat16 1e-2 (7.1e-4).
 * Keras's masks (generate_rnn.py mask / masktrain): padded batches through
 * Masking, Embedding(mask_zero), Bidirectional, a Sequential model's
 * carried mask and a Functional call without its mask argument, within
 * the same bounds (measured 2.0e-7 float32, 1.0e-2 mixed_bfloat16), and
 * three training steps on a padded batch (9.3e-7 float32; 3.0e-4 weights,
 * 4.6e-4 loss under mixed_bfloat16 with SGD).
 */
#include "api/internal.h"

#include "tests/unit/test_support.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define DIR CASTOR_SOURCE_DIR "/tests/golden/keras-models"

enum { MAX_IO = 16 };

typedef struct entry {
  char file[64], policy[32], lowest[32];
  int n_in, n_out;
} entry;

static int manifest(const char *path, entry *e, int max) {
  char *text;
  size_t len;
  ck_assert_msg(str_read_file(path, &text, &len), "cannot read %s", path);
  int n = 0;
  for (char *line = strtok(text, "\n"); line && n < max; line = strtok(NULL, "\n")) {
    if (line[0] == '#') continue;
    ck_assert_int_eq(sscanf(line, "%63s %31s %d %d %31s", e[n].file, e[n].policy, &e[n].n_in, &e[n].n_out,
                            e[n].lowest), 5);
    ck_assert(e[n].n_in <= MAX_IO && e[n].n_out <= MAX_IO);
    n++;
  }
  free(text);
  return n;
}

static double bound_for(const entry *e) {
  if (!strcmp(e->lowest, "bfloat16")) return 4e-2;
  if (!strcmp(e->lowest, "float16")) return 5e-3;
  return 1e-6;
}

static void check_outputs(const char *manifest_path, int want_n) {
  entry es[16];
  int n = manifest(manifest_path, es, 16);
  ck_assert_int_eq(n, want_n);
  castor_context *ctx;
  ck_assert_int_eq(castor_context_create(&ctx), CASTOR_OK);
  for (int i = 0; i < n; i++) {
    const entry *e = &es[i];
    char path[8192];
    snprintf(path, sizeof path, "%s/%.63s.keras", DIR, e->file);
    castor_model *m;
    ck_assert_msg(castor_model_load_file(ctx, path, NULL, &m) == CASTOR_OK, "%s: %s", e->file,
                  castor_context_last_error(ctx));
    castor_program *p;
    ck_assert_msg(castor_compile(m, NULL, &p) == CASTOR_OK, "%s: %s", e->file, castor_context_last_error(ctx));
    castor_tensor *in[MAX_IO] = {0}, *out[MAX_IO] = {0};
    for (int k = 0; k < e->n_in; k++) {
      snprintf(path, sizeof path, "%s/%.63s.in%d.npy", DIR, e->file, k);
      ck_assert_int_eq(castor_tensor_load_npy(ctx, path, &in[k]), CASTOR_OK);
    }
    ck_assert_int_eq(castor_program_num_outputs(p), e->n_out);
    ck_assert_msg(castor_program_run(p, in, e->n_in, out, e->n_out) == CASTOR_OK, "%s: %s", e->file,
                  castor_context_last_error(ctx));
    for (int k = 0; k < e->n_out; k++) {
      castor_tensor *want;
      snprintf(path, sizeof path, "%s/%.63s.out%d.npy", DIR, e->file, k);
      ck_assert_int_eq(castor_tensor_load_npy(ctx, path, &want), CASTOR_OK);
      ck_assert_msg(castor_tensor_numel(want) == castor_tensor_numel(out[k]), "%s output %d: %lld vs %lld elements",
                    e->file, k, (long long)castor_tensor_numel(out[k]), (long long)castor_tensor_numel(want));
      const float *a = castor_tensor_data(out[k]), *b = castor_tensor_data(want);
      double err = 0, mag = 0;
      for (int64_t j = 0; j < castor_tensor_numel(want); j++) {
        err = fmax(err, fabs((double)a[j] - b[j]));
        mag = fmax(mag, fabs((double)b[j]));
      }
      double rel = err / mag;
      if (getenv("CASTOR_TEST_VERBOSE")) fprintf(stderr, "%s output %d: %.2e\n", e->file, k, rel);
      ck_assert_msg(mag > 0 && rel <= bound_for(e), "%s output %d: normalized error %.3g > %.3g", e->file, k, rel,
                    bound_for(e));
      castor_tensor_destroy(want);
      castor_tensor_destroy(out[k]);
    }
    for (int k = 0; k < e->n_in; k++) castor_tensor_destroy(in[k]);
    castor_program_destroy(p);
    castor_model_destroy(m);
  }
  castor_context_destroy(ctx);
}

START_TEST(test_rnn_outputs) { check_outputs(DIR "/manifest-rnn.txt", 6); }
END_TEST

/* Keras's masks (generate_rnn.py mask): padded batches of different lengths (a zero step inside one
 * row, one row starting with one) through Masking, Embedding(mask_zero), Bidirectional and a Sequential
 * model's carried mask, float32 and mixed_bfloat16 */
START_TEST(test_rnnmask_outputs) { check_outputs(DIR "/manifest-rnnmask.txt", 10); }
END_TEST

/* ---- training: three steps of Keras's train_on_batch (generate_rnn.py train) ---- */

typedef struct tcase {
  char name[64], policy[32];
  int n_w;
} tcase;

static double train_bound(const char *policy) {
  if (strstr(policy, "bfloat16")) return 1e-2;
  if (strstr(policy, "float16")) return 5e-3;
  return 1e-5;
}

static void check_trajectories(const char *prefix, int want_n) {
  char *text, path[8192];
  size_t len;
  snprintf(path, sizeof path, "%s/manifest-%s.txt", DIR, prefix);
  ck_assert_msg(str_read_file(path, &text, &len), "cannot read %s", path);
  tcase cs[8];
  int n = 0;
  for (char *line = strtok(text, "\n"); line && n < 8; line = strtok(NULL, "\n"))
    if (line[0] != '#') {
      ck_assert_int_eq(sscanf(line, "%63s %31s %d", cs[n].name, cs[n].policy, &cs[n].n_w), 3);
      n++;
    }
  free(text);
  ck_assert_int_eq(n, want_n);
  castor_context *ctx;
  ck_assert_int_eq(castor_context_create(&ctx), CASTOR_OK);
  castor_tensor *xs, *ys;
  snprintf(path, sizeof path, "%s/%s.x.npy", DIR, prefix);
  ck_assert_int_eq(castor_tensor_load_npy(ctx, path, &xs), CASTOR_OK);
  snprintf(path, sizeof path, "%s/%s.y.npy", DIR, prefix);
  ck_assert_int_eq(castor_tensor_load_npy(ctx, path, &ys), CASTOR_OK);
  for (int c = 0; c < n; c++) {
    snprintf(path, sizeof path, "%s/%s-%s.keras", DIR, prefix, cs[c].name);
    castor_model *m;
    ck_assert_msg(castor_model_load_file(ctx, path, NULL, &m) == CASTOR_OK, "%s: %s", cs[c].name,
                  castor_context_last_error(ctx));
    castor_program *p;
    ck_assert_msg(castor_compile_train(m, NULL, NULL, &p) == CASTOR_OK, "%s: %s", cs[c].name,
                  castor_context_last_error(ctx));
    snprintf(path, sizeof path, "%s/%s-%s.loss.txt", DIR, prefix, cs[c].name);
    FILE *lf = fopen(path, "r");
    ck_assert_msg(lf, "cannot read %s", path);
    double bound = train_bound(cs[c].policy);
    for (int step = 1; step <= 3; step++) {
      int64_t xd[] = {8, 6, 4}, yd[] = {8};
      castor_tensor *x, *y;
      ck_assert_int_eq(castor_tensor_create(ctx, CASTOR_F32, 3, xd, &x), CASTOR_OK);
      ck_assert_int_eq(castor_tensor_create(ctx, CASTOR_I32, 1, yd, &y), CASTOR_OK);
      memcpy(castor_tensor_data(x), (float *)castor_tensor_data(xs) + (step - 1) * 8 * 24, 8 * 24 * sizeof(float));
      memcpy(castor_tensor_data(y), (int32_t *)castor_tensor_data(ys) + (step - 1) * 8, 8 * sizeof(int32_t));
      castor_tensor *ins[] = {x, y}, *outs[2] = {NULL, NULL};
      ck_assert_msg(castor_program_run(p, ins, 2, outs, 2) == CASTOR_OK, "%s: %s", cs[c].name,
                    castor_context_last_error(ctx));
      double want_loss;
      ck_assert_int_eq(fscanf(lf, "%lf", &want_loss), 1);
      double got_loss = *(const float *)castor_tensor_data(outs[1]);
      double lrel = fabs(got_loss - want_loss) / fabs(want_loss);
      if (getenv("CASTOR_TEST_VERBOSE"))
        fprintf(stderr, "%s step %d loss %.7f keras %.7f (%.1e)\n", cs[c].name, step, got_loss, want_loss, lrel);
      ck_assert_msg(lrel <= bound, "%s step %d: loss %.8g, Keras's %.8g", cs[c].name, step, got_loss, want_loss);
      int w = 0;
      for (int i = 0; i < castor_program_num_states(p); i++) {
        if (castor_program_state_kind(p, i) != CASTOR_STATE_TRAINABLE) continue;
        castor_tensor_info info;
        ck_assert_int_eq(castor_program_state_info(p, i, &info), CASTOR_OK);
        castor_tensor *want, *got;
        snprintf(path, sizeof path, "%s/%s-%s.step%d.w%d.npy", DIR, prefix, cs[c].name, step, w);
        ck_assert_msg(castor_tensor_load_npy(ctx, path, &want) == CASTOR_OK, "%s", castor_context_last_error(ctx));
        ck_assert_int_eq(castor_program_get_state(p, info.name, &got), CASTOR_OK);
        ck_assert_msg(castor_tensor_numel(got) == castor_tensor_numel(want), "%s: %s is weight %d of Keras's?",
                      cs[c].name, info.name, w);
        const float *a = castor_tensor_data(got), *b = castor_tensor_data(want);
        double err = 0, mag = 0;
        for (int64_t k = 0; k < castor_tensor_numel(want); k++) {
          err = fmax(err, fabs((double)a[k] - b[k]));
          mag = fmax(mag, fabs((double)b[k]));
        }
        if (getenv("CASTOR_TEST_VERBOSE"))
          fprintf(stderr, "%s step %d %s: %.2e\n", cs[c].name, step, info.name, err / mag);
        ck_assert_msg(err / mag <= bound, "%s step %d %s: normalized error %.3g > %.3g", cs[c].name, step, info.name,
                      err / mag, bound);
        castor_tensor_destroy(want), castor_tensor_destroy(got);
        w++;
      }
      ck_assert_int_eq(w, cs[c].n_w);
      for (int k = 0; k < 2; k++) castor_tensor_destroy(outs[k]);
      castor_tensor_destroy(x), castor_tensor_destroy(y);
    }
    fclose(lf);
    castor_program_destroy(p);
    castor_model_destroy(m);
  }
  castor_tensor_destroy(xs), castor_tensor_destroy(ys);
  castor_context_destroy(ctx);
}

START_TEST(test_rnn_trajectories) { check_trajectories("rnntrain", 5); }
END_TEST

/* a padded batch through Masking (generate_rnn.py masktrain): the gradient skips the masked steps */
START_TEST(test_rnnmask_trajectories) { check_trajectories("rnnmasktrain", 3); }
END_TEST

static Suite *keras_rnn_suite(void) {
  Suite *s = suite_create("keras_rnn");
  TCase *tc = tcase_create("keras_rnn");
  tcase_set_timeout(tc, 240); /* JIT compiles 22 models */
  tcase_add_test(tc, test_rnn_outputs);
  tcase_add_test(tc, test_rnn_trajectories);
  tcase_add_test(tc, test_rnnmask_outputs);
  tcase_add_test(tc, test_rnnmask_trajectories);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) { return check_run(keras_rnn_suite()); }
