/*
 * cg_cpu.c: LLVM IR for the CPU kernels of a plan.
 *
 * Every kernel has the runtime's ABI, void k(ptr bufs, i64 batch, i64 row0,
 * i64 row1), and computes rows [row0, row1) of its result. LLVM values and
 * blocks are named after the IR nodes they come from, so `castor dump
 * --emit=llvm` reads beside the IR dump.
 *
 * matmul: register-blocked micro-kernels of MR rows x NV vectors of VW f32
 *   lanes (the host's widest vector), K innermost, f32 accumulators; column
 *   tails use one vector and then single lanes, row tails one row. The
 *   epilogue (bias, activation, cast; any fused elementwise op) is applied
 *   to the accumulators before the one store. Packing, cache blocking and
 *   threads come with the fast-kernels work; the ABI already allows them.
 * eltwise: one pass over each row, vectorized along the last dimension.
 * softmax: three passes over each row (max, sum of exp, scaled exp).
 */
#include <stdio.h>
#include <string.h>

#include "cg_internal.h"

enum { MR = 4, NV = 2 };

typedef struct kctx {
  cg_emitter *e;
  const cg_plan *plan;
  const cg_kernel *k;
  LLVMValueRef fn, bufs, batch, row0, row1;
  LLVMValueRef *base; /* per source node id: loaded buffer pointer (or NULL) */
} kctx;

#define B (e->b)

static LLVMValueRef i64c(cg_emitter *e, int64_t v) { return LLVMConstInt(e->i64, (unsigned long long)v, 1); }

/* ---- loops: for (iv = start; iv < end; iv += step) ---- */

typedef struct loop {
  LLVMBasicBlockRef header, body, exit;
  LLVMValueRef iv, step;
  LLVMBasicBlockRef latch_from;
} loop;

static loop loop_begin(kctx *c, LLVMValueRef start, LLVMValueRef end, int64_t step, const char *name) {
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

static void loop_end(kctx *c, loop *l) {
  cg_emitter *e = c->e;
  LLVMValueRef next = LLVMBuildAdd(B, l->iv, l->step, "");
  LLVMBasicBlockRef from = LLVMGetInsertBlock(B);
  LLVMAddIncoming(l->iv, &next, &from, 1);
  LLVMBuildBr(B, l->header);
  LLVMPositionBuilderAtEnd(B, l->exit);
}

/* ---- addressing ---- */

static LLVMValueRef elem_ptr(kctx *c, const ir_node *n, LLVMValueRef index) {
  cg_emitter *e = c->e;
  return LLVMBuildGEP2(B, cg_llvm_dtype(e, n->type.dtype), c->base[n->id], &index, 1, "");
}

static LLVMValueRef fmuladd(kctx *c, LLVMValueRef a, LLVMValueRef b, LLVMValueRef acc) {
  cg_emitter *e = c->e;
  LLVMTypeRef ty = LLVMTypeOf(acc);
  unsigned id = LLVMLookupIntrinsicID("llvm.fmuladd", strlen("llvm.fmuladd"));
  LLVMValueRef f = LLVMGetIntrinsicDeclaration(e->mod, id, &ty, 1);
  LLVMValueRef args[] = {a, b, acc};
  return LLVMBuildCall2(B, LLVMGlobalGetValueType(f), f, args, 3, "");
}

static LLVMValueRef splat(kctx *c, LLVMValueRef s, int lanes) {
  cg_emitter *e = c->e;
  if (lanes == 1) return s;
  LLVMTypeRef vt = LLVMVectorType(e->f32, (unsigned)lanes);
  LLVMValueRef v = LLVMBuildInsertElement(B, LLVMGetUndef(vt), s, i64c(e, 0), "");
  LLVMValueRef zeros = LLVMConstNull(LLVMVectorType(e->i32, (unsigned)lanes));
  return LLVMBuildShuffleVector(B, v, LLVMGetUndef(vt), zeros, "");
}

static bool is_bias(const ir_node *o) { return o->type.rank == 1 && !ir_type_is_batched(&o->type); }

/* Applies ops[first..] of the kernel to val (f32 lanes at flat element
 * index `idx` whose last-dimension coordinate is `col`). The value of
 * ops[first-1] is `val` (NULL when first == 0: load every source). */
static LLVMValueRef apply_chain(kctx *c, int first, LLVMValueRef val, LLVMValueRef idx,
                                LLVMValueRef col, int lanes) {
  cg_emitter *e = c->e;
  const cg_kernel *k = c->k;
  for (int t = first; t < k->n_ops; t++) {
    const ir_node *op = k->ops[t], *prev = t > 0 ? k->ops[t - 1] : NULL;
    LLVMValueRef in[IR_MAX_SRCS];
    for (int s = 0; s < op->n_srcs; s++) {
      const ir_node *src = op->srcs[s];
      if (src == prev) {
        in[s] = val;
      } else {
        LLVMValueRef p = elem_ptr(c, src, is_bias(src) && !is_bias(op) ? col : idx);
        in[s] = cg_emit_load(e, src->type.dtype, p, lanes, src->name);
      }
    }
    switch (op->op) {
    case IR_OP_ADD: val = LLVMBuildFAdd(B, in[0], in[1], op->name); break;
    case IR_OP_MUL: val = LLVMBuildFMul(B, in[0], in[1], op->name); break;
    case IR_OP_RELU:
    case IR_OP_SIGMOID:
    case IR_OP_TANH:
    case IR_OP_GELU: val = cg_emit_unary(e, op->op, in[0], op->name); break;
    case IR_OP_CAST: val = in[0]; break;
    case IR_OP_INPUT:
    case IR_OP_CONST:
    case IR_OP_MATMUL:
    case IR_OP_SOFTMAX:
    case IR_OP_COUNT: CASTOR_UNREACHABLE();
    }
    /* each op's value has its own dtype; model 16-bit results exactly */
    val = cg_emit_round_to(e, val, op->type.dtype, op->name);
  }
  return val;
}

static const ir_node *result(const cg_kernel *k) { return k->ops[k->n_ops - 1]; }

/* ---- matmul ---- */

static void emit_micro(kctx *c, LLVMValueRef i, LLVMValueRef j, int mr, int nv, int lanes) {
  cg_emitter *e = c->e;
  const ir_node *mm = c->k->ops[0], *a = mm->srcs[0], *bm = mm->srcs[1];
  int64_t K = a->type.dims[1], Nc = bm->type.dims[1];
  LLVMTypeRef vt = lanes == 1 ? e->f32 : LLVMVectorType(e->f32, (unsigned)lanes);
  LLVMValueRef acc[MR][NV];
  /* accumulators live in allocas in the entry block; SROA makes them registers */
  LLVMBasicBlockRef cur = LLVMGetInsertBlock(B);
  LLVMBasicBlockRef entry = LLVMGetEntryBasicBlock(c->fn);
  LLVMPositionBuilder(B, entry, LLVMGetFirstInstruction(entry));
  for (int r = 0; r < mr; r++)
    for (int v = 0; v < nv; v++) acc[r][v] = LLVMBuildAlloca(B, vt, "acc");
  LLVMPositionBuilderAtEnd(B, cur);
  for (int r = 0; r < mr; r++)
    for (int v = 0; v < nv; v++) LLVMBuildStore(B, cg_const(e, vt, 0.0), acc[r][v]);
  loop lk = loop_begin(c, i64c(e, 0), i64c(e, K), 1, "k");
  LLVMValueRef bv[NV];
  for (int v = 0; v < nv; v++) {
    LLVMValueRef idx = LLVMBuildAdd(B, LLVMBuildMul(B, lk.iv, i64c(e, Nc), ""),
                                    LLVMBuildAdd(B, j, i64c(e, v * lanes), ""), "");
    bv[v] = cg_emit_load(e, bm->type.dtype, elem_ptr(c, bm, idx), lanes, bm->name);
  }
  for (int r = 0; r < mr; r++) {
    LLVMValueRef row = LLVMBuildAdd(B, i, i64c(e, r), "");
    LLVMValueRef idx = LLVMBuildAdd(B, LLVMBuildMul(B, row, i64c(e, K), ""), lk.iv, "");
    LLVMValueRef av = splat(c, cg_emit_load(e, a->type.dtype, elem_ptr(c, a, idx), 1, a->name), lanes);
    for (int v = 0; v < nv; v++) {
      LLVMValueRef old = LLVMBuildLoad2(B, vt, acc[r][v], "");
      LLVMBuildStore(B, fmuladd(c, av, bv[v], old), acc[r][v]);
    }
  }
  loop_end(c, &lk);
  const ir_node *out = result(c->k);
  for (int r = 0; r < mr; r++) {
    LLVMValueRef row = LLVMBuildAdd(B, i, i64c(e, r), "");
    for (int v = 0; v < nv; v++) {
      LLVMValueRef col = LLVMBuildAdd(B, j, i64c(e, v * lanes), "");
      LLVMValueRef idx = LLVMBuildAdd(B, LLVMBuildMul(B, row, i64c(e, Nc), ""), col, "");
      LLVMValueRef val = LLVMBuildLoad2(B, vt, acc[r][v], mm->name);
      val = cg_emit_round_to(e, val, mm->type.dtype, mm->name);
      val = apply_chain(c, 1, val, idx, col, lanes);
      cg_emit_store(e, out->type.dtype, val, elem_ptr(c, out, idx), lanes);
    }
  }
}

/* Columns [j0, j1) in steps of nv*lanes: all rows, MR at a time, then one. */
static void emit_matmul_cols(kctx *c, int64_t j0, int64_t j1, int nv, int lanes) {
  cg_emitter *e = c->e;
  if (j1 <= j0) return;
  loop lj = loop_begin(c, i64c(e, j0), i64c(e, j1), nv * lanes, "j");
  loop li = loop_begin(c, c->row0, c->row1, MR, "i");
  emit_micro(c, li.iv, lj.iv, MR, nv, lanes);
  loop_end(c, &li);
  /* row tail: from where the MR loop stopped */
  LLVMValueRef rows = LLVMBuildSub(B, c->row1, c->row0, "");
  LLVMValueRef done = LLVMBuildMul(B, LLVMBuildSDiv(B, rows, i64c(e, MR), ""), i64c(e, MR), "");
  loop lt = loop_begin(c, LLVMBuildAdd(B, c->row0, done, ""), c->row1, 1, "i.tail");
  emit_micro(c, lt.iv, lj.iv, 1, nv, lanes);
  loop_end(c, &lt);
  loop_end(c, &lj);
}

static void emit_matmul(kctx *c) {
  int vw = c->e->vw;
  int64_t Nc = c->k->ops[0]->type.dims[1];
  int64_t wide = Nc / (NV * vw) * (NV * vw);
  int64_t one = wide + (Nc - wide) / vw * vw;
  emit_matmul_cols(c, 0, wide, NV, vw);
  emit_matmul_cols(c, wide, one, 1, vw);
  emit_matmul_cols(c, one, Nc, 1, 1);
}

/* ---- elementwise and softmax: rows x lines x last ---- */

static void line_shape(const ir_node *n, int64_t *lines_per_row, int64_t *last) {
  int64_t inner = 1;
  CASTOR_ASSERT(ir_type_inner_numel(&n->type, &inner));
  bool scalar_rows = n->type.rank == 0 || (n->type.rank == 1 && ir_type_is_batched(&n->type));
  *last = scalar_rows ? 1 : n->type.dims[n->type.rank - 1];
  *lines_per_row = inner / *last;
}

static void emit_eltwise_segment(kctx *c, LLVMValueRef line_base, int64_t j0, int64_t j1, int lanes) {
  cg_emitter *e = c->e;
  if (j1 <= j0) return;
  loop lj = loop_begin(c, i64c(e, j0), i64c(e, j1), lanes, "j");
  LLVMValueRef idx = LLVMBuildAdd(B, line_base, lj.iv, "");
  LLVMValueRef val = apply_chain(c, 0, NULL, idx, lj.iv, lanes);
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

static void eltwise_body(kctx *c, LLVMValueRef base, int64_t last) {
  int vw = c->e->vw;
  int64_t vec = last / vw * vw;
  emit_eltwise_segment(c, base, 0, vec, vw);
  emit_eltwise_segment(c, base, vec, last, 1);
}

static LLVMValueRef hreduce(kctx *c, LLVMValueRef v, bool is_max) {
  cg_emitter *e = c->e;
  if (LLVMGetTypeKind(LLVMTypeOf(v)) != LLVMVectorTypeKind) return v;
  unsigned n = LLVMGetVectorSize(LLVMTypeOf(v));
  LLVMValueRef r = LLVMBuildExtractElement(B, v, i64c(e, 0), "");
  for (unsigned i = 1; i < n; i++) {
    LLVMValueRef x = LLVMBuildExtractElement(B, v, i64c(e, i), "");
    r = is_max ? LLVMBuildSelect(B, LLVMBuildFCmp(B, LLVMRealOGT, x, r, ""), x, r, "")
               : LLVMBuildFAdd(B, r, x, "");
  }
  return r;
}

/* One softmax pass over a line: pass 0 max, pass 1 sum of exp(x - max),
 * pass 2 store exp(x - max) * inv. Returns the reduced scalar for 0 and 1. */
static LLVMValueRef softmax_pass(kctx *c, LLVMValueRef base, int64_t last, int pass,
                                 LLVMValueRef max, LLVMValueRef inv) {
  cg_emitter *e = c->e;
  const ir_node *sm = c->k->ops[0], *x = sm->srcs[0];
  static const char *names[] = {"max", "sum", "out"};
  LLVMValueRef total = pass == 0 ? cg_const(e, e->f32, -__builtin_inf()) : cg_const(e, e->f32, 0.0);
  int64_t vec = last / e->vw * e->vw;
  for (int seg = 0; seg < 2; seg++) {
    int lanes = seg == 0 ? e->vw : 1;
    int64_t j0 = seg == 0 ? 0 : vec, j1 = seg == 0 ? vec : last;
    if (j1 <= j0) continue;
    LLVMTypeRef vt = lanes == 1 ? e->f32 : LLVMVectorType(e->f32, (unsigned)lanes);
    LLVMBasicBlockRef cur = LLVMGetInsertBlock(B), entry = LLVMGetEntryBasicBlock(c->fn);
    LLVMPositionBuilder(B, entry, LLVMGetFirstInstruction(entry));
    LLVMValueRef acc = LLVMBuildAlloca(B, vt, names[pass]);
    LLVMPositionBuilderAtEnd(B, cur);
    LLVMBuildStore(B, pass == 0 ? cg_const(e, vt, -__builtin_inf()) : cg_const(e, vt, 0.0), acc);
    loop lj = loop_begin(c, i64c(e, j0), i64c(e, j1), lanes, names[pass]);
    LLVMValueRef idx = LLVMBuildAdd(B, base, lj.iv, "");
    LLVMValueRef v = cg_emit_load(e, x->type.dtype, elem_ptr(c, x, idx), lanes, x->name);
    LLVMValueRef a = LLVMBuildLoad2(B, vt, acc, "");
    if (pass == 0) {
      LLVMBuildStore(B, LLVMBuildSelect(B, LLVMBuildFCmp(B, LLVMRealOGT, v, a, ""), v, a, ""), acc);
    } else {
      LLVMValueRef ex = cg_emit_exp(e, LLVMBuildFSub(B, v, splat(c, max, lanes), ""), "exp");
      if (pass == 1) {
        LLVMBuildStore(B, LLVMBuildFAdd(B, a, ex, ""), acc);
      } else {
        LLVMValueRef y = LLVMBuildFMul(B, ex, splat(c, inv, lanes), sm->name);
        cg_emit_store(e, sm->type.dtype, cg_emit_round_to(e, y, sm->type.dtype, sm->name),
                      elem_ptr(c, sm, idx), lanes);
      }
    }
    loop_end(c, &lj);
    LLVMValueRef r = hreduce(c, LLVMBuildLoad2(B, vt, acc, ""), pass == 0);
    total = pass == 0 ? LLVMBuildSelect(B, LLVMBuildFCmp(B, LLVMRealOGT, r, total, ""), r, total, "")
                      : LLVMBuildFAdd(B, total, r, "");
  }
  return total;
}

static void softmax_body(kctx *c, LLVMValueRef base, int64_t last) {
  cg_emitter *e = c->e;
  LLVMValueRef max = softmax_pass(c, base, last, 0, NULL, NULL);
  LLVMValueRef sum = softmax_pass(c, base, last, 1, max, NULL);
  LLVMValueRef inv = LLVMBuildFDiv(B, cg_const(e, e->f32, 1.0), sum, "inv");
  softmax_pass(c, base, last, 2, max, inv);
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
      LLVMBuildGEP2(B, e->ptr, c->bufs, (LLVMValueRef[]){i64c(e, c->k->out_buffer)}, 1, ""), "out");
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
  LLVMValueRef slot = LLVMBuildGEP2(B, e->ptr, c->bufs, (LLVMValueRef[]){i64c(e, b)}, 1, "");
  LLVMValueRef p = LLVMBuildLoad2(B, e->ptr, slot, n->name);
  c->base[n->id] = p;
}

bool cg_cpu_emit_kernels(cg_emitter *e, const cg_plan *plan, diag_sink *d) {
  (void)d;
  LLVMTypeRef params[] = {e->ptr, e->i64, e->i64, e->i64};
  LLVMTypeRef fty = LLVMFunctionType(e->void_, params, 4, 0);
  int max_id = 0;
  for (int b = 0; b < plan->n_buffers; b++)
    if (plan->buffer_node[b]->id > max_id) max_id = plan->buffer_node[b]->id;
  LLVMValueRef *base = xcalloc((size_t)max_id + 1, sizeof *base);
  for (int ki = 0; ki < plan->n_kernels; ki++) {
    const cg_kernel *k = &plan->kernels[ki];
    kctx c = {e, plan, k, NULL, NULL, NULL, NULL, NULL, base};
    memset(base, 0, ((size_t)max_id + 1) * sizeof *base);
    c.fn = LLVMAddFunction(e->mod, k->name, fty);
    LLVMSetLinkage(c.fn, LLVMExternalLinkage);
    c.bufs = LLVMGetParam(c.fn, 0), c.batch = LLVMGetParam(c.fn, 1);
    c.row0 = LLVMGetParam(c.fn, 2), c.row1 = LLVMGetParam(c.fn, 3);
    LLVMSetValueName2(c.bufs, "bufs", 4), LLVMSetValueName2(c.batch, "batch", 5);
    LLVMSetValueName2(c.row0, "row0", 4), LLVMSetValueName2(c.row1, "row1", 4);
    LLVMPositionBuilderAtEnd(e->b, LLVMAppendBasicBlockInContext(e->ctx, c.fn, "entry"));
    if (k->kind == CG_KERNEL_COPY) {
      load_base(&c, k->copy_src);
      emit_copy(&c);
    } else {
      for (int t = 0; t < k->n_ops; t++)
        for (int s = 0; s < k->ops[t]->n_srcs; s++)
          if (plan->buffer_of[k->ops[t]->srcs[s]->id] >= 0) load_base(&c, k->ops[t]->srcs[s]);
      load_base(&c, result(k));
      switch (k->kind) {
      case CG_KERNEL_MATMUL: emit_matmul(&c); break;
      case CG_KERNEL_ELTWISE: emit_rows_lines(&c, eltwise_body); break;
      case CG_KERNEL_SOFTMAX: emit_rows_lines(&c, softmax_body); break;
      case CG_KERNEL_COPY: break;
      }
    }
    LLVMBuildRetVoid(e->b);
  }
  free(base);
  return true;
}
