/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cg_gemm_amx.c: the AMX-BF16 micro-kernel family (cg_gemm_amx.h has the
 * tiles and layouts): the tile instructions as LLVM 19's intrinsics with
 * immediate tile numbers (llvm.x86.ldtilecfg, tileloadd64, tdpbf16ps,
 * tilestored64, tilezero, tilerelease), the packing of A and B at run time
 * (LLVM IR, on top of the K-pair packers of cg_gemm_bf16.c), and of a
 * constant B at compile time (C).
 *
 * Determinism: each C element is one chain of tdpbf16ps over the K pairs
 * in order, spilled exactly to the f32 C tile at the fixed K-block
 * boundaries (cg_gemm.c); a row's sums depend on that row of A alone, so
 * results do not depend on the tile a thread gets.
 */
#include <string.h>

#include "codegen/cpu/gemm/cg_gemm_amx.h"
#include "codegen/cpu/gemm/cg_gemm_bf16.h"

#define B (e->b)

static LLVMValueRef gep(cg_emitter *e, LLVMTypeRef ty, LLVMValueRef p, LLVMValueRef idx) {
  return LLVMBuildGEP2(B, ty, p, &idx, 1, "");
}
static LLVMValueRef add(cg_emitter *e, LLVMValueRef a, LLVMValueRef b) { return LLVMBuildAdd(B, a, b, ""); }
static LLVMValueRef mul(cg_emitter *e, LLVMValueRef a, int64_t b) { return LLVMBuildMul(B, a, cg_i64(e, b), ""); }
static LLVMTypeRef i16(cg_emitter *e) { return LLVMInt16TypeInContext(e->ctx); }
static LLVMValueRef imm8(cg_emitter *e, int v) {
  return LLVMConstInt(LLVMInt8TypeInContext(e->ctx), (unsigned long long)v, 0);
}

/* ---- the tile instructions ---- */

static void call(cg_emitter *e, const char *name, LLVMValueRef *args, unsigned n) {
  unsigned id = LLVMLookupIntrinsicID(name, strlen(name));
  CASTOR_ASSERT(id != 0);
  LLVMValueRef f = LLVMGetIntrinsicDeclaration(e->mod, id, NULL, 0);
  LLVMBuildCall2(B, LLVMGlobalGetValueType(f), f, args, n, "");
}

void cg_amx_config_bytes(uint8_t out[64]) {
  memset(out, 0, 64);
  out[0] = 1; /* palette 1; start_row 0 */
  for (int t = 0; t < 8; t++) {
    out[16 + 2 * t] = 64; /* colsb, little-endian u16 */
    out[48 + t] = CG_AMX_ROWS;
  }
}

void cg_amx_config(cg_emitter *e) {
  static const char name[] = "castor.amx.tilecfg";
  LLVMValueRef g = LLVMGetNamedGlobal(e->mod, name);
  if (!g) {
    uint8_t bytes[64];
    cg_amx_config_bytes(bytes);
    LLVMValueRef init = LLVMConstStringInContext(e->ctx, (const char *)bytes, 64, 1);
    g = LLVMAddGlobal(e->mod, LLVMTypeOf(init), name);
    LLVMSetInitializer(g, init);
    LLVMSetGlobalConstant(g, 1);
    LLVMSetLinkage(g, LLVMPrivateLinkage);
    LLVMSetAlignment(g, 64);
  }
  LLVMValueRef args[] = {g};
  call(e, "llvm.x86.ldtilecfg", args, 1);
}

void cg_amx_release(cg_emitter *e) { call(e, "llvm.x86.tilerelease", NULL, 0); }

void cg_amx_zero(cg_emitter *e, int t) {
  LLVMValueRef args[] = {imm8(e, t)};
  call(e, "llvm.x86.tilezero", args, 1);
}

void cg_amx_load(cg_emitter *e, int t, LLVMValueRef p, LLVMValueRef stride) {
  LLVMValueRef args[] = {imm8(e, t), p, stride};
  call(e, "llvm.x86.tileloadd64", args, 3);
}

void cg_amx_store(cg_emitter *e, int t, LLVMValueRef p, LLVMValueRef stride) {
  LLVMValueRef args[] = {imm8(e, t), p, stride};
  call(e, "llvm.x86.tilestored64", args, 3);
}

void cg_amx_dpbf16ps(cg_emitter *e, int c, int a, int b) {
  LLVMValueRef args[] = {imm8(e, c), imm8(e, a), imm8(e, b)};
  call(e, "llvm.x86.tdpbf16ps", args, 3);
}

LLVMValueRef cg_amx_pairs(cg_emitter *e, LLVMValueRef kk) {
  LLVMValueRef steps = LLVMBuildLShr(B, add(e, kk, cg_i64(e, CG_AMX_KSTEP - 1)), cg_i64(e, 5), "ksteps");
  return mul(e, steps, CG_AMX_ROWS);
}

/* Stores i32 zeros at p[j stride] for j in [j0, j1). */
static void zero_pairs(cg_kctx *c, LLVMValueRef p, int64_t stride, LLVMValueRef j0, LLVMValueRef j1) {
  cg_emitter *e = c->e;
  cg_loop l = cg_loop_begin(c, j0, j1, 1, "amx.pad");
  LLVMSetAlignment(LLVMBuildStore(B, LLVMConstInt(e->i32, 0, 0), gep(e, e->i32, p, mul(e, l.iv, stride))), 4);
  cg_loop_end(c, &l);
}

/* ---- packing at run time ---- */

void cg_gemm_amx_pad_row(cg_kctx *c, LLVMValueRef row, LLVMValueRef kk) {
  cg_emitter *e = c->e;
  LLVMValueRef kp = LLVMBuildLShr(B, add(e, kk, cg_i64(e, 1)), cg_i64(e, 1), "kp");
  zero_pairs(c, row, 1, kp, cg_amx_pairs(e, kk));
}

void cg_gemm_amx_pack_a(cg_kctx *c, LLVMValueRef src, int64_t ld, bool a_trans, LLVMValueRef m,
                        LLVMValueRef k0, LLVMValueRef kk, LLVMValueRef dst, int64_t lda) {
  cg_emitter *e = c->e;
  LLVMTypeRef h = i16(e);
  LLVMValueRef kp = LLVMBuildLShr(B, add(e, kk, cg_i64(e, 1)), cg_i64(e, 1), "kp");
  LLVMValueRef kp16 = cg_amx_pairs(e, kk);
  if (!a_trans) {
    cg_gemm_bf16_pack_a(c, src, ld, false, m, k0, kk, dst, lda); /* row-major pairs already */
  } else { /* A[r, k] = src[k ld + r]: pair j of row r from two of src's rows */
    cg_loop lj = cg_loop_begin(c, cg_i64(e, 0), kp, 1, "amx.packa.pair");
    LLVMValueRef k = add(e, k0, mul(e, lj.iv, 2));
    LLVMValueRef has1 = LLVMBuildICmp(B, LLVMIntSLT, add(e, mul(e, lj.iv, 2), cg_i64(e, 1)), kk, "has.odd");
    LLVMValueRef r0 = gep(e, h, src, mul(e, k, ld));
    LLVMValueRef r1 = LLVMBuildSelect(B, has1, gep(e, h, r0, cg_i64(e, ld)), r0, ""); /* never past kk */
    cg_loop li = cg_loop_begin(c, cg_i64(e, 0), m, 1, "amx.packa.i");
    LLVMValueRef lo = LLVMBuildLoad2(B, h, gep(e, h, r0, li.iv), "");
    LLVMValueRef hi = LLVMBuildSelect(B, has1, LLVMBuildLoad2(B, h, gep(e, h, r1, li.iv), ""), LLVMConstInt(h, 0, 0), "");
    LLVMValueRef pair = LLVMBuildOr(B, LLVMBuildZExt(B, lo, e->i32, ""),
                                    LLVMBuildShl(B, LLVMBuildZExt(B, hi, e->i32, ""), LLVMConstInt(e->i32, 16, 0), ""), "");
    LLVMValueRef d = gep(e, e->i32, dst, add(e, mul(e, li.iv, lda), lj.iv));
    LLVMSetAlignment(LLVMBuildStore(B, pair, d), 4);
    cg_loop_end(c, &li);
    cg_loop_end(c, &lj);
  }
  /* each row's pairs [kp, kp16): zeros, so the padded tile step adds 0 x 0 */
  cg_loop lr = cg_loop_begin(c, cg_i64(e, 0), m, 1, "amx.packa.row");
  zero_pairs(c, gep(e, e->i32, dst, mul(e, lr.iv, lda)), 1, kp, kp16);
  cg_loop_end(c, &lr);
}

void cg_gemm_amx_pack_b(cg_kctx *c, LLVMValueRef src, bool src_nk, int64_t K, int64_t Nc, int nr, LLVMValueRef dst,
                        LLVMValueRef p0, LLVMValueRef p1, LLVMValueRef k0, LLVMValueRef kk) {
  cg_emitter *e = c->e;
  LLVMValueRef kp = LLVMBuildLShr(B, add(e, kk, cg_i64(e, 1)), cg_i64(e, 1), "kp");
  LLVMValueRef kp16 = cg_amx_pairs(e, kk);
  LLVMValueRef pstride = mul(e, kp16, 2 * nr); /* bf16 elements between panels */
  cg_loop lq = cg_loop_begin(c, p0, p1, 1, "amx.packb.panel");
  LLVMValueRef pdst = gep(e, i16(e), dst, LLVMBuildMul(B, LLVMBuildSub(B, lq.iv, p0, ""), pstride, ""));
  cg_gemm_bf16_pack_b(c, src, src_nk, K, Nc, nr, pdst, lq.iv, add(e, lq.iv, cg_i64(e, 1)), k0, kk);
  /* pair rows [kp, kp16) of the panel: nr i32 each */
  cg_loop lj = cg_loop_begin(c, kp, kp16, 1, "amx.packb.pad");
  zero_pairs(c, gep(e, e->i32, pdst, mul(e, lj.iv, nr)), 1, cg_i64(e, 0), cg_i64(e, nr));
  cg_loop_end(c, &lj);
  cg_loop_end(c, &lq);
}

/* ---- a constant B, at compile time ---- */

static int64_t pad32(int64_t k) { return (k + CG_AMX_KSTEP - 1) / CG_AMX_KSTEP * CG_AMX_KSTEP; }

int64_t cg_gemm_amx_const_bytes(int64_t K, int64_t Nc, int panel, int tail) {
  return pad32(K) * ((Nc / panel) * panel + tail) * 2;
}

void cg_gemm_amx_pack_const(void *dst, const uint16_t *src, int64_t K, int64_t Nc, int panel, int tail, int64_t kc) {
  uint16_t *d = dst;
  CASTOR_ASSERT(kc % CG_AMX_KSTEP == 0);
  memset(d, 0, (size_t)cg_gemm_amx_const_bytes(K, Nc, panel, tail));
  int64_t n_full = Nc / panel, off = 0;
  for (int64_t k0 = 0; k0 < K; k0 += kc) {
    int64_t kk = K - k0 < kc ? K - k0 : kc, kp16 = pad32(kk) / 2;
    for (int64_t q = 0; q <= n_full; q++) {
      int64_t width = q < n_full ? panel : tail, cols = q < n_full ? panel : Nc - n_full * panel;
      if (!width) continue;
      for (int64_t j = 0; j < kp16; j++, off += 2 * width)
        for (int64_t h = 0; h < 2; h++) { /* k = 2j + h, zero past the block */
          int64_t k = 2 * j + h;
          if (k >= kk) continue;
          const uint16_t *s = src + (k0 + k) * Nc + q * panel;
          for (int64_t n = 0; n < cols; n++) d[off + 2 * n + h] = s[n];
        }
    }
  }
}
