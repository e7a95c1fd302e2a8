/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cg_train.h: what the training formulas of the kernel kit share (private
 * to codegen/kernel: cg_train.c's dispatch, cg_loss.c, cg_update.c,
 * cg_sum_to.c): typed loads and stores through the kernel's buffer table,
 * f32 variables, lane sums, guarded blocks and each formula's entry.
 *
 * Every formula emits into the kernel being built (cg_kctx) over the rows
 * [c->row0, c->row1) of its launch, with c->batch the run's batch and
 * c->e->vw the f32 lanes of a vector: a CPU launch gives a thread a range
 * of rows and the host's vector width; the GPU gives each thread one row
 * and lanes 1. A reduction's order lives inside one row, so any split of
 * the rows gives the same bits.
 */
#ifndef CASTOR_CG_TRAIN_H
#define CASTOR_CG_TRAIN_H

#include <stdio.h>
#include <string.h>

#include "codegen/kernel/cg_kit.h"

#define B (e->b)
#define i64c(v) cg_i64(e, (v))
#define F(v) cg_const(e, e->f32, (v))

static inline const ir_node *op_of(const cg_kctx *c) { return c->k->ops[0]; }

static inline LLVMValueRef load_f(cg_kctx *c, const ir_node *n, LLVMValueRef i, int lanes) {
  return cg_emit_load(c->e, n->type.dtype, cg_elem_ptr(c, n, i), lanes, n->name);
}

static inline void store_f(cg_kctx *c, const ir_node *n, LLVMValueRef i, LLVMValueRef v, int lanes) {
  cg_emit_store(c->e, n->type.dtype, v, cg_elem_ptr(c, n, i), lanes);
}

/* An integer scalar (i1 byte, i32, i64) as i64. */
static inline LLVMValueRef load_int(cg_kctx *c, const ir_node *n, LLVMValueRef i) {
  cg_emitter *e = c->e;
  LLVMTypeRef t = n->type.dtype == DT_I64 ? e->i64 : n->type.dtype == DT_I32 ? e->i32 : LLVMInt8TypeInContext(e->ctx);
  LLVMValueRef v = LLVMBuildLoad2(B, t, LLVMBuildGEP2(B, t, c->base[n->id], &i, 1, ""), n->name);
  return t == e->i64 ? v : LLVMBuildSExt(B, v, e->i64, "");
}

static inline void store_int(cg_kctx *c, const ir_node *n, LLVMValueRef v) {
  cg_emitter *e = c->e;
  LLVMTypeRef t = n->type.dtype == DT_I64 ? e->i64 : n->type.dtype == DT_I32 ? e->i32 : LLVMInt8TypeInContext(e->ctx);
  LLVMBuildStore(B, t == e->i64 ? v : LLVMBuildTrunc(B, v, t, ""), c->base[n->id]);
}

/* A variable of type ty in the entry block, set to init here. */
static inline LLVMValueRef var(cg_kctx *c, LLVMTypeRef ty, LLVMValueRef init, const char *name) {
  LLVMValueRef a = cg_entry_alloca(c, ty, name);
  LLVMBuildStore(c->e->b, init, a);
  return a;
}

static inline LLVMValueRef get(cg_kctx *c, LLVMValueRef a, LLVMTypeRef ty) { return LLVMBuildLoad2(c->e->b, ty, a, ""); }

static inline LLVMTypeRef vec(cg_emitter *e, int lanes) { return lanes == 1 ? e->f32 : LLVMVectorType(e->f32, (unsigned)lanes); }

/* The lanes of v summed in lane order. */
static inline LLVMValueRef hsum(cg_emitter *e, LLVMValueRef v, int lanes) {
  if (lanes == 1) return v;
  LLVMValueRef s = LLVMBuildExtractElement(B, v, i64c(0), "");
  for (int l = 1; l < lanes; l++) s = LLVMBuildFAdd(B, s, LLVMBuildExtractElement(B, v, i64c(l), ""), "");
  return s;
}

static inline LLVMValueRef intrinsic1(cg_emitter *e, const char *name, LLVMValueRef x) {
  if (e->no_libm && !strcmp(name, "llvm.log")) return cg_emit_log(e, x, ""); /* no libm to call */
  LLVMTypeRef ty = LLVMTypeOf(x);
  unsigned id = LLVMLookupIntrinsicID(name, strlen(name));
  LLVMValueRef f = LLVMGetIntrinsicDeclaration(e->mod, id, &ty, 1);
  return LLVMBuildCall2(B, LLVMGlobalGetValueType(f), f, &x, 1, "");
}

/* The rows a reduction over the rows of x sums (matmul_tn, sum_rows): the
 * run's batch, or the first dimension of an unbatched x (a weight's own
 * computation, such as a layer_norm of a weight). */
static inline LLVMValueRef rows_of(cg_kctx *c, const ir_node *x) {
  return ir_type_is_batched(&x->type) ? c->batch : cg_i64(c->e, x->type.dims[0]);
}

/* if (cond) { ...then... } : returns the join block, builder in "then". */
static inline LLVMBasicBlockRef begin_if(cg_kctx *c, LLVMValueRef cond, const char *name) {
  cg_emitter *e = c->e;
  char nm[64];
  snprintf(nm, sizeof nm, "%s.then", name);
  LLVMBasicBlockRef then = LLVMAppendBasicBlockInContext(e->ctx, c->fn, nm);
  snprintf(nm, sizeof nm, "%s.end", name);
  LLVMBasicBlockRef join = LLVMAppendBasicBlockInContext(e->ctx, c->fn, nm);
  LLVMBuildCondBr(B, cond, then, join);
  LLVMPositionBuilderAtEnd(B, then);
  return join;
}

static inline void end_if(cg_kctx *c, LLVMBasicBlockRef join) {
  LLVMBuildBr(c->e->b, join);
  LLVMPositionBuilderAtEnd(c->e->b, join);
}

/* The elements of x (batched: the run's batch of rows). */
static inline LLVMValueRef numel_of(cg_kctx *c, const ir_node *x) {
  cg_emitter *e = c->e;
  int64_t inner = 1;
  CASTOR_ASSERT(ir_type_inner_numel(&x->type, &inner));
  return ir_type_is_batched(&x->type) ? LLVMBuildMul(B, c->batch, i64c(inner), "") : i64c(inner);
}

/* ---- the formulas, one entry per kernel (cg_train.c's table names each
 * op's) ---- */

/* cg_sum_to.c: sums over rows in a fixed order */
void cg_train_sum_rows(cg_kctx *c);
void cg_train_sum_to(cg_kctx *c); /* sum_to and bn_mean */
void cg_train_gather_grad(cg_kctx *c);
/* cg_loss.c: the losses, their gradients and softmax's */
void cg_train_loss(cg_kctx *c);
void cg_train_loss_grad(cg_kctx *c);
void cg_train_softmax_grad(cg_kctx *c);
/* cg_update.c: the optimizers, the scalar updates, the finite check and clipping */
void cg_train_all_finite(cg_kctx *c);
void cg_train_grad_norm_sq(cg_kctx *c);
void cg_train_clip_scale(cg_kctx *c);
void cg_train_clip_value(cg_kctx *c);
void cg_train_update(cg_kctx *c);
void cg_train_scalar_update(cg_kctx *c);
/* cg_rnn.c: recurrent layers, a scan over time */
void cg_train_rnn(cg_kctx *c);
void cg_train_rnn_grad(cg_kctx *c); /* backpropagation through time */

#endif
