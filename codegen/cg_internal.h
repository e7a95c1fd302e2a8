/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cg_internal.h: codegen's target-neutral private interfaces: the
 * kernel/buffer plan (cg_plan.c) and the runtime's description of a
 * planned program (cg_program.c). Every target reads these; nothing here
 * names a target (the kernel kit is kernel/cg_kit.h, the CPU target's
 * state cpu/cg_cpu.h, the NVPTX target's nvptx/cg_nvptx.h).
 */
#ifndef CASTOR_CG_INTERNAL_H
#define CASTOR_CG_INTERNAL_H

#include "codegen/codegen.h"

/* A kernel's kind is the kernel class (ir_ops.def's column) of the op that
 * starts it, never the op's name: every target has one emitter per kind. */
typedef enum cg_kernel_kind {
  CG_KERNEL_CONTRACT, /* a contraction (matmul, matmul_nt) + epilogue ops: the GEMM */
  CG_KERNEL_ELTWISE,  /* a chain of elementwise ops, perhaps started by a reindex op */
  CG_KERNEL_ROWWISE,  /* one row-wise op (softmax, layer_norm, their gradients) */
  CG_KERNEL_REDUCE,   /* one reduction over the rows (losses, sum_rows, matmul_tn) */
  CG_KERNEL_UPDATE,   /* one in-place update of variables (optimizers, counters) */
  CG_KERNEL_COPY      /* an output that is another buffer's value */
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
  /* convolutional networks, by image (cg_plan_cut_images; 0 without): the
   * kernels [0, image_launches) run an image (a pass) at a time, the rest
   * on the whole batch; slots [0, image_slots) hold the buffers that live
   * within those kernels (rt_program's fields of the same names) */
  int image_launches, image_slots;
  int *def, *last; /* scratch buffer -> the kernel that writes it, the last that reads it (-1: none) */
} cg_plan;

/* Whether kernel k is a GEMM: its op's flops column is IR_FLOPS_CONTRACT
 * (a contraction kernel, or the reduction matmul_tn, which sums over the
 * rows). A target splits it by its own GEMM layout. */
bool cg_is_gemm(const cg_kernel *k);
/* Whether kernel k has a launch of its own (cg_train_launch): a reduction
 * over the rows or an update, which a runtime must not split over the
 * rows it sums. */
bool cg_has_own_launch(const cg_kernel *k);
/* The launch of a kernel with one of its own, op its op: rows when its
 * result is not batched, the row step, and the work of a row, fixed and
 * per batch row (rt_launch's fields). A GEMM's (matmul_tn: cg_is_gemm)
 * split and scratch come from its GEMM layout instead. */
void cg_train_launch(const ir_node *op, int64_t *rows_fixed, int64_t *row_step, int64_t *work_per_row,
                     int64_t *work_per_batch);
/* The kernel kit's tables (codegen/kernel/), by op: whether the row-wise op
 * has a line formula (cg_rowwise.c), and whether the op has a training
 * formula (cg_train.c: the reduce and update classes' kernels but the
 * GEMMs, and the row-wise ops without a line formula). Emitting an op
 * without its row is an assertion, never another op's formula. */
bool cg_rowwise_has_line_formula(ir_op op);
bool cg_train_has_formula(ir_op op);
/* convolutional networks: whether sum_to (or bn_mean) op sums exactly
 * x's leading dimensions into an unbatched result (a bias's gradient,
 * [N,H,W,C] -> [C]), so y's elements are x's contiguous trailing
 * ones, numel(y) of them (*inner): its launch's rows go in whole vectors. */
bool cg_sum_to_leading(const ir_node *op, int64_t *inner);

/* Groups nodes into kernels and assigns buffers; the graph must be verified
 * and its ids current. Weight data is not copied here. */
bool cg_plan_build(const ir_graph *g, cg_plan *out, diag_sink *d);
void cg_plan_fini(cg_plan *p);
/* convolutional networks: where a graph computes the rows of a static
 * batch apart (ir_graph_rows_separate), the cut between the kernels that
 * run by image and those that run on the whole batch (want >= 0: that
 * many kernels by image, for tests and tuning; < 0: $CASTOR_IMAGE_CUT if
 * set, else cg_plan.c's cost rule), and the slots again: the buffers that
 * live within the first kernels in slots of their own, first, which the
 * runtime lays out for one pass of images; the rest (those read after the
 * cut live from the first kernel on) after them. Sets image_launches and
 * image_slots; no change where the rows are not apart or the cut is 0. */
void cg_plan_cut_images(const ir_graph *g, cg_plan *p, int want);

/* rt_launch's fields of the same names: how the runtime may split a kernel
 * over threads, and the per-call scratch it needs (a target's choice: the
 * CPU's layout, cpu/cg_cpu.h). */
typedef struct cg_kernel_launch {
  int64_t cols, col_step, row_step, scratch_bytes, row_tile_min;
  int64_t rows_fixed; /* a static result's launch rows when not 1 (0: as cg_program_describe has it) */
  int64_t tile_row_cost, tile_col_cost;
} cg_kernel_launch;

/* Fills launch l of kernel ki from the plan alone: its work estimate, the
 * row step of a training kernel of its own, no thread split and no
 * scratch (a target that splits kernels sets those after:
 * cg_cpu_program_describe). l->flops_per_row must be set. */
void cg_plan_launch_fill(const cg_plan *p, int ki, rt_launch *l);

/* The rt_program of a plan (cg_program.c): launches without addresses
 * (fn NULL), constants pointing at the graph's weight data, no thread
 * splits: what every target starts from (the GPU keeps its launch
 * geometry in rt_cuda_launch; the CPU adds its layout with
 * cg_cpu_program_describe). */
rt_program *cg_program_describe(const ir_graph *g, const cg_plan *plan, diag_sink *d);
/* rt_program.images for p once its launches have their target's rows: the
 * rows of the graph's dimension 0 when it computes them apart
 * (ir_graph_rows_separate: a batch of images), the plan has a cut
 * (cg_plan_cut_images) and the rows of every launch before it are those
 * images' rows, each image's on the launch's row grid, so that the runtime
 * may run those kernels an image at a time; else 0. */
int64_t cg_program_images(const ir_graph *g, const cg_plan *plan, const rt_program *p);

#endif
