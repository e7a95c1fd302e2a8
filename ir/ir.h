/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ir.h: castor's typed graph IR.
 *
 * A graph is a schedule (a list in execution order) of nodes; a node is an
 * SSA value: an op from ir_ops.def, a result type (dtype + shape whose first
 * dimension may be the symbolic batch N), up to IR_MAX_SRCS sources defined
 * earlier in the schedule, and the attribute member its op documents. The
 * graph's arena owns every node and string; nothing is freed one by one.
 *
 * The text form (ir_print / ir_parse) round-trips byte for byte; its grammar
 * is in ir/README.md.
 */
#ifndef CASTOR_IR_H
#define CASTOR_IR_H

#include "util/diag.h"
#include "util/dtype.h"
#include "util/util.h"

/* Attribute keys (ir_attrs.def) and the op-table columns (ir_ops.def). */
typedef enum ir_attr_key {
#define IR_ATTR(key, kind, doc) IR_ATTR_##key,
#include "ir/ir_attrs.def"
#undef IR_ATTR
  IR_ATTR_COUNT
} ir_attr_key;

typedef enum ir_attr_kind {
  IR_ATTR_KIND_INT,
  IR_ATTR_KIND_FLOAT,
  IR_ATTR_KIND_DTYPE,
  IR_ATTR_KIND_STRING,
  IR_ATTR_KIND_SHAPE,
  IR_ATTR_KIND_INTS, /* a list of integers: perm=[0,2,1,3] */
  IR_ATTR_KIND_STATE, /* a state kind (ir_state_kind): kind=slot */
} ir_attr_kind;

/* What a training program's state is (a `variable`'s kind=), decided where
 * the grad pass creates it: what the API saves and copies as the model's
 * weights (WEIGHT, NONTRAINABLE), what only the optimizer keeps (SLOT,
 * SCALAR). NONE: not set, which the verifier rejects. */
typedef enum ir_state_kind {
  IR_STATE_NONE,
  IR_STATE_WEIGHT,       /* weight: a trainable model weight (dense_1.kernel) */
  IR_STATE_NONTRAINABLE, /* nontrainable: a model variable no gradient updates
                          * (batch norm's moving statistics) */
  IR_STATE_SLOT,         /* slot: an optimizer slot of one weight (.momentum, .velocity) */
  IR_STATE_SCALAR,       /* scalar: a training scalar (step count, loss scale and its
                          * counter, learning rate) */
  IR_STATE_COUNT
} ir_state_kind;

/* A set of attribute keys, bit k for key k (ir_op_attrs). */
typedef uint64_t ir_attr_set;

/* The attribute set of an op row: A(acc) | A(to). */
#define A(key) ((ir_attr_set)1 << IR_ATTR_##key)

enum {
  IR_OPF_LEAF = 1 << 0,       /* no sources: input or constant */
  IR_OPF_KEEPS_ZERO = 1 << 1, /* zero operands give zero (pad8 runs it on zero padding) */
  IR_OPF_ACTIVATION = 1 << 2, /* a Keras activation name for dense/activation layers */
  IR_OPF_STATE = 1 << 3,      /* a variable: persistent state of a training program */
  IR_OPF_PAD8 = 1 << 4,       /* a contraction a [M,K] x b [K,Nc]: in 16-bit dtypes pad8 pads
                               * K and Nc to multiples of 8 (passes/pad8.c); conv2d: C and O */
  IR_OPF_INTEGERS = 1 << 5,   /* an element-wise op that also computes on operands of one integer
                               * dtype (i32, i64: in i64 lanes, wrapping; integers and booleans) */
  IR_OPF_ROUNDING_COMMUTES = 1 << 6, /* a one-operand element-wise op with f(round(u)) = round(f(u)) bit
                                      * for bit in f16 and bf16 for every f32 u (relu: a sign test), so a
                                      * chain rounds once, after it (cg_chain.c); clip is not one:
                                      * clip(-tiny, 0, 6) is +0, clip(round(-tiny)) -0 */
};
/* Updates its first n operands (variables) in place: an effect, never dead. */
#define IR_OPF_WRITES(n) ((unsigned)(n) << 8)
/* The sources column of an op taking 1 to IR_MAX_SRCS operands. */
#define IR_VARIADIC (-1)

/* How ir_infer_type derives an op's result type (ir.c). */
typedef enum ir_type_rule {
  IR_TYPE_LEAF,    /* declared, not inferred */
  IR_TYPE_MATMUL,  /* [..,K] x [K,Nc] -> [..,Nc], one float dtype, b unbatched (a any rank >= 2) */
  IR_TYPE_BINARY,  /* operands of one float dtype, numpy-broadcast together (N only against N or 1,
                    * and staying dimension 0); the broadcast shape */
  IR_TYPE_UNARY,   /* a float operand; same type */
  IR_TYPE_ROWWISE, /* a float operand of rank >= 1; same type */
  IR_TYPE_NORM,    /* x float; gamma, beta (when the op takes them) x's dims from {axis} on,
                    * unbatched, x's dtype; x's type */
  IR_TYPE_NORM_GRAD, /* x, gamma as IR_TYPE_NORM's; dy x's type; x's type */
  IR_TYPE_CAST,    /* x's shape, dtype {to} */
  IR_TYPE_PAD,     /* x grown to {shape} */
  IR_TYPE_SLICE,   /* x shrunk to {shape} */
  IR_TYPE_MATMUL_NT, /* [..,Nc] x [K,Nc] -> [..,K], b unbatched */
  IR_TYPE_MATMUL_TN, /* [..,K] x [..,Nc] -> [K,Nc] unbatched, every leading dim summed */
  IR_TYPE_SUM_ROWS,  /* [M,C] -> [C], x's dtype */
  IR_TYPE_SAME,      /* operands of one float type; that type */
  IR_TYPE_LOSS,      /* a float [N,C]; b int32 [N] or a's type; f32 [] */
  IR_TYPE_LOSS_GRAD, /* a, b as a loss's; c f32 []; a's type */
  IR_TYPE_ALL_FINITE, /* float or i1 operands; i1 [] */
  IR_TYPE_UPDATE,    /* written operands and the gradient after them share one
                      * float unbatched type; then lr, s f32 [], ok i1 [], t i64 []; operand 0's type */
  IR_TYPE_SCALAR_UPDATE, /* the operands a row documents, all []; operand 0's type */
  /* training options: gradient clipping */
  IR_TYPE_GRAD_NORM,   /* a, s f32 [], then float operands; f32 [] */
  IR_TYPE_CLIP_SCALE,  /* s, q f32 []; f32 [] */
  IR_TYPE_CLIP_VALUE,  /* g float unbatched, s f32 []; g's type */
  /* general tensors: layout ops */
  IR_TYPE_RESHAPE,       /* x's elements as {shape}: same count, N first in both or neither */
  IR_TYPE_TRANSPOSE,     /* x's dims permuted by {perm}; N stays first */
  IR_TYPE_CONCAT,        /* operands of one type but along {axis}; that axis summed */
  IR_TYPE_STRIDED_SLICE, /* per dim ceil((end - start) / step) of {starts}, {ends}, {steps} */
  IR_TYPE_PAD_CONSTANT,  /* {shape}, x placed at {starts} by {steps} inside it */
  IR_TYPE_GATHER,        /* a unbatched, b int32 or int64: a's dims before {axis}, b's, a's after */
  IR_TYPE_GATHER_GRAD,   /* {shape}, unbatched: a = dy of a gather of {shape} by b */
  /* convolutional networks */
  IR_TYPE_CONV2D,    /* x [N,H,W,C], w [KH,KW,C,O] unbatched, one float dtype; [N,OH,OW,O] (ir_conv2d_out) */
  IR_TYPE_CONV2D_INPUT_GRAD,  /* dy [N,OH,OW,O], w [KH,KW,C,O]; {shape} [N,H,W,C] that conv2d maps to dy's */
  IR_TYPE_CONV2D_FILTER_GRAD, /* x [N,H,W,C], dy [N,OH,OW,O]; {shape} [KH,KW,C,O] unbatched, as above */
  IR_TYPE_POOL2D,    /* x [N,H,W,C] float; {pool}, {strides}, {pads} (each < its window); [N,OH,OW,C] */
  IR_TYPE_POOL2D_GRAD, /* dy, x: dy the pooling of x as above; x's type */
  /* general tensors */
  IR_TYPE_SUM_TO,  /* x float, {shape} broadcasts to x's shape; x's dtype, {shape} */
  /* general tensors: dropout, reductions (ir_tensor.c) */
  IR_TYPE_DROPOUT, /* x float, then (dropout_train) the step i64 []; {rate} in [0, 1); x's type */
  IR_TYPE_REDUCE,  /* x float; {axes} distinct dimensions of x, not N; x without them (or 1s: {keepdims}) */
  IR_TYPE_REDUCE_GRAD, /* dy = the reduction of x as above, x; x's type */
  IR_TYPE_BROADCAST_TO, /* x float numpy-broadcasts to {shape}; {shape} */
  /* convolutional networks: grouped convolution (groups = C / w's third dimension) */
  IR_TYPE_GROUP_CONV2D, /* x [N,H,W,C], w [KH,KW,C/G,O], O a multiple of G; [N,OH,OW,O] */
  IR_TYPE_GROUP_CONV2D_INPUT_GRAD,  /* dy, w; {shape} x's, as IR_TYPE_CONV2D_INPUT_GRAD with groups */
  IR_TYPE_GROUP_CONV2D_FILTER_GRAD, /* x, dy; {shape} w's [KH,KW,C/G,O] unbatched */
  /* general tensors: batched matmul */
  IR_TYPE_BATCH_MATMUL, /* [.., M, K] x [.., K, Nc] (each maybe transposed), one float dtype; the leading
                         * dims broadcast (numpy matmul), rank >= 3, N only leading; [.., M, Nc] */
  /* recurrent layers (ir_rnn.c) */
  IR_TYPE_RNN, /* xp [N,T,G*H], r [H,G*H] unbatched, (gru) rb [G*H], states [N,H], one float dtype;
                * [N,T,H] (lstm: [N,T,2,H]), G the op's gates (ir_rnn_gates) */
  /* integers and booleans: i1 results, numpy-broadcast operands */
  IR_TYPE_COMPARE, /* a, b of one dtype (float or integer); i1 of the broadcast shape */
  IR_TYPE_LOGIC,   /* i1 operands; i1 of the broadcast shape */
  IR_TYPE_IS_NAN,  /* a float operand; i1 of its shape */
  IR_TYPE_RNN_GRAD, /* the forward op's operands, then its result y and dy of y's type; [N,T,2*G*H+2*H] */
} ir_type_rule;

/* The autocast pass's class of an op (passes/autocast.c). */
typedef enum ir_ac_class {
  IR_AC_LEAF,  /* inputs and constants: not retyped */
  IR_AC_ALLOW, /* computes in its layer's compute dtype (matmul) */
  IR_AC_INFER, /* follows its layer's matmul or its 16-bit neighbours (TF AMP) */
  IR_AC_DENY,  /* always f32, operands upcast (softmax, normalization) */
  IR_AC_CLEAR, /* moves data: takes its first operand's dtype */
  IR_AC_FIXED, /* keeps the dtype it has (explicit casts) */
} ir_ac_class;

/* How code generation groups an op into kernels (codegen/cg_plan.c). */
typedef enum ir_kernel_class {
  IR_KERNEL_NONE,     /* a buffer, no kernel (leaves) */
  IR_KERNEL_CONTRACT, /* starts a GEMM kernel with an elementwise epilogue */
  IR_KERNEL_ELTWISE,  /* elementwise: starts a chain or fuses into the kernel before it */
  IR_KERNEL_ROWWISE,  /* one row of its last dimension(s) at a time (reductions) */
  IR_KERNEL_REINDEX,  /* moves elements to other coordinates (pad, slice, layout ops) */
  IR_KERNEL_REDUCE,   /* sums over the rows (the batch) in row order */
  IR_KERNEL_UPDATE,   /* updates variables in place, element by element */
} ir_kernel_class;

/* The flops column of a contraction: 2 per result element and summed index. */
#define IR_FLOPS_CONTRACT (-1)

typedef enum ir_op {
#define IR_OP(e, name, nsrc, attrs, flags, rule, ac, kernel, flops, sem) IR_OP_##e,
#include "ir/ir_ops.def"
#undef IR_OP
  IR_OP_COUNT
} ir_op;

/* The IR's element types: the one dtype table (util/dtype.h). */
typedef dtype_id ir_dtype;

typedef enum ir_policy {
  IR_POLICY_NONE = 0, /* node: no per-layer override */
#define IR_POLICY(e, name, compute, variable) IR_POLICY_##e,
#include "ir/ir_policies.def"
#undef IR_POLICY
  IR_POLICY_COUNT
} ir_policy;

enum { IR_MAX_RANK = TENSOR_MAX_RANK, IR_MAX_SRCS = 8 };
/* Most integers in an INTS attribute: two per dimension of rank 6 (a pad's
 * before and after). */
enum { IR_MAX_INTS = 12 };
#define IR_DIM_BATCH ((int64_t)-1) /* the symbolic batch dimension N */

typedef struct ir_type {
  ir_dtype dtype;
  int rank;
  int64_t dims[IR_MAX_RANK];
} ir_type;

typedef struct ir_shape {
  int rank;
  int64_t dims[IR_MAX_RANK]; /* dims[0] may be N */
} ir_shape;

/* C types of the attribute kinds. */
typedef int64_t ir_attr_INT;
typedef double ir_attr_FLOAT;
typedef ir_dtype ir_attr_DTYPE;
typedef const char *ir_attr_STRING;
typedef ir_shape ir_attr_SHAPE;
typedef struct ir_ints {
  int n;
  int64_t v[IR_MAX_INTS];
} ir_attr_INTS;
typedef ir_state_kind ir_attr_STATE;

/* A node's attributes: one member per key of ir_attrs.def; the keys its op
 * takes (ir_op_attrs) are live, the others zero. */
typedef struct ir_attr {
#define IR_ATTR(key, kind, doc) ir_attr_##kind key;
#include "ir/ir_attrs.def"
#undef IR_ATTR
  const void *data; /* CONST: row-major data in the node's dtype; NULL in IR read from
                     * text. Not a text attribute. */
} ir_attr;

typedef struct ir_node {
  ir_op op;
  ir_type type;
  int n_srcs;
  struct ir_node *srcs[IR_MAX_SRCS];
  ir_attr attr;
  ir_policy policy; /* per-layer dtype= override, IR_POLICY_NONE if none */
  bool in_policy;   /* computes in its (layer's or global) policy's compute dtype, as an allow
                     * op, not by autocast's infer rule: a Keras layer whose call casts its
                     * input and constants to its compute dtype (Rescaling). Text field
                     * {compute=policy} */
  bool frozen;      /* CONST: a constant of the model that training leaves as it is (an ONNX
                     * Constant node's value, an importer's literal), not a weight the grad
                     * pass turns into a variable. Text field {trainable=false} */
  const char *name; /* value name without '%'; unique in the graph */
  const char *note; /* free text for people, printed as a trailing comment; may be NULL.
                     * Nothing is read back out of it */
  const char *layer; /* the model layer this node computes or serves; may be NULL.
                      * Text field {layer=dense_1} */
  const char *rule;  /* why the node has its dtype (autocast's rule: the reason of a cast,
                      * for the cast report; pad8's pad8/pad8-zero); may be NULL. Text
                      * field {rule="mixed_float16"} */
  diag_loc loc;     /* where it came from in the model file; passes copy it */
  int id;           /* position in the schedule (ir_graph_renumber) */
} ir_node;

typedef struct ir_output {
  const char *name; /* the model's name for this output */
  ir_node *value;
} ir_output;

typedef struct ir_graph {
  arena *arena;
  const char *name;
  ir_policy policy; /* global policy */
  ir_node **nodes;  /* the schedule */
  int n_nodes, cap_nodes;
  ir_output *outputs;
  int n_outputs, cap_outputs;
  /* name -> the last node inserted under it (and the next suffix to try
   * for ir_graph_unique_name): ir_graph_find's index, kept by
   * ir_graph_insert and ir_graph_rename; entries of removed nodes stay
   * and are checked at lookup (ir.c) */
  hmap names;
} ir_graph;

/* ---- tables ---- */

const char *ir_op_name(ir_op op);
int ir_op_arity(ir_op op); /* number of sources, or IR_VARIADIC */
bool ir_op_arity_ok(ir_op op, int n_srcs);
/* "2", or "1 to 8" for a variadic op (static storage). */
const char *ir_op_arity_str(ir_op op);
/* How many leading operands the op updates in place (IR_OPF_WRITES); 0: none. */
int ir_op_writes(ir_op op);
ir_attr_set ir_op_attrs(ir_op op); /* bit k: takes attribute key k */
unsigned ir_op_flags(ir_op op);
ir_type_rule ir_op_type_rule(ir_op op);
ir_ac_class ir_op_autocast(ir_op op);
ir_kernel_class ir_op_kernel(ir_op op);
int ir_op_flops(ir_op op); /* per result element, or IR_FLOPS_CONTRACT */
const char *ir_op_semantics(ir_op op);
const char *ir_ac_class_name(ir_ac_class c);        /* "allow" */
const char *ir_kernel_class_name(ir_kernel_class k); /* "eltwise" */
bool ir_op_from_name(const char *s, size_t n, ir_op *out);

const char *ir_attr_name(ir_attr_key k);
ir_attr_kind ir_attr_kind_of(ir_attr_key k);
const char *ir_attr_meaning(ir_attr_key k);
bool ir_attr_from_name(const char *s, size_t n, ir_attr_key *out);
/* A state kind's text name ("slot"; "none" for IR_STATE_NONE), and back. */
const char *ir_state_kind_name(ir_state_kind k);
bool ir_state_kind_from_name(const char *s, size_t n, ir_state_kind *out);
/* The member of a that holds key k (of k's kind's C type, ir_attr_INT...). */
void *ir_attr_slot(ir_attr *a, ir_attr_key k);
const void *ir_attr_get(const ir_attr *a, ir_attr_key k);
/* Appends attribute k's value in the text form (acc=f32 without the key:
 * "f32"); doubles print in their shortest form that reads back exactly. */
void ir_attr_print(const ir_attr *a, ir_attr_key k, str_buf *out);
/* The same for a value v of a kind (the C type ir_attr_<KIND>). */
void ir_attr_value_print(ir_attr_kind kind, const void *v, str_buf *out);
/* Reads a value of a kind (the text ir_attr_value_print writes, alone on the
 * first line of text[0..len)) into *out (of the kind's C type), strings in
 * g's arena; false, with a diagnostic at file:1:col in d, if it is not one. */
bool ir_attr_value_parse(ir_graph *g, ir_attr_kind kind, const char *file, const char *text, size_t len,
                         void *out, diag_sink *d);


const char *ir_policy_name(ir_policy p);
ir_dtype ir_policy_compute_dtype(ir_policy p);
ir_dtype ir_policy_variable_dtype(ir_policy p);
bool ir_policy_from_name(const char *s, size_t n, ir_policy *out);

/* ---- types ---- */

/* A conv2d's output size along one spatial dimension: input size `in`,
 * kernel size k, stride, dilation and the pads before and after; <= 0 when
 * the window does not fit. */
int64_t ir_conv_out_size(int64_t in, int64_t k, int64_t stride, int64_t dilation, int64_t pad0, int64_t pad1);

bool ir_type_eq(const ir_type *a, const ir_type *b);
/* Does a node of op `op` with attributes attr declare an acceptable result
 * type, given the inferred one? Equal, or a contraction of 16-bit operands
 * whose result keeps its f32 sums: dtype {acc}, the same shape (autocast
 * gives one so when only a batch norm reads it). */
bool ir_result_type_ok(ir_op op, const ir_attr *attr, const ir_type *inferred, const ir_type *declared);
bool ir_type_is_batched(const ir_type *t);
/* A dimension of t is 0: t holds no element (in any batch). */
bool ir_type_is_empty(const ir_type *t); /* first dim is N */
/* Elements per row-of-batch (product of dims after the first) when batched,
 * or all elements otherwise. False on int64 overflow. */
bool ir_type_inner_numel(const ir_type *t, int64_t *out);
/* Element count for a concrete batch (batch ignored if not batched). */
bool ir_type_numel(const ir_type *t, int64_t batch, int64_t *out);
/* The index a contraction node sums over: srcs[*out_operand]'s dimension
 * *out_dim, by the op's type rule; false if the rule is not a contraction's. */
bool ir_node_contraction(const ir_node *n, int *out_operand, int *out_dim);
/* Floating-point operations of node n at a batch (ir_ops.def's flops column). */
int64_t ir_node_flops(const ir_node *n, int64_t batch);
/* Bytes for a concrete batch; false on overflow. */
bool ir_type_bytes(const ir_type *t, int64_t batch, int64_t *out);
void ir_type_print(const ir_type *t, str_buf *out); /* f32[N,784] */
/* Largest tensor castor accepts, in bytes (sizes beyond it are errors). */
#define IR_MAX_TENSOR_BYTES ((int64_t)1 << 40)
/* Most nodes a model's graph may have for castor to compile it (a dense
 * layer is 2-5 nodes). Every stage is linear in the graph's size, and
 * repeated layers share compiled kernels, so 10,000 dense layers compile in
 * about a second; the cap keeps the worst case to seconds and bounded memory.
 * A larger graph is a clear error at the first node past the cap. */
#define IR_MAX_NODES 100000

/* ---- graph ---- */

ir_graph *ir_graph_create(const char *name);
void ir_graph_destroy(ir_graph *g); /* NULL is a no-op */
/* A deep copy of nodes and strings; constant data is shared with src (which
 * must outlive the copy). src's ids must be current. */
ir_graph *ir_graph_clone(const ir_graph *src);
void ir_graph_append(ir_graph *g, ir_node *n);
/* Inserts n right before the node at schedule position pos. */
void ir_graph_insert(ir_graph *g, int pos, ir_node *n);
void ir_graph_add_output(ir_graph *g, const char *name, ir_node *value);
/* Renumbers node ids to their schedule positions. */
void ir_graph_renumber(ir_graph *g);
/* Rewrites every use of `from` (sources and outputs) to `to`. */
void ir_graph_replace_uses(ir_graph *g, ir_node *from, ir_node *to);
/* Removes the nodes for which keep[id] is false (ids must be current). */
void ir_graph_compact(ir_graph *g, const bool *keep);
/* The node named `name` in g's schedule, or NULL: O(1) expected through
 * g->names (a name given to a node after it was inserted must go through
 * ir_graph_rename). */
ir_node *ir_graph_find(const ir_graph *g, const char *name);
/* A name not yet used in g: base, or base.1, base.2, ... (arena-owned);
 * amortized O(1): each base remembers the suffix it reached. */
const char *ir_graph_unique_name(const ir_graph *g, const char *base);
/* Renames n (in g's schedule) to name (copied into g's arena). */
void ir_graph_rename(ir_graph *g, ir_node *n, const char *name);
int ir_graph_num_inputs(const ir_graph *g);
ir_node *ir_graph_input(const ir_graph *g, int index); /* NULL if none */
/* Counts of uses per node id (sources + outputs); caller frees. */
int *ir_graph_use_counts(const ir_graph *g);

/* ---- builder: creates and appends nodes with inferred types ----
 * ir_infer_type computes an op's result type from its sources and reports
 * why it cannot (shape or dtype mismatch) into err; the frontend and the
 * verifier use it to produce diagnostics. The ir_build_* functions assert
 * that inference succeeds: check first where inputs come from users. */

bool ir_infer_type(ir_op op, ir_node *const *srcs, int n_srcs, const ir_attr *attr,
                   ir_type *out, char *err, size_t errlen);

ir_node *ir_node_new(ir_graph *g, ir_op op, const ir_type *type, ir_node *const *srcs,
                     int n_srcs, const char *name, diag_loc loc);
ir_node *ir_build_input(ir_graph *g, const char *name, const ir_type *type, int index,
                        diag_loc loc);
ir_node *ir_build_const(ir_graph *g, const char *name, const ir_type *type,
                        const char *weight, const void *data, diag_loc loc);
/* Any non-leaf op with attributes attr (the keys its op takes). */
ir_node *ir_build_op(ir_graph *g, ir_op op, const char *name, ir_node *const *srcs, int n_srcs,
                     const ir_attr *attr, diag_loc loc);
ir_node *ir_build_matmul(ir_graph *g, const char *name, ir_node *a, ir_node *b, ir_dtype acc,
                         diag_loc loc);
ir_node *ir_build_binary(ir_graph *g, ir_op op, const char *name, ir_node *a, ir_node *b,
                         diag_loc loc);
ir_node *ir_build_unary(ir_graph *g, ir_op op, const char *name, ir_node *x, diag_loc loc);
ir_node *ir_build_cast(ir_graph *g, const char *name, ir_node *x, ir_dtype to, diag_loc loc);
/* PAD or SLICE of x to dims (x's rank of them). */
ir_node *ir_build_reshape_op(ir_graph *g, ir_op op, const char *name, ir_node *x, const int64_t *dims,
                             diag_loc loc);

/* The first dimension a layer_norm (or one of its gradient ops) with this
 * axis normalizes (axis < 0 counts from the end), or -1 if it is not a
 * dimension of x. */
int ir_norm_first_dim(const ir_type *x, int64_t axis);

/* general tensors: layout ops (ir_layout.c) */
/* The result type of a layout op (type rules IR_TYPE_RESHAPE ..
 * IR_TYPE_PAD_CONSTANT); false with a message naming the shapes. */
bool ir_infer_layout(ir_op op, ir_node *const *srcs, int n_srcs, const ir_attr *attr, ir_type *out, char *err,
                     size_t errlen);
/* The gather of a table of type a by indices of type b along `axis`
 * (negative: counted from the end): its result type; the dimension the
 * indices replace in *out_axis; false with a message if invalid. */
bool ir_gather_type(const ir_type *a, const ir_type *b, int64_t axis, ir_type *out, int *out_axis, char *err,
                    size_t errlen);
/* A concat's axis of operand type x (negative counts from the end), or -1. */
int ir_concat_axis(const ir_type *x, int64_t axis);
/* A strided_slice of x: per dimension the first coordinate taken and the
 * count taken (IR_DIM_BATCH for N), the attributes normalized (negative
 * counted from the end, ends clamped); false with a message if invalid. */
bool ir_strided_slice_bounds(const ir_type *x, const ir_attr *attr, int64_t *starts, int64_t *counts, char *err,
                             size_t errlen);
/* recurrent layers (ir_rnn.c): the gates of a recurrent op (1 simple_rnn,
 * 3 gru, 4 lstm), its states (1, lstm 2), and its result type. */
int ir_rnn_gates(ir_op op);
int ir_rnn_states(ir_op op);
/* The forward op of a recurrent gradient op (lstm of lstm_grad), or IR_OP_COUNT; the gates and
 * states of a gradient op are its forward op's. */
ir_op ir_rnn_forward(ir_op op);
/* Whether a recurrent op's result holds each step's activated gates after its states (lstm_train). */
bool ir_rnn_reserve(ir_op op);
/* The width of a recurrent gradient op's result per step: dxp [G*H], du [G*H], p1 [H], p2 [H]. */
int64_t ir_rnn_grad_width(ir_op op, int64_t h);
/* The operands of a recurrent op (forward or gradient) before its optional
 * mask; its mask (i1 [N,T], the last operand: Keras's mask, step t of row n
 * taken where true, the state carried over where false), or NULL. */
int ir_rnn_n_operands(ir_op op);
const ir_node *ir_rnn_mask(const ir_node *n);
bool ir_infer_rnn_grad(ir_op op, ir_node *const *srcs, int n_srcs, const ir_attr *attr, ir_type *out, char *err,
                       size_t errlen);
bool ir_infer_rnn(ir_op op, ir_node *const *srcs, int n_srcs, const ir_attr *attr, ir_type *out, char *err,
                  size_t errlen);
/* general tensors: dropout, reductions (ir_tensor.c) */
/* The result type of an op of type rule IR_TYPE_DROPOUT and after; false
 * with a message naming the shapes. */
bool ir_infer_tensor(ir_op op, ir_node *const *srcs, int n_srcs, const ir_attr *attr, ir_type *out, char *err,
                     size_t errlen);
/* dropout_train's mask, which both targets' kernels and the reference
 * compute bit for bit: the step's key from the op's seed and the training
 * step, a 24-bit hash of the key and an element's flat index, and the
 * threshold below which an element is dropped (0 for rate 0: every
 * element kept). Counter-based: an element's bit depends on nothing else,
 * so any split of the elements over threads gives the same mask. */
uint64_t ir_dropout_key(int64_t seed, int64_t step);
uint32_t ir_dropout_hash(uint64_t key, int64_t i);
uint32_t ir_dropout_threshold(double rate);
/* A reduction's dimensions of x: reduced[d] for each d < x->rank (from
 * {axes}, negative counted from the end); false with a message if an axis
 * is out of range, repeated, or N. */
bool ir_reduce_dims(ir_op op, const ir_type *x, const ir_attr *attr, bool *reduced, char *err, size_t errlen);
/* split: x cut along `axis` (negative: counted from the end; not N) into
 * n pieces of sizes[0..n) (NULL: n equal pieces), each a strided_slice
 * node (so each piece's gradient is that slice's, and the pieces' sum
 * back). ir_split_check says whether the split is valid (false with a
 * message naming x's shape and the sizes); ir_build_split asserts it,
 * appends the n slices named NAME.0, NAME.1, ... and puts them in out. */
bool ir_split_check(const ir_type *x, int64_t axis, int n, const int64_t *sizes, char *err, size_t errlen);
void ir_build_split(ir_graph *g, const char *name, ir_node *x, int64_t axis, int n, const int64_t *sizes, diag_loc loc,
                    ir_node **out);
/* ---- general tensors: the batch N ----
 * Only the batch N is symbolic, and only as dimension 0 (a model with a
 * variable sequence length is compiled once per length). */

/* The one check, and the one message, for an op whose result would carry
 * the batch N anywhere but in dimension 0: a reshape that folds N into
 * another dimension ([N,T,C] to [N*heads,T,d]), a transpose that moves
 * dimension 0, a broadcast whose result puts N behind another dimension.
 * `stays` says whether op on x keeps N leading; when it does not, writes
 * "OP of X would move the batch dimension N out of dimension 0 (HOW); only
 * the batch is symbolic: give it a fixed size with --batch B
 * (castor_compile_options.batch)" into err and returns false, so a type
 * rule can return it (the caller reports it at the node, with its name).
 * True, err untouched, when stays or x has no batch. */
bool ir_batch_stays_leading(ir_op op, const ir_type *x, bool stays, const char *how, char *err,
                            size_t errlen);

/* Binds the batch: every N of g (in types and in shape attributes) becomes
 * `batch`, so g has static shapes only. False (err: why) when batch < 1 or
 * a tensor would exceed IR_MAX_TENSOR_BYTES; g is then unchanged. */
bool ir_graph_bind_batch(ir_graph *g, int64_t batch, char *err, size_t errlen);

/* Whether a graph of static shapes computes the rows of its dimension 0
 * apart, as a batch of images: B >= 2, the first input's dimension 0, when
 * every value but a leaf has B as dimension 0 and its row n reads only row
 * n of the values that have (an input of B rows, or a value computed from
 * one) and constants whole: elementwise ops, a conv or matmul over constant
 * weights, pooling, batch_matmul, a recurrent layer, and row-wise,
 * reduction and layout ops off dimension 0. Else 0: training ops, losses,
 * anything else, a value computed from constants alone, a padded row count.
 * Codegen then lets the runtime run a batch an image at a time
 * (rt_program.images). */
int64_t ir_graph_rows_separate(const ir_graph *g);

/* ---- verifier: structural and type invariants; reports through d ---- */

bool ir_verify(const ir_graph *g, diag_sink *d);

/* ---- text form ---- */

void ir_print(const ir_graph *g, str_buf *out);
void ir_print_node(const ir_node *n, str_buf *out);
/* Graphviz DOT of g (ir_dot.c): values coloured by dtype, layers as
 * clusters, casts labelled with their reason. extra[id] (NULL, or entries
 * NULL) adds a line to a node's label; alarm[id] (may be NULL) draws it
 * with a thick red border. g's ids must be current. */
void ir_print_dot(const ir_graph *g, const char *const *extra, const bool *alarm, str_buf *out);
/* Parses the text form; NULL (with diagnostics in d) on error. */
ir_graph *ir_parse(const char *file, const char *text, size_t len, diag_sink *d);
/* Largest IR text file castor-opt reads (the text holds no weight data: a
 * 10,000-layer model's IR is about 3 MB). */
#define IR_MAX_TEXT_BYTES ((int64_t)64 << 20)

#endif
