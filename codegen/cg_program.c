/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cg_program.c: the runtime's view of a plan. Builds the rt_program that
 * describes a compiled graph (buffers, slots, launches, input and output
 * tensors, a training program's states with their kinds) with no kernel
 * addresses yet, shared by the JIT (which fills in
 * the addresses and copies the weights), the AOT target (which emits the
 * same description as static data of an object file) and the NVPTX target.
 * The CPU targets' constant sizes, packed data and thread splits come from
 * their cg_cpu_layout; the plan itself is only read.
 */
#include <string.h>

#include "codegen/cg_internal.h"

/* convolutional networks: sum_to over leading dimensions only */
bool cg_sum_to_leading(const ir_node *op, int64_t *inner) {
  if (ir_op_type_rule(op->op) != IR_TYPE_SUM_TO || op->n_srcs < 1 || ir_type_is_batched(&op->type)) return false;
  const ir_type *xt = &op->srcs[0]->type, *yt = &op->type;
  int lead = xt->rank - yt->rank, n_summed = 0;
  if (lead < 0) return false;
  *inner = 1;
  for (int d = 0; d < xt->rank; d++) {
    bool summed = d < lead || (yt->dims[d - lead] == 1 && xt->dims[d] != 1);
    if (summed && d != n_summed) return false; /* a summed dimension after a kept one */
    if (summed) n_summed++;
    else *inner *= xt->dims[d];
  }
  return n_summed > 0 && n_summed < xt->rank;
}

void cg_train_launch(const ir_node *op, int64_t *rows_fixed, int64_t *row_step, int64_t *work_per_row,
                     int64_t *work_per_batch) {
  const int vw = 64; /* tiles of whole vectors of any width */
  int64_t inner = 1, numel = 1;
  CASTOR_ASSERT(ir_type_inner_numel(&op->type, &inner));
  *row_step = 1;
  *rows_fixed = 1;
  *work_per_row = 4 * inner;
  *work_per_batch = 0;
  /* the rows a reduction sums: the batch, or an unbatched operand's own */
  const ir_node *x = op->n_srcs > 0 ? op->srcs[0] : NULL;
  bool sums_batch = x && ir_type_is_batched(&x->type);
  int64_t summed = x && !sums_batch && x->type.rank > 0 ? x->type.dims[0] : 1;
  ir_type_rule rule = ir_op_type_rule(op->op);
  if (rule == IR_TYPE_MATMUL_TN) { /* the result's rows; each sums over the whole batch */
    int64_t per_batch = 1; /* general tensors: a [N, .., K] sums .. too */
    for (int r = 1; r < x->type.rank - 1; r++) per_batch *= x->type.dims[r];
    *rows_fixed = op->type.dims[0];
    *work_per_row = sums_batch ? 0 : 2 * op->type.dims[1] * summed * per_batch;
    *work_per_batch = sums_batch ? 2 * op->type.dims[1] * per_batch : 0;
  } else if (rule == IR_TYPE_CONV2D_FILTER_GRAD) { /* convolutional networks: rows (kh, kw, c) of dw */
    const ir_type *dy = &op->srcs[1]->type;
    *rows_fixed = op->type.dims[0] * op->type.dims[1] * op->type.dims[2];
    int64_t per_row = 2 * op->type.dims[3] * dy->dims[1] * dy->dims[2];
    *work_per_row = sums_batch ? 0 : per_row * x->type.dims[0];
    *work_per_batch = sums_batch ? per_row : 0;
  } else if (rule == IR_TYPE_SUM_ROWS) {
    *rows_fixed = op->type.dims[0];
    *row_step = vw;
    *work_per_row = sums_batch ? 0 : summed;
    *work_per_batch = sums_batch ? 1 : 0;
  } else if (rule == IR_TYPE_GATHER_GRAD) { /* general tensors: rows = the table's gathered dimension */
    int ax = ir_concat_axis(&op->type, op->attr.axis);
    int64_t q = 1;
    CASTOR_ASSERT(ax >= 0 && ir_type_inner_numel(&op->srcs[1]->type, &q));
    *rows_fixed = op->type.dims[ax];
    *work_per_row = sums_batch ? 0 : 2 * q;
    *work_per_batch = sums_batch ? 2 * q : 0;
  } else if (rule == IR_TYPE_SUM_TO && !ir_type_is_batched(&op->type)) { /* one row per result element */
    int64_t xin = 1, lead_inner = 0;
    CASTOR_ASSERT(ir_type_numel(&op->type, 1, &numel) && ir_type_inner_numel(&x->type, &xin));
    *rows_fixed = numel;
    *work_per_row = sums_batch ? 0 : xin / numel;
    *work_per_batch = sums_batch ? xin / numel : 0;
    /* tiles of whole 16-element vectors where the CPU kernel sums a vector
     * at a time (cg_train.c): over leading dimensions only, or keeping a
     * last dimension of at least 16 */
    int ry = op->type.rank;
    bool keeps_last = ry > 0 && op->type.dims[ry - 1] >= 16 && x->type.dims[x->type.rank - 1] == op->type.dims[ry - 1];
    if (cg_sum_to_leading(op, &lead_inner) || keeps_last) *row_step = 16;
  } else if (rule == IR_TYPE_UPDATE) {
    CASTOR_ASSERT(ir_type_numel(&op->type, 1, &numel));
    *rows_fixed = numel; /* one "row" per element */
    *row_step = vw;
    *work_per_row = 16;
  } else if (!ir_type_is_batched(&op->type)) { /* a scalar over the batch: one call */
    *work_per_row = 0;
    *work_per_batch = 4 * (op->srcs[0]->type.rank == 2 ? op->srcs[0]->type.dims[1] : 1);
  } /* else batched rows */
}

void cg_plan_launch_fill(const cg_plan *p, int ki, rt_launch *l) {
  const cg_kernel *k = &p->kernels[ki];
  const ir_node *res = k->kind == CG_KERNEL_COPY ? k->copy_src : k->ops[k->n_ops - 1];
  int64_t inner = 1;
  CASTOR_ASSERT(ir_type_inner_numel(&res->type, &inner));
  l->cols = l->col_step = l->row_step = l->scratch_bytes = 0; /* no split: a target's */
  /* about one unit per element and op; a GEMM row costs its flops */
  if (cg_has_own_launch(k)) { /* its own launch, or (a GEMM) the target's split */
    int64_t rows, step, work, per_batch;
    cg_train_launch(k->ops[0], &rows, &step, &work, &per_batch);
    if (!cg_is_gemm(k)) l->row_step = step;
    l->work_per_row = work;
    l->work_per_row_per_batch = per_batch;
    return;
  }
  l->work_per_row = k->kind == CG_KERNEL_CONTRACT ? l->flops_per_row
                    : k->kind == CG_KERNEL_ROWWISE ? 16 * inner
                    : k->kind == CG_KERNEL_COPY    ? inner
                                                   : 4 * inner * k->n_ops;
  /* layout: a reindex op (transpose, slice, reshape) moves each element
   * through its index map, 40-80 GEMM flops' time (the ViT's head
   * transposes and slices at batch 64, 1 thread: 0.2-0.45 ns per element,
   * its GEMMs 0.006 ns per flop): 40 units, so that the transpose of a
   * [64, 28, 64] batch runs on every thread, not the calling one alone */
  if (k->kind == CG_KERNEL_ELTWISE && ir_op_kernel(k->ops[0]->op) == IR_KERNEL_REINDEX) l->work_per_row += 36 * inner;
}

/* The layer kernel k computes, for profiles: its contraction's, else its
 * result's, else the first of its ops that has one (NULL: none). */
static const char *kernel_layer(const cg_kernel *k) {
  if (k->kind == CG_KERNEL_COPY) return k->copy_src->layer;
  if (k->kind == CG_KERNEL_CONTRACT && k->ops[0]->layer) return k->ops[0]->layer;
  if (k->ops[k->n_ops - 1]->layer) return k->ops[k->n_ops - 1]->layer;
  for (int j = 0; j < k->n_ops; j++)
    if (k->ops[j]->layer) return k->ops[j]->layer;
  return NULL;
}

/* Buffer b (-1: none) into a kernel's byte count, once. */
typedef struct byte_count {
  int seen[64], n_seen;
  int64_t per_row, fixed;
} byte_count;

static void count_buffer(const cg_plan *p, byte_count *c, int b) {
  if (b < 0) return;
  for (int s = 0; s < c->n_seen; s++)
    if (c->seen[s] == b) return;
  if (c->n_seen < 64) c->seen[c->n_seen++] = b;
  c->per_row += p->buffers[b].bytes_per_row, c->fixed += p->buffers[b].bytes_fixed;
}

/* The bytes kernel k moves, for profiles: each buffer it reads (an
 * operand computed outside the kernel) or writes, counted once, per batch
 * row and fixed; what its fused ops pass in registers is not counted. */
static void kernel_bytes(const cg_plan *p, const cg_kernel *k, int64_t *per_row, int64_t *fixed) {
  byte_count c = {{0}, 0, 0, 0};
  count_buffer(p, &c, k->out_buffer);
  if (k->kind == CG_KERNEL_COPY) count_buffer(p, &c, p->buffer_of[k->copy_src->id]);
  else
    for (int j = 0; j < k->n_ops; j++)
      for (int s = 0; s < k->ops[j]->n_srcs; s++) count_buffer(p, &c, p->buffer_of[k->ops[j]->srcs[s]->id]);
  *per_row = c.per_row, *fixed = c.fixed;
}

/* The runtime's kind of a variable's state (the verifier has checked it is
 * set). */
static rt_state_kind state_kind(ir_state_kind k) {
  switch (k) {
  case IR_STATE_WEIGHT: return RT_STATE_TRAINABLE;
  case IR_STATE_NONTRAINABLE: return RT_STATE_NONTRAINABLE;
  case IR_STATE_SLOT: return RT_STATE_SLOT;
  case IR_STATE_SCALAR: return RT_STATE_SCALAR;
  case IR_STATE_NONE:
  case IR_STATE_COUNT: break;
  }
  CASTOR_UNREACHABLE();
  return RT_STATE_SCALAR;
}

/* integers and booleans: the input a gather's (or gather_grad's) indices
 * come from, through ops that move or widen them (layout ops, a cast from
 * i32 to i64), or NULL; its elements must lie in [-D, D) for that table. */
static const ir_node *index_source(const ir_node *b) {
  for (;;) {
    if (b->op == IR_OP_INPUT) return b;
    ir_type_rule r = ir_op_type_rule(b->op);
    bool moves = r == IR_TYPE_RESHAPE || r == IR_TYPE_TRANSPOSE || r == IR_TYPE_STRIDED_SLICE || r == IR_TYPE_BROADCAST_TO;
    bool widens = r == IR_TYPE_CAST && !dtype_is_float(b->srcs[0]->type.dtype) && b->srcs[0]->type.dtype != DT_I1 &&
                  dtype_size(b->type.dtype) >= dtype_size(b->srcs[0]->type.dtype) && !dtype_is_float(b->type.dtype);
    if (!moves && !widens) return NULL;
    b = b->srcs[0];
  }
}

static void describe_index_limits(const ir_graph *g, const cg_plan *plan, rt_program *p, arena *a) {
  for (int i = 0; i < g->n_nodes; i++) {
    const ir_node *n = g->nodes[i];
    ir_type_rule r = ir_op_type_rule(n->op);
    if (r != IR_TYPE_GATHER && r != IR_TYPE_GATHER_GRAD) continue;
    const ir_node *src = index_source(n->srcs[1]);
    int b = src ? plan->buffer_of[src->id] : -1;
    if (b < 0 || p->buffers[b].kind != RT_BUF_INPUT) continue;
    const ir_type *table = r == IR_TYPE_GATHER ? &n->srcs[0]->type : &n->type;
    int64_t D = table->dims[ir_concat_axis(table, n->attr.axis)];
    rt_tensor_desc *t = &p->inputs[p->buffers[b].index];
    if (t->index_limit == 0 || D < t->index_limit) {
      t->index_limit = D > 0 ? D : 1;
      t->index_user = arena_strdup(a, n->layer ? n->layer : n->name);
    }
  }
}

/* integers: the input a recurrent op's mask compares with the step numbers
 * as sequence lengths (the mask less(steps, lengths): ONNX sequence_lens,
 * onnx_rnn.c), through the ops index_source follows; its elements must lie
 * in [0, T]. */
static void describe_length_limits(const ir_graph *g, const cg_plan *plan, rt_program *p, arena *a) {
  for (int i = 0; i < g->n_nodes; i++) {
    const ir_node *n = g->nodes[i];
    if (ir_op_type_rule(n->op) != IR_TYPE_RNN) continue;
    const ir_node *m = ir_rnn_mask(n);
    if (!m || m->op != IR_OP_LESS || m->srcs[0]->op != IR_OP_CONST) continue;
    const ir_node *src = index_source(m->srcs[1]);
    int b = src ? plan->buffer_of[src->id] : -1;
    if (b < 0 || p->buffers[b].kind != RT_BUF_INPUT) continue;
    int64_t T = m->type.dims[1];
    rt_tensor_desc *t = &p->inputs[p->buffers[b].index];
    if (t->length_limit == 0 || T < t->length_limit) {
      t->length_limit = T > 0 ? T : 1;
      t->length_user = arena_strdup(a, n->layer ? n->layer : n->name);
    }
  }
}

int64_t cg_program_images(const ir_graph *g, const cg_plan *plan, const rt_program *p) {
  if (p->n_states > 0) return 0;
  int64_t N = ir_graph_rows_separate(g);
  if (N < 2) return 0;
  if (plan->image_launches < 1) return 0;
  for (int i = 0; i < plan->image_launches; i++) { /* (row_step is where threads cut for speed: a GEMM's */
    const cg_kernel *k = &plan->kernels[i];   /* micro-tile; any rows give the same bits) */
    const rt_launch *l = &p->launches[i];
    const ir_node *res = k->kind == CG_KERNEL_COPY ? k->copy_src : k->ops[k->n_ops - 1];
    if (l->batched || cg_has_own_launch(k) || res->type.rank < 1 || res->type.dims[0] != N ||
        l->rows_fixed % N != 0)
      return 0;
  }
  return N;
}

rt_program *cg_program_describe(const ir_graph *g, const cg_plan *plan, diag_sink *d) {
  arena *a = arena_create();
  rt_program *p = arena_alloc(a, sizeof *p);
  p->arena = a;
  p->name = arena_strdup(a, g->name);
  p->n_buffers = plan->n_buffers;
  p->buffers = arena_alloc(a, (size_t)(plan->n_buffers + 1) * sizeof *p->buffers);
  memcpy(p->buffers, plan->buffers, (size_t)plan->n_buffers * sizeof *p->buffers);
  for (int b = 0; b < p->n_buffers; b++) {
    rt_buffer *buf = &p->buffers[b];
    if (buf->kind != RT_BUF_CONST) continue;
    const ir_node *n = plan->buffer_node[b];
    if (ir_op_attrs(n->op) & A(value)) { /* a literal: its value, in its dtype */
      void *v = arena_alloc_aligned(a, 8, 8);
      dtype_store_double((rt_dtype)n->type.dtype, v, 0, n->attr.value);
      buf->data = v;
      continue;
    }
    if (!n->attr.data) {
      diag_error(d, n->loc, "constant %%%s has no data (IR read from text cannot be compiled)", n->name);
      rt_program_destroy(p);
      return NULL;
    }
    buf->data = n->attr.data; /* the graph's (a target may store it in a layout of its own) */
  }
  p->n_slots = plan->n_slots;
  p->image_launches = plan->image_launches; /* (kept where cg_program_images says the rows are apart) */
  p->image_slots = plan->image_slots;
  p->slots = arena_alloc(a, (size_t)(plan->n_slots + 1) * sizeof *p->slots);
  memcpy(p->slots, plan->slots, (size_t)plan->n_slots * sizeof *p->slots);
  p->n_launches = plan->n_kernels;
  p->launches = arena_alloc(a, (size_t)(plan->n_kernels + 1) * sizeof *p->launches);
  for (int i = 0; i < plan->n_kernels; i++) {
    const cg_kernel *k = &plan->kernels[i];
    rt_launch *l = &p->launches[i];
    l->name = arena_strdup(a, k->name);
    const char *layer = kernel_layer(k);
    l->layer = layer ? arena_strdup(a, layer) : NULL;
    kernel_bytes(plan, k, &l->bytes_per_row, &l->bytes_fixed);
    const ir_node *res = k->kind == CG_KERNEL_COPY ? k->copy_src : k->ops[k->n_ops - 1];
    l->batched = ir_type_is_batched(&res->type);
    l->rows_fixed = l->batched ? 0 : k->kind == CG_KERNEL_CONTRACT ? res->type.dims[0] : 1;
    if (cg_has_own_launch(k)) { /* its launch: an update's rows are elements */
      int64_t rows, step, work, per_batch;
      cg_train_launch(k->ops[0], &rows, &step, &work, &per_batch);
      l->batched = l->batched && !ir_op_writes(k->ops[0]->op);
      if (!l->batched) l->rows_fixed = rows;
    }
    if (k->kind == CG_KERNEL_CONTRACT) /* the GEMM's flops (the op table's column), per row */
      l->flops_per_row = ir_node_flops(k->ops[0], 1) / (l->batched ? 1 : l->rows_fixed);
    cg_plan_launch_fill(plan, i, l);
  }
  for (int b = 0; b < p->n_buffers; b++) p->n_states += p->buffers[b].kind == RT_BUF_STATE;
  p->states = arena_alloc(a, (size_t)(p->n_states + 1) * sizeof *p->states);
  for (int b = 0; b < p->n_buffers; b++) {
    const rt_buffer *buf = &p->buffers[b];
    if (buf->kind != RT_BUF_STATE) continue;
    const ir_node *n = plan->buffer_node[b];
    rt_state_desc *s = &p->states[buf->index];
    s->t.name = arena_strdup(a, n->attr.weight);
    s->t.dtype = (rt_dtype)n->type.dtype;
    s->t.rank = n->type.rank;
    for (int r = 0; r < n->type.rank; r++) s->t.dims[r] = n->type.dims[r];
    s->t.buffer = b;
    s->data = n->attr.data; /* the graph's: the caller keeps it alive while it compiles */
    if (n->attr.data) {
      void *copy = arena_alloc_aligned(a, (size_t)buf->bytes_fixed + 1, 64);
      memcpy(copy, n->attr.data, (size_t)buf->bytes_fixed);
      s->data = copy;
    }
    s->init = n->attr.init;
    s->kind = state_kind(n->attr.kind);
  }
  p->n_inputs = ir_graph_num_inputs(g);
  p->inputs = arena_alloc(a, (size_t)(p->n_inputs + 1) * sizeof *p->inputs);
  p->n_outputs = g->n_outputs;
  p->outputs = arena_alloc(a, (size_t)(p->n_outputs + 1) * sizeof *p->outputs);
  for (int b = 0; b < p->n_buffers; b++) {
    const rt_buffer *buf = &p->buffers[b];
    if (buf->kind != RT_BUF_INPUT && buf->kind != RT_BUF_OUTPUT) continue;
    const ir_node *n = plan->buffer_node[b];
    rt_tensor_desc *t = buf->kind == RT_BUF_INPUT ? &p->inputs[buf->index] : &p->outputs[buf->index];
    t->name = arena_strdup(a, buf->kind == RT_BUF_INPUT ? n->name : g->outputs[buf->index].name);
    t->dtype = (rt_dtype)n->type.dtype;
    t->rank = n->type.rank;
    for (int r = 0; r < n->type.rank; r++) t->dims[r] = n->type.dims[r];
    t->buffer = b;
  }
  describe_index_limits(g, plan, p, a);
  describe_length_limits(g, plan, p, a);
  return p;
}
