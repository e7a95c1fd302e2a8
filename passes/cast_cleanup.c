/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cast_cleanup.c: removes casts that cannot change a result.
 *
 * In:  a verified graph, usually right after autocast.
 * Out: the same values with fewer casts:
 *   1. a cast to the dtype its operand already has is dropped;
 *   2. a cast whose operand is an exact widening (f16 -> f32, bf16 -> f32)
 *      reads the widening's operand instead: cast(cast(x:f16, f32), f16) is
 *      x, and cast(cast(x:f16, f32), bf16) is cast(x, bf16);
 *   3. duplicate casts of one value to one dtype become one.
 * It never removes a narrow-then-widen pair (f32 -> f16 -> f32 rounds).
 * Casts left without uses are deleted; other dead code is dce's job.
 */
#include <string.h>

#include "passes/passes.h"

static bool exact_widening(const ir_node *c) {
  if (c->op != IR_OP_CAST) return false;
  ir_dtype from = c->srcs[0]->type.dtype, to = c->type.dtype;
  return to == DT_F32 && (from == DT_F16 || from == DT_BF16 || from == DT_F32);
}

bool pass_cast_cleanup_run(ir_graph *g, pass_context *ctx) {
  bool changed = true;
  while (changed) {
    changed = false;
    ir_graph_renumber(g);
    for (int i = 0; i < g->n_nodes; i++) {
      ir_node *c = g->nodes[i];
      if (c->op != IR_OP_CAST) continue;
      /* rule 2: look through an exact widening */
      while (exact_widening(c->srcs[0]) && c->srcs[0] != c) {
        c->srcs[0] = c->srcs[0]->srcs[0];
        changed = true;
      }
      /* rule 1: no-op cast */
      if (c->srcs[0]->type.dtype == c->type.dtype) {
        ir_graph_replace_uses(g, c, c->srcs[0]);
        changed = true;
        continue;
      }
      /* rule 3: an earlier cast of the same value to the same dtype */
      for (int j = 0; j < i; j++) {
        ir_node *d = g->nodes[j];
        if (d->op == IR_OP_CAST && d->srcs[0] == c->srcs[0] && d->type.dtype == c->type.dtype) {
          ir_graph_replace_uses(g, c, d);
          changed = true;
          break;
        }
      }
    }
    /* delete casts nobody uses any more */
    int *uses = ir_graph_use_counts(g);
    bool *keep = arena_alloc(ctx->scratch, (size_t)g->n_nodes + 1);
    bool removed = false;
    for (int i = g->n_nodes; i-- > 0;) {
      ir_node *n = g->nodes[i];
      keep[i] = !(n->op == IR_OP_CAST && uses[i] == 0);
      if (!keep[i]) {
        removed = true;
        uses[n->srcs[0]->id]--;
      }
    }
    free(uses);
    if (removed) ir_graph_compact(g, keep);
  }
  return true;
}
