/* SPDX-License-Identifier: Apache-2.0 */
/*
 * check_conv_group.c: grouped and depthwise convolution on the CPU.
 *
 * group_conv2d and its two gradients are maps of the kernel kit
 * (codegen/kernel/cg_index_map.c): each result element one f32 chain in a
 * fixed order; a forward whose groups hold whole vectors of outputs runs
 * on the CPU's direct convolution (cg_conv.c, groups of column blocks),
 * the same chain, alone and with a fused bias and relu. Shapes across the edges of those maps: stride 2, dilation
 * 2, 'same' with odd sizes (Keras's odd pixel at the end), 1x1 and 5x5
 * kernels, 1x1, 2x2 and 3x3 images under 3x3 kernels (most taps in the
 * padding), channels not a multiple of 8, depthwise (one channel a group,
 * depth multipliers 1 and 3) and groups of several channels; f32 and f16;
 * on every CPU path, on 1 and 3 threads (bit-identical), against the
 * float64 reference; the reference's gradients against finite differences
 * of its forward pass.
 */
#include <check.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/unit/test_support.h"
#include "api/internal.h"
#include "codegen/cg_backend.h"
#include "tests/ref/ref.h"
#include "util/half.h"
#include "util/util.h"

static const diag_loc no_loc = {0};

static const struct { const char *cpu, *features; } cpus[] = {
    {NULL, NULL}, {"haswell", "+sse2,+sse4.2,+avx,+avx2,+fma,+f16c"}, {"x86-64", "+sse2"}};
enum { N_CPUS = sizeof cpus / sizeof cpus[0] };
/* the sweeps' counter over (case, CPU path) pairs: the emulated CPU's short
 * form runs one pair in two (test_case_runs); a native run, every pair */
static size_t sweep_k;

typedef struct gconv_case {
  int64_t batch, H, W, C, KH, KW, Cg, O, sh, sw, dh, dw; /* groups C / Cg */
  bool same;
} gconv_case;

/* Keras's 'same' padding along one dimension: the total that keeps
 * ceil(in / stride) outputs, the odd one at the end. */
static void same_pads(int64_t in, int64_t k, int64_t s, int64_t d, int64_t *p0, int64_t *p1) {
  int64_t out = (in + s - 1) / s, span = d * (k - 1) + 1;
  int64_t total = (out - 1) * s + span - in;
  if (total < 0) total = 0;
  *p0 = total / 2, *p1 = total - total / 2;
}

static ir_attr case_attr(const gconv_case *cc, int64_t *oh, int64_t *ow) {
  ir_attr a = {.acc = DT_F32, .strides = {2, {cc->sh, cc->sw}}, .dilations = {2, {cc->dh, cc->dw}}, .pads = {4, {0}}};
  if (cc->same) {
    same_pads(cc->H, cc->KH, cc->sh, cc->dh, &a.pads.v[0], &a.pads.v[1]);
    same_pads(cc->W, cc->KW, cc->sw, cc->dw, &a.pads.v[2], &a.pads.v[3]);
  }
  *oh = ir_conv_out_size(cc->H, cc->KH, cc->sh, cc->dh, a.pads.v[0], a.pads.v[1]);
  *ow = ir_conv_out_size(cc->W, cc->KW, cc->sw, cc->dw, a.pads.v[2], a.pads.v[3]);
  return a;
}

/* y = group_conv2d(x, w), dx = its input gradient of dy, dw its filter
 * gradient: one graph with three outputs, run on every CPU path. */
static void check_case(const gconv_case *cc, bool f16) {
  ir_graph *g = ir_graph_create("gconv");
  ir_dtype dt = f16 ? DT_F16 : DT_F32;
  int64_t N = cc->batch, OH, OW;
  ir_attr a = case_attr(cc, &OH, &OW);
  int64_t nx = N * cc->H * cc->W * cc->C, nw = cc->KH * cc->KW * cc->Cg * cc->O, ny = N * OH * OW * cc->O;
  int64_t cnt[3] = {nx, nw, ny};
  float *h[3];
  uint16_t *e16[3];
  rng r;
  rng_init(&r, 23);
  for (int k = 0; k < 3; k++) {
    h[k] = xmalloc((size_t)cnt[k] * 4), e16[k] = xmalloc((size_t)cnt[k] * 2);
    for (int64_t i = 0; i < cnt[k]; i++) h[k][i] = half_f16_to_f32(e16[k][i] = half_f32_to_f16(rng_uniform_f32(&r, -1, 1)));
  }
  ir_type xt = {dt, 4, {IR_DIM_BATCH, cc->H, cc->W, cc->C}}, wt = {dt, 4, {cc->KH, cc->KW, cc->Cg, cc->O}};
  ir_type yt = {dt, 4, {IR_DIM_BATCH, OH, OW, cc->O}};
  ir_node *x = ir_build_input(g, "x", &xt, 0, no_loc), *dy = ir_build_input(g, "dy", &yt, 1, no_loc);
  ir_node *w = ir_build_const(g, "w", &wt, "w", f16 ? (void *)e16[1] : (void *)h[1], no_loc);
  ir_node *y = ir_build_op(g, IR_OP_GROUP_CONV2D, "y", (ir_node *[]){x, w}, 2, &a, no_loc);
  a.shape = (ir_shape){4, {IR_DIM_BATCH, cc->H, cc->W, cc->C}};
  ir_node *dx = ir_build_op(g, IR_OP_GROUP_CONV2D_INPUT_GRAD, "dx", (ir_node *[]){dy, w}, 2, &a, no_loc);
  a.shape = (ir_shape){4, {cc->KH, cc->KW, cc->Cg, cc->O}};
  ir_node *dw = ir_build_op(g, IR_OP_GROUP_CONV2D_FILTER_GRAD, "dw", (ir_node *[]){x, dy}, 2, &a, no_loc);
  ir_node *res[3] = {y, dx, dw};
  static const char *const names[3] = {"group_conv2d", "group_conv2d_input_grad", "group_conv2d_filter_grad"};
  int64_t n_out[3] = {ny, nx, nw};
  static const char *const casts[3] = {"y32", "dx32", "dw32"};
  for (int o = 0; o < 3; o++)
    ir_graph_add_output(g, casts[o], f16 ? ir_build_cast(g, casts[o], res[o], DT_F32, no_loc) : res[o]);
  ir_graph_renumber(g);
  double *rx = ref_from_f32(h[0], nx), *rdy = ref_from_f32(h[2], ny), *want[3] = {NULL, NULL, NULL};
  char err[256];
  ck_assert_msg(ref_run(g, N, (const double *[]){rx, rdy}, want, err, sizeof err), "%s", err);
  float *out[2][3];
  for (int t = 0; t < 2; t++)
    for (int o = 0; o < 3; o++) out[t][o] = xmalloc((size_t)n_out[o] * 4);
  for (int ci = 0; ci < N_CPUS; ci++)
    for (int t = 0; t < 2 && test_case_runs(sweep_k + (size_t)ci); t++) {
      diag_sink *d = diag_sink_create();
      cg_backend_options bo;
      cg_backend_options_init(&bo);
      bo.threads = t ? 3 : 1;
      bo.cg.cpu = cpus[ci].cpu, bo.cg.features = cpus[ci].features;
      setenv("CASTOR_PARALLEL_MIN_WORK", "0", 1);
      cg_exec *ex = cg_backend_compile(&cg_backend_cpu, g, &bo, d);
      ck_assert_msg(ex, "compile: %s", diag_text(d));
      const void *ins[] = {f16 ? (void *)e16[0] : h[0], f16 ? (void *)e16[2] : h[2]};
      void *outs[] = {out[t][0], out[t][1], out[t][2]};
      ck_assert_msg(cg_backend_cpu.run(ex, N, ins, outs, d), "run: %s", diag_text(d));
      unsetenv("CASTOR_PARALLEL_MIN_WORK");
      for (int o = 0; o < 3; o++) {
        /* f32 sums: rounding grows with the square root of the summed length;
         * f16 results are rounded to f16 once */
        double summed = o == 2 ? (double)(N * OH * OW) : (double)(cc->KH * cc->KW * (o ? cc->O * cc->Cg / cc->C : cc->Cg));
        double e = ref_normalized_error(out[t][o], want[o], n_out[o]);
        ck_assert_msg(e <= (f16 ? 1e-3 : 2e-6 * fmax(1, sqrt(summed / 600))),
                      "%s of x [%lld,%lld,%lld,%lld] w [%lld,%lld,%lld,%lld] s %lldx%lld d %lldx%lld %s %s on %s, "
                      "%d threads: normalized error %g",
                      names[o], (long long)N, (long long)cc->H, (long long)cc->W, (long long)cc->C, (long long)cc->KH,
                      (long long)cc->KW, (long long)cc->Cg, (long long)cc->O, (long long)cc->sh, (long long)cc->sw,
                      (long long)cc->dh, (long long)cc->dw, cc->same ? "same" : "valid", f16 ? "f16" : "f32",
                      cpus[ci].cpu ? cpus[ci].cpu : "the host", bo.threads, e);
        if (t)
          ck_assert_msg(memcmp(out[0][o], out[1][o], (size_t)n_out[o] * 4) == 0, "%s: 1 and 3 threads differ", names[o]);
      }
      cg_exec_destroy(ex);
      diag_sink_destroy(d);
    }
  sweep_k += N_CPUS;
  ref_outputs_free(want, 3);
  free(rx), free(rdy);
  for (int k = 0; k < 3; k++) free(h[k]), free(e16[k]);
  for (int t = 0; t < 2; t++)
    for (int o = 0; o < 3; o++) free(out[t][o]);
  ir_graph_destroy(g);
}

/* The reference's gradients against central differences of its forward
 * group_conv2d: L = sum(group_conv2d(x, w) * dy) is linear in each
 * element, so the differences are exact but for rounding. */
static void check_fd(const gconv_case *cc) {
  int64_t N = cc->batch, OH, OW;
  ir_attr a = case_attr(cc, &OH, &OW);
  ir_type xt = {DT_F32, 4, {IR_DIM_BATCH, cc->H, cc->W, cc->C}}, wt = {DT_F32, 4, {cc->KH, cc->KW, cc->Cg, cc->O}};
  ir_type yt = {DT_F32, 4, {IR_DIM_BATCH, OH, OW, cc->O}};
  ir_graph *f = ir_graph_create("fwd"), *b = ir_graph_create("bwd");
  ir_node *fx = ir_build_input(f, "x", &xt, 0, no_loc), *fw = ir_build_input(f, "w", &wt, 1, no_loc);
  ir_graph_add_output(f, "y", ir_build_op(f, IR_OP_GROUP_CONV2D, "y", (ir_node *[]){fx, fw}, 2, &a, no_loc));
  ir_node *bx = ir_build_input(b, "x", &xt, 0, no_loc), *bw = ir_build_input(b, "w", &wt, 1, no_loc);
  ir_node *bdy = ir_build_input(b, "dy", &yt, 2, no_loc);
  a.shape = (ir_shape){4, {IR_DIM_BATCH, cc->H, cc->W, cc->C}};
  ir_graph_add_output(b, "dx", ir_build_op(b, IR_OP_GROUP_CONV2D_INPUT_GRAD, "dx", (ir_node *[]){bdy, bw}, 2, &a, no_loc));
  a.shape = (ir_shape){4, {cc->KH, cc->KW, cc->Cg, cc->O}};
  ir_graph_add_output(b, "dw", ir_build_op(b, IR_OP_GROUP_CONV2D_FILTER_GRAD, "dw", (ir_node *[]){bx, bdy}, 2, &a, no_loc));
  int64_t cnt[3] = {N * cc->H * cc->W * cc->C, cc->KH * cc->KW * cc->Cg * cc->O, N * OH * OW * cc->O};
  double *v[3];
  rng r;
  rng_init(&r, 29);
  for (int k = 0; k < 3; k++) {
    v[k] = xmalloc((size_t)cnt[k] * sizeof **v);
    for (int64_t i = 0; i < cnt[k]; i++) v[k][i] = rng_uniform_f32(&r, -1, 1);
  }
  char err[256];
  double *grads[2] = {NULL, NULL};
  ck_assert_msg(ref_run(b, N, (const double *[]){v[0], v[1], v[2]}, grads, err, sizeof err), "%s", err);
  for (int k = 0; k < 2; k++)
    for (int64_t i = 0; i < cnt[k]; i++) {
      double keep = v[k][i], h = 1e-3, l[2];
      for (int sgn = 0; sgn < 2; sgn++) {
        v[k][i] = keep + (sgn ? -h : h);
        double *y[1] = {NULL};
        ck_assert_msg(ref_run(f, N, (const double *[]){v[0], v[1]}, y, err, sizeof err), "%s", err);
        l[sgn] = 0;
        for (int64_t j = 0; j < cnt[2]; j++) l[sgn] += y[0][j] * v[2][j];
        ref_outputs_free(y, 1);
      }
      v[k][i] = keep;
      double fd = (l[0] - l[1]) / (2 * h);
      ck_assert_msg(fabs(fd - grads[k][i]) <= 1e-9 * fmax(1, fabs(fd)), "%s[%lld] = %.12g, finite differences %.12g",
                    k ? "group_conv2d_filter_grad" : "group_conv2d_input_grad", (long long)i, grads[k][i], fd);
    }
  ref_outputs_free(grads, 2);
  for (int k = 0; k < 3; k++) free(v[k]);
  ir_graph_destroy(f), ir_graph_destroy(b);
}

static const gconv_case cases[] = {
    /* N  H   W  C  KH KW Cg  O  sh sw dh dw same */
    {2, 7, 9, 5, 3, 3, 1, 5, 1, 1, 1, 1, true},    /* depthwise 3x3 'same', 5 channels */
    {3, 8, 7, 3, 3, 3, 1, 9, 2, 2, 1, 1, true},    /* depthwise, depth multiplier 3, stride 2 'same' on odd sizes */
    {2, 9, 10, 6, 3, 3, 2, 9, 1, 2, 2, 1, false}, /* 3 groups of 2 channels, 3 outputs each, dilation 2 */
    {1, 11, 6, 12, 5, 5, 4, 6, 2, 1, 1, 2, true}, /* 5x5, 3 groups of 4, stride 2 x dilation 2 */
    {2, 5, 5, 7, 1, 1, 1, 14, 1, 1, 1, 1, false}, /* 1x1 depthwise, multiplier 2, 7 channels */
    {1, 6, 6, 16, 3, 3, 8, 10, 2, 2, 1, 1, true}, /* 2 groups of 8, 5 outputs each */
    /* convolutional networks: depthwise (multiplier 1) runs vw channels at a
     * time and then the tail one by one: 37 channels cross every vector
     * width with a tail; 32 are whole vectors */
    {2, 9, 8, 37, 3, 3, 1, 37, 2, 2, 1, 1, true},  /* stride 2, 'same' on odd sizes */
    {1, 7, 9, 32, 3, 3, 1, 32, 1, 1, 2, 2, true},  /* dilation 2, 'same' */
    {2, 6, 5, 19, 5, 5, 1, 19, 1, 2, 1, 1, false}, /* 5x5 'valid', strides 1x2 */
    /* convolutional networks: rows wide enough for the CPU's register
     * tiles of 8 interior pixels (cg_dwconv.c): tiles, single interior
     * pixels and edge pixels in one row; channel tails; stride 2 and 5x5
     * (EfficientNet), dilation 2 */
    {2, 4, 23, 37, 3, 3, 1, 37, 1, 1, 1, 1, true},  /* 21 interior: 2 tiles and 5 single */
    {1, 7, 40, 24, 5, 5, 1, 24, 2, 2, 1, 1, true},  /* 5x5 stride 2 'same': 20 columns, an edge each side */
    {1, 5, 30, 16, 3, 3, 1, 16, 1, 1, 2, 2, true},  /* dilation 2: 2 edge columns each side */
    {2, 5, 20, 8, 3, 3, 1, 8, 1, 1, 1, 1, false},   /* 'valid': every column interior */
    /* convolutional networks: groups of whole vectors of outputs (O/G a
     * multiple of 4) run on the CPU's direct convolution, column blocks of
     * nr channels inside a group (cg_gemm_plan.c, choose_group_conv) */
    {2, 7, 9, 24, 3, 3, 8, 24, 1, 1, 1, 1, true},  /* RegNet: 3 groups of 8 channels */
    {1, 9, 11, 16, 3, 3, 4, 16, 2, 1, 1, 1, false}, /* 4 groups of 4, strides 2x1 valid */
    {2, 6, 7, 32, 3, 3, 4, 32, 2, 2, 1, 1, true},  /* 8 groups of 4 (lanes 4), stride 2 'same' on odd sizes */
    {1, 5, 8, 32, 3, 3, 16, 32, 1, 1, 2, 2, true}, /* 2 groups of 16 (lanes 16 or 8), dilation 2 */
    {1, 4, 5, 6, 3, 3, 2, 36, 1, 1, 1, 1, false},  /* 3 groups of 12 outputs (lanes 4, 3 blocks) */
    {1, 3, 6, 4, 3, 1, 2, 128, 1, 1, 1, 1, true},  /* 2 groups of 64 outputs: 2 blocks of 32 a group */
    {1, 3, 37, 8, 1, 3, 2, 16, 1, 1, 1, 1, true},  /* 37 columns: interior tiles in a loop, edge tiles */
    {1, 4, 30, 32, 3, 3, 4, 32, 1, 1, 1, 1, true}, /* 8 groups of 4 and 4: lanes / 4 groups a vector (quads) */
    /* MobileNetV2 at 32x32 pixels: its last blocks' depthwise 3x3 run at
     * 2x2 and 1x1 pixels, most taps in the padding (block_13 pads 2x2 to
     * 3x3 and convolves with stride 2: 'same' stride 2 at 2x2, pads 0 and 1) */
    {2, 1, 1, 8, 3, 3, 1, 8, 1, 1, 1, 1, true},    /* 1x1 'same': the centre tap only */
    {2, 1, 1, 37, 3, 3, 1, 37, 2, 2, 1, 1, true},  /* 1x1 'same' stride 2 */
    {2, 2, 2, 37, 3, 3, 1, 37, 1, 1, 1, 1, true},  /* 2x2 'same' */
    {2, 2, 2, 8, 3, 3, 1, 8, 2, 2, 1, 1, true},    /* 2x2 'same' stride 2 */
    {2, 3, 3, 8, 3, 3, 1, 8, 1, 1, 1, 1, true},    /* 3x3 'same' */
    {2, 3, 3, 37, 3, 3, 1, 37, 2, 2, 1, 1, true},  /* 3x3 'same' stride 2 */
    {2, 3, 3, 8, 3, 3, 1, 8, 1, 1, 1, 1, false},   /* 3x3 'valid': one output */
    {2, 3, 3, 37, 3, 3, 1, 37, 2, 2, 1, 1, false}, /* 3x3 'valid' stride 2 */
};

START_TEST(test_group_conv2d_shapes) {
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    for (int f16 = 0; f16 < 2; f16++) check_case(&cases[i], f16);
}
END_TEST

START_TEST(test_group_conv2d_gradients_fd) {
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) check_fd(&cases[i]);
}
END_TEST

/* convolutional networks: relu(group_conv2d(x, w) + b), the bias and relu
 * fused into the direct convolution's epilogue on the CPU (groups of
 * whole vectors), a batch of 1 (threads split the groups' column blocks),
 * 3 (images) and 3 static (the launch's rows are x's dimension 0), or
 * into a depthwise line kernel's chain (static: rows N x OH): the
 * reference's values within f32 rounding, the same bits on 1 and 3
 * threads, and on the host and the AVX2 path (both FMA). w a constant
 * (stored pre-packed: per column block K rows of nr) or, w_input, a
 * graph input (read in place, as a training step's forward reads its
 * variable): the same bits either way (same_as: the other's output, or
 * NULL). Returns the output of the first FMA path (the caller frees it),
 * or NULL if the sweep ran none. */
static float *check_fused(const gconv_case *cc, bool static_batch, bool w_input, const float *same_as) {
  ir_graph *g = ir_graph_create("gconv_fused");
  int64_t N = cc->batch, OH, OW;
  ir_attr a = case_attr(cc, &OH, &OW);
  int64_t nx = N * cc->H * cc->W * cc->C, nw = cc->KH * cc->KW * cc->Cg * cc->O, ny = N * OH * OW * cc->O;
  float *hx = xmalloc((size_t)nx * 4), *hw = xmalloc((size_t)nw * 4), *hb = xmalloc((size_t)cc->O * 4);
  rng r;
  rng_init(&r, 31);
  for (int64_t i = 0; i < nx; i++) hx[i] = rng_uniform_f32(&r, -1, 1);
  for (int64_t i = 0; i < nw; i++) hw[i] = rng_uniform_f32(&r, -1, 1);
  for (int64_t i = 0; i < cc->O; i++) hb[i] = rng_uniform_f32(&r, -1, 1);
  int64_t n0 = static_batch ? N : IR_DIM_BATCH;
  ir_type xt = {DT_F32, 4, {n0, cc->H, cc->W, cc->C}}, wt = {DT_F32, 4, {cc->KH, cc->KW, cc->Cg, cc->O}};
  ir_type bt = {DT_F32, 1, {cc->O}};
  ir_node *x = ir_build_input(g, "x", &xt, 0, no_loc);
  ir_node *w = w_input ? ir_build_input(g, "w", &wt, 1, no_loc) : ir_build_const(g, "w", &wt, "w", hw, no_loc);
  ir_node *b = ir_build_const(g, "b", &bt, "b", hb, no_loc);
  ir_node *y = ir_build_op(g, IR_OP_GROUP_CONV2D, "y", (ir_node *[]){x, w}, 2, &a, no_loc);
  y = ir_build_unary(g, IR_OP_RELU, "y.relu", ir_build_binary(g, IR_OP_ADD, "y.bias", y, b, no_loc), no_loc);
  ir_graph_add_output(g, "y", y);
  ir_graph_renumber(g);
  double *rx = ref_from_f32(hx, nx), *rw = ref_from_f32(hw, nw), *want[1] = {NULL};
  char err[256];
  ck_assert_msg(ref_run(g, N, (const double *[]){rx, rw}, want, err, sizeof err), "%s", err);
  float *out[2] = {xmalloc((size_t)ny * 4), xmalloc((size_t)ny * 4)}, *first = xmalloc((size_t)ny * 4);
  int first_ci = -1; /* the first FMA path run: the others equal it */
  for (int ci = 0; ci < N_CPUS; ci++)
    for (int t = 0; t < 2 && test_case_runs(sweep_k + (size_t)ci); t++) {
      diag_sink *d = diag_sink_create();
      cg_backend_options bo;
      cg_backend_options_init(&bo);
      bo.threads = t ? 3 : 1;
      bo.cg.cpu = cpus[ci].cpu, bo.cg.features = cpus[ci].features;
      setenv("CASTOR_PARALLEL_MIN_WORK", "0", 1);
      cg_exec *ex = cg_backend_compile(&cg_backend_cpu, g, &bo, d);
      ck_assert_msg(ex, "compile: %s", diag_text(d));
      void *outs[] = {out[t]};
      ck_assert_msg(cg_backend_cpu.run(ex, N, (const void *[]){hx, hw}, outs, d), "run: %s", diag_text(d));
      unsetenv("CASTOR_PARALLEL_MIN_WORK");
      /* group_pack (cg_conv.c): after the C tile (one row), a column block's
       * w copied when w is an input (K x nr, nr >= 4), the group's channels
       * of an image of x (C/G a multiple of 16) */
      int64_t ctile = (OW * cc->O * 4 + 63) / 64 * 64, wcopy = cc->KH * cc->KW * cc->Cg * 4 * 4;
      int64_t xcopy = cc->Cg % 16 == 0 ? cc->H * cc->W * cc->Cg * 4 : 0;
      bool pack = xcopy || cc->Cg * cc->KH * cc->KW * cc->O * 4 >= (512 << 10);
      if (pack && cc->Cg > 1) {
        const rt_launch *l = &ex->desc->launches[ex->desc->n_launches - 1];
        ck_assert_msg(l->cols && l->scratch_bytes >= ctile + xcopy, "%s: scratch %lld, no copy of x", l->name,
                      (long long)l->scratch_bytes);
        if (w_input)
          ck_assert_msg(l->scratch_bytes >= ctile + xcopy + wcopy, "%s: scratch %lld, no copy of w", l->name,
                        (long long)l->scratch_bytes);
        else
          ck_assert_msg(l->scratch_bytes < ctile + xcopy + wcopy, "%s: scratch %lld, a copy of a pre-packed w", l->name,
                        (long long)l->scratch_bytes);
      }
      if (static_batch) { /* the launch's rows: images on the direct convolution (it has columns), else N x OH */
        const rt_launch *l = &ex->desc->launches[ex->desc->n_launches - 1];
        int64_t rows = l->cols ? N : N * OH;
        ck_assert_msg(l->rows_fixed == (rows >= 2 ? rows : 1), "%s: %lld launch rows, want %lld", l->name,
                      (long long)l->rows_fixed, (long long)rows);
      }
      double e = ref_normalized_error(out[t], want[0], ny);
      double summed = (double)(cc->KH * cc->KW * cc->Cg);
      ck_assert_msg(e <= 2e-6 * fmax(1, sqrt(summed / 600)),
                    "relu(group_conv2d + b) of x [%lld,%lld,%lld,%lld] w [%lld,%lld,%lld,%lld]%s%s on %s, %d threads: "
                    "normalized error %g",
                    (long long)N, (long long)cc->H, (long long)cc->W, (long long)cc->C, (long long)cc->KH,
                    (long long)cc->KW, (long long)cc->Cg, (long long)cc->O, static_batch ? " static" : "",
                    w_input ? " (w an input)" : "",
                    cpus[ci].cpu ? cpus[ci].cpu : "the host", bo.threads, e);
      if (t) ck_assert_msg(memcmp(out[0], out[1], (size_t)ny * 4) == 0, "fused group_conv2d: 1 and 3 threads differ");
      /* the FMA paths' chains are the same: one order, one rounding each
       * (x86-64's SSE2 has no FMA: a multiply and an add round twice) */
      if (!t && (!cpus[ci].features || strstr(cpus[ci].features, "+fma"))) {
        if (first_ci < 0) memcpy(first, out[0], (size_t)ny * 4), first_ci = ci;
        else
          ck_assert_msg(memcmp(first, out[0], (size_t)ny * 4) == 0, "fused group_conv2d: %s differs from %s", cpus[ci].cpu,
                        cpus[first_ci].cpu ? cpus[first_ci].cpu : "the host");
      }
      cg_exec_destroy(ex);
      diag_sink_destroy(d);
    }
  sweep_k += N_CPUS;
  if (same_as && first_ci >= 0)
    ck_assert_msg(memcmp(first, same_as, (size_t)ny * 4) == 0, "fused group_conv2d: w %s differs from w %s",
                  w_input ? "an input" : "a constant", w_input ? "a constant" : "an input");
  ref_outputs_free(want, 1);
  free(rx), free(rw), free(hx), free(hw), free(hb), free(out[0]), free(out[1]);
  ir_graph_destroy(g);
  if (first_ci < 0) { /* the short sweep (test_case_runs) ran no FMA path: nothing to compare with */
    free(first);
    return NULL;
  }
  return first;
}

START_TEST(test_group_conv2d_fused) {
  static const gconv_case fused[] = {
      /* N  H   W  C  KH KW Cg  O  sh sw dh dw same */
      {1, 9, 16, 24, 3, 3, 8, 24, 1, 1, 1, 1, true},   /* RegNet's groups of 8, batch 1: groups over threads */
      {3, 8, 9, 32, 3, 3, 4, 32, 2, 2, 1, 1, true},    /* ResNeXt's groups of 4, stride 2, 3 images */
      {2, 5, 6, 64, 3, 3, 16, 128, 1, 1, 1, 1, false}, /* 4 groups of 16 in, 32 out */
      /* ResNeXt's last stage: w of at least 512 KB and a small x, the
       * column blocks outer, each block's columns of w copied
       * (gemm_conv.group_pack): batch 1 (blocks over threads), images,
       * a row's edge tiles; 4 blocks of 32 a group of 128 outputs */
      {1, 5, 6, 512, 3, 3, 32, 512, 1, 1, 1, 1, true},   /* 16 groups of 32 */
      {3, 4, 7, 256, 3, 3, 64, 512, 2, 2, 1, 1, true},   /* 4 groups of 64 in, 128 out, stride 2 */
      /* ResNeXt's 14x14 stages: groups of a multiple of 16 channels copy
       * their channels of x too (group_pack 2), w any size: stride 2 on odd
       * sizes, rows of several tiles with edges, a group of 2 blocks */
      {2, 9, 9, 64, 3, 3, 16, 64, 2, 2, 1, 1, true},     /* 4 groups of 16, stride 2 'same' */
      {1, 4, 30, 32, 3, 3, 16, 32, 1, 1, 1, 1, true},    /* 30 columns: 3 tiles a row */
      {2, 6, 5, 64, 3, 3, 32, 128, 1, 1, 1, 1, false},   /* 2 groups of 32 in, 64 out (2 blocks of 32) */
      /* ResNeXt's first stage: groups of 4 channels and 4 outputs, lanes / 4
       * of them a vector on AVX-512 (cg_conv.c, quads; AVX2: 4 lanes, the
       * same bits): rows of 3 tiles with edges, dilation, 1x3 strided */
      {1, 5, 40, 64, 3, 3, 4, 64, 1, 1, 1, 1, true},     /* 16 groups, 40 columns */
      {2, 6, 20, 32, 3, 3, 4, 32, 1, 1, 2, 2, true},     /* dilation 2: two edge columns a side */
      {1, 7, 9, 16, 1, 3, 4, 16, 1, 2, 1, 1, false},     /* 1x3, strides 1x2 'valid' */
      /* depthwise (a line kernel, not the direct convolution): static, its
       * launch rows are N x OH, so a batch of 1 is split over threads too */
      {1, 9, 10, 37, 3, 3, 1, 37, 1, 1, 1, 1, true},   /* 37 channels: vectors and a tail */
      {2, 8, 9, 32, 3, 3, 1, 32, 2, 2, 1, 1, true},    /* stride 2 'same' on odd sizes */
      {1, 6, 21, 37, 3, 3, 1, 37, 1, 1, 1, 1, true},   /* register tiles (cg_dwconv.c) and their edges */
  };
  for (size_t i = 0; i < sizeof fused / sizeof fused[0]; i++) {
    free(check_fused(&fused[i], false, false, NULL));
    float *y = check_fused(&fused[i], true, false, NULL);
    if (fused[i].Cg > 1) free(check_fused(&fused[i], true, true, y)); /* the direct convolution with w in place */
    free(y);
  }
}
END_TEST

/* convolutional networks: relu(depthwise(x, w) + b) in bf16, as
 * mixed_bfloat16 runs MobileNet's depthwise layers, against its exact bits
 * computed here: per element the taps p, then q, in order (a tap in the
 * padding skipped), one fused multiply-add each from 0 (a multiply and an
 * add on x86-64's SSE2), the sum rounded to bf16, the bias added and
 * rounded, relu. On AVX-512 hosts 32 channels at a time run as their even
 * and odd halves (cg_dwconv.c, emit_tile_pairs), the rest as vectors in
 * channel order; edge columns as one-pixel tiles whose taps test x's
 * column (a tap in the padding: the sum kept by a select). */
static void check_bf16_depthwise(const gconv_case *cc) {
  ir_graph *g = ir_graph_create("dw_bf16");
  int64_t N = cc->batch, OH, OW, C = cc->C;
  ir_attr a = case_attr(cc, &OH, &OW);
  int64_t nx = N * cc->H * cc->W * C, nw = cc->KH * cc->KW * C, ny = N * OH * OW * C;
  uint16_t *bx = xmalloc((size_t)nx * 2), *bw = xmalloc((size_t)nw * 2), *bb = xmalloc((size_t)C * 2);
  rng r;
  rng_init(&r, 37);
  for (int64_t i = 0; i < nx; i++) bx[i] = half_f32_to_bf16(rng_uniform_f32(&r, -1, 1));
  for (int64_t i = 0; i < nw; i++) bw[i] = half_f32_to_bf16(rng_uniform_f32(&r, -1, 1));
  for (int64_t i = 0; i < C; i++) bb[i] = half_f32_to_bf16(rng_uniform_f32(&r, -1, 1));
  ir_type xt = {DT_BF16, 4, {IR_DIM_BATCH, cc->H, cc->W, C}}, wt = {DT_BF16, 4, {cc->KH, cc->KW, 1, C}};
  ir_type bt = {DT_BF16, 1, {C}};
  ir_node *x = ir_build_input(g, "x", &xt, 0, no_loc);
  ir_node *w = ir_build_const(g, "w", &wt, "w", bw, no_loc), *b = ir_build_const(g, "b", &bt, "b", bb, no_loc);
  ir_node *y = ir_build_op(g, IR_OP_GROUP_CONV2D, "y", (ir_node *[]){x, w}, 2, &a, no_loc);
  y = ir_build_unary(g, IR_OP_RELU, "y.relu", ir_build_binary(g, IR_OP_ADD, "y.bias", y, b, no_loc), no_loc);
  ir_graph_add_output(g, "y32", ir_build_cast(g, "y32", y, DT_F32, no_loc));
  ir_graph_renumber(g);
  float *want[2] = {xmalloc((size_t)ny * 4), xmalloc((size_t)ny * 4)}; /* [fused] */
  for (int fused = 0; fused < 2; fused++)
    for (int64_t n = 0; n < N; n++)
      for (int64_t i = 0; i < OH; i++)
        for (int64_t j = 0; j < OW; j++)
          for (int64_t ch = 0; ch < C; ch++) {
            volatile float acc = 0;
            for (int64_t p = 0; p < cc->KH; p++) {
              int64_t ih = i * cc->sh - a.pads.v[0] + p * cc->dh;
              if (ih < 0 || ih >= cc->H) continue;
              for (int64_t q = 0; q < cc->KW; q++) {
                int64_t iw = j * cc->sw - a.pads.v[2] + q * cc->dw;
                if (iw < 0 || iw >= cc->W) continue;
                float xv = half_bf16_to_f32(bx[((n * cc->H + ih) * cc->W + iw) * C + ch]);
                float wv = half_bf16_to_f32(bw[(p * cc->KW + q) * C + ch]);
                if (fused) {
                  acc = fmaf(xv, wv, acc);
                } else {
                  volatile float prod = xv * wv;
                  acc = prod + acc;
                }
              }
            }
            float v = half_bf16_to_f32(half_f32_to_bf16(acc));
            v = half_bf16_to_f32(half_f32_to_bf16(v + half_bf16_to_f32(bb[ch])));
            want[fused][((n * OH + i) * OW + j) * C + ch] = v > 0 ? v : 0;
          }
  float *out = xmalloc((size_t)ny * 4);
  for (int ci = 0; ci < N_CPUS; ci++)
    for (int t = 0; t < 2 && test_case_runs(sweep_k + (size_t)ci); t++) {
      diag_sink *d = diag_sink_create();
      cg_backend_options bo;
      cg_backend_options_init(&bo);
      bo.threads = t ? 3 : 1;
      bo.cg.cpu = cpus[ci].cpu, bo.cg.features = cpus[ci].features;
      setenv("CASTOR_PARALLEL_MIN_WORK", "0", 1);
      cg_exec *ex = cg_backend_compile(&cg_backend_cpu, g, &bo, d);
      ck_assert_msg(ex, "compile: %s", diag_text(d));
      void *outs[] = {out};
      ck_assert_msg(cg_backend_cpu.run(ex, N, (const void *[]){bx}, outs, d), "run: %s", diag_text(d));
      unsetenv("CASTOR_PARALLEL_MIN_WORK");
      const float *ref = want[!cpus[ci].features || strstr(cpus[ci].features, "+fma")];
      for (int64_t k = 0; k < ny; k++)
        ck_assert_msg(memcmp(&out[k], &ref[k], 4) == 0,
                      "bf16 relu(depthwise + b) of x [%lld,%lld,%lld,%lld] %lldx%lld s %lldx%lld d %lldx%lld %s on %s, "
                      "%d threads: element %lld (channel %lld) is %.9g, want %.9g",
                      (long long)N, (long long)cc->H, (long long)cc->W, (long long)C, (long long)cc->KH,
                      (long long)cc->KW, (long long)cc->sh, (long long)cc->sw, (long long)cc->dh, (long long)cc->dw,
                      cc->same ? "same" : "valid", cpus[ci].cpu ? cpus[ci].cpu : "the host", bo.threads, (long long)k,
                      (long long)(k % C), (double)out[k], (double)ref[k]);
      cg_exec_destroy(ex);
      diag_sink_destroy(d);
    }
  sweep_k += N_CPUS;
  free(bx), free(bw), free(bb), free(want[0]), free(want[1]), free(out);
  ir_graph_destroy(g);
}

START_TEST(test_group_conv2d_bf16_bits) {
  static const gconv_case dw[] = {
      /* N  H   W  C  KH KW Cg  O  sh sw dh dw same */
      {1, 6, 21, 72, 3, 3, 1, 72, 1, 1, 1, 1, true},  /* MobileNet's 72: 2 x 32 in pairs, 8 in order; 2 tiles and a rest of 3 */
      {2, 7, 14, 48, 5, 5, 1, 48, 1, 1, 1, 1, true},  /* 5x5 'same' at 14: 2 edge columns a side, a tile, a rest of 2 */
      {1, 9, 17, 64, 3, 3, 1, 64, 2, 2, 1, 1, true},  /* stride 2 on odd sizes: pairs only */
      {1, 5, 30, 40, 3, 3, 1, 40, 1, 1, 5, 5, true},  /* dilation 5: 5 edge columns a side */
      {2, 4, 12, 37, 3, 3, 1, 37, 1, 1, 1, 1, false}, /* 'valid': no edges; 37 channels */
  };
  for (size_t i = 0; i < sizeof dw / sizeof dw[0]; i++) check_bf16_depthwise(&dw[i]);
}
END_TEST

START_TEST(test_group_conv2d_type_errors) {
  ir_graph *g = ir_graph_create("gconv");
  ir_type xt = {DT_F32, 4, {IR_DIM_BATCH, 5, 5, 6}};
  ir_node *x = ir_build_input(g, "x", &xt, 0, no_loc);
  ir_attr a = {.acc = DT_F32, .strides = {2, {1, 1}}, .dilations = {2, {1, 1}}, .pads = {4, {0}}};
  char err[512];
  ir_type t;
  ir_node w = {.type = {DT_F32, 4, {3, 3, 4, 8}}}; /* 6 channels are not whole groups of 4 */
  ck_assert(!ir_infer_type(IR_OP_GROUP_CONV2D, (ir_node *[]){x, &w}, 2, &a, &t, err, sizeof err));
  ck_assert_msg(strstr(err, "group_conv2d kernel f32[3,3,4,8] takes 4 input channels per group: x f32[N,5,5,6]'s 6 "
                            "channels must be a whole number of groups"), "%s", err);
  w.type = (ir_type){DT_F32, 4, {3, 3, 2, 4}}; /* 3 groups, 4 outputs */
  ck_assert(!ir_infer_type(IR_OP_GROUP_CONV2D, (ir_node *[]){x, &w}, 2, &a, &t, err, sizeof err));
  ck_assert_msg(strstr(err, "the 4 output channels a multiple of the groups"), "%s", err);
  w.type = (ir_type){DT_F32, 4, {3, 3, 2, 6}};
  ck_assert_msg(ir_infer_type(IR_OP_GROUP_CONV2D, (ir_node *[]){x, &w}, 2, &a, &t, err, sizeof err), "%s", err);
  ck_assert(t.dims[1] == 3 && t.dims[2] == 3 && t.dims[3] == 6);
  ir_graph_destroy(g);
}
END_TEST

static Suite *gconv_suite(void) {
  Suite *s = suite_create("conv_group");
  TCase *tc = tcase_create("group_conv2d");
  tcase_set_timeout(tc, 300);
  tcase_add_test(tc, test_group_conv2d_shapes);
  tcase_add_test(tc, test_group_conv2d_gradients_fd);
  tcase_add_test(tc, test_group_conv2d_fused);
  tcase_add_test(tc, test_group_conv2d_bf16_bits);
  tcase_add_test(tc, test_group_conv2d_type_errors);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) { return check_run(gconv_suite()); }
