/* SPDX-License-Identifier: Apache-2.0 */
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
#include "frontend/onnx/internal.h"
#include "formats/safetensors.h"
#include "frontend/fe_weights.h"

#include "util/half.h"

#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- diagnostics ---- */

static diag_loc model_loc(imp *im) { return (diag_loc){im->file, 0, 0}; }

/* Reports the node's first error (later ones would only echo it); false.
 * The import goes on with the next node, so that one run shows every op
 * and form castor lacks; a message already reported for another node is
 * only counted (one note at the end says how many). */
bool oi_fail_kind(imp *im, diag_kind kind, const char *fmt, ...) {
  if (im->failed) return false;
  im->failed = true;
  va_list ap;
  va_start(ap, fmt);
  if (!im->node) {
    diag_verror_kind(im->d, kind, model_loc(im), fmt, ap);
    va_end(ap);
    return false;
  }
  str_buf b;
  str_buf_init(&b);
  str_buf_vprintf(&b, fmt, ap);
  va_end(ap);
  const char *msg = str_buf_cstr(&b);
  oi_node_error *e = hmap_get_str(&im->errors, msg, strlen(msg));
  if (e) {
    e->more++;
  } else {
    e = arena_alloc(im->g->arena, sizeof *e);
    *e = (oi_node_error){.loc = im->loc};
    if (im->last_error) im->last_error->next = e;
    else im->first_error = e;
    im->last_error = e;
    hmap_put_str(&im->errors, arena_strdup(im->g->arena, msg), strlen(msg), e);
    diag_error_kind(im->d, kind, im->loc, "%s", msg);
  }
  str_buf_fini(&b);
  return false;
}
#define FAIL(im, ...) oi_fail_kind((im), DIAG_KIND_INVALID_MODEL, __VA_ARGS__)
#define UNSUPPORTED(im, ...) oi_fail_kind((im), DIAG_KIND_UNSUPPORTED, __VA_ARGS__)

/* ---- names ---- */

/* An IR identifier for an ONNX name: leading '/' and other non-identifier
 * bytes dropped, then letters, digits and '_' kept and every other byte
 * '_', 'v' before a leading digit; unique in the graph ("/fc1/Gemm" ->
 * fc1_Gemm, "onnx::MatMul_7" -> onnx__MatMul_7). */
const char *oi_ir_name(imp *im, const char *onnx_name, const char *fallback) {
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

imp_val *oi_val_find(imp *im, const char *name) {
  return hmap_get_str(&im->vals, name, strlen(name));
}

bool oi_val_define(imp *im, const char *name, ir_node *node, const onnx_tensor *k) {
  if (!*name) return true; /* an omitted optional output */
  imp_val *v = arena_alloc(im->g->arena, sizeof *v);
  *v = (imp_val){.name = name, .node = node, .k = k, .layer = im->node ? im->layer : NULL, .loc = im->loc,
                 .param = k && im->defining_param};
  if (hmap_put_str(&im->vals, name, strlen(name), v))
    return FAIL(im, "value '%s' is defined twice (ONNX graphs are in SSA form)", name);
  return true;
}

/* Input k of the current node, which must be present. */
imp_val *oi_input(imp *im, int k) {
  const onnx_node *n = im->node;
  if (k >= n->n_inputs || !*n->inputs[k]) {
    FAIL(im, "%s needs input %d, which the node does not give", n->op_type, k + 1);
    return NULL;
  }
  imp_val *v = oi_val_find(im, n->inputs[k]);
  if (!v)
    FAIL(im, "input '%s' is defined by no earlier node, graph input or initializer (the graph "
             "is not topologically sorted, or has a cycle)", n->inputs[k]);
  return v;
}

bool oi_has_input(imp *im, int k) {
  return k < im->node->n_inputs && *im->node->inputs[k];
}

bool oi_dims_of(imp *im, const onnx_tensor *t, ir_type *out) {
  if (t->rank > IR_MAX_RANK)
    return UNSUPPORTED(im, "tensor '%s' has rank %d; castor's tensors have at most %d "
                           "dimensions", t->name, t->rank, IR_MAX_RANK);
  *out = (ir_type){.dtype = DT_F32, .rank = t->rank};
  for (int r = 0; r < t->rank; r++) out->dims[r] = t->dims[r];
  return true;
}

/* The f32 data of a float constant (float, float16 or bfloat16 widened
 * exactly), in the graph's arena. */
const float *oi_const_f32(imp *im, const onnx_tensor *t) {
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

/* The IR node of a value used as an operand of a run-time op, in ONNX's
 * order (a value held channels last is transposed back, once). */
ir_node *oi_operand(imp *im, imp_val *v) {
  if (!v) return NULL;
  if (v->node) return v->layout == OI_PLAIN ? v->node : oi_plain(im, v);
  ir_type t;
  if (!oi_dims_of(im, v->k, &t)) return NULL;
  if (t.rank == 0) t.rank = 1, t.dims[0] = 1; /* a scalar constant: one element */
  const float *data = oi_const_f32(im, v->k);
  if (!data) return NULL;
  return v->node = oi_host_node(im, v, v->name, &t, data);
}

/* The const of host value v's data (in t's dtype and dims): a weight when v is a parameter,
 * else trainable=false, so that training leaves an ONNX Constant node's value as PyTorch
 * leaves a literal. */
ir_node *oi_host_node(imp *im, imp_val *v, const char *weight, const ir_type *t, const void *data) {
  ir_node *c = ir_build_const(im->g, oi_ir_name(im, v->name, "const"), t, weight, data, im->loc);
  c->layer = im->layer;
  c->frozen = !v->param;
  return c;
}

/* The host constant of input k (an op that needs it at compile time). */
const onnx_tensor *oi_const_input(imp *im, int k, const char *what) {
  imp_val *v = oi_input(im, k);
  if (!v) return NULL;
  if (!v->k) {
    FAIL(im, "%s's %s (input %d, '%s') must be a constant: an initializer, a Constant node, "
             "or a graph input bound to data (--bind NAME=FILE)", im->node->op_type, what, k + 1,
         v->name);
    return NULL;
  }
  return v->k;
}

/* A host constant input k that is not also a run-time value (a float graph
 * input bound where needed is both: the run-time lowerings take it), or
 * NULL (absent, or a run-time value). */
const onnx_tensor *oi_host_const(imp *im, int k) {
  imp_val *v = oi_has_input(im, k) ? oi_val_find(im, im->node->inputs[k]) : NULL;
  return v && v->k && (!v->node || v->node->op == IR_OP_CONST) ? v->k : NULL;
}

/* Defines output k of the current node as IR node n (named after it). */
bool oi_define_output(imp *im, int k, ir_node *n) {
  if (!n) return false;
  if (k >= im->node->n_outputs) return FAIL(im, "%s has no output %d", im->node->op_type, k + 1);
  return oi_val_define(im, im->node->outputs[k], n, NULL);
}

/* Outputs from k on must be absent or unused: the lowering computes only
 * the ones before. The names used (node inputs: 1, graph outputs: 2) are
 * gathered once per import, so that a graph of many such nodes stays
 * linear. */
bool oi_outputs_unused_from(imp *im, int k, const char *why) {
  static int as_input = 1, as_output = 2;
  const onnx_graph *g = &im->m->graph;
  if (!im->used_built) {
    im->used_built = true;
    for (int a = 0; a < g->n_nodes; a++) /* first: a use as an input is the one named */
      for (int i = 0; i < g->nodes[a].n_inputs; i++)
        hmap_put_str(&im->used, g->nodes[a].inputs[i], strlen(g->nodes[a].inputs[i]), &as_input);
    for (int a = 0; a < g->n_outputs; a++)
      hmap_put_str(&im->used, g->outputs[a].name, strlen(g->outputs[a].name), &as_output);
  }
  for (int j = k; j < im->node->n_outputs; j++) {
    const char *o = im->node->outputs[j];
    const int *use = *o ? hmap_get_str(&im->used, o, strlen(o)) : NULL;
    if (use == &as_input)
      return UNSUPPORTED(im, "%s's output %d ('%s') is used; castor computes only %s", im->node->op_type,
                         j + 1, o, why);
    if (use == &as_output)
      return UNSUPPORTED(im, "%s's output %d ('%s') is a graph output; castor computes only %s",
                         im->node->op_type, j + 1, o, why);
  }
  return true;
}

/* Builds op over srcs with the current node's layer and location; a type
 * error (shapes that do not fit) is reported naming the node. */
ir_node *oi_build(imp *im, ir_op op, const char *suffix, ir_node *const *srcs, int n,
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
    /* integers and booleans where castor's op computes on floats (a Gemm of
     * int64 values): not what castor computes, rather than a bad model */
    bool ints = false;
    for (int i = 0; i < n; i++) ints |= !dtype_is_float(srcs[i]->type.dtype);
    oi_fail_kind(im, ints ? DIAG_KIND_UNSUPPORTED : DIAG_KIND_INVALID_MODEL, "%s on (%s): %s%s",
                 im->node ? im->node->op_type : ir_op_name(op), str_buf_cstr(&b), err,
                 ints ? " (castor computes this op on float tensors)" : "");
    str_buf_fini(&b);
    return NULL;
  }
  const char *base = suffix ? arena_printf(im->g->arena, "%s.%s", im->layer, suffix) : im->layer;
  ir_attr a = attr ? *attr : (ir_attr){0};
  ir_node *node = ir_build_op(im->g, op, oi_ir_name(im, base, "v"), srcs, n, &a, im->loc);
  node->layer = im->layer;
  return node;
}

/* ---- attributes ---- */

const onnx_attr *oi_attr_find(imp *im, const char *name) {
  for (int i = 0; i < im->node->n_attrs; i++)
    if (str_eq(im->node->attrs[i].name, name)) return &im->node->attrs[i];
  return NULL;
}

bool oi_attr_typed(imp *im, const onnx_attr *a, int type) {
  if (a->type == type) return true;
  return FAIL(im, "attribute '%s' is of type %s; %s's '%s' is of type %s", a->name,
              onnx_attr_type_name(a->type), im->node->op_type, a->name, onnx_attr_type_name(type));
}

bool oi_attr_int(imp *im, const char *name, int64_t def, int64_t *out) {
  const onnx_attr *a = oi_attr_find(im, name);
  *out = def;
  if (!a) return true;
  if (!oi_attr_typed(im, a, ONNX_ATTR_INT)) return false;
  *out = a->i;
  return true;
}

bool oi_attr_float(imp *im, const char *name, double def, double *out) {
  const onnx_attr *a = oi_attr_find(im, name);
  *out = def;
  if (!a) return true;
  if (!oi_attr_typed(im, a, ONNX_ATTR_FLOAT)) return false;
  *out = a->f;
  return true;
}

/* Every attribute of the node is one the row reads. */
bool oi_attrs_known(imp *im, const op_row *row) {
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
bool oi_norm_axis(imp *im, int64_t axis, int rank, const char *what, int *out) {
  if (axis < -rank || axis >= rank)
    return FAIL(im, "%s %lld is out of range for a tensor of rank %d", what, (long long)axis, rank);
  *out = (int)(axis < 0 ? axis + rank : axis);
  return true;
}

/* ---- host tensors (constants made at import) ---- */

onnx_tensor *oi_host_tensor(imp *im, int dtype, int rank, const int64_t *dims) {
  onnx_tensor *t = arena_alloc(im->g->arena, sizeof *t);
  *t = (onnx_tensor){.name = "", .dtype = dtype, .rank = rank, .numel = 1};
  for (int r = 0; r < rank; r++) t->dims[r] = dims[r], t->numel *= dims[r];
  t->nbytes = (size_t)t->numel * onnx_dtype_size(dtype);
  t->data = t->nbytes ? arena_alloc_aligned(im->g->arena, t->nbytes, 64) : NULL;
  return t;
}

/* ---- the table ---- */

static const op_row op_table[] = {
#define ONNX_OP(op, since, until, lower, ir, attrs) {#op, since, until, oi_##lower, ir, attrs},
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

/* The value a --dim binding gives dim_param `name`, or 0. */
static int64_t dim_binding(imp *im, const char *name) {
  for (int i = 0; name && i < im->o->n_dims; i++)
    if (str_eq(im->o->dim_names[i], name)) return im->o->dim_values[i];
  return 0;
}

/* Dimension r of graph input v as an IR dim: a fixed size, a bound
 * dim_param (--dim), the batch given at load (--batch) or castor's
 * symbolic batch N for a symbolic first dimension. */
static bool input_dim(imp *im, const onnx_value_info *v, int r, int64_t *out) {
  *out = v->dims[r];
  if (v->dims[r] >= 0) return true;
  const char *param = v->dim_params[r];
  int64_t bound = dim_binding(im, param);
  if (bound > 0) return *out = bound, true;
  if (r == 0) return *out = im->o->batch > 0 ? im->o->batch : IR_DIM_BATCH, true;
  if (param)
    return UNSUPPORTED(im, "dimension %d of graph input '%s' is symbolic ('%s'); castor compiles one shape per "
                           "model except the first (batch) dimension: bind it with --dim %s=VALUE",
                       r, v->name, param, param);
  return UNSUPPORTED(im, "dimension %d of graph input '%s' is unknown (no dim_value, no dim_param); castor "
                         "compiles one shape per model except the first (batch) dimension: export the model "
                         "with that dimension fixed", r, v->name);
}

/* Every --dim names a dim_param of the graph's inputs (a misspelt name is
 * an error, never ignored). */
static bool dims_all_declared(imp *im) {
  const onnx_graph *g = &im->m->graph;
  for (int i = 0; i < im->o->n_dims; i++) {
    str_buf b;
    str_buf_init(&b);
    bool found = false;
    for (int k = 0; k < g->n_inputs; k++)
      for (int r = 0; r < g->inputs[k].rank; r++) {
        const char *p = g->inputs[k].dim_params[r];
        if (g->inputs[k].dims[r] >= 0 || !p) continue;
        found |= str_eq(p, im->o->dim_names[i]);
        const char *q = arena_printf(im->g->arena, "'%s'", p);
        if (!strstr(str_buf_cstr(&b), q)) str_buf_printf(&b, "%s%s", b.len ? ", " : "", q);
      }
    if (!found) {
      diag_error_kind(im->d, DIAG_KIND_INVALID_ARGUMENT, model_loc(im),
                      "--dim %s: no graph input has a dimension named '%s' (the model's named dimensions: %s)",
                      im->o->dim_names[i], im->o->dim_names[i], b.len ? str_buf_cstr(&b) : "none");
      im->failed = true;
    }
    str_buf_fini(&b);
    if (!found) return false;
  }
  return true;
}

static bool import_inputs(imp *im) {
  const onnx_graph *g = &im->m->graph;
  int index = 0;
  if (!dims_all_declared(im)) return false;
  im->defining_param = true; /* the model's parameters (PyTorch's parameters and buffers) */
  for (int i = 0; i < g->n_initializers; i++)
    if (!oi_val_define(im, g->initializers[i].name, NULL, &g->initializers[i])) return im->defining_param = false;
  im->defining_param = false;
  for (int i = 0; i < g->n_inputs; i++) {
    const onnx_value_info *v = &g->inputs[i];
    imp_val *init = oi_val_find(im, v->name);
    const fe_binding *bind = binding(im, v->name);
    const onnx_tensor *bound = bind ? bind->tensor : NULL;
    bool runtime_type = bound && (bound->dtype == ONNX_FLOAT || bound->dtype == ONNX_INT64 ||
                                  bound->dtype == ONNX_INT32 || bound->dtype == ONNX_BOOL);
    if (bound && (!bind->where_needed || !runtime_type || init)) {
      if (init) init->k = bound; /* a binding overrides an initializer's default */
      else if (!oi_val_define(im, v->name, NULL, bound)) return false;
      continue;
    }
    if (init) continue; /* ir_version < 4: initializers are listed as inputs too */
    if (!v->is_tensor)
      return UNSUPPORTED(im, "graph input '%s' is not a tensor (a sequence, map or optional)",
                         v->name);
    /* integers and booleans: token ids, attention masks */
    ir_dtype dt = v->elem_type == ONNX_INT64 ? DT_I64 : v->elem_type == ONNX_INT32 ? DT_I32
                : v->elem_type == ONNX_BOOL ? DT_I1 : DT_F32;
    if (v->elem_type != ONNX_FLOAT && dt == DT_F32)
      return UNSUPPORTED(im, "graph input '%s' is of type %s; castor's ONNX import takes float, int64, int32 "
                             "and bool inputs (bind others to data with --bind NAME=FILE)",
                         v->name, onnx_dtype_name(v->elem_type));
    if (v->rank < 0)
      return FAIL(im, "graph input '%s' declares no shape; castor compiles fixed shapes", v->name);
    if (v->rank > IR_MAX_RANK)
      return UNSUPPORTED(im, "graph input '%s' has rank %d; castor's tensors have at most %d "
                             "dimensions", v->name, v->rank, IR_MAX_RANK);
    ir_type t = {.dtype = dt, .rank = v->rank};
    for (int r = 0; r < v->rank; r++)
      if (!input_dim(im, v, r, &t.dims[r])) return false;
    int64_t bytes;
    if (!ir_type_bytes(&t, 1, &bytes) || bytes > IR_MAX_TENSOR_BYTES)
      return FAIL(im, "graph input '%s' declares more than %lld bytes per batch row (castor's tensor limit)",
                  v->name, (long long)IR_MAX_TENSOR_BYTES);
    ir_node *in = ir_build_input(im->g, oi_ir_name(im, v->name, "input"), &t, index++, model_loc(im));
    if (!oi_val_define(im, v->name, in, bound)) return false;
  }
  return true;
}

/* Lowers node n (folds it, or builds its IR); false with its error reported. */
static bool import_node(imp *im, const onnx_node *n) {
  if (!is_default_domain(n->domain))
    return UNSUPPORTED(im, "op %s of domain '%s': castor supports the default ONNX domain only", n->op_type,
                       n->domain);
  if (n->n_outputs < 1) return FAIL(im, "%s has no outputs", n->op_type);
  im->row = NULL;
  bool folded;
  if (!oi_try_fold(im, n, &folded)) return false;
  if (folded) return true;
  const op_row *row = find_row(im, n);
  im->row = row;
  if (!row || !oi_attrs_known(im, row)) return false;
  if (!row->lower(im, n, row) && !im->failed)
    FAIL(im, "%s could not be imported", n->op_type); /* a lowering that forgot to say why */
  return !im->failed;
}

/* Outputs of a node that failed, or that uses a value of one: defined as
 * poison, so that the nodes after it are skipped without an error each. */
static void poison_outputs(imp *im, const onnx_node *n) {
  for (int k = 0; k < n->n_outputs; k++) {
    if (!*n->outputs[k] || oi_val_find(im, n->outputs[k])) continue;
    imp_val *v = arena_alloc(im->g->arena, sizeof *v);
    *v = (imp_val){.name = n->outputs[k], .poison = true};
    hmap_put_str(&im->vals, n->outputs[k], strlen(n->outputs[k]), v);
  }
}

/* Every node, in order; a node that fails does not stop the import, so a
 * model castor cannot compile gets one error per distinct unsupported op
 * or form in one run. */
static bool import_nodes(imp *im) {
  const onnx_graph *g = &im->m->graph;
  hmap_init(&im->errors, HMAP_STRINGS);
  for (int i = 0; i < g->n_nodes; i++) {
    const onnx_node *n = &g->nodes[i];
    im->node = n;
    im->failed = false;
    const char *label = *n->name ? n->name : arena_printf(im->g->arena, "%s_%d", n->op_type, i);
    im->layer = oi_ir_name(im, label, "node");
    /* the location of an ONNX node: no lines, so "model.onnx: node 'x' (Op)" */
    im->loc = (diag_loc){arena_printf(im->g->arena, "%s: node '%s' (%s)", im->file, label, n->op_type), 0, 0};
    bool skip = false;
    for (int k = 0; k < n->n_inputs && !skip; k++) {
      imp_val *v = *n->inputs[k] ? oi_val_find(im, n->inputs[k]) : NULL;
      skip = v && v->poison;
    }
    if (!skip && import_node(im, n)) continue;
    if (!skip) im->n_errors++;
    poison_outputs(im, n);
  }
  im->node = NULL;
  /* the messages several nodes had: one note each, at the first */
  for (const oi_node_error *e = im->first_error; e; e = e->next)
    if (e->more)
      diag_report(im->d, DIAG_NOTE, e->loc, "%d more node%s of the model fail%s the same way", e->more,
                  e->more == 1 ? "" : "s", e->more == 1 ? "s" : "");
  hmap_fini(&im->errors);
  im->failed = im->n_errors > 0;
  return !im->failed;
}

static bool import_outputs(imp *im) {
  const onnx_graph *g = &im->m->graph;
  if (g->n_outputs == 0) return FAIL(im, "the graph has no outputs");
  for (int i = 0; i < g->n_outputs; i++) {
    const char *name = g->outputs[i].name;
    imp_val *v = oi_val_find(im, name);
    if (!v) return FAIL(im, "graph output '%s' is defined by no node", name);
    if (!v->node || v->node->op == IR_OP_CONST)
      return UNSUPPORTED(im, "graph output '%s' is a constant, not computed by the graph; castor "
                             "compiles outputs that depend on the inputs", name);
    ir_node *y = oi_operand(im, v); /* ONNX's order: NCHW, not castor's NHWC */
    if (!y) return false;
    if (y->op == IR_OP_INPUT) { /* an input passed through (Identity, Dropout): a copy */
      ir_attr a = {.shape = {.rank = y->type.rank}};
      for (int r = 0; r < y->type.rank; r++) a.shape.dims[r] = y->type.dims[r];
      if (!(y = oi_build(im, IR_OP_RESHAPE, "copy", &y, 1, &a))) return false;
    }
    ir_graph_add_output(im->g, oi_ir_name(im, name, "output"), y);
  }
  return true;
}

static int64_t default_opset(imp *im) {
  int64_t v = -1;
  for (int i = 0; i < im->m->n_opsets; i++)
    if (is_default_domain(im->m->opsets[i].domain)) v = im->m->opsets[i].version;
  return v;
}

/* --weights FILE (castor_compile_options.weights_path): a safetensors file whose tensors
 * replace the model's weights, by key, in two steps:
 *   - before import, a tensor named as a float initializer (PyTorch's state_dict keys: what
 *     safetensors.torch.save_file(model.state_dict()) writes) replaces its data, in the
 *     initializer's ONNX shape, so whatever the importer derives from it (a Gemm's B transposed, a
 *     conv's kernel in channels-last order, a folded BatchNormalization) is derived from the file's;
 *   - after import, the rest replace the consts of the keys castor train --save writes (a
 *     transformed initializer's name with a "'": a Gemm's B transposed, "fc.weight'").
 * Every tensor must name a float weight of the model and have its shape (each mismatch is
 * reported); F16 and BF16 data are widened to f32 (an import's floats are all f32,
 * frontend.h), NaN and Inf are warned of; a weight the file does not hold keeps the model's
 * value. */
typedef struct weights_file {
  safetensors_file st;
  diag_loc at;
  bool *used;
} weights_file;

static void shape_print(str_buf *b, const char *dtype, int rank, const int64_t *dims) {
  str_buf_printf(b, "%s[", dtype);
  for (int r = 0; r < rank; r++) str_buf_printf(b, "%s%lld", r ? "," : "", (long long)dims[r]);
  str_buf_putc(b, ']');
}

/* t's values as f32 in a, NaN and Inf warned of; NULL if it has no elements. */
static float *weights_data(const safetensors_tensor *t, arena *a, diag_loc at, diag_sink *d) {
  int64_t numel = 1;
  for (int r = 0; r < t->rank; r++) numel *= t->dims[r];
  float *data = arena_alloc_aligned(a, numel ? (size_t)numel * sizeof(float) : 1, 64);
  fe_nonfinite nf = fe_tensor_to_f32(t, data);
  if (fe_nonfinite_any(nf)) {
    str_buf b;
    str_buf_init(&b);
    fe_nonfinite_str(&b, nf);
    diag_warning(d, at, "weight '%s' has %s of %lld values", t->name, str_buf_cstr(&b), (long long)numel);
    str_buf_fini(&b);
  }
  return data;
}

static bool weights_open(weights_file *w, const char *path, diag_sink *d) {
  w->at = (diag_loc){.file = diag_intern(d, path)};
  if (!safetensors_read(path, w->at, d, &w->st)) return false;
  w->used = w->st.n_tensors ? xcalloc((size_t)w->st.n_tensors, sizeof *w->used) : NULL;
  return true;
}

static void weights_close(weights_file *w) {
  free(w->used);
  safetensors_fini(&w->st);
}

/* The first step: the initializers' data. */
static bool weights_to_initializers(weights_file *w, onnx_model *m, diag_sink *d) {
  bool ok = true;
  for (int i = 0; i < m->graph.n_initializers; i++) {
    onnx_tensor *init = &m->graph.initializers[i];
    const safetensors_tensor *t = init->name[0] ? safetensors_find(&w->st, init->name) : NULL;
    if (!t) continue;
    w->used[t - w->st.tensors] = true;
    bool same = init->dtype == ONNX_FLOAT && t->rank == init->rank;
    for (int r = 0; same && r < t->rank; r++) same = t->dims[r] == init->dims[r];
    if (!same) {
      str_buf b;
      str_buf_init(&b);
      shape_print(&b, onnx_dtype_name(init->dtype), init->rank, init->dims);
      str_buf_puts(&b, " in the model, not the file's ");
      shape_print(&b, dtype_name(t->dtype), t->rank, t->dims);
      diag_error_kind(d, DIAG_KIND_INVALID_MODEL, w->at, "initializer '%s' is %s", t->name, str_buf_cstr(&b));
      str_buf_fini(&b);
      ok = false;
      continue;
    }
    init->data = init->numel ? weights_data(t, m->arena, w->at, d) : NULL;
    init->nbytes = (size_t)init->numel * sizeof(float);
  }
  return ok;
}

/* The second step: the consts of castor's keys, and every tensor left unused is an error. */
static bool weights_to_consts(weights_file *w, imp *im) {
  bool ok = true;
  for (int i = 0; i < im->g->n_nodes; i++) {
    ir_node *n = im->g->nodes[i];
    if (n->op != IR_OP_CONST || !n->attr.weight || !n->attr.data) continue;
    const safetensors_tensor *t = safetensors_find(&w->st, n->attr.weight);
    if (!t || w->used[t - w->st.tensors]) continue;
    w->used[t - w->st.tensors] = true;
    bool same = n->type.dtype == DT_F32 && t->rank == n->type.rank;
    for (int r = 0; same && r < t->rank; r++) same = t->dims[r] == n->type.dims[r];
    if (!same) {
      str_buf b;
      str_buf_init(&b);
      ir_type_print(&n->type, &b);
      str_buf_puts(&b, " in the model, not the file's ");
      shape_print(&b, dtype_name(t->dtype), t->rank, t->dims);
      diag_error_kind(im->d, DIAG_KIND_INVALID_MODEL, w->at, "weight '%s' is %s", t->name, str_buf_cstr(&b));
      str_buf_fini(&b);
      ok = false;
      continue;
    }
    n->attr.data = weights_data(t, im->g->arena, w->at, im->d);
  }
  for (int k = 0; k < w->st.n_tensors; k++)
    if (!w->used[k]) {
      diag_error_kind(im->d, DIAG_KIND_INVALID_MODEL, w->at,
                      "'%s' is no weight of the model (an ONNX model's weights are its float initializers by name, "
                      "and the keys castor train --save writes for them)", w->st.tensors[k].name);
      ok = false;
    }
  return ok;
}

ir_graph *fe_onnx_load(const char *file, const char *bytes, size_t len, const fe_options *o,
                       diag_sink *d, fe_train_defaults *out_defaults) {
  if (out_defaults) *out_defaults = (fe_train_defaults){0};
  fe_options defaults;
  if (!o) fe_options_init(&defaults), o = &defaults;
  onnx_model *m = onnx_model_read(file, bytes, len, o->dir, d);
  if (!m) return NULL;
  weights_file wf = {0};
  bool wf_open = false;
  if (o->weights_path) {
    if (!(wf_open = weights_open(&wf, o->weights_path, d)) || !weights_to_initializers(&wf, m, d)) {
      if (wf_open) weights_close(&wf);
      onnx_model_free(m);
      return NULL;
    }
  }
  imp im = {.m = m, .d = d, .o = o};
  im.g = ir_graph_create("onnx_model");
  im.g->name = oi_ir_name(&im, m->graph.name, "onnx_model"); /* an identifier, as the text form needs */
  im.file = arena_strdup(im.g->arena, file);
  im.g->policy = IR_POLICY_FLOAT32;
  hmap_init(&im.vals, HMAP_STRINGS);
  hmap_init(&im.used, HMAP_STRINGS);
  hmap_init(&im.concat_parts, HMAP_STRINGS);
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
  hmap_fini(&im.used);
  hmap_fini(&im.concat_parts);
  if (ok && !ir_verify(im.g, d)) ok = false;
  if (ok && wf_open && !weights_to_consts(&wf, &im)) ok = false;
  if (wf_open) weights_close(&wf);
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

