/*
 * lower.c: the last stage of the .cast frontend, and its entry point
 * (fe_cast_load, cast.h; the seam frontend/fe_load.c reads the file). Drives
 * lexer -> parser -> layers -> resolve, then lowers the layers in
 * topological order into an ir_graph:
 *
 *   input  x                   %x = input {index}
 *   dense  NAME                %NAME.kernel, %NAME.bias (consts, right before
 *                              their use), %NAME.matmul {acc=f32},
 *                              %NAME.bias_add, then the activation; the last
 *                              node of the layer is renamed %NAME
 *   activation NAME            %NAME (linear forwards its input)
 *   add / multiply NAME        %NAME
 *   layer_normalization NAME   %NAME.gamma, %NAME.beta (consts), %NAME =
 *                              layer_norm {axis=-1, epsilon=0.001}
 *
 * Out: every float is f32; every activation's first dimension is N; every
 * node carries its layer's name as note, the layer's dtype= as policy and
 * the location of the layer call. Anything the graph keeps is copied into
 * its arena; the parse arena is freed when the load ends.
 */
#include "frontend/cast/internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

void fe_model_init(fe_model *m, const char *file, diag_sink *d) {
  *m = (fe_model){.arena = arena_create(), .d = d, .errors0 = diag_error_count(d), .file = file,
                  .policy = IR_POLICY_FLOAT32};
}

void fe_model_fini(fe_model *m) {
  vec_free(&m->layers);
  vec_free(&m->outputs);
  vec_free(&m->order);
  arena_destroy(m->arena);
}

bool fe_error_limit(fe_model *m) {
  if (!m->stopped && diag_error_count(m->d) - m->errors0 >= FE_MAX_ERRORS) {
    m->stopped = true;
    diag_error(m->d, (diag_loc){0}, "too many errors in '%s'; stopping", m->file);
  }
  return m->stopped;
}

typedef struct lowering {
  fe_model *m;
  ir_graph *g;
  fe_weights w;
} lowering;

static const char *type_str(lowering *lw, const ir_type *t) {
  str_buf b;
  str_buf_init(&b);
  ir_type_print(t, &b);
  const char *s = arena_strdup(lw->m->arena, str_buf_cstr(&b));
  str_buf_fini(&b);
  return s;
}

/* Stamps a node with what it keeps of its layer. */
static ir_node *stamp(lowering *lw, fe_layer *l, ir_node *n) {
  n->note = arena_strdup(lw->g->arena, l->name);
  n->layer = n->note;
  n->policy = l->policy;
  return n;
}

static bool lower_dense(lowering *lw, fe_layer *l, ir_node **in) {
  ir_node *x = in[0];
  fe_model *m = lw->m;
  ir_graph *g = lw->g;
  if (x->type.rank != 2) {
    diag_error(m->d, l->inputs[0].loc, "dense needs a rank-2 input [N, features], got %s",
               type_str(lw, &x->type));
    return false;
  }
  ir_type kt = {DT_F32, 2, {x->type.dims[1], l->units}};
  ir_type bt = {DT_F32, 1, {l->units}};
  int64_t bytes;
  if (!ir_type_bytes(&kt, 1, &bytes) || bytes > IR_MAX_TENSOR_BYTES) {
    diag_error(m->d, l->units_loc,
               "units=%lld is too large: the kernel %s would take more than %lld bytes",
               (long long)l->units, type_str(lw, &kt), (long long)IR_MAX_TENSOR_BYTES);
    return false;
  }
  const char *kkey = arena_printf(m->arena, "%s.kernel", l->name);
  const char *bkey = arena_printf(m->arena, "%s.bias", l->name);
  const float *kdata = NULL, *bdata = NULL;
  bool ok = fe_weights_get(&lw->w, g, kkey, &kt, false, l->name, l->loc, &kdata);
  if (l->use_bias) ok &= fe_weights_get(&lw->w, g, bkey, &bt, false, l->name, l->loc, &bdata);
  if (!ok) return false;

  bool has_act = l->act != IR_OP_COUNT;
  const char *mm_name = has_act || l->use_bias ? arena_printf(m->arena, "%s.matmul", l->name)
                                               : l->name;
  const char *add_name = has_act ? arena_printf(m->arena, "%s.bias_add", l->name) : l->name;
  ir_node *k = stamp(lw, l, ir_build_const(g, kkey, &kt, kkey, kdata, l->loc));
  ir_node *b = l->use_bias ? stamp(lw, l, ir_build_const(g, bkey, &bt, bkey, bdata, l->loc)) : NULL;
  ir_node *y = stamp(lw, l, ir_build_matmul(g, mm_name, x, k, DT_F32, l->loc));
  if (b) y = stamp(lw, l, ir_build_binary(g, IR_OP_ADD, add_name, y, b, l->loc));
  if (has_act) y = stamp(lw, l, ir_build_unary(g, l->act, l->name, y, l->loc));
  l->value = y;
  return true;
}

/* Keras LayerNormalization with its defaults: over the last axis, epsilon
 * 1e-3, gamma (ones) and beta (zeros) over that axis. */
static bool lower_layer_norm(lowering *lw, fe_layer *l, ir_node **in) {
  ir_node *x = in[0];
  fe_model *m = lw->m;
  ir_graph *g = lw->g;
  ir_type pt = {DT_F32, 1, {x->type.dims[x->type.rank - 1]}};
  const char *gkey = arena_printf(m->arena, "%s.gamma", l->name);
  const char *bkey = arena_printf(m->arena, "%s.beta", l->name);
  const float *gdata = NULL, *bdata = NULL;
  bool ok = fe_weights_get(&lw->w, g, gkey, &pt, true, l->name, l->loc, &gdata);
  ok &= fe_weights_get(&lw->w, g, bkey, &pt, false, l->name, l->loc, &bdata);
  if (!ok) return false;
  ir_node *gamma = stamp(lw, l, ir_build_const(g, gkey, &pt, gkey, gdata, l->loc));
  ir_node *beta = stamp(lw, l, ir_build_const(g, bkey, &pt, bkey, bdata, l->loc));
  ir_attr attr = {.axis = -1, .epsilon = 1e-3};
  l->value = stamp(lw, l, ir_build_op(g, IR_OP_LAYER_NORM, l->name, (ir_node *[]){x, gamma, beta}, 3, &attr, l->loc));
  return true;
}

static bool lower_binary(lowering *lw, fe_layer *l, ir_op op, ir_node *a, ir_node *b) {
  ir_node *srcs[2] = {a, b};
  ir_attr attr = {0};
  ir_type t;
  char err[256];
  if (!ir_infer_type(op, srcs, 2, &attr, &t, err, sizeof err)) {
    diag_error(lw->m->d, l->loc, "%s", err);
    return false;
  }
  if (!ir_type_eq(&a->type, &b->type)) { /* the IR broadcasts a bias; the language does not */
    diag_error(lw->m->d, l->loc, "%s operand shapes differ: %s and %s", ir_op_name(op),
               type_str(lw, &a->type), type_str(lw, &b->type));
    return false;
  }
  l->value = stamp(lw, l, ir_build_binary(lw->g, op, l->name, a, b, l->loc));
  return true;
}

static bool lower_add(lowering *lw, fe_layer *l, ir_node **in) {
  return lower_binary(lw, l, IR_OP_ADD, in[0], in[1]);
}

static bool lower_multiply(lowering *lw, fe_layer *l, ir_node **in) {
  return lower_binary(lw, l, IR_OP_MUL, in[0], in[1]);
}

/* general tensors: Keras's Subtract, Maximum, Minimum */
static bool lower_subtract(lowering *lw, fe_layer *l, ir_node **in) {
  return lower_binary(lw, l, IR_OP_SUB, in[0], in[1]);
}

static bool lower_maximum(lowering *lw, fe_layer *l, ir_node **in) {
  return lower_binary(lw, l, IR_OP_MAXIMUM, in[0], in[1]);
}

static bool lower_minimum(lowering *lw, fe_layer *l, ir_node **in) {
  return lower_binary(lw, l, IR_OP_MINIMUM, in[0], in[1]);
}

static bool lower_input(lowering *lw, fe_layer *l, ir_node **in) {
  (void)in;
  ir_type t = {DT_F32, l->rank, {0}};
  memcpy(t.dims, l->shape, sizeof t.dims);
  l->value = stamp(lw, l, ir_build_input(lw->g, l->var, &t, l->input_index, l->loc));
  return true;
}

/* `linear` forwards its input. */
static bool lower_activation(lowering *lw, fe_layer *l, ir_node **in) {
  if (l->act == IR_OP_COUNT) l->value = in[0];
  else l->value = stamp(lw, l, ir_build_unary(lw->g, l->act, l->name, in[0], l->loc));
  return true;
}

/* The lowering of each layer kind, from layers.def. */
typedef bool (*lower_fn)(lowering *lw, fe_layer *l, ir_node **in);
static const lower_fn lowerers[FE_LAYER_COUNT] = {
#define LAYER(e, name, n_inputs, positional, lower, ...) [FE_LAYER_##e] = lower,
#include "frontend/cast/layers.def"
#undef LAYER
};

static void lower_layer(lowering *lw, fe_layer *l) {
  if (l->broken || l->kind == FE_LAYER_COUNT) return;
  ir_node *in[IR_MAX_SRCS] = {NULL};
  for (int k = 0; k < l->n_inputs; k++) {
    fe_layer *def = l->inputs[k].def;
    if (!def || !def->lowered) return; /* its error is reported already */
    in[k] = def->value;
  }
  l->lowered = lowerers[l->kind](lw, l, in);
}

/* The weights file: the option wins; a model's path is relative to the
 * model file's directory. */
static const char *weights_path(fe_model *m, const fe_options *o, diag_loc *out_loc) {
  *out_loc = (diag_loc){0};
  if (o->weights_path) return o->weights_path;
  if (!m->weights) return NULL;
  *out_loc = m->weights_loc;
  const char *slash = strrchr(m->file, '/');
  if (m->weights[0] == '/' || !slash) return m->weights;
  return arena_printf(m->arena, "%.*s/%s", (int)(slash - m->file), m->file, m->weights);
}

ir_graph *fe_lower(fe_model *m, const fe_options *o) {
  lowering lw = {.m = m, .g = ir_graph_create(m->name ? m->name : "model")};
  lw.g->policy = m->policy;
  diag_loc wloc;
  const char *wpath = weights_path(m, o, &wloc);
  fe_weights_open(&lw.w, wpath, wloc, o->seed, m->errors0, m->d);
  lw.w.max_init_bytes = o->max_init_bytes > 0 ? o->max_init_bytes : FE_MAX_INIT_BYTES;

  int n_inputs = 0;
  for (size_t i = 0; i < m->layers.len; i++) {
    fe_layer *l = m->layers.data[i];
    if (l->kind == FE_LAYER_INPUT && !l->broken) l->input_index = n_inputs++;
  }
  for (size_t i = 0; i < m->order.len && !fe_error_limit(m); i++) lower_layer(&lw, m->order.data[i]);

  hmap seen; /* output name -> its first use */
  hmap_init(&seen, HMAP_STRINGS);
  for (size_t i = 0; i < m->outputs.len && !fe_error_limit(m); i++) {
    fe_use *u = &m->outputs.data[i].use;
    fe_use *first = hmap_get_str(&seen, u->var, strlen(u->var));
    if (first) {
      diag_error(m->d, u->loc, "duplicate output '%s'", u->var);
      diag_note(m->d, first->loc, "the first output '%s' is here", u->var);
      continue;
    }
    hmap_put_str(&seen, u->var, strlen(u->var), u);
    if (u->def && u->def->lowered) ir_graph_add_output(lw.g, u->var, u->def->value);
  }
  hmap_fini(&seen);
  fe_weights_check_unused(&lw.w);
  fe_weights_fini(&lw.w);
  if (diag_error_count(m->d) > m->errors0) {
    ir_graph_destroy(lw.g);
    return NULL;
  }
  return lw.g;
}

ir_graph *fe_cast_load(const char *file, const char *text, size_t len, const fe_options *o,
                       diag_sink *d, fe_train_defaults *out_defaults) {
  diag_sink_add_source(d, file, text, len);
  fe_model m;
  fe_model_init(&m, diag_intern(d, file), d);
  fe_parse(&m, text, len);
  if (!fe_error_limit(&m)) fe_layers_name(&m);
  if (!fe_error_limit(&m)) fe_resolve(&m);
  ir_graph *g = NULL;
  if (m.name && !fe_error_limit(&m)) g = fe_lower(&m, o);
  *out_defaults = m.compile;
  fe_model_fini(&m);
  if (g && diag_error_count(d) > m.errors0) {
    ir_graph_destroy(g);
    g = NULL;
  }
  return g;
}
