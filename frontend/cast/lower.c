/* SPDX-License-Identifier: Apache-2.0 */
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
 *   reshape / flatten NAME     %NAME = reshape {shape=[N, ...]}
 *   permute NAME               %NAME = transpose {perm=[0, dims...]}
 *   concatenate NAME           %NAME = concat {axis}
 *   embedding NAME             %NAME.embeddings (const), %NAME = gather {axis=0}
 *   batch_normalization NAME   %NAME.gamma, .beta, .moving_mean, .moving_variance
 *                              (consts; [] literals without scale/center),
 *                              %NAME = batch_norm {epsilon, momentum}
 *
 * Out: every float is f32; every activation's first dimension is N; every
 * node carries its layer's name as note, the layer's dtype= as policy and
 * the location of the layer call. Anything the graph keeps is copied into
 * its arena; the parse arena is freed when the load ends.
 */
#include "frontend/cast/internal.h"

#include <errno.h>
#include <math.h>
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

static const char *type_str(lowering *lw, const ir_type *t) {
  str_buf b;
  str_buf_init(&b);
  ir_type_print(t, &b);
  const char *s = arena_strdup(lw->m->arena, str_buf_cstr(&b));
  str_buf_fini(&b);
  return s;
}

/* for host.c and the lowerings below */
const char *fe_type_str(lowering *lw, const ir_type *t) { return type_str(lw, t); }

/* Stamps a node with what it keeps of its layer. */
ir_node *fe_stamp(lowering *lw, fe_layer *l, ir_node *n) {
  n->note = arena_strdup(lw->g->arena, l->name);
  n->layer = n->note;
  n->policy = l->policy;
  return n;
}

static ir_node *stamp(lowering *lw, fe_layer *l, ir_node *n) {
  n->note = arena_strdup(lw->g->arena, l->name);
  n->layer = n->note;
  n->policy = l->policy;
  return n;
}









static bool lower_input(lowering *lw, fe_layer *l, ir_node **in) {
  (void)in;
  ir_type t = {l->int32_input ? DT_I32 : DT_F32, l->rank, {0}};
  memcpy(t.dims, l->shape, sizeof t.dims);
  l->value = stamp(lw, l, ir_build_input(lw->g, l->var, &t, l->input_index, l->loc));
  return true;
}


/* ---- general tensors: layout layers ---- */








/* ---- general tensors: dropout ---- */


/* ---- convolutional networks ---- */

/* Keras's padding along one dimension: 'valid' none; 'same' the total
 * that keeps ceil(in / stride) outputs, the odd one at the end (TF). */
static void keras_pads(bool same, int64_t in, int64_t k, int64_t stride, int64_t dilation, int64_t *p0, int64_t *p1) {
  *p0 = *p1 = 0;
  if (!same) return;
  int64_t out = (in + stride - 1) / stride, total = (out - 1) * stride + dilation * (k - 1) + 1 - in;
  if (total > 0) *p0 = total / 2, *p1 = total - total / 2;
}


/* An op's type, or its shape rule's complaint at the layer. */
static bool check_op(lowering *lw, fe_layer *l, ir_op op, ir_node **srcs, int n, const ir_attr *a) {
  ir_type t;
  char err[256];
  if (ir_infer_type(op, srcs, n, a, &t, err, sizeof err)) return true;
  diag_error(lw->m->d, l->loc, "%s: %s", l->name, err);
  return false;
}

/* The name of one step of a layer that lowers to several nodes: the last
 * one is the layer's value and takes its name, the others NAME.suffix. */
static const char *step_name(lowering *lw, fe_layer *l, const char *suffix, bool last) {
  return last ? l->name : arena_printf(lw->m->arena, "%s.%s", l->name, suffix);
}

/* A convolution of x by the layer's kernel %NAME.<kname> of Keras's shape
 * kt, seen as the HWIO kernel ct [KH, KW, C/groups, O] (a reshape when the
 * two differ: depthwise [KH, KW, C, M], conv1d [K, C, O]): conv2d for one
 * group, else group_conv2d. NULL after reporting. */
static ir_node *conv_node(lowering *lw, fe_layer *l, ir_node *x, const char *kname, const ir_type *kt,
                          const ir_type *ct, const ir_attr *a, const char *name, ir_node **out_bias) {
  fe_model *m = lw->m;
  ir_graph *g = lw->g;
  int64_t bytes;
  if (!ir_type_bytes(kt, 1, &bytes) || bytes > IR_MAX_TENSOR_BYTES) {
    diag_error(m->d, l->filters ? l->filters_loc : l->loc, "the kernel %s would take more than %lld bytes",
               type_str(lw, kt), (long long)IR_MAX_TENSOR_BYTES);
    return NULL;
  }
  ir_op op = ct->dims[2] == x->type.dims[3] ? IR_OP_CONV2D : IR_OP_GROUP_CONV2D;
  ir_node probe_k = {.type = *ct};
  if (!check_op(lw, l, op, (ir_node *[]){x, &probe_k}, 2, a)) return NULL;
  const char *kkey = arena_printf(m->arena, "%s.%s", l->name, kname);
  const float *kdata = NULL;
  if (!fe_weights_get(&lw->w, g, kkey, kt, false, l->name, l->loc, &kdata)) return NULL;
  ir_node *k = stamp(lw, l, ir_build_const(g, kkey, kt, kkey, kdata, l->loc));
  if (out_bias && l->use_bias) { /* %NAME.bias [O], after the kernel as dense's */
    const char *bkey = arena_printf(m->arena, "%s.bias", l->name);
    ir_type bt = {DT_F32, 1, {ct->dims[3]}};
    const float *bdata = NULL;
    if (!fe_weights_get(&lw->w, g, bkey, &bt, false, l->name, l->loc, &bdata)) return NULL;
    *out_bias = stamp(lw, l, ir_build_const(g, bkey, &bt, bkey, bdata, l->loc));
  }
  if (!ir_type_eq(kt, ct)) {
    ir_attr ra = {.shape = {4, {ct->dims[0], ct->dims[1], ct->dims[2], ct->dims[3]}}};
    k = stamp(lw, l, ir_build_op(g, IR_OP_RESHAPE, arena_printf(m->arena, "%s.hwio", kkey), &k, 1, &ra, l->loc));
  }
  return stamp(lw, l, ir_build_op(g, op, name, (ir_node *[]){x, k}, 2, a, l->loc));
}

/* The bias b (NULL: none) and the activation after a convolution y; the
 * last node takes the layer's name unless more follows (then_more). */
static ir_node *bias_act(lowering *lw, fe_layer *l, ir_node *y, ir_node *b, bool then_more) {
  ir_graph *g = lw->g;
  bool has_act = l->act != IR_OP_COUNT;
  if (b) y = stamp(lw, l, ir_build_binary(g, IR_OP_ADD, step_name(lw, l, "bias_add", !has_act && !then_more), y, b, l->loc));
  if (has_act) y = stamp(lw, l, ir_build_unary(g, l->act, step_name(lw, l, "activation", !then_more), y, l->loc));
  return y;
}

/* The attributes of a window of the layer's kernel_size (or pool_size),
 * strides and dilation_rate over x [N, H, W, C] with Keras's padding. */
static ir_attr window_attr(const fe_layer *l, const ir_node *x, const int64_t k[2], bool dilate) {
  ir_attr a = {.acc = DT_F32, .strides = {2, {l->strides[0], l->strides[1]}},
               .dilations = {2, {dilate ? l->dilation[0] : 1, dilate ? l->dilation[1] : 1}}, .pads = {4, {0}}};
  keras_pads(l->same, x->type.dims[1], k[0], l->strides[0], a.dilations.v[0], &a.pads.v[0], &a.pads.v[1]);
  keras_pads(l->same, x->type.dims[2], k[1], l->strides[1], a.dilations.v[1], &a.pads.v[2], &a.pads.v[3]);
  if (l->causal) a.pads.v[2] = a.dilations.v[1] * (k[1] - 1); /* conv1d 'causal': all on the left */
  return a;
}




/* ---- convolutional networks: depthwise and separable convolution, global
 * pooling, zero padding, the 1D layers ---- */



/* A [N, L, C] input seen as the image [N, 1, L, C] (the 1D layers), or an error. */
static ir_node *as_image_1d(lowering *lw, fe_layer *l, ir_node *x) {
  if (x->type.rank != 3 || !ir_type_is_batched(&x->type)) {
    diag_error(lw->m->d, l->inputs[0].loc, "%s needs an input [N, steps, channels], got %s",
               fe_layer_kind_name(l->kind), type_str(lw, &x->type));
    return NULL;
  }
  ir_attr ra = {.shape = {4, {IR_DIM_BATCH, 1, x->type.dims[1], x->type.dims[2]}}};
  return stamp(lw, l, ir_build_op(lw->g, IR_OP_RESHAPE, step_name(lw, l, "image", false), &x, 1, &ra, l->loc));
}

/* An image [N, 1, L', C'] back to the 1D layer's [N, L', C'], named as the layer. */
static ir_node *from_image_1d(lowering *lw, fe_layer *l, ir_node *y) {
  ir_attr ra = {.shape = {3, {IR_DIM_BATCH, y->type.dims[2], y->type.dims[3]}}};
  return stamp(lw, l, ir_build_op(lw->g, IR_OP_RESHAPE, l->name, &y, 1, &ra, l->loc));
}

/* Keras Conv1D: %NAME.kernel [K, C/groups, filters], %NAME.bias; the 2D
 * convolution of the input as a one-row image by the kernel as [1, K, ...];
 * padding 'causal' pads dilation*(K-1) zeros on the left. */
static bool lower_conv1d(lowering *lw, fe_layer *l, ir_node **in) {
  ir_node *x = as_image_1d(lw, l, in[0]);
  if (!x) return false;
  int64_t C = x->type.dims[3];
  if (C % l->groups || l->filters % l->groups) {
    diag_error(lw->m->d, l->groups_loc, "groups=%lld must divide the input's %lld channels and the %lld filters",
               (long long)l->groups, (long long)C, (long long)l->filters);
    return false;
  }
  ir_type kt = {DT_F32, 3, {l->kernel[1], C / l->groups, l->filters}};
  ir_type ct = {DT_F32, 4, {1, l->kernel[1], C / l->groups, l->filters}};
  ir_attr a = window_attr(l, x, l->kernel, true);
  ir_node *b = NULL, *y = conv_node(lw, l, x, "kernel", &kt, &ct, &a, step_name(lw, l, "conv", false), &b);
  if (!y || !(y = bias_act(lw, l, y, b, true))) return false;
  l->value = from_image_1d(lw, l, y);
  return true;
}

/* Keras MaxPooling1D / AveragePooling1D: the 2D pooling of a one-row image. */
static bool lower_pool1d(lowering *lw, fe_layer *l, ir_node **in) {
  ir_node *x = as_image_1d(lw, l, in[0]);
  if (!x) return false;
  ir_op op = l->kind == FE_LAYER_MAX_POOLING1D ? IR_OP_MAX_POOL2D : IR_OP_AVG_POOL2D;
  ir_attr a = window_attr(l, x, l->pool, false);
  a = (ir_attr){.pool = {2, {l->pool[0], l->pool[1]}}, .strides = a.strides, .pads = a.pads};
  if (!check_op(lw, l, op, &x, 1, &a)) return false;
  ir_node *y = stamp(lw, l, ir_build_op(lw->g, op, step_name(lw, l, "pool", false), &x, 1, &a, l->loc));
  l->value = from_image_1d(lw, l, y);
  return true;
}



/* KerasHub PositionEmbedding(sequence_length) (the layer library has no row
 * for it yet): %NAME.embeddings [sequence_length, D] (Glorot-uniform), its
 * first T rows broadcast to x [N, T, D] (x's values unused): %NAME =
 * select(1, rows, x), an exact broadcast whose gradient sums over N. */
bool fe_lower_position_embedding(lowering *lw, fe_layer *l, ir_node **in) {
  ir_node *x = in[0];
  fe_model *m = lw->m;
  ir_graph *g = lw->g;
  if (x->type.rank != 3 || !ir_type_is_batched(&x->type)) {
    diag_error(m->d, l->inputs[0].loc, "position_embedding needs an input [N, steps, features], got %s",
               fe_type_str(lw, &x->type));
    return false;
  }
  int64_t T = x->type.dims[1], D = x->type.dims[2];
  if (!l->sequence_length || l->sequence_length < T) {
    diag_error(m->d, l->loc, "position_embedding needs sequence_length= of at least the input's %lld steps (%s)",
               (long long)T, fe_type_str(lw, &x->type));
    return false;
  }
  ir_type t = {DT_F32, 2, {l->sequence_length, D}};
  int64_t bytes;
  if (!ir_type_bytes(&t, 1, &bytes) || bytes > IR_MAX_TENSOR_BYTES) {
    diag_error(m->d, l->loc, "%s: the embeddings %s would take more than %lld bytes", l->name, fe_type_str(lw, &t),
               (long long)IR_MAX_TENSOR_BYTES);
    return false;
  }
  const char *key = arena_printf(m->arena, "%s.embeddings", l->name);
  const float *data = NULL;
  if (!fe_weights_get(&lw->w, g, key, &t, false, l->name, l->loc, &data)) return false;
  ir_node *e = fe_stamp(lw, l, ir_build_const(g, key, &t, key, data, l->loc));
  if (T < l->sequence_length) { /* KerasHub: position_embeddings[:T] */
    ir_attr sa = {.starts = {2, {0, 0}}, .ends = {2, {T, D}}, .steps = {2, {1, 1}}};
    e = fe_stamp(lw, l, ir_build_op(g, IR_OP_STRIDED_SLICE, arena_printf(m->arena, "%s.rows", l->name), &e, 1, &sa,
                                    l->loc));
  }
  ir_node *one = ir_node_new(g, IR_OP_LITERAL, &(ir_type){DT_F32, 0, {0}}, NULL, 0,
                             arena_printf(m->arena, "%s.always", l->name), l->loc);
  one->attr.value = 1;
  ir_graph_append(g, fe_stamp(lw, l, one));
  l->value = fe_stamp(lw, l, ir_build_op(g, IR_OP_SELECT, l->name, (ir_node *[]){one, e, x}, 3, &(ir_attr){0}, l->loc));
  return true;
}

/* The lowering of each layer kind, from layers.def. */
typedef bool (*lower_fn)(lowering *lw, fe_layer *l, ir_node **in);
static const lower_fn lowerers[FE_LAYER_COUNT] = {
#define LAYER(e, name, n_inputs, positional, keras, lower, ...) [FE_LAYER_##e] = lower,
#include "frontend/cast/layers.def"
#undef LAYER
};
/* The Keras class of each layer the library lowers (host.c), or NULL. */
static const char *const keras_classes[FE_LAYER_COUNT] = {
#define LAYER(e, name, n_inputs, positional, keras, ...) [FE_LAYER_##e] = keras,
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
    /* int32 values (input(..., dtype=int32)) are indices: only an embedding takes them */
    if (l->kind != FE_LAYER_EMBEDDING && !dtype_is_float(in[k]->type.dtype)) {
      diag_error(lw->m->d, l->inputs[k].loc, "%s needs float values, and '%s' is %s (an int32 input holds indices for an embedding)",
                 l->kind_name, l->inputs[k].var, type_str(lw, &in[k]->type));
      return;
    }
  }
  const char *cls = l->kind == FE_LAYER_LIBRARY ? fl_row_class(l->lib_row) : keras_classes[l->kind];
  if (cls) {
    l->lowered = fe_lower_library(lw, l, cls, in);
    return;
  }
  const fe_layer *pl = l->n_inputs ? l->inputs[0].def : NULL;
  if (pl && pl->mask) /* a layer of .cast's own: none takes a mask */
    diag_warning(lw->m->d, l->loc, "%s does not support masking: the mask of layer '%s' stops here, as Keras 3 "
                 "destroys it", l->kind_name, pl->mask_from);
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
  fe_host_init(&lw);
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
