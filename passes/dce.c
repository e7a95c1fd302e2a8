/* SPDX-License-Identifier: Apache-2.0 */
/*
 * dce.c: dead code elimination.
 * In: a verified graph. Out: only nodes whose value reaches a graph output,
 * in their original order; inputs are always kept (they are the program's
 * signature, even when unused), and so are the update ops of a training
 * program (they write variables: effects, not values). Constants that lose all uses disappear, so
 * their weights are not carried into the program.
 */
#include "passes/passes.h"

bool pass_dce_run(ir_graph *g, pass_context *ctx) {
  bool *live = arena_alloc(ctx->scratch, (size_t)g->n_nodes + 1);
  ir_graph_renumber(g);
  for (int i = 0; i < g->n_outputs; i++) live[g->outputs[i].value->id] = true;
  for (int i = g->n_nodes; i-- > 0;) {
    ir_node *n = g->nodes[i];
    if (n->op == IR_OP_INPUT || ir_op_writes(n->op) > 0) live[i] = true;
    if (!live[i]) continue;
    for (int s = 0; s < n->n_srcs; s++) live[n->srcs[s]->id] = true;
  }
  ir_graph_compact(g, live);
  return true;
}
