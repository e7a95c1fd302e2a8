/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cg_nvptx_gemm.c: matmul kernels for the nvptx target (cg_nvptx.c).
 *
 * C[M, N] = A[M, K] @ B[K, N], A and B row-major; M is the batch (or A's
 * fixed rows), K and N are static. Block (blockIdx.x, blockIdx.y) computes
 * the BM x BN tile at rows m0 = x * BM, columns n0 = y * BN.
 *
 * Tensor cores (f16 or bf16 operands, K and N multiples of 8, which pad8
 * guarantees): 8 warps; block tiles BM = 128 by BN = 128/64/32/16 (the
 * narrowest power of two >= 16 that is not wider than needed), BK = 32
 * (two k16 steps); each warp owns a (BM/WM) x (BN/WN) sub-tile of m16n8
 * accumulators in registers (f32) and runs mma.sync.aligned.m16n8k16
 * .row.col.f32.{f16,bf16} on fragments loaded by ldmatrix.x4 (A) and
 * ldmatrix.x4.trans (B, stored [k][n]). Tiles stream through a 4-stage
 * cp.async.cg pipeline (16-byte copies, zero-filled through the src-size
 * operand outside M, K and N, so every shape is handled and no load
 * goes out of bounds): wait_group(STAGES-2), barrier, prefetch the tile
 * STAGES-1 ahead, compute. All three are NVVM intrinsics of LLVM 19
 * (llvm.nvvm.cp.async.cg.shared.global.16.s, llvm.nvvm.ldmatrix.sync
 * .aligned.m8n8.x4[.trans].b16, llvm.nvvm.mma.m16n8k16.row.col.*).
 *
 * Shared-memory swizzle: a tile row of CPR 16-byte chunks stores chunk c at
 * c ^ ((row / RPL) % min(CPR, 8)), RPL = max(1, 8 / CPR) rows per 128-byte
 * line, so the 8 rows one ldmatrix phase reads hit 8 distinct 16-byte bank
 * groups (conflict-free) and cp.async writes stay 16-byte aligned.
 *
 * Other matmuls (f32, or 16-bit shapes the tensor-core path cannot take)
 * use an FMA GEMM: 256 threads, BM = 128 by BN = 128 (64 for N <= 64),
 * BK = 8, 8 x TN outputs per thread, f32 accumulation.
 *
 * Convolutional networks: conv2d, x [N,H,W,C] * w [KH,KW,C,O], is the same
 * GEMM as an implicit GEMM: C[M, O] is y [N,OH,OW,O] flat (M = N*OH*OW),
 * B[K, O] is w flat (K = KH*KW*C), and A[m, k] is gathered from x where a
 * tile is loaded, never written out: m -> (n, i, j), k -> (p, q, c), A =
 * x[n, i*sh - top + p*dh, j*sw - left + q*dw, c], 0 outside x (the same
 * zero fill as outside M and K). The tensor-core path needs C a multiple
 * of 8 (pad8's channels; then a 16-byte chunk of 8 k values is one tap's 8
 * consecutive channels, contiguous and aligned in x); any other conv2d
 * runs on the FMA GEMM with the same gather (float32: FMA, no TF32).
 *
 * Epilogue (both): the accumulators go to a shared f32 tile; then each
 * element is rounded to the matmul's dtype and the fused chain (bias,
 * activation, cast: cg_apply_chain, the CPU's rounding model) runs on it
 * before one coalesced store. A kernel that ends with a row softmax (rows
 * <= CG_GEMM_SOFTMAX_MAX_COLS wide; the block spans the row) keeps the
 * chain's values in the shared tile and finishes with one warp per row:
 * cg_nvptx_rowwise.c, the emitter of the standalone softmax kernel too.
 */
#include <string.h>

#include "codegen/nvptx/cg_nvptx.h"

#define B (e->b)

typedef struct gemm_cfg {
  bool mma;
  int bm, bn, bk, stages, threads;
  int wm, wn; /* mma: warps along M and N */
  int tm, tn; /* fma: outputs per thread along M and N */
  int pitch;  /* f32 elements per row of the epilogue tile */
  int64_t M_fixed, K, N;
  ir_dtype at, bt;
  const ir_node *conv; /* convolutional networks: the conv2d whose A is gathered, or NULL */
} gemm_cfg;

static int pow2_at_least(int64_t n, int lo) {
  int p = lo;
  while (p < n) p *= 2;
  return p;
}

/* The planner ends a contraction kernel with a row-wise op only for a
 * softmax the epilogue does (cg_plan.c). */
static bool ends_with_softmax(const cg_kernel *k) {
  return k->n_ops > 1 && ir_op_kernel(k->ops[k->n_ops - 1]->op) == IR_KERNEL_ROWWISE;
}

static gemm_cfg choose(const cg_kernel *k) {
  const ir_node *mm = k->ops[0], *a = mm->srcs[0], *b = mm->srcs[1];
  gemm_cfg c;
  memset(&c, 0, sizeof c);
  c.K = a->type.dims[a->type.rank - 1], c.N = b->type.dims[1]; /* general tensors: a [N, .., K] */
  c.at = a->type.dtype, c.bt = b->type.dtype;
  bool is16 = (c.at == DT_F16 || c.at == DT_BF16) && c.bt == c.at;
  c.mma = is16 && c.K % 8 == 0 && c.N % 8 == 0;
  if (mm->op == IR_OP_CONV2D) { /* convolutional networks: w [KH,KW,C,O] as B [KH*KW*C, O] */
    const int64_t *wd = b->type.dims;
    c.conv = mm, c.K = wd[0] * wd[1] * wd[2], c.N = wd[3];
    c.mma = is16 && wd[2] % 8 == 0 && c.N % 8 == 0; /* a chunk of 8 k: one tap's channels */
  }
  bool sm = ends_with_softmax(k);
  if (c.mma) {
    c.bm = 128, c.bk = 32, c.stages = 4, c.threads = 256;
    c.bn = sm ? pow2_at_least(c.N, 16) : c.N >= 128 ? 128 : c.N > 32 ? 64 : c.N > 16 ? 32 : 16;
    if (c.bn == 128) c.wm = 2, c.wn = 4;      /* warp tile 64 x 32 */
    else if (c.bn == 64) c.wm = 4, c.wn = 2;  /* 32 x 32 */
    else c.wm = 8, c.wn = 1;                  /* 16 x 32 or 16 x 16 */
  } else {
    c.bk = 8, c.threads = 256, c.tm = 8;
    c.tn = sm || c.N <= 64 ? 4 : 8;
    c.bm = 16 * c.tm, c.bn = 16 * c.tn;
  }
  if (sm) CASTOR_ASSERT(c.N <= c.bn);
  c.pitch = c.bn + 4;
  return c;
}

/* ---- shared helpers ---- */

static LLVMValueRef smem_f32(cg_nv_kernel *g, LLVMValueRef idx) {
  cg_emitter *e = g->c.e;
  return LLVMBuildGEP2(B, e->f32, g->smem, &idx, 1, "");
}

static LLVMValueRef to_global(cg_emitter *e, LLVMValueRef p) {
  return LLVMBuildAddrSpaceCast(B, p, LLVMPointerTypeInContext(e->ctx, 1), "");
}

/* A row of the shared tile as the row of the row-wise op that ends the
 * kernel (cg_nvptx_rowwise.c): the chain's values (`pre`), which the
 * epilogue left there; j is i32. */
typedef struct tile_row {
  cg_nv_row row;
  cg_nv_kernel *g;
  const ir_node *pre, *res;
  LLVMValueRef sbase; /* i32: the row's first element in the tile */
  LLVMValueRef gbase; /* i64: its first element in the result */
} tile_row;

static LLVMValueRef tile_load(cg_nv_row *row, LLVMValueRef j) {
  tile_row *t = (tile_row *)row;
  cg_emitter *e = t->g->c.e;
  return LLVMBuildLoad2(B, e->f32, smem_f32(t->g, LLVMBuildAdd(B, t->sbase, j, "")), t->pre->name);
}

static void tile_store(cg_nv_row *row, LLVMValueRef j, LLVMValueRef val) {
  tile_row *t = (tile_row *)row;
  cg_emitter *e = t->g->c.e;
  LLVMValueRef idx = LLVMBuildAdd(B, t->gbase, LLVMBuildZExt(B, j, e->i64, ""), "");
  cg_emit_store(e, t->res->type.dtype, val, cg_elem_ptr(&t->g->c, t->res, idx), 1);
}

/* The epilogue over the shared f32 tile (rows x bn, pitch) at m0, n0. */
static void emit_epilogue(cg_nv_kernel *g, const gemm_cfg *cf, LLVMValueRef tid, LLVMValueRef m0,
                          LLVMValueRef n0, LLVMValueRef M) {
  cg_emitter *e = g->c.e;
  const cg_kernel *k = g->c.k;
  const ir_node *mm = k->ops[0], *res = k->ops[k->n_ops - 1];
  bool sm = ends_with_softmax(k);
  int chain_end = sm ? k->n_ops - 1 : k->n_ops;
  const ir_node *pre = k->ops[chain_end - 1]; /* the value stored (or softmaxed) */
  LLVMValueRef N = cg_i64(e, cf->N);
  cg_nv_loop l = cg_nv_loop_begin(g, tid, cg_i32(e, cf->bm * cf->bn), cg_i32(e, cf->threads), "epi");
  LLVMValueRef r = LLVMBuildUDiv(B, l.iv, cg_i32(e, cf->bn), "r");
  LLVMValueRef cc = LLVMBuildURem(B, l.iv, cg_i32(e, cf->bn), "c");
  LLVMValueRef grow = LLVMBuildAdd(B, m0, LLVMBuildZExt(B, r, e->i64, ""), "grow");
  LLVMValueRef gcol = LLVMBuildAdd(B, n0, LLVMBuildZExt(B, cc, e->i64, ""), "gcol");
  LLVMValueRef ok = LLVMBuildAnd(B, LLVMBuildICmp(B, LLVMIntSLT, grow, M, ""),
                                 LLVMBuildICmp(B, LLVMIntSLT, gcol, N, ""), "");
  LLVMBasicBlockRef join = cg_nv_if(g, ok, "epi.in");
  LLVMValueRef sidx = LLVMBuildAdd(B, LLVMBuildMul(B, r, cg_i32(e, cf->pitch), ""), cc, "");
  LLVMValueRef v = LLVMBuildLoad2(B, e->f32, smem_f32(g, sidx), "acc");
  v = cg_emit_round_to(e, v, mm->type.dtype, mm->name);
  LLVMValueRef idx = LLVMBuildAdd(B, LLVMBuildMul(B, grow, N, ""), gcol, "");
  v = cg_apply_chain(&g->c, 1, chain_end, v, idx, gcol, 1, 1);
  if (sm) LLVMBuildStore(B, v, smem_f32(g, sidx));
  else cg_emit_store(e, pre->type.dtype, v, cg_elem_ptr(&g->c, pre, idx), 1);
  cg_nv_endif(g, join);
  cg_nv_loop_end(g, &l);
  if (!sm) return;

  /* the row-wise op: one warp per row of the tile (n0 == 0, bn >= N) */
  cg_nv_barrier(e);
  LLVMValueRef warp = LLVMBuildUDiv(B, tid, cg_i32(e, 32), "warp");
  LLVMValueRef lane = LLVMBuildURem(B, tid, cg_i32(e, 32), "lane");
  cg_nv_loop lr = cg_nv_loop_begin(g, warp, cg_i32(e, cf->bm), cg_i32(e, cf->threads / 32), "smrow");
  LLVMValueRef grow2 = LLVMBuildAdd(B, m0, LLVMBuildZExt(B, lr.iv, e->i64, ""), "grow");
  LLVMBasicBlockRef rjoin = cg_nv_if(g, LLVMBuildICmp(B, LLVMIntSLT, grow2, M, ""), "smrow.in");
  tile_row tr = {.row = {.n = cf->N, .lane = lane, .load = tile_load, .store = tile_store}, .g = g, .pre = pre,
                 .res = res, .sbase = LLVMBuildMul(B, lr.iv, cg_i32(e, cf->pitch), ""),
                 .gbase = LLVMBuildMul(B, grow2, N, "")};
  cg_nv_emit_rowwise(g, res, &tr.row);
  cg_nv_endif(g, rjoin);
  cg_nv_loop_end(g, &lr);
}

/* The element of A[grow, gcol] (i64 values) in a's buffer, and in *ok
 * whether it lies inside A (else the caller loads 0 from element 0): a
 * matmul's row-major A [M, K]; a conv2d's gathered x (convolutional
 * networks: the implicit GEMM's index map, see the header). */
static LLVMValueRef a_index(cg_emitter *e, const gemm_cfg *cf, LLVMValueRef grow, LLVMValueRef gcol, LLVMValueRef M,
                            LLVMValueRef *ok) {
  *ok = LLVMBuildAnd(B, LLVMBuildICmp(B, LLVMIntSLT, grow, M, ""), LLVMBuildICmp(B, LLVMIntSLT, gcol, cg_i64(e, cf->K), ""), "");
  if (!cf->conv) return LLVMBuildAdd(B, LLVMBuildMul(B, grow, cg_i64(e, cf->K), ""), gcol, "");
  const ir_node *cv = cf->conv;
  const int64_t *xd = cv->srcs[0]->type.dims, *wd = cv->srcs[1]->type.dims, *yd = cv->type.dims;
  const int64_t *st = cv->attr.strides.v, *dl = cv->attr.dilations.v, *pd = cv->attr.pads.v;
  int64_t H = xd[1], W = xd[2], C = xd[3], KW = wd[1], OH = yd[1], OW = yd[2];
  LLVMValueRef n = LLVMBuildUDiv(B, grow, cg_i64(e, OH * OW), "conv.n");
  LLVMValueRef pix = LLVMBuildURem(B, grow, cg_i64(e, OH * OW), "");
  LLVMValueRef i = LLVMBuildUDiv(B, pix, cg_i64(e, OW), "conv.i"), j = LLVMBuildURem(B, pix, cg_i64(e, OW), "conv.j");
  LLVMValueRef tap = LLVMBuildUDiv(B, gcol, cg_i64(e, C), ""), ch = LLVMBuildURem(B, gcol, cg_i64(e, C), "conv.c");
  LLVMValueRef p = LLVMBuildUDiv(B, tap, cg_i64(e, KW), "conv.p"), q = LLVMBuildURem(B, tap, cg_i64(e, KW), "conv.q");
  LLVMValueRef ih = LLVMBuildAdd(B, LLVMBuildSub(B, LLVMBuildMul(B, i, cg_i64(e, st[0]), ""), cg_i64(e, pd[0]), ""),
                                 LLVMBuildMul(B, p, cg_i64(e, dl[0]), ""), "conv.ih");
  LLVMValueRef iw = LLVMBuildAdd(B, LLVMBuildSub(B, LLVMBuildMul(B, j, cg_i64(e, st[1]), ""), cg_i64(e, pd[2]), ""),
                                 LLVMBuildMul(B, q, cg_i64(e, dl[1]), ""), "conv.iw");
  /* unsigned compares: a negative ih or iw is outside too */
  LLVMValueRef in = LLVMBuildAnd(B, LLVMBuildICmp(B, LLVMIntULT, ih, cg_i64(e, H), ""),
                                 LLVMBuildICmp(B, LLVMIntULT, iw, cg_i64(e, W), ""), "conv.inside");
  *ok = LLVMBuildAnd(B, *ok, in, "");
  LLVMValueRef r = LLVMBuildAdd(B, LLVMBuildMul(B, LLVMBuildAdd(B, LLVMBuildMul(B, n, cg_i64(e, H), ""), ih, ""), cg_i64(e, W), ""), iw, "");
  return LLVMBuildAdd(B, LLVMBuildMul(B, r, cg_i64(e, C), ""), ch, "conv.x");
}

/* ---- tensor cores ---- */

/* byte offset of chunk `chunk` of tile row `row` (i32 values) in a tile of
 * cpr 16-byte chunks per row, swizzled */
static LLVMValueRef swizzled(cg_emitter *e, LLVMValueRef row, LLVMValueRef chunk, int cpr) {
  int rpl = cpr >= 8 ? 1 : 8 / cpr, mod = cpr < 8 ? cpr : 8;
  LLVMValueRef x = LLVMBuildURem(B, LLVMBuildUDiv(B, row, cg_i32(e, rpl), ""), cg_i32(e, mod), "");
  LLVMValueRef pc = LLVMBuildXor(B, chunk, x, "");
  return LLVMBuildAdd(B, LLVMBuildMul(B, row, cg_i32(e, cpr * 16), ""), LLVMBuildMul(B, pc, cg_i32(e, 16), ""), "");
}

/* Issues the cp.async copies of k-tile kt (i32) into stage `stage` (i32). */
static void mma_load_tile(cg_nv_kernel *g, const gemm_cfg *cf, LLVMValueRef tid, LLVMValueRef kt,
                          LLVMValueRef stage, LLVMValueRef m0, LLVMValueRef n0, LLVMValueRef M,
                          LLVMValueRef a_g, LLVMValueRef b_g) {
  cg_emitter *e = g->c.e;
  LLVMTypeRef i8 = LLVMInt8TypeInContext(e->ctx), i16 = LLVMInt16TypeInContext(e->ctx);
  int a_bytes = cf->bm * cf->bk * 2, stage_bytes = a_bytes + cf->bk * cf->bn * 2;
  LLVMValueRef sbase = LLVMBuildMul(B, stage, cg_i32(e, stage_bytes), "stage.base");
  LLVMValueRef k0 = LLVMBuildZExt(B, LLVMBuildMul(B, kt, cg_i32(e, cf->bk), ""), e->i64, "k0");
  for (int op = 0; op < 2; op++) {
    int rows = op == 0 ? cf->bm : cf->bk, cpr = (op == 0 ? cf->bk : cf->bn) / 8, total = rows * cpr;
    for (int i = 0; i * cf->threads < total; i++) {
      LLVMValueRef id = LLVMBuildAdd(B, tid, cg_i32(e, i * cf->threads), "");
      LLVMBasicBlockRef join = NULL;
      if ((i + 1) * cf->threads > total) join = cg_nv_if(g, LLVMBuildICmp(B, LLVMIntULT, id, cg_i32(e, total), ""), "ld");
      LLVMValueRef r = LLVMBuildUDiv(B, id, cg_i32(e, cpr), ""), ch = LLVMBuildURem(B, id, cg_i32(e, cpr), "");
      LLVMValueRef r64 = LLVMBuildZExt(B, r, e->i64, ""), c64 = LLVMBuildZExt(B, LLVMBuildMul(B, ch, cg_i32(e, 8), ""), e->i64, "");
      LLVMValueRef grow, gcol, ok, gidx;
      if (op == 0) { /* A[m0 + r, k0 + 8 ch] (a conv2d's: 8 channels of one tap of x) */
        grow = LLVMBuildAdd(B, m0, r64, ""), gcol = LLVMBuildAdd(B, k0, c64, "");
        gidx = a_index(e, cf, grow, gcol, M, &ok);
      } else { /* B[k0 + r, n0 + 8 ch] */
        grow = LLVMBuildAdd(B, k0, r64, ""), gcol = LLVMBuildAdd(B, n0, c64, "");
        ok = LLVMBuildAnd(B, LLVMBuildICmp(B, LLVMIntSLT, grow, cg_i64(e, cf->K), ""),
                          LLVMBuildICmp(B, LLVMIntSLT, gcol, cg_i64(e, cf->N), ""), "");
        gidx = LLVMBuildAdd(B, LLVMBuildMul(B, grow, cg_i64(e, cf->N), ""), gcol, "");
      }
      gidx = LLVMBuildSelect(B, ok, gidx, cg_i64(e, 0), "");
      LLVMValueRef src = LLVMBuildGEP2(B, i16, op == 0 ? a_g : b_g, &gidx, 1, "");
      LLVMValueRef off = LLVMBuildAdd(B, sbase, swizzled(e, r, ch, cpr), "");
      if (op == 1) off = LLVMBuildAdd(B, off, cg_i32(e, a_bytes), "");
      LLVMValueRef dst = LLVMBuildGEP2(B, i8, g->smem, &off, 1, "");
      LLVMValueRef args[] = {dst, src, LLVMBuildSelect(B, ok, cg_i32(e, 16), cg_i32(e, 0), "")};
      cg_nv_intrinsic(e, "llvm.nvvm.cp.async.cg.shared.global.16.s", NULL, 0, args, 3, "");
      if (join) cg_nv_endif(g, join);
    }
  }
}

static void commit(cg_emitter *e) { cg_nv_intrinsic(e, "llvm.nvvm.cp.async.commit.group", NULL, 0, NULL, 0, ""); }
static void wait_group(cg_emitter *e, int n) {
  LLVMValueRef a = cg_i32(e, n);
  cg_nv_intrinsic(e, "llvm.nvvm.cp.async.wait.group", NULL, 0, &a, 1, "");
}

enum { MAX_MT = 4, MAX_NT = 4 };

static void emit_mma_gemm(cg_nv_kernel *g, const gemm_cfg *cf, LLVMValueRef tid, LLVMValueRef m0,
                          LLVMValueRef n0, LLVMValueRef M, LLVMValueRef a_g, LLVMValueRef b_g) {
  cg_emitter *e = g->c.e;
  int MT = cf->bm / cf->wm / 16, NT = cf->bn / cf->wn / 8;
  CASTOR_ASSERT(MT <= MAX_MT && NT <= MAX_NT && NT % 2 == 0);
  int a_bytes = cf->bm * cf->bk * 2, stage_bytes = a_bytes + cf->bk * cf->bn * 2;
  int ktiles = (int)((cf->K + cf->bk - 1) / cf->bk);
  int acpr = cf->bk / 8, bcpr = cf->bn / 8;
  bool bf = cf->at == DT_BF16;
  LLVMTypeRef f4 = LLVMArrayType(e->f32, (unsigned)(MT * NT * 4));
  LLVMValueRef acc = cg_entry_alloca(&g->c, f4, "acc");
  for (int i = 0; i < MT * NT * 4; i++)
    LLVMBuildStore(B, cg_const(e, e->f32, 0.0), LLVMBuildGEP2(B, f4, acc, (LLVMValueRef[]){cg_i32(e, 0), cg_i32(e, i)}, 2, ""));
  LLVMValueRef warp = LLVMBuildUDiv(B, tid, cg_i32(e, 32), "warp"), lane = LLVMBuildURem(B, tid, cg_i32(e, 32), "lane");
  LLVMValueRef wm0 = LLVMBuildMul(B, LLVMBuildUDiv(B, warp, cg_i32(e, cf->wn), ""), cg_i32(e, cf->bm / cf->wm), "wm0");
  LLVMValueRef wn0 = LLVMBuildMul(B, LLVMBuildURem(B, warp, cg_i32(e, cf->wn), ""), cg_i32(e, cf->bn / cf->wn), "wn0");
  LLVMValueRef l15 = LLVMBuildAnd(B, lane, cg_i32(e, 15), ""), l4 = LLVMBuildLShr(B, lane, cg_i32(e, 4), "");
  /* per-lane ldmatrix offsets inside a stage, for each k16 step */
  LLVMValueRef aoff[MAX_MT][4], boff[MAX_NT / 2][4];
  for (int kk = 0; kk < cf->bk / 16; kk++) {
    for (int mt = 0; mt < MT; mt++) {
      LLVMValueRef row = LLVMBuildAdd(B, wm0, LLVMBuildAdd(B, l15, cg_i32(e, mt * 16), ""), "");
      aoff[mt][kk] = swizzled(e, row, LLVMBuildAdd(B, l4, cg_i32(e, kk * 2), ""), acpr);
    }
    for (int np = 0; np < NT / 2; np++) {
      LLVMValueRef row = LLVMBuildAdd(B, l15, cg_i32(e, kk * 16), "");
      LLVMValueRef ch = LLVMBuildAdd(B, LLVMBuildUDiv(B, wn0, cg_i32(e, 8), ""), LLVMBuildAdd(B, l4, cg_i32(e, np * 2), ""), "");
      boff[np][kk] = LLVMBuildAdd(B, swizzled(e, row, ch, bcpr), cg_i32(e, a_bytes), "");
    }
  }
  /* prologue: stages 0 .. STAGES-2 */
  for (int s = 0; s < cf->stages - 1; s++) {
    if (s < ktiles) mma_load_tile(g, cf, tid, cg_i32(e, s), cg_i32(e, s), m0, n0, M, a_g, b_g);
    commit(e);
  }
  cg_nv_loop lk = cg_nv_loop_begin(g, cg_i32(e, 0), cg_i32(e, ktiles), cg_i32(e, 1), "kt");
  wait_group(e, cf->stages - 2);
  cg_nv_barrier(e);
  LLVMValueRef nk = LLVMBuildAdd(B, lk.iv, cg_i32(e, cf->stages - 1), "next.kt");
  LLVMBasicBlockRef join = cg_nv_if(g, LLVMBuildICmp(B, LLVMIntSLT, nk, cg_i32(e, ktiles), ""), "prefetch");
  mma_load_tile(g, cf, tid, nk, LLVMBuildURem(B, nk, cg_i32(e, cf->stages), ""), m0, n0, M, a_g, b_g);
  cg_nv_endif(g, join);
  commit(e);
  LLVMValueRef sbase = LLVMBuildMul(B, LLVMBuildURem(B, lk.iv, cg_i32(e, cf->stages), ""), cg_i32(e, stage_bytes), "");
  LLVMTypeRef h2 = LLVMVectorType(e->half, 2);
  for (int kk = 0; kk < cf->bk / 16; kk++) {
    LLVMValueRef afr[MAX_MT][4], bfr[MAX_NT][2];
    for (int mt = 0; mt < MT; mt++) {
      LLVMValueRef p = cg_nv_smem_at(g, LLVMBuildAdd(B, sbase, aoff[mt][kk], ""));
      LLVMValueRef r = cg_nv_intrinsic(e, "llvm.nvvm.ldmatrix.sync.aligned.m8n8.x4.b16", NULL, 0, &p, 1, "a.frag");
      for (int j = 0; j < 4; j++) afr[mt][j] = LLVMBuildExtractValue(B, r, (unsigned)j, "");
    }
    for (int np = 0; np < NT / 2; np++) {
      LLVMValueRef p = cg_nv_smem_at(g, LLVMBuildAdd(B, sbase, boff[np][kk], ""));
      LLVMValueRef r = cg_nv_intrinsic(e, "llvm.nvvm.ldmatrix.sync.aligned.m8n8.x4.trans.b16", NULL, 0, &p, 1, "b.frag");
      bfr[2 * np][0] = LLVMBuildExtractValue(B, r, 0, "");
      bfr[2 * np][1] = LLVMBuildExtractValue(B, r, 1, "");
      bfr[2 * np + 1][0] = LLVMBuildExtractValue(B, r, 2, "");
      bfr[2 * np + 1][1] = LLVMBuildExtractValue(B, r, 3, "");
    }
    for (int mt = 0; mt < MT; mt++)
      for (int nt = 0; nt < NT; nt++) {
        LLVMValueRef args[10], cp[4];
        for (int j = 0; j < 4; j++) args[j] = bf ? afr[mt][j] : LLVMBuildBitCast(B, afr[mt][j], h2, "");
        for (int j = 0; j < 2; j++) args[4 + j] = bf ? bfr[nt][j] : LLVMBuildBitCast(B, bfr[nt][j], h2, "");
        for (int j = 0; j < 4; j++) {
          cp[j] = LLVMBuildGEP2(B, f4, acc, (LLVMValueRef[]){cg_i32(e, 0), cg_i32(e, (mt * NT + nt) * 4 + j)}, 2, "");
          args[6 + j] = LLVMBuildLoad2(B, e->f32, cp[j], "");
        }
        LLVMValueRef d = cg_nv_intrinsic(e, bf ? "llvm.nvvm.mma.m16n8k16.row.col.bf16" : "llvm.nvvm.mma.m16n8k16.row.col.f32.f32",
                                         NULL, 0, args, 10, "mma");
        for (int j = 0; j < 4; j++) LLVMBuildStore(B, LLVMBuildExtractValue(B, d, (unsigned)j, ""), cp[j]);
      }
  }
  cg_nv_loop_end(g, &lk);
  wait_group(e, 0);
  cg_nv_barrier(e);
  /* accumulators to the shared f32 tile: c0,c1 at (g, 2t..2t+1), c2,c3 at (g+8, ...) */
  LLVMValueRef gq = LLVMBuildLShr(B, lane, cg_i32(e, 2), "g"), tq = LLVMBuildAnd(B, lane, cg_i32(e, 3), "t");
  for (int mt = 0; mt < MT; mt++)
    for (int nt = 0; nt < NT; nt++)
      for (int j = 0; j < 4; j++) {
        LLVMValueRef row = LLVMBuildAdd(B, wm0, LLVMBuildAdd(B, gq, cg_i32(e, mt * 16 + (j >= 2 ? 8 : 0)), ""), "");
        LLVMValueRef col = LLVMBuildAdd(B, wn0, LLVMBuildAdd(B, LLVMBuildMul(B, tq, cg_i32(e, 2), ""), cg_i32(e, nt * 8 + (j & 1)), ""), "");
        LLVMValueRef v = LLVMBuildLoad2(B, e->f32, LLVMBuildGEP2(B, f4, acc, (LLVMValueRef[]){cg_i32(e, 0), cg_i32(e, (mt * NT + nt) * 4 + j)}, 2, ""), "");
        LLVMBuildStore(B, v, smem_f32(g, LLVMBuildAdd(B, LLVMBuildMul(B, row, cg_i32(e, cf->pitch), ""), col, "")));
      }
  cg_nv_barrier(e);
}

/* ---- FMA ---- */

static void emit_fma_gemm(cg_nv_kernel *g, const gemm_cfg *cf, LLVMValueRef tid, LLVMValueRef m0,
                          LLVMValueRef n0, LLVMValueRef M) {
  cg_emitter *e = g->c.e;
  const ir_node *mm = g->c.k->ops[0], *a = mm->srcs[0], *b = mm->srcs[1];
  int tx_n = cf->bn / cf->tn, ty_n = cf->bm / cf->tm;
  int as_elems = cf->bk * cf->bm; /* As[bk][bm], then Bs[bk][bn] */
  LLVMTypeRef accty = LLVMArrayType(e->f32, (unsigned)(cf->tm * cf->tn));
  LLVMValueRef acc = cg_entry_alloca(&g->c, accty, "acc");
  for (int i = 0; i < cf->tm * cf->tn; i++)
    LLVMBuildStore(B, cg_const(e, e->f32, 0.0), LLVMBuildGEP2(B, accty, acc, (LLVMValueRef[]){cg_i32(e, 0), cg_i32(e, i)}, 2, ""));
  LLVMValueRef tx = LLVMBuildURem(B, tid, cg_i32(e, tx_n), "tx"), ty = LLVMBuildUDiv(B, tid, cg_i32(e, tx_n), "ty");
  int ktiles = (int)((cf->K + cf->bk - 1) / cf->bk);
  cg_nv_loop lk = cg_nv_loop_begin(g, cg_i32(e, 0), cg_i32(e, ktiles), cg_i32(e, 1), "kt");
  LLVMValueRef k0 = LLVMBuildZExt(B, LLVMBuildMul(B, lk.iv, cg_i32(e, cf->bk), ""), e->i64, "k0");
  for (int op = 0; op < 2; op++) {
    int total = op == 0 ? cf->bm * cf->bk : cf->bk * cf->bn;
    for (int i = 0; i * cf->threads < total; i++) {
      LLVMValueRef id = LLVMBuildAdd(B, tid, cg_i32(e, i * cf->threads), "");
      LLVMValueRef r, c, grow, gcol, ok, gidx, sidx;
      if (op == 0) { /* As[kk][r] = A[m0 + r, k0 + kk] (a conv2d's gathered from x) */
        r = LLVMBuildUDiv(B, id, cg_i32(e, cf->bk), ""), c = LLVMBuildURem(B, id, cg_i32(e, cf->bk), "");
        grow = LLVMBuildAdd(B, m0, LLVMBuildZExt(B, r, e->i64, ""), ""), gcol = LLVMBuildAdd(B, k0, LLVMBuildZExt(B, c, e->i64, ""), "");
        gidx = a_index(e, cf, grow, gcol, M, &ok);
        sidx = LLVMBuildAdd(B, LLVMBuildMul(B, c, cg_i32(e, cf->bm), ""), r, "");
      } else { /* Bs[kk][c] = B[k0 + kk, n0 + c] */
        r = LLVMBuildUDiv(B, id, cg_i32(e, cf->bn), ""), c = LLVMBuildURem(B, id, cg_i32(e, cf->bn), "");
        grow = LLVMBuildAdd(B, k0, LLVMBuildZExt(B, r, e->i64, ""), ""), gcol = LLVMBuildAdd(B, n0, LLVMBuildZExt(B, c, e->i64, ""), "");
        ok = LLVMBuildAnd(B, LLVMBuildICmp(B, LLVMIntSLT, grow, cg_i64(e, cf->K), ""), LLVMBuildICmp(B, LLVMIntSLT, gcol, cg_i64(e, cf->N), ""), "");
        gidx = LLVMBuildAdd(B, LLVMBuildMul(B, grow, cg_i64(e, cf->N), ""), gcol, "");
        sidx = LLVMBuildAdd(B, cg_i32(e, as_elems), LLVMBuildAdd(B, LLVMBuildMul(B, r, cg_i32(e, cf->bn), ""), c, ""), "");
      }
      const ir_node *src = op == 0 ? a : b;
      gidx = LLVMBuildSelect(B, ok, gidx, cg_i64(e, 0), "");
      LLVMValueRef v = cg_emit_load(e, src->type.dtype, cg_elem_ptr(&g->c, src, gidx), 1, src->name);
      v = LLVMBuildSelect(B, ok, v, cg_const(e, e->f32, 0.0), "");
      LLVMBuildStore(B, v, smem_f32(g, sidx));
    }
  }
  cg_nv_barrier(e);
  for (int kk = 0; kk < cf->bk; kk++) {
    LLVMValueRef av[8], bv[8];
    for (int i = 0; i < cf->tm; i++)
      av[i] = LLVMBuildLoad2(B, e->f32, smem_f32(g, LLVMBuildAdd(B, ty, cg_i32(e, kk * cf->bm + ty_n * i), "")), "a");
    for (int j = 0; j < cf->tn; j++)
      bv[j] = LLVMBuildLoad2(B, e->f32, smem_f32(g, LLVMBuildAdd(B, tx, cg_i32(e, as_elems + kk * cf->bn + tx_n * j), "")), "b");
    for (int i = 0; i < cf->tm; i++)
      for (int j = 0; j < cf->tn; j++) {
        LLVMValueRef p = LLVMBuildGEP2(B, accty, acc, (LLVMValueRef[]){cg_i32(e, 0), cg_i32(e, i * cf->tn + j)}, 2, "");
        LLVMBuildStore(B, cg_fmuladd(e, av[i], bv[j], LLVMBuildLoad2(B, e->f32, p, "")), p);
      }
  }
  cg_nv_barrier(e);
  cg_nv_loop_end(g, &lk);
  for (int i = 0; i < cf->tm; i++)
    for (int j = 0; j < cf->tn; j++) {
      LLVMValueRef row = LLVMBuildAdd(B, ty, cg_i32(e, ty_n * i), ""), col = LLVMBuildAdd(B, tx, cg_i32(e, tx_n * j), "");
      LLVMValueRef v = LLVMBuildLoad2(B, e->f32, LLVMBuildGEP2(B, accty, acc, (LLVMValueRef[]){cg_i32(e, 0), cg_i32(e, i * cf->tn + j)}, 2, ""), "");
      LLVMBuildStore(B, v, smem_f32(g, LLVMBuildAdd(B, LLVMBuildMul(B, row, cg_i32(e, cf->pitch), ""), col, "")));
    }
  cg_nv_barrier(e);
}

void cg_nv_gemm_emit(cg_nv_kernel *g) {
  cg_emitter *e = g->c.e;
  const cg_kernel *k = g->c.k;
  const ir_node *mm = k->ops[0];
  gemm_cfg cf = choose(k);
  LLVMValueRef tid = cg_nv_sreg(e, "tid.x");
  LLVMValueRef m0 = LLVMBuildMul(B, LLVMBuildZExt(B, cg_nv_sreg(e, "ctaid.x"), e->i64, ""), cg_i64(e, cf.bm), "m0");
  LLVMValueRef n0 = LLVMBuildMul(B, LLVMBuildZExt(B, cg_nv_sreg(e, "ctaid.y"), e->i64, ""), cg_i64(e, cf.bn), "n0");
  /* general tensors: a [N, .., K] is the flat matrix [N*.., K], `items`
   * GEMM rows per launch row */
  const ir_type *at = &mm->srcs[0]->type;
  int64_t items = 1;
  for (int r = 1; r < at->rank - 1; r++) items *= at->dims[r];
  if (cf.conv) items = mm->type.dims[1] * mm->type.dims[2]; /* convolutional networks: OH*OW rows per image */
  LLVMValueRef M = ir_type_is_batched(at) ? g->batch : cg_i64(e, at->dims[0]);
  if (items > 1) M = LLVMBuildMul(B, M, cg_i64(e, items), "M");
  int64_t pipe;
  if (cf.mma) {
    emit_mma_gemm(g, &cf, tid, m0, n0, M, to_global(e, g->c.base[mm->srcs[0]->id]), to_global(e, g->c.base[mm->srcs[1]->id]));
    pipe = (int64_t)cf.stages * (cf.bm * cf.bk + cf.bk * cf.bn) * 2;
  } else {
    emit_fma_gemm(g, &cf, tid, m0, n0, M);
    pipe = (int64_t)(cf.bm + cf.bn) * cf.bk * 4;
  }
  emit_epilogue(g, &cf, tid, m0, n0, M);
  int64_t stage = (int64_t)cf.bm * cf.pitch * 4;
  rt_cuda_launch *l = g->launch;
  l->block = cf.threads;
  l->shared_bytes = (int)(pipe > stage ? pipe : stage);
  l->units_per_row = items, l->units_per_block = cf.bm, l->max_grid_x = 0;
  l->grid_y = (int)((cf.N + cf.bn - 1) / cf.bn);
}
