/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cg_nvptx.h: what the NVPTX kernel emitters share (cg_nvptx.c: the module,
 * the kernel ABI of runtime/cuda.h, elementwise, pad/slice, row-wise and
 * copy kernels, PTX emission; cg_nvptx_gemm.c: the GEMMs;
 * cg_nvptx_rowwise.c: the row-wise ops, one warp per row;
 * cg_nvptx_train.c: the training ops by the kit's formulas), on top of the
 * target-neutral kit (kernel/cg_kit.h); it never includes the CPU
 * target's headers. Private to codegen/nvptx.
 *
 * Kernels address global memory through generic pointers (NVPTX's argument
 * lowering makes kernel pointer parameters global) and shared memory
 * through addrspace(3) pointers into one dynamic shared array,
 * castor_smem, sized per launch.
 */
#ifndef CASTOR_CG_NVPTX_H
#define CASTOR_CG_NVPTX_H

#include "runtime/cuda.h"
#include "codegen/kernel/cg_kit.h"

enum { CG_NV_SHARED = 3 };

typedef struct cg_nv_kernel {
  cg_kctx c;              /* e, plan, k, fn and base (per node id: its buffer's address) */
  LLVMValueRef batch;     /* i64 */
  LLVMValueRef smem;      /* @castor_smem, addrspace(3) */
  rt_cuda_launch *launch; /* the emitter fills in the geometry */
  int sm;                 /* 80, 90, ... */
} cg_nv_kernel;

/* ---- small emitters (cg_nvptx.c) ---- */

/* i32 special registers: "tid.x", "ctaid.x", "ctaid.y", "ntid.x", "nctaid.x" */
LLVMValueRef cg_nv_sreg(cg_emitter *e, const char *reg);
void cg_nv_barrier(cg_emitter *e);
/* Butterfly shuffle of an f32 across the full warp. */
LLVMValueRef cg_nv_shfl_xor(cg_emitter *e, LLVMValueRef v, int mask);
/* Max (is_max) or sum of v over the warp, in every lane. */
LLVMValueRef cg_nv_warp_reduce(cg_emitter *e, LLVMValueRef v, bool is_max);
/* Address of byte `off` (i32) of the dynamic shared memory. */
LLVMValueRef cg_nv_smem_at(cg_nv_kernel *g, LLVMValueRef off);
LLVMValueRef cg_i32(cg_emitter *e, int64_t v);
/* Calls the intrinsic `name` (overloaded on the types in ovl, may be 0). */
LLVMValueRef cg_nv_intrinsic(cg_emitter *e, const char *name, LLVMTypeRef *ovl, int n_ovl,
                             LLVMValueRef *args, int n_args, const char *vname);

/* for (iv = start; iv < end; iv += step) with any integer type and
 * run-time step; the body is current after begin. */
typedef struct cg_nv_loop {
  LLVMBasicBlockRef header, body, exit;
  LLVMValueRef iv, step;
} cg_nv_loop;
cg_nv_loop cg_nv_loop_begin(cg_nv_kernel *g, LLVMValueRef start, LLVMValueRef end, LLVMValueRef step,
                            const char *name);
void cg_nv_loop_end(cg_nv_kernel *g, cg_nv_loop *l);
/* if (cond) { ... }: returns the join block; the then-block is current. */
LLVMBasicBlockRef cg_nv_if(cg_nv_kernel *g, LLVMValueRef cond, const char *name);
void cg_nv_endif(cg_nv_kernel *g, LLVMBasicBlockRef join);

/* The rows of kernel k's result: batch or its fixed first dimension. */
LLVMValueRef cg_nv_rows(cg_nv_kernel *g, const ir_node *res);

/* ---- GEMM (cg_nvptx_gemm.c) ---- */

/* Emits matmul kernel g->c.k (mma.sync tensor-core GEMM for f16/bf16 with
 * K and Nc multiples of 8, else an FMA GEMM) and fills g->launch. */
void cg_nv_gemm_emit(cg_nv_kernel *g);

/* ---- row-wise ops (cg_nvptx_rowwise.c) ---- */

/* One row of a row-wise op's input as a warp sees it, laid out by the
 * kernel that owns it: the standalone row kernel (cg_nvptx.c) reads a
 * line of its input buffer; the GEMM epilogue (cg_nvptx_gemm.c) reads the
 * fused chain's values from its shared f32 tile. An owner embeds
 * cg_nv_row as the first member of its own state and casts back in the
 * callbacks. Lane l of the warp handles elements j = l, l + 32, ... < n;
 * j (of lane's integer type) is the element's offset in the row, and its
 * flat index into per-row parameters of the op (layer norm's gamma and
 * beta: cg_elem_ptr(&g->c, gamma, j)). */
typedef struct cg_nv_row cg_nv_row;
struct cg_nv_row {
  int64_t n;         /* elements in the row (static) */
  LLVMValueRef lane; /* this thread's lane in the warp, 0..31 (i32 or i64) */
  /* The op's input at element j as an f32. */
  LLVMValueRef (*load)(cg_nv_row *row, LLVMValueRef j);
  /* Stores the op's result at element j (f32, already rounded to the op's
   * dtype). */
  void (*store)(cg_nv_row *row, LLVMValueRef j, LLVMValueRef val);
};

/* Emits the row-wise op `op` (softmax) over one row with the whole warp, at
 * the builder's position in g->c.fn; every lane of the warp must reach it
 * (the reductions shuffle across the warp). Each lane reduces its elements
 * in order, then the warp combines the lanes by butterfly shuffles; the
 * same numerics for every owner. */
void cg_nv_emit_rowwise(cg_nv_kernel *g, const ir_node *op, cg_nv_row *row);

/* Whether the warp-per-row emitter has a formula for the row-wise op. */
bool cg_nv_has_warp_formula(ir_op op);

/* ---- training ops: the kit's formulas on GPU threads (cg_nvptx_train.c) ---- */

/* matmul_nt, matmul_tn, conv2d_input_grad, conv2d_filter_grad (and the
 * chain fused after them): one thread per result element. */
void cg_nv_emit_contract(cg_nv_kernel *g);
/* A kernel of the kit's training table (cg_train_has_formula): one thread
 * per launch row. */
void cg_nv_emit_train_rows(cg_nv_kernel *g);
/* A row-wise op with a kit line formula and no warp formula (layer_norm
 * and its gradients): one thread per line. */
void cg_nv_emit_line_rows(cg_nv_kernel *g);

#endif
