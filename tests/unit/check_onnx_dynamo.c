/* SPDX-License-Identifier: Apache-2.0 */
/*
 * check_onnx_dynamo.c: models as torch.onnx.export writes them today (the
 * dynamo exporter, opset 20): torchvision's ResNet-18, MobileNetV3-Small,
 * EfficientNet-B0 and DenseNet-121, narrowed, and an FCN head upsampled
 * by Resize (bilinear to the input's size, nearest x4)
 * (tests/onnx/models/generate.py, DYNAMO_MODELS), against ONNX Runtime's
 * outputs. Each dynamic-batch export runs with castor's symbolic N at
 * batch 4 and batch 1 and with the batch bound at load (--batch 4), and the
 * exporter's default (static, batch 1) ResNet-18 as it is, under float32
 * and mixed_bfloat16. The measure is the issue's: max |got - want| over
 * max |want|, within 1e-5 (float32) and 2e-2 (mixed_bfloat16: bfloat16's
 * 8-bit mantissa through 20-50 layers).
 */
#include "castor.h"

#include "tests/unit/test_support.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* Loads model (batch bound at load if > 0), compiles it under policy, runs
 * x and checks the output against the first rows of want. */
static void check_model(const char *model, int64_t load_batch, const char *policy, double bound, castor_tensor *x,
                        castor_tensor *want) {
  castor_context *ctx;
  castor_context_create(&ctx);
  char path[512];
  snprintf(path, sizeof path, "%s/tests/onnx/models/%s.onnx", CASTOR_SOURCE_DIR, model);
  castor_load_options lo;
  castor_load_options_init(&lo);
  lo.batch = load_batch;
  castor_model *m;
  ck_assert_msg(castor_model_load_file(ctx, path, &lo, &m) == CASTOR_OK, "%s: %s", model, castor_context_last_error(ctx));
  castor_compile_options o;
  castor_compile_options_init(&o);
  o.policy = policy;
  o.batch = load_batch;
  castor_program *p;
  ck_assert_msg(castor_compile(m, &o, &p) == CASTOR_OK, "%s %s: %s", model, policy, castor_context_last_error(ctx));
  castor_tensor *y = NULL;
  ck_assert_msg(castor_program_run(p, &x, 1, &y, 1) == CASTOR_OK, "%s: %s", model, castor_context_last_error(ctx));
  int64_t rows = castor_tensor_dims(y)[0];
  ck_assert_int_eq(rows, castor_tensor_dims(x)[0]);
  ck_assert_int_eq(castor_tensor_rank(y), castor_tensor_rank(want));
  for (int r = 1; r < castor_tensor_rank(y); r++) ck_assert_int_eq(castor_tensor_dims(y)[r], castor_tensor_dims(want)[r]);
  int64_t n = castor_tensor_numel(y); /* want's first rows */
  double e = test_rel_max_err(castor_tensor_data(y), castor_tensor_data(want), n);
  ck_assert_msg(e <= bound, "%s under %s, batch %lld (bound at load: %lld): max error / max |ref| %.3g > %.3g", model,
                policy, (long long)rows, (long long)load_batch, e, bound);
  castor_tensor_destroy(y);
  castor_program_destroy(p);
  castor_model_destroy(m);
  castor_context_destroy(ctx);
}

static const char *const DYNBATCH[] = {"tv_resnet18", "tv_mobilenet_v3_small", "tv_efficientnet_b0", "tv_densenet121",
                                       "tv_fcn_head"};

START_TEST(test_dynamo_dynamic_batch) {
  castor_context *ctx;
  castor_context_create(&ctx);
  castor_tensor *x4 = test_load_onnx_npy(ctx, "tv.x.npy"), *x1 = test_first_rows(ctx, x4, 1);
  char name[128];
  snprintf(name, sizeof name, "%s.dynbatch.ort.npy", DYNBATCH[_i]);
  castor_tensor *want = test_load_onnx_npy(ctx, name);
  snprintf(name, sizeof name, "%s.dynbatch", DYNBATCH[_i]);
  check_model(name, 0, "float32", 1e-5, x4, want);
  check_model(name, 0, "float32", 1e-5, x1, want);
  check_model(name, 4, "float32", 1e-5, x4, want);
  check_model(name, 0, "mixed_bfloat16", 2e-2, x4, want);
  check_model(name, 0, "mixed_bfloat16", 2e-2, x1, want);
  castor_tensor_destroy(want);
  castor_tensor_destroy(x1);
  castor_tensor_destroy(x4);
  castor_context_destroy(ctx);
}
END_TEST

/* the exporter's defaults: static shapes at the example's batch of 1 */
START_TEST(test_dynamo_defaults) {
  castor_context *ctx;
  castor_context_create(&ctx);
  castor_tensor *x4 = test_load_onnx_npy(ctx, "tv.x.npy"), *x1 = test_first_rows(ctx, x4, 1);
  castor_tensor *want = test_load_onnx_npy(ctx, "tv_resnet18.dynamo.ort.npy");
  check_model("tv_resnet18.dynamo", 0, "float32", 1e-5, x1, want);
  check_model("tv_resnet18.dynamo", 0, "mixed_bfloat16", 2e-2, x1, want);
  castor_tensor_destroy(want);
  castor_tensor_destroy(x1);
  castor_tensor_destroy(x4);
  castor_context_destroy(ctx);
}
END_TEST

static Suite *onnx_dynamo_suite(void) {
  Suite *s = suite_create("onnx_dynamo");
  TCase *tc = tcase_create("torchvision");
  tcase_set_timeout(tc, 120);
  tcase_add_loop_test(tc, test_dynamo_dynamic_batch, 0, (int)(sizeof DYNBATCH / sizeof *DYNBATCH));
  tcase_add_test(tc, test_dynamo_defaults);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) { return check_run(onnx_dynamo_suite()); }
