/* SPDX-License-Identifier: Apache-2.0 */
/*
 * check_images.c: convolutional networks: a static program whose rows are
 * images computed apart runs one image at a time (runtime/program.c, by
 * image; rt_program.images).
 *
 * ir_graph_rows_separate says which graphs compute the rows of their
 * dimension 0 apart: a small MobileNet-like CNN does; a reduction over the
 * batch, a transpose that moves it, a matmul whose rows are mixed by a
 * constant, a softmax over a rank-1 batch, a value computed from constants
 * alone, one image, and a symbolic batch do not. The CNN then runs by image
 * on 1, 2 and 3 threads (each thread its own images and workspace) with
 * the same bits as launch by launch (a profiled run) and as each other,
 * against the float64 reference.
 */
#include <check.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/unit/test_support.h"
#include "codegen/cg_backend.h"
#include "tests/ref/ref.h"
#include "util/util.h"

static const diag_loc no_loc = {0};

enum { N = 8, H = 9, W = 10, C = 8, F = 16, O = 24, K = 5 };

static ir_node *weight(ir_graph *g, const char *name, int rank, const int64_t *dims, rng *r) {
  ir_type t = {DT_F32, rank, {0}};
  int64_t n = 1;
  for (int i = 0; i < rank; i++) t.dims[i] = dims[i], n *= dims[i];
  float *v = arena_alloc(g->arena, (size_t)n * 4);
  for (int64_t i = 0; i < n; i++) v[i] = rng_uniform_f32(r, -0.5f, 0.5f);
  return ir_build_const(g, name, &t, name, v, no_loc);
}

static ir_attr conv_attr(int64_t k, int64_t s) {
  int64_t p = k / 2;
  return (ir_attr){.acc = DT_F32, .strides = {2, {s, s}}, .dilations = {2, {1, 1}}, .pads = {4, {p, p, p, p}}};
}

/* x [n, H, W, C] -> conv 3x3 + b, relu -> depthwise 3x3 stride 2, clip 0..6
 * -> conv 1x1 -> mean over H, W -> dense K -> softmax: MobileNet's shape. */
static ir_graph *cnn(int64_t n) {
  ir_graph *g = ir_graph_create("by_image");
  rng r;
  rng_init(&r, 7);
  ir_type xt = {DT_F32, 4, {n, H, W, C}};
  ir_node *x = ir_build_input(g, "x", &xt, 0, no_loc);
  ir_attr a3 = conv_attr(3, 1), dw = conv_attr(3, 2), a1 = conv_attr(1, 1);
  ir_node *y = ir_build_op(g, IR_OP_CONV2D, "conv", (ir_node *[]){x, weight(g, "w0", 4, (int64_t[]){3, 3, C, F}, &r)},
                           2, &a3, no_loc);
  y = ir_build_binary(g, IR_OP_ADD, "conv.bias", y, weight(g, "b0", 1, (int64_t[]){F}, &r), no_loc);
  y = ir_build_unary(g, IR_OP_RELU, "conv.relu", y, no_loc);
  y = ir_build_op(g, IR_OP_GROUP_CONV2D, "dw", (ir_node *[]){y, weight(g, "w1", 4, (int64_t[]){3, 3, 1, F}, &r)}, 2,
                  &dw, no_loc);
  ir_attr clip = {.min_value = 0, .max_value = 6};
  y = ir_build_op(g, IR_OP_CLIP, "dw.clip", &y, 1, &clip, no_loc);
  y = ir_build_op(g, IR_OP_CONV2D, "pw", (ir_node *[]){y, weight(g, "w2", 4, (int64_t[]){1, 1, F, O}, &r)}, 2, &a1,
                  no_loc);
  ir_attr mean = {.axes = {2, {1, 2}}, .keepdims = 0};
  y = ir_build_op(g, IR_OP_REDUCE_MEAN, "pool", &y, 1, &mean, no_loc);
  y = ir_build_matmul(g, "dense", y, weight(g, "w3", 2, (int64_t[]){O, K}, &r), DT_F32, no_loc);
  y = ir_build_op(g, IR_OP_SOFTMAX, "softmax", &y, 1, &(ir_attr){0}, no_loc);
  ir_graph_add_output(g, "y", y);
  ir_graph_renumber(g);
  return g;
}

/* ir_graph_rows_separate of g with its output `out` (g destroyed). */
static int64_t rows_of(ir_graph *g, ir_node *out) {
  ir_graph_add_output(g, "y", out);
  ir_graph_renumber(g);
  int64_t rows = ir_graph_rows_separate(g);
  ir_graph_destroy(g);
  return rows;
}

START_TEST(test_rows_separate) {
  ir_graph *g = cnn(N);
  ck_assert_int_eq(ir_graph_rows_separate(g), N);
  ir_graph_destroy(g);
  g = cnn(1); /* one image: nothing to run apart */
  ck_assert_int_eq(ir_graph_rows_separate(g), 0);
  ir_graph_destroy(g);
  g = cnn(IR_DIM_BATCH); /* a symbolic batch: its launches are batched already */
  ck_assert_int_eq(ir_graph_rows_separate(g), 0);
  ir_graph_destroy(g);

  ir_type xt = {DT_F32, 2, {N, 4}}, x1 = {DT_F32, 1, {N}};
  rng r;
  rng_init(&r, 3);
  /* a sum over the batch, kept as [1, 4]: row 0 reads every row */
  g = ir_graph_create("sum0");
  ir_node *x = ir_build_input(g, "x", &xt, 0, no_loc);
  ir_attr sum0 = {.axes = {1, {0}}, .keepdims = 1};
  ck_assert_int_eq(rows_of(g, ir_build_op(g, IR_OP_REDUCE_SUM, "s", &x, 1, &sum0, no_loc)), 0);
  /* the same over dimension 1: each row its own */
  g = ir_graph_create("sum1");
  x = ir_build_input(g, "x", &xt, 0, no_loc);
  ir_attr sum1 = {.axes = {1, {-1}}, .keepdims = 1};
  ck_assert_int_eq(rows_of(g, ir_build_op(g, IR_OP_REDUCE_SUM, "s", &x, 1, &sum1, no_loc)), N);
  /* x^T x: the transpose moves the batch out of dimension 0 */
  g = ir_graph_create("gram");
  x = ir_build_input(g, "x", &xt, 0, no_loc);
  ir_attr perm = {.perm = {2, {1, 0}}};
  ir_node *xtr = ir_build_op(g, IR_OP_TRANSPOSE, "xt", &x, 1, &perm, no_loc);
  ck_assert_int_eq(rows_of(g, ir_build_matmul(g, "gram", xtr, x, DT_F32, no_loc)), 0);
  /* c x with a constant c [N, N]: N rows again, each mixing all of x's */
  g = ir_graph_create("mix");
  x = ir_build_input(g, "x", &xt, 0, no_loc);
  ir_node *c = weight(g, "c", 2, (int64_t[]){N, N}, &r);
  ck_assert_int_eq(rows_of(g, ir_build_matmul(g, "cx", c, x, DT_F32, no_loc)), 0);
  /* x w: each row its own */
  g = ir_graph_create("dense");
  x = ir_build_input(g, "x", &xt, 0, no_loc);
  ck_assert_int_eq(rows_of(g, ir_build_matmul(g, "xw", x, weight(g, "w", 2, (int64_t[]){4, 3}, &r), DT_F32, no_loc)),
                   N);
  /* x [N, N] + v [N]: v broadcasts along x's last dimension, row n reads all of v */
  g = ir_graph_create("broadcast_rows");
  x = ir_build_input(g, "x", &(ir_type){DT_F32, 2, {N, N}}, 0, no_loc);
  ir_node *v = ir_build_input(g, "v", &x1, 1, no_loc);
  ck_assert_int_eq(rows_of(g, ir_build_binary(g, IR_OP_ADD, "y", x, v, no_loc)), 0);
  /* softmax of a rank-1 batch: over the batch itself */
  g = ir_graph_create("softmax1");
  x = ir_build_input(g, "x", &x1, 0, no_loc);
  ck_assert_int_eq(rows_of(g, ir_build_op(g, IR_OP_SOFTMAX, "p", &x, 1, &(ir_attr){0}, no_loc)), 0);
  /* a value of N rows from constants alone, added to x */
  g = ir_graph_create("const_rows");
  x = ir_build_input(g, "x", &xt, 0, no_loc);
  c = weight(g, "c", 2, (int64_t[]){N, 4}, &r);
  ir_node *cc = ir_build_binary(g, IR_OP_MUL, "cc", c, c, no_loc);
  ck_assert_int_eq(rows_of(g, ir_build_binary(g, IR_OP_ADD, "y", x, cc, no_loc)), 0);
  /* the same constant added directly: read whole, fine */
  g = ir_graph_create("const_add");
  x = ir_build_input(g, "x", &xt, 0, no_loc);
  c = weight(g, "c", 2, (int64_t[]){N, 4}, &r);
  ck_assert_int_eq(rows_of(g, ir_build_binary(g, IR_OP_ADD, "y", x, c, no_loc)), N);
}
END_TEST

/* The CNN on `threads` threads: its run (by image) and a profiled run
 * (launch by launch) into out[0] and out[1]. */
static void run_cnn(const ir_graph *g, int threads, const float *hx, float *out[2], int64_t ny) {
  diag_sink *d = diag_sink_create();
  cg_backend_options bo;
  cg_backend_options_init(&bo);
  bo.threads = threads;
  cg_exec *ex = cg_backend_compile(&cg_backend_cpu, g, &bo, d);
  ck_assert_msg(ex, "compile: %s", diag_text(d));
  ck_assert_int_eq(ex->desc->images, N);
  ck_assert_int_eq(rt_program_workspaces(ex->desc, threads), threads);
  void *outs[] = {out[0]};
  memset(out[0], 0xff, (size_t)ny * 4);
  ck_assert_msg(cg_backend_cpu.run(ex, N, (const void *[]){hx}, outs, d), "run: %s", diag_text(d));
  ck_assert_msg(cg_backend_cpu.run(ex, N, (const void *[]){hx}, outs, d), "second run: %s", diag_text(d));
  rt_profile prof;
  rt_profile_init(&prof);
  outs[0] = out[1];
  memset(out[1], 0xff, (size_t)ny * 4);
  ck_assert_msg(cg_backend_cpu.profile(ex, N, (const void *[]){hx}, outs, &prof, d), "profile: %s", diag_text(d));
  ck_assert_int_eq((int64_t)prof.events.len, ex->desc->n_launches + 1); /* launch by launch, then the run */
  rt_profile_fini(&prof);
  cg_exec_destroy(ex);
  diag_sink_destroy(d);
}

START_TEST(test_by_image_run) {
  ir_graph *g = cnn(N);
  int64_t nx = (int64_t)N * H * W * C, ny = (int64_t)N * K;
  float *hx = xmalloc((size_t)nx * 4);
  rng r;
  rng_init(&r, 11);
  for (int64_t i = 0; i < nx; i++) hx[i] = rng_uniform_f32(&r, -1, 1);
  double *rx = ref_from_f32(hx, nx), *want[1] = {NULL};
  char err[256];
  ck_assert_msg(ref_run(g, N, (const double *[]){rx}, want, err, sizeof err), "%s", err);
  float *first = xmalloc((size_t)ny * 4), *out[2] = {xmalloc((size_t)ny * 4), xmalloc((size_t)ny * 4)};
  setenv("CASTOR_PARALLEL_MIN_WORK", "0", 1); /* launch by launch: split even these small launches */
  for (int threads = 1; threads <= 3; threads++) {
    run_cnn(g, threads, hx, out, ny);
    double e = ref_normalized_error(out[0], want[0], ny);
    ck_assert_msg(e <= 1e-6, "by image on %d threads: normalized error %g", threads, e);
    ck_assert_msg(memcmp(out[0], out[1], (size_t)ny * 4) == 0, "%d threads: by image and launch by launch differ",
                  threads);
    if (threads == 1) memcpy(first, out[0], (size_t)ny * 4);
    else ck_assert_msg(memcmp(first, out[0], (size_t)ny * 4) == 0, "1 and %d threads differ", threads);
  }
  unsetenv("CASTOR_PARALLEL_MIN_WORK");
  ref_outputs_free(want, 1);
  free(rx), free(hx), free(first), free(out[0]), free(out[1]);
  ir_graph_destroy(g);
}
END_TEST

static Suite *images_suite(void) {
  Suite *s = suite_create("images");
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_rows_separate);
  tcase_add_test(tc, test_by_image_run);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) { return check_run(images_suite()); }
