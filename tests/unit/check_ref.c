/* SPDX-License-Identifier: Apache-2.0 */
/*
 * check_ref.c: Check suite of the float64 reference interpreter (tests/ref),
 * the oracle of the numeric tests: small graphs built with ir_build_* run on
 * hand-picked inputs and compared with values worked out by hand (or with
 * libm in double), plus the storage rounding and the comparison helpers.
 */
#include "ir/ir.h"
#include "util/half.h"
#include "tests/ref/ref.h"

#include <check.h>

#include "tests/unit/test_support.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ck_assert_msg marks a checkpoint on every call; cheap in hot loops. */
#define EXPECT(cond, ...)                    \
  do {                                       \
    if (!(cond)) ck_abort_msg(__VA_ARGS__);  \
  } while (0)

static const diag_loc noloc = {NULL, 0, 0};

static ir_type ty2(ir_dtype dt, int64_t d0, int64_t d1) { return (ir_type){dt, 2, {d0, d1}}; }
static ir_type ty1(ir_dtype dt, int64_t d0) { return (ir_type){dt, 1, {d0}}; }

/* Runs g on one input, checks success, returns output k's array. */
static double **run(const ir_graph *g, int64_t batch, const double *const *inputs) {
  double **outs = calloc((size_t)g->n_outputs + 1, sizeof *outs);
  char err[256] = "";
  ck_assert_msg(ref_run(g, batch, inputs, outs, err, sizeof err), "ref_run: %s", err);
  return outs;
}

static void free_outs(const ir_graph *g, double **outs) {
  ref_outputs_free(outs, g->n_outputs);
  free(outs);
}

/* |got - want| <= tol * max(|want|, 1e-300), with context. */
static void expect_near(const char *what, const double *got, const double *want, int n,
                        double tol) {
  for (int i = 0; i < n; i++) {
    bool ok = isinf(want[i]) ? got[i] == want[i]
                             : fabs(got[i] - want[i]) <= tol * fmax(fabs(want[i]), 1e-300);
    ck_assert_msg(ok, "%s[%d]: got %.17g, want %.17g", what, i, got[i], want[i]);
  }
}

START_TEST(test_softmax) {
  ir_graph *g = ir_graph_create("softmax");
  ir_type t = ty2(DT_F32, IR_DIM_BATCH, 2);
  ir_node *x = ir_build_input(g, "x", &t, 0, noloc);
  ir_node *y = ir_build_unary(g, IR_OP_SOFTMAX, "y", x, noloc);
  ir_graph_add_output(g, "y", y);
  /* [0, ln 2] -> [1/3, 2/3]; equal logits -> halves; a large logit does not
   * overflow because the max is subtracted first. */
  const double in[] = {0, log(2.0), 1, 1, 1000, 0};
  const double *inputs[] = {in};
  double **outs = run(g, 3, inputs);
  const double want[] = {1.0 / 3, 2.0 / 3, 0.5, 0.5, 1, exp(-1000.0)};
  expect_near("softmax", outs[0], want, 6, 1e-15);
  free_outs(g, outs);
  ir_graph_destroy(g);
}
END_TEST

START_TEST(test_dense_relu) {
  static const float w[] = {1, 2, 3, 4, 5, 6};
  static const float b[] = {0.5f, -100};
  ir_graph *g = ir_graph_create("dense");
  ir_type tx = ty2(DT_F32, IR_DIM_BATCH, 3), tw = ty2(DT_F32, 3, 2),
          tb = ty1(DT_F32, 2);
  ir_node *x = ir_build_input(g, "x", &tx, 0, noloc);
  ir_node *k = ir_build_const(g, "d.kernel", &tw, "d.kernel", w, noloc);
  ir_node *bias = ir_build_const(g, "d.bias", &tb, "d.bias", b, noloc);
  ir_node *mm = ir_build_matmul(g, "mm", x, k, DT_F32, noloc);
  ir_node *pre = ir_build_binary(g, IR_OP_ADD, "pre", mm, bias, noloc);
  ir_node *y = ir_build_unary(g, IR_OP_RELU, "y", pre, noloc);
  ir_graph_add_output(g, "y", y);
  ir_graph_add_output(g, "pre", pre);
  ir_graph_add_output(g, "y_again", y);
  ir_graph_add_output(g, "x", x);
  const double in[] = {1, 1, 1, 1, 0, -1, 0.5, 0.25, 2};
  const double *inputs[] = {in};
  double **outs = run(g, 3, inputs);
  const double want_pre[] = {9.5, -88, -3.5, -104, 11.75, -86};
  const double want_y[] = {9.5, 0, 0, 0, 11.75, 0};
  expect_near("pre", outs[1], want_pre, 6, 0);
  expect_near("y", outs[0], want_y, 6, 0);
  expect_near("y_again", outs[2], want_y, 6, 0);
  ck_assert_ptr_ne(outs[0], outs[2]); /* each output is its own array */
  expect_near("x", outs[3], in, 9, 0);
  free_outs(g, outs);

  /* batch 0: empty outputs, still success */
  outs = run(g, 0, inputs);
  free_outs(g, outs);
  ir_graph_destroy(g);
}
END_TEST

START_TEST(test_unary_and_binary) {
  static const float s[] = {2, -1, 0.5f, 4};
  ir_graph *g = ir_graph_create("eltwise");
  ir_type t = ty2(DT_F32, IR_DIM_BATCH, 4), ts = ty1(DT_F32, 4);
  ir_node *x = ir_build_input(g, "x", &t, 0, noloc);
  ir_node *sc = ir_build_const(g, "s", &ts, "s", s, noloc);
  ir_graph_add_output(g, "sigmoid", ir_build_unary(g, IR_OP_SIGMOID, "sg", x, noloc));
  ir_graph_add_output(g, "tanh", ir_build_unary(g, IR_OP_TANH, "th", x, noloc));
  ir_graph_add_output(g, "gelu", ir_build_unary(g, IR_OP_GELU, "ge", x, noloc));
  ir_graph_add_output(g, "mul_bcast", ir_build_binary(g, IR_OP_MUL, "mb", x, sc, noloc));
  ir_graph_add_output(g, "mul", ir_build_binary(g, IR_OP_MUL, "mf", x, x, noloc));
  ir_graph_add_output(g, "add", ir_build_binary(g, IR_OP_ADD, "af", x, x, noloc));
  const double l3 = log(3.0);
  const double in[] = {0, l3, 1, -1};
  const double *inputs[] = {in};
  double **outs = run(g, 1, inputs);
  const double sig[] = {0.5, 0.75, 1 / (1 + exp(-1.0)), 1 / (1 + exp(1.0))};
  const double th[] = {0, 0.8, tanh(1.0), -tanh(1.0)};
  /* gelu(x) = x Phi(x): Phi(1) = 0.8413447460685429 */
  const double ge[] = {0, 0.5 * l3 * erfc(-l3 / sqrt(2.0)), 0.8413447460685429,
                       -0.15865525393145707};
  const double mb[] = {0, -l3, 0.5, -4};
  const double mf[] = {0, l3 * l3, 1, 1};
  const double af[] = {0, 2 * l3, 2, -2};
  expect_near("sigmoid", outs[0], sig, 4, 1e-15);
  expect_near("tanh", outs[1], th, 4, 1e-15);
  expect_near("gelu", outs[2], ge, 4, 1e-15);
  expect_near("mul_bcast", outs[3], mb, 4, 0);
  expect_near("mul", outs[4], mf, 4, 0);
  expect_near("add", outs[5], af, 4, 0);
  free_outs(g, outs);
  ir_graph_destroy(g);
}
END_TEST

/* Casts round to the target dtype in one step from double, and every value
 * of a 16-bit dtype is stored rounded. */
START_TEST(test_casts_and_storage_rounding) {
  ir_graph *g = ir_graph_create("casts");
  ir_type t = ty2(DT_F32, IR_DIM_BATCH, 4);
  ir_node *x = ir_build_input(g, "x", &t, 0, noloc);
  ir_node *h = ir_build_cast(g, "h", x, DT_F16, noloc);
  ir_node *hr = ir_build_unary(g, IR_OP_RELU, "hr", h, noloc);
  ir_graph_add_output(g, "f16", ir_build_cast(g, "h32", hr, DT_F32, noloc));
  ir_node *b = ir_build_cast(g, "b", x, DT_BF16, noloc);
  ir_graph_add_output(g, "bf16", ir_build_cast(g, "b32", b, DT_F32, noloc));
  ir_graph_add_output(g, "f32", ir_build_cast(g, "f", x, DT_F32, noloc));
  ir_graph_add_output(g, "x", x); /* f32 values are not rounded */
  const double in[] = {1 + 0x1p-11 + 0x1p-40, 65520, 1 + 0x1p-8 + 0x1p-40, 1e-8};
  const double *inputs[] = {in};
  double **outs = run(g, 1, inputs);
  /* f16: the tie plus 2^-40 rounds up (through f32 it would tie to 1.0);
   * 65520 overflows; 1e-8 is below half the smallest subnormal. */
  const double w16[] = {1 + 0x1p-10, INFINITY, 1 + 0x1p-8, 0};
  /* bf16 (one rounding from double; ml_dtypes' astype goes through f32 and
   * gives 1.0 for the third) */
  const double wb[] = {1, 65536, 1 + 0x1p-7, 172 * 0x1p-34};
  const double w32[] = {(float)in[0], 65520, (float)in[2], (float)1e-8};
  expect_near("f16", outs[0], w16, 4, 0);
  expect_near("bf16", outs[1], wb, 4, 0);
  expect_near("f32", outs[2], w32, 4, 0);
  expect_near("x", outs[3], in, 4, 0);
  free_outs(g, outs);
  ir_graph_destroy(g);
}
END_TEST

/* A 16-bit input, 16-bit weights and a 16-bit matmul result. */
START_TEST(test_f16_matmul) {
  static const uint16_t w16[] = {0x3c00, 0x4000}; /* [1, 2] */
  static const uint16_t wb[] = {0x3f80, 0xc000};  /* bf16 [1, -2] */
  ir_graph *g = ir_graph_create("f16");
  ir_type tx = ty2(DT_F16, IR_DIM_BATCH, 2), tw = ty2(DT_F16, 2, 1);
  ir_node *x = ir_build_input(g, "x", &tx, 0, noloc);
  ir_node *w = ir_build_const(g, "w", &tw, "w", w16, noloc);
  ir_node *y = ir_build_matmul(g, "y", x, w, DT_F32, noloc);
  ir_graph_add_output(g, "y", ir_build_cast(g, "y32", y, DT_F32, noloc));
  ir_type txb = ty2(DT_BF16, IR_DIM_BATCH, 2), twb = ty2(DT_BF16, 2, 1);
  ir_node *xb = ir_build_cast(g, "xb", ir_build_cast(g, "x32", x, DT_F32, noloc),
                              DT_BF16, noloc);
  ck_assert(ir_type_eq(&xb->type, &txb));
  ir_node *wbn = ir_build_const(g, "wb", &twb, "wb", wb, noloc);
  ir_graph_add_output(g, "yb", ir_build_matmul(g, "yb", xb, wbn, DT_F32, noloc));
  const double in[] = {1.0 / 3, 3};
  const double *inputs[] = {in};
  double **outs = run(g, 1, inputs);
  /* x[0] is stored as f16 0x3555 = 0.333251953125; 0.333251953125 + 6 =
   * 6.333251953125 is stored as f16 6.33203125 (quantum 2^-8 in [4, 8)). */
  ck_assert_msg(outs[0][0] == 6.33203125, "y = %.17g", outs[0][0]);
  /* bf16: 0.333251953125 -> 0.333984375 (0x3eab); 0.333984375 - 6 =
   * -5.666015625 -> bf16 -5.65625 (quantum 2^-5 in [4, 8)) */
  ck_assert_msg(outs[1][0] == -5.65625, "yb = %.17g", outs[1][0]);
  free_outs(g, outs);
  ir_graph_destroy(g);
}
END_TEST

/* ref_round agrees with half.h on every float32 value (one rounding either
 * way), and is (double)(float)x for f32. */
START_TEST(test_round_matches_half) {
  rng r;
  rng_init(&r, 5);
  for (int i = 0; i < 200000; i++) {
    uint32_t u = (uint32_t)rng_next(&r);
    float x;
    memcpy(&x, &u, 4);
    if (isnan(x)) continue;
    double h = ref_round(x, DT_F16), b = ref_round(x, DT_BF16);
    double want_h = half_f16_to_f32(half_f32_to_f16(x));
    double want_b = half_bf16_to_f32(half_f32_to_bf16(x));
    EXPECT(h == want_h && !signbit(h) == !signbit(want_h), "f16(%a) = %a, want %a",
                  (double)x, h, want_h);
    EXPECT(b == want_b && !signbit(b) == !signbit(want_b), "bf16(%a) = %a, want %a",
                  (double)x, b, want_b);
  }
  ck_assert(ref_round(0.1, DT_F32) == (double)0.1f);
  ck_assert(ref_round(1e39, DT_F32) == INFINITY);
  ck_assert(isnan(ref_round(NAN, DT_F16)));
  ck_assert(ref_round(-70000, DT_F16) == -INFINITY);
  ck_assert(ref_round(65519.99, DT_F16) == 65504);
  ck_assert(ref_round(0x1p-25, DT_F16) == 0);
  ck_assert(ref_round(0x1p-25 + 0x1p-60, DT_F16) == 0x1p-24);
}
END_TEST

/* A bf16 average pool rounds its running sum to bf16 after each tap
 * (ir_ops.def, Keras on JAX), unless its window is the whole image (a
 * global average pooling sums in f32). 1 + 2^-8 is a bf16 tie that rounds
 * to 1, so [1, 2^-8, 2^-8] sums to 1 tap by tap and to 1 + 2^-7 at once. */
static double bf16_avg_pool(int64_t W, const double *in) {
  ir_graph *g = ir_graph_create("avgpool16");
  ir_type t = {DT_F32, 4, {IR_DIM_BATCH, 1, W, 1}};
  ir_node *x = ir_build_input(g, "x", &t, 0, noloc);
  ir_node *h = ir_build_cast(g, "h", x, DT_BF16, noloc);
  ir_attr attr = {.pool = {2, {1, 3}}, .strides = {2, {1, 1}}, .pads = {4, {0}}};
  ir_node *y = ir_build_op(g, IR_OP_AVG_POOL2D, "y", (ir_node *[]){h}, 1, &attr, noloc);
  ck_assert_msg(y != NULL && y->type.dtype == DT_BF16, "avg_pool2d");
  ir_graph_add_output(g, "y", ir_build_cast(g, "y32", y, DT_F32, noloc));
  const double *inputs[] = {in};
  double **outs = run(g, 1, inputs);
  double first = outs[0][0];
  free_outs(g, outs);
  ir_graph_destroy(g);
  return first;
}

START_TEST(test_avg_pool_bf16_sum) {
  const double in[] = {1, 0x1p-8, 0x1p-8, 0x1p-8};
  /* a 1x3 window over 4 columns: per tap, 1/3 in bf16 */
  ck_assert_double_eq(bf16_avg_pool(4, in), 0x1.56p-2);
  /* the window is the whole [1, 3] image: (1 + 2^-7) / 3, 172 * 2^-9, exact in bf16 */
  ck_assert_double_eq(bf16_avg_pool(3, in), 172 * 0x1p-9);
}
END_TEST

START_TEST(test_errors) {
  char err[256];
  double *outs[2] = {0};
  ir_graph *g = ir_graph_create("bad");
  ir_type tx = ty2(DT_F32, IR_DIM_BATCH, 2), tw = ty2(DT_F32, 2, 2);
  ir_node *x = ir_build_input(g, "x", &tx, 0, noloc);
  ir_node *w = ir_build_const(g, "k", &tw, "dense.kernel", NULL, noloc);
  ir_graph_add_output(g, "y", ir_build_matmul(g, "y", x, w, DT_F32, noloc));
  const double in[] = {1, 2};
  const double *inputs[] = {in};
  ck_assert(!ref_run(g, 1, inputs, outs, err, sizeof err));
  ck_assert_str_eq(err, "const %k (dense.kernel) has no data");
  ck_assert_ptr_null(outs[0]);
  const double *none[] = {NULL};
  ck_assert(!ref_run(g, 1, none, outs, err, sizeof err));
  ck_assert_str_eq(err, "input %x: no data for input number 0");
  ck_assert(!ref_run(g, -1, inputs, outs, err, sizeof err));
  ck_assert_str_eq(err, "batch -1 is negative");
  ir_graph_destroy(g);
}
END_TEST

START_TEST(test_compare) {
  const float got[] = {1.0f, 2.5f, -3.0f, 0.0f};
  const double want[] = {1.0, 2.0, -3.0, 1e-9};
  ref_cmp c = ref_compare_rel(got, want, 4, 1e-3);
  ck_assert_int_eq(c.index, 1);
  ck_assert(c.error == 0.25 && c.got == 2.5 && c.want == 2.0);
  /* the floor bounds the relative error near zero: 1e-9 / max(1e-9, 1e-3) */
  ck_assert(ref_max_rel_error(got + 3, want + 3, 1, 1e-3) == 1e-9 / 1e-3);
  c = ref_compare_normalized(got, want, 4);
  ck_assert_int_eq(c.index, 1);
  ck_assert(c.error == 0.5 / 3.0);
  ck_assert(ref_normalized_error(got, want, 4) == 0.5 / 3.0);
  char buf[128];
  ck_assert_str_eq(ref_cmp_str(&c, buf, sizeof buf),
                   "error 0.167 at [1]: got 2.5, want 2");
  /* NaN and infinities: matching ones count 0, others infinitely */
  const float g2[] = {NAN, INFINITY, 1.0f};
  const double w2[] = {NAN, INFINITY, 1.0};
  ck_assert(ref_normalized_error(g2, w2, 3) == 0);
  ck_assert(ref_max_rel_error(g2, w2, 3, 1e-6) == 0);
  const double w3[] = {0.0, INFINITY, 1.0};
  c = ref_compare_rel(g2, w3, 3, 1e-6);
  ck_assert(isinf(c.error) && c.index == 0);
  const float g4[] = {0.0f, -INFINITY, 1.0f};
  c = ref_compare_normalized(g4, w2 + 0, 3);
  ck_assert(isinf(c.error) && c.index == 0);
  c = ref_compare_rel(got, want, 0, 1);
  ck_assert(c.error == 0 && c.index == -1);
  ck_assert_str_eq(ref_cmp_str(&c, buf, sizeof buf), "error 0 (no elements)");

  const float f[] = {0.5f, -1.25f};
  double *d = ref_from_f32(f, 2);
  ck_assert(d[0] == 0.5 && d[1] == -1.25);
  free(d);
  const uint16_t h[] = {0x3c00, 0xc100};
  d = ref_from_f16(h, 2);
  ck_assert(d[0] == 1 && d[1] == -2.5);
  free(d);
  const uint16_t bb[] = {0x3f80, 0xc020};
  d = ref_from_bf16(bb, 2);
  ck_assert(d[0] == 1 && d[1] == -2.5);
  free(d);
}
END_TEST

static Suite *ref_suite(void) {
  Suite *s = suite_create("ref");
  TCase *tc = tcase_create("interpreter");
  tcase_add_test(tc, test_softmax);
  tcase_add_test(tc, test_dense_relu);
  tcase_add_test(tc, test_unary_and_binary);
  tcase_add_test(tc, test_casts_and_storage_rounding);
  tcase_add_test(tc, test_f16_matmul);
  tcase_add_test(tc, test_round_matches_half);
  tcase_add_test(tc, test_avg_pool_bf16_sum);
  tcase_add_test(tc, test_errors);
  suite_add_tcase(s, tc);
  tc = tcase_create("compare");
  tcase_add_test(tc, test_compare);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  return check_run(ref_suite());
}
