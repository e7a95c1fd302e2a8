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
 *
 *      Recurrent ops (ir_rnn_gates > 0: lstm, gru, simple_rnn) in f16/bf16
 *      whose units H are not a multiple of 8 run on H8 = round8(H) units:
 *      every gate's block of H columns padded to H8 with zero columns (the
 *      recurrent kernel [H, G*H] -> [H8, G*H8], zero rows for the padded
 *      state lanes; gru's recurrent bias gate by gate), the initial states
 *      [N,H] -> [N,H8] with zeros (zeros broadcast to [N,H8] where the
 *      state is the layer's own zeros), and one slice of the result back to H.
 *      The input projection xp [N,T,G*H] comes padded from its matmul
 *      (x [N,T,F] x kernel [F,G*H], F padded to 8 as a matmul's K) and bias
 *      add when they are the layer's own and feed only the scan: the
 *      kernel's and bias's pads fold; otherwise xp itself is padded gate by
 *      gate at run time. A padded lane's pre-activations are all zero, so
 *      its state stays exactly 0 at every step (lstm: c = 0.5*0 + 0.5*tanh 0,
 *      h = 0.5*tanh 0; gru: h = 0.5*0 + 0.5*tanh 0; simple_rnn: tanh 0),
 *      and its zero rows of the recurrent kernel add only exact zero
 *      products after the real ones to each real unit's sum (the kernel sums
 *      in k order, cg_rnn.c): the unpadded units' bits do not change.
 *      Gate-wise pads are reshape [.., G, H] -> pad -> reshape back, named
 *      %v.gates, %v.gates.pad8 and %v.pad8; the last carries the note.
 *      Operands after the states (none today) are left alone.
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

/* ---- recurrent ops: units to multiples of 8, gate by gate ---- */

/* A reshape or pad of x to dims before schedule position `at`, noted as pad8's. */
static ir_node *shape_op(ir_graph *g, ir_op op, ir_node *x, int rank, const int64_t *dims, const char *suffix,
                         int at, const ir_node *why) {
  char base[512];
  snprintf(base, sizeof base, "%s.%s", x->name, suffix);
  ir_type t = x->type;
  t.rank = rank;
  ir_attr attr = {0};
  attr.shape.rank = rank;
  for (int r = 0; r < rank; r++) t.dims[r] = attr.shape.dims[r] = dims[r];
  ir_node *n = ir_node_new(g, op, &t, &x, 1, ir_graph_unique_name(g, base), x->loc);
  n->attr = attr;
  n->layer = why->layer;
  n->rule = "pad8";
  insert(g, n, at);
  ir_graph_renumber(g);
  return n;
}

/* v [..., G*H] -> [..., G*H8], each gate's H columns then H8-H zero ones;
 * with rows8 > 0 also v's rows (a recurrent kernel [H, G*H]) to rows8:
 * reshape [..., G, H], pad, reshape back, before position `at`. */
static ir_node *pad_gates(ir_graph *g, ir_node *v, int gates, int64_t h, int64_t h8, int64_t rows8, int at,
                          const ir_node *why) {
  int rank = v->type.rank;
  int64_t split[IR_MAX_RANK], padded[IR_MAX_RANK], flat[IR_MAX_RANK];
  for (int r = 0; r + 1 < rank; r++) split[r] = padded[r] = flat[r] = v->type.dims[r];
  if (rows8 > 0) padded[0] = flat[0] = rows8;
  split[rank - 1] = padded[rank - 1] = gates;
  split[rank] = h, padded[rank] = h8;
  flat[rank - 1] = (int64_t)gates * h8;
  ir_node *s = shape_op(g, IR_OP_RESHAPE, v, rank + 1, split, "gates", at, why);
  ir_node *p = shape_op(g, IR_OP_PAD, s, rank + 1, padded, "pad8", s->id + 1, why);
  char base[512];
  snprintf(base, sizeof base, "%s.pad8", v->name);
  ir_node *f = shape_op(g, IR_OP_RESHAPE, p, rank, flat, "flat", p->id + 1, why);
  f->name = ir_graph_unique_name(g, base);
  str_buf from, to;
  str_buf_init(&from), str_buf_init(&to);
  ir_type_print(&v->type, &from);
  ir_type_print(&f->type, &to);
  s->note = arena_printf(g->arena, "pad8: %s splits %s into %d gates", why->layer ? why->layer : why->name,
                         strchr(str_buf_cstr(&from), '['), gates);
  p->note = arena_printf(g->arena, "pad8: %s pads each gate's %lld units to %lld", why->layer ? why->layer : why->name,
                         (long long)h, (long long)h8);
  f->note = arena_printf(g->arena, "pad8: %s pads %s to %s (%d gates of %lld units to %lld)",
                         why->layer ? why->layer : why->name, strchr(str_buf_cstr(&from), '['),
                         strchr(str_buf_cstr(&to), '['), gates, (long long)h, (long long)h8);
  str_buf_fini(&from), str_buf_fini(&to);
  return f;
}

/* The users of v: exactly one (`user`), not an output. */
static bool feeds_only(ir_graph *g, const ir_node *v, const ir_node *user) { return only_user(g, v) == user; }

static bool same_layer(const ir_node *a, const ir_node *b) { return a->layer && b->layer && !strcmp(a->layer, b->layer); }

/* xp [N,T,G*H] padded to [N,T,G*H8] for scan r: from its own matmul (and
 * bias add) when they feed only the scan, else gate by gate at run time. */
static ir_node *pad_projection(ir_graph *g, ir_node *r, ir_node *xp, int gates, int64_t h, int64_t h8) {
  ir_node *add = NULL, *mm = xp;
  if (xp->op == IR_OP_ADD && xp->n_srcs == 2) {
    ir_node *o = xp->srcs[1], *m0 = xp->srcs[0];
    if (o->type.rank == 1 && !ir_type_is_batched(&o->type) && o->type.dims[0] == gates * h) add = xp, mm = m0;
  }
  bool own = mm->op == IR_OP_MATMUL && mm->type.rank == 3 && mm->srcs[1]->type.rank == 2 &&
             same_layer(mm, r) && feeds_only(g, mm, add ? add : r) && (!add || (same_layer(add, r) && feeds_only(g, add, r)));
  if (!own) return pad_gates(g, xp, gates, h, h8, 0, r->id, r);
  ir_node *a = mm->srcs[0], *b = mm->srcs[1];
  int64_t k = b->type.dims[0], k8 = round8(k);
  int64_t ad[IR_MAX_RANK];
  memcpy(ad, a->type.dims, sizeof ad);
  ad[a->type.rank - 1] = k8;
  mm->srcs[0] = pad_to(g, a, ad, mm->id, mm);
  ir_graph_renumber(g);
  mm->srcs[1] = pad_gates(g, b, gates, h, h8, k8, mm->id, r);
  mm->type.dims[2] = (int64_t)gates * h8;
  if (!add) return mm;
  add->srcs[1] = pad_gates(g, add->srcs[1], gates, h, h8, 0, add->id, r);
  add->type.dims[2] = (int64_t)gates * h8;
  return add;
}

/* A zero initial state, broadcast_to(literal 0) (through a cast) used by
 * the scan alone, made [N,H8] where it is built instead of padded after. */
static bool widen_zero_state(ir_graph *g, ir_node *r, ir_node *v, int64_t h8) {
  ir_node *b = v->op == IR_OP_CAST ? v->srcs[0] : v;
  if (b->op != IR_OP_BROADCAST_TO || b->srcs[0]->op != IR_OP_LITERAL || b->srcs[0]->attr.value != 0 ||
      b->type.rank != 2 || !feeds_only(g, v, r) || (b != v && !feeds_only(g, b, v)))
    return false;
  b->type.dims[1] = b->attr.shape.dims[1] = h8;
  v->type.dims[1] = h8;
  b->note = arena_printf(g->arena, "pad8: %s's zero state built %lld units wide", r->layer ? r->layer : r->name,
                         (long long)h8);
  return true;
}

static void pad_recurrent(ir_graph *g, ir_node *r) {
  int gates = ir_rnn_gates(r->op), states = ir_rnn_states(r->op);
  int64_t h = r->srcs[1]->type.dims[0], h8 = round8(h);
  if (h == h8) return;
  r->srcs[0] = pad_projection(g, r, r->srcs[0], gates, h, h8);
  r->srcs[1] = pad_gates(g, r->srcs[1], gates, h, h8, h8, r->id, r);
  int k = 2;
  if (k < r->n_srcs && r->srcs[k]->type.rank == 1) { /* gru's recurrent bias [G*H] */
    r->srcs[k] = pad_gates(g, r->srcs[k], gates, h, h8, 0, r->id, r);
    k++;
  }
  for (int e = 0; e < states && k < r->n_srcs; e++, k++) {
    if (widen_zero_state(g, r, r->srcs[k], h8)) continue;
    int64_t sd[IR_MAX_RANK];
    memcpy(sd, r->srcs[k]->type.dims, sizeof sd);
    sd[1] = h8;
    r->srcs[k] = pad_to(g, r->srcs[k], sd, r->id, r);
    ir_graph_renumber(g);
  }
  /* [N,T,H] or lstm's [N,T,2,H]: the units are the last dimension */
  int64_t sd[IR_MAX_RANK];
  memcpy(sd, r->type.dims, sizeof sd);
  r->type.dims[r->type.rank - 1] = h8;
  ir_node *s = make(g, IR_OP_SLICE, r, sd, "slice", r);
  s->rule = "pad8-zero"; /* the padded lanes' states stay 0 */
  ir_graph_replace_uses(g, r, s);
  insert(g, s, r->id + 1);
  ir_graph_renumber(g);
}

bool pass_pad8_run(ir_graph *g, pass_context *ctx) {
  (void)ctx;
  ir_graph_renumber(g);
  for (int i = 0; i < g->n_nodes; i++) {
    ir_node *m = g->nodes[i];
    if ((ir_op_flags(m->op) & IR_OPF_PAD8) && is_16(m->type.dtype) && (m->type.rank == 2 || m->type.rank == 4)) {
      pad_matmul(g, m);
      i = m->id; /* nodes were inserted before m */
    } else if (ir_rnn_gates(m->op) > 0 && ir_rnn_forward(m->op) == IR_OP_COUNT && is_16(m->type.dtype)) {
      pad_recurrent(g, m);
      i = m->id + 1; /* nodes were inserted before m; its slice after it */
    }
  }
  return true;
}
