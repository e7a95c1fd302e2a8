/*
 * cg_program.c: the runtime's view of a plan. Builds the rt_program that
 * describes a compiled graph (buffers, slots, launches, input and output
 * tensors) with no kernel addresses yet, shared by the JIT (which fills in
 * the addresses and copies the weights), the AOT target (which emits the
 * same description as static data of an object file) and the NVPTX target.
 * The CPU targets' constant sizes, packed data and thread splits come from
 * their cg_cpu_layout; the plan itself is only read.
 */
#include <string.h>

#include "codegen/cg_internal.h"

rt_program *cg_program_describe(const ir_graph *g, const cg_plan *plan, const cg_cpu_layout *layout,
                                diag_sink *d) {
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
    if (n->op == IR_OP_LITERAL) { /* its value, in its dtype */
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
    /* the graph's data, or its pre-packed GEMM layout: the JIT copies it, AOT emits it */
    if (layout) {
      buf->bytes_fixed = layout->const_bytes[b];
      buf->data = cg_cpu_layout_const_data(layout, plan, b, a);
    } else {
      buf->data = n->attr.data;
    }
  }
  p->n_slots = plan->n_slots;
  p->slots = arena_alloc(a, (size_t)(plan->n_slots + 1) * sizeof *p->slots);
  memcpy(p->slots, plan->slots, (size_t)plan->n_slots * sizeof *p->slots);
  p->n_launches = plan->n_kernels;
  p->launches = arena_alloc(a, (size_t)(plan->n_kernels + 1) * sizeof *p->launches);
  for (int i = 0; i < plan->n_kernels; i++) {
    const cg_kernel *k = &plan->kernels[i];
    rt_launch *l = &p->launches[i];
    l->name = arena_strdup(a, k->name);
    const ir_node *res = k->kind == CG_KERNEL_COPY ? k->copy_src : k->ops[k->n_ops - 1];
    l->batched = ir_type_is_batched(&res->type);
    l->rows_fixed = l->batched ? 0 : k->kind == CG_KERNEL_MATMUL ? res->type.dims[0] : 1;
    if (k->kind == CG_KERNEL_TRAIN) { /* its launch (cg_train.c): an update's rows are elements */
      int64_t rows, step, work, per_batch;
      cg_train_launch(k->ops[0], &rows, &step, &work, &per_batch);
      l->batched = l->batched && !ir_op_writes(k->ops[0]->op);
      if (!l->batched) l->rows_fixed = rows;
    }
    if (k->kind == CG_KERNEL_MATMUL) /* the GEMM's flops (the op table's column), per row */
      l->flops_per_row = ir_node_flops(k->ops[0], 1) / (l->batched ? 1 : l->rows_fixed);
    cg_plan_launch_fill(plan, layout, i, l);
    if (layout && layout->n_args[i]) { /* a shared body's table (cg_kernel_share.c) */
      int *args = arena_alloc(a, (size_t)layout->n_args[i] * sizeof *args);
      memcpy(args, layout->args[i], (size_t)layout->n_args[i] * sizeof *args);
      l->args = args;
      l->n_args = layout->n_args[i];
    }
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
  return p;
}
