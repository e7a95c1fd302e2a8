/* SPDX-License-Identifier: Apache-2.0 */
/*
 * keras.c: the Keras frontend's driver (keras.h). A .keras file is a ZIP
 * (formats/zip.h) of metadata.json (the Keras version), config.json (the
 * model: formats/json.h, the one JSON reader) and model.weights.h5 (the
 * weights: formats/hdf5.h). This file reads the three, builds the model's
 * layers and their calls from the config (a Sequential chain, or a
 * Functional graph of inbound nodes: shared layers, several inputs and
 * outputs), derives each layer's weights group as Keras's saver names it,
 * maps each DTypePolicy, reads compile_config into the training defaults,
 * and lowers the calls in dependency order through the layer table
 * (layers.c). docs/keras.md is the user's side of all of it.
 *
 * Out (fe_load's contract): every float f32, every activation's first
 * dimension N; the graph's policy is the model's global policy (the
 * model's own DTypePolicy, which Keras sets from the global policy when the
 * model is built), and a layer whose policy differs carries it as its
 * nodes' override. Errors have the archive as their location and name the
 * layer, its class and the key.
 */
#include "frontend/keras/internal.h"

#include "formats/zip.h"
#include "util/half.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Members larger than this are refused (config.json is a few kB). */
#define KR_MAX_JSON_BYTES ((uint64_t)64 << 20)

diag_loc kr_loc(const kr_model *m) { return (diag_loc){m->file, 0, 0}; }

/* An error at the archive; in a nested model, its path first ("in nested model 'block/deep': ..."). */
static void model_error(kr_model *m, diag_kind kind, const char *fmt, va_list ap) {
  str_buf b;
  str_buf_init(&b);
  if (m->path) str_buf_printf(&b, "in nested model '%.*s': ", (int)strlen(m->path) - 1, m->path);
  str_buf_vprintf(&b, fmt, ap);
  diag_error_kind(m->d, kind, kr_loc(m), "%s", str_buf_cstr(&b));
  str_buf_fini(&b);
}

void kr_error(kr_model *m, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  model_error(m, DIAG_KIND_UNSPECIFIED, fmt, ap);
  va_end(ap);
}

void kr_unsupported(kr_model *m, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  model_error(m, DIAG_KIND_UNSUPPORTED, fmt, ap);
  va_end(ap);
}

void kr_layer_error(kr_model *m, const kr_layer *l, const char *fmt, ...) {
  str_buf b;
  str_buf_init(&b);
  str_buf_printf(&b, "layer '%s%s' (%s): ", m->path ? m->path : "", l->name, l->cls);
  va_list ap;
  va_start(ap, fmt);
  str_buf_vprintf(&b, fmt, ap);
  va_end(ap);
  diag_error(m->d, kr_loc(m), "%s", str_buf_cstr(&b));
  str_buf_fini(&b);
}

const json_value *kr_cfg(const kr_layer *l, const char *key) { return json_field(l->cfg, key); }
bool kr_is_null(const json_value *v) { return !v || (v->kind == JSON_LIT && v->lit == 'n'); }

static kr_model *root_of(kr_model *m) {
  while (m->parent) m = m->parent;
  return m;
}

ir_node *kr_stamp(kr_model *m, const kr_layer *l, ir_node *n) {
  m = root_of(m); /* the graph's policy is the file's model's */
  n->note = arena_strdup(m->g->arena, l->name);
  n->layer = arena_strdup(m->g->arena, l->ir_name);
  n->policy = l->policy == m->policy ? IR_POLICY_NONE : l->policy;
  return n;
}

/* ---- names ---- */

/* Keras's to_snake_case (keras/src/utils/naming.py): drop non-word
 * characters, "_" before an upper-case letter that starts a word, lower
 * case: Dense -> dense, LayerNormalization -> layer_normalization,
 * ReLU -> re_lu, Conv2D -> conv2d. */
static const char *snake_case(arena *a, const char *s) {
  size_t n = strlen(s);
  char *w = arena_alloc(a, n + 1), *out = arena_alloc(a, 2 * n + 1);
  size_t k = 0, o = 0;
  for (size_t i = 0; i < n; i++) {
    char c = s[i];
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_')
      w[k++] = c;
  }
  /* (.)([A-Z][a-z]+) -> \1_\2, then ([a-z])([A-Z]) -> \1_\2 */
  char *t = arena_alloc(a, 2 * k + 1);
  size_t m = 0;
  for (size_t i = 0; i < k; i++) {
    bool up = w[i] >= 'A' && w[i] <= 'Z';
    bool next_low = i + 1 < k && w[i + 1] >= 'a' && w[i + 1] <= 'z';
    if (i > 0 && up && next_low) t[m++] = '_';
    t[m++] = w[i];
  }
  for (size_t i = 0; i < m; i++) {
    char c = t[i];
    bool up = c >= 'A' && c <= 'Z';
    if (i > 0 && up && t[i - 1] >= 'a' && t[i - 1] <= 'z') out[o++] = '_';
    out[o++] = up ? (char)(c - 'A' + 'a') : c;
  }
  out[o] = 0;
  return out;
}

/* A Keras name as an IR value name: [A-Za-z_][A-Za-z0-9_]*. */
static const char *ir_name(arena *a, const char *s) {
  size_t n = strlen(s);
  char *out = arena_alloc(a, n + 2);
  size_t o = 0;
  if (!(s[0] >= 'a' && s[0] <= 'z') && !(s[0] >= 'A' && s[0] <= 'Z') && s[0] != '_') out[o++] = '_';
  for (size_t i = 0; i < n; i++) {
    char c = s[i];
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
    out[o++] = ok ? c : '_';
  }
  out[o] = 0;
  return out;
}

/* ---- policies ---- */

/* A layer's "dtype": a policy name, or {"class_name": "DTypePolicy",
 * "config": {"name": ...}} (FloatDTypePolicy in Keras 3.0 to 3.5). */
static bool policy_of(kr_model *m, const char *who, const json_value *v, ir_policy *out) {
  const char *name = NULL;
  if (v && v->kind == JSON_STR) name = v->s;
  else if (v && v->kind == JSON_OBJ) {
    const json_value *c = json_field(v, "class_name"), *cfg = json_field(v, "config");
    const json_value *n = cfg && cfg->kind == JSON_OBJ ? json_field(cfg, "name") : NULL;
    if (!c || c->kind != JSON_STR || !n || n->kind != JSON_STR) {
      kr_error(m, "%s: its dtype policy is not a DTypePolicy object", who);
      return false;
    }
    if (strcmp(c->s, "DTypePolicy") != 0 && strcmp(c->s, "FloatDTypePolicy") != 0) {
      kr_unsupported(m, "%s: dtype policy class '%s' is not supported (castor reads DTypePolicy: "
                  "float32, float16, bfloat16, mixed_float16, mixed_bfloat16; quantized policies "
                  "are not supported)", who, c->s);
      return false;
    }
    name = n->s;
  } else if (kr_is_null(v)) {
    *out = IR_POLICY_NONE;
    return true;
  } else {
    kr_error(m, "%s: its dtype is %s, not a policy", who, json_kind_name(v->kind));
    return false;
  }
  if (!ir_policy_from_name(name, strlen(name), out)) {
    kr_unsupported(m, "%s: dtype policy '%s' is not supported (float32, float16, bfloat16, "
                "mixed_float16, mixed_bfloat16)", who, name);
    return false;
  }
  return true;
}

/* ---- layers and calls ---- */

static kr_layer *find_layer(kr_model *m, const char *name) {
  for (int i = 0; i < m->n_layers; i++)
    if (strcmp(m->layers[i].name, name) == 0) return &m->layers[i];
  return NULL;
}

/* [name, node, tensor] as Functional's input_layers/output_layers and
 * keras_history give them. */
static bool read_ref(kr_model *m, const json_value *v, const char *where, kr_ref *out) {
  if (!v || v->kind != JSON_ARR || v->n != 3 || v->items[0].kind != JSON_STR ||
      v->items[1].kind != JSON_INT || v->items[2].kind != JSON_INT) {
    kr_error(m, "config.json: %s is not [layer name, node index, tensor index]", where);
    return false;
  }
  kr_layer *l = find_layer(m, v->items[0].s);
  if (!l) {
    kr_error(m, "config.json: %s names layer '%s', which the model does not have", where, v->items[0].s);
    return false;
  }
  int64_t node = v->items[1].i, t = v->items[2].i;
  /* a tensor past output 0 exists only for a layer with several (return_state): checked when lowered */
  if (node < 0 || node >= (l->n_calls ? l->n_calls : 1) || t < 0 || t >= FL_MAX_OUTS) {
    kr_error(m, "config.json: %s refers to output %lld of call %lld of layer '%s', which has %d "
          "call(s) of at most %d outputs", where, (long long)t, (long long)node, l->name, l->n_calls, FL_MAX_OUTS);
    return false;
  }
  *out = (kr_ref){.layer = l, .node = (int)node, .tensor = (int)t};
  return true;
}

/* The tensors of an inbound node's args, in order (lists flattened). */
static bool collect_tensors(kr_model *m, kr_layer *l, const json_value *v, kr_call *c, int depth) {
  if (depth > 4) return kr_layer_error(m, l, "its call arguments nest too deep"), false;
  if (v->kind == JSON_ARR) {
    for (int i = 0; i < v->n; i++)
      if (!collect_tensors(m, l, &v->items[i], c, depth + 1)) return false;
    return true;
  }
  if (l->op_node && (v->kind == JSON_INT || v->kind == JSON_FLOAT)) { /* x + 3.0 */
    if (c->n_in == KR_MAX_CALL_INPUTS)
      return kr_layer_error(m, l, "more than %d inputs", KR_MAX_CALL_INPUTS), false;
    c->in[c->n_in++] = (kr_ref){.layer = NULL, .number = v->num};
    return true;
  }
  const json_value *cls = v->kind == JSON_OBJ ? json_field(v, "class_name") : NULL;
  if (!cls || cls->kind != JSON_STR || strcmp(cls->s, "__keras_tensor__") != 0) {
    kr_layer_error(m, l, "a call argument that is not a tensor is not supported (%s)",
                   json_kind_name(v->kind));
    return false;
  }
  const json_value *cfg = json_field(v, "config");
  const json_value *h = cfg && cfg->kind == JSON_OBJ ? json_field(cfg, "keras_history") : NULL;
  if (c->n_in == KR_MAX_CALL_INPUTS)
    return kr_layer_error(m, l, "more than %d inputs", KR_MAX_CALL_INPUTS), false;
  const char *where = arena_printf(m->arena, "the keras_history of an input of layer '%s'", l->name);
  return read_ref(m, h, where, &c->in[c->n_in++]);
}

/* Functional: each layer's inbound_nodes, Keras 3's form
 * [{"args": [...], "kwargs": {...}}]. */
static bool read_calls(kr_model *m, kr_layer *l, const json_value *spec) {
  const json_value *nodes = json_field(spec, "inbound_nodes");
  if (!nodes || nodes->kind != JSON_ARR) {
    kr_layer_error(m, l, "no inbound_nodes list");
    return false;
  }
  for (int k = 0; k < nodes->n; k++) {
    const json_value *n = &nodes->items[k];
    if (n->kind != JSON_OBJ) {
      kr_layer_error(m, l, "inbound node %d is %s, not an object (a Keras 2 config? re-save the "
                     "model with Keras 3)", k, json_kind_name(n->kind));
      return false;
    }
    const json_value *args = json_field(n, "args"), *kw = json_field(n, "kwargs");
    if (!args || args->kind != JSON_ARR) return kr_layer_error(m, l, "inbound node %d has no args", k), false;
    for (int i = 0; i < args->n; i++)
      if (!collect_tensors(m, l, &args->items[i], &l->calls[k], 0)) return false;
    bool mha = !strcmp(l->cls, "MultiHeadAttention");
    int row = fl_layer_row(l->cls);
    bool rnn = row >= 0 && fl_row_takes_initial_state(row);
    for (int i = 0; kw && kw->kind == JSON_OBJ && i < kw->n; i++) {
      const json_value *v = &kw->items[i];
      const char *key = kw->keys[i];
      bool harmless = kr_is_null(v) || (v->kind == JSON_LIT && v->lit == 'f' && !strcmp(key, "training"));
      /* MultiHeadAttention's call: key and attention_mask tensors, use_causal_mask,
       * return_attention_scores (castor lowers output 0; a use of the scores, output 1, is refused) */
      if (mha && !harmless && (!strcmp(key, "key") || !strcmp(key, "attention_mask"))) {
        if (!collect_tensors(m, l, v, &l->calls[k], 0)) return false;
        *(!strcmp(key, "key") ? &l->calls[k].key_at : &l->calls[k].mask_at) = l->calls[k].n_in;
        continue;
      }
      if (mha && !strcmp(key, "use_causal_mask") && v->kind == JSON_LIT && v->lit != 'n') {
        l->calls[k].causal = v->lit == 't';
        continue;
      }
      if (mha && !strcmp(key, "return_attention_scores") && v->kind == JSON_LIT) continue;
      /* a recurrent layer's initial_state: its inputs after the sequence */
      if (rnn && !harmless && !strcmp(key, "initial_state")) {
        if (!collect_tensors(m, l, v, &l->calls[k], 0)) return false;
        continue;
      }
      /* ...and its mask (Keras writes the traced compute_mask: Masking's, Embedding's mask_zero) */
      if (rnn && !harmless && !strcmp(key, "mask")) {
        int before = l->calls[k].n_in;
        if (!collect_tensors(m, l, v, &l->calls[k], 0)) return false;
        if (l->calls[k].n_in != before + 1) {
          kr_layer_error(m, l, "its call's mask is %d tensors; a recurrent layer takes one [N, steps]",
                         l->calls[k].n_in - before);
          return false;
        }
        l->calls[k].mask_at = l->calls[k].n_in;
        continue;
      }
      if (!harmless && !strcmp(key, "mask")) { /* Keras passes a mask only to a layer that uses it */
        kr_unsupported(m, "layer '%s' (%s): call argument 'mask' is not supported: castor computes %s without "
                       "Keras's mask (from Masking or Embedding mask_zero), and its result depends on it",
                       l->name, l->cls, l->cls);
        return false;
      }
      if (!harmless) {
        kr_unsupported(m, "layer '%s' (%s): call argument '%s' is not supported", l->name, l->cls, key);
        return false;
      }
    }
  }
  return true;
}

/* The op nodes of keras.src.ops.numpy castor lowers: elementwise arithmetic
 * of tensors and numbers, broadcast as numpy's, as the merge layers of the
 * library (Divide and TrueDivide its row TrueDivide). */
static int op_row(const char *cls) {
  static const char *const ops[][2] = {{"Add", "Add"}, {"Subtract", "Subtract"}, {"Multiply", "Multiply"},
                                       {"Maximum", "Maximum"}, {"Minimum", "Minimum"}, {"Divide", "TrueDivide"},
                                       {"TrueDivide", "TrueDivide"}, {"NotEqual", "NotEqual"}, {"Any", "Any"},
                                       {"Cast", "Cast"}};
  for (size_t i = 0; i < sizeof ops / sizeof *ops; i++)
    if (!strcmp(cls, ops[i][0])) return fl_layer_row(ops[i][1]);
  return -1;
}

static bool read_layers(kr_model *m, const json_value *cfg, bool functional) {
  const json_value *ls = json_field(cfg, "layers");
  if (!ls || ls->kind != JSON_ARR) {
    kr_error(m, "config.json: the model's config has no \"layers\" list");
    return false;
  }
  if (ls->n > KR_MAX_LAYERS) {
    kr_error(m, "config.json: %d layers, more than castor reads (%d)", ls->n, KR_MAX_LAYERS);
    return false;
  }
  m->n_layers = ls->n;
  m->layers = arena_alloc(m->arena, ((size_t)ls->n + 1) * sizeof *m->layers);
  hmap counters; /* snake-case class -> uses so far + 1 (Keras's saver's used_names) */
  hmap_init(&counters, HMAP_STRINGS);
  hmap names;
  hmap_init(&names, HMAP_STRINGS);
  bool ok = true;
  int refused = 0;
  for (int i = 0; i < ls->n && ok; i++) {
    const json_value *s = &ls->items[i];
    kr_layer *l = &m->layers[i];
    l->index = i;
    l->row = -1;
    const json_value *cls = s->kind == JSON_OBJ ? json_field(s, "class_name") : NULL;
    const json_value *c = s->kind == JSON_OBJ ? json_field(s, "config") : NULL;
    const json_value *nm = c && c->kind == JSON_OBJ ? json_field(c, "name") : NULL;
    if (!cls || cls->kind != JSON_STR || !nm || nm->kind != JSON_STR || !nm->s[0]) {
      kr_error(m, "config.json: layers[%d] is not a layer (an object with class_name and "
            "config.name)", i);
      ok = false;
      break;
    }
    l->cls = cls->s, l->name = nm->s, l->cfg = c, l->spec = s;
    const char *full = m->ir_prefix ? arena_printf(m->arena, "%s__%s", m->ir_prefix, l->name) : l->name;
    l->ir_name = ir_name(m->arena, full);
    l->order = m->order | (uint64_t)(i + 1) << (16 * (KR_MAX_NEST - m->depth));
    kr_layer *prev = hmap_get_str(&names, l->ir_name, strlen(l->ir_name));
    if (prev) {
      kr_error(m, "config.json: layer names '%s' and '%s' are the same in castor's IR ('%s')",
            prev->name, l->name, l->ir_name);
      ok = false;
      break;
    }
    hmap_put_str(&names, l->ir_name, strlen(l->ir_name), l);
    /* the saver's path: the class in snake case, then _1, _2 ... per class */
    const char *sc = snake_case(m->arena, l->cls);
    int *count = hmap_get_str(&counters, sc, strlen(sc));
    if (!count) hmap_put_str(&counters, sc, strlen(sc), count = arena_alloc(m->arena, sizeof *count));
    int used = (*count)++;
    const char *pre = m->h5_prefix ? m->h5_prefix : "";
    l->vars = used ? arena_printf(m->arena, "%s/layers/%s_%d/vars", pre, sc, used)
                   : arena_printf(m->arena, "%s/layers/%s/vars", pre, sc);
    /* the functional API's op nodes (x + 3.0 is keras.src.ops.numpy's Add) are not the layers of the same name */
    const json_value *mod = json_field(s, "module"), *reg = json_field(s, "registered_name");
    const char *module = mod && mod->kind == JSON_STR ? mod->s : NULL;
    const char *registered = !module && reg && reg->kind == JSON_STR ? reg->s : NULL; /* a custom class */
    l->op_node = module && str_has_prefix(module, "keras.src.ops");
    l->row = l->op_node ? op_row(l->cls) : fl_layer_row(l->cls);
    /* a class keras.applications defines in its own module: that module's only */
    if (!strcmp(l->cls, "CustomScaleLayer") && !(module && !strcmp(module, "keras.src.applications.inception_resnet_v2")))
      l->row = -1;
    l->nested = !l->op_node && (!strcmp(l->cls, "Sequential") || !strcmp(l->cls, "Functional") ||
                                !strcmp(l->cls, "Model"));
    if (l->row < 0 && !l->nested) { /* every unknown class of the file, then the list once */
      kr_unsupported(m, "layer '%s': class '%s'%s%s%s is not supported", l->name, l->cls,
                     module ? " (module " : registered ? " (registered as " : "", module ? module : registered ? registered : "",
                     module || registered ? ")" : "");
      refused++;
      continue;
    }
    if (!l->nested) kr_layer_bind(m, l);
    if (strcmp(l->cls, "InputLayer") != 0 && !(l->op_node && !strcmp(l->cls, "Cast"))) { /* Cast's is its target */
      const char *who = arena_printf(m->arena, "layer '%s' (%s)", l->name, l->cls);
      if (!policy_of(m, who, json_field(c, "dtype"), &l->policy)) ok = false;
    }
    if (functional) {
      const json_value *nodes = json_field(s, "inbound_nodes");
      l->n_calls = nodes && nodes->kind == JSON_ARR ? nodes->n : 0;
      if (strcmp(l->cls, "InputLayer") == 0) l->n_calls = 1;
    } else {
      l->n_calls = 1;
    }
    l->calls = arena_alloc(m->arena, ((size_t)l->n_calls + 1) * sizeof *l->calls);
  }
  hmap_fini(&counters);
  hmap_fini(&names);
  if (refused) diag_note(m->d, kr_loc(m), "castor reads %s", fl_supported_list());
  return ok && !refused;
}

/* The model's global policy: its own DTypePolicy, else the layers' most
 * common one. Layers whose policy is none take it. */
static bool infer_policy(kr_model *m, const json_value *cfg) {
  ir_policy p = IR_POLICY_NONE;
  if (!policy_of(m, "the model", json_field(cfg, "dtype"), &p)) return false;
  if (p == IR_POLICY_NONE) {
    int count[IR_POLICY_COUNT] = {0}, best = 0;
    for (int i = 0; i < m->n_layers; i++) count[m->layers[i].policy]++;
    for (int k = 1; k < IR_POLICY_COUNT; k++)
      if (count[k] > best) best = count[k], p = (ir_policy)k;
  }
  m->policy = p == IR_POLICY_NONE ? IR_POLICY_FLOAT32 : p;
  for (int i = 0; i < m->n_layers; i++)
    if (m->layers[i].policy == IR_POLICY_NONE) m->layers[i].policy = m->policy;
  return true;
}

/* ---- weights ---- */

static void shape_str(str_buf *b, int rank, const int64_t *dims) {
  str_buf_putc(b, '[');
  for (int i = 0; i < rank; i++) str_buf_printf(b, "%s%lld", i ? ", " : "", (long long)dims[i]);
  str_buf_putc(b, ']');
}

static const float *weight_at(kr_model *m, kr_layer *l, const char *path, int i, const char *what,
                              const ir_type *t);

const float *kr_weight(kr_model *m, kr_layer *l, int i, const char *what, const ir_type *t) {
  /* Keras 3.6+ names the layer in its group: a cross-check of the path */
  const h5_object *grp = h5_find(&m->h5, l->vars);
  const char *owner = grp ? h5_attr_str(grp, "name") : NULL;
  if (owner && strcmp(owner, l->name) != 0) {
    kr_layer_error(m, l, "its weights group '%s' belongs to layer '%s' (its name attribute)",
                   l->vars, owner);
    return NULL;
  }
  return weight_at(m, l, arena_printf(m->arena, "%s/%d", l->vars, i), i, what, t);
}

/* MultiHeadAttention: its EinsumDense sublayers' groups beside its own vars:
 * /layers/NAME/vars -> /layers/NAME/SUB/vars */
const float *kr_sub_weight(kr_model *m, kr_layer *l, const char *sub, int i, int order, const char *what,
                           const ir_type *t) {
  size_t n = strlen(l->vars) - strlen("/vars");
  const char *path = arena_printf(m->arena, "%.*s/%s/vars/%d", (int)n, l->vars, sub, i);
  return weight_at(m, l, path, order, what, t);
}

static const float *weight_at(kr_model *m, kr_layer *l, const char *path, int i, const char *what,
                              const ir_type *t) {
  const h5_object *o = h5_find(&m->h5, path);
  if (!o || !o->is_dataset) {
    kr_layer_error(m, l, "model.weights.h5 has no dataset '%s' (its %s)", path, what);
    return NULL;
  }
  m->h5_used[o - m->h5.objects] = true;
  bool same = o->rank == t->rank;
  for (int k = 0; same && k < t->rank; k++) same = o->dims[k] == t->dims[k];
  if (!same) {
    str_buf have, want;
    str_buf_init(&have), str_buf_init(&want);
    shape_str(&have, o->rank, o->dims), shape_str(&want, t->rank, t->dims);
    kr_layer_error(m, l, "weight '%s' (its %s) has shape %s, the layer needs %s", path, what,
                   str_buf_cstr(&have), str_buf_cstr(&want));
    str_buf_fini(&have), str_buf_fini(&want);
    return NULL;
  }
  const char *dt = h5_attr_str(o, "dtype");
  bool f32 = o->type.cls == H5_CLASS_FLOAT && o->type.size == 4;
  bool f16 = o->type.cls == H5_CLASS_FLOAT && o->type.size == 2;
  bool bf16 = o->type.cls == H5_CLASS_OPAQUE && o->type.size == 2 && dt && !strcmp(dt, "bfloat16");
  if (!f32 && !f16 && !bf16) {
    kr_layer_error(m, l, "weight '%s' (its %s) has a type castor does not read (float32, "
                   "float16, bfloat16)", path, what);
    return NULL;
  }
  int64_t n = 1; /* numel: the reader checked the product */
  for (int k = 0; k < o->rank; k++) n *= o->dims[k];
  float *dst = arena_alloc_aligned(m->g->arena, (size_t)(n ? n : 1) * sizeof(float), 64);
  const unsigned char *src = o->data;
  for (int64_t k = 0; k < n; k++) {
    if (f32) {
      uint32_t bits = (uint32_t)src[4 * k] | (uint32_t)src[4 * k + 1] << 8 |
                      (uint32_t)src[4 * k + 2] << 16 | (uint32_t)src[4 * k + 3] << 24;
      memcpy(&dst[k], &bits, 4);
    } else {
      uint16_t h = (uint16_t)(src[2 * k] | src[2 * k + 1] << 8);
      uint32_t bits = bf16 ? (uint32_t)h << 16 : 0;
      if (bf16) memcpy(&dst[k], &bits, 4);
      else dst[k] = half_f16_to_f32(h);
    }
  }
  vec_push(&root_of(m)->bound, ((struct kr_bound){dst, (int)(o - m->h5.objects), i, l->order}));
  return dst;
}

static void report_unused(kr_model *m) {
  for (int i = 0; i < m->h5.n_objects; i++) {
    const h5_object *o = &m->h5.objects[i];
    if (!o->is_dataset || m->h5_used[i] || str_has_prefix(o->path, "/optimizer/")) continue;
    diag_warning(m->d, kr_loc(m), "model.weights.h5 has dataset '%s', which no layer of the "
                 "model uses", o->path);
  }
}

/* ---- the model ---- */

/* The input shape of an InputLayer: batch_shape (Keras 3) or
 * batch_input_shape (3.0), its first dimension null (the batch). */
static bool input_type(kr_model *m, kr_layer *l, ir_type *t) {
  const json_value *s = kr_cfg(l, "batch_shape");
  if (!s) s = kr_cfg(l, "batch_input_shape");
  const json_value *dt = kr_cfg(l, "dtype");
  bool int32 = dt && dt->kind == JSON_STR && !strcmp(dt->s, "int32"); /* indices for an Embedding */
  /* a nested model built under a 16-bit policy has a 16-bit InputLayer (ConvNeXt's stem under
   * mixed_bfloat16): it takes the outer model's tensor, which its layers cast as their policy says */
  bool half = m->depth > 0 && dt && dt->kind == JSON_STR && (!strcmp(dt->s, "bfloat16") || !strcmp(dt->s, "float16"));
  if (dt && dt->kind == JSON_STR && strcmp(dt->s, "float32") != 0 && !int32 && !half) {
    kr_unsupported(m, "layer '%s' (InputLayer): input dtype '%s' is not supported (float32; int32 for an "
                   "Embedding's indices)", l->name, dt->s);
    return false;
  }
  const json_value *sp = kr_cfg(l, "sparse"), *rg = kr_cfg(l, "ragged");
  if ((sp && sp->kind == JSON_LIT && sp->lit == 't') || (rg && rg->kind == JSON_LIT && rg->lit == 't')) {
    kr_unsupported(m, "layer '%s' (InputLayer): sparse and ragged inputs are not supported", l->name);
    return false;
  }
  if (!s || s->kind != JSON_ARR || s->n < 2 || s->n > IR_MAX_RANK) {
    kr_layer_error(m, l, "batch_shape must be a list [null, d1, ...] of 2 to %d entries", IR_MAX_RANK);
    return false;
  }
  if (!kr_is_null(&s->items[0])) {
    kr_layer_error(m, l, "a fixed batch size is not supported (batch_shape[0] must be null)");
    return false;
  }
  *t = (ir_type){int32 ? DT_I32 : DT_F32, s->n, {IR_DIM_BATCH}};
  for (int i = 1; i < s->n; i++) {
    const json_value *d = &s->items[i];
    if (d->kind != JSON_INT || d->i < 1 || d->i > ((int64_t)1 << 40)) {
      kr_layer_error(m, l, "batch_shape[%d] must be a positive integer (castor compiles static "
                     "shapes but for the batch)", i);
      return false;
    }
    t->dims[i] = d->i;
  }
  int64_t bytes;
  if (!ir_type_bytes(t, 1, &bytes) || bytes > IR_MAX_TENSOR_BYTES) {
    kr_layer_error(m, l, "its input is larger than castor's tensor limit");
    return false;
  }
  return true;
}

static const char *type_str_of(kr_model *m, const ir_type *t) {
  str_buf b;
  str_buf_init(&b);
  ir_type_print(t, &b);
  const char *s = arena_strdup(m->arena, str_buf_cstr(&b));
  str_buf_fini(&b);
  return s;
}

static bool lower_input(kr_model *m, kr_layer *l) {
  ir_type t;
  if (!input_type(m, l, &t)) return false;
  if (m->parent) { /* a model used as a layer: its call's input, of the type its InputLayer says */
    int i = m->n_inputs++;
    if (i >= m->n_given) {
      kr_layer_error(m, l, "the model '%s' has more inputs than its call passes (%d)", m->cls, m->n_given);
      return false;
    }
    ir_type have = m->given[i]->type;
    bool same = have.dtype == t.dtype && have.rank == t.rank;
    for (int k = 1; same && k < t.rank; k++) same = have.dims[k] == t.dims[k];
    if (!same) {
      kr_layer_error(m, l, "the call passes %s where its batch_shape says %s", type_str_of(m, &have),
                     type_str_of(m, &t));
      return false;
    }
    l->calls[0].out = m->given[i];
    l->calls[0].done = true;
    return true;
  }
  l->calls[0].out = kr_stamp(m, l, ir_build_input(m->g, l->ir_name, &t, m->n_inputs++, kr_loc(m)));
  l->calls[0].done = true;
  return true;
}

static bool build_model(kr_model *m, const json_value *top);

/* A Sequential or Functional model used as a layer (keras.applications' ConvNeXt stem): its
 * config is a model's, built as one with this call's inputs as its InputLayers' tensors; its
 * layers' weights are under its group (/layers/sequential/layers/conv2d/vars), their IR names
 * prefixed with its own. One call (a model shared by two calls is refused); KR_MAX_NEST levels. */
static bool nested_lower(kr_model *m, kr_layer *l, int k, ir_node **in, int n_in) {
  if (m->depth >= KR_MAX_NEST) {
    diag_error_kind(m->d, DIAG_KIND_UNSUPPORTED, kr_loc(m),
                    "layer '%s%s' (%s): models nested more than %d deep are not supported",
                    m->path ? m->path : "", l->name, l->cls, KR_MAX_NEST);
    return false;
  }
  if (l->n_calls > 1) {
    diag_error_kind(m->d, DIAG_KIND_UNSUPPORTED, kr_loc(m),
                    "layer '%s%s' (%s): a nested model called %d times is not supported (one call)",
                    m->path ? m->path : "", l->name, l->cls, l->n_calls);
    return false;
  }
  for (int i = 0; i < n_in; i++)
    if (!in[i] || in[i]->op == IR_OP_LITERAL) return kr_layer_error(m, l, "input %d is not a tensor", i), false;
  kr_model *sm = arena_alloc(m->arena, sizeof *sm);
  *sm = (kr_model){.file = m->file, .d = m->d, .errors0 = m->errors0, .arena = m->arena, .g = m->g, .h5 = m->h5,
                   .have_h5 = m->have_h5, .h5_used = m->h5_used, .parent = m, .depth = m->depth + 1,
                   .h5_prefix = arena_printf(m->arena, "%.*s", (int)(strlen(l->vars) - strlen("/vars")), l->vars),
                   .ir_prefix = l->ir_name, .path = arena_printf(m->arena, "%s%s/", m->path ? m->path : "", l->name),
                   .order = l->order, .given = in, .n_given = n_in};
  (void)k;
  if (!build_model(sm, l->spec)) return false;
  if (sm->n_inputs != n_in) {
    kr_layer_error(m, l, "its call passes %d inputs, the model has %d", n_in, sm->n_inputs);
    return false;
  }
  if (!sm->result) return kr_layer_error(m, l, "the model has no output"), false;
  l->calls[0].out = sm->result;
  return true;
}

/* Output r.tensor of a lowered call (input j of layer l's call, for the error), or NULL after one. */
static ir_node *call_output(kr_model *m, const kr_layer *l, int j, kr_ref r) {
  kr_call *src = &r.layer->calls[r.node];
  int n = src->n_outs ? src->n_outs : 1;
  if (r.tensor >= n) {
    kr_layer_error(m, l, "input %d is output %d of layer '%s', which returns %d tensor%s", j, r.tensor,
                   r.layer->name, n, n == 1 ? "" : "s");
    return NULL;
  }
  return r.tensor ? src->outs[r.tensor] : src->out;
}

/* Lowers the calls whose inputs are ready, in config order, until none is
 * left or none progresses (a cycle, or an input of a broken layer). */
static bool lower_calls(kr_model *m) {
  bool progress = true;
  int left = 1;
  while (progress && left) {
    progress = false, left = 0;
    for (int i = 0; i < m->n_layers; i++) {
      kr_layer *l = &m->layers[i];
      for (int k = 0; k < l->n_calls; k++) {
        kr_call *c = &l->calls[k];
        if (c->done || c->broken) continue;
        bool ready = true, broken = false;
        ir_node *in[KR_MAX_CALL_INPUTS];
        for (int j = 0; j < c->n_in; j++) {
          if (!c->in[j].layer) continue; /* a number, below */
          kr_call *src = &c->in[j].layer->calls[c->in[j].node];
          ready &= src->done;
          broken |= src->broken;
          in[j] = src->out;
        }
        if (broken) { c->broken = true; progress = true; continue; }
        if (!ready) { left++; continue; }
        progress = true;
        for (int j = 0; j < c->n_in; j++)
          if (c->in[j].layer && !(in[j] = call_output(m, l, j, c->in[j]))) broken = true;
        if (broken) { c->broken = true; continue; }
        for (int j = 0; j < c->n_in; j++)
          if (!c->in[j].layer) { /* an op node's number: a [] literal */
            const char *nm = k ? arena_printf(m->arena, "%s.call%d.operand%d", l->ir_name, k, j)
                               : arena_printf(m->arena, "%s.operand%d", l->ir_name, j);
            in[j] = ir_node_new(m->g, IR_OP_LITERAL, &(ir_type){DT_F32, 0, {0}}, NULL, 0, nm, kr_loc(m));
            in[j]->attr.value = c->in[j].number;
            ir_graph_append(m->g, kr_stamp(m, l, in[j]));
          }
        if (!(l->nested ? nested_lower(m, l, k, in, c->n_in) : kr_layer_lower(m, l, k, in, c->n_in)))
          c->broken = true;
        else c->done = true;
      }
    }
  }
  if (left && diag_error_count(m->d) == m->errors0) {
    kr_error(m, "config.json: the layers' calls form a cycle or use a call that does not exist");
    return false;
  }
  return diag_error_count(m->d) == m->errors0;
}

static bool add_output(kr_model *m, kr_ref r, hmap *seen) {
  kr_call *c = &r.layer->calls[r.node];
  if (!c->done) return false;
  int n_outs = c->n_outs ? c->n_outs : 1;
  if (r.tensor >= n_outs) {
    kr_error(m, "config.json: output_layers names output %d of layer '%s', which returns %d tensor%s", r.tensor,
             r.layer->name, n_outs, n_outs == 1 ? "" : "s");
    return false;
  }
  if (m->parent) { /* a model used as a layer: its one output is its call's */
    if (m->result) {
      kr_error(m, "config.json: a nested model '%s' has more than one output (castor lowers models of "
               "one output as layers)", m->ir_prefix);
      return false;
    }
    m->result = r.tensor ? c->outs[r.tensor] : c->out;
    return true;
  }
  const char *name = r.node ? arena_printf(m->arena, "%s_%d", r.layer->ir_name, r.node) : r.layer->ir_name;
  if (r.tensor) name = arena_printf(m->arena, "%s_out%d", name, r.tensor);
  if (c->mask && r.tensor < c->n_mask_outs && !m->masked_output) m->masked_output = name, m->masked_from = c->mask_from;
  if (hmap_get_str(seen, name, strlen(name))) {
    kr_error(m, "config.json: output '%s' is listed twice", name);
    return false;
  }
  hmap_put_str(seen, name, strlen(name), (void *)1);
  ir_graph_add_output(m->g, name, r.tensor ? c->outs[r.tensor] : c->out);
  return true;
}

/* input_layers / output_layers: a list of refs, or one ref. */
static bool read_refs(kr_model *m, const json_value *cfg, const char *key, kr_ref *out, int *n, int max) {
  const json_value *v = json_field(cfg, key);
  *n = 0;
  if (!v || v->kind != JSON_ARR || v->n == 0) {
    kr_error(m, "config.json: the Functional model has no %s", key);
    return false;
  }
  bool one = v->items[0].kind == JSON_STR;
  int cnt = one ? 1 : v->n;
  if (cnt > max) {
    kr_error(m, "config.json: %s lists %d tensors, more than %d", key, cnt, max);
    return false;
  }
  for (int i = 0; i < cnt; i++) {
    const char *where = arena_printf(m->arena, "%s[%d]", key, i);
    if (!read_ref(m, one ? v : &v->items[i], where, &out[i])) return false;
  }
  *n = cnt;
  return true;
}

static bool build_model(kr_model *m, const json_value *top) {
  const json_value *cls = json_field(top, "class_name"), *cfg = json_field(top, "config");
  if (!cls || cls->kind != JSON_STR || !cfg || cfg->kind != JSON_OBJ) {
    kr_error(m, "config.json: not a Keras model config (no class_name and config at its top)");
    return false;
  }
  m->cls = cls->s;
  bool functional = !strcmp(m->cls, "Functional") || !strcmp(m->cls, "Model");
  if (!functional && strcmp(m->cls, "Sequential") != 0) {
    kr_unsupported(m, "config.json: model class '%s' is not supported (castor reads Sequential and "
                "Functional models; a subclassed model has no config castor can lower)", m->cls);
    return false;
  }
  if (!read_layers(m, cfg, functional) || !infer_policy(m, cfg)) return false;
  for (int i = 0; i < m->n_layers; i++)
    if (m->layers[i].row >= 0 && !kr_layer_check(m, &m->layers[i])) return false;
  hmap seen;
  hmap_init(&seen, HMAP_STRINGS);
  bool ok = true;
  if (!functional) {
    /* a chain; without an InputLayer, the model's build input shape */
    kr_layer *prev = NULL;
    for (int i = 0; i < m->n_layers && ok; i++) {
      kr_layer *l = &m->layers[i];
      if (!strcmp(l->cls, "InputLayer")) {
        if (i != 0) {
          kr_layer_error(m, l, "an InputLayer after the first layer of a Sequential model");
          ok = false;
        } else ok = lower_input(m, l);
      } else if (!prev) {
        kr_error(m, "config.json: the Sequential model has no InputLayer (build it with "
              "keras.Input(shape) first, then save)");
        ok = false;
      } else {
        l->calls[0].in[0] = (kr_ref){.layer = prev};
        l->calls[0].n_in = 1;
      }
      prev = l;
    }
    if (ok && m->n_layers == 0) {
      kr_error(m, "config.json: the Sequential model has no layers");
      ok = false;
    }
    ok = ok && lower_calls(m) && add_output(m, (kr_ref){.layer = &m->layers[m->n_layers - 1]}, &seen);
  } else {
    kr_ref ins[64], outs[64];
    int n_in = 0, n_out = 0;
    for (int i = 0; i < m->n_layers && ok; i++) {
      kr_layer *l = &m->layers[i];
      if (!strcmp(l->cls, "InputLayer")) continue;
      const json_value *spec = &json_field(cfg, "layers")->items[i];
      ok = read_calls(m, l, spec);
    }
    ok = ok && read_refs(m, cfg, "input_layers", ins, &n_in, 64) &&
         read_refs(m, cfg, "output_layers", outs, &n_out, 64);
    for (int i = 0; ok && i < n_in; i++) {
      if (strcmp(ins[i].layer->cls, "InputLayer") != 0) {
        kr_error(m, "config.json: input_layers[%d] names '%s', which is not an InputLayer", i, ins[i].layer->name);
        ok = false;
      }
    }
    /* inputs get their index in input_layers' order */
    for (int i = 0; ok && i < n_in; i++) ok = ins[i].layer->calls[0].done || lower_input(m, ins[i].layer);
    for (int i = 0; ok && i < m->n_layers; i++)
      if (!strcmp(m->layers[i].cls, "InputLayer") && !m->layers[i].calls[0].done) {
        kr_error(m, "config.json: InputLayer '%s' is not one of the model's input_layers", m->layers[i].name);
        ok = false;
      }
    ok = ok && lower_calls(m);
    for (int i = 0; ok && i < n_out; i++) ok = add_output(m, outs[i], &seen);
  }
  hmap_fini(&seen);
  return ok && diag_error_count(m->d) == m->errors0;
}

/* ---- the archive ---- */

static unsigned char *member(kr_model *m, const zip_archive *z, const char *name, uint64_t max,
                             size_t *len) {
  const zip_member *zm = zip_find(z, name);
  if (!zm) {
    kr_error(m, "the archive has no %s (a Keras 3 .keras file holds config.json, metadata.json and "
          "model.weights.h5)", name);
    return NULL;
  }
  unsigned char *out;
  zip_error ze;
  if (!zip_read(z, zm, max, &out, len, &ze)) {
    kr_error(m, "corrupt archive: at byte %llu: %s", (unsigned long long)ze.off, ze.msg);
    return NULL;
  }
  return out;
}

static const json_value *parse_json(kr_model *m, const char *doc, const unsigned char *text, size_t len) {
  json_value *v = arena_alloc(m->arena, sizeof *v);
  json_error je;
  json_parse_options o = {.doc_name = doc, .require_object = true};
  if (!json_parse((const char *)text, len, &o, m->arena, v, &je)) {
    kr_error(m, "%s is not valid JSON: at byte %llu: %s", doc, (unsigned long long)je.off, je.msg);
    return NULL;
  }
  return v;
}

static bool check_version(kr_model *m, const json_value *meta) {
  const json_value *v = json_field(meta, "keras_version");
  if (!v || v->kind != JSON_STR) {
    kr_error(m, "metadata.json has no keras_version");
    return false;
  }
  if (v->s[0] != '3' || (v->s[1] != '.' && v->s[1] != 0)) {
    kr_unsupported(m, "written by Keras %s; castor reads files of Keras 3 (load the model in Keras 3 "
                "and save it again: model.save(\"model.keras\"))", v->s);
    return false;
  }
  return true;
}

ir_graph *fe_keras_load(const char *file, const char *bytes, size_t len, const fe_options *o,
                        diag_sink *d, fe_train_defaults *out_defaults) {
  kr_model m = {.file = diag_intern(d, file), .d = d, .errors0 = diag_error_count(d), .arena = arena_create()};
  *out_defaults = (fe_train_defaults){0};
  zip_archive z = {0};
  zip_error ze;
  unsigned char *cfg_text = NULL, *meta_text = NULL, *h5 = NULL;
  size_t cfg_len = 0, meta_len = 0, h5_len = 0;
  bool ok = true;
  if (o->weights_path) {
    kr_unsupported(&m, "a weights file for a .keras model is not supported: the archive holds its "
                "weights ('%s' given)", o->weights_path);
    ok = false;
  }
  if (ok && !zip_open(&z, bytes, len, &ze)) {
    kr_error(&m, "not a valid .keras archive: at byte %llu: %s", (unsigned long long)ze.off, ze.msg);
    ok = false;
  } else if (ok && z.n_members == 0) {
    kr_error(&m, "not a valid .keras archive: an empty ZIP archive (a .keras file holds config.json, "
             "metadata.json and model.weights.h5)");
    ok = false;
  }
  const json_value *meta = NULL, *cfg = NULL;
  ok = ok && (meta_text = member(&m, &z, "metadata.json", KR_MAX_JSON_BYTES, &meta_len)) &&
       (meta = parse_json(&m, "metadata.json", meta_text, meta_len)) && check_version(&m, meta) &&
       (cfg_text = member(&m, &z, "config.json", KR_MAX_JSON_BYTES, &cfg_len)) &&
       (cfg = parse_json(&m, "config.json", cfg_text, cfg_len)) &&
       (h5 = member(&m, &z, "model.weights.h5", (uint64_t)FE_MAX_KERAS_BYTES, &h5_len));
  if (ok) {
    h5_error he;
    if (!h5_open(&m.h5, h5, h5_len, &he)) {
      kr_error(&m, "model.weights.h5: at byte %llu: %s", (unsigned long long)he.off, he.msg);
      ok = false;
    } else {
      m.have_h5 = true;
      m.h5_used = xcalloc((size_t)m.h5.n_objects + 1, 1);
    }
  }
  const json_value *name = cfg ? json_field(cfg, "config") : NULL;
  name = name && name->kind == JSON_OBJ ? json_field(name, "name") : NULL;
  m.g = ir_graph_create(name && name->kind == JSON_STR ? ir_name(m.arena, name->s) : "model");
  ok = ok && build_model(&m, cfg) && kr_read_compile(&m, json_field(cfg, "compile_config"), out_defaults);
  if (ok && m.masked_output)
    snprintf(out_defaults->masked_output, sizeof out_defaults->masked_output, "output '%s' carries the mask of "
             "layer '%s'", m.masked_output, m.masked_from);
  if (ok) {
    m.g->policy = m.policy;
    report_unused(&m);
  }
  if (ok && o->keras_source && diag_error_count(d) == m.errors0) {
    const json_value *ver = json_field(meta, "keras_version");
    *o->keras_source = kr_source_new(&m, ver->s, !strcmp(out_defaults->loss_scale, "dynamic"), &cfg_text, cfg_len, &h5);
    m.have_h5 = false; /* the source owns it now */
  }
  if (m.have_h5) h5_fini(&m.h5);
  vec_free(&m.bound);
  free(m.h5_used);
  free(cfg_text), free(meta_text), free(h5);
  zip_fini(&z);
  arena_destroy(m.arena);
  if (!ok || diag_error_count(d) > m.errors0) {
    ir_graph_destroy(m.g);
    *out_defaults = (fe_train_defaults){0};
    return NULL;
  }
  return m.g;
}
