/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuse_silu.c: SiLU (swish) written out as x * sigmoid(x), as exporters
 * emit it (PyTorch's nn.SiLU in ONNX: Sigmoid, Mul; EfficientNet's and
 * RegNet-Y's activations and squeeze-excitation gates), becomes one silu
 * op.
 *
 * In:  a verified graph before autocast (every float f32).
 * Out: each f32 mul(x, sigmoid(x)) (either operand order) whose sigmoid
 *      has no other use, is no graph output and has x's type (no
 *      broadcast), becomes silu(x): same name, layer, location and
 *      position as the mul, so the model's values keep their names. The
 *      sigmoid, no longer used, is left for dce.
 * Why: x has two uses (the sigmoid and the product), so the contraction
 * that produces x cannot end with them: the conv wrote x, and a kernel of
 * its own read it back for sigmoid and product, a whole pass over every
 * expanded activation (EfficientNet-B0 at batch 1, one thread: 17.6% of
 * its kernels' CPU samples). silu is one element-wise formula of the
 * kernel kit (cg_math.c), so it joins the GEMM epilogue of the conv2d or
 * matmul before it. silu's x / (1 + exp(-x)) matches x * sigmoid(x) within
 * f32 rounding (one division against a reciprocal and a product); a
 * training step is left as it is (the training pipelines do not run this
 * pass).
 */
#include <stdlib.h>
#include <string.h>

#include "passes/passes.h"

bool pass_fuse_silu_run(ir_graph *g, pass_context *ctx) {
  (void)ctx;
  bool any = false;
  for (int i = 0; i < g->n_nodes && !any; i++) any = g->nodes[i]->op == IR_OP_SIGMOID;
  if (!any) return true;
  ir_graph_renumber(g);
  int *uses = ir_graph_use_counts(g);
  bool *output = xcalloc((size_t)g->n_nodes + 1, sizeof *output);
  for (int o = 0; o < g->n_outputs; o++) output[g->outputs[o].value->id] = true;
  for (int i = 0; i < g->n_nodes; i++) {
    ir_node *n = g->nodes[i], *x = NULL;
    if (n->op != IR_OP_MUL || n->type.dtype != DT_F32) continue;
    for (int s = 0; s < 2 && !x; s++) {
      ir_node *sg = n->srcs[s];
      if (sg->op != IR_OP_SIGMOID || sg->srcs[0] != n->srcs[1 - s]) continue;
      if (uses[sg->id] != 1 || output[sg->id] || !ir_type_eq(&sg->type, &n->type) ||
          !ir_type_eq(&n->srcs[1 - s]->type, &n->type))
        continue;
      x = n->srcs[1 - s];
    }
    if (!x) continue;
    n->op = IR_OP_SILU;
    n->n_srcs = 1;
    n->srcs[0] = x;
    for (int s = 1; s < IR_MAX_SRCS; s++) n->srcs[s] = NULL;
    memset(&n->attr, 0, sizeof n->attr);
    n->note = "x * sigmoid(x) as one silu (fuse-silu)";
  }
  free(output);
  free(uses);
  return true;
}
