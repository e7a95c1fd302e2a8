/* SPDX-License-Identifier: Apache-2.0 */
/*
 * check_conv.c: convolutional networks on the CPU.
 *
 * conv2d is the CPU GEMM with its A operand gathered from x through the
 * im2col index map inside the A packing (codegen/cpu/cg_gemm.c), or, for
 * an f32 conv2d of one K block and few output channels, the direct
 * convolution (codegen/cpu/cg_conv.c). Shapes
 * that cross every edge of that gather and of the GEMM's blocking: strides
 * 2, dilation 2, 'same' padding of odd sizes (Keras's extra pixel at the
 * end), 1x1 and 5x5 kernels, channels not a multiple of 8 or of a vector,
 * K = KH*KW*C over several K blocks with block edges inside a tap, more
 * output channels than a column block, more output pixels than a row
 * block; f32 and f16 operands; fused bias and relu; on every CPU code
 * path, on 1 and 3 threads (bit-identical), against the float64
 * reference.
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

typedef struct conv_case {
  int64_t batch, H, W, C, KH, KW, O, sh, sw, dh, dw;
  bool same; /* Keras padding='same', else 'valid' */
  bool bias_relu;
  bool fixed; /* a static batch (ONNX at --batch B): the launch splits pixels, on 1, 2 and 3 threads */
} conv_case;

/* Keras's 'same' padding along one dimension: the total that keeps
 * ceil(in / stride) outputs, the odd one at the end. */
static void same_pads(int64_t in, int64_t k, int64_t s, int64_t d, int64_t *p0, int64_t *p1) {
  int64_t out = (in + s - 1) / s, span = d * (k - 1) + 1;
  int64_t total = (out - 1) * s + span - in;
  if (total < 0) total = 0;
  *p0 = total / 2, *p1 = total - total / 2;
}

/* The case's conv2d attributes: strides, dilations, and 'same' pads or none. */
static ir_attr conv_attr(const conv_case *cc) {
  ir_attr a = {.acc = DT_F32, .strides = {2, {cc->sh, cc->sw}}, .dilations = {2, {cc->dh, cc->dw}}, .pads = {4, {0}}};
  if (cc->same) {
    same_pads(cc->H, cc->KH, cc->sh, cc->dh, &a.pads.v[0], &a.pads.v[1]);
    same_pads(cc->W, cc->KW, cc->sw, cc->dw, &a.pads.v[2], &a.pads.v[3]);
  }
  return a;
}

/* y = conv2d(x, w), then relu(y + b) with b a constant of type bt and data
 * bdata when the case has bias_relu */
static ir_node *conv_bias_relu(ir_graph *g, const conv_case *cc, const ir_attr *a, ir_node *x, ir_node *w,
                               const ir_type *bt, void *bdata) {
  ir_node *y = ir_build_op(g, IR_OP_CONV2D, "y", (ir_node *[]){x, w}, 2, a, no_loc);
  if (cc->bias_relu) {
    ir_node *b = ir_build_const(g, "b", bt, "b", bdata, no_loc);
    y = ir_build_unary(g, IR_OP_RELU, "y.relu", ir_build_binary(g, IR_OP_ADD, "y.bias", y, b, no_loc), no_loc);
  }
  return y;
}

/* dt: x, w and b's dtype (f32, f16 or bf16). out_host (if not NULL) gets
 * the output of the first CPU (the host, or $CASTOR_CPU) and out_avx2 that
 * of haswell, on 1 thread. */
static void check_conv_as(const conv_case *cc, ir_dtype dt, float *out_host, float *out_avx2) {
  ir_graph *g = ir_graph_create("conv");
  bool f16 = dt != DT_F32, bf = dt == DT_BF16;
  int64_t N = cc->batch, nx = N * cc->H * cc->W * cc->C, nw = cc->KH * cc->KW * cc->C * cc->O;
  float *hx = xmalloc((size_t)nx * 4), *hw = xmalloc((size_t)nw * 4), *hb = xmalloc((size_t)cc->O * 4);
  uint16_t *ex = xmalloc((size_t)nx * 2), *ew = xmalloc((size_t)nw * 2), *eb = xmalloc((size_t)cc->O * 2);
  rng r;
  rng_init(&r, 11);
  /* values exact in the 16-bit dtype, so that the reference sees the operands the kernel reads */
#define EXACT16(h, v) (bf ? half_bf16_to_f32((h) = half_f32_to_bf16(v)) : half_f16_to_f32((h) = half_f32_to_f16(v)))
  for (int64_t i = 0; i < nx; i++) hx[i] = EXACT16(ex[i], rng_uniform_f32(&r, -1, 1));
  for (int64_t i = 0; i < nw; i++) hw[i] = EXACT16(ew[i], rng_uniform_f32(&r, -1, 1));
  for (int64_t i = 0; i < cc->O; i++) hb[i] = EXACT16(eb[i], rng_uniform_f32(&r, -1, 1));
#undef EXACT16
  ir_type xt = {dt, 4, {cc->fixed ? N : IR_DIM_BATCH, cc->H, cc->W, cc->C}}, wt = {dt, 4, {cc->KH, cc->KW, cc->C, cc->O}};
  ir_type bt = {dt, 1, {cc->O}};
  ir_node *x = ir_build_input(g, "x", &xt, 0, no_loc);
  ir_node *w = ir_build_const(g, "w", &wt, "w", f16 ? (void *)ew : (void *)hw, no_loc);
  ir_attr a = conv_attr(cc);
  ir_node *y = conv_bias_relu(g, cc, &a, x, w, &bt, f16 ? (void *)eb : (void *)hb);
  ir_node *y32 = f16 ? ir_build_cast(g, "y32", y, DT_F32, no_loc) : y;
  ir_graph_add_output(g, "y", y32);
  ir_graph_renumber(g);
  int64_t ny = N * y->type.dims[1] * y->type.dims[2] * cc->O;
  double *rx = ref_from_f32(hx, nx), *want[1] = {NULL};
  char err[256];
  const double *rins[] = {rx};
  ck_assert_msg(ref_run(g, N, rins, want, err, sizeof err), "%s", err);
  float *out[3] = {xmalloc((size_t)ny * 4), xmalloc((size_t)ny * 4), xmalloc((size_t)ny * 4)};
  int n_threads = cc->fixed ? 3 : 2; /* thread counts: 1, 3; or 1, 2, 3 */
  for (int ci = 0; ci < N_CPUS; ci++)
    for (int t = 0; t < n_threads; t++) {
      diag_sink *d = diag_sink_create();
      cg_backend_options bo;
      cg_backend_options_init(&bo);
      bo.threads = t == 0 ? 1 : n_threads == 3 ? t + 1 : 3;
      bo.cg.cpu = cpus[ci].cpu, bo.cg.features = cpus[ci].features;
      setenv("CASTOR_PARALLEL_MIN_WORK", "0", 1);
      cg_exec *ex_ = cg_backend_compile(&cg_backend_cpu, g, &bo, d);
      ck_assert_msg(ex_, "compile: %s", diag_text(d));
      if (cc->fixed) { /* the conv's launch rows: pixels (the GEMM, with tile costs) or output rows (direct) */
        const rt_launch *l = &ex_->desc->launches[ex_->desc->n_launches - 1];
        int64_t pixels = N * y->type.dims[1] * y->type.dims[2], rows = l->tile_row_cost > 0 ? pixels : N * y->type.dims[1];
        ck_assert_msg(l->rows_fixed == rows, "%s: %lld launch rows, want %lld (tile costs %lld)", l->name,
                      (long long)l->rows_fixed, (long long)rows, (long long)l->tile_row_cost);
      }
      const void *ins[] = {f16 ? (void *)ex : hx};
      void *outs[] = {out[t]};
      ck_assert_msg(cg_backend_cpu.run(ex_, N, ins, outs, d), "run: %s", diag_text(d));
      unsetenv("CASTOR_PARALLEL_MIN_WORK");
      /* f16 results are rounded to f16 once: a few 2^-11 of the sums' scale
       * (bf16: 2^-8) */
      double e = ref_normalized_error(out[t], want[0], ny);
      ck_assert_msg(e <= (bf ? 8e-3 : f16 ? 1e-3 : 2e-6),
                    "conv2d x [%lld,%lld,%lld,%lld] w [%lld,%lld,%lld,%lld] s %lldx%lld d %lldx%lld %s %s on %s, "
                    "%d threads: normalized error %g",
                    (long long)N, (long long)cc->H, (long long)cc->W, (long long)cc->C, (long long)cc->KH,
                    (long long)cc->KW, (long long)cc->C, (long long)cc->O, (long long)cc->sh, (long long)cc->sw,
                    (long long)cc->dh, (long long)cc->dw, cc->same ? "same" : "valid", dtype_name(dt),
                    cpus[ci].cpu ? cpus[ci].cpu : "the host", bo.threads, e);
      if (t) ck_assert_msg(memcmp(out[0], out[t], (size_t)ny * 4) == 0, "conv2d: 1 and %d threads differ", bo.threads);
      if (!t && ci == 0 && out_host) memcpy(out_host, out[0], (size_t)ny * 4);
      if (!t && ci == 1 && out_avx2) memcpy(out_avx2, out[0], (size_t)ny * 4);
      cg_exec_destroy(ex_);
      diag_sink_destroy(d);
    }
  ref_outputs_free(want, 1);
  free(rx), free(hx), free(hw), free(hb), free(ex), free(ew), free(eb), free(out[0]), free(out[1]), free(out[2]);
  ir_graph_destroy(g);
}

static void check_conv(const conv_case *cc, bool f16) { check_conv_as(cc, f16 ? DT_F16 : DT_F32, NULL, NULL); }

/* The gradient ops on the same shapes: dx = conv2d_input_grad(dy, w) and
 * dw = conv2d_filter_grad(x, dy), dy an input like x, against the
 * reference on every CPU path, 1 and 3 threads bit-identical. */
static void check_conv_grads(const conv_case *cc, bool f16) {
  ir_graph *g = ir_graph_create("conv_grad");
  ir_dtype dt = f16 ? DT_F16 : DT_F32;
  int64_t N = cc->batch;
  ir_attr a = conv_attr(cc);
  int64_t OH = ir_conv_out_size(cc->H, cc->KH, cc->sh, cc->dh, a.pads.v[0], a.pads.v[1]);
  int64_t OW = ir_conv_out_size(cc->W, cc->KW, cc->sw, cc->dw, a.pads.v[2], a.pads.v[3]);
  int64_t nx = N * cc->H * cc->W * cc->C, nw = cc->KH * cc->KW * cc->C * cc->O, ny = N * OH * OW * cc->O;
  float *h[3] = {xmalloc((size_t)nx * 4), xmalloc((size_t)nw * 4), xmalloc((size_t)ny * 4)};
  uint16_t *e16[3] = {xmalloc((size_t)nx * 2), xmalloc((size_t)nw * 2), xmalloc((size_t)ny * 2)};
  int64_t cnt[3] = {nx, nw, ny};
  rng r;
  rng_init(&r, 13);
  for (int k = 0; k < 3; k++)
    for (int64_t i = 0; i < cnt[k]; i++) h[k][i] = half_f16_to_f32(e16[k][i] = half_f32_to_f16(rng_uniform_f32(&r, -1, 1)));
  ir_type xt = {dt, 4, {IR_DIM_BATCH, cc->H, cc->W, cc->C}}, wt = {dt, 4, {cc->KH, cc->KW, cc->C, cc->O}};
  ir_type yt = {dt, 4, {IR_DIM_BATCH, OH, OW, cc->O}};
  ir_node *x = ir_build_input(g, "x", &xt, 0, no_loc), *dy = ir_build_input(g, "dy", &yt, 1, no_loc);
  ir_node *w = ir_build_const(g, "w", &wt, "w", f16 ? (void *)e16[1] : (void *)h[1], no_loc);
  a.shape = (ir_shape){4, {IR_DIM_BATCH, cc->H, cc->W, cc->C}};
  ir_node *dx = ir_build_op(g, IR_OP_CONV2D_INPUT_GRAD, "dx", (ir_node *[]){dy, w}, 2, &a, no_loc);
  a.shape = (ir_shape){4, {cc->KH, cc->KW, cc->C, cc->O}};
  ir_node *dw = ir_build_op(g, IR_OP_CONV2D_FILTER_GRAD, "dw", (ir_node *[]){x, dy}, 2, &a, no_loc);
  ir_graph_add_output(g, "dx", f16 ? ir_build_cast(g, "dx32", dx, DT_F32, no_loc) : dx);
  ir_graph_add_output(g, "dw", f16 ? ir_build_cast(g, "dw32", dw, DT_F32, no_loc) : dw);
  ir_graph_renumber(g);
  double *rx = ref_from_f32(h[0], nx), *rdy = ref_from_f32(h[2], ny), *want[2] = {NULL, NULL};
  char err[256];
  ck_assert_msg(ref_run(g, N, (const double *[]){rx, rdy}, want, err, sizeof err), "%s", err);
  float *out[2][2];
  for (int t = 0; t < 2; t++) out[t][0] = xmalloc((size_t)nx * 4), out[t][1] = xmalloc((size_t)nw * 4);
  for (int ci = 0; ci < N_CPUS; ci++)
    for (int t = 0; t < 2; t++) {
      diag_sink *d = diag_sink_create();
      cg_backend_options bo;
      cg_backend_options_init(&bo);
      bo.threads = t ? 3 : 1;
      bo.cg.cpu = cpus[ci].cpu, bo.cg.features = cpus[ci].features;
      setenv("CASTOR_PARALLEL_MIN_WORK", "0", 1);
      cg_exec *ex_ = cg_backend_compile(&cg_backend_cpu, g, &bo, d);
      ck_assert_msg(ex_, "compile: %s", diag_text(d));
      const void *ins[] = {f16 ? (void *)e16[0] : h[0], f16 ? (void *)e16[2] : h[2]};
      void *outs[] = {out[t][0], out[t][1]};
      ck_assert_msg(cg_backend_cpu.run(ex_, N, ins, outs, d), "run: %s", diag_text(d));
      unsetenv("CASTOR_PARALLEL_MIN_WORK");
      for (int o = 0; o < 2; o++) {
        /* f32 sums: rounding grows with the square root of the summed length */
        double summed = o ? (double)(N * OH * OW) : (double)(cc->KH * cc->KW * cc->O);
        double e = ref_normalized_error(out[t][o], want[o], o ? nw : nx);
        ck_assert_msg(e <= (f16 ? 1e-3 : 2e-6 * fmax(1, sqrt(summed / 600))),
                      "%s of x [%lld,%lld,%lld,%lld] w [%lld,%lld,%lld,%lld] s %lldx%lld d %lldx%lld %s %s on %s, "
                      "%d threads: normalized error %g",
                      o ? "conv2d_filter_grad" : "conv2d_input_grad", (long long)N, (long long)cc->H, (long long)cc->W,
                      (long long)cc->C, (long long)cc->KH, (long long)cc->KW, (long long)cc->C, (long long)cc->O,
                      (long long)cc->sh, (long long)cc->sw, (long long)cc->dh, (long long)cc->dw,
                      cc->same ? "same" : "valid", f16 ? "f16" : "f32", cpus[ci].cpu ? cpus[ci].cpu : "the host",
                      bo.threads, e);
        if (t) ck_assert_msg(memcmp(out[0][o], out[1][o], (size_t)(o ? nw : nx) * 4) == 0, "%s: 1 and 3 threads differ",
                             o ? "conv2d_filter_grad" : "conv2d_input_grad");
      }
      cg_exec_destroy(ex_);
      diag_sink_destroy(d);
    }
  ref_outputs_free(want, 2);
  free(rx), free(rdy);
  for (int k = 0; k < 3; k++) free(h[k]), free(e16[k]);
  for (int t = 0; t < 2; t++) free(out[t][0]), free(out[t][1]);
  ir_graph_destroy(g);
}

/* The gradient ops' float64 reference against central differences of the
 * forward conv2d's reference: L = sum(conv2d(x, w) * dy), so dL/dx =
 * conv2d_input_grad(dy, w) and dL/dw = conv2d_filter_grad(x, dy). L is
 * linear in each element, so the differences are exact but for rounding. */
static void check_conv_fd(const conv_case *cc) {
  ir_attr a = conv_attr(cc);
  int64_t N = cc->batch;
  int64_t OH = ir_conv_out_size(cc->H, cc->KH, cc->sh, cc->dh, a.pads.v[0], a.pads.v[1]);
  int64_t OW = ir_conv_out_size(cc->W, cc->KW, cc->sw, cc->dw, a.pads.v[2], a.pads.v[3]);
  ir_type xt = {DT_F32, 4, {IR_DIM_BATCH, cc->H, cc->W, cc->C}}, wt = {DT_F32, 4, {cc->KH, cc->KW, cc->C, cc->O}};
  ir_type yt = {DT_F32, 4, {IR_DIM_BATCH, OH, OW, cc->O}};
  ir_graph *f = ir_graph_create("fwd"), *b = ir_graph_create("bwd");
  ir_node *fx = ir_build_input(f, "x", &xt, 0, no_loc), *fw = ir_build_input(f, "w", &wt, 1, no_loc);
  ir_graph_add_output(f, "y", ir_build_op(f, IR_OP_CONV2D, "y", (ir_node *[]){fx, fw}, 2, &a, no_loc));
  ir_node *bx = ir_build_input(b, "x", &xt, 0, no_loc), *bw = ir_build_input(b, "w", &wt, 1, no_loc);
  ir_node *bdy = ir_build_input(b, "dy", &yt, 2, no_loc);
  a.shape = (ir_shape){4, {IR_DIM_BATCH, cc->H, cc->W, cc->C}};
  ir_graph_add_output(b, "dx", ir_build_op(b, IR_OP_CONV2D_INPUT_GRAD, "dx", (ir_node *[]){bdy, bw}, 2, &a, no_loc));
  a.shape = (ir_shape){4, {cc->KH, cc->KW, cc->C, cc->O}};
  ir_graph_add_output(b, "dw", ir_build_op(b, IR_OP_CONV2D_FILTER_GRAD, "dw", (ir_node *[]){bx, bdy}, 2, &a, no_loc));
  int64_t cnt[3] = {N * cc->H * cc->W * cc->C, cc->KH * cc->KW * cc->C * cc->O, N * OH * OW * cc->O};
  double *v[3];
  rng r;
  rng_init(&r, 19);
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
                    k ? "conv2d_filter_grad" : "conv2d_input_grad", (long long)i, grads[k][i], fd);
    }
  ref_outputs_free(grads, 2);
  for (int k = 0; k < 3; k++) free(v[k]);
  ir_graph_destroy(f), ir_graph_destroy(b);
}

START_TEST(test_conv2d_shapes) {
  static const conv_case cases[] = {
      /* N  H   W   C  KH KW  O   sh sw dh dw same  bias */
      {3, 7, 9, 3, 3, 3, 5, 1, 1, 1, 1, true, false, false},     /* 'same', odd sizes, 3 channels */
      {2, 9, 8, 5, 3, 3, 13, 2, 2, 1, 1, true, true, false},     /* stride 2, 'same' with the odd pixel at the end */
      {2, 11, 10, 6, 3, 3, 7, 1, 1, 2, 2, false, true, false},   /* dilation 2, 'valid' */
      {2, 6, 5, 11, 1, 1, 9, 1, 1, 1, 1, false, false, false},   /* 1x1 */
      {1, 12, 13, 3, 5, 5, 10, 2, 1, 1, 1, true, true, false},   /* 5x5, strides 2x1 */
      {2, 5, 6, 40, 3, 3, 37, 1, 1, 1, 1, true, false, false},   /* K = 360: two K blocks, an edge inside a tap */
      {1, 20, 20, 4, 3, 3, 600, 1, 1, 1, 1, true, true, false},  /* 400 pixels (rows > a row block), O > a column block */
      {4, 3, 3, 2, 3, 3, 1, 1, 1, 1, 1, false, false, false},    /* one output pixel, one output channel */
      {2, 8, 7, 300, 2, 3, 4, 3, 2, 1, 2, true, true, false},    /* C > K block: a tap over several blocks */
      {2, 7, 7, 24, 3, 3, 72, 1, 1, 1, 1, true, true, false},    /* ResNet's 7x7: 49 rows an image, tiles of 14, 14, 14, 7; panels outer, a tail panel */
      {2, 6, 5, 40, 1, 1, 37, 1, 1, 1, 1, false, true, false},   /* 1x1 on the GEMM: panels outer, a tail panel */
  };
  size_t k = 0;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    for (int f16 = 0; f16 < 2; f16++)
      if (test_case_runs(k++)) check_conv(&cases[i], f16), check_conv_grads(&cases[i], f16);
}
END_TEST

/* A static batch (ONNX models at --batch B): the GEMM's launch rows are
 * its pixels, split over rows or columns by the tiles' costs; the direct
 * convolution's are output rows (N x OH). Row tiles then start inside an
 * image (and a row block crosses images at batch 2); on 1, 2 and 3
 * threads, bit-identical. The shapes of ResNet and MobileNet at batch 1,
 * smaller: a 3x3 conv over many pixels (a row split), a 7x7 map of many
 * channels (a column split), the direct conv of 16 output channels; batch 2
 * over row tiles that are not whole images. */
START_TEST(test_conv2d_static_batch) {
  static const conv_case cases[] = {
      /* N  H   W   C  KH KW  O   sh sw dh dw same  bias  fixed */
      {1, 28, 28, 16, 3, 3, 40, 1, 1, 1, 1, true, true, true},   /* 784 pixels, 2 panels: rows */
      {1, 7, 7, 64, 3, 3, 160, 1, 1, 1, 1, true, true, true},    /* 49 pixels, 5 panels: columns */
      {2, 9, 9, 24, 3, 3, 72, 2, 2, 1, 1, true, true, true},     /* stride 2, 25 pixels an image, 2 images */
      {2, 15, 13, 32, 3, 3, 48, 1, 1, 1, 1, true, false, true},  /* row tiles across the images' edge */
      {1, 20, 11, 3, 3, 3, 16, 1, 1, 1, 1, true, true, true},    /* the direct convolution: 20 output rows */
  };
  size_t k = 0;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    if (test_case_runs(k++)) check_conv(&cases[i], false); /* (the split does not depend on the dtype) */
}
END_TEST

/* The direct convolution (cg_conv.c; the cases above with few output
 * channels run on it too): rows of several pixel tiles and a shorter last
 * one, edge tiles with columns in the padding. */
START_TEST(test_conv2d_direct) {
  static const conv_case cases[] = {
      /* N  H   W   C  KH KW  O   sh sw dh dw same  bias */
      {2, 9, 31, 1, 3, 3, 8, 1, 1, 1, 1, false, true, false},    /* one input channel, 8 output channels */
      {1, 6, 33, 3, 3, 3, 16, 1, 1, 1, 1, true, true, false},    /* 'same', 3 channels, 16 output channels */
      {2, 7, 18, 2, 3, 3, 24, 2, 1, 1, 2, true, false, false},   /* two vectors of output channels, strided, dilated */
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) check_conv(&cases[i], false);
}
END_TEST

/* bf16 operands (mixed_bfloat16), bf16 results. A conv2d the direct
 * convolution takes reads them widened to f32 on every CPU path
 * (cg_conv.c; on the K-pair family those of at most 4 input channels),
 * so the first CPU's results (the host's, or $CASTOR_CPU's:
 * ctest's check_conv@znver4 runs this case on the AVX512-BF16 family,
 * skipped on a host without it) equal haswell's (AVX2) bit for bit; a
 * conv2d of more output channels runs on the GEMM (the K-pair family on
 * AVX512-BF16), checked against the reference only. (The bf16 rounding of
 * the result hides most f32 roundings: vdpbf16ps's results on these cases
 * were haswell's too, so this does not tell which kernel ran.) */
START_TEST(test_conv2d_bf16) {
  static const conv_case direct[] = {
      /* N  H   W   C  KH KW  O   sh sw dh dw same  bias */
      {2, 28, 28, 1, 3, 3, 8, 1, 1, 1, 1, false, true, false},   /* an ONNX CNN's first layer */
      {1, 6, 33, 3, 3, 3, 16, 1, 1, 1, 1, true, true, false},    /* 'same', 3 channels */
      {2, 10, 11, 4, 3, 3, 16, 1, 1, 1, 1, true, true, false},   /* 4 channels: the most the K-pair family gives up */
      {2, 9, 12, 2, 3, 3, 5, 2, 1, 1, 2, true, false, false},    /* strided, dilated, 5 channels */
      {2, 6, 15, 2, 3, 3, 8, 1, 1, 1, 1, true, true, true},      /* 8 channels, 15 a row: two rows a vector, one alone */
  };
  static const conv_case gemm[] = {
      {2, 7, 9, 1, 3, 3, 32, 1, 1, 1, 1, true, true, false},     /* 32 channels: direct on AVX-512, the GEMM on AVX2 */
      {2, 13, 13, 8, 3, 3, 16, 1, 1, 1, 1, false, true, false},  /* the CNN's second layer: 8 channels, vdpbf16ps */
      {2, 6, 7, 8, 3, 3, 48, 1, 1, 1, 1, true, true, false},     /* the GEMM everywhere */
      {2, 5, 6, 40, 3, 3, 37, 1, 1, 1, 1, true, false, false},   /* K = 360: K blocks */
  };
  for (size_t i = 0; i < sizeof direct / sizeof direct[0]; i++) {
    const conv_case *cc = &direct[i];
    int64_t OH = cc->same ? (cc->H + cc->sh - 1) / cc->sh : (cc->H - cc->dh * (cc->KH - 1) - 1) / cc->sh + 1;
    int64_t OW = cc->same ? (cc->W + cc->sw - 1) / cc->sw : (cc->W - cc->dw * (cc->KW - 1) - 1) / cc->sw + 1;
    size_t ny = (size_t)(cc->batch * OH * OW * cc->O);
    float *host = xmalloc(ny * 4), *avx2 = xmalloc(ny * 4);
    check_conv_as(cc, DT_BF16, host, avx2);
    ck_assert_msg(memcmp(host, avx2, ny * 4) == 0, "bf16 conv2d case %zu: the first CPU's results differ from haswell's", i);
    free(host), free(avx2);
  }
  for (size_t i = 0; i < sizeof gemm / sizeof gemm[0]; i++) check_conv_as(&gemm[i], DT_BF16, NULL, NULL);
}
END_TEST

/* A bf16 conv2d of cc->O (here: wide) output channels, w's and b's
 * column o the same values whatever the width (the first columns of one
 * [KH, KW, C, 48] draw), on the first CPU at `threads`, a static batch:
 * its bf16 results widened to out (N*OH*OW rows of `keep` columns), and
 * the conv's launch rows. */
static void run_bf16_conv_cols(const conv_case *cc, int64_t keep, int threads, float *out, int64_t *out_rows) {
  enum { WIDE = 48 };
  ir_graph *g = ir_graph_create("conv_cols");
  int64_t N = cc->batch, O = cc->O, K = cc->KH * cc->KW * cc->C, nx = N * cc->H * cc->W * cc->C;
  uint16_t *ex = xmalloc((size_t)nx * 2), *ew = xmalloc((size_t)(K * O) * 2), *eb = xmalloc((size_t)O * 2);
  rng r;
  rng_init(&r, 17);
  for (int64_t i = 0; i < nx; i++) ex[i] = half_f32_to_bf16(rng_uniform_f32(&r, -1, 1));
  for (int64_t k = 0; k < K; k++)
    for (int64_t o = 0; o < WIDE; o++) {
      uint16_t v = half_f32_to_bf16(rng_uniform_f32(&r, -1, 1));
      if (o < O) ew[k * O + o] = v;
    }
  for (int64_t o = 0; o < WIDE; o++) {
    uint16_t v = half_f32_to_bf16(rng_uniform_f32(&r, -1, 1));
    if (o < O) eb[o] = v;
  }
  ir_type xt = {DT_BF16, 4, {N, cc->H, cc->W, cc->C}}, wt = {DT_BF16, 4, {cc->KH, cc->KW, cc->C, O}}, bt = {DT_BF16, 1, {O}};
  ir_node *x = ir_build_input(g, "x", &xt, 0, no_loc);
  ir_node *w = ir_build_const(g, "w", &wt, "w", ew, no_loc);
  ir_attr a = conv_attr(cc);
  ir_node *y = conv_bias_relu(g, cc, &a, x, w, &bt, eb);
  ir_graph_add_output(g, "y", ir_build_cast(g, "y32", y, DT_F32, no_loc));
  ir_graph_renumber(g);
  int64_t pix = N * y->type.dims[1] * y->type.dims[2];
  float *full = xmalloc((size_t)(pix * O) * 4);
  diag_sink *d = diag_sink_create();
  cg_backend_options bo;
  cg_backend_options_init(&bo);
  bo.threads = threads;
  bo.cg.cpu = cpus[0].cpu, bo.cg.features = cpus[0].features;
  setenv("CASTOR_PARALLEL_MIN_WORK", "0", 1);
  cg_exec *ex_ = cg_backend_compile(&cg_backend_cpu, g, &bo, d);
  ck_assert_msg(ex_, "compile: %s", diag_text(d));
  *out_rows = -1; /* the conv's launch (kernel "k<i>.y_conv", the cast to f32 in its epilogue or after it) */
  for (int li = 0; li < ex_->desc->n_launches; li++)
    if (strstr(ex_->desc->launches[li].name, ".y")) {
      *out_rows = ex_->desc->launches[li].rows_fixed;
      break;
    }
  const void *ins[] = {ex};
  void *outs[] = {full};
  ck_assert_msg(cg_backend_cpu.run(ex_, N, ins, outs, d), "run: %s", diag_text(d));
  unsetenv("CASTOR_PARALLEL_MIN_WORK");
  for (int64_t p = 0; p < pix; p++) memcpy(out + p * keep, full + p * O, (size_t)keep * 4);
  cg_exec_destroy(ex_);
  diag_sink_destroy(d);
  free(full), free(ex), free(ew), free(eb);
  ir_graph_destroy(g);
}

/* The K-pair direct convolution (cg_conv.c, gemm_conv.kpair: a bf16
 * conv2d of an even C over 4, one K block, 16 or 32 output channels, on
 * the AVX512-BF16 family) sums the packed GEMM's pairs in its order: its
 * columns equal, bit for bit, the same columns of a conv2d of 48 output
 * channels (the GEMM on every family), on 1 and 3 threads; padding rows
 * and columns, strides, dilations, a kernel row unrolled or looped. On
 * other families both are the same kernel, and the test still holds.
 * check_conv@znver4 runs it on the K-pair family and checks that the
 * direct kernel ran (its launch rows are output rows, not pixels). */
START_TEST(test_conv2d_bf16_kpair) {
  static const conv_case cases[] = {
      /* N  H   W   C  KH KW  O   sh sw dh dw same  bias */
      {2, 13, 13, 8, 3, 3, 16, 1, 1, 1, 1, false, true, true},   /* the ONNX CNN's second layer */
      {2, 16, 16, 16, 3, 3, 16, 1, 1, 1, 1, true, true, true},   /* the ONNX resnet's convs: padding rows and columns */
      {2, 9, 12, 6, 3, 3, 32, 2, 1, 1, 2, true, false, true},    /* 3 pairs, strided, dilated, two vectors */
      {1, 7, 10, 24, 3, 3, 16, 1, 1, 1, 1, true, true, true},    /* 36 pairs a kernel row: the pair loop */
      {3, 5, 19, 10, 1, 1, 32, 1, 1, 1, 1, false, true, true},   /* 1x1 */
  };
  const char *cpu = getenv("CASTOR_CPU");
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    conv_case narrow = cases[i], wide = cases[i];
    wide.O = 48;
    int64_t OH = narrow.same ? (narrow.H + narrow.sh - 1) / narrow.sh : (narrow.H - narrow.dh * (narrow.KH - 1) - 1) / narrow.sh + 1;
    int64_t OW = narrow.same ? (narrow.W + narrow.sw - 1) / narrow.sw : (narrow.W - narrow.dw * (narrow.KW - 1) - 1) / narrow.sw + 1;
    size_t n = (size_t)(narrow.batch * OH * OW * narrow.O);
    float *a = xmalloc(n * 4), *b = xmalloc(n * 4);
    int64_t rows_a, rows_b;
    run_bf16_conv_cols(&wide, narrow.O, 1, b, &rows_b);
    for (int threads = 1; threads <= 3; threads += 2) {
      run_bf16_conv_cols(&narrow, narrow.O, threads, a, &rows_a);
      ck_assert_msg(memcmp(a, b, n * 4) == 0, "bf16 conv2d case %zu, %d threads: %lld columns differ from the wide conv's",
                    i, threads, (long long)narrow.O);
    }
    if (cpu && strcmp(cpu, "znver4") == 0)
      ck_assert_msg(rows_a == narrow.batch * OH && rows_b == narrow.batch * OH * OW,
                    "case %zu: launch rows %lld (direct: %lld) and %lld (GEMM: %lld)", i, (long long)rows_a,
                    (long long)(narrow.batch * OH), (long long)rows_b, (long long)(narrow.batch * OH * OW));
    free(a), free(b);
  }
}
END_TEST

/* Odd shapes: stride 2, dilation 2, 'same' with odd sizes, 1x1 and 5x5
 * kernels, channels not a multiple of 8. */
START_TEST(test_conv2d_gradients_fd) {
  static const conv_case cases[] = {
      {2, 7, 5, 3, 3, 3, 5, 2, 2, 1, 1, true, false, false},
      {2, 9, 8, 3, 3, 2, 4, 1, 1, 2, 2, false, false, false},
      {1, 5, 7, 5, 1, 1, 3, 2, 1, 1, 1, true, false, false},
      {1, 6, 7, 2, 5, 5, 3, 1, 2, 1, 1, true, false, false},
      {2, 6, 6, 11, 3, 3, 9, 2, 2, 1, 1, true, false, false},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) check_conv_fd(&cases[i]);
}
END_TEST

/* The shape rule's errors name the operands. */
START_TEST(test_conv2d_type_errors) {
  ir_graph *g = ir_graph_create("conv");
  ir_type xt = {DT_F32, 4, {IR_DIM_BATCH, 5, 5, 3}};
  ir_node *x = ir_build_input(g, "x", &xt, 0, no_loc);
  ir_type wt = {DT_F32, 4, {3, 3, 4, 8}};
  ir_node *w = ir_build_const(g, "w", &wt, "w", NULL, no_loc);
  ir_attr a = {.acc = DT_F32, .strides = {2, {1, 1}}, .dilations = {2, {1, 1}}, .pads = {4, {0}}};
  ir_type out;
  char err[256];
  ck_assert(!ir_infer_type(IR_OP_CONV2D, (ir_node *[]){x, w}, 2, &a, &out, err, sizeof err));
  ck_assert_msg(strstr(err, "conv2d kernel f32[3,3,4,8] takes 4 input channels, x f32[N,5,5,3] has 3"), "%s", err);
  w->type.dims[2] = 3;
  a.dilations.v[0] = 3; /* a span of 7 rows in 5 */
  ck_assert(!ir_infer_type(IR_OP_CONV2D, (ir_node *[]){x, w}, 2, &a, &out, err, sizeof err));
  ck_assert_msg(strstr(err, "does not fit"), "%s", err);
  a.dilations.v[0] = 1;
  a.strides.v[1] = 0;
  ck_assert(!ir_infer_type(IR_OP_CONV2D, (ir_node *[]){x, w}, 2, &a, &out, err, sizeof err));
  ck_assert_msg(strstr(err, "strides=[sh,sw]"), "%s", err);
  a.strides.v[1] = 2;
  a.pads = (ir_attr_INTS){4, {1, 1, 0, 1}};
  ck_assert_msg(ir_infer_type(IR_OP_CONV2D, (ir_node *[]){x, w}, 2, &a, &out, err, sizeof err), "%s", err);
  ck_assert_int_eq(out.dims[1], 5);
  ck_assert_int_eq(out.dims[2], 2);
  ck_assert_int_eq(out.dims[3], 8);
  ir_graph_destroy(g);
}
END_TEST

/* Pooling (the kernel kit's window maps) on odd shapes: windows wider
 * than their strides and narrower, 'same' with the odd pad at the end,
 * channels not a multiple of a vector, f32 and f16, under a fused relu; on
 * every CPU path, 1 and 3 threads bit-identical, against the reference. */
static void check_pool(ir_op op, const conv_case *cc, bool f16) {
  ir_graph *g = ir_graph_create("pool");
  ir_dtype dt = f16 ? DT_F16 : DT_F32;
  int64_t N = cc->batch, nx = N * cc->H * cc->W * cc->C;
  float *hx = xmalloc((size_t)nx * 4);
  uint16_t *ex = xmalloc((size_t)nx * 2);
  rng r;
  rng_init(&r, 23);
  for (int64_t i = 0; i < nx; i++) hx[i] = half_f16_to_f32(ex[i] = half_f32_to_f16(rng_uniform_f32(&r, -1, 1)));
  ir_attr a = {.pool = {2, {cc->KH, cc->KW}}, .strides = {2, {cc->sh, cc->sw}}, .pads = {4, {0}}};
  if (cc->same) {
    same_pads(cc->H, cc->KH, cc->sh, 1, &a.pads.v[0], &a.pads.v[1]);
    same_pads(cc->W, cc->KW, cc->sw, 1, &a.pads.v[2], &a.pads.v[3]);
  }
  ir_type xt = {dt, 4, {IR_DIM_BATCH, cc->H, cc->W, cc->C}};
  ir_node *x = ir_build_input(g, "x", &xt, 0, no_loc);
  ir_node *y = ir_build_op(g, op, "y", &x, 1, &a, no_loc);
  if (cc->bias_relu) y = ir_build_unary(g, IR_OP_RELU, "y.relu", y, no_loc);
  int64_t ny = N * y->type.dims[1] * y->type.dims[2] * cc->C;
  ir_graph_add_output(g, "y", f16 ? ir_build_cast(g, "y32", y, DT_F32, no_loc) : y);
  ir_graph_renumber(g);
  double *rx = ref_from_f32(hx, nx), *want[1] = {NULL};
  char err[256];
  ck_assert_msg(ref_run(g, N, (const double *[]){rx}, want, err, sizeof err), "%s", err);
  float *out[2] = {xmalloc((size_t)ny * 4), xmalloc((size_t)ny * 4)};
  for (int ci = 0; ci < N_CPUS; ci++)
    for (int t = 0; t < 2; t++) {
      diag_sink *d = diag_sink_create();
      cg_backend_options bo;
      cg_backend_options_init(&bo);
      bo.threads = t ? 3 : 1;
      bo.cg.cpu = cpus[ci].cpu, bo.cg.features = cpus[ci].features;
      setenv("CASTOR_PARALLEL_MIN_WORK", "0", 1);
      cg_exec *ex_ = cg_backend_compile(&cg_backend_cpu, g, &bo, d);
      ck_assert_msg(ex_, "compile: %s", diag_text(d));
      const void *ins[] = {f16 ? (void *)ex : hx};
      void *outs[] = {out[t]};
      ck_assert_msg(cg_backend_cpu.run(ex_, N, ins, outs, d), "run: %s", diag_text(d));
      unsetenv("CASTOR_PARALLEL_MIN_WORK");
      double e = ref_max_rel_error(out[t], want[0], ny, 1e-3);
      ck_assert_msg(e <= (f16 ? 1e-3 : 1e-6), "%s x [%lld,%lld,%lld,%lld] pool %lldx%lld s %lldx%lld %s %s on %s: error %g",
                    ir_op_name(op), (long long)N, (long long)cc->H, (long long)cc->W, (long long)cc->C,
                    (long long)cc->KH, (long long)cc->KW, (long long)cc->sh, (long long)cc->sw,
                    cc->same ? "same" : "valid", f16 ? "f16" : "f32", cpus[ci].cpu ? cpus[ci].cpu : "the host", e);
      if (t) ck_assert_msg(memcmp(out[0], out[1], (size_t)ny * 4) == 0, "%s: 1 and 3 threads differ", ir_op_name(op));
      cg_exec_destroy(ex_);
      diag_sink_destroy(d);
    }
  ref_outputs_free(want, 1);
  free(rx), free(hx), free(ex), free(out[0]), free(out[1]);
  ir_graph_destroy(g);
}

/* Pooling's gradients: the CPU's gather against the reference (max: ties
 * too, from inputs in {-1, 0, 1}, routed to the first maximal tap), every
 * CPU path, 1 and 3 threads bit-identical; and the reference against
 * central differences of the forward pooling (no ties). */
static void check_pool_grad(ir_op op, const conv_case *cc, bool f16, bool ties) {
  ir_graph *g = ir_graph_create("pool_grad");
  ir_dtype dt = f16 ? DT_F16 : DT_F32;
  int64_t N = cc->batch, nx = N * cc->H * cc->W * cc->C;
  ir_attr a = {.pool = {2, {cc->KH, cc->KW}}, .strides = {2, {cc->sh, cc->sw}}, .pads = {4, {0}}};
  if (cc->same) {
    same_pads(cc->H, cc->KH, cc->sh, 1, &a.pads.v[0], &a.pads.v[1]);
    same_pads(cc->W, cc->KW, cc->sw, 1, &a.pads.v[2], &a.pads.v[3]);
  }
  int64_t OH = ir_conv_out_size(cc->H, cc->KH, cc->sh, 1, a.pads.v[0], a.pads.v[1]);
  int64_t OW = ir_conv_out_size(cc->W, cc->KW, cc->sw, 1, a.pads.v[2], a.pads.v[3]);
  int64_t ny = N * OH * OW * cc->C;
  float *hx = xmalloc((size_t)nx * 4), *hy = xmalloc((size_t)ny * 4);
  uint16_t *ex = xmalloc((size_t)nx * 2), *ey = xmalloc((size_t)ny * 2);
  rng r;
  rng_init(&r, 29);
  for (int64_t i = 0; i < nx; i++) {
    float v = ties ? (float)((int)(rng_next(&r) % 3) - 1) : rng_uniform_f32(&r, -1, 1);
    hx[i] = half_f16_to_f32(ex[i] = half_f32_to_f16(v));
  }
  for (int64_t i = 0; i < ny; i++) hy[i] = half_f16_to_f32(ey[i] = half_f32_to_f16(rng_uniform_f32(&r, -1, 1)));
  ir_type xt = {dt, 4, {IR_DIM_BATCH, cc->H, cc->W, cc->C}}, yt = {dt, 4, {IR_DIM_BATCH, OH, OW, cc->C}};
  ir_node *x = ir_build_input(g, "x", &xt, 0, no_loc), *dy = ir_build_input(g, "dy", &yt, 1, no_loc);
  ir_op gop = op == IR_OP_MAX_POOL2D ? IR_OP_MAX_POOL2D_GRAD : IR_OP_AVG_POOL2D_GRAD;
  ir_node *dx = ir_build_op(g, gop, "dx", (ir_node *[]){dy, x}, 2, &a, no_loc);
  ir_graph_add_output(g, "dx", f16 ? ir_build_cast(g, "dx32", dx, DT_F32, no_loc) : dx);
  ir_graph_renumber(g);
  double *rx = ref_from_f32(hx, nx), *rdy = ref_from_f32(hy, ny), *want[1] = {NULL};
  char err[256];
  ck_assert_msg(ref_run(g, N, (const double *[]){rx, rdy}, want, err, sizeof err), "%s", err);
  float *out[2] = {xmalloc((size_t)nx * 4), xmalloc((size_t)nx * 4)};
  for (int ci = 0; ci < N_CPUS; ci++)
    for (int t = 0; t < 2; t++) {
      diag_sink *d = diag_sink_create();
      cg_backend_options bo;
      cg_backend_options_init(&bo);
      bo.threads = t ? 3 : 1;
      bo.cg.cpu = cpus[ci].cpu, bo.cg.features = cpus[ci].features;
      setenv("CASTOR_PARALLEL_MIN_WORK", "0", 1);
      cg_exec *ex_ = cg_backend_compile(&cg_backend_cpu, g, &bo, d);
      ck_assert_msg(ex_, "compile: %s", diag_text(d));
      const void *ins[] = {f16 ? (void *)ex : hx, f16 ? (void *)ey : hy};
      void *outs[] = {out[t]};
      ck_assert_msg(cg_backend_cpu.run(ex_, N, ins, outs, d), "run: %s", diag_text(d));
      unsetenv("CASTOR_PARALLEL_MIN_WORK");
      double e = ref_normalized_error(out[t], want[0], nx);
      ck_assert_msg(e <= (f16 ? 1e-3 : 1e-6), "%s x [%lld,%lld,%lld,%lld] pool %lldx%lld s %lldx%lld %s %s%s on %s: error %g",
                    ir_op_name(gop), (long long)N, (long long)cc->H, (long long)cc->W, (long long)cc->C,
                    (long long)cc->KH, (long long)cc->KW, (long long)cc->sh, (long long)cc->sw,
                    cc->same ? "same" : "valid", f16 ? "f16" : "f32", ties ? " ties" : "",
                    cpus[ci].cpu ? cpus[ci].cpu : "the host", e);
      if (t) ck_assert_msg(memcmp(out[0], out[1], (size_t)nx * 4) == 0, "%s: 1 and 3 threads differ", ir_op_name(gop));
      cg_exec_destroy(ex_);
      diag_sink_destroy(d);
    }
  if (!ties && !f16 && nx <= 2000) { /* the reference's gradient against finite differences of the forward
                                      * pooling, at x in full precision (16-bit rounding would make ties) */
    for (int64_t i = 0; i < nx; i++) rx[i] = rng_uniform_f32(&r, -1, 1) + 1e-9 * rng_uniform_f32(&r, -1, 1);
    ref_outputs_free(want, 1);
    want[0] = NULL;
    ck_assert_msg(ref_run(g, N, (const double *[]){rx, rdy}, want, err, sizeof err), "%s", err);
    ir_graph *f = ir_graph_create("fwd");
    ir_type ft = {DT_F32, 4, {IR_DIM_BATCH, cc->H, cc->W, cc->C}};
    ir_node *fx = ir_build_input(f, "x", &ft, 0, no_loc);
    ir_graph_add_output(f, "y", ir_build_op(f, op, "y", &fx, 1, &a, no_loc));
    for (int64_t i = 0; i < nx; i++) {
      double keep = rx[i], h = 1e-6, l[2];
      for (int sgn = 0; sgn < 2; sgn++) {
        rx[i] = keep + (sgn ? -h : h);
        double *y[1] = {NULL};
        ck_assert_msg(ref_run(f, N, (const double *[]){rx}, y, err, sizeof err), "%s", err);
        l[sgn] = 0;
        for (int64_t j = 0; j < ny; j++) l[sgn] += y[0][j] * rdy[j];
        ref_outputs_free(y, 1);
      }
      rx[i] = keep;
      double fd = (l[0] - l[1]) / (2 * h);
      ck_assert_msg(fabs(fd - want[0][i]) <= 1e-6 * fmax(1, fabs(fd)), "%s[%lld] = %.12g, finite differences %.12g",
                    ir_op_name(gop), (long long)i, want[0][i], fd);
    }
    ir_graph_destroy(f);
  }
  ref_outputs_free(want, 1);
  free(rx), free(rdy), free(hx), free(hy), free(ex), free(ey), free(out[0]), free(out[1]);
  ir_graph_destroy(g);
}

START_TEST(test_pool2d_shapes) {
  static const conv_case cases[] = {
      /* N  H   W   C  ph pw O  sh sw dh dw same  relu */
      {3, 7, 9, 3, 2, 2, 0, 2, 2, 1, 1, false, false, false}, /* Keras's default 2x2, odd sizes: the last row dropped */
      {2, 7, 9, 5, 2, 2, 0, 2, 2, 1, 1, true, true, false},   /* 'same': the odd pad at the end */
      {2, 8, 6, 17, 3, 3, 0, 2, 2, 1, 1, true, false, false}, /* 3x3 over stride 2 (overlapping) */
      {1, 5, 10, 4, 3, 1, 0, 1, 3, 1, 1, true, true, false},  /* 3x1 windows, strides 1x3 */
      {2, 28, 28, 32, 2, 2, 0, 2, 2, 1, 1, false, false, false},
      /* convolutional networks: pooling runs vw channels at a time, then
       * half and quarter vectors, then one by one: 29 = 16 + 8 + 4 + 1 */
      {2, 9, 7, 29, 2, 2, 0, 2, 2, 1, 1, true, true, false},
      {1, 6, 6, 12, 3, 3, 0, 1, 1, 1, 1, true, false, false}, /* 8 + 4, overlapping 3x3 windows */
      /* convolutional networks: pooling's gradient, an element in up to
       * ceil(pool / stride) windows per dimension: 25 windows of 25 taps
       * (both looped), and strides past the pool (gaps no window holds) */
      {1, 7, 6, 11, 5, 5, 0, 1, 1, 1, 1, true, false, false},
      {2, 9, 8, 6, 2, 2, 0, 3, 3, 1, 1, false, true, false},
      {1, 10, 9, 9, 2, 3, 0, 3, 4, 1, 1, true, false, false},
      {2, 5, 6, 7, 5, 6, 0, 1, 1, 1, 1, false, false, false}, /* global pooling: one window of 30 taps, stride 1 */
  };
  size_t k = 0;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    for (int f16 = 0; f16 < 2; f16++) {
      if (!test_case_runs(k++)) continue;
      check_pool(IR_OP_MAX_POOL2D, &cases[i], f16);
      check_pool(IR_OP_AVG_POOL2D, &cases[i], f16);
      check_pool_grad(IR_OP_MAX_POOL2D, &cases[i], f16, false);
      check_pool_grad(IR_OP_MAX_POOL2D, &cases[i], f16, true);
      check_pool_grad(IR_OP_AVG_POOL2D, &cases[i], f16, false);
    }
}
END_TEST

static Suite *conv_suite(void) {
  Suite *s = suite_create("conv");
  TCase *tc = tcase_create("conv2d");
  tcase_set_timeout(tc, 590); /* 30 s of CPU, but 6 minutes of wall time on 2 cores at load 25: up to ctest's limit */
  tcase_add_test(tc, test_conv2d_shapes);
  tcase_add_test(tc, test_conv2d_direct);
  tcase_add_test(tc, test_conv2d_static_batch);
  tcase_add_test(tc, test_conv2d_type_errors);
  tcase_add_test(tc, test_conv2d_gradients_fd);
  tcase_add_test(tc, test_pool2d_shapes);
  suite_add_tcase(s, tc);
  TCase *tb = tcase_create("bf16"); /* convolutional networks: bf16 operands */
  tcase_set_timeout(tb, 590);
  tcase_add_test(tb, test_conv2d_bf16);
  tcase_add_test(tb, test_conv2d_bf16_kpair);
  suite_add_tcase(s, tb);
  return s;
}

int main(void) {
  if (getenv("CASTOR_CPU")) check_cpu_path("check_conv");
  /* the implicit GEMM and the direct convolution: Winograd's 3x3 convs are check_winograd's */
  setenv("CASTOR_CONV_ALGO", "direct", 1); /* check_conv@CPU: skipped where the host cannot run it */
  return check_run(conv_suite());
}
