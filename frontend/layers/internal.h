/* SPDX-License-Identifier: Apache-2.0 */
/*
 * internal.h: what the layer library's files share (layers.h is what the
 * frontends see):
 *
 *   table.c      the rows of layers.def: lookups, the config-key check,
 *                the lowering dispatch
 *   common.c     reading config values, node names, weights, the pieces
 *                several layers build (bias + activation, layout ops,
 *                Keras's 'same' padding)
 *   core.c       Dense, Activation, the merges, the layout layers,
 *                Softmax, LayerNormalization, Embedding, Dropout
 *   conv.c       the convolution, pooling, normalization and padding layers
 *   attention.c  MultiHeadAttention (frontend/fe_attention.c builds it)
 *   activations.c  Keras's activations, the ReLU and LayerScale layers
 *   prep.c       the preprocessing and shape layers the applications use:
 *                Rescaling, Normalization, Cropping2D, UpSampling2D
 *   image.c      Conv2DTranspose, GroupNormalization, bilinear UpSampling2D
 *   rnn.c        the recurrent layers: LSTM, GRU, SimpleRNN, Bidirectional
 *   mask.c       Keras's masks: Masking, the NotEqual and Any op nodes,
 *                what each layer does with a mask
 *
 * A lowering function of layers.def: `bool fl_lower_x(fl_host *m, fl_layer
 * *l, int k, ir_node **in, int n_in)` lowers call k with its inputs, sets
 * m->call->out, and returns false after reporting an error through
 * fl_error (the host says where and how).
 */
#ifndef CASTOR_FRONTEND_LAYERS_INTERNAL_H
#define CASTOR_FRONTEND_LAYERS_INTERNAL_H

#include "frontend/layers/layers.h"

typedef enum key_rule {
  KEY_ANY, KEY_NULL, KEY_TRUE, KEY_FALSE, KEY_LAST_AXIS, KEY_ZERO, KEY_CHANNELS_LAST, KEY_ONE
} key_rule;

#define LAYER(cls, lower, ...) bool lower(fl_host *m, fl_layer *l, int k, ir_node **in, int n_in);
#include "frontend/layers/layers.def"
#undef LAYER

/* Errors about l (layers.h's fl_host.error), printf-style. */
void fl_error(fl_host *m, fl_layer *l, const char *key, fl_style style, const char *fmt, ...) CASTOR_PRINTF(5, 6);
void fl_unsupported(fl_host *m, fl_layer *l, const char *key, fl_style style, const char *fmt, ...)
    CASTOR_PRINTF(5, 6);
/* Weight `index` of l as f32 data of type t, or NULL after reporting. */
const float *fl_weight(fl_host *m, fl_layer *l, int index, const char *key, const char *what, const ir_type *t,
                       fl_init init);
ir_node *fl_stamp(fl_host *m, const fl_layer *l, ir_node *n);

/* Call k's node name: NAME[.callK][.suffix]. */
const char *fl_node_name(fl_host *m, const fl_layer *l, int k, const char *suffix);
const char *fl_type_str(fl_host *m, const ir_type *t);

/* activations.c: a Keras activation is one IR op (an ir_op) or a few
 * (FL_ACT_*); FL_LINEAR is none. */
typedef int fl_act;
enum {
  FL_LINEAR = IR_OP_COUNT,
  FL_ACT_RELU6,
  FL_ACT_HARD_SILU,
  FL_ACT_MISH,
  FL_ACT_SELU,
  FL_ACT_ELU,
  FL_ACT_LEAKY_RELU,
  FL_ACT_SOFTSIGN,
  FL_ACT_EXP,
};
/* The activation named by a Keras name (activations.c's table, or an IR
 * op the op table marks an activation: the .cast names); false after
 * reporting. */
bool fl_activation_named(fl_host *m, fl_layer *l, const char *key, const char *s, fl_act *out);
/* The config key "activation" (absent or null: linear). */
bool fl_activation(fl_host *m, fl_layer *l, fl_act *out);
/* act applied to x; the last node named `name`, the others name.STEP. */
ir_node *fl_act_apply(fl_host *m, fl_layer *l, ir_node *x, fl_act act, const char *name);
/* A [] literal (broadcasts against any shape). */
ir_node *fl_literal(fl_host *m, const fl_layer *l, const char *name, double value);

/* Config values: absent or null gives the default (INT64_MIN / NULL: required). */
bool fl_cfg_int(fl_host *m, fl_layer *l, const char *key, int64_t dflt, int64_t lo, int64_t hi, int64_t *out);
bool fl_cfg_pair(fl_host *m, fl_layer *l, const char *key, const int64_t *dflt, int64_t *out);
bool fl_cfg_padding(fl_host *m, fl_layer *l, bool *same);
bool fl_cfg_bool(fl_host *m, fl_layer *l, const char *key, bool dflt, bool *out);
bool fl_cfg_number(fl_host *m, fl_layer *l, const char *key, double dflt, double lo, double hi, double *out);

bool fl_one_input(fl_host *m, fl_layer *l, int n_in);
/* An axis of x counted as Keras counts it (N is 0, negative from the end), or -1 after an error. */
int fl_keras_axis(fl_host *m, fl_layer *l, const ir_node *x, int64_t a, const char *what);
/* Dense's and Conv2D's kernel and bias, read on the first call. */
bool fl_kernel_bias(fl_host *m, fl_layer *l, ir_node *x, const ir_type *kt, const ir_type *bt, bool use_bias,
                    bool both);
/* The bias add (named add) and the activation after a contraction. */
ir_node *fl_bias_act(fl_host *m, fl_layer *l, int k, ir_node *y, const char *add, bool use_bias, fl_act act);
/* The op `op` of call k, its type checked with the IR's shape rule. */
bool fl_layout_op(fl_host *m, fl_layer *l, int k, ir_op op, const char *suffix, ir_node **in, int n,
                  const ir_attr *attr, ir_node **out);
/* The same with the style a .cast host words the rule's message in. */
bool fl_op_styled(fl_host *m, fl_layer *l, int k, ir_op op, const char *suffix, ir_node **in, int n,
                  const ir_attr *attr, fl_style style, ir_node **out);
/* Keras's padding along one dimension ('same': TF's, the odd one at the end). */
void fl_same_pads(bool same, int64_t in, int64_t k, int64_t stride, int64_t dilation, int64_t *p0, int64_t *p1);
bool fl_image_input(fl_host *m, fl_layer *l, const ir_node *x);
/* mask.c: a recurrent call's mask (fl_call.mask_at), taken out of in[] (NULL if none); false after
 * reporting one that is not i1 [N, steps] of the sequence x = in[0]. */
bool fl_call_mask(fl_host *m, fl_layer *l, ir_node **in, int *n_in, ir_node **out);
/* Embedding's mask with mask_zero (fl_call.out_mask: ids != 0). */
bool fl_embedding_mask(fl_host *m, fl_layer *l, int k, ir_node *ids);
/* image.c: UpSampling2D's bilinear interpolation of x [N, H, W, C] by s[0] rows and s[1] columns
 * (sets m->call->out). */
bool fl_upsample_bilinear(fl_host *m, fl_layer *l, int k, ir_node *x, const int64_t *s);


#endif
