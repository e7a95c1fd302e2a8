/* SPDX-License-Identifier: Apache-2.0 */
/*
 * check_winograd.c: convolutional networks: Winograd F(4x4, 3x3) for a
 * float32 3x3 stride-1 conv2d with a constant kernel on the CPU
 * (codegen/cpu/cg_wino.c), against the float64 reference: output sizes
 * not multiples of 4 (partial tiles at the right and bottom edges), pads
 * 0 and 1, batches of 1 to 3 (symbolic and static), channels not
 * multiples of a vector, several blocks of tile rows an image, blocks of
 * several whole images (a static batch's 14x14 and 7x7 maps: tiles across
 * image boundaries, a last block of fewer images, batches 1, 2, 3, 7, 16
 * and 17), with bias,
 * relu and a residual add fused into its epilogue; on every CPU code path
 * (the host's, AVX2's 8 lanes, SSE's 4), on 1, 2 and 3 threads, which must
 * give the same bits. (Winograd takes the convs of the implicit GEMM; the
 * direct convolution's, K <= 256 and at most two vectors of outputs, stay
 * there: the shapes below are the GEMM's.) The opt-out (CASTOR_CONV_ALGO=direct) gives the
 * usual convolution; auto picks Winograd only where the cost model says.
 */
#include <check.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/unit/test_support.h"
#include "api/internal.h"
#include "codegen/cg_backend.h"
#include "codegen/cpu/cg_wino_pack.h"
#include "tests/ref/ref.h"
#include "util/util.h"

static const diag_loc no_loc = {0};

static const struct { const char *cpu, *features; } cpus[] = {
    {NULL, NULL}, {"haswell", "+sse2,+sse4.2,+avx,+avx2,+fma,+f16c"}, {"x86-64", "+sse2"}};
enum { N_CPUS = sizeof cpus / sizeof cpus[0] };

/* The bound against the float64 reference (normalized: max |error| over
 * max |reference|) that Winograd's results keep: the largest measured over
 * these cases was 7.0e-6 (docs/numerics.md); the direct path's is 2e-6. */
#define WINO_BOUND 1e-5
#define DIRECT_BOUND 2e-6

typedef struct wcase {
  int64_t batch, H, W, C, O;
  bool pad;      /* pads 1 ('same'), else 0 ('valid') */
  bool fused;    /* + bias, + residual input, relu */
  bool fixed;    /* a static batch: launch rows are blocks of tile rows */
  int64_t imgs;  /* a static batch: the images a block must take (cg_wino.c's rule), 0: one */
  int64_t rows;  /* a static batch: the launch rows (blocks) it must have on every CPU path, 0: not checked */
} wcase;

static double max_err_seen;

/* Compiles and runs the case on every CPU path and thread count under
 * CASTOR_CONV_ALGO=algo; wino: whether the conv must have taken Winograd.
 * out (if not NULL) gets the host's 1-thread result. */
static void run_case(const wcase *cc, const char *algo, bool wino, float *out_host) {
  ir_graph *g = ir_graph_create("wino");
  int64_t N = cc->batch, p = cc->pad ? 1 : 0;
  int64_t OH = cc->H + 2 * p - 2, OW = cc->W + 2 * p - 2;
  int64_t nx = N * cc->H * cc->W * cc->C, nw = 9 * cc->C * cc->O, ny = N * OH * OW * cc->O;
  float *hx = xmalloc((size_t)nx * 4), *hw = xmalloc((size_t)nw * 4), *hb = xmalloc((size_t)cc->O * 4);
  float *hr = xmalloc((size_t)ny * 4);
  rng r;
  rng_init(&r, 40);
  for (int64_t i = 0; i < nx; i++) hx[i] = rng_uniform_f32(&r, -1, 1);
  for (int64_t i = 0; i < nw; i++) hw[i] = rng_uniform_f32(&r, -1, 1);
  for (int64_t i = 0; i < cc->O; i++) hb[i] = rng_uniform_f32(&r, -1, 1);
  for (int64_t i = 0; i < ny; i++) hr[i] = rng_uniform_f32(&r, -4, 4);
  int64_t nd = cc->fixed ? N : IR_DIM_BATCH;
  ir_type xt = {DT_F32, 4, {nd, cc->H, cc->W, cc->C}}, wt = {DT_F32, 4, {3, 3, cc->C, cc->O}};
  ir_type bt = {DT_F32, 1, {cc->O}}, rt = {DT_F32, 4, {nd, OH, OW, cc->O}};
  ir_node *x = ir_build_input(g, "x", &xt, 0, no_loc);
  ir_node *res = cc->fused ? ir_build_input(g, "r", &rt, 1, no_loc) : NULL;
  ir_node *w = ir_build_const(g, "w", &wt, "w", hw, no_loc);
  ir_attr a = {.acc = DT_F32, .strides = {2, {1, 1}}, .dilations = {2, {1, 1}}, .pads = {4, {p, p, p, p}}};
  ir_node *y = ir_build_op(g, IR_OP_CONV2D, "y", (ir_node *[]){x, w}, 2, &a, no_loc);
  if (cc->fused) {
    ir_node *b = ir_build_const(g, "b", &bt, "b", hb, no_loc);
    y = ir_build_binary(g, IR_OP_ADD, "y.bias", y, b, no_loc);
    y = ir_build_binary(g, IR_OP_ADD, "y.res", y, res, no_loc);
    y = ir_build_unary(g, IR_OP_RELU, "y.relu", y, no_loc);
  }
  ir_graph_add_output(g, "y", y);
  ir_graph_renumber(g);
  double *rx = ref_from_f32(hx, nx), *rr = ref_from_f32(hr, ny), *want[1] = {NULL};
  char err[256];
  const double *rins[] = {rx, rr};
  ck_assert_msg(ref_run(g, N, rins, want, err, sizeof err), "%s", err);
  float *out[3] = {xmalloc((size_t)ny * 4), xmalloc((size_t)ny * 4), xmalloc((size_t)ny * 4)};
  setenv("CASTOR_CONV_ALGO", algo, 1);
  setenv("CASTOR_PARALLEL_MIN_WORK", "0", 1);
  for (int ci = 0; ci < N_CPUS; ci++)
    for (int t = 0; t < 3; t++) {
      diag_sink *d = diag_sink_create();
      cg_backend_options bo;
      cg_backend_options_init(&bo);
      bo.threads = t + 1;
      bo.cg.cpu = cpus[ci].cpu, bo.cg.features = cpus[ci].features;
      cg_exec *ex = cg_backend_compile(&cg_backend_cpu, g, &bo, d);
      ck_assert_msg(ex, "compile: %s", diag_text(d));
      int convs = 0;
      for (int li = 0; li < ex->desc->n_launches; li++) {
        const rt_launch *l = &ex->desc->launches[li];
        if (l->algo) {
          ck_assert_str_eq(l->algo, "winograd");
          /* blocks of whole images: the launch's rows are images, split in steps of a block */
          ck_assert_msg(l->row_step == (cc->imgs > 1 ? cc->imgs : 1), "x [%lld,%lld,%lld,%lld]: blocks of %lld images, want %lld",
                        (long long)N, (long long)cc->H, (long long)cc->W, (long long)cc->C, (long long)l->row_step,
                        (long long)(cc->imgs > 1 ? cc->imgs : 1));
          if (cc->rows)
            ck_assert_msg(l->rows_fixed == cc->rows, "x [%lld,%lld,%lld,%lld] O %lld on %s: %lld launch rows, want %lld",
                          (long long)N, (long long)cc->H, (long long)cc->W, (long long)cc->C, (long long)cc->O,
                          cpus[ci].cpu ? cpus[ci].cpu : "the host", (long long)l->rows_fixed, (long long)cc->rows);
          convs++;
        }
      }
      ck_assert_msg(convs == (wino ? 1 : 0), "CASTOR_CONV_ALGO=%s, x [%lld,%lld,%lld,%lld] O %lld: %d Winograd kernels, want %d",
                    algo, (long long)N, (long long)cc->H, (long long)cc->W, (long long)cc->C, (long long)cc->O, convs,
                    wino ? 1 : 0);
      const void *ins[] = {hx, hr};
      void *outs[] = {out[t]};
      ck_assert_msg(cg_backend_cpu.run(ex, N, ins, outs, d), "run: %s", diag_text(d));
      double e = ref_normalized_error(out[t], want[0], ny);
      if (wino && e > max_err_seen) max_err_seen = e;
      ck_assert_msg(e <= (wino ? WINO_BOUND : DIRECT_BOUND),
                    "%s: x [%lld,%lld,%lld,%lld] O %lld pad %lld on %s, %d threads: normalized error %g", algo,
                    (long long)N, (long long)cc->H, (long long)cc->W, (long long)cc->C, (long long)cc->O, (long long)p,
                    cpus[ci].cpu ? cpus[ci].cpu : "the host", bo.threads, e);
      if (t) ck_assert_msg(memcmp(out[0], out[t], (size_t)ny * 4) == 0, "%s: 1 and %d threads differ", algo, bo.threads);
      if (!t && ci == 0 && out_host) memcpy(out_host, out[0], (size_t)ny * 4);
      cg_exec_destroy(ex);
      diag_sink_destroy(d);
    }
  unsetenv("CASTOR_PARALLEL_MIN_WORK");
  unsetenv("CASTOR_CONV_ALGO");
  ref_outputs_free(want, 1);
  free(rx), free(rr), free(hx), free(hw), free(hb), free(hr), free(out[0]), free(out[1]), free(out[2]);
  ir_graph_destroy(g);
}

START_TEST(test_winograd_shapes) {
  static const wcase cases[] = {
      /* N  H   W   C   O  pad   fused  fixed */
      {2, 10, 10, 37, 45, true, true, false, 0, 0},  /* OH = OW = 10: partial tiles; C, O not vectors */
      {1, 11, 9, 24, 40, false, true, false, 0, 0},  /* pad 0: 9 x 7 outputs */
      {3, 7, 13, 40, 5, true, false, true, 3, 0}, /* a static batch of 3 (8 tiles: one block); O below a vector */
      {2, 30, 30, 96, 64, true, true, true, 0, 0},   /* two blocks of tile rows per image */
      {1, 5, 5, 16, 33, true, true, false, 0, 0},    /* one 4x4 tile and the edge's 1-pixel tiles */
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    if (!test_case_runs(i)) continue;
    run_case(&cases[i], "winograd", true, NULL);
  }
  fprintf(stderr, "check_winograd: max normalized error %.3g (bound %g)\n", max_err_seen, WINO_BOUND);
}
END_TEST

/* A static batch's small maps (fewer than 25 tiles an image) in blocks of
 * whole images, at least 64 tiles a block (as many as the batch has),
 * equal blocks but the last: the 36 GEMMs' tiles run across image
 * boundaries. Each case also against the same conv with a symbolic batch
 * (blocks of one image): every tile's sums are the same operations in the
 * same order whatever block it is in, so the bits must be equal. */
START_TEST(test_winograd_image_blocks) {
  static const wcase cases[] = {
      /* N   H   W   C   O  pad   fused  fixed imgs */
      {1, 14, 14, 40, 36, true, true, true, 0, 0},    /* 16 tiles, batch 1: one image a block */
      {2, 14, 14, 37, 33, true, true, true, 2, 0},    /* 64 / 16 = 4 images a block, the batch's 2 */
      {7, 12, 16, 35, 40, false, true, true, 4, 0},   /* 10 x 14 out: 12 tiles, 6 a block -> blocks 4 + 3 */
      {3, 7, 7, 32, 48, true, true, true, 3, 0},      /* 7x7: 4 tiles (the edges' partial) */
      {16, 7, 7, 32, 40, true, false, true, 16, 0},   /* one block of 16 images */
      {17, 9, 9, 33, 32, false, true, true, 9, 0},    /* pad 0, 7x7 out: blocks of 9 + 8 */
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    if (!test_case_runs(i)) continue;
    const wcase *cc = &cases[i];
    int64_t p = cc->pad ? 1 : 0, ny = cc->batch * (cc->H + 2 * p - 2) * (cc->W + 2 * p - 2) * cc->O;
    float *blocks = xmalloc((size_t)ny * 4), *one = xmalloc((size_t)ny * 4);
    run_case(cc, "auto", true, blocks);
    wcase sym = *cc;
    sym.fixed = false, sym.imgs = 0;
    run_case(&sym, "auto", true, one);
    ck_assert_msg(memcmp(blocks, one, (size_t)ny * 4) == 0, "batch %lld, %lldx%lld: blocks of %lld images and of one differ",
                  (long long)cc->batch, (long long)cc->H, (long long)cc->W, (long long)cc->imgs);
    free(blocks), free(one);
  }
  fprintf(stderr, "check_winograd: max normalized error %.3g (bound %g)\n", max_err_seen, WINO_BOUND);
}
END_TEST

/* A static batch of one image whose conv is one block of tile rows and one
 * panel of output channels (O at most NR: DenseNet's 32-output 3x3 convs at
 * 14x14 and 7x7) takes two blocks, so that two threads can share it
 * (cg_wino.c, WINO_SPLIT_ONE). O = 4 is one panel on every CPU path (NR is
 * a vector or two); O = 32 is one on AVX-512's (two elsewhere). Each case
 * against the reference, 1-3 threads bit-identical, and bit for bit the
 * same conv under a symbolic batch (one block an image). */
START_TEST(test_winograd_batch1_split) {
  static const wcase cases[] = {
      /* N   H   W   C   O  pad   fused  fixed imgs rows */
      {1, 14, 14, 40, 4, true, true, true, 0, 2},  /* 4 tile rows: blocks of 2 (8 tiles each) */
      {1, 7, 7, 37, 4, true, true, true, 0, 2},    /* 2 tile rows: blocks of 1 (2 tiles) */
      {1, 9, 11, 33, 4, false, true, true, 0, 2},  /* pad 0, 7x9 out: 2 x 3 tiles, partial at the edges */
      {1, 14, 14, 64, 32, true, true, true, 0, 0}, /* DenseNet's shape, scaled: split where NR is 32 */
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    if (!test_case_runs(i)) continue;
    const wcase *cc = &cases[i];
    int64_t p = cc->pad ? 1 : 0, ny = (cc->H + 2 * p - 2) * (cc->W + 2 * p - 2) * cc->O;
    float *two = xmalloc((size_t)ny * 4), *one = xmalloc((size_t)ny * 4);
    run_case(cc, "winograd", true, two);
    wcase sym = *cc;
    sym.fixed = false, sym.rows = 0;
    run_case(&sym, "winograd", true, one);
    ck_assert_msg(memcmp(two, one, (size_t)ny * 4) == 0, "%lldx%lld, O %lld: two blocks and one differ", (long long)cc->H,
                  (long long)cc->W, (long long)cc->O);
    free(two), free(one);
  }
  fprintf(stderr, "check_winograd: max normalized error %.3g (bound %g)\n", max_err_seen, WINO_BOUND);
}
END_TEST

/* auto: Winograd for a layer with at least 4 tiles an image (a 7x7 map)
 * and enough channels, not for a smaller one (a 4x4 map: one tile);
 * direct: never, and its results are the usual convolution's, within the
 * direct bound. */
START_TEST(test_winograd_choice) {
  static const wcase big = {1, 20, 20, 32, 32, true, true, false, 0, 0}, small = {1, 4, 4, 32, 32, true, true, false, 0, 0};
  int64_t ny = 20 * 20 * 32;
  float *w = xmalloc((size_t)ny * 4), *dd = xmalloc((size_t)ny * 4);
  run_case(&big, "auto", true, w);
  run_case(&small, "auto", false, NULL);
  run_case(&big, "direct", false, dd);
  ck_assert_msg(memcmp(w, dd, (size_t)ny * 4) != 0, "Winograd's and the direct convolution's bits are the same");
  free(w), free(dd);
}
END_TEST

/* U = G g G^T (cg_wino_pack_const, blocks of columns) against the
 * formula one column at a time as it read before (in double, every
 * product, rounded once): the same bits for every element, U's padding
 * columns +0, on shapes whose O is and is not a multiple of the panel,
 * panels narrower and wider than the blocks and not multiples of them,
 * with infinities, -0 and a NaN among the weights (a NaN compares as a
 * NaN: which payload wins an operation of two NaNs is the compiler's
 * choice of operand order). dst starts as garbage, so every element must
 * be written. */
static const double ref_g[6][3] = {{4, 0, 0},          {2.0 / 3, 2.0 / 3, 2.0 / 3}, {2.0 / 3, -2.0 / 3, 2.0 / 3},
                                   {-8.0 / 3, -4.0 / 3, -2.0 / 3}, {-8.0 / 3, 4.0 / 3, -2.0 / 3}, {0, 0, 1}};

static void ref_wino_pack(float *dst, const float *src, int64_t C, int64_t O, int nr) {
  int64_t op = (O + nr - 1) / nr * nr, np = op / nr;
  memset(dst, 0, (size_t)(36 * C * op) * sizeof *dst);
  for (int64_t c = 0; c < C; c++)
    for (int64_t o = 0; o < O; o++) {
      double gk[3][3], t[6][3];
      for (int a = 0; a < 3; a++)
        for (int b = 0; b < 3; b++) gk[a][b] = src[((a * 3 + b) * C + c) * O + o];
      for (int i = 0; i < 6; i++)
        for (int b = 0; b < 3; b++) t[i][b] = ref_g[i][0] * gk[0][b] + ref_g[i][1] * gk[1][b] + ref_g[i][2] * gk[2][b];
      for (int i = 0; i < 6; i++)
        for (int j = 0; j < 6; j++) {
          double u = t[i][0] * ref_g[j][0] + t[i][1] * ref_g[j][1] + t[i][2] * ref_g[j][2];
          dst[(((int64_t)(i * 6 + j) * np + o / nr) * C + c) * nr + o % nr] = (float)u;
        }
    }
}

START_TEST(test_winograd_pack_const) {
  static const struct { int64_t C, O; int nr; } cases[] = {
      {1, 1, 16}, {3, 5, 4}, {2, 9, 1}, {5, 20, 12}, {7, 33, 8}, {13, 37, 16}, {4, 64, 32}, {6, 50, 48}, {64, 64, 32}, {9, 7, 3},
  };
  rng r;
  rng_init(&r, 15);
  for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
    int64_t C = cases[ci].C, O = cases[ci].O, nr = cases[ci].nr, op = (O + nr - 1) / nr * nr, nw = 9 * C * O;
    size_t nu = (size_t)(36 * C * op);
    float *w = xmalloc((size_t)nw * sizeof *w), *got = xmalloc(nu * sizeof *got), *want = xmalloc(nu * sizeof *want);
    for (int64_t i = 0; i < nw; i++) w[i] = rng_uniform_f32(&r, -2, 2);
    if (nw > 8) w[1] = INFINITY, w[nw / 2] = -0.0f, w[nw - 2] = -INFINITY, w[nw / 3] = NAN;
    memset(got, 0xa5, nu * sizeof *got);
    cg_wino_pack_const(got, w, C, O, (int)nr);
    ref_wino_pack(want, w, C, O, (int)nr);
    for (size_t i = 0; i < nu; i++) {
      uint32_t gb, wb;
      memcpy(&gb, &got[i], 4), memcpy(&wb, &want[i], 4);
      ck_assert_msg(gb == wb || (isnan(got[i]) && isnan(want[i])),
                    "C %lld O %lld nr %lld: U[%zu] = %08x, the one-column formula's %08x", (long long)C, (long long)O,
                    (long long)nr, i, gb, wb);
    }
    free(w), free(got), free(want);
  }
}
END_TEST

/* An unknown CASTOR_CONV_ALGO is an invalid argument, named in the error. */
START_TEST(test_winograd_bad_algo) {
  ir_graph *g = ir_graph_create("wino");
  ir_type xt = {DT_F32, 4, {IR_DIM_BATCH, 4, 4, 2}};
  ir_node *x = ir_build_input(g, "x", &xt, 0, no_loc);
  ir_graph_add_output(g, "y", ir_build_unary(g, IR_OP_RELU, "y", x, no_loc));
  ir_graph_renumber(g);
  setenv("CASTOR_CONV_ALGO", "winnograd", 1);
  diag_sink *d = diag_sink_create();
  cg_backend_options bo;
  cg_backend_options_init(&bo);
  cg_exec *ex = cg_backend_compile(&cg_backend_cpu, g, &bo, d);
  unsetenv("CASTOR_CONV_ALGO");
  ck_assert_ptr_null(ex);
  ck_assert_msg(strstr(diag_text(d), "unknown convolution algorithm 'winnograd' in CASTOR_CONV_ALGO"), "%s", diag_text(d));
  ck_assert_int_eq(diag_first_error_kind(d), DIAG_KIND_INVALID_ARGUMENT);
  diag_sink_destroy(d);
  ir_graph_destroy(g);
}
END_TEST

static Suite *wino_suite(void) {
  Suite *s = suite_create("winograd");
  TCase *tc = tcase_create("winograd");
  tcase_set_timeout(tc, 590);
  tcase_add_test(tc, test_winograd_shapes);
  tcase_add_test(tc, test_winograd_image_blocks);
  tcase_add_test(tc, test_winograd_batch1_split);
  tcase_add_test(tc, test_winograd_choice);
  tcase_add_test(tc, test_winograd_bad_algo);
  tcase_add_test(tc, test_winograd_pack_const);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) { return check_run(wino_suite()); }
