/* SPDX-License-Identifier: Apache-2.0 */
/*
 * check_images.c: convolutional networks: a static program whose rows are
 * images computed apart runs its first kernels one image at a time, the
 * rest on the whole batch (runtime/program.c, by image; rt_program.images,
 * image_launches; the cut: cg_plan_cut_images).
 *
 * ir_graph_rows_separate says which graphs compute the rows of their
 * dimension 0 apart: a small MobileNet-like CNN does; a reduction over the
 * batch, a transpose that moves it, a matmul whose rows are mixed by a
 * constant, a softmax over a rank-1 batch, a value computed from constants
 * alone, one image, and a symbolic batch do not. The CNN then runs with
 * every cut at batches 1 to 17 on 1, 2 and 3 threads with the same bits as
 * launch by launch and as each other, against the float64 reference; a CNN
 * with a dense head gets its cut before the dense layers.
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

/* g compiled for the CPU, its first `cut` kernels by image (cut < 0: the
 * chosen cut). */
static cg_exec *compile(const ir_graph *g, int cut, diag_sink *d) {
  cg_backend_options bo;
  cg_backend_options_init(&bo);
  bo.threads = 1;
  bo.cg.force_image_cut = cut >= 0;
  bo.cg.image_cut = cut;
  cg_exec *ex = cg_backend_compile(&cg_backend_cpu, g, &bo, d);
  ck_assert_msg(ex, "compile: %s", diag_text(d));
  return ex;
}

/* ex on `threads` threads into out (ny floats), run twice (the second on
 * the workspaces the first left), or profiled once. */
static void run(cg_exec *ex, int64_t n, int threads, bool profile, const float *hx, float *out, int64_t ny,
                diag_sink *d) {
  ex->threads = threads;
  void *outs[] = {out};
  memset(out, 0xff, (size_t)ny * 4);
  if (profile) {
    rt_profile prof;
    rt_profile_init(&prof);
    ck_assert_msg(cg_backend_cpu.profile(ex, n, (const void *[]){hx}, outs, &prof, d), "profile: %s", diag_text(d));
    /* one event a launch (a launch by image: summed over the passes), then the run */
    ck_assert_int_eq((int64_t)prof.events.len, ex->desc->n_launches + 1);
    for (int i = 0; i < ex->desc->n_launches; i++) ck_assert_int_eq(prof.events.data[i].launch, i);
    rt_profile_fini(&prof);
    return;
  }
  ck_assert_msg(cg_backend_cpu.run(ex, n, (const void *[]){hx}, outs, d), "run: %s", diag_text(d));
  ck_assert_msg(cg_backend_cpu.run(ex, n, (const void *[]){hx}, outs, d), "second run: %s", diag_text(d));
}

static float *random_input(int64_t nx, uint64_t seed) {
  float *hx = xmalloc((size_t)nx * 4);
  rng r;
  rng_init(&r, seed);
  for (int64_t i = 0; i < nx; i++) hx[i] = rng_uniform_f32(&r, -1, 1);
  return hx;
}

/* The CNN at batches 1 to 17, its first 0 (launch by launch), 1, 2, the
 * chosen number and all of its kernels by image, on 1, 2 and 3 threads
 * (each thread its own images from 6 images on, else each launch of a
 * pass split over the threads), and profiled: the same bits everywhere,
 * within 1e-6 of the float64 reference. */
START_TEST(test_by_image_run) {
  setenv("CASTOR_PARALLEL_MIN_WORK", "0", 1); /* split even these small launches over the threads */
  diag_sink *d = diag_sink_create();
  for (int64_t n = 1; n <= 17; n++) {
    ir_graph *g = cnn(n);
    int64_t nx = n * H * W * C, ny = n * K;
    float *hx = random_input(nx, 11 + (uint64_t)n), *first = xmalloc((size_t)ny * 4), *out = xmalloc((size_t)ny * 4);
    double *rx = ref_from_f32(hx, nx), *want[1] = {NULL};
    char err[256];
    ck_assert_msg(ref_run(g, n, (const double *[]){rx}, want, err, sizeof err), "%s", err);
    cg_exec *ex = compile(g, 0, d);
    int n_kernels = ex->desc->n_launches;
    ck_assert_int_eq(ex->desc->images, 0);
    ck_assert(!rt_program_by_image(ex->desc));
    run(ex, n, 1, false, hx, first, ny, d);
    double e = ref_normalized_error(first, want[0], ny);
    ck_assert_msg(e <= 1e-6, "batch %lld launch by launch: normalized error %g", (long long)n, e);
    cg_exec_destroy(ex);
    int cuts[] = {1, 2, -1, n_kernels};
    for (int c = 0; c < 4; c++) {
      ex = compile(g, cuts[c], d);
      const rt_program *p = ex->desc;
      int cut = cuts[c] < 0 ? p->image_launches : cuts[c];
      ck_assert_int_eq(p->images, n >= 2 ? n : 0);
      ck_assert_int_eq(p->image_launches, n >= 2 ? cut : 0);
      if (n >= 2) {
        int64_t ws = 0;
        ck_assert(rt_program_workspace_bytes(p, n, &ws));
        ck_assert_msg(rt_program_pass_bytes(p) <= ws && p->image_slots <= p->n_slots,
                      "batch %lld cut %d: pass %lld, workspace %lld", (long long)n, cut,
                      (long long)rt_program_pass_bytes(p), (long long)ws);
        ck_assert_int_eq(rt_program_workspaces(p, 3), n >= 6 ? 3 : 1);
      }
      for (int threads = 1; threads <= 4; threads++) {
        bool profile = threads == 4;
        run(ex, n, profile ? 2 : threads, profile, hx, out, ny, d);
        ck_assert_msg(memcmp(first, out, (size_t)ny * 4) == 0,
                      "batch %lld, first %d kernels by image, %d threads%s: not launch by launch's bits", (long long)n,
                      cut, profile ? 2 : threads, profile ? " (profiled)" : "");
      }
      cg_exec_destroy(ex);
    }
    ref_outputs_free(want, 1);
    free(rx), free(hx), free(first), free(out);
    ir_graph_destroy(g);
  }
  diag_sink_destroy(d);
  unsetenv("CASTOR_PARALLEL_MIN_WORK");
}
END_TEST

/* The cut: a CNN of 112x112 images (a pass of one image: each pass finds
 * its image at the start of the slots) whose head is a dense layer of
 * 24 x 2048 weights (192 KB) and its classifier: by image, every image would read those weights again,
 * while an image's activations there are 24 + 2048 floats; so the chosen
 * cut puts the dense layers on the whole batch (the kernel of dense1 is the
 * first not by image) and the convolutions by image. */
START_TEST(test_cut_before_dense) {
  enum { n = 6, U = 2048, HH = 112, WW = 112 }; /* 1.2 MB a conv output image: a pass of 1 image */
  ir_graph *g = ir_graph_create("cnn_dense");
  rng r;
  rng_init(&r, 5);
  ir_type xt = {DT_F32, 4, {n, HH, WW, C}};
  ir_node *x = ir_build_input(g, "x", &xt, 0, no_loc);
  ir_attr a3 = conv_attr(3, 1);
  ir_node *y = ir_build_op(g, IR_OP_CONV2D, "conv", (ir_node *[]){x, weight(g, "w0", 4, (int64_t[]){3, 3, C, O}, &r)},
                           2, &a3, no_loc);
  y = ir_build_unary(g, IR_OP_RELU, "conv.relu", y, no_loc);
  ir_attr mean = {.axes = {2, {1, 2}}, .keepdims = 0};
  y = ir_build_op(g, IR_OP_REDUCE_MEAN, "pool", &y, 1, &mean, no_loc);
  y = ir_build_matmul(g, "dense1", y, weight(g, "w1", 2, (int64_t[]){O, U}, &r), DT_F32, no_loc);
  y = ir_build_unary(g, IR_OP_RELU, "dense1.relu", y, no_loc);
  y = ir_build_matmul(g, "dense2", y, weight(g, "w2", 2, (int64_t[]){U, K}, &r), DT_F32, no_loc);
  ir_graph_add_output(g, "y", y);
  ir_graph_renumber(g);
  diag_sink *d = diag_sink_create();
  cg_exec *ex = compile(g, -1, d);
  const rt_program *p = ex->desc;
  int dense1 = -1;
  for (int i = 0; i < p->n_launches; i++)
    if (strstr(p->launches[i].name, ".dense1")) dense1 = i;
  ck_assert_msg(dense1 > 0, "no kernel of dense1");
  ck_assert_int_eq(p->images, n);
  ck_assert_msg(p->image_launches == dense1, "cut after %d kernels, dense1 is kernel %d", p->image_launches, dense1);
  /* the same bits as launch by launch, on 1 and 3 threads */
  int64_t nx = (int64_t)n * HH * WW * C, ny = (int64_t)n * K;
  float *hx = random_input(nx, 17), *a = xmalloc((size_t)ny * 4), *b = xmalloc((size_t)ny * 4);
  run(ex, n, 1, false, hx, a, ny, d);
  run(ex, n, 3, false, hx, b, ny, d);
  ck_assert_msg(memcmp(a, b, (size_t)ny * 4) == 0, "1 and 3 threads differ");
  cg_exec_destroy(ex);
  ex = compile(g, 0, d);
  run(ex, n, 1, false, hx, b, ny, d);
  ck_assert_msg(memcmp(a, b, (size_t)ny * 4) == 0, "not launch by launch's bits");
  cg_exec_destroy(ex);
  free(hx), free(a), free(b);
  diag_sink_destroy(d);
  ir_graph_destroy(g);
}
END_TEST

static Suite *images_suite(void) {
  Suite *s = suite_create("images");
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, 300);
  tcase_add_test(tc, test_rows_separate);
  tcase_add_test(tc, test_by_image_run);
  tcase_add_test(tc, test_cut_before_dense);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) { return check_run(images_suite()); }
