/* SPDX-License-Identifier: Apache-2.0 */
/*
 * internal.h: what the Keras frontend's files share and nobody else sees.
 *
 *   keras.c    the archive (formats/zip.h), metadata.json, config.json
 *              (formats/json.h), model.weights.h5 (formats/hdf5.h); the
 *              model's layers and their calls (Sequential, Functional),
 *              their DTypePolicies, the compile_config; drives lowering
 *   compile.c  compile_config -> the training defaults
 *   layers.c   the host of the layer library (frontend/layers/): a layer's
 *              weights by Keras's paths, its errors, its stamp
 *   save.c     writing the model back as a .keras file (fe_keras_save)
 *
 * Errors name the file, the layer and its class; a layer with an error is
 * reported once and nothing that depends on it is lowered.
 */
#ifndef CASTOR_FRONTEND_KERAS_INTERNAL_H
#define CASTOR_FRONTEND_KERAS_INTERNAL_H

#include "frontend/keras/keras.h"

#include "formats/hdf5.h"
#include "formats/json.h"
#include "frontend/layers/layers.h"

/* KR_MAX_NEST: models used as layers inside models, levels below the file's model
 * (each level keys Keras's variable order with 16 bits: kr_layer.order) */
enum { KR_MAX_LAYERS = 10000, KR_MAX_CALL_INPUTS = 64, KR_MAX_NEST = 3 };

typedef struct kr_layer kr_layer;

/* A tensor of the config: output `tensor` of call `node` of a layer; or,
 * layer NULL, a number (an op node's operand: x + 3.0). */
typedef struct kr_ref {
  kr_layer *layer;
  int node, tensor;
  double number;
} kr_ref;

/* One call of a layer (a Functional inbound node; a Sequential layer has one). */
typedef struct kr_call {
  kr_ref in[KR_MAX_CALL_INPUTS];
  int n_in;
  ir_node *out; /* once lowered: output 0 */
  ir_node *outs[FL_MAX_OUTS]; /* a library layer's outputs (return_state), n_outs of them; 0: out alone */
  int n_outs;
  bool done, broken;
  /* MultiHeadAttention's call arguments: in[key_at - 1] and in[mask_at - 1] (0: not given), use_causal_mask;
   * a recurrent layer's mask argument is in[mask_at - 1] too */
  int key_at, mask_at;
  bool causal;
  /* the mask outputs 0 .. n_mask_outs - 1 carry after this call (Keras 3 carries it at run time), and
   * the layer that made it */
  ir_node *mask;
  const char *mask_from;
  int n_mask_outs;
} kr_call;

struct kr_layer {
  int index;             /* in config.layers */
  const char *cls;       /* class_name */
  const char *name;      /* config.name, as Keras has it */
  const char *ir_name;   /* name sanitized for the IR ([A-Za-z_][A-Za-z0-9_]*) */
  const json_value *cfg; /* its config object */
  const json_value *spec; /* its entry of config.layers (a nested model's: class_name and config) */
  const char *vars;      /* its weights group in model.weights.h5: "/layers/dense_1/vars" */
  ir_policy policy;      /* its DTypePolicy */
  int row;               /* its row in the layer library (fl_layer_row), -1 if none */
  bool nested;           /* a Sequential or Functional model used as a layer (row -1) */
  uint64_t order;        /* Keras's variable order: 16 bits a level, the outer model's index first */
  bool op_node;          /* an op of the functional API (module keras.src.ops...): numbers may be operands */
  kr_call *calls;
  int n_calls;
  fl_layer fl;           /* the library's view: config, weights built at the first call */
};

/* A weight read by kr_weight: its data, its dataset, its layer and index. */
struct kr_bound {
  const float *data;
  int obj, index;
  uint64_t order; /* its layer's kr_layer.order */
};

typedef struct kr_model {
  const char *file;  /* interned; names the archive in diagnostics */
  diag_sink *d;
  int errors0;
  arena *arena;      /* scratch: the JSON tree, paths */
  ir_graph *g;
  h5_file h5;
  bool have_h5;
  bool *h5_used;     /* per h5 object: a layer consumed it */
  const char *cls;   /* Sequential or Functional */
  kr_layer *layers;
  int n_layers;
  ir_policy policy;  /* the model's global policy (inferred) */
  int n_inputs;
  /* each weight read (kr_weight): its data, its dataset, its layer and index, in reading order */
  VEC(struct kr_bound) bound;
  fl_host host; /* the layer library's callbacks (layers.c) */
  /* a model used as a layer (nested_lower): its outer model, depth (1 below the file's model), the
   * h5 group of its layers ("/layers/sequential"), its layers' IR name prefix, its call's inputs
   * and, once lowered, its output; errors name its layers by their path of model names */
  struct kr_model *parent;
  int depth;
  const char *h5_prefix, *ir_prefix;
  const char *path; /* its layers' names in errors: "block/deep/" (NULL: the file's model) */
  uint64_t order;
  ir_node **given;
  int n_given;
  ir_node *result;
  /* the first model output that carries a Keras mask (Keras weights its loss by it), and its maker */
  const char *masked_output, *masked_from;
} kr_model;

/* layers.c: the layer library's host */
/* Fills l->fl from l (after its row, config and policy are known). */
void kr_layer_bind(kr_model *m, kr_layer *l);
/* Checks a layer's config keys against its row (an unsupported value is an
 * error naming the key). */
bool kr_layer_check(kr_model *m, kr_layer *l);
/* Lowers call k of layer l, whose inputs are lowered. */
bool kr_layer_lower(kr_model *m, kr_layer *l, int k, ir_node **in, int n_in);

/* compile.c: compile_config (may be NULL or null) into *td. */
bool kr_read_compile(kr_model *m, const json_value *cc, fe_train_defaults *td);

/* save.c: the source fe_keras_save needs, from a loaded model (config.json's
 * bytes and the h5 bytes are taken over: *cfg and *h5 become NULL). */
fe_keras_source *kr_source_new(kr_model *m, const char *keras_version, bool lso, unsigned char **cfg,
                               size_t cfg_len, unsigned char **h5);

/* keras.c: helpers the lowering uses */
/* Errors at the archive (kind unspecified: a malformed model; or unsupported). */
void kr_error(kr_model *m, const char *fmt, ...) CASTOR_PRINTF(2, 3);
void kr_unsupported(kr_model *m, const char *fmt, ...) CASTOR_PRINTF(2, 3);
diag_loc kr_loc(const kr_model *m);
/* An error about a layer: "layer 'NAME' (CLASS): ..." */
void kr_layer_error(kr_model *m, const kr_layer *l, const char *fmt, ...) CASTOR_PRINTF(3, 4);
/* The config value of a key, or NULL. */
const json_value *kr_cfg(const kr_layer *l, const char *key);
bool kr_is_null(const json_value *v);
/* Weight i of l (vars/i in model.weights.h5) as f32 data with type t in
 * g's arena: shape checked, f16 and bf16 widened; NULL after an error. */
const float *kr_weight(kr_model *m, kr_layer *l, int i, const char *what, const ir_type *t);
/* MultiHeadAttention: weight i of l's sublayer sub (/layers/NAME/SUB/vars/i), its place in
 * Keras's variable order `order` */
const float *kr_sub_weight(kr_model *m, kr_layer *l, const char *sub, int i, int order, const char *what,
                           const ir_type *t);
/* Stamps a node with its layer's name, note and policy override. */
ir_node *kr_stamp(kr_model *m, const kr_layer *l, ir_node *n);

#endif
