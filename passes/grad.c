/* SPDX-License-Identifier: Apache-2.0 */
/*
 * grad.c: the training step. Reverse-mode automatic differentiation of a
 * model graph plus a loss, followed by the optimizer's update: one graph,
 * one program per training step (docs/training.md).
 *
 * In:  a verified model graph after autocast (and cast-cleanup), with one
 *      output, the model's prediction; its weights are constants.
 * Out: the step graph:
 *      - every weight becomes a variable (persistent state) in Keras's
 *        variable dtype: f32 under float32 and the mixed policies (their
 *        16-bit copies are the forward graph's casts, made each step, as
 *        Keras casts variables when a layer is called), the compute dtype
 *        under float16/bfloat16 (the casts that made it fold into it);
 *      - a second input, the targets: int32 class indices [N] for sparse
 *        categorical cross-entropy, else the prediction's shape;
 *      - the loss, an f32 [] output named "loss", after the model's output;
 *      - the backward graph: for each forward node whose value depends on a
 *        variable, in reverse schedule order, its local gradient rule
 *        (below), with an add where a value fans out. Each backward node
 *        computes in its forward node's dtype, so it is the exact transpose
 *        of the mixed-precision forward program, as JAX differentiates
 *        Keras's: the gradient of a 16-bit matmul is a 16-bit matmul that
 *        accumulates in f32, and the transpose of each autocast cast is a
 *        cast back, whose note names the forward cast and its reason;
 *      - the optimizer: learning rate, step count and loss scale are
 *        variables too (run-time scalars the host may read and set), the
 *        slots are variables of each weight's type, and one update op per
 *        weight applies Keras 3's formula in place. With a dynamic loss
 *        scale (Keras's LossScaleOptimizer), all_finite over the scaled
 *        gradients gates every update, the step count and the scale's own
 *        update: a rejected step changes nothing but the scale, on the
 *        device, with no round trip to the host.
 *
 * Gradient rules (dy: the gradient of the node's value):
 *   matmul(a, b)   da = matmul_nt(dy, b), db = matmul_tn(a, dy), acc f32
 *   add(a, b)      da = dy; db = dy, or sum_rows(dy) for a bias vector
 *   mul(a, b)      da = dy * b; db = dy * a, or sum_rows(dy * a)
 *   relu, gelu, silu: <op>_grad(dy, x); sigmoid, tanh: <op>_grad(dy, y)
 *   softmax        softmax_grad(dy, y); when it feeds the cross-entropy
 *                  loss directly, xent_grad gives the logits' gradient
 *   layer_norm(x, gamma, beta)
 *                  dx = layer_norm_grad(x, gamma, dy), in the forward op's
 *                  dtype with f32 statistics: (1/sigma) (g - mean(g) -
 *                  xhat mean(g xhat)), g = dy gamma, per row;
 *                  dgamma = sum_rows(dy * layer_norm_xhat(x)),
 *                  dbeta = sum_rows(dy): sum_rows needs x [N, C] (an x
 *                  with more dimensions before the normalized ones is an
 *                  error, as for a broadcast bias)
 *   cast           cast(dy) back to the operand's dtype
 *   pad / slice    slice / pad of dy
 *   reshape        reshape(dy) to the operand's shape
 *   transpose      transpose(dy) by the inverse permutation
 *   concat         each operand: strided_slice(dy), its block along the axis
 *   strided_slice  pad_constant(dy) with value 0 at the same starts and steps
 *   pad_constant   strided_slice(dy) of the block it placed
 *   gather(a, b)   da = gather_grad(dy, b), the ordered scatter-add; the
 *                  int32 indices b have none
 *   batch_norm(x, gamma, beta, mean, var) in a training step (grad_bn.c
 *                  gave it the batch's statistics): with inv = 1 / sqrt(var
 *                  + eps), xhat = (x - mean) inv, the full gradient through
 *                  the statistics dx = gamma inv (dy - bn_mean(dy) - xhat
 *                  bn_mean(dy xhat)); dgamma = sum(dy xhat), dbeta =
 *                  sum(dy), summed to their shape
 *   dropout        (a training step makes each dropout of rate > 0 a
 *                  dropout_train reading dropout.step, a training scalar
 *                  the optimizer's step advances) dx = dropout_train(dy,
 *                  step): the same mask and scale; rate 0: dx = dy
 *   reduce_sum / reduce_mean
 *                  dx = broadcast_to(dy, reshaped to keep the reduced
 *                  dimensions as 1) to x's shape (times 1/count: mean)
 *   reduce_max / reduce_min
 *                  dx = reduce_max_grad / reduce_min_grad(dy, x): dy to
 *                  the first extreme element of each group
 *   broadcast_to   dx = sum_to(dy) to x's shape (as a broadcast operand)
 *   log_softmax    dx = log_softmax_grad(dy, y) = dy - exp(y) sum(dy), per row
 *   lstm / gru / simple_rnn (recurrent layers: backpropagation through time)
 *                  g = <op>_grad(operands, y, dy): dxp = its first G*H
 *                  columns; dr = matmul_tn(h_{t-1}, du) over every row
 *                  (gru with its reset gate before: (g h_{t-1}) for h's
 *                  block); drb = sum_to(du); no gradient to initial states
 */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/half.h"
#include "passes/grad_bn.h"
#include "passes/passes.h"

typedef struct grad_state {
  ir_graph *g;
  pass_context *ctx;
  const pass_train_options *o;
  int n_fwd;          /* forward nodes: ids [0, n_fwd) */
  bool *needs;        /* forward node id -> its value depends on a variable */
  ir_node **adjoint;  /* forward node id -> its gradient so far */
  hmap *names;        /* every node's name (unique_name) */
} grad_state;

static const diag_loc no_loc = {0};

/* ir_graph_unique_name's answer (base, else base.1, base.2, ...: the first
 * name no node has) from a set of the graph's names instead of a scan of
 * the graph per new node, which made the pass quadratic in depth (10,000
 * layers: 80 s). Exact because every node the pass adds takes its name
 * from here and none is removed or renamed while it runs. */
static const char *unique_name(grad_state *s, const char *base) {
  const char *name = base;
  for (int k = 1; hmap_get_str(s->names, name, strlen(name)); k++) name = arena_printf(s->g->arena, "%s.%d", base, k);
  if (name == base) name = arena_strdup(s->g->arena, base);
  hmap_put_str(s->names, name, strlen(name), (void *)name);
  return name;
}

static bool fail(grad_state *s, diag_kind kind, diag_loc loc, const char *fmt, const char *a, const char *b) {
  diag_error_kind(s->ctx->diag, kind, loc, fmt, a, b);
  return false;
}

static double default_lr(pass_optimizer o) { return o == PASS_OPT_SGD ? 0.01 : 0.001; }

/* ---- building ---- */

/* A value name derived from a weight key: the key's characters that a name
 * may not hold ([A-Za-z_][A-Za-z0-9_.]*, ir/README.md) become '_', so that
 * `weight="out.ker?el"` gives %out.ker_el.momentum; the key itself stays
 * exact in the weight attribute. */
static const char *safe_name(grad_state *s, const char *key) {
  bool lead = (key[0] >= 'a' && key[0] <= 'z') || (key[0] >= 'A' && key[0] <= 'Z') || key[0] == '_';
  char *n = arena_printf(s->g->arena, "%s%s", lead ? "" : "_", key);
  for (char *p = n; *p; p++)
    if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '_' ||
          *p == '.'))
      *p = '_';
  return n;
}

static ir_node *leaf(grad_state *s, ir_op op, const char *name, ir_type t) {
  ir_node *n = ir_node_new(s->g, op, &t, NULL, 0, unique_name(s, name), no_loc);
  ir_graph_append(s->g, n);
  return n;
}

/* A variable of kind k that starts as `init` everywhere (slots, training
 * scalars). */
static ir_node *state(grad_state *s, ir_state_kind k, const char *weight, ir_type t, double init,
                      const char *note) {
  const char *name = safe_name(s, weight);
  ir_node *n = leaf(s, IR_OP_VARIABLE, name, t);
  n->attr.weight = strcmp(name, weight) == 0 ? n->name : arena_strdup(s->g->arena, weight);
  n->attr.init = init;
  n->attr.kind = k;
  n->note = note;
  return n;
}

static ir_node *literal(grad_state *s, const char *name, ir_dtype dt, double v) {
  ir_node *n = leaf(s, IR_OP_LITERAL, name, (ir_type){dt, 0, {0}});
  n->attr.value = v;
  return n;
}

/* A backward node serving forward node `fwd`: its layer, named `name`. */
static ir_node *named_op(grad_state *s, ir_op o, const ir_node *fwd, const char *name, ir_node *const *srcs, int n,
                         const ir_attr *attr) {
  ir_node *r = ir_build_op(s->g, o, unique_name(s, name), srcs, n, attr, fwd ? fwd->loc : no_loc);
  if (fwd) {
    r->layer = fwd->layer;
    r->policy = fwd->policy;
    r->note = fwd->layer ? arena_printf(s->g->arena, "%s", fwd->layer) : NULL;
  }
  return r;
}

/* A gradient serving forward node `fwd`, named d.<base>. */
static ir_node *op(grad_state *s, ir_op o, const ir_node *fwd, const char *base, ir_node *const *srcs, int n,
                   const ir_attr *attr) {
  char name[512];
  snprintf(name, sizeof name, "d.%s", base);
  return named_op(s, o, fwd, name, srcs, n, attr);
}

/* Adds a gradient contribution to forward node x's adjoint. */
static void accumulate(grad_state *s, ir_node *x, ir_node *d) {
  if (!s->needs[x->id]) return;
  ir_node *prev = s->adjoint[x->id];
  CASTOR_ASSERT(ir_type_eq(&d->type, &x->type));
  s->adjoint[x->id] = prev ? op(s, IR_OP_ADD, x, x->name, (ir_node *[]){prev, d}, 2, &(ir_attr){0}) : d;
}

static ir_node *unary_grad(grad_state *s, ir_op o, const ir_node *fwd, ir_node *dy, ir_node *other) {
  return op(s, o, fwd, fwd->srcs[0]->name, (ir_node *[]){dy, other}, 2, &(ir_attr){0});
}

static ir_node *reduce_to(grad_state *s, const ir_node *fwd, ir_node *d, const ir_node *x);

/* layer_norm(x, gamma, beta): dx = layer_norm_grad(x, gamma, dy); over
 * the rows, dgamma = sum_rows(dy * xhat) with xhat = layer_norm_xhat(x),
 * dbeta = sum_rows(dy) (no sum when x has no row dimension: an unbatched
 * x normalized over all of it). With more dimensions before the
 * normalized ones ([N, T, C]), dgamma and dbeta sum over all of them
 * (sum_to, in a fixed order). */
static bool layer_norm_backward(grad_state *s, ir_node *n, ir_node *dy) {
  ir_node *x = n->srcs[0], *gamma = n->srcs[1], *beta = n->srcs[2];
  ir_attr na = {.axis = n->attr.axis, .epsilon = n->attr.epsilon};
  if (s->needs[x->id])
    accumulate(s, x, op(s, IR_OP_LAYER_NORM_GRAD, n, x->name, (ir_node *[]){x, gamma, dy}, 3, &na));
  if (!s->needs[gamma->id] && !s->needs[beta->id]) return true;
  /* general tensors: summed over every dimension before the normalized
   * ones (reduce_to: sum_rows for [N, C], sum_to for [N, T, C] and more) */
  if (s->needs[gamma->id]) {
    char name[512];
    snprintf(name, sizeof name, "%s.xhat", n->name);
    ir_node *xhat = named_op(s, IR_OP_LAYER_NORM_XHAT, n, name, &x, 1, &na);
    ir_node *dg = op(s, IR_OP_MUL, n, gamma->name, (ir_node *[]){dy, xhat}, 2, &(ir_attr){0});
    accumulate(s, gamma, reduce_to(s, n, dg, gamma));
  }
  if (s->needs[beta->id]) accumulate(s, beta, reduce_to(s, n, dy, beta));
  return true;
}

/* ---- general tensors: layout ops ---- */

/* strided_slice(dy) taking x's block at starts[r] + c * steps[r], counts[r]
 * of them (IR_DIM_BATCH: N whole). */
static ir_node *slice_of(grad_state *s, const ir_node *fwd, const char *base, ir_node *dy, const int64_t *starts,
                         const int64_t *counts, const int64_t *steps) {
  ir_attr a = {0};
  int rank = dy->type.rank;
  a.starts.n = a.ends.n = a.steps.n = rank;
  for (int r = 0; r < rank; r++) {
    bool n = counts[r] == IR_DIM_BATCH;
    a.starts.v[r] = n ? 0 : starts[r];
    a.ends.v[r] = n ? 0 : starts[r] + (counts[r] - 1) * steps[r] + 1;
    a.steps.v[r] = n ? 1 : steps[r];
  }
  return op(s, IR_OP_STRIDED_SLICE, fwd, base, &dy, 1, &a);
}

/* reshape: dy reshaped back; transpose: dy transposed by the inverse
 * permutation; concat: each operand's block of dy; strided_slice: dy placed
 * back into zeros (pad_constant); pad_constant: the block it placed. */
static bool layout_backward(grad_state *s, ir_node *n, ir_node *dy) {
  ir_node *a = n->srcs[0];
  const ir_type *at = &a->type;
  ir_type_rule rule = ir_op_type_rule(n->op);
  if (rule == IR_TYPE_RESHAPE) {
    ir_attr r = {.shape = {at->rank, {0}}};
    for (int d = 0; d < at->rank; d++) r.shape.dims[d] = at->dims[d];
    accumulate(s, a, op(s, IR_OP_RESHAPE, n, a->name, &dy, 1, &r));
  } else if (rule == IR_TYPE_TRANSPOSE) {
    ir_attr r = {.perm = {at->rank, {0}}};
    for (int d = 0; d < at->rank; d++) r.perm.v[n->attr.perm.v[d]] = d;
    accumulate(s, a, op(s, IR_OP_TRANSPOSE, n, a->name, &dy, 1, &r));
  } else if (rule == IR_TYPE_CONCAT) {
    int ax = ir_concat_axis(at, n->attr.axis);
    int64_t off = 0, starts[IR_MAX_RANK] = {0}, steps[IR_MAX_RANK], counts[IR_MAX_RANK];
    for (int k = 0; k < n->n_srcs; k++) {
      ir_node *x = n->srcs[k];
      for (int d = 0; d < at->rank; d++) starts[d] = d == ax ? off : 0, steps[d] = 1, counts[d] = x->type.dims[d];
      if (s->needs[x->id]) accumulate(s, x, slice_of(s, n, x->name, dy, starts, counts, steps));
      off += x->type.dims[ax];
    }
  } else if (rule == IR_TYPE_STRIDED_SLICE) {
    int64_t starts[IR_MAX_RANK], counts[IR_MAX_RANK];
    char err[256];
    CASTOR_ASSERT(ir_strided_slice_bounds(at, &n->attr, starts, counts, err, sizeof err));
    ir_attr r = {.shape = {at->rank, {0}}, .value = 0};
    r.starts.n = r.steps.n = at->rank;
    for (int d = 0; d < at->rank; d++)
      r.shape.dims[d] = at->dims[d], r.starts.v[d] = starts[d], r.steps.v[d] = n->attr.steps.v[d];
    accumulate(s, a, op(s, IR_OP_PAD_CONSTANT, n, a->name, &dy, 1, &r));
  } else if (rule == IR_TYPE_GATHER) {
    ir_attr r = {.axis = n->attr.axis, .shape = {at->rank, {0}}};
    for (int d = 0; d < at->rank; d++) r.shape.dims[d] = at->dims[d];
    accumulate(s, a, op(s, IR_OP_GATHER_GRAD, n, a->name, (ir_node *[]){dy, n->srcs[1]}, 2, &r));
  } else {
    CASTOR_ASSERT(rule == IR_TYPE_PAD_CONSTANT);
    accumulate(s, a, slice_of(s, n, a->name, dy, n->attr.starts.v, at->dims, n->attr.steps.v));
  }
  return true;
}

/* ---- general tensors: the binary ops under numpy broadcasting ---- */

/* d summed back to x's shape, over the dimensions x was broadcast along
 * (numpy's reduce-to-shape), in a fixed order: sum_rows for a vector over
 * the last dimension of a matrix, sum_to otherwise; d itself when x has
 * its shape. */
static ir_node *reduce_to(grad_state *s, const ir_node *fwd, ir_node *d, const ir_node *x) {
  bool same = d->type.rank == x->type.rank;
  for (int r = 0; same && r < x->type.rank; r++) same = d->type.dims[r] == x->type.dims[r];
  if (same) return d;
  ir_attr attr = {.acc = DT_F32};
  if (d->type.rank == 2 && x->type.rank == 1 && x->type.dims[0] == d->type.dims[1])
    return op(s, IR_OP_SUM_ROWS, fwd, x->name, &d, 1, &attr);
  attr.shape.rank = x->type.rank;
  for (int r = 0; r < x->type.rank; r++) attr.shape.dims[r] = x->type.dims[r];
  return op(s, IR_OP_SUM_TO, fwd, x->name, &d, 1, &attr);
}

static ir_node *negate(grad_state *s, const ir_node *fwd, const char *base, ir_node *d) {
  ir_node *m1 = literal(s, "minus_one", d->type.dtype, -1.0);
  return op(s, IR_OP_MUL, fwd, base, (ir_node *[]){d, m1}, 2, &(ir_attr){0});
}

/* add, sub, mul, div, maximum, minimum, pow of a and b broadcast to n's
 * shape: each operand's gradient at n's shape, then summed back to its own
 * (TF's rules: maximum's ties go to a, minimum's to a; pow's gradient for
 * its exponent is 0 where the base is <= 0). */
static bool binary_backward(grad_state *s, ir_node *n, ir_node *dy) {
  ir_node *a = n->srcs[0], *b = n->srcs[1], *da = NULL, *db = NULL;
  const ir_attr none = {0};
  bool na = s->needs[a->id], nb = s->needs[b->id];
  if (n->op == IR_OP_ADD) {
    da = dy, db = dy;
  } else if (n->op == IR_OP_SUB) {
    da = dy, db = nb ? negate(s, n, b->name, dy) : NULL;
  } else if (n->op == IR_OP_MUL) {
    if (na) da = op(s, IR_OP_MUL, n, a->name, (ir_node *[]){dy, b}, 2, &none);
    if (nb) db = op(s, IR_OP_MUL, n, b->name, (ir_node *[]){dy, a}, 2, &none);
  } else if (n->op == IR_OP_DIV) { /* da = dy / b; db = -dy * y / b */
    if (na) da = op(s, IR_OP_DIV, n, a->name, (ir_node *[]){dy, b}, 2, &none);
    if (nb) {
      ir_node *t = op(s, IR_OP_MUL, n, b->name, (ir_node *[]){dy, n}, 2, &none);
      db = negate(s, n, b->name, op(s, IR_OP_DIV, n, b->name, (ir_node *[]){t, b}, 2, &none));
    }
  } else if (n->op == IR_OP_MAXIMUM || n->op == IR_OP_MINIMUM) {
    /* where a wins (a >= b, or a <= b): dy to a; elsewhere dy to b */
    bool mx = n->op == IR_OP_MAXIMUM;
    da = op(s, IR_OP_SELECT_GE, n, a->name, (ir_node *[]){dy, mx ? a : b, mx ? b : a}, 3, &none);
    if (nb) db = op(s, IR_OP_SUB, n, b->name, (ir_node *[]){dy, da}, 2, &none);
  } else {
    CASTOR_ASSERT(n->op == IR_OP_POW);
    if (na) da = op(s, IR_OP_POW_GRAD, n, a->name, (ir_node *[]){dy, a, b}, 3, &none);
    if (nb) db = op(s, IR_OP_POW_GRAD_EXP, n, b->name, (ir_node *[]){dy, a, n}, 3, &none);
  }
  if (na) accumulate(s, a, reduce_to(s, n, da, a));
  if (nb) accumulate(s, b, reduce_to(s, n, db, b));
  return true;
}

/* ---- general tensors: the unary element-wise ops and select ---- */

static ir_node *scaled(grad_state *s, const ir_node *fwd, const char *base, ir_node *d, double k) {
  ir_node *c = literal(s, "k", d->type.dtype, k);
  return op(s, IR_OP_MUL, fwd, base, (ir_node *[]){d, c}, 2, &(ir_attr){0});
}

/* The gradient of unary op n (y = n, x = its operand) for dy. */
static ir_node *unary_backward(grad_state *s, ir_node *n, ir_node *dy) {
  ir_node *x = n->srcs[0];
  const char *base = x->name;
  const ir_attr none = {0};
  ir_op helper = IR_OP_COUNT;
  if (n->op == IR_OP_EXP) return op(s, IR_OP_MUL, n, base, (ir_node *[]){dy, n}, 2, &none); /* dy y */
  if (n->op == IR_OP_LOG) return op(s, IR_OP_DIV, n, base, (ir_node *[]){dy, x}, 2, &none); /* dy / x */
  if (n->op == IR_OP_SQRT) return op(s, IR_OP_DIV, n, base, (ir_node *[]){scaled(s, n, base, dy, 0.5), n}, 2, &none);
  if (n->op == IR_OP_RSQRT) { /* -dy y^3 / 2 */
    ir_node *y2 = op(s, IR_OP_MUL, n, base, (ir_node *[]){n, n}, 2, &none);
    ir_node *y3 = op(s, IR_OP_MUL, n, base, (ir_node *[]){y2, n}, 2, &none);
    return op(s, IR_OP_MUL, n, base, (ir_node *[]){scaled(s, n, base, dy, -0.5), y3}, 2, &none);
  }
  if (n->op == IR_OP_NEG) return scaled(s, n, base, dy, -1.0);
  if (n->op == IR_OP_SOFTPLUS) { /* dy sigmoid(x) */
    ir_node *sg = op(s, IR_OP_SIGMOID, n, base, &x, 1, &none);
    return op(s, IR_OP_MUL, n, base, (ir_node *[]){dy, sg}, 2, &none);
  }
  if (n->op == IR_OP_ABS) helper = IR_OP_ABS_GRAD;
  else if (n->op == IR_OP_ERF) helper = IR_OP_ERF_GRAD;
  else if (n->op == IR_OP_LEAKY_RELU) helper = IR_OP_LEAKY_RELU_GRAD;
  else if (n->op == IR_OP_ELU) helper = IR_OP_ELU_GRAD;
  else if (n->op == IR_OP_HARD_SIGMOID) helper = IR_OP_HARD_SIGMOID_GRAD;
  else helper = IR_OP_CLIP_GRAD;
  CASTOR_ASSERT(n->op == IR_OP_CLIP || helper != IR_OP_CLIP_GRAD);
  return op(s, helper, n, base, (ir_node *[]){dy, x}, 2, &n->attr); /* the same alpha or bounds */
}

/* select(c, a, b): dy where c holds to a, elsewhere to b, each summed back
 * to its shape; the condition has none. */
static bool select_backward(grad_state *s, ir_node *n, ir_node *dy) {
  ir_node *c = n->srcs[0], *a = n->srcs[1], *b = n->srcs[2];
  ir_node *zero = literal(s, "zero", dy->type.dtype, 0.0);
  const ir_attr none = {0};
  if (s->needs[a->id])
    accumulate(s, a, reduce_to(s, n, op(s, IR_OP_SELECT, n, a->name, (ir_node *[]){c, dy, zero}, 3, &none), a));
  if (s->needs[b->id])
    accumulate(s, b, reduce_to(s, n, op(s, IR_OP_SELECT, n, b->name, (ir_node *[]){c, zero, dy}, 3, &none), b));
  return true;
}

/* general tensors: the reductions and broadcast_to (the rules above). */
static bool reduce_backward(grad_state *s, ir_node *n, ir_node *dy) {
  ir_node *x = n->srcs[0];
  const char *base = x->name;
  if (n->op == IR_OP_BROADCAST_TO) {
    accumulate(s, x, reduce_to(s, n, dy, x));
    return true;
  }
  if (n->op == IR_OP_REDUCE_MAX || n->op == IR_OP_REDUCE_MIN) {
    ir_op g = n->op == IR_OP_REDUCE_MAX ? IR_OP_REDUCE_MAX_GRAD : IR_OP_REDUCE_MIN_GRAD;
    accumulate(s, x, op(s, g, n, base, (ir_node *[]){dy, x}, 2, &n->attr));
    return true;
  }
  bool reduced[IR_MAX_RANK];
  char err[256];
  CASTOR_ASSERT(ir_reduce_dims(n->op, &x->type, &n->attr, reduced, err, sizeof err));
  ir_attr keep = {.shape = {x->type.rank, {0}}}, to = {.shape = {x->type.rank, {0}}};
  int64_t count = 1;
  for (int d = 0; d < x->type.rank; d++) {
    keep.shape.dims[d] = reduced[d] ? 1 : x->type.dims[d];
    to.shape.dims[d] = x->type.dims[d];
    if (reduced[d]) count *= x->type.dims[d];
  }
  ir_node *d = dy;
  if (!n->attr.keepdims) d = op(s, IR_OP_RESHAPE, n, base, &d, 1, &keep);
  d = op(s, IR_OP_BROADCAST_TO, n, base, &d, 1, &to);
  if (n->op == IR_OP_REDUCE_MEAN) d = scaled(s, n, base, d, 1.0 / (double)count);
  accumulate(s, x, d);
  return true;
}

/* ---- general tensors: batched matmul ----
 * y = A B with A = a or a^T ({transpose_a}), B = b or b^T: dA = dy B^T and
 * dB = A^T dy are batch_matmuls again, the flags choosing the transposes so
 * that each gradient comes out in its operand's stored orientation, at the
 * result's leading dimensions, then summed back to the operand's shape
 * over the dimensions it was broadcast along (reduce_to: a fixed order). */
static bool batch_matmul_backward(grad_state *s, ir_node *n, ir_node *dy) {
  ir_node *a = n->srcs[0], *b = n->srcs[1];
  int64_t ta = n->attr.transpose_a, tb = n->attr.transpose_b;
  if (s->needs[a->id]) { /* a: dy B^T, or stored transposed B dy^T */
    ir_attr at = {.acc = DT_F32, .transpose_a = ta ? tb : 0, .transpose_b = ta ? 1 : !tb};
    ir_node *srcs[2] = {ta ? b : dy, ta ? dy : b};
    accumulate(s, a, reduce_to(s, n, op(s, IR_OP_BATCH_MATMUL, n, a->name, srcs, 2, &at), a));
  }
  if (s->needs[b->id]) { /* b: A^T dy, or stored transposed dy^T A */
    ir_attr at = {.acc = DT_F32, .transpose_a = tb ? 1 : !ta, .transpose_b = tb ? ta : 0};
    ir_node *srcs[2] = {tb ? dy : a, tb ? a : dy};
    accumulate(s, b, reduce_to(s, n, op(s, IR_OP_BATCH_MATMUL, n, b->name, srcs, 2, &at), b));
  }
  return true;
}

/* ---- recurrent layers: backpropagation through time ----
 * g = <op>_grad(operands, y, dy) [N,T,2GH+2H] (ir_ops.def's layout); dxp its
 * first G*H columns; dr = matmul_tn(p1, du) (gru with its reset gate before:
 * p1 for the z and r blocks, p2 = g h for h's), summed over every row in
 * order; drb = sum_to(du). The initial states get no gradient: a state that
 * depends on a variable is refused. */
static bool rnn_backward(grad_state *s, ir_node *n, ir_node *dy) {
  int gates = ir_rnn_gates(n->op), states = ir_rnn_states(n->op), k = gates == 3 ? 3 : 2;
  for (int i = k; i < k + states; i++)
    if (s->needs[n->srcs[i]->id])
      return fail(s, DIAG_KIND_UNSUPPORTED, n->loc,
                  "%%%s: its initial state %%%s depends on a weight; castor's backpropagation through time gives "
                  "no gradient to initial states", n->name, n->srcs[i]->name);
  static const ir_op grad_of[] = {[1] = IR_OP_SIMPLE_RNN_GRAD, [3] = IR_OP_GRU_GRAD, [4] = IR_OP_LSTM_GRAD};
  ir_node *srcs[IR_MAX_SRCS];
  int ns = 0;
  for (int i = 0; i < n->n_srcs; i++) srcs[ns++] = n->srcs[i];
  srcs[ns++] = n, srcs[ns++] = dy;
  ir_node *g = op(s, grad_of[gates], n, n->name, srcs, ns, &n->attr);
  int64_t h = n->srcs[1]->type.dims[0], gh = gates * h, nb = g->type.dims[0], t = g->type.dims[1];
  const int64_t steps[3] = {1, 1, 1};
#define COLS(base, c0, w) slice_of(s, n, base, g, (int64_t[]){0, 0, (c0)}, (int64_t[]){nb, t, (w)}, steps)
  ir_node *xp = n->srcs[0], *r = n->srcs[1];
  if (s->needs[xp->id]) accumulate(s, xp, COLS(xp->name, 0, gh));
  bool before = gates == 3 && !n->attr.reset_after;
  if (s->needs[r->id]) {
    ir_attr acc = {.acc = DT_F32};
    ir_node *p1 = COLS(arena_printf(s->g->arena, "%s.p1", n->name), 2 * gh, h), *dr;
    if (before) {
      ir_node *p2 = COLS(arena_printf(s->g->arena, "%s.p2", n->name), 2 * gh + h, h);
      ir_node *du_zr = COLS(arena_printf(s->g->arena, "%s.du_zr", n->name), gh, 2 * h);
      ir_node *du_h = COLS(arena_printf(s->g->arena, "%s.du_h", n->name), gh + 2 * h, h);
      ir_node *parts[2] = {op(s, IR_OP_MATMUL_TN, n, arena_printf(s->g->arena, "%s.zr", r->name),
                              (ir_node *[]){p1, du_zr}, 2, &acc),
                           op(s, IR_OP_MATMUL_TN, n, arena_printf(s->g->arena, "%s.h", r->name),
                              (ir_node *[]){p2, du_h}, 2, &acc)};
      dr = op(s, IR_OP_CONCAT, n, r->name, parts, 2, &(ir_attr){.axis = 1});
    } else {
      ir_node *du = COLS(arena_printf(s->g->arena, "%s.du", n->name), gh, gh);
      dr = op(s, IR_OP_MATMUL_TN, n, r->name, (ir_node *[]){p1, du}, 2, &acc);
    }
    accumulate(s, r, dr);
  }
  if (gates == 3 && s->needs[n->srcs[2]->id]) {
    ir_node *rb = n->srcs[2];
    ir_attr a = {.acc = DT_F32, .shape = {1, {gh}}};
    ir_node *du = COLS(arena_printf(s->g->arena, "%s.du", rb->name), gh, gh);
    accumulate(s, rb, op(s, IR_OP_SUM_TO, n, rb->name, &du, 1, &a));
  }
#undef COLS
  return true;
}

/* Propagates node n's adjoint to its operands (the rules above). */
/* ---- CNN: batch normalization ---- */

static ir_node *bn_op(grad_state *s, const ir_node *n, const char *base, ir_op o, ir_node *a, ir_node *b,
                      const ir_attr *attr) {
  ir_node *srcs[2] = {a, b};
  return op(s, o, n, base, srcs, b ? 2 : 1, attr);
}

static bool batch_norm_backward(grad_state *s, ir_node *n, ir_node *dy) {
  ir_node *x = n->srcs[0], *gamma = n->srcs[1], *beta = n->srcs[2], *mean = n->srcs[3], *var = n->srcs[4];
  const ir_attr none = {0};
  if (!(mean->op == IR_OP_BN_MEAN && mean->srcs[0] == x && var->op == IR_OP_BN_MEAN))
    return fail(s, DIAG_KIND_INTERNAL, n->loc, "grad: %s (%%%s) has no batch statistics (grad_bn.c)",
                ir_op_name(n->op), n->name);
  const char *base = n->name;
  ir_node *eps = literal(s, "epsilon", var->type.dtype, n->attr.epsilon);
  ir_node *inv = bn_op(s, n, base, IR_OP_RSQRT, bn_op(s, n, base, IR_OP_ADD, var, eps, &none), NULL, &none);
  ir_node *xc = var->srcs[0]->srcs[0]; /* x - mean (grad_bn.c) */
  ir_node *xhat = bn_op(s, n, base, IR_OP_MUL, xc, inv, &none);
  ir_node *dyx = s->needs[gamma->id] || s->needs[x->id] ? bn_op(s, n, base, IR_OP_MUL, dy, xhat, &none) : NULL;
  if (s->needs[x->id]) { /* k (dy - mean(dy) - xhat mean(dy xhat)), k = gamma inv */
    ir_attr ma = {0};
    ma.shape.rank = mean->type.rank;
    for (int r = 0; r < mean->type.rank; r++) ma.shape.dims[r] = mean->type.dims[r];
    ir_node *k = bn_op(s, n, base, IR_OP_MUL, gamma, inv, &none);
    ir_node *m1 = bn_op(s, n, x->name, IR_OP_BN_MEAN, dy, NULL, &ma);
    ir_node *m2 = bn_op(s, n, x->name, IR_OP_BN_MEAN, dyx, NULL, &ma);
    ir_node *t = bn_op(s, n, x->name, IR_OP_SUB, dy, m1, &none);
    t = bn_op(s, n, x->name, IR_OP_SUB, t, bn_op(s, n, x->name, IR_OP_MUL, xhat, m2, &none), &none);
    accumulate(s, x, bn_op(s, n, x->name, IR_OP_MUL, t, k, &none));
  }
  if (s->needs[gamma->id]) accumulate(s, gamma, reduce_to(s, n, dyx, gamma));
  if (s->needs[beta->id]) accumulate(s, beta, reduce_to(s, n, dy, beta));
  return true;
}

/* A transposed convolution y = conv2d_input_grad(a, w) (group_ for
 * groups) as a model op: y sums a's elements through w into the shape of
 * the convolution's input, so its gradient for a is that convolution of dy
 * (conv2d / group_conv2d with the same strides, dilations and pads: a
 * gather, no scatter), and for w the filter gradient of that convolution
 * with dy as its input and a as its output gradient. */
static bool conv_transpose_backward(grad_state *s, ir_node *n, ir_node *dy) {
  ir_node *a = n->srcs[0], *w = n->srcs[1];
  bool grouped = n->op == IR_OP_GROUP_CONV2D_INPUT_GRAD;
  ir_attr ca = {.acc = DT_F32, .strides = n->attr.strides, .dilations = n->attr.dilations, .pads = n->attr.pads};
  if (s->needs[a->id])
    accumulate(s, a, op(s, grouped ? IR_OP_GROUP_CONV2D : IR_OP_CONV2D, n, a->name, (ir_node *[]){dy, w}, 2, &ca));
  ca.shape.rank = w->type.rank;
  for (int r = 0; r < w->type.rank; r++) ca.shape.dims[r] = w->type.dims[r];
  if (s->needs[w->id])
    accumulate(s, w, op(s, grouped ? IR_OP_GROUP_CONV2D_FILTER_GRAD : IR_OP_CONV2D_FILTER_GRAD, n, w->name,
                        (ir_node *[]){dy, a}, 2, &ca));
  return true;
}

static bool backward(grad_state *s, ir_node *n) {
  ir_node *dy = s->adjoint[n->id];
  ir_node *a = n->n_srcs > 0 ? n->srcs[0] : NULL, *b = n->n_srcs > 1 ? n->srcs[1] : NULL;
  ir_attr acc = {.acc = DT_F32};
  switch (n->op) {
  case IR_OP_MATMUL:
    if (s->needs[a->id]) accumulate(s, a, op(s, IR_OP_MATMUL_NT, n, a->name, (ir_node *[]){dy, b}, 2, &acc));
    if (s->needs[b->id]) accumulate(s, b, op(s, IR_OP_MATMUL_TN, n, b->name, (ir_node *[]){a, dy}, 2, &acc));
    return true;
  case IR_OP_ADD:
  case IR_OP_MUL: return binary_backward(s, n, dy);
  case IR_OP_RELU: accumulate(s, a, unary_grad(s, IR_OP_RELU_GRAD, n, dy, a)); return true;
  case IR_OP_GELU: accumulate(s, a, unary_grad(s, IR_OP_GELU_GRAD, n, dy, a)); return true;
  case IR_OP_SILU: accumulate(s, a, unary_grad(s, IR_OP_SILU_GRAD, n, dy, a)); return true;
  case IR_OP_SIGMOID: accumulate(s, a, unary_grad(s, IR_OP_SIGMOID_GRAD, n, dy, n)); return true;
  case IR_OP_TANH: accumulate(s, a, unary_grad(s, IR_OP_TANH_GRAD, n, dy, n)); return true;
  case IR_OP_SOFTMAX: accumulate(s, a, unary_grad(s, IR_OP_SOFTMAX_GRAD, n, dy, n)); return true;
  case IR_OP_CAST: {
    if (!dtype_is_float(a->type.dtype) || !dtype_is_float(n->type.dtype))
      return true; /* integers and booleans have no gradient */
    ir_attr to = {.to = a->type.dtype};
    ir_node *d = op(s, IR_OP_CAST, n, a->name, &dy, 1, &to);
    const char *layer = n->layer ? n->layer : a->name;
    d->layer = n->layer;
    d->rule = n->rule;
    d->note = arena_printf(s->g->arena, "autocast: %s gradient back to %s (transposes %%%s%s%s)", layer,
                           dtype_name(to.to), n->name, n->rule ? ": " : "", n->rule ? n->rule : "");
    accumulate(s, a, d);
    return true;
  }
  case IR_OP_PAD:
  case IR_OP_SLICE: {
    ir_attr shape = {.shape = {a->type.rank, {0}}};
    for (int r = 0; r < a->type.rank; r++) shape.shape.dims[r] = a->type.dims[r];
    accumulate(s, a, op(s, n->op == IR_OP_PAD ? IR_OP_SLICE : IR_OP_PAD, n, a->name, &dy, 1, &shape));
    return true;
  }
  case IR_OP_LAYER_NORM: return layer_norm_backward(s, n, dy);
  case IR_OP_INPUT:
  case IR_OP_CONST:
  case IR_OP_VARIABLE:
  case IR_OP_LITERAL:
    return true; /* leaves: the adjoint is the result */
  case IR_OP_MATMUL_NT:
  case IR_OP_MATMUL_TN:
  case IR_OP_SUM_ROWS:
  case IR_OP_RELU_GRAD:
  case IR_OP_SIGMOID_GRAD:
  case IR_OP_TANH_GRAD:
  case IR_OP_GELU_GRAD:
  case IR_OP_SILU_GRAD:
  case IR_OP_SOFTMAX_GRAD:
  case IR_OP_LAYER_NORM_GRAD:
  case IR_OP_LAYER_NORM_XHAT:
  case IR_OP_XENT:
  case IR_OP_XENT_GRAD:
  case IR_OP_XENT_LOGITS:
  case IR_OP_XENT_LOGITS_GRAD:
  case IR_OP_MSE:
  case IR_OP_MSE_GRAD:
  case IR_OP_ALL_FINITE:
  case IR_OP_SGD:
  case IR_OP_SGD_MOMENTUM:
  case IR_OP_RMSPROP:
  case IR_OP_RMSPROP_MOMENTUM:
  case IR_OP_RMSPROP_CENTERED:
  case IR_OP_RMSPROP_CENTERED_MOMENTUM:
  case IR_OP_ADAM:
  case IR_OP_COUNT_STEP:
  case IR_OP_LOSS_SCALE_UPDATE:
  case IR_OP_ADAMW: /* training options */
  case IR_OP_GRAD_NORM_SQ:
  case IR_OP_CLIP_SCALE:
  case IR_OP_CLIP_VALUE:
    return fail(s, DIAG_KIND_INVALID_MODEL, n->loc, "%s (%%%s) is part of a training program already: grad runs on a model",
                ir_op_name(n->op), n->name);
  /* general tensors: layout ops */
  case IR_OP_RESHAPE:
  case IR_OP_TRANSPOSE:
  case IR_OP_CONCAT:
  case IR_OP_STRIDED_SLICE:
  case IR_OP_PAD_CONSTANT:
  case IR_OP_GATHER: return layout_backward(s, n, dy);
  case IR_OP_GATHER_GRAD:
    return fail(s, DIAG_KIND_INVALID_MODEL, n->loc, "%s (%%%s) is part of a training program already: grad runs on a model",
                ir_op_name(n->op), n->name);
  /* convolutional networks */
  case IR_OP_CONV2D: { /* dx gathers dy through w (no scatter); dw sums x's windows times dy over the batch */
    ir_attr ga = {.acc = DT_F32, .strides = n->attr.strides, .dilations = n->attr.dilations, .pads = n->attr.pads};
    ga.shape.rank = a->type.rank;
    for (int r = 0; r < a->type.rank; r++) ga.shape.dims[r] = a->type.dims[r];
    if (s->needs[a->id]) accumulate(s, a, op(s, IR_OP_CONV2D_INPUT_GRAD, n, a->name, (ir_node *[]){dy, b}, 2, &ga));
    ga.shape.rank = b->type.rank;
    for (int r = 0; r < b->type.rank; r++) ga.shape.dims[r] = b->type.dims[r];
    if (s->needs[b->id]) accumulate(s, b, op(s, IR_OP_CONV2D_FILTER_GRAD, n, b->name, (ir_node *[]){a, dy}, 2, &ga));
    return true;
  }
  case IR_OP_MAX_POOL2D:
  case IR_OP_AVG_POOL2D: { /* a gather per element of x: no scatter */
    ir_attr pa = {.pool = n->attr.pool, .strides = n->attr.strides, .pads = n->attr.pads};
    ir_op g = n->op == IR_OP_MAX_POOL2D ? IR_OP_MAX_POOL2D_GRAD : IR_OP_AVG_POOL2D_GRAD;
    accumulate(s, a, op(s, g, n, a->name, (ir_node *[]){dy, a}, 2, &pa));
    return true;
  }
  case IR_OP_CONV2D_INPUT_GRAD: /* a model's transposed convolution (Keras Conv2DTranspose, ONNX ConvTranspose) */
  case IR_OP_GROUP_CONV2D_INPUT_GRAD:
    return conv_transpose_backward(s, n, dy);
  case IR_OP_MAX_POOL2D_GRAD:
  case IR_OP_AVG_POOL2D_GRAD:
  case IR_OP_CONV2D_FILTER_GRAD:
  /* general tensors: gradient helpers */
  case IR_OP_SELECT_GE:
  case IR_OP_POW_GRAD:
  case IR_OP_POW_GRAD_EXP:
  case IR_OP_SUM_TO:
  case IR_OP_ABS_GRAD:
  case IR_OP_ERF_GRAD:
  case IR_OP_LEAKY_RELU_GRAD:
  case IR_OP_ELU_GRAD:
  case IR_OP_HARD_SIGMOID_GRAD:
  case IR_OP_CLIP_GRAD:
    return fail(s, DIAG_KIND_INVALID_MODEL, n->loc, "%s (%%%s) is part of a training program already: grad runs on a model",
                ir_op_name(n->op), n->name);
  /* general tensors: element-wise */
  case IR_OP_SUB:
  case IR_OP_DIV:
  case IR_OP_MAXIMUM:
  case IR_OP_MINIMUM:
  case IR_OP_POW: return binary_backward(s, n, dy);
  case IR_OP_EXP:
  case IR_OP_LOG:
  case IR_OP_SQRT:
  case IR_OP_RSQRT:
  case IR_OP_NEG:
  case IR_OP_ABS:
  case IR_OP_ERF:
  case IR_OP_LEAKY_RELU:
  case IR_OP_ELU:
  case IR_OP_SOFTPLUS:
  case IR_OP_HARD_SIGMOID:
  case IR_OP_CLIP: accumulate(s, a, unary_backward(s, n, dy)); return true;
  case IR_OP_SELECT: return select_backward(s, n, dy);
  /* CNN: batch normalization */
  case IR_OP_BATCH_NORM: return batch_norm_backward(s, n, dy);
  case IR_OP_BN_MEAN:
  case IR_OP_MOVING_UPDATE: return fail(s, DIAG_KIND_INTERNAL, n->loc, "grad: %s (%%%s) is a training op", ir_op_name(n->op), n->name);
  /* general tensors: dropout (the same mask for the gradient) */
  case IR_OP_DROPOUT: accumulate(s, a, dy); return true;
  case IR_OP_DROPOUT_TRAIN:
    accumulate(s, a, op(s, IR_OP_DROPOUT_TRAIN, n, a->name, (ir_node *[]){dy, b}, 2, &n->attr));
    return true;
  /* general tensors: reductions, broadcast_to */
  case IR_OP_REDUCE_SUM:
  case IR_OP_REDUCE_MEAN:
  case IR_OP_REDUCE_MAX:
  case IR_OP_REDUCE_MIN:
  case IR_OP_BROADCAST_TO: return reduce_backward(s, n, dy);
  case IR_OP_LOG_SOFTMAX: accumulate(s, a, unary_grad(s, IR_OP_LOG_SOFTMAX_GRAD, n, dy, n)); return true;
  case IR_OP_REDUCE_MAX_GRAD:
  case IR_OP_REDUCE_MIN_GRAD:
  case IR_OP_LOG_SOFTMAX_GRAD:
    return fail(s, DIAG_KIND_INVALID_MODEL, n->loc, "%s (%%%s) is part of a training program already: grad runs on a model",
                ir_op_name(n->op), n->name);
  /* convolutional networks: grouped convolution, as conv2d's rule with the group ops */
  case IR_OP_GROUP_CONV2D: {
    ir_attr ga = {.acc = DT_F32, .strides = n->attr.strides, .dilations = n->attr.dilations, .pads = n->attr.pads};
    ga.shape.rank = a->type.rank;
    for (int r = 0; r < a->type.rank; r++) ga.shape.dims[r] = a->type.dims[r];
    if (s->needs[a->id]) accumulate(s, a, op(s, IR_OP_GROUP_CONV2D_INPUT_GRAD, n, a->name, (ir_node *[]){dy, b}, 2, &ga));
    ga.shape.rank = b->type.rank;
    for (int r = 0; r < b->type.rank; r++) ga.shape.dims[r] = b->type.dims[r];
    if (s->needs[b->id]) accumulate(s, b, op(s, IR_OP_GROUP_CONV2D_FILTER_GRAD, n, b->name, (ir_node *[]){a, dy}, 2, &ga));
    return true;
  }
  case IR_OP_GROUP_CONV2D_FILTER_GRAD:
    return fail(s, DIAG_KIND_INVALID_MODEL, n->loc, "%s (%%%s) is part of a training program already: grad runs on a model",
                ir_op_name(n->op), n->name);
  /* general tensors: batched matmul */
  case IR_OP_BATCH_MATMUL: return batch_matmul_backward(s, n, dy);
  /* recurrent layers: backpropagation through time */
  case IR_OP_SIMPLE_RNN:
  case IR_OP_GRU:
  case IR_OP_LSTM: return rnn_backward(s, n, dy);
  case IR_OP_SIMPLE_RNN_GRAD:
  case IR_OP_GRU_GRAD:
  case IR_OP_LSTM_GRAD:
    return fail(s, DIAG_KIND_INVALID_MODEL, n->loc, "%s (%%%s) is part of a training program already: grad runs on a model",
                ir_op_name(n->op), n->name);
  /* integers and booleans: piecewise constant, so no gradient flows to
   * their operands (and none reaches them: their results are not float) */
  case IR_OP_EQUAL:
  case IR_OP_LESS:
  case IR_OP_LESS_EQUAL:
  case IR_OP_LOGICAL_AND:
  case IR_OP_LOGICAL_OR:
  case IR_OP_LOGICAL_XOR:
  case IR_OP_LOGICAL_NOT:
  case IR_OP_IS_NAN: return true;
  case IR_OP_COUNT: break;
  }
  CASTOR_UNREACHABLE();
  return false;
}

/* ---- weights become variables ---- */

static ir_policy policy_of(const ir_graph *g, const ir_node *n) {
  return n->policy != IR_POLICY_NONE ? n->policy : g->policy;
}

/* Constant c becomes a variable in its layer's variable dtype vd. When vd
 * is 16-bit, c's casts to vd become the variable itself (their data
 * converted here, rounding to nearest even as fold-constants does). */
static void make_variable(grad_state *s, ir_node *c, int uses) {
  ir_dtype vd = ir_policy_variable_dtype(policy_of(s->g, c));
  c->op = IR_OP_VARIABLE;
  c->attr.init = 0;
  c->attr.kind = IR_STATE_WEIGHT; /* every loaded weight is trained (nontrainable ones come with batch norm) */
  if (vd == c->type.dtype || c->type.dtype != DT_F32) return;
  if (uses > 1) return; /* also used as it is (a layer of another policy shares it: fuzz_grad): stays f32 */
  ir_node *cast = NULL;
  for (int i = c->id + 1; i < s->n_fwd && !cast; i++) {
    ir_node *u = s->g->nodes[i];
    if (u->op == IR_OP_CAST && u->srcs[0] == c && u->type.dtype == vd) cast = u;
  }
  if (!cast) return; /* used in f32 only (a layer with dtype=float32 would have its own policy) */
  if (c->attr.data) {
    int64_t n = 0;
    CASTOR_ASSERT(ir_type_numel(&c->type, 1, &n));
    uint16_t *d = arena_alloc_aligned(s->g->arena, (size_t)n * 2 + 2, 64);
    const float *f = c->attr.data;
    for (int64_t i = 0; i < n; i++) d[i] = vd == DT_F16 ? half_f32_to_f16(f[i]) : half_f32_to_bf16(f[i]);
    c->attr.data = d;
  }
  c->type.dtype = vd;
  c->note = arena_printf(s->g->arena, "%s (variable in %s: %s policy)", c->layer ? c->layer : c->attr.weight,
                         dtype_name(vd), ir_policy_name(policy_of(s->g, c)));
  ir_graph_replace_uses(s->g, cast, c); /* the cast is dead now */
}

/* ---- the loss ---- */

/* The softmax the prediction is (through casts), or NULL. */
static ir_node *softmax_of(ir_node *p) {
  while (p->op == IR_OP_CAST) p = p->srcs[0];
  return p->op == IR_OP_SOFTMAX ? p : NULL;
}

/* ---- the optimizer ---- */

typedef struct opt_scalars {
  ir_node *lr, *scale, *ok, *steps;
} opt_scalars;

/* all_finite over the gradients, 8 operands a node, chained. */
static ir_node *all_finite(grad_state *s, ir_node **grads, int n) {
  ir_node *ok = NULL;
  for (int i = 0; i < n;) {
    ir_node *srcs[IR_MAX_SRCS];
    int k = 0;
    if (ok) srcs[k++] = ok;
    while (k < IR_MAX_SRCS && i < n) srcs[k++] = grads[i++];
    ok = ir_build_op(s->g, IR_OP_ALL_FINITE, unique_name(s, "grads_finite"), srcs, k, &(ir_attr){0},
                     no_loc);
    ok->note = "the loss scale's check: every scaled gradient finite";
  }
  return ok;
}

static void update(grad_state *s, ir_node *w, ir_node *gw, const opt_scalars *sc) {
  const pass_train_options *o = s->o;
  ir_node *srcs[IR_MAX_SRCS];
  ir_attr attr = {0};
  ir_op uop;
  int n = 0;
  char slot[512];
  srcs[n++] = w;
#define SLOT(suffix)                                                                              \
  (snprintf(slot, sizeof slot, "%s." suffix, w->attr.weight),                                     \
   srcs[n++] = state(s, IR_STATE_SLOT, slot, w->type, 0,                                          \
                     arena_printf(s->g->arena, "%s's " suffix, w->attr.weight)))
  switch (o->optimizer) {
  case PASS_OPT_SGD:
    if (o->momentum > 0) {
      uop = IR_OP_SGD_MOMENTUM;
      SLOT("momentum");
      attr.momentum = o->momentum;
      attr.nesterov = o->nesterov;
    } else {
      uop = IR_OP_SGD;
    }
    break;
  case PASS_OPT_RMSPROP: /* operands w, v, [a], [m]: one op per variant */
    SLOT("velocity");
    if (o->centered) SLOT("average_gradient");
    if (o->momentum > 0) SLOT("momentum");
    uop = o->centered ? (o->momentum > 0 ? IR_OP_RMSPROP_CENTERED_MOMENTUM : IR_OP_RMSPROP_CENTERED)
                      : (o->momentum > 0 ? IR_OP_RMSPROP_MOMENTUM : IR_OP_RMSPROP);
    attr.momentum = o->momentum;
    attr.rho = o->rho > 0 ? o->rho : 0.9;
    attr.epsilon = o->epsilon > 0 ? o->epsilon : 1e-7;
    break;
  case PASS_OPT_ADAM:
  case PASS_OPT_ADAMW: /* AdamW: Adam after Keras's decoupled weight decay */
    uop = o->optimizer == PASS_OPT_ADAMW ? IR_OP_ADAMW : IR_OP_ADAM;
    if (uop == IR_OP_ADAMW) attr.weight_decay = o->weight_decay >= 0 ? o->weight_decay : 0.004;
    SLOT("momentum");
    SLOT("velocity");
    attr.beta_1 = o->beta_1 > 0 ? o->beta_1 : 0.9;
    attr.beta_2 = o->beta_2 > 0 ? o->beta_2 : 0.999;
    attr.epsilon = o->epsilon > 0 ? o->epsilon : 1e-7;
    break;
  case PASS_OPT_NONE:
  default: CASTOR_UNREACHABLE(); return;
  }
#undef SLOT
  srcs[n++] = gw;
  srcs[n++] = sc->lr;
  srcs[n++] = sc->scale;
  srcs[n++] = sc->ok;
  if (uop == IR_OP_ADAM || uop == IR_OP_ADAMW) srcs[n++] = sc->steps;
  char name[512];
  snprintf(name, sizeof name, "%s.updated", safe_name(s, w->attr.weight));
  ir_node *u = ir_build_op(s->g, uop, unique_name(s, name), srcs, n, &attr, w->loc);
  u->layer = w->layer;
  u->note = arena_printf(s->g->arena, "%s: %s update in %s", w->layer ? w->layer : w->attr.weight,
                         pass_optimizer_name(o->optimizer), dtype_name(w->type.dtype));
}

/* An output name from a weight key: dense_1.kernel -> grad_dense_1_kernel. */
static const char *grad_output_name(grad_state *s, const char *weight) {
  char *n = arena_printf(s->g->arena, "grad_%s", safe_name(s, weight));
  for (char *p = n; *p; p++)
    if (*p == '.') *p = '_';
  return n;
}

/* general tensors: dropout. In a training step each dropout of rate > 0
 * becomes dropout_train, which reads the step count dropout.step (a
 * training scalar, put first in the schedule); the optimizer's step
 * advances it by one every step, applied or not, so each step draws new
 * masks (Keras's seed generator). Without an optimizer (gradients only)
 * it stays where the host sets it: one mask per program run, as a
 * gradient check needs. Returns the step variable, or NULL if no dropout
 * trains. Runs before the forward nodes are numbered. */
static ir_node *dropout_to_train(grad_state *s) {
  ir_graph *g = s->g;
  ir_node *step = NULL;
  for (int i = 0; i < g->n_nodes; i++) {
    ir_node *n = g->nodes[i];
    if (n->op != IR_OP_DROPOUT || n->attr.rate == 0) continue;
    if (!step) {
      ir_type i64s = {DT_I64, 0, {0}};
      step = ir_node_new(g, IR_OP_VARIABLE, &i64s, NULL, 0, unique_name(s, "dropout.step"), no_loc);
      step->attr.weight = step->name;
      step->attr.kind = IR_STATE_SCALAR;
      step->note = "training steps run so far: seeds each step's dropout masks";
      ir_graph_insert(g, 0, step);
      i++; /* n moved one place on */
    }
    n->op = IR_OP_DROPOUT_TRAIN;
    n->srcs[n->n_srcs++] = step;
  }
  return step;
}

static bool grad_run(ir_graph *g, pass_context *ctx, hmap *names) {
  const pass_train_options *o = &ctx->opts->train;
  grad_state s = {g, ctx, o, g->n_nodes, NULL, NULL, names};
  /* a model may hold nontrainable variables (Keras Normalization's stored statistics); a training
   * program has trainable ones, slots and scalars */
  for (int i = 0; i < g->n_nodes; i++)
    if ((g->nodes[i]->op == IR_OP_VARIABLE && g->nodes[i]->attr.kind != IR_STATE_NONTRAINABLE) ||
        ir_op_writes(g->nodes[i]->op))
      return fail(&s, DIAG_KIND_INVALID_MODEL, g->nodes[i]->loc,
                  "grad: %s is a training program already (%%%s)", g->name, g->nodes[i]->name);
  if (o->optimizer != PASS_OPT_NONE && !o->loss_only) { /* Keras's optimizers take no other's options */
    bool adam = o->optimizer == PASS_OPT_ADAM || o->optimizer == PASS_OPT_ADAMW;
    const char *flag = o->momentum > 0 && adam                             ? "--momentum"
                       : o->nesterov && o->optimizer != PASS_OPT_SGD       ? "--nesterov"
                       : o->centered && o->optimizer != PASS_OPT_RMSPROP   ? "--centered"
                       : o->weight_decay >= 0 && o->optimizer != PASS_OPT_ADAMW ? "--weight-decay"
                       : (o->beta_1 > 0 || o->beta_2 > 0) && !adam          ? (o->beta_1 > 0 ? "--beta-1" : "--beta-2")
                       : o->rho > 0 && o->optimizer != PASS_OPT_RMSPROP     ? "--rho"
                       : o->epsilon > 0 && o->optimizer == PASS_OPT_SGD     ? "--epsilon"
                                                                             : NULL;
    if ((o->clipnorm > 0) + (o->clipvalue > 0) + (o->global_clipnorm > 0) > 1) { /* Keras raises the same */
      diag_error_kind(ctx->diag, DIAG_KIND_INVALID_ARGUMENT, no_loc,
                      "grad: only one of --clipnorm, --clipvalue and --global-clipnorm can be set (Keras: only one "
                      "of clipnorm, clipvalue and global_clipnorm)");
      return false;
    }
    if (flag) {
      const char *who = !strcmp(flag, "--momentum")       ? "sgd and rmsprop take it"
                        : !strcmp(flag, "--nesterov")     ? "sgd takes it"
                        : !strcmp(flag, "--centered")     ? "rmsprop takes it"
                        : !strcmp(flag, "--weight-decay") ? "adamw takes it"
                        : !strcmp(flag, "--rho")          ? "rmsprop takes it"
                        : !strcmp(flag, "--epsilon")      ? "rmsprop, adam and adamw take it"
                                                          : "adam and adamw take it";
      diag_error_kind(ctx->diag, DIAG_KIND_INVALID_ARGUMENT, no_loc, "grad: %s is not an option of %s (%s)", flag,
                      pass_optimizer_name(o->optimizer), who);
      return false;
    }
  }
  if (g->n_outputs != 1) {
    diag_error_kind(ctx->diag, DIAG_KIND_INVALID_MODEL, no_loc,
                    "grad: training needs a model with one output (the prediction), %s has %d", g->name, g->n_outputs);
    return false;
  }
  ir_node *pred = g->outputs[0].value;
  const char *pred_name = g->outputs[0].name;
  /* a prediction per sample (fuzz_grad: a weight as the output): [N, classes],
   * or under a bound batch (--batch B: no input has N) [B, classes] */
  ir_node *in0 = ir_graph_input(g, 0);
  bool bound = in0 && !ir_type_is_batched(&in0->type) && in0->type.rank >= 1;
  int64_t want_rows = bound ? in0->type.dims[0] : IR_DIM_BATCH;
  if (pred->type.rank != 2 || !dtype_is_float(pred->type.dtype) || pred->type.dims[0] != want_rows ||
      pred->type.dims[1] == IR_DIM_BATCH) {
    char t[96];
    str_buf b;
    str_buf_init(&b);
    ir_type_print(&pred->type, &b);
    snprintf(t, sizeof t, "%s", str_buf_cstr(&b));
    str_buf_fini(&b);
    return fail(&s, DIAG_KIND_INVALID_MODEL, pred->loc,
                "grad: the model output %s is %s; the losses need [N, classes] predictions", pred_name, t);
  }
  /* CNN: batch normalization trains on the batch's statistics */
  grad_bn *bns = NULL;
  int n_bn = 0;
  if (!o->loss_only && !grad_bn_training(g, names, ctx->diag, ctx->scratch, &bns, &n_bn)) return false;
  ir_node *dropout_step = o->loss_only ? NULL : dropout_to_train(&s); /* general tensors */
  s.n_fwd = g->n_nodes;
  ir_graph_renumber(g);
  s.needs = arena_alloc(ctx->scratch, (size_t)s.n_fwd + 1);
  s.adjoint = arena_alloc(ctx->scratch, ((size_t)s.n_fwd + 1) * sizeof *s.adjoint);

  /* weights -> variables; which values depend on one */
  int *uses = ir_graph_use_counts(g);
  for (int i = 0; i < s.n_fwd; i++) {
    ir_node *c = g->nodes[i];
    if (c->op != IR_OP_CONST) continue;
    if (dtype_is_float(c->type.dtype)) {
      make_variable(&s, c, uses[i]);
    } else if (c->attr.weight) { /* Keras: only floating-point variables train (fuzz_grad: an i64 kernel) */
      diag_warning(ctx->diag, c->loc, "grad: weight %s is %s: only float weights train; it stays a constant",
                   c->attr.weight, dtype_name(c->type.dtype));
    }
  }
  free(uses);
  /* CNN: batch normalization's moving statistics: nontrainable variables */
  for (int i = 0; i < n_bn; i++) bns[i].moving_mean->attr.kind = bns[i].moving_var->attr.kind = IR_STATE_NONTRAINABLE;
  for (int i = 0; i < s.n_fwd; i++) { /* evaluation: batch_norm keeps them as operands */
    ir_node *n = g->nodes[i];
    if (n->op != IR_OP_BATCH_NORM) continue;
    for (int k = 3; k < 5; k++)
      if (n->srcs[k]->op == IR_OP_VARIABLE) n->srcs[k]->attr.kind = IR_STATE_NONTRAINABLE;
  }
  int n_vars = 0;
  for (int i = 0; i < s.n_fwd; i++) {
    ir_node *n = g->nodes[i];
    s.needs[i] = n->op == IR_OP_VARIABLE && n->attr.kind == IR_STATE_WEIGHT; /* not dropout.step */
    n_vars += s.needs[i];
    for (int k = 0; k < n->n_srcs; k++) s.needs[i] |= s.needs[n->srcs[k]->id];
  }
  if (n_vars == 0)
    return fail(&s, DIAG_KIND_INVALID_MODEL, no_loc, "grad: %s has no weights to train%s", g->name, "");

  /* targets, seed, loss */
  int64_t classes = pred->type.dims[1];
  bool sparse = o->loss == PASS_LOSS_SPARSE_XENT;
  int64_t rows = pred->type.dims[0]; /* N, or the bound batch (--batch) */
  ir_type tt = sparse ? (ir_type){DT_I32, 1, {rows}} : (ir_type){DT_F32, 2, {rows, classes}};
  ir_node *targets = ir_build_input(g, unique_name(&s, "targets"), &tt, ir_graph_num_inputs(g), no_loc);
  targets->note = sparse ? "class indices" : "targets";
  ir_node *p32 = pred;
  if (pred->type.dtype != DT_F32) { /* losses are f32 (--keep-16bit-outputs) */
    p32 = ir_build_cast(g, unique_name(&s, "loss_input"), pred, DT_F32, no_loc);
    p32->note = "autocast: the loss runs in f32";
  }
  bool dynamic = o->loss_scale < 0 ? g->policy == IR_POLICY_MIXED_FLOAT16 : o->loss_scale == 0;
  const double eps = 1e-7; /* keras.config.epsilon() */
  ir_op loss_op, grad_op;
  ir_node *wrt = p32, *grad_in = p32; /* the gradient op gives wrt's gradient */
  if (o->loss == PASS_LOSS_MSE) {
    loss_op = IR_OP_MSE, grad_op = IR_OP_MSE_GRAD;
  } else if (o->from_logits) {
    loss_op = IR_OP_XENT_LOGITS, grad_op = IR_OP_XENT_LOGITS_GRAD;
  } else {
    ir_node *sm = softmax_of(pred);
    if (!sm)
      return fail(&s, DIAG_KIND_UNSUPPORTED, pred->loc,
                  "grad: %s on probabilities needs a model whose output %s is a softmax; a model that outputs logits trains with from_logits (castor train --from-logits)",
                  pass_loss_name(o->loss), pred_name);
    loss_op = IR_OP_XENT, grad_op = IR_OP_XENT_GRAD;
    wrt = sm->srcs[0], grad_in = sm; /* the fused softmax + cross-entropy gradient */
  }
  ir_attr la = {.epsilon = ir_op_attrs(loss_op) & A(epsilon) ? eps : 0};
  ir_node *loss = ir_build_op(g, loss_op, unique_name(&s, "loss"), (ir_node *[]){p32, targets}, 2, &la, no_loc);
  loss->note = arena_printf(g->arena, "%s%s, mean over the batch", pass_loss_name(o->loss), o->from_logits ? " (from logits)" : "");
  if (o->loss_only) { /* evaluation */
    ir_graph_add_output(g, "loss", loss);
    return true;
  }
  if (!dynamic && (o->loss_scale_initial > 0 || o->loss_scale_growth_steps > 0)) {
    diag_error_kind(ctx->diag, DIAG_KIND_INVALID_ARGUMENT, no_loc,
                    "grad: %s is an option of the dynamic loss scale; this step has %s (--loss-scale dynamic, or "
                    "the mixed_float16 policy, makes one)",
                    o->loss_scale_initial > 0 ? "--loss-scale-initial" : "--loss-scale-growth-steps",
                    o->loss_scale > 0 && o->loss_scale != 1 ? "a fixed loss scale" : "no loss scaling");
    return false;
  }
  ir_node *seed = dynamic ? state(&s, IR_STATE_SCALAR, "optimizer.loss_scale", (ir_type){DT_F32, 0, {0}},
                                  o->loss_scale_initial > 0 ? o->loss_scale_initial : 32768,
                                  o->loss_scale_initial > 0 ? "dynamic loss scale (Keras LossScaleOptimizer, initial_scale)"
                                                            : "dynamic loss scale (Keras LossScaleOptimizer: starts at 2^15)")
                          : literal(&s, "loss_scale", DT_F32, o->loss_scale > 0 ? o->loss_scale : 1);
  if (!dynamic) seed->note = o->loss_scale > 0 && o->loss_scale != 1 ? "fixed loss scale" : "no loss scaling";
  ir_node *dz = ir_build_op(g, grad_op, unique_name(&s, "d.loss"), (ir_node *[]){grad_in, targets, seed}, 3,
                            &la, no_loc);
  dz->note = dynamic || o->loss_scale != 1 ? "the loss's gradient, times the loss scale" : "the loss's gradient";
  if (wrt == p32 && p32 != pred) { /* a 16-bit prediction: back through the loss's cast */
    ir_node *back = ir_build_cast(g, unique_name(&s, "d.loss_input"), dz, pred->type.dtype, no_loc);
    back->note = arena_printf(g->arena, "autocast: the loss's gradient back to %s", dtype_name(pred->type.dtype));
    dz = back, wrt = pred;
  }
  CASTOR_ASSERT(wrt->id < s.n_fwd && ir_type_eq(&dz->type, &wrt->type));
  s.adjoint[wrt->id] = dz;

  /* backward, in reverse schedule order */
  for (int i = wrt->id; i >= 0; i--) {
    ir_node *n = g->nodes[i];
    if (!s.adjoint[i] || !s.needs[i]) continue;
    if (!backward(&s, n)) return false;
  }

  /* the variables' gradients, in schedule order */
  ir_node **vars = arena_alloc(ctx->scratch, (size_t)n_vars * sizeof *vars);
  ir_node **grads = arena_alloc(ctx->scratch, (size_t)n_vars * sizeof *grads);
  int n_upd = 0;
  for (int i = 0; i < s.n_fwd; i++) {
    ir_node *v = g->nodes[i];
    if (v->op != IR_OP_VARIABLE || !s.adjoint[i]) continue;
    vars[n_upd] = v, grads[n_upd] = s.adjoint[i];
    n_upd++;
  }
  if (n_upd == 0) /* Keras: "No gradients provided for any variable" */
    return fail(&s, DIAG_KIND_INVALID_MODEL, pred->loc,
                "grad: no gradients for any weight: the loss (%s) of the output %s depends on none of them",
                pass_loss_name(o->loss), pred_name);
  for (int i = 0; i < s.n_fwd && n_upd < n_vars; i++) /* Keras: "Gradients do not exist for variables ..." */
    if (g->nodes[i]->op == IR_OP_VARIABLE && g->nodes[i]->attr.kind == IR_STATE_WEIGHT && !s.adjoint[i])
      diag_warning(ctx->diag, g->nodes[i]->loc,
                   "grad: weight %s does not reach the output %s: it has no gradient and is not trained",
                   g->nodes[i]->attr.weight, pred_name);
  ir_graph_add_output(g, "loss", loss);
  if (o->optimizer == PASS_OPT_NONE) {
    for (int k = 0; k < n_upd; k++) ir_graph_add_output(g, grad_output_name(&s, vars[k]->attr.weight), grads[k]);
    return true;
  }
  opt_scalars sc = {0};
  ir_type f32s = {DT_F32, 0, {0}}, i64s = {DT_I64, 0, {0}};
  sc.lr = state(&s, IR_STATE_SCALAR, "optimizer.learning_rate", f32s,
                o->learning_rate > 0 ? o->learning_rate : default_lr(o->optimizer),
                "learning rate (set by the host between steps)");
  sc.steps = state(&s, IR_STATE_SCALAR, "optimizer.iterations", i64s, 0,
                   "applied steps (Keras optimizer.iterations)");
  sc.scale = seed;
  sc.ok = dynamic ? all_finite(&s, grads, n_upd) : literal(&s, "apply", DT_I1, 1);
  if (!dynamic) sc.ok->note = "every step applies (no dynamic loss scale)";
  /* training options: gradient clipping, on the unscaled gradients after
   * the dynamic scale's check (Keras: LossScaleOptimizer unscales, then
   * the inner optimizer clips). clipvalue clips each scaled gradient to
   * the scale times the value; a clipped norm enters the update as a
   * larger scale to divide by (clip_scale). */
  ir_node *zero = o->clipnorm > 0 || o->global_clipnorm > 0 ? literal(&s, "zero", DT_F32, 0) : NULL;
  ir_node *global = NULL;
  if (o->global_clipnorm > 0) {
    ir_node *q = zero;
    for (int k = 0; k < n_upd;) {
      ir_node *srcs[IR_MAX_SRCS] = {q, sc.scale};
      int n = 2;
      while (n < IR_MAX_SRCS && k < n_upd) srcs[n++] = grads[k++];
      q = ir_build_op(g, IR_OP_GRAD_NORM_SQ, unique_name(&s, "grads_norm_sq"), srcs, n, &(ir_attr){0}, no_loc);
      q->note = "the unscaled gradients' squared global norm (Keras global_clipnorm)";
    }
    global = ir_build_op(g, IR_OP_CLIP_SCALE, unique_name(&s, "clip_scale"), (ir_node *[]){sc.scale, q}, 2,
                         &(ir_attr){.clipnorm = o->global_clipnorm}, no_loc);
    global->note = "the loss scale, times the global norm / global_clipnorm where that is above 1";
  }
  for (int k = 0; k < n_upd; k++) {
    opt_scalars sk = sc;
    ir_node *gk = grads[k];
    const char *base = safe_name(&s, vars[k]->attr.weight);
    if (o->clipvalue > 0) {
      gk = ir_build_op(g, IR_OP_CLIP_VALUE, unique_name(&s, arena_printf(g->arena, "%s.clipped", base)),
                       (ir_node *[]){gk, sc.scale}, 2, &(ir_attr){.clipvalue = o->clipvalue}, no_loc);
      gk->layer = vars[k]->layer;
      gk->note = "Keras clipvalue, on the unscaled gradient";
    } else if (o->clipnorm > 0) {
      ir_node *q = ir_build_op(g, IR_OP_GRAD_NORM_SQ, unique_name(&s, arena_printf(g->arena, "%s.norm_sq", base)),
                               (ir_node *[]){zero, sc.scale, gk}, 3, &(ir_attr){0}, no_loc);
      sk.scale = ir_build_op(g, IR_OP_CLIP_SCALE, unique_name(&s, arena_printf(g->arena, "%s.clip_scale", base)),
                             (ir_node *[]){sc.scale, q}, 2, &(ir_attr){.clipnorm = o->clipnorm}, no_loc);
      q->layer = sk.scale->layer = vars[k]->layer;
      sk.scale->note = "Keras clipnorm: the loss scale, times the gradient's norm / clipnorm where that is above 1";
    } else if (global) {
      sk.scale = global;
    }
    update(&s, vars[k], gk, &sk);
  }
  for (int k = 0; k < n_bn; k++) { /* CNN: every step, as Keras's layer call assigns them */
    for (int w = 0; w < 2; w++) {
      ir_node *v = w ? bns[k].moving_var : bns[k].moving_mean, *x = w ? bns[k].var : bns[k].mean;
      if (!ir_type_eq(&v->type, &x->type)) /* a moving statistic also used elsewhere in 16 bits (fuzz_grad) */
        return fail(&s, DIAG_KIND_UNSUPPORTED, v->loc,
                    "grad: batch norm's moving statistic %s became a %s variable; it must stay in the batch's "
                    "statistics' dtype (f32)", v->attr.weight ? v->attr.weight : v->name, dtype_name(v->type.dtype));
      char name[512];
      snprintf(name, sizeof name, "%s.updated", safe_name(&s, v->attr.weight ? v->attr.weight : v->name));
      ir_node *u = ir_build_op(g, IR_OP_MOVING_UPDATE, unique_name(&s, name), (ir_node *[]){v, x}, 2,
                               &(ir_attr){.momentum = bns[k].bn->attr.momentum}, bns[k].bn->loc);
      u->layer = bns[k].bn->layer;
      u->note = arena_printf(g->arena, "%s: moving %s = moving * %g + batch's * (1 - %g)",
                             u->layer ? u->layer : bns[k].bn->name, w ? "variance" : "mean",
                             bns[k].bn->attr.momentum, bns[k].bn->attr.momentum);
    }
  }
  ir_node *cs = ir_build_op(g, IR_OP_COUNT_STEP, unique_name(&s, "optimizer.iterations.updated"),
                            (ir_node *[]){sc.steps, sc.ok}, 2, &(ir_attr){0}, no_loc);
  cs->note = "counts applied steps only";
  if (dropout_step) { /* general tensors: every step, applied or not, draws new masks */
    ir_node *dc = ir_build_op(g, IR_OP_COUNT_STEP, unique_name(&s, "dropout.step.updated"),
                              (ir_node *[]){dropout_step, literal(&s, "always", DT_I1, 1)}, 2, &(ir_attr){0}, no_loc);
    dc->note = "counts every step";
  }
  if (dynamic) {
    ir_node *good = state(&s, IR_STATE_SCALAR, "optimizer.good_steps", i64s, 0,
                          "consecutive finite steps (Keras step_counter)");
    int64_t period = o->loss_scale_growth_steps > 0 ? (int64_t)o->loss_scale_growth_steps : 2000;
    ir_attr lsa = {.period = period, .min_scale = o->loss_scale_min > 0 ? o->loss_scale_min : 0};
    ir_node *lu = ir_build_op(g, IR_OP_LOSS_SCALE_UPDATE, unique_name(&s, "optimizer.loss_scale.updated"),
                              (ir_node *[]){seed, good, sc.ok}, 3, &lsa, no_loc);
    lu->note = arena_printf(g->arena, "doubles after %lld finite steps, halves on a non-finite one", (long long)period);
  }
  return true;
}

bool pass_grad_run(ir_graph *g, pass_context *ctx) {
  /* empty tensors: a step's mean over no element is 0/0, and its gradients of empty values have no rule */
  for (int i = 0; i < g->n_nodes; i++)
    if (ir_type_is_empty(&g->nodes[i]->type)) {
      str_buf t;
      str_buf_init(&t);
      ir_type_print(&g->nodes[i]->type, &t);
      diag_error_kind(ctx->diag, DIAG_KIND_UNSUPPORTED, g->nodes[i]->loc,
                      "grad: %%%s is an empty tensor (%s); castor trains only models without empty tensors",
                      g->nodes[i]->name, str_buf_cstr(&t));
      str_buf_fini(&t);
      return false;
    }
  /* one variable per weight key: the step's states, slots and gradient
   * outputs are named after it (fuzz_grad: two weights of one key gave two
   * outputs grad_<key>) */
  hmap keys;
  hmap_init(&keys, HMAP_STRINGS);
  const ir_node *first = NULL, *dup = NULL;
  for (int i = 0; i < g->n_nodes && !dup; i++) {
    const ir_node *n = g->nodes[i];
    if (n->op != IR_OP_CONST || !n->attr.weight) continue;
    first = hmap_put_str(&keys, n->attr.weight, strlen(n->attr.weight), (void *)n);
    if (first) dup = n;
  }
  hmap_fini(&keys);
  if (dup) {
    diag_error_kind(ctx->diag, DIAG_KIND_INVALID_MODEL, dup->loc,
                    "grad: %%%s and %%%s are one weight '%s'; a training step needs one value per weight key",
                    first->name, dup->name, dup->attr.weight);
    return false;
  }
  hmap names;
  hmap_init(&names, HMAP_STRINGS);
  hmap_reserve(&names, 4 * (size_t)g->n_nodes);
  for (int i = 0; i < g->n_nodes; i++) hmap_put_str(&names, g->nodes[i]->name, strlen(g->nodes[i]->name), g->nodes[i]);
  bool ok = grad_run(g, ctx, &names);
  hmap_fini(&names);
  return ok;
}
