/* SPDX-License-Identifier: Apache-2.0 */
/*
 * hoist_pool.c: convolutional networks: an average pool moved above the
 * 1x1 convolution before it, at inference.
 *
 * A 1x1 conv2d (stride 1, dilation 1, no pads) is the same linear map of
 * every pixel's channels, and an average pool without pads the mean of
 * whole windows of pixels, so they commute (a bias too: the mean of
 * w x + b is w mean(x) + b). Pooling first, the convolution runs on the
 * pooled pixels: DenseNet's transitions (1x1 conv, then a 2x2 pool of
 * stride 2) do a quarter of their multiplications (their three convs were
 * 6.2 ms of DenseNet-121's 48 at batch 1, one thread:
 * bench/results/cnn-resnet50-2026-11-30-s15.md). The pool then averages
 * the conv's input channels instead of its outputs (DenseNet: twice as
 * many), still far less than the convolution saves.
 *
 * In:  a verified graph before autocast (every float f32).
 * Out: each avg_pool2d(y) with pads all 0 whose y is conv2d(x, w), or
 *      add(conv2d(x, w), b) with b a [O] constant, where
 *        - the conv2d has a 1x1 kernel, strides and dilations 1, pads 0,
 *        - the conv2d (and the add) has no other use and is no graph output,
 *        - it is less work: C x O products a pooled pixel plus the pool's
 *          window over C channels, against C x O a pixel of x plus the
 *          window over O channels,
 *      becomes that conv2d (and add) of avg_pool2d(x): a new pool node
 *      (%<pool>.hoisted, the pool's layer and attributes) right before the
 *      conv2d, which now reads it; the conv2d and the add take the pool's
 *      spatial size, and every use of the old pool reads the last of them.
 *      The old pool leaves the graph. The results are the same up to
 *      rounding: each output sums the pooled inputs times w instead of
 *      pooling the products' sums (both within float32's error of the
 *      float64 reference; tests/unit/check_passes.c).
 * A training step keeps its order (the training pipelines do not run this
 * pass: the gradients are those of the model as written).
 */
#include <string.h>

#include "passes/passes.h"

static bool zeros(const ir_attr_INTS *v) {
  for (int i = 0; i < v->n; i++)
    if (v->v[i]) return false;
  return true;
}

static bool ones(const ir_attr_INTS *v) {
  for (int i = 0; i < v->n; i++)
    if (v->v[i] != 1) return false;
  return true;
}

static bool is_output(const ir_graph *g, const ir_node *n) {
  for (int o = 0; o < g->n_outputs; o++)
    if (g->outputs[o].value == n) return true;
  return false;
}

/* p's conv2d (and bias add) if the pattern holds, else NULL. */
static ir_node *match(const ir_graph *g, const ir_node *p, const int *uses, ir_node **out_add) {
  *out_add = NULL;
  if (!zeros(&p->attr.pads) || p->type.rank != 4 || p->type.dtype != DT_F32) return NULL;
  ir_node *y = p->srcs[0], *add = NULL, *cv = y;
  if (y->op == IR_OP_ADD) {
    add = y, cv = y->srcs[0];
    const ir_node *b = y->srcs[1];
    if (uses[add->id] != 1 || is_output(g, add) || b->op != IR_OP_CONST || b->type.rank != 1 || add->type.rank != 4 ||
        b->type.dims[0] != add->type.dims[3])
      return NULL;
  }
  if (cv->op != IR_OP_CONV2D || uses[cv->id] != 1 || is_output(g, cv) || cv->type.dtype != DT_F32) return NULL;
  const ir_node *x = cv->srcs[0], *w = cv->srcs[1];
  if (w->type.rank != 4 || w->type.dims[0] != 1 || w->type.dims[1] != 1) return NULL;
  if (!ones(&cv->attr.strides) || !ones(&cv->attr.dilations) || !zeros(&cv->attr.pads)) return NULL;
  if (x->type.rank != 4 || x->type.dims[1] != cv->type.dims[1] || x->type.dims[2] != cv->type.dims[2]) return NULL;
  /* only where it is less work (per image: the conv's C x O products a
   * pixel, the pool's window sums over O channels before, C after): not a
   * pool that keeps most pixels of a conv with few outputs */
  double C = (double)x->type.dims[3], O = (double)cv->type.dims[3];
  double px = (double)x->type.dims[1] * (double)x->type.dims[2], pp = (double)p->type.dims[1] * (double)p->type.dims[2];
  double win = (double)p->attr.pool.v[0] * (double)p->attr.pool.v[1];
  if (C * O * pp + win * C * pp >= C * O * px + win * O * pp) return NULL;
  *out_add = add;
  return cv;
}

/* Hoists pool p above conv2d cv (and add); ids current (ir_graph_insert
 * keeps them so). */
static void hoist(ir_graph *g, ir_node *p, ir_node *cv, ir_node *add) {
  ir_node *x = cv->srcs[0];
  ir_type qt = x->type; /* the pool of x: p's window, x's channels */
  qt.dims[1] = p->type.dims[1], qt.dims[2] = p->type.dims[2];
  ir_node *q = ir_node_new(g, IR_OP_AVG_POOL2D, &qt, &x, 1,
                           ir_graph_unique_name(g, arena_printf(g->arena, "%s.hoisted", p->name)), p->loc);
  q->attr = p->attr;
  q->layer = p->layer, q->policy = p->policy;
  q->note = arena_printf(g->arena, "%s, moved above %s (1x1: they commute)", p->layer ? p->layer : p->name,
                         cv->layer ? cv->layer : cv->name);
  ir_graph_insert(g, cv->id, q);
  cv->srcs[0] = q;
  cv->type.dims[1] = qt.dims[1], cv->type.dims[2] = qt.dims[2];
  if (add) add->type.dims[1] = qt.dims[1], add->type.dims[2] = qt.dims[2];
  ir_graph_replace_uses(g, p, add ? add : cv);
}

bool pass_hoist_pool_run(ir_graph *g, pass_context *ctx) {
  (void)ctx;
  bool any = false;
  for (int i = 0; i < g->n_nodes && !any; i++) any = g->nodes[i]->op == IR_OP_AVG_POOL2D;
  if (!any) return true;
  ir_graph_renumber(g);
  int *uses = ir_graph_use_counts(g);
  int n = g->n_nodes;
  ir_node **pools = xmalloc((size_t)n * sizeof *pools);
  int np = 0;
  for (int i = 0; i < n; i++)
    if (g->nodes[i]->op == IR_OP_AVG_POOL2D) pools[np++] = g->nodes[i];
  /* first every match (the use counts by the ids of the renumbering
   * above), then the rewrites: each pattern's nodes are its own (uses 1) */
  ir_node **cvs = xmalloc((size_t)(np ? np : 1) * sizeof *cvs), **adds = xmalloc((size_t)(np ? np : 1) * sizeof *adds);
  int nh = 0;
  for (int i = 0; i < np; i++)
    if ((cvs[nh] = match(g, pools[i], uses, &adds[nh]))) pools[nh++] = pools[i];
  free(uses);
  for (int i = 0; i < nh; i++) hoist(g, pools[i], cvs[i], adds[i]);
  free(cvs), free(adds);
  ir_graph_renumber(g);
  if (nh) { /* the old pools (no use left; their operand has a new type): out of the graph */
    bool *keep = xmalloc((size_t)g->n_nodes * sizeof *keep);
    for (int i = 0; i < g->n_nodes; i++) keep[i] = true;
    for (int i = 0; i < nh; i++) keep[pools[i]->id] = false;
    ir_graph_compact(g, keep);
    free(keep);
    ir_graph_renumber(g);
  }
  free(pools);
  return true;
}
