/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ir.c: op/dtype/policy tables, types and the builder with type inference.
 * The graph container is ir_graph.c; printing, parsing and verification live
 * in their own files.
 */
#include "ir/ir.h"

#include <math.h>

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- tables ---- */

static const struct {
  const char *name;
  int arity;
  ir_attr_set attrs;
  unsigned flags;
  ir_type_rule rule;
  ir_ac_class ac;
  ir_kernel_class kernel;
  int flops;
  const char *sem;
} op_table[IR_OP_COUNT] = {
#define IR_OP(e, name, nsrc, attrs, flags, rule, ac, kernel, flops, sem) \
  [IR_OP_##e] = {#name, nsrc, attrs, flags, rule, ac, kernel, flops, sem},
#include "ir/ir_ops.def"
#undef IR_OP
};

_Static_assert(IR_ATTR_COUNT <= 64, "attribute sets are 64-bit masks");
#define IR_OP(e, name, nsrc, attrs, flags, rule, ac, kernel, flops, sem) \
  _Static_assert((nsrc) <= IR_MAX_SRCS && (nsrc) >= IR_VARIADIC, #name ": sources out of range"); \
  _Static_assert(((flags) >> 8) <= (unsigned)((nsrc) < 0 ? 0 : (nsrc)),                   \
                 #name ": writes more operands than it takes");                          \
  _Static_assert(((flags) & IR_OPF_LEAF) ? (nsrc) == 0 && (rule) == IR_TYPE_LEAF &&         \
                     (ac) == IR_AC_LEAF && (kernel) == IR_KERNEL_NONE                       \
                                         : (nsrc) != 0 && (rule) != IR_TYPE_LEAF &&         \
                     (ac) != IR_AC_LEAF && (kernel) != IR_KERNEL_NONE,                      \
                 #name ": a leaf (and only a leaf) has no sources, type rule, class or kernel");
#include "ir/ir_ops.def"
#undef IR_OP

const char *ir_op_name(ir_op op) { return op < IR_OP_COUNT ? op_table[op].name : "?"; }
int ir_op_arity(ir_op op) { return op_table[op].arity; }
bool ir_op_arity_ok(ir_op op, int n) {
  int a = op_table[op].arity;
  return a == IR_VARIADIC ? n >= 1 && n <= IR_MAX_SRCS : n == a;
}
const char *ir_op_arity_str(ir_op op) {
  static const char *const digits[] = {"0", "1", "2", "3", "4", "5", "6", "7", "8"};
  _Static_assert(IR_MAX_SRCS == 8, "digits and the variadic text follow IR_MAX_SRCS");
  int a = op_table[op].arity;
  return a == IR_VARIADIC ? "1 to 8" : digits[a];
}
int ir_op_writes(ir_op op) { return (int)(op_table[op].flags >> 8 & 0xf); }
ir_attr_set ir_op_attrs(ir_op op) { return op_table[op].attrs; }
unsigned ir_op_flags(ir_op op) { return op_table[op].flags; }
ir_type_rule ir_op_type_rule(ir_op op) { return op_table[op].rule; }
ir_ac_class ir_op_autocast(ir_op op) { return op_table[op].ac; }
ir_kernel_class ir_op_kernel(ir_op op) { return op_table[op].kernel; }
int ir_op_flops(ir_op op) { return op_table[op].flops; }
const char *ir_op_semantics(ir_op op) { return op_table[op].sem; }

const char *ir_ac_class_name(ir_ac_class c) {
  switch (c) {
  case IR_AC_LEAF: return "leaf";
  case IR_AC_ALLOW: return "allow";
  case IR_AC_INFER: return "infer";
  case IR_AC_DENY: return "deny";
  case IR_AC_CLEAR: return "clear";
  case IR_AC_FIXED: return "fixed";
  }
  return "?";
}

const char *ir_kernel_class_name(ir_kernel_class k) {
  switch (k) {
  case IR_KERNEL_NONE: return "none";
  case IR_KERNEL_CONTRACT: return "contract";
  case IR_KERNEL_ELTWISE: return "eltwise";
  case IR_KERNEL_ROWWISE: return "rowwise";
  case IR_KERNEL_REINDEX: return "reindex";
  case IR_KERNEL_REDUCE: return "reduce";
  case IR_KERNEL_UPDATE: return "update";
  }
  return "?";
}

static const struct {
  const char *name;
  ir_attr_kind kind;
  size_t offset; /* of its member in ir_attr */
  const char *meaning;
} attr_table[IR_ATTR_COUNT] = {
#define IR_ATTR(key, kind, doc) [IR_ATTR_##key] = {#key, IR_ATTR_KIND_##kind, offsetof(ir_attr, key), doc},
#include "ir/ir_attrs.def"
#undef IR_ATTR
};

const char *ir_attr_name(ir_attr_key k) { return k < IR_ATTR_COUNT ? attr_table[k].name : "?"; }
ir_attr_kind ir_attr_kind_of(ir_attr_key k) { return attr_table[k].kind; }
const char *ir_attr_meaning(ir_attr_key k) { return attr_table[k].meaning; }
void *ir_attr_slot(ir_attr *a, ir_attr_key k) { return (char *)a + attr_table[k].offset; }
const void *ir_attr_get(const ir_attr *a, ir_attr_key k) { return (const char *)a + attr_table[k].offset; }

/* Copies the string attributes of an op into the arena. */
static void attr_own_strings(ir_attr *a, ir_op op, arena *ar) {
  for (int k = 0; k < IR_ATTR_COUNT; k++)
    if ((ir_op_attrs(op) >> k & 1) && attr_table[k].kind == IR_ATTR_KIND_STRING) {
      const char **str = ir_attr_slot(a, (ir_attr_key)k);
      if (*str) *str = arena_strdup(ar, *str);
    }
}

static bool name_is(const char *s, size_t n, const char *name) {
  return strlen(name) == n && memcmp(s, name, n) == 0;
}

static const char *const state_kind_names[IR_STATE_COUNT] = {
    [IR_STATE_NONE] = "none", [IR_STATE_WEIGHT] = "weight", [IR_STATE_NONTRAINABLE] = "nontrainable",
    [IR_STATE_SLOT] = "slot", [IR_STATE_SCALAR] = "scalar"};

const char *ir_state_kind_name(ir_state_kind k) {
  return (unsigned)k < IR_STATE_COUNT ? state_kind_names[k] : "?";
}

bool ir_state_kind_from_name(const char *s, size_t n, ir_state_kind *out) {
  for (int i = 0; i < IR_STATE_COUNT; i++)
    if (name_is(s, n, state_kind_names[i])) return *out = (ir_state_kind)i, true;
  return false;
}

bool ir_attr_from_name(const char *s, size_t n, ir_attr_key *out) {
  for (int i = 0; i < IR_ATTR_COUNT; i++)
    if (name_is(s, n, attr_table[i].name)) return *out = (ir_attr_key)i, true;
  return false;
}

bool ir_op_from_name(const char *s, size_t n, ir_op *out) {
  for (int i = 0; i < IR_OP_COUNT; i++)
    if (name_is(s, n, op_table[i].name)) return *out = (ir_op)i, true;
  return false;
}

static const struct {
  const char *name;
  ir_dtype compute, variable;
} policy_table[IR_POLICY_COUNT] = {
    [IR_POLICY_NONE] = {"none", DT_F32, DT_F32},
#define IR_POLICY(e, name, c, v) [IR_POLICY_##e] = {#name, DT_##c, DT_##v},
#include "ir/ir_policies.def"
#undef IR_POLICY
};

const char *ir_policy_name(ir_policy p) { return p < IR_POLICY_COUNT ? policy_table[p].name : "?"; }
ir_dtype ir_policy_compute_dtype(ir_policy p) { return policy_table[p].compute; }
ir_dtype ir_policy_variable_dtype(ir_policy p) { return policy_table[p].variable; }
bool ir_policy_from_name(const char *s, size_t n, ir_policy *out) {
  for (int i = 1; i < IR_POLICY_COUNT; i++)
    if (name_is(s, n, policy_table[i].name)) return *out = (ir_policy)i, true;
  return false;
}

/* ---- types ---- */

bool ir_type_eq(const ir_type *a, const ir_type *b) {
  if (a->dtype != b->dtype || a->rank != b->rank) return false;
  for (int i = 0; i < a->rank; i++)
    if (a->dims[i] != b->dims[i]) return false;
  return true;
}

bool ir_result_type_ok(ir_op op, const ir_attr *attr, const ir_type *inferred, const ir_type *declared) {
  if (ir_type_eq(inferred, declared)) return true;
  if (!(ir_op_attrs(op) & A(acc)) || ir_op_autocast(op) != IR_AC_ALLOW) return false;
  if (inferred->dtype != DT_F16 && inferred->dtype != DT_BF16) return false;
  ir_type t = *inferred;
  t.dtype = attr->acc;
  return declared->dtype == DT_F32 && ir_type_eq(&t, declared);
}

bool ir_type_is_batched(const ir_type *t) { return t->rank > 0 && t->dims[0] == IR_DIM_BATCH; }

bool ir_type_inner_numel(const ir_type *t, int64_t *out) {
  int64_t n = 1;
  for (int i = ir_type_is_batched(t) ? 1 : 0; i < t->rank; i++)
    if (!size_mul_ok(n, t->dims[i], &n)) return false;
  *out = n;
  return true;
}

bool ir_type_numel(const ir_type *t, int64_t batch, int64_t *out) {
  if (!ir_type_inner_numel(t, out)) return false;
  return ir_type_is_batched(t) ? size_mul_ok(*out, batch, out) : true;
}

bool ir_type_bytes(const ir_type *t, int64_t batch, int64_t *out) {
  int64_t n;
  return ir_type_numel(t, batch, &n) && size_mul_ok(n, dtype_size(t->dtype), out);
}

void ir_type_print(const ir_type *t, str_buf *out) {
  str_buf_printf(out, "%s[", dtype_name(t->dtype));
  for (int i = 0; i < t->rank; i++) {
    if (i) str_buf_putc(out, ',');
    if (t->dims[i] == IR_DIM_BATCH) str_buf_putc(out, 'N');
    else str_buf_printf(out, "%lld", (long long)t->dims[i]);
  }
  str_buf_putc(out, ']');
}

/* ---- type inference ---- */

static void shape_str(const ir_type *t, char *buf, size_t n) {
  str_buf b;
  str_buf_init(&b);
  ir_type_print(t, &b);
  snprintf(buf, n, "%s", str_buf_cstr(&b));
  str_buf_fini(&b);
}

#define FAIL(...) (snprintf(err, errlen, __VA_ARGS__), false)

/* PAD grows and SLICE shrinks x to attr->shape, keeping N where x has it. */
static bool infer_reshape(ir_op op, const ir_type *x, const ir_shape *shape, bool grow, ir_type *out,
                          char *err, size_t errlen) {
  char sa[96];
  shape_str(x, sa, sizeof sa);
  if (shape->rank != x->rank) return FAIL("%s to rank %d of %s", ir_op_name(op), shape->rank, sa);
  *out = *x;
  for (int r = 0; r < x->rank; r++) {
    int64_t want = shape->dims[r], have = x->dims[r];
    if ((want == IR_DIM_BATCH) != (have == IR_DIM_BATCH))
      return FAIL("%s of %s must keep the batch dimension N in dimension 0 and nowhere else", ir_op_name(op), sa);
    if (want != IR_DIM_BATCH && (want < 0 || (grow ? want < have : want > have)))
      return FAIL("%s of %s would make dimension %d %lld; a %s", ir_op_name(op), sa, r, (long long)want,
                  grow ? "pad may only grow a dimension" : "slice may only shrink a dimension");
    out->dims[r] = want;
  }
  return true;
}

/* The first normalized dimension of a layer_norm of x, or -1. */
int ir_norm_first_dim(const ir_type *x, int64_t axis) {
  int64_t a = axis < 0 ? axis + x->rank : axis;
  return a >= 0 && a < x->rank ? (int)a : -1;
}

/* An optimizer's hyperparameters: decays in [0, 1), epsilon and momentum
 * finite and >= 0. */
static bool check_update_attrs(ir_op op, const ir_attr *attr, char *err, size_t errlen) {
  static const ir_attr_key decays[] = {IR_ATTR_rho, IR_ATTR_beta_1, IR_ATTR_beta_2, IR_ATTR_momentum};
  for (size_t i = 0; i < sizeof decays / sizeof *decays; i++) {
    if (!(ir_op_attrs(op) >> decays[i] & 1)) continue;
    double v = *(const double *)ir_attr_get(attr, decays[i]);
    if (!(v >= 0 && v < 1))
      return FAIL("%s %s must be in [0, 1), got %g", ir_op_name(op), ir_attr_name(decays[i]), v);
  }
  if (ir_op_attrs(op) & A(epsilon) && !(attr->epsilon >= 0 && attr->epsilon <= 1))
    return FAIL("%s epsilon must be in [0, 1], got %g", ir_op_name(op), attr->epsilon);
  if (ir_op_attrs(op) & A(nesterov) && attr->nesterov != 0 && attr->nesterov != 1)
    return FAIL("%s nesterov must be 0 or 1, got %lld", ir_op_name(op), (long long)attr->nesterov);
  /* training options: decoupled weight decay */
  if (ir_op_attrs(op) & A(weight_decay) && !(attr->weight_decay >= 0 && attr->weight_decay <= 1e30))
    return FAIL("%s weight_decay must be a finite number >= 0, got %g", ir_op_name(op), attr->weight_decay);
  return true;
}

/* convolutional networks: conv2d's shape rule */
int64_t ir_conv_out_size(int64_t in, int64_t k, int64_t stride, int64_t dilation, int64_t pad0, int64_t pad1) {
  if (in < 1 || k < 1 || stride < 1 || dilation < 1 || pad0 < 0 || pad1 < 0) return 0;
  int64_t span = dilation * (k - 1) + 1, padded = in + pad0 + pad1;
  return padded < span ? 0 : (padded - span) / stride + 1;
}

static bool ints_ok(const ir_attr_INTS *v, int n, int64_t lo, int64_t hi) {
  if (v->n != n) return false;
  for (int i = 0; i < n; i++)
    if (v->v[i] < lo || v->v[i] > hi) return false;
  return true;
}

static bool infer_conv2d(ir_op op, ir_node *const *srcs, const ir_attr *attr, ir_type *out, char *err,
                         size_t errlen) {
  char sa[96], sb[96];
  const ir_type *x = &srcs[0]->type, *w = &srcs[1]->type;
  shape_str(x, sa, sizeof sa), shape_str(w, sb, sizeof sb);
  if (x->rank != 4 || w->rank != 4)
    return FAIL("%s needs x [N,H,W,C] and w [KH,KW,C,O] (rank 4), got %s and %s", ir_op_name(op), sa, sb);
  if (ir_type_is_batched(w) || x->dims[1] == IR_DIM_BATCH)
    return FAIL("%s: only x's first dimension may be the batch N, got %s and %s", ir_op_name(op), sa, sb);
  if (x->dtype != w->dtype || !dtype_is_float(x->dtype))
    return FAIL("%s operands must share one float dtype, got %s and %s", ir_op_name(op), sa, sb);
  if ((unsigned)attr->acc >= DT_COUNT || !dtype_is_float(attr->acc))
    return FAIL("%s accumulator must be a float dtype, got %s", ir_op_name(op), dtype_name(attr->acc));
  ir_type_rule rule = ir_op_type_rule(op);
  bool grouped = rule == IR_TYPE_GROUP_CONV2D || rule == IR_TYPE_GROUP_CONV2D_INPUT_GRAD ||
                 rule == IR_TYPE_GROUP_CONV2D_FILTER_GRAD;
  if (!grouped && w->dims[2] != x->dims[3])
    return FAIL("%s kernel %s takes %lld input channels, x %s has %lld", ir_op_name(op), sb, (long long)w->dims[2], sa,
                (long long)x->dims[3]);
  /* convolutional networks: groups = C / w's input channels, as tf.nn.conv2d infers them */
  if (grouped && (x->dims[3] % w->dims[2] || w->dims[3] % (x->dims[3] / w->dims[2])))
    return FAIL("%s kernel %s takes %lld input channels per group: x %s's %lld channels must be a whole number of "
                "groups, and the %lld output channels a multiple of the groups",
                ir_op_name(op), sb, (long long)w->dims[2], sa, (long long)x->dims[3], (long long)w->dims[3]);
  if (!ints_ok(&attr->strides, 2, 1, 1 << 20) || !ints_ok(&attr->dilations, 2, 1, 1 << 20) ||
      !ints_ok(&attr->pads, 4, 0, 1 << 20))
    return FAIL("%s needs strides=[sh,sw] and dilations=[dh,dw] >= 1 and pads=[top,bottom,left,right] >= 0",
                ir_op_name(op));
  int64_t oh = ir_conv_out_size(x->dims[1], w->dims[0], attr->strides.v[0], attr->dilations.v[0], attr->pads.v[0],
                                attr->pads.v[1]);
  int64_t ow = ir_conv_out_size(x->dims[2], w->dims[1], attr->strides.v[1], attr->dilations.v[1], attr->pads.v[2],
                                attr->pads.v[3]);
  if (oh < 1 || ow < 1)
    return FAIL("%s kernel %s (dilations [%lld,%lld]) does not fit in x %s with pads [%lld,%lld,%lld,%lld]",
                ir_op_name(op), sb, (long long)attr->dilations.v[0], (long long)attr->dilations.v[1], sa,
                (long long)attr->pads.v[0], (long long)attr->pads.v[1], (long long)attr->pads.v[2],
                (long long)attr->pads.v[3]);
  *out = (ir_type){x->dtype, 4, {x->dims[0], oh, ow, w->dims[3]}};
  return true;
}

/* pooling: a window per output element, every window meeting x */
static bool infer_pool2d(ir_op op, ir_node *const *srcs, const ir_attr *attr, ir_type *out, char *err, size_t errlen) {
  char sa[96];
  const ir_type *x = &srcs[0]->type;
  shape_str(x, sa, sizeof sa);
  if (x->rank != 4 || !dtype_is_float(x->dtype) || x->dims[1] == IR_DIM_BATCH)
    return FAIL("%s needs a float x [N,H,W,C], got %s", ir_op_name(op), sa);
  if (!ints_ok(&attr->pool, 2, 1, 1 << 20) || !ints_ok(&attr->strides, 2, 1, 1 << 20) ||
      !ints_ok(&attr->pads, 4, 0, 1 << 20))
    return FAIL("%s needs pool=[ph,pw] and strides=[sh,sw] >= 1 and pads=[top,bottom,left,right] >= 0", ir_op_name(op));
  /* 'same' padding makes any window fit, and Keras pools a 3x3 window over
   * a 2x2 or 1x1 image that way (NASNet at small inputs); but a window more
   * than twice x's size plus one covers all of x from every position, and
   * one of 2^20 on a 4x4 image visited 2^40 positions per output (a hang):
   * that is refused, a global pooling says it. */
  if (attr->pool.v[0] > 2 * x->dims[1] + 1 || attr->pool.v[1] > 2 * x->dims[2] + 1)
    return FAIL("%s window [%lld,%lld] is more than twice the size of x %s plus one: every window would "
                "cover all of x (a global pooling computes that)", ir_op_name(op), (long long)attr->pool.v[0],
                (long long)attr->pool.v[1], sa);
  for (int i = 0; i < 4; i++)
    if (attr->pads.v[i] >= attr->pool.v[i / 2])
      return FAIL("%s pad %lld is not smaller than its window %lld: a window would hold only padding", ir_op_name(op),
                  (long long)attr->pads.v[i], (long long)attr->pool.v[i / 2]);
  int64_t oh = ir_conv_out_size(x->dims[1], attr->pool.v[0], attr->strides.v[0], 1, attr->pads.v[0], attr->pads.v[1]);
  int64_t ow = ir_conv_out_size(x->dims[2], attr->pool.v[1], attr->strides.v[1], 1, attr->pads.v[2], attr->pads.v[3]);
  if (oh < 1 || ow < 1)
    return FAIL("%s window [%lld,%lld] does not fit in x %s", ir_op_name(op), (long long)attr->pool.v[0],
                (long long)attr->pool.v[1], sa);
  *out = (ir_type){x->dtype, 4, {x->dims[0], oh, ow, x->dims[3]}};
  return true;
}

/* conv2d's gradients: the forward conv2d of x (its shape) and w (their
 * shapes: one is an operand, the other {shape}) must give dy's shape. */
static bool infer_conv2d_grad(ir_op op, ir_node *const *srcs, const ir_attr *attr, ir_type *out, char *err,
                              size_t errlen) {
  bool input = ir_op_type_rule(op) == IR_TYPE_CONV2D_INPUT_GRAD || ir_op_type_rule(op) == IR_TYPE_GROUP_CONV2D_INPUT_GRAD;
  const ir_node *dy = srcs[input ? 0 : 1], *other = srcs[input ? 1 : 0];
  ir_node fx = {0}, fw = {0};
  ir_type st = {other->type.dtype, attr->shape.rank, {0}};
  for (int r = 0; r < attr->shape.rank && r < IR_MAX_RANK; r++) st.dims[r] = attr->shape.dims[r];
  fx.type = input ? st : other->type;
  fw.type = input ? other->type : st;
  ir_type fwd;
  if (!infer_conv2d(op, (ir_node *[]){&fx, &fw}, attr, &fwd, err, errlen)) return false;
  char sa[96], sb[96];
  shape_str(&dy->type, sa, sizeof sa), shape_str(&fwd, sb, sizeof sb);
  if (!ir_type_eq(&dy->type, &fwd))
    return FAIL("%s dy %s must be the forward conv2d's result %s", ir_op_name(op), sa, sb);
  *out = st;
  return true;
}

/* general tensors: the broadcasting rules (at the end of this file) */
static bool infer_broadcast(ir_op op, ir_node *const *srcs, int n, ir_type *out, char *err, size_t errlen);
static bool infer_sum_to(ir_op op, const ir_type *x, const ir_attr *attr, ir_type *out, char *err, size_t errlen);
static bool check_eltwise_attrs(ir_op op, const ir_attr *attr, char *err, size_t errlen);
static bool infer_batch_matmul(ir_op op, ir_node *const *srcs, const ir_attr *attr, ir_type *out, char *err,
                               size_t errlen);

/* empty tensors: the type rules whose ops take an operand with a dimension 0
 * (docs/shapes.md, "Empty tensors"); pass fold-empty rewrites the ones whose
 * result is not empty (a reduction, a contraction over K = 0, a concat or a
 * pad of an empty piece), and no kernel computes an empty result. */
static bool empty_operand_ok(ir_type_rule rule) {
  static const ir_type_rule ok[] = {IR_TYPE_MATMUL, IR_TYPE_BATCH_MATMUL, IR_TYPE_BINARY, IR_TYPE_UNARY,
                                    IR_TYPE_ROWWISE, IR_TYPE_NORM, IR_TYPE_CAST, IR_TYPE_SAME, IR_TYPE_RESHAPE,
                                    IR_TYPE_TRANSPOSE, IR_TYPE_CONCAT, IR_TYPE_STRIDED_SLICE, IR_TYPE_PAD_CONSTANT,
                                    IR_TYPE_REDUCE, IR_TYPE_BROADCAST_TO, IR_TYPE_PAD, IR_TYPE_SLICE,
                                    IR_TYPE_COMPARE, IR_TYPE_LOGIC, IR_TYPE_IS_NAN};
  for (size_t i = 0; i < sizeof ok / sizeof *ok; i++)
    if (ok[i] == rule) return true;
  return false;
}

bool ir_type_is_empty(const ir_type *t) {
  for (int r = 0; r < t->rank; r++)
    if (t->dims[r] == 0) return true;
  return false;
}

bool ir_infer_type(ir_op op, ir_node *const *srcs, int n_srcs, const ir_attr *attr,
                   ir_type *out, char *err, size_t errlen) {
  char sa[96], sb[96];
  if (!ir_op_arity_ok(op, n_srcs))
    return FAIL("%s takes %s operand(s), got %d", ir_op_name(op), ir_op_arity_str(op), n_srcs);
  for (int s = 0; s < n_srcs; s++)
    if (ir_type_is_empty(&srcs[s]->type) && !empty_operand_ok(ir_op_type_rule(op))) {
      shape_str(&srcs[s]->type, sa, sizeof sa);
      return FAIL("%s of the empty tensor %s (operand %d): castor computes empty tensors only in element-wise, "
                  "layout, reduction and matmul ops", ir_op_name(op), sa, s + 1);
    }
  switch (ir_op_type_rule(op)) {
  case IR_TYPE_LEAF:
    return FAIL("%s has no inferred type", ir_op_name(op));
  case IR_TYPE_MATMUL: {
    const ir_type *a = &srcs[0]->type, *b = &srcs[1]->type;
    shape_str(a, sa, sizeof sa), shape_str(b, sb, sizeof sb);
    /* general tensors: a of any rank >= 2 (Keras Dense on the last axis) */
    if (a->rank < 2 || b->rank != 2)
      return FAIL("%s operands must be rank >= 2 and rank 2, got %s and %s", ir_op_name(op), sa, sb);
    if (ir_type_is_batched(b))
      return FAIL("%s right operand %s must not have the batch dimension", ir_op_name(op), sb);
    if (a->dims[a->rank - 1] != b->dims[0])
      return FAIL("%s inner dimensions differ: %s and %s", ir_op_name(op), sa, sb);
    if (a->dtype != b->dtype || !dtype_is_float(a->dtype))
      return FAIL("%s operands must share one float dtype, got %s and %s", ir_op_name(op), sa, sb);
    if ((unsigned)attr->acc >= DT_COUNT || !dtype_is_float(attr->acc))
      return FAIL("%s accumulator must be a float dtype, got %s", ir_op_name(op), dtype_name(attr->acc));
    *out = *a;
    out->dims[a->rank - 1] = b->dims[1];
    return true;
  }
  case IR_TYPE_BINARY: return check_eltwise_attrs(op, attr, err, errlen) && infer_broadcast(op, srcs, n_srcs, out, err, errlen);
  /* integers and booleans */
  case IR_TYPE_COMPARE:
  case IR_TYPE_LOGIC:
  case IR_TYPE_IS_NAN: return infer_broadcast(op, srcs, n_srcs, out, err, errlen);
  case IR_TYPE_UNARY:
  case IR_TYPE_ROWWISE:
    if (!check_eltwise_attrs(op, attr, err, errlen)) return false;
    shape_str(&srcs[0]->type, sa, sizeof sa);
    if (!dtype_is_float(srcs[0]->type.dtype))
      return FAIL("%s needs a float operand, got %s", ir_op_name(op), sa);
    if (ir_op_type_rule(op) == IR_TYPE_ROWWISE && srcs[0]->type.rank < 1)
      return FAIL("%s needs rank >= 1, got %s", ir_op_name(op), sa);
    *out = srcs[0]->type;
    return true;
  case IR_TYPE_NORM:
  case IR_TYPE_NORM_GRAD: {
    const ir_type *x = &srcs[0]->type;
    shape_str(x, sa, sizeof sa);
    if (!dtype_is_float(x->dtype)) return FAIL("%s needs a float operand, got %s", ir_op_name(op), sa);
    int first = ir_norm_first_dim(x, attr->axis);
    if (first < 0 || (first == 0 && ir_type_is_batched(x)))
      return FAIL("%s axis %lld is not a dimension of %s%s", ir_op_name(op), (long long)attr->axis, sa,
                  first == 0 ? " other than the batch N" : "");
    if (!(attr->epsilon >= 0) || attr->epsilon > 1e30)
      return FAIL("%s epsilon must be a finite number >= 0, got %g", ir_op_name(op), attr->epsilon);
    ir_type want = {x->dtype, x->rank - first, {0}};
    for (int r = first; r < x->rank; r++) want.dims[r - first] = x->dims[r];
    /* operands after x: gamma, then beta, or for the gradient dy, shaped like x */
    bool grad = ir_op_type_rule(op) == IR_TYPE_NORM_GRAD;
    for (int s = 1; s < n_srcs; s++) {
      bool dy = grad && s == 2;
      if (!ir_type_eq(&srcs[s]->type, dy ? x : &want)) {
        shape_str(&srcs[s]->type, sb, sizeof sb);
        char sw[96];
        shape_str(dy ? x : &want, sw, sizeof sw);
        return FAIL("%s %s of %s must be %s (%s), got %s", ir_op_name(op), s == 1 ? "gamma" : dy ? "dy" : "beta", sa,
                    sw, dy ? "x's type" : "x's normalized dimensions", sb);
      }
    }
    *out = *x;
    return true;
  }
  case IR_TYPE_CAST:
    if ((unsigned)attr->to >= DT_COUNT) return FAIL("cast to an invalid dtype code %d", (int)attr->to);
    *out = srcs[0]->type;
    out->dtype = attr->to;
    return true;
  case IR_TYPE_PAD:
  case IR_TYPE_SLICE:
    return infer_reshape(op, &srcs[0]->type, &attr->shape, ir_op_type_rule(op) == IR_TYPE_PAD, out, err, errlen);
  case IR_TYPE_MATMUL_NT:
  case IR_TYPE_MATMUL_TN: {
    const ir_type *a = &srcs[0]->type, *b = &srcs[1]->type;
    bool nt = ir_op_type_rule(op) == IR_TYPE_MATMUL_NT;
    shape_str(a, sa, sizeof sa), shape_str(b, sb, sizeof sb);
    /* general tensors: a of any rank >= 2 (matmul's gradients on [N, T, C]):
     * nt's b is rank 2; tn's b has a's leading dimensions, all summed */
    if (a->rank < 2 || b->rank < 2 || (nt ? b->rank != 2 : b->rank != a->rank))
      return FAIL("%s operands must be rank >= 2 (%s), got %s and %s", ir_op_name(op),
                  nt ? "b rank 2" : "of one rank", sa, sb);
    if (nt && ir_type_is_batched(b))
      return FAIL("%s right operand %s must not have the batch dimension", ir_op_name(op), sb);
    bool lead_ok = true;
    for (int r = 0; !nt && r < a->rank - 1; r++) lead_ok &= a->dims[r] == b->dims[r];
    if (nt ? a->dims[a->rank - 1] != b->dims[1] : !lead_ok)
      return FAIL("%s summed dimensions differ: %s and %s", ir_op_name(op), sa, sb);
    if (a->dtype != b->dtype || !dtype_is_float(a->dtype))
      return FAIL("%s operands must share one float dtype, got %s and %s", ir_op_name(op), sa, sb);
    if ((unsigned)attr->acc >= DT_COUNT || !dtype_is_float(attr->acc))
      return FAIL("%s accumulator must be a float dtype, got %s", ir_op_name(op), dtype_name(attr->acc));
    if (!nt && (a->dims[a->rank - 1] == IR_DIM_BATCH || b->dims[b->rank - 1] == IR_DIM_BATCH))
      return FAIL("%s result %s x %s would have the batch dimension inside", ir_op_name(op), sa, sb);
    if (nt) {
      *out = *a;
      out->dims[a->rank - 1] = b->dims[0];
    } else {
      *out = (ir_type){a->dtype, 2, {a->dims[a->rank - 1], b->dims[b->rank - 1]}};
    }
    return true;
  }
  case IR_TYPE_SUM_ROWS: {
    const ir_type *x = &srcs[0]->type;
    shape_str(x, sa, sizeof sa);
    if (x->rank != 2 || !dtype_is_float(x->dtype) || x->dims[1] == IR_DIM_BATCH)
      return FAIL("%s needs a float operand of rank 2, got %s", ir_op_name(op), sa);
    if ((unsigned)attr->acc >= DT_COUNT || !dtype_is_float(attr->acc))
      return FAIL("%s accumulator must be a float dtype, got %s", ir_op_name(op), dtype_name(attr->acc));
    *out = (ir_type){x->dtype, 1, {x->dims[1]}};
    return true;
  }
  case IR_TYPE_SAME:
    if (!check_eltwise_attrs(op, attr, err, errlen)) return false;
    shape_str(&srcs[0]->type, sa, sizeof sa), shape_str(&srcs[1]->type, sb, sizeof sb);
    if (!ir_type_eq(&srcs[0]->type, &srcs[1]->type) || !dtype_is_float(srcs[0]->type.dtype))
      return FAIL("%s operands must have one float type, got %s and %s", ir_op_name(op), sa, sb);
    if (ir_op_kernel(op) == IR_KERNEL_ROWWISE && srcs[0]->type.rank < 1)
      return FAIL("%s needs rank >= 1, got %s", ir_op_name(op), sa);
    *out = srcs[0]->type;
    return true;
  case IR_TYPE_LOSS:
  case IR_TYPE_LOSS_GRAD: {
    const ir_type *a = &srcs[0]->type, *t = &srcs[1]->type;
    shape_str(a, sa, sizeof sa), shape_str(t, sb, sizeof sb);
    if (a->rank != 2 || !dtype_is_float(a->dtype) || a->dims[1] == IR_DIM_BATCH)
      return FAIL("%s needs float [N,C] predictions, got %s", ir_op_name(op), sa);
    bool sparse = t->dtype == DT_I32 && t->rank == 1 && t->dims[0] == a->dims[0];
    if (sparse && op != IR_OP_XENT && op != IR_OP_XENT_GRAD && op != IR_OP_XENT_LOGITS &&
        op != IR_OP_XENT_LOGITS_GRAD)
      return FAIL("%s needs targets of the predictions' type %s, got %s", ir_op_name(op), sa, sb);
    if (!sparse && !ir_type_eq(a, t))
      return FAIL("%s targets must be int32 class indices [%s] or of the predictions' type %s, got %s",
                  ir_op_name(op), a->dims[0] == IR_DIM_BATCH ? "N" : "rows", sa, sb);
    if (ir_op_attrs(op) & A(epsilon) && !(attr->epsilon >= 0 && attr->epsilon < 0.5))
      return FAIL("%s epsilon must be in [0, 0.5), got %g", ir_op_name(op), attr->epsilon);
    if (ir_op_type_rule(op) == IR_TYPE_LOSS) {
      *out = (ir_type){DT_F32, 0, {0}};
      return true;
    }
    const ir_type *c = &srcs[2]->type;
    if (c->rank != 0 || c->dtype != DT_F32) {
      shape_str(c, sb, sizeof sb);
      return FAIL("%s seed must be f32 [], got %s", ir_op_name(op), sb);
    }
    *out = *a;
    return true;
  }
  case IR_TYPE_ALL_FINITE:
    for (int s = 0; s < n_srcs; s++) {
      const ir_type *x = &srcs[s]->type;
      if (!dtype_is_float(x->dtype) && !(x->dtype == DT_I1 && x->rank == 0)) {
        shape_str(x, sa, sizeof sa);
        return FAIL("%s operand %d must be float or i1 [], got %s", ir_op_name(op), s + 1, sa);
      }
    }
    *out = (ir_type){DT_I1, 0, {0}};
    return true;
  case IR_TYPE_UPDATE: {
    int w = ir_op_writes(op), n = ir_op_arity(op);
    const ir_type *v = &srcs[0]->type;
    shape_str(v, sa, sizeof sa);
    if (!dtype_is_float(v->dtype) || ir_type_is_batched(v))
      return FAIL("%s updates a float variable without the batch dimension, got %s", ir_op_name(op), sa);
    for (int s = 1; s <= w; s++) { /* slots, then the gradient */
      if (!ir_type_eq(&srcs[s]->type, v)) {
        shape_str(&srcs[s]->type, sb, sizeof sb);
        return FAIL("%s operand %d must have the variable's type %s, got %s", ir_op_name(op), s + 1, sa, sb);
      }
    }
    static const ir_dtype scalars[] = {DT_F32, DT_F32, DT_I1, DT_I64};
    static const char *const what[] = {"the learning rate", "the loss scale", "ok", "the step count"};
    for (int s = w + 1; s < n; s++) {
      int k = s - w - 1;
      if (srcs[s]->type.rank != 0 || srcs[s]->type.dtype != scalars[k]) {
        shape_str(&srcs[s]->type, sb, sizeof sb);
        return FAIL("%s operand %d (%s) must be %s [], got %s", ir_op_name(op), s + 1, what[k],
                    dtype_name(scalars[k]), sb);
      }
    }
    return check_update_attrs(op, attr, err, errlen) && (*out = *v, true);
  }
  case IR_TYPE_SCALAR_UPDATE: {
    /* count_step(n i64, ok i1); loss_scale_update(s f32, n i64, ok i1) */
    static const ir_dtype count_step[] = {DT_I64, DT_I1};
    static const ir_dtype scale_update[] = {DT_F32, DT_I64, DT_I1};
    const ir_dtype *want = op == IR_OP_COUNT_STEP ? count_step : scale_update;
    for (int s = 0; s < n_srcs; s++) {
      if (srcs[s]->type.rank != 0 || srcs[s]->type.dtype != want[s]) {
        shape_str(&srcs[s]->type, sb, sizeof sb);
        return FAIL("%s operand %d must be %s [], got %s", ir_op_name(op), s + 1, dtype_name(want[s]), sb);
      }
    }
    if (op == IR_OP_LOSS_SCALE_UPDATE && (attr->period < 1 || !(attr->min_scale >= 0) || attr->min_scale > 1e30))
      return FAIL("%s needs period >= 1 and a finite min_scale >= 0, got %lld and %g", ir_op_name(op),
                  (long long)attr->period, attr->min_scale);
    *out = srcs[0]->type;
    return true;
  }
  /* training options: gradient clipping */
  case IR_TYPE_GRAD_NORM:
  case IR_TYPE_CLIP_SCALE:
  case IR_TYPE_CLIP_VALUE: {
    ir_type_rule r = ir_op_type_rule(op);
    int g0 = r == IR_TYPE_GRAD_NORM ? 2 : r == IR_TYPE_CLIP_VALUE ? 0 : -1; /* the gradients: [g0, g1) */
    int g1 = r == IR_TYPE_GRAD_NORM ? n_srcs : r == IR_TYPE_CLIP_VALUE ? 1 : -1;
    if (r == IR_TYPE_GRAD_NORM && n_srcs < 3)
      return FAIL("%s takes a partial sum, the loss scale and at least one gradient, got %d operand(s)", ir_op_name(op),
                  n_srcs);
    for (int s = 0; s < n_srcs; s++) {
      const ir_type *x = &srcs[s]->type;
      bool grad = s >= g0 && s < g1;
      bool ok = grad ? dtype_is_float(x->dtype) && (r != IR_TYPE_CLIP_VALUE || !ir_type_is_batched(x))
                     : x->rank == 0 && x->dtype == DT_F32;
      if (!ok) {
        shape_str(x, sa, sizeof sa);
        return FAIL(grad ? "%s operand %d must be a float gradient (unbatched), got %s" : "%s operand %d must be f32 [], got %s",
                    ir_op_name(op), s + 1, sa);
      }
    }
    if (op == IR_OP_CLIP_SCALE && !(attr->clipnorm > 0 && attr->clipnorm <= 1e30))
      return FAIL("%s clipnorm must be a finite number > 0, got %g", ir_op_name(op), attr->clipnorm);
    if (op == IR_OP_CLIP_VALUE && !(attr->clipvalue > 0 && attr->clipvalue <= 1e30))
      return FAIL("%s clipvalue must be a finite number > 0, got %g", ir_op_name(op), attr->clipvalue);
    *out = r == IR_TYPE_CLIP_VALUE ? srcs[0]->type : (ir_type){DT_F32, 0, {0}};
    return true;
  }
  /* general tensors: layout ops */
  case IR_TYPE_RESHAPE:
  case IR_TYPE_TRANSPOSE:
  case IR_TYPE_CONCAT:
  case IR_TYPE_STRIDED_SLICE:
  case IR_TYPE_PAD_CONSTANT:
  case IR_TYPE_GATHER:
  case IR_TYPE_GATHER_GRAD: return ir_infer_layout(op, srcs, n_srcs, attr, out, err, errlen);
  /* convolutional networks */
  case IR_TYPE_CONV2D: return infer_conv2d(op, srcs, attr, out, err, errlen);
  case IR_TYPE_CONV2D_INPUT_GRAD:
  case IR_TYPE_CONV2D_FILTER_GRAD: return infer_conv2d_grad(op, srcs, attr, out, err, errlen);
  case IR_TYPE_POOL2D: return infer_pool2d(op, srcs, attr, out, err, errlen);
  case IR_TYPE_POOL2D_GRAD: {
    ir_type fwd;
    if (!infer_pool2d(op, srcs + 1, attr, &fwd, err, errlen)) return false;
    shape_str(&srcs[0]->type, sa, sizeof sa), shape_str(&fwd, sb, sizeof sb);
    if (!ir_type_eq(&srcs[0]->type, &fwd))
      return FAIL("%s dy %s must be the forward pooling's result %s", ir_op_name(op), sa, sb);
    *out = srcs[1]->type;
    return true;
  }
  /* general tensors */
  case IR_TYPE_SUM_TO: return infer_sum_to(op, &srcs[0]->type, attr, out, err, errlen);
  /* general tensors: dropout, reductions */
  case IR_TYPE_DROPOUT:
  case IR_TYPE_REDUCE:
  case IR_TYPE_REDUCE_GRAD:
  case IR_TYPE_BROADCAST_TO: return ir_infer_tensor(op, srcs, n_srcs, attr, out, err, errlen);
  /* convolutional networks: grouped convolution */
  case IR_TYPE_GROUP_CONV2D: return infer_conv2d(op, srcs, attr, out, err, errlen);
  case IR_TYPE_GROUP_CONV2D_INPUT_GRAD:
  case IR_TYPE_GROUP_CONV2D_FILTER_GRAD: return infer_conv2d_grad(op, srcs, attr, out, err, errlen);
  case IR_TYPE_BATCH_MATMUL: return infer_batch_matmul(op, srcs, attr, out, err, errlen);
  case IR_TYPE_RNN: return ir_infer_rnn(op, srcs, n_srcs, attr, out, err, errlen); /* recurrent layers */
  case IR_TYPE_RNN_GRAD: return ir_infer_rnn_grad(op, srcs, n_srcs, attr, out, err, errlen);
  }
  CASTOR_UNREACHABLE();
  return false;
}

/* The summed index of each contraction type rule: the operand and its
 * dimension (negative: counted from the end) that a result element sums
 * over. A type rule without a row is not a contraction; an op whose flops
 * column is IR_FLOPS_CONTRACT needs one (check_optable holds every op to it). */
static const struct {
  bool is;
  int operand, dim;
  int n_dims; /* the summed index runs over dimensions dim .. dim + n_dims (0: one; -1: all but the last) */
  bool with_last; /* and over the last dimension too */
} contraction[] = {
    [IR_TYPE_MATMUL] = {true, 0, -1, 0, false}, /* [M,K] x [K,Nc]: K, a's last */
    [IR_TYPE_MATMUL_NT] = {true, 0, -1, 0, false}, /* [M,Nc] x [K,Nc]: Nc, a's last */
    [IR_TYPE_MATMUL_TN] = {true, 0, 0, -1, false}, /* [..,K] x [..,Nc]: every dimension of a but its last */
    /* convolutional networks */
    [IR_TYPE_CONV2D] = {true, 1, 0, 3, false},     /* x x w [KH,KW,C,O]: KH x KW x C, w's first three */
    [IR_TYPE_CONV2D_INPUT_GRAD] = {true, 1, 0, 2, true}, /* dy x w: KH x KW x O, w's first two and last */
    [IR_TYPE_CONV2D_FILTER_GRAD] = {true, 1, 0, 3, false}, /* x x dy [N,OH,OW,O]: N x OH x OW */
    /* convolutional networks: grouped convolution (kernels of the kit, not GEMMs: cg_is_gemm) */
    [IR_TYPE_GROUP_CONV2D] = {true, 1, 0, 3, false},     /* KH x KW x C/G */
    [IR_TYPE_GROUP_CONV2D_INPUT_GRAD] = {true, 1, 0, 2, true}, /* KH x KW x O/G (ir_node_flops divides by G) */
    [IR_TYPE_GROUP_CONV2D_FILTER_GRAD] = {true, 1, 0, 3, false}, /* N x OH x OW */
    /* general tensors: a's last, or with {transpose_a} its second last (ir_node_contraction) */
    [IR_TYPE_BATCH_MATMUL] = {true, 0, -1, 0, false},
};

bool ir_node_contraction(const ir_node *n, int *out_operand, int *out_dim) {
  ir_type_rule r = ir_op_type_rule(n->op);
  if ((size_t)r >= sizeof contraction / sizeof *contraction || !contraction[r].is) return false;
  int operand = contraction[r].operand;
  const ir_type *t = &n->srcs[operand]->type;
  int dim = contraction[r].dim < 0 ? t->rank + contraction[r].dim : contraction[r].dim;
  if (r == IR_TYPE_BATCH_MATMUL && n->attr.transpose_a) dim = t->rank - 2; /* general tensors: a [.., K, M] */
  if (dim < 0 || dim >= t->rank) return false;
  *out_operand = operand, *out_dim = dim;
  return true;
}

int64_t ir_node_flops(const ir_node *n, int64_t batch) {
  int64_t numel = 0;
  if (!ir_type_numel(&n->type, batch, &numel)) return 0;
  int f = ir_op_flops(n->op);
  if (f == IR_FLOPS_CONTRACT) {
    int operand, dim;
    if (!ir_node_contraction(n, &operand, &dim)) return 2 * numel; /* a rank-0 operand: one product */
    const ir_type *t = &n->srcs[operand]->type;
    int nd = contraction[ir_op_type_rule(n->op)].n_dims;
    if (nd < 0) nd = t->rank - 1 - dim;
    int64_t summed = 1;
    for (int r = dim; r < dim + (nd ? nd : 1) && r < t->rank; r++)
      summed *= t->dims[r] == IR_DIM_BATCH ? batch : t->dims[r];
    if (contraction[ir_op_type_rule(n->op)].with_last) summed *= t->dims[t->rank - 1];
    if (ir_op_type_rule(n->op) == IR_TYPE_GROUP_CONV2D_INPUT_GRAD && t->dims[2] > 0) /* O/G: one group's */
      summed /= n->type.dims[3] / t->dims[2];
    return 2 * numel * summed;
  }
  return (int64_t)f * numel;
}

#undef FAIL

/* ---- builder ---- */

ir_node *ir_node_new(ir_graph *g, ir_op op, const ir_type *type, ir_node *const *srcs,
                     int n_srcs, const char *name, diag_loc loc) {
  CASTOR_ASSERT(n_srcs >= 0 && n_srcs <= IR_MAX_SRCS);
  ir_node *n = arena_alloc(g->arena, sizeof *n);
  n->op = op;
  n->type = *type;
  n->n_srcs = n_srcs;
  for (int i = 0; i < n_srcs; i++) n->srcs[i] = srcs[i];
  n->name = arena_strdup(g->arena, name);
  n->loc = loc;
  n->id = -1;
  return n;
}

ir_node *ir_build_op(ir_graph *g, ir_op op, const char *name, ir_node *const *srcs, int n,
                     const ir_attr *attr, diag_loc loc) {
  ir_type t;
  char err[256];
  if (!ir_infer_type(op, srcs, n, attr, &t, err, sizeof err)) {
    fprintf(stderr, "castor: internal error: building %%%s: %s\n", name, err);
    CASTOR_ASSERT(!"ir_build_*: type inference failed");
  }
  ir_node *node = ir_node_new(g, op, &t, srcs, n, name, loc);
  node->attr = *attr;
  attr_own_strings(&node->attr, op, g->arena);
  ir_graph_append(g, node);
  return node;
}

ir_node *ir_build_input(ir_graph *g, const char *name, const ir_type *type, int index,
                        diag_loc loc) {
  ir_node *n = ir_node_new(g, IR_OP_INPUT, type, NULL, 0, name, loc);
  n->attr.index = index;
  ir_graph_append(g, n);
  return n;
}

ir_node *ir_build_const(ir_graph *g, const char *name, const ir_type *type,
                        const char *weight, const void *data, diag_loc loc) {
  ir_node *n = ir_node_new(g, IR_OP_CONST, type, NULL, 0, name, loc);
  n->attr.weight = arena_strdup(g->arena, weight);
  n->attr.data = data;
  ir_graph_append(g, n);
  return n;
}

ir_node *ir_build_matmul(ir_graph *g, const char *name, ir_node *a, ir_node *b, ir_dtype acc,
                         diag_loc loc) {
  ir_attr attr = {.acc = acc};
  return ir_build_op(g, IR_OP_MATMUL, name, (ir_node *[]){a, b}, 2, &attr, loc);
}

ir_node *ir_build_binary(ir_graph *g, ir_op op, const char *name, ir_node *a, ir_node *b,
                         diag_loc loc) {
  ir_attr attr = {0};
  return ir_build_op(g, op, name, (ir_node *[]){a, b}, 2, &attr, loc);
}

ir_node *ir_build_unary(ir_graph *g, ir_op op, const char *name, ir_node *x, diag_loc loc) {
  ir_attr attr = {0};
  return ir_build_op(g, op, name, &x, 1, &attr, loc);
}

ir_node *ir_build_reshape_op(ir_graph *g, ir_op op, const char *name, ir_node *x, const int64_t *dims,
                             diag_loc loc) {
  ir_attr attr = {0};
  attr.shape.rank = x->type.rank;
  for (int r = 0; r < x->type.rank; r++) attr.shape.dims[r] = dims[r];
  return ir_build_op(g, op, name, &x, 1, &attr, loc);
}

ir_node *ir_build_cast(ir_graph *g, const char *name, ir_node *x, ir_dtype to, diag_loc loc) {
  ir_attr attr = {.to = to};
  return ir_build_op(g, IR_OP_CAST, name, &x, 1, &attr, loc);
}

ir_graph *ir_graph_clone(const ir_graph *src) {
  ir_graph *g = ir_graph_create(src->name);
  g->policy = src->policy;
  ir_node **map = xcalloc((size_t)src->n_nodes + 1, sizeof *map);
  for (int i = 0; i < src->n_nodes; i++) {
    const ir_node *s = src->nodes[i];
    ir_node *n = arena_alloc(g->arena, sizeof *n);
    *n = *s;
    n->name = arena_strdup(g->arena, s->name);
    n->note = s->note ? arena_strdup(g->arena, s->note) : NULL;
    n->layer = s->layer ? arena_strdup(g->arena, s->layer) : NULL;
    n->rule = s->rule ? arena_strdup(g->arena, s->rule) : NULL;
    attr_own_strings(&n->attr, s->op, g->arena);
    for (int k = 0; k < s->n_srcs; k++) {
      CASTOR_ASSERT(s->srcs[k]->id >= 0 && s->srcs[k]->id < i && src->nodes[s->srcs[k]->id] == s->srcs[k]);
      n->srcs[k] = map[s->srcs[k]->id];
    }
    map[i] = n;
    ir_graph_append(g, n);
  }
  for (int i = 0; i < src->n_outputs; i++) ir_graph_add_output(g, src->outputs[i].name, map[src->outputs[i].value->id]);
  free(map);
  return g;
}


/* ---- general tensors: the batch N ---- */

#define FAIL(...) (snprintf(err, errlen, __VA_ARGS__), false)

bool ir_batch_stays_leading(ir_op op, const ir_type *x, bool stays, const char *how, char *err,
                            size_t errlen) {
  if (stays || !ir_type_is_batched(x)) return true;
  char sa[96];
  shape_str(x, sa, sizeof sa);
  return FAIL("%s of %s would move the batch dimension N out of dimension 0 (%s); only the batch is "
              "symbolic: give it a fixed size with --batch B (castor_compile_options.batch)",
              ir_op_name(op), sa, how);
}

static void bind_dims(int rank, int64_t *dims, int64_t batch) {
  for (int r = 0; r < rank; r++)
    if (dims[r] == IR_DIM_BATCH) dims[r] = batch;
}

/* ---- rows computed apart (ir_graph_rows_separate) ---- */

static bool op_in(ir_op op, const ir_op *list, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (list[i] == op) return true;
  return false;
}

/* axis counted from the end when negative: is it dimension 0 of rank? */
static bool axis_is_0(int64_t axis, int rank) { return axis == 0 || axis + rank == 0; }

/* Row n of n's result (B rows, like each operand with rows[id]) reads only
 * row n of those operands, other operands whole. */
static bool op_rows_separate(const ir_node *n, const bool *rows) {
  static const ir_op weights[] = {IR_OP_MATMUL, IR_OP_CONV2D, IR_OP_GROUP_CONV2D}; /* over constant weights */
  static const ir_op same[] = {
      IR_OP_BATCH_MATMUL,                      /* item n of each operand with B items */
      IR_OP_MAX_POOL2D, IR_OP_AVG_POOL2D,
      IR_OP_SIMPLE_RNN, IR_OP_GRU, IR_OP_LSTM, /* a scan over time per batch row */
      IR_OP_RESHAPE,                           /* B rows in and out: row n's elements in order */
      IR_OP_PAD, IR_OP_SLICE, IR_OP_BROADCAST_TO, /* B rows in and out: dimension 0 untouched */
      IR_OP_DROPOUT,                           /* inference: the identity */
      IR_OP_BATCH_NORM,
  };
  static const ir_op last[] = {IR_OP_SOFTMAX, IR_OP_LOG_SOFTMAX}; /* over the last dimension */
  static const ir_op reduce[] = {IR_OP_REDUCE_SUM, IR_OP_REDUCE_MEAN, IR_OP_REDUCE_MAX, IR_OP_REDUCE_MIN};
  static const ir_type_rule eltwise[] = {IR_TYPE_BINARY, IR_TYPE_UNARY, IR_TYPE_CAST, IR_TYPE_COMPARE,
                                         IR_TYPE_LOGIC, IR_TYPE_IS_NAN};
  const ir_attr *a = &n->attr;
  int rank = n->type.rank;
  const ir_node *x = n->srcs[0];
  if (op_in(n->op, weights, sizeof weights / sizeof *weights)) return rows[x->id] && !rows[n->srcs[1]->id];
  /* an operand of B rows and a lower rank would broadcast along a later
   * dimension (numpy aligns the last ones): row n would read all of it */
  for (int s = 0; s < n->n_srcs; s++)
    if (rows[n->srcs[s]->id] && n->srcs[s]->type.rank != rank && ir_op_type_rule(n->op) != IR_TYPE_RNN &&
        n->op != IR_OP_RESHAPE && !op_in(n->op, reduce, sizeof reduce / sizeof *reduce) && n->op != IR_OP_GATHER)
      return false;
  if (op_in(n->op, same, sizeof same / sizeof *same)) return true;
  if (op_in(n->op, last, sizeof last / sizeof *last)) return rank >= 2;
  if (n->op == IR_OP_LAYER_NORM) return ir_norm_first_dim(&x->type, a->axis) >= 1;
  if (n->op == IR_OP_TRANSPOSE) return a->perm.n > 0 && a->perm.v[0] == 0;
  if (n->op == IR_OP_CONCAT) return !axis_is_0(a->axis, rank);
  if (n->op == IR_OP_STRIDED_SLICE || n->op == IR_OP_PAD_CONSTANT) /* dimension 0 whole, in order */
    return x->type.dims[0] == n->type.dims[0] && (a->starts.n == 0 || a->starts.v[0] == 0) &&
           (a->steps.n == 0 || a->steps.v[0] == 1);
  if (n->op == IR_OP_GATHER) /* x's dimension axis by the indices: x's rows, or the indices' */
    return axis_is_0(a->axis, x->type.rank) ? !rows[x->id] : !rows[n->srcs[1]->id];
  if (op_in(n->op, reduce, sizeof reduce / sizeof *reduce)) {
    for (int i = 0; i < a->axes.n; i++)
      if (axis_is_0(a->axes.v[i], x->type.rank)) return false;
    return true;
  }
  ir_type_rule r = ir_op_type_rule(n->op); /* elementwise: operands broadcast, B rows or whole */
  for (size_t i = 0; i < sizeof eltwise / sizeof *eltwise; i++)
    if (eltwise[i] == r) return ir_op_kernel(n->op) == IR_KERNEL_ELTWISE && !ir_op_writes(n->op);
  return false;
}

int64_t ir_graph_rows_separate(const ir_graph *g) {
  int64_t B = 0;
  for (int i = 0; i < g->n_nodes && !B; i++)
    if (g->nodes[i]->op == IR_OP_INPUT) B = g->nodes[i]->type.rank >= 1 ? g->nodes[i]->type.dims[0] : -1;
  if (B < 2) return 0;
  bool *rows = xcalloc((size_t)g->n_nodes + 1, sizeof *rows); /* by id: the value has B rows */
  bool ok = true;
  for (int i = 0; i < g->n_nodes && ok; i++) {
    const ir_node *n = g->nodes[i];
    ok = n->id == i && !(ir_op_flags(n->op) & IR_OPF_STATE); /* a variable: a training program */
    if (!ok || n->op == IR_OP_CONST || n->op == IR_OP_LITERAL) continue;
    bool has = n->type.rank >= 1 && n->type.dims[0] == B;
    if (n->op == IR_OP_INPUT) { /* one of B rows, else read whole */
      rows[i] = has;
      continue;
    }
    bool from_rows = false;
    for (int s = 0; s < n->n_srcs; s++) from_rows |= rows[n->srcs[s]->id];
    ok = has && from_rows && op_rows_separate(n, rows);
    rows[i] = ok;
  }
  free(rows);
  return ok ? B : 0;
}

bool ir_graph_bind_batch(ir_graph *g, int64_t batch, char *err, size_t errlen) {
  if (batch < 1) return FAIL("the batch must be a whole number >= 1, got %lld", (long long)batch);
  for (int i = 0; i < g->n_nodes; i++) { /* check every size first: g stays unchanged on failure */
    ir_type t = g->nodes[i]->type;
    bind_dims(t.rank, t.dims, batch);
    int64_t bytes;
    if (!ir_type_bytes(&t, 1, &bytes) || bytes > IR_MAX_TENSOR_BYTES)
      return FAIL("%%%s would have more than %lld bytes with a batch of %lld", g->nodes[i]->name,
                  (long long)IR_MAX_TENSOR_BYTES, (long long)batch);
  }
  /* a strided_slice takes the batch N whole as starts 0, ends 0: now ends B */
  for (int i = 0; i < g->n_nodes; i++) {
    ir_node *n = g->nodes[i];
    if (n->op != IR_OP_STRIDED_SLICE) continue;
    for (int r = 0; r < n->srcs[0]->type.rank && r < n->attr.ends.n; r++)
      if (n->srcs[0]->type.dims[r] == IR_DIM_BATCH && n->attr.ends.v[r] == 0) n->attr.ends.v[r] = batch;
  }
  for (int i = 0; i < g->n_nodes; i++) {
    ir_node *n = g->nodes[i];
    bind_dims(n->type.rank, n->type.dims, batch);
    for (int k = 0; k < IR_ATTR_COUNT; k++)
      if ((ir_op_attrs(n->op) >> k & 1) && ir_attr_kind_of((ir_attr_key)k) == IR_ATTR_KIND_SHAPE) {
        ir_shape *s = ir_attr_slot(&n->attr, (ir_attr_key)k);
        bind_dims(s->rank, s->dims, batch);
      }
  }
  return true;
}

/* numpy broadcasting: shapes aligned at their last dimension, a missing
 * dimension counting as 1; each dimension equal, or 1 in all but one
 * operand. The batch N broadcasts only against N or 1 and must stay
 * dimension 0 of the result. */
/* The operands' dtypes by the op's rule: one float dtype (binary ops);
 * select's condition float or integer, its branches of one dtype; a
 * comparison's operands of one dtype; logic's i1 (integers and booleans). */
static bool broadcast_dtypes(ir_op op, ir_node *const *srcs, int n, ir_dtype *out, char *err, size_t errlen) {
  char sa[96], sb[96];
  ir_type_rule rule = ir_op_type_rule(op);
  int first = op == IR_OP_SELECT ? 1 : 0; /* select: the condition any dtype */
  for (int s = first + 1; s < n; s++) {
    shape_str(&srcs[first]->type, sa, sizeof sa), shape_str(&srcs[s]->type, sb, sizeof sb);
    if (srcs[s]->type.dtype != srcs[first]->type.dtype)
      return FAIL("%s operands must share one dtype, got %s and %s", ir_op_name(op), sa, sb);
  }
  ir_dtype dt = srcs[first]->type.dtype;
  shape_str(&srcs[first]->type, sa, sizeof sa);
  if (rule == IR_TYPE_LOGIC && dt != DT_I1) return FAIL("%s needs i1 operands, got %s", ir_op_name(op), sa);
  if (rule == IR_TYPE_IS_NAN && !dtype_is_float(dt)) return FAIL("%s needs a float operand, got %s", ir_op_name(op), sa);
  bool ints = (ir_op_flags(op) & IR_OPF_INTEGERS) && (dt == DT_I32 || dt == DT_I64);
  if (rule == IR_TYPE_BINARY && op != IR_OP_SELECT && !dtype_is_float(dt) && !ints)
    return FAIL("%s operands must share one float dtype%s, got %s", ir_op_name(op),
                ir_op_flags(op) & IR_OPF_INTEGERS ? " or one of i32, i64" : "", sa);
  *out = rule == IR_TYPE_BINARY ? dt : DT_I1;
  return true;
}

static bool infer_broadcast(ir_op op, ir_node *const *srcs, int n, ir_type *out, char *err, size_t errlen) {
  char sa[96], sb[96];
  ir_dtype dt;
  if (!broadcast_dtypes(op, srcs, n, &dt, err, errlen)) return false;
  ir_type r = srcs[0]->type;
  r.dtype = dt;
  for (int s = 1; s < n; s++) {
    const ir_type *t = &srcs[s]->type;
    shape_str(&r, sa, sizeof sa), shape_str(t, sb, sizeof sb);
    int rank = r.rank > t->rank ? r.rank : t->rank;
    ir_type b = {r.dtype, rank, {0}};
    for (int d = 0; d < rank; d++) {
      int da = d - (rank - r.rank), db = d - (rank - t->rank);
      int64_t x = da >= 0 ? r.dims[da] : 1, y = db >= 0 ? t->dims[db] : 1;
      if (x != y && x != 1 && y != 1) {
        char dx[24], dy[24];
        snprintf(dx, sizeof dx, x == IR_DIM_BATCH ? "N" : "%lld", (long long)x);
        snprintf(dy, sizeof dy, y == IR_DIM_BATCH ? "N" : "%lld", (long long)y);
        return FAIL("%s operand shapes %s and %s do not broadcast: aligned at the last dimension, they have %s "
                    "and %s in dimension %d of the result (numpy broadcasting: equal, or one of them 1; N "
                    "only against N or 1)", ir_op_name(op), sa, sb, dx, dy, d);
      }
      b.dims[d] = x == 1 ? y : x;
    }
    for (int d = 1; d < rank; d++)
      if (b.dims[d] == IR_DIM_BATCH) {
        char how[320], sr[96];
        shape_str(&b, sr, sizeof sr);
        snprintf(how, sizeof how, "%s and %s broadcast to %s", sa, sb, sr);
        return ir_batch_stays_leading(op, ir_type_is_batched(&r) ? &r : t, false, how, err, errlen);
      }
    r = b;
  }
  *out = r;
  return true;
}

/* sum_to: {shape} must broadcast to x's shape (the reverse of a broadcast). */
static bool infer_sum_to(ir_op op, const ir_type *x, const ir_attr *attr, ir_type *out, char *err, size_t errlen) {
  char sa[96], sb[96];
  const ir_shape *sh = &attr->shape;
  shape_str(x, sa, sizeof sa);
  ir_type want = {x->dtype, sh->rank, {0}};
  for (int d = 0; d < sh->rank && d < IR_MAX_RANK; d++) want.dims[d] = sh->dims[d];
  shape_str(&want, sb, sizeof sb);
  if (!dtype_is_float(x->dtype)) return FAIL("%s needs a float operand, got %s", ir_op_name(op), sa);
  if ((unsigned)attr->acc >= DT_COUNT || !dtype_is_float(attr->acc))
    return FAIL("%s accumulator must be a float dtype, got %s", ir_op_name(op), dtype_name(attr->acc));
  if (sh->rank > x->rank)
    return FAIL("%s of %s to %s: the shape has more dimensions than the operand", ir_op_name(op), sa, sb);
  for (int d = 0; d < sh->rank; d++) {
    int64_t have = x->dims[d + x->rank - sh->rank], w = sh->dims[d];
    if (w != have && w != 1)
      return FAIL("%s of %s to %s: dimension %d must be the operand's or 1 (the shape must broadcast to the "
                  "operand's)", ir_op_name(op), sa, sb, d);
    if (w == IR_DIM_BATCH && d != 0)
      return ir_batch_stays_leading(op, x, false, "the shape has N in another dimension", err, errlen);
  }
  *out = want;
  return true;
}

/* alpha finite; clip's bounds finite or infinite, min_value <= max_value */
static bool check_eltwise_attrs(ir_op op, const ir_attr *attr, char *err, size_t errlen) {
  ir_attr_set keys = ir_op_attrs(op);
  if ((keys & A(alpha)) && !isfinite(attr->alpha))
    return FAIL("%s alpha must be a finite number, got %g", ir_op_name(op), attr->alpha);
  if ((keys & A(min_value)) && !(attr->min_value <= attr->max_value))
    return FAIL("%s needs min_value <= max_value, got %g and %g", ir_op_name(op), attr->min_value, attr->max_value);
  /* CNN: batch normalization */
  if ((keys & A(epsilon)) && !(attr->epsilon > 0 && attr->epsilon <= 1e30))
    return FAIL("%s epsilon must be a finite number > 0, got %g", ir_op_name(op), attr->epsilon);
  if ((keys & A(momentum)) && !(attr->momentum >= 0 && attr->momentum < 1))
    return FAIL("%s momentum must be in [0, 1), got %g", ir_op_name(op), attr->momentum);
  return true;
}

/* general tensors: batch_matmul. The matrices are each operand's last two
 * dimensions (swapped by the transpose flags); the dimensions before them
 * broadcast as numpy's, aligned from the right. */
static bool infer_batch_matmul(ir_op op, ir_node *const *srcs, const ir_attr *attr, ir_type *out, char *err,
                               size_t errlen) {
  const ir_type *a = &srcs[0]->type, *b = &srcs[1]->type;
  char sa[96], sb[96];
  shape_str(a, sa, sizeof sa), shape_str(b, sb, sizeof sb);
  if (a->rank < 2 || b->rank < 2)
    return FAIL("%s operands must have rank >= 2 (a matrix in the last two dimensions), got %s and %s",
                ir_op_name(op), sa, sb);
  if (a->dtype != b->dtype || !dtype_is_float(a->dtype))
    return FAIL("%s operands must share one float dtype, got %s and %s", ir_op_name(op), sa, sb);
  if ((unsigned)attr->acc >= DT_COUNT || !dtype_is_float(attr->acc))
    return FAIL("%s accumulator must be a float dtype, got %s", ir_op_name(op), dtype_name(attr->acc));
  if ((attr->transpose_a != 0 && attr->transpose_a != 1) || (attr->transpose_b != 0 && attr->transpose_b != 1))
    return FAIL("%s transpose_a and transpose_b must be 0 or 1, got %lld and %lld", ir_op_name(op),
                (long long)attr->transpose_a, (long long)attr->transpose_b);
  if ((ir_type_is_batched(a) && a->rank < 3) || (ir_type_is_batched(b) && b->rank < 3))
    return FAIL("%s of %s and %s: the batch dimension N must be a leading (batch) dimension, not a matrix "
                "dimension", ir_op_name(op), sa, sb);
  int64_t M = a->dims[a->rank - (attr->transpose_a ? 1 : 2)], Ka = a->dims[a->rank - (attr->transpose_a ? 2 : 1)];
  int64_t Kb = b->dims[b->rank - (attr->transpose_b ? 1 : 2)], Nc = b->dims[b->rank - (attr->transpose_b ? 2 : 1)];
  if (Ka != Kb)
    return FAIL("%s summed dimensions differ: %s%s and %s%s", ir_op_name(op), sa,
                attr->transpose_a ? " (transposed)" : "", sb, attr->transpose_b ? " (transposed)" : "");
  int rank = a->rank > b->rank ? a->rank : b->rank;
  if (rank < 3)
    return FAIL("%s of %s and %s: the result needs rank >= 3 (use matmul for one matrix product)", ir_op_name(op),
                sa, sb);
  ir_type r = {a->dtype, rank, {0}};
  for (int d = 0; d < rank - 2; d++) {
    int da = d - (rank - a->rank), db = d - (rank - b->rank);
    int64_t x = da >= 0 ? a->dims[da] : 1, y = db >= 0 ? b->dims[db] : 1;
    if (x != y && x != 1 && y != 1)
      return FAIL("%s leading dimensions of %s and %s do not broadcast (dimension %d: %s against %s)", ir_op_name(op),
                  sa, sb, d, x == IR_DIM_BATCH ? "N" : "a size", y == IR_DIM_BATCH ? "N" : "a size");
    r.dims[d] = x == 1 ? y : x;
    if (r.dims[d] == IR_DIM_BATCH && d != 0)
      return ir_batch_stays_leading(op, ir_type_is_batched(a) ? a : b, false,
                                    "an operand of lower rank or a leading 1 puts N inside", err, errlen);
  }
  r.dims[rank - 2] = M, r.dims[rank - 1] = Nc;
  *out = r;
  return true;
}

#undef FAIL
