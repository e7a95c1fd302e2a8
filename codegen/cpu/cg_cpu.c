/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cg_cpu.c: LLVM IR for the CPU kernels of a plan.
 *
 * Every kernel has the runtime's ABI, void k(ptr bufs, i64 batch, i64 row0,
 * i64 row1, i64 col0, i64 col1, ptr scratch), and computes rows [row0,
 * row1) of its result (GEMMs: only columns [col0, col1)). LLVM values and
 * blocks are named after the IR nodes they come from, so `castor dump
 * --emit=llvm` reads beside the IR dump.
 *
 * One emitter per kernel class (the plan's kernel kind, cg_plan.c):
 * contract: cg_gemm.c (packed panels, register-blocked micro-kernels, cache
 *   blocking along K, the epilogue fused into the one store).
 * eltwise: one pass over each row, vectorized along the last dimension;
 *   the kit's chain (kernel/cg_chain.c), perhaps started by a reindex op
 *   through the kit's index map (kernel/cg_index_map.c).
 * rowwise: the row-wise op over each line, by cg_rowwise.c (the emitter
 *   the GEMM epilogue shares), or a row kernel of the kit's cg_train.c.
 * reduce, update: the kit's cg_train.c (matmul_tn: the GEMM).
 * The kit (kernel/cg_kit.h) is target-neutral; this file is the CPU's
 * driver: the kernel ABI, shared bodies and their wrappers.
 */
#include <stdio.h>
#include <string.h>

#include "codegen/cpu/cg_cpu.h"

#define B (e->b)

typedef cg_kctx kctx;
typedef cg_loop loop;

#define i64c cg_i64
#define loop_begin cg_loop_begin
#define loop_end cg_loop_end
#define elem_ptr cg_elem_ptr

static const ir_node *result(const cg_kernel *k) { return k->ops[k->n_ops - 1]; }

/* ---- elementwise and row-wise: rows x lines x last ---- */

/* A kernel's lines: the last dimension, except that the line of an op
 * with an axis (layer_norm and its gradient ops) is all its normalized
 * dimensions (from its axis on), which it reduces. */
static void line_shape(const ir_node *n, int64_t rows_fixed, int64_t *lines_per_row, int64_t *last) {
  int64_t inner = 1;
  CASTOR_ASSERT(ir_type_inner_numel(&n->type, &inner));
  if (rows_fixed > 0) inner /= rows_fixed; /* a static result split by its leading dimensions (static_rows) */
  bool scalar_rows = n->type.rank == 0 || (n->type.rank == 1 && ir_type_is_batched(&n->type));
  *last = scalar_rows ? 1 : n->type.dims[n->type.rank - 1];
  if (ir_op_kernel(n->op) == IR_KERNEL_ROWWISE && (ir_op_attrs(n->op) & A(axis))) { /* a normalization's line */
    int first = ir_norm_first_dim(&n->type, n->attr.axis);
    CASTOR_ASSERT(first >= 0);
    *last = 1;
    for (int r = first; r < n->type.rank; r++) *last *= n->type.dims[r];
  }
  *lines_per_row = inner / *last;
}

/* the chain at flat index idx, column col (cg_emit_value_stored) */
typedef struct chain_at {
  LLVMValueRef idx, col, first; /* first: the first op's value (then the chain from op 1), or NULL */
  int lanes;
} chain_at;

static LLVMValueRef chain_at_value(cg_kctx *c, void *arg, LLVMValueRef *out_ptr) {
  chain_at *a = arg;
  LLVMValueRef v = cg_apply_chain(c, a->first ? 1 : 0, c->k->n_ops, a->first, a->idx, a->col, a->lanes, a->lanes);
  *out_ptr = elem_ptr(c, result(c->k), a->idx);
  return v;
}

static void emit_eltwise_segment(kctx *c, LLVMValueRef line_base, int64_t j0, int64_t j1, int lanes) {
  cg_emitter *e = c->e;
  if (j1 <= j0) return;
  loop lj = loop_begin(c, i64c(e, j0), i64c(e, j1), lanes, "j");
  chain_at a = {LLVMBuildAdd(B, line_base, lj.iv, ""), lj.iv, NULL, lanes};
  cg_emit_value_stored(c, result(c->k)->type.dtype, lanes, lanes, chain_at_value, &a);
  loop_end(c, &lj);
}

static void eltwise_body(kctx *c, LLVMValueRef base, int64_t last);

/* general tensors: a reshape followed only by ops of one operand each
 * (the casts of a mixed policy, an activation) keeps every element's flat
 * index, so each row is one line of all its elements: the vectors run
 * across the result's short last dimensions. An NCHW image of one channel
 * into NHWC, [N, 1, H, W] to [N, H, W, 1] (fold-layout's reshape, then the
 * cast to the first convolution's bf16), went one element a loop trip,
 * its lines one long. */
static bool reshape_runs_flat(const cg_kernel *k) {
  const ir_node *first = k->ops[0];
  if (ir_op_type_rule(first->op) != IR_TYPE_RESHAPE || first->n_srcs != 1) return false;
  for (int i = 1; i < k->n_ops; i++) {
    const ir_node *op = k->ops[i];
    if (ir_op_kernel(op->op) != IR_KERNEL_ELTWISE || op->op == IR_OP_DROPOUT_TRAIN || op->n_srcs != 1 ||
        op->srcs[0] != k->ops[i - 1])
      return false;
  }
  return true;
}

static void emit_rows_lines(kctx *c, int64_t rows_fixed, void (*body)(kctx *, LLVMValueRef line_base, int64_t last)) {
  cg_emitter *e = c->e;
  int64_t lines, last;
  line_shape(result(c->k), rows_fixed, &lines, &last);
  if (body == eltwise_body && lines > 1 && reshape_runs_flat(c->k)) last *= lines, lines = 1;
  loop lr = loop_begin(c, c->row0, c->row1, 1, "row");
  loop ll = loop_begin(c, i64c(e, 0), i64c(e, lines), 1, "line");
  LLVMValueRef base = LLVMBuildMul(B, LLVMBuildAdd(B, LLVMBuildMul(B, lr.iv, i64c(e, lines), ""), ll.iv, ""),
                                   i64c(e, last), "line.base");
  body(c, base, last);
  loop_end(c, &ll);
  loop_end(c, &lr);
}

/* general tensors: elements [j0, j1) of the line at flat index `base`,
 * read from operand x of the concat or pad that starts the kernel at x's
 * flat index start + j, or (x NULL) all the pad_constant's {value}; vw at
 * a time, then half and quarter vectors, then one at a time; the chain
 * that follows as everywhere else. */
static void emit_run(kctx *c, LLVMValueRef base, const ir_node *x, LLVMValueRef start, int64_t j0, int64_t j1) {
  cg_emitter *e = c->e;
  const ir_node *first = c->k->ops[0];
  int64_t done = j0;
  for (int lanes = e->vw; lanes >= 1; lanes = lanes > 4 ? lanes / 2 : lanes > 1 ? 1 : 0) {
    int64_t end = lanes > 1 ? done + (j1 - done) / lanes * lanes : j1;
    if (end <= done) continue;
    loop lj = loop_begin(c, i64c(e, done), i64c(e, end), lanes, x ? "j" : "fill");
    LLVMValueRef idx = LLVMBuildAdd(B, base, lj.iv, "");
    LLVMValueRef val = x ? cg_emit_load(e, x->type.dtype, elem_ptr(c, x, LLVMBuildAdd(B, start, lj.iv, "")), lanes, first->name)
                         : cg_lane_const(e, first->srcs[0]->type.dtype, lanes, first->attr.value);
    val = cg_emit_round_to(e, val, first->type.dtype, first->name);
    val = cg_apply_chain(c, 1, c->k->n_ops, val, idx, lj.iv, lanes, lanes);
    cg_emit_store_rounded(e, result(c->k)->type.dtype, val, elem_ptr(c, result(c->k), idx), lanes);
    loop_end(c, &lj);
    done = end;
  }
}

/* general tensors: a concat as one vectorized copy per operand run (the
 * kit's cg_concat_runs), instead of every element loading every operand
 * and selecting one: along the last axis each line is the operands' runs
 * in turn; along an earlier one, the one operand whose run the line is. */
static void concat_body(kctx *c, LLVMValueRef base, int64_t last) {
  cg_emitter *e = c->e;
  const ir_node *op = c->k->ops[0];
  int a = ir_concat_axis(&op->type, op->attr.axis);
  int64_t off = 0;
  for (int s = 0; s < op->n_srcs; s++) {
    const ir_node *x = op->srcs[s];
    int64_t len = x->type.dims[a];
    LLVMValueRef in, start = cg_concat_run_start(c, op, s, base, &in);
    if (a == op->type.rank - 1) {
      emit_run(c, base, x, start, off, off + len);
    } else if (len > 0) {
      LLVMBasicBlockRef run = LLVMAppendBasicBlockInContext(e->ctx, c->fn, x->name);
      LLVMBasicBlockRef next = LLVMAppendBasicBlockInContext(e->ctx, c->fn, "concat.next");
      LLVMBuildCondBr(B, in, run, next);
      LLVMPositionBuilderAtEnd(B, run);
      emit_run(c, base, x, start, 0, last);
      LLVMBuildBr(B, next);
      LLVMPositionBuilderAtEnd(B, next);
    }
    off += len;
  }
}

/* general tensors: a pad_constant line as runs (the kit's
 * cg_pad_constant_runs): {value} before and after the source's run, the
 * run a vectorized copy where the line is inside the source, else
 * {value} too; not an index map per element. */
static void pad_constant_body(kctx *c, LLVMValueRef base, int64_t last) {
  cg_emitter *e = c->e;
  const ir_node *op = c->k->ops[0], *x = op->srcs[0];
  int64_t st = op->attr.starts.v[op->type.rank - 1], len = x->type.dims[x->type.rank - 1];
  int64_t r0 = st < last ? st : last, r1 = st + len < last ? st + len : last;
  LLVMValueRef in, start = cg_pad_constant_run_start(c, op, base, &in);
  emit_run(c, base, NULL, NULL, 0, r0);
  if (r1 > r0) {
    LLVMBasicBlockRef run = LLVMAppendBasicBlockInContext(e->ctx, c->fn, "pad.run");
    LLVMBasicBlockRef fill = LLVMAppendBasicBlockInContext(e->ctx, c->fn, "pad.fill");
    LLVMBasicBlockRef next = LLVMAppendBasicBlockInContext(e->ctx, c->fn, "pad.next");
    LLVMBuildCondBr(B, in, run, fill);
    LLVMPositionBuilderAtEnd(B, run);
    emit_run(c, base, x, LLVMBuildSub(B, start, i64c(e, st), ""), r0, r1);
    LLVMBuildBr(B, next);
    LLVMPositionBuilderAtEnd(B, fill);
    emit_run(c, base, NULL, NULL, r0, r1);
    LLVMBuildBr(B, next);
    LLVMPositionBuilderAtEnd(B, next);
  }
  emit_run(c, base, NULL, NULL, r1 > r0 ? r1 : r0, last);
}

static void eltwise_body(kctx *c, LLVMValueRef base, int64_t last) {
  int vw = c->e->vw;
  const ir_node *first = c->k->ops[0];
  int64_t stride = 0;
  if (cg_concat_runs(first)) {
    concat_body(c, base, last);
    return;
  }
  if (cg_pad_constant_runs(first)) {
    pad_constant_body(c, base, last);
    return;
  }
  if (ir_op_kernel(first->op) == IR_KERNEL_REINDEX && cg_reindex_line_stride(first, &stride)) {
    /* general tensors: reshape, transpose and strided_slice read each
     * vector of a line from strided source elements (one contiguous load
     * where the stride is 1), its source index computed once per vector;
     * then half and quarter vectors, then the line's tail one at a time */
    cg_emitter *e = c->e;
    int64_t done = 0;
    for (int lanes = vw; lanes >= 1; lanes = lanes > 4 ? lanes / 2 : lanes > 1 ? 1 : 0) {
      int64_t end = lanes > 1 ? done + (last - done) / lanes * lanes : last;
      if (end <= done) continue;
      loop lj = loop_begin(c, i64c(e, done), i64c(e, end), lanes, "j");
      LLVMValueRef idx = LLVMBuildAdd(B, base, lj.iv, "");
      LLVMValueRef val = lanes > 1 ? cg_reindex_lanes(c, first, idx, lanes) : cg_reindex_value(c, first, idx);
      val = cg_emit_round_to(e, val, first->type.dtype, first->name);
      val = cg_apply_chain(c, 1, c->k->n_ops, val, idx, lj.iv, lanes, lanes);
      cg_emit_store_rounded(e, result(c->k)->type.dtype, val, elem_ptr(c, result(c->k), idx), lanes);
      loop_end(c, &lj);
      done = end;
    }
    return;
  }
  if (ir_op_kernel(first->op) == IR_KERNEL_REINDEX && cg_group_conv_vectorizes(first)) {
    /* convolutional networks: a depthwise convolution or a pooling, vw
     * channels at a time, then half and quarter vectors (8 channels on
     * AVX-512), then the line's tail one at a time (cg_index_map.c) */
    cg_emitter *e = c->e;
    int64_t done = 0;
    for (int lanes = vw; lanes >= 1; lanes = lanes > 4 ? lanes / 2 : lanes > 1 ? 1 : 0) {
      int64_t end = lanes > 1 ? done + (last - done) / lanes * lanes : last;
      if (end <= done) continue;
      loop lj = loop_begin(c, i64c(e, done), i64c(e, end), lanes, "j");
      LLVMValueRef idx = LLVMBuildAdd(B, base, lj.iv, "");
      LLVMValueRef val = cg_emit_round_to(e, lanes > 1 ? cg_group_conv_vector(c, first, idx, lanes) : cg_reindex_value(c, first, idx),
                                         first->type.dtype, first->name);
      val = cg_apply_chain(c, 1, c->k->n_ops, val, idx, lj.iv, lanes, lanes);
      cg_emit_store_rounded(e, result(c->k)->type.dtype, val, elem_ptr(c, result(c->k), idx), lanes);
      loop_end(c, &lj);
      done = end;
    }
    return;
  }
  if (ir_op_kernel(first->op) == IR_KERNEL_REINDEX) {
    /* one element at a time through the op's index map (cg_index_map.c):
     * pads and slices only run on activations of matmuls that pad8
     * widened, a small part of a model's work */
    cg_emitter *e = c->e;
    loop lj = loop_begin(c, i64c(e, 0), i64c(e, last), 1, "j");
    LLVMValueRef idx = LLVMBuildAdd(B, base, lj.iv, "");
    LLVMValueRef val = cg_emit_round_to(e, cg_reindex_value(c, first, idx), first->type.dtype, first->name);
    val = cg_apply_chain(c, 1, c->k->n_ops, val, idx, lj.iv, 1, 1);
    cg_emit_store_rounded(e, result(c->k)->type.dtype, val, elem_ptr(c, result(c->k), idx), 1);
    loop_end(c, &lj);
    return;
  }
  int64_t vec = last / vw * vw;
  emit_eltwise_segment(c, base, 0, vec, vw);
  emit_eltwise_segment(c, base, vec, last, 1);
}

/* general tensors: a transpose alone in its kernel whose result's last
 * dimension (B of them, 2 to 8) comes from a source dimension of
 * stride sb and whose dimension before it (A) from the source's last one
 * (stride 1): ShuffleNet's channel shuffle, [.., 2, A] to [.., A, 2], and
 * an NCHW image into NHWC, [N, 3, H, W] to [N, H, W, 3] (B = 3, A = W). Its
 * lines of B elements are too short for vectors; instead each block of
 * A * B result elements (a pixel's channels) is read as B contiguous
 * vectors of L source elements and interleaved into one vector of B * L
 * results. */
static bool is_float_dtype(ir_dtype dt) { return dt == DT_F32 || dt == DT_F16 || dt == DT_BF16; }

static bool transpose_interleaves(const cg_kernel *k, int64_t *out_b, int64_t *out_sb) {
  const ir_node *op = k->ops[0];
  if (op->op != IR_OP_TRANSPOSE || op->type.rank < 3 || !is_float_dtype(op->type.dtype)) return false;
  /* the transpose alone, or followed by casts between float formats (the
   * NCHW image into NHWC, then to the 16-bit compute dtype of a mixed
   * policy's first convolution): each a rounding of the vector */
  for (int i = 1; i < k->n_ops; i++)
    if (k->ops[i]->op != IR_OP_CAST || k->ops[i]->n_srcs != 1 || k->ops[i]->srcs[0] != k->ops[i - 1] ||
        !is_float_dtype(k->ops[i]->type.dtype))
      return false;
  const ir_type *yt = &op->type, *xt = &op->srcs[0]->type;
  int r = yt->rank;
  int64_t b = yt->dims[r - 1], sb = 1;
  if (b < 2 || b > 8 || op->attr.perm.v[r - 2] != xt->rank - 1) return false;
  for (int d = xt->rank - 1; d > op->attr.perm.v[r - 1]; d--) sb *= xt->dims[d];
  *out_b = b, *out_sb = sb;
  return true;
}

/* The transpose's value rounded to its dtype, then to each cast's */
static LLVMValueRef round_chain(kctx *c, LLVMValueRef val) {
  for (int i = 0; i < c->k->n_ops; i++)
    val = cg_emit_round_to(c->e, val, c->k->ops[i]->type.dtype, c->k->ops[i]->name);
  return val;
}

static void transpose_interleave_kernel(kctx *c, int64_t rows_fixed, int64_t nb, int64_t sb) {
  cg_emitter *e = c->e;
  const ir_node *op = c->k->ops[0], *x = op->srcs[0], *res = c->k->ops[c->k->n_ops - 1];
  int64_t lines, last, A = op->type.dims[op->type.rank - 2];
  line_shape(op, rows_fixed, &lines, &last);
  CASTOR_ASSERT(last == nb && lines % A == 0);
  int b = (int)nb;
  loop lr = loop_begin(c, c->row0, c->row1, 1, "row");
  loop lp = loop_begin(c, i64c(e, 0), i64c(e, lines / A), 1, "block");
  LLVMValueRef out0 = LLVMBuildMul(B, LLVMBuildAdd(B, LLVMBuildMul(B, lr.iv, i64c(e, lines / A), ""), lp.iv, ""),
                                   i64c(e, A * nb), "block.base");
  LLVMValueRef src0 = cg_transpose_source_index(c, op, out0);
  int64_t done = 0;
  for (int l = e->vw > 16 ? 16 : e->vw; l >= 4; l /= 2) { /* b2 * l <= 128 shuffle lanes */
    int64_t end = done + (A - done) / l * l;
    if (end <= done) continue;
    loop la = loop_begin(c, i64c(e, done), i64c(e, end), l, "a");
    LLVMValueRef v[8];
    int b2 = 1; /* b rounded up to a power of 2: the tree's leaves past b are undef */
    while (b2 < b) b2 *= 2;
    for (int t = b; t < b2; t++) v[t] = LLVMGetUndef(LLVMVectorType(e->f32, (unsigned)l));
    for (int t = 0; t < b; t++)
      v[t] = cg_emit_load(e, x->type.dtype, elem_ptr(c, x, LLVMBuildAdd(B, src0, LLVMBuildAdd(B, la.iv, i64c(e, t * sb), ""), "")),
                          l, x->name);
    /* concatenate the b vectors (a tree of pairs), then lane a * b + t is v[t][a] */
    for (int w = b2; w > 1; w /= 2)
      for (int t = 0; t < w / 2; t++) {
        int n = (b2 / w) * l * 2;
        LLVMValueRef m[128];
        for (int k = 0; k < n; k++) m[k] = LLVMConstInt(e->i32, (unsigned)k, 0);
        v[t] = LLVMBuildShuffleVector(B, v[2 * t], v[2 * t + 1], LLVMConstVector(m, (unsigned)n), "");
      }
    LLVMValueRef m[128];
    for (int k = 0; k < b * l; k++) m[k] = LLVMConstInt(e->i32, (unsigned)((k % b) * l + k / b), 0);
    LLVMValueRef val = LLVMBuildShuffleVector(B, v[0], LLVMGetUndef(LLVMTypeOf(v[0])), LLVMConstVector(m, (unsigned)(b * l)), op->name);
    val = round_chain(c, val);
    LLVMValueRef idx = LLVMBuildAdd(B, out0, LLVMBuildMul(B, la.iv, i64c(e, nb), ""), "");
    cg_emit_store_rounded(e, res->type.dtype, val, elem_ptr(c, res, idx), b * l);
    loop_end(c, &la);
    done = end;
  }
  if (done < A) { /* the tail, one element at a time through the map */
    loop lj = loop_begin(c, i64c(e, done * nb), i64c(e, A * nb), 1, "j");
    LLVMValueRef idx = LLVMBuildAdd(B, out0, lj.iv, "");
    LLVMValueRef val = round_chain(c, cg_reindex_value(c, op, idx));
    cg_emit_store_rounded(e, res->type.dtype, val, elem_ptr(c, res, idx), 1);
    loop_end(c, &lj);
  }
  loop_end(c, &lp);
  loop_end(c, &lr);
}

/* A line of the row-wise op that is the kernel: its input and result
 * buffers from flat element index `base`. */
typedef struct line_row {
  cg_row row;
  kctx *c;
  const ir_node *op;
  LLVMValueRef base;
} line_row;

/* general tensors: the partial last vector of an f32 line as one masked
 * load or store (llvm.masked.load/store, the lanes from valid on off: nothing past
 * the line is read or written), else element by element (cg_kit.c) */
static LLVMValueRef lane_mask(cg_emitter *e, int lanes, int valid) {
  LLVMValueRef bits[64];
  CASTOR_ASSERT(lanes <= 64);
  for (int i = 0; i < lanes; i++) bits[i] = LLVMConstInt(e->i1, i < valid, 0);
  return LLVMConstVector(bits, (unsigned)lanes);
}

static LLVMValueRef masked_intrinsic(cg_emitter *e, const char *name, LLVMTypeRef vt, LLVMValueRef *args, unsigned n) {
  LLVMTypeRef tys[] = {vt, e->ptr};
  LLVMValueRef f = LLVMGetIntrinsicDeclaration(e->mod, LLVMLookupIntrinsicID(name, strlen(name)), tys, 2);
  return LLVMBuildCall2(B, LLVMGlobalGetValueType(f), f, args, n, "");
}

static LLVMValueRef line_load_part(cg_emitter *e, ir_dtype dt, LLVMValueRef ptr, int lanes, int valid, const char *name) {
  if (dt != DT_F32 || valid >= lanes || lanes == 1) return cg_load_part(e, dt, ptr, lanes, valid, name);
  LLVMTypeRef vt = LLVMVectorType(e->f32, (unsigned)lanes);
  LLVMValueRef args[] = {ptr, LLVMConstInt(e->i32, 4, 0), lane_mask(e, lanes, valid), LLVMConstNull(vt)};
  return masked_intrinsic(e, "llvm.masked.load", vt, args, 4);
}

static void line_store_part(cg_emitter *e, ir_dtype dt, LLVMValueRef val, LLVMValueRef ptr, int lanes, int valid) {
  if (dt != DT_F32 || valid >= lanes || lanes == 1) {
    cg_store_part(e, dt, val, ptr, lanes, valid);
    return;
  }
  LLVMValueRef args[] = {val, ptr, LLVMConstInt(e->i32, 4, 0), lane_mask(e, lanes, valid)};
  masked_intrinsic(e, "llvm.masked.store", LLVMTypeOf(val), args, 4);
}

static LLVMValueRef line_load_operand(cg_row *row, int src, LLVMValueRef j, int lanes, int valid) {
  line_row *l = (line_row *)row;
  cg_emitter *e = l->c->e;
  const ir_node *x = l->op->srcs[src];
  CASTOR_ASSERT(ir_type_eq(&x->type, &l->op->srcs[0]->type));
  return line_load_part(e, x->type.dtype, elem_ptr(l->c, x, LLVMBuildAdd(B, l->base, j, "")), lanes, valid, x->name);
}

static LLVMValueRef line_load(cg_row *row, LLVMValueRef j, int lanes, int valid) {
  return line_load_operand(row, 0, j, lanes, valid);
}

static void line_store(cg_row *row, LLVMValueRef j, LLVMValueRef val, int lanes, int valid) {
  line_row *l = (line_row *)row;
  cg_emitter *e = l->c->e;
  line_store_part(e, l->op->type.dtype, val, elem_ptr(l->c, l->op, LLVMBuildAdd(B, l->base, j, "")), lanes, valid);
}

/* general tensors: a line whose tail is a part of a vector (softmax over
 * 28 keys: a vector of 16 and 12 more) and whose vectors fit a small stack
 * row goes as whole vectors and one masked partial vector, its values
 * kept in that row between passes, rather than lane by lane with a scalar
 * exp per element; each element still lands in lane j % lanes, so the bits
 * are the scalar tail's (cg_rowwise.c). */
#define ROWWISE_MASKED_MAX 4096 /* f32 elements of the stack row */

static void rowwise_body(kctx *c, LLVMValueRef base, int64_t last) {
  const ir_node *op = c->k->ops[0];
  int vw = c->e->vw;
  int64_t padded = (last + vw - 1) / vw * vw;
  if (vw > 1 && last % vw != 0 && padded <= ROWWISE_MASKED_MAX) {
    LLVMValueRef row = cg_entry_alloca(c, LLVMArrayType2(c->e->f32, (uint64_t)padded), "row.kept");
    line_row l = {.row = {.n = last, .lanes = vw, .masked_tail = true, .load = line_load,
                          .load_operand = line_load_operand, .store = line_store, .scratch = row},
                  .c = c, .op = op, .base = base};
    cg_emit_rowwise(c, op, &l.row);
    return;
  }
  /* the tail in scalar steps, so nothing past the line is touched and an
   * f32 result line (never the input's buffer: cg_plan.c) can hold the
   * intermediate values (softmax: exp once, not twice); a 16-bit one
   * cannot, so those are recomputed */
  line_row l = {.row = {.n = last, .lanes = c->e->vw, .masked_tail = false, .load = line_load,
                        .load_operand = line_load_operand, .store = line_store,
                        .scratch = op->type.dtype == DT_F32 ? elem_ptr(c, op, base) : NULL},
                .c = c, .op = op, .base = base};
  cg_emit_rowwise(c, op, &l.row);
}

/* ---- copy ---- */

static void emit_copy(kctx *c) {
  cg_emitter *e = c->e;
  const rt_buffer *ob = &c->plan->buffers[c->k->out_buffer];
  int64_t row_bytes = ob->bytes_per_row ? ob->bytes_per_row : ob->bytes_fixed;
  LLVMValueRef off = LLVMBuildMul(B, c->row0, i64c(e, row_bytes), "");
  LLVMValueRef len = LLVMBuildMul(B, LLVMBuildSub(B, c->row1, c->row0, ""), i64c(e, row_bytes), "");
  LLVMTypeRef i8 = LLVMInt8TypeInContext(e->ctx);
  LLVMValueRef dst_base = LLVMBuildLoad2(B, e->ptr,
      LLVMBuildGEP2(B, e->ptr, c->bufs, (LLVMValueRef[]){i64c(e, cg_buffer_index(c, c->k->out_buffer))}, 1, ""),
      "out");
  LLVMValueRef dst = LLVMBuildGEP2(B, i8, dst_base, &off, 1, "");
  LLVMValueRef src = LLVMBuildGEP2(B, i8, c->base[c->k->copy_src->id], &off, 1, "");
  LLVMBuildMemCpy(B, dst, 1, src, 1, len);
}

/* ---- kernels ---- */

static const char *const param_names[] = {"bufs", "batch", "row0", "row1", "col0", "col1", "scratch"};

/* A function of the kernel ABI named `name` whose entry block is current,
 * its parameters in c. */
static void begin_function(kctx *c, LLVMTypeRef fty, const char *name, LLVMLinkage linkage) {
  cg_emitter *e = c->e;
  c->fn = LLVMAddFunction(e->mod, name, fty);
  LLVMSetLinkage(c->fn, linkage);
  LLVMValueRef *params_out[] = {&c->bufs, &c->batch, &c->row0, &c->row1, &c->col0, &c->col1, &c->scratch};
  for (int i = 0; i < 7; i++) {
    *params_out[i] = LLVMGetParam(c->fn, (unsigned)i);
    LLVMSetValueName2(*params_out[i], param_names[i], strlen(param_names[i]));
  }
  LLVMPositionBuilderAtEnd(e->b, LLVMAppendBasicBlockInContext(e->ctx, c->fn, "entry"));
}

/* The code of kernel c->k into c->fn, from its entry block. */
static void emit_body(kctx *c, const cg_cpu_layout *layout, int ki) {
  const cg_kernel *k = c->k;
  c->rows_fixed = layout->launch[ki].rows_fixed;
  if (k->kind == CG_KERNEL_COPY) {
    cg_load_base(c, k->copy_src);
    emit_copy(c);
  } else {
    cg_load_bases(c);
    switch (k->kind) { /* one emitter per kernel class (cg_plan.c) */
    case CG_KERNEL_CONTRACT: cg_gemm_emit(c, layout->gemm[ki]); break;
    case CG_KERNEL_ELTWISE: /* a grouped convolution the CPU runs as the direct one (cg_gemm_plan.c) */
      if (layout->gemm[ki]) {
        cg_gemm_emit(c, layout->gemm[ki]);
      } else {
        int64_t nb, sb;
        if (transpose_interleaves(k, &nb, &sb)) transpose_interleave_kernel(c, layout->launch[ki].rows_fixed, nb, sb);
        else if (cg_dwconv_tiles(k)) cg_dwconv_emit(c); /* a depthwise convolution (cg_dwconv.c) */
        else emit_rows_lines(c, layout->launch[ki].rows_fixed, eltwise_body);
      }
      break;
    case CG_KERNEL_ROWWISE: /* a line formula of cg_rowwise.c, else a row kernel of cg_train.c (the kit) */
      if (cg_rowwise_has_line_formula(k->ops[0]->op)) emit_rows_lines(c, layout->launch[ki].rows_fixed, rowwise_body);
      else cg_train_emit(c);
      break;
    case CG_KERNEL_REDUCE: /* matmul_tn sums over the rows as a GEMM */
      if (cg_is_gemm(k)) cg_gemm_emit(c, layout->gemm[ki]);
      else cg_train_emit(c);
      break;
    case CG_KERNEL_UPDATE: cg_train_emit(c); break;
    case CG_KERNEL_COPY: break;
    }
  }
  LLVMBuildRetVoid(c->e->b);
  cg_clear_bases(c);
}

/* Kernel ki as a wrapper that gathers its buffers into the table the
 * shared body reads (cg_kernel_share.c) and calls that body. */
static void emit_wrapper(kctx *c, LLVMTypeRef fty, LLVMValueRef body, int *table) {
  cg_emitter *e = c->e;
  begin_function(c, fty, c->k->name, LLVMExternalLinkage);
  int n = cg_kernel_buffers(c->plan, c->k, table);
  LLVMTypeRef tty = LLVMArrayType2(e->ptr, (uint64_t)n);
  LLVMValueRef tbl = LLVMBuildAlloca(B, tty, "buffers");
  for (int i = 0; i < n; i++) {
    LLVMValueRef from = LLVMBuildGEP2(B, e->ptr, c->bufs, (LLVMValueRef[]){i64c(e, table[i])}, 1, "");
    LLVMValueRef to = LLVMBuildGEP2(B, e->ptr, tbl, (LLVMValueRef[]){i64c(e, i)}, 1, "");
    LLVMBuildStore(B, LLVMBuildLoad2(B, e->ptr, from, c->plan->buffer_node[table[i]]->name), to);
  }
  LLVMValueRef args[] = {tbl, c->batch, c->row0, c->row1, c->col0, c->col1, c->scratch};
  LLVMBuildCall2(B, fty, body, args, 7, "");
  LLVMBuildRetVoid(B);
}

/* The launch rows of an elementwise or line-formula row-wise kernel whose
 * result is static (no batch dimension, e.g. compiled with --batch): its
 * dimension 0, when its lines (the last dimension, or a normalization's
 * dimensions from its axis on) lie inside one index of it; else 0 (one
 * launch row, the whole result). The runtime then splits such a kernel
 * over threads as it splits a batched one over its batch rows. */
static int64_t static_rows(const cg_kernel *k) {
  if (k->kind != CG_KERNEL_ELTWISE && k->kind != CG_KERNEL_ROWWISE) return 0; /* a copy has no ops */
  const ir_node *n = result(k);
  if (ir_type_is_batched(&n->type) || n->type.rank < 2 || n->type.dims[0] < 2) return 0;
  if (k->kind == CG_KERNEL_ELTWISE) return n->type.dims[0];
  if (k->kind == CG_KERNEL_ROWWISE && ir_rnn_gates(k->ops[0]->op) > 0) return n->type.dims[0]; /* a scan per batch row */
  if (k->kind != CG_KERNEL_ROWWISE || !cg_rowwise_has_line_formula(k->ops[0]->op)) return 0;
  if (ir_op_attrs(n->op) & A(axis)) return ir_norm_first_dim(&n->type, n->attr.axis) >= 1 ? n->type.dims[0] : 0;
  return n->type.dims[0];
}

/* convolutional networks: the launch rows of a static elementwise result
 * of rank 3 or more that the CPU runs line by line (not as the direct
 * grouped convolution, whose rows are images): every dimension but the
 * last two, so that an NHWC image's rows (N x H) are split over threads,
 * not its images alone (a batch-1 depthwise convolution or pooling ran on
 * one thread); else static_rows'. Each result element is computed alone
 * (its own chain), so any split gives the same bits. */
static int64_t static_line_rows(const cg_kernel *k) {
  if (k->kind != CG_KERNEL_ELTWISE) return static_rows(k); /* (a copy has no ops) */
  const ir_node *n = result(k);
  if (ir_type_is_batched(&n->type) || n->type.rank < 3) return static_rows(k);
  int64_t rows = 1;
  for (int r = 0; r < n->type.rank - 2; r++) rows *= n->type.dims[r];
  return rows >= 2 ? rows : 0;
}

void cg_cpu_plan_layout(const cg_cpu_caps *caps, const cg_plan *plan, cg_cpu_layout *layout) {
  /* non-GEMM kernels: split by rows only, no scratch */
  for (int ki = 0; ki < plan->n_kernels; ki++)
    if (!cg_is_gemm(&plan->kernels[ki]))
      layout->launch[ki] = (cg_kernel_launch){.row_step = 1, .rows_fixed = static_rows(&plan->kernels[ki])};
  cg_gemm_plan(caps, plan, layout);
  for (int ki = 0; ki < plan->n_kernels; ki++) /* line by line (not the direct grouped convolution) */
    if (!cg_is_gemm(&plan->kernels[ki]) && !layout->gemm[ki])
      layout->launch[ki].rows_fixed = static_line_rows(&plan->kernels[ki]);
  int nk = plan->n_kernels;
  int *count = xcalloc((size_t)nk + 1, sizeof *count);
  int *table = xcalloc((size_t)plan->n_buffers + 1, sizeof *table);
  cg_kernel_share(plan, layout, layout->rep, count);
  if (layout->share_none)
    for (int ki = 0; ki < nk; ki++) layout->rep[ki] = ki, count[ki] = 1;
  for (int ki = 0; ki < nk; ki++) {
    const cg_kernel *k = &plan->kernels[ki];
    int r = layout->rep[ki];
    layout->shared[ki] = count[r] > 1;
    if (!layout->shared[ki] || !layout->share_by_table) continue; /* its own symbol (or wrapper) */
    if (r == ki) layout->symbol[ki] = arena_printf(layout->arena, "%s.shared", k->name);
    else layout->symbol[ki] = layout->symbol[r];
    int n = cg_kernel_buffers(plan, k, table);
    layout->args[ki] = arena_alloc(layout->arena, (size_t)n * sizeof(int));
    memcpy(layout->args[ki], table, (size_t)n * sizeof(int));
    layout->n_args[ki] = n;
  }
  free(count);
  free(table);
  layout->planned = true;
}

bool cg_cpu_emit_kernels(cg_emitter *e, const cg_cpu_caps *caps, const cg_plan *plan, cg_cpu_layout *layout,
                         const bool *only, diag_sink *d) {
  (void)d;
  if (!layout->planned) cg_cpu_plan_layout(caps, plan, layout);
  LLVMTypeRef params[] = {e->ptr, e->i64, e->i64, e->i64, e->i64, e->i64, e->ptr};
  LLVMTypeRef fty = LLVMFunctionType(e->void_, params, 7, 0);
  int n_ids = 0;
  for (int i = 0; i < plan->n_buffers; i++)
    if (plan->buffer_node[i]->id >= n_ids) n_ids = plan->buffer_node[i]->id + 1;
  for (int ki = 0; ki < plan->n_kernels; ki++)
    for (int t = 0; t < plan->kernels[ki].n_ops; t++)
      if (plan->kernels[ki].ops[t]->id >= n_ids) n_ids = plan->kernels[ki].ops[t]->id + 1;
  /* per node id, all NULL between kernels (cg_clear_bases): the arrays are
   * not cleared whole per kernel, which would be quadratic in depth */
  LLVMValueRef *base = xcalloc((size_t)n_ids + 1, sizeof *base);
  LLVMValueRef *spare = xcalloc((size_t)n_ids + 1, sizeof *spare);
  int nk = plan->n_kernels, nb = plan->n_buffers;
  LLVMValueRef *body = xcalloc((size_t)nk + 1, sizeof *body);
  int *table = xcalloc((size_t)nb + 1, sizeof *table), *slot = xcalloc((size_t)nb + 1, sizeof *slot);
  unsigned noinline = LLVMGetEnumAttributeKindForName("noinline", 8);
  for (int ki = 0; ki < nk; ki++) {
    if (only && !only[ki]) continue;
    const cg_kernel *k = &plan->kernels[ki];
    int r = layout->rep[ki];
    kctx c = {.e = e, .plan = plan, .k = k, .base = base, .spare_base = spare};
    if (!layout->shared[ki]) { /* a kernel of its own: the body is the kernel */
      begin_function(&c, fty, k->name, LLVMExternalLinkage);
      emit_body(&c, layout, ki);
      continue;
    }
    if (r == ki) { /* the first of its kind: emit the shared body */
      int n = cg_kernel_buffers(plan, k, table);
      for (int i = 0; i < n; i++) slot[table[i]] = i;
      c.slot = slot;
      const char *name = layout->share_by_table ? layout->symbol[ki] : arena_printf(layout->arena, "%s.shared", k->name);
      begin_function(&c, fty, name, layout->share_by_table ? LLVMExternalLinkage : LLVMInternalLinkage);
      if (!layout->share_by_table) /* one body, not one copy per wrapper */
        LLVMAddAttributeAtIndex(c.fn, LLVMAttributeFunctionIndex, LLVMCreateEnumAttribute(e->ctx, noinline, 0));
      emit_body(&c, layout, ki);
      body[ki] = c.fn;
      c.slot = NULL;
    }
    if (!layout->share_by_table) { /* AOT: a wrapper of the kernel's own name (same module as the body) */
      CASTOR_ASSERT(body[r]);
      emit_wrapper(&c, fty, body[r], table);
    }
  }
  free(base);
  free(spare);
  free(body);
  free(table);
  free(slot);
  return true;
}
