/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cg_gemm_internal.h: what the GEMM's planner (cg_gemm_plan.c) and its
 * emitter (cg_gemm.c, whose header comment describes the kernel) share:
 * the cache-block targets and the plan, struct cg_gemm. Private to
 * codegen/cpu.
 */
#ifndef CASTOR_CG_GEMM_INTERNAL_H
#define CASTOR_CG_GEMM_INTERNAL_H

#include "codegen/cpu/cg_cpu.h"

/* Cache blocks (f32 elements): KC x NR of B stays in L1 beside MR x KC of
 * A; KC x NC of B and MC x KC of A stay in L2. */
enum { KC_TARGET = 256, NC_TARGET = 512, MC_PANELS = 8 };

typedef struct gemm_variant {
  int mr, np; /* rows, and full panels covered at once */
} gemm_variant;

/* Where the micro-kernel's B comes from: pre-packed at compile time (a
 * constant), read in place, or packed at run time into the call's scratch
 * (f32, zero-padded panels): the whole of the call's panels once per call
 * from a [Nc, K] source (B transposed: matmul_nt's weight), or one K block
 * of the column block's panels at a time from a [K, Nc] source
 * (matmul_tn's gradient rows, too many to pack whole). */
typedef enum gemm_b_src {
  GEMM_B_PREPACKED,
  GEMM_B_IN_PLACE,
  GEMM_B_PACK_CALL_T,
  GEMM_B_PACK_BLOCK,
  GEMM_B_PACK_CALL, /* the K-pair family only: a [K, Nc] B that is not a constant, packed per call */
} gemm_b_src;

/* convolutional networks: a conv2d is the GEMM of its implicit im2col
 * matrix A [N*OH*OW, KH*KW*C] and its kernel w [KH*KW*C, O] (HWIO is that
 * matrix row-major, so it pre-packs like a matmul's weight). A is never
 * written whole: the A packing gathers each block from x through this
 * index map (row m = (n, oh, ow), k = (kh, kw, c) -> x[n, oh*sh - top +
 * kh*dh, ow*sw - left + kw*dw, c], 0 outside x). The launch's rows are
 * images; the GEMM's rows are rows_per_item (OH*OW) per image.
 * Its gradients are the same GEMM with other gathers:
 * conv2d_input_grad: rows (n, ih, iw) of dx, k = (kh, kw, o): A gathers
 *   dy[n, (ih + top - kh*dh) / sh, (iw + left - kw*dw) / sw, o] where the
 *   divisions are exact and inside dy, else 0 (the transposed conv as a
 *   gather: each dx element is one FMA chain, no scatter-add); B[(kh, kw,
 *   o), c] = w[kh, kw, c, o], packed at run time once per call.
 * conv2d_filter_grad: matmul_tn's GEMM (sums over the rows of the batch
 *   in order): rows (kh, kw, c) of dw, K = the batch's N*OH*OW rows, A
 *   k-major from the forward im2col rows, B = dy [N*OH*OW, O].
 * The forward gather copies a kernel row's KW taps as one run of KW*C
 * values where the window row is inside x (dilation 1 along W), else tap
 * by tap; runs end in one masked vector on the AVX-512 families. A conv2d
 * of bf16 x and w runs on the K-pair family (gemm/cg_gemm_bf16.h): its
 * packed A row is x's bf16 copied in k order, a 0 after an odd K block;
 * the gradients stay on the FMA families. */
enum { GEMM_CONV_NONE, GEMM_CONV_FWD, GEMM_CONV_DX, GEMM_CONV_DW };
typedef struct gemm_conv {
  int64_t mode;          /* GEMM_CONV_* */
  int64_t rows_per_item; /* GEMM rows per launch row: OH*OW (fwd), H*W (dx), 1 (dw) */
  int64_t k_per_item;    /* dw: K per batch row (OH*OW) */
  int64_t H, W, C, KW, OH, OW, O, sh, sw, dh, dw, pt, pl; /* x [N,H,W,C], w [KH,KW,C,O], dy [N,OH,OW,O] */
  int64_t direct;        /* fwd: > 0, the direct convolution (cg_conv.c) with tiles of this many pixels */
  int64_t groups;        /* direct: a group_conv2d's groups G (> 1; C/G channels summed, O/G outputs each), else 0 */
  int64_t flat_rows;     /* fwd GEMM of a static batch: 1 when the launch's rows are GEMM rows (pixels), not images */
  int64_t wino;          /* fwd: > 0, Winograd F(4x4, 3x3) (cg_wino.c) in blocks of this many rows of 4x4 tiles */
  int64_t group_pack;    /* direct, groups: 1 when column blocks are the outer loop, each block's columns of w
                          * copied to scratch at b_off (cg_conv.c), the block's output rows inside it;
                          * 2: the group's channels of x copied as well (cg_conv_xpack_off) */
  int64_t wino_imgs;     /* Winograd: > 1, blocks of this many whole images (wino: all tile rows; launch rows: images) */
  int64_t kpair;         /* direct: 1 when its sums are the K-pair family's (vdpbf16ps over (c, c+1) pairs of x read in
                          * place, cg_conv.c), the bits of the packed GEMM; 0: f32 FMA chains */
} gemm_conv;

/* general tensors: a batch_matmul is one GEMM per matrix product (item):
 * the launch's rows are y's dimension 0, each per_row items of M GEMM rows;
 * item (r, q) reads a's and b's matrices at their item strides (0 along a
 * broadcast dimension). A is read in place (or k-major, transpose_a), B in
 * place (or packed transposed per item, transpose_b). */
typedef struct gemm_bmm {
  int64_t on;              /* 1: a batch_matmul */
  int64_t per_row;         /* items per launch row: y's leading dimensions after dimension 0 */
  int64_t M;               /* GEMM rows of an item */
  int64_t a_size, b_size;  /* elements of one matrix of a, of b */
  int64_t nd;              /* y's leading (batch) dimensions */
  int64_t dims[IR_MAX_RANK], a_stride[IR_MAX_RANK], b_stride[IR_MAX_RANK]; /* per leading dimension of y */
} gemm_bmm;

struct cg_gemm {
  int vw, nv, nr, mr;   /* a full panel is nv vectors of vw lanes: nr columns */
  int64_t K, Nc;        /* K < 0: the run's batch (matmul_tn sums over it) */
  int a_trans;          /* A is stored [K, M] (matmul_tn's activations) */
  int b_src;            /* gemm_b_src */
  int bf16;             /* K pairs, both operands bf16: 1 on vdpbf16ps (gemm/cg_gemm_bf16.h),
                         * GEMM_AMX on AMX tiles (gemm/cg_gemm_amx.h) */
  int64_t n_full;       /* full panels */
  int tail_nv;          /* vectors of the partial last panel (0: none) */
  int tail_valid;       /* valid lanes of its last vector */
  int64_t kc, mc, nc;   /* cache blocks */
  int64_t n_kblocks;
  int64_t lda, ldc;     /* row strides (f32) of packed A and of the C tile */
  int64_t c_off;        /* byte offset of the C tile in scratch */
  int64_t c_rows;       /* rows of the C tile */
  int64_t b_off;        /* byte offset of B packed at run time in scratch */
  bool softmax;         /* ops[n_ops-1] is a row softmax done in the epilogue */
  bool prefetch_b;      /* the k loop prefetches the next micro-tile's B into L2 */
  bool panel_outer;     /* panels outer, row tiles inner (cg_gemm_plan.c: choose_panel_outer) */
  gemm_variant var[4];
  int n_var;
  gemm_conv conv;       /* convolutional networks: the A gather of a conv2d */
  gemm_bmm bmm;         /* general tensors: batch_matmul's item loop */
};


/* convolutional networks: the interior output columns [lo, hi) of a
 * conv2d forward: those whose every window column is inside x. */
static inline void gemm_conv_interior(const gemm_conv *cv, int64_t *lo, int64_t *hi) {
  int64_t l = (cv->pl + cv->sw - 1) / cv->sw;
  int64_t last_in = cv->W - 1 + cv->pl - (cv->KW - 1) * cv->dw; /* ow * sw <= last_in */
  int64_t h = last_in < 0 ? 0 : last_in / cv->sw + 1;
  if (h > cv->OW) h = cv->OW;
  if (l > h) l = h;
  *lo = l, *hi = h;
}

/* convolutional networks: the direct convolution of a conv2d whose plan
 * has conv.direct (cg_conv.c); epilogue: the GEMM's epilogue function. */
void cg_conv_direct_emit(cg_kctx *c, const cg_gemm *g, LLVMValueRef epilogue);
/* Grouped convolutions of 4 channels and 4 outputs a group run lanes / 4
 * groups a vector (cg_conv.c, quads) for kernels of at most this width:
 * the kernel row's 4 x KW vectors of w stay in registers. */
enum { CG_CONV_QUADS_MAX_KW = 3 };
/* The operand dtypes it reads: f32, and bf16 and f16 widened to f32. */
static inline bool cg_conv_direct_dtype(ir_dtype dt) { return dt == DT_F32 || dt == DT_BF16 || dt == DT_F16; }
/* Its scratch with gemm_conv.group_pack: the C tile, then at b_off the
 * block's columns of w (K x nr, w's dtype; none when w is stored so,
 * GEMM_B_PREPACKED), then (group_pack 2) at
 * cg_conv_xpack_off the group's channels of an image's x ([H, W, C/G],
 * x's dtype): the bytes of each. */
static inline int64_t cg_conv_wpack_bytes(const cg_gemm *g, ir_dtype w_dtype) {
  return (g->K * g->nr * dtype_size(w_dtype) + 63) / 64 * 64;
}
static inline int64_t cg_conv_xpack_off(const cg_gemm *g, ir_dtype w_dtype) {
  return g->b_off + (g->b_src == GEMM_B_PREPACKED ? 0 : cg_conv_wpack_bytes(g, w_dtype)); /* pre-packed: no copy of w */
}
static inline int64_t cg_conv_xpack_bytes(const cg_gemm *g, ir_dtype x_dtype) {
  return g->conv.group_pack == 2 ? g->conv.H * g->conv.W * (g->conv.C / g->conv.groups) * dtype_size(x_dtype) : 0;
}

/* convolutional networks: Winograd F(4x4, 3x3) (cg_wino.c). A block's
 * geometry: tiles per row and column, tile rows per block, blocks per
 * image, images per block (1, or whole images: conv.wino_imgs), tiles per
 * block, C and O padded (to vw, to nr), and the scratch offsets (bytes)
 * of V [36][t][cp], M [36][t][op] and the C tile [4*tr*OW][op] (one
 * image's), and its size. */
typedef struct cg_wino_geom {
  int64_t tw, th, tr, nblk, imgs, t, cp, op;
  int64_t v_off, m_off, c_off, bytes;
} cg_wino_geom;
void cg_wino_geom_of(const cg_gemm *g, cg_wino_geom *w);
/* Makes g (the GEMM layout of conv2d kernel k, its kernel a constant read
 * by this kernel only) the Winograd kernel's, with its launch l, where the
 * shape allows and caps->conv_algo and the cost model say so. */
bool cg_wino_choose(const cg_cpu_caps *caps, const cg_kernel *k, cg_gemm *g, cg_kernel_launch *l);
/* The body of a kernel whose plan has conv.wino; epilogue: the GEMM's. */
void cg_wino_emit(cg_kctx *c, const cg_gemm *g, LLVMValueRef epilogue);

/* cg_gemm.bf16 of the AMX-BF16 family (1: vdpbf16ps) */
enum { GEMM_AMX = 2 };

#endif
