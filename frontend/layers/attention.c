/* SPDX-License-Identifier: Apache-2.0 */
/*
 * attention.c: Keras 3's MultiHeadAttention in the library (the graph is
 * frontend/fe_attention.c's, shared).
 */
#include "frontend/layers/internal.h"
#include "frontend/attention.h"

#include <string.h>

/* ---- general tensors: MultiHeadAttention (frontend/fe_attention.c builds the graph) ----
 * Called on (query, value[, key]) with key= and attention_mask= tensors and
 * use_causal_mask in the call's kwargs (fl_call). Weights from the
 * EinsumDense sublayers' groups /layers/NAME/{query,key,value,output}_dense/
 * vars/{0,1} (kernel, bias), in Keras's variable order; a shared layer's
 * later call reuses them. */
struct mha_stamp {
  fl_host *m;
  fl_layer *l;
};

static ir_node *mha_stamp_cb(void *ctx, ir_node *n) {
  struct mha_stamp *c = ctx;
  return fl_stamp(c->m, c->l, n);
}

static bool mha_int(fl_host *m, fl_layer *l, const char *key, bool null_ok, int64_t *out) {
  const json_value *v = fl_cfg(l, key);
  if (null_ok && (!v || fl_is_null(v))) return *out = 0, true;
  if (!v || v->kind != JSON_INT || v->i < 1 || v->i > ((int64_t)1 << 20)) {
    fl_error(m, l, NULL, FL_PLAIN, "%s must be a positive integer", key);
    return false;
  }
  return *out = v->i, true;
}

bool fl_lower_multi_head_attention(fl_host *m, fl_layer *l, int k, ir_node **in, int n_in) {
  const fl_call *c = m->call;
  int n_pos = n_in - (c->mask_at ? 1 : 0) - (c->key_at ? 1 : 0); /* key= and attention_mask= come after */
  if (n_pos < 2 || n_pos > 3 || (c->key_at && n_pos != 2)) {
    fl_error(m, l, "input3", FL_KIND, "takes query, value and optionally key, got %d inputs", n_pos);
    return false;
  }
  ir_node *q = in[0], *v = in[1], *key = c->key_at ? in[c->key_at - 1] : n_pos == 3 ? in[2] : in[1];
  ir_node *mask = c->mask_at ? in[c->mask_at - 1] : NULL;
  int64_t H, dk, dv;
  if (!mha_int(m, l, "num_heads", false, &H) || !mha_int(m, l, "key_dim", false, &dk) ||
      !mha_int(m, l, "value_dim", true, &dv))
    return false;
  if (!dv) dv = dk;
  const json_value *ax = fl_cfg(l, "attention_axes"), *ub = fl_cfg(l, "use_bias");
  bool axes_ok = !ax || fl_is_null(ax) || (ax->kind == JSON_INT && ax->i == 1) ||
                 (ax->kind == JSON_ARR && ax->n == 1 && ax->items[0].kind == JSON_INT &&
                  (ax->items[0].i == 1 || ax->items[0].i == -2));
  if (!axes_ok) {
    fl_unsupported(m, l, NULL, FL_PLAIN, "attention_axes other than [1] (the steps of a [N, steps, features] input) is "
                   "not supported");
    return false;
  }
  bool use_bias = !ub || (ub->kind == JSON_LIT && ub->lit == 't');
  ir_node *const ins[3] = {q, v, key};
  static const char *const roles[3] = {"query", "value", "key"};
  for (int i = 0; i < 3; i++)
    if (ins[i]->type.rank != 3 || !ir_type_is_batched(&ins[i]->type)) {
      fl_error(m, l, arena_printf(m->arena, "input%d", i), FL_ITS, "its %s must be [N, steps, features], got %s", roles[i],
               fl_type_str(m, &ins[i]->type));
      return false;
    }
  int64_t T = q->type.dims[1], d = q->type.dims[2], S = v->type.dims[1];
  if (key->type.dims[1] != S) {
    fl_error(m, l, "input2", FL_ITS, "its key %s and value %s need the same number of steps", fl_type_str(m, &key->type),
                   fl_type_str(m, &v->type));
    return false;
  }
  if (mask && (mask->type.rank != 3 || !ir_type_is_batched(&mask->type) || mask->type.dims[1] != T ||
               mask->type.dims[2] != S)) {
    fl_error(m, l, "mask", FL_ITS, "its attention_mask must be [N, %lld, %lld] ([N, query steps, value steps]) for query %s and value %s, got %s", (long long)T,
                   (long long)S, fl_type_str(m, &q->type), fl_type_str(m, &v->type), fl_type_str(m, &mask->type));
    return false;
  }
  static const char *const subs[4] = {"query_dense", "key_dense", "value_dense", "output_dense"};
  static const char *const names[4] = {"query", "key", "value", "attention_output"};
  ir_type kt[4] = {{DT_F32, 3, {d, H, dk}}, {DT_F32, 3, {key->type.dims[2], H, dk}},
                   {DT_F32, 3, {v->type.dims[2], H, dv}}, {DT_F32, 3, {H, dv, d}}};
  ir_type bt[4] = {{DT_F32, 2, {H, dk}}, {DT_F32, 2, {H, dk}}, {DT_F32, 2, {H, dv}}, {DT_F32, 1, {d}}};
  if (!l->weights_done) {
    int order = 0;
    for (int i = 0; i < 4; i++) {
      int64_t bytes;
      if (!ir_type_bytes(&kt[i], 1, &bytes) || bytes > IR_MAX_TENSOR_BYTES) {
        fl_error(m, l, NULL, FL_PLAIN, "its %s kernel %s is larger than castor's tensor limit", names[i], fl_type_str(m, &kt[i]));
        return false;
      }
      for (int b = 0; b < (use_bias ? 2 : 1); b++) {
        const ir_type *t = b ? &bt[i] : &kt[i];
        const char *what = arena_printf(m->arena, "%s %s", names[i], b ? "bias" : "kernel");
        const char *key_name = arena_printf(m->arena, "%s.%s.%s", l->ir_name, names[i], b ? "bias" : "kernel");
        const float *data = m->weight(m, l, subs[i], b, order++, key_name, what, t, b ? FL_INIT_ZEROS : FL_INIT_GLOROT);
        if (!data) return false;
        l->w[2 * i + b] = fl_stamp(m, l, ir_build_const(m->g, key_name, t, key_name, data, l->loc));
      }
    }
    l->weights_done = true;
  } else
    for (int i = 0; i < 4; i++)
      if (!ir_type_eq(&l->w[2 * i]->type, &kt[i])) {
        fl_error(m, l, NULL, FL_PLAIN, "a shared call's %s kernel would be %s, the first call's is %s", names[i],
                       fl_type_str(m, &kt[i]), fl_type_str(m, &l->w[2 * i]->type));
        return false;
      }
  struct mha_stamp sc = {m, l};
  fe_attention a = {.g = m->g, .arena = m->arena, .loc = l->loc, .name = fl_node_name(m, l, k, NULL),
                    .stamp = mha_stamp_cb, .ctx = &sc, .heads = H, .key_dim = dk, .value_dim = dv,
                    .query_kernel = l->w[0], .query_bias = l->w[1], .key_kernel = l->w[2], .key_bias = l->w[3],
                    .value_kernel = l->w[4], .value_bias = l->w[5], .output_kernel = l->w[6],
                    .output_bias = l->w[7], .mask = mask, .causal = c->causal};
  m->call->out = fe_build_attention(&a, q, v, key);
  return true;
}

