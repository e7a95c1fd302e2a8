/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cg_kit.h: the target-neutral kernel kit that every target's emitters
 * share (one folder per target beside this one): the LLVM emitter state, the state of
 * the kernel being emitted, counted loops, addressing, partial loads and
 * stores, the fused per-element chain (cg_chain.c), the index maps of the
 * reindex ops (cg_index_map.c), the per-element math (cg_math.c), the
 * row-wise ops' line formulas (cg_rowwise.c), the training formulas
 * (cg_train.c) and the one adapter from LLVM's errors to diagnostics
 * (cg_kit.c).
 *
 * Nothing here knows a target or its instruction set. A target passes
 * what it decides (vector width, the kernel's buffer table) through
 * cg_emitter and cg_kctx. Private to codegen/.
 */
#ifndef CASTOR_CG_KIT_H
#define CASTOR_CG_KIT_H

#include <llvm-c/Core.h>
#include <llvm-c/Error.h>

#include "codegen/cg_internal.h"

/* ---- the LLVM emitter ---- */

typedef struct cg_emitter {
  LLVMContextRef ctx;
  LLVMModuleRef mod;
  LLVMBuilderRef b;
  LLVMTypeRef f32, i32, i64, i1, ptr, half, bf16, void_;
  int vw; /* f32 lanes of the widest native vector */
  bool no_libm; /* the target has no math library (NVPTX): log is the kit's cg_emit_log,
                 * never an llvm.log that lowers to a call */
  /* The target's f32 -> bf16 instruction (x86 AVX512-BF16: cg_target.c), or
   * NULL. For f32 lanes v it returns their bf16 bits (i16 lanes) as the
   * instruction rounds them, which must be castor's round-to-nearest-even
   * bits for every lane that is neither NaN nor subnormal, and sets *out_odd
   * to an i1 that is true when some lane is NaN or subnormal (the instruction
   * may flush or keep a payload there); NULL where it has no form for that
   * many lanes. cg_math.c takes its integer rounding on a branch for those
   * vectors, so every bit stays the one of the integer rounding. */
  LLVMValueRef (*bf16_native)(struct cg_emitter *e, LLVMValueRef v, int lanes, LLVMValueRef *out_odd);
  /* While not NULL, those roundings take no branch each: they OR their odd
   * flag into *bf16_odd (NULL: none yet) and return the instruction's bits,
   * and the caller branches once, to values computed again without it
   * where the flag is set, before anything is stored (cg_gemm.c's
   * epilogue: one test for a chain's two to four roundings). */
  LLVMValueRef *bf16_odd;
  /* The CPU target: the chain's loads of constants (a bias) are marked
   * !invariant.load (no kernel writes a constant), so LLVM may hoist them
   * out of loops past the kernel's stores. Off on NVPTX, where the mark
   * would turn them into ld.global.nc. */
  bool const_loads_invariant;
  bool invariant_loads; /* while set, cg_emit_load marks its loads so */
} cg_emitter;

/* Fills e's types for ctx; vw is the f32 lanes of the widest vector the
 * kernels use (1 on the GPU, where a thread handles one element). */
void cg_emitter_init(cg_emitter *e, LLVMContextRef ctx, LLVMModuleRef mod, int vw);
void cg_emitter_fini(cg_emitter *e);

/* The one adapter from LLVM's errors to castor's diagnostics: converts err
 * into an error of `kind` (DIAG_KIND_CODEGEN for LLVM itself), consuming
 * it; false if there is none. */
bool cg_llvm_error(diag_sink *d, LLVMErrorRef err, diag_kind kind, const char *what);
/* The same for an LLVM message string (LLVMTargetMachineEmitToMemoryBuffer
 * and the like): reports msg, if any, and disposes of it. */
bool cg_llvm_message_error(diag_sink *d, char *msg, diag_kind kind, const char *what);

/* Installs, once per process, LLVM's handlers for the errors it cannot
 * return: a fatal error (report_fatal_error) and an allocation failure
 * (report_bad_alloc_error, and operator new through LLVM's new-handler).
 * Each writes castor's error and ends the process with status 1 where LLVM
 * would abort: an out-of-memory compile under `ulimit -v` is castor's
 * "out of memory" error, exit 1, never SIGABRT. Every target's LLVM setup
 * calls it before LLVM runs. */
void cg_llvm_install_handlers(void);

/* ---- per-element math on f32 scalars or vectors (cg_math.c) ---- */

/* Constant of type ty (float or <n x float>) with every lane = v. */
LLVMValueRef cg_const(cg_emitter *e, LLVMTypeRef ty, double v);
LLVMValueRef cg_emit_exp(cg_emitter *e, LLVMValueRef x, const char *name);
/* sigmoid and tanh as the recurrent scans' gates compute them (cheaper
 * than cg_emit_unary's, within 4 ulps of float64: cg_math.c) */
LLVMValueRef cg_emit_gate_sigmoid(cg_emitter *e, LLVMValueRef x, const char *name);
LLVMValueRef cg_emit_gate_tanh(cg_emitter *e, LLVMValueRef x, const char *name);
/* general tensors: log(x) and pow(a, b) on f32 scalars or vectors, no calls
 * (cg_math.c states their accuracy and special cases) */
LLVMValueRef cg_emit_log(cg_emitter *e, LLVMValueRef x, const char *name);
LLVMValueRef cg_emit_pow(cg_emitter *e, LLVMValueRef a, LLVMValueRef b, const char *name);
/* The activation or elementwise unary op `op` on x (f32 or <n x f32>):
 * its row of cg_math.c's table of unary formulas. */
LLVMValueRef cg_emit_unary(cg_emitter *e, ir_op op, LLVMValueRef x, const char *name);
/* The same for an op of dtype dt: a 16-bit sigmoid, silu or hard_sigmoid
 * rounds where XLA's decomposition does (Keras on JAX; cg_math.c). */
LLVMValueRef cg_emit_unary_in(cg_emitter *e, ir_op op, LLVMValueRef x, ir_dtype dt, const char *name);
/* Whether op has a unary formula (cg_emit_unary). */
bool cg_has_unary_formula(ir_op op);
/* dy * gelu'(x) on f32 scalars or vectors. */
LLVMValueRef cg_emit_gelu_grad(cg_emitter *e, LLVMValueRef dy, LLVMValueRef x, const char *name);
/* Values in registers ("lanes"): a float dtype's as f32, an integer or
 * boolean dtype's (i32, i64, i1) as i64, i1 as 0 or 1 (integers and
 * booleans: issue 36). cg_lane_type is the scalar lane type of dt;
 * cg_lane_const a constant of it, `lanes` wide (1: scalar). */
LLVMTypeRef cg_lane_type(cg_emitter *e, ir_dtype dt);
LLVMValueRef cg_lane_const(cg_emitter *e, ir_dtype dt, int lanes, double v);
/* Rounds x (lanes) to dtype and back, modelling a cast in registers
 * (integers: i32 wraps, i1 is x != 0). */
LLVMValueRef cg_emit_round_to(cg_emitter *e, LLVMValueRef x, ir_dtype to, const char *name);
/* Loads `lanes` elements of dtype at ptr (lanes == 1: scalar) as lanes of cg_lane_type. */
LLVMValueRef cg_emit_load(cg_emitter *e, ir_dtype dt, LLVMValueRef ptr, int lanes, const char *name);
/* Stores lanes (cg_lane_type of dt) to dtype at ptr. */
void cg_emit_store(cg_emitter *e, ir_dtype dt, LLVMValueRef val, LLVMValueRef ptr, int lanes);
/* cg_emit_store of lanes that hold values of dt already: cg_emit_round_to's
 * value to dt, or cg_apply_chain's (each op's value rounded to its dtype);
 * the same bits, without rounding again. */
void cg_emit_store_rounded(cg_emitter *e, ir_dtype dt, LLVMValueRef val, LLVMValueRef ptr, int lanes);
LLVMTypeRef cg_llvm_dtype(cg_emitter *e, ir_dtype dt);

/* ---- the kernel being emitted (cg_kit.c) ---- */

typedef struct cg_kctx {
  cg_emitter *e;
  const cg_plan *plan;
  const cg_kernel *k;
  /* the kernel's parameters (the CPU's: runtime.h's ABI; a GPU kernel
   * sets fn and base only) */
  LLVMValueRef fn, bufs, batch, row0, row1, col0, col1, scratch;
  LLVMValueRef *base; /* per node id: its buffer pointer loaded in the entry block, or NULL */
  LLVMValueRef *spare_base; /* another such array, all NULL, for a helper function (the GEMM
                             * epilogue), which leaves it all NULL again (cg_clear_bases) */
  const int *slot;    /* per buffer: its index in bufs; NULL: bufs is the program's own table */
  int64_t rows_fixed; /* a static result split into this many launch rows by its dimension 0
                       * (the CPU's static_rows); 0: batched, or one launch row */
  int line_rep;       /* > 0: a chain's vector spans whole lines of this many elements (a GEMM
                       * epilogue's rows of 8 channels, two to a 16-lane vector), so an operand
                       * broadcast along the lines (a bias) is its line repeated (cg_chain.c) */
} cg_kctx;

/* Batch rows per launch row: the batch's (N symbolic) one; a static
 * result's split by its dimension 0 (the CPU's: one batch row each, so
 * the thread pool splits the batch), else one launch row holding all. */
static inline int64_t cg_launch_rows(const cg_kctx *c, const ir_node *op) {
  if (ir_type_is_batched(&op->type)) return 1;
  CASTOR_ASSERT(c->rows_fixed <= 0 || op->type.dims[0] % c->rows_fixed == 0);
  return c->rows_fixed > 0 ? op->type.dims[0] / c->rows_fixed : op->type.dims[0];
}

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
/* Broadcasts the scalar s (any type) to `lanes` lanes (lanes == 1: s). */
LLVMValueRef cg_splat(cg_emitter *e, LLVMValueRef s, int lanes);
/* convolutional networks: (n, h, w, c) of flat index i (never negative:
 * unsigned division) over t [N,H,W,C], and the flat index of (n, h, w, c). */
void cg_nhwc_coords(cg_emitter *e, const ir_type *t, LLVMValueRef i, LLVMValueRef coord[4]);
LLVMValueRef cg_nhwc_index(cg_emitter *e, const ir_type *t, LLVMValueRef n, LLVMValueRef h, LLVMValueRef w,
                           LLVMValueRef ch);
/* An alloca of ty in the entry block (SROA turns it into registers). */
LLVMValueRef cg_entry_alloca(cg_kctx *c, LLVMTypeRef ty, const char *name);
/* Where buffer b's address is in the kernel's bufs parameter. */
int cg_buffer_index(const cg_kctx *c, int b);
/* Loads the buffer pointer of n from c->bufs into c->base (once). */
void cg_load_base(cg_kctx *c, const ir_node *n);
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
/* cg_store_part of values of dt already (cg_emit_store_rounded) */
void cg_store_part_rounded(cg_emitter *e, ir_dtype dt, LLVMValueRef val, LLVMValueRef ptr, int lanes, int valid);

/* ---- the fused per-element chain (cg_chain.c) ---- */

/* Applies ops[first..last) of the kernel to val, f32 lanes at flat element
 * index `idx` whose last-dimension coordinate is `col` (the value of
 * ops[first-1], rounded to its dtype; NULL when first == 0: every source
 * is loaded). Only the
 * first `valid` lanes of other operands are read. Each op's result is
 * rounded to its dtype, modelling 16-bit values exactly. */
LLVMValueRef cg_apply_chain(cg_kctx *c, int first, int last, LLVMValueRef val, LLVMValueRef idx,
                            LLVMValueRef col, int lanes, int valid);
/* Stores a chain's value: fn emits it (straight-line code, its loads and
 * ops, no store) and its element pointer; the value is stored rounded to
 * dt (lanes, the first `valid`). With the target's bf16 instruction
 * (cg_emitter.bf16_native) its roundings are tested for NaN or subnormal
 * lanes once for the vector (cg_emitter.bf16_odd): where one is, fn runs
 * again with each rounding's own test, before anything is stored, so the
 * bits are those of the rounding tested one by one. A chain of three or
 * four bf16 roundings (a hard-swish: x/6, +1/2, x * gate; a conv's bias
 * and residual) took a vfpclassps, kortest and branch each. */
typedef LLVMValueRef (*cg_value_fn)(cg_kctx *c, void *arg, LLVMValueRef *out_ptr);
void cg_emit_value_stored(cg_kctx *c, ir_dtype dt, int lanes, int valid, cg_value_fn fn, void *arg);

/* Whether ops[first..last) may run with cg_kctx.line_rep set: every
 * operand that is not the previous op's value has the result's shape or
 * is one line broadcast to every row (a bias), and no op reads the
 * element's index. */
bool cg_chain_line_rep_ok(const cg_kernel *k, int first, int last);

/* general tensors: dropout_train's value for the f32 lanes x at flat
 * result indices idx .. idx + lanes - 1 (cg_dropout.c), not rounded */
LLVMValueRef cg_emit_dropout(cg_kctx *c, const ir_node *op, LLVMValueRef x, LLVMValueRef idx, int lanes);

/* ---- index maps of the reindex ops (cg_index_map.c) ---- */

/* The value (f32, one element) of reindex op `op` (pad, slice, reshape,
 * transpose, concat, strided_slice, pad_constant; later broadcast, gather,
 * im2col) at flat element index i
 * (i64, row major, rows = batch rows) of its result: the source element
 * the op's index map sends i to, or the fill where the map reaches outside the
 * source (0 for a pad, {value} for a pad_constant). Not rounded to op's dtype: the caller's chain does. */
LLVMValueRef cg_reindex_value(cg_kctx *c, const ir_node *op, LLVMValueRef i);
/* The contractions a CPU runs as GEMMs (matmul_nt, matmul_tn,
 * conv2d_input_grad, conv2d_filter_grad, batch_matmul) as one f32 element each: result
 * flat index i sums its terms in the op's order (matmul_tn: the rows in
 * order; the convolutions' as group_conv2d's with one group), in f32 by
 * fused multiply-adds; not rounded to op's dtype. What a target without
 * their GEMMs (NVPTX) runs: the same bits for any split of the elements. */
bool cg_has_contract_value(ir_op op);
LLVMValueRef cg_contract_value(cg_kctx *c, const ir_node *op, LLVMValueRef i);
/* general tensors: the same for the reductions and broadcast_to (cg_reduce.c) */
LLVMValueRef cg_tensor_value(cg_kctx *c, const ir_node *op, LLVMValueRef i);
/* convolutional networks: a depthwise group_conv2d (one channel per group)
 * as `lanes` f32 results from flat index i, within one pixel's channels;
 * the same bits as cg_reindex_value's lane by lane (cg_index_map.c) */
bool cg_group_conv_vectorizes(const ir_node *op);
LLVMValueRef cg_group_conv_vector(cg_kctx *c, const ir_node *op, LLVMValueRef i, int lanes);
/* convolutional networks: max_pool2d_grad and avg_pool2d_grad as `lanes`
 * f32 results from flat index i, within one pixel's channels; lanes 1 is
 * cg_reindex_value's form, the same bits lane by lane (cg_pool_grad.c) */
LLVMValueRef cg_pool_grad_lanes(cg_kctx *c, const ir_node *op, LLVMValueRef i, int lanes);
/* general tensors: whether the map of reindex op `op` reads the lanes of
 * one result line (its last dimension) from source elements *stride
 * apart (reshape, transpose, strided_slice); then cg_reindex_lanes is
 * `lanes` consecutive results from flat index i within one line, the
 * same bits as cg_reindex_value's lane by lane (cg_index_map.c) */
bool cg_reindex_line_stride(const ir_node *op, int64_t *stride);
LLVMValueRef cg_reindex_lanes(cg_kctx *c, const ir_node *op, LLVMValueRef i, int lanes);
/* general tensors: whether concat `op`'s lines split into runs of one
 * operand each, contiguous in it (not along the batch; cg_index_map.c).
 * Then cg_concat_run_start gives, for the line at flat result index
 * `base`, the flat index in operand s of the line's element 0 (its run is
 * then elements j of the line at that index + j: along the last axis, j in
 * [off_s, off_s + len_s); else the whole line), and in *out_in whether the
 * line holds operand s's run at all. A run's elements are the same bits as
 * cg_reindex_value's. */
bool cg_concat_runs(const ir_node *op);
/* general tensors: the flat index in its operand of transpose op's result
 * element at flat index i (cg_index_map.c's map). */
LLVMValueRef cg_transpose_source_index(cg_kctx *c, const ir_node *op, LLVMValueRef i);
LLVMValueRef cg_concat_run_start(cg_kctx *c, const ir_node *op, int s, LLVMValueRef base, LLVMValueRef *out_in);
/* general tensors: whether pad_constant `op` has step 1 along its static
 * last dimension; then each result line is {value} but for the source's
 * run at [starts[last], starts[last] + len), and cg_pad_constant_run_start
 * gives, for the line at flat result index `base`, the flat source index
 * of the run's first element, and in *out_in whether the line holds the
 * run at all (its other coordinates inside the source). A run's elements
 * are the same bits as cg_reindex_value's (cg_index_map.c). */
bool cg_pad_constant_runs(const ir_node *op);
LLVMValueRef cg_pad_constant_run_start(cg_kctx *c, const ir_node *op, LLVMValueRef base, LLVMValueRef *out_in);

/* ---- the training formulas (cg_train.c, cg_loss.c, cg_update.c, cg_sum_to.c) ---- */

/* Emits the body of c->k over its rows [c->row0, c->row1): an update
 * kernel, a reduction other than a GEMM (not cg_is_gemm), or a row-wise
 * kernel with no line formula (cg_rowwise_has_line_formula): softmax_grad,
 * the losses' gradients. The op must have a formula (cg_train_has_formula):
 * a missing one is an assertion, never a default. */
void cg_train_emit(cg_kctx *c);

/* ---- row-wise ops' line formulas (cg_rowwise.c) ---- */

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
/* (cg_rowwise_has_line_formula, cg_train_has_formula: cg_internal.h) */

#endif
