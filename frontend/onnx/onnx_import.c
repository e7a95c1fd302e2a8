/*
 * onnx_import.c: ONNX graphs into castor's IR (onnx_frontend.h).
 *
 * One pass over the nodes, in the file's order (ONNX requires a
 * topological order; a node that uses a value no earlier node defines is an
 * error, which also catches cycles). Each value name maps to an imp_val:
 * either an IR node (a run-time value) or a host constant (an initializer,
 * a Constant node, a graph input bound to data with fe_options.bindings,
 * or the folded result of a node whose inputs are all constants). A
 * constant becomes an IR const node, once, where a run-time op first uses
 * it as an operand; ops that need compile-time data (a shape, axes, Gemm's
 * B to transpose) read the host constant.
 *
 * Each op is a row of onnx_ops.def: its opset range, its lowering and the
 * attributes it reads; any other attribute is an error, so that nothing a
 * model says is silently ignored.
 */
#include "frontend/onnx/onnx_frontend.h"

#include "formats/onnx.h"
#include "util/half.h"

#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct imp_val {
  const char *name;
  ir_node *node;         /* run-time value, or its const node once materialized */
  const onnx_tensor *k;  /* host constant, or NULL */
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
  /* the node being lowered */
  const onnx_node *node;
  const char *layer;
  diag_loc loc;
  bool failed;
};

/* ---- diagnostics ---- */

static diag_loc model_loc(imp *im) { return (diag_loc){im->file, 0, 0}; }

/* Reports the node's first error (later ones would only echo it); false. */
static bool fail_kind(imp *im, diag_kind kind, const char *fmt, ...) CASTOR_PRINTF(3, 4);
static bool fail_kind(imp *im, diag_kind kind, const char *fmt, ...) {
  if (im->failed) return false;
  im->failed = true;
  va_list ap;
  va_start(ap, fmt);
  diag_verror_kind(im->d, kind, im->node ? im->loc : model_loc(im), fmt, ap);
  va_end(ap);
  return false;
}
#define FAIL(im, ...) fail_kind((im), DIAG_KIND_INVALID_MODEL, __VA_ARGS__)
#define UNSUPPORTED(im, ...) fail_kind((im), DIAG_KIND_UNSUPPORTED, __VA_ARGS__)

/* ---- names ---- */

/* An IR identifier for an ONNX name: leading '/' and other non-identifier
 * bytes dropped, then letters, digits and '_' kept and every other byte
 * '_', 'v' before a leading digit; unique in the graph ("/fc1/Gemm" ->
 * fc1_Gemm, "onnx::MatMul_7" -> onnx__MatMul_7). */
static const char *ir_name(imp *im, const char *onnx_name, const char *fallback) {
  const char *s = onnx_name && *onnx_name ? onnx_name : fallback;
  while (*s && !((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') || *s == '_')) s++;
  if (!*s) s = fallback;
  size_t n = strlen(s);
  char *b = arena_alloc(im->g->arena, n + 2);
  size_t o = 0;
  if (!((s[0] >= 'a' && s[0] <= 'z') || (s[0] >= 'A' && s[0] <= 'Z') || s[0] == '_')) b[o++] = 'v';
  for (size_t i = 0; i < n; i++) {
    char c = s[i];
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
    b[o++] = ok ? c : '_';
  }
  b[o] = 0;
  return ir_graph_unique_name(im->g, b);
}

/* ---- values ---- */

static imp_val *val_find(imp *im, const char *name) {
  return hmap_get_str(&im->vals, name, strlen(name));
}

static bool val_define(imp *im, const char *name, ir_node *node, const onnx_tensor *k) {
  if (!*name) return true; /* an omitted optional output */
  imp_val *v = arena_alloc(im->g->arena, sizeof *v);
  *v = (imp_val){.name = name, .node = node, .k = k};
  if (hmap_put_str(&im->vals, name, strlen(name), v))
    return FAIL(im, "value '%s' is defined twice (ONNX graphs are in SSA form)", name);
  return true;
}

/* Input k of the current node, which must be present. */
static imp_val *input(imp *im, int k) {
  const onnx_node *n = im->node;
  if (k >= n->n_inputs || !*n->inputs[k]) {
    FAIL(im, "%s needs input %d, which the node does not give", n->op_type, k + 1);
    return NULL;
  }
  imp_val *v = val_find(im, n->inputs[k]);
  if (!v)
    FAIL(im, "input '%s' is defined by no earlier node, graph input or initializer (the graph "
             "is not topologically sorted, or has a cycle)", n->inputs[k]);
  return v;
}

static bool has_input(imp *im, int k) {
  return k < im->node->n_inputs && *im->node->inputs[k];
}

static bool dims_of(imp *im, const onnx_tensor *t, ir_type *out) {
  if (t->rank > IR_MAX_RANK)
    return UNSUPPORTED(im, "tensor '%s' has rank %d; castor's tensors have at most %d "
                           "dimensions", t->name, t->rank, IR_MAX_RANK);
  *out = (ir_type){.dtype = DT_F32, .rank = t->rank};
  for (int r = 0; r < t->rank; r++) out->dims[r] = t->dims[r];
  return true;
}

/* The f32 data of a float constant (float, float16 or bfloat16 widened
 * exactly), in the graph's arena. */
static const float *const_f32(imp *im, const onnx_tensor *t) {
  size_t n = (size_t)t->numel;
  float *f = arena_alloc_aligned(im->g->arena, n ? n * sizeof *f : sizeof *f, 64);
  const uint16_t *h = t->data;
  switch (t->dtype) {
  case ONNX_FLOAT:
    if (n) memcpy(f, t->data, n * sizeof *f);
    return f;
  case ONNX_FLOAT16:
    for (size_t i = 0; i < n; i++) f[i] = half_f16_to_f32(h[i]);
    return f;
  case ONNX_BFLOAT16:
    for (size_t i = 0; i < n; i++) f[i] = half_bf16_to_f32(h[i]);
    return f;
  default:
    UNSUPPORTED(im, "%s uses the %s tensor '%s' as a float operand; castor's ONNX import reads "
                    "float, float16 and bfloat16 data", im->node ? im->node->op_type : "the graph",
                onnx_dtype_name(t->dtype), t->name);
    return NULL;
  }
}

/* The IR node of a value used as an operand of a run-time op. */
static ir_node *operand(imp *im, imp_val *v) {
  if (!v) return NULL;
  if (v->node) return v->node;
  ir_type t;
  if (!dims_of(im, v->k, &t)) return NULL;
  if (t.rank == 0) t.rank = 1, t.dims[0] = 1; /* a scalar constant: one element */
  const float *data = const_f32(im, v->k);
  if (!data) return NULL;
  ir_node *c = ir_build_const(im->g, ir_name(im, v->name, "const"), &t, v->name, data, im->loc);
  c->layer = im->layer;
  v->node = c;
  return c;
}

/* The host constant of input k (an op that needs it at compile time). */
static const onnx_tensor *const_input(imp *im, int k, const char *what) {
  imp_val *v = input(im, k);
  if (!v) return NULL;
  if (!v->k) {
    FAIL(im, "%s's %s (input %d, '%s') must be a constant: an initializer, a Constant node, "
             "or a graph input bound to data (--bind NAME=FILE)", im->node->op_type, what, k + 1,
         v->name);
    return NULL;
  }
  return v->k;
}

/* Defines output k of the current node as IR node n (named after it). */
static bool define_output(imp *im, int k, ir_node *n) {
  if (!n) return false;
  if (k >= im->node->n_outputs) return FAIL(im, "%s has no output %d", im->node->op_type, k + 1);
  return val_define(im, im->node->outputs[k], n, NULL);
}

/* Outputs from k on must be absent or unused: the lowering computes only
 * the ones before. */
static bool outputs_unused_from(imp *im, int k, const char *why) {
  for (int j = k; j < im->node->n_outputs; j++)
    if (*im->node->outputs[j]) {
      const char *o = im->node->outputs[j];
      for (int a = 0; a < im->m->graph.n_nodes; a++)
        for (int i = 0; i < im->m->graph.nodes[a].n_inputs; i++)
          if (str_eq(im->m->graph.nodes[a].inputs[i], o))
            return UNSUPPORTED(im, "%s's output %d ('%s') is used; castor computes only %s", im->node->op_type,
                               j + 1, o, why);
      for (int a = 0; a < im->m->graph.n_outputs; a++)
        if (str_eq(im->m->graph.outputs[a].name, o))
          return UNSUPPORTED(im, "%s's output %d ('%s') is a graph output; castor computes only %s",
                             im->node->op_type, j + 1, o, why);
    }
  return true;
}

/* Builds op over srcs with the current node's layer and location; a type
 * error (shapes that do not fit) is reported naming the node. */
static ir_node *build(imp *im, ir_op op, const char *suffix, ir_node *const *srcs, int n,
                      const ir_attr *attr) {
  for (int i = 0; i < n; i++)
    if (!srcs[i]) return NULL;
  ir_type t;
  char err[256];
  if (!ir_infer_type(op, srcs, n, attr, &t, err, sizeof err)) {
    str_buf b;
    str_buf_init(&b);
    for (int i = 0; i < n; i++) {
      if (i) str_buf_puts(&b, ", ");
      ir_type_print(&srcs[i]->type, &b);
    }
    fail_kind(im, DIAG_KIND_INVALID_MODEL, "%s on (%s): %s", im->node->op_type, str_buf_cstr(&b),
              err);
    str_buf_fini(&b);
    return NULL;
  }
  const char *base = suffix ? arena_printf(im->g->arena, "%s.%s", im->layer, suffix) : im->layer;
  ir_attr a = attr ? *attr : (ir_attr){0};
  ir_node *node = ir_build_op(im->g, op, ir_name(im, base, "v"), srcs, n, &a, im->loc);
  node->layer = im->layer;
  return node;
}

/* ---- attributes ---- */

static const onnx_attr *attr_find(imp *im, const char *name) {
  for (int i = 0; i < im->node->n_attrs; i++)
    if (str_eq(im->node->attrs[i].name, name)) return &im->node->attrs[i];
  return NULL;
}

static bool attr_typed(imp *im, const onnx_attr *a, int type) {
  if (a->type == type) return true;
  return FAIL(im, "attribute '%s' is of type %s; %s's '%s' is of type %s", a->name,
              onnx_attr_type_name(a->type), im->node->op_type, a->name, onnx_attr_type_name(type));
}

static bool attr_int(imp *im, const char *name, int64_t def, int64_t *out) {
  const onnx_attr *a = attr_find(im, name);
  *out = def;
  if (!a) return true;
  if (!attr_typed(im, a, ONNX_ATTR_INT)) return false;
  *out = a->i;
  return true;
}

static bool attr_float(imp *im, const char *name, double def, double *out) {
  const onnx_attr *a = attr_find(im, name);
  *out = def;
  if (!a) return true;
  if (!attr_typed(im, a, ONNX_ATTR_FLOAT)) return false;
  *out = a->f;
  return true;
}

/* Every attribute of the node is one the row reads. */
static bool attrs_known(imp *im, const op_row *row) {
  for (int i = 0; i < im->node->n_attrs; i++) {
    const char *name = im->node->attrs[i].name;
    size_t n = strlen(name);
    bool known = false;
    for (const char *p = row->attrs; *p && !known;) {
      const char *e = strchr(p, ',');
      size_t len = e ? (size_t)(e - p) : strlen(p);
      known = len == n && memcmp(p, name, n) == 0;
      p = e ? e + 1 : p + len;
    }
    if (!known)
      return UNSUPPORTED(im, "attribute '%s' of %s is not supported by castor (it reads: %s)",
                         name, row->op_type, *row->attrs ? row->attrs : "none");
  }
  return true;
}

/* An axis attribute in [-rank, rank) made non-negative. */
static bool norm_axis(imp *im, int64_t axis, int rank, const char *what, int *out) {
  if (axis < -rank || axis >= rank)
    return FAIL(im, "%s %lld is out of range for a tensor of rank %d", what, (long long)axis, rank);
  *out = (int)(axis < 0 ? axis + rank : axis);
  return true;
}

/* ---- host tensors (constants made at import) ---- */

static onnx_tensor *host_tensor(imp *im, int dtype, int rank, const int64_t *dims) {
  onnx_tensor *t = arena_alloc(im->g->arena, sizeof *t);
  *t = (onnx_tensor){.name = "", .dtype = dtype, .rank = rank, .numel = 1};
  for (int r = 0; r < rank; r++) t->dims[r] = dims[r], t->numel *= dims[r];
  t->nbytes = (size_t)t->numel * onnx_dtype_size(dtype);
  t->data = t->nbytes ? arena_alloc_aligned(im->g->arena, t->nbytes, 64) : NULL;
  return t;
}

/* ---- lowerings ---- */

static bool lower_identity(imp *im, const onnx_node *n, const op_row *row) {
  (void)row;
  imp_val *v = input(im, 0);
  if (!v) return false;
  return val_define(im, n->outputs[0], v->node, v->k);
}

static bool lower_constant(imp *im, const onnx_node *n, const op_row *row) {
  (void)row;
  if (n->n_attrs != 1)
    return FAIL(im, "Constant needs exactly one of its value attributes, got %d attributes",
                n->n_attrs);
  const onnx_attr *a = &n->attrs[0];
  onnx_tensor *t;
  if (str_eq(a->name, "value")) {
    if (!attr_typed(im, a, ONNX_ATTR_TENSOR)) return false;
    return val_define(im, n->outputs[0], NULL, a->t);
  } else if (str_eq(a->name, "value_float")) {
    if (!attr_typed(im, a, ONNX_ATTR_FLOAT)) return false;
    t = host_tensor(im, ONNX_FLOAT, 0, NULL);
    *(float *)t->data = (float)a->f;
  } else if (str_eq(a->name, "value_int")) {
    if (!attr_typed(im, a, ONNX_ATTR_INT)) return false;
    t = host_tensor(im, ONNX_INT64, 0, NULL);
    *(int64_t *)t->data = a->i;
  } else if (str_eq(a->name, "value_floats")) {
    if (!attr_typed(im, a, ONNX_ATTR_FLOATS)) return false;
    t = host_tensor(im, ONNX_FLOAT, 1, (int64_t[]){a->n});
    if (a->n) memcpy((void *)t->data, a->floats, (size_t)a->n * sizeof(float));
  } else {
    if (!attr_typed(im, a, ONNX_ATTR_INTS)) return false;
    t = host_tensor(im, ONNX_INT64, 1, (int64_t[]){a->n});
    if (a->n) memcpy((void *)t->data, a->ints, (size_t)a->n * sizeof(int64_t));
  }
  return val_define(im, n->outputs[0], NULL, t);
}

static bool lower_dropout(imp *im, const onnx_node *n, const op_row *row) {
  (void)row;
  /* inference: the identity; training_mode (input 3 from opset 12) must be false */
  if (has_input(im, 2)) {
    const onnx_tensor *tm = const_input(im, 2, "training_mode");
    if (!tm) return false;
    if (tm->numel != 1 || tm->dtype != ONNX_BOOL || ((const uint8_t *)tm->data)[0])
      return UNSUPPORTED(im, "Dropout in training mode: castor imports ONNX models for "
                             "inference, where Dropout is the identity");
  }
  int64_t is_test = 1;
  if (!attr_int(im, "is_test", 1, &is_test)) return false;
  if (!is_test)
    return UNSUPPORTED(im, "Dropout with is_test=0 (training): castor imports ONNX models for "
                           "inference, where Dropout is the identity");
  if (!outputs_unused_from(im, 1, "the output (the mask exists only in training)")) return false;
  imp_val *v = input(im, 0);
  if (!v) return false;
  return val_define(im, n->outputs[0], v->node, v->k);
}

static bool lower_unary(imp *im, const onnx_node *n, const op_row *row) {
  (void)n;
  ir_node *x = operand(im, input(im, 0));
  return define_output(im, 0, build(im, row->ir, NULL, &x, 1, NULL));
}

static bool lower_binary(imp *im, const onnx_node *n, const op_row *row) {
  (void)n;
  imp_val *va = input(im, 0), *vb = input(im, 1);
  if (!va || !vb) return false;
  ir_node *a = operand(im, va), *b = operand(im, vb);
  if (!a || !b) return false;
  /* opset < 7: B broadcasts to A only with broadcast=1, aligned at axis
   * (default: B's dimensions are A's last ones, as numpy aligns them) */
  if (im->opset < 7) {
    int64_t bc, axis;
    if (!attr_int(im, "broadcast", 0, &bc) || !attr_int(im, "axis", INT64_MIN, &axis)) return false;
    if (!bc && !ir_type_eq(&a->type, &b->type))
      return FAIL(im, "%s (opset %lld) without broadcast=1 needs operands of one shape",
                  im->node->op_type, (long long)im->opset);
    if (bc && axis != INT64_MIN && axis != a->type.rank - b->type.rank)
      return UNSUPPORTED(im, "%s with broadcast=1 and axis=%lld (not B's trailing alignment) is "
                             "not supported", im->node->op_type, (long long)axis);
  }
  /* add and mul commute: the run-time value first, the broadcast operand second */
  if ((row->ir == IR_OP_ADD || row->ir == IR_OP_MUL) && a->op == IR_OP_CONST && b->op != IR_OP_CONST) {
    ir_node *t = a;
    a = b, b = t;
  }
  return define_output(im, 0, build(im, row->ir, NULL, (ir_node *[]){a, b}, 2, NULL));
}

static bool lower_matmul(imp *im, const onnx_node *n, const op_row *row) {
  (void)n;
  ir_node *a = operand(im, input(im, 0)), *b = operand(im, input(im, 1));
  if (!a || !b) return false;
  if (a->type.rank != 2 || b->type.rank != 2 || ir_type_is_batched(&b->type))
    return UNSUPPORTED(im, "MatMul of %s by %s: castor multiplies a matrix [M, K] by a matrix [K, P] "
                           "without the batch; batched matmul (operands of rank > 2, or a second "
                           "operand with the batch N) is not in castor's IR yet",
                       a->type.rank == 2 ? "a matrix" : "a batch of matrices",
                       b->type.rank == 2 ? "a batched matrix" : "a batch of matrices");
  ir_attr attr = {.acc = DT_F32};
  return define_output(im, 0, build(im, row->ir, NULL, (ir_node *[]){a, b}, 2, &attr));
}

/* Gemm: Y = alpha * A' B' + beta * C with A' = transA ? A^T : A, B' likewise.
 * B and C must be constants: B' is made at import (transposed, alpha folded
 * into it) and beta * C becomes the bias. */
static bool lower_gemm(imp *im, const onnx_node *n, const op_row *row) {
  (void)n;
  int64_t ta, tb;
  double alpha, beta;
  if (!attr_int(im, "transA", 0, &ta) || !attr_int(im, "transB", 0, &tb) ||
      !attr_float(im, "alpha", 1.0, &alpha) || !attr_float(im, "beta", 1.0, &beta))
    return false;
  if (ta) return UNSUPPORTED(im, "Gemm with transA=1 is not supported yet (A is a run-time value)");
  ir_node *a = operand(im, input(im, 0));
  const onnx_tensor *bt = const_input(im, 1, "B");
  if (!a || !bt) return false;
  if (bt->rank != 2) return FAIL(im, "Gemm's B must be a matrix, got rank %d", bt->rank);
  const float *bf = const_f32(im, bt);
  if (!bf) return false;
  int64_t K = tb ? bt->dims[1] : bt->dims[0], P = tb ? bt->dims[0] : bt->dims[1];
  float *w = arena_alloc_aligned(im->g->arena, (size_t)(K * P > 0 ? K * P : 1) * sizeof *w, 64);
  for (int64_t k = 0; k < K; k++)
    for (int64_t p = 0; p < P; p++)
      w[k * P + p] = (float)(alpha * (tb ? bf[p * K + k] : bf[k * P + p]));
  ir_type wt = {.dtype = DT_F32, .rank = 2, .dims = {K, P}};
  const char *wname = (tb || alpha != 1.0) ? arena_printf(im->g->arena, "%s'", bt->name) : bt->name;
  ir_node *b = ir_build_const(im->g, ir_name(im, im->layer, "gemm"), &wt, wname, w, im->loc);
  b->layer = im->layer;
  ir_attr attr = {.acc = DT_F32};
  ir_node *y = build(im, row->ir, has_input(im, 2) ? "matmul" : NULL, (ir_node *[]){a, b}, 2, &attr);
  if (!y || !has_input(im, 2)) return define_output(im, 0, y);
  const onnx_tensor *ct = const_input(im, 2, "C");
  if (!ct) return false;
  const float *cf = const_f32(im, ct);
  if (!cf) return false;
  /* C broadcasts to [M, P]: a bias over P (shape [P] or [1, P]) or a scalar */
  int64_t cn = ct->numel;
  bool row_bias = (ct->rank == 1 && ct->dims[0] == P) || (ct->rank == 2 && ct->dims[0] == 1 && ct->dims[1] == P);
  if (!row_bias && cn != 1)
    return UNSUPPORTED(im, "Gemm's C of %lld elements: castor supports a bias over the output's "
                           "columns ([%lld] or [1, %lld]) or a scalar", (long long)cn,
                       (long long)P, (long long)P);
  float *c = arena_alloc_aligned(im->g->arena, (size_t)(P ? P : 1) * sizeof *c, 64);
  for (int64_t p = 0; p < P; p++) c[p] = (float)(beta * cf[row_bias ? p : 0]);
  ir_type ctype = {.dtype = DT_F32, .rank = 1, .dims = {P}};
  const char *cname = (beta != 1.0 || !row_bias) ? arena_printf(im->g->arena, "%s'", ct->name) : ct->name;
  ir_node *cb = ir_build_const(im->g, ir_name(im, im->layer, "bias"), &ctype, cname, c, im->loc);
  cb->layer = im->layer;
  return define_output(im, 0, build(im, IR_OP_ADD, NULL, (ir_node *[]){y, cb}, 2, NULL));
}

static bool lower_softmax(imp *im, const onnx_node *n, const op_row *row) {
  (void)n;
  ir_node *x = operand(im, input(im, 0));
  if (!x) return false;
  /* opset 13: one axis (default -1); before: the input flattened to 2-D at
   * axis (default 1), softmax over the second part. Both are castor's
   * last-dimension softmax exactly when the axis is the last one. */
  int64_t axis;
  if (!attr_int(im, "axis", im->opset >= 13 ? -1 : 1, &axis)) return false;
  int a = 0;
  if (!norm_axis(im, axis, x->type.rank, "Softmax axis", &a)) return false;
  if (a != x->type.rank - 1)
    return UNSUPPORTED(im, "Softmax over axis %lld of a rank-%d tensor%s: castor's softmax "
                           "runs over the last axis", (long long)axis, x->type.rank,
                       im->opset >= 13 ? "" : " (opset < 13: over every axis from it on)");
  return define_output(im, 0, build(im, row->ir, NULL, &x, 1, NULL));
}

static bool lower_layer_norm(imp *im, const onnx_node *n, const op_row *row) {
  (void)n;
  int64_t axis, stash;
  double eps;
  if (!attr_int(im, "axis", -1, &axis) || !attr_float(im, "epsilon", 1e-5, &eps) ||
      !attr_int(im, "stash_type", 1, &stash))
    return false;
  if (stash != 1)
    return UNSUPPORTED(im, "LayerNormalization with stash_type=%lld: castor computes the "
                           "statistics in float32 (stash_type=1)", (long long)stash);
  if (!outputs_unused_from(im, 1, "Y (not Mean and InvStdDev)")) return false;
  ir_node *x = operand(im, input(im, 0)), *gamma = operand(im, input(im, 1));
  if (!x || !gamma) return false;
  ir_node *beta;
  if (has_input(im, 2)) {
    beta = operand(im, input(im, 2));
  } else {
    int64_t cnt = 1;
    ir_type_numel(&gamma->type, 1, &cnt);
    float *z = arena_alloc_aligned(im->g->arena, (size_t)(cnt ? cnt : 1) * sizeof *z, 64);
    beta = ir_build_const(im->g, ir_name(im, im->layer, "beta"), &gamma->type,
                          arena_printf(im->g->arena, "%s.zero_bias", im->layer), z, im->loc);
    beta->layer = im->layer;
  }
  ir_attr attr = {.axis = axis, .epsilon = eps};
  return define_output(im, 0, build(im, row->ir, NULL, (ir_node *[]){x, gamma, beta}, 3, &attr));
}

static bool lower_cast(imp *im, const onnx_node *n, const op_row *row) {
  (void)row;
  int64_t to;
  if (!attr_int(im, "to", 0, &to)) return false;
  imp_val *v = input(im, 0);
  if (!v) return false;
  /* castor's graphs are float32 until the policy retypes them; a cast to
   * float32 of a float32 value is the identity */
  if (to == ONNX_FLOAT && v->node) return val_define(im, n->outputs[0], v->node, NULL);
  if (to == ONNX_FLOAT && v->k && v->k->dtype == ONNX_FLOAT)
    return val_define(im, n->outputs[0], NULL, v->k);
  return UNSUPPORTED(im, "Cast to %s: castor's ONNX import keeps tensors in float32 and "
                         "chooses 16-bit types by its policy (--policy)",
                     onnx_dtype_name((int)to));
}

/* ---- shape arithmetic, folded at import ----
 *
 * Exporters compute shapes in the graph (PyTorch's x.view(x.size(0), -1) is
 * Shape -> Gather -> Unsqueeze -> Concat -> Reshape). Nodes whose inputs
 * are all constants are evaluated here on the host, and Shape of a run-time
 * value is its (static) dims. The batch N of a run-time value travels
 * through these as the value DIM_N, which the ops that take shapes
 * (Reshape) understand; arithmetic on it is an error that asks for
 * --batch. */

#define DIM_N INT64_MIN /* castor's symbolic batch in a folded shape */

static bool int_like(int dtype) {
  return dtype == ONNX_INT64 || dtype == ONNX_INT32 || dtype == ONNX_INT8 || dtype == ONNX_UINT8 ||
         dtype == ONNX_INT16 || dtype == ONNX_UINT16 || dtype == ONNX_UINT32 || dtype == ONNX_BOOL;
}

/* Element i of an integer or float constant as an int64 / a double. */
static int64_t elem_i64(const onnx_tensor *t, int64_t i) {
  const void *p = t->data;
  switch (t->dtype) {
  case ONNX_INT64: return ((const int64_t *)p)[i];
  case ONNX_INT32: return ((const int32_t *)p)[i];
  case ONNX_UINT32: return ((const uint32_t *)p)[i];
  case ONNX_INT16: return ((const int16_t *)p)[i];
  case ONNX_UINT16: return ((const uint16_t *)p)[i];
  case ONNX_INT8: return ((const int8_t *)p)[i];
  case ONNX_UINT8:
  case ONNX_BOOL: return ((const uint8_t *)p)[i];
  case ONNX_FLOAT: return (int64_t)((const float *)p)[i];
  case ONNX_DOUBLE: return (int64_t)((const double *)p)[i];
  default: return 0;
  }
}

static double elem_f64(const onnx_tensor *t, int64_t i) {
  const void *p = t->data;
  switch (t->dtype) {
  case ONNX_FLOAT: return ((const float *)p)[i];
  case ONNX_DOUBLE: return ((const double *)p)[i];
  case ONNX_FLOAT16: return half_f16_to_f32(((const uint16_t *)p)[i]);
  case ONNX_BFLOAT16: return half_bf16_to_f32(((const uint16_t *)p)[i]);
  default: return (double)elem_i64(t, i);
  }
}

/* The integers of a 0-D or 1-D integer constant (axes, a shape, pads). */
static bool const_ints(imp *im, const onnx_tensor *t, const char *what, int64_t *out, int max, int *n) {
  if (t->rank > 1 || !int_like(t->dtype))
    return FAIL(im, "%s's %s must be a 1-D integer tensor, got a %s tensor of rank %d",
                im->node->op_type, what, onnx_dtype_name(t->dtype), t->rank);
  if (t->numel > max)
    return UNSUPPORTED(im, "%s's %s has %lld elements; castor takes at most %d", im->node->op_type,
                       what, (long long)t->numel, max);
  *n = (int)t->numel;
  for (int i = 0; i < *n; i++) out[i] = elem_i64(t, i);
  return true;
}

/* Axes from an attribute (opset < 13 style) or an optional input. */
static bool axes_of(imp *im, int input, int64_t *axes, int *n) {
  const onnx_attr *a = attr_find(im, "axes");
  *n = -1; /* none given */
  if (a) {
    if (!attr_typed(im, a, ONNX_ATTR_INTS)) return false;
    if (a->n > ONNX_MAX_RANK) return FAIL(im, "axes has %d elements", a->n);
    for (int i = 0; i < a->n; i++) axes[i] = a->ints[i];
    *n = a->n;
    return true;
  }
  if (has_input(im, input)) {
    const onnx_tensor *t = const_input(im, input, "axes");
    return t && const_ints(im, t, "axes", axes, ONNX_MAX_RANK, n);
  }
  return true;
}

/* The dims of an input, constant or run-time (N as DIM_N). */
static void input_dims(const imp_val *v, int *rank, int64_t *dims) {
  if (v->k) {
    *rank = v->k->rank;
    for (int r = 0; r < *rank; r++) dims[r] = v->k->dims[r];
    return;
  }
  *rank = v->node->type.rank;
  for (int r = 0; r < *rank; r++)
    dims[r] = v->node->type.dims[r] == IR_DIM_BATCH ? DIM_N : v->node->type.dims[r];
}

static bool lower_shape(imp *im, const onnx_node *n, const op_row *row) {
  (void)row;
  imp_val *v = input(im, 0);
  if (!v) return false;
  int rank;
  int64_t dims[ONNX_MAX_RANK];
  input_dims(v, &rank, dims);
  int64_t start, end;
  if (!attr_int(im, "start", 0, &start) || !attr_int(im, "end", rank, &end)) return false;
  if (start < 0) start += rank;
  if (end < 0) end += rank;
  start = start < 0 ? 0 : start > rank ? rank : start;
  end = end < start ? start : end > rank ? rank : end;
  onnx_tensor *t = host_tensor(im, ONNX_INT64, 1, (int64_t[]){end - start});
  for (int64_t r = start; r < end; r++) ((int64_t *)t->data)[r - start] = dims[r];
  return val_define(im, n->outputs[0], NULL, t);
}

static bool all_inputs_const(imp *im) {
  for (int i = 0; i < im->node->n_inputs; i++) {
    if (!*im->node->inputs[i]) continue;
    imp_val *v = val_find(im, im->node->inputs[i]);
    if (!v || !v->k || v->node) return false;
  }
  return true;
}

/* Copies t's elements into a new host tensor of the given dims (same count). */
static onnx_tensor *host_reshaped(imp *im, const onnx_tensor *t, int rank, const int64_t *dims) {
  onnx_tensor *o = host_tensor(im, t->dtype, rank, dims);
  if (o->nbytes) memcpy((void *)o->data, t->data, o->nbytes);
  return o;
}

static bool fold_unsqueeze(imp *im, const onnx_tensor *t) {
  int64_t axes[ONNX_MAX_RANK];
  int na;
  if (!axes_of(im, 1, axes, &na)) return false;
  if (na < 1) return FAIL(im, "Unsqueeze needs axes");
  int rank = t->rank + na;
  if (rank > ONNX_MAX_RANK) return UNSUPPORTED(im, "Unsqueeze to rank %d", rank);
  bool ins[ONNX_MAX_RANK] = {0};
  for (int i = 0; i < na; i++) {
    int a = 0;
    if (!norm_axis(im, axes[i], rank, "Unsqueeze axis", &a)) return false;
    if (ins[a]) return FAIL(im, "Unsqueeze axis %lld is given twice", (long long)axes[i]);
    ins[a] = true;
  }
  int64_t dims[ONNX_MAX_RANK];
  for (int r = 0, k = 0; r < rank; r++) dims[r] = ins[r] ? 1 : t->dims[k++];
  return val_define(im, im->node->outputs[0], NULL, host_reshaped(im, t, rank, dims));
}

static bool fold_squeeze(imp *im, const onnx_tensor *t) {
  int64_t axes[ONNX_MAX_RANK];
  int na;
  if (!axes_of(im, 1, axes, &na)) return false;
  bool drop[ONNX_MAX_RANK] = {0};
  for (int r = 0; r < t->rank; r++) drop[r] = na < 0 && t->dims[r] == 1;
  for (int i = 0; i < na; i++) {
    int a = 0;
    if (!norm_axis(im, axes[i], t->rank, "Squeeze axis", &a)) return false;
    if (t->dims[a] != 1) return FAIL(im, "Squeeze axis %d has size %lld, not 1", a, (long long)t->dims[a]);
    drop[a] = true;
  }
  int64_t dims[ONNX_MAX_RANK];
  int rank = 0;
  for (int r = 0; r < t->rank; r++)
    if (!drop[r]) dims[rank++] = t->dims[r];
  return val_define(im, im->node->outputs[0], NULL, host_reshaped(im, t, rank, dims));
}

static bool fold_concat(imp *im) {
  int64_t axis;
  if (!attr_int(im, "axis", INT64_MIN, &axis)) return false;
  if (axis == INT64_MIN) return FAIL(im, "Concat needs its axis attribute");
  const onnx_tensor *first = NULL;
  int64_t total = 0;
  int a = 0;
  for (int i = 0; i < im->node->n_inputs; i++) {
    const onnx_tensor *t = const_input(im, i, "input");
    if (!t) return false;
    if (!first) {
      first = t;
      if (!norm_axis(im, axis, t->rank, "Concat axis", &a)) return false;
    } else if (t->dtype != first->dtype || t->rank != first->rank) {
      return FAIL(im, "Concat's inputs differ in type or rank");
    }
    for (int r = 0; r < t->rank; r++)
      if (r != a && t->dims[r] != first->dims[r]) return FAIL(im, "Concat's inputs differ in dimension %d", r);
    total += t->dims[a];
  }
  int64_t dims[ONNX_MAX_RANK];
  for (int r = 0; r < first->rank; r++) dims[r] = first->dims[r];
  dims[a] = total;
  onnx_tensor *o = host_tensor(im, first->dtype, first->rank, dims);
  size_t es = onnx_dtype_size(first->dtype);
  int64_t outer = 1, inner = 1;
  for (int r = 0; r < a; r++) outer *= dims[r];
  for (int r = a + 1; r < first->rank; r++) inner *= dims[r];
  char *dst = (char *)o->data;
  for (int64_t q = 0; q < outer; q++)
    for (int i = 0; i < im->node->n_inputs; i++) {
      const onnx_tensor *t = val_find(im, im->node->inputs[i])->k;
      size_t chunk = (size_t)(t->dims[a] * inner) * es;
      memcpy(dst, (const char *)t->data + (size_t)q * chunk, chunk);
      dst += chunk;
    }
  return val_define(im, im->node->outputs[0], NULL, o);
}

static bool fold_gather(imp *im, const onnx_tensor *data, const onnx_tensor *idx) {
  int64_t axis;
  if (!attr_int(im, "axis", 0, &axis)) return false;
  int a = 0;
  if (!norm_axis(im, axis, data->rank, "Gather axis", &a)) return false;
  if (!int_like(idx->dtype)) return FAIL(im, "Gather's indices must be integers, got %s", onnx_dtype_name(idx->dtype));
  int rank = data->rank - 1 + idx->rank;
  if (rank > ONNX_MAX_RANK) return UNSUPPORTED(im, "Gather to rank %d", rank);
  int64_t dims[ONNX_MAX_RANK];
  int k = 0;
  for (int r = 0; r < a; r++) dims[k++] = data->dims[r];
  for (int r = 0; r < idx->rank; r++) dims[k++] = idx->dims[r];
  for (int r = a + 1; r < data->rank; r++) dims[k++] = data->dims[r];
  onnx_tensor *o = host_tensor(im, data->dtype, rank, dims);
  size_t es = onnx_dtype_size(data->dtype);
  int64_t outer = 1, inner = 1, n = data->dims[a];
  for (int r = 0; r < a; r++) outer *= data->dims[r];
  for (int r = a + 1; r < data->rank; r++) inner *= data->dims[r];
  char *dst = (char *)o->data;
  for (int64_t q = 0; q < outer; q++)
    for (int64_t j = 0; j < idx->numel; j++) {
      int64_t i = elem_i64(idx, j);
      if (i < -n || i >= n)
        return FAIL(im, "Gather index %lld is out of range for a dimension of %lld", (long long)i, (long long)n);
      if (i < 0) i += n;
      memcpy(dst, (const char *)data->data + (size_t)((q * n + i) * inner) * es, (size_t)inner * es);
      dst += (size_t)inner * es;
    }
  return val_define(im, im->node->outputs[0], NULL, o);
}

static bool fold_cast(imp *im, const onnx_tensor *t) {
  int64_t to;
  if (!attr_int(im, "to", 0, &to)) return false;
  if (to != ONNX_INT64 && to != ONNX_INT32 && to != ONNX_FLOAT && to != ONNX_DOUBLE && to != ONNX_BOOL)
    return UNSUPPORTED(im, "Cast of a constant to %s", onnx_dtype_name((int)to));
  onnx_tensor *o = host_tensor(im, (int)to, t->rank, t->dims);
  for (int64_t i = 0; i < t->numel; i++) {
    bool n = t->dtype == ONNX_INT64 && ((const int64_t *)t->data)[i] == DIM_N;
    if (n && to != ONNX_INT64)
      return UNSUPPORTED(im, "Cast of the batch dimension N to %s: compile with --batch", onnx_dtype_name((int)to));
    switch (to) {
    case ONNX_INT64: ((int64_t *)o->data)[i] = elem_i64(t, i); break;
    case ONNX_INT32: ((int32_t *)o->data)[i] = (int32_t)elem_i64(t, i); break;
    case ONNX_FLOAT: ((float *)o->data)[i] = (float)elem_f64(t, i); break;
    case ONNX_DOUBLE: ((double *)o->data)[i] = elem_f64(t, i); break;
    default: ((uint8_t *)o->data)[i] = elem_f64(t, i) != 0; break;
    }
  }
  return val_define(im, im->node->outputs[0], NULL, o);
}

/* numpy broadcasting of two host tensors' shapes. */
static bool bcast_dims(imp *im, const onnx_tensor *a, const onnx_tensor *b, int *rank, int64_t *dims) {
  *rank = a->rank > b->rank ? a->rank : b->rank;
  for (int r = 0; r < *rank; r++) {
    int ra = r - (*rank - a->rank), rb = r - (*rank - b->rank);
    int64_t da = ra >= 0 ? a->dims[ra] : 1, db = rb >= 0 ? b->dims[rb] : 1;
    if (da != db && da != 1 && db != 1)
      return FAIL(im, "%s's operands do not broadcast (dimension %d: %lld and %lld)", im->node->op_type, r,
                  (long long)da, (long long)db);
    dims[r] = da == 1 ? db : da;
  }
  return true;
}

/* The flat index into t of result element i (t broadcast to rank/dims). */
static int64_t bcast_index(const onnx_tensor *t, int rank, const int64_t *dims, int64_t i) {
  int64_t idx = 0, stride = 1;
  for (int r = rank - 1; r >= 0; r--) {
    int64_t c = i % dims[r];
    i /= dims[r];
    int rt = r - (rank - t->rank);
    if (rt >= 0) {
      if (t->dims[rt] != 1) idx += c * stride;
      stride *= t->dims[rt];
    }
  }
  return idx;
}

static bool fold_arith(imp *im, const onnx_tensor *a, const onnx_tensor *b) {
  const char *op = im->node->op_type;
  int rank;
  int64_t dims[ONNX_MAX_RANK];
  if (!bcast_dims(im, a, b, &rank, dims)) return false;
  bool ints = int_like(a->dtype) && int_like(b->dtype);
  if (!ints && !((a->dtype == ONNX_FLOAT || a->dtype == ONNX_DOUBLE) && a->dtype == b->dtype))
    return UNSUPPORTED(im, "%s of constants of type %s and %s", op, onnx_dtype_name(a->dtype), onnx_dtype_name(b->dtype));
  onnx_tensor *o = host_tensor(im, ints ? ONNX_INT64 : a->dtype, rank, dims);
  for (int64_t i = 0; i < o->numel; i++) {
    int64_t ia = bcast_index(a, rank, dims, i), ib = bcast_index(b, rank, dims, i);
    if (ints) {
      int64_t x = elem_i64(a, ia), y = elem_i64(b, ib), z;
      if (x == DIM_N || y == DIM_N)
        return UNSUPPORTED(im, "%s on the batch dimension N in a shape computation: castor keeps N "
                               "symbolic only where it stays the first dimension; compile with --batch",
                           op);
      if (str_eq(op, "Add")) z = x + y;
      else if (str_eq(op, "Sub")) z = x - y;
      else if (str_eq(op, "Mul")) z = x * y;
      else {
        if (y == 0) return FAIL(im, "Div of integer constants by zero");
        z = x / y; /* C and ONNX both truncate toward zero */
      }
      ((int64_t *)o->data)[i] = z;
    } else {
      double x = elem_f64(a, ia), y = elem_f64(b, ib);
      double z = str_eq(op, "Add") ? x + y : str_eq(op, "Sub") ? x - y : str_eq(op, "Mul") ? x * y : x / y;
      if (o->dtype == ONNX_FLOAT) ((float *)o->data)[i] = (float)z;
      else ((double *)o->data)[i] = z;
    }
  }
  return val_define(im, im->node->outputs[0], NULL, o);
}

static bool lower_constant_of_shape(imp *im, const onnx_node *n, const op_row *row) {
  (void)row;
  const onnx_tensor *s = const_input(im, 0, "shape");
  int64_t dims[ONNX_MAX_RANK];
  int rank;
  if (!s || !const_ints(im, s, "shape", dims, ONNX_MAX_RANK, &rank)) return false;
  for (int r = 0; r < rank; r++)
    if (dims[r] < 0) return FAIL(im, "ConstantOfShape's shape has %s dimension", dims[r] == DIM_N ? "the batch N as a" : "a negative");
  const onnx_attr *v = attr_find(im, "value");
  if (v && !attr_typed(im, v, ONNX_ATTR_TENSOR)) return false;
  int dtype = v ? v->t->dtype : ONNX_FLOAT;
  if (v && v->t->numel != 1) return FAIL(im, "ConstantOfShape's value must hold one element");
  int64_t numel = 1;
  for (int r = 0; r < rank; r++)
    if (!size_mul_ok(numel, dims[r], &numel) || numel > ((int64_t)1 << 28))
      return UNSUPPORTED(im, "ConstantOfShape of more than 2^28 elements");
  onnx_tensor *o = host_tensor(im, dtype, rank, dims);
  size_t es = onnx_dtype_size(dtype);
  for (int64_t i = 0; i < o->numel; i++)
    if (v) memcpy((char *)o->data + (size_t)i * es, v->t->data, es);
  return val_define(im, n->outputs[0], NULL, o);
}

/* A node whose inputs are all constants, of an op that folds: evaluated
 * here. *folded says whether it was one. */
static bool try_fold(imp *im, const onnx_node *n, bool *folded) {
  *folded = false;
  if (!all_inputs_const(im) || n->n_inputs == 0) return true;
  const char *op = n->op_type;
  static const op_row folds[] = {
      {"Unsqueeze", 1, 0, NULL, IR_OP_COUNT, "axes"}, {"Squeeze", 1, 0, NULL, IR_OP_COUNT, "axes"},
      {"Concat", 1, 0, NULL, IR_OP_COUNT, "axis"},    {"Cast", 1, 0, NULL, IR_OP_COUNT, "to,saturate"},
      {"Gather", 1, 0, NULL, IR_OP_COUNT, "axis"},    {"Add", 1, 0, NULL, IR_OP_COUNT, ""},
      {"Sub", 1, 0, NULL, IR_OP_COUNT, ""},           {"Mul", 1, 0, NULL, IR_OP_COUNT, ""},
      {"Div", 1, 0, NULL, IR_OP_COUNT, ""},
  };
  const op_row *row = NULL;
  for (size_t i = 0; i < sizeof folds / sizeof *folds && !row; i++)
    if (str_eq(folds[i].op_type, op)) row = &folds[i];
  if (!row) return true;
  imp_val *v0 = input(im, 0);
  if (!v0) return false;
  const onnx_tensor *t = v0->k;
  if ((int_like(t->dtype) || t->dtype == ONNX_DOUBLE || !str_eq(row->attrs, "")) && !attrs_known(im, row))
    return false;
  if (str_eq(op, "Unsqueeze")) return (*folded = true), fold_unsqueeze(im, t);
  if (str_eq(op, "Squeeze")) return (*folded = true), fold_squeeze(im, t);
  if (str_eq(op, "Concat")) return (*folded = true), fold_concat(im);
  if (str_eq(op, "Cast")) return (*folded = true), fold_cast(im, t);
  if (str_eq(op, "Gather")) {
    imp_val *v1 = input(im, 1);
    return v1 && ((*folded = true), fold_gather(im, t, v1->k));
  }
  if ((str_eq(op, "Add") || str_eq(op, "Sub") || str_eq(op, "Mul") || str_eq(op, "Div")) &&
      (int_like(t->dtype) || t->dtype == ONNX_DOUBLE)) {
    imp_val *v1 = input(im, 1);
    return v1 && ((*folded = true), fold_arith(im, t, v1->k));
  }
  return true;
}

/* ---- layout ops ---- */

/* Reshape's target shape (ONNX semantics: 0 copies the input's dimension
 * unless allowzero, one -1 is inferred, DIM_N is the batch) as an IR shape. */
static bool reshape_target(imp *im, const ir_type *x, const int64_t *want, int rank, bool allowzero,
                           ir_shape *out) {
  if (rank > IR_MAX_RANK) return UNSUPPORTED(im, "Reshape to rank %d: castor's tensors have at most %d dimensions", rank, IR_MAX_RANK);
  *out = (ir_shape){.rank = rank};
  int infer = -1;
  int64_t known = 1, total = 1;
  bool xb = ir_type_is_batched(x);
  for (int r = xb ? 1 : 0; r < x->rank; r++) total *= x->dims[r];
  for (int r = 0; r < rank; r++) {
    int64_t d = want[r];
    if (d == 0 && !allowzero) {
      if (r >= x->rank) return FAIL(im, "Reshape's shape copies dimension %d (0), which the input lacks", r);
      d = x->dims[r] == IR_DIM_BATCH ? DIM_N : x->dims[r];
    }
    if (d == DIM_N) {
      out->dims[r] = IR_DIM_BATCH;
      continue;
    }
    if (d == -1) {
      if (infer >= 0) return FAIL(im, "Reshape's shape has two -1 dimensions");
      infer = r;
      continue;
    }
    if (d < 0) return FAIL(im, "Reshape's shape has a negative dimension %lld", (long long)d);
    out->dims[r] = d;
    if (!size_mul_ok(known, d, &known)) return FAIL(im, "Reshape's shape is too large");
  }
  if (infer >= 0) {
    bool nb = false;
    for (int r = 0; r < rank; r++) nb |= out->dims[r] == IR_DIM_BATCH;
    if (xb && !nb)
      return UNSUPPORTED(im, "Reshape with -1 of an input with the batch N (the -1 would absorb N): "
                             "only the batch is symbolic and it stays dimension 0; compile with --batch B");
    if (known == 0 || total % known)
      return FAIL(im, "Reshape cannot infer -1: %lld elements per sample into %lld", (long long)total, (long long)known);
    out->dims[infer] = total / known;
  }
  return true;
}

static bool lower_reshape(imp *im, const onnx_node *n, const op_row *row) {
  (void)n, (void)row;
  imp_val *v = input(im, 0);
  const onnx_tensor *st = v ? const_input(im, 1, "shape") : NULL;
  int64_t want[ONNX_MAX_RANK], allowzero;
  int rank;
  if (!st || !const_ints(im, st, "shape", want, ONNX_MAX_RANK, &rank)) return false;
  if (!attr_int(im, "allowzero", 0, &allowzero)) return false;
  if (v->k && !v->node) { /* a constant: folded */
    ir_type t;
    if (!dims_of(im, v->k, &t)) return false;
    ir_shape s;
    if (!reshape_target(im, &t, want, rank, allowzero != 0, &s)) return false;
    int64_t numel = 1;
    for (int r = 0; r < s.rank; r++) numel *= s.dims[r];
    if (numel != v->k->numel) return FAIL(im, "Reshape of %lld elements to %lld", (long long)v->k->numel, (long long)numel);
    return val_define(im, im->node->outputs[0], NULL, host_reshaped(im, v->k, s.rank, s.dims));
  }
  ir_node *x = operand(im, v);
  if (!x) return false;
  ir_attr attr = {0};
  if (!reshape_target(im, &x->type, want, rank, allowzero != 0, &attr.shape)) return false;
  return define_output(im, 0, build(im, IR_OP_RESHAPE, NULL, &x, 1, &attr));
}

/* A reshape of run-time x to dims (N where x has it). */
static bool reshape_to(imp *im, ir_node *x, int rank, const int64_t *dims) {
  ir_attr attr = {.shape = {.rank = rank}};
  for (int r = 0; r < rank; r++) attr.shape.dims[r] = dims[r];
  return define_output(im, 0, build(im, IR_OP_RESHAPE, NULL, &x, 1, &attr));
}

static bool lower_flatten(imp *im, const onnx_node *n, const op_row *row) {
  (void)n, (void)row;
  ir_node *x = operand(im, input(im, 0));
  if (!x) return false;
  int64_t axis;
  if (!attr_int(im, "axis", 1, &axis)) return false;
  int a = 0;
  if (axis < -x->type.rank || axis > x->type.rank)
    return FAIL(im, "Flatten axis %lld is out of range for rank %d", (long long)axis, x->type.rank);
  a = (int)(axis < 0 ? axis + x->type.rank : axis);
  int64_t d[2] = {1, 1};
  bool nb = false;
  for (int r = 0; r < x->type.rank; r++) {
    if (x->type.dims[r] == IR_DIM_BATCH) {
      if (r >= a || a != 1)
        return UNSUPPORTED(im, "Flatten at axis %d of an input with the batch N would fold N into another "
                               "dimension; compile with --batch B", a);
      nb = true;
      continue;
    }
    d[r < a ? 0 : 1] *= x->type.dims[r];
  }
  if (nb) d[0] = IR_DIM_BATCH;
  return reshape_to(im, x, 2, d);
}

static bool lower_squeeze_unsqueeze(imp *im, const onnx_node *n, const op_row *row) {
  (void)row;
  ir_node *x = operand(im, input(im, 0));
  if (!x) return false;
  int64_t axes[ONNX_MAX_RANK];
  int na;
  if (!axes_of(im, 1, axes, &na)) return false;
  bool unsq = str_eq(n->op_type, "Unsqueeze");
  int in_rank = x->type.rank, rank = unsq ? in_rank + (na > 0 ? na : 0) : in_rank;
  if (unsq && na < 1) return FAIL(im, "Unsqueeze needs axes");
  if (rank > IR_MAX_RANK) return UNSUPPORTED(im, "Unsqueeze to rank %d: castor's tensors have at most %d dimensions", rank, IR_MAX_RANK);
  bool mark[IR_MAX_RANK + ONNX_MAX_RANK] = {0};
  for (int i = 0; i < na; i++) {
    int a = 0;
    if (!norm_axis(im, axes[i], rank, unsq ? "Unsqueeze axis" : "Squeeze axis", &a)) return false;
    if (mark[a]) return FAIL(im, "%s axis %lld is given twice", n->op_type, (long long)axes[i]);
    if (!unsq && x->type.dims[a] != 1)
      return FAIL(im, "Squeeze axis %d has size %s, not 1", a,
                  x->type.dims[a] == IR_DIM_BATCH ? "N (the batch)" : arena_printf(im->g->arena, "%lld", (long long)x->type.dims[a]));
    mark[a] = true;
  }
  int64_t dims[IR_MAX_RANK];
  int out = 0;
  if (unsq) {
    for (int r = 0, k = 0; r < rank; r++) dims[out++] = mark[r] ? 1 : x->type.dims[k++];
  } else {
    for (int r = 0; r < in_rank; r++)
      if (!(na < 0 ? x->type.dims[r] == 1 : mark[r])) dims[out++] = x->type.dims[r];
  }
  return reshape_to(im, x, out, dims);
}

static bool lower_transpose(imp *im, const onnx_node *n, const op_row *row) {
  (void)n, (void)row;
  ir_node *x = operand(im, input(im, 0));
  if (!x) return false;
  ir_attr attr = {.perm = {.n = x->type.rank}};
  const onnx_attr *p = attr_find(im, "perm");
  if (p) {
    if (!attr_typed(im, p, ONNX_ATTR_INTS)) return false;
    if (p->n != x->type.rank) return FAIL(im, "Transpose's perm has %d entries for a rank-%d input", p->n, x->type.rank);
    for (int r = 0; r < p->n; r++) attr.perm.v[r] = p->ints[r];
  } else {
    for (int r = 0; r < x->type.rank; r++) attr.perm.v[r] = x->type.rank - 1 - r;
  }
  return define_output(im, 0, build(im, IR_OP_TRANSPOSE, NULL, &x, 1, &attr));
}

static bool lower_concat(imp *im, const onnx_node *n, const op_row *row) {
  (void)row;
  int64_t axis;
  if (!attr_int(im, "axis", INT64_MIN, &axis)) return false;
  if (axis == INT64_MIN) return FAIL(im, "Concat needs its axis attribute");
  if (n->n_inputs < 1 || n->n_inputs > IR_MAX_SRCS)
    return UNSUPPORTED(im, "Concat of %d inputs: castor joins 1 to %d", n->n_inputs, IR_MAX_SRCS);
  ir_node *srcs[IR_MAX_SRCS];
  for (int i = 0; i < n->n_inputs; i++)
    if (!(srcs[i] = operand(im, input(im, i)))) return false;
  ir_attr attr = {.axis = axis};
  return define_output(im, 0, build(im, IR_OP_CONCAT, NULL, srcs, n->n_inputs, &attr));
}

/* Slice: opset 1-9 with attributes starts, ends, axes; from 10 with inputs
 * (starts, ends, axes, steps). */
static bool lower_slice(imp *im, const onnx_node *n, const op_row *row) {
  (void)n, (void)row;
  ir_node *x = operand(im, input(im, 0));
  if (!x) return false;
  int rank = x->type.rank;
  int64_t st[ONNX_MAX_RANK], en[ONNX_MAX_RANK], ax[ONNX_MAX_RANK], sp[ONNX_MAX_RANK];
  int ns, ne, na = -1, nsp = -1;
  if (im->opset < 10) {
    const onnx_attr *a;
    if (!(a = attr_find(im, "starts")) || !attr_typed(im, a, ONNX_ATTR_INTS)) return a ? false : FAIL(im, "Slice needs starts");
    ns = a->n < ONNX_MAX_RANK ? a->n : ONNX_MAX_RANK;
    memcpy(st, a->ints, (size_t)ns * sizeof *st);
    if (!(a = attr_find(im, "ends")) || !attr_typed(im, a, ONNX_ATTR_INTS)) return a ? false : FAIL(im, "Slice needs ends");
    ne = a->n < ONNX_MAX_RANK ? a->n : ONNX_MAX_RANK;
    memcpy(en, a->ints, (size_t)ne * sizeof *en);
    if ((a = attr_find(im, "axes"))) {
      if (!attr_typed(im, a, ONNX_ATTR_INTS)) return false;
      na = a->n < ONNX_MAX_RANK ? a->n : ONNX_MAX_RANK;
      memcpy(ax, a->ints, (size_t)na * sizeof *ax);
    }
  } else {
    const onnx_tensor *t;
    if (!(t = const_input(im, 1, "starts")) || !const_ints(im, t, "starts", st, ONNX_MAX_RANK, &ns)) return false;
    if (!(t = const_input(im, 2, "ends")) || !const_ints(im, t, "ends", en, ONNX_MAX_RANK, &ne)) return false;
    if (has_input(im, 3) && (!(t = const_input(im, 3, "axes")) || !const_ints(im, t, "axes", ax, ONNX_MAX_RANK, &na)))
      return false;
    if (has_input(im, 4) && (!(t = const_input(im, 4, "steps")) || !const_ints(im, t, "steps", sp, ONNX_MAX_RANK, &nsp)))
      return false;
  }
  if (ns != ne || (na >= 0 && na != ns) || (nsp >= 0 && nsp != ns))
    return FAIL(im, "Slice's starts, ends, axes and steps differ in length (%d, %d, %d, %d)", ns, ne, na, nsp);
  ir_attr attr = {.starts = {.n = rank}, .ends = {.n = rank}, .steps = {.n = rank}};
  for (int r = 0; r < rank; r++) {
    attr.starts.v[r] = 0, attr.steps.v[r] = 1;
    attr.ends.v[r] = x->type.dims[r] == IR_DIM_BATCH ? 0 : x->type.dims[r];
  }
  bool seen[IR_MAX_RANK] = {0};
  for (int i = 0; i < ns; i++) {
    int a = 0;
    if (!norm_axis(im, na >= 0 ? ax[i] : i, rank, "Slice axis", &a)) return false;
    if (seen[a]) return FAIL(im, "Slice axis %d is given twice", a);
    seen[a] = true;
    int64_t step = nsp >= 0 ? sp[i] : 1;
    if (step < 1) return UNSUPPORTED(im, "Slice with step %lld: castor slices with positive steps", (long long)step);
    if (x->type.dims[a] == IR_DIM_BATCH) {
      if (st[i] == 0 && en[i] >= INT32_MAX && step == 1) continue; /* the whole batch */
      return UNSUPPORTED(im, "Slice of the batch dimension N: compile with --batch B");
    }
    int64_t d = x->type.dims[a], s0 = st[i], e0 = en[i];
    /* ONNX clamps both to [0, d] after counting negatives from the end */
    if (s0 < 0) s0 += d;
    if (e0 < 0) e0 += d;
    s0 = s0 < 0 ? 0 : s0 > d ? d : s0;
    e0 = e0 < 0 ? 0 : e0 > d ? d : e0;
    if (e0 <= s0)
      return UNSUPPORTED(im, "Slice that keeps no element of dimension %d: castor's tensors have no "
                             "empty dimensions", a);
    attr.starts.v[a] = s0, attr.ends.v[a] = e0, attr.steps.v[a] = step;
  }
  return define_output(im, 0, build(im, IR_OP_STRIDED_SLICE, NULL, &x, 1, &attr));
}

/* Pad, mode constant: opset 2-10 with pads and value attributes; from 11
 * with inputs (pads, constant_value, and from 18 axes). */
static bool lower_pad(imp *im, const onnx_node *n, const op_row *row) {
  (void)n, (void)row;
  ir_node *x = operand(im, input(im, 0));
  if (!x) return false;
  int rank = x->type.rank;
  const onnx_attr *m = attr_find(im, "mode");
  if (m && (!attr_typed(im, m, ONNX_ATTR_STRING) || !str_eq(m->s, "constant")))
    return m->type == ONNX_ATTR_STRING ? UNSUPPORTED(im, "Pad mode '%s': castor pads with a constant", m->s) : false;
  int64_t pads[2 * ONNX_MAX_RANK], ax[ONNX_MAX_RANK];
  int np, na = -1;
  double value = 0;
  if (im->opset < 11) {
    const onnx_attr *a = attr_find(im, "pads");
    if (!a) return FAIL(im, "Pad needs pads");
    if (!attr_typed(im, a, ONNX_ATTR_INTS)) return false;
    if (a->n > 2 * ONNX_MAX_RANK) return FAIL(im, "Pad's pads has %d entries", a->n);
    np = a->n;
    memcpy(pads, a->ints, (size_t)np * sizeof *pads);
    if (!attr_float(im, "value", 0, &value)) return false;
  } else {
    const onnx_tensor *t = const_input(im, 1, "pads");
    if (!t || !const_ints(im, t, "pads", pads, 2 * ONNX_MAX_RANK, &np)) return false;
    if (has_input(im, 2)) {
      const onnx_tensor *cv = const_input(im, 2, "constant_value");
      if (!cv) return false;
      if (cv->numel != 1) return FAIL(im, "Pad's constant_value must hold one element");
      value = elem_f64(cv, 0);
    }
    if (has_input(im, 3) && (!(t = const_input(im, 3, "axes")) || !const_ints(im, t, "axes", ax, ONNX_MAX_RANK, &na)))
      return false;
  }
  int naxes = na >= 0 ? na : rank;
  if (np != 2 * naxes) return FAIL(im, "Pad's pads has %d entries for %d axes (2 per axis)", np, naxes);
  ir_attr attr = {.shape = {.rank = rank}, .starts = {.n = rank}, .steps = {.n = rank}, .value = value};
  for (int r = 0; r < rank; r++) attr.shape.dims[r] = x->type.dims[r], attr.starts.v[r] = 0, attr.steps.v[r] = 1;
  for (int i = 0; i < naxes; i++) {
    int a = i;
    if (na >= 0 && !norm_axis(im, ax[i], rank, "Pad axis", &a)) return false;
    int64_t b = pads[i], e = pads[i + naxes];
    if (b < 0 || e < 0) return UNSUPPORTED(im, "Pad with negative pads (cropping): castor pads only");
    if (x->type.dims[a] == IR_DIM_BATCH) {
      if (b || e) return UNSUPPORTED(im, "Pad of the batch dimension N: compile with --batch B");
      continue;
    }
    attr.shape.dims[a] = x->type.dims[a] + b + e, attr.starts.v[a] = b;
  }
  return define_output(im, 0, build(im, IR_OP_PAD_CONSTANT, NULL, &x, 1, &attr));
}

/* ---- element-wise ops beyond the first slice ---- */

/* A scalar float constant as an IR const node (broadcasts against anything). */
static ir_node *scalar_const(imp *im, const char *what, double v) {
  float *f = arena_alloc_aligned(im->g->arena, 64, 64);
  f[0] = (float)v;
  ir_type t = {.dtype = DT_F32, .rank = 1, .dims = {1}};
  const char *name = arena_printf(im->g->arena, "%s.%s", im->layer, what);
  ir_node *c = ir_build_const(im->g, ir_name(im, name, "const"), &t, name, f, im->loc);
  c->layer = im->layer;
  return c;
}

/* Max, Min, Sum, Mean: variadic with broadcasting (opset 8+), folded
 * pairwise left to right; Mean divides the sum by the count. */
static bool lower_variadic(imp *im, const onnx_node *n, const op_row *row) {
  if (n->n_inputs < 1) return FAIL(im, "%s needs at least one input", n->op_type);
  ir_node *acc = operand(im, input(im, 0));
  for (int i = 1; i < n->n_inputs && acc; i++) {
    ir_node *b = operand(im, input(im, i));
    if (!b) return false;
    acc = build(im, row->ir, arena_printf(im->g->arena, "%d", i), (ir_node *[]){acc, b}, 2, NULL);
  }
  if (!acc) return false;
  if (n->n_inputs == 1) return val_define(im, n->outputs[0], acc, NULL);
  if (str_eq(n->op_type, "Mean"))
    acc = build(im, IR_OP_DIV, NULL, (ir_node *[]){acc, scalar_const(im, "count", n->n_inputs)}, 2, NULL);
  return define_output(im, 0, acc);
}

static bool lower_reciprocal(imp *im, const onnx_node *n, const op_row *row) {
  (void)n, (void)row;
  ir_node *x = operand(im, input(im, 0));
  if (!x) return false;
  return define_output(im, 0, build(im, IR_OP_DIV, NULL, (ir_node *[]){scalar_const(im, "one", 1), x}, 2, NULL));
}

static bool lower_alpha_unary(imp *im, const onnx_node *n, const op_row *row) {
  (void)n;
  ir_node *x = operand(im, input(im, 0));
  double alpha;
  if (!x || !attr_float(im, "alpha", row->ir == IR_OP_LEAKY_RELU ? 0.01 : 1.0, &alpha)) return false;
  ir_attr attr = {.alpha = alpha};
  return define_output(im, 0, build(im, row->ir, NULL, &x, 1, &attr));
}

/* HardSigmoid: max(0, min(1, alpha x + beta)) (ONNX's alpha 0.2; castor's
 * hard_sigmoid is Keras 3's, alpha 1/6), as mul, add and clip. */
static bool lower_hard_sigmoid(imp *im, const onnx_node *n, const op_row *row) {
  (void)n, (void)row;
  ir_node *x = operand(im, input(im, 0));
  double alpha, beta;
  if (!x || !attr_float(im, "alpha", 0.2, &alpha) || !attr_float(im, "beta", 0.5, &beta)) return false;
  ir_node *y = build(im, IR_OP_MUL, "scaled", (ir_node *[]){x, scalar_const(im, "alpha", alpha)}, 2, NULL);
  if (!y) return false;
  y = build(im, IR_OP_ADD, "shifted", (ir_node *[]){y, scalar_const(im, "beta", beta)}, 2, NULL);
  ir_attr attr = {.min_value = 0, .max_value = 1};
  return y && define_output(im, 0, build(im, IR_OP_CLIP, NULL, &y, 1, &attr));
}

/* Clip: opset < 11 with min and max attributes; from 11 with optional
 * inputs (constants). An absent bound is the float range's end. */
static bool lower_clip(imp *im, const onnx_node *n, const op_row *row) {
  (void)n, (void)row;
  ir_node *x = operand(im, input(im, 0));
  if (!x) return false;
  double lo = -FLT_MAX, hi = FLT_MAX;
  if (im->opset < 11) {
    if (!attr_float(im, "min", -FLT_MAX, &lo) || !attr_float(im, "max", FLT_MAX, &hi)) return false;
  } else {
    for (int k = 1; k <= 2; k++) {
      if (!has_input(im, k)) continue;
      const onnx_tensor *t = const_input(im, k, k == 1 ? "min" : "max");
      if (!t) return false;
      if (t->numel != 1) return FAIL(im, "Clip's %s must hold one element", k == 1 ? "min" : "max");
      *(k == 1 ? &lo : &hi) = elem_f64(t, 0);
    }
  }
  ir_attr attr = {.min_value = lo, .max_value = hi};
  return define_output(im, 0, build(im, IR_OP_CLIP, NULL, &x, 1, &attr));
}

/* PRelu: x where x >= 0, slope * x elsewhere: relu(x) + slope * min(x, 0). */
static bool lower_prelu(imp *im, const onnx_node *n, const op_row *row) {
  (void)n, (void)row;
  ir_node *x = operand(im, input(im, 0)), *slope = operand(im, input(im, 1));
  if (!x || !slope) return false;
  ir_node *pos = build(im, IR_OP_RELU, "pos", &x, 1, NULL);
  ir_node *neg = build(im, IR_OP_MINIMUM, "neg", (ir_node *[]){x, scalar_const(im, "zero", 0)}, 2, NULL);
  ir_node *sn = neg ? build(im, IR_OP_MUL, "neg_scaled", (ir_node *[]){neg, slope}, 2, NULL) : NULL;
  return pos && sn && define_output(im, 0, build(im, IR_OP_ADD, NULL, (ir_node *[]){pos, sn}, 2, NULL));
}

/* Where(cond, X, Y) with a constant condition (castor computes no booleans). */
static bool lower_where(imp *im, const onnx_node *n, const op_row *row) {
  (void)n, (void)row;
  imp_val *vc = input(im, 0);
  if (!vc) return false;
  if (!vc->k)
    return UNSUPPORTED(im, "Where with a run-time condition: castor computes no bool tensors");
  onnx_tensor *f = host_tensor(im, ONNX_FLOAT, vc->k->rank, vc->k->dims);
  for (int64_t i = 0; i < f->numel; i++) ((float *)f->data)[i] = elem_f64(vc->k, i) != 0;
  f->name = arena_printf(im->g->arena, "%s.cond", im->layer);
  imp_val cv = {.name = f->name, .k = f};
  ir_node *c = operand(im, &cv), *a = operand(im, input(im, 1)), *b = operand(im, input(im, 2));
  return c && a && b && define_output(im, 0, build(im, IR_OP_SELECT, NULL, (ir_node *[]){c, a, b}, 3, NULL));
}

/* ---- the table ---- */

static const op_row op_table[] = {
#define ONNX_OP(op, since, until, lower, ir, attrs) {#op, since, until, lower, ir, attrs},
#include "frontend/onnx/onnx_ops.def"
#undef ONNX_OP
};

static const op_row *find_row(imp *im, const onnx_node *n) {
  const op_row *any = NULL;
  for (size_t i = 0; i < sizeof op_table / sizeof *op_table; i++) {
    const op_row *r = &op_table[i];
    if (!str_eq(r->op_type, n->op_type)) continue;
    any = r;
    if (im->opset >= r->since && (r->until == 0 || im->opset <= r->until)) return r;
  }
  if (any)
    UNSUPPORTED(im, "castor supports %s only in other opsets than this model's %lld",
                n->op_type, (long long)im->opset);
  else
    UNSUPPORTED(im, "castor does not support the ONNX op %s (opset %lld); docs/onnx.md lists "
                    "the ops it does", n->op_type, (long long)im->opset);
  return NULL;
}

/* ---- the graph ---- */

static bool is_default_domain(const char *d) { return !*d || str_eq(d, "ai.onnx"); }

static const fe_binding *binding(imp *im, const char *name) {
  for (int i = 0; i < im->o->n_bindings; i++)
    if (str_eq(im->o->bindings[i].name, name)) return &im->o->bindings[i];
  return NULL;
}

static bool import_inputs(imp *im) {
  const onnx_graph *g = &im->m->graph;
  int index = 0;
  for (int i = 0; i < g->n_initializers; i++)
    if (!val_define(im, g->initializers[i].name, NULL, &g->initializers[i])) return false;
  for (int i = 0; i < g->n_inputs; i++) {
    const onnx_value_info *v = &g->inputs[i];
    imp_val *init = val_find(im, v->name);
    const fe_binding *bind = binding(im, v->name);
    const onnx_tensor *bound = bind ? bind->tensor : NULL;
    if (bound && (!bind->where_needed || bound->dtype != ONNX_FLOAT || init)) {
      if (init) init->k = bound; /* a binding overrides an initializer's default */
      else if (!val_define(im, v->name, NULL, bound)) return false;
      continue;
    }
    if (init) continue; /* ir_version < 4: initializers are listed as inputs too */
    if (!v->is_tensor)
      return UNSUPPORTED(im, "graph input '%s' is not a tensor (a sequence, map or optional)",
                         v->name);
    if (v->elem_type != ONNX_FLOAT)
      return UNSUPPORTED(im, "graph input '%s' is of type %s; castor's ONNX import takes float "
                             "inputs (bind others to data with --bind NAME=FILE)",
                         v->name, onnx_dtype_name(v->elem_type));
    if (v->rank < 0)
      return FAIL(im, "graph input '%s' declares no shape; castor compiles fixed shapes", v->name);
    if (v->rank > IR_MAX_RANK)
      return UNSUPPORTED(im, "graph input '%s' has rank %d; castor's tensors have at most %d "
                             "dimensions", v->name, v->rank, IR_MAX_RANK);
    ir_type t = {.dtype = DT_F32, .rank = v->rank};
    for (int r = 0; r < v->rank; r++) {
      t.dims[r] = v->dims[r];
      if (v->dims[r] >= 0) continue;
      if (r == 0) {
        t.dims[0] = IR_DIM_BATCH; /* the symbolic batch */
        continue;
      }
      return UNSUPPORTED(im, "dimension %d of graph input '%s' is symbolic ('%s'); castor "
                             "compiles one shape per model except the first (batch) "
                             "dimension: export the model with that dimension fixed",
                         r, v->name, v->dim_params[r] ? v->dim_params[r] : "unknown");
    }
    ir_node *in = ir_build_input(im->g, ir_name(im, v->name, "input"), &t, index++, model_loc(im));
    if (!val_define(im, v->name, in, bound)) return false;
  }
  return true;
}

static bool import_nodes(imp *im) {
  const onnx_graph *g = &im->m->graph;
  for (int i = 0; i < g->n_nodes && !im->failed; i++) {
    const onnx_node *n = &g->nodes[i];
    im->node = n;
    const char *label = *n->name ? n->name : arena_printf(im->g->arena, "%s_%d", n->op_type, i);
    im->layer = ir_name(im, label, "node");
    /* the location of an ONNX node: no lines, so "model.onnx: node 'x' (Op)" */
    im->loc = (diag_loc){arena_printf(im->g->arena, "%s: node '%s' (%s)", im->file, label, n->op_type), 0, 0};
    if (!is_default_domain(n->domain)) {
      UNSUPPORTED(im, "op %s of domain '%s': castor supports the default ONNX domain only",
                  n->op_type, n->domain);
      break;
    }
    if (n->n_outputs < 1) {
      FAIL(im, "%s has no outputs", n->op_type);
      break;
    }
    bool folded;
    if (!try_fold(im, n, &folded)) break;
    if (folded) continue;
    const op_row *row = find_row(im, n);
    if (!row || !attrs_known(im, row)) break;
    if (!row->lower(im, n, row) && !im->failed)
      FAIL(im, "%s could not be imported", n->op_type); /* a lowering that forgot to say why */
  }
  im->node = NULL;
  return !im->failed;
}

static bool import_outputs(imp *im) {
  const onnx_graph *g = &im->m->graph;
  if (g->n_outputs == 0) return FAIL(im, "the graph has no outputs");
  for (int i = 0; i < g->n_outputs; i++) {
    const char *name = g->outputs[i].name;
    imp_val *v = val_find(im, name);
    if (!v) return FAIL(im, "graph output '%s' is defined by no node", name);
    if (!v->node || v->node->op == IR_OP_CONST || v->node->op == IR_OP_INPUT)
      return UNSUPPORTED(im, "graph output '%s' is %s, not computed by the graph; castor "
                             "compiles outputs that depend on the inputs", name,
                         v->node && v->node->op == IR_OP_INPUT ? "a graph input" : "a constant");
    ir_graph_add_output(im->g, ir_name(im, name, "output"), v->node);
  }
  return true;
}

static int64_t default_opset(imp *im) {
  int64_t v = -1;
  for (int i = 0; i < im->m->n_opsets; i++)
    if (is_default_domain(im->m->opsets[i].domain)) v = im->m->opsets[i].version;
  return v;
}

/* The directory of `file` (external data is relative to it), or "." */
static char *dir_of(const char *file) {
  const char *slash = strrchr(file, '/');
  if (!slash) return xstrdup(".");
  if (slash == file) return xstrdup("/");
  size_t n = (size_t)(slash - file);
  char *d = xmalloc(n + 1);
  memcpy(d, file, n);
  d[n] = 0;
  return d;
}

ir_graph *fe_onnx_load(const char *file, const char *bytes, size_t len, const fe_options *o,
                       diag_sink *d, fe_train_defaults *out_defaults) {
  if (out_defaults) *out_defaults = (fe_train_defaults){0};
  fe_options defaults;
  if (!o) fe_options_init(&defaults), o = &defaults;
  char *dir = dir_of(file);
  onnx_model *m = onnx_model_read(file, bytes, len, dir, d);
  free(dir);
  if (!m) return NULL;
  imp im = {.m = m, .d = d, .o = o};
  im.g = ir_graph_create("onnx_model");
  im.g->name = ir_name(&im, m->graph.name, "onnx_model"); /* an identifier, as the text form needs */
  im.file = arena_strdup(im.g->arena, file);
  im.g->policy = IR_POLICY_FLOAT32;
  hmap_init(&im.vals, HMAP_STRINGS);
  /* the model's strings live in its arena, freed below: the graph keeps copies */
  for (int i = 0; i < m->n_opsets && !im.failed; i++)
    if (!is_default_domain(m->opsets[i].domain)) {
      bool used = false;
      for (int k = 0; k < m->graph.n_nodes; k++) used |= str_eq(m->graph.nodes[k].domain, m->opsets[i].domain);
      if (used)
        UNSUPPORTED(&im, "the model imports opset domain '%s', whose ops castor does not "
                         "support (only the default ONNX domain)", m->opsets[i].domain);
    }
  im.opset = default_opset(&im);
  if (!im.failed && im.opset < 1)
    FAIL(&im, "the model imports no default-domain opset (opset_import has no \"\" or "
              "\"ai.onnx\" entry)");
  if (!im.failed && im.opset > FE_ONNX_MAX_OPSET)
    UNSUPPORTED(&im, "the model uses opset %lld; castor's ONNX ops are written against opsets "
                     "up to %d", (long long)im.opset, FE_ONNX_MAX_OPSET);
  bool ok = !im.failed && import_inputs(&im) && import_nodes(&im) && import_outputs(&im);
  hmap_fini(&im.vals);
  if (ok && !ir_verify(im.g, d)) ok = false;
  if (!ok) {
    ir_graph_destroy(im.g);
    onnx_model_free(m);
    return NULL;
  }
  /* strings the graph still points at were copied into its arena; the
   * weight names and constant data too: nothing refers to m below here */
  onnx_model_free(m);
  return im.g;
}
