/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cg_gemm_bf16.h: the AVX512-BF16 GEMM micro-kernel family (vdpbf16ps),
 * the leaves that codegen/cpu/cg_gemm.c calls when both operands of a
 * contraction are bf16 and the CPU's family is CG_GEMM_KERNEL_AVX512_BF16.
 * Any other contraction emitter (batched matmul, the convolution's implicit
 * GEMM) uses the family through the same four entry points: pack A, pack B
 * (at run time, or a constant at compile time), and the k loop over one
 * micro-tile's accumulators. Private to codegen/cpu/.
 *
 * The K-pair layout. vdpbf16ps multiplies pairs: for each of 16 f32 lanes
 * i, acc[i] += a[2i] b[2i] + a[2i+1] b[2i+1] (Intel SDM: the odd product is
 * added first, then the even one, each rounded to f32 with round to nearest
 * even; bf16 denormal inputs are read as 0 and a denormal result is flushed
 * to 0, whatever MXCSR says; docs/numerics.md). So K is walked two at a
 * time, and both operands hold each k pair (k = 2j, 2j + 1) side by side:
 *
 *   packed B, one K block of kk rows (kp = ceil(kk / 2) pairs), panel by
 *   panel of `width` columns: pair row j of a panel is 2 x width bf16,
 *   column n at [2n] (k = 2j) and [2n + 1] (k = 2j + 1), so 16 columns of
 *   one pair row are one 64-byte vector; panels follow each other, kp x
 *   2 x width apart. An odd kk gets a zero in the second half of its last
 *   pair (never read past the source).
 *
 *   packed A, in 32-bit pairs (one i32 = the two bf16 of a pair, the even k
 *   in its low half): pair j of row r at [r a_row + j a_pair], row-major
 *   (a_row = lda, a_pair = 1) or pair-major (a_row = 1, a_pair = lda) for
 *   an A stored [K, M]. An odd kk's last pair has a zero high half.
 *
 * A K block starts at an even k (cg_gemm.c rounds its K block up to even),
 * so block pc of a pre-packed B starts at element pc x (its total padded
 * width), as the f32 layout does.
 */
#ifndef CASTOR_CG_GEMM_BF16_H
#define CASTOR_CG_GEMM_BF16_H

#include <stdint.h>

#include "codegen/kernel/cg_kit.h"

/* f32 lanes of one accumulator (a zmm register), and bf16 of one vector. */
enum { CG_BF16_LANES = 16, CG_BF16_VEC = 32 };

/* One micro-tile of mr rows x nvec accumulators (<16 x float> allocas,
 * acc[r * 16 + v]) over kp pairs: nvec = npan panels x nvp vectors. */
typedef struct cg_bf16_tile {
  int mr, nvp, npan;
  const LLVMValueRef *acc;  /* acc[r * 16 + v] */
  LLVMValueRef a;           /* packed A, i32 pairs, at the tile's first row and pair 0 */
  int64_t a_row, a_pair;    /* i32 strides of A between rows and between pairs */
  LLVMValueRef b;           /* packed B, bf16, the first panel's pair row 0 */
  LLVMValueRef b_pair;      /* i64: bf16 elements between pair rows of a panel (2 x width) */
  LLVMValueRef b_panel;     /* i64: bf16 elements between panels (kp x 2 x width) */
  LLVMValueRef kp;          /* i64: pairs of the K block */
} cg_bf16_tile;

/* Emits the k loop: for each pair j, nvec B vectors, then per row one A
 * pair broadcast and nvec vdpbf16ps into the accumulators. */
void cg_gemm_bf16_kloop(cg_kctx *c, const cg_bf16_tile *t);

/* acc + the pair products of a and b (<16 x float>, <32 x bfloat> x 2):
 * one vdpbf16ps, as the k loop issues it (a: A's pair, b: B's pairs). */
LLVMValueRef cg_gemm_bf16_dp(cg_emitter *e, LLVMValueRef acc, LLVMValueRef a, LLVMValueRef b);
/* One pair row of 16 columns from two rows of B (<16 x i16> each, k even
 * and k + 1): <32 x bfloat>, column n at [2n] and [2n + 1], the packed
 * B's layout. */
LLVMValueRef cg_gemm_bf16_pair_row(cg_emitter *e, LLVMValueRef lo, LLVMValueRef hi);

/* Packs A's rows [0, m) x k [k0, k0 + kk) into dst (i32 pairs, row stride
 * lda pairs). src points at A's first row of the block (bf16); ld is its
 * row stride in elements. a_trans: A is stored [K, M] (A[r, k] =
 * src[k ld + r], dst pair-major: pair j of row r at dst[j lda + r]). */
void cg_gemm_bf16_pack_a(cg_kctx *c, LLVMValueRef src, int64_t ld, bool a_trans, LLVMValueRef m,
                         LLVMValueRef k0, LLVMValueRef kk, LLVMValueRef dst, int64_t lda);

/* Packs panels [p0, p1) (each nr columns; columns past Nc are 0) of rows
 * [k0, k0 + kk) of a bf16 B into dst, panel after panel, in the K-pair
 * layout. src_nk: B is stored [Nc, K] (a matmul_nt weight), else [K, Nc]. */
void cg_gemm_bf16_pack_b(cg_kctx *c, LLVMValueRef src, bool src_nk, int64_t K, int64_t Nc, int nr,
                         LLVMValueRef dst, LLVMValueRef p0, LLVMValueRef p1, LLVMValueRef k0, LLVMValueRef kk);

/* The bytes of a constant B [K, Nc] pre-packed in the K-pair layout: full
 * panels of `panel` columns and a last one of `tail` padded columns. */
int64_t cg_gemm_bf16_const_bytes(int64_t K, int64_t Nc, int panel, int tail);
/* Packs it (src: K x Nc bf16, row-major) into dst (that many bytes, zeroed
 * by the caller: the padding is left alone), block by block of kc rows (kc
 * even). */
void cg_gemm_bf16_pack_const(void *dst, const uint16_t *src, int64_t K, int64_t Nc, int panel, int tail, int64_t kc);

#endif
