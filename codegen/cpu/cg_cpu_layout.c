/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cg_cpu_layout.c: the CPU target's own data about a plan, kept beside the
 * target-neutral plan rather than in it: which constants are stored
 * pre-packed for the GEMM and their sizes in that layout, each kernel's
 * thread split and scratch, and the GEMM layouts.
 *
 * Lifecycle: cg_cpu_layout_init sizes it for a built plan (nothing packed,
 * every constant at the plan's size); cg_cpu_emit_kernels fills it while it
 * emits (cg_gemm_plan for matmul kernels); cg_cpu_program_describe adds it
 * to the target-neutral description (cg_program.c) to give the runtime
 * the sizes, data and launches the kernels expect.
 */
#include <string.h>

#include "codegen/cpu/cg_cpu.h"
#include "codegen/cpu/cg_gemm_internal.h"
#include "codegen/cpu/cg_wino_pack.h"
#include "codegen/cpu/gemm/cg_gemm_amx.h"
#include "codegen/cpu/gemm/cg_gemm_bf16.h"

void cg_cpu_layout_init(cg_cpu_layout *l, const cg_plan *p) {
  memset(l, 0, sizeof *l);
  l->arena = arena_create();
  l->packing = arena_alloc(l->arena, (size_t)(p->n_buffers + 1) * sizeof *l->packing);
  l->const_bytes = arena_alloc(l->arena, (size_t)(p->n_buffers + 1) * sizeof *l->const_bytes);
  for (int b = 0; b < p->n_buffers; b++)
    if (p->buffers[b].kind == RT_BUF_CONST) l->const_bytes[b] = p->buffers[b].bytes_fixed;
  l->launch = arena_alloc(l->arena, (size_t)(p->n_kernels + 1) * sizeof *l->launch);
  l->gemm = arena_alloc(l->arena, (size_t)(p->n_kernels + 1) * sizeof *l->gemm);
  l->symbol = arena_alloc(l->arena, (size_t)(p->n_kernels + 1) * sizeof *l->symbol);
  l->rep = arena_alloc(l->arena, (size_t)(p->n_kernels + 1) * sizeof *l->rep);
  l->args = arena_alloc(l->arena, (size_t)(p->n_kernels + 1) * sizeof *l->args);
  l->n_args = arena_alloc(l->arena, (size_t)(p->n_kernels + 1) * sizeof *l->n_args);
  l->shared = arena_alloc(l->arena, (size_t)(p->n_kernels + 1) * sizeof *l->shared);
  for (int k = 0; k < p->n_kernels; k++) l->symbol[k] = p->kernels[k].name, l->rep[k] = k;
}

void cg_cpu_layout_fini(cg_cpu_layout *l) {
  arena_destroy(l->arena);
  memset(l, 0, sizeof *l);
}

const void *cg_cpu_layout_const_data(const cg_cpu_layout *l, const cg_plan *p, int b, arena *a) {
  const ir_node *n = p->buffer_node[b];
  const cg_packing *pk = &l->packing[b];
  const char *src = n->attr.data;
  if (!pk->panel || !src) return src;
  /* block by block of kc rows: the block's panels of pk->panel columns,
   * each kk x panel row-major, then its tail panel kk x tail. A GEMM's K
   * block of B is then contiguous: its panels do not alias in the caches
   * as panels K x panel apart would (a power-of-two stride when K is one).
   * Zeroed by the arena, so the tail's padding columns are 0. */
  /* [K, Nc], or a conv2d's kernel [KH, KW, C, O]: the matrix [KH*KW*C, O] */
  int64_t Nc = n->type.dims[n->type.rank - 1], K = 1, np = pk->panel, kc = pk->kc;
  for (int r = 0; r < n->type.rank - 1; r++) K *= n->type.dims[r];
  if (pk->wino) { /* convolutional networks: Winograd's U (cg_wino.c) */
    float *pd = arena_alloc_aligned(a, (size_t)l->const_bytes[b], 64);
    cg_wino_pack_const(pd, (const float *)src, n->type.dims[2], Nc, pk->panel);
    return pd;
  }
  if (pk->pairs == 2) { /* the AMX family */
    void *pd = arena_alloc_aligned(a, (size_t)l->const_bytes[b], 64);
    cg_gemm_amx_pack_const(pd, (const uint16_t *)src, K, Nc, pk->panel, pk->tail, kc);
    return pd;
  }
  if (pk->pairs) {
    void *pd = arena_alloc_aligned(a, (size_t)l->const_bytes[b], 64);
    cg_gemm_bf16_pack_const(pd, (const uint16_t *)src, K, Nc, pk->panel, pk->tail, kc);
    return pd;
  }
  size_t ds = (size_t)dtype_size(n->type.dtype);
  char *dst = arena_alloc_aligned(a, (size_t)l->const_bytes[b], 64);
  int64_t n_full = Nc / np, off = 0;
  for (int64_t k0 = 0; k0 < K; k0 += kc) {
    int64_t kk = K - k0 < kc ? K - k0 : kc;
    for (int64_t q = 0; q < n_full; q++)
      for (int64_t k = k0; k < k0 + kk; k++, off += np)
        memcpy(dst + (size_t)off * ds, src + (size_t)(k * Nc + q * np) * ds, (size_t)np * ds);
    if (pk->tail)
      for (int64_t k = k0; k < k0 + kk; k++, off += pk->tail)
        memcpy(dst + (size_t)off * ds, src + (size_t)(k * Nc + n_full * np) * ds, (size_t)(Nc - n_full * np) * ds);
  }
  return dst;
}

rt_program *cg_cpu_program_describe(const ir_graph *g, const cg_plan *plan, const cg_cpu_layout *layout,
                                    diag_sink *d) {
  rt_program *p = cg_program_describe(g, plan, d);
  if (!p) return NULL;
  /* constants: the graph's data, or its pre-packed GEMM layout (the JIT
   * copies it, AOT emits it); a literal's value is the program's own */
  for (int b = 0; b < p->n_buffers; b++) {
    rt_buffer *buf = &p->buffers[b];
    if (buf->kind != RT_BUF_CONST || buf->data != plan->buffer_node[b]->attr.data) continue;
    buf->bytes_fixed = layout->const_bytes[b];
    buf->data = cg_cpu_layout_const_data(layout, plan, b, p->arena);
  }
  for (int ki = 0; ki < plan->n_kernels; ki++) {
    const cg_kernel *k = &plan->kernels[ki];
    rt_launch *l = &p->launches[ki];
    const cg_kernel_launch *split = &layout->launch[ki];
    l->cols = split->cols;
    l->col_step = split->col_step;
    l->scratch_bytes = split->scratch_bytes;
    l->row_tile_min = split->row_tile_min;
    l->tile_row_cost = split->tile_row_cost;
    l->tile_col_cost = split->tile_col_cost;
    if (layout->gemm[ki] && layout->gemm[ki]->conv.wino) l->algo = "winograd"; /* a literal: static storage */
    /* a kernel with a launch of its own keeps its row step
     * (cg_plan_launch_fill); every other kernel, a GEMM's included, takes
     * the layout's */
    if (!cg_has_own_launch(k) || cg_is_gemm(k)) l->row_step = split->row_step;
    if (split->rows_fixed > 0) { /* a static result split by its dimension 0 (cg_cpu.c), or a */
      /* conv2d's GEMM by its pixels (cg_gemm_plan.c): rows_fixed rows for the former's */
      CASTOR_ASSERT(!l->batched && l->rows_fixed > 0 && split->rows_fixed % l->rows_fixed == 0);
      int64_t per = split->rows_fixed / l->rows_fixed;
      l->rows_fixed = split->rows_fixed;
      l->work_per_row /= per;
      l->flops_per_row /= per;
    }
    if (layout->n_args[ki]) { /* a shared body's table (cg_kernel_share.c) */
      int *args = arena_alloc(p->arena, (size_t)layout->n_args[ki] * sizeof *args);
      memcpy(args, layout->args[ki], (size_t)layout->n_args[ki] * sizeof *args);
      l->args = args;
      l->n_args = layout->n_args[ki];
    }
  }
  p->images = cg_program_images(g, plan, p);
  if (!p->images) p->image_launches = p->image_slots = 0; /* launch by launch: the slots hold any batch */
  return p;
}
