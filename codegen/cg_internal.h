/*
 * cg_internal.h: codegen's private interfaces: the kernel/buffer plan
 * (cg_plan.c), the LLVM emission of CPU kernels (cg_cpu.c, cg_math.c) and
 * the JIT (cg_jit.c).
 */
#ifndef CASTOR_CG_INTERNAL_H
#define CASTOR_CG_INTERNAL_H

#include <llvm-c/Core.h>

#include "codegen.h"

typedef enum cg_kernel_kind {
  CG_KERNEL_MATMUL,  /* matmul + epilogue ops */
  CG_KERNEL_ELTWISE, /* a chain of elementwise ops */
  CG_KERNEL_SOFTMAX, /* one row-wise softmax along the last dimension */
  CG_KERNEL_COPY     /* an output that is another buffer's value */
} cg_kernel_kind;

typedef struct cg_kernel {
  cg_kernel_kind kind;
  const char *name;  /* LLVM symbol: k<index>.<first node name> */
  ir_node **ops;     /* the fused nodes in order; ops[n_ops-1] is the result */
  int n_ops;
  ir_node *copy_src; /* COPY only */
  int out_buffer;    /* buffer written */
} cg_kernel;

typedef struct cg_plan {
  arena *arena;
  cg_kernel *kernels;
  int n_kernels;
  int *buffer_of;    /* node id -> buffer index, -1 if the node has none */
  rt_buffer *buffers;
  int n_buffers;
  rt_slot *slots;
  int n_slots;
  const ir_node **buffer_node; /* buffer -> the node whose value it holds */
} cg_plan;

/* Groups nodes into kernels and assigns buffers; the graph must be verified
 * and its ids current. Weight data is not copied here. */
bool cg_plan_build(const ir_graph *g, cg_plan *out, diag_sink *d);
void cg_plan_fini(cg_plan *p);

/* ---- LLVM emission helpers ---- */

typedef struct cg_emitter {
  LLVMContextRef ctx;
  LLVMModuleRef mod;
  LLVMBuilderRef b;
  LLVMTypeRef f32, i32, i64, i1, ptr, half, bf16, void_;
  int vw; /* f32 lanes of the widest native vector */
} cg_emitter;

/* Constant of type ty (float or <n x float>) with every lane = v. */
LLVMValueRef cg_const(cg_emitter *e, LLVMTypeRef ty, double v);
LLVMValueRef cg_emit_exp(cg_emitter *e, LLVMValueRef x, const char *name);
/* The activation or elementwise unary op `op` on x (f32 or <n x f32>). */
LLVMValueRef cg_emit_unary(cg_emitter *e, ir_op op, LLVMValueRef x, const char *name);
/* Rounds x (f32 lanes) to dtype and back, modelling a cast in registers. */
LLVMValueRef cg_emit_round_to(cg_emitter *e, LLVMValueRef x, ir_dtype to, const char *name);
/* Loads `lanes` elements of dtype at ptr (lanes == 1: scalar) as f32 lanes. */
LLVMValueRef cg_emit_load(cg_emitter *e, ir_dtype dt, LLVMValueRef ptr, int lanes, const char *name);
/* Stores f32 lanes to dtype at ptr. */
void cg_emit_store(cg_emitter *e, ir_dtype dt, LLVMValueRef val, LLVMValueRef ptr, int lanes);
LLVMTypeRef cg_llvm_dtype(cg_emitter *e, ir_dtype dt);

/* Emits every kernel of the plan as a function of the kernel ABI in
 * runtime.h into e->mod. */
bool cg_cpu_emit_kernels(cg_emitter *e, const cg_plan *plan, diag_sink *d);

#endif
