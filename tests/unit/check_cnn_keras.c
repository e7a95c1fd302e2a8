/* SPDX-License-Identifier: Apache-2.0 */
/*
 * check_cnn_keras.c: convolutional layers of the .cast frontend against
 * real Keras 3, over tests/golden/cnn-keras (made by its generate.py with
 * Keras on JAX; the .cast files come from the same table as the Keras
 * models): Conv2D (groups, dilation, strides, 'same'), DepthwiseConv2D
 * (depth_multiplier), SeparableConv2D, ZeroPadding2D, Max/Average/Global
 * pooling 2D, Conv1D (groups, 'causal'), the 1D pooling layers, and
 * Masking's mask through LSTM (return_sequences) and GRU, Embedding's
 * mask_zero through GRU (return_sequences) and LSTM (issue 39; on the cuda
 * target too, through the PTX emulator: the scans' NVPTX kernels, which no
 * GPU has run yet), and the layers .cast spells from the layer library's
 * table (issue 37): re_lu (max_value, negative_slope, threshold),
 * rescaling, normalization (the config's mean and variance, and stored
 * ones), cropping2d, up_sampling2d (nearest, bilinear), conv2d_transpose,
 * group_normalization, layer_scale, spatial_dropout2d, custom_scale_layer
 * (models prep, upconv, residual), and keys a layers.def row takes from
 * its library row (keys: epsilon, noise_shape, keepdims; a broadcasting
 * multiply). Each model
 * compiled by castor (the CPU JIT) under each policy on Keras's inputs
 * matches what Keras's model.predict returned under that global policy,
 * by normalized error max|castor - keras| / max|keras|, within the bound
 * of the policy (measured 2026-11-26 on an AVX-512 host, worst of the four
 * CNN models; the library's layers 2026-11-30, worst of prep, upconv, residual):
 *     float32          1e-6  (measured 1.0e-7; 4.2e-7)
 *     mixed_float16    2e-3  (0: the same f16 roundings; 1.1e-3)
 *     mixed_bfloat16   2e-2  (3.4e-3; 5.6e-3)
 * and pad8 (conv2d's channels on multiples of 8) changes no bit of them.
 * Under CASTOR_CUDA_EMULATE (ctest's check_cnn_keras_emu) the suite runs
 * the same goldens on the cuda target through the PTX emulator instead,
 * within the same bounds.
 */
#include "api/internal.h"

#include "tests/unit/test_support.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DIR CASTOR_SOURCE_DIR "/tests/golden/cnn-keras"

static double bound_for(const char *policy) {
  return strstr(policy, "bfloat16") ? 2e-2 : strstr(policy, "float16") ? 2e-3 : 1e-6;
}

/* Every model of the manifest under its policy on `target` (the cuda
 * target: through the PTX emulator, CASTOR_CUDA_EMULATE). */
static void check_outputs(castor_target target) {
  char *text;
  size_t len;
  ck_assert_msg(str_read_file(DIR "/manifest.txt", &text, &len), "cannot read the manifest");
  castor_context *ctx;
  ck_assert_int_eq(castor_context_create(&ctx), CASTOR_OK);
  int n = 0;
  for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
    if (line[0] == '#') continue;
    char model[64], policy[32], path[8192];
    ck_assert_int_eq(sscanf(line, "%63s %31s", model, policy), 2);
    snprintf(path, sizeof path, "%s/%s.cast", DIR, model);
    castor_model *m;
    ck_assert_msg(castor_model_load_file(ctx, path, NULL, &m) == CASTOR_OK, "%s: %s", model,
                  castor_context_last_error(ctx));
    castor_compile_options o;
    castor_compile_options_init(&o);
    o.policy = policy;
    o.target = target;
    castor_program *p;
    ck_assert_msg(castor_compile(m, &o, &p) == CASTOR_OK, "%s %s: %s", model, policy, castor_context_last_error(ctx));
    castor_tensor *in, *out = NULL, *want;
    snprintf(path, sizeof path, "%s/%s.in0.npy", DIR, model);
    ck_assert_int_eq(castor_tensor_load_npy(ctx, path, &in), CASTOR_OK);
    ck_assert_msg(castor_program_run(p, &in, 1, &out, 1) == CASTOR_OK, "%s %s: %s", model, policy,
                  castor_context_last_error(ctx));
    snprintf(path, sizeof path, "%s/%s-%s.out0.npy", DIR, model, policy);
    ck_assert_int_eq(castor_tensor_load_npy(ctx, path, &want), CASTOR_OK);
    ck_assert_int_eq(castor_tensor_numel(want), castor_tensor_numel(out));
    const float *a = castor_tensor_data(out), *b = castor_tensor_data(want);
    double err = 0, mag = 0;
    for (int64_t j = 0; j < castor_tensor_numel(want); j++) {
      err = fmax(err, fabs((double)a[j] - b[j]));
      mag = fmax(mag, fabs((double)b[j]));
    }
    double rel = err / mag;
    const char *tn = target == CASTOR_TARGET_CUDA ? "cuda" : "cpu";
    if (getenv("CASTOR_TEST_VERBOSE")) fprintf(stderr, "%s %s %s: %.2e\n", tn, model, policy, rel);
    ck_assert_msg(rel <= bound_for(policy), "%s under %s on %s: normalized error %.3g > %.3g", model, policy, tn, rel,
                  bound_for(policy));
    castor_tensor_destroy(want), castor_tensor_destroy(out), castor_tensor_destroy(in);
    castor_program_destroy(p);
    castor_model_destroy(m);
    n++;
  }
  ck_assert_int_eq(n, 30); /* ten models under three policies */
  castor_context_destroy(ctx);
  free(text);
}

START_TEST(test_outputs) { check_outputs(CASTOR_TARGET_CPU); }
END_TEST

/* convolutional networks on the cuda target: the same goldens through the
 * PTX emulator (conv2d's implicit GEMM, the kit's depthwise and pooling
 * maps), within the same bounds; the check_cnn_keras_emu entry of ctest
 * sets CASTOR_CUDA_EMULATE. */
START_TEST(test_outputs_cuda_emulated) { check_outputs(CASTOR_TARGET_CUDA); }
END_TEST

/* pad8 on conv2d's channels changes no bit: each model under each 16-bit
 * policy, with and without pad8, on 1 and 3 threads. */
START_TEST(test_pad8_bit_identical) {
  static const char *const models[] = {"conv", "depthwise", "separable", "conv1d"};
  static const char *const policies[] = {"mixed_float16", "mixed_bfloat16", "float16", "bfloat16"};
  castor_context *ctx;
  ck_assert_int_eq(castor_context_create(&ctx), CASTOR_OK);
  for (size_t mi = 0; mi < sizeof models / sizeof *models; mi++) {
    char path[8192];
    snprintf(path, sizeof path, "%s/%s.cast", DIR, models[mi]);
    castor_model *m;
    ck_assert_msg(castor_model_load_file(ctx, path, NULL, &m) == CASTOR_OK, "%s", castor_context_last_error(ctx));
    castor_tensor *in;
    snprintf(path, sizeof path, "%s/%s.in0.npy", DIR, models[mi]);
    ck_assert_int_eq(castor_tensor_load_npy(ctx, path, &in), CASTOR_OK);
    for (size_t pi = 0; pi < sizeof policies / sizeof *policies; pi++) {
      castor_tensor *out[3] = {NULL, NULL, NULL};
      for (int v = 0; v < 3; v++) { /* no pad8; pad8; pad8 on 3 threads */
        castor_compile_options o;
        castor_compile_options_init(&o);
        o.policy = policies[pi];
        o.pad8 = v > 0;
        o.threads = v == 2 ? 3 : 1;
        castor_program *p;
        ck_assert_msg(castor_compile(m, &o, &p) == CASTOR_OK, "%s: %s", models[mi], castor_context_last_error(ctx));
        ck_assert_msg(castor_program_run(p, &in, 1, &out[v], 1) == CASTOR_OK, "%s", castor_context_last_error(ctx));
        castor_program_destroy(p);
      }
      for (int v = 1; v < 3; v++)
        ck_assert_msg(castor_tensor_nbytes(out[0]) == castor_tensor_nbytes(out[v]) &&
                          !memcmp(castor_tensor_data(out[0]), castor_tensor_data(out[v]), castor_tensor_nbytes(out[0])),
                      "%s under %s: pad8%s changes the result", models[mi], policies[pi], v == 2 ? " on 3 threads" : "");
      for (int v = 0; v < 3; v++) castor_tensor_destroy(out[v]);
    }
    castor_tensor_destroy(in);
    castor_model_destroy(m);
  }
  castor_context_destroy(ctx);
}
END_TEST

static Suite *cnn_keras_suite(void) {
  if (getenv("CASTOR_CUDA_EMULATE")) { /* check_cnn_keras_emu: the cuda target only */
    Suite *s = suite_create("cnn_keras_cuda_emulated");
    TCase *tg = tcase_create("cuda");
    tcase_set_timeout(tg, 600);
    tcase_add_test(tg, test_outputs_cuda_emulated);
    suite_add_tcase(s, tg);
    return s;
  }
  Suite *s = suite_create("cnn_keras");
  TCase *tc = tcase_create("outputs");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_outputs);
  tcase_add_test(tc, test_pad8_bit_identical);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) { return check_run(cnn_keras_suite()); }
