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

/* general tensors: for the lowerings in lower_attn.c */
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

static bool lower_dense(lowering *lw, fe_layer *l, ir_node **in) {
  ir_node *x = in[0];
  fe_model *m = lw->m;
  ir_graph *g = lw->g;
  /* general tensors: Keras Dense applies to the last axis of any rank >= 2 */
  if (x->type.rank < 2) {
    diag_error(m->d, l->inputs[0].loc, "dense needs an input of rank >= 2 [N, ..., features], got %s",
               type_str(lw, &x->type));
    return false;
  }
  ir_type kt = {DT_F32, 2, {x->type.dims[x->type.rank - 1], l->units}};
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
  /* general tensors: axis (Keras's, N counting as 0) an int or a list; the
   * IR normalizes over trailing dimensions {axis}.., so the axes must be
   * the last ones, consecutive */
  int rank = x->type.rank, first = rank - 1;
  bool seen[IR_MAX_RANK] = {0}, axes_ok = rank >= 2;
  int n_axes = l->n_ints ? l->n_ints : 1;
  for (int i = 0; axes_ok && i < n_axes; i++) {
    int64_t a = l->n_ints ? l->ints[i] : l->axis;
    a = a < 0 ? a + rank : a;
    axes_ok = a >= 1 && a < rank && !seen[a];
    if (axes_ok) seen[a] = true, first = (int)a < first ? (int)a : first;
  }
  for (int r = first; axes_ok && r < rank; r++) axes_ok = seen[r];
  if (!axes_ok) {
    diag_error(m->d, l->n_ints ? l->ints_loc : l->axis_loc,
               "layer_normalization axis must name the last dimensions of %s (not N), e.g. axis=-1 or axis=[%d, %d]",
               type_str(lw, &x->type), rank - 2 > 0 ? rank - 2 : 1, rank - 1);
    return false;
  }
  ir_type pt = {DT_F32, rank - first, {0}};
  for (int r = first; r < rank; r++) pt.dims[r - first] = x->type.dims[r];
  const char *gkey = arena_printf(m->arena, "%s.gamma", l->name);
  const char *bkey = arena_printf(m->arena, "%s.beta", l->name);
  const float *gdata = NULL, *bdata = NULL;
  bool ok = fe_weights_get(&lw->w, g, gkey, &pt, true, l->name, l->loc, &gdata);
  ok &= fe_weights_get(&lw->w, g, bkey, &pt, false, l->name, l->loc, &bdata);
  if (!ok) return false;
  if (bdata && !lw->w.from_file && pt.rank == 2) /* beta starts at zeros, as Keras's (not a kernel's Glorot) */
    memset((float *)bdata, 0, (size_t)(pt.dims[0] * pt.dims[1]) * sizeof(float));
  ir_node *gamma = stamp(lw, l, ir_build_const(g, gkey, &pt, gkey, gdata, l->loc));
  ir_node *beta = stamp(lw, l, ir_build_const(g, bkey, &pt, bkey, bdata, l->loc));
  ir_attr attr = {.axis = first == rank - 1 ? -1 : first, .epsilon = 1e-3};
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
  ir_type t = {l->int32_input ? DT_I32 : DT_F32, l->rank, {0}};
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

/* ---- general tensors: layout layers ---- */

/* The layout op `op` of the layer, its type checked with the IR's shape
 * rule: an error is reported at the layer call, with the rule's message. */
static bool lower_layout_op(lowering *lw, fe_layer *l, ir_op op, ir_node **in, int n, const ir_attr *attr) {
  ir_type t;
  char err[512];
  if (!ir_infer_type(op, in, n, attr, &t, err, sizeof err)) {
    diag_error(lw->m->d, l->loc, "%s: %s", fe_layer_kind_name(l->kind), err);
    return false;
  }
  l->value = stamp(lw, l, ir_build_op(lw->g, op, l->name, in, n, attr, l->loc));
  return true;
}

/* Keras Reshape(target_shape): the example's elements (all but N) in
 * row-major order; one dimension may be -1, inferred from the rest. */
static bool lower_reshape(lowering *lw, fe_layer *l, ir_node **in) {
  ir_node *x = in[0];
  fe_model *m = lw->m;
  int64_t have = 1, known = 1;
  if (!ir_type_is_batched(&x->type) || !ir_type_inner_numel(&x->type, &have)) {
    diag_error(m->d, l->loc, "reshape needs an input with the batch dimension N, got %s", type_str(lw, &x->type));
    return false;
  }
  int unknown = -1;
  for (int i = 0; i < l->n_ints; i++) {
    int64_t d = l->ints[i];
    if (d == -1 && unknown < 0) unknown = i;
    else if (d < 1) {
      diag_error(m->d, l->ints_loc, "reshape target_shape dimensions must be positive, with at most one -1, got %lld",
                 (long long)d);
      return false;
    } else if (!size_mul_ok(known, d, &known)) {
      known = -1;
      break;
    }
  }
  ir_attr attr = {.shape = {l->n_ints + 1, {IR_DIM_BATCH}}};
  for (int i = 0; i < l->n_ints; i++) attr.shape.dims[i + 1] = l->ints[i];
  if (unknown >= 0 && known > 0 && have % known == 0) attr.shape.dims[unknown + 1] = have / known;
  else if (known != have || unknown >= 0) {
    str_buf b;
    str_buf_init(&b);
    for (int i = 0; i < l->n_ints; i++) str_buf_printf(&b, "%s%lld", i ? ", " : "[", (long long)l->ints[i]);
    str_buf_putc(&b, ']');
    if (known < 0)
      diag_error(m->d, l->ints_loc, "reshape target_shape %s is too large for the input %s", str_buf_cstr(&b),
                 type_str(lw, &x->type));
    else if (unknown >= 0)
      diag_error(m->d, l->ints_loc,
                 "reshape target_shape %s does not fit the input %s: its other dimensions (%lld elements) do not "
                 "divide the %lld elements of an example", str_buf_cstr(&b), type_str(lw, &x->type), (long long)known,
                 (long long)have);
    else
      diag_error(m->d, l->ints_loc, "reshape target_shape %s (%lld elements) does not fit the input %s (%lld elements "
                 "per example)", str_buf_cstr(&b), (long long)known, type_str(lw, &x->type), (long long)have);
    str_buf_fini(&b);
    return false;
  }
  return lower_layout_op(lw, l, IR_OP_RESHAPE, in, 1, &attr);
}

/* Keras Flatten (channels_last): [N, d1, ...] -> [N, d1 * ...]; [N] -> [N, 1]. */
static bool lower_flatten(lowering *lw, fe_layer *l, ir_node **in) {
  int64_t have = 1;
  if (!ir_type_is_batched(&in[0]->type) || !ir_type_inner_numel(&in[0]->type, &have)) {
    diag_error(lw->m->d, l->loc, "flatten needs an input with the batch dimension N, got %s",
               type_str(lw, &in[0]->type));
    return false;
  }
  ir_attr attr = {.shape = {2, {IR_DIM_BATCH, have}}};
  return lower_layout_op(lw, l, IR_OP_RESHAPE, in, 1, &attr);
}

/* Keras Permute(dims): dims is a permutation of 1..rank-1, 1-based over the
 * dimensions after N, which stays first. */
static bool lower_permute(lowering *lw, fe_layer *l, ir_node **in) {
  const ir_type *xt = &in[0]->type;
  bool ok = ir_type_is_batched(xt) && l->n_ints == xt->rank - 1;
  bool seen[IR_MAX_RANK] = {0};
  ir_attr attr = {.perm = {xt->rank, {0}}};
  for (int i = 0; ok && i < l->n_ints; i++) {
    int64_t d = l->ints[i];
    ok = d >= 1 && d < xt->rank && !seen[d];
    if (ok) seen[d] = true, attr.perm.v[i + 1] = d;
  }
  if (!ok) {
    diag_error(lw->m->d, l->ints_loc, "permute dims must be a permutation of 1..%d (1-based, the batch N excluded) "
               "for the input %s", xt->rank - 1, type_str(lw, xt));
    return false;
  }
  return lower_layout_op(lw, l, IR_OP_TRANSPOSE, in, 1, &attr);
}

/* Keras Embedding(input_dim, output_dim): the table NAME.embeddings
 * [input_dim, output_dim], initialized as Keras's default "uniform"
 * (U(-0.05, 0.05)) without a weights file; gather along axis 0 by int32
 * indices. An index outside [0, input_dim) gives a row of zeros (Keras on
 * the CPU raises instead). */
static bool lower_embedding(lowering *lw, fe_layer *l, ir_node **in) {
  ir_node *x = in[0];
  fe_model *m = lw->m;
  ir_graph *g = lw->g;
  if (x->type.dtype != DT_I32) {
    diag_error(m->d, l->inputs[0].loc, "embedding needs int32 indices, got %s (declare the input with dtype=int32)",
               type_str(lw, &x->type));
    return false;
  }
  ir_type et = {DT_F32, 2, {l->input_dim, l->output_dim}};
  int64_t bytes;
  if (!ir_type_bytes(&et, 1, &bytes) || bytes > IR_MAX_TENSOR_BYTES) {
    diag_error(m->d, l->input_dim_loc, "the embeddings %s would take more than %lld bytes", type_str(lw, &et),
               (long long)IR_MAX_TENSOR_BYTES);
    return false;
  }
  const char *key = arena_printf(m->arena, "%s.embeddings", l->name);
  const float *data = NULL;
  if (!fe_weights_get(&lw->w, g, key, &et, false, l->name, l->loc, &data)) return false;
  if (data && !lw->w.from_file) { /* Glorot's U(-limit, limit) rescaled to Keras's U(-0.05, 0.05) */
    float scale = (float)(0.05 / sqrt(6.0 / ((double)l->input_dim + (double)l->output_dim)));
    for (int64_t i = 0; i < l->input_dim * l->output_dim; i++) ((float *)data)[i] *= scale;
  }
  ir_node *tab = stamp(lw, l, ir_build_const(g, key, &et, key, data, l->loc));
  ir_attr attr = {.axis = 0};
  return lower_layout_op(lw, l, IR_OP_GATHER, (ir_node *[]){tab, x}, 2, &attr);
}

/* Keras Softmax(axis=-1): along the last dimension a softmax op; along
 * another (not N), that dimension swapped with the last (a transpose), the
 * softmax, and the swap undone. */
static bool lower_softmax(lowering *lw, fe_layer *l, ir_node **in) {
  ir_node *x = in[0];
  int rank = x->type.rank;
  int64_t a = l->axis < 0 ? l->axis + rank : l->axis;
  if (a < 1 || a >= rank) {
    diag_error(lw->m->d, l->axis_loc, "softmax axis %lld is not a dimension of %s other than the batch N",
               (long long)l->axis, type_str(lw, &x->type));
    return false;
  }
  if (a == rank - 1) {
    l->value = stamp(lw, l, ir_build_unary(lw->g, IR_OP_SOFTMAX, l->name, x, l->loc));
    return true;
  }
  ir_attr swap = {.perm = {rank, {0}}};
  for (int r = 0; r < rank; r++) swap.perm.v[r] = r == a ? rank - 1 : r == rank - 1 ? a : r;
  const char *tn = arena_printf(lw->m->arena, "%s.transpose", l->name), *sn = arena_printf(lw->m->arena, "%s.softmax", l->name);
  ir_node *t = stamp(lw, l, ir_build_op(lw->g, IR_OP_TRANSPOSE, tn, &x, 1, &swap, l->loc));
  ir_node *sm = stamp(lw, l, ir_build_unary(lw->g, IR_OP_SOFTMAX, sn, t, l->loc));
  l->value = stamp(lw, l, ir_build_op(lw->g, IR_OP_TRANSPOSE, l->name, &sm, 1, &swap, l->loc));
  return true;
}

/* Keras Concatenate(axis=-1): axis counts N as dimension 0. */
static bool lower_concatenate(lowering *lw, fe_layer *l, ir_node **in) {
  ir_attr attr = {.axis = l->axis};
  return lower_layout_op(lw, l, IR_OP_CONCAT, in, l->n_inputs, &attr);
}

/* ---- general tensors: dropout ---- */

/* Keras Dropout(rate, seed): dropout(x) in the model graph, the identity
 * when it runs (castor run, evaluation); a training step makes it
 * dropout_train (passes/grad.c). Without seed=, the layer's index in the
 * file, so two dropout layers draw different masks. */
static bool lower_dropout(lowering *lw, fe_layer *l, ir_node **in) {
  ir_attr attr = {.rate = l->rate, .seed = l->seed_given ? l->seed : l->index};
  return lower_layout_op(lw, l, IR_OP_DROPOUT, in, 1, &attr);
}

/* ---- convolutional networks ---- */

/* Keras's padding along one dimension: 'valid' none; 'same' the total
 * that keeps ceil(in / stride) outputs, the odd one at the end (TF). */
static void keras_pads(bool same, int64_t in, int64_t k, int64_t stride, int64_t dilation, int64_t *p0, int64_t *p1) {
  *p0 = *p1 = 0;
  if (!same) return;
  int64_t out = (in + stride - 1) / stride, total = (out - 1) * stride + dilation * (k - 1) + 1 - in;
  if (total > 0) *p0 = total / 2, *p1 = total - total / 2;
}

/* The 4-D input a conv2d or pooling layer needs, or an error. */
static bool image_input(lowering *lw, fe_layer *l, const ir_node *x) {
  if (x->type.rank == 4) return true;
  diag_error(lw->m->d, l->inputs[0].loc, "%s needs an input [N, height, width, channels], got %s",
             fe_layer_kind_name(l->kind), type_str(lw, &x->type));
  return false;
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

/* Keras Conv2D: %NAME.kernel [KH, KW, C/groups, filters] (HWIO), %NAME.bias,
 * conv2d (group_conv2d for groups > 1), bias add and activation, as dense. */
static bool lower_conv2d(lowering *lw, fe_layer *l, ir_node **in) {
  ir_node *x = in[0];
  if (!image_input(lw, l, x)) return false;
  int64_t C = x->type.dims[3];
  if (C % l->groups || l->filters % l->groups) {
    diag_error(lw->m->d, l->groups_loc, "groups=%lld must divide the input's %lld channels and the %lld filters",
               (long long)l->groups, (long long)C, (long long)l->filters);
    return false;
  }
  ir_type kt = {DT_F32, 4, {l->kernel[0], l->kernel[1], C / l->groups, l->filters}};
  ir_attr a = window_attr(l, x, l->kernel, true);
  bool more = l->use_bias || l->act != IR_OP_COUNT;
  ir_node *b = NULL, *y = conv_node(lw, l, x, "kernel", &kt, &kt, &a, step_name(lw, l, "conv", !more), &b);
  return y && (l->value = bias_act(lw, l, y, b, false)) != NULL;
}

/* Keras MaxPooling2D / AveragePooling2D (strides default to pool_size). */
static bool lower_pool2d(lowering *lw, fe_layer *l, ir_node **in) {
  ir_node *x = in[0];
  if (!image_input(lw, l, x)) return false;
  ir_op op = l->kind == FE_LAYER_MAX_POOLING2D ? IR_OP_MAX_POOL2D : IR_OP_AVG_POOL2D;
  ir_attr a = {.pool = {2, {l->pool[0], l->pool[1]}}, .strides = {2, {l->strides[0], l->strides[1]}}, .pads = {4, {0}}};
  keras_pads(l->same, x->type.dims[1], l->pool[0], l->strides[0], 1, &a.pads.v[0], &a.pads.v[1]);
  keras_pads(l->same, x->type.dims[2], l->pool[1], l->strides[1], 1, &a.pads.v[2], &a.pads.v[3]);
  if (!check_op(lw, l, op, &x, 1, &a)) return false;
  l->value = stamp(lw, l, ir_build_op(lw->g, op, l->name, &x, 1, &a, l->loc));
  return true;
}

/* CNN: Keras BatchNormalization over the last (channel) axis: %NAME.gamma
 * (ones), %NAME.beta (zeros), %NAME.moving_mean (zeros),
 * %NAME.moving_variance (ones), all [C]; without scale or center, gamma 1
 * and beta 0 are [] literals (no weight). Inference uses the moving
 * statistics; a training step the batch's (passes/grad_bn.c). */
static bool lower_batch_norm(lowering *lw, fe_layer *l, ir_node **in) {
  ir_node *x = in[0];
  fe_model *m = lw->m;
  ir_graph *g = lw->g;
  int rank = x->type.rank;
  if (rank < 2 || x->type.dtype != DT_F32) {
    diag_error(m->d, l->loc, "batch_normalization needs a float input with a feature dimension, got %s",
               type_str(lw, &x->type));
    return false;
  }
  if (l->axis != -1 && l->axis != rank - 1) {
    diag_error(m->d, l->axis_loc,
               "batch_normalization normalizes over the last (channel) axis of %s: axis=-1 or axis=%d (channels "
               "last, NHWC)", type_str(lw, &x->type), rank - 1);
    return false;
  }
  ir_type ct = {DT_F32, 1, {x->type.dims[rank - 1]}};
  static const char *const names[4] = {"gamma", "beta", "moving_mean", "moving_variance"};
  ir_node *srcs[5] = {x};
  for (int k = 0; k < 4; k++) {
    if ((k == 0 && !l->scale) || (k == 1 && !l->center)) {
      ir_type st = {DT_F32, 0, {0}};
      ir_node *lit = ir_node_new(g, IR_OP_LITERAL, &st, NULL, 0, arena_printf(m->arena, "%s.%s", l->name, names[k]), l->loc);
      lit->attr.value = k == 0 ? 1.0 : 0.0;
      ir_graph_append(g, lit);
      srcs[k + 1] = stamp(lw, l, lit);
      continue;
    }
    const char *key = arena_printf(m->arena, "%s.%s", l->name, names[k]);
    const float *data = NULL;
    if (!fe_weights_get(&lw->w, g, key, &ct, k == 0 || k == 3, l->name, l->loc, &data)) return false;
    srcs[k + 1] = stamp(lw, l, ir_build_const(g, key, &ct, key, data, l->loc));
  }
  ir_attr a = {.epsilon = l->epsilon, .momentum = l->momentum};
  if (!check_op(lw, l, IR_OP_BATCH_NORM, srcs, 5, &a)) return false;
  l->value = stamp(lw, l, ir_build_op(g, IR_OP_BATCH_NORM, l->name, srcs, 5, &a, l->loc));
  return true;
}

/* ---- convolutional networks: depthwise and separable convolution, global
 * pooling, zero padding, the 1D layers ---- */

/* Keras DepthwiseConv2D: %NAME.kernel [KH, KW, C, depth_multiplier] (read as
 * [KH, KW, 1, C*M]: one group per channel, output channel c*M + m),
 * %NAME.bias [C*M]. */
static bool lower_depthwise_conv2d(lowering *lw, fe_layer *l, ir_node **in) {
  ir_node *x = in[0];
  if (!image_input(lw, l, x)) return false;
  int64_t C = x->type.dims[3], M = l->depth_multiplier;
  ir_type kt = {DT_F32, 4, {l->kernel[0], l->kernel[1], C, M}}, ct = {DT_F32, 4, {l->kernel[0], l->kernel[1], 1, C * M}};
  ir_attr a = window_attr(l, x, l->kernel, true);
  bool more = l->use_bias || l->act != IR_OP_COUNT;
  ir_node *b = NULL, *y = conv_node(lw, l, x, "kernel", &kt, &ct, &a, step_name(lw, l, "depthwise", !more), &b);
  return y && (l->value = bias_act(lw, l, y, b, false)) != NULL;
}

/* Keras SeparableConv2D: the depthwise convolution of %NAME.depthwise_kernel
 * [KH, KW, C, M] (strides, padding, dilation), then the 1x1 convolution of
 * %NAME.pointwise_kernel [1, 1, C*M, filters], %NAME.bias [filters]. */
static bool lower_separable_conv2d(lowering *lw, fe_layer *l, ir_node **in) {
  ir_node *x = in[0];
  if (!image_input(lw, l, x)) return false;
  int64_t C = x->type.dims[3], M = l->depth_multiplier;
  ir_type kt = {DT_F32, 4, {l->kernel[0], l->kernel[1], C, M}}, ct = {DT_F32, 4, {l->kernel[0], l->kernel[1], 1, C * M}};
  ir_attr a = window_attr(l, x, l->kernel, true);
  ir_node *d = conv_node(lw, l, x, "depthwise_kernel", &kt, &ct, &a, step_name(lw, l, "depthwise", false), NULL);
  if (!d) return false;
  ir_type pt = {DT_F32, 4, {1, 1, C * M, l->filters}};
  ir_attr pa = {.acc = DT_F32, .strides = {2, {1, 1}}, .dilations = {2, {1, 1}}, .pads = {4, {0}}};
  bool more = l->use_bias || l->act != IR_OP_COUNT;
  ir_node *b = NULL, *y = conv_node(lw, l, d, "pointwise_kernel", &pt, &pt, &pa, step_name(lw, l, "pointwise", !more), &b);
  return y && (l->value = bias_act(lw, l, y, b, false)) != NULL;
}

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

/* Keras GlobalAveragePooling2D / GlobalMaxPooling2D / GlobalMaxPooling1D:
 * one window over the whole image (avg_pool2d or max_pool2d, so the max's
 * gradient goes to the first maximal element), [N, C] or, with keepdims,
 * [N, 1, 1, C] ([N, 1, C] for 1D). */
static bool lower_global_pool(lowering *lw, fe_layer *l, ir_node **in) {
  bool one_d = l->kind == FE_LAYER_GLOBAL_MAX_POOLING1D;
  ir_node *x = one_d ? as_image_1d(lw, l, in[0]) : in[0];
  if (!x || (!one_d && !image_input(lw, l, x))) return false;
  ir_op op = l->kind == FE_LAYER_GLOBAL_AVERAGE_POOLING2D ? IR_OP_AVG_POOL2D : IR_OP_MAX_POOL2D;
  ir_attr a = {.pool = {2, {x->type.dims[1], x->type.dims[2]}}, .strides = {2, {1, 1}}, .pads = {4, {0}}};
  if (!check_op(lw, l, op, &x, 1, &a)) return false;
  bool last = l->keepdims && !one_d;
  ir_node *y = stamp(lw, l, ir_build_op(lw->g, op, step_name(lw, l, "pool", last), &x, 1, &a, l->loc));
  if (!last) {
    int64_t C = x->type.dims[3];
    ir_attr ra = {.shape = l->keepdims ? (ir_shape){3, {IR_DIM_BATCH, 1, C}} : (ir_shape){2, {IR_DIM_BATCH, C}}};
    y = stamp(lw, l, ir_build_op(lw->g, IR_OP_RESHAPE, l->name, &y, 1, &ra, l->loc));
  }
  l->value = y;
  return true;
}

/* Keras ZeroPadding2D: zeros around the image, [top, bottom, left, right]. */
static bool lower_zero_padding2d(lowering *lw, fe_layer *l, ir_node **in) {
  ir_node *x = in[0];
  if (!image_input(lw, l, x)) return false;
  const int64_t *p = l->zero_pads;
  ir_attr a = {.shape = {4, {IR_DIM_BATCH, x->type.dims[1] + p[0] + p[1], x->type.dims[2] + p[2] + p[3], x->type.dims[3]}},
               .starts = {4, {0, p[0], p[2], 0}}, .steps = {4, {1, 1, 1, 1}}, .value = 0};
  return lower_layout_op(lw, l, IR_OP_PAD_CONSTANT, in, 1, &a);
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
    /* int32 values (input(..., dtype=int32)) are indices: only an embedding takes them */
    if (l->kind != FE_LAYER_EMBEDDING && !dtype_is_float(in[k]->type.dtype)) {
      diag_error(lw->m->d, l->inputs[k].loc, "%s needs float values, and '%s' is %s (an int32 input holds indices for an embedding)",
                 fe_layer_kind_name(l->kind), l->inputs[k].var, type_str(lw, &in[k]->type));
      return;
    }
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
