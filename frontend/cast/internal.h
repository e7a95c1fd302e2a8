/* SPDX-License-Identifier: Apache-2.0 */
/*
 * internal.h: what the .cast frontend's files share and nobody else sees. The
 * frontend runs in stages, one file each:
 *
 *   lexer.c    bytes -> tokens (UTF-8 checked, one line at a time, pulled)
 *   parse.c    tokens -> statements; header statements fill fe_model,
 *              layer calls go to layers.c
 *   layers.c   a layer call -> fe_layer (attributes checked), layer names
 *   resolve.c  uses -> definitions, topological order, cycles
 *   lower.c    fe_model -> ir_graph (types, weights via weights.c); the
 *              layers of the Keras layer library through host.c
 *   host.c     the .cast frontend as a host of frontend/layers/: a call's
 *              attributes as the layer's Keras config, its weights by
 *              key, its errors at the attribute they are about
 *
 * Every stage reports user errors to the sink and keeps going where it can;
 * a layer with an error is marked broken and everything that depends on it
 * is skipped silently, so one mistake gives one diagnostic.
 */
#ifndef CASTOR_FRONTEND_INTERNAL_H
#define CASTOR_FRONTEND_INTERNAL_H

#include "frontend/cast/cast.h"

#include "formats/safetensors.h"
#include "frontend/fe_weights.h"
#include "frontend/layers/layers.h"

/* ---- lexer ---- */

typedef enum fe_tok_kind {
  FE_TOK_EOF,
  FE_TOK_NEWLINE,
  FE_TOK_IDENT,
  FE_TOK_INT,
  FE_TOK_FLOAT, /* CNN: a decimal number with a '.' or an exponent (momentum=0.99, epsilon=1e-3) */
  FE_TOK_STRING,
  FE_TOK_LPAREN,
  FE_TOK_RPAREN,
  FE_TOK_LBRACKET,
  FE_TOK_RBRACKET,
  FE_TOK_COMMA,
  FE_TOK_EQ,
  FE_TOK_ERROR, /* a lexical error was reported; the lexer skipped to the end of the line */
} fe_tok_kind;

typedef struct fe_token {
  fe_tok_kind kind;
  const char *text; /* IDENT: the name; STRING: the decoded contents; INT: the spelling */
  int64_t ival;     /* INT */
  double dval;      /* FLOAT; INT's value as a double */
  diag_loc loc;
} fe_token;

typedef struct fe_lexer {
  const char *file; /* interned */
  const char *text;
  size_t len, pos, line_start;
  int line;
  arena *arena;
  diag_sink *d;
} fe_lexer;

void fe_lexer_init(fe_lexer *lx, const char *file, const char *text, size_t len, arena *a,
                   diag_sink *d);
/* The next token; lexical errors are reported and come back as FE_TOK_ERROR
 * (the lexer is then at the end of that line). */
fe_token fe_lexer_next(fe_lexer *lx);
/* Skips the rest of the current line (not its newline): error recovery. */
void fe_lexer_skip_line(fe_lexer *lx);

/* ---- model ---- */

/* The layer vocabulary: one row per layer in frontend/cast/layers.def. */
typedef enum fe_layer_kind {
#define LAYER(e, ...) FE_LAYER_##e,
#include "frontend/cast/layers.def"
#undef LAYER
  FE_LAYER_COUNT, /* also: a call of no known layer (broken) */
  FE_LAYER_LIBRARY /* a layer of the library without a row in layers.def (fe_layer.lib_row): its .cast
                    * spelling, inputs and keywords come from its library row (layers.c) */
} fe_layer_kind;

enum { FE_LAYER_MAX_ATTRS = 10 };
/* layers.def's n_inputs of a layer that takes 2 to IR_MAX_SRCS inputs (concatenate) */
enum { FE_INPUTS_2_OR_MORE = -2 };

/* One argument of a layer call as written: `key=value` or a positional value. */
typedef enum fe_value_kind { FE_VAL_IDENT, FE_VAL_INT, FE_VAL_STRING, FE_VAL_LIST, FE_VAL_FLOAT } fe_value_kind;

typedef struct fe_value {
  fe_value_kind kind;
  const char *str; /* IDENT, STRING; the spelling for INT */
  int64_t ival;    /* INT */
  double dval;     /* FLOAT (CNN), and INT's value as a double */
  struct fe_value *items; /* LIST */
  int n_items;
  diag_loc loc;
} fe_value;

typedef struct fe_arg {
  const char *key; /* NULL: positional */
  diag_loc key_loc;
  fe_value value;
} fe_arg;

typedef struct fe_call {
  int seq; /* statement number */
  const char *var;
  diag_loc var_loc;
  const char *callee;
  diag_loc callee_loc;
  fe_arg *args;
  int n_args;
} fe_call;

typedef struct fe_layer fe_layer;

/* A use of a value by name: a layer input or an output statement. */
typedef struct fe_use {
  const char *var;
  diag_loc loc;
  fe_layer *def; /* after fe_resolve; NULL if unresolved */
} fe_use;

struct fe_layer {
  fe_layer_kind kind;
  const char *kind_name; /* what the call calls it (dense, re_lu); NULL for an unknown layer */
  int lib_row;           /* FE_LAYER_LIBRARY: its row of the layer library */
  int seq;   /* statement number: orders definitions and uses */
  int index; /* position among the layers, in file order */
  const char *var;
  diag_loc var_loc, loc; /* loc: the layer name of the call, e.g. `dense` */
  const char *name;      /* layer name (explicit, input variable, or automatic) */
  diag_loc name_loc;     /* where name= was given; var_loc for inputs; loc otherwise */
  bool explicit_name;
  bool broken; /* an error was reported for this layer */
  int n_inputs;
  fe_use inputs[IR_MAX_SRCS];
  ir_policy policy; /* dtype=, IR_POLICY_NONE if absent */
  /* input */
  int rank;
  int64_t shape[IR_MAX_RANK];
  diag_loc shape_loc;
  int input_index;
  /* dense, activation */
  int64_t units;
  diag_loc units_loc;
  ir_op act; /* IR_OP_COUNT: none (linear) */
  bool use_bias;
  /* general tensors: reshape's target_shape, permute's dims (as written, Keras's terms);
   * concatenate's axis (default -1) */
  int n_ints;
  int64_t ints[IR_MAX_RANK];
  diag_loc ints_loc;
  int64_t axis;
  diag_loc axis_loc;
  bool int32_input; /* input(..., dtype=int32): Keras Input's dtype, indices for an embedding */
  int64_t input_dim, output_dim; /* embedding */
  diag_loc input_dim_loc;
  /* convolutional networks: conv2d (filters, kernel_size, strides, padding,
   * dilation_rate) and pooling (pool_size, strides, padding); pairs are
   * [height, width] */
  int64_t filters, kernel[2], strides[2], dilation[2], pool[2];
  bool same, strides_given;
  diag_loc filters_loc;
  /* CNN: batch_normalization (Keras's momentum, epsilon, center, scale) */
  double momentum, epsilon;
  bool center, scale;
  diag_loc momentum_loc, epsilon_loc;
  /* general tensors: dropout's rate and seed (default: the layer's index) */
  double rate;
  int64_t seed;
  bool seed_given;
  diag_loc rate_loc;
  /* convolutional networks: conv2d/conv1d groups, depthwise depth_multiplier, global
   * pooling's keepdims, zero_padding2d's padding [top, bottom, left, right], conv1d's
   * padding='causal' */
  int64_t groups, depth_multiplier, zero_pads[4];
  bool keepdims, causal, pool_given;
  diag_loc groups_loc, padding_loc;
  /* general tensors: multi_head_attention (value_dim 0: key_dim) */
  int64_t num_heads, key_dim, value_dim;
  int64_t sequence_length; /* position_embedding */
  bool mask_input, use_causal_mask; /* attention masks: attention_mask= is inputs[n_inputs - 1] */
  diag_loc num_heads_loc;
  /* host.c: the call's arguments as written (the Keras config is built from them) */
  const fe_arg *args;
  int n_args;
  /* lowering */
  bool lowered;
  ir_node *value;
  ir_node *mask;         /* the Keras mask the value carries (i1 [N, T]), or NULL */
  const char *mask_from; /* the layer that made it */
};

typedef struct fe_output {
  int seq;
  fe_use use;
} fe_output;

typedef struct fe_model {
  arena *arena; /* scratch: tokens, strings, layers; freed after lowering */
  diag_sink *d;
  int errors0; /* the sink's error count when this load began */
  const char *file; /* interned */
  int n_stmts;
  const char *name; /* NULL until `model NAME` */
  diag_loc model_loc;
  ir_policy policy;
  diag_loc policy_loc; /* line 0: no policy statement */
  const char *weights; /* NULL: no weights statement */
  diag_loc weights_loc;
  fe_train_defaults compile; /* the compile statement */
  diag_loc compile_loc;
  VEC(fe_layer *) layers;
  VEC(fe_output) outputs;
  VEC(fe_layer *) order; /* fe_resolve: topological order of the lowerable layers */
  bool stopped;          /* FE_MAX_ERRORS reached */
} fe_model;

void fe_model_init(fe_model *m, const char *file, diag_sink *d);
void fe_model_fini(fe_model *m);

/* Like clang's -ferror-limit: after this many errors a load stops, so a
 * garbage file cannot produce millions of diagnostics. */
enum { FE_MAX_ERRORS = 20, FE_MAX_NOTES = 8 };
/* True once the load reported FE_MAX_ERRORS errors; says so the first time. */
bool fe_error_limit(fe_model *m);

/* parse.c: parses the whole text into m. */
void fe_parse(fe_model *m, const char *text, size_t len);

/* layers.c */
const char *fe_layer_kind_name(fe_layer_kind k);
/* Checks a call and appends the layer it defines to m (broken on error). */
void fe_layer_add(fe_model *m, const fe_call *call);
/* Defines call->var by a broken layer: the call had a syntax error. */
void fe_layer_add_broken(fe_model *m, const fe_call *call);
/* Assigns automatic names and reports duplicate layer names. */
void fe_layers_name(fe_model *m);
/* The candidate closest to s (edit distance <= 2, less than s's length), or NULL. */
const char *fe_closest(const char *s, const char *const *cands, int n_cands);
/* Parses a policy name at loc, reporting an error (with a suggestion) if unknown. */
bool fe_policy_parse(fe_model *m, const fe_value *v, ir_policy *out);

/* resolve.c: binds uses to definitions, fills m->order, reports undefined
 * values, ambiguous forward references and cycles. */
void fe_resolve(fe_model *m);

/* ---- weights (weights.c) ---- */

typedef struct fe_weights {
  diag_sink *d;
  int errors0; /* errors beyond this count: skip generating data */
  bool from_file;
  bool file_ok;    /* the file was read and validated */
  const char *path; /* as named in diagnostics */
  diag_loc loc;     /* where weight errors are reported */
  safetensors_file st;
  bool *used;       /* per tensor of st */
  uint64_t seed;
  int64_t init_bytes; /* generated by the Glorot init so far */
  int64_t max_init_bytes; /* fe_options.max_init_bytes, or FE_MAX_INIT_BYTES */
} fe_weights;

/* Opens the weights: path NULL means the seeded Glorot init. */
void fe_weights_open(fe_weights *w, const char *path, diag_loc loc, uint64_t seed,
                     int errors0, diag_sink *d);
/* The f32 data of weight `key` with type t (rank 1 or 2) in g's arena:
 * from the file, or Glorot-uniform for rank 2 (fan_in = dims[0], fan_out =
 * dims[1]) and zeros for rank 1, ones when `ones` (a layer normalization's
 * gamma, as Keras initializes it). `layer`/`layer_loc` name the layer in
 * notes. False after reporting an error. *out is NULL when generation was
 * skipped because errors were already reported (the graph will be
 * discarded). */
bool fe_weights_get(fe_weights *w, ir_graph *g, const char *key, const ir_type *t, bool ones,
                    const char *layer, diag_loc layer_loc, const float **out);
/* Without a file: overwrites a [rows, cols] kernel's data (from
 * fe_weights_get) with Keras's Orthogonal draw, seeded by the key; a
 * warning leaves it Glorot-uniform where the QR would take more than a few
 * seconds. */
void fe_weights_orthogonal(fe_weights *w, const char *key, const ir_type *t, float *data, const char *layer,
                           diag_loc layer_loc);
/* Warns about tensors of the file that the model did not use. */
void fe_weights_check_unused(fe_weights *w);

/* ---- the lowering state, shared by lower.c and host.c ---- */
typedef struct lowering {
  fe_model *m;
  ir_graph *g;
  fe_weights w;
  fl_host host; /* host.c */
} lowering;
/* lower.c: a node stamped with its layer (name, policy); a type as text */
ir_node *fe_stamp(lowering *lw, fe_layer *l, ir_node *n);
const char *fe_type_str(lowering *lw, const ir_type *t);
/* lower.c */
bool fe_lower_position_embedding(lowering *lw, fe_layer *l, ir_node **in);
/* host.c: sets up lw->host; lowers a layer of the library (its Keras class) */
void fe_host_init(lowering *lw);
bool fe_lower_library(lowering *lw, fe_layer *l, const char *keras_class, ir_node **in);
void fe_weights_fini(fe_weights *w);

/* Largest total of weights the Glorot init generates (bytes). */
#define FE_MAX_INIT_BYTES ((int64_t)4 << 30)

/* ---- lower.c ---- */

/* Lowers a resolved model into a new graph (NULL if errors were reported). */
ir_graph *fe_lower(fe_model *m, const fe_options *o);

#endif
