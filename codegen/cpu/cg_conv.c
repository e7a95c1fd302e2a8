/*
 * cg_conv.c: convolutional networks: the direct convolution, for a conv2d
 * forward whose GEMM would be narrow and short (few output channels, a
 * reduction KH*KW*C of at most one K block: the first layers of small
 * CNNs, 1 or 3 input channels, 8 to 32 output channels). There the implicit
 * GEMM spends more on gathering each row of A into its packed block than
 * on the FMAs (a 9-long row of a one-channel 3x3 convolution is three runs
 * of three values), and an 8-wide B fills half an AVX-512 vector.
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
 * the whole tile, a column kw outside x for a pixel of the border (the
 * pixels whose windows reach past the left or right edge run one at a time;
 * the interior in tiles of R, sized so that they divide it evenly where they
 * can). The sums of an output row go to the C tile (scratch) and the GEMM's
 * epilogue function (cg_gemm.c: bias, activation, cast, the fused ops) stores
 * the row, once per output row.
 *
 * Numerics: each output element is one FMA chain over k = (kh, kw, c) in
 * order from 0, as in the GEMM with one K block, so the results do not
 * depend on the tile or the number of threads (the launch splits images).
 * Against the GEMM path, a skipped padding tap differs only where the GEMM
 * would add 0 * w: the sign of a zero sum, or a weight that is inf or NaN.
 *
 * The planner (cg_gemm_plan.c, choose_conv_direct) picks it: f32 x and w,
 * K <= KC_TARGET, at most two vectors of output channels; it sets the
 * plan's vw to LANES (the epilogue's vector), mr to R, and gemm_conv.direct.
 */
#include <stdio.h>

#include "codegen/cpu/cg_gemm_internal.h"

#define B (e->b)

enum { CONV_MAX_R = 16, CONV_MAX_NVEC = 2 };

typedef struct conv_ctx {
  cg_kctx *c;
  const cg_gemm *g;
  const gemm_conv *cv;
  const ir_node *x, *w;
  LLVMTypeRef vt;       /* <lanes x float> */
  int lanes, nvec, last_valid;
  int64_t KH;
  bool check_h;         /* some row of a window may fall in the padding */
  LLVMValueRef img, oh; /* x's element offset of the image; the output row */
  LLVMValueRef ctile;   /* the C tile: row ow at ow * ldc */
} conv_ctx;

static LLVMValueRef add(cg_emitter *e, LLVMValueRef a, LLVMValueRef b) { return LLVMBuildAdd(B, a, b, ""); }
static LLVMValueRef mul(cg_emitter *e, LLVMValueRef a, int64_t b) { return LLVMBuildMul(B, a, cg_i64(e, b), ""); }

/* The taps of column kw for the pixels ow0 .. ow0+R of the tile, row
 * offset xrow (x's element index of (n, ih, 0, 0)); check_w: R == 1 and
 * the column may fall in the padding. */
static void emit_taps(conv_ctx *t, LLVMValueRef xrow, LLVMValueRef kh, LLVMValueRef kw, LLVMValueRef ow0, int R,
                      bool check_w, LLVMValueRef acc[CONV_MAX_R][CONV_MAX_NVEC]) {
  cg_kctx *c = t->c;
  cg_emitter *e = c->e;
  const gemm_conv *cv = t->cv;
  LLVMValueRef iw0 = add(e, mul(e, ow0, cv->sw), add(e, cg_i64(e, -cv->pl), mul(e, kw, cv->dw)));
  LLVMBasicBlockRef done = NULL;
  if (check_w) {
    LLVMValueRef in = LLVMBuildAnd(B, LLVMBuildICmp(B, LLVMIntSGE, iw0, cg_i64(e, 0), ""),
                                   LLVMBuildICmp(B, LLVMIntSLT, iw0, cg_i64(e, cv->W), ""), "conv.in_w");
    LLVMBasicBlockRef go = LLVMAppendBasicBlockInContext(e->ctx, c->fn, "conv.col");
    done = LLVMAppendBasicBlockInContext(e->ctx, c->fn, "conv.col.done");
    LLVMBuildCondBr(B, in, go, done);
    LLVMPositionBuilderAtEnd(B, go);
  }
  LLVMValueRef xpix = add(e, xrow, mul(e, iw0, cv->C));                   /* x at (n, ih, iw0, 0) */
  LLVMValueRef krow = mul(e, add(e, mul(e, kh, cv->KW), kw), cv->C);      /* k of (kh, kw, 0) */
  cg_loop lc = {0};
  LLVMValueRef ch = cg_i64(e, 0);
  if (cv->C > 1) {
    lc = cg_loop_begin(c, cg_i64(e, 0), cg_i64(e, cv->C), 1, "conv.c");
    ch = lc.iv;
  }
  LLVMValueRef wrow = mul(e, add(e, krow, ch), cv->O);
  LLVMValueRef wv[CONV_MAX_NVEC];
  for (int v = 0; v < t->nvec; v++)
    wv[v] = cg_load_part(e, DT_F32, cg_elem_ptr(c, t->w, add(e, wrow, cg_i64(e, (int64_t)v * t->lanes))), t->lanes,
                         v == t->nvec - 1 ? t->last_valid : t->lanes, t->w->name);
  for (int r = 0; r < R; r++) {
    LLVMValueRef xi = add(e, xpix, add(e, cg_i64(e, (int64_t)r * cv->sw * cv->C), ch));
    LLVMValueRef xs = cg_splat(e, cg_emit_load(e, DT_F32, cg_elem_ptr(c, t->x, xi), 1, t->x->name), t->lanes);
    for (int v = 0; v < t->nvec; v++)
      LLVMBuildStore(B, cg_fmuladd(e, xs, wv[v], LLVMBuildLoad2(B, t->vt, acc[r][v], "")), acc[r][v]);
  }
  if (cv->C > 1) cg_loop_end(c, &lc);
  if (check_w) {
    LLVMBuildBr(B, done);
    LLVMPositionBuilderAtEnd(B, done);
  }
}

/* One tile: output pixels ow0 .. ow0+R of row t->oh, their sums into the
 * C tile's rows ow0 .. */
static void emit_tile(conv_ctx *t, LLVMValueRef ow0, int R, bool check_w) {
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
  if (t->check_h) {
    LLVMValueRef in = LLVMBuildAnd(B, LLVMBuildICmp(B, LLVMIntSGE, ih, cg_i64(e, 0), ""),
                                   LLVMBuildICmp(B, LLVMIntSLT, ih, cg_i64(e, cv->H), ""), "conv.in_h");
    LLVMBasicBlockRef go = LLVMAppendBasicBlockInContext(e->ctx, c->fn, "conv.row");
    row_done = LLVMAppendBasicBlockInContext(e->ctx, c->fn, "conv.row.done");
    LLVMBuildCondBr(B, in, go, row_done);
    LLVMPositionBuilderAtEnd(B, go);
  }
  LLVMValueRef xrow = add(e, t->img, mul(e, ih, cv->W * cv->C));
  if (cv->KW <= 7) { /* the columns unrolled */
    for (int64_t kw = 0; kw < cv->KW; kw++) emit_taps(t, xrow, lh.iv, cg_i64(e, kw), ow0, R, check_w, acc);
  } else {
    cg_loop lw = cg_loop_begin(c, cg_i64(e, 0), cg_i64(e, cv->KW), 1, "conv.kw");
    emit_taps(t, xrow, lh.iv, lw.iv, ow0, R, check_w, acc);
    cg_loop_end(c, &lw);
  }
  if (t->check_h) {
    LLVMBuildBr(B, row_done);
    LLVMPositionBuilderAtEnd(B, row_done);
  }
  cg_loop_end(c, &lh);
  for (int r = 0; r < R; r++)
    for (int v = 0; v < t->nvec; v++) {
      LLVMValueRef off = add(e, mul(e, add(e, ow0, cg_i64(e, r)), t->g->ldc), cg_i64(e, (int64_t)v * t->lanes));
      cg_emit_store(e, DT_F32, LLVMBuildLoad2(B, t->vt, acc[r][v], ""), LLVMBuildGEP2(B, e->f32, t->ctile, &off, 1, ""),
                    t->lanes);
    }
}

/* Pixels [lo, hi) of the row, one at a time, each column checked. */
static void emit_border(conv_ctx *t, int64_t lo, int64_t hi, const char *name) {
  if (hi <= lo) return;
  cg_kctx *c = t->c;
  cg_emitter *e = c->e;
  cg_loop l = cg_loop_begin(c, cg_i64(e, lo), cg_i64(e, hi), 1, name);
  emit_tile(t, l.iv, 1, true);
  cg_loop_end(c, &l);
}

void cg_conv_direct_emit(cg_kctx *c, const cg_gemm *g, LLVMValueRef epilogue) {
  cg_emitter *e = c->e;
  const cg_kernel *k = c->k;
  const gemm_conv *cv = &g->conv;
  conv_ctx t = {.c = c, .g = g, .cv = cv, .x = k->ops[0]->srcs[0], .w = k->ops[0]->srcs[1], .lanes = g->vw,
                .nvec = g->nv, .KH = g->K / (cv->KW * cv->C)};
  CASTOR_ASSERT(cv->direct && t.x->type.dtype == DT_F32 && t.w->type.dtype == DT_F32 && t.KH * cv->KW * cv->C == g->K);
  t.vt = LLVMVectorType(e->f32, (unsigned)t.lanes);
  t.last_valid = (int)(cv->O - (int64_t)(t.nvec - 1) * t.lanes);
  /* rows of a window outside x: above the first, or below the last */
  t.check_h = cv->pt > 0 || (cv->OH - 1) * cv->sh - cv->pt + (t.KH - 1) * cv->dh >= cv->H;
  /* the interior columns: every window column inside x */
  int64_t lo = (cv->pl + cv->sw - 1) / cv->sw;
  int64_t last_in = cv->W - 1 + cv->pl - (cv->KW - 1) * cv->dw; /* ow * sw <= last_in */
  int64_t hi = last_in < 0 ? 0 : last_in / cv->sw + 1;
  if (hi > cv->OW) hi = cv->OW;
  if (lo > hi) lo = hi;
  int64_t R = cv->direct, n_in = hi - lo, full = n_in / R * R, rest = n_in - full;
  t.ctile = LLVMBuildGEP2(B, LLVMInt8TypeInContext(e->ctx), c->scratch, (LLVMValueRef[]){cg_i64(e, g->c_off)}, 1, "ctile");
  cg_loop ln = cg_loop_begin(c, c->row0, c->row1, 1, "conv.n");
  t.img = mul(e, ln.iv, cv->H * cv->W * cv->C);
  cg_loop lo_h = cg_loop_begin(c, cg_i64(e, 0), cg_i64(e, cv->OH), 1, "conv.oh");
  t.oh = lo_h.iv;
  emit_border(&t, 0, lo, "conv.left");
  if (full > 0) {
    cg_loop lt = cg_loop_begin(c, cg_i64(e, lo), cg_i64(e, lo + full), R, "conv.ow");
    emit_tile(&t, lt.iv, (int)R, false);
    cg_loop_end(c, &lt);
  }
  if (rest > 0) emit_tile(&t, cg_i64(e, lo + full), (int)rest, false);
  emit_border(&t, hi, cv->OW, "conv.right");
  /* the row's sums through the epilogue: GEMM rows (n, oh, 0 ..) */
  LLVMValueRef row = mul(e, add(e, mul(e, ln.iv, cv->OH), lo_h.iv), cv->OW);
  LLVMValueRef args[] = {c->bufs, t.ctile, row, cg_i64(e, cv->OW), cg_i64(e, 0), cg_i64(e, cv->O)};
  LLVMBuildCall2(B, LLVMGlobalGetValueType(epilogue), epilogue, args, 6, "");
  cg_loop_end(c, &lo_h);
  cg_loop_end(c, &ln);
}
