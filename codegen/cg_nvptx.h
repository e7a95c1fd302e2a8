/*
 * cg_nvptx.h: what the NVPTX kernel emitters share (cg_nvptx.c: the module,
 * the kernel ABI of runtime/cuda.h, elementwise, pad/slice, softmax and copy
 * kernels, PTX emission; cg_nvptx_gemm.c: the GEMMs). Private to codegen/.
 *
 * Kernels address global memory through generic pointers (NVPTX's argument
 * lowering makes kernel pointer parameters global) and shared memory
 * through addrspace(3) pointers into one dynamic shared array,
 * castor_smem, sized per launch.
 */
#ifndef CASTOR_CG_NVPTX_H
#define CASTOR_CG_NVPTX_H

#include "../runtime/cuda.h"
#include "cg_cpu.h"

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

#endif
