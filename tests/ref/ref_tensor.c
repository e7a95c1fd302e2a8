/*
 * ref_tensor.c: the float64 reference of the general-tensor ops that are
 * neither element-wise arithmetic nor layout: dropout (identity) and
 * dropout_train (the mask from ir/ir_tensor.c's generator, the one the
 * kernels reproduce bit for bit; the scaling in float64).
 * Written from the ops' semantics in ir/ir_ops.def.
 */
#include <stdio.h>

#include "tests/ref/ref.h"

#define FAIL(...) (snprintf(err, errlen, __VA_ARGS__), false)

bool ref_eval_tensor(const ir_node *n, double *const *src, const int64_t *n_src, double *y, int64_t count,
                     int64_t batch, char *err, size_t errlen) {
  (void)batch;
  if (n->op == IR_OP_DROPOUT || n->op == IR_OP_DROPOUT_TRAIN) {
    if (n_src[0] != count) return FAIL("%s %%%s: operand size differs", ir_op_name(n->op), n->name);
    if (n->op == IR_OP_DROPOUT) {
      for (int64_t i = 0; i < count; i++) y[i] = src[0][i];
      return true;
    }
    uint64_t key = ir_dropout_key(n->attr.seed, (int64_t)src[1][0]);
    uint32_t thr = ir_dropout_threshold(n->attr.rate);
    double keep = (double)(float)(1.0 - n->attr.rate); /* the kernels' f32 keep probability */
    for (int64_t i = 0; i < count; i++) y[i] = ir_dropout_hash(key, i) >= thr ? src[0][i] / keep : 0.0;
    return true;
  }
  return FAIL("%%%s: %s is not a general-tensor op of the reference", n->name, ir_op_name(n->op));
}
