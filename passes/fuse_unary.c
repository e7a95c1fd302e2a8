/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuse_unary.c: the driver the fuse passes share (fuse-gelu, fuse-silu).
 *
 * In:  a verified graph before autocast.
 * Out: if the graph has a `trigger` op, each f32 mul that `match` reads as
 *      an element-wise function of one x becomes the unary `op` of x in
 *      place: same name, layer, location and position, so the model's values
 *      keep their names; its note says what was fused. What no longer has a
 *      use is left for dce.
 * `match` gets each node's use count and whether it is a graph output (by
 * id), so a pattern takes only values nothing else reads.
 */
#include <stdlib.h>
#include <string.h>

#include "passes/passes.h"

bool pass_fuse_unary(ir_graph *g, ir_op trigger, ir_op op, const char *note, pass_fuse_match match) {
  bool any = false;
  for (int i = 0; i < g->n_nodes && !any; i++) any = g->nodes[i]->op == trigger;
  if (!any) return true;
  ir_graph_renumber(g);
  int *uses = ir_graph_use_counts(g);
  bool *output = xcalloc((size_t)g->n_nodes + 1, sizeof *output);
  for (int o = 0; o < g->n_outputs; o++) output[g->outputs[o].value->id] = true;
  for (int i = 0; i < g->n_nodes; i++) {
    ir_node *n = g->nodes[i];
    if (n->op != IR_OP_MUL || n->type.dtype != DT_F32) continue;
    ir_node *x = match(n, uses, output);
    if (!x) continue;
    n->op = op;
    n->n_srcs = 1;
    n->srcs[0] = x;
    for (int s = 1; s < IR_MAX_SRCS; s++) n->srcs[s] = NULL;
    memset(&n->attr, 0, sizeof n->attr);
    n->note = note;
  }
  free(output);
  free(uses);
  return true;
}
