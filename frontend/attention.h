/* SPDX-License-Identifier: Apache-2.0 */
/*
 * attention.h: Keras 3's MultiHeadAttention as IR ops, shared by the .cast
 * and Keras frontends (each checks its layer's arguments and shapes and
 * reads its weights; this builds the graph). The formula, the node names
 * and the masks are described in fe_attention.c.
 */
#ifndef CASTOR_FRONTEND_ATTENTION_H
#define CASTOR_FRONTEND_ATTENTION_H

#include "ir/ir.h"

typedef struct fe_attention {
  ir_graph *g;
  arena *arena;  /* node names */
  diag_loc loc;
  const char *name; /* nodes NAME.query ...; the result is named NAME */
  ir_node *(*stamp)(void *ctx, ir_node *n); /* the frontend's layer/policy marking of each node */
  void *ctx;
  int64_t heads, key_dim, value_dim;
  /* query, key, value kernels [d_in, heads, dim] and biases [heads, dim];
   * attention_output kernel [heads, value_dim, d] and bias [d]; biases
   * NULL without use_bias */
  ir_node *query_kernel, *query_bias, *key_kernel, *key_bias, *value_kernel, *value_bias, *output_kernel, *output_bias;
  ir_node *mask; /* attention_mask [N, T, S] (nonzero attends), or NULL */
  bool causal;   /* use_causal_mask */
} fe_attention;

/* The layer's result for query [N, T, d], value [N, S, dv_in], key [N, S, dk_in]; shapes checked by the caller. */
ir_node *fe_build_attention(const fe_attention *a, ir_node *query, ir_node *value, ir_node *key);

#endif
