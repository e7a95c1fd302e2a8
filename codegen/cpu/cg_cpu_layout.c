/*
 * cg_cpu_layout.c: the CPU target's own data about a plan, kept beside the
 * target-neutral plan rather than in it: which constants are stored
 * pre-packed for the GEMM and their sizes in that layout, each kernel's
 * thread split and scratch, and the GEMM layouts.
 *
 * Lifecycle: cg_cpu_layout_init sizes it for a built plan (nothing packed,
 * every constant at the plan's size); cg_cpu_emit_kernels fills it while it
 * emits (cg_gemm_plan for matmul kernels); cg_program_describe reads it to
 * give the runtime the sizes, data and launches the kernels expect.
 */
#include <string.h>

#include "codegen/cg_internal.h"

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
  int64_t K = n->type.dims[0], Nc = n->type.dims[1], np = pk->panel, kc = pk->kc;
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
