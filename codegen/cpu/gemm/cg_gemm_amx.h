/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cg_gemm_amx.h: the AMX-BF16 GEMM micro-kernel family (tile registers,
 * tdpbf16ps), the leaves that codegen/cpu/cg_gemm.c calls when both
 * operands of a contraction are bf16 and the CPU's family is
 * CG_GEMM_KERNEL_AMX_BF16. Private to codegen/cpu/.
 *
 * Run on a Sapphire Rapids guest (2026-11-29: the suites against the
 * float64 reference pass), where the host's detection chooses it
 * (cg_target.c); $CASTOR_CPU / --cpu sapphirerapids-amx names it anywhere
 * (docs/numerics.md).
 *
 * Tiles (one configuration per kernel call, palette 1, every tile 16 rows
 * x 64 bytes): C in tmm0..tmm3 (rows 0-15 and 16-31 of the micro-tile x
 * columns 0-15 and 16-31, f32), A in tmm4, tmm5 (16 rows x 16 K pairs,
 * bf16), B in tmm6, tmm7 (16 K pairs x 16 columns, VNNI pairs). A micro-
 * tile is 32 rows x one panel of 32 (or a 16-column tail panel) columns;
 * per step of 32 k it loads two A and two B tiles and issues four
 * tdpbf16ps. The sums are stored (tilestored) to the GEMM's C tile, from
 * which the unchanged fused epilogue reads them.
 *
 * Layouts. AMX's B layout is the K-pair layout of the AVX512-BF16 family
 * (cg_gemm_bf16.h): pair row j of a panel holds, per column n, the bf16 of
 * k = 2j at [2n] and of k = 2j + 1 at [2n + 1], so 16 columns of a pair
 * row are one 64-byte tile row. The only difference: K is zero-padded to a
 * multiple of 32 (16 pairs, one tile's rows). The AMX family's K blocks
 * are multiples of 32, so only the last block is padded, and block pc of
 * a packed B still starts at element pc x (its padded width).
 * A is packed row-major in K pairs (an i32 per pair, pair j of row r at
 * [r lda + j]; a stored [K, M] A is transposed into that), each row's
 * pairs past K zero up to the next 16.
 */
#ifndef CASTOR_CG_GEMM_AMX_H
#define CASTOR_CG_GEMM_AMX_H

#include <stdint.h>

#include "codegen/cpu/gemm/cg_gemm_amx_pack.h"
#include "codegen/kernel/cg_kit.h"

/* rows of a micro-tile (two C tile rows), k of one tile step, tile rows */
enum { CG_AMX_MR = 32, CG_AMX_KSTEP = 32, CG_AMX_ROWS = 16 };

/* The tile registers of a micro-tile. */
enum { CG_AMX_C00 = 0, CG_AMX_C01 = 1, CG_AMX_C10 = 2, CG_AMX_C11 = 3, CG_AMX_A0 = 4, CG_AMX_A1 = 5, CG_AMX_B0 = 6, CG_AMX_B1 = 7 };

/* ldtilecfg of the family's one configuration (a private constant of the
 * module), and tilerelease. */
void cg_amx_config(cg_emitter *e);
void cg_amx_release(cg_emitter *e);
/* tilezero, tileloadd64 and tilestored64 of tile t (stride in bytes), tdpbf16ps c += a b. */
void cg_amx_zero(cg_emitter *e, int t);
void cg_amx_load(cg_emitter *e, int t, LLVMValueRef p, LLVMValueRef stride);
void cg_amx_store(cg_emitter *e, int t, LLVMValueRef p, LLVMValueRef stride);
void cg_amx_dpbf16ps(cg_emitter *e, int c, int a, int b);


/* pairs of a K block of kk (i64), padded to whole tiles: ceil(kk / 32) x 16 */
LLVMValueRef cg_amx_pairs(cg_emitter *e, LLVMValueRef kk);

/* Packs A's rows [0, m) x k [k0, k0 + kk) into dst as above (row stride
 * lda i32 pairs). src points at A's first row of the block (bf16); ld is
 * its row stride in elements; a_trans: A is stored [K, M] (A[r, k] =
 * src[k ld + r]). */
void cg_gemm_amx_pack_a(cg_kctx *c, LLVMValueRef src, int64_t ld, bool a_trans, LLVMValueRef m,
                        LLVMValueRef k0, LLVMValueRef kk, LLVMValueRef dst, int64_t lda);

/* Zeros pairs [ceil(kk / 2), cg_amx_pairs(kk)) of a packed A row (i32
 * pairs at row): what a conv2d's gathered row (cg_gemm.c, row-major
 * values) needs to be a row of the tile layout. */
void cg_gemm_amx_pad_row(cg_kctx *c, LLVMValueRef row, LLVMValueRef kk);

/* Packs panels [p0, p1) (each nr columns; columns past Nc are 0) of rows
 * [k0, k0 + kk) of a bf16 B into dst, panel after panel, each padded to
 * cg_amx_pairs(kk) pair rows of zeros. src_nk: B is stored [Nc, K]. */
void cg_gemm_amx_pack_b(cg_kctx *c, LLVMValueRef src, bool src_nk, int64_t K, int64_t Nc, int nr, LLVMValueRef dst,
                        LLVMValueRef p0, LLVMValueRef p1, LLVMValueRef k0, LLVMValueRef kk);


#endif
