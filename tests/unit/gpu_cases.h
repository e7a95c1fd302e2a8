/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gpu_cases.h: the models the GPU suites compile (check_ptx.c validates
 * their PTX with ptxas; check_cuda.c runs them against the reference
 * interpreter). Together they cover every op and kernel kind of the nvptx
 * target: the tensor-core GEMM with every block width (16, 32, 64, 128) and
 * the FMA GEMM, K and N that are and are not multiples of 8 (so pad and
 * slice kernels), fused epilogues (bias, relu/sigmoid/tanh/gelu, casts, a
 * narrow row softmax), the standalone softmax, eltwise chains with add and
 * multiply, and copies (an input or a value output twice); and a small
 * convolutional network (conv2d's implicit GEMM, pooling, a depthwise
 * conv2d, batch normalization, global pooling). The batch is a
 * kernel parameter, so one PTX module serves batch 1 to 8192.
 */
#ifndef CASTOR_TESTS_GPU_CASES_H
#define CASTOR_TESTS_GPU_CASES_H

#include <string.h>

#include "frontend/frontend.h"
#include "passes/passes.h"

typedef struct gpu_case {
  const char *name, *text;
} gpu_case;

static const gpu_case gpu_cases[] = {
    {"mlp8", /* every dim a multiple of 8; softmax fused into the last GEMM (16 wide) */
     "model mlp8\n"
     "x = input(shape=[784])\n"
     "h = dense(x, units=128, activation=relu)\n"
     "h = dense(h, units=64, activation=gelu)\n"
     "h = dense(h, units=32, activation=tanh)\n"
     "y = dense(h, units=16)\n"
     "p = activation(y, softmax, dtype=float32)\n"
     "output p\n"},
    {"odd", /* no dim a multiple of 8: pad8 pads, slices back */
     "model odd\n"
     "x = input(shape=[13])\n"
     "h = dense(x, units=37, activation=sigmoid)\n"
     "y = dense(h, units=10)\n"
     "p = activation(y, softmax, dtype=float32)\n"
     "output p\n"},
    {"wide", /* a softmax too wide for the GEMM epilogue; add/multiply chains */
     "model wide\n"
     "x = input(shape=[200])\n"
     "a = dense(x, units=200, activation=tanh)\n"
     "b = add(a, x)\n"
     "c = multiply(b, a)\n"
     "d = activation(c, gelu)\n"
     "e = dense(d, units=130, activation=sigmoid)\n"
     "p = activation(e, softmax)\n"
     "output p, c\n"},
    {"copies", /* an input as output, a value output twice, a standalone relu */
     "model copies\n"
     "x = input(shape=[24])\n"
     "r = activation(x, relu)\n"
     "y = dense(r, units=8, use_bias=false)\n"
     "z = activation(y, linear)\n"
     "output x, y, z\n"},
    {"cnn", /* convolutional networks: conv2d's implicit GEMM (3 and 13 channels: pad8 pads them
             * under the 16-bit policies), 'valid' and stride 2 'same', max pooling behind a
             * conv2d, a batch norm folded into a conv2d and one after a relu (the chain's), a
             * depthwise conv2d, global average pooling */
     "model cnn\n"
     "x = input(shape=[12, 10, 3])\n"
     "c = conv2d(x, filters=13, kernel_size=3, activation=relu)\n"
     "m = max_pooling2d(c, pool_size=2)\n"
     "d = conv2d(m, filters=24, kernel_size=3, strides=2, padding=same, use_bias=false)\n"
     "n = batch_normalization(d)\n"
     "r = activation(n, relu)\n"
     "w = depthwise_conv2d(r, kernel_size=3, padding=same)\n"
     "b = batch_normalization(w)\n"
     "g = global_average_pooling2d(b)\n"
     "y = dense(g, units=10)\n"
     "p = activation(y, softmax, dtype=float32)\n"
     "output p\n"},
};
enum { N_GPU_CASES = sizeof gpu_cases / sizeof gpu_cases[0] };

static const char *const gpu_policies[] = {"float32", "float16", "bfloat16", "mixed_float16", "mixed_bfloat16"};
enum { N_GPU_POLICIES = 5 };

/* The case's graph after the cuda pipeline under the policy; NULL with
 * diagnostics in d on error. */
static inline ir_graph *gpu_case_graph(const gpu_case *c, const char *policy, diag_sink *d) {
  ir_graph *g = fe_load_mem(c->name, c->text, strlen(c->text), NULL, d, NULL);
  if (!g) return NULL;
  if (!ir_policy_from_name(policy, strlen(policy), &g->policy)) {
    ir_graph_destroy(g);
    return NULL;
  }
  pass_options po;
  pass_options_init(&po);
  po.verify_each = true;
  if (!pass_run_pipeline(g, PASS_PIPELINE_PAD8, &po, d)) {
    ir_graph_destroy(g);
    return NULL;
  }
  return g;
}

#endif
