/* SPDX-License-Identifier: Apache-2.0 */
/*
 * grad_bn.h: batch normalization in a training step (grad.c's helper;
 * docs/training.md). Keras's BatchNormalization normalizes with the
 * batch's statistics when training and updates its moving statistics,
 * nontrainable variables, every step.
 */
#ifndef CASTOR_PASSES_GRAD_BN_H
#define CASTOR_PASSES_GRAD_BN_H

#include "ir/ir.h"

/* One batch_norm of the step in its training form. */
typedef struct grad_bn {
  ir_node *bn;                       /* batch_norm(x, gamma, beta, mean, var) */
  ir_node *moving_mean, *moving_var; /* the weights it had as operands 3 and 4 */
  ir_node *mean, *var;               /* bn_mean(x), bn_mean((x - mean)^2): now operands 3 and 4 */
  ir_node *centered;                 /* x - mean */
} grad_bn;

/* Gives every batch_norm of g the batch's statistics, built just before
 * it (the schedule stays topological; ids renumbered), and returns them
 * in *out (allocated in a, *n_out of them). names holds every node's name
 * and receives the new ones. False with an error when a batch_norm's
 * moving statistics are not weights or are not [C] over x's last
 * dimension. */
bool grad_bn_training(ir_graph *g, hmap *names, diag_sink *d, arena *a, grad_bn **out, int *n_out);

#endif
