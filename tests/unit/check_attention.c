/* SPDX-License-Identifier: Apache-2.0 */
/*
 * check_attention.c: the .cast layers multi_head_attention and
 * global_average_pooling1d against Keras 3 (tests/data/attention: made once
 * by its generate.py with Keras 3.15.1 on JAX; attention.cast is the same
 * model with Keras's weights under their Keras names): self-attention,
 * cross-attention with a separate key and value_dim != key_dim, a layer
 * without biases, and the pooling, under each global policy. Bounds per
 * policy on the normalized error (max |castor - Keras| / max |Keras|), as
 * for the Keras frontend's goldens: float32 1e-6, mixed_float16 2e-3,
 * mixed_bfloat16 2e-2 (measured 2.1e-7, 5.6e-4, 4.5e-3). masked.cast: the
 * same with attention masks (generate.py masked).
 */
#include <check.h>

#include "tests/unit/test_support.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "include/castor.h"

#define DIR CASTOR_SOURCE_DIR "/tests/data/attention"

static const struct {
  const char *policy;
  double bound;
} policies[] = {{"float32", 1e-6}, {"mixed_float16", 2e-3}, {"mixed_bfloat16", 2e-2}};

/* model.cast against <policy>.<out>out<k>.npy for inputs <in>in<k>.npy */
static void against_keras(const char *cast, const char *in_prefix, const char *out_prefix, int n_in, int n_out) {
  castor_context *ctx;
  ck_assert_int_eq(castor_context_create(&ctx), CASTOR_OK);
  castor_model *m;
  char path[8192];
  snprintf(path, sizeof path, "%s/%s", DIR, cast);
  ck_assert_msg(castor_model_load_file(ctx, path, NULL, &m) == CASTOR_OK, "%s", castor_context_last_error(ctx));
  castor_tensor *in[8] = {0};
  for (int k = 0; k < n_in; k++) {
    snprintf(path, sizeof path, "%s/%sin%d.npy", DIR, in_prefix, k);
    ck_assert_int_eq(castor_tensor_load_npy(ctx, path, &in[k]), CASTOR_OK);
  }
  for (size_t pi = 0; pi < sizeof policies / sizeof *policies; pi++) {
    castor_compile_options o;
    castor_compile_options_init(&o);
    o.policy = policies[pi].policy;
    castor_program *p;
    ck_assert_msg(castor_compile(m, &o, &p) == CASTOR_OK, "%s: %s", o.policy, castor_context_last_error(ctx));
    castor_tensor *out[8] = {0};
    ck_assert_int_eq(castor_program_num_outputs(p), n_out);
    ck_assert_msg(castor_program_run(p, in, n_in, out, n_out) == CASTOR_OK, "%s: %s", o.policy,
                  castor_context_last_error(ctx));
    for (int k = 0; k < n_out; k++) {
      castor_tensor *want;
      snprintf(path, sizeof path, "%s/%s.%sout%d.npy", DIR, o.policy, out_prefix, k);
      ck_assert_int_eq(castor_tensor_load_npy(ctx, path, &want), CASTOR_OK);
      ck_assert_int_eq(castor_tensor_numel(want), castor_tensor_numel(out[k]));
      const float *a = castor_tensor_data(out[k]), *b = castor_tensor_data(want);
      double err = 0, mag = 0;
      for (int64_t j = 0; j < castor_tensor_numel(want); j++) {
        err = fmax(err, fabs((double)a[j] - b[j]));
        mag = fmax(mag, fabs((double)b[j]));
      }
      ck_assert(mag > 0);
      if (getenv("CASTOR_TEST_VERBOSE")) fprintf(stderr, "%s %s output %d: %.2e\n", cast, o.policy, k, err / mag);
      ck_assert_msg(err / mag <= policies[pi].bound, "%s %s output %d: normalized error %.3g > %.3g", cast, o.policy,
                    k, err / mag, policies[pi].bound);
      castor_tensor_destroy(want);
      castor_tensor_destroy(out[k]);
    }
    castor_program_destroy(p);
  }
  for (int k = 0; k < n_in; k++) castor_tensor_destroy(in[k]);
  castor_model_destroy(m);
  castor_context_destroy(ctx);
}

START_TEST(test_against_keras) { against_keras("attention.cast", "", "", 3, 2); }
END_TEST

/* attention masks: use_causal_mask (query lengths 5, 2, 1 against 5 and 7
 * value steps), attention_mask with a query row masked whole (Keras gives
 * zeros there), and both together */
START_TEST(test_masks_against_keras) { against_keras("masked.cast", "masked.", "masked.", 5, 3); }
END_TEST

/* Weights load by Keras's names and shapes: a kernel of the wrong shape is
 * an error naming the weight and both shapes. */
START_TEST(test_weight_shapes_checked) {
  static const char text[] = "model attention\nweights \"attention.safetensors\"\n"
                             "q = input(shape=[5, 8])\n"
                             "a = multi_head_attention(q, q, num_heads=4, key_dim=2, name=self_attn)\n"
                             "output a\n";
  castor_context *ctx;
  ck_assert_int_eq(castor_context_create(&ctx), CASTOR_OK);
  castor_model *m = NULL;
  ck_assert_int_ne(castor_model_load_string(ctx, DIR "/bad.cast", text, strlen(text), NULL, &m), CASTOR_OK);
  const char *e = castor_context_last_error(ctx);
  ck_assert_msg(strstr(e, "self_attn.query.kernel") && strstr(e, "[8,4,2]") && strstr(e, "[8,2,4]"), "got: %s", e);
  castor_context_destroy(ctx);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("attention");
  TCase *tc = tcase_create("attention");
  tcase_set_timeout(tc, 300);
  tcase_add_test(tc, test_against_keras);
  tcase_add_test(tc, test_masks_against_keras); /* attention masks */
  tcase_add_test(tc, test_weight_shapes_checked);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) { return check_run(suite()); }
