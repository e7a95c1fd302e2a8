/*
 * cg_nvptx_train.c: the NVPTX kernels of a training step's ops, each the
 * kernel kit's formula (kernel/cg_kit.h) run by GPU threads, so the two
 * targets share every training formula:
 *
 *   contractions the CPU runs as GEMMs (matmul_nt, matmul_tn,
 *           conv2d_input_grad, conv2d_filter_grad): one thread per result
 *           element in a grid-stride loop, the element's terms summed in
 *           the op's order by cg_contract_value, then the fused chain;
 *   row kernels of the kit's training table (losses, their gradients,
 *           softmax_grad, sum_rows, sum_to, bn_mean, gather_grad,
 *           all_finite, clipping, the optimizers, count_step and
 *           loss_scale_update): one thread per launch row of the CPU's
 *           (cg_train_launch: a loss or all_finite is one row, an update
 *           one per element), by cg_train_emit with lanes 1;
 *   row-wise line formulas without a warp formula (layer_norm and its
 *           gradients, log_softmax_grad): one thread per line, by the
 *           kit's cg_emit_rowwise with lanes 1.
 *
 * Determinism: every sum runs in a fixed order inside one thread (a row's
 * or an element's), never across threads or atomics, so a step gives the
 * same bits from run to run and for any grid. The dynamic loss scale, the
 * finite check and the skipped step are kernels like any other: nothing
 * goes back to the host during a step.
 */
#include "codegen/nvptx/cg_nvptx.h"

#define B (e->b)

static const ir_node *result(const cg_kernel *k) { return k->ops[k->n_ops - 1]; }

static void grid_ids(cg_nv_kernel *g, LLVMValueRef *gid, LLVMValueRef *nthreads) {
  cg_emitter *e = g->c.e;
  LLVMValueRef ntid = LLVMBuildZExt(B, cg_nv_sreg(e, "ntid.x"), e->i64, "");
  LLVMValueRef ctaid = LLVMBuildZExt(B, cg_nv_sreg(e, "ctaid.x"), e->i64, "");
  LLVMValueRef tid = LLVMBuildZExt(B, cg_nv_sreg(e, "tid.x"), e->i64, "");
  *gid = LLVMBuildAdd(B, LLVMBuildMul(B, ctaid, ntid, ""), tid, "gid");
  *nthreads = LLVMBuildMul(B, LLVMBuildZExt(B, cg_nv_sreg(e, "nctaid.x"), e->i64, ""), ntid, "nthreads");
}

/* The launch: `per_row` threads' work per row of rows (the batch when
 * batched, else rows_fixed), `per_block` of them per block of 256. */
static void set_launch(cg_nv_kernel *g, bool batched, int64_t rows_fixed, int64_t per_row, int64_t per_block) {
  rt_cuda_launch *ln = g->launch;
  ln->batched = batched, ln->rows_fixed = batched ? 0 : rows_fixed;
  ln->block = 256, ln->units_per_row = per_row, ln->units_per_block = per_block, ln->max_grid_x = 1 << 18;
}

/* ---- a row of a contraction that ends with a row-wise op, one thread ---- */

/* The row-wise op's input at element j of the line from `base`: the
 * contraction's element there through the chain between them. */
typedef struct nv_crow {
  cg_row row;
  cg_nv_kernel *g;
  LLVMValueRef base;
} nv_crow;

static LLVMValueRef nv_crow_load(cg_row *row, LLVMValueRef j, int lanes, int valid) {
  nv_crow *l = (nv_crow *)row;
  cg_kctx *c = &l->g->c;
  cg_emitter *e = c->e;
  const cg_kernel *k = c->k;
  CASTOR_ASSERT(lanes == 1 && valid == 1);
  LLVMValueRef idx = LLVMBuildAdd(B, l->base, j, "");
  LLVMValueRef v = cg_emit_round_to(e, cg_contract_value(c, k->ops[0], idx), k->ops[0]->type.dtype, k->ops[0]->name);
  return cg_apply_chain(c, 1, k->n_ops - 1, v, idx, j, 1, 1);
}

static void nv_crow_store(cg_row *row, LLVMValueRef j, LLVMValueRef val, int lanes, int valid) {
  nv_crow *l = (nv_crow *)row;
  cg_emitter *e = l->g->c.e;
  const ir_node *res = result(l->g->c.k);
  CASTOR_ASSERT(lanes == 1 && valid == 1);
  cg_emit_store(e, res->type.dtype, val, cg_elem_ptr(&l->g->c, res, LLVMBuildAdd(B, l->base, j, "")), 1);
}

/* A contraction whose chain ends with a row-wise op (a fused softmax: the
 * attention scores): one thread per line of the last dimension, the
 * contraction recomputed in each pass of the kit's line formula. */
static void emit_contract_rows(cg_nv_kernel *g) {
  cg_emitter *e = g->c.e;
  const ir_node *res = result(g->c.k);
  int64_t inner = 1;
  CASTOR_ASSERT(ir_type_inner_numel(&res->type, &inner) && res->type.rank >= 2);
  bool batched = ir_type_is_batched(&res->type);
  int64_t last = res->type.dims[res->type.rank - 1];
  CASTOR_ASSERT(cg_rowwise_has_line_formula(res->op) && !(ir_op_attrs(res->op) & A(axis)));
  LLVMValueRef gid, nthreads;
  grid_ids(g, &gid, &nthreads);
  LLVMValueRef lines = LLVMBuildMul(B, batched ? g->batch : cg_i64(e, 1), cg_i64(e, inner / last), "lines");
  cg_nv_loop l = cg_nv_loop_begin(g, gid, lines, nthreads, "line");
  nv_crow row = {.row = {.n = last, .lanes = 1, .masked_tail = false, .load = nv_crow_load, .load_operand = NULL,
                         .store = nv_crow_store, .scratch = NULL, .costly_load = true},
                 .g = g, .base = LLVMBuildMul(B, l.iv, cg_i64(e, last), "line.base")};
  cg_emit_rowwise(&g->c, res, &row.row);
  cg_nv_loop_end(g, &l);
  set_launch(g, batched, 1, inner / last, 256);
}

void cg_nv_emit_contract(cg_nv_kernel *g) {
  cg_emitter *e = g->c.e;
  const cg_kernel *k = g->c.k;
  const ir_node *res = result(k), *first = k->ops[0];
  int64_t inner = 1;
  CASTOR_ASSERT(cg_has_contract_value(first->op) && ir_type_inner_numel(&res->type, &inner));
  if (k->n_ops > 1 && ir_op_kernel(res->op) == IR_KERNEL_ROWWISE) {
    emit_contract_rows(g);
    return;
  }
  bool batched = ir_type_is_batched(&res->type);
  int64_t last = res->type.rank == 0 || (res->type.rank == 1 && batched) ? 1 : res->type.dims[res->type.rank - 1];
  LLVMValueRef gid, nthreads;
  grid_ids(g, &gid, &nthreads);
  LLVMValueRef total = LLVMBuildMul(B, batched ? g->batch : cg_i64(e, 1), cg_i64(e, inner), "total");
  cg_nv_loop l = cg_nv_loop_begin(g, gid, total, nthreads, "i");
  LLVMValueRef col = LLVMBuildSRem(B, l.iv, cg_i64(e, last), "col");
  LLVMValueRef val = cg_emit_round_to(e, cg_contract_value(&g->c, first, l.iv), first->type.dtype, first->name);
  val = cg_apply_chain(&g->c, 1, k->n_ops, val, l.iv, col, 1, 1);
  cg_emit_store(e, res->type.dtype, val, cg_elem_ptr(&g->c, res, l.iv), 1);
  cg_nv_loop_end(g, &l);
  set_launch(g, batched, 1, inner, 256);
}

void cg_nv_emit_train_rows(cg_nv_kernel *g) {
  cg_emitter *e = g->c.e;
  const cg_kernel *k = g->c.k;
  const ir_node *op = k->ops[0];
  CASTOR_ASSERT(k->n_ops == 1 && cg_train_has_formula(op->op));
  int64_t rows_fixed, step, work, per_batch;
  cg_train_launch(op, &rows_fixed, &step, &work, &per_batch);
  bool batched = ir_type_is_batched(&op->type) && ir_op_type_rule(op->op) != IR_TYPE_UPDATE;
  LLVMValueRef gid, nthreads;
  grid_ids(g, &gid, &nthreads);
  LLVMValueRef rows = batched ? g->batch : cg_i64(e, rows_fixed);
  cg_nv_loop l = cg_nv_loop_begin(g, gid, rows, nthreads, "row");
  g->c.row0 = l.iv, g->c.row1 = LLVMBuildAdd(B, l.iv, cg_i64(e, 1), "row.end");
  cg_train_emit(&g->c);
  cg_nv_loop_end(g, &l);
  set_launch(g, batched, rows_fixed, 1, 256);
}

/* ---- a line of a row-wise op, one thread ---- */

typedef struct nv_line {
  cg_row row;
  cg_nv_kernel *g;
  const ir_node *op;
  LLVMValueRef base; /* the line's first element (flat index) */
} nv_line;

static LLVMValueRef nv_line_operand(cg_row *row, int src, LLVMValueRef j, int lanes, int valid) {
  nv_line *l = (nv_line *)row;
  cg_emitter *e = l->g->c.e;
  const ir_node *x = l->op->srcs[src];
  CASTOR_ASSERT(lanes == 1 && valid == 1 && ir_type_eq(&x->type, &l->op->srcs[0]->type));
  return cg_emit_load(e, x->type.dtype, cg_elem_ptr(&l->g->c, x, LLVMBuildAdd(B, l->base, j, "")), 1, x->name);
}

static LLVMValueRef nv_line_load(cg_row *row, LLVMValueRef j, int lanes, int valid) {
  return nv_line_operand(row, 0, j, lanes, valid);
}

static void nv_line_store(cg_row *row, LLVMValueRef j, LLVMValueRef val, int lanes, int valid) {
  nv_line *l = (nv_line *)row;
  cg_emitter *e = l->g->c.e;
  CASTOR_ASSERT(lanes == 1 && valid == 1);
  cg_emit_store(e, l->op->type.dtype, val, cg_elem_ptr(&l->g->c, l->op, LLVMBuildAdd(B, l->base, j, "")), 1);
}

void cg_nv_emit_line_rows(cg_nv_kernel *g) {
  cg_emitter *e = g->c.e;
  const ir_node *op = g->c.k->ops[0];
  CASTOR_ASSERT(g->c.k->n_ops == 1 && cg_rowwise_has_line_formula(op->op));
  int64_t inner = 1, last = 1;
  CASTOR_ASSERT(ir_type_inner_numel(&op->type, &inner));
  bool batched = ir_type_is_batched(&op->type);
  if (ir_op_attrs(op->op) & A(axis)) { /* a normalization's line: its dimensions from axis on */
    int first = ir_norm_first_dim(&op->type, op->attr.axis);
    CASTOR_ASSERT(first >= 0);
    for (int r = first; r < op->type.rank; r++) last *= op->type.dims[r];
  } else if (!(op->type.rank == 0 || (op->type.rank == 1 && batched))) {
    last = op->type.dims[op->type.rank - 1];
  }
  LLVMValueRef gid, nthreads;
  grid_ids(g, &gid, &nthreads);
  LLVMValueRef lines = LLVMBuildMul(B, batched ? g->batch : cg_i64(e, 1), cg_i64(e, inner / last), "lines");
  cg_nv_loop l = cg_nv_loop_begin(g, gid, lines, nthreads, "line");
  nv_line row = {.row = {.n = last, .lanes = 1, .masked_tail = false, .load = nv_line_load,
                         .load_operand = nv_line_operand, .store = nv_line_store, .scratch = NULL},
                 .g = g, .op = op, .base = LLVMBuildMul(B, l.iv, cg_i64(e, last), "line.base")};
  cg_emit_rowwise(&g->c, op, &row.row);
  cg_nv_loop_end(g, &l);
  set_launch(g, batched, 1, inner / last, 256);
}
