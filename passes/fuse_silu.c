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
#include "passes/passes.h"

/* mul(x, sigmoid(x)), either order, the sigmoid of no other use */
static ir_node *silu_of(ir_node *n, const int *uses, const bool *output) {
  for (int s = 0; s < 2; s++) {
    ir_node *sg = n->srcs[s], *x = n->srcs[1 - s];
    if (sg->op != IR_OP_SIGMOID || sg->srcs[0] != x) continue;
    if (uses[sg->id] != 1 || output[sg->id] || !ir_type_eq(&sg->type, &n->type) || !ir_type_eq(&x->type, &n->type))
      continue;
    return x;
  }
  return NULL;
}

bool pass_fuse_silu_run(ir_graph *g, pass_context *ctx) {
  (void)ctx;
  return pass_fuse_unary(g, IR_OP_SIGMOID, IR_OP_SILU, "x * sigmoid(x) as one silu (fuse-silu)", silu_of);
}
