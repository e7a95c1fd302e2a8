/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cg_wino.c: convolutional networks: Winograd F(4x4, 3x3) for a float32
 * conv2d forward with a 3x3 kernel, stride 1, dilation 1, one group and a
 * constant kernel (inference) on the CPU (Lavin & Gray 2016). Each 4x4
 * tile of output pixels is computed from the 6x6 tile of x under it with
 * 36 products per (input, output) channel pair instead of 144:
 *
 *   U = G g G^T   per (c, o): the 3x3 kernel as 6x6, once at compile time
 *                 (cg_wino_pack_const: in double, rounded to f32 once)
 *   V = B^T d B   per tile and input channel: the 6x6 input tile d (zero
 *                 outside x: the conv's pads), vectors over channels
 *   M[xi] = V[xi] U[xi]   36 independent GEMMs [tiles, C] x [C, O]
 *   Y = A^T M A   per tile and output channel: the 4x4 outputs, vectors
 *                 over channels, into the C tile; then the GEMM's
 *                 epilogue function (cg_gemm.c: bias, activation, residual
 *                 add, whatever the kernel fused) stores them
 *
 * with the interpolation points 0, 1, -1, 1/2, -1/2 (and infinity), whose
 * B^T and A^T are exact in binary (Cook-Toom; G's thirds are rounded
 * once, in U):
 *
 *   B^T = [1/4    0  -5/4    0  1 0]   G = [  4     0     0 ]
 *         [  0 -1/4  -1/4    1  1 0]       [ 2/3   2/3   2/3 ]
 *         [  0  1/4  -1/4   -1  1 0]       [ 2/3  -2/3   2/3 ]
 *         [  0 -1/2    -1  1/2  1 0]       [-8/3  -4/3  -2/3 ]
 *         [  0  1/2    -1 -1/2  1 0]       [-8/3   4/3  -2/3 ]
 *         [  0  1/4     0 -5/4  0 1]       [  0     0     1 ]
 *
 *   A^T = [1 1  1   1     1   0]
 *         [0 1 -1  1/2  -1/2  0]
 *         [0 1  1  1/4   1/4  0]
 *         [0 1 -1  1/8  -1/8  1]
 *
 * (the points 0, 1, -1, 2, -2 of Lavin & Gray measured a max normalized
 * error of 8.5e-6 on check_winograd's cases, these 7.0e-6; the direct
 * convolution's is below 1e-6 there).
 *
 * The kernel over launch rows: each row is a block of `wino` tile rows of
 * one image (a static batch: n x blocks rows; a batch: images, each its
 * blocks in order), or, where conv.wino_imgs > 1 (a static batch's small
 * maps), an image, taken wino_imgs images to a block: their tiles one
 * after the other, so the 36 GEMMs read U once for all of them. A block: transform its tiles' inputs into V (scratch,
 * [36][T][Cp]), the 36 GEMMs into M ([36][T][Op]) over U's panels of NR
 * output channels ([36][Op/NR][C][NR], contiguous), each a micro-tile of
 * MR tiles x NV vectors, an FMA chain over c in order from 0; then the
 * output transform of its tiles into the C tile, whose rows are the
 * block's output pixels (n, oh, ow) in order: one epilogue call per block.
 * V and M of a block stay in L2 (the planner sizes the block).
 *
 * Numerics: not the direct convolution's bits. Each output is the same
 * sequence of f32 operations whatever the thread count or the split
 * (threads get whole blocks; the sums over c are never split), so results
 * are bit-identical across thread counts. Against the float64 reference
 * the error is a few times the direct convolution's: the transforms'
 * coefficients (up to 8 in A^T, 5 in B^T) scale the rounding of the
 * products' sums (measured bounds: docs/numerics.md, "Winograd"). The
 * opt-out: CASTOR_CONV_ALGO=direct (or castor's --conv-algo=direct).
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "codegen/cpu/cg_gemm_internal.h"
#include "codegen/cpu/cg_wino_pack.h"

#define B (e->b)

/* the transforms, row-major (double: U's is computed in double) */
static const double wino_bt[6][6] = {{0.25, 0, -1.25, 0, 1, 0},  {0, -0.25, -0.25, 1, 1, 0}, {0, 0.25, -0.25, -1, 1, 0},
                                     {0, -0.5, -1, 0.5, 1, 0}, {0, 0.5, -1, -0.5, 1, 0}, {0, 0.25, 0, -1.25, 0, 1}};
static const double wino_g[6][3] = {{4, 0, 0},          {2.0 / 3, 2.0 / 3, 2.0 / 3}, {2.0 / 3, -2.0 / 3, 2.0 / 3},
                                    {-8.0 / 3, -4.0 / 3, -2.0 / 3}, {-8.0 / 3, 4.0 / 3, -2.0 / 3}, {0, 0, 1}};
static const double wino_at[4][6] = {{1, 1, 1, 1, 1, 0}, {0, 1, -1, 0.5, -0.5, 0}, {0, 1, 1, 0.25, 0.25, 0}, {0, 1, -1, 0.125, -0.125, 1}};

void cg_wino_geom_of(const cg_gemm *g, cg_wino_geom *w) {
  const gemm_conv *cv = &g->conv;
  w->tw = (cv->OW + 3) / 4, w->th = (cv->OH + 3) / 4;
  w->tr = cv->wino;
  w->nblk = (w->th + w->tr - 1) / w->tr;
  w->imgs = cv->wino_imgs > 1 ? cv->wino_imgs : 1;
  w->t = w->imgs * w->tr * w->tw;
  w->cp = (cv->C + g->vw - 1) / g->vw * g->vw;
  w->op = (cv->O + g->nr - 1) / g->nr * g->nr;
  w->v_off = 0;
  w->m_off = (36 * w->t * w->cp * 4 + 63) / 64 * 64;
  w->c_off = w->m_off + (36 * w->t * w->op * 4 + 63) / 64 * 64;
  w->bytes = w->c_off + (4 * w->tr * cv->OW * w->op * 4 + 63) / 64 * 64;
}

/* U of input channel c for the columns [o0, o0 + WINO_PACK_W) of U's
 * padded width (O rounded up to nr), the first n of them real columns of
 * the kernel: each element the very sequence of double operations of the
 * one-column formula (every product, a zero coefficient's included, so
 * infinities and NaNs give what they give there), in vectors of columns
 * that the compiler can vectorize; columns from O on (padding) are +0.
 * Each of U's 36 matrices gets the block's columns as a contiguous run
 * per panel, and the caller walks c inside a block of columns, so each
 * panel of the 36 is written in order. */
enum { WINO_PACK_W = 8 };
static void wino_pack_cols(float *dst, const float *src, int64_t C, int64_t O, int64_t op, int nr, int64_t c,
                           int64_t o0, int n) {
  double gk[3][3][WINO_PACK_W], t[6][3][WINO_PACK_W];
  for (int a = 0; a < 3; a++)
    for (int b = 0; b < 3; b++) {
      const float *s = src + ((a * 3 + b) * C + c) * O + o0; /* HWIO */
      int k = 0;
      for (; k < n; k++) gk[a][b][k] = s[k];
      for (; k < WINO_PACK_W; k++) gk[a][b][k] = 0;
    }
  for (int i = 0; i < 6; i++)
    for (int b = 0; b < 3; b++)
      for (int k = 0; k < WINO_PACK_W; k++)
        t[i][b][k] = wino_g[i][0] * gk[0][b][k] + wino_g[i][1] * gk[1][b][k] + wino_g[i][2] * gk[2][b][k];
  /* the block's runs of columns, one per panel it touches: where each
   * starts in the block and in U's first matrix, and its length */
  int64_t np = op / nr, w = op - o0 < WINO_PACK_W ? op - o0 : WINO_PACK_W;
  int64_t at[WINO_PACK_W], from[WINO_PACK_W], len[WINO_PACK_W];
  int runs = 0;
  for (int64_t k = 0; k < w; k += len[runs++]) {
    int64_t o = o0 + k, off = o % nr;
    from[runs] = k;
    at[runs] = ((o / nr) * C + c) * nr + off;
    len[runs] = nr - off < w - k ? nr - off : w - k;
  }
  for (int i = 0; i < 6; i++)
    for (int j = 0; j < 6; j++) {
      float u[WINO_PACK_W];
      for (int k = 0; k < WINO_PACK_W; k++)
        u[k] = (float)(t[i][0][k] * wino_g[j][0] + t[i][1][k] * wino_g[j][1] + t[i][2][k] * wino_g[j][2]);
      for (int k = n; k < WINO_PACK_W; k++) u[k] = 0; /* padding: +0 (the zeros' products may give -0) */
      float *m = dst + (int64_t)(i * 6 + j) * np * C * nr; /* matrix i * 6 + j */
      if (runs == 1 && len[0] == WINO_PACK_W) memcpy(m + at[0], u, sizeof u);
      else
        for (int r = 0; r < runs; r++) memcpy(m + at[r], u + from[r], (size_t)len[r] * sizeof *u);
    }
}

/* resnet50's 13 Winograd kernels (C x O from 64 x 64 to 512 x 512: 131 MB
 * of U) took 210 ms of CPU one column at a time after a memset, 60 ms this
 * way plus the page faults of U's first writes (bench/results/
 * compile-resnet50-2026-11-30-s15.md); the same bits. */
void cg_wino_pack_const(float *dst, const float *src, int64_t C, int64_t O, int nr) {
  int64_t op = (O + nr - 1) / nr * nr;
  for (int64_t o0 = 0; o0 < op; o0 += WINO_PACK_W)
    for (int64_t c = 0; c < C; c++) {
      int64_t n = O - o0 < WINO_PACK_W ? O - o0 : WINO_PACK_W;
      wino_pack_cols(dst, src, C, O, op, nr, c, o0, n < 0 ? 0 : (int)n);
    }
}

/* ---- emission ---- */

typedef struct wino_ctx {
  cg_kctx *c;
  const cg_gemm *g;
  const gemm_conv *cv;
  cg_wino_geom w;
  const ir_node *x, *wt;
  LLVMTypeRef vt; /* <vw x float> */
  LLVMValueRef v, m, ctile; /* scratch: V, M, the C tile (f32 pointers) */
  LLVMValueRef p0, p1;      /* the call's panels of U: columns [col0, col1) in whole panels */
  LLVMValueRef o0, o1;      /* their columns, o0 = col0 (a multiple of nr) */
} wino_ctx;

static LLVMValueRef add(cg_emitter *e, LLVMValueRef a, LLVMValueRef b) { return LLVMBuildAdd(B, a, b, ""); }
static LLVMValueRef mul(cg_emitter *e, LLVMValueRef a, int64_t b) { return LLVMBuildMul(B, a, cg_i64(e, b), ""); }
static LLVMValueRef gepf(cg_emitter *e, LLVMValueRef p, LLVMValueRef idx) { return LLVMBuildGEP2(B, e->f32, p, &idx, 1, ""); }

/* sum_k coef[k] * v[k] in order of k, zero coefficients skipped, +-1 as an
 * add or subtract (the same operations for every tile and channel) */
static LLVMValueRef lin(wino_ctx *t, const double *coef, LLVMValueRef *v, int n) {
  cg_emitter *e = t->c->e;
  LLVMValueRef s = NULL;
  for (int k = 0; k < n; k++) {
    double a = coef[k];
    if (a == 0) continue;
    if (!s) {
      s = a == 1 ? v[k] : LLVMBuildFMul(B, v[k], cg_const(e, t->vt, a), "");
    } else if (a == 1) {
      s = LLVMBuildFAdd(B, s, v[k], "");
    } else if (a == -1) {
      s = LLVMBuildFSub(B, s, v[k], "");
    } else {
      s = cg_fmuladd(e, v[k], cg_const(e, t->vt, a), s);
    }
  }
  return s ? s : LLVMConstNull(t->vt);
}

/* out = L in L'^T for L [rows x 6] row-major: out[i][j] = sum L[i][a] in[a][b] L[j][b] */
static void transform(wino_ctx *t, const double *L, int rows, LLVMValueRef in[6][6], LLVMValueRef out[6][6]) {
  LLVMValueRef tmp[6][6], col[6];
  for (int b = 0; b < 6; b++) {
    for (int a = 0; a < 6; a++) col[a] = in[a][b];
    for (int i = 0; i < rows; i++) tmp[i][b] = lin(t, L + i * 6, col, 6);
  }
  for (int i = 0; i < rows; i++)
    for (int j = 0; j < rows; j++) out[i][j] = lin(t, L + j * 6, tmp[i], 6);
}

/* The input transform of tile (tr, tw) of the block starting at tile row
 * th0 of image offset img, whose tiles start at the block's tile tbase:
 * V[xi][tbase + tr*TW + tw][c] for every channel. */
static void emit_input_tile(wino_ctx *t, LLVMValueRef img, LLVMValueRef th0, LLVMValueRef tbase, LLVMValueRef tr,
                            LLVMValueRef tw) {
  cg_kctx *c = t->c;
  cg_emitter *e = c->e;
  const gemm_conv *cv = t->cv;
  int vw = t->g->vw;
  LLVMValueRef ih0 = add(e, mul(e, add(e, th0, tr), 4), cg_i64(e, -cv->pt));
  LLVMValueRef iw0 = add(e, mul(e, tw, 4), cg_i64(e, -cv->pl));
  LLVMValueRef ok[6][6], pix[6][6], rok[6], cok[6];
  for (int i = 0; i < 6; i++) {
    LLVMValueRef h = add(e, ih0, cg_i64(e, i)), w = add(e, iw0, cg_i64(e, i));
    rok[i] = LLVMBuildAnd(B, LLVMBuildICmp(B, LLVMIntSGE, h, cg_i64(e, 0), ""),
                          LLVMBuildICmp(B, LLVMIntSLT, h, cg_i64(e, cv->H), ""), "");
    cok[i] = LLVMBuildAnd(B, LLVMBuildICmp(B, LLVMIntSGE, w, cg_i64(e, 0), ""),
                          LLVMBuildICmp(B, LLVMIntSLT, w, cg_i64(e, cv->W), ""), "");
  }
  for (int i = 0; i < 6; i++)
    for (int j = 0; j < 6; j++) {
      ok[i][j] = LLVMBuildAnd(B, rok[i], cok[j], "");
      LLVMValueRef p = add(e, img, mul(e, add(e, mul(e, add(e, ih0, cg_i64(e, i)), cv->W), add(e, iw0, cg_i64(e, j))), cv->C));
      pix[i][j] = LLVMBuildSelect(B, ok[i][j], p, img, ""); /* outside x: the image's first pixel, then 0 */
    }
  LLVMValueRef trow = add(e, tbase, add(e, mul(e, tr, t->w.tw), tw));
  int64_t cfull = cv->C / vw * vw;
  for (int part = 0; part < 2; part++) {
    int valid = part ? (int)(cv->C - cfull) : vw;
    if (part && !valid) break;
    cg_loop lc = {0};
    LLVMValueRef ch;
    if (!part) {
      if (!cfull) continue;
      lc = cg_loop_begin(c, cg_i64(e, 0), cg_i64(e, cfull), vw, "wino.in.c");
      ch = lc.iv;
    } else {
      ch = cg_i64(e, cfull);
    }
    LLVMValueRef d[6][6], v[6][6];
    for (int i = 0; i < 6; i++)
      for (int j = 0; j < 6; j++) {
        LLVMValueRef xv = cg_load_part(e, DT_F32, cg_elem_ptr(c, t->x, add(e, pix[i][j], ch)), vw, valid, t->x->name);
        d[i][j] = LLVMBuildSelect(B, ok[i][j], xv, LLVMConstNull(t->vt), "");
      }
    transform(t, &wino_bt[0][0], 6, d, v);
    for (int xi = 0; xi < 36; xi++) {
      LLVMValueRef off = add(e, mul(e, add(e, cg_i64(e, (int64_t)xi * t->w.t), trow), t->w.cp), ch);
      cg_emit_store(e, DT_F32, v[xi / 6][xi % 6], gepf(e, t->v, off), vw);
    }
    if (!part) cg_loop_end(c, &lc);
  }
}

/* M[xi][t0 .. t0+R][panel p] = sum_c V[xi][t][c] U[xi][p][c] */
static void emit_micro(wino_ctx *t, LLVMValueRef xi, LLVMValueRef p, LLVMValueRef t0, int R) {
  cg_kctx *c = t->c;
  cg_emitter *e = c->e;
  const cg_gemm *g = t->g;
  int nv = g->nv, vw = g->vw, nr = g->nr;
  int64_t C = t->cv->C, np = t->w.op / nr;
  LLVMValueRef acc[16][2];
  for (int r = 0; r < R; r++)
    for (int q = 0; q < nv; q++) {
      acc[r][q] = cg_entry_alloca(c, t->vt, "wino.acc");
      LLVMBuildStore(B, LLVMConstNull(t->vt), acc[r][q]);
    }
  LLVMValueRef ubase = mul(e, add(e, mul(e, xi, np), p), C * nr); /* U[xi][p][0][0] */
  LLVMValueRef vbase = mul(e, add(e, mul(e, xi, t->w.t), t0), t->w.cp); /* V[xi][t0][0] */
  cg_loop lc = cg_loop_begin(c, cg_i64(e, 0), cg_i64(e, C), 1, "wino.mm.c");
  LLVMValueRef urow = add(e, ubase, mul(e, lc.iv, nr));
  LLVMValueRef u[2];
  for (int q = 0; q < nv; q++)
    u[q] = cg_emit_load(e, DT_F32, cg_elem_ptr(c, t->wt, add(e, urow, cg_i64(e, (int64_t)q * vw))), vw, t->wt->name);
  for (int r = 0; r < R; r++) {
    LLVMValueRef vi = add(e, add(e, vbase, cg_i64(e, (int64_t)r * t->w.cp)), lc.iv);
    LLVMValueRef s = cg_splat(e, cg_emit_load(e, DT_F32, gepf(e, t->v, vi), 1, "wino.v"), vw);
    for (int q = 0; q < nv; q++) LLVMBuildStore(B, cg_fmuladd(e, s, u[q], LLVMBuildLoad2(B, t->vt, acc[r][q], "")), acc[r][q]);
  }
  cg_loop_end(c, &lc);
  LLVMValueRef mbase = add(e, mul(e, add(e, mul(e, xi, t->w.t), t0), t->w.op), mul(e, p, nr));
  for (int r = 0; r < R; r++)
    for (int q = 0; q < nv; q++) {
      LLVMValueRef off = add(e, mbase, cg_i64(e, (int64_t)r * t->w.op + (int64_t)q * vw));
      cg_emit_store(e, DT_F32, LLVMBuildLoad2(B, t->vt, acc[r][q], ""), gepf(e, t->m, off), vw);
    }
}

/* The output transform of tile (tr, tw) of the image whose tiles start at
 * the block's tile tbase: Y = A^T M A into its C tile ctile's rows
 * (tr*4 + i) * OW + tw*4 + j for j < cols (the right edge's tile has
 * fewer); rows below OH are written but never read by the epilogue. */
static void emit_output_tile(wino_ctx *t, LLVMValueRef tbase, LLVMValueRef ctile, LLVMValueRef tr, LLVMValueRef tw,
                             int cols) {
  cg_kctx *c = t->c;
  cg_emitter *e = c->e;
  int vw = t->g->vw;
  int64_t OW = t->cv->OW, ldc = t->g->ldc;
  LLVMValueRef trow = add(e, tbase, add(e, mul(e, tr, t->w.tw), tw));
  cg_loop lo = cg_loop_begin(c, t->o0, t->o1, vw, "wino.out.o");
  LLVMValueRef m[6][6], y[6][6];
  for (int xi = 0; xi < 36; xi++) {
    LLVMValueRef off = add(e, mul(e, add(e, cg_i64(e, (int64_t)xi * t->w.t), trow), t->w.op), lo.iv);
    m[xi / 6][xi % 6] = cg_emit_load(e, DT_F32, gepf(e, t->m, off), vw, "wino.m");
  }
  transform(t, &wino_at[0][0], 4, m, y);
  LLVMValueRef pix0 = add(e, mul(e, tr, 4 * OW), mul(e, tw, 4));
  for (int i = 0; i < 4; i++)
    for (int j = 0; j < cols; j++) {
      LLVMValueRef off = add(e, mul(e, add(e, pix0, cg_i64(e, i * OW + j)), ldc), LLVMBuildSub(B, lo.iv, t->o0, ""));
      cg_emit_store(e, DT_F32, y[i][j], gepf(e, ctile, off), vw);
    }
  cg_loop_end(c, &lo);
}

/* One block: tile rows [th0, th0 + trn) of images n .. n + nimg (nimg
 * images of all their tile rows, or one image's block blk): the tiles of
 * the images one after the other in V and M; then image by image, its
 * outputs into the C tile (4 trn rows of OW pixels) and through the
 * epilogue. */
static void emit_block(wino_ctx *t, LLVMValueRef n, LLVMValueRef nimg, LLVMValueRef blk, LLVMValueRef epilogue) {
  cg_kctx *c = t->c;
  cg_emitter *e = c->e;
  const cg_gemm *g = t->g;
  const gemm_conv *cv = t->cv;
  const cg_wino_geom *w = &t->w;
  LLVMValueRef th0 = mul(e, blk, w->tr);
  LLVMValueRef left = LLVMBuildSub(B, cg_i64(e, w->th), th0, "");
  LLVMValueRef trn = LLVMBuildSelect(B, LLVMBuildICmp(B, LLVMIntSLT, left, cg_i64(e, w->tr), ""), left, cg_i64(e, w->tr), "wino.trn");
  LLVMValueRef per_img = mul(e, trn, w->tw); /* tiles of an image in the block */
  /* inputs */
  cg_loop li = cg_loop_begin(c, cg_i64(e, 0), nimg, 1, "wino.in.img");
  LLVMValueRef img = mul(e, add(e, n, li.iv), cv->H * cv->W * cv->C), tbase = LLVMBuildMul(B, li.iv, per_img, "");
  cg_loop ltr = cg_loop_begin(c, cg_i64(e, 0), trn, 1, "wino.in.tr");
  cg_loop ltw = cg_loop_begin(c, cg_i64(e, 0), cg_i64(e, w->tw), 1, "wino.in.tw");
  emit_input_tile(t, img, th0, tbase, ltr.iv, ltw.iv);
  cg_loop_end(c, &ltw);
  cg_loop_end(c, &ltr);
  cg_loop_end(c, &li);
  /* the 36 GEMMs over all the block's tiles: micro-tiles of mr tiles, then 4, then 1 */
  LLVMValueRef nt = LLVMBuildMul(B, nimg, per_img, "wino.nt");
  cg_loop lx = cg_loop_begin(c, cg_i64(e, 0), cg_i64(e, 36), 1, "wino.xi");
  cg_loop lp = cg_loop_begin(c, t->p0, t->p1, 1, "wino.panel");
  LLVMValueRef start = cg_i64(e, 0);
  int steps[3] = {g->mr, 4, 1};
  for (int s = 0; s < 3; s++) {
    int R = steps[s];
    if (s && R >= steps[s - 1]) continue;
    LLVMValueRef rest = LLVMBuildSub(B, nt, start, "");
    LLVMValueRef end = add(e, start, mul(e, LLVMBuildSDiv(B, rest, cg_i64(e, R), ""), R));
    cg_loop lt = cg_loop_begin(c, start, end, R, "wino.tiles");
    emit_micro(t, lx.iv, lp.iv, lt.iv, R);
    cg_loop_end(c, &lt);
    start = end;
  }
  cg_loop_end(c, &lp);
  cg_loop_end(c, &lx);
  /* outputs, image by image: whole tiles, then the right edge's; then the
   * image's output pixels in the block through the epilogue */
  int64_t full = cv->OW / 4, edge = cv->OW % 4;
  cg_loop lo = cg_loop_begin(c, cg_i64(e, 0), nimg, 1, "wino.out.img");
  LLVMValueRef otbase = LLVMBuildMul(B, lo.iv, per_img, "");
  LLVMValueRef ctile = t->ctile;
  cg_loop lor = cg_loop_begin(c, cg_i64(e, 0), trn, 1, "wino.out.tr");
  if (full) {
    cg_loop low = cg_loop_begin(c, cg_i64(e, 0), cg_i64(e, full), 1, "wino.out.tw");
    emit_output_tile(t, otbase, ctile, lor.iv, low.iv, 4);
    cg_loop_end(c, &low);
  }
  if (edge) emit_output_tile(t, otbase, ctile, lor.iv, cg_i64(e, full), (int)edge);
  cg_loop_end(c, &lor);
  LLVMValueRef oh0 = mul(e, th0, 4);
  LLVMValueRef hleft = LLVMBuildSub(B, cg_i64(e, cv->OH), oh0, ""), h4 = mul(e, trn, 4);
  LLVMValueRef rows = LLVMBuildSelect(B, LLVMBuildICmp(B, LLVMIntSLT, hleft, h4, ""), hleft, h4, "");
  LLVMValueRef row = mul(e, add(e, mul(e, add(e, n, lo.iv), cv->OH), oh0), cv->OW);
  LLVMValueRef args[] = {c->bufs, ctile, row, mul(e, rows, cv->OW), c->col0, LLVMBuildSub(B, c->col1, c->col0, "")};
  LLVMBuildCall2(B, LLVMGlobalGetValueType(epilogue), epilogue, args, 6, "");
  cg_loop_end(c, &lo);
}

void cg_wino_emit(cg_kctx *c, const cg_gemm *g, LLVMValueRef epilogue) {
  cg_emitter *e = c->e;
  const cg_kernel *k = c->k;
  wino_ctx t = {.c = c, .g = g, .cv = &g->conv, .x = k->ops[0]->srcs[0], .wt = k->ops[0]->srcs[1]};
  cg_wino_geom_of(g, &t.w);
  CASTOR_ASSERT(t.x->type.dtype == DT_F32 && t.wt->type.dtype == DT_F32 && g->nv <= 2 && g->mr <= 16 &&
                g->ldc == t.w.op && g->conv.KW == 3 && g->K == 9 * g->conv.C);
  t.vt = LLVMVectorType(e->f32, (unsigned)g->vw);
  LLVMTypeRef i8 = LLVMInt8TypeInContext(e->ctx);
  t.v = LLVMBuildGEP2(B, i8, c->scratch, (LLVMValueRef[]){cg_i64(e, t.w.v_off)}, 1, "wino.V");
  t.m = LLVMBuildGEP2(B, i8, c->scratch, (LLVMValueRef[]){cg_i64(e, t.w.m_off)}, 1, "wino.M");
  t.ctile = LLVMBuildGEP2(B, i8, c->scratch, (LLVMValueRef[]){cg_i64(e, t.w.c_off)}, 1, "wino.ctile");
  /* the call's columns [col0, col1): col0 a multiple of nr (the launch's
   * column step), col1 too or O */
  t.p0 = LLVMBuildSDiv(B, c->col0, cg_i64(e, g->nr), "wino.p0");
  t.p1 = LLVMBuildSDiv(B, add(e, c->col1, cg_i64(e, g->nr - 1)), cg_i64(e, g->nr), "wino.p1");
  t.o0 = c->col0, t.o1 = mul(e, t.p1, g->nr);
  if (t.w.imgs > 1) { /* blocks of whole images: launch rows images, in steps of imgs, the last block perhaps fewer */
    LLVMValueRef nb = LLVMBuildSDiv(B, add(e, LLVMBuildSub(B, c->row1, c->row0, ""), cg_i64(e, t.w.imgs - 1)),
                                    cg_i64(e, t.w.imgs), "wino.nb");
    cg_loop lr = cg_loop_begin(c, cg_i64(e, 0), nb, 1, "wino.imgs");
    LLVMValueRef n = add(e, c->row0, mul(e, lr.iv, t.w.imgs));
    LLVMValueRef left = LLVMBuildSub(B, c->row1, n, "");
    LLVMValueRef nimg = LLVMBuildSelect(B, LLVMBuildICmp(B, LLVMIntSLT, left, cg_i64(e, t.w.imgs), ""), left,
                                        cg_i64(e, t.w.imgs), "wino.nimg");
    emit_block(&t, n, nimg, cg_i64(e, 0), epilogue);
    cg_loop_end(c, &lr);
    return;
  }
  if (g->conv.flat_rows) { /* a static batch: launch rows n x blocks */
    cg_loop lr = cg_loop_begin(c, c->row0, c->row1, 1, "wino.row");
    LLVMValueRef n = LLVMBuildSDiv(B, lr.iv, cg_i64(e, t.w.nblk), "wino.n");
    LLVMValueRef blk = LLVMBuildSRem(B, lr.iv, cg_i64(e, t.w.nblk), "wino.blk");
    emit_block(&t, n, cg_i64(e, 1), blk, epilogue);
    cg_loop_end(c, &lr);
    return;
  }
  cg_loop ln = cg_loop_begin(c, c->row0, c->row1, 1, "wino.n"); /* a batch: images */
  cg_loop lb = cg_loop_begin(c, cg_i64(e, 0), cg_i64(e, t.w.nblk), 1, "wino.blk");
  emit_block(&t, ln.iv, cg_i64(e, 1), lb.iv, epilogue);
  cg_loop_end(c, &lb);
  cg_loop_end(c, &ln);
}

/* ---- planning ---- */

/* The cost model (auto): Winograd where a layer has at least one whole
 * 4x4 tile's worth of output per image (4 tiles: a 7x7 map) and enough
 * channels that the GEMMs, not the transforms, dominate. ResNet-18, one
 * thread, CPU time, per 3x3 conv, the implicit GEMM -> Winograd (blocks
 * of one image): batch 1, 14x14 (16 tiles, 256 channels) 2.21 -> 0.95
 * ms, 7x7 (4 tiles, 512) 2.51 -> 1.51 ms; batch 2, 4.40 -> 1.74 and
 * 4.60 -> 2.45 ms (blocks of two images). (Session 13 measured 14x14 at
 * batch 1 slower, 1.39 -> 2.11 ms, and asked for 25 tiles; session 14's
 * alternating runs on main's binary and this one do not reproduce it.)
 * Numbers and commands: bench/results/cnn-winograd-2026-11-30-s14.md. */
enum { WINO_MIN_TILES = 4, WINO_MIN_CHANNELS = 32 };
/* Blocks of several whole images where an image has fewer than
 * WINO_MULTI_TILES tiles and the batch is static (>= 2): the 36 GEMMs of
 * a block read all of U (36 C x O floats: 9.4 MB at 256 channels, 37.7
 * MB at 512, more than the 32 MB L3), so a block of WINO_BLOCK_TILES
 * tiles or more reads it once per 64 tiles instead of once per image's
 * 16 or 4; V and M of such a block leave L2 (4.7 MB at 14x14 x 256, 9.4
 * MB at 7x7 x 512), which costs less. ResNet-18 at batch 16, one thread,
 * CPU ms of one 3x3 conv, images per block 2 / 4 / 8 / 16: 14x14 13.6 /
 * 13.5 / 13.9 / 14.0, 7x7 18.0 / 15.9 / 13.2 / 12.6 (implicit GEMM: 34.2
 * and 35.6). Its 28x28 convs (49 tiles, 128 channels) are best in blocks
 * of one image: 11.4 ms against 12.0 with two and 13.4 with four. */
enum { WINO_MULTI_TILES = 25, WINO_BLOCK_TILES = 64 };
/* V and M of a block within half a 2 MB L2; or, where U is larger than
 * that (128 channels and more), within the whole of it: each block reads
 * all of U, so fewer, larger blocks save more of its traffic than the L2
 * misses of V and M cost. ResNet-18's 28x28 convs (U 2.4 MB), one thread:
 * 0.85 ms with 1 MB blocks (two an image), 0.65-0.72 with one 2 MB block;
 * its 56x56 ones (U 0.6 MB) 0.60 ms with 1 MB blocks, 0.62-0.69 with 2 MB
 * (a loaded machine). */
enum { WINO_BLOCK_BYTES = 1 << 20, WINO_BLOCK_BYTES_BIG_U = 2 << 20 };
/* a block's input transform (about 300 vector operations per tile and
 * vector of channels) against one output channel of its 36 GEMMs (36 FMAs
 * per tile and vector of channels): the cost of a column tile per row */
enum { WINO_INPUT_COST = 8 };
/* WINO_SPLIT_ONE: a static batch of one image whose conv would be one
 * block and one panel of output channels (at most NR of them) is one tile
 * of work, which a second thread cannot share: DenseNet-121's 40 3x3 convs
 * at 14x14 and 7x7 (32 outputs) ran 1x1 at batch 1 on 2 threads, 2.5 ms of
 * its ~27 ms. It takes two blocks of tile rows instead (14x14: 8 tiles
 * each, 7x7: 2), the launch two rows. A tile's operations do not depend on
 * its block, so the bits are the same; one thread pays U's (L2-resident at
 * these sizes) second read and shorter GEMMs
 * (bench/results/cnn-resnet50-2026-11-30-s15.md). */

bool cg_wino_choose(const cg_cpu_caps *caps, const cg_kernel *k, cg_gemm *g, cg_kernel_launch *l) {
  const ir_node *mm = k->ops[0];
  gemm_conv *cv = &g->conv;
  if (caps->conv_algo == CG_CONV_ALGO_DIRECT || cv->mode != GEMM_CONV_FWD || cv->direct || cv->groups || g->bf16 ||
      g->softmax || g->bmm.on)
    return false;
  if (mm->srcs[0]->type.dtype != DT_F32 || mm->srcs[1]->type.dtype != DT_F32 || mm->type.dtype != DT_F32)
    return false;
  if (cv->KW != 3 || g->K != 9 * cv->C || cv->sh != 1 || cv->sw != 1 || cv->dh != 1 || cv->dw != 1) return false;
  int64_t tiles = ((cv->OH + 3) / 4) * ((cv->OW + 3) / 4);
  int64_t images = mm->type.dims[0]; /* a static batch; 0: symbolic */
  /* a static batch's small maps: blocks of whole images, at least
   * WINO_BLOCK_TILES tiles (below) */
  int64_t kimg = tiles < WINO_MULTI_TILES && images >= 2 ? (WINO_BLOCK_TILES + tiles - 1) / tiles : 1;
  if (kimg > images && images > 0) kimg = images;
  if (caps->conv_algo == CG_CONV_ALGO_AUTO &&
      (tiles < WINO_MIN_TILES || cv->C < WINO_MIN_CHANNELS || cv->O < WINO_MIN_CHANNELS))
    return false;
  int regs = g->vw == 16 ? 32 : 16;
  g->nv = cv->O <= g->vw ? 1 : 2;
  g->nr = g->nv * g->vw;
  g->mr = (regs - 4) / g->nv;
  if (g->mr > 14) g->mr = 14;
  g->b_src = GEMM_B_PREPACKED;
  g->panel_outer = false;
  cv->wino = 1;
  cg_wino_geom w;
  cg_wino_geom_of(g, &w);
  int64_t per_row = 36 * w.tw * (w.cp + w.op) * 4; /* V and M bytes of one tile row */
  int64_t u_bytes = 36 * cv->C * w.op * 4;
  int64_t trmax = (u_bytes > WINO_BLOCK_BYTES ? WINO_BLOCK_BYTES_BIG_U : WINO_BLOCK_BYTES) / per_row;
  if (trmax < 1) trmax = 1;
  if (trmax > w.th) trmax = w.th;
  int64_t nblk = (w.th + trmax - 1) / trmax;
  if (images == 1 && nblk == 1 && w.th >= 2 && w.op == g->nr) nblk = 2; /* one block, one panel: WINO_SPLIT_ONE */
  cv->wino = (w.th + nblk - 1) / nblk; /* blocks of equal size, the last perhaps shorter */
  int64_t row_step = 1;
  if (kimg > 1) { /* blocks of equal numbers of images, the last perhaps fewer */
    int64_t nb = (images + kimg - 1) / kimg;
    cv->wino = w.th;
    cv->wino_imgs = (images + nb - 1) / nb;
    row_step = cv->wino_imgs;
  }
  cg_wino_geom_of(g, &w);
  g->ldc = w.op;
  g->c_off = w.c_off;
  cv->flat_rows = images > 0;
  /* threads get blocks, or (a batch of 1 with few blocks) panels of
   * output channels: a column tile transforms the block's inputs again, in
   * units of a block-column of the GEMMs about WINO_INPUT_COST columns */
  *l = (cg_kernel_launch){.cols = cv->O, .col_step = g->nr, .row_step = row_step, .row_tile_min = 1,
                          .rows_fixed = images > 0 ? images * w.nblk : 0, .scratch_bytes = w.bytes,
                          .tile_row_cost = WINO_INPUT_COST};
  return true;
}
