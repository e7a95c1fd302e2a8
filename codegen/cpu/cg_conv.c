/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cg_conv.c: convolutional networks: the direct convolution, for a conv2d
 * forward whose GEMM would be narrow and short (few output channels, a
 * reduction KH*KW*C of at most one K block: the first layers of small
 * CNNs, 1 or 3 input channels, 8 to 32 output channels). There the implicit
 * GEMM spends more on gathering each row of A into its packed block than
 * on the FMAs (a 9-long row of a one-channel 3x3 convolution is three runs
 * of three values), and an 8-wide B fills half an AVX-512 vector.
 *
 * On the AVX512-BF16 family a bf16 conv2d of an even C over 4 (one K
 * block, 16 or 32 output channels: gemm_conv.kpair) runs here too, with
 * the K-pair family's sums: per tap and channel pair (c, c+1), x's pair
 * (4 bytes in place, NHWC) broadcast into one vdpbf16ps per pixel and
 * vector against w's rows c and c+1 interleaved as the packed B holds
 * them. Pair by pair in k order from a zero sum, a padding tap fed a
 * zero pair rather than skipped: the packed GEMM's operations, so its
 * bits, without gathering A or spilling C per K block.
 *
 * The direct kernel reads x in place. Per image, per output row, per tile
 * of R output pixels (R accumulator rows of NVEC vectors of LANES output
 * channels, LANES the narrowest vector that holds them: 8 for 8 channels
 * on AVX-512):
 *
 *   for kh, kw, c:  w row (kh, kw, c) -> NVEC vectors
 *                   per pixel r: acc[r] += x[n, ih, iw_r, c] (broadcast) * w
 *
 * Taps that fall in the zero padding are skipped: a row kh outside x for
 * the whole tile (a test per tile and kh), a column kw outside x for the
 * pixels of a tile at a row's edge (known at compile time: the tiles of a
 * row are laid out when the kernel is emitted, a run of whole tiles of the
 * interior as a loop, the others one by one at their place). The sums of
 * an output row go to the C tile (scratch) and the GEMM's epilogue
 * function (cg_gemm.c: bias, activation, cast, the fused ops) stores the
 * row, once per output row.
 *
 * Numerics: each output element is one FMA chain over k = (kh, kw, c) in
 * order from 0, as in the GEMM with one K block, so the results do not
 * depend on the tile or the number of threads (the launch splits images,
 * or, with a static batch, output rows: gemm_conv.flat_rows).
 * Against the GEMM path, a skipped padding tap differs only where the GEMM
 * would add 0 * w: the sign of a zero sum, or a weight that is inf or NaN.
 *
 * The planner (cg_gemm_plan.c, choose_conv_direct) picks it: K <=
 * KC_TARGET, at most two vectors of output channels; it sets the plan's vw
 * to LANES (the epilogue's vector), mr to R, and gemm_conv.direct.
 *
 * Grouped convolutions (gemm_conv.groups = G > 1, choose_group_conv): the
 * call's columns [col0, col1) are column blocks of NVEC x LANES channels,
 * each inside one group g; a block's tiles sum the group's C/G channels
 * of x (from channel g*C/G) against w's columns of the block ([KH, KW,
 * C/G, O]), into the block's columns of a C tile that holds the whole
 * call's row; the epilogue then takes the row's [col0, col1). With
 * gemm_conv.group_pack (w of at least 512 KB, an image of x within 1 MB:
 * ResNeXt's last stage) the loops turn: per image, per column block, the
 * block's columns of w are copied to K contiguous rows of nr in scratch
 * (their row stride in w, O elements, put a group's rows in a few L1
 * sets), then the image's output rows run against the copy, and the
 * epilogue takes each row's block. With group_pack 2 (C/G a multiple of
 * 16: ResNeXt's 14x14 and 7x7 stages) the block's group's channels of the
 * image's x are copied too, to [H, W, C/G] in scratch (emit_pack_x): the
 * taps read pixels C/G apart instead of C. A constant w (used by this
 * kernel only) is stored pre-packed (b_src GEMM_B_PREPACKED): per column
 * block its K rows of nr, in order, and nothing of w is copied at run
 * time. The same values in the same chains: the same bits as the other
 * order and as w and x read in place.
 *
 * 16-bit operands (mixed_bfloat16, mixed_float16: x and w bf16 or f16) are
 * read at 2 bytes and widened to f32 in registers (bf16: a shift; f16:
 * vcvtph2ps), and the sums are the same f32 FMA chains: the product of two
 * bf16 or two f16 values is exact in f32, so each FMA rounds once, as the
 * FMA families' GEMM does. On an AVX512-BF16 CPU the planner gives it a
 * bf16 conv2d of at most 4 input channels (more stay on vdpbf16ps, whose
 * pairs round twice per pair and read bf16 denormals as 0); its results
 * are then those of the AVX2 and AVX-512 paths, bit for bit. For these
 * layers (a K of 9 to 36, 8 to 32 output channels) the K-pair GEMM spent
 * its time packing short rows and in half-empty vectors, not in the
 * multiplies (bench/results/conv-bf16-2026-11-27-s5.md).
 */
#include <stdio.h>

#include "codegen/cpu/cg_gemm_internal.h"
#include "codegen/cpu/gemm/cg_gemm_bf16.h"

#define B (e->b)

enum { CONV_MAX_R = 16, CONV_MAX_NVEC = 2, CONV_MAX_KW = CG_CONV_QUADS_MAX_KW };

typedef struct conv_ctx {
  cg_kctx *c;
  const cg_gemm *g;
  const gemm_conv *cv;
  const ir_node *x, *w;
  LLVMTypeRef vt;       /* <lanes x float> */
  int lanes, nvec, last_valid;
  int64_t KH, Cg;       /* Cg: the channels a result sums (C, or C/G of a group_conv2d) */
  bool check_h;         /* some row of a window may fall in the padding */
  LLVMValueRef img, oh; /* x's element offset of the image; the output row */
  LLVMValueRef ctile;   /* the C tile: row ow at ow * ldc */
  LLVMValueRef xch;     /* x's first channel of the group (0 ungrouped) */
  LLVMValueRef wcol;    /* w's and the result's first column of the column block (0 ungrouped) */
  LLVMValueRef tcol;    /* its column in the C tile (0 ungrouped) */
  LLVMValueRef wpack;   /* group_pack: the block's columns of w, K rows of nr (w's dtype), else NULL */
  LLVMValueRef xpack;   /* group_pack 2: the group's channels of x, [H, W, C/G] (x's dtype), else NULL */
  int64_t xstride;      /* x's elements from one pixel to the next: C, or C/G in xpack */
  bool quads;           /* groups of 4 channels and 4 outputs, a block of lanes / 4 of them (emit_taps_quads) */
} conv_ctx;

static LLVMValueRef add(cg_emitter *e, LLVMValueRef a, LLVMValueRef b) { return LLVMBuildAdd(B, a, b, ""); }
static LLVMValueRef mul(cg_emitter *e, LLVMValueRef a, int64_t b) { return LLVMBuildMul(B, a, cg_i64(e, b), ""); }

/* A bf16 value of x at p widened to f32 in every lane: its 16 bits
 * broadcast to every 16-bit half (one vpbroadcastw from memory), the
 * lower halves cleared (one vpandd), the widening's bits. The scalar
 * load, shift, move to a vector register and broadcast were four
 * operations per FMA of the stem's 16-lane taps (a 3-channel 3x3 conv:
 * 27 taps a pixel, 1.8x float32's time at batch 16). */
static LLVMValueRef splat_bf16(cg_emitter *e, LLVMValueRef p, int lanes) {
  LLVMTypeRef h = LLVMInt16TypeInContext(e->ctx), hv = LLVMVectorType(h, (unsigned)(2 * lanes));
  LLVMTypeRef iv = LLVMVectorType(e->i32, (unsigned)lanes);
  LLVMValueRef v = LLVMBuildLoad2(B, h, p, "x.bf16");
  LLVMSetAlignment(v, 2);
  v = LLVMBuildInsertElement(B, LLVMGetUndef(hv), v, cg_i64(e, 0), "");
  v = LLVMBuildShuffleVector(B, v, LLVMGetUndef(hv), LLVMConstNull(LLVMVectorType(e->i32, (unsigned)(2 * lanes))), "");
  v = LLVMBuildAnd(B, LLVMBuildBitCast(B, v, iv, ""), cg_const(e, iv, (double)0xffff0000u), "");
  return LLVMBuildBitCast(B, v, LLVMVectorType(e->f32, (unsigned)lanes), "x.bcast");
}

/* The taps of column kw for the pixels ow0 .. ow0+R of the tile, row
 * offset xrow (x's element index of (n, ih, 0, 0)); a pixel r with
 * !col_in[r] has this column in the padding (known when the tile's place
 * is: the tiles at a row's edges), and gets no FMA. */
/* kpair: the taps' (c, c+1) pairs of channels, each a vdpbf16ps per
 * pixel and vector: x's pair read in place as one i32 and broadcast, w's
 * rows c and c+1 interleaved into the packed B's pair row; a pixel whose
 * column (col_in) or row (x_in false) is in the padding gets a zero pair,
 * not a skip, as the packed GEMM's zero A row does (vdpbf16ps's adding of
 * +0 products turns a -0 or, flushed, a subnormal sum into +0) */
enum { KPAIR_UNROLL = 32 };
static void emit_pair_kpair(conv_ctx *t, LLVMValueRef xpix, LLVMValueRef krow, LLVMValueRef chc, int R, const bool *col_in,
                            bool x_in, LLVMValueRef acc[CONV_MAX_R][CONV_MAX_NVEC]);
static void emit_taps_kpair(conv_ctx *t, LLVMValueRef xpix, LLVMValueRef krow, int R, const bool *col_in, bool x_in,
                            LLVMValueRef acc[CONV_MAX_R][CONV_MAX_NVEC]) {
  cg_emitter *e = t->c->e;
  const gemm_conv *cv = t->cv;
  /* a kernel row of at most KPAIR_UNROLL pairs is unrolled: a loop of 8
   * pairs per tap cost its exit's misprediction 9 times a tile (the 3x3
   * convs of 16 channels of tests/onnx/models/resnet: 0.144 -> 0.126 ms) */
  bool unroll = t->Cg / 2 * cv->KW <= KPAIR_UNROLL;
  for (int64_t cu = 0; cu < (unroll ? t->Cg : 2); cu += 2)
    emit_pair_kpair(t, xpix, krow, unroll ? cg_i64(e, cu) : NULL, R, col_in, x_in, acc);
}

static void emit_pair_kpair(conv_ctx *t, LLVMValueRef xpix, LLVMValueRef krow, LLVMValueRef chc, int R, const bool *col_in,
                            bool x_in, LLVMValueRef acc[CONV_MAX_R][CONV_MAX_NVEC]) {
  cg_kctx *c = t->c;
  cg_emitter *e = c->e;
  const gemm_conv *cv = t->cv;
  LLVMTypeRef h = LLVMInt16TypeInContext(e->ctx), hv = LLVMVectorType(h, CG_BF16_LANES);
  LLVMTypeRef iv = LLVMVectorType(e->i32, CG_BF16_LANES), bv = LLVMVectorType(e->bf16, CG_BF16_VEC);
  cg_loop lc = {0};
  LLVMValueRef ch = chc ? chc : cg_i64(e, 0);
  if (!chc && t->Cg > 2) {
    lc = cg_loop_begin(c, cg_i64(e, 0), cg_i64(e, t->Cg), 2, "conv.cpair");
    ch = lc.iv;
  }
  LLVMValueRef wrow = mul(e, add(e, krow, ch), cv->O);
  LLVMValueRef wv[CONV_MAX_NVEC];
  for (int v = 0; v < t->nvec; v++) {
    LLVMValueRef w0 = cg_elem_ptr(c, t->w, add(e, wrow, cg_i64(e, (int64_t)v * CG_BF16_LANES)));
    LLVMValueRef w1 = cg_elem_ptr(c, t->w, add(e, wrow, cg_i64(e, cv->O + (int64_t)v * CG_BF16_LANES)));
    LLVMValueRef lo = LLVMBuildLoad2(B, hv, w0, ""), hi = LLVMBuildLoad2(B, hv, w1, "");
    LLVMSetAlignment(lo, 2), LLVMSetAlignment(hi, 2);
    wv[v] = cg_gemm_bf16_pair_row(e, lo, hi);
  }
  for (int r = 0; r < R; r++) {
    LLVMValueRef xs = LLVMConstNull(bv);
    if (x_in && col_in[r]) {
      LLVMValueRef xi = add(e, xpix, add(e, cg_i64(e, (int64_t)r * cv->sw * cv->C), ch));
      LLVMValueRef pair = LLVMBuildLoad2(B, e->i32, cg_elem_ptr(c, t->x, xi), "x.pair");
      LLVMSetAlignment(pair, 2);
      LLVMValueRef sp = LLVMBuildInsertElement(B, LLVMGetUndef(iv), pair, cg_i64(e, 0), "");
      sp = LLVMBuildShuffleVector(B, sp, LLVMGetUndef(iv), LLVMConstNull(iv), "");
      xs = LLVMBuildBitCast(B, sp, bv, "x.bcast");
    }
    for (int v = 0; v < t->nvec; v++)
      LLVMBuildStore(B, cg_gemm_bf16_dp(e, LLVMBuildLoad2(B, t->vt, acc[r][v], ""), xs, wv[v]), acc[r][v]);
  }
  if (!chc && t->Cg > 2) cg_loop_end(c, &lc);
}

static void emit_taps(conv_ctx *t, LLVMValueRef xrow, LLVMValueRef kh, int64_t kw, LLVMValueRef ow0, int R,
                      const bool *col_in, bool x_in, LLVMValueRef acc[CONV_MAX_R][CONV_MAX_NVEC]) {
  cg_kctx *c = t->c;
  cg_emitter *e = c->e;
  const gemm_conv *cv = t->cv;
  if (cv->kpair) {
    LLVMValueRef iw0 = add(e, mul(e, ow0, cv->sw), cg_i64(e, kw * cv->dw - cv->pl));
    LLVMValueRef xpix = x_in ? add(e, xrow, mul(e, iw0, cv->C)) : NULL;
    LLVMValueRef krow = mul(e, add(e, mul(e, kh, cv->KW), cg_i64(e, kw)), t->Cg);
    emit_taps_kpair(t, xpix, krow, R, col_in, x_in, acc);
    return;
  }
  bool any = false;
  for (int r = 0; r < R; r++) any |= col_in[r];
  if (!any) return;
  LLVMValueRef iw0 = add(e, mul(e, ow0, cv->sw), cg_i64(e, kw * cv->dw - cv->pl));
  LLVMValueRef xpix = add(e, xrow, add(e, mul(e, iw0, t->xstride), t->xch)); /* x at (n, ih, iw0, group's 0) */
  LLVMValueRef krow = mul(e, add(e, mul(e, kh, cv->KW), cg_i64(e, kw)), t->Cg); /* k of (kh, kw, 0) */
  cg_loop lc = {0};
  LLVMValueRef ch = cg_i64(e, 0);
  if (t->Cg > 1) {
    lc = cg_loop_begin(c, cg_i64(e, 0), cg_i64(e, t->Cg), 1, "conv.c");
    ch = lc.iv;
  }
  LLVMValueRef wrow = t->wpack ? mul(e, add(e, krow, ch), t->g->nr) : add(e, mul(e, add(e, krow, ch), cv->O), t->wcol);
  LLVMValueRef wv[CONV_MAX_NVEC];
  for (int v = 0; v < t->nvec; v++) {
    LLVMValueRef wi = add(e, wrow, cg_i64(e, (int64_t)v * t->lanes));
    LLVMValueRef wp = t->wpack ? LLVMBuildGEP2(B, cg_llvm_dtype(e, t->w->type.dtype), t->wpack, &wi, 1, "") : cg_elem_ptr(c, t->w, wi);
    wv[v] = cg_load_part(e, t->w->type.dtype, wp, t->lanes, v == t->nvec - 1 ? t->last_valid : t->lanes, t->w->name);
  }
  for (int r = 0; r < R; r++) {
    if (!col_in[r]) continue;
    LLVMValueRef xi = add(e, xpix, add(e, cg_i64(e, (int64_t)r * cv->sw * t->xstride), ch));
    LLVMValueRef xp = t->xpack ? LLVMBuildGEP2(B, cg_llvm_dtype(e, t->x->type.dtype), t->xpack, &xi, 1, "") : cg_elem_ptr(c, t->x, xi);
    LLVMValueRef xs = t->x->type.dtype == DT_BF16 ? splat_bf16(e, xp, t->lanes)
                                                  : cg_splat(e, cg_emit_load(e, t->x->type.dtype, xp, 1, t->x->name), t->lanes);
    for (int v = 0; v < t->nvec; v++)
      LLVMBuildStore(B, cg_fmuladd(e, xs, wv[v], LLVMBuildLoad2(B, t->vt, acc[r][v], "")), acc[r][v]);
  }
  if (t->Cg > 1) cg_loop_end(c, &lc);
}

/* The taps of kernel row kh for a block of lanes / 4 groups of 4 channels
 * and 4 outputs (ResNeXt-50 32x4d's first stage): lane 4j + o sums group
 * j's channels against its output o's column of w, w's column wcol + 4j +
 * o, so the w row of tap (kh, kw, c) is one vector as ungrouped; the x
 * value it needs, x's channel xch + 4j + c, is lane c of the pixel's
 * 4-lane quarter j: one load of the pixel's lanes channels, and per c a
 * shuffle inside each 128-bit quarter (vshufps) instead of a broadcast
 * load per group and FMAs of 4 lanes. The tile's pixels of x are walked
 * once each, left to right (pixel q = r * sw + kw * dw of the tile), each
 * loaded and shuffled once for every (r, kw) that reads it (three times
 * at stride 1: emitted per (r, kw), LLVM merged the equal loads and kept
 * the shuffles of a row live: spills). Per accumulator the FMAs still come
 * in the order (kw, c), so each lane's chain is one group's, the same FMAs
 * in the same order: the same bits as the 4-lane blocks. col_in[kw][r]:
 * pixel r's column kw is inside x. */
static void emit_row_quads(conv_ctx *t, LLVMValueRef xrow, LLVMValueRef kh, LLVMValueRef ow0, int R,
                           bool col_in[][CONV_MAX_R], LLVMValueRef acc[CONV_MAX_R][CONV_MAX_NVEC]) {
  cg_kctx *c = t->c;
  cg_emitter *e = c->e;
  const gemm_conv *cv = t->cv;
  CASTOR_ASSERT(t->Cg == 4 && t->nvec == 1 && t->lanes % 4 == 0 && cv->KW <= CONV_MAX_KW);
  LLVMTypeRef wt = cg_llvm_dtype(e, t->w->type.dtype), xt = cg_llvm_dtype(e, t->x->type.dtype);
  LLVMValueRef wv[CONV_MAX_KW][4];
  for (int64_t kw = 0; kw < cv->KW; kw++)
    for (int ch = 0; ch < 4; ch++) {
      LLVMValueRef wrow = add(e, mul(e, add(e, mul(e, kh, cv->KW), cg_i64(e, kw)), 4), cg_i64(e, ch)); /* k of (kh, kw, c) */
      LLVMValueRef wi = t->wpack ? mul(e, wrow, t->g->nr) : add(e, mul(e, wrow, cv->O), t->wcol);
      LLVMValueRef wp = t->wpack ? LLVMBuildGEP2(B, wt, t->wpack, &wi, 1, "") : cg_elem_ptr(c, t->w, wi);
      wv[kw][ch] = cg_load_part(e, t->w->type.dtype, wp, t->lanes, t->lanes, t->w->name);
    }
  LLVMValueRef mask[4][16];
  for (int ch = 0; ch < 4; ch++)
    for (int l = 0; l < t->lanes; l++) mask[ch][l] = LLVMConstInt(LLVMInt32TypeInContext(e->ctx), (unsigned)(l / 4 * 4 + ch), 0);
  /* x's pixel of the tile's first output column at kw = 0 */
  LLVMValueRef x0 = add(e, xrow, add(e, mul(e, add(e, mul(e, ow0, cv->sw), cg_i64(e, -cv->pl)), t->xstride), t->xch));
  int64_t span = (int64_t)(R - 1) * cv->sw + (cv->KW - 1) * cv->dw;
  for (int64_t q = 0; q <= span; q++) {
    bool used = false;
    for (int64_t kw = 0; kw < cv->KW; kw++) {
      int64_t d = q - kw * cv->dw;
      used |= d >= 0 && d % cv->sw == 0 && d / cv->sw < R && col_in[kw][d / cv->sw];
    }
    if (!used) continue;
    LLVMValueRef xi = add(e, x0, cg_i64(e, q * t->xstride));
    LLVMValueRef xp = t->xpack ? LLVMBuildGEP2(B, xt, t->xpack, &xi, 1, "") : cg_elem_ptr(c, t->x, xi);
    LLVMValueRef xv = cg_emit_load(e, t->x->type.dtype, xp, t->lanes, t->x->name);
    for (int ch = 0; ch < 4; ch++) {
      LLVMValueRef xs = LLVMBuildShuffleVector(B, xv, LLVMGetUndef(t->vt), LLVMConstVector(mask[ch], (unsigned)t->lanes), "conv.xq");
      for (int64_t kw = 0; kw < cv->KW; kw++) { /* (r, kw) reading pixel q, as r = (q - kw * dw) / sw */
        int64_t d = q - kw * cv->dw;
        if (d < 0 || d % cv->sw || d / cv->sw >= R || !col_in[kw][d / cv->sw]) continue;
        LLVMValueRef a = acc[d / cv->sw][0];
        LLVMBuildStore(B, cg_fmuladd(e, xs, wv[kw][ch], LLVMBuildLoad2(B, t->vt, a, "")), a);
      }
    }
  }
}

/* One tile: output pixels ow0 .. ow0+R of row t->oh, their sums into the
 * C tile's rows ow0 ..; at (constant) ow_at >= 0 the columns in the
 * padding are skipped pixel by pixel, ow_at < 0: a tile of the interior. */
static void emit_tile(conv_ctx *t, LLVMValueRef ow0, int64_t ow_at, int R) {
  cg_kctx *c = t->c;
  cg_emitter *e = c->e;
  const gemm_conv *cv = t->cv;
  CASTOR_ASSERT(R >= 1 && R <= CONV_MAX_R && t->nvec <= CONV_MAX_NVEC);
  LLVMValueRef acc[CONV_MAX_R][CONV_MAX_NVEC];
  for (int r = 0; r < R; r++)
    for (int v = 0; v < t->nvec; v++) {
      acc[r][v] = cg_entry_alloca(c, t->vt, "conv.acc");
      LLVMBuildStore(B, LLVMConstNull(t->vt), acc[r][v]);
    }
  cg_loop lh = cg_loop_begin(c, cg_i64(e, 0), cg_i64(e, t->KH), 1, "conv.kh");
  LLVMValueRef ih = add(e, mul(e, t->oh, cv->sh), add(e, cg_i64(e, -cv->pt), mul(e, lh.iv, cv->dh)));
  LLVMBasicBlockRef row_done = NULL;
  LLVMBasicBlockRef row_out = NULL;
  if (t->check_h) {
    LLVMValueRef in = LLVMBuildAnd(B, LLVMBuildICmp(B, LLVMIntSGE, ih, cg_i64(e, 0), ""),
                                   LLVMBuildICmp(B, LLVMIntSLT, ih, cg_i64(e, cv->H), ""), "conv.in_h");
    LLVMBasicBlockRef go = LLVMAppendBasicBlockInContext(e->ctx, c->fn, "conv.row");
    row_done = LLVMAppendBasicBlockInContext(e->ctx, c->fn, "conv.row.done");
    /* kpair: a row in the padding is zero pairs (emit_taps_kpair) */
    row_out = cv->kpair ? LLVMAppendBasicBlockInContext(e->ctx, c->fn, "conv.row.pad") : row_done;
    LLVMBuildCondBr(B, in, go, row_out);
    LLVMPositionBuilderAtEnd(B, go);
  }
  LLVMValueRef xrow = add(e, t->img, mul(e, ih, cv->W * t->xstride));
  bool col_in[CONV_MAX_KW][CONV_MAX_R];
  for (int64_t kw = 0; kw < cv->KW && kw < CONV_MAX_KW; kw++)
    for (int r = 0; r < R; r++) {
      int64_t iw = (ow_at + r) * cv->sw - cv->pl + kw * cv->dw;
      col_in[kw][r] = ow_at < 0 || (iw >= 0 && iw < cv->W);
    }
  for (int pass = 0; pass < (cv->kpair && t->check_h ? 2 : 1); pass++) {
    if (pass) {
      LLVMBuildBr(B, row_done);
      LLVMPositionBuilderAtEnd(B, row_out);
    }
    if (t->quads) emit_row_quads(t, xrow, lh.iv, ow0, R, col_in, acc);
    for (int64_t kw = 0; kw < cv->KW && !t->quads; kw++) { /* the columns unrolled */
      bool col_one[CONV_MAX_R];
      for (int r = 0; r < R; r++) {
        int64_t iw = (ow_at + r) * cv->sw - cv->pl + kw * cv->dw;
        col_one[r] = ow_at < 0 || (iw >= 0 && iw < cv->W);
      }
      emit_taps(t, xrow, lh.iv, kw, ow0, R, col_one, pass == 0, acc);
    }
  }
  if (t->check_h) {
    LLVMBuildBr(B, row_done);
    LLVMPositionBuilderAtEnd(B, row_done);
  }
  cg_loop_end(c, &lh);
  for (int r = 0; r < R; r++)
    for (int v = 0; v < t->nvec; v++) {
      LLVMValueRef off = add(e, mul(e, add(e, ow0, cg_i64(e, r)), t->g->ldc), add(e, t->tcol, cg_i64(e, (int64_t)v * t->lanes)));
      cg_emit_store(e, DT_F32, LLVMBuildLoad2(B, t->vt, acc[r][v], ""), LLVMBuildGEP2(B, e->f32, t->ctile, &off, 1, ""),
                    t->lanes);
    }
}

/* groups: the loop over the call's column blocks [col0, col1) of nr
 * columns, each in group col / (O/G): w's and the result's first column,
 * x's first channel, the column in the C tile */
static void emit_block_begin(conv_ctx *t, cg_loop *lb) {
  cg_kctx *c = t->c;
  cg_emitter *e = c->e;
  int64_t nr = t->g->nr, G = t->cv->groups;
  *lb = cg_loop_begin(c, LLVMBuildSDiv(B, c->col0, cg_i64(e, nr), ""), LLVMBuildSDiv(B, c->col1, cg_i64(e, nr), ""), 1,
                      "conv.block");
  t->wcol = mul(e, lb->iv, nr);
  t->xch = mul(e, LLVMBuildSDiv(B, t->wcol, cg_i64(e, t->cv->O / G), "conv.group"), t->Cg);
  t->tcol = LLVMBuildSub(B, t->wcol, c->col0, "");
  if (t->g->b_src == GEMM_B_PREPACKED) /* w stored as column blocks of K x nr: the block's */
    t->wpack = cg_elem_ptr(c, t->w, mul(e, t->wcol, t->g->K));
}

/* n elements (whole vectors of vec) of node src from element si on copied,
 * in its dtype, to dst + di (scratch): the same values */
static void copy_vectors(cg_kctx *c, const ir_node *src, LLVMValueRef si, LLVMValueRef dst, LLVMValueRef di, int64_t n,
                         int64_t vec) {
  cg_emitter *e = c->e;
  LLVMTypeRef et = cg_llvm_dtype(e, src->type.dtype), vt = LLVMVectorType(et, (unsigned)vec);
  unsigned align = (unsigned)dtype_size(src->type.dtype);
  for (int64_t v = 0; v < n; v += vec) {
    LLVMValueRef s = add(e, si, cg_i64(e, v)), d = add(e, di, cg_i64(e, v));
    LLVMValueRef ld = LLVMBuildLoad2(B, vt, cg_elem_ptr(c, src, s), "");
    LLVMSetAlignment(ld, align);
    LLVMValueRef st = LLVMBuildStore(B, ld, LLVMBuildGEP2(B, et, dst, &d, 1, ""));
    LLVMSetAlignment(st, align);
  }
}

/* group_pack: the block's nr columns of w ([KH*KW*C/G, O] row-major: a
 * row stride of O, 4 KB at ResNeXt's 1024 channels, so the rows of a
 * group's 36 KB share a few L1 sets and left L1 before the next output
 * row) copied, element for element in w's dtype, to K contiguous rows of
 * nr at scratch + b_off: the same values, so the same sums */
static void emit_pack_w(conv_ctx *t) {
  cg_kctx *c = t->c;
  cg_emitter *e = c->e;
  const cg_gemm *g = t->g;
  t->wpack = LLVMBuildGEP2(B, LLVMInt8TypeInContext(e->ctx), c->scratch, (LLVMValueRef[]){cg_i64(e, g->b_off)}, 1, "conv.wpack");
  cg_loop lk = cg_loop_begin(c, cg_i64(e, 0), cg_i64(e, g->K), 1, "conv.wpack.k");
  copy_vectors(c, t->w, add(e, mul(e, lk.iv, t->cv->O), t->wcol), t->wpack, mul(e, lk.iv, g->nr), (int64_t)t->nvec * t->lanes, t->lanes);
  cg_loop_end(c, &lk);
}

/* group_pack 2: the group's C/G channels of image n's input rows [ih0,
 * ih1) (the rows the call's output rows read) copied, element for element
 * in x's dtype, to [H, W, C/G] at scratch + cg_conv_xpack_off: the taps
 * then read a pixel's channels C/G elements after the previous pixel's,
 * not C (2-4 KB at ResNeXt's 512 and 1024 channels, which put a tile's
 * pixels, strided or not, in one or two L1 sets), and the same values, so
 * the same sums. Only for C/G a multiple of 16: whole vectors, and a
 * group's channels whole 64-byte lines of x in f32 (so a line of x is
 * read for one group only). */
static void emit_pack_x(conv_ctx *t, LLVMValueRef n, LLVMValueRef ih0, LLVMValueRef ih1) {
  cg_kctx *c = t->c;
  cg_emitter *e = c->e;
  const gemm_conv *cv = t->cv;
  int64_t XV = t->Cg % 16 == 0 ? 16 : 8;
  CASTOR_ASSERT(t->Cg % XV == 0);
  t->xpack = LLVMBuildGEP2(B, LLVMInt8TypeInContext(e->ctx), c->scratch, (LLVMValueRef[]){cg_i64(e, cg_conv_xpack_off(t->g, t->w->type.dtype))},
                           1, "conv.xpack");
  LLVMValueRef img = mul(e, n, cv->H * cv->W * cv->C);
  cg_loop lp = cg_loop_begin(c, mul(e, ih0, cv->W), mul(e, ih1, cv->W), 1, "conv.xpack.p");
  copy_vectors(c, t->x, add(e, img, add(e, mul(e, lp.iv, cv->C), t->xch)), t->xpack, mul(e, lp.iv, t->Cg), t->Cg, XV);
  cg_loop_end(c, &lp);
}

static LLVMValueRef clamp(cg_emitter *e, LLVMValueRef v, int64_t lo, int64_t hi) {
  v = LLVMBuildSelect(B, LLVMBuildICmp(B, LLVMIntSLT, v, cg_i64(e, lo), ""), cg_i64(e, lo), v, "");
  return LLVMBuildSelect(B, LLVMBuildICmp(B, LLVMIntSGT, v, cg_i64(e, hi), ""), cg_i64(e, hi), v, "");
}

void cg_conv_direct_emit(cg_kctx *c, const cg_gemm *g, LLVMValueRef epilogue) {
  cg_emitter *e = c->e;
  const cg_kernel *k = c->k;
  const gemm_conv *cv = &g->conv;
  int64_t G = cv->groups > 1 ? cv->groups : 1;
  conv_ctx t = {.c = c, .g = g, .cv = cv, .x = k->ops[0]->srcs[0], .w = k->ops[0]->srcs[1], .lanes = g->vw,
                .nvec = g->nv, .Cg = cv->C / G, .KH = g->K / (cv->KW * (cv->C / G))};
  CASTOR_ASSERT(cv->direct > 0 && cv->direct <= CONV_MAX_R && cg_conv_direct_dtype(t.x->type.dtype) &&
                cg_conv_direct_dtype(t.w->type.dtype) && t.KH * cv->KW * t.Cg == g->K);
  /* groups: column blocks of nr whole vectors inside one group, or of
   * nr / 4 whole groups of 4 channels and 4 outputs */
  t.quads = G > 1 && g->nr > cv->O / G;
  CASTOR_ASSERT(G == 1 || (cv->O % G == 0 && g->ldc >= cv->O &&
                           (t.quads ? t.Cg == 4 && cv->O / G == 4 && g->nr % 4 == 0 && t.nvec == 1 : (cv->O / G) % g->nr == 0)));
  CASTOR_ASSERT(G > 1 || g->b_src == GEMM_B_IN_PLACE); /* pre-packed w: column blocks of groups */
  t.vt = LLVMVectorType(e->f32, (unsigned)t.lanes);
  t.last_valid = G > 1 ? t.lanes : (int)(cv->O - (int64_t)(t.nvec - 1) * t.lanes);
  t.xch = t.wcol = t.tcol = cg_i64(e, 0);
  t.xstride = cv->C;
  /* rows of a window outside x: above the first, or below the last */
  t.check_h = cv->pt > 0 || (cv->OH - 1) * cv->sh - cv->pt + (t.KH - 1) * cv->dh >= cv->H;
  /* the row's tiles: [ow0, ow0 + R), the last one perhaps shorter; a run
   * of whole tiles inside the interior (every window column inside x) is
   * a loop, the others are emitted at their place with the columns in the
   * padding left out */
  int64_t lo, hi, R = cv->direct, OW = cv->OW;
  gemm_conv_interior(cv, &lo, &hi);
  t.ctile = LLVMBuildGEP2(B, LLVMInt8TypeInContext(e->ctx), c->scratch, (LLVMValueRef[]){cg_i64(e, g->c_off)}, 1, "ctile");
  /* the launch rows: images, or (flat_rows, a static batch) output rows
   * n x OH + oh; group_pack: per image of the call's rows, the column
   * blocks, each with its w copied, then the image's rows of the call */
  cg_loop lb = {0}, ln = {0}, lo_h;
  LLVMValueRef n;
  if (cv->group_pack) {
    LLVMValueRef n0 = cv->flat_rows ? LLVMBuildSDiv(B, c->row0, cg_i64(e, cv->OH), "") : c->row0;
    LLVMValueRef n1 = cv->flat_rows ? LLVMBuildSDiv(B, add(e, c->row1, cg_i64(e, cv->OH - 1)), cg_i64(e, cv->OH), "") : c->row1;
    ln = cg_loop_begin(c, n0, n1, 1, "conv.n");
    n = ln.iv;
    LLVMValueRef h0 = cg_i64(e, 0), h1 = cg_i64(e, cv->OH);
    if (cv->flat_rows) { /* the call's rows of image n */
      LLVMValueRef first = mul(e, n, cv->OH);
      LLVMValueRef lo_r = LLVMBuildSub(B, c->row0, first, ""), hi_r = LLVMBuildSub(B, c->row1, first, "");
      h0 = LLVMBuildSelect(B, LLVMBuildICmp(B, LLVMIntSGT, lo_r, h0, ""), lo_r, h0, "");
      h1 = LLVMBuildSelect(B, LLVMBuildICmp(B, LLVMIntSLT, hi_r, h1, ""), hi_r, h1, "");
    }
    emit_block_begin(&t, &lb);
    if (g->b_src != GEMM_B_PREPACKED) emit_pack_w(&t);
    if (cv->group_pack == 2) { /* x's rows that output rows [h0, h1) read */
      LLVMValueRef ih0 = add(e, mul(e, h0, cv->sh), cg_i64(e, -cv->pt));
      LLVMValueRef ih1 = add(e, mul(e, LLVMBuildSub(B, h1, cg_i64(e, 1), ""), cv->sh), cg_i64(e, (t.KH - 1) * cv->dh + 1 - cv->pt));
      emit_pack_x(&t, n, clamp(e, ih0, 0, cv->H), clamp(e, ih1, 0, cv->H));
      t.xch = cg_i64(e, 0);
      t.xstride = t.Cg;
    }
    lo_h = cg_loop_begin(c, h0, h1, 1, "conv.oh");
    t.oh = lo_h.iv;
  } else if (cv->flat_rows) {
    lo_h = cg_loop_begin(c, c->row0, c->row1, 1, "conv.row");
    n = LLVMBuildSDiv(B, lo_h.iv, cg_i64(e, cv->OH), "conv.n");
    t.oh = LLVMBuildSRem(B, lo_h.iv, cg_i64(e, cv->OH), "conv.oh");
  } else {
    ln = cg_loop_begin(c, c->row0, c->row1, 1, "conv.n");
    n = ln.iv;
    lo_h = cg_loop_begin(c, cg_i64(e, 0), cg_i64(e, cv->OH), 1, "conv.oh");
    t.oh = lo_h.iv;
  }
  t.img = t.xpack ? cg_i64(e, 0) : mul(e, n, cv->H * cv->W * cv->C);
  if (G > 1 && !cv->group_pack) emit_block_begin(&t, &lb);
  for (int64_t ow0 = 0; ow0 < OW;) {
    int64_t n_run = 0; /* whole interior tiles from ow0 on */
    while (ow0 + (n_run + 1) * R <= OW && ow0 + n_run * R >= lo && ow0 + (n_run + 1) * R <= hi) n_run++;
    if (n_run >= 2) {
      cg_loop lt = cg_loop_begin(c, cg_i64(e, ow0), cg_i64(e, ow0 + n_run * R), R, "conv.ow");
      emit_tile(&t, lt.iv, -1, (int)R);
      cg_loop_end(c, &lt);
      ow0 += n_run * R;
      continue;
    }
    int64_t len = OW - ow0 < R ? OW - ow0 : R;
    emit_tile(&t, cg_i64(e, ow0), ow0 >= lo && ow0 + len <= hi ? -1 : ow0, (int)len);
    ow0 += len;
  }
  if (G > 1 && !cv->group_pack) cg_loop_end(c, &lb);
  /* the row's sums through the epilogue: GEMM rows (n, oh, 0 ..), the
   * call's columns (all of them ungrouped), or the block's (group_pack) */
  LLVMValueRef row = mul(e, add(e, mul(e, n, cv->OH), t.oh), cv->OW);
  LLVMValueRef col = cv->group_pack ? t.wcol : G > 1 ? c->col0 : cg_i64(e, 0);
  LLVMValueRef ncols = cv->group_pack ? cg_i64(e, g->nr) : G > 1 ? LLVMBuildSub(B, c->col1, c->col0, "") : cg_i64(e, cv->O);
  LLVMValueRef tile = cv->group_pack ? LLVMBuildGEP2(B, e->f32, t.ctile, &t.tcol, 1, "") : t.ctile;
  LLVMValueRef args[] = {c->bufs, tile, row, cg_i64(e, cv->OW), col, ncols};
  LLVMBuildCall2(B, LLVMGlobalGetValueType(epilogue), epilogue, args, 6, "");
  cg_loop_end(c, &lo_h);
  if (cv->group_pack) {
    cg_loop_end(c, &lb);
    cg_loop_end(c, &ln);
  } else if (!cv->flat_rows) {
    cg_loop_end(c, &ln);
  }
}
