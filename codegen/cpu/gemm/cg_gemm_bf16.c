/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cg_gemm_bf16.c: the AVX512-BF16 micro-kernel family (cg_gemm_bf16.h has
 * the K-pair layout): the vdpbf16ps k loop, the packing of A and B into
 * K pairs at run time (LLVM IR), and of a constant B at compile time (C).
 *
 * Determinism: each accumulator lane is one chain of vdpbf16ps over the
 * pairs in order, spilled exactly to the f32 C tile at the fixed K-block
 * boundaries (cg_gemm.c); nothing depends on the tile a thread gets, so
 * results are bit-identical for any thread count.
 */
#include <string.h>

#include "codegen/cpu/gemm/cg_gemm_bf16.h"

#define B (e->b)

static LLVMValueRef gep(cg_emitter *e, LLVMTypeRef ty, LLVMValueRef p, LLVMValueRef idx) {
  return LLVMBuildGEP2(B, ty, p, &idx, 1, "");
}
static LLVMValueRef add(cg_emitter *e, LLVMValueRef a, LLVMValueRef b) { return LLVMBuildAdd(B, a, b, ""); }
static LLVMValueRef mul(cg_emitter *e, LLVMValueRef a, int64_t b) { return LLVMBuildMul(B, a, cg_i64(e, b), ""); }

static LLVMTypeRef i16(cg_emitter *e) { return LLVMInt16TypeInContext(e->ctx); }

static LLVMValueRef load(cg_emitter *e, LLVMTypeRef ty, LLVMValueRef p, unsigned align, const char *name) {
  LLVMValueRef v = LLVMBuildLoad2(B, ty, p, name);
  LLVMSetAlignment(v, align);
  return v;
}

static void store(cg_emitter *e, LLVMValueRef v, LLVMValueRef p, unsigned align) {
  LLVMSetAlignment(LLVMBuildStore(B, v, p), align);
}

/* ---- the k loop ---- */

static LLVMValueRef dpbf16ps(cg_emitter *e, LLVMValueRef acc, LLVMValueRef a, LLVMValueRef b) {
  static const char name[] = "llvm.x86.avx512bf16.dpbf16ps.512";
  unsigned id = LLVMLookupIntrinsicID(name, sizeof name - 1);
  LLVMValueRef f = LLVMGetIntrinsicDeclaration(e->mod, id, NULL, 0);
  LLVMValueRef args[] = {acc, a, b};
  return LLVMBuildCall2(B, LLVMGlobalGetValueType(f), f, args, 3, "");
}

LLVMValueRef cg_gemm_bf16_dp(cg_emitter *e, LLVMValueRef acc, LLVMValueRef a, LLVMValueRef b) {
  return dpbf16ps(e, acc, a, b);
}

void cg_gemm_bf16_kloop(cg_kctx *c, const cg_bf16_tile *t) {
  cg_emitter *e = c->e;
  LLVMTypeRef vt = LLVMVectorType(e->f32, CG_BF16_LANES);
  LLVMTypeRef bvt = LLVMVectorType(e->bf16, CG_BF16_VEC);
  LLVMTypeRef ivt = LLVMVectorType(e->i32, CG_BF16_LANES);
  int nvec = t->nvp * t->npan;
  CASTOR_ASSERT(t->mr <= 14 && nvec <= 16);
  cg_loop lj = cg_loop_begin(c, cg_i64(e, 0), t->kp, 1, "kpair");
  LLVMValueRef brow = gep(e, i16(e), t->b, LLVMBuildMul(B, lj.iv, t->b_pair, ""));
  LLVMValueRef bv[16];
  for (int q = 0; q < t->npan; q++)
    for (int v = 0; v < t->nvp; v++) {
      LLVMValueRef off = add(e, LLVMBuildMul(B, t->b_panel, cg_i64(e, q), ""), cg_i64(e, (int64_t)v * CG_BF16_VEC));
      bv[q * t->nvp + v] = load(e, bvt, gep(e, i16(e), brow, off), 4, "b.pairs");
    }
  LLVMValueRef arow = gep(e, e->i32, t->a, mul(e, lj.iv, t->a_pair));
  for (int r = 0; r < t->mr; r++) {
    LLVMValueRef a = load(e, e->i32, gep(e, e->i32, arow, cg_i64(e, r * t->a_row)), 4, "a.pair");
    LLVMValueRef splat = LLVMBuildInsertElement(B, LLVMGetUndef(ivt), a, cg_i64(e, 0), "");
    splat = LLVMBuildShuffleVector(B, splat, LLVMGetUndef(ivt), LLVMConstNull(ivt), "");
    LLVMValueRef as = LLVMBuildBitCast(B, splat, bvt, "a.bcast");
    for (int v = 0; v < nvec; v++) {
      LLVMValueRef acc = t->acc[r * 16 + v];
      LLVMBuildStore(B, dpbf16ps(e, LLVMBuildLoad2(B, vt, acc, ""), as, bv[v]), acc);
    }
  }
  cg_loop_end(c, &lj);
}

/* ---- packing at run time ---- */

/* Interleaves two <n x i16> into <2n x i16>: lo[0], hi[0], lo[1], ... */
static LLVMValueRef interleave(cg_emitter *e, LLVMValueRef lo, LLVMValueRef hi, int n) {
  LLVMValueRef mask[2 * CG_BF16_LANES];
  for (int i = 0; i < n; i++) {
    mask[2 * i] = LLVMConstInt(e->i32, (unsigned long long)i, 0);
    mask[2 * i + 1] = LLVMConstInt(e->i32, (unsigned long long)(n + i), 0);
  }
  return LLVMBuildShuffleVector(B, lo, hi, LLVMConstVector(mask, (unsigned)(2 * n)), "pairs");
}

LLVMValueRef cg_gemm_bf16_pair_row(cg_emitter *e, LLVMValueRef lo, LLVMValueRef hi) {
  return LLVMBuildBitCast(B, interleave(e, lo, hi, CG_BF16_LANES), LLVMVectorType(e->bf16, CG_BF16_VEC), "w.pairs");
}

/* The first `valid` (i64, may be <= 0 or >= 16) of 16 bf16 at p, the rest
 * 0, without touching memory past them (llvm.masked.load). */
static LLVMValueRef load16_part(cg_emitter *e, LLVMValueRef p, LLVMValueRef valid) {
  LLVMTypeRef vt = LLVMVectorType(i16(e), CG_BF16_LANES), i64v = LLVMVectorType(e->i64, CG_BF16_LANES);
  LLVMValueRef lane[CG_BF16_LANES];
  for (int i = 0; i < CG_BF16_LANES; i++) lane[i] = LLVMConstInt(e->i64, (unsigned long long)i, 0);
  LLVMValueRef vs = LLVMBuildInsertElement(B, LLVMGetUndef(i64v), valid, cg_i64(e, 0), "");
  vs = LLVMBuildShuffleVector(B, vs, LLVMGetUndef(i64v), LLVMConstNull(LLVMVectorType(e->i32, CG_BF16_LANES)), "");
  LLVMValueRef m = LLVMBuildICmp(B, LLVMIntSLT, LLVMConstVector(lane, CG_BF16_LANES), vs, "mask");
  static const char name[] = "llvm.masked.load";
  LLVMTypeRef tys[] = {vt, e->ptr};
  LLVMValueRef f = LLVMGetIntrinsicDeclaration(e->mod, LLVMLookupIntrinsicID(name, sizeof name - 1), tys, 2);
  LLVMValueRef args[] = {p, LLVMConstInt(e->i32, 2, 0), m, LLVMConstNull(vt)};
  return LLVMBuildCall2(B, LLVMGlobalGetValueType(f), f, args, 4, "");
}

void cg_gemm_bf16_pack_a(cg_kctx *c, LLVMValueRef src, int64_t ld, bool a_trans, LLVMValueRef m,
                         LLVMValueRef k0, LLVMValueRef kk, LLVMValueRef dst, int64_t lda) {
  cg_emitter *e = c->e;
  LLVMTypeRef h = i16(e);
  if (a_trans) { /* pair row j: A's rows k0 + 2j and k0 + 2j + 1 (the second may be past kk: zeros) */
    LLVMValueRef kp = LLVMBuildLShr(B, add(e, kk, cg_i64(e, 1)), cg_i64(e, 1), "kp");
    cg_loop lj = cg_loop_begin(c, cg_i64(e, 0), kp, 1, "packa.pair");
    LLVMValueRef k = add(e, k0, mul(e, lj.iv, 2));
    LLVMValueRef has1 = LLVMBuildICmp(B, LLVMIntSLT, add(e, mul(e, lj.iv, 2), cg_i64(e, 1)), kk, "has.odd");
    LLVMValueRef r0 = gep(e, h, src, mul(e, k, ld));
    LLVMValueRef r1 = LLVMBuildSelect(B, has1, gep(e, h, r0, cg_i64(e, ld)), r0, ""); /* never past kk */
    LLVMValueRef d = gep(e, h, dst, mul(e, lj.iv, 2 * lda));
    LLVMTypeRef vt = LLVMVectorType(h, CG_BF16_LANES);
    cg_loop li = cg_loop_begin(c, cg_i64(e, 0), m, CG_BF16_LANES, "packa.i");
    LLVMValueRef lo = load(e, vt, gep(e, h, r0, li.iv), 2, "");
    LLVMValueRef hi = LLVMBuildSelect(B, has1, load(e, vt, gep(e, h, r1, li.iv), 2, ""), LLVMConstNull(vt), "");
    store(e, interleave(e, lo, hi, CG_BF16_LANES), gep(e, h, d, mul(e, li.iv, 2)), 4);
    cg_loop_end(c, &li);
    cg_loop lt = cg_loop_begin(c, li.iv, m, 1, "packa.i.tail");
    LLVMValueRef slo = load(e, h, gep(e, h, r0, lt.iv), 2, "");
    LLVMValueRef shi = LLVMBuildSelect(B, has1, load(e, h, gep(e, h, r1, lt.iv), 2, ""), LLVMConstInt(h, 0, 0), "");
    LLVMValueRef dp = gep(e, h, d, mul(e, lt.iv, 2));
    store(e, slo, dp, 2);
    store(e, shi, gep(e, h, dp, cg_i64(e, 1)), 2);
    cg_loop_end(c, &lt);
    cg_loop_end(c, &lj);
    return;
  }
  /* row-major: row r's kk values copied, then a 0 after them (the odd
   * pair's high half; past an even kk it is never read) */
  LLVMTypeRef vt = LLVMVectorType(h, CG_BF16_VEC);
  cg_loop lr = cg_loop_begin(c, cg_i64(e, 0), m, 1, "packa.row");
  LLVMValueRef s = gep(e, h, src, add(e, mul(e, lr.iv, ld), k0));
  LLVMValueRef d = gep(e, h, dst, mul(e, lr.iv, 2 * lda));
  cg_loop lk = cg_loop_begin(c, cg_i64(e, 0), kk, CG_BF16_VEC, "packa.k");
  store(e, load(e, vt, gep(e, h, s, lk.iv), 2, ""), gep(e, h, d, lk.iv), 4);
  cg_loop_end(c, &lk);
  cg_loop lt = cg_loop_begin(c, lk.iv, kk, 1, "packa.k.tail");
  store(e, load(e, h, gep(e, h, s, lt.iv), 2, ""), gep(e, h, d, lt.iv), 2);
  cg_loop_end(c, &lt);
  store(e, LLVMConstInt(h, 0, 0), gep(e, h, d, kk), 2);
  cg_loop_end(c, &lr);
}

void cg_gemm_bf16_pack_b(cg_kctx *c, LLVMValueRef src, bool src_nk, int64_t K, int64_t Nc, int nr,
                         LLVMValueRef dst, LLVMValueRef p0, LLVMValueRef p1, LLVMValueRef k0, LLVMValueRef kk) {
  cg_emitter *e = c->e;
  LLVMTypeRef h = i16(e);
  CASTOR_ASSERT(nr % CG_BF16_LANES == 0);
  LLVMValueRef kp = LLVMBuildLShr(B, add(e, kk, cg_i64(e, 1)), cg_i64(e, 1), "kp");
  cg_loop lq = cg_loop_begin(c, p0, p1, 1, "packb.panel");
  LLVMValueRef pdst = gep(e, h, dst, LLVMBuildMul(B, LLVMBuildSub(B, lq.iv, p0, ""), mul(e, kp, 2 * nr), ""));
  LLVMValueRef col0 = mul(e, lq.iv, nr);
  if (!src_nk) { /* [K, Nc]: pair row j interleaves rows k0 + 2j and k0 + 2j + 1, 16 columns at a time */
    cg_loop lj = cg_loop_begin(c, cg_i64(e, 0), kp, 1, "packb.pair");
    LLVMValueRef j2 = mul(e, lj.iv, 2);
    LLVMValueRef has1 = LLVMBuildICmp(B, LLVMIntSLT, add(e, j2, cg_i64(e, 1)), kk, "has.odd");
    LLVMValueRef r0 = gep(e, h, src, add(e, mul(e, add(e, k0, j2), Nc), col0));
    LLVMValueRef r1 = gep(e, h, r0, cg_i64(e, Nc));
    LLVMValueRef drow = gep(e, h, pdst, mul(e, lj.iv, 2 * nr));
    for (int v = 0; v < nr / CG_BF16_LANES; v++) {
      LLVMValueRef left = LLVMBuildSub(B, cg_i64(e, Nc), add(e, col0, cg_i64(e, v * CG_BF16_LANES)), "");
      LLVMValueRef off = cg_i64(e, v * CG_BF16_LANES);
      LLVMValueRef lo = load16_part(e, gep(e, h, r0, off), left);
      LLVMValueRef hi = load16_part(e, gep(e, h, r1, off), LLVMBuildSelect(B, has1, left, cg_i64(e, 0), ""));
      store(e, interleave(e, lo, hi, CG_BF16_LANES), gep(e, h, drow, cg_i64(e, v * CG_BF16_VEC)), 4);
    }
    cg_loop_end(c, &lj);
  } else { /* [Nc, K]: column n is B's row n, whose k pairs are adjacent: one i32 each */
    cg_loop ln = cg_loop_begin(c, cg_i64(e, 0), cg_i64(e, nr), 1, "packb.col");
    LLVMValueRef n = add(e, col0, ln.iv);
    LLVMValueRef dcol = gep(e, e->i32, pdst, ln.iv); /* pair j at dcol[j nr] (i32) */
    LLVMBasicBlockRef in = LLVMAppendBasicBlockInContext(e->ctx, c->fn, "packb.copy");
    LLVMBasicBlockRef out = LLVMAppendBasicBlockInContext(e->ctx, c->fn, "packb.pad");
    LLVMBasicBlockRef done = LLVMAppendBasicBlockInContext(e->ctx, c->fn, "packb.col.done");
    LLVMBuildCondBr(B, LLVMBuildICmp(B, LLVMIntSLT, n, cg_i64(e, Nc), ""), in, out);
    LLVMPositionBuilderAtEnd(B, in);
    LLVMValueRef srow = gep(e, h, src, add(e, mul(e, n, K), k0));
    LLVMValueRef whole = LLVMBuildLShr(B, kk, cg_i64(e, 1), "");
    cg_loop lj = cg_loop_begin(c, cg_i64(e, 0), whole, 1, "packb.k");
    store(e, load(e, e->i32, gep(e, h, srow, mul(e, lj.iv, 2)), 2, ""), gep(e, e->i32, dcol, mul(e, lj.iv, nr)), 4);
    cg_loop_end(c, &lj);
    LLVMBasicBlockRef odd = LLVMAppendBasicBlockInContext(e->ctx, c->fn, "packb.odd");
    LLVMBuildCondBr(B, LLVMBuildICmp(B, LLVMIntSLT, whole, kp, ""), odd, done);
    LLVMPositionBuilderAtEnd(B, odd); /* the last k alone, its pair's high half 0 */
    LLVMValueRef last = load(e, h, gep(e, h, srow, mul(e, whole, 2)), 2, "");
    store(e, LLVMBuildZExt(B, last, e->i32, ""), gep(e, e->i32, dcol, mul(e, whole, nr)), 4);
    LLVMBuildBr(B, done);
    LLVMPositionBuilderAtEnd(B, out); /* a column past B's last: zeros */
    cg_loop lz = cg_loop_begin(c, cg_i64(e, 0), kp, 1, "packb.zero");
    store(e, LLVMConstInt(e->i32, 0, 0), gep(e, e->i32, dcol, mul(e, lz.iv, nr)), 4);
    cg_loop_end(c, &lz);
    LLVMBuildBr(B, done);
    LLVMPositionBuilderAtEnd(B, done);
    cg_loop_end(c, &ln);
  }
  cg_loop_end(c, &lq);
}

/* ---- a constant B, at compile time ---- */

int64_t cg_gemm_bf16_const_bytes(int64_t K, int64_t Nc, int panel, int tail) {
  return (K + 1) / 2 * 2 * ((Nc / panel) * panel + tail) * 2;
}

void cg_gemm_bf16_pack_const(void *dst, const uint16_t *src, int64_t K, int64_t Nc, int panel, int tail, int64_t kc) {
  uint16_t *d = dst; /* zeroed (an arena's): the padding stays 0 */
  CASTOR_ASSERT(kc % 2 == 0);
  int64_t n_full = Nc / panel, off = 0;
  for (int64_t k0 = 0; k0 < K; k0 += kc) {
    int64_t kk = K - k0 < kc ? K - k0 : kc, kp = (kk + 1) / 2;
    for (int64_t q = 0; q <= n_full; q++) {
      int64_t width = q < n_full ? panel : tail, cols = q < n_full ? panel : Nc - n_full * panel;
      if (!width) continue;
      for (int64_t j = 0; j < kp; j++, off += 2 * width) {
        const uint16_t *s0 = src + (k0 + 2 * j) * Nc + q * panel, *s1 = s0 + Nc;
        uint16_t *dp = d + off;
        if (2 * j + 1 < kk) {
          int64_t n = 0;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
          for (; n + 16 <= cols; n += 16) { /* a pair as one 32-bit word, 16 at a time: vectorized at -O2 */
            uint32_t w[16];
            for (int i = 0; i < 16; i++) w[i] = (uint32_t)s0[n + i] | (uint32_t)s1[n + i] << 16;
            memcpy(dp + 2 * n, w, sizeof w); /* s0's half at the lower address */
          }
#endif
          for (; n < cols; n++) dp[2 * n] = s0[n], dp[2 * n + 1] = s1[n];
        } else { /* an odd block's last pair: its second half stays 0 */
          for (int64_t n = 0; n < cols; n++) dp[2 * n] = s0[n];
        }
      }
    }
  }
}
