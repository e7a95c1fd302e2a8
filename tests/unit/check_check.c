/* SPDX-License-Identifier: Apache-2.0 */
/*
 * check_check.c: castor_check (api/check/check.c), the numerics debugger.
 *
 * The models built to fail (tests/check/: an activation above 65504 in
 * float16, weights that flush to zero, logits too coarse in float16 for the
 * softmax after them, a NaN in the input) must give the exact layer, op and
 * element of the first bad value and the exact --fp32-layers fix; the fix
 * is checked minimal here, independently of castor_check: every smaller
 * set of layers is compiled and run and must leave the outputs off. The
 * sample reports OK under every policy with its output error within the
 * end-to-end tests' bounds (check_e2e.c), and the observed build (every
 * value an output) computes the same outputs as the plain build. Bad
 * options and inputs give exact messages.
 */
#include <check.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "castor.h"
#include "tests/unit/test_support.h"

static castor_context *ctx;

static void setup(void) { ck_assert_int_eq(castor_context_create(&ctx), CASTOR_OK); }
static void teardown(void) { castor_context_destroy(ctx); }

static castor_model *load(const char *rel) {
  char path[1024];
  snprintf(path, sizeof path, "%s/%s", CASTOR_SOURCE_DIR, rel);
  castor_model *m = NULL;
  castor_status st = castor_model_load_file(ctx, path, NULL, &m);
  ck_assert_msg(st == CASTOR_OK, "load %s: %s", rel, castor_context_last_error(ctx));
  return m;
}

static castor_tensor *load_npy(const char *rel) {
  char path[1024];
  snprintf(path, sizeof path, "%s/%s", CASTOR_SOURCE_DIR, rel);
  castor_tensor *t = NULL;
  castor_status st = castor_tensor_load_npy(ctx, path, &t);
  ck_assert_msg(st == CASTOR_OK, "load %s: %s", rel, castor_context_last_error(ctx));
  return t;
}

static castor_check_report *check(castor_model *m, const char *policy, castor_tensor *in, const char *layers) {
  castor_check_options o;
  castor_check_options_init(&o);
  o.compile.policy = policy;
  o.layers = layers;
  castor_check_report *r = NULL;
  castor_status st = castor_check(m, &o, in ? &in : NULL, in ? 1 : 0, &r);
  ck_assert_msg(st == CASTOR_OK, "castor_check %s: %s", policy ? policy : "", castor_context_last_error(ctx));
  return r;
}

/* The oracle of minimality, independent of castor_check: the worst
 * normalized error of the outputs under `policy` with `fp32_layers`
 * against the float32 build, and whether they are finite where float32's
 * are and within tol. One model input, one output. */
static bool within(castor_model *m, const char *policy, const char *fp32_layers, castor_tensor *in, double tol) {
  castor_compile_options o;
  castor_compile_options_init(&o);
  castor_program *p32 = NULL, *p = NULL;
  o.policy = "float32";
  ck_assert_int_eq(castor_compile(m, &o, &p32), CASTOR_OK);
  o.policy = policy;
  o.fp32_layers = fp32_layers;
  ck_assert_msg(castor_compile(m, &o, &p) == CASTOR_OK, "%s", castor_context_last_error(ctx));
  castor_tensor *want = NULL, *got = NULL;
  ck_assert_int_eq(castor_program_run(p32, &in, 1, &want, 1), CASTOR_OK);
  ck_assert_int_eq(castor_program_run(p, &in, 1, &got, 1), CASTOR_OK);
  ck_assert_int_eq(castor_tensor_dtype(got), CASTOR_F32);
  const float *w = castor_tensor_data(want), *g = castor_tensor_data(got);
  double scale = 0, err = 0;
  bool finite = true;
  for (int64_t i = 0; i < castor_tensor_numel(want); i++) scale = fmax(scale, fabs(w[i]));
  for (int64_t i = 0; i < castor_tensor_numel(want); i++) {
    finite = finite && isfinite(g[i]);
    err = fmax(err, fabs((double)g[i] - w[i]));
  }
  castor_tensor_destroy(want), castor_tensor_destroy(got);
  castor_program_destroy(p32), castor_program_destroy(p);
  return finite && err <= tol * scale;
}

/* Every set of the layers with fewer members than the fix leaves the
 * outputs off (the fix is a smallest one), and the fix itself works. */
static void assert_minimal(castor_model *m, const char *policy, castor_tensor *in, const char *const *layers,
                           int n_layers, const char *fix, double tol) {
  int fix_size = 1;
  for (const char *p = fix; *p; p++) fix_size += *p == ',';
  ck_assert_msg(within(m, policy, fix, in, tol), "the fix %s does not work", fix);
  for (unsigned set = 0; set < 1u << n_layers; set++) {
    if (__builtin_popcount(set) >= fix_size) continue;
    char list[256] = "";
    for (int k = 0; k < n_layers; k++)
      if (set >> k & 1) snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", *list ? "," : "", layers[k]);
    ck_assert_msg(!within(m, policy, *list ? list : NULL, in, tol),
                  "%s: --fp32-layers=%s (smaller than %s) already brings the outputs within %g", policy, list, fix, tol);
  }
}

static void assert_first_bad(const castor_check_nonfinite *f, const char *layer, const char *op, const char *value,
                             int64_t index, int64_t row, int64_t col) {
  ck_assert_msg(f->found, "no NaN/Inf found");
  ck_assert_str_eq(f->layer, layer);
  ck_assert_str_eq(f->op, op);
  ck_assert_str_eq(f->value, value);
  ck_assert_int_eq(f->index, index);
  ck_assert_int_eq(f->rank, 2);
  ck_assert_int_eq(f->coords[0], row);
  ck_assert_int_eq(f->coords[1], col);
}

static const char *const policies16[] = {"mixed_float16", "float16"};

START_TEST(test_overflow) {
  castor_model *m = load("tests/check/overflow.cast");
  castor_tensor *x = load_npy("tests/check/overflow_x.npy");
  castor_check_report *r = check(m, policies16[_i], x, NULL);
  castor_check_summary s;
  castor_check_report_summary(r, &s);
  /* dense_1's unit 2: 50000 + 25000 > 65504 */
  assert_first_bad(&s.first_bad, "dense_1", "matmul", "dense_1", 2, 0, 2);
  ck_assert(isinf(s.first_bad.x) && s.first_bad.x > 0);
  ck_assert(!s.reference_first_bad.found);
  ck_assert_int_eq(s.verdict, CASTOR_CHECK_FIX);
  ck_assert_str_eq(s.fp32_layers, "dense_1,dense_2");
  ck_assert(s.fixed_output_error <= s.tolerance);
  castor_check_layer l;
  ck_assert_int_eq(castor_check_report_layer(r, 1, &l), CASTOR_OK);
  ck_assert_str_eq(l.layer, "dense_1");
  ck_assert_int_eq(l.dtype, CASTOR_F16);
  ck_assert_int_eq(l.act_overflow, 1);
  ck_assert_int_eq(l.not_finite, 1);
  ck_assert_double_eq(l.act_max_abs, 75000);
  static const char *const layers[] = {"dense_1", "dense_2", "dense_3"};
  assert_minimal(m, policies16[_i], x, layers, 3, s.fp32_layers, s.tolerance);
  /* the DOT marks where the first Inf is */
  const char *dot = castor_check_report_format(r, CASTOR_CHECK_DOT);
  ck_assert_msg(strstr(dot, "first NaN/Inf here: element 2 [0,2]") != NULL, "%s", dot);
  const char *json = castor_check_report_format(r, CASTOR_CHECK_JSON);
  ck_assert_msg(strstr(json, "\"verdict\": \"fix\",\n  \"fp32_layers\": \"dense_1,dense_2\"") != NULL, "%s", json);
  ck_assert_msg(strstr(json, "\"first_not_finite\": {\"layer\": \"dense_1\", \"op\": \"matmul\", \"value\": "
                             "\"dense_1\", \"index\": 2, \"coords\": [0,2], \"x\": \"inf\"}") != NULL,
                "%s", json);
  castor_check_report_destroy(r);
  castor_tensor_destroy(x);
  castor_model_destroy(m);
}
END_TEST

START_TEST(test_underflow) {
  castor_model *m = load("tests/check/underflow.cast");
  castor_check_report *r = check(m, policies16[_i], NULL, NULL);
  castor_check_summary s;
  castor_check_report_summary(r, &s);
  ck_assert(!s.first_bad.found && !s.reference_first_bad.found);
  ck_assert_int_eq(s.verdict, CASTOR_CHECK_FIX);
  ck_assert_str_eq(s.fp32_layers, "dense_2");
  ck_assert_msg(strstr(s.warnings, "weight 'dense_2.kernel': 8 of 8 non-zero values become zero") != NULL, "%s",
                s.warnings);
  castor_check_layer l;
  ck_assert_int_eq(castor_check_report_layer(r, 2, &l), CASTOR_OK);
  ck_assert_str_eq(l.layer, "dense_2");
  ck_assert_int_eq(l.weight_numel, 8);
  ck_assert_int_eq(l.weight_zero, 8); /* |w| <= 2e-8 <= 2^-25 */
  ck_assert_double_eq(l.rel_error, 1); /* all zero against ~1e-8 */
  ck_assert_double_eq(l.share_off, 1);
  castor_tensor *x = NULL;
  int64_t dims[2] = {1, 4};
  ck_assert_int_eq(castor_tensor_create(ctx, CASTOR_F32, 2, dims, &x), CASTOR_OK);
  float *xv = castor_tensor_data(x);
  xv[0] = 0.3f, xv[1] = -0.7f, xv[2] = 0.9f, xv[3] = 0.1f;
  static const char *const layers[] = {"dense_1", "dense_2"};
  assert_minimal(m, policies16[_i], x, layers, 2, s.fp32_layers, s.tolerance);
  castor_tensor_destroy(x);
  castor_check_report_destroy(r);
  castor_model_destroy(m);
}
END_TEST

START_TEST(test_logits) {
  castor_model *m = load("tests/check/logits.cast");
  castor_tensor *x = load_npy("tests/check/logits_x.npy");
  castor_check_report *r = check(m, policies16[_i], x, NULL);
  castor_check_summary s;
  castor_check_report_summary(r, &s);
  ck_assert(!s.first_bad.found);
  ck_assert_int_eq(s.verdict, CASTOR_CHECK_FIX);
  ck_assert_str_eq(s.fp32_layers, "dense_logits");
  ck_assert_msg(s.output_error > 0.05, "softmax error %g", s.output_error);
  static const char *const layers[] = {"dense_0", "dense_logits"};
  assert_minimal(m, policies16[_i], x, layers, 2, s.fp32_layers, s.tolerance);
  /* and no single other layer helps either */
  ck_assert(!within(m, policies16[_i], "dense_0", x, s.tolerance));
  castor_check_report_destroy(r);
  castor_tensor_destroy(x);
  castor_model_destroy(m);
}
END_TEST

START_TEST(test_nan_input) {
  castor_model *m = load("tests/check/underflow.cast");
  castor_tensor *x = load_npy("tests/check/nan_x.npy");
  castor_check_report *r = check(m, policies16[_i], x, NULL);
  castor_check_summary s;
  castor_check_report_summary(r, &s);
  assert_first_bad(&s.first_bad, "x", "input", "x", 5, 1, 1);
  assert_first_bad(&s.reference_first_bad, "x", "input", "x", 5, 1, 1);
  ck_assert(isnan(s.first_bad.x));
  /* float32 is NaN too: no set of layers can fix it, none is suggested */
  ck_assert_int_eq(s.verdict, CASTOR_CHECK_REFERENCE_NOT_FINITE);
  ck_assert_ptr_null(s.fp32_layers);
  ck_assert_int_eq(s.n_trials, 0);
  castor_check_report_destroy(r);
  castor_tensor_destroy(x);
  castor_model_destroy(m);
}
END_TEST

/* The sample under every policy: OK, within check_e2e's bounds against
 * float32 (8 ulps of the 16-bit dtype; f32: the same build). */
static const char *const policies[] = {"float32", "float16", "bfloat16", "mixed_float16", "mixed_bfloat16"};
static const double bounds[] = {1e-5, 4e-3, 3.2e-2, 4e-3, 3.2e-2};

START_TEST(test_healthy_every_policy) {
  castor_model *m = load("samples/mnist_mlp_small.cast");
  castor_check_options o;
  castor_check_options_init(&o);
  o.compile.policy = policies[_i];
  o.batch = 3;
  castor_check_report *r = NULL;
  ck_assert_msg(castor_check(m, &o, NULL, 0, &r) == CASTOR_OK, "%s", castor_context_last_error(ctx));
  castor_check_summary s;
  castor_check_report_summary(r, &s);
  ck_assert_msg(s.verdict == CASTOR_CHECK_OK, "%s:\n%s", policies[_i], castor_check_report_format(r, CASTOR_CHECK_TEXT));
  ck_assert_msg(s.output_error < bounds[_i], "%s: %g", policies[_i], s.output_error);
  ck_assert(!s.first_bad.found && !s.reference_first_bad.found);
  ck_assert_str_eq(s.policy, policies[_i]);
  ck_assert_int_eq(s.batch, 3);
  ck_assert_int_eq(castor_check_report_num_layers(r), 5);
  static const char *const names[] = {"digits", "dense_1", "dense_2", "dense_logits", "activation"};
  bool low = strcmp(policies[_i], "float32") != 0;
  for (int i = 0; i < 5; i++) {
    castor_check_layer l;
    ck_assert_int_eq(castor_check_report_layer(r, i, &l), CASTOR_OK);
    ck_assert_str_eq(l.layer, names[i]);
    ck_assert_msg(l.compared, "%s not compared", l.layer);
    ck_assert_int_eq(l.not_finite, 0);
    bool dense = i >= 1 && i <= 3;
    ck_assert_int_eq(l.dtype, !dense || !low ? CASTOR_F32 : strstr(policies[_i], "bfloat16") ? CASTOR_BF16 : CASTOR_F16);
    if (!low) ck_assert_double_eq(l.max_abs_error, 0); /* the same build twice */
  }
  /* observing every value changes nothing: the output layer's error from
   * the observed builds is the plain builds' output error, bit for bit */
  castor_check_layer out;
  castor_check_report_layer(r, 4, &out);
  ck_assert_double_eq(out.rel_error, s.output_error);
  castor_check_report_destroy(r);
  castor_model_destroy(m);
}
END_TEST

START_TEST(test_layer_filter) {
  castor_model *m = load("samples/mnist_mlp_small.cast");
  castor_check_report *r = check(m, "mixed_bfloat16", NULL, "dense_2,activation");
  ck_assert_int_eq(castor_check_report_num_layers(r), 2);
  castor_check_layer l;
  ck_assert_int_eq(castor_check_report_layer(r, 0, &l), CASTOR_OK);
  ck_assert_str_eq(l.layer, "dense_2");
  ck_assert_int_eq(l.limit_dtype, CASTOR_BF16);
  ck_assert_int_eq(castor_check_report_layer(r, 1, &l), CASTOR_OK);
  ck_assert_str_eq(l.layer, "activation");
  ck_assert_int_eq(castor_check_report_layer(r, 2, &l), CASTOR_ERR_INVALID_ARGUMENT);
  castor_check_report_destroy(r);
  castor_model_destroy(m);
}
END_TEST

START_TEST(test_bad_input) {
  castor_model *m = load("samples/mnist_mlp_small.cast");
  castor_check_options o;
  castor_check_options_init(&o);
  castor_check_report *r = (castor_check_report *)&o; /* must be reset to NULL */
  o.layers = "dense_1,dense_9";
  ck_assert_int_eq(castor_check(m, &o, NULL, 0, &r), CASTOR_ERR_INVALID_ARGUMENT);
  ck_assert_ptr_null(r);
  ck_assert_str_eq(castor_context_last_error(ctx),
                   "error: --layers: the model has no layer 'dense_9' (layers: digits, dense_1, dense_2, "
                   "dense_logits, activation)\n");
  o.layers = "dense_1,";
  ck_assert_int_eq(castor_check(m, &o, NULL, 0, &r), CASTOR_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(castor_context_last_error(ctx), "error: --layers: empty item in 'dense_1,'\n");
  o.layers = NULL;
  o.tolerance = -1;
  ck_assert_int_eq(castor_check(m, &o, NULL, 0, &r), CASTOR_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(castor_context_last_error(ctx),
                   "error: the tolerance must be a finite number >= 0 (0: the policy's default), got -1\n");
  o.tolerance = NAN;
  ck_assert_int_eq(castor_check(m, &o, NULL, 0, &r), CASTOR_ERR_INVALID_ARGUMENT);
  o.tolerance = 0;
  o.compile.fp32_layers = "dense_7";
  ck_assert_int_eq(castor_check(m, &o, NULL, 0, &r), CASTOR_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(castor_context_last_error(ctx), "error: --fp32-layers: the model has no layer 'dense_7'\n");
  o.compile.fp32_layers = NULL;
  o.compile.policy = "float8";
  ck_assert_int_eq(castor_check(m, &o, NULL, 0, &r), CASTOR_ERR_INVALID_ARGUMENT);
  o.compile.policy = NULL;
  /* inputs of the wrong shape */
  castor_tensor *x = NULL;
  int64_t dims[2] = {2, 5};
  ck_assert_int_eq(castor_tensor_create(ctx, CASTOR_F32, 2, dims, &x), CASTOR_OK);
  ck_assert_int_eq(castor_check(m, &o, &x, 1, &r), CASTOR_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(castor_context_last_error(ctx), "error: input 'digits': expected f32[N,784], got f32[2,5]\n");
  castor_tensor *two[2] = {x, x};
  ck_assert_int_eq(castor_check(m, &o, two, 2, &r), CASTOR_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(castor_context_last_error(ctx),
                   "error: program 'mnist_mlp_small' takes 1 input(s) and 1 output(s), got 2 and 1\n");
  castor_tensor_destroy(x);
  ck_assert_int_eq(castor_check(NULL, &o, NULL, 0, &r), CASTOR_ERR_INVALID_ARGUMENT);
  ck_assert_int_eq(castor_check(m, &o, NULL, 0, NULL), CASTOR_ERR_INVALID_ARGUMENT);
  castor_model_destroy(m);
}
END_TEST

/* ---- castor_check_train: gradients against float16's range ---- */

/* dense_1 has no activation, so every gradient of its kernel is non-zero:
 * x * d summed over the batch. */
static const char grad_model[] = "model grads\n"
                                 "x = input(shape=[4])\n"
                                 "h = dense(x, units=3, name=dense_1)\n"
                                 "p = dense(h, units=2, activation=softmax, name=dense_2)\n"
                                 "output p\n";

static castor_model *grad_model_load(void) {
  castor_model *m = NULL;
  castor_status st = castor_model_load_string(ctx, "grads.cast", grad_model, sizeof grad_model - 1, NULL, &m);
  ck_assert_msg(st == CASTOR_OK, "load: %s", castor_context_last_error(ctx));
  return m;
}

/* 8 samples of x uniform in +-[mag, 2 mag) (seeded), labels 0,1,0,1... */
static void grad_data(double mag, castor_tensor **x, castor_tensor **y) {
  int64_t xd[] = {8, 4}, yd[] = {8};
  ck_assert_int_eq(castor_tensor_create(ctx, CASTOR_F32, 2, xd, x), CASTOR_OK);
  ck_assert_int_eq(castor_tensor_create(ctx, CASTOR_I32, 1, yd, y), CASTOR_OK);
  float *xv = castor_tensor_data(*x);
  int32_t *yv = castor_tensor_data(*y);
  uint64_t s = 12345;
  for (int i = 0; i < 32; i++) {
    s = s * 6364136223846793005u + 1442695040888963407u;
    double u = (double)(s >> 11) * 0x1p-53;
    xv[i] = (float)((i % 3 ? 1 : -1) * mag * (1 + u));
  }
  for (int i = 0; i < 8; i++) yv[i] = i % 2;
}

static castor_check_report *check_train(castor_model *m, double mag, const char *loss_scale) {
  castor_tensor *x, *y;
  grad_data(mag, &x, &y);
  castor_train_options to;
  castor_train_options_init(&to);
  to.loss_scale = loss_scale;
  castor_check_report *r = NULL;
  castor_status st = castor_check_train(m, NULL, &to, x, y, &r);
  ck_assert_msg(st == CASTOR_OK, "castor_check_train: %s", castor_context_last_error(ctx));
  castor_tensor_destroy(x), castor_tensor_destroy(y);
  return r;
}

static castor_check_grad_layer grad_layer(castor_check_report *r, int i) {
  castor_check_grad_layer l;
  ck_assert_int_eq(castor_check_report_grad_layer(r, i, &l), CASTOR_OK);
  return l;
}

/* Inputs near 1e-9: the kernels' gradients (x times the output gradient,
 * and h ~ W x times it) are below 2^-25 and flush to zero in float16. The
 * biases' are exactly 0 (the prediction is 1/2 per class and the labels
 * alternate, so the mean of p - t is 0): a zero is no underflow. Times 2^15
 * the kernels' gradients are subnormal, none zero: the default dynamic
 * scale covers it. */
START_TEST(test_train_underflow) {
  castor_model *m = grad_model_load();
  castor_check_report *r = check_train(m, 1e-9, NULL);
  ck_assert_int_eq(castor_check_report_num_grad_layers(r), 2);
  castor_check_grad_layer l1 = grad_layer(r, 0), l2 = grad_layer(r, 1);
  ck_assert_str_eq(l1.layer, "dense_1");
  ck_assert_str_eq(l2.layer, "dense_2");
  ck_assert_int_eq(l1.numel, 15); /* kernel 4x3 + bias 3 */
  ck_assert_int_eq(l2.numel, 8);  /* kernel 3x2 + bias 2 */
  ck_assert_msg(l1.zero == 12 && l1.scaled_zero == 0 && l1.scaled_overflow == 0, "dense_1: %lld %lld %lld",
                (long long)l1.zero, (long long)l1.scaled_zero, (long long)l1.scaled_overflow);
  ck_assert_msg(l2.zero == 6 && l2.scaled_zero == 0, "dense_2: %lld %lld", (long long)l2.zero,
                (long long)l2.scaled_zero);
  ck_assert_msg(l1.max_abs < 1e-1 && l1.min_abs > 0 && l1.min_abs < 0x1p-25, "dense_1 range %g %g", l1.max_abs,
                l1.min_abs);
  castor_check_summary s;
  castor_check_report_summary(r, &s);
  ck_assert_int_eq(s.train, 1);
  ck_assert_int_eq(s.verdict, CASTOR_CHECK_OK);
  ck_assert_int_eq(s.scaling_needed, 1);
  ck_assert_double_eq(s.loss_scale, 32768);
  ck_assert_str_eq(s.train_verdict, "loss scaling needed: 80.0% of dense_1's gradients flush to zero unscaled, "
                                    "0% scaled at 2^15; a fixed scale from 2^11 to 2^47 would do on this batch");
  const char *text = castor_check_report_format(r, CASTOR_CHECK_TEXT);
  ck_assert_msg(strstr(text, "\ndense_1          15        ") && strstr(text, "| 80.0%    "), "%s", text);
  const char *json = castor_check_report_format(r, CASTOR_CHECK_JSON);
  ck_assert_msg(strstr(json, "\"layer\": \"dense_1\", \"numel\": 15, ") &&
                    strstr(json, "\"zero\": 12, ") && strstr(json, "\"scaling_needed\": true"),
                "%s", json);
  castor_check_report_destroy(r);
  /* without a scale the same gradients stay flushed: the verdict is off */
  r = check_train(m, 1e-9, "none");
  castor_check_report_summary(r, &s);
  ck_assert_int_eq(s.verdict, CASTOR_CHECK_OFF);
  ck_assert_int_eq(grad_layer(r, 0).scaled_zero, 12);
  ck_assert_msg(strstr(s.train_verdict, "80.0% scaled at 1 (dense_1: 80.0%)"), "%s", s.train_verdict);
  castor_check_report_destroy(r);
  /* inputs near 1e-14: even 2^15 leaves the kernels' gradients at zero */
  r = check_train(m, 1e-14, NULL);
  castor_check_report_summary(r, &s);
  ck_assert_int_eq(s.verdict, CASTOR_CHECK_OFF);
  ck_assert_int_eq(grad_layer(r, 0).scaled_zero, 12);
  ck_assert_int_eq(grad_layer(r, 1).scaled_zero, 6);
  castor_check_report_destroy(r);
  castor_model_destroy(m);
}
END_TEST

/* Inputs in +-[0.5, 1): no gradient flushes unscaled; 2^15 overflows none;
 * a scale of 1e9 overflows the largest. */
START_TEST(test_train_healthy) {
  castor_model *m = grad_model_load();
  castor_check_report *r = check_train(m, 0.5, NULL);
  castor_check_summary s;
  castor_check_report_summary(r, &s);
  ck_assert_int_eq(s.verdict, CASTOR_CHECK_OK);
  ck_assert_int_eq(s.scaling_needed, 0);
  for (int i = 0; i < 2; i++) {
    castor_check_grad_layer l = grad_layer(r, i);
    ck_assert_msg(!l.zero && !l.subnormal && !l.scaled_zero && !l.scaled_overflow, "%s", l.layer);
  }
  ck_assert_msg(!strncmp(s.train_verdict, "no scaling needed: no gradient flushes to zero in float16 unscaled; a "
                                          "fixed scale from 2^0 to 2^", 95),
                "%s", s.train_verdict);
  ck_assert_msg(s.fixed_scale_min == 1 && s.fixed_scale_max >= 32768, "%g %g", s.fixed_scale_min, s.fixed_scale_max);
  castor_check_report_destroy(r);
  r = check_train(m, 0.5, "1e9");
  castor_check_report_summary(r, &s);
  ck_assert_int_eq(s.verdict, CASTOR_CHECK_OFF);
  ck_assert_msg(grad_layer(r, 0).scaled_overflow > 0, "no overflow at 1e9");
  ck_assert_msg(!strncmp(s.train_verdict, "loss scale 1e+09 too large: ", 28), "%s", s.train_verdict);
  castor_check_report_destroy(r);
  castor_model_destroy(m);
}
END_TEST

START_TEST(test_train_bad_input) {
  castor_model *m = grad_model_load();
  castor_tensor *x, *y;
  grad_data(1, &x, &y);
  castor_check_report *r = NULL;
  ((int32_t *)castor_tensor_data(y))[5] = 2;
  ck_assert_int_eq(castor_check_train(m, NULL, NULL, x, y, &r), CASTOR_ERR_INVALID_ARGUMENT);
  ck_assert_ptr_null(r);
  ck_assert_str_eq(castor_context_last_error(ctx), "error: label 2 at index 5 is outside [0, 2)\n");
  ((int32_t *)castor_tensor_data(y))[5] = -1;
  ck_assert_int_eq(castor_check_train(m, NULL, NULL, x, y, &r), CASTOR_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(castor_context_last_error(ctx), "error: label -1 at index 5 is outside [0, 2)\n");
  ck_assert_int_eq(castor_check_train(m, NULL, NULL, x, NULL, &r), CASTOR_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(castor_context_last_error(ctx),
                   "error: castor_check_train: x and y are required (features and targets)\n");
  ck_assert_int_eq(castor_check_train(m, NULL, NULL, x, x, &r), CASTOR_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(castor_context_last_error(ctx), "error: y: input 'targets': expected i32[N], got f32[8,4]\n");
  castor_tensor *x5 = NULL;
  int64_t dims[2] = {8, 5};
  ck_assert_int_eq(castor_tensor_create(ctx, CASTOR_F32, 2, dims, &x5), CASTOR_OK);
  ck_assert_int_eq(castor_check_train(m, NULL, NULL, x5, y, &r), CASTOR_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(castor_context_last_error(ctx), "error: x: input 'x': expected f32[N,4], got f32[8,5]\n");
  castor_train_options to;
  castor_train_options_init(&to);
  to.loss_scale = "-3";
  ck_assert_int_eq(castor_check_train(m, NULL, &to, x, y, &r), CASTOR_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(castor_context_last_error(ctx),
                   "error: loss scale '-3' is not dynamic, none or a positive number\n");
  castor_tensor_destroy(x5), castor_tensor_destroy(x), castor_tensor_destroy(y);
  castor_model_destroy(m);
}
END_TEST

int main(void) {
  Suite *s = suite_create("check");
  TCase *tc = tcase_create("check");
  tcase_set_timeout(tc, 300);
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_loop_test(tc, test_overflow, 0, 2);
  tcase_add_loop_test(tc, test_underflow, 0, 2);
  tcase_add_loop_test(tc, test_logits, 0, 2);
  tcase_add_loop_test(tc, test_nan_input, 0, 2);
  tcase_add_loop_test(tc, test_healthy_every_policy, 0, 5);
  tcase_add_test(tc, test_layer_filter);
  tcase_add_test(tc, test_bad_input);
  tcase_add_test(tc, test_train_underflow);
  tcase_add_test(tc, test_train_healthy);
  tcase_add_test(tc, test_train_bad_input);
  suite_add_tcase(s, tc);
  return check_run(s);
}
