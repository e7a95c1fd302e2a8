/*
 * cg_cpu.c: LLVM IR for the CPU kernels of a plan.
 *
 * Every kernel has the runtime's ABI, void k(ptr bufs, i64 batch, i64 row0,
 * i64 row1, i64 col0, i64 col1, ptr scratch), and computes rows [row0,
 * row1) of its result (GEMMs: only columns [col0, col1)). LLVM values and
 * blocks are named after the IR nodes they come from, so `castor dump
 * --emit=llvm` reads beside the IR dump.
 *
 * matmul: cg_gemm.c (packed panels, register-blocked micro-kernels, cache
 *   blocking along K, the epilogue fused into the one store).
 * eltwise: one pass over each row, vectorized along the last dimension.
 * softmax: the row-wise op over each line of the last dimension, by
 *   cg_rowwise.c (the emitter the GEMM epilogue shares).
 */
#include <stdio.h>
#include <string.h>

#include "codegen/cpu/cg_cpu.h"

#define B (e->b)

typedef cg_kctx kctx;
typedef cg_loop loop;

LLVMValueRef cg_i64(cg_emitter *e, int64_t v) { return LLVMConstInt(e->i64, (unsigned long long)v, 1); }
#define i64c cg_i64

/* ---- loops ---- */

cg_loop cg_loop_begin(cg_kctx *c, LLVMValueRef start, LLVMValueRef end, int64_t step, const char *name) {
  cg_emitter *e = c->e;
  loop l;
  LLVMBasicBlockRef pre = LLVMGetInsertBlock(B);
  char nm[128];
  snprintf(nm, sizeof nm, "%s.header", name);
  l.header = LLVMAppendBasicBlockInContext(e->ctx, c->fn, nm);
  snprintf(nm, sizeof nm, "%s.body", name);
  l.body = LLVMAppendBasicBlockInContext(e->ctx, c->fn, nm);
  snprintf(nm, sizeof nm, "%s.exit", name);
  l.exit = LLVMAppendBasicBlockInContext(e->ctx, c->fn, nm);
  LLVMBuildBr(B, l.header);
  LLVMPositionBuilderAtEnd(B, l.header);
  l.iv = LLVMBuildPhi(B, e->i64, name);
  LLVMAddIncoming(l.iv, &start, &pre, 1);
  l.step = i64c(e, step);
  /* iv + step <= end, so a vector step never reads past the range */
  LLVMValueRef next = LLVMBuildAdd(B, l.iv, l.step, "");
  LLVMBuildCondBr(B, LLVMBuildICmp(B, LLVMIntSLE, next, end, ""), l.body, l.exit);
  LLVMPositionBuilderAtEnd(B, l.body);
  return l;
}

void cg_loop_end(cg_kctx *c, cg_loop *l) {
  cg_emitter *e = c->e;
  LLVMValueRef next = LLVMBuildAdd(B, l->iv, l->step, "");
  LLVMBasicBlockRef from = LLVMGetInsertBlock(B);
  LLVMAddIncoming(l->iv, &next, &from, 1);
  LLVMBuildBr(B, l->header);
  LLVMPositionBuilderAtEnd(B, l->exit);
}
#define loop_begin cg_loop_begin
#define loop_end cg_loop_end

/* ---- addressing and small helpers ---- */

LLVMValueRef cg_elem_ptr(cg_kctx *c, const ir_node *n, LLVMValueRef index) {
  cg_emitter *e = c->e;
  return LLVMBuildGEP2(B, cg_llvm_dtype(e, n->type.dtype), c->base[n->id], &index, 1, "");
}
#define elem_ptr cg_elem_ptr

LLVMValueRef cg_fmuladd(cg_emitter *e, LLVMValueRef a, LLVMValueRef b, LLVMValueRef acc) {
  LLVMTypeRef ty = LLVMTypeOf(acc);
  unsigned id = LLVMLookupIntrinsicID("llvm.fmuladd", strlen("llvm.fmuladd"));
  LLVMValueRef f = LLVMGetIntrinsicDeclaration(e->mod, id, &ty, 1);
  LLVMValueRef args[] = {a, b, acc};
  return LLVMBuildCall2(B, LLVMGlobalGetValueType(f), f, args, 3, "");
}

LLVMValueRef cg_splat(cg_emitter *e, LLVMValueRef s, int lanes) {
  if (lanes == 1) return s;
  LLVMTypeRef vt = LLVMVectorType(e->f32, (unsigned)lanes);
  LLVMValueRef v = LLVMBuildInsertElement(B, LLVMGetUndef(vt), s, i64c(e, 0), "");
  LLVMValueRef zeros = LLVMConstNull(LLVMVectorType(e->i32, (unsigned)lanes));
  return LLVMBuildShuffleVector(B, v, LLVMGetUndef(vt), zeros, "");
}

LLVMValueRef cg_entry_alloca(cg_kctx *c, LLVMTypeRef ty, const char *name) {
  cg_emitter *e = c->e;
  LLVMBasicBlockRef cur = LLVMGetInsertBlock(B), entry = LLVMGetEntryBasicBlock(c->fn);
  LLVMValueRef first = LLVMGetFirstInstruction(entry);
  if (first) LLVMPositionBuilder(B, entry, first);
  else LLVMPositionBuilderAtEnd(B, entry);
  LLVMValueRef a = LLVMBuildAlloca(B, ty, name);
  LLVMPositionBuilderAtEnd(B, cur);
  return a;
}

bool cg_is_bias(const ir_node *o) { return o->type.rank == 1 && !ir_type_is_batched(&o->type); }
#define is_bias cg_is_bias

LLVMValueRef cg_load_part(cg_emitter *e, ir_dtype dt, LLVMValueRef ptr, int lanes, int valid, const char *name) {
  if (valid >= lanes) return cg_emit_load(e, dt, ptr, lanes, name);
  LLVMValueRef v = LLVMConstNull(LLVMVectorType(e->f32, (unsigned)lanes));
  LLVMTypeRef st = cg_llvm_dtype(e, dt);
  for (int i = 0; i < valid; i++) {
    LLVMValueRef p = LLVMBuildGEP2(B, st, ptr, (LLVMValueRef[]){i64c(e, i)}, 1, "");
    v = LLVMBuildInsertElement(B, v, cg_emit_load(e, dt, p, 1, ""), i64c(e, i), name);
  }
  return v;
}

void cg_store_part(cg_emitter *e, ir_dtype dt, LLVMValueRef val, LLVMValueRef ptr, int lanes, int valid) {
  if (valid >= lanes) {
    cg_emit_store(e, dt, val, ptr, lanes);
    return;
  }
  LLVMTypeRef st = cg_llvm_dtype(e, dt);
  for (int i = 0; i < valid; i++) {
    LLVMValueRef p = LLVMBuildGEP2(B, st, ptr, (LLVMValueRef[]){i64c(e, i)}, 1, "");
    cg_emit_store(e, dt, LLVMBuildExtractElement(B, val, i64c(e, i), ""), p, 1);
  }
}

LLVMValueRef cg_apply_chain(cg_kctx *c, int first, int last, LLVMValueRef val, LLVMValueRef idx,
                            LLVMValueRef col, int lanes, int valid) {
  cg_emitter *e = c->e;
  const cg_kernel *k = c->k;
  for (int t = first; t < last; t++) {
    const ir_node *op = k->ops[t], *prev = t > 0 ? k->ops[t - 1] : NULL;
    LLVMValueRef in[IR_MAX_SRCS];
    for (int s = 0; s < op->n_srcs; s++) {
      const ir_node *src = op->srcs[s];
      if (src == prev) {
        in[s] = val;
      } else {
        LLVMValueRef p = elem_ptr(c, src, is_bias(src) && !is_bias(op) ? col : idx);
        in[s] = cg_load_part(e, src->type.dtype, p, lanes, valid, src->name);
      }
    }
    switch (op->op) {
    case IR_OP_ADD: val = LLVMBuildFAdd(B, in[0], in[1], op->name); break;
    case IR_OP_MUL: val = LLVMBuildFMul(B, in[0], in[1], op->name); break;
    case IR_OP_RELU:
    case IR_OP_SIGMOID:
    case IR_OP_TANH:
    case IR_OP_GELU:
    case IR_OP_SILU: val = cg_emit_unary(e, op->op, in[0], op->name); break;
    case IR_OP_CAST: val = in[0]; break;
    case IR_OP_RELU_GRAD: /* b > 0 ? a : 0 */
      val = LLVMBuildSelect(B, LLVMBuildFCmp(B, LLVMRealOGT, in[1], cg_const(e, LLVMTypeOf(in[1]), 0.0), ""), in[0],
                            cg_const(e, LLVMTypeOf(in[0]), 0.0), op->name);
      break;
    case IR_OP_SIGMOID_GRAD: { /* a * b * (1 - b) */
      LLVMValueRef one_minus = LLVMBuildFSub(B, cg_const(e, LLVMTypeOf(in[1]), 1.0), in[1], "");
      val = LLVMBuildFMul(B, LLVMBuildFMul(B, in[0], in[1], ""), one_minus, op->name);
      break;
    }
    case IR_OP_TANH_GRAD: /* a * (1 - b * b) */
      val = LLVMBuildFMul(B, in[0], LLVMBuildFSub(B, cg_const(e, LLVMTypeOf(in[1]), 1.0), LLVMBuildFMul(B, in[1], in[1], ""), ""),
                          op->name);
      break;
    case IR_OP_GELU_GRAD: val = cg_emit_gelu_grad(e, in[0], in[1], op->name); break;
    case IR_OP_SILU_GRAD: { /* a * s * (1 + b (1 - s)), s = sigmoid(b) */
      LLVMTypeRef ty = LLVMTypeOf(in[1]);
      LLVMValueRef sg = cg_emit_unary(e, IR_OP_SIGMOID, in[1], "");
      LLVMValueRef f = LLVMBuildFAdd(B, cg_const(e, ty, 1.0),
                                     LLVMBuildFMul(B, in[1], LLVMBuildFSub(B, cg_const(e, ty, 1.0), sg, ""), ""), "");
      val = LLVMBuildFMul(B, LLVMBuildFMul(B, in[0], sg, ""), f, op->name);
      break;
    }
    case IR_OP_INPUT:
    case IR_OP_CONST:
    case IR_OP_MATMUL:
    case IR_OP_SOFTMAX:
    case IR_OP_LAYER_NORM:
    case IR_OP_LAYER_NORM_GRAD:
    case IR_OP_LAYER_NORM_XHAT:
    case IR_OP_PAD:
    case IR_OP_SLICE:
    CG_CASE_TRAINING_OTHER_OPS
    case IR_OP_COUNT: CASTOR_UNREACHABLE(); /* not elementwise (cg_plan.c never chains them) */
    }
    /* each op's value has its own dtype; model 16-bit results exactly */
    val = cg_emit_round_to(e, val, op->type.dtype, op->name);
  }
  return val;
}

static const ir_node *result(const cg_kernel *k) { return k->ops[k->n_ops - 1]; }

/* ---- elementwise and row-wise: rows x lines x last ---- */

/* A kernel's lines: the last dimension, except that the line of an op
 * with an axis (layer_norm and its gradient ops) is all its normalized
 * dimensions (from its axis on), which it reduces. */
static void line_shape(const ir_node *n, int64_t *lines_per_row, int64_t *last) {
  int64_t inner = 1;
  CASTOR_ASSERT(ir_type_inner_numel(&n->type, &inner));
  bool scalar_rows = n->type.rank == 0 || (n->type.rank == 1 && ir_type_is_batched(&n->type));
  *last = scalar_rows ? 1 : n->type.dims[n->type.rank - 1];
  if (ir_op_attrs(n->op) & A(axis)) {
    int first = ir_norm_first_dim(&n->type, n->attr.axis);
    CASTOR_ASSERT(first >= 0);
    *last = 1;
    for (int r = first; r < n->type.rank; r++) *last *= n->type.dims[r];
  }
  *lines_per_row = inner / *last;
}

static void emit_eltwise_segment(kctx *c, LLVMValueRef line_base, int64_t j0, int64_t j1, int lanes) {
  cg_emitter *e = c->e;
  if (j1 <= j0) return;
  loop lj = loop_begin(c, i64c(e, j0), i64c(e, j1), lanes, "j");
  LLVMValueRef idx = LLVMBuildAdd(B, line_base, lj.iv, "");
  LLVMValueRef val = cg_apply_chain(c, 0, c->k->n_ops, NULL, idx, lj.iv, lanes, lanes);
  const ir_node *out = result(c->k);
  cg_emit_store(e, out->type.dtype, val, elem_ptr(c, out, idx), lanes);
  loop_end(c, &lj);
}

static void emit_rows_lines(kctx *c, void (*body)(kctx *, LLVMValueRef line_base, int64_t last)) {
  cg_emitter *e = c->e;
  int64_t lines, last;
  line_shape(result(c->k), &lines, &last);
  loop lr = loop_begin(c, c->row0, c->row1, 1, "row");
  loop ll = loop_begin(c, i64c(e, 0), i64c(e, lines), 1, "line");
  LLVMValueRef base = LLVMBuildMul(B, LLVMBuildAdd(B, LLVMBuildMul(B, lr.iv, i64c(e, lines), ""), ll.iv, ""),
                                   i64c(e, last), "line.base");
  body(c, base, last);
  loop_end(c, &ll);
  loop_end(c, &lr);
}

/* The value of a pad or slice at flat element index i of its result (row
 * major, rows = batch rows): the source element at the same coordinates,
 * or 0 where a pad reaches past the source. */
static LLVMValueRef reshape_value(kctx *c, const ir_node *op, LLVMValueRef i) {
  cg_emitter *e = c->e;
  const ir_node *x = op->srcs[0];
  const ir_type *yt = &op->type, *xt = &x->type;
  if (yt->rank == 0) return cg_emit_load(e, x->type.dtype, elem_ptr(c, x, i), 1, op->name);
  LLVMValueRef coord[IR_MAX_RANK], rem = i;
  for (int r = yt->rank - 1; r > 0; r--) {
    coord[r] = LLVMBuildURem(B, rem, i64c(e, yt->dims[r]), "");
    rem = LLVMBuildUDiv(B, rem, i64c(e, yt->dims[r]), "");
  }
  coord[0] = rem;
  LLVMValueRef src = i64c(e, 0), inside = LLVMConstInt(e->i1, 1, 0);
  for (int r = 0; r < yt->rank; r++) {
    if (r > 0) src = LLVMBuildMul(B, src, i64c(e, xt->dims[r]), "");
    src = LLVMBuildAdd(B, src, coord[r], "");
    if (op->op == IR_OP_PAD && xt->dims[r] != IR_DIM_BATCH)
      inside = LLVMBuildAnd(B, inside, LLVMBuildICmp(B, LLVMIntSLT, coord[r], i64c(e, xt->dims[r]), ""), "");
  }
  if (op->op == IR_OP_SLICE) return cg_emit_load(e, x->type.dtype, elem_ptr(c, x, src), 1, op->name);
  LLVMValueRef safe = LLVMBuildSelect(B, inside, src, i64c(e, 0), "");
  LLVMValueRef v = cg_emit_load(e, x->type.dtype, elem_ptr(c, x, safe), 1, x->name);
  return LLVMBuildSelect(B, inside, v, cg_const(e, e->f32, 0.0), op->name);
}

static void eltwise_body(kctx *c, LLVMValueRef base, int64_t last) {
  int vw = c->e->vw;
  const ir_node *first = c->k->ops[0];
  if (first->op == IR_OP_PAD || first->op == IR_OP_SLICE) {
    /* one element at a time: pads and slices only run on activations of
     * matmuls that pad8 widened, a small part of a model's work */
    cg_emitter *e = c->e;
    loop lj = loop_begin(c, i64c(e, 0), i64c(e, last), 1, "j");
    LLVMValueRef idx = LLVMBuildAdd(B, base, lj.iv, "");
    LLVMValueRef val = cg_emit_round_to(e, reshape_value(c, first, idx), first->type.dtype, first->name);
    val = cg_apply_chain(c, 1, c->k->n_ops, val, idx, lj.iv, 1, 1);
    cg_emit_store(e, result(c->k)->type.dtype, val, elem_ptr(c, result(c->k), idx), 1);
    loop_end(c, &lj);
    return;
  }
  int64_t vec = last / vw * vw;
  emit_eltwise_segment(c, base, 0, vec, vw);
  emit_eltwise_segment(c, base, vec, last, 1);
}

/* A line of the row-wise op that is the kernel: its input and result
 * buffers from flat element index `base`. */
typedef struct line_row {
  cg_row row;
  kctx *c;
  const ir_node *op;
  LLVMValueRef base;
} line_row;

static LLVMValueRef line_load_operand(cg_row *row, int src, LLVMValueRef j, int lanes, int valid) {
  line_row *l = (line_row *)row;
  cg_emitter *e = l->c->e;
  const ir_node *x = l->op->srcs[src];
  CASTOR_ASSERT(ir_type_eq(&x->type, &l->op->srcs[0]->type));
  return cg_load_part(e, x->type.dtype, elem_ptr(l->c, x, LLVMBuildAdd(B, l->base, j, "")), lanes, valid, x->name);
}

static LLVMValueRef line_load(cg_row *row, LLVMValueRef j, int lanes, int valid) {
  return line_load_operand(row, 0, j, lanes, valid);
}

static void line_store(cg_row *row, LLVMValueRef j, LLVMValueRef val, int lanes, int valid) {
  line_row *l = (line_row *)row;
  cg_emitter *e = l->c->e;
  cg_store_part(e, l->op->type.dtype, val, elem_ptr(l->c, l->op, LLVMBuildAdd(B, l->base, j, "")), lanes, valid);
}

static void rowwise_body(kctx *c, LLVMValueRef base, int64_t last) {
  const ir_node *op = c->k->ops[0];
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

/* Where buffer b's address is in the kernel's bufs parameter. */
static int buffer_index(const kctx *c, int b) { return c->slot ? c->slot[b] : b; }

static void emit_copy(kctx *c) {
  cg_emitter *e = c->e;
  const rt_buffer *ob = &c->plan->buffers[c->k->out_buffer];
  int64_t row_bytes = ob->bytes_per_row ? ob->bytes_per_row : ob->bytes_fixed;
  LLVMValueRef off = LLVMBuildMul(B, c->row0, i64c(e, row_bytes), "");
  LLVMValueRef len = LLVMBuildMul(B, LLVMBuildSub(B, c->row1, c->row0, ""), i64c(e, row_bytes), "");
  LLVMTypeRef i8 = LLVMInt8TypeInContext(e->ctx);
  LLVMValueRef dst_base = LLVMBuildLoad2(B, e->ptr,
      LLVMBuildGEP2(B, e->ptr, c->bufs, (LLVMValueRef[]){i64c(e, buffer_index(c, c->k->out_buffer))}, 1, ""),
      "out");
  LLVMValueRef dst = LLVMBuildGEP2(B, i8, dst_base, &off, 1, "");
  LLVMValueRef src = LLVMBuildGEP2(B, i8, c->base[c->k->copy_src->id], &off, 1, "");
  LLVMBuildMemCpy(B, dst, 1, src, 1, len);
}

/* ---- kernels ---- */

static void load_base(kctx *c, const ir_node *n) {
  cg_emitter *e = c->e;
  if (c->base[n->id]) return;
  int b = c->plan->buffer_of[n->id];
  CASTOR_ASSERT(b >= 0);
  LLVMValueRef slot = LLVMBuildGEP2(B, e->ptr, c->bufs, (LLVMValueRef[]){i64c(e, buffer_index(c, b))}, 1, "");
  LLVMValueRef p = LLVMBuildLoad2(B, e->ptr, slot, n->name);
  c->base[n->id] = p;
}

void cg_load_bases(cg_kctx *c) {
  const cg_kernel *k = c->k;
  for (int t = 0; t < k->n_ops; t++)
    for (int s = 0; s < k->ops[t]->n_srcs; s++)
      if (c->plan->buffer_of[k->ops[t]->srcs[s]->id] >= 0) load_base(c, k->ops[t]->srcs[s]);
  load_base(c, result(k));
}

void cg_clear_bases(cg_kctx *c) {
  const cg_kernel *k = c->k;
  if (k->kind == CG_KERNEL_COPY) c->base[k->copy_src->id] = NULL;
  for (int t = 0; t < k->n_ops; t++) {
    c->base[k->ops[t]->id] = NULL;
    for (int s = 0; s < k->ops[t]->n_srcs; s++) c->base[k->ops[t]->srcs[s]->id] = NULL;
  }
}

void cg_plan_launch_fill(const cg_plan *p, const cg_cpu_layout *layout, int ki, rt_launch *l) {
  const cg_kernel *k = &p->kernels[ki];
  const ir_node *res = k->kind == CG_KERNEL_COPY ? k->copy_src : k->ops[k->n_ops - 1];
  int64_t inner = 1;
  CASTOR_ASSERT(ir_type_inner_numel(&res->type, &inner));
  cg_kernel_launch split = layout ? layout->launch[ki] : (cg_kernel_launch){0};
  l->cols = split.cols;
  l->col_step = split.col_step;
  l->row_step = split.row_step;
  l->scratch_bytes = split.scratch_bytes;
  /* about one unit per element and op; a GEMM row costs its flops */
  if (k->kind == CG_KERNEL_TRAIN) { /* its own launch (cg_train.c), or a GEMM's split (cg_gemm.c) */
    int64_t rows, step, work, per_batch;
    cg_train_launch(k->ops[0], &rows, &step, &work, &per_batch);
    if (!cg_is_gemm(k)) l->row_step = step;
    l->work_per_row = work;
    l->work_per_row_per_batch = per_batch;
    return;
  }
  l->work_per_row = k->kind == CG_KERNEL_MATMUL ? l->flops_per_row
                    : k->kind == CG_KERNEL_SOFTMAX ? 16 * inner
                    : k->kind == CG_KERNEL_COPY    ? inner
                                                   : 4 * inner * k->n_ops;
}

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
  if (k->kind == CG_KERNEL_COPY) {
    load_base(c, k->copy_src);
    emit_copy(c);
  } else {
    cg_load_bases(c);
    switch (k->kind) {
    case CG_KERNEL_MATMUL: cg_gemm_emit(c, layout->gemm[ki]); break;
    case CG_KERNEL_ELTWISE: emit_rows_lines(c, eltwise_body); break;
    case CG_KERNEL_SOFTMAX: emit_rows_lines(c, rowwise_body); break;
    case CG_KERNEL_TRAIN:
      if (cg_is_gemm(k)) cg_gemm_emit(c, layout->gemm[ki]);
      else cg_train_emit(c);
      break;
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

void cg_cpu_plan_layout(const cg_cpu_caps *caps, const cg_plan *plan, cg_cpu_layout *layout) {
  /* non-GEMM kernels: split by rows only, no scratch */
  for (int ki = 0; ki < plan->n_kernels; ki++)
    if (!cg_is_gemm(&plan->kernels[ki])) layout->launch[ki] = (cg_kernel_launch){.row_step = 1};
  cg_emitter planner = {.caps = caps};
  cg_gemm_plan(&planner, plan, layout);
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

bool cg_cpu_emit_kernels(cg_emitter *e, const cg_plan *plan, cg_cpu_layout *layout, const bool *only,
                         diag_sink *d) {
  (void)d;
  if (!layout->planned) cg_cpu_plan_layout(e->caps, plan, layout);
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
