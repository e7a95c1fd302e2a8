/* SPDX-License-Identifier: Apache-2.0 */
/*
 * optable_cases.c: check_optable's cases, one smallest graph per op
 * (optable_cases.h).
 */
#include "tests/unit/test_support.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/internal.h"
#include "codegen/cg_backend.h"
#include "codegen/cg_internal.h"
#include "passes/passes.h"
#include "tests/ref/ref.h"
#include "util/half.h"
#include "util/util.h"

#include "tests/unit/optable_cases.h"

static const diag_loc no_loc = {0};

ir_node *optable_konst(op_case *c, const char *name, int rank, const int64_t *dims, uint64_t seed) {
  ir_type t = {DT_F32, rank, {0}};
  int64_t n = 1;
  for (int r = 0; r < rank; r++) t.dims[r] = dims[r], n *= dims[r];
  float *d = xmalloc((size_t)n * sizeof *d);
  rng r;
  rng_init(&r, seed);
  for (int64_t i = 0; i < n; i++) d[i] = rng_uniform_f32(&r, -1.0f, 1.0f);
  c->data[c->n_data++] = d;
  return ir_build_const(c->g, name, &t, name, d, no_loc);
}

/* general tensors: a vector [n] of values in [0.25, 2) (pow's base) */
ir_node *optable_konst_positive(op_case *c, const char *name, int64_t n, uint64_t seed) {
  ir_type t = {DT_F32, 1, {n}};
  float *d = xmalloc((size_t)n * sizeof *d);
  rng r;
  rng_init(&r, seed);
  for (int64_t i = 0; i < n; i++) d[i] = rng_uniform_f32(&r, 0.25f, 2.0f);
  c->data[c->n_data++] = d;
  return ir_build_const(c->g, name, &t, name, d, no_loc);
}

static ir_node *literal(op_case *c, const char *name, ir_dtype dt, double v) {
  ir_type t = {dt, 0, {0}};
  ir_node *n = ir_node_new(c->g, IR_OP_LITERAL, &t, NULL, 0, name, no_loc);
  n->attr.value = v;
  ir_graph_append(c->g, n);
  return n;
}

static ir_node *variable(op_case *c, const char *name, ir_type t, double init) {
  ir_node *n = ir_node_new(c->g, IR_OP_VARIABLE, &t, NULL, 0, name, no_loc);
  n->attr.weight = name;
  n->attr.init = init;
  n->attr.kind = IR_STATE_SCALAR; /* the kind does not change what an op computes */
  ir_graph_append(c->g, n);
  return n;
}

/* The graph y = op(x, ...) with x = input f32[N, W]; operands and
 * attributes from the op's type rule. */
void optable_build_case(ir_op op, op_case *c) {
  memset(c, 0, sizeof *c);
  c->g = ir_graph_create("optable");
  ir_type xt = {DT_F32, 2, {IR_DIM_BATCH, W}};
  ir_node *x = ir_build_input(c->g, "x", &xt, 0, no_loc);
  ir_node *srcs[IR_MAX_SRCS] = {x};
  ir_attr attr = {0};
  int n_srcs = ir_op_arity(op);
  switch (ir_op_type_rule(op)) {
  case IR_TYPE_LEAF: /* the output is the leaf itself */
    c->node = op == IR_OP_INPUT      ? x
              : op == IR_OP_LITERAL  ? literal(c, "one", DT_F32, 1.5)
              : op == IR_OP_VARIABLE ? variable(c, "w", (ir_type){DT_F32, 2, {3, W}}, 0.25)
                                     : optable_konst(c, "w", 2, (int64_t[]){3, W}, 7);
    break;
  case IR_TYPE_MATMUL_NT:
    srcs[1] = optable_konst(c, "w", 2, (int64_t[]){8, W}, 7);
    attr.acc = DT_F32;
    break;
  case IR_TYPE_MATMUL_TN:
    srcs[1] = x;
    attr.acc = DT_F32;
    break;
  case IR_TYPE_SUM_ROWS: attr.acc = DT_F32; break;
  case IR_TYPE_SAME:
    srcs[1] = x;
    if (ir_op_attrs(op) & A(alpha)) attr.alpha = 0.3; /* general tensors: the gradient helpers' attributes */
    if (ir_op_attrs(op) & A(min_value)) attr.min_value = -0.5, attr.max_value = 0.75;
    break;
  case IR_TYPE_LOSS:
  case IR_TYPE_LOSS_GRAD:
    srcs[1] = x;
    srcs[2] = literal(c, "seed", DT_F32, 2);
    attr.epsilon = 1e-7;
    break;
  case IR_TYPE_ALL_FINITE: n_srcs = 1; break;
  case IR_TYPE_GRAD_NORM: /* training options: grad_norm_sq(a, s, x, g) */
    srcs[0] = literal(c, "a", DT_F32, 0.5);
    srcs[1] = literal(c, "s", DT_F32, 4);
    srcs[2] = x;
    srcs[3] = optable_konst(c, "g", 2, (int64_t[]){3, W}, 9);
    n_srcs = 4;
    break;
  case IR_TYPE_CLIP_SCALE: /* clip_scale(s, q) */
    srcs[0] = literal(c, "s", DT_F32, 4);
    srcs[1] = literal(c, "q", DT_F32, 9);
    attr.clipnorm = 2;
    break;
  case IR_TYPE_CLIP_VALUE: /* clip_value(g, s) */
    srcs[0] = optable_konst(c, "g", 2, (int64_t[]){3, W}, 9);
    srcs[1] = literal(c, "s", DT_F32, 4);
    attr.clipvalue = 0.05;
    break;
  case IR_TYPE_UPDATE: { /* variables w, slots; the gradient; lr, scale, ok, step */
    ir_type vt = {DT_F32, 2, {3, W}};
    int w = ir_op_writes(op);
    srcs[0] = variable(c, "w", vt, 0.5);
    static const char *const slots[] = {"", "slot1", "slot2", "slot3"};
    for (int s = 1; s < w; s++) srcs[s] = variable(c, slots[s], vt, 0.125 * s);
    srcs[w] = optable_konst(c, "g", 2, vt.dims, 9);
    srcs[w + 1] = literal(c, "lr", DT_F32, 0.01);
    srcs[w + 2] = literal(c, "scale", DT_F32, 4);
    srcs[w + 3] = literal(c, "ok", DT_I1, 1);
    if (n_srcs > w + 4) srcs[w + 4] = literal(c, "t", DT_I64, 3);
    attr = (ir_attr){.rho = 0.9, .epsilon = 1e-7, .momentum = 0.9, .nesterov = 1, .beta_1 = 0.9, .beta_2 = 0.999};
    break;
  }
  case IR_TYPE_SCALAR_UPDATE:
    if (op == IR_OP_COUNT_STEP) {
      srcs[0] = variable(c, "steps", (ir_type){DT_I64, 0, {0}}, 3);
      srcs[1] = literal(c, "ok", DT_I1, 1);
    } else {
      srcs[0] = variable(c, "scale", (ir_type){DT_F32, 0, {0}}, 32768);
      srcs[1] = variable(c, "good_steps", (ir_type){DT_I64, 0, {0}}, 1999);
      srcs[2] = literal(c, "ok", DT_I1, 1);
      attr.period = 2000, attr.min_scale = 1;
    }
    break;
  case IR_TYPE_MATMUL:
    srcs[1] = optable_konst(c, "w", 2, (int64_t[]){W, 8}, 7);
    attr.acc = DT_F32;
    break;
  case IR_TYPE_BINARY:
    /* numpy broadcasting: b a vector over the last dimension, c a [1, W]
     * matrix; pow's base (and its gradients' b) a positive vector, which
     * broadcasts as operand 0 */
    srcs[1] = optable_konst(c, "b", 1, (int64_t[]){W}, 7);
    if (n_srcs > 2) srcs[2] = optable_konst(c, "c", 2, (int64_t[]){1, W}, 8);
    if (op == IR_OP_POW || op == IR_OP_POW_GRAD || op == IR_OP_POW_GRAD_EXP) {
      ir_node *base = optable_konst_positive(c, "base", W, 9);
      if (op == IR_OP_POW) srcs[0] = base, srcs[1] = x;
      else srcs[1] = base;
    }
    /* CNN: batch normalization: x [N, W] over W channels; gamma, beta, mean [W], a positive variance */
    if (op == IR_OP_BATCH_NORM) {
      srcs[1] = optable_konst(c, "gamma", 1, (int64_t[]){W}, 7);
      srcs[2] = optable_konst(c, "beta", 1, (int64_t[]){W}, 8);
      srcs[3] = optable_konst(c, "mean", 1, (int64_t[]){W}, 10);
      srcs[4] = optable_konst_positive(c, "variance", W, 11);
      attr.epsilon = 1e-3, attr.momentum = 0.99;
    }
    break;
  /* general tensors */
  case IR_TYPE_DROPOUT: /* general tensors: dropout_train reads a step count */
    attr.rate = 0.375, attr.seed = 11;
    if (n_srcs > 1) srcs[1] = variable(c, "step", (ir_type){DT_I64, 0, {0}}, 5);
    break;
  case IR_TYPE_REDUCE: /* x as [N,2,4,2]: sum and max over [1,3] keeping them, mean and min over [-1,1] not */
  case IR_TYPE_REDUCE_GRAD: { /* dy = tanh of that reduction of x */
    ir_node *xr = ir_build_op(c->g, IR_OP_RESHAPE, "xr", &x, 1, &(ir_attr){.shape = {4, {IR_DIM_BATCH, 2, 4, 2}}}, no_loc);
    bool keep = op == IR_OP_REDUCE_SUM || op == IR_OP_REDUCE_MAX || op == IR_OP_REDUCE_MAX_GRAD;
    attr.axes = keep ? (ir_attr_INTS){2, {1, 3}} : (ir_attr_INTS){2, {-1, 1}};
    attr.keepdims = keep;
    srcs[0] = xr;
    if (ir_op_type_rule(op) == IR_TYPE_REDUCE_GRAD) {
      ir_op fwd = op == IR_OP_REDUCE_MAX_GRAD ? IR_OP_REDUCE_MAX : IR_OP_REDUCE_MIN;
      ir_node *r = ir_build_op(c->g, fwd, "r", &xr, 1, &attr, no_loc);
      srcs[0] = ir_build_unary(c->g, IR_OP_TANH, "dy", r, no_loc);
      srcs[1] = xr;
    }
    break;
  }
  case IR_TYPE_BROADCAST_TO: /* x as [N,1,W] to [N,3,W] */
    srcs[0] = ir_build_op(c->g, IR_OP_RESHAPE, "xr", &x, 1, &(ir_attr){.shape = {3, {IR_DIM_BATCH, 1, W}}}, no_loc);
    attr.shape = (ir_shape){3, {IR_DIM_BATCH, 3, W}};
    break;
  case IR_TYPE_SUM_TO: /* over the batch and nothing else, keeping the rank (bn_mean: the mean) */
    attr.acc = DT_F32;
    attr.shape = (ir_shape){2, {1, W}};
    break;
  /* integers and booleans: x against a vector; logic of two such
   * comparisons; is_nan of log(x), NaN where x < 0 */
  case IR_TYPE_COMPARE: srcs[1] = optable_konst(c, "b", 1, (int64_t[]){W}, 7); break;
  case IR_TYPE_LOGIC: {
    ir_node *b = optable_konst(c, "b", 1, (int64_t[]){W}, 7), *k = optable_konst(c, "c", 2, (int64_t[]){1, W}, 8);
    srcs[0] = ir_build_op(c->g, IR_OP_LESS, "lt", (ir_node *[]){x, b}, 2, &(ir_attr){0}, no_loc);
    if (n_srcs > 1) srcs[1] = ir_build_op(c->g, IR_OP_LESS_EQUAL, "le", (ir_node *[]){k, x}, 2, &(ir_attr){0}, no_loc);
    break;
  }
  case IR_TYPE_IS_NAN: srcs[0] = ir_build_unary(c->g, IR_OP_LOG, "log", x, no_loc); break;
  case IR_TYPE_UNARY:
  case IR_TYPE_ROWWISE:
    /* general tensors: an alpha and clip bounds inside the input's range;
     * log and the square roots of |x| (their domain), through abs */
    if (ir_op_attrs(op) & A(alpha)) attr.alpha = 0.3;
    if (ir_op_attrs(op) & A(min_value)) attr.min_value = -0.5, attr.max_value = 0.75;
    if (op == IR_OP_LOG || op == IR_OP_SQRT || op == IR_OP_RSQRT) srcs[0] = ir_build_unary(c->g, IR_OP_ABS, "abs", x, no_loc);
    break;
  case IR_TYPE_NORM: /* layer_norm(x, gamma, beta), layer_norm_xhat(x) */
  case IR_TYPE_NORM_GRAD: /* layer_norm_grad(x, gamma, dy) */
    if (n_srcs > 1) srcs[1] = optable_konst(c, "gamma", 1, (int64_t[]){W}, 7);
    if (n_srcs > 2)
      srcs[2] = ir_op_type_rule(op) == IR_TYPE_NORM ? optable_konst(c, "beta", 1, (int64_t[]){W}, 8)
                                                    : ir_build_unary(c->g, IR_OP_TANH, "dy", x, no_loc);
    attr.axis = -1;
    attr.epsilon = 1e-3;
    break;
  case IR_TYPE_CAST: attr.to = DT_F16; break;
  case IR_TYPE_PAD:
  case IR_TYPE_SLICE:
    attr.shape = (ir_shape){2, {IR_DIM_BATCH, ir_op_type_rule(op) == IR_TYPE_PAD ? W + 8 : W / 2}};
    break;
  /* general tensors: layout ops */
  case IR_TYPE_RESHAPE: attr.shape = (ir_shape){4, {IR_DIM_BATCH, 2, 4, 2}}; break;
  case IR_TYPE_TRANSPOSE: /* of a rank-4 view of x: [N,2,4,2] -> [N,2,2,4] */
    srcs[0] = ir_build_op(c->g, IR_OP_RESHAPE, "x4", &x, 1, &(ir_attr){.shape = {4, {IR_DIM_BATCH, 2, 4, 2}}},
                          no_loc);
    attr.perm = (ir_attr_INTS){4, {0, 3, 1, 2}};
    break;
  case IR_TYPE_CONCAT: /* three operands along the last axis */
    srcs[1] = ir_build_unary(c->g, IR_OP_TANH, "t", x, no_loc);
    srcs[2] = x;
    n_srcs = 3;
    attr.axis = -1;
    break;
  case IR_TYPE_STRIDED_SLICE: /* columns 1, 4, 7, 10, 13 */
    attr.starts = (ir_attr_INTS){2, {0, 1}};
    attr.ends = (ir_attr_INTS){2, {0, -2}};
    attr.steps = (ir_attr_INTS){2, {1, 3}};
    break;
  case IR_TYPE_PAD_CONSTANT: /* x's columns at 3, 5, .., 33 of 40, the rest 0.5 */
    attr.shape = (ir_shape){2, {IR_DIM_BATCH, 40}};
    attr.starts = (ir_attr_INTS){2, {0, 3}};
    attr.steps = (ir_attr_INTS){2, {1, 2}};
    attr.value = 0.5;
    break;
  case IR_TYPE_GATHER: /* an embedding lookup: x becomes int32 indices [N, W] into a [7, 3] table */
  case IR_TYPE_GATHER_GRAD: /* the gradient of that lookup, dy = tanh of it */
    x->type.dtype = DT_I32;
    srcs[0] = optable_konst(c, "table", 2, (int64_t[]){7, 3}, 7);
    srcs[1] = x;
    if (ir_op_type_rule(op) == IR_TYPE_GATHER_GRAD) {
      ir_node *g = ir_build_op(c->g, IR_OP_GATHER, "g", srcs, 2, &(ir_attr){.axis = 0}, no_loc);
      srcs[0] = ir_build_unary(c->g, IR_OP_TANH, "dy", g, no_loc);
      attr.shape = (ir_shape){2, {7, 3}};
    }
    attr.axis = 0;
    break;
  /* convolutional networks: x's W values as an image [4, 2, 2] */
  case IR_TYPE_CONV2D:
    x->type = (ir_type){DT_F32, 4, {IR_DIM_BATCH, 4, 2, 2}};
    srcs[1] = optable_konst(c, "w", 4, (int64_t[]){3, 3, 2, 5}, 7);
    attr = (ir_attr){.acc = DT_F32, .strides = {2, {1, 1}}, .dilations = {2, {1, 1}}, .pads = {4, {1, 1, 1, 1}}};
    break;
  case IR_TYPE_CONV2D_INPUT_GRAD: /* dy = x [N,4,2,2] of a 'same' 3x3 conv2d of [N,4,2,3] */
  case IR_TYPE_CONV2D_FILTER_GRAD: /* x and dy both x [N,4,2,2] */
    x->type = (ir_type){DT_F32, 4, {IR_DIM_BATCH, 4, 2, 2}};
    attr = (ir_attr){.acc = DT_F32, .strides = {2, {1, 1}}, .dilations = {2, {1, 1}}, .pads = {4, {1, 1, 1, 1}}};
    if (ir_op_type_rule(op) == IR_TYPE_CONV2D_INPUT_GRAD) {
      srcs[1] = optable_konst(c, "w", 4, (int64_t[]){3, 3, 3, 2}, 7);
      attr.shape = (ir_shape){4, {IR_DIM_BATCH, 4, 2, 3}};
    } else {
      srcs[1] = x;
      attr.shape = (ir_shape){4, {3, 3, 2, 2}};
    }
    break;
  case IR_TYPE_POOL2D: /* x as [N,4,2,2]: 3x2 windows, strides 2x1, 'same' (the odd pad at the end) */
    x->type = (ir_type){DT_F32, 4, {IR_DIM_BATCH, 4, 2, 2}};
    attr = (ir_attr){.pool = {2, {3, 2}}, .strides = {2, {2, 1}}, .pads = {4, {0, 1, 0, 1}}};
    break;
  case IR_TYPE_POOL2D_GRAD: /* dy = tanh of x's [N,2,2,2] 2x1-pooled ... of x [N,4,2,2]: windows 2x1, strides 2x1 */
    x->type = (ir_type){DT_F32, 4, {IR_DIM_BATCH, 4, 2, 2}};
    attr = (ir_attr){.pool = {2, {2, 1}}, .strides = {2, {2, 1}}, .pads = {4, {0}}};
    srcs[0] = ir_build_unary(c->g, IR_OP_TANH, "dy", ir_build_op(c->g, IR_OP_AVG_POOL2D, "p", &x, 1, &attr, no_loc), no_loc);
    srcs[1] = x;
    break;
  /* convolutional networks: grouped convolution, x [N,4,2,2] in 2 groups of one channel */
  case IR_TYPE_GROUP_CONV2D: /* 2 outputs per group, stride 2 down, 'same' */
    x->type = (ir_type){DT_F32, 4, {IR_DIM_BATCH, 4, 2, 2}};
    srcs[1] = optable_konst(c, "w", 4, (int64_t[]){3, 3, 1, 4}, 7);
    attr = (ir_attr){.acc = DT_F32, .strides = {2, {2, 1}}, .dilations = {2, {1, 1}}, .pads = {4, {1, 1, 1, 1}}};
    break;
  case IR_TYPE_GROUP_CONV2D_INPUT_GRAD: /* dy = x of a depthwise 'same' 3x3 of [N,4,2,2] */
  case IR_TYPE_GROUP_CONV2D_FILTER_GRAD:
    x->type = (ir_type){DT_F32, 4, {IR_DIM_BATCH, 4, 2, 2}};
    attr = (ir_attr){.acc = DT_F32, .strides = {2, {1, 1}}, .dilations = {2, {1, 1}}, .pads = {4, {1, 1, 1, 1}}};
    if (ir_op_type_rule(op) == IR_TYPE_GROUP_CONV2D_INPUT_GRAD) {
      srcs[1] = optable_konst(c, "w", 4, (int64_t[]){3, 3, 1, 2}, 7);
      attr.shape = (ir_shape){4, {IR_DIM_BATCH, 4, 2, 2}};
    } else {
      srcs[1] = x;
      attr.shape = (ir_shape){4, {3, 3, 1, 2}};
    }
    break;
  /* general tensors: batched matmul, x as [N,2,2,4] times a [2,4,3] broadcast over N */
  case IR_TYPE_BATCH_MATMUL:
    srcs[0] = ir_build_op(c->g, IR_OP_RESHAPE, "x4", &x, 1, &(ir_attr){.shape = {4, {IR_DIM_BATCH, 2, 2, 4}}},
                          no_loc);
    srcs[1] = optable_konst(c, "w", 3, (int64_t[]){2, 4, 3}, 7);
    attr.acc = DT_F32;
    break;
  /* recurrent layers: x as 4 steps of 4 features, projected to xp [N,4,G*3]; the
   * initial states tanh(x w) [N,3]; lstm backwards, gru with its reset gate before and a mask */
  case IR_TYPE_RNN:
  case IR_TYPE_RNN_GRAD: { /* the gradient ops: the forward op's operands, its y, dy = tanh(y) */
    int64_t h = 3, gh = ir_rnn_gates(op) * h;
    ir_node *x3 = ir_build_op(c->g, IR_OP_RESHAPE, "x3", &x, 1, &(ir_attr){.shape = {3, {IR_DIM_BATCH, 4, 4}}}, no_loc);
    srcs[0] = ir_build_op(c->g, IR_OP_MATMUL, "xp", (ir_node *[]){x3, optable_konst(c, "w", 2, (int64_t[]){4, gh}, 7)}, 2,
                          &(ir_attr){.acc = DT_F32}, no_loc);
    srcs[1] = optable_konst(c, "r", 2, (int64_t[]){h, gh}, 8);
    int k = 2;
    if (ir_rnn_gates(op) == 3) srcs[k++] = optable_konst(c, "rb", 1, (int64_t[]){gh}, 9);
    for (int st = 0; st < ir_rnn_states(op); st++) {
      ir_node *m = ir_build_op(c->g, IR_OP_MATMUL, st ? "c0.pre" : "h0.pre",
                               (ir_node *[]){x, optable_konst(c, st ? "wc" : "wh", 2, (int64_t[]){W, h}, 10 + (uint64_t)st)}, 2,
                               &(ir_attr){.acc = DT_F32}, no_loc);
      srcs[k++] = ir_build_unary(c->g, IR_OP_TANH, st ? "c0" : "h0", m, no_loc);
    }
    attr.reverse = op == IR_OP_LSTM || op == IR_OP_LSTM_GRAD;
    attr.reset_after = 0;
    ir_op fwd = ir_rnn_forward(op);
    ir_node *mask = NULL; /* gru's: a mask, x3[:, :, 0] < 0.25 (the last operand) */
    if (ir_rnn_gates(op) == 3) {
      ir_attr sl = {.starts = {3, {0, 0, 0}}, .ends = {3, {0, 4, 1}}, .steps = {3, {1, 1, 1}}};
      ir_node *x0 = ir_build_op(c->g, IR_OP_STRIDED_SLICE, "x0", &x3, 1, &sl, no_loc);
      x0 = ir_build_op(c->g, IR_OP_RESHAPE, "x0.r", &x0, 1, &(ir_attr){.shape = {2, {IR_DIM_BATCH, 4}}}, no_loc);
      mask = ir_build_op(c->g, IR_OP_LESS, "mask", (ir_node *[]){x0, literal(c, "quarter", DT_F32, 0.25)}, 2,
                         &(ir_attr){0}, no_loc);
    }
    if (fwd != IR_OP_COUNT) {
      if (mask) srcs[k] = mask;
      ir_node *y = ir_build_op(c->g, fwd, "fwd", srcs, k + (mask ? 1 : 0), &attr, no_loc);
      srcs[k++] = y;
      srcs[k++] = ir_build_unary(c->g, IR_OP_TANH, "dy", y, no_loc);
    }
    if (mask) srcs[k++] = mask;
    n_srcs = k;
    break;
  }
  }
  if (!c->node) c->node = ir_build_op(c->g, op, "y", srcs, n_srcs, &attr, no_loc);
  ir_graph_add_output(c->g, "y", c->node);
}

void optable_free_case(op_case *c) {
  ir_graph_destroy(c->g);
  for (int i = 0; i < c->n_data; i++) free(c->data[i]);
}
