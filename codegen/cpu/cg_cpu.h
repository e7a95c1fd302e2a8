/*
 * cg_cpu.h: what the CPU kernel emitters share (cg_cpu.c: the kernel ABI,
 * elementwise, row-wise and copy kernels; cg_gemm.c: the GEMM;
 * cg_rowwise.c: the row-wise ops): the state of the kernel being emitted,
 * counted loops, addressing, the fused elementwise chain and the row
 * accessor of row-wise ops. Private to codegen/.
 */
#ifndef CASTOR_CG_CPU_H
#define CASTOR_CG_CPU_H

#include "codegen/cg_internal.h"

typedef struct cg_kctx {
  cg_emitter *e;
  const cg_plan *plan;
  const cg_kernel *k;
  /* the kernel's parameters (runtime.h's ABI) */
  LLVMValueRef fn, bufs, batch, row0, row1, col0, col1, scratch;
  LLVMValueRef *base; /* per node id: its buffer pointer loaded in the entry block, or NULL */
  LLVMValueRef *spare_base; /* another such array, all NULL, for a helper function (the GEMM
                             * epilogue), which leaves it all NULL again (cg_clear_bases) */
  const int *slot;    /* per buffer: its index in bufs; NULL: bufs is the program's own table */
} cg_kctx;

/* for (iv = start; iv + step <= end; iv += step): the body runs only for
 * whole steps, so a vector step never reads past the range. */
typedef struct cg_loop {
  LLVMBasicBlockRef header, body, exit;
  LLVMValueRef iv, step;
} cg_loop;

cg_loop cg_loop_begin(cg_kctx *c, LLVMValueRef start, LLVMValueRef end, int64_t step, const char *name);
void cg_loop_end(cg_kctx *c, cg_loop *l);

LLVMValueRef cg_i64(cg_emitter *e, int64_t v);
/* Pointer to element `index` of n's buffer (n's dtype). */
LLVMValueRef cg_elem_ptr(cg_kctx *c, const ir_node *n, LLVMValueRef index);
/* llvm.fmuladd on f32 scalars or vectors. */
LLVMValueRef cg_fmuladd(cg_emitter *e, LLVMValueRef a, LLVMValueRef b, LLVMValueRef acc);
/* Broadcasts the f32 scalar s to `lanes` lanes (lanes == 1: s). */
LLVMValueRef cg_splat(cg_emitter *e, LLVMValueRef s, int lanes);
/* An alloca of ty in the entry block (SROA turns it into registers). */
LLVMValueRef cg_entry_alloca(cg_kctx *c, LLVMTypeRef ty, const char *name);
/* Loads the buffer pointer of every source and of the result of c->k
 * from c->bufs into c->base, at the builder's position. */
void cg_load_bases(cg_kctx *c);
/* Sets c->base back to NULL for every node cg_load_bases may have set. */
void cg_clear_bases(cg_kctx *c);
/* A 1-D bias vector over the last dimension. */
bool cg_is_bias(const ir_node *n);
/* Loads/stores the first `valid` of `lanes` elements (valid >= lanes: all,
 * as cg_emit_load/cg_emit_store); missing lanes load as 0. */
LLVMValueRef cg_load_part(cg_emitter *e, ir_dtype dt, LLVMValueRef ptr, int lanes, int valid, const char *name);
void cg_store_part(cg_emitter *e, ir_dtype dt, LLVMValueRef val, LLVMValueRef ptr, int lanes, int valid);
/* Applies ops[first..last) of the kernel to val, f32 lanes at flat element
 * index `idx` whose last-dimension coordinate is `col` (the value of
 * ops[first-1]; NULL when first == 0: every source is loaded). Only the
 * first `valid` lanes of other operands are read. Each op's result is
 * rounded to its dtype, modelling 16-bit values exactly. */
LLVMValueRef cg_apply_chain(cg_kctx *c, int first, int last, LLVMValueRef val, LLVMValueRef idx,
                            LLVMValueRef col, int lanes, int valid);

/* ---- the GEMM (cg_gemm.c) ---- */

/* Chooses the GEMM layout of every matmul kernel for e->caps into layout:
 * micro-tile, cache blocks (layout->gemm), the launch split and scratch
 * (layout->launch), and which constant B operands are stored pre-packed
 * (layout->packing, layout->const_bytes). */
void cg_gemm_plan(cg_emitter *e, const cg_plan *plan, cg_cpu_layout *layout);
/* Appends g's fields to a kernel's sharing key (cg_kernel_share.c). */
void cg_gemm_key(const cg_gemm *g, str_buf *out);
/* Emits the body of matmul kernel c->k with GEMM layout g (the entry block
 * is current). */
void cg_gemm_emit(cg_kctx *c, const cg_gemm *g);

/* ---- the training ops' own kernels (cg_train.c) ---- */

/* Emits the body of c->k, a CG_KERNEL_TRAIN kernel. */
void cg_train_emit(cg_kctx *c);

/* ---- row-wise ops (cg_rowwise.c) ---- */

/* One row of a row-wise op's input, as the kernel that owns it lays it
 * out: the standalone row kernel (cg_cpu.c) reads a line of its input
 * buffer; the GEMM epilogue (cg_gemm.c) computes the fused chain on its f32
 * tile. An owner embeds cg_row as the first member of its own state and
 * casts back in the callbacks.
 *
 * Elements are addressed by their offset j (i64) in the row, which is also
 * their flat index into per-row parameters of the op (layer norm's gamma
 * and beta: cg_elem_ptr(c, gamma, j)); c->base holds every source of the
 * kernel's ops. The emitter visits the n elements as vectors of `lanes`
 * f32 lanes at j = 0, lanes, ... while whole, then the n % lanes left:
 * with masked_tail as one more vector of which only the first `valid`
 * lanes are elements, else in scalar steps (lanes 1, nothing past the row
 * touched). */
typedef struct cg_row cg_row;
struct cg_row {
  int64_t n;        /* elements in the row (static) */
  int lanes;        /* f32 lanes of a whole vector */
  bool masked_tail; /* the tail is one partial vector, else scalar steps */
  /* The op's input at elements j .. j+lanes as f32 lanes; only the first
   * `valid` need be right. */
  LLVMValueRef (*load)(cg_row *row, LLVMValueRef j, int lanes, int valid);
  /* Operand `src` of the op, of its input's type, at elements j .. as f32
   * lanes (layer_norm_grad's dy); NULL where the owner has no such operand
   * (a GEMM epilogue ends only with a softmax). */
  LLVMValueRef (*load_operand)(cg_row *row, int src, LLVMValueRef j, int lanes, int valid);
  /* Stores the first `valid` of the op's result lanes (already rounded to
   * the op's dtype) at elements j .. */
  void (*store)(cg_row *row, LLVMValueRef j, LLVMValueRef val, int lanes, int valid);
  /* An f32 row (ptr to element 0) the emitter may keep values in between
   * passes, or NULL: it recomputes them. With masked_tail it is accessed
   * in whole vectors, past n. Without, it may be the result row when that
   * is f32: each result is stored after the last read of its element. */
  LLVMValueRef scratch;
  /* load is costly (it computes a fused chain): with a scratch row, the
   * emitter loads each element once and keeps it there; else it loads in
   * every pass that reads the input. */
  bool costly_load;
};

/* Emits the row-wise op `op` (softmax, layer_norm and its gradient ops)
 * over one row at the builder's position in c->fn: its results, rounded to
 * op's dtype, go to row->store. The numerics are the op's whoever owns the row: reductions
 * run per lane in element order, then across the lanes in lane order; a
 * scalar tail has its own, combined after. */
void cg_emit_rowwise(cg_kctx *c, const ir_node *op, cg_row *row);

/* ---- kernels that share one body (cg_kernel_share.c) ---- */

/* The buffers kernel k reads and writes, in the order its body first names
 * them (sources of its ops, then its result): out_table needs room for
 * plan->n_buffers. Returns how many. */
int cg_kernel_buffers(const cg_plan *plan, const cg_kernel *k, int *out_table);
/* Per kernel ki: out_rep[ki], the first kernel whose code is the same but
 * for its buffers, and out_count[ki], how many kernels ki represents (0
 * unless out_rep[ki] == ki). */
void cg_kernel_share(const cg_plan *plan, const cg_cpu_layout *layout, int *out_rep, int *out_count);

#endif
