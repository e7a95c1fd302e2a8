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
 * Then each strided_slice, and each gather of one constant index, whose
 * operand reaches a strided_slice through reshapes and transposes that
 * only insert, drop or move dimensions of 1 is one strided_slice of that
 * slice's operand, then a reshape to its type (static shapes; below,
 * "slices through unit views"): ONNX's LSTM read at its last step copies
 * [N, H], not the whole h sequence three times. The same bits.
 * Runs after fold-bn and fuse-gelu, before autocast; dce after it removes
 * the nodes left without a use.
 */
#include <stdio.h>
#include <string.h>

#include "passes/passes.h"
#include "util/dtype.h"

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

/* ---- slices through unit views ----
 * A reshape or transpose that only inserts, drops or moves dimensions of
 * size 1 (a unit view: the other dimensions keep their sizes and order)
 * moves no element, so a slice of it is a slice of its operand; a slice
 * of a strided_slice is one strided_slice (positive steps compose: start
 * s1 + st1 s2, step st1 st2); a gather of one constant index is the slice
 * [i, i + 1] of its axis (the index normalized and clamped as gather
 * does). A strided_slice or such a gather whose chain of unit views
 * reaches a strided_slice becomes one strided_slice of that slice's
 * operand (then a reshape to its type): the intermediate copies lose
 * their use (dce). ONNX's LSTM output read at its last step (Y sliced out
 * of the scan's h and c, squeezed, transposed to batch first, Gather -1)
 * was three copies of the whole h sequence; it is one of [N, H]. Static
 * shapes only (gather's table is unbatched; a batched chain is left). */

/* x's dimensions other than 1, in order; false if one is 0 or N */
static bool non_unit_dims(const ir_type *t, int64_t *dims, int *out_n) {
  int n = 0;
  for (int r = 0; r < t->rank; r++) {
    if (t->dims[r] == 0 || t->dims[r] == IR_DIM_BATCH) return false;
    if (t->dims[r] != 1) dims[n++] = t->dims[r];
  }
  *out_n = n;
  return true;
}

static bool is_unit_view(const ir_node *v) {
  if (v->op != IR_OP_RESHAPE && v->op != IR_OP_TRANSPOSE) return false;
  const ir_type *x = &v->srcs[0]->type;
  int64_t a[IR_MAX_RANK], b[IR_MAX_RANK];
  int na, nb;
  if (!non_unit_dims(x, a, &na) || !non_unit_dims(&v->type, b, &nb) || na != nb || memcmp(a, b, (size_t)na * sizeof *a))
    return false;
  if (v->op == IR_OP_TRANSPOSE) { /* the dimensions other than 1 in x's order */
    int64_t last = -1;
    for (int r = 0; r < v->type.rank; r++) {
      int64_t src = v->attr.perm.v[r];
      if (x->dims[src] == 1) continue;
      if (src < last) return false;
      last = src;
    }
  }
  return true;
}

/* A slice of a value: per dimension the first coordinate, the step and the count. */
typedef struct slice_of {
  ir_node *x;
  int64_t start[IR_MAX_RANK], step[IR_MAX_RANK], count[IR_MAX_RANK];
} slice_of;

/* s as a slice of its operand, if it is a strided_slice or a gather of one constant index */
static bool as_slice(const ir_node *s, slice_of *out) {
  char err[256];
  const ir_type *x = &s->srcs[0]->type;
  int64_t dims[IR_MAX_RANK];
  int n;
  if (!non_unit_dims(x, dims, &n) || !non_unit_dims(&s->type, dims, &n)) return false;
  out->x = s->srcs[0];
  if (s->op == IR_OP_STRIDED_SLICE) {
    if (!ir_strided_slice_bounds(x, &s->attr, out->start, out->count, err, sizeof err)) return false;
    for (int r = 0; r < x->rank; r++) out->step[r] = s->attr.steps.v[r];
    return true;
  }
  const ir_node *b = s->n_srcs == 2 ? s->srcs[1] : NULL;
  int64_t numel = 0;
  if (s->op != IR_OP_GATHER || b->op != IR_OP_CONST || !b->attr.data || !ir_type_numel(&b->type, 1, &numel) ||
      numel != 1 || (b->type.dtype != DT_I32 && b->type.dtype != DT_I64))
    return false;
  int64_t axis = s->attr.axis < 0 ? s->attr.axis + x->rank : s->attr.axis, d = x->dims[axis];
  int64_t i = (int64_t)dtype_load_double(b->type.dtype, b->attr.data, 0);
  i = i < 0 ? i + d : i;
  i = i < 0 ? 0 : i >= d ? d - 1 : i; /* clamped to the nearest row, as gather reads it */
  for (int r = 0; r < x->rank; r++) out->start[r] = 0, out->step[r] = 1, out->count[r] = x->dims[r];
  out->start[axis] = i, out->count[axis] = 1;
  return true;
}

/* sl moved up through the unit views above sl->x and into the strided_slice
 * they reach; false (sl as it was) if they reach none. */
static bool lift(slice_of *sl) {
  ir_node *v = sl->x;
  while (is_unit_view(v)) v = v->srcs[0];
  slice_of top;
  if (v->op != IR_OP_STRIDED_SLICE || !as_slice(v, &top)) return false;
  /* sl's dimensions other than 1 are v's, in order; on v's dimensions of 1 sl takes [0, 1) */
  int64_t start[IR_MAX_RANK], step[IR_MAX_RANK], count[IR_MAX_RANK];
  int k = 0;
  for (int r = 0; r < v->type.rank; r++) {
    start[r] = 0, step[r] = 1, count[r] = 1;
    if (v->type.dims[r] == 1) continue;
    while (sl->x->type.dims[k] == 1) {
      if (sl->count[k] != 1) return false; /* an empty slice of a dimension of 1: left as it is */
      k++;
    }
    start[r] = sl->start[k], step[r] = sl->step[k], count[r] = sl->count[k], k++;
  }
  for (; k < sl->x->type.rank; k++)
    if (sl->count[k] != 1) return false;
  for (int r = 0; r < v->type.rank; r++) { /* into v's own slice of its operand */
    sl->start[r] = top.start[r] + top.step[r] * start[r];
    sl->step[r] = top.step[r] * step[r];
    sl->count[r] = count[r];
  }
  sl->x = top.x;
  return true;
}

static void fold_slices(ir_graph *g) {
  char err[256];
  for (int i = 0; i < g->n_nodes; i++) {
    ir_node *s = g->nodes[i];
    slice_of sl;
    if ((s->op != IR_OP_STRIDED_SLICE && s->op != IR_OP_GATHER) || !as_slice(s, &sl) || !lift(&sl)) continue;
    while (lift(&sl)) {
    }
    ir_attr a = {0};
    int rank = sl.x->type.rank;
    a.starts.n = a.ends.n = a.steps.n = rank;
    for (int r = 0; r < rank; r++) {
      a.starts.v[r] = sl.start[r], a.steps.v[r] = sl.step[r];
      a.ends.v[r] = sl.start[r] + (sl.count[r] - 1) * sl.step[r] + 1;
    }
    ir_type t;
    CASTOR_ASSERT(ir_infer_type(IR_OP_STRIDED_SLICE, &sl.x, 1, &a, &t, err, sizeof err));
    const char *note = "fold-layout: a slice of slices and unit views taken at once";
    if (ir_type_eq(&t, &s->type)) {
      s->op = IR_OP_STRIDED_SLICE;
      s->srcs[0] = sl.x;
      s->n_srcs = 1;
      s->attr = a;
      s->note = note;
      continue;
    }
    char base[512];
    snprintf(base, sizeof base, "%s.slice", s->name);
    ir_node *n = ir_node_new(g, IR_OP_STRIDED_SLICE, &t, &sl.x, 1, ir_graph_unique_name(g, base), s->loc);
    n->attr = a;
    n->layer = s->layer;
    n->rule = s->rule;
    n->note = note;
    ir_graph_insert(g, i, n);
    s->op = IR_OP_RESHAPE;
    s->srcs[0] = n;
    s->srcs[1] = NULL;
    s->n_srcs = 1;
    memset(&s->attr, 0, sizeof s->attr);
    s->attr.shape.rank = s->type.rank;
    for (int r = 0; r < s->type.rank; r++) s->attr.shape.dims[r] = s->type.dims[r];
    s->note = note;
    i++; /* s's position now */
  }
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
  fold_slices(g);
  ir_graph_renumber(g);
  return true;
}
