/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fold_layout.c: transposes pushed up through the layout ops above them
 * until they merge with another transpose (or cancel it), as XLA's
 * algebraic simplifier and TVM's layout transform do.
 *
 * In:  a verified graph (any dtypes; normally before autocast).
 * Out: each transpose t = transpose(v, p) where the chain above v reaches
 *      another transpose through
 *        - strided_slice: transpose(slice(x), p) = slice'(transpose(x, p)),
 *          the slice's starts/ends/steps permuted with p;
 *        - reshape whose groups (the runs of dimensions whose products
 *          match, one input run for one output run) p moves whole and in
 *          order: transpose(reshape(x), p) = reshape'(transpose(x, p')),
 *          p' moving x's runs as p moves the result's;
 *        - reshape of a transpose, reshape(transpose(y, q)), whose input
 *          runs are each consecutive dimensions of y in order: that is
 *          transpose(reshape'(y), q') (the reshape done on y's layout);
 *        - transpose(transpose(x, q), p) = transpose(x, q o p), which is x
 *          when q o p is the identity,
 *      is rewritten as that chain: t itself becomes its last op (same name,
 *      layer and location), the ops above it are new nodes named after
 *      those they stand for (NAME.perm) and scheduled right before t. Two
 *      transposes that push up to the same value with the same permutation
 *      share the new nodes. What loses its last use is left for dce. A
 *      transpose never moves the batch N (the type rule), so neither does
 *      any rewrite; a chain that reaches no transpose is left as it is.
 * Why: ONNX's NCHW is converted at the edges of each NHWC op
 *      (frontend/onnx), so a channel shuffle (ShuffleNetV2's Reshape,
 *      Transpose, Reshape between two Slice and a Concat) runs as a copy
 *      to NCHW, the 5-D transpose, two slices and two copies back to NHWC:
 *      six copies of the activation. After this pass it is one transpose
 *      of the NHWC concat (the shuffle itself) and the two slices. The ops
 *      only move elements, so the values are the same bits.
 * Runs after fold-bn and fuse-gelu, before autocast; dce after it removes
 * the nodes left without a use.
 */
#include <stdio.h>
#include <string.h>

#include "passes/passes.h"

typedef struct memo_entry {
  const ir_node *v;
  int rank;
  int64_t perm[IR_MAX_RANK];
  ir_node *out;
} memo_entry;

typedef struct fold_ctx {
  ir_graph *g;
  int pos; /* where new nodes go: right before the transpose being rewritten */
  memo_entry *memo;
  int n_memo, cap_memo;
} fold_ctx;

static const char fold_note[] = "fold-layout: a transpose pushed up to the transpose it merges with";

static bool has_use(const ir_graph *g, const ir_node *v) {
  for (int o = 0; o < g->n_outputs; o++)
    if (g->outputs[o].value == v) return true;
  for (int i = 0; i < g->n_nodes; i++)
    for (int s = 0; s < g->nodes[i]->n_srcs; s++)
      if (g->nodes[i]->srcs[s] == v) return true;
  return false;
}

/* Whether a push may go up through v: a layout op that is no output and
 * that only layout ops read, so that the
 * chains through it, once rewritten, leave it without a use (one read: the
 * chain's; several: ShuffleNet's two slices of the shuffle, each pushed
 * in turn). Anything else that reads v would keep it, and its kernel. */
static bool passable(const ir_graph *g, const ir_node *v) {
  ir_type_rule rule = ir_op_type_rule(v->op);
  if (rule != IR_TYPE_TRANSPOSE && rule != IR_TYPE_RESHAPE && rule != IR_TYPE_STRIDED_SLICE) return false;
  for (int o = 0; o < g->n_outputs; o++)
    if (g->outputs[o].value == v) return false;
  for (int i = 0; i < g->n_nodes; i++) {
    const ir_node *u = g->nodes[i];
    for (int s = 0; s < u->n_srcs; s++)
      if (u->srcs[s] == v && u->op != IR_OP_TRANSPOSE && u->op != IR_OP_RESHAPE && u->op != IR_OP_STRIDED_SLICE)
        return false;
  }
  return true;
}

static bool is_identity(const int64_t *p, int rank) {
  for (int r = 0; r < rank; r++)
    if (p[r] != r) return false;
  return true;
}

static ir_node *add_node(fold_ctx *f, ir_op op, ir_node *x, const ir_attr *attr, const ir_node *from) {
  char err[256];
  ir_type t;
  CASTOR_ASSERT(ir_infer_type(op, &x, 1, attr, &t, err, sizeof err));
  char base[512];
  snprintf(base, sizeof base, "%s.perm", from->name);
  ir_node *n = ir_node_new(f->g, op, &t, &x, 1, ir_graph_unique_name(f->g, base), from->loc);
  n->attr = *attr;
  n->layer = from->layer;
  n->rule = from->rule;
  n->note = fold_note;
  ir_graph_insert(f->g, f->pos++, n);
  return n;
}

/* transpose(x, p), or x when p is the identity */
static ir_node *build_transpose(fold_ctx *f, ir_node *x, const int64_t *p, const ir_node *from) {
  int rank = x->type.rank;
  if (is_identity(p, rank)) return x;
  ir_attr a = {0};
  a.perm.n = rank;
  for (int r = 0; r < rank; r++) a.perm.v[r] = p[r];
  return add_node(f, IR_OP_TRANSPOSE, x, &a, from);
}

/* The groups of a reshape from dims a (rank ra) to dims b (rank rb): runs
 * [ga[k], ga[k+1]) of a and [gb[k], gb[k+1]) of b with equal products,
 * each as short as it can be; N (IR_DIM_BATCH) a group of its own on both
 * sides. False when they do not pair up (dimensions of size 1 left over). */
static bool reshape_groups(const ir_type *a, const ir_type *b, int *ga, int *gb, int *out_n) {
  int i = 0, j = 0, k = 0;
  while (i < a->rank || j < b->rank) {
    if (i >= a->rank || j >= b->rank) return false;
    ga[k] = i, gb[k] = j;
    if (a->dims[i] == IR_DIM_BATCH || b->dims[j] == IR_DIM_BATCH) {
      if (a->dims[i] != b->dims[j]) return false;
      i++, j++, k++;
      continue;
    }
    int64_t pa = a->dims[i++], pb = b->dims[j++];
    while (pa != pb) {
      if (pa < pb) {
        if (i >= a->rank || a->dims[i] == IR_DIM_BATCH) return false;
        pa *= a->dims[i++];
      } else {
        if (j >= b->rank || b->dims[j] == IR_DIM_BATCH) return false;
        pb *= b->dims[j++];
      }
    }
    k++;
  }
  ga[k] = a->rank, gb[k] = b->rank;
  *out_n = k;
  return true;
}

static ir_node *push(fold_ctx *f, ir_node *v, const int64_t *p);

/* v = reshape(t), t = transpose(y, q), each of the reshape's input runs
 * consecutive dimensions of y in order: v = transpose(y', q') with y' =
 * reshape(y) on y's layout. Returns transpose(v, p) = transpose(y', q' o p),
 * or NULL. */
static ir_node *reshape_of_transpose(fold_ctx *f, ir_node *v, const int64_t *p) {
  ir_node *t = v->srcs[0], *y = t->srcs[0];
  const int64_t *q = t->attr.perm.v;
  int ga[IR_MAX_RANK + 1], gb[IR_MAX_RANK + 1], n;
  if (!reshape_groups(&t->type, &v->type, ga, gb, &n)) return NULL;
  int ystart[IR_MAX_RANK]; /* group k's first dimension in y */
  for (int k = 0; k < n; k++) {
    ystart[k] = (int)q[ga[k]];
    for (int d = ga[k] + 1; d < ga[k + 1]; d++)
      if (q[d] != q[d - 1] + 1) return NULL;
  }
  /* y's dimensions are the groups in the order of their first dimension in y */
  int order[IR_MAX_RANK], yrank = 0;
  for (int k = 0; k < n; k++) order[k] = k;
  for (int a = 1; a < n; a++)
    for (int b = a; b > 0 && ystart[order[b - 1]] > ystart[order[b]]; b--) {
      int s = order[b];
      order[b] = order[b - 1], order[b - 1] = s;
    }
  ir_attr sa = {0};
  int newstart[IR_MAX_RANK]; /* group k's first dimension in y' */
  for (int o = 0; o < n; o++) {
    int k = order[o];
    newstart[k] = yrank;
    for (int d = gb[k]; d < gb[k + 1]; d++) sa.shape.dims[yrank++] = v->type.dims[d];
  }
  sa.shape.rank = yrank;
  int64_t q2[IR_MAX_RANK], r[IR_MAX_RANK]; /* v = transpose(y', q2) */
  for (int k = 0; k < n; k++)
    for (int d = gb[k]; d < gb[k + 1]; d++) q2[d] = newstart[k] + (d - gb[k]);
  for (int d = 0; d < v->type.rank; d++) r[d] = q2[p[d]];
  if (ir_type_is_batched(&y->type) && r[0] != 0) return NULL;
  ir_node *y2 = add_node(f, IR_OP_RESHAPE, y, &sa, v);
  return build_transpose(f, y2, r, v);
}

/* transpose(v, p) as the chain above v rewritten, if that reaches a
 * transpose; else NULL (nothing built). */
static ir_node *push(fold_ctx *f, ir_node *v, const int64_t *p) {
  int rank = v->type.rank;
  if (is_identity(p, rank)) return v;
  if (!passable(f->g, v)) return NULL;
  for (int m = 0; m < f->n_memo; m++) {
    memo_entry *e = &f->memo[m];
    if (e->v == v && e->rank == rank && !memcmp(e->perm, p, (size_t)rank * sizeof *p)) return e->out;
  }
  ir_node *out = NULL, *x = v->n_srcs == 1 ? v->srcs[0] : NULL;
  ir_type_rule rule = ir_op_type_rule(v->op);
  if (rule == IR_TYPE_TRANSPOSE) {
    int64_t r[IR_MAX_RANK];
    for (int d = 0; d < rank; d++) r[d] = v->attr.perm.v[p[d]];
    out = push(f, x, r);
    if (!out) out = build_transpose(f, x, r, v);
  } else if (rule == IR_TYPE_STRIDED_SLICE) {
    ir_node *x2 = push(f, x, p);
    if (x2) {
      ir_attr a = v->attr;
      for (int d = 0; d < rank; d++) {
        a.starts.v[d] = v->attr.starts.v[p[d]];
        a.ends.v[d] = v->attr.ends.v[p[d]];
        a.steps.v[d] = v->attr.steps.v[p[d]];
      }
      out = add_node(f, IR_OP_STRIDED_SLICE, x2, &a, v);
    }
  } else if (rule == IR_TYPE_RESHAPE) {
    int ga[IR_MAX_RANK + 1], gb[IR_MAX_RANK + 1], n;
    if (reshape_groups(&x->type, &v->type, ga, gb, &n)) {
      /* p must move v's groups whole and in order: then p' moves x's */
      int gk[IR_MAX_RANK], np = 0; /* the groups in p's order */
      bool whole = true;
      for (int d = 0; d < rank && whole;) {
        int k = 0;
        while (k < n && gb[k] != p[d]) k++;
        if (k == n) whole = false;
        for (int e = gb[k]; whole && e < gb[k + 1]; e++, d++)
          if (d >= rank || p[d] != e) whole = false;
        if (whole) gk[np++] = k;
      }
      ir_node *x2 = NULL;
      if (whole) {
        int64_t p2[IR_MAX_RANK];
        int xr = 0;
        for (int i = 0; i < np; i++)
          for (int e = ga[gk[i]]; e < ga[gk[i] + 1]; e++) p2[xr++] = e;
        x2 = push(f, x, p2);
      }
      if (x2) {
        ir_attr a = {0};
        a.shape.rank = rank;
        for (int d = 0; d < rank; d++) a.shape.dims[d] = v->type.dims[p[d]];
        out = add_node(f, IR_OP_RESHAPE, x2, &a, v);
      }
    }
    if (!out && x->op == IR_OP_TRANSPOSE) out = reshape_of_transpose(f, v, p);
  }
  if (out) {
    if (f->n_memo == f->cap_memo) {
      f->cap_memo = f->cap_memo ? 2 * f->cap_memo : 16;
      f->memo = xrealloc(f->memo, (size_t)f->cap_memo * sizeof *f->memo);
    }
    memo_entry *e = &f->memo[f->n_memo++];
    e->v = v, e->rank = rank, e->out = out;
    memcpy(e->perm, p, (size_t)rank * sizeof *p);
  }
  return out;
}

bool pass_fold_layout_run(ir_graph *g, pass_context *ctx) {
  (void)ctx;
  fold_ctx f = {.g = g};
  for (int i = 0; i < g->n_nodes; i++) {
    ir_node *t = g->nodes[i];
    if (t->op != IR_OP_TRANSPOSE || !passable(g, t->srcs[0])) continue;
    f.pos = i;
    ir_node *out = push(&f, t->srcs[0], t->attr.perm.v);
    i = f.pos; /* t's position now */
    if (!out) continue;
    CASTOR_ASSERT(ir_type_eq(&out->type, &t->type));
    if (out->note == fold_note && !has_use(g, out)) {
      /* a new node no one reads yet: t becomes it (its name stays), and
       * later pushes that reach the same value and permutation read t */
      t->op = out->op;
      t->srcs[0] = out->srcs[0];
      t->attr = out->attr;
      t->note = fold_note;
      for (int m = 0; m < f.n_memo; m++)
        if (f.memo[m].out == out) f.memo[m].out = t;
    } else {
      ir_graph_replace_uses(g, t, out); /* an existing value: t is left for dce */
    }
  }
  free(f.memo);
  ir_graph_renumber(g);
  return true;
}
