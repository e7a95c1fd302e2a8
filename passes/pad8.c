/* SPDX-License-Identifier: Apache-2.0 */
/*
 * pad8.c: pad 16-bit contractions to multiples of 8, as XLA does for tensor
 * cores. Which ops: those with IR_OPF_PAD8 in the op table (matmul), whose
 * operands are a [M,K] and b [K,Nc], and conv2d, x [N,H,W,C] and w
 * [KH,KW,C,O], whose channels C and O pad as K and Nc (zero channels of x
 * meet zero rows of w: the sums gain only exact zero terms); the pass
 * names no op.
 *
 * In:  a verified graph after autocast and cast-cleanup, before
 *      fold-constants (so that pads of weights fold) and dce.
 * Out: every f16/bf16 IR_OPF_PAD8 op (below: matmul) whose K or output width is not a multiple of 8
 *      reads operands padded with zeros to K8 = round8(K) and N8 =
 *      round8(Nc) and computes [M, N8]. The matmul's epilogue (the
 *      elementwise ops of its layer that follow it one by one: bias add,
 *      activation, cast) runs on the padded width too, with bias vectors
 *      padded; one slice after the epilogue restores the model's shape. The
 *      batch dimension M is symbolic and is not padded here (kernels tile
 *      it). pad(slice(v)) back to v's own shape is v itself when v's padding
 *      is known to be zero (every op from the zero-padded matmul keeps 0 at
 *      0: IR_OPF_KEEPS_ZERO in the op table: add/mul of zero-padded
 *      operands, relu, tanh, gelu, silu, casts), so a
 *      10-wide layer feeding another matmul stays 16 wide in between.
 *      float32 matmuls are untouched. Pads and slices are IR ops, visible in
 *      dumps, named after what they pad (%x.pad8, %dense_logits.slice).
 */
#include <stdio.h>
#include <string.h>

#include "passes/passes.h"

static int64_t round8(int64_t x) { return (x + 7) / 8 * 8; }

static bool is_16(ir_dtype t) { return t == DT_F16 || t == DT_BF16; }

/* Inserts n right before schedule position `before` and returns it. */
static ir_node *insert(ir_graph *g, ir_node *n, int before) {
  ir_graph_insert(g, before, n);
  return n;
}

static ir_node *make(ir_graph *g, ir_op op, ir_node *x, const int64_t *dims, const char *suffix,
                     const ir_node *why) {
  char base[512];
  snprintf(base, sizeof base, "%s.%s", x->name, suffix);
  ir_type t = x->type;
  ir_attr attr = {0};
  attr.shape.rank = t.rank;
  for (int r = 0; r < t.rank; r++) t.dims[r] = attr.shape.dims[r] = dims[r];
  ir_node *n = ir_node_new(g, op, &t, &x, 1, ir_graph_unique_name(g, base), x->loc);
  n->attr = attr;
  n->layer = why->layer;
  n->rule = "pad8";
  str_buf from, to;
  str_buf_init(&from), str_buf_init(&to);
  ir_type_print(&x->type, &from);
  ir_type_print(&t, &to);
  n->note = arena_printf(g->arena, "pad8: %s %s %s %s %s", why->layer ? why->layer : why->name,
                         op == IR_OP_PAD ? "pads" : "slices", strchr(str_buf_cstr(&from), '['),
                         op == IR_OP_PAD ? "to" : "back to", strchr(str_buf_cstr(&to), '['));
  str_buf_fini(&from), str_buf_fini(&to);
  return n;
}

/* Zero-pads x to dims right before schedule position `at` (x if no change). */
static ir_node *pad_to(ir_graph *g, ir_node *x, const int64_t *dims, int at, const ir_node *why) {
  bool same = true;
  for (int r = 0; r < x->type.rank; r++) same &= dims[r] == x->type.dims[r];
  if (same) return x;
  /* x may itself be a slice of a value whose padding is zero */
  if (x->op == IR_OP_SLICE && x->rule && !strcmp(x->rule, "pad8-zero")) {
    ir_node *v = x->srcs[0];
    bool fits = true;
    for (int r = 0; r < x->type.rank; r++) fits &= dims[r] == v->type.dims[r];
    if (fits) return v;
  }
  return insert(g, make(g, IR_OP_PAD, x, dims, "pad8", why), at);
}

/* The single user of v, or NULL. */
static ir_node *only_user(ir_graph *g, const ir_node *v) {
  ir_node *user = NULL;
  for (int i = 0; i < g->n_outputs; i++)
    if (g->outputs[i].value == v) return NULL;
  for (int i = v->id + 1; i < g->n_nodes; i++)
    for (int s = 0; s < g->nodes[i]->n_srcs; s++)
      if (g->nodes[i]->srcs[s] == v) {
        if (user && user != g->nodes[i]) return NULL;
        if (user == g->nodes[i]) return NULL; /* both operands */
        user = g->nodes[i];
      }
  return user;
}

/* A matmul a [M,K] x b [K,Nc], or (convolutional networks) a conv2d x
 * [N,H,W,C] x w [KH,KW,C,O] whose channels C and O are its K and Nc: x
 * padded along its channels, w along its last two dimensions. */
static void pad_matmul(ir_graph *g, ir_node *m) {
  ir_node *a = m->srcs[0], *b = m->srcs[1];
  int rb = b->type.rank;
  int64_t K = b->type.dims[rb - 2], Nc = b->type.dims[rb - 1], K8 = round8(K), N8 = round8(Nc);
  if (K == K8 && Nc == N8) return;
  int64_t ad[IR_MAX_RANK], bd[IR_MAX_RANK];
  memcpy(ad, a->type.dims, sizeof ad), memcpy(bd, b->type.dims, sizeof bd);
  ad[a->type.rank - 1] = K8, bd[rb - 2] = K8, bd[rb - 1] = N8;
  m->srcs[0] = pad_to(g, a, ad, m->id, m);
  ir_graph_renumber(g);
  m->srcs[1] = pad_to(g, b, bd, m->id, m);
  ir_graph_renumber(g);
  m->type.dims[m->type.rank - 1] = N8;
  /* the epilogue runs padded */
  ir_node *end = m;
  bool zero = true;
  for (ir_node *u; Nc != N8 && (u = only_user(g, end)) && u->layer && m->layer && !strcmp(u->layer, m->layer);) {
    if (ir_op_kernel(u->op) != IR_KERNEL_ELTWISE) break;
    bool ok = true;
    for (int s = 0; s < u->n_srcs; s++) {
      ir_node *o = u->srcs[s];
      if (o == end) continue;
      ok &= o->type.rank == 1 && !ir_type_is_batched(&o->type) && o->type.dims[0] == Nc;
    }
    if (!ok) break;
    for (int s = 0; s < u->n_srcs; s++)
      if (u->srcs[s] != end) {
        u->srcs[s] = pad_to(g, u->srcs[s], (int64_t[]){N8}, u->id, m);
        ir_graph_renumber(g);
      }
    u->type.dims[u->type.rank - 1] = N8;
    zero &= (ir_op_flags(u->op) & IR_OPF_KEEPS_ZERO) != 0;
    end = u;
  }
  if (Nc == N8) return;
  /* slice back right after the epilogue, for every other user */
  int64_t sd[IR_MAX_RANK];
  memcpy(sd, end->type.dims, sizeof sd);
  sd[end->type.rank - 1] = Nc;
  ir_node *s = make(g, IR_OP_SLICE, end, sd, "slice", m);
  s->rule = zero ? "pad8-zero" : "pad8";
  ir_graph_replace_uses(g, end, s);
  insert(g, s, end->id + 1);
  ir_graph_renumber(g);
}

bool pass_pad8_run(ir_graph *g, pass_context *ctx) {
  (void)ctx;
  ir_graph_renumber(g);
  for (int i = 0; i < g->n_nodes; i++) {
    ir_node *m = g->nodes[i];
    /* the operands' dtype: a contraction may have an f32 result (autocast.c) */
    if ((ir_op_flags(m->op) & IR_OPF_PAD8) && is_16(m->srcs[0]->type.dtype) && (m->type.rank == 2 || m->type.rank == 4)) {
      pad_matmul(g, m);
      i = m->id; /* nodes were inserted before m */
    }
  }
  return true;
}
