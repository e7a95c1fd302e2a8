/* SPDX-License-Identifier: Apache-2.0 */
/*
 * common.c: what several layers of the library share: the host's error,
 * weight and stamp callbacks behind printf-style helpers, node names,
 * reading config values (absent or null: Keras's default), the bias and
 * activation after a contraction, layout ops checked by the IR's shape
 * rules, and Keras's 'same' padding.
 */
#include "frontend/layers/internal.h"

#include <float.h>
#include <stdarg.h>
#include <string.h>

const json_value *fl_cfg(const fl_layer *l, const char *key) { return json_field(l->cfg, key); }
bool fl_is_null(const json_value *v) { return !v || (v->kind == JSON_LIT && v->lit == 'n'); }

static void verror(fl_host *m, fl_layer *l, const char *key, fl_style style, bool unsupported, const char *fmt,
                   va_list ap) {
  str_buf b;
  str_buf_init(&b);
  str_buf_vprintf(&b, fmt, ap);
  m->error(m, l, key, style, unsupported, str_buf_cstr(&b));
  str_buf_fini(&b);
}

void fl_error(fl_host *m, fl_layer *l, const char *key, fl_style style, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  verror(m, l, key, style, false, fmt, ap);
  va_end(ap);
}

void fl_unsupported(fl_host *m, fl_layer *l, const char *key, fl_style style, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  verror(m, l, key, style, true, fmt, ap);
  va_end(ap);
}

const float *fl_weight(fl_host *m, fl_layer *l, int index, const char *key, const char *what, const ir_type *t,
                       fl_init init) {
  return m->weight(m, l, NULL, index, index, key, what, t, init);
}

ir_node *fl_stamp(fl_host *m, const fl_layer *l, ir_node *n) { return m->stamp(m, l, n); }

const char *fl_node_name(fl_host *m, const fl_layer *l, int k, const char *suffix) {
  /* a later call of a shared layer: NAME.callK (no layer name has a '.') */
  const char *base = k ? arena_printf(m->arena, "%s.call%d", l->ir_name, k) : l->ir_name;
  return suffix ? arena_printf(m->arena, "%s.%s", base, suffix) : base;
}

const char *fl_type_str(fl_host *m, const ir_type *t) {
  str_buf b;
  str_buf_init(&b);
  ir_type_print(t, &b);
  const char *s = arena_strdup(m->arena, str_buf_cstr(&b));
  str_buf_fini(&b);
  return s;
}

bool fl_one_input(fl_host *m, fl_layer *l, int n_in) {
  if (n_in == 1) return true;
  fl_error(m, l, NULL, FL_PLAIN, "takes one input, its call has %d", n_in);
  return false;
}

/* Dense's and Conv2D's weights: the kernel (kt) and, with use_bias, the bias
 * (bt), read on a layer's first call (`both`: the bias even when the
 * kernel had an error, so that one load reports both); a shared layer's
 * later call must fit the kernel the first call read. */
bool fl_kernel_bias(fl_host *m, fl_layer *l, ir_node *x, const ir_type *kt, const ir_type *bt, bool use_bias,
                    bool both) {
  if (!l->weights_done) {
    const char *kkey = arena_printf(m->arena, "%s.kernel", l->ir_name);
    const char *bkey = arena_printf(m->arena, "%s.bias", l->ir_name);
    const float *kd = fl_weight(m, l, 0, kkey, "kernel", kt, FL_INIT_GLOROT), *bd = NULL;
    if ((kd || both) && use_bias) bd = fl_weight(m, l, 1, bkey, "bias", bt, FL_INIT_ZEROS);
    if (!kd || (use_bias && !bd)) return false;
    l->w[0] = fl_stamp(m, l, ir_build_const(m->g, kkey, kt, kkey, kd, l->loc));
    if (use_bias) l->w[1] = fl_stamp(m, l, ir_build_const(m->g, bkey, bt, bkey, bd, l->loc));
    l->weights_done = true;
  } else if (!ir_type_eq(&l->w[0]->type, kt)) {
    fl_error(m, l, NULL, FL_PLAIN, "a shared call with input %s, the first call's kernel is %s", fl_type_str(m, &x->type),
                   fl_type_str(m, &l->w[0]->type));
    return false;
  }
  return true;
}

/* Dense's and Conv2D's epilogue after the contraction y: the bias (its
 * node named add) and the activation, the last node named as the call. */
ir_node *fl_bias_act(fl_host *m, fl_layer *l, int k, ir_node *y, const char *add, bool use_bias, fl_act act) {
  if (use_bias) y = fl_stamp(m, l, ir_build_binary(m->g, IR_OP_ADD, add, y, l->w[1], l->loc));
  if (act != FL_LINEAR) y = fl_act_apply(m, l, y, act, fl_node_name(m, l, k, NULL));
  return y;
}

bool fl_cfg_int(fl_host *m, fl_layer *l, const char *key, int64_t dflt, int64_t lo, int64_t hi, int64_t *out) {
  const json_value *v = fl_cfg(l, key);
  if (fl_is_null(v) && dflt != INT64_MIN) return *out = dflt, true;
  if (!v || v->kind != JSON_INT || v->i < lo || v->i > hi) {
    fl_error(m, l, key, FL_PLAIN, "%s must be an integer from %lld to %lld", key, (long long)lo, (long long)hi);
    return false;
  }
  *out = v->i;
  return true;
}

/* kernel_size, strides, dilation_rate, pool_size: two positive integers
 * (Keras writes its tuples as lists; one integer means both). Null gives
 * `dflt` when it is not NULL. */
bool fl_cfg_pair(fl_host *m, fl_layer *l, const char *key, const int64_t *dflt, int64_t *out) {
  const json_value *v = fl_cfg(l, key);
  if (fl_is_null(v) && dflt) return out[0] = dflt[0], out[1] = dflt[1], true;
  bool ok = v && (v->kind == JSON_INT || (v->kind == JSON_ARR && v->n == 2));
  for (int i = 0; ok && i < 2; i++) {
    const json_value *e = v->kind == JSON_INT ? v : &v->items[i];
    ok = e->kind == JSON_INT && e->i >= 1 && e->i <= ((int64_t)1 << 20);
    if (ok) out[i] = e->i;
  }
  if (!ok) fl_error(m, l, key, FL_PLAIN, "%s must be two positive integers [h, w]", key);
  return ok;
}

/* padding: "valid" (the default) or "same". */
bool fl_cfg_padding(fl_host *m, fl_layer *l, bool *same) {
  const json_value *v = fl_cfg(l, "padding");
  if (!v) return *same = false, true;
  const char *s = v && v->kind == JSON_STR ? v->s : NULL;
  if (s && (!strcmp(s, "valid") || !strcmp(s, "same"))) return *same = s[0] == 's', true;
  fl_unsupported(m, l, "padding", FL_PLAIN, "padding %s%s%s is not supported (valid, same)", s ? "'" : "", s ? s : "that is not a name", s ? "'" : "");
  return false;
}

/* An axis of x counted as Keras counts it (N is 0, negative from the end),
 * or -1 with an error. */
int fl_keras_axis(fl_host *m, fl_layer *l, const ir_node *x, int64_t a, const char *what) {
  int rank = x->type.rank;
  int64_t r = a < 0 ? a + rank : a;
  if (r >= 1 && r < rank) return (int)r;
  fl_error(m, l, what, FL_KIND, "%s %lld is not a dimension of %s other than the batch N", what, (long long)a,
                 fl_type_str(m, &x->type));
  return -1;
}

bool fl_op_styled(fl_host *m, fl_layer *l, int k, ir_op op, const char *suffix, ir_node **in, int n,
                  const ir_attr *attr, fl_style style, ir_node **out) {
  ir_type t;
  char err[512];
  if (!ir_infer_type(op, in, n, attr, &t, err, sizeof err)) {
    fl_error(m, l, NULL, style, "%s", err);
    return false;
  }
  *out = fl_stamp(m, l, ir_build_op(m->g, op, fl_node_name(m, l, k, suffix), in, n, attr, l->loc));
  return true;
}

bool fl_layout_op(fl_host *m, fl_layer *l, int k, ir_op op, const char *suffix, ir_node **in, int n,
                  const ir_attr *attr, ir_node **out) {
  return fl_op_styled(m, l, k, op, suffix, in, n, attr, FL_KIND_RULE, out);
}

void fl_same_pads(bool same, int64_t in, int64_t k, int64_t stride, int64_t dilation, int64_t *p0, int64_t *p1) {
  *p0 = *p1 = 0;
  if (!same) return;
  int64_t out = (in + stride - 1) / stride, total = (out - 1) * stride + dilation * (k - 1) + 1 - in;
  if (total > 0) *p0 = total / 2, *p1 = total - total / 2;
}

bool fl_image_input(fl_host *m, fl_layer *l, const ir_node *x) {
  if (x->type.rank == 4 && ir_type_is_batched(&x->type)) return true;
  fl_error(m, l, "input", FL_KIND, "needs an input [N, height, width, channels], got %s", fl_type_str(m, &x->type));
  return false;
}

bool fl_cfg_bool(fl_host *m, fl_layer *l, const char *key, bool dflt, bool *out) {
  const json_value *v = fl_cfg(l, key);
  if (fl_is_null(v)) return *out = dflt, true;
  if (v->kind != JSON_LIT || (v->lit != 't' && v->lit != 'f')) {
    fl_error(m, l, key, FL_PLAIN, "%s must be true or false", key);
    return false;
  }
  *out = v->lit == 't';
  return true;
}

bool fl_cfg_number(fl_host *m, fl_layer *l, const char *key, double dflt, double lo, double hi, double *out) {
  const json_value *v = fl_cfg(l, key);
  if (fl_is_null(v)) return *out = dflt, true;
  if ((v->kind != JSON_INT && v->kind != JSON_FLOAT) || !(v->num >= lo) || !(v->num <= hi)) {
    if (lo == -FLT_MAX && hi == FLT_MAX)
      fl_error(m, l, key, FL_PLAIN, "%s must be a finite number that float32 holds (magnitude at most %g)", key, hi);
    else
      fl_error(m, l, key, FL_PLAIN, "%s must be a number in [%g, %g]", key, lo, hi);
    return false;
  }
  *out = v->num;
  return true;
}

