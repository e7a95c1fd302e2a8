/* SPDX-License-Identifier: Apache-2.0 */
/*
 * internal.h: what the files of the ONNX importer share (frontend/onnx):
 * onnx_import.c (values, attributes, the op table and the graph walk),
 * onnx_fold.c (shape arithmetic evaluated at import) and onnx_lower.c (the
 * lowering of each op to castor's IR). Nothing outside this folder
 * includes it; every shared name has the prefix oi_.
 */
#ifndef CASTOR_FRONTEND_ONNX_INTERNAL_H
#define CASTOR_FRONTEND_ONNX_INTERNAL_H

#include "formats/onnx.h"
#include "frontend/onnx/onnx_frontend.h"

/* How a run-time value's IR node holds the ONNX value (onnx_layout.c).
 * castor's convolutions and pooling are NHWC; ONNX's are NCHW. */
typedef enum oi_layout {
  OI_PLAIN,   /* the ONNX dims in ONNX's order */
  OI_CL,      /* channels last: ONNX [N, C, S1..Sk] (rank >= 3) as IR [N, S1..Sk, C] */
  OI_FLAT_CL, /* ONNX [N, C*S1*..*Sk] (a flattened channels-first value) as IR [N, S1*..*Sk*C],
               * the features in channels-last order; imp_val.cl is the type it came from */
} oi_layout;

typedef struct imp_val {
  const char *name;
  ir_node *node;         /* run-time value (in `layout`), or its const node once materialized */
  const onnx_tensor *k;  /* host constant, or NULL */
  oi_layout layout;
  ir_type cl;            /* OI_FLAT_CL: the channels-last IR type that was flattened */
  ir_node *alt;          /* cache: the value in plain layout (for CL, FLAT_CL) or channels last */
  const char *layer;     /* the producing node's layer and location (transposes added later) */
  diag_loc loc;
  bool poison;           /* made by a node that failed: its users are skipped, not reported */
  bool param;            /* a host constant that is a model parameter: an initializer, or folded
                          * from one. Otherwise (a Constant node, a shape, values folded from
                          * those only) its const is trainable=false (ir_node.frozen) */
} imp_val;

typedef struct imp imp;
struct op_row;
typedef bool (*lower_fn)(imp *, const onnx_node *, const struct op_row *);

typedef struct op_row {
  const char *op_type;
  int since, until;
  lower_fn lower;
  ir_op ir;
  const char *attrs;
} op_row;

struct imp {
  const onnx_model *m;
  const char *file;
  ir_graph *g;
  diag_sink *d;
  const fe_options *o;
  int64_t opset;
  hmap vals; /* name -> imp_val */
  hmap used; /* name -> how it is used (oi_outputs_unused_from), once used_built */
  hmap concat_parts; /* "axis:ptr,ptr,.." -> the concat of those values (onnx_lower.c, concat_of) */
  bool used_built;
  /* the node being lowered */
  const onnx_node *node;
  const struct op_row *row; /* its row of onnx_ops.def, once found */
  const char *layer;
  diag_loc loc;
  bool failed; /* the node being lowered failed (or, before the nodes, the model) */
  bool defining_param; /* host constants defined now are parameters (imp_val.param): the
                        * initializers, and a fold with a parameter among its inputs */
  /* the nodes' errors, one per distinct message (onnx_import.c, oi_fail_kind) */
  int n_errors;
  hmap errors; /* message -> oi_node_error */
  struct oi_node_error *first_error, *last_error; /* in the order reported */
};

/* A node error as reported: where, and how many more nodes had its message. */
typedef struct oi_node_error {
  diag_loc loc;
  int more;
  struct oi_node_error *next;
} oi_node_error;

#define DIM_N INT64_MIN /* castor's symbolic batch in a folded shape (onnx_fold.c) */

/* Reports the node's first error (later ones would only echo it), once per
 * distinct message in the model (the others are counted in a note); false. */
bool oi_fail_kind(imp *im, diag_kind kind, const char *fmt, ...) CASTOR_PRINTF(3, 4);
#define FAIL(im, ...) oi_fail_kind((im), DIAG_KIND_INVALID_MODEL, __VA_ARGS__)
#define UNSUPPORTED(im, ...) oi_fail_kind((im), DIAG_KIND_UNSUPPORTED, __VA_ARGS__)

/* onnx_import.c: names, values, operands, attributes */
const char *oi_ir_name(imp *im, const char *onnx_name, const char *fallback);
imp_val *oi_val_find(imp *im, const char *name);
bool oi_val_define(imp *im, const char *name, ir_node *node, const onnx_tensor *k);
imp_val *oi_input(imp *im, int k);
bool oi_has_input(imp *im, int k);
bool oi_dims_of(imp *im, const onnx_tensor *t, ir_type *out);
const float *oi_const_f32(imp *im, const onnx_tensor *t);
ir_node *oi_operand(imp *im, imp_val *v);
const onnx_tensor *oi_const_input(imp *im, int k, const char *what);
const onnx_tensor *oi_host_const(imp *im, int k);
ir_node *oi_scalar_const(imp *im, const char *what, double v);
ir_node *oi_host_node(imp *im, imp_val *v, const char *weight, const ir_type *t, const void *data);
bool oi_define_output(imp *im, int k, ir_node *n);
bool oi_outputs_unused_from(imp *im, int k, const char *why);
ir_node *oi_build(imp *im, ir_op op, const char *suffix, ir_node *const *srcs, int n, const ir_attr *attr);
const onnx_attr *oi_attr_find(imp *im, const char *name);
bool oi_attr_typed(imp *im, const onnx_attr *a, int type);
bool oi_attr_int(imp *im, const char *name, int64_t def, int64_t *out);
bool oi_attr_float(imp *im, const char *name, double def, double *out);
bool oi_attrs_known(imp *im, const op_row *row);
bool oi_norm_axis(imp *im, int64_t axis, int rank, const char *what, int *out);
onnx_tensor *oi_host_tensor(imp *im, int dtype, int rank, const int64_t *dims);
bool oi_int_like(int dtype);
int64_t oi_elem_i64(const onnx_tensor *t, int64_t i);
double oi_elem_f64(const onnx_tensor *t, int64_t i);
bool oi_const_ints(imp *im, const onnx_tensor *t, const char *what, int64_t *out, int max, int *n);
bool oi_axes_of(imp *im, int input, int64_t *axes, int *n);
bool oi_lower_shape(imp *im, const onnx_node *n, const op_row *row);
onnx_tensor *oi_host_reshaped(imp *im, const onnx_tensor *t, int rank, const int64_t *dims);
bool oi_lower_constant_of_shape(imp *im, const onnx_node *n, const op_row *row);
bool oi_try_fold(imp *im, const onnx_node *n, bool *folded);

/* ---- the constant evaluator (onnx_fold.c: the table and the ops that
 * move data; onnx_eval.c: arithmetic). A node whose inputs are all host
 * constants and whose op has a row is evaluated at import. */
typedef enum oi_ev {
  OI_EV_NONE,
  OI_EV_ADD, OI_EV_SUB, OI_EV_MUL, OI_EV_DIV, OI_EV_MOD, OI_EV_POW, OI_EV_MAX, OI_EV_MIN, OI_EV_MEAN,
  OI_EV_EQ, OI_EV_LT, OI_EV_GT, OI_EV_LE, OI_EV_GE, /* comparisons: is_compare's range */
  OI_EV_AND, OI_EV_OR, OI_EV_XOR, OI_EV_NOT,
  OI_EV_NEG, OI_EV_ABS, OI_EV_SQRT, OI_EV_EXP, OI_EV_LOG, OI_EV_RECIP, OI_EV_FLOOR, OI_EV_CEIL, OI_EV_ROUND,
  OI_EV_SIGN, OI_EV_RELU, OI_EV_SIGMOID, OI_EV_TANH, OI_EV_ERF, OI_EV_SIN, OI_EV_COS, OI_EV_ISNAN, OI_EV_ISINF,
} oi_ev;

typedef struct oi_fold_row oi_fold_row;
/* in[i]: input i's host tensor (NULL: an omitted optional input) */
typedef bool (*oi_eval_fn)(imp *im, const oi_fold_row *row, const onnx_tensor *const *in, int n);
struct oi_fold_row {
  const char *op;
  int since;        /* the first opset of this form (older models: not folded) */
  int min_inputs;   /* inputs that must be present */
  oi_eval_fn eval;
  oi_ev code;       /* for the shared evaluators */
  const char *attrs; /* the attributes it reads (others: an error) */
};

#define OI_FOLD_MAX ((int64_t)1 << 24) /* elements of a value computed at import */

bool oi_float_like(int dtype);
void oi_elem_set_i64(onnx_tensor *t, int64_t i, int64_t v);
void oi_elem_set_f64(onnx_tensor *t, int64_t i, double v);
onnx_tensor *oi_fold_tensor(imp *im, int dtype, int rank, const int64_t *dims);
bool oi_fold_define(imp *im, int k, const onnx_tensor *t);
bool oi_bcast_dims(imp *im, const onnx_tensor *const *in, int n, int *rank, int64_t *dims);
int64_t oi_bcast_index(const onnx_tensor *t, int rank, const int64_t *dims, int64_t i);
bool oi_eval_elementwise(imp *im, const oi_fold_row *row, const onnx_tensor *const *in, int n);
bool oi_eval_where(imp *im, const oi_fold_row *row, const onnx_tensor *const *in, int n);
bool oi_eval_range(imp *im, const oi_fold_row *row, const onnx_tensor *const *in, int n);
bool oi_eval_cumsum(imp *im, const oi_fold_row *row, const onnx_tensor *const *in, int n);
bool oi_eval_trilu(imp *im, const oi_fold_row *row, const onnx_tensor *const *in, int n);
bool oi_eval_reduce(imp *im, const oi_fold_row *row, const onnx_tensor *const *in, int n);

/* onnx_lower.c and onnx_fold.c: the lowerings of onnx_ops.def */
bool oi_lower_identity(imp *im, const onnx_node *n, const op_row *row);
bool oi_lower_constant(imp *im, const onnx_node *n, const op_row *row);
bool oi_lower_dropout(imp *im, const onnx_node *n, const op_row *row);
bool oi_lower_unary(imp *im, const onnx_node *n, const op_row *row);
bool oi_lower_binary(imp *im, const onnx_node *n, const op_row *row);
bool oi_lower_matmul(imp *im, const onnx_node *n, const op_row *row);
bool oi_lower_gemm(imp *im, const onnx_node *n, const op_row *row);
bool oi_lower_softmax(imp *im, const onnx_node *n, const op_row *row);
bool oi_lower_layer_norm(imp *im, const onnx_node *n, const op_row *row);
bool oi_lower_cast(imp *im, const onnx_node *n, const op_row *row);
bool oi_lower_reshape(imp *im, const onnx_node *n, const op_row *row);
bool oi_lower_flatten(imp *im, const onnx_node *n, const op_row *row);
bool oi_lower_squeeze_unsqueeze(imp *im, const onnx_node *n, const op_row *row);
bool oi_lower_transpose(imp *im, const onnx_node *n, const op_row *row);
bool oi_lower_concat(imp *im, const onnx_node *n, const op_row *row);
bool oi_lower_slice(imp *im, const onnx_node *n, const op_row *row);
bool oi_lower_pad(imp *im, const onnx_node *n, const op_row *row);
bool oi_lower_variadic(imp *im, const onnx_node *n, const op_row *row);
bool oi_lower_reciprocal(imp *im, const onnx_node *n, const op_row *row);
bool oi_lower_alpha_unary(imp *im, const onnx_node *n, const op_row *row);
bool oi_lower_hard_sigmoid(imp *im, const onnx_node *n, const op_row *row);
bool oi_lower_clip(imp *im, const onnx_node *n, const op_row *row);
bool oi_lower_prelu(imp *im, const onnx_node *n, const op_row *row);
bool oi_lower_prelu_channels(imp *im, const onnx_node *n, const op_row *row);
bool oi_lower_where(imp *im, const onnx_node *n, const op_row *row);
bool oi_lower_reduce(imp *im, const onnx_node *n, const op_row *row);
bool oi_lower_split(imp *im, const onnx_node *n, const op_row *row);
bool oi_lower_rnn(imp *im, const onnx_node *n, const op_row *row); /* recurrent layers: onnx_rnn.c */
bool oi_lower_gelu(imp *im, const onnx_node *n, const op_row *row);
bool oi_lower_size(imp *im, const onnx_node *n, const op_row *row);
bool oi_lower_activation(imp *im, const onnx_node *n, const op_row *row);
bool oi_lower_resize(imp *im, const onnx_node *n, const op_row *row); /* onnx_resize.c */
bool oi_lower_einsum(imp *im, const onnx_node *n, const op_row *row);  /* onnx_resize.c */

/* onnx_int.c: integers and booleans at run time */
ir_node *oi_int_operand(imp *im, imp_val *v);
bool oi_lower_cast_int(imp *im, int64_t to);
bool oi_lower_where_rt(imp *im);
bool oi_check_numeric(imp *im, ir_node *const *srcs, int n);
bool oi_lower_compare(imp *im, const onnx_node *n, const op_row *row);
bool oi_lower_logic(imp *im, const onnx_node *n, const op_row *row);
bool oi_lower_is_nan(imp *im, const onnx_node *n, const op_row *row);
bool oi_lower_gather(imp *im, const onnx_node *n, const op_row *row);
bool oi_lower_gather_nd(imp *im, const onnx_node *n, const op_row *row);

/* onnx_layout.c: NCHW values held channels last; convolutions, pooling,
 * batch normalization */
void oi_onnx_dims(const imp_val *v, int *rank, int64_t *dims);
ir_node *oi_plain(imp *im, imp_val *v);
ir_node *oi_channels_last(imp *im, imp_val *v);
ir_node *oi_operand_as(imp *im, imp_val *v, oi_layout *layout);
bool oi_define_output_as(imp *im, int k, ir_node *n, oi_layout layout, const ir_type *cl);
bool oi_val_alias(imp *im, const char *name, const imp_val *v);
bool oi_eltwise_operands(imp *im, imp_val **vals, int n, ir_node **out, oi_layout *layout, ir_type *cl);
bool oi_flatten_cl(imp *im, imp_val *v, bool *done);
const float *oi_rows_from_flat_cl(imp *im, const ir_type *cl, const float *w, int64_t K, int64_t P);
bool oi_lower_conv(imp *im, const onnx_node *n, const op_row *row);
bool oi_lower_conv_transpose(imp *im, const onnx_node *n, const op_row *row);
bool oi_lower_pool(imp *im, const onnx_node *n, const op_row *row);
bool oi_lower_global_pool(imp *im, const onnx_node *n, const op_row *row);
bool oi_lower_reduce_mean(imp *im, const onnx_node *n, const op_row *row);
bool oi_lower_batch_norm(imp *im, const onnx_node *n, const op_row *row);

#endif
