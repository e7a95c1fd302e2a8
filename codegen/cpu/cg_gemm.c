/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cg_gemm.c: the CPU GEMM. A matmul kernel (matmul + its fused epilogue)
 * becomes a GotoBLAS-style loop nest over the tile [row0, row1) x [col0,
 * col1) that the runtime hands a thread:
 *
 *   for each block of NC columns (whole panels of B):
 *     for each block of MC rows:
 *       for each block of KC along K:
 *         pack A[rows, K block] into scratch (f32, padded row stride)
 *         for each micro-tile of MR rows x NR columns:
 *           acc = first K block ? 0 : C tile;  acc += A x B  (K block)
 *           last K block ? epilogue -> output : acc -> C tile
 *
 * (a conv2d forward on the FMA families, g->panel_outer: the micro-tiles
 * of a K block run panels outer, row tiles inner, each panel of B read
 * from memory once per row block: emit_panels_outer)
 *
 * B: a constant B [K, Nc] whose only uses are such GEMMs is pre-packed at
 * compile time (cg_cpu_layout_const_data), K block by K block, into panels
 * of NR columns, each KC x NR row-major, the last panel zero-padded to whole
 * vectors, so the B block of one K block is contiguous; it keeps its
 * dtype, so f16/bf16 weights are read at 2 bytes and widened in registers
 * (vcvtph2ps with F16C; a shift for bf16). Any other B is read in place
 * (the same micro-kernel with a row stride of Nc), which is slower.
 *
 * The backward pass's contractions (cg_train.c's ops) are the same GEMM
 * with B packed at run time into the call's scratch, as f32 in the same
 * block-by-block panel layout: matmul_nt (y = a b^T) packs its b, the
 * weights, transposed, all of the call's panels once per call; matmul_tn
 * (y = a^T b) sums over the batch, so K is the run's batch (blocks of
 * KC_TARGET rows, twice that on the K-pair family, the last one short), its A is a stored [K, M] (packed
 * k-major, a straight copy of its rows), and its B, too large to pack
 * whole, is packed a K block at a time with the K-block loop outside the
 * row blocks, so each block is packed once; the C tile then holds every
 * row of the call.
 *
 * Micro-kernel: MR rows x NV vectors of VW f32 lanes, one accumulator
 * register each, shaped for the register file of the target's family
 * (cg_cpu_caps.gemm_kernel): 14 x 2 x 16 with AVX-512 (32 registers),
 * 6 x 2 x 8 with AVX or AVX2, 6 x 2 x 4 with SSE (16 registers). Per k it
 * loads NV vectors of B and broadcasts one A value per row into FMAs. Row
 * tails use 4-row tiles, then 1-row tiles over four panels at once, so a
 * batch-1 GEMV still has eight independent FMA chains (a conv2d first
 * gives the rows an image leaves over, more than 4, one tile: 7 of a 7x7
 * map's 49). A contraction of
 * two bf16 operands may instead run on K pairs: vdpbf16ps
 * (gemm/cg_gemm_bf16.h) or, on the AMX family, 32 x 32 micro-tiles of tile
 * registers (gemm/cg_gemm_amx.h) that store their sums into the same C
 * tile, so the epilogue below is shared.
 *
 * Prefetch: with 16 registers (SSE, AVX2) a row block is only MC_PANELS x
 * 6 rows, so every row block streams its column block of B (K x NC, 8 MB
 * at K = 4096) from L3 or memory once more, and the k loop stalled on it.
 * So the k loop of a one-panel tile also prefetches (prefetcht1, into L2)
 * the same k row of the next panel, a whole panel ahead: on Zen 4 at
 * x86-64-v3, 4096^3 on 2 threads went from 0.79x to 0.97x OpenBLAS's speed
 * (bench/results/cpu-x86-64-v3-2026-11-23-prefetch.md). The AVX-512 tiles
 * (14 rows, 112-row blocks) read B 2.3 times less per FMA and measured no
 * gain; a 1-row GEMV over four panels is a pure memory stream, where it
 * measured none either.
 *
 * Epilogue: the sums of a micro-tile go to the C tile (L1-hot); after the
 * last K block, the kernel's epilogue function (out of line, so emitted
 * once per kernel, not per variant) applies bias, activation, cast and
 * other fused elementwise ops, and a row softmax when one panel spans the
 * row (the planner fuses it only then; cg_rowwise.c emits it on the tile
 * row, the same emitter as the standalone softmax kernel's), and stores
 * each output once.
 *
 * Determinism: every output element is one FMA chain over k in order,
 * interrupted only by exact f32 spills at fixed K-block boundaries, and
 * the epilogue is the same code for every variant. So results do not
 * depend on the variant, the tile or the number of threads.
 */
#include <stdio.h>
#include <string.h>

#include "codegen/cpu/cg_cpu.h"
#include "codegen/cpu/gemm/cg_gemm_amx.h"
#include "codegen/cpu/gemm/cg_gemm_bf16.h"
#include "codegen/cpu/cg_gemm_internal.h"

#define B (e->b)

/* ---- emission ---- */

typedef struct gemm_ctx {
  cg_kctx *c;
  const cg_gemm *g;
  const ir_node *mm, *a, *b, *out;
  LLVMTypeRef vt;                 /* <vw x float> */
  LLVMValueRef apack, ctile;      /* scratch pointers */
  LLVMValueRef ic, pc, kk, first, last; /* current row block, K block start and length, K-block flags */
  LLVMValueRef jc_panel;          /* first panel of the current column block */
  LLVMValueRef bblock, bpanel0;   /* B packed at run time: the current K block's panels, the first */
  LLVMValueRef epilogue;          /* the kernel's epilogue function */
  LLVMValueRef run_done;          /* emit_pack_run: where its vector loop stopped */
  LLVMValueRef row0, row1;        /* the call's GEMM rows (a conv: its images' rows) */
  LLVMValueRef abase, bbase;      /* a's and b's data (batch_matmul: the item's matrices) */
  LLVMValueRef arow0;             /* batch_matmul: the item's first GEMM row (A's rows count from it); else NULL */
  LLVMValueRef m;                 /* AMX: rows of the current row block (its last micro-tile may be partial) */
} gemm_ctx;

/* general tensors: row ic of the GEMM as a row of A (batch_matmul: of the item's matrix) */
static LLVMValueRef a_row(gemm_ctx *x, LLVMValueRef ic) {
  return x->arow0 ? LLVMBuildSub(x->c->e->b, ic, x->arow0, "") : ic;
}

static LLVMValueRef gep(cg_emitter *e, LLVMTypeRef ty, LLVMValueRef p, LLVMValueRef idx) {
  return LLVMBuildGEP2(B, ty, p, &idx, 1, "");
}

static LLVMValueRef add(cg_emitter *e, LLVMValueRef a, LLVMValueRef b) { return LLVMBuildAdd(B, a, b, ""); }
static LLVMValueRef mul(cg_emitter *e, LLVMValueRef a, int64_t b) { return LLVMBuildMul(B, a, cg_i64(e, b), ""); }
static LLVMValueRef min_(cg_emitter *e, LLVMValueRef a, LLVMValueRef b) {
  return LLVMBuildSelect(B, LLVMBuildICmp(B, LLVMIntSLT, a, b, ""), a, b, "");
}

/* convolutional networks: emit_pack_run on the AVX-512 families, where a
 * run's last part vector (a first layer's runs of 1 to 15 channels are
 * nothing else) is one masked load and store (llvm.masked.load/store:
 * nothing past the run is read or written). f32 elements copied to the
 * f32 pack, or bf16 to the K-pair pack (both 64-byte vectors). */
static LLVMValueRef masked_call(cg_emitter *e, const char *name, LLVMTypeRef vt, LLVMValueRef *args, unsigned n) {
  LLVMTypeRef tys[] = {vt, e->ptr};
  LLVMValueRef f = LLVMGetIntrinsicDeclaration(e->mod, LLVMLookupIntrinsicID(name, strlen(name)), tys, 2);
  return LLVMBuildCall2(B, LLVMGlobalGetValueType(f), f, args, n, "");
}

static void emit_pack_run_masked(gemm_ctx *x, LLVMValueRef src, LLVMValueRef dst, LLVMValueRef n, const char *name) {
  cg_kctx *c = x->c;
  cg_emitter *e = c->e;
  int lanes = x->g->bf16 ? CG_BF16_VEC : 16;
  LLVMTypeRef et = x->g->bf16 ? LLVMInt16TypeInContext(e->ctx) : e->f32, vt = LLVMVectorType(et, (unsigned)lanes);
  unsigned align = x->g->bf16 ? 2 : 4;
  cg_loop l = cg_loop_begin(c, cg_i64(e, 0), n, lanes, name);
  LLVMValueRef v = LLVMConstNull(vt);
  if (src) {
    v = LLVMBuildLoad2(B, vt, gep(e, et, src, l.iv), "");
    LLVMSetAlignment(v, align);
  }
  LLVMSetAlignment(LLVMBuildStore(B, v, gep(e, et, dst, l.iv)), align);
  cg_loop_end(c, &l);
  /* the rest, 0 .. lanes-1 elements: lane i < rest */
  LLVMValueRef rest = LLVMBuildTrunc(B, LLVMBuildSub(B, n, l.iv, ""), e->i32, "");
  LLVMTypeRef i32v = LLVMVectorType(e->i32, (unsigned)lanes);
  LLVMValueRef lane[CG_BF16_VEC];
  for (int i = 0; i < lanes; i++) lane[i] = LLVMConstInt(e->i32, (unsigned long long)i, 0);
  LLVMValueRef rs = LLVMBuildInsertElement(B, LLVMGetUndef(i32v), rest, cg_i64(e, 0), "");
  rs = LLVMBuildShuffleVector(B, rs, LLVMGetUndef(i32v), LLVMConstNull(i32v), "");
  LLVMValueRef mask = LLVMBuildICmp(B, LLVMIntSLT, LLVMConstVector(lane, (unsigned)lanes), rs, "run.mask");
  LLVMValueRef al = LLVMConstInt(e->i32, align, 0);
  v = LLVMConstNull(vt);
  if (src) {
    LLVMValueRef largs[] = {gep(e, et, src, l.iv), al, mask, LLVMConstNull(vt)};
    v = masked_call(e, "llvm.masked.load", vt, largs, 4);
  }
  LLVMValueRef sargs[] = {v, gep(e, et, dst, l.iv), al, mask};
  masked_call(e, "llvm.masked.store", vt, sargs, 4);
}

/* convolutional networks: copies n elements from src (x's dtype) to dst
 * (f32), or zeros, vectors then single elements. On the K-pair family
 * (g->bf16) the packed A row is x's bf16 copied as it is (a row of K
 * pairs is its values in order): raw 16-bit copies, no widening. */
static void emit_pack_run(gemm_ctx *x, LLVMValueRef src, LLVMValueRef dst, LLVMValueRef n, const char *name) {
  cg_kctx *c = x->c;
  cg_emitter *e = c->e;
  const cg_gemm *g = x->g;
  ir_dtype dt = x->a->type.dtype;
  LLVMTypeRef at = cg_llvm_dtype(e, dt);
  if (g->vw == 16 && (g->bf16 || dt == DT_F32)) { /* AVX-512: whole vectors, then one masked vector */
    emit_pack_run_masked(x, src, dst, n, name);
    return;
  }
  if (g->bf16) {
    LLVMTypeRef h = LLVMInt16TypeInContext(e->ctx);
    for (int lanes = CG_BF16_VEC; lanes >= 1; lanes = lanes > 1 ? 1 : 0) {
      LLVMTypeRef vt = lanes > 1 ? LLVMVectorType(h, (unsigned)lanes) : h;
      cg_loop l = cg_loop_begin(c, lanes > 1 ? cg_i64(e, 0) : x->run_done, n, lanes, name);
      LLVMValueRef v = LLVMConstNull(vt);
      if (src) {
        v = LLVMBuildLoad2(B, vt, gep(e, h, src, l.iv), "");
        LLVMSetAlignment(v, 2);
      }
      LLVMSetAlignment(LLVMBuildStore(B, v, gep(e, h, dst, l.iv)), 2);
      cg_loop_end(c, &l);
      x->run_done = l.iv;
    }
    return;
  }
  for (int lanes = g->vw; lanes >= 1; lanes = lanes > 1 ? 1 : 0) {
    cg_loop l = cg_loop_begin(c, lanes == g->vw ? cg_i64(e, 0) : x->run_done, n, lanes, name);
    LLVMValueRef v = src ? cg_emit_load(e, dt, gep(e, at, src, l.iv), lanes, x->a->name)
                         : cg_const(e, lanes > 1 ? x->vt : e->f32, 0.0);
    cg_emit_store(e, DT_F32, v, gep(e, e->f32, dst, l.iv), lanes);
    cg_loop_end(c, &l);
    x->run_done = l.iv;
  }
}

/* convolutional networks: dst[0 .. kn) = row gm of the implicit A over
 * columns [k0, k0 + kn) (gemm_conv): the taps (kh, kw) the range meets,
 * each a run of channels copied from one pixel of the gathered tensor, or
 * zeros where the tap falls outside it. The forward im2col row (n, oh, ow)
 * reads x (conv2d, and conv2d_filter_grad's k-major rows); the transposed
 * row (n, ih, iw) reads dy (conv2d_input_grad). */
/* convolutional networks: emit_conv_gather's taps [t0, t1) of row gm
 * (image img, window origin b0, b1), each a run of channels or zeros. */
static void emit_conv_taps(gemm_ctx *x, const ir_node *src, LLVMValueRef img, LLVMValueRef b0, LLVMValueRef b1,
                           LLVMValueRef k0, LLVMValueRef kn, LLVMValueRef dst, LLVMValueRef t0, LLVMValueRef t1) {
  cg_kctx *c = x->c;
  cg_emitter *e = c->e;
  const gemm_conv *cv = &x->g->conv;
  bool dx = cv->mode == GEMM_CONV_DX;
  LLVMTypeRef at = cg_llvm_dtype(e, src->type.dtype);
  int64_t src_h = dx ? cv->OH : cv->H, src_w = dx ? cv->OW : cv->W, ch = dx ? cv->O : cv->C; /* the source's */
  LLVMValueRef Ct = cg_i64(e, ch), zero = cg_i64(e, 0);
  cg_loop lt = cg_loop_begin(c, t0, t1, 1, "pack.tap");
  LLVMValueRef kh = LLVMBuildSDiv(B, lt.iv, cg_i64(e, cv->KW), ""), kw = LLVMBuildSRem(B, lt.iv, cg_i64(e, cv->KW), "");
  LLVMValueRef ph, pw, inside;
  if (!dx) {
    ph = add(e, b0, mul(e, kh, cv->dh)), pw = add(e, b1, mul(e, kw, cv->dw));
    inside = LLVMBuildAnd(B, LLVMBuildICmp(B, LLVMIntULT, ph, cg_i64(e, src_h), ""),
                          LLVMBuildICmp(B, LLVMIntULT, pw, cg_i64(e, src_w), ""), "inside");
  } else { /* numerators >= 0 and multiples of the strides; the quotients inside dy */
    LLVMValueRef nh = LLVMBuildSub(B, b0, mul(e, kh, cv->dh), ""), nw = LLVMBuildSub(B, b1, mul(e, kw, cv->dw), "");
    LLVMValueRef ok = LLVMBuildAnd(B, LLVMBuildICmp(B, LLVMIntSGE, nh, zero, ""), LLVMBuildICmp(B, LLVMIntSGE, nw, zero, ""), "");
    ok = LLVMBuildAnd(B, ok, LLVMBuildICmp(B, LLVMIntEQ, LLVMBuildSRem(B, nh, cg_i64(e, cv->sh), ""), zero, ""), "");
    ok = LLVMBuildAnd(B, ok, LLVMBuildICmp(B, LLVMIntEQ, LLVMBuildSRem(B, nw, cg_i64(e, cv->sw), ""), zero, ""), "");
    ph = LLVMBuildSDiv(B, nh, cg_i64(e, cv->sh), ""), pw = LLVMBuildSDiv(B, nw, cg_i64(e, cv->sw), "");
    ok = LLVMBuildAnd(B, ok, LLVMBuildICmp(B, LLVMIntSLT, ph, cg_i64(e, src_h), ""), "");
    inside = LLVMBuildAnd(B, ok, LLVMBuildICmp(B, LLVMIntSLT, pw, cg_i64(e, src_w), ""), "inside");
  }
  LLVMValueRef tc = LLVMBuildMul(B, lt.iv, Ct, "");
  LLVMValueRef lo = LLVMBuildSub(B, k0, tc, ""), hi = LLVMBuildSub(B, add(e, k0, kn), tc, "");
  LLVMValueRef c0 = LLVMBuildSelect(B, LLVMBuildICmp(B, LLVMIntSGT, lo, zero, ""), lo, zero, "c0");
  LLVMValueRef c1 = min_(e, hi, Ct);
  LLVMTypeRef dty = x->g->bf16 ? LLVMInt16TypeInContext(e->ctx) : e->f32; /* the packed A's elements */
  LLVMValueRef d = gep(e, dty, dst, LLVMBuildSub(B, add(e, tc, c0), k0, ""));
  LLVMValueRef len = LLVMBuildSub(B, c1, c0, "");
  LLVMBasicBlockRef copy = LLVMAppendBasicBlockInContext(e->ctx, c->fn, "pack.pixel");
  LLVMBasicBlockRef pad = LLVMAppendBasicBlockInContext(e->ctx, c->fn, "pack.padding");
  LLVMBasicBlockRef done = LLVMAppendBasicBlockInContext(e->ctx, c->fn, "pack.tap.done");
  LLVMBuildCondBr(B, inside, copy, pad);
  LLVMPositionBuilderAtEnd(B, copy);
  LLVMValueRef pix = add(e, mul(e, add(e, mul(e, img, src_h), ph), src_w), pw);
  emit_pack_run(x, gep(e, at, c->base[src->id], add(e, LLVMBuildMul(B, pix, Ct, ""), c0)), d, len, "pack.c");
  LLVMBuildBr(B, done);
  LLVMPositionBuilderAtEnd(B, pad);
  emit_pack_run(x, NULL, d, len, "pack.zero");
  LLVMBuildBr(B, done);
  LLVMPositionBuilderAtEnd(B, done);
  cg_loop_end(c, &lt);
}

static void emit_conv_gather(gemm_ctx *x, const ir_node *src, LLVMValueRef gm, LLVMValueRef k0, LLVMValueRef kn,
                             LLVMValueRef dst) {
  cg_kctx *c = x->c;
  cg_emitter *e = c->e;
  const gemm_conv *cv = &x->g->conv;
  bool dx = cv->mode == GEMM_CONV_DX;
  int64_t rows_h = dx ? cv->H : cv->OH, rows_w = dx ? cv->W : cv->OW; /* gm's image */
  int64_t ch = dx ? cv->O : cv->C; /* the source's channels */
  LLVMValueRef Ct = cg_i64(e, ch);
  LLVMValueRef img = LLVMBuildSDiv(B, gm, cg_i64(e, rows_h * rows_w), "img");
  LLVMValueRef rem = LLVMBuildSRem(B, gm, cg_i64(e, rows_h * rows_w), "");
  LLVMValueRef r0 = LLVMBuildSDiv(B, rem, cg_i64(e, rows_w), "r"), r1 = LLVMBuildSRem(B, rem, cg_i64(e, rows_w), "s");
  /* forward: ih = oh*sh - top + kh*dh; transposed: oh*sh = ih + top - kh*dh */
  LLVMValueRef b0 = dx ? add(e, r0, cg_i64(e, cv->pt)) : LLVMBuildSub(B, mul(e, r0, cv->sh), cg_i64(e, cv->pt), "");
  LLVMValueRef b1 = dx ? add(e, r1, cg_i64(e, cv->pl)) : LLVMBuildSub(B, mul(e, r1, cv->sw), cg_i64(e, cv->pl), "");
  LLVMValueRef t0 = LLVMBuildSDiv(B, k0, Ct, "");
  LLVMValueRef t1 = add(e, LLVMBuildSDiv(B, LLVMBuildSub(B, add(e, k0, kn), cg_i64(e, 1), ""), Ct, ""), cg_i64(e, 1));
  if (dx || cv->dw != 1 || cv->KW == 1) {
    emit_conv_taps(x, src, img, b0, b1, k0, kn, dst, t0, t1);
    return;
  }
  /* forward, dilation 1 along W: the KW taps of kernel row kh are one run
   * of KW*C values of x when the window's row is inside x (KW times fewer,
   * longer runs: a first layer's 3 channels become 9); a row at an edge
   * goes tap by tap */
  int64_t kwc = cv->KW * cv->C;
  LLVMTypeRef at = cg_llvm_dtype(e, src->type.dtype);
  LLVMTypeRef dty = x->g->bf16 ? LLVMInt16TypeInContext(e->ctx) : e->f32; /* the packed A's elements */
  LLVMValueRef kend = add(e, k0, kn);
  LLVMValueRef h0 = LLVMBuildSDiv(B, k0, cg_i64(e, kwc), "");
  LLVMValueRef h1 = add(e, LLVMBuildSDiv(B, LLVMBuildSub(B, kend, cg_i64(e, 1), ""), cg_i64(e, kwc), ""), cg_i64(e, 1));
  LLVMValueRef row_in_w = LLVMBuildAnd(B, LLVMBuildICmp(B, LLVMIntSGE, b1, cg_i64(e, 0), ""),
                                       LLVMBuildICmp(B, LLVMIntSLE, add(e, b1, cg_i64(e, cv->KW)), cg_i64(e, cv->W), ""), "");
  cg_loop lh = cg_loop_begin(c, h0, h1, 1, "pack.krow");
  LLVMValueRef ph = add(e, b0, mul(e, lh.iv, cv->dh));
  LLVMValueRef whole = LLVMBuildAnd(B, row_in_w, LLVMBuildICmp(B, LLVMIntULT, ph, cg_i64(e, cv->H), ""), "whole");
  LLVMBasicBlockRef run = LLVMAppendBasicBlockInContext(e->ctx, c->fn, "pack.krow.run");
  LLVMBasicBlockRef edge = LLVMAppendBasicBlockInContext(e->ctx, c->fn, "pack.krow.edge");
  LLVMBasicBlockRef done = LLVMAppendBasicBlockInContext(e->ctx, c->fn, "pack.krow.done");
  LLVMBuildCondBr(B, whole, run, edge);
  LLVMPositionBuilderAtEnd(B, run);
  LLVMValueRef rk0 = mul(e, lh.iv, kwc);
  LLVMValueRef lo = LLVMBuildSelect(B, LLVMBuildICmp(B, LLVMIntSGT, k0, rk0, ""), k0, rk0, "");
  LLVMValueRef hi = min_(e, kend, add(e, rk0, cg_i64(e, kwc)));
  LLVMValueRef pix = add(e, mul(e, add(e, mul(e, img, cv->H), ph), cv->W), b1);
  LLVMValueRef sp = gep(e, at, c->base[src->id], add(e, mul(e, pix, cv->C), LLVMBuildSub(B, lo, rk0, "")));
  emit_pack_run(x, sp, gep(e, dty, dst, LLVMBuildSub(B, lo, k0, "")), LLVMBuildSub(B, hi, lo, ""), "pack.krow.c");
  LLVMBuildBr(B, done);
  LLVMPositionBuilderAtEnd(B, edge);
  LLVMValueRef kt0 = mul(e, lh.iv, cv->KW), kt1 = add(e, kt0, cg_i64(e, cv->KW));
  emit_conv_taps(x, src, img, b0, b1, k0, kn, dst, LLVMBuildSelect(B, LLVMBuildICmp(B, LLVMIntSGT, t0, kt0, ""), t0, kt0, ""),
                 min_(e, t1, kt1));
  LLVMBuildBr(B, done);
  LLVMPositionBuilderAtEnd(B, done);
  cg_loop_end(c, &lh);
}

/* convolutional networks: the A block of a conv GEMM, row by row (a k-major
 * block for conv2d_filter_grad: row k of the block is summed row pc + k,
 * over the block's result rows ic .. ic+m). */
static void emit_pack_a_conv(gemm_ctx *x, LLVMValueRef m) {
  cg_kctx *c = x->c;
  cg_emitter *e = c->e;
  const cg_gemm *g = x->g;
  bool dw = g->conv.mode == GEMM_CONV_DW;
  cg_loop lr = cg_loop_begin(c, cg_i64(e, 0), dw ? x->kk : m, 1, "pack.row");
  LLVMValueRef dst = gep(e, e->f32, x->apack, mul(e, lr.iv, g->lda));
  if (dw) emit_conv_gather(x, x->a, add(e, x->pc, lr.iv), x->ic, m, dst);
  else emit_conv_gather(x, x->a, add(e, x->ic, lr.iv), x->pc, x->kk, dst);
  if (g->bf16) /* the K-pair family: a 0 after the kk values (an odd kk's last pair) */
    LLVMBuildStore(B, LLVMConstInt(LLVMInt16TypeInContext(e->ctx), 0, 0), gep(e, LLVMInt16TypeInContext(e->ctx), dst, x->kk));
  if (g->bf16 == GEMM_AMX) cg_gemm_amx_pad_row(c, dst, x->kk); /* and zero pairs up to the tile step */
  cg_loop_end(c, &lr);
}

/* Copies A[ic .. ic+m) x [pc .. pc+kk) to the packed block as f32. */
static void emit_pack_a(gemm_ctx *x, LLVMValueRef m) {
  cg_kctx *c = x->c;
  cg_emitter *e = c->e;
  const cg_gemm *g = x->g;
  ir_dtype dt = x->a->type.dtype;
  LLVMTypeRef at = cg_llvm_dtype(e, dt);
  if (g->conv.mode) {
    emit_pack_a_conv(x, m);
    return;
  }
  if (g->bf16) { /* K pairs as i32, lda pairs a row (or a pair row) */
    int64_t ld = g->a_trans ? x->a->type.dims[x->a->type.rank - 1] : g->K;
    LLVMValueRef src = g->a_trans ? gep(e, at, c->base[x->a->id], x->ic)
                                  : gep(e, at, c->base[x->a->id], mul(e, x->ic, g->K));
    if (g->bf16 == GEMM_AMX) cg_gemm_amx_pack_a(c, src, ld, g->a_trans, m, x->pc, x->kk, x->apack, g->lda);
    else cg_gemm_bf16_pack_a(c, src, ld, g->a_trans, m, x->pc, x->kk, x->apack, g->lda);
    return;
  }
  if (g->a_trans) { /* A[i, k] is a[k, i]: row k of the block is a's row pc + k, columns ic .. ic+m */
    int64_t M = x->a->type.dims[x->a->type.rank - 1];
    cg_loop lk = cg_loop_begin(c, cg_i64(e, 0), x->kk, 1, "pack.k");
    LLVMValueRef src = gep(e, at, x->abase, add(e, mul(e, add(e, x->pc, lk.iv), M), a_row(x, x->ic)));
    LLVMValueRef dst = gep(e, e->f32, x->apack, mul(e, lk.iv, g->lda));
    cg_loop li = cg_loop_begin(c, cg_i64(e, 0), m, g->vw, "pack.i");
    LLVMValueRef v = cg_emit_load(e, dt, gep(e, at, src, li.iv), g->vw, x->a->name);
    cg_emit_store(e, DT_F32, v, gep(e, e->f32, dst, li.iv), g->vw);
    cg_loop_end(c, &li);
    cg_loop lt = cg_loop_begin(c, li.iv, m, 1, "pack.i.tail");
    v = cg_emit_load(e, dt, gep(e, at, src, lt.iv), 1, x->a->name);
    cg_emit_store(e, DT_F32, v, gep(e, e->f32, dst, lt.iv), 1);
    cg_loop_end(c, &lt);
    cg_loop_end(c, &lk);
    return;
  }
  cg_loop lr = cg_loop_begin(c, cg_i64(e, 0), m, 1, "pack.row");
  LLVMValueRef src = gep(e, at, x->abase, add(e, mul(e, add(e, a_row(x, x->ic), lr.iv), g->K), x->pc));
  LLVMValueRef dst = gep(e, e->f32, x->apack, mul(e, lr.iv, g->lda));
  cg_loop lk = cg_loop_begin(c, cg_i64(e, 0), x->kk, g->vw, "pack.k");
  LLVMValueRef v = cg_emit_load(e, dt, gep(e, at, src, lk.iv), g->vw, x->a->name);
  cg_emit_store(e, DT_F32, v, gep(e, e->f32, dst, lk.iv), g->vw);
  cg_loop_end(c, &lk);
  cg_loop lt = cg_loop_begin(c, lk.iv, x->kk, 1, "pack.k.tail");
  v = cg_emit_load(e, dt, gep(e, at, src, lt.iv), 1, x->a->name);
  cg_emit_store(e, DT_F32, v, gep(e, e->f32, dst, lt.iv), 1);
  cg_loop_end(c, &lt);
  cg_loop_end(c, &lr);
}

/* B packed at run time (f32, every panel nr columns wide, the tail
 * panel's missing columns 0): panel q of a packed region holds rows
 * [k0, k0 + kk) of B's columns [q nr, q nr + nr) row-major, kk x nr.
 * Packs panels [p0, p1) of those rows to dst, panel after panel. */
static void emit_pack_b_panels(gemm_ctx *x, LLVMValueRef dst, LLVMValueRef p0, LLVMValueRef p1, LLVMValueRef k0,
                               LLVMValueRef kk) {
  cg_kctx *c = x->c;
  cg_emitter *e = c->e;
  const cg_gemm *g = x->g;
  ir_dtype dt = x->b->type.dtype;
  LLVMTypeRef bty = cg_llvm_dtype(e, dt);
  LLVMValueRef src = x->bbase, zero = cg_const(e, x->vt, 0.0);
  int64_t K = g->K; /* GEMM_B_PACK_CALL_T: b is [Nc, K] */
  cg_loop lq = cg_loop_begin(c, p0, p1, 1, "packb.panel");
  LLVMValueRef pdst = gep(e, e->f32, dst, LLVMBuildMul(B, LLVMBuildSub(B, lq.iv, p0, ""), mul(e, kk, g->nr), ""));
  LLVMValueRef col0 = mul(e, lq.iv, g->nr);
  if (g->b_src == GEMM_B_PACK_BLOCK) { /* b is [K, Nc]: rows of the panel are contiguous runs */
    cg_loop lk = cg_loop_begin(c, cg_i64(e, 0), kk, 1, "packb.k");
    LLVMValueRef srow = gep(e, bty, src, add(e, mul(e, add(e, k0, lk.iv), g->Nc), col0));
    LLVMValueRef drow = gep(e, e->f32, pdst, mul(e, lk.iv, g->nr));
    for (int v = 0; v < g->nv; v++) {
      /* the columns left in B's row from this vector on: whole, partial or none */
      LLVMValueRef left = LLVMBuildSub(B, cg_i64(e, g->Nc), add(e, col0, cg_i64(e, v * g->vw)), "");
      LLVMValueRef d = gep(e, e->f32, drow, cg_i64(e, v * g->vw));
      LLVMBasicBlockRef whole = LLVMAppendBasicBlockInContext(e->ctx, c->fn, "packb.whole");
      LLVMBasicBlockRef part = LLVMAppendBasicBlockInContext(e->ctx, c->fn, "packb.part");
      LLVMBasicBlockRef done = LLVMAppendBasicBlockInContext(e->ctx, c->fn, "packb.done");
      LLVMBuildCondBr(B, LLVMBuildICmp(B, LLVMIntSGE, left, cg_i64(e, g->vw), ""), whole, part);
      LLVMPositionBuilderAtEnd(B, whole);
      cg_emit_store(e, DT_F32, cg_emit_load(e, dt, gep(e, bty, srow, cg_i64(e, v * g->vw)), g->vw, x->b->name), d,
                    g->vw);
      LLVMBuildBr(B, done);
      LLVMPositionBuilderAtEnd(B, part); /* only the last panel gets here: tail_valid lanes or none */
      LLVMValueRef tailv = g->tail_valid ? cg_load_part(e, dt, gep(e, bty, srow, cg_i64(e, v * g->vw)), g->vw,
                                                        g->tail_valid, x->b->name)
                                         : zero;
      LLVMValueRef has = LLVMBuildICmp(B, LLVMIntSGT, left, cg_i64(e, 0), "");
      cg_emit_store(e, DT_F32, LLVMBuildSelect(B, has, tailv, zero, ""), d, g->vw);
      LLVMBuildBr(B, done);
      LLVMPositionBuilderAtEnd(B, done);
    }
    cg_loop_end(c, &lk);
  } else { /* b is [Nc, K]: column n of the panel is row n of b, stored with stride nr */
    cg_loop lj = cg_loop_begin(c, cg_i64(e, 0), cg_i64(e, g->nr), 1, "packb.col");
    LLVMValueRef n = add(e, col0, lj.iv);
    LLVMValueRef dcol = gep(e, e->f32, pdst, lj.iv);
    LLVMBasicBlockRef in = LLVMAppendBasicBlockInContext(e->ctx, c->fn, "packb.copy");
    LLVMBasicBlockRef out = LLVMAppendBasicBlockInContext(e->ctx, c->fn, "packb.pad");
    LLVMBasicBlockRef done = LLVMAppendBasicBlockInContext(e->ctx, c->fn, "packb.col.done");
    LLVMBuildCondBr(B, LLVMBuildICmp(B, LLVMIntSLT, n, cg_i64(e, g->Nc), ""), in, out);
    LLVMPositionBuilderAtEnd(B, in);
    LLVMValueRef srow = gep(e, bty, src, add(e, mul(e, n, K), k0));
    cg_loop lk = cg_loop_begin(c, cg_i64(e, 0), kk, 1, "packb.k");
    LLVMValueRef sp = gep(e, bty, srow, lk.iv);
    if (g->conv.mode == GEMM_CONV_DX) { /* convolutional networks: B[(t, o), n] = w[t, n, o] */
      LLVMValueRef k = add(e, k0, lk.iv), O = cg_i64(e, g->conv.O);
      LLVMValueRef t = LLVMBuildSDiv(B, k, O, ""), o = LLVMBuildSRem(B, k, O, "");
      sp = gep(e, bty, src, add(e, mul(e, t, g->Nc * g->conv.O), add(e, mul(e, n, g->conv.O), o)));
    }
    LLVMValueRef v = cg_emit_load(e, dt, sp, 1, x->b->name);
    cg_emit_store(e, DT_F32, v, gep(e, e->f32, dcol, mul(e, lk.iv, g->nr)), 1);
    cg_loop_end(c, &lk);
    LLVMBuildBr(B, done);
    LLVMPositionBuilderAtEnd(B, out); /* a column past B's last: zeros */
    cg_loop lz = cg_loop_begin(c, cg_i64(e, 0), kk, 1, "packb.zero");
    LLVMBuildStore(B, cg_const(e, e->f32, 0.0), gep(e, e->f32, dcol, mul(e, lz.iv, g->nr)));
    cg_loop_end(c, &lz);
    LLVMBuildBr(B, done);
    LLVMPositionBuilderAtEnd(B, done);
    cg_loop_end(c, &lj);
  }
  cg_loop_end(c, &lq);
}

/* B packed at run time, in the layout of the kernel's family. */
static void emit_pack_b(gemm_ctx *x, LLVMValueRef dst, LLVMValueRef p0, LLVMValueRef p1, LLVMValueRef k0,
                        LLVMValueRef kk) {
  const gemm_b_src src = (gemm_b_src)x->g->b_src;
  if (!x->g->bf16) {
    CASTOR_ASSERT(src != GEMM_B_PACK_CALL);
    emit_pack_b_panels(x, dst, p0, p1, k0, kk);
    return;
  }
  if (x->g->bf16 == GEMM_AMX)
    cg_gemm_amx_pack_b(x->c, x->c->base[x->b->id], src == GEMM_B_PACK_CALL_T, x->g->K, x->g->Nc, x->g->nr, dst, p0,
                       p1, k0, kk);
  else
    cg_gemm_bf16_pack_b(x->c, x->c->base[x->b->id], src == GEMM_B_PACK_CALL_T, x->g->K, x->g->Nc, x->g->nr, dst, p0,
                        p1, k0, kk);
}

/* ---- the epilogue: one function per kernel ----
 * void epilogue(ptr bufs, ptr tile, i64 row, i64 nrows, i64 col, i64 ncols)
 * reads the f32 sums of rows [row, row+nrows) x columns [col, col+ncols)
 * from `tile` (row stride ldc), applies the fused ops and stores the
 * results. ncols is whole vectors, or runs to the row end Nc, whose last
 * vector is partial when Nc is not a multiple of vw (known statically).
 * Out of line, it is emitted once however many micro-tile variants call it;
 * its tile is in L1 when it runs. */

typedef struct epi_ctx {
  cg_kctx c;
  const cg_gemm *g;
  LLVMValueRef tile, row, nrows, col, ncols;
} epi_ctx;

/* Chain value of the vector at element j (columns col + j ..) of tile row r. */
static LLVMValueRef epi_value(epi_ctx *x, LLVMValueRef r, LLVMValueRef j, int valid, LLVMValueRef *out_idx) {
  cg_kctx *c = &x->c;
  cg_emitter *e = c->e;
  const cg_gemm *g = x->g;
  const ir_node *mm = c->k->ops[0];
  LLVMValueRef off = add(e, mul(e, r, g->ldc), j);
  LLVMValueRef v = cg_emit_load(e, DT_F32, gep(e, e->f32, x->tile, off), g->vw, mm->name);
  LLVMValueRef colg = add(e, x->col, j);
  *out_idx = add(e, mul(e, add(e, x->row, r), g->Nc), colg);
  v = cg_emit_round_to(e, v, mm->type.dtype, mm->name);
  return cg_apply_chain(c, 1, g->softmax ? c->k->n_ops - 1 : c->k->n_ops, v, *out_idx, colg, g->vw, valid);
}

/* Vectors j of a row: for whole ones (j < nfull) body(valid = vw), then the
 * partial one if the row end is partial and in range. */
typedef void (*epi_body)(epi_ctx *x, LLVMValueRef r, LLVMValueRef j, int valid);

static void epi_row_vectors(epi_ctx *x, LLVMValueRef r, epi_body body, const char *name) {
  cg_kctx *c = &x->c;
  cg_emitter *e = c->e;
  const cg_gemm *g = x->g;
  if (g->Nc == g->vw) { /* one vector a row (8 output channels): no loop, its operands' loads the same every row */
    body(x, r, cg_i64(e, 0), g->vw);
    return;
  }
  LLVMValueRef nfull = LLVMBuildSDiv(B, x->ncols, cg_i64(e, g->vw), "");
  cg_loop lj = cg_loop_begin(c, cg_i64(e, 0), nfull, 1, name);
  body(x, r, lj.iv, g->vw);
  cg_loop_end(c, &lj);
  int part = (int)(g->Nc % g->vw);
  if (!part) return;
  LLVMBasicBlockRef pb = LLVMAppendBasicBlockInContext(e->ctx, c->fn, "partial");
  LLVMBasicBlockRef after = LLVMAppendBasicBlockInContext(e->ctx, c->fn, "partial.done");
  LLVMValueRef has = LLVMBuildICmp(B, LLVMIntSGT, x->ncols, mul(e, nfull, g->vw), "");
  LLVMBuildCondBr(B, has, pb, after);
  LLVMPositionBuilderAtEnd(B, pb);
  body(x, r, nfull, part);
  LLVMBuildBr(B, after);
  LLVMPositionBuilderAtEnd(B, after);
}

/* The chain's value of a vector (epi_value, or the row pair's), stored
 * with its roundings tested once (cg_emit_value_stored). */
typedef LLVMValueRef (*epi_chain)(epi_ctx *x, LLVMValueRef r, LLVMValueRef j, int valid, LLVMValueRef *out_idx);
typedef struct epi_at {
  epi_ctx *x;
  LLVMValueRef r, j;
  int valid;
  epi_chain chain;
} epi_at;

static LLVMValueRef epi_at_value(cg_kctx *c, void *arg, LLVMValueRef *out_ptr) {
  epi_at *a = arg;
  LLVMValueRef idx, v = a->chain(a->x, a->r, a->j, a->valid, &idx);
  *out_ptr = cg_elem_ptr(c, c->k->ops[c->k->n_ops - 1], idx);
  return v;
}

static void epi_store_with(epi_ctx *x, LLVMValueRef r, LLVMValueRef j, int lanes, int valid, epi_chain chain) {
  cg_kctx *c = &x->c;
  epi_at a = {x, r, j, valid, chain};
  cg_emit_value_stored(c, c->k->ops[c->k->n_ops - 1]->type.dtype, lanes, valid, epi_at_value, &a);
}

static LLVMValueRef epi_value_at(epi_ctx *x, LLVMValueRef r, LLVMValueRef j, int valid, LLVMValueRef *out_idx) {
  return epi_value(x, r, mul(x->c.e, j, x->g->vw), valid, out_idx);
}

static void epi_store(epi_ctx *x, LLVMValueRef r, LLVMValueRef j, int valid) {
  epi_store_with(x, r, j, x->g->vw, valid, epi_value_at);
}

/* Tile row r as the row of the row-wise op that ends the kernel
 * (cg_rowwise.c): its input is the chain's value, the tile row its scratch
 * (padded: whole vectors fit). The planner fuses the op only when one
 * panel spans the row, so the epilogue gets whole rows: col 0, ncols Nc. */
typedef struct epi_row {
  cg_row row;
  epi_ctx *x;
  LLVMValueRef r;
} epi_row;

static LLVMValueRef epi_row_load(cg_row *row, LLVMValueRef j, int lanes, int valid) {
  epi_row *er = (epi_row *)row;
  LLVMValueRef idx;
  CASTOR_ASSERT(lanes == er->x->g->vw);
  return epi_value(er->x, er->r, j, valid, &idx);
}

static void epi_row_store(cg_row *row, LLVMValueRef j, LLVMValueRef val, int lanes, int valid) {
  epi_row *er = (epi_row *)row;
  epi_ctx *x = er->x;
  cg_kctx *c = &x->c;
  cg_emitter *e = c->e;
  const ir_node *res = c->k->ops[c->k->n_ops - 1];
  LLVMValueRef idx = add(e, mul(e, add(e, x->row, er->r), x->g->Nc), add(e, x->col, j));
  cg_store_part_rounded(e, res->type.dtype, val, cg_elem_ptr(c, res, idx), lanes, valid);
}

/* An epilogue of 8-lane rows (Nc = vw = 8: the direct convolution of 8
 * output channels, cg_conv.c) on an AVX-512 CPU whose tile rows are
 * contiguous (ldc = Nc, whole rows: the output's rows are too) runs two
 * rows a 16-lane vector: each op of the chain, each rounding and its
 * class test, once per two pixels. The lanes are the same values through
 * the same operations, so the same bits. tests/onnx/models/cnn's first
 * conv under mixed_bfloat16 (bias, relu, two roundings a vector): its
 * epilogue 0.018 -> ms a run at batch 16 (bench/results/cnn-bf16-2026-11-30-s15.md). */
enum { EPI_PAIR_LANES = 16 };
static bool epi_two_rows(const cg_kctx *c, const cg_gemm *g) {
  const cg_kernel *k = c->k;
  return !g->softmax && g->Nc == 8 && g->vw == 8 && g->ldc == g->Nc && c->e->vw >= EPI_PAIR_LANES &&
         cg_chain_line_rep_ok(k, 1, k->n_ops);
}

/* The chain's value of tile rows r and r + 1 (j: 0, valid: 16) */
static LLVMValueRef epi_pair_value(epi_ctx *x, LLVMValueRef r, LLVMValueRef j, int valid, LLVMValueRef *out_idx) {
  cg_kctx *c = &x->c;
  cg_emitter *e = c->e;
  const cg_gemm *g = x->g;
  const ir_node *mm = c->k->ops[0];
  (void)j, (void)valid;
  LLVMValueRef v = cg_emit_load(e, DT_F32, gep(e, e->f32, x->tile, mul(e, r, g->ldc)), EPI_PAIR_LANES, mm->name);
  *out_idx = mul(e, add(e, x->row, r), g->Nc);
  v = cg_emit_round_to(e, v, mm->type.dtype, mm->name);
  c->line_rep = (int)g->Nc;
  v = cg_apply_chain(c, 1, c->k->n_ops, v, *out_idx, x->col, EPI_PAIR_LANES, EPI_PAIR_LANES);
  c->line_rep = 0;
  return v;
}

static void emit_epilogue_pairs(epi_ctx *x) {
  cg_kctx *c = &x->c;
  cg_emitter *e = c->e;
  const cg_gemm *g = x->g;
  /* the call's ncols is Nc (one vector a row): whole rows */
  LLVMValueRef npairs = LLVMBuildSDiv(B, x->nrows, cg_i64(e, 2), "");
  cg_loop lp = cg_loop_begin(c, cg_i64(e, 0), npairs, 1, "rowpair");
  epi_store_with(x, mul(e, lp.iv, 2), cg_i64(e, 0), EPI_PAIR_LANES, EPI_PAIR_LANES, epi_pair_value);
  cg_loop_end(c, &lp);
  /* an odd row count: the last row alone */
  LLVMBasicBlockRef lb = LLVMAppendBasicBlockInContext(e->ctx, c->fn, "lastrow");
  LLVMBasicBlockRef done = LLVMAppendBasicBlockInContext(e->ctx, c->fn, "lastrow.done");
  LLVMBuildCondBr(B, LLVMBuildICmp(B, LLVMIntSGT, x->nrows, mul(e, npairs, 2), ""), lb, done);
  LLVMPositionBuilderAtEnd(B, lb);
  epi_store(x, mul(e, npairs, 2), cg_i64(e, 0), g->vw);
  LLVMBuildBr(B, done);
  LLVMPositionBuilderAtEnd(B, done);
}

static LLVMValueRef emit_epilogue_fn(cg_kctx *kc, const cg_gemm *g) {
  cg_emitter *e = kc->e;
  LLVMTypeRef params[] = {e->ptr, e->ptr, e->i64, e->i64, e->i64, e->i64};
  LLVMTypeRef fty = LLVMFunctionType(e->void_, params, 6, 0);
  char name[256];
  snprintf(name, sizeof name, "%s.epilogue", kc->k->name);
  LLVMValueRef fn = LLVMAddFunction(e->mod, name, fty);
  LLVMSetLinkage(fn, LLVMInternalLinkage);
  unsigned noinline = LLVMGetEnumAttributeKindForName("noinline", 8);
  LLVMAddAttributeAtIndex(fn, LLVMAttributeFunctionIndex, LLVMCreateEnumAttribute(e->ctx, noinline, 0));
  LLVMBasicBlockRef saved = LLVMGetInsertBlock(B);
  epi_ctx x = {*kc, g, NULL, NULL, NULL, NULL, NULL};
  cg_kctx *c = &x.c;
  c->base = kc->spare_base; /* all NULL: the epilogue loads its own */
  c->fn = fn;
  c->bufs = LLVMGetParam(fn, 0);
  x.tile = LLVMGetParam(fn, 1), x.row = LLVMGetParam(fn, 2), x.nrows = LLVMGetParam(fn, 3);
  x.col = LLVMGetParam(fn, 4), x.ncols = LLVMGetParam(fn, 5);
  LLVMPositionBuilderAtEnd(B, LLVMAppendBasicBlockInContext(e->ctx, fn, "entry"));
  cg_load_bases(c);
  if (epi_two_rows(c, g)) { /* rows of 8 channels, two to a 16-lane vector */
    emit_epilogue_pairs(&x);
    LLVMBuildRetVoid(B);
    cg_clear_bases(c);
    LLVMPositionBuilderAtEnd(B, saved);
    return fn;
  }
  cg_loop lr = cg_loop_begin(c, cg_i64(e, 0), x.nrows, 1, "row");
  if (!g->softmax) {
    epi_row_vectors(&x, lr.iv, epi_store, "vec");
  } else {
    LLVMValueRef tile_row = gep(e, e->f32, x.tile, mul(e, lr.iv, g->ldc));
    epi_row er = {.row = {.n = g->Nc, .lanes = g->vw, .masked_tail = true, .load = epi_row_load,
                          .store = epi_row_store, .scratch = tile_row, .costly_load = true},
                  .x = &x, .r = lr.iv};
    cg_emit_rowwise(c, c->k->ops[c->k->n_ops - 1], &er.row);
  }
  cg_loop_end(c, &lr);
  LLVMBuildRetVoid(B);
  cg_clear_bases(c);
  LLVMPositionBuilderAtEnd(B, saved);
  return fn;
}

/* The f32 k loop of a micro-tile (the FMA families): B widened from its
 * dtype in registers, one A value broadcast per row. */
static void emit_micro_f32(gemm_ctx *x, LLVMValueRef ir, LLVMValueRef p, int mr, int np, int nvp,
                           LLVMValueRef acc[14][16]) {
  cg_kctx *c = x->c;
  cg_emitter *e = c->e;
  const cg_gemm *g = x->g;
  bool tail = np == 0;
  int npan = tail ? 1 : np, nvec = nvp * npan;
  int width = tail ? g->tail_nv * g->vw : g->nr; /* packed panel width */
  /* B: packed, the K block at pc holds every panel kk x nr (kk: its rows),
   * then the tail panel; else B itself, row stride Nc */
  bool run_packed = g->b_src == GEMM_B_PACK_CALL_T || g->b_src == GEMM_B_PACK_BLOCK;
  ir_dtype bt = run_packed ? DT_F32 : x->b->type.dtype;
  LLVMTypeRef bty = cg_llvm_dtype(e, bt);
  LLVMValueRef bptr, bstride, pstride; /* pstride: elements between the panels of one k */
  if (run_packed) { /* the K block at pc of panels from bpanel0 on, each kk x nr */
    LLVMValueRef kknr = mul(e, x->kk, g->nr);
    LLVMValueRef q = LLVMBuildSub(B, tail ? cg_i64(e, g->n_full) : p, x->bpanel0, "");
    bptr = gep(e, e->f32, x->bblock, LLVMBuildMul(B, q, kknr, ""));
    bstride = cg_i64(e, g->nr);
    pstride = kknr;
  } else if (g->b_src == GEMM_B_PREPACKED) {
    LLVMValueRef panel0 = mul(e, x->pc, g->n_full * g->nr + g->tail_nv * g->vw); /* the block's first panel */
    LLVMValueRef kknr = mul(e, x->kk, g->nr);
    LLVMValueRef start = LLVMBuildMul(B, tail ? cg_i64(e, g->n_full) : p, kknr, "");
    bptr = gep(e, bty, c->base[x->b->id], add(e, panel0, start));
    bstride = cg_i64(e, width);
    pstride = kknr;
  } else {
    bptr = gep(e, bty, x->bbase, add(e, mul(e, x->pc, g->Nc), mul(e, p, g->nr)));
    bstride = cg_i64(e, g->Nc);
    pstride = cg_i64(e, g->nr);
  }
  /* A(r, k): row-major rows of the block, or k-major (a_trans) */
  LLVMValueRef aptr = g->a_trans ? gep(e, e->f32, x->apack, ir) : gep(e, e->f32, x->apack, mul(e, ir, g->lda));
  cg_loop lk = cg_loop_begin(c, cg_i64(e, 0), x->kk, 1, "k");
  LLVMValueRef arow = g->a_trans ? gep(e, e->f32, aptr, mul(e, lk.iv, g->lda)) : NULL;
  LLVMValueRef brow = gep(e, bty, bptr, LLVMBuildMul(B, lk.iv, bstride, ""));
  LLVMValueRef bv[16];
  for (int q = 0; q < npan; q++)
    for (int v = 0; v < nvp; v++) {
      LLVMValueRef pv = gep(e, bty, brow, add(e, LLVMBuildMul(B, pstride, cg_i64(e, q), ""), cg_i64(e, v * g->vw)));
      /* unpacked B: the partial panel's last vector must not read past the row */
      int valid = g->b_src == GEMM_B_IN_PLACE && tail && v == nvp - 1 ? g->tail_valid : g->vw;
      bv[q * nvp + v] = cg_load_part(e, bt, pv, g->vw, valid, x->b->name);
    }
  if (g->prefetch_b && np == 1) { /* the same k row of the next panel, into L2 (prefetcht1) */
    unsigned id = LLVMLookupIntrinsicID("llvm.prefetch", strlen("llvm.prefetch"));
    LLVMTypeRef pty = e->ptr;
    LLVMValueRef pf = LLVMGetIntrinsicDeclaration(e->mod, id, &pty, 1);
    LLVMValueRef args[] = {gep(e, bty, brow, pstride), LLVMConstInt(e->i32, 0, 0), LLVMConstInt(e->i32, 2, 0),
                           LLVMConstInt(e->i32, 1, 0)};
    LLVMBuildCall2(B, LLVMGlobalGetValueType(pf), pf, args, 4, "");
  }
  for (int r = 0; r < mr; r++) {
    LLVMValueRef ap = g->a_trans ? gep(e, e->f32, arow, cg_i64(e, r)) : gep(e, e->f32, aptr, add(e, cg_i64(e, r * g->lda), lk.iv));
    LLVMValueRef a = cg_emit_load(e, DT_F32, ap, 1, "");
    LLVMValueRef as = cg_splat(e, a, g->vw);
    for (int v = 0; v < nvec; v++)
      LLVMBuildStore(B, cg_fmuladd(e, as, bv[v], LLVMBuildLoad2(B, x->vt, acc[r][v], "")), acc[r][v]);
  }
  cg_loop_end(c, &lk);
}

/* The K-pair k loop of a micro-tile (gemm/cg_gemm_bf16.h): every B is
 * packed in pairs, at compile time or at run time. */
static void emit_micro_bf16(gemm_ctx *x, LLVMValueRef ir, LLVMValueRef p, int mr, int np, int nvp,
                            LLVMValueRef acc[14][16]) {
  cg_kctx *c = x->c;
  cg_emitter *e = c->e;
  const cg_gemm *g = x->g;
  bool tail = np == 0;
  int width = tail ? g->tail_nv * g->vw : g->nr;
  LLVMTypeRef h = cg_llvm_dtype(e, DT_BF16);
  LLVMValueRef kp = LLVMBuildLShr(B, add(e, x->kk, cg_i64(e, 1)), cg_i64(e, 1), "kp");
  cg_bf16_tile t = {.mr = mr, .nvp = nvp, .npan = tail ? 1 : np, .acc = &acc[0][0]};
  if (g->b_src == GEMM_B_PREPACKED) { /* block pc at pc x (padded width); its panels kp x 2 width */
    LLVMValueRef panel0 = mul(e, x->pc, g->n_full * g->nr + g->tail_nv * g->vw);
    LLVMValueRef pstride = mul(e, kp, 2 * g->nr);
    LLVMValueRef start = LLVMBuildMul(B, tail ? cg_i64(e, g->n_full) : p, pstride, "");
    t.b = gep(e, h, c->base[x->b->id], add(e, panel0, start));
    t.b_pair = cg_i64(e, 2 * width);
    t.b_panel = pstride;
  } else { /* run-packed: every panel nr wide, from bpanel0 on */
    CASTOR_ASSERT(g->b_src != GEMM_B_IN_PLACE);
    LLVMValueRef pstride = mul(e, kp, 2 * g->nr);
    LLVMValueRef q = LLVMBuildSub(B, tail ? cg_i64(e, g->n_full) : p, x->bpanel0, "");
    t.b = gep(e, h, x->bblock, LLVMBuildMul(B, q, pstride, ""));
    t.b_pair = cg_i64(e, 2 * g->nr);
    t.b_panel = pstride;
  }
  t.a = g->a_trans ? gep(e, e->i32, x->apack, ir) : gep(e, e->i32, x->apack, mul(e, ir, g->lda));
  t.a_row = g->a_trans ? 1 : g->lda;
  t.a_pair = g->a_trans ? g->lda : 1;
  t.kp = kp;
  cg_gemm_bf16_kloop(c, &t);
}

/* The AMX micro-tile (gemm/cg_gemm_amx.h): rows ir .. ir+32 of the row
 * block (those past x->m computed from stale A rows and never stored to
 * the output), one panel p (np == 0: the partial last panel), over the
 * current K block: C tiles from the C tile memory (or zero), a tile step
 * per 32 k, the sums stored back, the epilogue after the last K block. */
static void emit_micro_amx(gemm_ctx *x, LLVMValueRef ir, LLVMValueRef p, int np) {
  cg_kctx *c = x->c;
  cg_emitter *e = c->e;
  const cg_gemm *g = x->g;
  bool tail = np == 0;
  int nvp = tail ? g->tail_nv : g->nv; /* C tile columns: 1 or 2 */
  int width = tail ? g->tail_nv * g->vw : g->nr;
  CASTOR_ASSERT(nvp >= 1 && nvp <= 2 && g->vw == CG_AMX_ROWS);
  LLVMTypeRef h = cg_llvm_dtype(e, DT_BF16);
  LLVMValueRef ccol = mul(e, LLVMBuildSub(B, p, x->jc_panel, ""), g->nr);
  LLVMValueRef cstride = cg_i64(e, g->ldc * 4), cp[2][2];
  for (int r = 0; r < 2; r++)
    for (int v = 0; v < nvp; v++)
      cp[r][v] = gep(e, e->f32, x->ctile, add(e, add(e, mul(e, add(e, ir, cg_i64(e, r * CG_AMX_ROWS)), g->ldc), ccol),
                                                cg_i64(e, v * g->vw)));
  static const int ct[2][2] = {{CG_AMX_C00, CG_AMX_C01}, {CG_AMX_C10, CG_AMX_C11}};
  LLVMBasicBlockRef ld = LLVMAppendBasicBlockInContext(e->ctx, c->fn, "amx.c.load");
  LLVMBasicBlockRef zero = LLVMAppendBasicBlockInContext(e->ctx, c->fn, "amx.c.zero");
  LLVMBasicBlockRef go = LLVMAppendBasicBlockInContext(e->ctx, c->fn, "amx.c.ready");
  LLVMBuildCondBr(B, x->first, zero, ld);
  LLVMPositionBuilderAtEnd(B, ld);
  for (int r = 0; r < 2; r++)
    for (int v = 0; v < nvp; v++) cg_amx_load(e, ct[r][v], cp[r][v], cstride);
  LLVMBuildBr(B, go);
  LLVMPositionBuilderAtEnd(B, zero);
  for (int r = 0; r < 2; r++)
    for (int v = 0; v < nvp; v++) cg_amx_zero(e, ct[r][v]);
  LLVMBuildBr(B, go);
  LLVMPositionBuilderAtEnd(B, go);
  /* B: the panel's pair rows, padded to whole tile steps (kp16 of them) */
  LLVMValueRef kp16 = cg_amx_pairs(e, x->kk), pstride = mul(e, kp16, 2 * g->nr), bp;
  if (g->b_src == GEMM_B_PREPACKED) {
    LLVMValueRef panel0 = mul(e, x->pc, g->n_full * g->nr + g->tail_nv * g->vw);
    bp = gep(e, h, c->base[x->b->id], add(e, panel0, LLVMBuildMul(B, tail ? cg_i64(e, g->n_full) : p, pstride, "")));
  } else {
    CASTOR_ASSERT(g->b_src != GEMM_B_IN_PLACE);
    LLVMValueRef q = LLVMBuildSub(B, tail ? cg_i64(e, g->n_full) : p, x->bpanel0, "");
    bp = gep(e, h, x->bblock, LLVMBuildMul(B, q, pstride, ""));
    width = g->nr; /* run-packed panels are all nr wide */
  }
  LLVMValueRef astride = cg_i64(e, g->lda * 4), bstride = cg_i64(e, (int64_t)width * 4);
  LLVMValueRef a0 = gep(e, e->i32, x->apack, mul(e, ir, g->lda));
  cg_loop ls = cg_loop_begin(c, cg_i64(e, 0), LLVMBuildLShr(B, kp16, cg_i64(e, 4), ""), 1, "amx.kstep");
  LLVMValueRef j = mul(e, ls.iv, CG_AMX_ROWS); /* first pair of the step */
  cg_amx_load(e, CG_AMX_A0, gep(e, e->i32, a0, j), astride);
  cg_amx_load(e, CG_AMX_A1, gep(e, e->i32, a0, add(e, j, cg_i64(e, CG_AMX_ROWS * g->lda))), astride);
  LLVMValueRef brow = gep(e, h, bp, mul(e, j, 2 * width));
  cg_amx_load(e, CG_AMX_B0, brow, bstride);
  if (nvp == 2) cg_amx_load(e, CG_AMX_B1, gep(e, h, brow, cg_i64(e, 2 * g->vw)), bstride);
  for (int r = 0; r < 2; r++)
    for (int v = 0; v < nvp; v++) cg_amx_dpbf16ps(e, ct[r][v], r ? CG_AMX_A1 : CG_AMX_A0, v ? CG_AMX_B1 : CG_AMX_B0);
  cg_loop_end(c, &ls);
  for (int r = 0; r < 2; r++)
    for (int v = 0; v < nvp; v++) cg_amx_store(e, ct[r][v], cp[r][v], cstride);
  LLVMBasicBlockRef epi = LLVMAppendBasicBlockInContext(e->ctx, c->fn, "epilogue");
  LLVMBasicBlockRef done = LLVMAppendBasicBlockInContext(e->ctx, c->fn, "tile.done");
  LLVMBuildCondBr(B, x->last, epi, done);
  LLVMPositionBuilderAtEnd(B, epi);
  LLVMValueRef col = tail ? cg_i64(e, g->n_full * g->nr) : mul(e, p, g->nr);
  LLVMValueRef ncols = cg_i64(e, tail ? g->Nc - g->n_full * g->nr : g->nr);
  LLVMValueRef nrows = min_(e, cg_i64(e, CG_AMX_MR), LLVMBuildSub(B, x->m, ir, ""));
  LLVMValueRef args[] = {c->bufs, cp[0][0], add(e, x->ic, ir), nrows, col, ncols};
  LLVMBuildCall2(B, LLVMGlobalGetValueType(x->epilogue), x->epilogue, args, 6, "");
  LLVMBuildBr(B, done);
  LLVMPositionBuilderAtEnd(B, done);
}

/* One micro-tile: rows ir .. ir+mr of the row block, np panels from panel
 * p (np == 0: the partial last panel), over the current K block. The sums
 * go to the C tile; after the last K block the epilogue takes them from
 * there. */
static void emit_micro(gemm_ctx *x, LLVMValueRef ir, LLVMValueRef p, int mr, int np) {
  cg_kctx *c = x->c;
  cg_emitter *e = c->e;
  const cg_gemm *g = x->g;
  bool tail = np == 0;
  int nvp = tail ? g->tail_nv : g->nv; /* vectors per panel */
  int npan = tail ? 1 : np, nvec = nvp * npan;
  LLVMValueRef acc[14][16];
  if (g->bf16 == GEMM_AMX) {
    emit_micro_amx(x, ir, p, np);
    return;
  }
  CASTOR_ASSERT(mr <= 14 && nvec <= 16);
  /* the C tile holds this tile at rows ir.., columns (p - jc_panel) * nr .. */
  LLVMValueRef ccol = mul(e, LLVMBuildSub(B, p, x->jc_panel, ""), g->nr);
  LLVMValueRef ctp[14][16];
  for (int r = 0; r < mr; r++)
    for (int v = 0; v < nvec; v++) {
      acc[r][v] = cg_entry_alloca(c, x->vt, "acc");
      LLVMBuildStore(B, cg_const(e, x->vt, 0.0), acc[r][v]);
      ctp[r][v] = gep(e, e->f32, x->ctile, add(e, add(e, mul(e, add(e, ir, cg_i64(e, r)), g->ldc), ccol), cg_i64(e, v * g->vw)));
    }
  if (g->n_kblocks != 1) { /* several K blocks, or a number known at run time */
    LLVMBasicBlockRef ld = LLVMAppendBasicBlockInContext(e->ctx, c->fn, "acc.load");
    LLVMBasicBlockRef go = LLVMAppendBasicBlockInContext(e->ctx, c->fn, "acc.ready");
    LLVMBuildCondBr(B, x->first, go, ld);
    LLVMPositionBuilderAtEnd(B, ld);
    for (int r = 0; r < mr; r++)
      for (int v = 0; v < nvec; v++) LLVMBuildStore(B, cg_emit_load(e, DT_F32, ctp[r][v], g->vw, ""), acc[r][v]);
    LLVMBuildBr(B, go);
    LLVMPositionBuilderAtEnd(B, go);
  }
  if (g->bf16) emit_micro_bf16(x, ir, p, mr, np, nvp, acc);
  else emit_micro_f32(x, ir, p, mr, np, nvp, acc);
  for (int r = 0; r < mr; r++)
    for (int v = 0; v < nvec; v++) cg_emit_store(e, DT_F32, LLVMBuildLoad2(B, x->vt, acc[r][v], ""), ctp[r][v], g->vw);
  LLVMBasicBlockRef epi = LLVMAppendBasicBlockInContext(e->ctx, c->fn, "epilogue");
  LLVMBasicBlockRef done = LLVMAppendBasicBlockInContext(e->ctx, c->fn, "tile.done");
  LLVMBuildCondBr(B, x->last, epi, done);
  LLVMPositionBuilderAtEnd(B, epi);
  LLVMValueRef col = tail ? cg_i64(e, g->n_full * g->nr) : mul(e, p, g->nr);
  LLVMValueRef ncols = cg_i64(e, tail ? g->Nc - g->n_full * g->nr : (int64_t)npan * g->nr);
  LLVMValueRef args[] = {c->bufs, ctp[0][0], add(e, x->ic, ir), cg_i64(e, mr), col, ncols};
  LLVMBuildCall2(B, LLVMGlobalGetValueType(x->epilogue), x->epilogue, args, 6, "");
  LLVMBuildBr(B, done);
  LLVMPositionBuilderAtEnd(B, done);
}


/* Every micro-tile of rows ir .. m of the row block with variant v, over
 * panels [p0, p1) of the column block; returns where the rows stopped. */
static LLVMValueRef emit_variant(gemm_ctx *x, LLVMValueRef ir0, LLVMValueRef m, gemm_variant v,
                                 LLVMValueRef p0, LLVMValueRef p1) {
  cg_kctx *c = x->c;
  cg_emitter *e = c->e;
  const cg_gemm *g = x->g;
  char nm[32];
  snprintf(nm, sizeof nm, "i%d", v.mr);
  if (g->bf16 == GEMM_AMX) { /* whole 32-row tiles over m, the last one partial */
    x->m = m;
    m = mul(e, LLVMBuildSDiv(B, add(e, m, cg_i64(e, v.mr - 1)), cg_i64(e, v.mr), ""), v.mr);
  }
  cg_loop li = cg_loop_begin(c, ir0, m, v.mr, nm);
  /* full panels: np at a time, then one at a time */
  LLVMValueRef pfull = min_(e, p1, cg_i64(e, g->n_full));
  LLVMValueRef pdone = p0;
  if (g->n_full > 0) { /* B narrower than a panel has no full-panel code */
    if (v.np > 1) {
      snprintf(nm, sizeof nm, "p%dx%d", v.mr, v.np);
      cg_loop lp = cg_loop_begin(c, p0, pfull, v.np, nm);
      emit_micro(x, li.iv, lp.iv, v.mr, v.np);
      cg_loop_end(c, &lp);
      pdone = lp.iv;
    }
    snprintf(nm, sizeof nm, "p%d", v.mr);
    cg_loop lp = cg_loop_begin(c, pdone, pfull, 1, nm);
    emit_micro(x, li.iv, lp.iv, v.mr, 1);
    cg_loop_end(c, &lp);
  }
  if (g->tail_nv) { /* the partial last panel, if this block reaches it */
    LLVMBasicBlockRef tb = LLVMAppendBasicBlockInContext(e->ctx, c->fn, "tail.panel");
    LLVMBasicBlockRef after = LLVMAppendBasicBlockInContext(e->ctx, c->fn, "tail.done");
    LLVMBuildCondBr(B, LLVMBuildICmp(B, LLVMIntSGT, p1, cg_i64(e, g->n_full), ""), tb, after);
    LLVMPositionBuilderAtEnd(B, tb);
    emit_micro(x, li.iv, cg_i64(e, g->n_full), v.mr, 0);
    LLVMBuildBr(B, after);
    LLVMPositionBuilderAtEnd(B, after);
  }
  cg_loop_end(c, &li);
  return li.iv;
}

/* Panel-outer order (g->panel_outer): each panel of the column block,
 * one at a time, under every row tile of the row block, variant by
 * variant (each one panel wide), so a panel of B (KC x NR) is read from
 * L3 once per row block and from L2 by the block's other row tiles. */
static void emit_panels_outer(gemm_ctx *x, LLVMValueRef m, LLVMValueRef p0, LLVMValueRef p1) {
  cg_kctx *c = x->c;
  cg_emitter *e = c->e;
  const cg_gemm *g = x->g;
  char nm[32];
  for (int tail = 0; tail < 2; tail++) {
    if (tail && !g->tail_nv) break;
    if (!tail && g->n_full == 0) continue;
    cg_loop lp = {0};
    LLVMBasicBlockRef after = NULL;
    LLVMValueRef p;
    if (!tail) {
      lp = cg_loop_begin(c, p0, min_(e, p1, cg_i64(e, g->n_full)), 1, "po.panel");
      p = lp.iv;
    } else { /* the partial last panel, if this block reaches it */
      LLVMBasicBlockRef tb = LLVMAppendBasicBlockInContext(e->ctx, c->fn, "po.tail");
      after = LLVMAppendBasicBlockInContext(e->ctx, c->fn, "po.tail.done");
      LLVMBuildCondBr(B, LLVMBuildICmp(B, LLVMIntSGT, p1, cg_i64(e, g->n_full), ""), tb, after);
      LLVMPositionBuilderAtEnd(B, tb);
      p = cg_i64(e, g->n_full);
    }
    LLVMValueRef ir = cg_i64(e, 0);
    for (int v = 0; v < g->n_var; v++) {
      snprintf(nm, sizeof nm, "po.i%d", g->var[v].mr);
      cg_loop li = cg_loop_begin(c, ir, m, g->var[v].mr, nm);
      emit_micro(x, li.iv, p, g->var[v].mr, tail ? 0 : 1);
      cg_loop_end(c, &li);
      ir = li.iv;
    }
    if (!tail) {
      cg_loop_end(c, &lp);
    } else {
      LLVMBuildBr(B, after);
      LLVMPositionBuilderAtEnd(B, after);
    }
  }
}

/* The GEMM of rows [x->row0, x->row1) (every column block, K block and
 * row block of the call). */
static void emit_gemm_rows(gemm_ctx *xp) {
  gemm_ctx x = *xp; /* the loops below move its block pointers */
  cg_kctx *c = x.c;
  cg_emitter *e = c->e;
  const cg_gemm *g = x.g;
  LLVMValueRef bpack = gep(e, LLVMInt8TypeInContext(e->ctx), c->scratch, cg_i64(e, g->b_off));
  /* panels of the tile: col0 is a panel edge; col1 is one or the row end */
  LLVMValueRef p_begin = LLVMBuildSDiv(B, c->col0, cg_i64(e, g->nr), "panel0");
  LLVMValueRef p_end = LLVMBuildSDiv(B, add(e, c->col1, cg_i64(e, g->nr - 1)), cg_i64(e, g->nr), "panel1");
  int64_t ncp = g->nc / g->nr;
  /* K, and its blocks, known here or the run's batch */
  /* (conv2d_filter_grad: k_per_item rows per batch row) */
  LLVMValueRef batch_k = g->conv.k_per_item > 1 ? mul(e, c->batch, g->conv.k_per_item) : c->batch;
  LLVMValueRef Kv = g->K < 0 ? batch_k : cg_i64(e, g->K);
  LLVMValueRef nkb = g->K < 0 ? LLVMBuildSDiv(B, add(e, batch_k, cg_i64(e, g->kc - 1)), cg_i64(e, g->kc), "kblocks")
                              : cg_i64(e, g->n_kblocks);
  /* B transposed: the call's panels, all of K, packed once, K block by K
   * block (a block's panels contiguous: no power-of-two stride between
   * them); the region of block pc starts at pc x (its panels x nr) */
  LLVMValueRef call_w = mul(e, LLVMBuildSub(B, p_end, p_begin, ""), g->nr);
  /* elements of B packed at run time: f32, or bf16 in K pairs (K blocks
   * start at even k, so block pc's region is at pc x call_w either way) */
  LLVMTypeRef bpt = g->bf16 ? cg_llvm_dtype(e, DT_BF16) : e->f32;
  bool pack_call = g->b_src == GEMM_B_PACK_CALL_T || g->b_src == GEMM_B_PACK_CALL;
  if (pack_call) {
    cg_loop lp = cg_loop_begin(c, cg_i64(e, 0), nkb, 1, "packb.pc");
    LLVMValueRef pc = mul(e, lp.iv, g->kc);
    LLVMValueRef kk = min_(e, cg_i64(e, g->kc), LLVMBuildSub(B, Kv, pc, ""));
    emit_pack_b(&x, gep(e, bpt, bpack, LLVMBuildMul(B, pc, call_w, "")), p_begin, p_end, pc, kk);
    cg_loop_end(c, &lp);
  }
  /* jc: blocks of ncp panels (the loop helper needs whole steps: step 1 over block indices) */
  LLVMValueRef nblocks = LLVMBuildSDiv(B, add(e, LLVMBuildSub(B, p_end, p_begin, ""), cg_i64(e, ncp - 1)), cg_i64(e, ncp), "");
  cg_loop lj = cg_loop_begin(c, cg_i64(e, 0), nblocks, 1, "jc");
  x.jc_panel = add(e, p_begin, mul(e, lj.iv, ncp));
  LLVMValueRef jc_end = min_(e, add(e, x.jc_panel, cg_i64(e, ncp)), p_end);
  LLVMValueRef rows = LLVMBuildSub(B, x.row1, x.row0, "");
  LLVMValueRef nrb = LLVMBuildSDiv(B, add(e, rows, cg_i64(e, g->mc - 1)), cg_i64(e, g->mc), "");
  /* ic (row blocks) then pc (K blocks), the C tile one row block's; or,
   * when B is packed a K block at a time, pc then ic, so that each block
   * of B is packed once and serves every row block: the C tile then holds
   * all the call's rows */
  bool pc_outer = g->b_src == GEMM_B_PACK_BLOCK;
  cg_loop l1 = pc_outer ? cg_loop_begin(c, cg_i64(e, 0), nkb, 1, "pc") : cg_loop_begin(c, cg_i64(e, 0), nrb, 1, "ic");
  cg_loop l2 = {0};
  LLVMValueRef ctile0 = x.ctile;
  for (int level = 0; level < 2; level++) {
    bool at_pc = pc_outer == (level == 0);
    LLVMValueRef iv = level == 0 ? l1.iv : NULL;
    if (level == 1) {
      l2 = pc_outer ? cg_loop_begin(c, cg_i64(e, 0), nrb, 1, "ic") : cg_loop_begin(c, cg_i64(e, 0), nkb, 1, "pc");
      iv = l2.iv;
    }
    if (at_pc) {
      x.pc = mul(e, iv, g->kc);
      x.kk = min_(e, cg_i64(e, g->kc), LLVMBuildSub(B, Kv, x.pc, ""));
      x.first = LLVMBuildICmp(B, LLVMIntEQ, iv, cg_i64(e, 0), "first");
      x.last = LLVMBuildICmp(B, LLVMIntEQ, iv, LLVMBuildSub(B, nkb, cg_i64(e, 1), ""), "last");
      if (pack_call) {
        x.bblock = gep(e, bpt, bpack, LLVMBuildMul(B, x.pc, call_w, ""));
        x.bpanel0 = p_begin;
      } else if (g->b_src == GEMM_B_PACK_BLOCK) { /* this K block of the column block's panels */
        x.bblock = bpack;
        x.bpanel0 = x.jc_panel;
        emit_pack_b(&x, bpack, x.jc_panel, jc_end, x.pc, x.kk);
      }
    } else {
      LLVMValueRef off = mul(e, iv, g->mc);
      x.ic = add(e, x.row0, off);
      if (pc_outer) x.ctile = gep(e, e->f32, ctile0, mul(e, off, g->ldc));
    }
  }
  LLVMValueRef m = min_(e, cg_i64(e, g->mc), LLVMBuildSub(B, x.row1, x.ic, ""));
  emit_pack_a(&x, m);
  if (g->panel_outer) {
    emit_panels_outer(&x, m, x.jc_panel, jc_end);
  } else {
    LLVMValueRef ir = cg_i64(e, 0);
    for (int v = 0; v < g->n_var; v++) ir = emit_variant(&x, ir, m, g->var[v], x.jc_panel, jc_end);
  }
  cg_loop_end(c, &l2);
  cg_loop_end(c, &l1);
  cg_loop_end(c, &lj);
}

/* general tensors: batch_matmul, one GEMM per item of the call's launch
 * rows (gemm_bmm): its GEMM rows are item * M .., so the epilogue stores
 * the result's rows in place; A and B are the item's matrices. */
static void emit_bmm_items(gemm_ctx *x) {
  cg_kctx *c = x->c;
  cg_emitter *e = c->e;
  const gemm_bmm *bm = &x->g->bmm;
  LLVMTypeRef at = cg_llvm_dtype(e, x->a->type.dtype), bt = cg_llvm_dtype(e, x->b->type.dtype);
  LLVMValueRef abase = x->abase, bbase = x->bbase;
  cg_loop lr = cg_loop_begin(c, c->row0, c->row1, 1, "bmm.row");
  cg_loop lq = cg_loop_begin(c, cg_i64(e, 0), cg_i64(e, bm->per_row), 1, "bmm.item");
  /* the item's coordinates: dimension 0 the launch row, the others from q */
  LLVMValueRef ai = mul(e, lr.iv, bm->a_stride[0]), bi = mul(e, lr.iv, bm->b_stride[0]), rest = lq.iv;
  for (int64_t d = bm->nd - 1; d >= 1; d--) {
    LLVMValueRef cd = LLVMBuildSRem(B, rest, cg_i64(e, bm->dims[d]), "");
    rest = LLVMBuildSDiv(B, rest, cg_i64(e, bm->dims[d]), "");
    ai = add(e, ai, mul(e, cd, bm->a_stride[d]));
    bi = add(e, bi, mul(e, cd, bm->b_stride[d]));
  }
  LLVMValueRef item = add(e, mul(e, lr.iv, bm->per_row), lq.iv);
  x->abase = gep(e, at, abase, mul(e, ai, bm->a_size));
  x->bbase = gep(e, bt, bbase, mul(e, bi, bm->b_size));
  x->row0 = x->arow0 = mul(e, item, bm->M);
  x->row1 = add(e, x->row0, cg_i64(e, bm->M));
  emit_gemm_rows(x);
  cg_loop_end(c, &lq);
  cg_loop_end(c, &lr);
}

void cg_gemm_emit(cg_kctx *c, const cg_gemm *g) {
  cg_emitter *e = c->e;
  const cg_kernel *k = c->k;
  gemm_ctx x = {.c = c, .g = g, .mm = k->ops[0], .a = k->ops[0]->srcs[0], .b = k->ops[0]->srcs[1],
                .out = k->ops[k->n_ops - 1], .vt = LLVMVectorType(e->f32, (unsigned)g->vw)};
  x.epilogue = emit_epilogue_fn(c, g);
  if (g->conv.direct) { /* convolutional networks: no GEMM (cg_conv.c) */
    cg_conv_direct_emit(c, g, x.epilogue);
    return;
  }
  if (g->conv.wino) { /* convolutional networks: Winograd F(4x4, 3x3) (cg_wino.c) */
    cg_wino_emit(c, g, x.epilogue);
    return;
  }
  x.apack = c->scratch;
  x.ctile = gep(e, LLVMInt8TypeInContext(e->ctx), c->scratch, cg_i64(e, g->c_off));
  x.abase = c->base[x.a->id], x.bbase = c->base[x.b->id];
  if (g->bmm.on) {
    emit_bmm_items(&x);
    return;
  }
  bool per_item = g->conv.rows_per_item > 1 && !g->conv.flat_rows; /* launch rows: images (or items) */
  x.row0 = per_item ? mul(e, c->row0, g->conv.rows_per_item) : c->row0;
  x.row1 = per_item ? mul(e, c->row1, g->conv.rows_per_item) : c->row1;
  if (g->bf16 == GEMM_AMX) cg_amx_config(e); /* the tile shapes, once per call */
  emit_gemm_rows(&x);
  if (g->bf16 == GEMM_AMX) cg_amx_release(e);
}
