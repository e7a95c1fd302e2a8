/*
 * ir.c: op/dtype/policy tables, types, graph container and the builder with
 * type inference. Printing, parsing and verification live in their own files.
 */
#include "ir.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- tables ---- */

static const struct {
  const char *name;
  int arity;
  unsigned flags;
  const char *sem;
} op_table[IR_OP_COUNT] = {
#define IR_OP(e, name, nsrc, flags, sem) [IR_OP_##e] = {#name, nsrc, flags, sem},
#include "ir_ops.def"
#undef IR_OP
};

const char *ir_op_name(ir_op op) { return op < IR_OP_COUNT ? op_table[op].name : "?"; }
int ir_op_arity(ir_op op) { return op_table[op].arity; }
unsigned ir_op_flags(ir_op op) { return op_table[op].flags; }
const char *ir_op_semantics(ir_op op) { return op_table[op].sem; }

static bool name_is(const char *s, size_t n, const char *name) {
  return strlen(name) == n && memcmp(s, name, n) == 0;
}

bool ir_op_from_name(const char *s, size_t n, ir_op *out) {
  for (int i = 0; i < IR_OP_COUNT; i++)
    if (name_is(s, n, op_table[i].name)) return *out = (ir_op)i, true;
  return false;
}

static const struct {
  const char *name;
  int size;
  bool is_float;
} dtype_table[IR_DTYPE_COUNT] = {
#define IR_DTYPE(e, name, size, isfloat) [IR_DTYPE_##e] = {#name, size, isfloat},
#include "ir_dtypes.def"
#undef IR_DTYPE
};

const char *ir_dtype_name(ir_dtype t) { return t < IR_DTYPE_COUNT ? dtype_table[t].name : "?"; }
int ir_dtype_size(ir_dtype t) { return dtype_table[t].size; }
bool ir_dtype_is_float(ir_dtype t) { return dtype_table[t].is_float; }
bool ir_dtype_from_name(const char *s, size_t n, ir_dtype *out) {
  for (int i = 0; i < IR_DTYPE_COUNT; i++)
    if (name_is(s, n, dtype_table[i].name)) return *out = (ir_dtype)i, true;
  return false;
}

static const struct {
  const char *name;
  ir_dtype compute, variable;
} policy_table[IR_POLICY_COUNT] = {
    [IR_POLICY_NONE] = {"none", IR_DTYPE_F32, IR_DTYPE_F32},
#define IR_POLICY(e, name, c, v) [IR_POLICY_##e] = {#name, IR_DTYPE_##c, IR_DTYPE_##v},
#include "ir_policies.def"
#undef IR_POLICY
};

const char *ir_policy_name(ir_policy p) { return p < IR_POLICY_COUNT ? policy_table[p].name : "?"; }
ir_dtype ir_policy_compute_dtype(ir_policy p) { return policy_table[p].compute; }
ir_dtype ir_policy_variable_dtype(ir_policy p) { return policy_table[p].variable; }
bool ir_policy_from_name(const char *s, size_t n, ir_policy *out) {
  for (int i = 1; i < IR_POLICY_COUNT; i++)
    if (name_is(s, n, policy_table[i].name)) return *out = (ir_policy)i, true;
  return false;
}

/* ---- types ---- */

bool ir_type_eq(const ir_type *a, const ir_type *b) {
  if (a->dtype != b->dtype || a->rank != b->rank) return false;
  for (int i = 0; i < a->rank; i++)
    if (a->dims[i] != b->dims[i]) return false;
  return true;
}

bool ir_type_is_batched(const ir_type *t) { return t->rank > 0 && t->dims[0] == IR_DIM_BATCH; }

bool ir_type_inner_numel(const ir_type *t, int64_t *out) {
  int64_t n = 1;
  for (int i = ir_type_is_batched(t) ? 1 : 0; i < t->rank; i++)
    if (!size_mul_ok(n, t->dims[i], &n)) return false;
  *out = n;
  return true;
}

bool ir_type_numel(const ir_type *t, int64_t batch, int64_t *out) {
  if (!ir_type_inner_numel(t, out)) return false;
  return ir_type_is_batched(t) ? size_mul_ok(*out, batch, out) : true;
}

bool ir_type_bytes(const ir_type *t, int64_t batch, int64_t *out) {
  int64_t n;
  return ir_type_numel(t, batch, &n) && size_mul_ok(n, ir_dtype_size(t->dtype), out);
}

void ir_type_print(const ir_type *t, str_buf *out) {
  str_buf_printf(out, "%s[", ir_dtype_name(t->dtype));
  for (int i = 0; i < t->rank; i++) {
    if (i) str_buf_putc(out, ',');
    if (t->dims[i] == IR_DIM_BATCH) str_buf_putc(out, 'N');
    else str_buf_printf(out, "%lld", (long long)t->dims[i]);
  }
  str_buf_putc(out, ']');
}

/* ---- graph ---- */

ir_graph *ir_graph_create(const char *name) {
  arena *a = arena_create();
  ir_graph *g = arena_alloc(a, sizeof *g);
  g->arena = a;
  g->name = arena_strdup(a, name);
  g->policy = IR_POLICY_FLOAT32;
  return g;
}

void ir_graph_destroy(ir_graph *g) {
  if (!g) return;
  free(g->nodes);
  free(g->outputs);
  arena_destroy(g->arena); /* g itself lives in the arena */
}

void ir_graph_insert(ir_graph *g, int pos, ir_node *n) {
  CASTOR_ASSERT(pos >= 0 && pos <= g->n_nodes);
  if (g->n_nodes == g->cap_nodes) {
    g->cap_nodes = g->cap_nodes ? 2 * g->cap_nodes : 32;
    g->nodes = xrealloc(g->nodes, (size_t)g->cap_nodes * sizeof *g->nodes);
  }
  memmove(g->nodes + pos + 1, g->nodes + pos, (size_t)(g->n_nodes - pos) * sizeof *g->nodes);
  g->nodes[pos] = n;
  g->n_nodes++;
  for (int i = pos; i < g->n_nodes; i++) g->nodes[i]->id = i;
}

void ir_graph_append(ir_graph *g, ir_node *n) { ir_graph_insert(g, g->n_nodes, n); }

void ir_graph_add_output(ir_graph *g, const char *name, ir_node *value) {
  if (g->n_outputs == g->cap_outputs) {
    g->cap_outputs = g->cap_outputs ? 2 * g->cap_outputs : 4;
    g->outputs = xrealloc(g->outputs, (size_t)g->cap_outputs * sizeof *g->outputs);
  }
  g->outputs[g->n_outputs++] = (ir_output){arena_strdup(g->arena, name), value};
}

void ir_graph_renumber(ir_graph *g) {
  for (int i = 0; i < g->n_nodes; i++) g->nodes[i]->id = i;
}

void ir_graph_replace_uses(ir_graph *g, ir_node *from, ir_node *to) {
  for (int i = 0; i < g->n_nodes; i++)
    for (int s = 0; s < g->nodes[i]->n_srcs; s++)
      if (g->nodes[i]->srcs[s] == from) g->nodes[i]->srcs[s] = to;
  for (int i = 0; i < g->n_outputs; i++)
    if (g->outputs[i].value == from) g->outputs[i].value = to;
}

void ir_graph_compact(ir_graph *g, const bool *keep) {
  int j = 0;
  for (int i = 0; i < g->n_nodes; i++)
    if (keep[i]) g->nodes[j++] = g->nodes[i];
  g->n_nodes = j;
  ir_graph_renumber(g);
}

ir_node *ir_graph_find(const ir_graph *g, const char *name) {
  for (int i = 0; i < g->n_nodes; i++)
    if (strcmp(g->nodes[i]->name, name) == 0) return g->nodes[i];
  return NULL;
}

const char *ir_graph_unique_name(const ir_graph *g, const char *base) {
  if (!ir_graph_find(g, base)) return arena_strdup(g->arena, base);
  for (int k = 1;; k++) {
    char *s = arena_printf(g->arena, "%s.%d", base, k);
    if (!ir_graph_find(g, s)) return s;
  }
}

int ir_graph_num_inputs(const ir_graph *g) {
  int n = 0;
  for (int i = 0; i < g->n_nodes; i++) n += g->nodes[i]->op == IR_OP_INPUT;
  return n;
}

ir_node *ir_graph_input(const ir_graph *g, int index) {
  for (int i = 0; i < g->n_nodes; i++)
    if (g->nodes[i]->op == IR_OP_INPUT && g->nodes[i]->attr.input.index == index)
      return g->nodes[i];
  return NULL;
}

int *ir_graph_use_counts(const ir_graph *g) {
  int *uses = xcalloc((size_t)g->n_nodes + 1, sizeof *uses);
  for (int i = 0; i < g->n_nodes; i++)
    for (int s = 0; s < g->nodes[i]->n_srcs; s++) uses[g->nodes[i]->srcs[s]->id]++;
  for (int i = 0; i < g->n_outputs; i++) uses[g->outputs[i].value->id]++;
  return uses;
}

/* ---- type inference ---- */

static void shape_str(const ir_type *t, char *buf, size_t n) {
  str_buf b;
  str_buf_init(&b);
  ir_type_print(t, &b);
  snprintf(buf, n, "%s", str_buf_cstr(&b));
  str_buf_fini(&b);
}

#define FAIL(...) (snprintf(err, errlen, __VA_ARGS__), false)

bool ir_infer_type(ir_op op, ir_node *const *srcs, int n_srcs, const ir_attr *attr,
                   ir_type *out, char *err, size_t errlen) {
  char sa[96], sb[96];
  if (n_srcs != ir_op_arity(op))
    return FAIL("%s takes %d operand(s), got %d", ir_op_name(op), ir_op_arity(op), n_srcs);
  switch (op) {
  case IR_OP_INPUT:
  case IR_OP_CONST:
    return FAIL("%s has no inferred type", ir_op_name(op));
  case IR_OP_MATMUL: {
    const ir_type *a = &srcs[0]->type, *b = &srcs[1]->type;
    shape_str(a, sa, sizeof sa), shape_str(b, sb, sizeof sb);
    if (a->rank != 2 || b->rank != 2)
      return FAIL("matmul operands must be rank 2, got %s and %s", sa, sb);
    if (ir_type_is_batched(b))
      return FAIL("matmul right operand %s must not have the batch dimension", sb);
    if (a->dims[1] != b->dims[0])
      return FAIL("matmul inner dimensions differ: %s and %s", sa, sb);
    if (a->dtype != b->dtype || !ir_dtype_is_float(a->dtype))
      return FAIL("matmul operands must share one float dtype, got %s and %s", sa, sb);
    if (!ir_dtype_is_float(attr->matmul.acc))
      return FAIL("matmul accumulator must be a float dtype, got %s",
                  ir_dtype_name(attr->matmul.acc));
    *out = (ir_type){a->dtype, 2, {a->dims[0], b->dims[1]}};
    return true;
  }
  case IR_OP_ADD:
  case IR_OP_MUL: {
    const ir_type *a = &srcs[0]->type, *b = &srcs[1]->type;
    shape_str(a, sa, sizeof sa), shape_str(b, sb, sizeof sb);
    if (a->dtype != b->dtype || !ir_dtype_is_float(a->dtype))
      return FAIL("%s operands must share one float dtype, got %s and %s", ir_op_name(op), sa, sb);
    bool bias = b->rank == 1 && a->rank >= 1 && !ir_type_is_batched(b) &&
                b->dims[0] == a->dims[a->rank - 1];
    if (!ir_type_eq(a, b) && !bias)
      return FAIL("%s operand shapes differ: %s and %s", ir_op_name(op), sa, sb);
    *out = *a;
    return true;
  }
  case IR_OP_RELU:
  case IR_OP_SIGMOID:
  case IR_OP_TANH:
  case IR_OP_GELU:
  case IR_OP_SOFTMAX:
    shape_str(&srcs[0]->type, sa, sizeof sa);
    if (!ir_dtype_is_float(srcs[0]->type.dtype))
      return FAIL("%s needs a float operand, got %s", ir_op_name(op), sa);
    if (op == IR_OP_SOFTMAX && srcs[0]->type.rank < 1)
      return FAIL("softmax needs rank >= 1, got %s", sa);
    *out = srcs[0]->type;
    return true;
  case IR_OP_CAST:
    *out = srcs[0]->type;
    out->dtype = attr->cast.to;
    return true;
  case IR_OP_PAD:
  case IR_OP_SLICE: {
    const ir_type *x = &srcs[0]->type;
    shape_str(x, sa, sizeof sa);
    if (attr->shape.rank != x->rank)
      return FAIL("%s to rank %d of %s", ir_op_name(op), attr->shape.rank, sa);
    *out = *x;
    for (int r = 0; r < x->rank; r++) {
      int64_t want = attr->shape.dims[r], have = x->dims[r];
      if ((want == IR_DIM_BATCH) != (have == IR_DIM_BATCH))
        return FAIL("%s of %s must keep the batch dimension N in dimension 0 and nowhere else",
                    ir_op_name(op), sa);
      if (want != IR_DIM_BATCH && (want < 1 || (op == IR_OP_PAD ? want < have : want > have)))
        return FAIL("%s of %s would make dimension %d %lld; a %s", ir_op_name(op), sa, r, (long long)want,
                    op == IR_OP_PAD ? "pad may only grow a dimension" : "slice may only shrink a dimension");
      out->dims[r] = want;
    }
    return true;
  }
  case IR_OP_COUNT:
    break;
  }
  CASTOR_UNREACHABLE();
  return false;
}

#undef FAIL

/* ---- builder ---- */

ir_node *ir_node_new(ir_graph *g, ir_op op, const ir_type *type, ir_node *const *srcs,
                     int n_srcs, const char *name, diag_loc loc) {
  CASTOR_ASSERT(n_srcs >= 0 && n_srcs <= IR_MAX_SRCS);
  ir_node *n = arena_alloc(g->arena, sizeof *n);
  n->op = op;
  n->type = *type;
  n->n_srcs = n_srcs;
  for (int i = 0; i < n_srcs; i++) n->srcs[i] = srcs[i];
  n->name = arena_strdup(g->arena, name);
  n->loc = loc;
  n->id = -1;
  return n;
}

static ir_node *build(ir_graph *g, ir_op op, const char *name, ir_node *const *srcs, int n,
                      const ir_attr *attr, diag_loc loc) {
  ir_type t;
  char err[256];
  if (!ir_infer_type(op, srcs, n, attr, &t, err, sizeof err)) {
    fprintf(stderr, "castor: internal error: building %%%s: %s\n", name, err);
    CASTOR_ASSERT(!"ir_build_*: type inference failed");
  }
  ir_node *node = ir_node_new(g, op, &t, srcs, n, name, loc);
  node->attr = *attr;
  ir_graph_append(g, node);
  return node;
}

ir_node *ir_build_input(ir_graph *g, const char *name, const ir_type *type, int index,
                        diag_loc loc) {
  ir_node *n = ir_node_new(g, IR_OP_INPUT, type, NULL, 0, name, loc);
  n->attr.input.index = index;
  ir_graph_append(g, n);
  return n;
}

ir_node *ir_build_const(ir_graph *g, const char *name, const ir_type *type,
                        const char *weight, const void *data, diag_loc loc) {
  ir_node *n = ir_node_new(g, IR_OP_CONST, type, NULL, 0, name, loc);
  n->attr.konst.weight = arena_strdup(g->arena, weight);
  n->attr.konst.data = data;
  ir_graph_append(g, n);
  return n;
}

ir_node *ir_build_matmul(ir_graph *g, const char *name, ir_node *a, ir_node *b, ir_dtype acc,
                         diag_loc loc) {
  ir_attr attr = {.matmul = {acc}};
  return build(g, IR_OP_MATMUL, name, (ir_node *[]){a, b}, 2, &attr, loc);
}

ir_node *ir_build_binary(ir_graph *g, ir_op op, const char *name, ir_node *a, ir_node *b,
                         diag_loc loc) {
  ir_attr attr = {0};
  return build(g, op, name, (ir_node *[]){a, b}, 2, &attr, loc);
}

ir_node *ir_build_unary(ir_graph *g, ir_op op, const char *name, ir_node *x, diag_loc loc) {
  ir_attr attr = {0};
  return build(g, op, name, &x, 1, &attr, loc);
}

ir_node *ir_build_reshape_op(ir_graph *g, ir_op op, const char *name, ir_node *x, const int64_t *dims,
                             diag_loc loc) {
  ir_attr attr = {0};
  attr.shape.rank = x->type.rank;
  for (int r = 0; r < x->type.rank; r++) attr.shape.dims[r] = dims[r];
  return build(g, op, name, &x, 1, &attr, loc);
}

ir_node *ir_build_cast(ir_graph *g, const char *name, ir_node *x, ir_dtype to, diag_loc loc) {
  ir_attr attr = {.cast = {to}};
  return build(g, IR_OP_CAST, name, &x, 1, &attr, loc);
}

ir_graph *ir_graph_clone(const ir_graph *src) {
  ir_graph *g = ir_graph_create(src->name);
  g->policy = src->policy;
  ir_node **map = xcalloc((size_t)src->n_nodes + 1, sizeof *map);
  for (int i = 0; i < src->n_nodes; i++) {
    const ir_node *s = src->nodes[i];
    ir_node *n = arena_alloc(g->arena, sizeof *n);
    *n = *s;
    n->name = arena_strdup(g->arena, s->name);
    n->note = s->note ? arena_strdup(g->arena, s->note) : NULL;
    n->layer = s->layer ? arena_strdup(g->arena, s->layer) : NULL;
    n->rule = s->rule ? arena_strdup(g->arena, s->rule) : NULL;
    if (s->op == IR_OP_CONST) n->attr.konst.weight = arena_strdup(g->arena, s->attr.konst.weight);
    for (int k = 0; k < s->n_srcs; k++) {
      CASTOR_ASSERT(s->srcs[k]->id >= 0 && s->srcs[k]->id < i && src->nodes[s->srcs[k]->id] == s->srcs[k]);
      n->srcs[k] = map[s->srcs[k]->id];
    }
    map[i] = n;
    ir_graph_append(g, n);
  }
  for (int i = 0; i < src->n_outputs; i++) ir_graph_add_output(g, src->outputs[i].name, map[src->outputs[i].value->id]);
  free(map);
  return g;
}

static bool ident_char(char c, bool first) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (!first && c >= '0' && c <= '9');
}

const char *ir_note_layer(arena *a, const char *note) {
  if (!note) return NULL;
  const char *p = note;
  static const char prefix[] = "autocast: ";
  bool cast_note = strncmp(p, prefix, sizeof prefix - 1) == 0;
  if (cast_note) p += sizeof prefix - 1;
  size_t n = 0;
  while (p[n] && ident_char(p[n], n == 0)) n++;
  if (n == 0 || (!cast_note && p[n]) || (cast_note && p[n] != ' ')) return NULL;
  if (cast_note && n == 6 && strncmp(p, "output", 6) == 0) return NULL;
  return arena_strndup(a, p, n);
}
