/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cg_dwconv.c: convolutional networks: the CPU's line kernel of a
 * depthwise convolution (group_conv2d with one input and one output
 * channel a group, the first op of an elementwise kernel: MobileNet's and
 * EfficientNet's 3x3 and 5x5 depthwise layers with their bias and ReLU6).
 *
 * The kit's form (cg_group_conv_vector, cg_index_map.c) computes one
 * vector of channels of one pixel at a time: it recovers the pixel's
 * coordinates from the flat index, tests every tap against the image's
 * edges and loads every tap's weights again. Here each output row (n, i)
 * runs its interior pixels (every tap of the row inside x along W) as
 * tiles of TILE pixels by a vector of channels: one test per row of taps
 * (p), each tap's weights loaded once for the tile, the TILE accumulators
 * in registers; the columns left after the tiles of TILE as one narrower
 * tile. The row's edge pixels (a tap in the padding) are one-pixel tiles
 * whose taps test x's column and keep the sum by a select in the padding
 * (edge_tap): at 14x14 and 7x7 with 5x5 taps most columns are edges (the
 * kit's form there made mobilenet_v3_small's 7x7 layer 2.5x slower, one
 * thread, batch 16). A tile's values then run
 * the chain in a loop (finish_all), emitted once a tile.
 *
 * Every result element is the kit's chain: taps p, then q, in order, a
 * tap outside x skipped (not 0 * w), one fmuladd each from 0; then the
 * kernel's element-wise chain. So tiles, edges and the kit's scalar form
 * give the same bits, on any split of the rows over threads.
 *
 * bf16 x and w on 16-lane vectors: a tile takes 32 channels as their even
 * and odd halves (emit_tile_pairs): a 32-bit load of two bf16 channels
 * widens into both with one integer op each, where a vector in channel
 * order takes a zero-extension and a shift; in a 5x5 tile the widening
 * was half the vector ops beside the FMAs. Same FMAs, so the same bits.
 */
#include "codegen/cpu/cg_cpu.h"

#define B (e->b)

enum { TILE = 8 }; /* pixels a tile: 8 accumulators, one weight and one x vector in 16 registers */

typedef struct dw_shape {
  int64_t H, W, C, OH, OW, KH, KW, sh, sw, dh, dw, ph, pw;
  int64_t jlo, jhi; /* interior output columns: every tap q of j inside x */
} dw_shape;

static const ir_node *result(const cg_kernel *k) { return k->ops[k->n_ops - 1]; }

static void shape_of(const ir_node *op, dw_shape *s) {
  const ir_type *xt = &op->srcs[0]->type, *wt = &op->srcs[1]->type;
  const int64_t *st = op->attr.strides.v, *dl = op->attr.dilations.v, *pd = op->attr.pads.v;
  *s = (dw_shape){.H = xt->dims[1], .W = xt->dims[2], .C = xt->dims[3], .OH = op->type.dims[1],
                  .OW = op->type.dims[2], .KH = wt->dims[0], .KW = wt->dims[1], .sh = st[0], .sw = st[1],
                  .dh = dl[0], .dw = dl[1], .ph = pd[0], .pw = pd[2]};
  /* j * sw - pw >= 0 and j * sw - pw + (KW - 1) * dw <= W - 1 */
  s->jlo = (s->pw + s->sw - 1) / s->sw;
  int64_t last = s->W - 1 + s->pw - (s->KW - 1) * s->dw;
  s->jhi = last < 0 ? 0 : last / s->sw + 1;
  if (s->jhi > s->OW) s->jhi = s->OW;
  if (s->jlo > s->jhi) s->jlo = s->jhi;
}

bool cg_dwconv_tiles(const cg_kernel *k) {
  if (k->kind != CG_KERNEL_ELTWISE) return false;
  const ir_node *op = k->ops[0], *res = result(k);
  if (ir_op_type_rule(op->op) != IR_TYPE_GROUP_CONV2D || !cg_group_conv_vectorizes(op)) return false;
  if (res->type.rank != 4 || op->type.rank != 4) return false;
  for (int d = 1; d < 4; d++)
    if (res->type.dims[d] != op->type.dims[d]) return false;
  dw_shape s;
  shape_of(op, &s);
  return s.jhi > s.jlo; /* an interior to tile */
}

/* An edge tile's taps: for each column q a test of x's column, and a
 * select that keeps the sum where it falls in the padding (the load reads
 * column 0 of the row there, in bounds). */
typedef struct dw_edge {
  LLVMValueRef inside, xsafe; /* i1; x's index at column 0 of the tap row */
} dw_edge;

/* Tap q of an edge tile (one pixel, its x column col0) against x's
 * columns; an interior tile's taps are all inside ({NULL, NULL}). */
static dw_edge edge_tap(cg_kctx *c, const dw_shape *s, bool edge, LLVMValueRef n, LLVMValueRef ih, LLVMValueRef col0,
                        LLVMValueRef ch, int64_t q) {
  cg_emitter *e = c->e;
  if (!edge) return (dw_edge){NULL, NULL};
  LLVMValueRef col = LLVMBuildAdd(B, col0, cg_i64(e, q * s->dw), "");
  return (dw_edge){LLVMBuildICmp(B, LLVMIntULT, col, cg_i64(e, s->W), "tap.inside"),
                   cg_nhwc_index(e, &c->k->ops[0]->srcs[0]->type, n, ih, cg_i64(e, 0), ch)};
}

static LLVMValueRef edge_x(cg_emitter *e, dw_edge t, LLVMValueRef xi) {
  return t.inside ? LLVMBuildSelect(B, t.inside, xi, t.xsafe, "") : xi;
}

static LLVMValueRef edge_sum(cg_emitter *e, dw_edge t, LLVMValueRef sum, LLVMValueRef old) {
  return t.inside ? LLVMBuildSelect(B, t.inside, sum, old, "") : sum;
}

/* A pixel's conv value over channels [ch, ch + lanes): rounded to the
 * conv's dtype, then the kernel's chain, stored. */
typedef struct finish_at {
  LLVMValueRef idx, ch, acc;
  int lanes;
} finish_at;

static LLVMValueRef finish_value(cg_kctx *c, void *arg, LLVMValueRef *out_ptr) {
  finish_at *a = arg;
  const ir_node *op = c->k->ops[0];
  LLVMValueRef val = cg_emit_round_to(c->e, a->acc, op->type.dtype, op->name);
  *out_ptr = cg_elem_ptr(c, result(c->k), a->idx);
  return cg_apply_chain(c, 1, c->k->n_ops, val, a->idx, a->ch, a->lanes, a->lanes);
}

static void finish(cg_kctx *c, const dw_shape *s, LLVMValueRef pixel, LLVMValueRef ch, LLVMValueRef acc, int lanes) {
  cg_emitter *e = c->e;
  finish_at a = {LLVMBuildAdd(B, LLVMBuildMul(B, pixel, cg_i64(e, s->C), ""), ch, ""), ch, acc, lanes};
  cg_emit_value_stored(c, result(c->k)->type.dtype, lanes, lanes, finish_value, &a);
}

/* element i of an array of n vectors vt */
static LLVMValueRef vec_at(cg_emitter *e, LLVMValueRef arr, LLVMTypeRef vt, int n, LLVMValueRef i) {
  LLVMValueRef at[] = {cg_i64(e, 0), i};
  return LLVMBuildGEP2(B, LLVMArrayType(vt, (unsigned)n), arr, at, 2, "");
}

/* finish of a tile's n conv values, per_pixel vectors of `lanes` channels
 * a pixel from pixel pix and channel ch on, in a loop: the chain emitted
 * once, not once a vector (a SiLU's chain 16 times made the 32-channel
 * pairs' kernels twice as long to compile). */
static void finish_all(cg_kctx *c, const dw_shape *s, LLVMValueRef pix, LLVMValueRef ch, LLVMValueRef vals, int n,
                       int per_pixel, int lanes) {
  cg_emitter *e = c->e;
  LLVMTypeRef vt = lanes > 1 ? LLVMVectorType(e->f32, (unsigned)lanes) : e->f32;
  cg_loop l = cg_loop_begin(c, cg_i64(e, 0), cg_i64(e, n), 1, "dwtile.v");
  LLVMValueRef val = LLVMBuildLoad2(B, vt, vec_at(e, vals, vt, n, l.iv), c->k->ops[0]->name);
  LLVMValueRef pixel = LLVMBuildAdd(B, pix, LLVMBuildUDiv(B, l.iv, cg_i64(e, per_pixel), ""), "");
  LLVMValueRef part = LLVMBuildURem(B, l.iv, cg_i64(e, per_pixel), "");
  finish(c, s, pixel, LLVMBuildAdd(B, ch, LLVMBuildMul(B, part, cg_i64(e, lanes), ""), ""), val, lanes);
  cg_loop_end(c, &l);
}

/* Result pixels [pix, pix + T) (output row (n, i), columns j..j+T-1, all
 * interior), channels [ch, ch + lanes): the taps, then the chain, stored. */
static void emit_tile(cg_kctx *c, const dw_shape *s, LLVMValueRef n, LLVMValueRef i, LLVMValueRef j,
                      LLVMValueRef pix, LLVMValueRef ch, int T, int lanes, bool edge) {
  cg_emitter *e = c->e;
  const ir_node *op = c->k->ops[0], *xn = op->srcs[0], *wn = op->srcs[1];
  LLVMTypeRef vt = lanes > 1 ? LLVMVectorType(e->f32, (unsigned)lanes) : e->f32;
  LLVMValueRef acc[TILE];
  for (int t = 0; t < T; t++) {
    acc[t] = cg_entry_alloca(c, vt, "dwtile.acc");
    LLVMBuildStore(B, LLVMConstNull(vt), acc[t]);
  }
  /* x's column of pixel t, tap q: j * sw - pw + t * sw + q * dw */
  LLVMValueRef col0 = LLVMBuildSub(B, LLVMBuildMul(B, j, cg_i64(e, s->sw), ""), cg_i64(e, s->pw), "dwtile.col");
  for (int64_t p = 0; p < s->KH; p++) {
    LLVMValueRef ih = LLVMBuildAdd(B, LLVMBuildMul(B, i, cg_i64(e, s->sh), ""), cg_i64(e, p * s->dh - s->ph), "");
    LLVMBasicBlockRef tap = LLVMAppendBasicBlockInContext(e->ctx, c->fn, "dwtile.tap");
    LLVMBasicBlockRef next = LLVMAppendBasicBlockInContext(e->ctx, c->fn, "dwtile.next");
    LLVMBuildCondBr(B, LLVMBuildICmp(B, LLVMIntULT, ih, cg_i64(e, s->H), "inside"), tap, next);
    LLVMPositionBuilderAtEnd(B, tap);
    LLVMValueRef xrow = cg_nhwc_index(e, &xn->type, n, ih, col0, ch);
    LLVMValueRef v[TILE];
    for (int t = 0; t < T; t++) v[t] = LLVMBuildLoad2(B, vt, acc[t], "");
    for (int64_t q = 0; q < s->KW; q++) {
      dw_edge et = edge_tap(c, s, edge, n, ih, col0, ch, q);
      LLVMValueRef wi = LLVMBuildAdd(B, ch, cg_i64(e, (p * s->KW + q) * s->C), "");
      LLVMValueRef wv = cg_emit_load(e, wn->type.dtype, cg_elem_ptr(c, wn, wi), lanes, wn->name);
      for (int t = 0; t < T; t++) {
        LLVMValueRef xi = LLVMBuildAdd(B, xrow, cg_i64(e, ((int64_t)t * s->sw + q * s->dw) * s->C), "");
        LLVMValueRef xv = cg_emit_load(e, xn->type.dtype, cg_elem_ptr(c, xn, edge_x(e, et, xi)), lanes, xn->name);
        v[t] = edge_sum(e, et, cg_fmuladd(e, xv, wv, v[t]), v[t]);
      }
    }
    for (int t = 0; t < T; t++) LLVMBuildStore(B, v[t], acc[t]);
    LLVMBuildBr(B, next);
    LLVMPositionBuilderAtEnd(B, next);
  }
  LLVMValueRef vals = cg_entry_alloca(c, LLVMArrayType(vt, (unsigned)T), "dwtile.vals");
  for (int t = 0; t < T; t++) LLVMBuildStore(B, LLVMBuildLoad2(B, vt, acc[t], ""), vec_at(e, vals, vt, T, cg_i64(e, t)));
  finish_all(c, s, pix, ch, vals, T, 1, lanes);
}

/* bf16 lanes of x or w at p as f32 in two vectors of `lanes`: the even
 * channels (the low half of each 32-bit pair, shifted up) and the odd ones
 * (the high half, the low half cleared): one integer op a vector, where
 * widening a vector in channel order takes two (zero-extend, shift). */
static void load_pairs(cg_emitter *e, LLVMValueRef p, int lanes, LLVMValueRef out[2]) {
  LLVMTypeRef it = LLVMVectorType(e->i32, (unsigned)lanes), ft = LLVMVectorType(e->f32, (unsigned)lanes);
  LLVMValueRef d = LLVMBuildLoad2(B, it, p, "");
  LLVMSetAlignment(d, 2);
  out[0] = LLVMBuildBitCast(B, LLVMBuildShl(B, d, cg_const(e, it, 16), ""), ft, "even");
  out[1] = LLVMBuildBitCast(B, LLVMBuildAnd(B, d, cg_const(e, it, (double)0xffff0000u), ""), ft, "odd");
}

/* emit_tile over 2 * lanes channels of bf16 x and w, computed as their even
 * and odd channels (load_pairs): the same fmuladd chain for every channel,
 * so the same bits as emit_tile; the two accumulators of a pixel are
 * interleaved back into channel order (a shuffle each) before the chain. */
static void emit_tile_pairs(cg_kctx *c, const dw_shape *s, LLVMValueRef n, LLVMValueRef i, LLVMValueRef j,
                            LLVMValueRef pix, LLVMValueRef ch, int T, int lanes, bool edge) {
  cg_emitter *e = c->e;
  const ir_node *op = c->k->ops[0], *xn = op->srcs[0], *wn = op->srcs[1];
  LLVMTypeRef vt = LLVMVectorType(e->f32, (unsigned)lanes);
  LLVMValueRef acc[TILE][2];
  for (int t = 0; t < T; t++)
    for (int h = 0; h < 2; h++) {
      acc[t][h] = cg_entry_alloca(c, vt, "dwpair.acc");
      LLVMBuildStore(B, LLVMConstNull(vt), acc[t][h]);
    }
  LLVMValueRef col0 = LLVMBuildSub(B, LLVMBuildMul(B, j, cg_i64(e, s->sw), ""), cg_i64(e, s->pw), "dwpair.col");
  for (int64_t p = 0; p < s->KH; p++) {
    LLVMValueRef ih = LLVMBuildAdd(B, LLVMBuildMul(B, i, cg_i64(e, s->sh), ""), cg_i64(e, p * s->dh - s->ph), "");
    LLVMBasicBlockRef tap = LLVMAppendBasicBlockInContext(e->ctx, c->fn, "dwpair.tap");
    LLVMBasicBlockRef next = LLVMAppendBasicBlockInContext(e->ctx, c->fn, "dwpair.next");
    LLVMBuildCondBr(B, LLVMBuildICmp(B, LLVMIntULT, ih, cg_i64(e, s->H), "inside"), tap, next);
    LLVMPositionBuilderAtEnd(B, tap);
    LLVMValueRef xrow = cg_nhwc_index(e, &xn->type, n, ih, col0, ch);
    LLVMValueRef v[TILE][2];
    for (int t = 0; t < T; t++)
      for (int h = 0; h < 2; h++) v[t][h] = LLVMBuildLoad2(B, vt, acc[t][h], "");
    for (int64_t q = 0; q < s->KW; q++) {
      dw_edge et = edge_tap(c, s, edge, n, ih, col0, ch, q);
      LLVMValueRef wv[2], xv[2];
      load_pairs(e, cg_elem_ptr(c, wn, LLVMBuildAdd(B, ch, cg_i64(e, (p * s->KW + q) * s->C), "")), lanes, wv);
      for (int t = 0; t < T; t++) {
        LLVMValueRef xi = LLVMBuildAdd(B, xrow, cg_i64(e, ((int64_t)t * s->sw + q * s->dw) * s->C), "");
        load_pairs(e, cg_elem_ptr(c, xn, edge_x(e, et, xi)), lanes, xv);
        for (int h = 0; h < 2; h++) v[t][h] = edge_sum(e, et, cg_fmuladd(e, xv[h], wv[h], v[t][h]), v[t][h]);
      }
    }
    for (int t = 0; t < T; t++)
      for (int h = 0; h < 2; h++) LLVMBuildStore(B, v[t][h], acc[t][h]);
    LLVMBuildBr(B, next);
    LLVMPositionBuilderAtEnd(B, next);
  }
  /* channel ch + m is lane m / 2 of the even (m even) or odd accumulator */
  LLVMValueRef mask[2][64];
  CASTOR_ASSERT(2 * lanes <= 64);
  for (int m = 0; m < 2 * lanes; m++)
    mask[m / lanes][m % lanes] = LLVMConstInt(e->i32, (unsigned long long)((m % 2) * lanes + m / 2), 0);
  LLVMValueRef vals = cg_entry_alloca(c, LLVMArrayType(vt, (unsigned)(2 * T)), "dwpair.vals");
  for (int t = 0; t < T; t++) {
    LLVMValueRef ev = LLVMBuildLoad2(B, vt, acc[t][0], ""), od = LLVMBuildLoad2(B, vt, acc[t][1], "");
    for (int h = 0; h < 2; h++) {
      LLVMValueRef val = LLVMBuildShuffleVector(B, ev, od, LLVMConstVector(mask[h], (unsigned)lanes), op->name);
      LLVMBuildStore(B, val, vec_at(e, vals, vt, 2 * T, cg_i64(e, 2 * t + h)));
    }
  }
  finish_all(c, s, pix, ch, vals, 2 * T, 2, lanes);
}

/* x and w in bf16 on 16-lane vectors: emit_tile_pairs takes 32 channels at
 * a time. Not on narrower vectors: its 2 * TILE accumulators would spill
 * the 16 registers of AVX2. */
static bool use_pairs(const cg_kctx *c) {
  const ir_node *op = c->k->ops[0];
  return c->e->vw >= 16 && op->srcs[0]->type.dtype == DT_BF16 && op->srcs[1]->type.dtype == DT_BF16;
}

/* Interior pixels [j0, j1) of a row as tiles of T, each over every
 * channel: vw at a time, then half and quarter vectors, then one. */
static int64_t emit_tiles(cg_kctx *c, const dw_shape *s, LLVMValueRef n, LLVMValueRef i, LLVMValueRef rowpix,
                          int64_t j0, int64_t j1, int T, bool edge) {
  cg_emitter *e = c->e;
  int64_t end = j0 + (j1 - j0) / T * T;
  if (end <= j0) return j0;
  cg_loop lj = cg_loop_begin(c, cg_i64(e, j0), cg_i64(e, end), T, "dwtile.j");
  LLVMValueRef pix = LLVMBuildAdd(B, rowpix, lj.iv, "dwtile.pixel");
  int64_t done = 0;
  if (use_pairs(c) && s->C >= 2 * e->vw) {
    done = s->C / (2 * e->vw) * (2 * e->vw);
    cg_loop lc = cg_loop_begin(c, cg_i64(e, 0), cg_i64(e, done), 2 * e->vw, "dwpair.c");
    /* an even T as two halves in a loop: 2T accumulators are as many
     * registers as emit_tile's, and a 5x5 tile of 8 pixels by 32 channels
     * (400 FMAs) took a quarter of efficientnet_b0's compile */
    int half = T % 2 == 0 ? T / 2 : T;
    cg_loop lh = cg_loop_begin(c, cg_i64(e, 0), cg_i64(e, T), half, "dwpair.half");
    emit_tile_pairs(c, s, n, i, LLVMBuildAdd(B, lj.iv, lh.iv, ""), LLVMBuildAdd(B, pix, lh.iv, ""), lc.iv, half,
                    e->vw, edge);
    cg_loop_end(c, &lh);
    cg_loop_end(c, &lc);
  }
  for (int lanes = e->vw; lanes >= 1; lanes = lanes > 4 ? lanes / 2 : lanes > 1 ? 1 : 0) {
    int64_t cend = lanes > 1 ? done + (s->C - done) / lanes * lanes : s->C;
    if (cend <= done) continue;
    cg_loop lc = cg_loop_begin(c, cg_i64(e, done), cg_i64(e, cend), lanes, "dwtile.c");
    emit_tile(c, s, n, i, lj.iv, pix, lc.iv, T, lanes, edge);
    cg_loop_end(c, &lc);
    done = cend;
  }
  cg_loop_end(c, &lj);
  return end;
}

void cg_dwconv_emit(cg_kctx *c) {
  cg_emitter *e = c->e;
  const ir_node *op = c->k->ops[0], *res = result(c->k);
  dw_shape s;
  shape_of(op, &s);
  int64_t inner = 1;
  CASTOR_ASSERT(ir_type_inner_numel(&res->type, &inner));
  if (c->rows_fixed > 0) inner /= c->rows_fixed; /* the launch rows: N x OH (cg_cpu.c), else images */
  CASTOR_ASSERT(inner % (s.OW * s.C) == 0);
  int64_t out_rows = inner / (s.OW * s.C); /* output rows (n, i) a launch row */
  cg_loop lr = cg_loop_begin(c, c->row0, c->row1, 1, "row");
  cg_loop li = cg_loop_begin(c, cg_i64(e, 0), cg_i64(e, out_rows), 1, "dwconv.row");
  LLVMValueRef g = LLVMBuildAdd(B, LLVMBuildMul(B, lr.iv, cg_i64(e, out_rows), ""), li.iv, "dwconv.nrow");
  LLVMValueRef n = LLVMBuildUDiv(B, g, cg_i64(e, s.OH), "n"), i = LLVMBuildURem(B, g, cg_i64(e, s.OH), "i");
  LLVMValueRef rowpix = LLVMBuildMul(B, g, cg_i64(e, s.OW), "dwconv.rowpixel");
  /* the edges: one-pixel tiles whose taps test x's column (edge_tap) */
  int64_t edge[2][2] = {{0, s.jlo}, {s.jhi, s.OW}};
  for (int k = 0; k < 2; k++)
    if (edge[k][1] > edge[k][0]) emit_tiles(c, &s, n, i, rowpix, edge[k][0], edge[k][1], 1, true);
  int64_t j = emit_tiles(c, &s, n, i, rowpix, s.jlo, s.jhi, TILE, false);
  if (s.jhi > j) emit_tiles(c, &s, n, i, rowpix, j, s.jhi, (int)(s.jhi - j), false); /* the rest: one tile */
  cg_loop_end(c, &li);
  cg_loop_end(c, &lr);
}
