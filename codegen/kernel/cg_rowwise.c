/*
 * cg_rowwise.c: the row-wise ops' line formulas in the kernel kit, one
 * emitter for every kernel that computes one: on the CPU the standalone
 * row kernel (cg_cpu.c: a line of its input buffer) and the epilogue of a
 * GEMM that a row-wise op ends (cg_gemm.c: its f32 tile); on NVPTX a row
 * per thread (cg_nvptx.c). The owner describes the row (cg_row in
 * cg_kit.h: how to load the input, store the result, and an optional f32
 * scratch row); the op is a few passes over it with reductions between:
 *
 *   softmax     max x; sum of exp(x - max); exp(x - max) * (1 / sum),
 *               rounded to the op's dtype.
 *   layer_norm  sum x -> mean; sum (x - mean)^2 -> biased var;
 *               (x - mean) * (1 / sqrt(var + epsilon)) * gamma[j] + beta[j],
 *               rounded to the op's dtype (two passes for the statistics, as
 *               Keras and the reference do, not E[x^2] - mean^2).
 *   layer_norm_xhat   the same statistics; xhat = (x - mean) * inv.
 *   layer_norm_grad   the same statistics of x; with g = dy * gamma[j],
 *               sum g -> mean(g); sum g * xhat -> mean(g xhat);
 *               (g - mean(g) - xhat * mean(g xhat)) * inv, rounded once.
 *               Its statistics are the forward kernel's bit for bit on the
 *               same code path, so its xhat is the forward's.
 *
 * Numerics, the same whoever owns the row and however it visits the tail:
 * a reduction keeps one accumulator vector, lane i taking the elements j
 * with j % lanes == i in order (a masked partial vector's missing lanes
 * count as the identity, -inf or 0; a scalar tail step goes to its lane),
 * then combines the lanes in lane order. Combining with the identity
 * changes no bit, since these maxima are never NaN and these sums never -0
 * (they start at +0). So the fused softmax of a GEMM epilogue (masked
 * tail) and the standalone softmax kernel (scalar tail) agree bit for bit,
 * which keeps pad8 from changing results. With a scratch row
 * a pass keeps what the next one reads (softmax: exp(x - max), and x too
 * when loading it is costly); without, the next pass loads and recomputes:
 * the same values either way.
 *
 * A new row-wise op is one more case in cg_emit_rowwise, its passes built
 * from row_pass over the same accessor.
 */
#include <string.h>

#include "codegen/kernel/cg_kit.h"

#define B (e->b)

typedef enum rw_reduce { RW_NONE, RW_MAX, RW_SUM } rw_reduce;

/* The op being emitted over one row, and what its passes hand on. */
typedef struct rw {
  cg_kctx *c;
  const ir_node *op;
  cg_row *row;
  LLVMValueRef max, inv; /* softmax: f32 scalars of the row */
  LLVMValueRef mean;     /* layer_norm and its gradient ops (with inv) */
  LLVMValueRef mean_g, mean_gx; /* layer_norm_grad: mean(g), mean(g * xhat) */
} rw;

/* A pass's work on the vector at element j, whose first `valid` of
 * `lanes` lanes are elements; returns what the pass reduces (NULL when it
 * reduces nothing). */
typedef LLVMValueRef (*rw_body)(rw *s, LLVMValueRef j, int lanes, int valid);

static LLVMValueRef identity(cg_emitter *e, LLVMTypeRef ty, rw_reduce r) {
  return cg_const(e, ty, r == RW_MAX ? -__builtin_inf() : 0.0);
}

/* acc combined with v: max keeps acc unless v is greater (NaN never is) */
static LLVMValueRef combine(cg_emitter *e, rw_reduce r, LLVMValueRef acc, LLVMValueRef v) {
  if (r == RW_MAX) return LLVMBuildSelect(B, LLVMBuildFCmp(B, LLVMRealOGT, v, acc, ""), v, acc, "");
  return LLVMBuildFAdd(B, acc, v, "");
}

/* The lanes of v combined in lane order (a scalar is itself). */
static LLVMValueRef hreduce(cg_emitter *e, rw_reduce r, LLVMValueRef v) {
  if (LLVMGetTypeKind(LLVMTypeOf(v)) != LLVMVectorTypeKind) return v;
  unsigned n = LLVMGetVectorSize(LLVMTypeOf(v));
  LLVMValueRef acc = LLVMBuildExtractElement(B, v, cg_i64(e, 0), "");
  for (unsigned i = 1; i < n; i++) acc = combine(e, r, acc, LLVMBuildExtractElement(B, v, cg_i64(e, i), ""));
  return acc;
}

static LLVMValueRef lane_mask(cg_emitter *e, int lanes, int valid) {
  LLVMValueRef bits[64];
  CASTOR_ASSERT(lanes <= 64);
  for (int i = 0; i < lanes; i++) bits[i] = LLVMConstInt(e->i1, i < valid, 0);
  return LLVMConstVector(bits, (unsigned)lanes);
}

static void accumulate(rw *s, rw_reduce r, LLVMValueRef acc, LLVMValueRef v, int lanes, int valid) {
  cg_emitter *e = s->c->e;
  if (r == RW_NONE) return;
  if (valid < lanes) v = LLVMBuildSelect(B, lane_mask(e, lanes, valid), v, identity(e, LLVMTypeOf(v), r), "");
  LLVMBuildStore(B, combine(e, r, LLVMBuildLoad2(B, LLVMTypeOf(v), acc, ""), v), acc);
}

/* One pass over the row: body on every vector (whole ones in a loop, then
 * the tail as the row has it); returns the f32 reduction of what body
 * returns, or NULL for RW_NONE. One accumulator vector takes every
 * element: element j goes to lane j % lanes, whether it comes in a whole
 * vector, the masked partial one or a scalar step, so the order of the
 * operations (and the bits) does not depend on how the owner visits the
 * tail. */
static LLVMValueRef row_pass(rw *s, rw_body body, rw_reduce r, const char *name) {
  cg_kctx *c = s->c;
  cg_emitter *e = c->e;
  const cg_row *row = s->row;
  int lanes = row->lanes;
  int64_t whole = row->n / lanes * lanes;
  int partial = row->masked_tail ? (int)(row->n - whole) : 0;
  LLVMTypeRef ty = lanes == 1 ? e->f32 : LLVMVectorType(e->f32, (unsigned)lanes);
  LLVMValueRef acc = NULL;
  if (r != RW_NONE) {
    acc = cg_entry_alloca(c, ty, name);
    LLVMBuildStore(B, identity(e, ty, r), acc);
  }
  if (whole > 0) {
    cg_loop l = cg_loop_begin(c, cg_i64(e, 0), cg_i64(e, whole), lanes, name);
    accumulate(s, r, acc, body(s, l.iv, lanes, lanes), lanes, lanes);
    cg_loop_end(c, &l);
  }
  if (partial) accumulate(s, r, acc, body(s, cg_i64(e, whole), lanes, partial), lanes, partial);
  if (!row->masked_tail && row->n > whole) { /* scalar steps, each into its lane */
    cg_loop l = cg_loop_begin(c, cg_i64(e, whole), cg_i64(e, row->n), 1, name);
    LLVMValueRef v = body(s, l.iv, 1, 1);
    if (r != RW_NONE) {
      LLVMValueRef lane = LLVMBuildSub(B, l.iv, cg_i64(e, whole), "");
      LLVMValueRef p = LLVMBuildGEP2(B, e->f32, acc, &lane, 1, "");
      LLVMBuildStore(B, combine(e, r, LLVMBuildLoad2(B, e->f32, p, ""), v), p);
    }
    cg_loop_end(c, &l);
  }
  return r == RW_NONE ? NULL : hreduce(e, r, LLVMBuildLoad2(B, ty, acc, ""));
}

/* ---- scratch ---- */

/* Whether the input is loaded once and kept in scratch for later passes. */
static bool keeps_input(const rw *s) { return s->row->scratch && s->row->costly_load; }

static LLVMValueRef scratch_at(rw *s, LLVMValueRef j) {
  cg_emitter *e = s->c->e;
  return LLVMBuildGEP2(B, e->f32, s->row->scratch, &j, 1, "");
}

static void keep(rw *s, LLVMValueRef j, LLVMValueRef v, int lanes) {
  cg_emit_store(s->c->e, DT_F32, v, scratch_at(s, j), lanes);
}

static LLVMValueRef kept(rw *s, LLVMValueRef j, int lanes) {
  return cg_emit_load(s->c->e, DT_F32, scratch_at(s, j), lanes, "");
}

/* The input at j: kept by the first pass, or loaded again. */
static LLVMValueRef input(rw *s, LLVMValueRef j, int lanes, int valid) {
  return keeps_input(s) ? kept(s, j, lanes) : s->row->load(s->row, j, lanes, valid);
}

/* ---- softmax ---- */

static LLVMValueRef softmax_max(rw *s, LLVMValueRef j, int lanes, int valid) {
  LLVMValueRef x = s->row->load(s->row, j, lanes, valid);
  if (keeps_input(s)) keep(s, j, x, lanes);
  return x;
}

static LLVMValueRef softmax_exp(rw *s, LLVMValueRef j, int lanes, int valid) {
  cg_emitter *e = s->c->e;
  LLVMValueRef x = input(s, j, lanes, valid);
  return cg_emit_exp(e, LLVMBuildFSub(B, x, cg_splat(e, s->max, lanes), ""), "exp");
}

static LLVMValueRef softmax_sum(rw *s, LLVMValueRef j, int lanes, int valid) {
  LLVMValueRef ex = softmax_exp(s, j, lanes, valid);
  if (s->row->scratch) keep(s, j, ex, lanes);
  return ex;
}

static LLVMValueRef softmax_out(rw *s, LLVMValueRef j, int lanes, int valid) {
  cg_emitter *e = s->c->e;
  const ir_node *op = s->op;
  LLVMValueRef ex = s->row->scratch ? kept(s, j, lanes) : softmax_exp(s, j, lanes, valid);
  LLVMValueRef y = LLVMBuildFMul(B, ex, cg_splat(e, s->inv, lanes), op->name);
  s->row->store(s->row, j, cg_emit_round_to(e, y, op->type.dtype, op->name), lanes, valid);
  return NULL;
}

static void emit_softmax(rw *s) {
  cg_emitter *e = s->c->e;
  s->max = row_pass(s, softmax_max, RW_MAX, "max");
  LLVMValueRef sum = row_pass(s, softmax_sum, RW_SUM, "sum");
  s->inv = LLVMBuildFDiv(B, cg_const(e, e->f32, 1.0), sum, "inv");
  row_pass(s, softmax_out, RW_NONE, "out");
}

/* ---- general tensors: log_softmax and its gradient ---- */

/* max x; sum of exp(x - max) (x kept or loaded again, nothing stored);
 * y = x - max - log(sum) */
static LLVMValueRef log_softmax_out(rw *s, LLVMValueRef j, int lanes, int valid) {
  cg_emitter *e = s->c->e;
  const ir_node *op = s->op;
  LLVMValueRef y = LLVMBuildFSub(B, input(s, j, lanes, valid), cg_splat(e, s->max, lanes), op->name);
  s->row->store(s->row, j, cg_emit_round_to(e, y, op->type.dtype, op->name), lanes, valid);
  return NULL;
}

static void emit_log_softmax(rw *s) {
  cg_emitter *e = s->c->e;
  LLVMValueRef mx = row_pass(s, softmax_max, RW_MAX, "max");
  s->max = mx;
  LLVMValueRef sum = row_pass(s, softmax_exp, RW_SUM, "sum");
  s->max = LLVMBuildFAdd(B, mx, cg_emit_log(e, sum, "log.sum"), "lse"); /* what the out pass subtracts */
  row_pass(s, log_softmax_out, RW_NONE, "out");
}

/* y = dy - exp(b) * sum(dy): dy operand 0 (the row's input), b operand 1 */
static LLVMValueRef lsm_grad_sum(rw *s, LLVMValueRef j, int lanes, int valid) {
  return s->row->load(s->row, j, lanes, valid);
}

static LLVMValueRef lsm_grad_out(rw *s, LLVMValueRef j, int lanes, int valid) {
  cg_emitter *e = s->c->e;
  const ir_node *op = s->op;
  CASTOR_ASSERT(s->row->load_operand);
  LLVMValueRef dy = s->row->load(s->row, j, lanes, valid), b = s->row->load_operand(s->row, 1, j, lanes, valid);
  LLVMValueRef y = LLVMBuildFSub(B, dy, LLVMBuildFMul(B, cg_emit_exp(e, b, "exp"), cg_splat(e, s->inv, lanes), ""), op->name);
  s->row->store(s->row, j, cg_emit_round_to(e, y, op->type.dtype, op->name), lanes, valid);
  return NULL;
}

static void emit_log_softmax_grad(rw *s) {
  s->inv = row_pass(s, lsm_grad_sum, RW_SUM, "sum"); /* the row's sum of dy */
  row_pass(s, lsm_grad_out, RW_NONE, "out");
}

/* ---- layer_norm ---- */

static LLVMValueRef norm_sum(rw *s, LLVMValueRef j, int lanes, int valid) {
  LLVMValueRef x = s->row->load(s->row, j, lanes, valid);
  if (keeps_input(s)) keep(s, j, x, lanes);
  return x;
}

static LLVMValueRef norm_centered(rw *s, LLVMValueRef j, int lanes, int valid) {
  cg_emitter *e = s->c->e;
  return LLVMBuildFSub(B, input(s, j, lanes, valid), cg_splat(e, s->mean, lanes), "");
}

static LLVMValueRef norm_sq(rw *s, LLVMValueRef j, int lanes, int valid) {
  LLVMValueRef d = norm_centered(s, j, lanes, valid);
  return LLVMBuildFMul(s->c->e->b, d, d, "");
}

/* gamma or beta (source k) at row element j: they span the row */
static LLVMValueRef norm_param(rw *s, int k, LLVMValueRef j, int lanes, int valid) {
  const ir_node *p = s->op->srcs[k];
  return cg_load_part(s->c->e, p->type.dtype, cg_elem_ptr(s->c, p, j), lanes, valid, p->name);
}

static LLVMValueRef norm_out(rw *s, LLVMValueRef j, int lanes, int valid) {
  cg_emitter *e = s->c->e;
  const ir_node *op = s->op;
  LLVMValueRef y = LLVMBuildFMul(B, norm_centered(s, j, lanes, valid), cg_splat(e, s->inv, lanes), "");
  y = LLVMBuildFAdd(B, LLVMBuildFMul(B, y, norm_param(s, 1, j, lanes, valid), ""), norm_param(s, 2, j, lanes, valid),
                    op->name);
  s->row->store(s->row, j, cg_emit_round_to(e, y, op->type.dtype, op->name), lanes, valid);
  return NULL;
}

/* s->mean and s->inv = 1 / sqrt(var + epsilon) of the row's x (operand 0) */
static void norm_stats(rw *s) {
  cg_emitter *e = s->c->e;
  LLVMValueRef n = cg_const(e, e->f32, (double)s->row->n);
  s->mean = LLVMBuildFDiv(B, row_pass(s, norm_sum, RW_SUM, "sum"), n, "mean");
  LLVMValueRef var = LLVMBuildFDiv(B, row_pass(s, norm_sq, RW_SUM, "sumsq"), n, "var");
  var = LLVMBuildFAdd(B, var, cg_const(e, e->f32, s->op->attr.epsilon), "");
  unsigned id = LLVMLookupIntrinsicID("llvm.sqrt", strlen("llvm.sqrt"));
  LLVMValueRef sqrt_fn = LLVMGetIntrinsicDeclaration(e->mod, id, &e->f32, 1);
  LLVMValueRef sd = LLVMBuildCall2(B, LLVMGlobalGetValueType(sqrt_fn), sqrt_fn, &var, 1, "sd");
  s->inv = LLVMBuildFDiv(B, cg_const(e, e->f32, 1.0), sd, "inv");
}

static void emit_layer_norm(rw *s) {
  norm_stats(s);
  row_pass(s, norm_out, RW_NONE, "out");
}

/* ---- layer_norm_xhat and layer_norm_grad ---- */

static LLVMValueRef norm_xhat(rw *s, LLVMValueRef j, int lanes, int valid) {
  cg_emitter *e = s->c->e;
  return LLVMBuildFMul(B, norm_centered(s, j, lanes, valid), cg_splat(e, s->inv, lanes), "xhat");
}

static LLVMValueRef xhat_out(rw *s, LLVMValueRef j, int lanes, int valid) {
  const ir_node *op = s->op;
  LLVMValueRef y = norm_xhat(s, j, lanes, valid);
  s->row->store(s->row, j, cg_emit_round_to(s->c->e, y, op->type.dtype, op->name), lanes, valid);
  return NULL;
}

static void emit_layer_norm_xhat(rw *s) {
  norm_stats(s);
  row_pass(s, xhat_out, RW_NONE, "out");
}

/* g = dy * gamma at j (dy: operand 2, gamma: operand 1) */
static LLVMValueRef grad_g(rw *s, LLVMValueRef j, int lanes, int valid) {
  cg_emitter *e = s->c->e;
  CASTOR_ASSERT(s->row->load_operand);
  LLVMValueRef dy = s->row->load_operand(s->row, 2, j, lanes, valid);
  return LLVMBuildFMul(B, dy, norm_param(s, 1, j, lanes, valid), "g");
}

static LLVMValueRef grad_gx(rw *s, LLVMValueRef j, int lanes, int valid) {
  cg_emitter *e = s->c->e;
  return LLVMBuildFMul(B, grad_g(s, j, lanes, valid), norm_xhat(s, j, lanes, valid), "");
}

static LLVMValueRef grad_out(rw *s, LLVMValueRef j, int lanes, int valid) {
  cg_emitter *e = s->c->e;
  const ir_node *op = s->op;
  LLVMValueRef g = LLVMBuildFSub(B, grad_g(s, j, lanes, valid), cg_splat(e, s->mean_g, lanes), "");
  LLVMValueRef xm = LLVMBuildFMul(B, norm_xhat(s, j, lanes, valid), cg_splat(e, s->mean_gx, lanes), "");
  LLVMValueRef y = LLVMBuildFMul(B, LLVMBuildFSub(B, g, xm, ""), cg_splat(e, s->inv, lanes), op->name);
  s->row->store(s->row, j, cg_emit_round_to(e, y, op->type.dtype, op->name), lanes, valid);
  return NULL;
}

static void emit_layer_norm_grad(rw *s) {
  cg_emitter *e = s->c->e;
  LLVMValueRef n = cg_const(e, e->f32, (double)s->row->n);
  norm_stats(s);
  s->mean_g = LLVMBuildFDiv(B, row_pass(s, grad_g, RW_SUM, "sum_g"), n, "mean_g");
  s->mean_gx = LLVMBuildFDiv(B, row_pass(s, grad_gx, RW_SUM, "sum_gx"), n, "mean_gx");
  row_pass(s, grad_out, RW_NONE, "out");
}

/* The row-wise ops this emitter has a line formula for, by op: the
 * formulas of the row-wise class (a new row-wise op is a row here). The
 * other row-wise ops (softmax_grad and the losses' gradients) are row
 * kernels of cg_train.c's table. */
static void (*const line_formulas[IR_OP_COUNT])(rw *s) = {
    [IR_OP_SOFTMAX] = emit_softmax,
    [IR_OP_LAYER_NORM] = emit_layer_norm,
    [IR_OP_LAYER_NORM_XHAT] = emit_layer_norm_xhat,
    [IR_OP_LAYER_NORM_GRAD] = emit_layer_norm_grad,
    /* general tensors */
    [IR_OP_LOG_SOFTMAX] = emit_log_softmax,
    [IR_OP_LOG_SOFTMAX_GRAD] = emit_log_softmax_grad,
};

bool cg_rowwise_has_line_formula(ir_op op) {
  CASTOR_ASSERT(op >= 0 && op < IR_OP_COUNT);
  return line_formulas[op] != NULL;
}

void cg_emit_rowwise(cg_kctx *c, const ir_node *op, cg_row *row) {
  rw s = {c, op, row, NULL, NULL, NULL, NULL, NULL};
  CASTOR_ASSERT(row->lanes >= 1 && row->n >= 0);
  CASTOR_ASSERT(cg_rowwise_has_line_formula(op->op));
  line_formulas[op->op](&s);
}
