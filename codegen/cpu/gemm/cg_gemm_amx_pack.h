/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cg_gemm_amx_pack.h: the host-side (C) part of the AMX-BF16 family
 * (cg_gemm_amx.h): its tile configuration's bytes and the compile-time
 * packing of a constant B. Needs no LLVM headers, so the tests check it
 * alone (tests/unit/check_amx.c). Private to codegen/.
 */
#ifndef CASTOR_CG_GEMM_AMX_PACK_H
#define CASTOR_CG_GEMM_AMX_PACK_H

#include <stdint.h>

/* The 64 bytes of the configuration (palette 1, tiles 0..7 16 x 64 bytes). */
void cg_amx_config_bytes(uint8_t out[64]);

/* The bytes of a constant B [K, Nc] pre-packed for AMX: full panels of
 * `panel` columns and a last one of `tail` padded columns, K padded to 32. */
int64_t cg_gemm_amx_const_bytes(int64_t K, int64_t Nc, int panel, int tail);
/* Packs it (src: K x Nc bf16, row-major) into dst, block by block of kc
 * rows (kc a multiple of 32). */
void cg_gemm_amx_pack_const(void *dst, const uint16_t *src, int64_t K, int64_t Nc, int panel, int tail, int64_t kc);

#endif
