/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cg_plan.c: kernel and buffer planning.
 *
 * In: a verified graph with current ids. Out: a list of kernels in
 * execution order and a static buffer plan.
 *
 * Dispatch is by the op table's kernel class only (ir_ops.def's column),
 * never by an op's name: the class of the op that starts a kernel is the
 * kernel's kind, and each target has one emitter per kind. Grouping is
 * greedy along the schedule: a contraction or an elementwise (or reindex)
 * op starts a kernel that absorbs the elementwise ops that follow its
 * value while that value has exactly one use and is not a model output
 * (a contraction's bias, activation and cast epilogue; a chain of
 * elementwise ops). An absorbed binary op's other operand must already be
 * available when the kernel starts (a leaf, or a value scheduled before
 * the kernel). A contraction kernel may end with the row softmax of its
 * result when the row (its last dimension, at any rank) is at most
 * CG_GEMM_SOFTMAX_MAX_COLS wide (one GEMM panel). Every other class is one op per kernel.
 *
 * Buffers: inputs and outputs are the caller's, constants are weights, and
 * every other kernel result gets a scratch buffer; a reshape of a scratch
 * buffer is that buffer (no kernel). Scratch buffers are put
 * in slots by liveness (first fit over kernel intervals); a buffer never
 * shares a slot with a buffer its own kernel reads, so kernels never alias.
 * A CPU target then may cut the kernels of a static batch of images into
 * those that run by image and the rest (cg_plan_cut_images, at the end):
 * the slots again, in two sets, the first laid out by the runtime for one
 * pass of images.
 */
#include <stdlib.h>
#include <string.h>

#include "codegen/cg_internal.h"

bool cg_is_gemm(const cg_kernel *k) {
  /* a reindex op that sums (group_conv2d) is a map of the kit, not a GEMM */
  return k->kind != CG_KERNEL_COPY && ir_op_kernel(k->ops[0]->op) != IR_KERNEL_REINDEX &&
         ir_op_flops(k->ops[0]->op) == IR_FLOPS_CONTRACT;
}

bool cg_has_own_launch(const cg_kernel *k) { return k->kind == CG_KERNEL_REDUCE || k->kind == CG_KERNEL_UPDATE; }

/* An op that joins the kernel of the value it reads (the op table's kernel
 * column). */
static bool fusable_op(ir_op op) { return ir_op_kernel(op) == IR_KERNEL_ELTWISE; }

/* The kernel an op starts (the op table's kernel column). */
static cg_kernel_kind kernel_kind(ir_op op) {
  switch (ir_op_kernel(op)) {
  case IR_KERNEL_CONTRACT: return CG_KERNEL_CONTRACT;
  case IR_KERNEL_ROWWISE: return CG_KERNEL_ROWWISE;
  case IR_KERNEL_ELTWISE:
  case IR_KERNEL_REINDEX: return CG_KERNEL_ELTWISE; /* a reindex op only ever starts a chain */
  case IR_KERNEL_REDUCE: return CG_KERNEL_REDUCE;
  case IR_KERNEL_UPDATE: return CG_KERNEL_UPDATE;
  case IR_KERNEL_NONE: break; /* a leaf: a buffer, no kernel */
  }
  CASTOR_UNREACHABLE();
  return CG_KERNEL_COPY;
}

/* A row-wise op the GEMM epilogue can end with: one operand, its line the
 * last dimension (no {axis}): softmax. layer_norm_xhat, the other
 * one-operand row-wise op, has its line over {axis}.. and no epilogue. */
static bool row_epilogue_op(ir_op op) {
  return ir_op_kernel(op) == IR_KERNEL_ROWWISE && ir_op_arity(op) == 1 && !(ir_op_attrs(op) & A(axis));
}

static bool is_leaf(const ir_node *n) { return (ir_op_flags(n->op) & IR_OPF_LEAF) != 0; }

static int64_t row_bytes(const ir_type *t) {
  int64_t n = 0;
  CASTOR_ASSERT(ir_type_inner_numel(t, &n));
  return n * dtype_size(t->dtype);
}

static int add_buffer(cg_plan *p, int *cap, rt_buffer_kind kind, int index, const ir_node *n) {
  if (p->n_buffers == *cap) {
    *cap = *cap ? 2 * *cap : 16;
    rt_buffer *nb = arena_alloc(p->arena, (size_t)*cap * sizeof *nb);
    const ir_node **nn = arena_alloc(p->arena, (size_t)*cap * sizeof *nn);
    if (p->n_buffers) {
      memcpy(nb, p->buffers, (size_t)p->n_buffers * sizeof *nb);
      memcpy(nn, p->buffer_node, (size_t)p->n_buffers * sizeof *nn);
    }
    p->buffers = nb;
    p->buffer_node = nn;
  }
  rt_buffer *b = &p->buffers[p->n_buffers];
  b->kind = kind;
  b->index = index;
  if (ir_type_is_batched(&n->type)) b->bytes_per_row = row_bytes(&n->type);
  else b->bytes_fixed = row_bytes(&n->type);
  p->buffer_node[p->n_buffers] = n;
  return p->n_buffers++;
}

/* First fit of the scratch buffers b with space[b] == want (space NULL:
 * all) into slots from p->n_slots on, by their kernel intervals [def[b],
 * last[b]]: the lowest slot free after the buffer's definition, found in
 * a tree of minima over each slot's last use (a slot not in use yet: -1)
 * in O(log n), not by a scan of the slots: a training step keeps every
 * forward activation live until the backward pass, so the slots in use
 * grow with depth and the scan was quadratic. True when an empty value
 * takes slot 0. */
static bool assign_slots(cg_plan *p, const int *def, const signed char *space, int want) {
  int nb = p->n_buffers, base = p->n_slots, *last = p->last;
  int leaves = 1;
  while (leaves < nb + 1) leaves *= 2;
  int *free_after = xcalloc(2 * (size_t)leaves, sizeof(int));
  for (int t = 0; t < 2 * leaves; t++) free_after[t] = -1;
  bool empty_scratch = false;
  for (int b = 0; b < nb; b++) {
    rt_buffer *buf = &p->buffers[b];
    if (buf->kind != RT_BUF_SCRATCH || (space && space[b] != want)) continue;
    if (def[b] < 0) { /* empty tensors: an empty value no kernel writes or reads takes no room (slot 0) */
      CASTOR_ASSERT(buf->bytes_per_row == 0 && buf->bytes_fixed == 0);
      buf->index = 0, empty_scratch = true;
      continue;
    }
    if (last[b] < def[b]) last[b] = def[b]; /* written, never read (cannot happen after dce) */
    int t = 1; /* the leftmost leaf below a minimum under def[b] (the root's is: -1 at the end) */
    while (t < leaves) t = free_after[2 * t] < def[b] ? 2 * t : 2 * t + 1;
    int s = base + t - leaves;
    if (s == p->n_slots) p->n_slots++;
    for (free_after[t] = last[b]; t > 1; t /= 2)
      free_after[t / 2] = free_after[t & ~1] < free_after[t | 1] ? free_after[t & ~1] : free_after[t | 1];
    rt_slot *sl = &p->slots[s];
    if (buf->bytes_per_row > sl->bytes_per_row) sl->bytes_per_row = buf->bytes_per_row;
    if (buf->bytes_fixed > sl->bytes_fixed) sl->bytes_fixed = buf->bytes_fixed;
    buf->index = s;
  }
  free(free_after);
  return empty_scratch;
}

bool cg_plan_build(const ir_graph *g, cg_plan *p, diag_sink *d) {
  (void)d;
  memset(p, 0, sizeof *p);
  p->arena = arena_create();
  int n = g->n_nodes, buf_cap = 0;
  int *uses = ir_graph_use_counts(g);
  int *first_output = arena_alloc(p->arena, (size_t)(n + 1) * sizeof(int));
  for (int i = 0; i < n; i++) first_output[i] = -1;
  for (int o = g->n_outputs; o-- > 0;) first_output[g->outputs[o].value->id] = o;
  p->buffer_of = arena_alloc(p->arena, (size_t)(n + 1) * sizeof(int));
  for (int i = 0; i < n; i++) p->buffer_of[i] = -1;
  bool *fused = arena_alloc(p->arena, (size_t)n + 1);
  p->kernels = arena_alloc(p->arena, (size_t)(n + g->n_outputs + 1) * sizeof(cg_kernel));
  /* the one user of each single-use value (a chain only follows those):
   * one walk, so grouping stays linear in the graph's size */
  ir_node **user_of = arena_alloc(p->arena, (size_t)(n + 1) * sizeof *user_of);
  for (int i = 0; i < n; i++) user_of[i] = NULL;
  for (int j = 0; j < n; j++)
    for (int s = 0; s < g->nodes[j]->n_srcs; s++) {
      int src = g->nodes[j]->srcs[s]->id;
      if (!user_of[src]) user_of[src] = g->nodes[j];
    }
  /* the ops of the kernel being grouped; copied out at its real length */
  ir_node **chain = xcalloc((size_t)n + 1, sizeof *chain);

  int n_states = 0;
  for (int i = 0; i < n; i++) {
    ir_node *x = g->nodes[i];
    if (!is_leaf(x)) continue;
    /* a leaf's buffer by the op table: state (a variable), an input (it has
     * an {index}), else a constant (weights, literals) */
    if (ir_op_flags(x->op) & IR_OPF_STATE) p->buffer_of[i] = add_buffer(p, &buf_cap, RT_BUF_STATE, n_states++, x);
    else if (ir_op_attrs(x->op) & A(index))
      p->buffer_of[i] = add_buffer(p, &buf_cap, RT_BUF_INPUT, (int)x->attr.index, x);
    else p->buffer_of[i] = add_buffer(p, &buf_cap, RT_BUF_CONST, -1, x);
  }

  /* kernels */
  for (int i = 0; i < n; i++) {
    ir_node *x = g->nodes[i];
    if (is_leaf(x) || fused[i]) continue;
    if (ir_type_is_empty(&x->type) && !ir_op_writes(x->op)) { /* empty tensors: no element, no kernel */
      int out = first_output[i];
      p->buffer_of[i] = add_buffer(p, &buf_cap, out >= 0 ? RT_BUF_OUTPUT : RT_BUF_SCRATCH, out, x);
      continue;
    }
    /* layout: a reshape of a kernel's scratch result is that buffer read
     * with its own shape (buffers are dense and row-major, so the elements
     * are already in order): no kernel, no copy. The liveness below counts
     * its readers as the buffer's. A model output keeps its copy into the
     * caller's buffer. */
    if (ir_op_type_rule(x->op) == IR_TYPE_RESHAPE && first_output[i] < 0) {
      int b = p->buffer_of[x->srcs[0]->id];
      if (b >= 0 && p->buffers[b].kind == RT_BUF_SCRATCH) {
        p->buffer_of[i] = b;
        continue;
      }
    }
    cg_kernel *k = &p->kernels[p->n_kernels++];
    k->kind = kernel_kind(x->op);
    k->ops = chain;
    k->ops[k->n_ops++] = x;
    ir_node *cur = x;
    if (ir_op_writes(x->op)) { /* an update: in place, its result is operand 0's buffer */
      k->ops = arena_alloc(p->arena, sizeof(ir_node *));
      k->ops[0] = x;
      p->buffer_of[i] = k->out_buffer = p->buffer_of[x->srcs[0]->id];
      k->name = arena_printf(p->arena, "k%d.%s", p->n_kernels - 1, x->name);
      continue;
    }
    while ((k->kind == CG_KERNEL_CONTRACT || k->kind == CG_KERNEL_ELTWISE) && uses[cur->id] == 1 &&
           first_output[cur->id] < 0) {
      ir_node *user = user_of[cur->id];
      /* a row softmax that one GEMM panel spans ends a contraction kernel:
       * the GEMM's epilogue does it in registers (cg_gemm.c). Any rank:
       * the epilogue's rows are the result's flat rows (a batch_matmul's
       * item * M + row, a matmul's [N, .., M] rows), its line the last
       * dimension, as the row-wise op's */
      if (user && row_epilogue_op(user->op) && k->kind == CG_KERNEL_CONTRACT && cur->type.rank >= 2 &&
          ir_type_eq(&user->type, &cur->type) && cur->type.dims[cur->type.rank - 1] <= CG_GEMM_SOFTMAX_MAX_COLS) {
        fused[user->id] = true;
        k->ops[k->n_ops++] = user;
        cur = user;
        break;
      }
      if (!user || !fusable_op(user->op) || user->type.rank != cur->type.rank || cur->type.rank == 0) break;
      bool ok = true;
      for (int s = 0; s < user->n_srcs; s++) {
        ir_node *o = user->srcs[s];
        if (o == cur) continue;
        if (!is_leaf(o) && o->id >= x->id) ok = false;         /* not computed yet */
        /* any other shape is a numpy-broadcast operand (the type rule's),
         * which the kit's chain reads through its broadcast index */
      }
      /* the chain's shape is the kernel's iteration space; it must not change */
      for (int r = 0; r < cur->type.rank; r++)
        if (user->type.dims[r] != cur->type.dims[r]) ok = false;
      if (!ok) break;
      fused[user->id] = true;
      k->ops[k->n_ops++] = user;
      cur = user;
    }
    k->ops = arena_alloc(p->arena, (size_t)k->n_ops * sizeof(ir_node *));
    memcpy(k->ops, chain, (size_t)k->n_ops * sizeof(ir_node *));
    int out = first_output[cur->id];
    if (out >= 0) p->buffer_of[cur->id] = add_buffer(p, &buf_cap, RT_BUF_OUTPUT, out, cur);
    else p->buffer_of[cur->id] = add_buffer(p, &buf_cap, RT_BUF_SCRATCH, -1, cur);
    k->out_buffer = p->buffer_of[cur->id];
    k->name = arena_printf(p->arena, "k%d.%s", p->n_kernels - 1, x->name);
  }

  free(chain);

  /* outputs that no kernel writes: leaves, or a value that is several outputs */
  for (int o = 0; o < g->n_outputs; o++) {
    ir_node *v = g->outputs[o].value;
    if (first_output[v->id] == o && !is_leaf(v) && !ir_op_writes(v->op)) continue; /* an update writes its variable */
    if (ir_type_is_empty(&v->type)) { /* empty tensors: nothing to copy */
      add_buffer(p, &buf_cap, RT_BUF_OUTPUT, o, v);
      continue;
    }
    cg_kernel *k = &p->kernels[p->n_kernels++];
    k->kind = CG_KERNEL_COPY;
    k->copy_src = v;
    k->out_buffer = add_buffer(p, &buf_cap, RT_BUF_OUTPUT, o, v);
    k->name = arena_printf(p->arena, "k%d.copy.%s", p->n_kernels - 1, g->outputs[o].name);
  }

  /* liveness of scratch buffers over kernel indices */
  int nb = p->n_buffers;
  int *def = arena_alloc(p->arena, (size_t)nb * sizeof(int));
  int *last = arena_alloc(p->arena, (size_t)nb * sizeof(int));
  for (int b = 0; b < nb; b++) def[b] = last[b] = -1;
  for (int ki = 0; ki < p->n_kernels; ki++) {
    cg_kernel *k = &p->kernels[ki];
    def[k->out_buffer] = ki;
    if (k->kind == CG_KERNEL_COPY) {
      last[p->buffer_of[k->copy_src->id]] = ki;
      continue;
    }
    for (int j = 0; j < k->n_ops; j++)
      for (int s = 0; s < k->ops[j]->n_srcs; s++) {
        int b = p->buffer_of[k->ops[j]->srcs[s]->id];
        if (b >= 0) last[b] = ki;
      }
  }
  p->def = def, p->last = last;
  p->slots = arena_alloc(p->arena, (size_t)(nb + 1) * sizeof(rt_slot));
  bool empty_scratch = assign_slots(p, def, NULL, 0);
  if (empty_scratch && p->n_slots == 0) p->n_slots = 1; /* slot 0, of 0 bytes */
  free(uses);
  return true;
}

void cg_plan_fini(cg_plan *p) {
  arena_destroy(p->arena);
  memset(p, 0, sizeof *p);
}

/* ---- convolutional networks: by image ---- */

/* The buffers kernel k reads or writes, each once, into seen (at most 64:
 * a concat of more operands counts its first 63). */
static void add_seen(int seen[64], int *n, int b) {
  for (int i = 0; i < *n; i++)
    if (seen[i] == b) return;
  if (b >= 0 && *n < 64) seen[(*n)++] = b;
}

static int kernel_buffers(const cg_plan *p, const cg_kernel *k, int seen[64]) {
  int n = 0;
  add_seen(seen, &n, k->out_buffer);
  if (k->kind == CG_KERNEL_COPY) add_seen(seen, &n, p->buffer_of[k->copy_src->id]);
  else
    for (int j = 0; j < k->n_ops; j++)
      for (int s = 0; s < k->ops[j]->n_srcs; s++) add_seen(seen, &n, p->buffer_of[k->ops[j]->srcs[s]->id]);
  return n;
}

/* The cut with the least memory traffic by a rough count: a kernel run by
 * image reads its weights once an image (N times), one run on the batch
 * streams the whole batch's activations through memory, where by image an
 * image's stay in cache from one kernel to the next; so the cost of c
 * kernels by image is sum_{k < c} W_k + sum_{k >= c} A_k, W_k a kernel's
 * weight bytes, A_k the bytes an image of its other operands and result
 * take. Early layers (large maps, small weights) go by image; the last
 * (7x7 maps under 0.5-5 MB of weights: a MobileNet's last 1x1 convs and
 * its classifier) on the batch. Ties go to more kernels by image. */
static int chosen_cut(const cg_plan *p, int64_t images) {
  int n = p->n_kernels, best = n;
  double suffix = 0, best_suffix = 0; /* sum over k >= c of A_k - W_k */
  for (int c = n - 1; c >= 0; c--) {
    int seen[64], m = kernel_buffers(p, &p->kernels[c], seen);
    for (int i = 0; i < m; i++) {
      const rt_buffer *buf = &p->buffers[seen[i]];
      double bytes = (double)buf->bytes_fixed + (double)buf->bytes_per_row * (double)images;
      suffix += buf->kind == RT_BUF_CONST ? -bytes : bytes / (double)images;
    }
    if (suffix < best_suffix) best = c, best_suffix = suffix;
  }
  return best;
}

void cg_plan_cut_images(const ir_graph *g, cg_plan *p, int want) {
  p->image_launches = p->image_slots = 0;
  int64_t images = ir_graph_rows_separate(g);
  if (images < 2) return;
  const char *env = getenv("CASTOR_IMAGE_CUT");
  int64_t v;
  if (want < 0 && env && *env && str_parse_i64(env, 0, INT32_MAX, &v)) want = (int)v;
  int cut = want < 0 ? chosen_cut(p, images) : want < p->n_kernels ? want : p->n_kernels;
  if (cut == 0) return;
  /* space 0: live within the first cut kernels; 1: the rest, those read
   * after the cut (written before it) live from kernel 0 on: every pass
   * of images writes its rows of them before the first kernel on the
   * batch reads them */
  int nb = p->n_buffers;
  signed char *space = xcalloc((size_t)nb + 1, 1);
  int *def = xcalloc((size_t)nb + 1, sizeof *def);
  for (int b = 0; b < nb; b++) {
    def[b] = p->def[b];
    if (p->buffers[b].kind != RT_BUF_SCRATCH || p->def[b] < 0) continue;
    space[b] = p->last[b] >= cut || p->def[b] >= cut;
    if (p->def[b] < cut && p->last[b] >= cut) def[b] = 0;
  }
  p->n_slots = 0;
  memset(p->slots, 0, (size_t)(nb + 1) * sizeof *p->slots);
  bool empty0 = assign_slots(p, def, space, 0);
  p->image_slots = p->n_slots;
  bool empty1 = assign_slots(p, def, space, 1);
  if ((empty0 || empty1) && p->n_slots == 0) p->n_slots = 1; /* slot 0, of 0 bytes */
  p->image_launches = cut;
  free(space);
  free(def);
}
