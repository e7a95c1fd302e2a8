/* SPDX-License-Identifier: Apache-2.0 */
/*
 * layers.h: the Keras layer library both model frontends call (.cast and
 * .keras). One row per Keras layer class in frontend/layers/layers.def:
 * its class, its .cast spelling, its config keys (with what castor accepts
 * for each) and its lowering function, written once. A frontend ("host")
 * reads its syntax into the one layer-config representation, a Keras config
 * object (json_value: the Keras reader takes config.json's, the .cast
 * parser maps a call's arguments onto the same keys), then calls
 * fl_layer_check and fl_layer_lower for each call of the layer; the
 * library builds the IR and asks the host for what differs between the
 * two: weights (by Keras's variable index and castor's key), where an
 * error points, and how a node is stamped with its layer.
 *
 * A layer with several calls (a shared Keras layer) reads its weights on
 * its first call and reuses them (fl_layer.w); call k > 0 names its nodes
 * NAME.callK.
 */
#ifndef CASTOR_FRONTEND_LAYERS_H
#define CASTOR_FRONTEND_LAYERS_H

#include "formats/json.h"
#include "ir/ir.h"

/* How a weight starts when the host has no file to read it from (.cast
 * without weights): Keras's initializers of that weight. */
typedef enum fl_init {
  FL_INIT_GLOROT, /* kernels: Glorot-uniform (zeros for rank 1) */
  FL_INIT_ZEROS,  /* biases, beta, moving mean */
  FL_INIT_ONES,   /* gamma, moving variance */
  FL_INIT_UNIFORM, /* embeddings: U(-0.05, 0.05) */
  FL_INIT_ORTHOGONAL, /* recurrent kernels: Keras's Orthogonal */
  FL_INIT_UNIT_FORGET_BIAS, /* an LSTM's bias: ones for the forget gate's units, zeros elsewhere */
  FL_INIT_CONSTANT /* every element fl_host.init_constant (LayerScale's gamma: its init_values) */
} fl_init;

/* How a .cast host words an error (a Keras host writes "layer 'NAME'
 * (Class): MESSAGE" for all): the message alone, after the layer's .cast
 * name ("conv2d needs ..."), after "KIND: " or "NAME: " (a shape rule's
 * complaint), or its leading "its " as "KIND's ". */
typedef enum fl_style { FL_PLAIN, FL_KIND, FL_KIND_RULE, FL_NAME_RULE, FL_ITS } fl_style;

/* A layer as the library sees it; the host fills the first block. */
typedef struct fl_layer {
  int row;               /* fl_layer_row */
  const char *cls;       /* Keras class name */
  const char *name;      /* the layer's name as written (messages, notes) */
  const char *ir_name;   /* node names: [A-Za-z_][A-Za-z0-9_]* */
  const json_value *cfg; /* its config object */
  int index;             /* its position among the model's layers (Dropout's default seed) */
  diag_loc loc;          /* where its nodes point */
  void *fe;              /* the host's layer */
  /* the library's: weights read on the first call */
  ir_node *w[8];
  bool weights_done;
} fl_layer;

/* A call's outputs: a recurrent layer with return_state (at most a Bidirectional LSTM with merge_mode
 * null: both directions' outputs, then h and c of each). */
enum { FL_MAX_OUTS = 6 };

/* One call of a layer: its inputs and, for MultiHeadAttention, which of
 * them are key= and attention_mask= (1-based; 0 absent) and
 * use_causal_mask. A recurrent layer's inputs after the first are its
 * initial states (Keras's initial_state) and its mask (mask_at: Keras's
 * mask argument, i1 [N, steps]). */
typedef struct fl_call {
  int k;
  ir_node **in;
  int n_in;
  int key_at, mask_at;
  bool causal;
  ir_node *out;                  /* set by fl_layer_lower: outs[0] */
  ir_node *out_mask;             /* the mask the call makes (Masking, Embedding with mask_zero), or NULL */
  int n_out_masks;               /* outputs 0 .. n_out_masks - 1 carry out_mask (0: 1) */
  ir_node *outs[FL_MAX_OUTS];    /* every output, n_outs of them (1 but for return_state) */
  int n_outs;
} fl_call;

typedef struct fl_host fl_host;
struct fl_host {
  ir_graph *g;
  arena *arena; /* scratch: names, messages */
  void *fe;     /* the frontend's state */
  /* Weight `index` of l (Keras's order; of sublayer `sub` when not NULL,
   * `order` its place among all of l's), castor's key `key` (the node's
   * name: NAME.kernel), `what` in words, its type t: f32 data in g's arena,
   * or NULL after reporting (or when errors already stopped the load). */
  const float *(*weight)(fl_host *h, fl_layer *l, const char *sub, int index, int order, const char *key,
                         const char *what, const ir_type *t, fl_init init);
  /* Reports an error about l; `key` names the config key (or "input" for
   * the first input, NULL for the layer) it is about. */
  void (*error)(fl_host *h, fl_layer *l, const char *key, fl_style style, bool unsupported, const char *msg);
  /* Optional: weight `index` of l is Keras's but not castor's (Normalization's count). */
  void (*ignore_weight)(fl_host *h, fl_layer *l, int index);
  /* Marks a node with its layer (note, layer, policy). */
  ir_node *(*stamp)(fl_host *h, const fl_layer *l, ir_node *n);
  fl_call *call; /* the library's: the call being lowered */
  double init_constant; /* the library's: FL_INIT_CONSTANT's value for the weight it asks for */
};

/* The row of a Keras class, or of a .cast layer name; -1 if none. */
int fl_layer_row(const char *cls);
int fl_layer_row_cast(const char *cast_name);
int fl_layer_rows(void);
const char *fl_row_class(int row);
/* A row's .cast spelling into out, from its class as Keras names a layer (to_snake_case:
 * Conv2DTranspose is conv2d_transpose, ReLU re_lu; InputLayer is input); false (out "") for an op
 * node of the functional API (TrueDivide, NotEqual, Any, Cast), which is not a layer. */
enum { FL_CAST_NAME_MAX = 48 };
bool fl_row_cast_name(int row, char out[FL_CAST_NAME_MAX]);
/* The i-th config key a .cast call of the row may give (its keys but the regularizers, constraints
 * and initializers), NULL after the last; and the positional inputs a call takes: n >= 0, or -n
 * for n or more. */
const char *fl_row_cast_key(int row, int i);
int fl_row_n_inputs(int row);
/* Whether the row lowers int32 or bool values (Embedding; the op nodes NotEqual and Any of a mask),
 * and whether it is an input (no lowering). */
bool fl_row_takes_indices(int row);
bool fl_row_is_input(int row);
/* Whether the row's calls may pass initial states (Keras's initial_state: the recurrent layers). */
bool fl_row_takes_initial_state(int row);
/* What a row does with a Keras mask (frontend/layers/mask.c): makes one
 * (fl_call.out_mask), takes it (the recurrent layers: fl_call.mask_at, passed
 * on with return_sequences), passes it on unchanged, refuses it (its result
 * would depend on it), or drops it (Keras destroys it too). */
typedef enum fl_mask_rule { FL_MASK_MAKES, FL_MASK_TAKES, FL_MASK_PASSES, FL_MASK_REFUSES, FL_MASK_DROPS } fl_mask_rule;
fl_mask_rule fl_row_mask(int row);
/* "InputLayer, Dense, ..." */
const char *fl_supported_list(void);
/* Checks l's config keys against its row: a key castor does not know, or
 * a value it does not accept, is an error naming the key. */
bool fl_layer_check(fl_host *h, fl_layer *l);
/* Lowers one call of l, whose inputs are lowered; c->out is its value. */
bool fl_layer_lower(fl_host *h, fl_layer *l, fl_call *c);

/* The config value of a key, or NULL; whether a value is absent or null. */
const json_value *fl_cfg(const fl_layer *l, const char *key);
bool fl_is_null(const json_value *v);

#endif
