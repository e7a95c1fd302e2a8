/* SPDX-License-Identifier: Apache-2.0 */
/*
 * grad_internal.h: what the gradient pass's two halves share (passes/grad.c:
 * the driver, variables and optimizer updates; passes/grad_rules.c: the
 * per-op backward rules): the pass's state and the node builders that keep
 * names unique and types checked.
 */
#ifndef CASTOR_PASSES_GRAD_INTERNAL_H
#define CASTOR_PASSES_GRAD_INTERNAL_H

#include "passes/passes.h"
#include "util/util.h"

typedef struct grad_state {
  ir_graph *g;
  pass_context *ctx;
  const pass_train_options *o;
  int n_fwd;          /* forward nodes: ids [0, n_fwd) */
  bool *needs;        /* forward node id -> its value depends on a variable */
  ir_node **adjoint;  /* forward node id -> its gradient so far */
  hmap *names;        /* every node's name (unique_name) */
} grad_state;

/* Reports an error of kind at loc (fmt with the strings a and b); false. */
bool grad_fail(grad_state *s, diag_kind kind, diag_loc loc, const char *fmt, const char *a, const char *b);
/* A literal scalar of dtype dt. */
ir_node *grad_literal(grad_state *s, const char *name, ir_dtype dt, double v);
/* Node o of srcs named name (made unique), with fwd's location and policy. */
ir_node *grad_named_op(grad_state *s, ir_op o, const ir_node *fwd, const char *name, ir_node *const *srcs, int n,
                         const ir_attr *attr);
/* Node o of srcs named after base (made unique). */
ir_node *grad_op(grad_state *s, ir_op o, const ir_node *fwd, const char *base, ir_node *const *srcs, int n,
                   const ir_attr *attr);
/* Adds a gradient contribution d to forward node x's adjoint. */
void grad_accumulate(grad_state *s, ir_node *x, ir_node *d);
/* Propagates n's adjoint to its operands by n's rule (grad_rules.c);
 * false with an error for an op without one. */
bool grad_backward(grad_state *s, ir_node *n);

#endif
