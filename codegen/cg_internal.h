/*
 * cg_internal.h: codegen's private interfaces: the kernel/buffer plan
 * (cg_plan.c), the LLVM emission of CPU kernels (cg_cpu.c, cg_math.c) and
 * the JIT (cg_jit.c).
 */
#ifndef CASTOR_CG_INTERNAL_H
#define CASTOR_CG_INTERNAL_H

#include <llvm-c/Core.h>
#include <llvm-c/Error.h>
#include <llvm-c/TargetMachine.h>

#include "codegen/cpu/cg_cpu_caps.h"
#include "codegen/codegen.h"

/* The training ops, as case labels for the emitters' switches over ir_op
 * (so -Wswitch-enum still names any other op): the CPU target chains the
 * elementwise ones (cg_cpu.c) and gives the others kernels of their own
 * (cg_train.c); the cuda target rejects them all before planning. Not
 * here: layer_norm's gradient ops, row-wise ops that cg_rowwise.c emits
 * beside layer_norm, so switches list them beside it. */
#define CG_CASE_TRAINING_ELTWISE_OPS \
  case IR_OP_RELU_GRAD: \
  case IR_OP_SIGMOID_GRAD: \
  case IR_OP_TANH_GRAD: \
  case IR_OP_GELU_GRAD: \
  case IR_OP_SILU_GRAD:
#define CG_CASE_TRAINING_OTHER_OPS \
  case IR_OP_VARIABLE: \
  case IR_OP_LITERAL: \
  case IR_OP_MATMUL_NT: \
  case IR_OP_MATMUL_TN: \
  case IR_OP_SUM_ROWS: \
  case IR_OP_SOFTMAX_GRAD: \
  case IR_OP_XENT: \
  case IR_OP_XENT_GRAD: \
  case IR_OP_XENT_LOGITS: \
  case IR_OP_XENT_LOGITS_GRAD: \
  case IR_OP_MSE: \
  case IR_OP_MSE_GRAD: \
  case IR_OP_ALL_FINITE: \
  case IR_OP_SGD: \
  case IR_OP_SGD_MOMENTUM: \
  case IR_OP_RMSPROP: \
  case IR_OP_RMSPROP_MOMENTUM: \
  case IR_OP_RMSPROP_CENTERED: \
  case IR_OP_RMSPROP_CENTERED_MOMENTUM: \
  case IR_OP_ADAM: \
  case IR_OP_COUNT_STEP: \
  case IR_OP_LOSS_SCALE_UPDATE:
#define CG_CASE_TRAINING_OPS CG_CASE_TRAINING_ELTWISE_OPS CG_CASE_TRAINING_OTHER_OPS

typedef enum cg_kernel_kind {
  CG_KERNEL_TRAIN,   /* one training op with a kernel of its own (cg_train.c) */
  CG_KERNEL_MATMUL,  /* matmul + epilogue ops */
  CG_KERNEL_ELTWISE, /* a chain of elementwise ops */
  CG_KERNEL_SOFTMAX, /* one row-wise softmax along the last dimension */
  CG_KERNEL_COPY     /* an output that is another buffer's value */
} cg_kernel_kind;

/* Widest row softmax the planner fuses into the matmul kernel before it. */
enum { CG_GEMM_SOFTMAX_MAX_COLS = 64 };

typedef struct cg_kernel {
  cg_kernel_kind kind;
  const char *name;  /* LLVM symbol: k<index>.<first node name> */
  ir_node **ops;     /* the fused nodes in order; ops[n_ops-1] is the result */
  int n_ops;
  ir_node *copy_src; /* COPY only */
  int out_buffer;    /* buffer written */
} cg_kernel;

/* The plan is target-neutral: cg_plan_build makes it and every target only
 * reads it; a target keeps its own layouts beside it (cg_cpu_layout). */
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

/* Whether op gets a kernel of its own from cg_train.c (CG_KERNEL_TRAIN). */
bool cg_train_op(ir_op op);
/* Whether kernel k is a GEMM (cg_gemm.c): a matmul kernel, or a training
 * kernel of matmul_nt or matmul_tn. */
bool cg_is_gemm(const cg_kernel *k);
/* Its launch: rows when its result is not batched, the row step, and the
 * work of a row, fixed and per batch row (rt_launch's fields). A GEMM's
 * (matmul_nt, matmul_tn: cg_is_gemm) split and scratch come from its
 * GEMM layout instead. */
void cg_train_launch(const ir_node *op, int64_t *rows_fixed, int64_t *row_step, int64_t *work_per_row,
                     int64_t *work_per_batch);

/* Groups nodes into kernels and assigns buffers; the graph must be verified
 * and its ids current. Weight data is not copied here. */
bool cg_plan_build(const ir_graph *g, cg_plan *out, diag_sink *d);
void cg_plan_fini(cg_plan *p);

/* ---- the CPU target's layouts of a plan (cg_cpu_layout.c) ---- */

/* A constant stored in a layout private to codegen: a GEMM's B operand
 * [K, Nc] pre-packed into column panels, block by block of kc rows of K
 * (cg_gemm.c). panel == 0: plain. */
typedef struct cg_packing {
  int panel;  /* columns of each full panel */
  int tail;   /* padded columns of the last, partial panel (0: none) */
  int64_t kc; /* rows of K per block (the last block may have fewer) */
} cg_packing;

/* rt_launch's fields of the same names: how the runtime may split a kernel
 * over threads, and the per-call scratch it needs. */
typedef struct cg_kernel_launch {
  int64_t cols, col_step, row_step, scratch_bytes;
} cg_kernel_launch;

typedef struct cg_gemm cg_gemm; /* a matmul kernel's GEMM layout (cg_gemm.c) */

/* What the CPU emitter decides for a plan (cg_cpu_emit_kernels fills it)
 * and the program description reads: arrays in its own arena, indexed
 * like the plan's buffers and kernels. */
typedef struct cg_cpu_layout {
  arena *arena;
  cg_packing *packing;      /* per buffer: a constant's stored layout */
  int64_t *const_bytes;     /* per buffer: a constant's bytes in that layout
                             * (the plan's bytes_fixed unless packed; 0: not a constant) */
  cg_kernel_launch *launch; /* per kernel */
  cg_gemm **gemm;           /* per kernel: a GEMM's layout (cg_is_gemm), else NULL */
  /* Kernels that differ only in their buffers share one body
   * (cg_kernel_share.c). With share_by_table (set before emitting: the
   * JIT) the body is called with the kernel's own buffer table, which the
   * runtime builds from args (rt_launch.args); without it (AOT) each such
   * kernel is a small wrapper function of its own name that builds the
   * table and calls the body. */
  bool share_by_table;
  bool share_none;          /* set before emitting: no kernel shares a body */
  bool planned;             /* cg_cpu_plan_layout has filled what follows and the above */
  bool *shared;             /* per kernel: its body serves several kernels */
  const char **symbol;      /* per kernel: the function its launch calls */
  int *rep;                 /* per kernel: the first kernel with the same body */
  int **args;               /* per kernel: its table for a shared body, or NULL */
  int *n_args;
} cg_cpu_layout;

/* Sizes the layout for plan p: nothing packed, no launch split yet. _fini
 * of a zeroed layout is a no-op. */
void cg_cpu_layout_init(cg_cpu_layout *l, const cg_plan *p);
void cg_cpu_layout_fini(cg_cpu_layout *l);
/* Constant buffer b's data in the layout the kernels read (l->const_bytes[b]
 * bytes): the graph's own data, or a pre-packed copy allocated in a. */
const void *cg_cpu_layout_const_data(const cg_cpu_layout *l, const cg_plan *p, int b, arena *a);

/* Fills launch l of kernel ki: its work estimate from the plan and, with
 * a CPU layout, its thread split and scratch (NULL: none; the GPU keeps
 * its launch geometry in rt_cuda_launch). l->flops_per_row must be set. */
void cg_plan_launch_fill(const cg_plan *p, const cg_cpu_layout *layout, int ki, rt_launch *l);

/* ---- LLVM emission helpers ---- */

typedef struct cg_emitter {
  LLVMContextRef ctx;
  LLVMModuleRef mod;
  LLVMBuilderRef b;
  LLVMTypeRef f32, i32, i64, i1, ptr, half, bf16, void_;
  int vw; /* f32 lanes of the widest native vector */
  const cg_cpu_caps *caps; /* the CPU target's (cg_target's); NULL on the GPU */
} cg_emitter;

/* Fills e's types for ctx; vw is the f32 lanes of the widest vector the
 * kernels use (1 on the GPU, where a thread handles one element). A CPU
 * target sets e->caps afterwards. */
void cg_emitter_init(cg_emitter *e, LLVMContextRef ctx, LLVMModuleRef mod, int vw);

/* Constant of type ty (float or <n x float>) with every lane = v. */
LLVMValueRef cg_const(cg_emitter *e, LLVMTypeRef ty, double v);
LLVMValueRef cg_emit_exp(cg_emitter *e, LLVMValueRef x, const char *name);
/* The activation or elementwise unary op `op` on x (f32 or <n x f32>). */
LLVMValueRef cg_emit_unary(cg_emitter *e, ir_op op, LLVMValueRef x, const char *name);
/* dy * gelu'(x) on f32 scalars or vectors. */
LLVMValueRef cg_emit_gelu_grad(cg_emitter *e, LLVMValueRef dy, LLVMValueRef x, const char *name);
/* Rounds x (f32 lanes) to dtype and back, modelling a cast in registers. */
LLVMValueRef cg_emit_round_to(cg_emitter *e, LLVMValueRef x, ir_dtype to, const char *name);
/* Loads `lanes` elements of dtype at ptr (lanes == 1: scalar) as f32 lanes. */
LLVMValueRef cg_emit_load(cg_emitter *e, ir_dtype dt, LLVMValueRef ptr, int lanes, const char *name);
/* Stores f32 lanes to dtype at ptr. */
void cg_emit_store(cg_emitter *e, ir_dtype dt, LLVMValueRef val, LLVMValueRef ptr, int lanes);
LLVMTypeRef cg_llvm_dtype(cg_emitter *e, ir_dtype dt);

/* Emits every kernel of the plan as a function of the kernel ABI in
 * runtime.h into e->mod, for e->caps. It first chooses the layouts the
 * kernels need (GEMM layouts, pre-packed constants, launch splits) into
 * *layout, made with cg_cpu_layout_init for plan: describe the program
 * (cg_program.c) with that layout after emitting. */
bool cg_cpu_emit_kernels(cg_emitter *e, const cg_plan *plan, cg_cpu_layout *layout, const bool *only,
                         diag_sink *d);
/* The layout part of that, for caps (done by the first cg_cpu_emit_kernels
 * unless done before): afterwards the layout is final and only read, so
 * several threads may emit subsets of the kernels (only[ki]: emit kernel
 * ki, or the body it shares with others when it is the first of them;
 * NULL: all) into modules of their own contexts. */
void cg_cpu_plan_layout(const cg_cpu_caps *caps, const cg_plan *plan, cg_cpu_layout *layout);

/* ---- target setup shared by the JIT and AOT (cg_target.c) ---- */

/* Converts an LLVM error into a diagnostic (consuming it); false if none. */
bool cg_llvm_error(diag_sink *d, LLVMErrorRef err, const char *what);

typedef struct cg_target {
  char *triple, *cpu, *features; /* LLVM messages: the given or the host's */
  cg_cpu_caps caps;              /* features, parsed once: what the kernels may use */
  LLVMTargetMachineRef tm;       /* NULL once handed over (to the JIT) */
} cg_target;

/* A target machine for o's CPU and features (the host's by default); the
 * JIT code model when jit, else the default one. Call _fini either way. */
bool cg_target_init(cg_target *t, const cg_options *o, bool jit, diag_sink *d);
void cg_target_fini(cg_target *t);

/* A new module `name` in ctx holding the plan's kernels, verified, and
 * (if optimize) optimized at o->opt_level and dumped to o->dump_llvm by
 * cg_target_optimize: the same for the JIT and AOT. NULL on error. e is set up for emitting more into the
 * module; release it with cg_emitter_fini. layout, made with
 * cg_cpu_layout_init for plan, is filled by cg_cpu_emit_kernels. */
LLVMModuleRef cg_target_emit_module(cg_target *t, LLVMContextRef ctx, const char *name,
                                    const cg_plan *plan, const cg_options *o, bool optimize, cg_emitter *e,
                                    cg_cpu_layout *layout, const bool *only, diag_sink *d);
/* Runs default<O{o->opt_level}> over mod (none at 0) and dumps the result
 * to o->dump_llvm if set. False with a diagnostic if LLVM fails. */
bool cg_target_optimize(cg_target *t, LLVMModuleRef mod, const cg_options *o, diag_sink *d);
void cg_emitter_fini(cg_emitter *e);

/* The rt_program of a plan (cg_program.c): launches without addresses
 * (fn NULL); constants pointing at the graph's weight data, or at packed
 * copies in the program's arena where the CPU layout packs them. layout:
 * the CPU target's (after emission), or NULL for none (the GPU). */
rt_program *cg_program_describe(const ir_graph *g, const cg_plan *plan, const cg_cpu_layout *layout,
                                diag_sink *d);

/* Writes the C header of an AOT object (cg_aot_header.c) to ao->header_path. */
bool cg_aot_write_header(const rt_program *desc, const cg_aot_options *ao, const cg_target *t,
                         const ir_graph *g, diag_sink *d);

#endif
