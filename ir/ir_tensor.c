/*
 * ir_tensor.c: the type rules of the general-tensor ops that are neither
 * element-wise arithmetic nor layout: dropout and dropout_train (and the
 * generator their masks come from, which the kernels of every target and
 * the reference interpreter compute bit for bit).
 *
 * Dropout's generator is counter-based: element i's bit is a pure
 * function of (seed, step, i), so the mask does not depend on how a
 * kernel splits the elements over threads or GPU blocks, and the gradient
 * recomputes the same mask instead of storing it.
 */
#include <math.h>
#include <stdio.h>

#include "ir/ir.h"

#define FAIL(...) (snprintf(err, errlen, __VA_ARGS__), false)

static void type_str(const ir_type *t, char *buf, size_t n) {
  str_buf b;
  str_buf_init(&b);
  ir_type_print(t, &b);
  snprintf(buf, n, "%s", str_buf_cstr(&b));
  str_buf_fini(&b);
}

/* ---- dropout's generator ---- */

/* splitmix64's finalizer (Steele, Lea, Flood 2014) */
static uint64_t mix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* a 32-bit bijective mixer (the "lowbias32" constants, Wellons 2018) */
static uint32_t mix32(uint32_t x) {
  x ^= x >> 16;
  x *= 0x7feb352du;
  x ^= x >> 15;
  x *= 0x846ca68bu;
  x ^= x >> 16;
  return x;
}

uint64_t ir_dropout_key(int64_t seed, int64_t step) { return mix64((uint64_t)seed ^ mix64((uint64_t)step)); }

uint32_t ir_dropout_hash(uint64_t key, int64_t i) {
  uint32_t h = mix32((uint32_t)(uint64_t)i ^ (uint32_t)key);
  h = mix32(h ^ (uint32_t)((uint64_t)i >> 32) ^ (uint32_t)(key >> 32));
  return h >> 8;
}

uint32_t ir_dropout_threshold(double rate) { return (uint32_t)llround(rate * 16777216.0); }

/* ---- type rules ---- */

bool ir_infer_tensor(ir_op op, ir_node *const *srcs, int n_srcs, const ir_attr *attr, ir_type *out, char *err,
                     size_t errlen) {
  char sa[96], sb[96];
  ir_type_rule rule = ir_op_type_rule(op);
  if (rule == IR_TYPE_DROPOUT) {
    const ir_type *x = &srcs[0]->type;
    type_str(x, sa, sizeof sa);
    if (!dtype_is_float(x->dtype)) return FAIL("%s needs a float operand, got %s", ir_op_name(op), sa);
    if (!(attr->rate >= 0 && attr->rate < 1))
      return FAIL("%s rate must be in [0, 1) (the fraction of elements dropped), got %g", ir_op_name(op), attr->rate);
    if (n_srcs > 1) {
      const ir_type *t = &srcs[1]->type;
      type_str(t, sb, sizeof sb);
      if (t->rank != 0 || t->dtype != DT_I64)
        return FAIL("%s operand 2 (the training step) must be i64 [], got %s", ir_op_name(op), sb);
    }
    *out = *x;
    return true;
  }
  return FAIL("%s: no general-tensor type rule", ir_op_name(op));
}
