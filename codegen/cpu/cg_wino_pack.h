/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cg_wino_pack.h: the host-side (C) part of Winograd F(4x4, 3x3)
 * (cg_wino.c): the compile-time transform of a constant kernel into U.
 * Needs no LLVM headers, so the tests check it alone
 * (tests/unit/check_winograd.c). Private to codegen/.
 */
#ifndef CASTOR_CG_WINO_PACK_H
#define CASTOR_CG_WINO_PACK_H

#include <stdint.h>

/* U = G g G^T of an HWIO kernel [3, 3, C, O] (f32) into dst: [36][O'/nr][C][nr]
 * (O' = O rounded up to nr, the padding +0), in double, rounded once.
 * Writes every element of dst. */
void cg_wino_pack_const(float *dst, const float *src, int64_t C, int64_t O, int nr);

#endif
