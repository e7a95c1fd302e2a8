/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuse_gelu.c: the exact GELU written out with erf, as exporters emit it
 * (PyTorch's nn.functional.gelu at ONNX opsets below 20: Div, Erf, Add,
 * Mul, Mul), becomes one gelu op.
 *
 * In:  a verified graph before autocast (every float f32).
 * Out: each f32 product of the three factors x, 1 + erf(x / sqrt(2)) and
 *      1/2 (two binary muls in any order and grouping), where
 *        - the inner mul, the add and the erf and its division have no
 *          other use and are no graph output,
 *        - x / sqrt(2) is div(x, s) with s = sqrt(2), or mul(x, s) with
 *          s = 1/sqrt(2) (either operand order), to f32 precision,
 *        - 1 and 1/2 are exact,
 *      where s, 1 and 1/2 are [] literals or one-element f32 constants with
 *      data, and every node of the pattern has x's type (no broadcast of x),
 *      becomes gelu(x): same name, layer, location and position as the outer
 *      mul, so the model's values keep their names. What no longer has a
 *      use is left for dce.
 * Why: gelu is one element-wise formula the kernel kit has (cg_math.c),
 * which joins the GEMM epilogue of the matmul before it (its bias add
 * too); the five ops do not, since x has two uses (erf's division and the
 * product), and cost a kernel of their own over the whole activation.
 * gelu's formula matches the erf form within the two formulas' f32 errors
 * (both erfc fits, relative error below 2e-7); a training step is left as
 * it is (the training pipelines do not run this pass).
 */
#include <math.h>

#include "passes/passes.h"

/* A [] literal, or a one-element f32 constant with data: its value. */
static bool scalar_value(const ir_node *n, double *v) {
  if (n->type.dtype != DT_F32) return false;
  if (n->op == IR_OP_LITERAL && n->type.rank == 0) {
    *v = n->attr.value;
    return true;
  }
  if (n->op != IR_OP_CONST || !n->attr.data) return false;
  for (int r = 0; r < n->type.rank; r++)
    if (n->type.dims[r] != 1) return false;
  *v = ((const float *)n->attr.data)[0];
  return true;
}

static bool is_scalar(const ir_node *n, double want, double rel) {
  double v;
  return scalar_value(n, &v) && fabs(v - want) <= rel * fabs(want);
}

/* One use, not a graph output, x's type. */
static bool inner(const ir_node *n, const ir_node *x, const int *uses, const bool *output) {
  return uses[n->id] == 1 && !output[n->id] && ir_type_eq(&n->type, &x->type);
}

/* a = 1 + erf(x / sqrt 2) with every node single-use: x, else NULL. */
static ir_node *one_plus_erf(ir_node *a, const int *uses, const bool *output) {
  if (a->op != IR_OP_ADD) return NULL;
  for (int s = 0; s < 2; s++) {
    ir_node *e = a->srcs[s];
    if (e->op != IR_OP_ERF || !is_scalar(a->srcs[1 - s], 1.0, 0.0)) continue;
    ir_node *d = e->srcs[0], *x = NULL;
    if (d->op == IR_OP_DIV && is_scalar(d->srcs[1], sqrt(2.0), 1e-6)) x = d->srcs[0];
    if (d->op == IR_OP_MUL)
      for (int t = 0; t < 2 && !x; t++)
        if (is_scalar(d->srcs[1 - t], sqrt(0.5), 1e-6)) x = d->srcs[t];
    if (!x || x->type.dtype != DT_F32) continue;
    if (inner(a, x, uses, output) && inner(e, x, uses, output) && inner(d, x, uses, output)) return x;
  }
  return NULL;
}

/* Whether the factors {f[0], f[1], f[2]} are x, 1 + erf(x / sqrt 2) and 1/2
 * in some order; *x is x. */
static bool gelu_factors(ir_node *const f[3], const int *uses, const bool *output, ir_node **x) {
  for (int h = 0; h < 3; h++) {
    if (!is_scalar(f[h], 0.5, 0.0)) continue;
    for (int a = 0; a < 3; a++) {
      if (a == h) continue;
      ir_node *xa = one_plus_erf(f[a], uses, output);
      if (xa && f[3 - h - a] == xa) {
        *x = xa;
        return true;
      }
    }
  }
  return false;
}

/* n = mul(m, c) with m = mul(a, b) single-use: the factors a, b, c */
static ir_node *gelu_of(ir_node *n, const int *uses, const bool *output) {
  for (int s = 0; s < 2; s++) {
    ir_node *m = n->srcs[s], *x = NULL;
    if (m->op != IR_OP_MUL || uses[m->id] != 1 || output[m->id] || !ir_type_eq(&m->type, &n->type)) continue;
    ir_node *f[3] = {m->srcs[0], m->srcs[1], n->srcs[1 - s]};
    if (gelu_factors(f, uses, output, &x) && ir_type_eq(&x->type, &n->type)) return x;
  }
  return NULL;
}

bool pass_fuse_gelu_run(ir_graph *g, pass_context *ctx) {
  (void)ctx;
  return pass_fuse_unary(g, IR_OP_ERF, IR_OP_GELU, "x * (1 + erf(x / sqrt(2))) / 2 as one gelu (fuse-gelu)", gelu_of);
}
