/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cg_nvptx_rowwise.c: the nvptx target's row-wise ops, one warp per row,
 * one emitter for every kernel that computes one: the standalone row
 * kernel (cg_nvptx.c: a line of its input buffer) and the epilogue of a
 * GEMM that a row-wise op ends (cg_nvptx_gemm.c: its shared f32 tile).
 * The owner describes the row (cg_nv_row in cg_nvptx.h: how to load the
 * input and store the result); the op is a few passes over it, each lane
 * taking every 32nd element, with warp reductions between:
 *
 *   softmax  max x; sum of exp(x - max); exp(x - max) * (1 / sum), rounded
 *            to the op's dtype.
 *
 * Numerics, the same whoever owns the row: each lane reduces its elements
 * in order from the identity (-inf, 0), then cg_nv_warp_reduce combines
 * the lanes by butterfly shuffles, so every lane has the row's value.
 * Later passes load the input again and recompute (no scratch: registers
 * hold nothing per element, and the loads are cheap).
 *
 * A new row-wise op is one more case in cg_nv_emit_rowwise, its passes
 * built from warp_pass over the same accessor.
 */
#include "codegen/nvptx/cg_nvptx.h"

#define B (e->b)

typedef enum rw_reduce { RW_NONE, RW_MAX, RW_SUM } rw_reduce;

/* The op being emitted over one row, and what its passes hand on. */
typedef struct nv_rw {
  cg_nv_kernel *g;
  const ir_node *op;
  cg_nv_row *row;
  LLVMValueRef max, inv; /* softmax: f32, the same in every lane */
} nv_rw;

/* A pass's work on element j; returns what the pass reduces (NULL when it
 * reduces nothing). */
typedef LLVMValueRef (*nv_rw_body)(nv_rw *s, LLVMValueRef j);

/* One pass over the row: body on this lane's elements; returns the warp's
 * reduction of what body returns, or NULL for RW_NONE. */
static LLVMValueRef warp_pass(nv_rw *s, nv_rw_body body, rw_reduce r, const char *name) {
  cg_nv_kernel *g = s->g;
  cg_emitter *e = g->c.e;
  LLVMTypeRef it = LLVMTypeOf(s->row->lane);
  LLVMValueRef acc = NULL;
  if (r != RW_NONE) {
    acc = cg_entry_alloca(&g->c, e->f32, name);
    LLVMBuildStore(B, cg_const(e, e->f32, r == RW_MAX ? -__builtin_inf() : 0.0), acc);
  }
  cg_nv_loop l = cg_nv_loop_begin(g, s->row->lane, LLVMConstInt(it, (unsigned long long)s->row->n, 1),
                                  LLVMConstInt(it, 32, 1), name);
  LLVMValueRef v = body(s, l.iv);
  if (r != RW_NONE) {
    LLVMValueRef a = LLVMBuildLoad2(B, e->f32, acc, "");
    LLVMValueRef m = r == RW_MAX ? LLVMBuildSelect(B, LLVMBuildFCmp(B, LLVMRealOGT, v, a, ""), v, a, "")
                                 : LLVMBuildFAdd(B, a, v, "");
    LLVMBuildStore(B, m, acc);
  }
  cg_nv_loop_end(g, &l);
  if (r == RW_NONE) return NULL;
  return cg_nv_warp_reduce(e, LLVMBuildLoad2(B, e->f32, acc, ""), r == RW_MAX);
}

/* ---- softmax ---- */

static LLVMValueRef softmax_max(nv_rw *s, LLVMValueRef j) { return s->row->load(s->row, j); }

static LLVMValueRef softmax_exp(nv_rw *s, LLVMValueRef j) {
  cg_emitter *e = s->g->c.e;
  return cg_emit_exp(e, LLVMBuildFSub(B, s->row->load(s->row, j), s->max, ""), "exp");
}

static LLVMValueRef softmax_out(nv_rw *s, LLVMValueRef j) {
  cg_emitter *e = s->g->c.e;
  const ir_node *op = s->op;
  LLVMValueRef y = LLVMBuildFMul(B, softmax_exp(s, j), s->inv, op->name);
  s->row->store(s->row, j, cg_emit_round_to(e, y, op->type.dtype, op->name));
  return NULL;
}

static void emit_softmax(nv_rw *s) {
  cg_emitter *e = s->g->c.e;
  s->max = warp_pass(s, softmax_max, RW_MAX, "max");
  LLVMValueRef sum = warp_pass(s, softmax_exp, RW_SUM, "sum");
  s->inv = LLVMBuildFDiv(B, cg_const(e, e->f32, 1.0), sum, "inv");
  warp_pass(s, softmax_out, RW_NONE, "out");
}

/* general tensors: log_softmax: max; sum of exp(x - max); y = x - (max + log sum) */
static LLVMValueRef log_softmax_out(nv_rw *s, LLVMValueRef j) {
  cg_emitter *e = s->g->c.e;
  const ir_node *op = s->op;
  LLVMValueRef y = LLVMBuildFSub(B, s->row->load(s->row, j), s->inv, op->name);
  s->row->store(s->row, j, cg_emit_round_to(e, y, op->type.dtype, op->name));
  return NULL;
}

static void emit_log_softmax(nv_rw *s) {
  cg_emitter *e = s->g->c.e;
  s->max = warp_pass(s, softmax_max, RW_MAX, "max");
  LLVMValueRef sum = warp_pass(s, softmax_exp, RW_SUM, "sum");
  s->inv = LLVMBuildFAdd(B, s->max, cg_emit_log(e, sum, "log.sum"), "lse");
  warp_pass(s, log_softmax_out, RW_NONE, "out");
}

/* The row-wise ops this emitter has a warp formula for, by op (a new
 * row-wise op is a row here, or a row of the cuda target's exceptions,
 * cg_backend_cuda.c, as layer_norm is). */
static void (*const warp_formulas[IR_OP_COUNT])(nv_rw *s) = {
    [IR_OP_SOFTMAX] = emit_softmax,
    [IR_OP_LOG_SOFTMAX] = emit_log_softmax, /* general tensors */
};

bool cg_nv_has_warp_formula(ir_op op) {
  CASTOR_ASSERT(op >= 0 && op < IR_OP_COUNT);
  return warp_formulas[op] != NULL;
}

void cg_nv_emit_rowwise(cg_nv_kernel *g, const ir_node *op, cg_nv_row *row) {
  nv_rw s = {g, op, row, NULL, NULL};
  CASTOR_ASSERT(op->op >= 0 && op->op < IR_OP_COUNT && warp_formulas[op->op]);
  warp_formulas[op->op](&s);
}
