/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cg_gemm_plan.c: the GEMM's planning: per contraction kernel, the
 * micro-kernel family and shape (from the CPU's caps), the cache blocks,
 * where B comes from, the conv gather and batch_matmul item loop, and the
 * key that lets kernels of one layout share code. cg_gemm.c emits what
 * this decides; its header comment describes the kernel.
 */
#include <stdio.h>
#include <string.h>

#include "codegen/cpu/gemm/cg_gemm_amx.h"
#include "codegen/cpu/gemm/cg_gemm_bf16.h"
#include "codegen/cpu/cg_gemm_internal.h"

static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
static int64_t round_up(int64_t a, int64_t b) { return ceil_div(a, b) * b; }

static const ir_node *gemm_b(const cg_kernel *k) { return k->ops[0]->srcs[1]; }

static bool same_layout(const cg_gemm *x, const cg_gemm *y) {
  return x->nr == y->nr && x->tail_nv == y->tail_nv && x->vw == y->vw && x->bf16 == y->bf16 && x->kc == y->kc;
}

/* ---- planning ---- */

/* The register file each micro-kernel family is shaped for: f32 lanes of a
 * vector, and vector registers. */
static const struct {
  int vw, regs;
  bool prefetch_b;
} kernel_regs[] = {
    [CG_GEMM_KERNEL_SSE] = {4, 16, true},
    [CG_GEMM_KERNEL_AVX] = {8, 16, true},
    [CG_GEMM_KERNEL_AVX512] = {16, 32, false},
    [CG_GEMM_KERNEL_AVX512_BF16] = {16, 32, false},
    [CG_GEMM_KERNEL_AMX_BF16] = {16, 32, false},
};


/* general tensors: batch_matmul's items (gemm_bmm) */
static void choose_bmm(const ir_node *mm, cg_gemm *g) {
  const ir_type *y = &mm->type, *at = &mm->srcs[0]->type, *bt = &mm->srcs[1]->type;
  gemm_bmm *bm = &g->bmm;
  int R = y->rank;
  bm->on = 1;
  bm->M = y->dims[R - 2];
  g->K = at->dims[at->rank - (mm->attr.transpose_a ? 2 : 1)];
  g->a_trans = mm->attr.transpose_a ? 1 : 0;
  g->b_src = mm->attr.transpose_b ? GEMM_B_PACK_CALL_T : GEMM_B_IN_PLACE;
  bm->a_size = bm->M * g->K, bm->b_size = g->K * y->dims[R - 1];
  bm->nd = R - 2;
  bm->per_row = 1;
  for (int d = 1; d < R - 2; d++) bm->per_row *= y->dims[d];
  int64_t as = 1, bs = 1; /* items of a and b after dimension d */
  for (int d = R - 3; d >= 0; d--) {
    int da = d - (R - at->rank), db = d - (R - bt->rank);
    bm->dims[d] = y->dims[d];
    int64_t ad = da >= 0 ? at->dims[da] : 1, bd = db >= 0 ? bt->dims[db] : 1;
    bm->a_stride[d] = ad == 1 ? 0 : as;
    bm->b_stride[d] = bd == 1 ? 0 : bs;
    if (ad != IR_DIM_BATCH) as *= ad; /* N only in dimension 0: nothing after it */
    if (bd != IR_DIM_BATCH) bs *= bd;
  }
}

/* convolutional networks: a conv2d forward of f32 x and w with at most one
 * K block and at most two vectors of output channels runs as the direct
 * convolution (cg_conv.c) instead of the GEMM: vw becomes the narrowest
 * vector that holds the channels (LANES), nv the vectors, mr the pixels of
 * a tile (accumulators within the register file, at most 14, sized to
 * divide the output row evenly), and the C tile holds one output row, at
 * the start of scratch. B is read in place (never pre-packed: the plan's
 * caller checks conv.direct). x and w may be bf16 or f16 too (widened to
 * f32, the FMA families' numerics). A bf16 conv2d leaves the K-pair family
 * (bf16 = 0) on an AVX512-BF16 CPU only for at most CONV_DIRECT_BF16_C
 * input channels: with 8 or 16 (K = 72, 144) vdpbf16ps's GEMM, two
 * products an instruction, is faster than the direct kernel's f32 FMAs;
 * with 1 to 4 its packing of short rows costs more than the multiplies
 * (bench/results/conv-bf16-2026-11-27-s5.md). The AMX family's likewise:
 * its tiles would pad K = 9 or 27 to 32 and 8 filters to 16 columns
 * (tests/onnx/models/cnn's first layer: 0.149 ms on the tiles, 0.020 ms
 * float32's direct kernel, batch 16). */
/* The K-pair direct form (gemm_conv.kpair): a conv2d on vdpbf16ps (bf16
 * = 1) with an even C (each pair (c, c+1) of one tap: 4 bytes of x in
 * place), one K block (so one vdpbf16ps chain per output, as the packed
 * GEMM's) and 16 or 32 output channels (whole 16-lane vectors) sums the
 * same pairs in the same order as the GEMM, without packing A: the bits
 * of the packed GEMM. The GEMM spent half its time packing A and spilling
 * C at these widths (tests/onnx/models/cnn's second conv, K = 72, 16
 * channels, batch 16: 0.040 ms against 36 vdpbf16ps a pixel, 0.020 ms;
 * bench/results/cnn-bf16-2026-11-30-s15.md). */
enum { CONV_DIRECT_BF16_C = 4 };
static void choose_conv_direct(const cg_cpu_caps *caps, const cg_kernel *k, cg_gemm *g) {
  const ir_node *mm = k->ops[0];
  int vw = kernel_regs[caps->gemm_kernel].vw, regs = kernel_regs[caps->gemm_kernel].regs;
  bool kpair = g->bf16 == 1 && g->conv.C > CONV_DIRECT_BF16_C && g->conv.C % 2 == 0 && g->n_kblocks == 1 &&
               g->Nc % CG_BF16_LANES == 0 && g->Nc <= 2 * CG_BF16_LANES;
  if (g->conv.mode != GEMM_CONV_FWD || g->softmax || !cg_conv_direct_dtype(mm->srcs[0]->type.dtype) ||
      !cg_conv_direct_dtype(mm->srcs[1]->type.dtype) || (!kpair && g->K > KC_TARGET) || g->Nc > 2 * vw ||
      (g->bf16 && g->conv.C > CONV_DIRECT_BF16_C && !kpair))
    return;
  g->conv.kpair = kpair;
  if (!kpair) g->bf16 = 0;
  int lanes = vw;
  while (!kpair && lanes > 4 && lanes / 2 >= g->Nc) lanes /= 2;
  int nvec = (int)ceil_div(g->Nc, lanes);
  int64_t rmax = (regs - 2 - nvec) / nvec; /* less the w vectors, the broadcast and one spare */
  if (rmax > 14) rmax = 14;
  int64_t ow = g->conv.OW, tiles = ceil_div(ow, rmax);
  g->conv.direct = ceil_div(ow, tiles);
  g->vw = lanes, g->nv = nvec, g->nr = nvec * lanes, g->mr = (int)g->conv.direct;
  g->n_full = 1, g->tail_nv = 0, g->tail_valid = 0;
  g->b_src = GEMM_B_IN_PLACE;
  g->kc = g->K, g->n_kblocks = 1, g->mc = g->mr, g->nc = g->nr;
  g->lda = 0, g->ldc = g->nr, g->c_off = 0, g->c_rows = ow;
  g->b_off = round_up(g->c_rows * g->ldc * 4, 64);
  g->n_var = 0;
}

/* convolutional networks: the K blocks of a conv2d forward on the FMA
 * families hold whole kernel rows (KW*C values of k: one run of x per row
 * of A where the window row is inside x, emit_conv_gather), or whole taps
 * (C) when a kernel row is longer than KC_CONV_MAX, as many as fit in
 * KC_CONV_MAX, in blocks of equal size. KC_TARGET's blocks cut runs in
 * two (a 3x3 conv of 128 channels, K = 1152: five blocks of 231, each row
 * of A packed as two or three pieces) and spill the C tile at each block
 * edge; a packed A row is gathered for N/NR panels only (4 at 128 output
 * channels), so its packing is a larger share than a matmul's. Longer
 * blocks of whole rows, one thread's CPU time: 14% less for 32 channels
 * (K = 288, one block), 5% for 128, 1-2% for 64 and 256
 * (bench/results/conv-big-2026-11-27-s6.md). A block (MC rows of at
 * most KC_CONV_MAX f32, 516 KB with 14-row tiles) stays within a 1 MB L2;
 * the micro-kernel's A rows then stream from L2, which measured no slower. */
enum { KC_CONV_MAX = 1152 };
static void choose_conv_kblocks(cg_gemm *g) {
  const gemm_conv *cv = &g->conv;
  int64_t unit = cv->dw == 1 ? cv->KW * cv->C : cv->C; /* the gather's runs: kernel rows, or taps with dilation */
  if (unit > KC_CONV_MAX) unit = cv->C;
  if (unit > KC_CONV_MAX || g->K % unit) return;
  int64_t units = g->K / unit, per = KC_CONV_MAX / unit, nb = ceil_div(units, per);
  g->kc = ceil_div(units, nb) * unit;
  g->n_kblocks = ceil_div(g->K, g->kc);
}

/* convolutional networks: panel-outer order (cg_gemm.c,
 * emit_panels_outer) for a conv2d forward on the FMA families: each KC x
 * NR panel of B under every row tile of the row block, so the panel comes
 * from memory or L3 once per row block and from L2 for the block's other
 * tiles, and the k loop prefetches (prefetcht1) the same k row of the
 * next panel, which the row tiles after the first then cover. The
 * row-tile-outer order streamed the whole K block of B (KC x NC: 2 MB at
 * ResNet's 512 channels) per row tile. ResNet-18 at batch 1, one thread,
 * CPU time: its 3x3 convs at 7x7 3.5 -> 2.4 ms each, at 14x14 1.95 -> 1.75
 * ms, 56x56 and 28x28 unchanged (bench/results/cnn-profile-resnet18-2026-11-29.md).
 * Not for matmuls (their blocks were measured in the other order) nor the
 * K-pair and AMX families (their micro-kernels cover several panels). */
static void choose_panel_outer(cg_gemm *g) {
  g->panel_outer = g->conv.mode == GEMM_CONV_FWD && !g->conv.direct && !g->bf16 && !g->softmax && g->K > 0;
  if (g->panel_outer) g->prefetch_b = true;
}

static void choose(const cg_cpu_caps *caps, const cg_kernel *k, cg_gemm *g) {
  const ir_node *mm = k->ops[0], *a = mm->srcs[0];
  g->vw = kernel_regs[caps->gemm_kernel].vw;
  g->Nc = mm->type.dims[mm->type.rank - 1];
  g->b_src = GEMM_B_IN_PLACE; /* cg_gemm_plan may pre-pack a constant */
  ir_type_rule rule = ir_op_type_rule(mm->op); /* the contraction's variant: its shape rule */
  if (rule == IR_TYPE_CONV2D || rule == IR_TYPE_CONV2D_INPUT_GRAD || rule == IR_TYPE_CONV2D_FILTER_GRAD) {
    /* convolutional networks: A gathered (gemm_conv) */
    const ir_type *x = rule == IR_TYPE_CONV2D_INPUT_GRAD ? &mm->type : &a->type;
    const ir_type *w = rule == IR_TYPE_CONV2D ? &mm->srcs[1]->type : rule == IR_TYPE_CONV2D_INPUT_GRAD ? &mm->srcs[1]->type : &mm->type;
    const ir_type *dy = rule == IR_TYPE_CONV2D ? &mm->type : rule == IR_TYPE_CONV2D_INPUT_GRAD ? &a->type : &mm->srcs[1]->type;
    g->conv = (gemm_conv){.H = x->dims[1], .W = x->dims[2], .C = x->dims[3], .KW = w->dims[1], .OH = dy->dims[1],
                          .OW = dy->dims[2], .O = w->dims[3], .sh = mm->attr.strides.v[0], .sw = mm->attr.strides.v[1],
                          .dh = mm->attr.dilations.v[0], .dw = mm->attr.dilations.v[1], .pt = mm->attr.pads.v[0],
                          .pl = mm->attr.pads.v[2]};
    gemm_conv *cv = &g->conv;
    if (rule == IR_TYPE_CONV2D) {
      cv->mode = GEMM_CONV_FWD, cv->rows_per_item = cv->OH * cv->OW;
      g->K = w->dims[0] * w->dims[1] * w->dims[2];
    } else if (rule == IR_TYPE_CONV2D_INPUT_GRAD) {
      cv->mode = GEMM_CONV_DX, cv->rows_per_item = cv->H * cv->W;
      g->K = w->dims[0] * w->dims[1] * w->dims[3];
      g->b_src = GEMM_B_PACK_CALL_T; /* w's taps transposed, packed per call */
    } else {
      cv->mode = GEMM_CONV_DW, cv->rows_per_item = 1, cv->k_per_item = cv->OH * cv->OW;
      g->a_trans = 1;
      g->K = ir_type_is_batched(x) ? -1 : x->dims[0] * cv->k_per_item;
      g->b_src = GEMM_B_PACK_BLOCK;
    }
  } else if (rule == IR_TYPE_BATCH_MATMUL) { /* general tensors */
    choose_bmm(mm, g);
  } else if (rule == IR_TYPE_MATMUL_TN) { /* y = a^T b: the sum runs over a's rows, the batch or its own */
    g->a_trans = 1;
    /* general tensors: a [N, .., K] sums over every dimension but its
     * last: k_per_item GEMM rows per batch row (flat, row-major) */
    int64_t inner = 1;
    for (int r = 1; r < a->type.rank - 1; r++) inner *= a->type.dims[r];
    g->conv.k_per_item = inner;
    g->K = ir_type_is_batched(&a->type) ? -1 : a->type.dims[0] * inner;
    g->b_src = GEMM_B_PACK_BLOCK;
  } else {
    g->K = a->type.dims[a->type.rank - 1];
    if (rule == IR_TYPE_MATMUL_NT) g->b_src = GEMM_B_PACK_CALL_T; /* y = a b^T */
    /* general tensors: a [N, .., K] (Keras Dense on the last axis) is the
     * flat matrix [N*.., K]: rows_per_item GEMM rows per launch row */
    int64_t inner = 1;
    for (int r = 1; r < a->type.rank - 1; r++) inner *= a->type.dims[r];
    g->conv.rows_per_item = inner;
  }
  /* the K-pair family takes a contraction of two bf16 operands; its B is
   * always packed (a constant at compile time, else per call) */
  g->bf16 = caps->gemm_kernel == CG_GEMM_KERNEL_AVX512_BF16 && a->type.dtype == DT_BF16 &&
            mm->srcs[1]->type.dtype == DT_BF16 &&
            (!g->conv.mode || g->conv.mode == GEMM_CONV_FWD) /* a conv2d's gradients: the FMA family */
            && !g->bmm.on; /* general tensors: batch_matmul too */
  /* AMX tiles (gemm/cg_gemm_amx.h): the same contractions; a fused row
   * softmax wider than one 32-column panel (more C tiles than the family
   * has) goes to vdpbf16ps, which the AMX CPUs have too */
  /* (a static row count under one tile's 16 rows, a batch-1 GEMV, stays
   * on the FMA family: the tiles would pad it to 32 rows; mnist_mlp at
   * batch 1 took 1.2x the FMA family's time on them) */
  int64_t static_rows = mm->type.dims[0] >= 0 ? mm->type.dims[0] * (g->conv.rows_per_item > 0 ? g->conv.rows_per_item : 1) : -1;
  if (caps->gemm_kernel == CG_GEMM_KERNEL_AMX_BF16 && a->type.dtype == DT_BF16 && mm->srcs[1]->type.dtype == DT_BF16 &&
      (!g->conv.mode || g->conv.mode == GEMM_CONV_FWD) && !g->bmm.on && /* a conv2d's packed rows are row-major pairs */
      (static_rows < 0 || static_rows >= CG_AMX_ROWS)) {
    bool softmax = k->n_ops > 1 && ir_op_kernel(k->ops[k->n_ops - 1]->op) == IR_KERNEL_ROWWISE;
    g->bf16 = !softmax || g->Nc <= 2 * g->vw ? GEMM_AMX : caps->avx512bf16 && caps->avx512bw ? 1 : 0;
  }
  if (g->bf16 && g->b_src == GEMM_B_IN_PLACE) g->b_src = GEMM_B_PACK_CALL;
  g->softmax = k->n_ops > 1 && ir_op_kernel(k->ops[k->n_ops - 1]->op) == IR_KERNEL_ROWWISE; /* cg_plan.c */
  g->prefetch_b = kernel_regs[caps->gemm_kernel].prefetch_b;
  int budget = kernel_regs[caps->gemm_kernel].regs - 4; /* accumulators: the registers less B, A and one spare */
  g->nv = g->softmax ? (int)ceil_div(g->Nc, g->vw) : 2;
  if (!g->softmax && g->Nc <= g->vw) g->nv = 1; /* a narrow B: one vector per row */
  g->nr = g->nv * g->vw;
  g->mr = budget / g->nv;
  if (g->mr > 14) g->mr = 14;
  if (g->mr < 1) g->mr = 1;
  if (g->bf16 == GEMM_AMX) g->mr = CG_AMX_MR; /* two C tiles of 16 rows */
  g->n_full = g->Nc / g->nr;
  int64_t rest = g->Nc - g->n_full * g->nr;
  g->tail_nv = (int)ceil_div(rest, g->vw);
  g->tail_valid = rest ? (int)(rest - (g->tail_nv - 1) * g->vw) : 0;
  /* K blocks of the K-pair family: twice as many k, the same bytes of B
   * per panel row and of A per row as f32's KC_TARGET; half the C-tile
   * spills and reloads (matmul_tn's C tile holds every row of the call) */
  int64_t kc_target = g->bf16 ? 2 * KC_TARGET : KC_TARGET;
  if (g->K < 0) { /* blocks of kc_target rows of the run's batch, the last one short */
    g->n_kblocks = -1;
    g->kc = kc_target;
  } else {
    g->n_kblocks = ceil_div(g->K, kc_target);
    g->kc = ceil_div(g->K, g->n_kblocks);
    if (g->bf16) { /* K blocks start at even k: whole pairs; AMX: whole tile steps of 32 */
      g->kc = round_up(g->kc, g->bf16 == GEMM_AMX ? CG_AMX_KSTEP : 2);
      g->n_kblocks = ceil_div(g->K, g->kc);
    }
    if (g->conv.mode == GEMM_CONV_FWD && !g->bf16) choose_conv_kblocks(g);
  }
  g->mc = (int64_t)MC_PANELS * g->mr;
  g->nc = g->Nc < NC_TARGET ? round_up(g->Nc, g->nr) : round_up(NC_TARGET, g->nr);
  /* packed A: mc rows of kc, padded so that rows never alias in L1; or,
   * from a stored [K, M] (a_trans), kc rows of mc: a straight copy of its
   * rows, whose mr values per k the micro-kernel reads from one line */
  /* (the K-pair family: A's rows hold kc / 2 i32 pairs) */
  /* (AMX: row-major pairs whatever A's storage, for the tile loads) */
  bool a_kmajor = g->a_trans && g->bf16 != GEMM_AMX;
  g->lda = a_kmajor ? round_up(g->mc, g->vw) + g->vw : round_up(g->bf16 ? g->kc / 2 : g->kc, g->vw) + g->vw;
  g->ldc = g->nc + g->vw;
  g->c_off = round_up((a_kmajor ? g->kc : g->mc) * g->lda * 4, 64);
  /* the C tile: a row block's, or every row a call may get when K blocks
   * are the outer loop (B packed a K block at a time: cg_gemm_emit) */
  int64_t all_rows = g->conv.mode == GEMM_CONV_DW ? mm->type.dims[0] * mm->type.dims[1] * mm->type.dims[2] /* dw: KH*KW*C */
                                                  : mm->type.dims[0];
  if (!g->conv.mode && g->conv.rows_per_item > 1) all_rows *= g->conv.rows_per_item; /* general tensors */
  g->c_rows = g->b_src == GEMM_B_PACK_BLOCK ? round_up(all_rows, g->mc) : g->mc;
  g->b_off = round_up(g->c_off + g->c_rows * g->ldc * 4, 64);
  /* row variants: the main tile, then 4 and 1 rows over several panels */
  g->n_var = 0;
  g->var[g->n_var++] = (gemm_variant){g->mr, 1};
  /* convolutional networks: an image's rows that whole tiles leave over
   * (OH*OW = 49 at 7x7: 3 x 14 + 7) as one tile of their own, not 4 + 1 + 1 + 1 */
  int64_t left = g->conv.mode == GEMM_CONV_FWD ? g->conv.rows_per_item % g->mr : 0;
  if (left > 4 && g->bf16 != GEMM_AMX) g->var[g->n_var++] = (gemm_variant){(int)left, 1};
  for (int mr = 4; mr >= 1 && g->bf16 != GEMM_AMX; mr -= 3) { /* AMX: partial 32-row tiles instead */
    if (mr >= g->mr) continue;
    int np = 1; /* a lone row gets several panels: independent FMA chains */
    while (mr == 1 && np < 4 && g->nv * np * 2 <= budget) np *= 2;
    g->var[g->n_var++] = (gemm_variant){mr, np};
  }
  choose_conv_direct(caps, k, g);
  choose_panel_outer(g);
}

/* convolutional networks: a grouped convolution. group_conv2d is a map of
 * the kernel kit (an ELTWISE kernel of the shared plan: a chain it starts,
 * its bias and activation fused), which every target can run one element
 * at a time; the CPU gives a forward whose groups hold whole vectors of
 * output channels (O/G a multiple of 4) the direct convolution instead
 * (cg_conv.c), with the GEMM's epilogue function for the fused chain:
 * per group a GEMM of K = KH*KW*C/G over its O/G columns, x read in place
 * at the group's channels. Groups of real nets are narrow (RegNet: 8
 * channels; ResNeXt-50 32x4d: 4 to 32) and K short (36 to 288): one
 * packed panel of 32 columns would be mostly padding, and one K block
 * holds the whole sum, the direct kernel's regime. Column blocks of nr =
 * nvec x lanes channels (lanes the widest vector of the family that
 * divides O/G, nvec 2 when two fit a group) lie inside one group; the
 * launch splits images first, then column blocks (a batch of 1: groups
 * over threads). Each output element is one FMA chain over (kh, kw, c) in
 * order from 0 with the padding taps skipped: the kit's map's chain, so
 * the same bits as before and for any split. Depthwise convolutions (one
 * output channel a group) stay on the kit's vectorized map. */
/* (gemm_conv.group_pack: where w is too large for L1 and an image of x
 * fits L2, the column blocks run outside the output rows, each with its
 * columns of w copied to contiguous rows in scratch, so a block's weights
 * come from L1 for each of the image's output rows instead of all of w
 * from L2 per row (a row stride of O elements, 4 KB at 1024 channels,
 * put a group's rows in a few L1 sets). ResNeXt-50's last stage, 1024
 * channels of 32 a group, 1.2 MB of w, 7x7: 5-16% less one-thread CPU
 * time; its 14x14 stage (295 KB of w) measured no change either way
 * (within the noise, +-5%), and its first stages, where x is 0.8 to 3.2
 * MB or w fits L1, lost 10-46%: each block reads x again from L2 or L3
 * (bench/results/cnn-gemm-2026-11-30-s14.md).) */
/* (gemm_conv.group_pack 2, groups of a multiple of 16 input channels
 * (ResNeXt-50's 14x14 and 7x7 stages, 16 and 32): the same order, and
 * each block's group's channels of the image's x copied to [H, W, C/G] in
 * scratch as well. In place, a tile's pixels lie C elements apart (2-4 KB,
 * twice that at stride 2) and fall in one or two L1 sets with the
 * block's w rows; the copy reads each line of x once (a group's channels
 * are whole lines). In the model, one thread: 14x14 stride 2 and 7x7
 * 20-24% less time, the 14x14 ones 3-8% (bench/results/cnn-grouped-2026-11-30-s15.md).
 * Groups of 8 (RegNet, ResNeXt's 28x28 stage) copied so took 8-30% more:
 * half a line a group, each line of x read twice.)
 * (w, a constant used by this kernel only, is stored pre-packed as the
 * GEMM's panels of one K block: per column block K rows of nr
 * (cg_gemm_plan, group_direct), read in order instead of nr values at a
 * row stride of O; with group_pack no run-time copy of w is left.) */
enum { GROUP_PACK_X_MAX = 1 << 20, GROUP_PACK_W_MIN = 512 << 10 };
static bool choose_group_conv(const cg_cpu_caps *caps, const cg_kernel *k, cg_gemm *g) {
  if (k->kind != CG_KERNEL_ELTWISE || ir_op_type_rule(k->ops[0]->op) != IR_TYPE_GROUP_CONV2D) return false;
  const ir_node *op = k->ops[0];
  const ir_type *x = &op->srcs[0]->type, *w = &op->srcs[1]->type, *y = &op->type;
  if (!cg_conv_direct_dtype(x->dtype) || !cg_conv_direct_dtype(w->dtype) || op->attr.acc != DT_F32) return false;
  int64_t C = x->dims[3], Cg = w->dims[2], O = w->dims[3];
  if (Cg <= 0 || C % Cg || C / Cg < 2) return false;
  int64_t G = C / Cg, Og = O / G;
  if (Og % 4 || Og * G != O) return false;
  int vw = kernel_regs[caps->gemm_kernel].vw, regs = kernel_regs[caps->gemm_kernel].regs;
  int lanes = vw;
  while (lanes > 4 && Og % lanes) lanes /= 2;
  int nvec = (Og / lanes) % 2 == 0 ? 2 : 1;
  /* groups of 4 and 4 (ResNeXt-50 32x4d's first stage): blocks of vw / 4
   * groups (cg_conv.c, quads), tiles of the registers left by the kernel
   * row's 4 x KW vectors of w, the x vector and its shuffle */
  int64_t KW = w->dims[1], rmax_quads = regs - 2 - 4 * KW;
  bool quads = Cg == 4 && Og == 4 && vw >= 8 && O % vw == 0 && KW <= CG_CONV_QUADS_MAX_KW && rmax_quads >= 4;
  if (quads) lanes = vw, nvec = 1;
  memset(g, 0, sizeof *g);
  g->conv = (gemm_conv){.mode = GEMM_CONV_FWD, .rows_per_item = y->dims[1] * y->dims[2], .H = x->dims[1],
                        .W = x->dims[2], .C = C, .KW = w->dims[1], .OH = y->dims[1], .OW = y->dims[2], .O = O,
                        .sh = op->attr.strides.v[0], .sw = op->attr.strides.v[1], .dh = op->attr.dilations.v[0],
                        .dw = op->attr.dilations.v[1], .pt = op->attr.pads.v[0], .pl = op->attr.pads.v[2], .groups = G};
  int64_t rmax = quads ? rmax_quads : (regs - 2 - nvec) / nvec; /* as choose_conv_direct */
  if (rmax > 14) rmax = 14;
  int64_t ow = g->conv.OW, tiles = ceil_div(ow, rmax);
  g->conv.direct = ceil_div(ow, tiles);
  g->K = w->dims[0] * w->dims[1] * Cg;
  g->Nc = O;
  g->vw = lanes, g->nv = nvec, g->nr = nvec * lanes, g->mr = (int)g->conv.direct;
  g->n_full = O / g->nr;
  g->b_src = GEMM_B_IN_PLACE;
  g->kc = g->K, g->n_kblocks = 1, g->mc = g->mr, g->nc = g->nr;
  g->ldc = O, g->c_off = 0, g->c_rows = ow; /* the C tile: one output row, every column of the call */
  g->b_off = round_up(g->c_rows * g->ldc * 4, 64);
  int64_t x_bytes = x->dims[1] * x->dims[2] * C * dtype_size(x->dtype), w_bytes = g->K * O * dtype_size(w->dtype);
  g->conv.group_pack = Cg % 16 == 0 ? 2 : x_bytes <= GROUP_PACK_X_MAX && w_bytes >= GROUP_PACK_W_MIN ? 1 : 0;
  return true;
}

/* A contraction kernel whose B operand is [K, N] as stored (matmul's shape
 * rule), so a constant B may be stored pre-packed. */
static bool plain_matmul(const cg_kernel *k) {
  if (k->kind != CG_KERNEL_CONTRACT) return false;
  ir_type_rule r = ir_op_type_rule(k->ops[0]->op);
  return r == IR_TYPE_MATMUL || r == IR_TYPE_CONV2D;
}

/* convolutional networks: a grouped convolution on the direct kernel
 * (choose_group_conv), whose w may be stored pre-packed: its column blocks
 * of nr, each K rows of nr (the GEMM's panels of one K block) */
static bool group_direct(const cg_kernel *k, const cg_gemm *g) {
  return k->kind == CG_KERNEL_ELTWISE && g && g->conv.direct && g->conv.groups > 1;
}

/* convolutional networks: how a conv2d forward's GEMM launch splits over
 * threads. A conv2d's A is gathered block by block, and a tile of fewer
 * columns than the row's gathers the same A blocks for fewer panels (a
 * one-panel tile: the gather per 32 columns instead of per Nc). With a
 * batch the launch rows are images: threads get row tiles first, each at
 * least a row block (mc GEMM rows, in whole images), columns only when
 * the images run out. With a static batch the launch rows are the GEMM's
 * own (pixels, in steps of whole micro-tiles), and the runtime weighs a
 * row split (each row tile reads all of B) against a column split (each
 * column tile gathers all of A) by their cost (rt_launch.tile_row_cost,
 * tile_col_cost): at batch 1 the images had run out at once, so every
 * conv split over columns, and ResNet-18's 56x56 to 14x14 convs took
 * 1.15-1.30x their one-thread CPU time on 2 threads, their A gathered once
 * per column tile (bench/results/cnn-b1-threads-2026-11-29-s12.md). The
 * costs, per row and column of a tile, in units of a row-column of its
 * multiply-adds: gathering a row of A (K values, stored once into the
 * packed block) about as much as TILE_ROW_COST columns' FMAs of it;
 * reading a column of B (K values, most from L3 or memory) as much as
 * TILE_COL_COST rows' FMAs. Every output element is the same FMA chain
 * over k whatever the tile, so the split never changes a bit. The direct
 * convolution (few output channels: one column tile) of a static batch
 * splits its output rows (N x OH), not its images: at batch 1 it ran on one
 * thread (7 of MobileNetV2's convs, 0.9 of its 6.6 ms). */
enum { TILE_ROW_COST = 4, TILE_COL_COST = 8 };
static void conv_launch(const cg_kernel *k, cg_gemm *g, cg_kernel_launch *l) {
  int64_t images = k->ops[0]->type.dims[0];
  if (g->conv.direct) { /* the direct convolution (cg_conv.c): output rows, for a static batch */
    if (images <= 0) return;
    g->conv.flat_rows = 1;
    l->rows_fixed = images * g->conv.OH;
    return;
  }
  if (images <= 0) { /* a batch: images */
    l->row_tile_min = ceil_div(g->mc, g->conv.rows_per_item);
    return;
  }
  g->conv.flat_rows = 1;
  l->rows_fixed = images * g->conv.rows_per_item;
  l->row_step = g->mr;
  l->tile_row_cost = TILE_ROW_COST;
  l->tile_col_cost = TILE_COL_COST;
}

void cg_gemm_plan(const cg_cpu_caps *caps, const cg_plan *plan, cg_cpu_layout *layout) {
  CASTOR_ASSERT(caps);
  for (int ki = 0; ki < plan->n_kernels; ki++) {
    const cg_kernel *k = &plan->kernels[ki];
    if (!cg_is_gemm(k)) {
      cg_gemm *g = arena_alloc(layout->arena, sizeof *g);
      if (!choose_group_conv(caps, k, g)) continue;
      layout->gemm[ki] = g; /* convolutional networks: images first, then column blocks */
      int64_t pack_bytes = g->conv.group_pack ? cg_conv_wpack_bytes(g, k->ops[0]->srcs[1]->type.dtype) +
                                                    cg_conv_xpack_bytes(g, k->ops[0]->srcs[0]->type.dtype)
                                              : 0;
      layout->launch[ki] = (cg_kernel_launch){.cols = g->Nc, .col_step = g->nr, .row_step = 1, .row_tile_min = 1,
                                              .rows_fixed = layout->launch[ki].rows_fixed, .scratch_bytes = g->b_off + pack_bytes};
      continue;
    }
    cg_gemm *g = arena_alloc(layout->arena, sizeof *g);
    choose(caps, k, g);
    layout->gemm[ki] = g;
    /* B packed at run time: the call's panels over all of K, or one K
     * block of a column block's panels */
    int64_t padded = round_up(g->Nc, g->nr);
    int64_t b_bytes = g->b_src == GEMM_B_PACK_CALL_T || g->b_src == GEMM_B_PACK_CALL ? g->K * padded * 4
                      : g->b_src == GEMM_B_PACK_BLOCK ? g->kc * (g->nc < padded ? g->nc : padded) * 4
                                                      : 0;
    /* AMX: bf16 with K padded to whole tile steps (more than f32's bytes only for K < 32) */
    if (g->bf16 == GEMM_AMX && g->b_src != GEMM_B_PACK_BLOCK && b_bytes && b_bytes < round_up(g->K, CG_AMX_KSTEP) * padded * 2)
      b_bytes = round_up(g->K, CG_AMX_KSTEP) * padded * 2;
    layout->launch[ki] = (cg_kernel_launch){.cols = g->Nc,
                                            .col_step = g->softmax ? g->Nc : g->nr,
                                            .row_step = g->conv.rows_per_item > 1 || g->bmm.on ? 1 : g->mr, /* a conv: images */
                                            .scratch_bytes = b_bytes ? g->b_off + b_bytes : g->b_off};
    if (g->conv.mode == GEMM_CONV_FWD) conv_launch(k, g, &layout->launch[ki]);
  }
  /* pre-pack a constant B when every use of it is as the B of GEMMs that
   * agree on the layout: one walk over the kernels records, per buffer, the
   * first GEMM reading it as B and whether any other use rules packing out
   * (linear in the plan, however many kernels share a weight) */
  int *b_of = xcalloc((size_t)plan->n_buffers + 1, sizeof *b_of); /* kernel + 1; -1: cannot pack */
  int *uses = xcalloc((size_t)plan->n_buffers + 1, sizeof *uses); /* kernels reading it as B */
  for (int kj = 0; kj < plan->n_kernels; kj++) {
    const cg_kernel *o = &plan->kernels[kj];
    if (o->kind == CG_KERNEL_COPY) {
      int b = plan->buffer_of[o->copy_src->id];
      if (b >= 0) b_of[b] = -1;
      continue;
    }
    for (int t = 0; t < o->n_ops; t++)
      for (int s = 0; s < o->ops[t]->n_srcs; s++) {
        int b = plan->buffer_of[o->ops[t]->srcs[s]->id];
        if (b < 0 || b_of[b] < 0) continue;
        bool as_b = (plain_matmul(o) && !layout->gemm[kj]->conv.direct) || group_direct(o, layout->gemm[kj]); /* direct: w in place */
        as_b = as_b && t == 0 && s == 1;
        if (as_b) uses[b]++;
        if (!as_b) b_of[b] = -1;
        else if (!b_of[b]) b_of[b] = kj + 1;
        else if (!same_layout(layout->gemm[kj], layout->gemm[b_of[b] - 1])) b_of[b] = -1;
      }
  }
  for (int ki = 0; ki < plan->n_kernels; ki++) {
    const cg_kernel *k = &plan->kernels[ki];
    bool grouped = group_direct(k, layout->gemm[ki]);
    if (!grouped && (!plain_matmul(k) || layout->gemm[ki]->conv.direct)) continue;
    const ir_node *bn = gemm_b(k);
    int b = plan->buffer_of[bn->id];
    if (bn->op != IR_OP_CONST || b < 0 || b_of[b] < 0) continue;
    cg_gemm *g = layout->gemm[ki];
    /* (grouped: only where a block's row of w is a whole line or more (16
     * f32: quads, groups of 16k), or group_pack reads it once an image:
     * RegNet's and ResNeXt's 28x28 groups of 8, 32 bytes a row, read w in
     * place, where a line holds two groups' rows and the next block finds
     * it in L1; packed, every block's rows were lines of their own from
     * L2: 6-11% more time at ResNeXt's 28x28 stage) */
    if (grouped && !g->conv.group_pack && g->nr * dtype_size(bn->type.dtype) < 64) continue;
    if (grouped) { /* convolutional networks: w's column blocks, K x nr each (cg_conv.c) */
      g->b_src = GEMM_B_PREPACKED;
      if (g->conv.group_pack) /* no copy of the block's w at run time */
        layout->launch[ki].scratch_bytes = g->b_off + cg_conv_xpack_bytes(g, k->ops[0]->srcs[0]->type.dtype);
      layout->packing[b] = (cg_packing){.panel = g->nr, .kc = g->K};
      layout->const_bytes[b] = g->K * g->Nc * dtype_size(bn->type.dtype);
      continue;
    }
    /* convolutional networks: a 3x3 conv2d's own kernel may be stored as
     * Winograd's U instead (cg_wino.c) */
    if (uses[b] == 1 && cg_wino_choose(caps, k, g, &layout->launch[ki])) {
      cg_wino_geom w;
      cg_wino_geom_of(g, &w);
      layout->packing[b] = (cg_packing){.panel = g->nr, .kc = g->K, .wino = 1};
      layout->const_bytes[b] = 36 * g->conv.C * w.op * 4;
      continue;
    }
    g->b_src = GEMM_B_PREPACKED;
    layout->launch[ki].scratch_bytes = g->b_off; /* no B packed at run time after all */
    layout->packing[b] = (cg_packing){g->nr, g->tail_nv * g->vw, g->kc, g->bf16, 0};
    layout->const_bytes[b] = g->bf16 == GEMM_AMX ? cg_gemm_amx_const_bytes(g->K, g->Nc, g->nr, g->tail_nv * g->vw)
                             : g->bf16 ? cg_gemm_bf16_const_bytes(g->K, g->Nc, g->nr, g->tail_nv * g->vw)
                                     : g->K * (g->n_full * g->nr + g->tail_nv * g->vw) * dtype_size(bn->type.dtype);
  }
  free(b_of);
  free(uses);
}

/* Kernels share a body only if their GEMM layouts agree on every field:
 * a new field must join the key below. */
_Static_assert(sizeof(struct cg_gemm) == 360 + sizeof(gemm_bmm), "cg_gemm changed: add the new field to cg_gemm_key");

void cg_gemm_key(const cg_gemm *g, str_buf *out) {
  str_buf_printf(out, "gemm %d,%d,%d,%d,%lld,%lld,%d,%d,%d,%lld,%d,%d,%lld,%lld,%lld,%lld,%lld,%lld,%lld,%lld,%lld,%d,%d,%d:", g->vw,
                 g->nv, g->nr, g->mr, (long long)g->K, (long long)g->Nc, g->a_trans, g->b_src, g->bf16, (long long)g->n_full,
                 g->tail_nv, g->tail_valid, (long long)g->kc, (long long)g->mc, (long long)g->nc,
                 (long long)g->n_kblocks, (long long)g->lda, (long long)g->ldc, (long long)g->c_off,
                 (long long)g->c_rows, (long long)g->b_off, g->softmax, g->prefetch_b, g->panel_outer);
  for (int v = 0; v < g->n_var; v++) str_buf_printf(out, "%dx%d,", g->var[v].mr, g->var[v].np);
  const int64_t *cv = &g->conv.mode; /* convolutional networks: every field of gemm_conv */
  str_buf_puts(out, "conv");
  for (size_t i = 0; i < sizeof g->conv / sizeof *cv; i++) str_buf_printf(out, " %lld", (long long)cv[i]);
  const int64_t *bv = &g->bmm.on; /* general tensors: every field of gemm_bmm */
  str_buf_puts(out, " bmm");
  for (size_t i = 0; i < sizeof g->bmm / sizeof *bv; i++) str_buf_printf(out, " %lld", (long long)bv[i]);
  str_buf_putc(out, ':');
}
