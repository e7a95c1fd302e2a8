/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cg_train.c: the kernel kit's training formulas by op, for every target:
 * the kernels of a training step's ops of the reduce and update classes
 * (but the GEMMs: matmul_tn and conv2d_filter_grad are contractions), and
 * the row-wise ops with no line formula in cg_rowwise.c (passes/grad.c
 * builds the step; ir_ops.def gives each op's semantics). A target's
 * driver routes a kernel here by its kernel class (the CPU's cg_cpu.c,
 * NVPTX's cg_nvptx.c); the table below gives each op its formula, and an
 * op of these classes without a row is an assertion, never another op's
 * formula by default.
 *
 * The formulas: cg_loss.c (losses, their gradients, softmax's gradient),
 * cg_update.c (the optimizers with Keras's formulas, batch normalization's
 * moving statistics, the step count, the dynamic loss scale's update,
 * all_finite that decides the skipped step, clipping), cg_sum_to.c (sums
 * over rows in a fixed order: sum_rows, sum_to, bn_mean, gather_grad).
 */
#include "codegen/kernel/cg_train.h"

typedef void (*train_formula)(cg_kctx *c);

/* One row per op of the reduce, update and row-wise classes that is
 * neither a GEMM (cg_is_gemm) nor a line formula of cg_rowwise.c. */
static const train_formula train_formulas[IR_OP_COUNT] = {
    /* reduce */
    [IR_OP_SUM_ROWS] = cg_train_sum_rows,
    [IR_OP_XENT] = cg_train_loss,
    [IR_OP_XENT_LOGITS] = cg_train_loss,
    [IR_OP_MSE] = cg_train_loss,
    [IR_OP_ALL_FINITE] = cg_train_all_finite,
    [IR_OP_GRAD_NORM_SQ] = cg_train_grad_norm_sq, /* training options */
    [IR_OP_CLIP_SCALE] = cg_train_clip_scale,
    [IR_OP_CLIP_VALUE] = cg_train_clip_value,
    [IR_OP_GATHER_GRAD] = cg_train_gather_grad, /* general tensors */
    [IR_OP_SUM_TO] = cg_train_sum_to,
    [IR_OP_BN_MEAN] = cg_train_sum_to, /* CNN: batch normalization's mean, in double */
    /* update */
    [IR_OP_SGD] = cg_train_update,
    [IR_OP_SGD_MOMENTUM] = cg_train_update,
    [IR_OP_RMSPROP] = cg_train_update,
    [IR_OP_RMSPROP_MOMENTUM] = cg_train_update,
    [IR_OP_RMSPROP_CENTERED] = cg_train_update,
    [IR_OP_RMSPROP_CENTERED_MOMENTUM] = cg_train_update,
    [IR_OP_ADAM] = cg_train_update,
    [IR_OP_ADAMW] = cg_train_update,
    [IR_OP_MOVING_UPDATE] = cg_train_update,
    [IR_OP_COUNT_STEP] = cg_train_scalar_update,
    [IR_OP_LOSS_SCALE_UPDATE] = cg_train_scalar_update,
    /* row-wise without a line formula */
    [IR_OP_XENT_GRAD] = cg_train_loss_grad,
    [IR_OP_XENT_LOGITS_GRAD] = cg_train_loss_grad,
    [IR_OP_MSE_GRAD] = cg_train_loss_grad,
    [IR_OP_SOFTMAX_GRAD] = cg_train_softmax_grad,
    /* recurrent layers: a scan over time per batch row (cg_rnn.c) */
    [IR_OP_SIMPLE_RNN] = cg_train_rnn,
    [IR_OP_GRU] = cg_train_rnn,
    [IR_OP_LSTM] = cg_train_rnn,
    [IR_OP_LSTM_TRAIN] = cg_train_rnn,
    [IR_OP_SIMPLE_RNN_GRAD] = cg_train_rnn_grad,
    [IR_OP_GRU_GRAD] = cg_train_rnn_grad,
    [IR_OP_LSTM_GRAD] = cg_train_rnn_grad,
};

bool cg_train_has_formula(ir_op op) {
  CASTOR_ASSERT(op >= 0 && op < IR_OP_COUNT);
  return train_formulas[op] != NULL;
}

void cg_train_emit(cg_kctx *c) {
  ir_op o = op_of(c)->op;
  ir_kernel_class kc = ir_op_kernel(o);
  CASTOR_ASSERT(kc == IR_KERNEL_REDUCE || kc == IR_KERNEL_UPDATE || kc == IR_KERNEL_ROWWISE);
  CASTOR_ASSERT(cg_train_has_formula(o)); /* an op of these classes without a formula row is a bug */
  train_formulas[o](c);
}
