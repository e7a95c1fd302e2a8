/* SPDX-License-Identifier: Apache-2.0 */
/*
 * autocast.c: Keras dtype policies, placed as TensorFlow's auto mixed
 * precision pass places them.
 *
 * In:  a verified graph as the frontend lowers it (every float f32; each
 *      node's layer and per-layer policy override set), before cast-cleanup
 *      and fold-constants.
 * Out: every non-leaf node has its compute dtype; every operand that had
 *      another dtype is read through a cast, created once per (value,
 *      dtype) and placed right after the value; matmuls accumulate in f32
 *      ({acc=f32}); model outputs are f32 unless keep_16bit_outputs. Each
 *      inserted cast's note says which layer it serves and why
 *      ("autocast: dense_1 computes in f16 (mixed_float16)"); each node's
 *      `rule` says why it has its dtype (for the cast report).
 *
 * Classes (the policy table below, indexed by op):
 *   allow  matmul: computes in its layer's compute dtype (the policy's, or
 *          the layer's dtype= override);
 *   deny   softmax, layer_norm: always f32, inputs upcast;
 *   infer  add, mul, activations: inside a dense layer they follow the
 *          layer's matmul; with a dtype= of their own they use it; standalone
 *          (activation/add/multiply layers under the global policy) they
 *          compute in 16-bit only between 16-bit matmuls (a 16-bit operand
 *          upstream, a 16-bit matmul of the same dtype downstream through
 *          other standalone infer ops and clear ops: an activation, a
 *          ZeroPadding2D, a convolution) and not downstream of a deny op, as
 *          TF's AMP pass does; otherwise f32; but a standalone op exact in
 *          any float format (exact_ops below: relu) of a 16-bit operand
 *          takes that operand's dtype whatever follows it, as clear ops
 *          do (a conv's relu before a max pool, the stem of a CNN: no f32
 *          round trip between two 16-bit convolutions);
 *          A node marked in_policy ({compute=policy}: Keras's Rescaling,
 *          whose call casts its input, scale and offset to its compute
 *          dtype) computes in its policy's compute dtype as allow ops do;
 *   clear  pads and slices move data: they take their operand's dtype;
 *   fixed  casts already in the graph keep their dtype.
 * The class of each op is the op table's (ir_ops.def, autocast column).
 * --fp32-ops (op names) and --fp32-layers (layer names) force f32.
 */
#include <stdio.h>
#include <string.h>

#include "passes/passes.h"

/* Is `name` an item of the comma-separated list? */
static bool list_has(const char *list, const char *name) {
  if (!list || !name) return false;
  size_t n = strlen(name);
  for (const char *p = list; *p;) {
    const char *e = strchr(p, ',');
    size_t len = e ? (size_t)(e - p) : strlen(p);
    if (len == n && strncmp(p, name, n) == 0) return true;
    if (!e) break;
    p = e + 1;
  }
  return false;
}

/* Ops that compute in a dtype autocast chooses, so --fp32-ops may force them. */
static bool forceable(ir_op op) {
  ir_ac_class c = ir_op_autocast(op);
  return c == IR_AC_ALLOW || c == IR_AC_INFER || c == IR_AC_DENY;
}

bool pass_autocast_forces_f32(const pass_autocast_options *o, const ir_node *n) {
  return list_has(o->fp32_layers, n->layer) || list_has(o->fp32_ops, ir_op_name(n->op));
}

bool pass_autocast_options_check(const pass_autocast_options *o, diag_sink *d) {
  const char *lists[2] = {o->fp32_ops, o->fp32_layers}, *what[2] = {"--fp32-ops", "--fp32-layers"};
  for (int l = 0; l < 2; l++) {
    if (!lists[l]) continue;
    for (const char *p = lists[l];;) {
      const char *e = strchr(p, ',');
      size_t len = e ? (size_t)(e - p) : strlen(p);
      ir_op op;
      if (len == 0) {
        diag_error_kind(d, DIAG_KIND_INVALID_ARGUMENT, (diag_loc){0}, "%s: empty item in '%s'", what[l], lists[l]);
        return false;
      }
      if (l == 0 && (!ir_op_from_name(p, len, &op) || !forceable(op))) {
        str_buf ops;
        str_buf_init(&ops);
        for (int k = 0; k < IR_OP_COUNT; k++)
          if (forceable((ir_op)k)) str_buf_printf(&ops, "%s%s", ops.len ? ", " : "", ir_op_name((ir_op)k));
        diag_error_kind(d, DIAG_KIND_INVALID_ARGUMENT, (diag_loc){0}, "%s: unknown op '%.*s' (ops: %s)", what[l], (int)len, p, str_buf_cstr(&ops));
        str_buf_fini(&ops);
        return false;
      }
      if (!e) break;
      p = e + 1;
    }
  }
  return true;
}

typedef struct ac_state {
  ir_graph *g;
  pass_context *ctx;
  const pass_autocast_options *o;
  ir_dtype *dt;      /* decided dtype per node id */
  bool *decided;
  bool *deny_taint;  /* deny op, or standalone infer fed by one */
  unsigned *down16;  /* standalone infer: 16-bit matmul dtypes reachable downstream (bitmask) */
  ir_node **casts;   /* (id * DT_COUNT + dtype) -> cast node */
  const ir_node **layer_mm; /* per node id: its layer's matmul (layer_matmul), or NULL */
  int n_orig;
} ac_state;

static ir_policy node_policy(const ac_state *s, const ir_node *n) {
  return n->policy != IR_POLICY_NONE ? n->policy : s->g->policy;
}

static const char *policy_rule(ac_state *s, const ir_node *n) {
  if (n->policy != IR_POLICY_NONE)
    return arena_printf(s->g->arena, "dtype=%s", ir_policy_name(n->policy));
  return ir_policy_name(s->g->policy);
}

static void decide(ac_state *s, ir_node *n, ir_dtype t, const char *rule) {
  s->dt[n->id] = t;
  s->decided[n->id] = true;
  n->rule = rule;
}

static bool is_16(ir_dtype t) { return t == DT_F16 || t == DT_BF16; }

/* The dense layer's matmul this node follows, if it belongs to a layer with
 * a matmul: the first allow op of its layer in the schedule. */
static const ir_node *layer_matmul(const ac_state *s, const ir_node *n) { return s->layer_mm[n->id]; }

/* Fills s->layer_mm through a map of layer names (util.h's hmap), so that
 * the pass stays linear in the graph's size (a model of 10,000 layers). */
static void find_layer_matmuls(ac_state *s, arena *scratch) {
  hmap first; /* layer -> its first allow op */
  hmap_init(&first, HMAP_STRINGS);
  s->layer_mm = arena_alloc(scratch, (size_t)(s->n_orig + 1) * sizeof *s->layer_mm);
  for (int pass = 0; pass < 2; pass++) /* 0: record each layer's first matmul; 1: look them up */
    for (int i = 0; i < s->n_orig; i++) {
      ir_node *n = s->g->nodes[i];
      if (!n->layer || (pass == 0 && ir_op_autocast(n->op) != IR_AC_ALLOW)) continue;
      if (pass == 0) hmap_put_str(&first, n->layer, strlen(n->layer), n);
      else s->layer_mm[i] = hmap_get_str(&first, n->layer, strlen(n->layer));
    }
  hmap_fini(&first);
}

/* Infer ops whose result is exact in any float format, so computing them
 * in their operand's 16-bit dtype gives the bits f32 would, rounded to
 * that dtype: the value they follow needs no cast for them. Unary only:
 * a second operand (maximum's) may be an f32 constant that a cast would
 * round. */
static const ir_op exact_ops[] = {
    IR_OP_RELU, /* max(x, 0): x or 0 */
    IR_OP_NEG,  /* a sign flip */
    IR_OP_ABS,  /* a sign cleared */
};

static bool is_exact(ir_op op) {
  for (size_t i = 0; i < sizeof exact_ops / sizeof exact_ops[0]; i++)
    if (exact_ops[i] == op) return true;
  return false;
}

static bool is_standalone_infer(const ac_state *s, const ir_node *n) {
  return ir_op_autocast(n->op) == IR_AC_INFER && n->policy == IR_POLICY_NONE && !n->in_policy &&
         !layer_matmul(s, n);
}

/* Phase 1: forced f32, deny, allow, overrides and dense-layer members. */
static void decide_fixed(ac_state *s) {
  for (int i = 0; i < s->n_orig; i++) {
    ir_node *n = s->g->nodes[i];
    ir_ac_class c = ir_op_autocast(n->op);
    ir_dtype cd = ir_policy_compute_dtype(node_policy(s, n));
    if (c == IR_AC_LEAF || c == IR_AC_CLEAR) continue; /* clear: decided in phase 2 */
    if (!dtype_is_float(n->type.dtype) && c != IR_AC_FIXED) { /* integers and booleans: never retyped */
      decide(s, n, n->type.dtype, "an integer or boolean result");
      continue;
    }
    if (c == IR_AC_FIXED) {
      decide(s, n, n->type.dtype, n->rule ? n->rule : "explicit cast");
    } else if (list_has(s->o->fp32_layers, n->layer)) {
      decide(s, n, DT_F32, "--fp32-layers");
    } else if (list_has(s->o->fp32_ops, ir_op_name(n->op))) {
      decide(s, n, DT_F32, "--fp32-ops");
    } else if (c == IR_AC_DENY) {
      decide(s, n, DT_F32, arena_printf(s->g->arena, "%s runs in f32", ir_op_name(n->op)));
      s->deny_taint[i] = true;
    } else if (c == IR_AC_ALLOW || n->policy != IR_POLICY_NONE) {
      decide(s, n, cd, policy_rule(s, n));
    } else if (n->in_policy) { /* a Keras layer that casts to its compute dtype (Rescaling) */
      decide(s, n, cd, arena_printf(s->g->arena, "%s, as Keras's layer casts", policy_rule(s, n)));
    }
  }
  /* dense-layer members follow their matmul */
  for (int i = 0; i < s->n_orig; i++) {
    ir_node *n = s->g->nodes[i];
    if (s->decided[i] || ir_op_autocast(n->op) != IR_AC_INFER) continue;
    const ir_node *m = layer_matmul(s, n);
    if (m) decide(s, n, s->dt[m->id], arena_printf(s->g->arena, "follows %s's matmul", n->layer));
  }
}

/* Which undecided nodes "a 16-bit matmul downstream" reaches back through:
 * standalone infer ops and clear ops (pads, slices, reshapes, pools: data
 * movement, as TF's AMP pass paints its clear list from both sides). An
 * activation before a ZeroPadding2D and a convolution (EfficientNet's
 * strided blocks: block2a_expand_activation) is between two 16-bit
 * matmuls, as Keras computes it in its compute dtype: without the clear
 * ops it computed in f32, 7.4e-3 from Keras-on-JAX at that layer. */
static bool passes_down16(const ac_state *s, const ir_node *n) {
  return is_standalone_infer(s, n) || ir_op_autocast(n->op) == IR_AC_CLEAR;
}

/* Phase 2: standalone infer ops, TF-AMP style. down16 is computed in reverse
 * schedule order through standalone infer and clear users; the upstream
 * condition in schedule order from already decided sources. */
static void decide_infer(ac_state *s) {
  for (int i = s->n_orig; i-- > 0;) {
    ir_node *u = s->g->nodes[i];
    unsigned mask = 0;
    if (ir_op_autocast(u->op) == IR_AC_ALLOW && is_16(s->dt[i])) mask = 1u << s->dt[i];
    else if (!s->decided[i] && passes_down16(s, u)) mask = s->down16[i];
    else continue;
    for (int k = 0; k < u->n_srcs; k++) {
      ir_node *src = u->srcs[k];
      if (!s->decided[src->id] && passes_down16(s, src)) s->down16[src->id] |= mask;
    }
  }
  for (int i = 0; i < s->n_orig; i++) {
    ir_node *n = s->g->nodes[i];
    if (!s->decided[i] && ir_op_autocast(n->op) == IR_AC_CLEAR) { /* data movement */
      int sid = n->srcs[0]->id;
      s->deny_taint[i] = s->deny_taint[sid];
      decide(s, n, s->dt[sid], "follows its operand");
      continue;
    }
    if (s->decided[i] || ir_op_autocast(n->op) != IR_AC_INFER) continue;
    unsigned up = 0;
    bool taint = false;
    for (int k = 0; k < n->n_srcs; k++) {
      int sid = n->srcs[k]->id;
      taint |= s->deny_taint[sid];
      if (is_16(s->dt[sid]) && ir_op_autocast(n->srcs[k]->op) != IR_AC_LEAF) up |= 1u << s->dt[sid];
    }
    ir_dtype cd = ir_policy_compute_dtype(node_policy(s, n));
    unsigned down = s->down16[i];
    if (taint) {
      s->deny_taint[i] = true;
      decide(s, n, DT_F32, "after an f32-only op");
    } else if (!is_16(cd)) {
      decide(s, n, DT_F32, policy_rule(s, n));
    } else if (up && up == down && (up & (up - 1)) == 0) {
      ir_dtype t = up == (1u << DT_F16) ? DT_F16 : DT_BF16;
      decide(s, n, t, arena_printf(s->g->arena, "between %s matmuls", dtype_name(t)));
    } else if (is_exact(n->op) && n->n_srcs == 1 && up) { /* up: the operand's 16-bit dtype */
      ir_dtype t = s->dt[n->srcs[0]->id];
      decide(s, n, t, arena_printf(s->g->arena, "exact in %s: follows its operand", dtype_name(t)));
    } else {
      decide(s, n, DT_F32, "not between 16-bit matmuls");
    }
  }
}

/* Deny ops whose Keras layer casts its f32 result back to the layer's
 * compute dtype, so that what follows reads it as Keras's next layer does:
 * BatchNormalization upcasts its input, normalizes in float32 and returns
 * ops.cast(outputs, self.compute_dtype)
 * (keras/src/layers/normalization/batch_normalization.py). Without the
 * rounding every op after a batch norm computes in f32 up to the next
 * matmul (the deny taint): MobileNetV2's residual adds, which Keras rounds
 * to bfloat16, put castor 2.6e-2 from Keras's mixed_bfloat16 (docs/keras.md).
 * Other deny ops keep TF AMP's placement (their users stay f32). */
static const ir_op rounded_deny_ops[] = {
    IR_OP_BATCH_NORM,
};

static bool is_rounded_deny(ir_op op) {
  for (size_t i = 0; i < sizeof rounded_deny_ops / sizeof rounded_deny_ops[0]; i++)
    if (rounded_deny_ops[i] == op) return true;
  return false;
}

/* Before the decisions: each rounded deny op of a layer that computes in 16
 * bits (not forced to f32) gets an explicit cast to that dtype right after
 * it, read by all its users (and outputs) in its place. One walk over the
 * graph; ids current afterwards. */
static void round_deny_outputs(ir_graph *g, const pass_autocast_options *o, arena *scratch) {
  ir_graph_renumber(g);
  int n = g->n_nodes, n_new = 0;
  ir_node **cast = arena_alloc(scratch, (size_t)(n + 1) * sizeof *cast);
  for (int i = 0; i < n; i++) {
    ir_node *x = g->nodes[i];
    cast[i] = NULL;
    if (!is_rounded_deny(x->op) || x->type.dtype != DT_F32 || pass_autocast_forces_f32(o, x)) continue;
    ir_dtype t = ir_policy_compute_dtype(x->policy != IR_POLICY_NONE ? x->policy : g->policy);
    if (!is_16(t)) continue;
    char base[512];
    snprintf(base, sizeof base, "%s.%s", x->name, dtype_name(t));
    ir_type ty = x->type;
    ty.dtype = t;
    ir_node *c = ir_node_new(g, IR_OP_CAST, &ty, &x, 1, ir_graph_unique_name(g, base), x->loc);
    c->attr.to = t;
    c->layer = x->layer;
    c->policy = x->policy;
    c->rule = arena_printf(g->arena, "%s's f32 result in %s, as Keras's layer returns it", ir_op_name(x->op),
                           dtype_name(t));
    c->note = arena_printf(g->arena, "autocast: %s returns %s (%s)", x->layer ? x->layer : x->name, dtype_name(t),
                           ir_policy_name(x->policy != IR_POLICY_NONE ? x->policy : g->policy));
    cast[i] = c;
    n_new++;
  }
  if (!n_new) return;
  for (int i = 0; i < n; i++)
    for (int k = 0; k < g->nodes[i]->n_srcs; k++) {
      ir_node *src = g->nodes[i]->srcs[k];
      if (src->id >= 0 && src->id < n && g->nodes[src->id] == src && cast[src->id]) g->nodes[i]->srcs[k] = cast[src->id];
    }
  for (int k = 0; k < g->n_outputs; k++) {
    ir_node *v = g->outputs[k].value;
    if (cast[v->id]) g->outputs[k].value = cast[v->id];
  }
  ir_node **old = arena_alloc(scratch, (size_t)(n + 1) * sizeof *old);
  memcpy(old, g->nodes, (size_t)n * sizeof *old);
  g->n_nodes = 0;
  for (int i = 0; i < n; i++) {
    ir_graph_append(g, old[i]);
    if (cast[i]) ir_graph_append(g, cast[i]);
  }
  ir_graph_renumber(g);
}

/* Ops that read a contraction's f32 sums unrounded: a 16-bit contraction
 * (conv2d, group_conv2d, matmul) whose every use is one of these, as x, has
 * an f32 result (its {acc}) instead of its operands' dtype. Keras on JAX
 * computes Conv2D -> BatchNormalization so: XLA keeps the convolution's
 * f32 sums for the batch norm's f32 arithmetic (the bf16 rounding between
 * them is "excess precision" it removes), so a Conv2D's output is never
 * rounded before its batch norm. The fused kernel does the same: the
 * contraction's epilogue applies the batch norm to the f32 sums. */
static const ir_op unrounded_readers[] = {
    IR_OP_BATCH_NORM,
};

static bool reads_unrounded(const ir_node *user, int k) {
  for (size_t i = 0; i < sizeof unrounded_readers / sizeof unrounded_readers[0]; i++)
    if (unrounded_readers[i] == user->op) return k == 0;
  return false;
}

/* widen[i]: 1 for a 16-bit contraction that only unrounded readers use,
 * either directly or through its layer's bias add (an add of a leaf, whose
 * uses are all unrounded readers: XLA adds the bias to the f32 sums too);
 * 2 for that bias add, which then computes in f32. */
static unsigned char *find_widened(const ac_state *s, arena *scratch) {
  ir_graph *g = s->g;
  int n = s->n_orig;
  unsigned char *widen = arena_alloc(scratch, (size_t)n + 1);
  bool *only = arena_alloc(scratch, (size_t)n + 1); /* used, and only by unrounded readers */
  int *uses = arena_alloc(scratch, (size_t)(n + 1) * sizeof *uses);
  ir_node **user = arena_alloc(scratch, (size_t)(n + 1) * sizeof *user);
  for (int i = 0; i < n; i++) widen[i] = 0, only[i] = true, uses[i] = 0, user[i] = NULL;
  for (int j = 0; j < n; j++)
    for (int k = 0; k < g->nodes[j]->n_srcs; k++) {
      int src = g->nodes[j]->srcs[k]->id;
      uses[src]++;
      user[src] = g->nodes[j];
      if (!reads_unrounded(g->nodes[j], k)) only[src] = false;
    }
  for (int k = 0; k < g->n_outputs; k++) only[g->outputs[k].value->id] = false, uses[g->outputs[k].value->id]++;
  for (int i = 0; i < n; i++) {
    const ir_node *c = g->nodes[i];
    if (ir_op_autocast(c->op) != IR_AC_ALLOW || !(ir_op_attrs(c->op) & A(acc)) || !is_16(s->dt[i]) || !uses[i]) continue;
    if (only[i]) {
      widen[i] = 1;
      continue;
    }
    ir_node *a = user[i]; /* the bias add */
    if (uses[i] != 1 || !a || a->op != IR_OP_ADD || a->srcs[0] != c || !a->layer || !c->layer || strcmp(a->layer, c->layer) ||
        ir_op_autocast(a->srcs[1]->op) != IR_AC_LEAF || !only[a->id] || !uses[a->id])
      continue;
    widen[i] = 1;
    widen[a->id] = 2;
  }
  return widen;
}

/* The cast of `v` to `t`, created on first use; `user` is the layer it
 * serves and `why` the rule, for the note. */
static ir_node *cast_of(ac_state *s, ir_node *v, ir_dtype t, const ir_node *user, const char *why) {
  ir_node **slot = &s->casts[v->id * DT_COUNT + t];
  if (*slot) return *slot;
  char base[512];
  snprintf(base, sizeof base, "%s.%s", v->name, dtype_name(t));
  ir_type ty = v->type;
  ty.dtype = t;
  ir_node *c = ir_node_new(s->g, IR_OP_CAST, &ty, &v, 1, ir_graph_unique_name(s->g, base), v->loc);
  c->attr.to = t;
  c->layer = user ? user->layer : NULL;
  c->rule = why;
  if (user)
    c->note = arena_printf(s->g->arena, "autocast: %s computes in %s (%s)", user->layer ? user->layer : user->name,
                           dtype_name(t), why);
  *slot = c;
  return c;
}

bool pass_autocast_run(ir_graph *g, pass_context *ctx) {
  const pass_autocast_options *o = &ctx->opts->autocast;
  if (!pass_autocast_options_check(o, ctx->diag)) return false;
  /* every --fp32-layers name must be a layer of the model */
  for (const char *p = o->fp32_layers; p && *p;) {
    const char *e = strchr(p, ',');
    size_t len = e ? (size_t)(e - p) : strlen(p);
    bool found = false;
    for (int i = 0; i < g->n_nodes && !found; i++)
      found = g->nodes[i]->layer && strlen(g->nodes[i]->layer) == len && !strncmp(g->nodes[i]->layer, p, len);
    if (!found) {
      diag_error_kind(ctx->diag, DIAG_KIND_INVALID_ARGUMENT, (diag_loc){0}, "--fp32-layers: the model has no layer '%.*s'", (int)len, p);
      return false;
    }
    p = e ? e + 1 : p + len;
  }
  round_deny_outputs(g, o, ctx->scratch);
  ir_graph_renumber(g);
  int n = g->n_nodes;
  ac_state s = {g, ctx, o, NULL, NULL, NULL, NULL, NULL, NULL, n};
  s.dt = arena_alloc(ctx->scratch, (size_t)(n + 1) * sizeof *s.dt);
  s.decided = arena_alloc(ctx->scratch, (size_t)n + 1);
  s.deny_taint = arena_alloc(ctx->scratch, (size_t)n + 1);
  s.down16 = arena_alloc(ctx->scratch, (size_t)(n + 1) * sizeof *s.down16);
  s.casts = arena_alloc(ctx->scratch, (size_t)(n + 1) * DT_COUNT * sizeof *s.casts);
  for (int i = 0; i < n; i++) s.dt[i] = g->nodes[i]->type.dtype;
  find_layer_matmuls(&s, ctx->scratch);
  decide_fixed(&s);
  decide_infer(&s);

  unsigned char *widen = find_widened(&s, ctx->scratch);

  /* retype and cast operands */
  for (int i = 0; i < n; i++) {
    ir_node *x = g->nodes[i];
    if (ir_op_autocast(x->op) == IR_AC_LEAF) continue;
    if (ir_op_autocast(x->op) == IR_AC_FIXED) continue; /* a cast reads any dtype */
    ir_dtype t = widen[i] == 2 ? DT_F32 : s.dt[i];
    if (widen[i] == 2) x->rule = arena_printf(g->arena, "%s's bias on its f32 sums, for its batch norm", x->layer);
    /* an integer or boolean result of float operands (a comparison, is_nan)
     * reads them in f32: exact for every 16-bit value, one dtype for all */
    ir_dtype ts = dtype_is_float(t) ? t : DT_F32;
    for (int k = 0; k < x->n_srcs; k++)
      if (x->srcs[k]->type.dtype != ts && dtype_is_float(x->srcs[k]->type.dtype)) /* not labels */
        x->srcs[k] = cast_of(&s, x->srcs[k], ts, x, dtype_is_float(t) ? x->rule : "compares in f32");
    x->type.dtype = t;
    if (ir_op_attrs(x->op) & A(acc)) x->attr.acc = DT_F32; /* contractions accumulate in f32 */
    if (widen[i] == 1) {
      x->type.dtype = DT_F32;
      x->rule = arena_printf(g->arena, "%s; its f32 sums go unrounded to its batch norm", x->rule);
    }
  }
  /* model outputs are f32 */
  for (int k = 0; k < g->n_outputs && !o->keep_16bit_outputs; k++) {
    ir_node *v = g->outputs[k].value;
    if (v->type.dtype == DT_F32 || !dtype_is_float(v->type.dtype)) continue;
    bool fresh = s.casts[v->id * DT_COUNT + DT_F32] == NULL;
    ir_node *c = cast_of(&s, v, DT_F32, NULL, "output rule");
    if (fresh) {
      c->layer = v->layer;
      c->note = arena_printf(g->arena, "autocast: output %s is f32 (output rule)", g->outputs[k].name);
    }
    g->outputs[k].value = c;
  }
  /* schedule: each cast right after the value it converts */
  ir_node **old = arena_alloc(ctx->scratch, (size_t)(n + 1) * sizeof *old);
  memcpy(old, g->nodes, (size_t)n * sizeof *old);
  g->n_nodes = 0;
  for (int i = 0; i < n; i++) {
    ir_graph_append(g, old[i]);
    for (int t = 0; t < DT_COUNT; t++)
      if (s.casts[i * DT_COUNT + t]) ir_graph_append(g, s.casts[i * DT_COUNT + t]);
  }
  return true;
}
