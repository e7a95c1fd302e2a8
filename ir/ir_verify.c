/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ir_verify.c: the structural and type invariants every graph satisfies
 * between passes. The pass manager runs it after each pass under
 * --verify-each (always in tests), and the `verify` pass runs it first in
 * every pipeline.
 *
 * Invariants:
 *   - node ids equal schedule positions; names are non-empty, unique and
 *     valid in the text form ([A-Za-z_][A-Za-z0-9_.]*);
 *   - ops, dtypes and policies are in their tables; ranks are 0..6; dims are
 *     positive except that dims[0] may be the batch N; sizes fit in
 *     IR_MAX_TENSOR_BYTES;
 *   - each source is a node of this graph earlier in the schedule, and the
 *     source count is the op's arity;
 *   - a non-leaf node's type is what ir_infer_type computes from its sources;
 *   - inputs have indices 0..k-1, each once, and are batched [N, ...] or
 *     static (no N: a graph with a bound batch, --batch); constants are not
 *     batched and name their weight;
 *   - there is at least one output; outputs have unique valid names
 *     ([A-Za-z_][A-Za-z0-9_]*) and point at nodes of the graph.
 * Every violation is reported (not just the first), at the node's location
 * when it has one, as "verify: %name: ...". Returns true when clean.
 */
#include "ir/ir.h"

#include <math.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- positions through the hash map (util.h; graphs can be large): a
 * node's or a name's value is its slot in g->nodes (or g->outputs), so the
 * position is the slot's offset ---- */

/* Position of the node or name key in the map, or -1. */
static int pos_of(const ir_graph *g, const void *slot) {
  return slot ? (int)((ir_node *const *)slot - g->nodes) : -1;
}

/* ---- checks ---- */

typedef struct verifier {
  const ir_graph *g;
  diag_sink *d;
  hmap pos; /* node -> its first slot in the schedule */
  int n_errors;
} verifier;

static bool name_ok(const char *s, bool dots) {
  if (!s || !((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || *s == '_')) return false;
  for (s++; *s; s++)
    if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
          *s == '_' || (dots && *s == '.')))
      return false;
  return true;
}

static const char *node_name(const ir_node *n) {
  return n && n->name && n->name[0] ? n->name : "?";
}

static void err(verifier *v, const ir_node *n, const char *fmt, ...) CASTOR_PRINTF(3, 4);
static void err(verifier *v, const ir_node *n, const char *fmt, ...) {
  str_buf b;
  str_buf_init(&b);
  va_list ap;
  va_start(ap, fmt);
  str_buf_vprintf(&b, fmt, ap);
  va_end(ap);
  diag_loc none = {0};
  if (n) diag_error(v->d, n->loc, "verify: %%%s: %s", node_name(n), str_buf_cstr(&b));
  else diag_error(v->d, none, "verify: %s", str_buf_cstr(&b));
  str_buf_fini(&b);
  v->n_errors++;
}

static void type_str(const ir_type *t, char *buf, size_t n) {
  str_buf b;
  str_buf_init(&b);
  ir_type_print(t, &b);
  snprintf(buf, n, "%s", str_buf_cstr(&b));
  str_buf_fini(&b);
}

/* Dtype, rank, dims and size; false if the type is unusable. */
static bool check_type(verifier *v, const ir_node *n) {
  const ir_type *t = &n->type;
  if ((unsigned)t->dtype >= DT_COUNT) {
    err(v, n, "invalid dtype code %d", (int)t->dtype);
    return false;
  }
  if (t->rank < 0 || t->rank > IR_MAX_RANK) {
    err(v, n, "rank %d is outside 0..%d", t->rank, IR_MAX_RANK);
    return false;
  }
  bool ok = true;
  for (int i = 0; i < t->rank; i++) {
    if (t->dims[i] == IR_DIM_BATCH && i == 0) continue;
    if (t->dims[i] == IR_DIM_BATCH) {
      err(v, n, "the batch dimension N is dimension %d; it may only be the first", i);
      ok = false;
    } else if (t->dims[i] < 0) {
      err(v, n, "dimension %d is %lld; dimensions must be >= 0", i, (long long)t->dims[i]);
      ok = false;
    }
  }
  int64_t bytes;
  if (ok && (!ir_type_bytes(t, 1, &bytes) || bytes > IR_MAX_TENSOR_BYTES)) {
    char s[96];
    type_str(t, s, sizeof s);
    err(v, n, "type %s is larger than the %lld-byte tensor limit", s,
        (long long)IR_MAX_TENSOR_BYTES);
    ok = false;
  }
  return ok;
}

/* Sources defined earlier, arity, and the inferred type. */
static void check_sources(verifier *v, const ir_node *n, int pos, bool type_ok) {
  bool srcs_ok = ir_op_arity_ok(n->op, n->n_srcs);
  if (!srcs_ok) {
    err(v, n, "%s takes %s operand(s), has %d", ir_op_name(n->op), ir_op_arity_str(n->op), n->n_srcs);
    if (n->n_srcs < 0 || n->n_srcs > IR_MAX_SRCS) return;
  }
  for (int s = 0; s < n->n_srcs; s++) {
    const ir_node *src = n->srcs[s];
    if (!src) {
      err(v, n, "source %d is null", s);
      srcs_ok = false;
      continue;
    }
    int at = pos_of(v->g, hmap_get_ptr(&v->pos, src));
    if (at < 0) {
      err(v, n, "source %%%s is not a node of the graph", node_name(src));
      srcs_ok = false;
    } else if (at >= pos) {
      err(v, n, "source %%%s is not defined before use", node_name(src));
      srcs_ok = false;
    } else if ((unsigned)src->type.dtype >= DT_COUNT || src->type.rank < 0 ||
               src->type.rank > IR_MAX_RANK) {
      srcs_ok = false; /* reported at the source */
    }
  }
  if (n->frozen && n->op != IR_OP_CONST)
    err(v, n, "%s is trainable=false, which only a const can be (a constant training leaves as it is)",
        ir_op_name(n->op));
  for (int s = 0; srcs_ok && s < ir_op_writes(n->op); s++)
    if (n->srcs[s] && !(ir_op_flags(n->srcs[s]->op) & IR_OPF_STATE))
      err(v, n, "%s updates its operand %d in place, so it must be a variable, not %%%s", ir_op_name(n->op), s + 1,
          node_name(n->srcs[s]));
  if (!srcs_ok || !type_ok || (ir_op_flags(n->op) & IR_OPF_LEAF)) return;
  ir_type want;
  char why[256];
  if (!ir_infer_type(n->op, (ir_node *const *)n->srcs, n->n_srcs, &n->attr, &want, why,
                     sizeof why)) {
    err(v, n, "%s", why);
  } else if (!ir_result_type_ok(n->op, &n->attr, &want, &n->type)) {
    char have[96], inferred[96];
    type_str(&n->type, have, sizeof have);
    type_str(&want, inferred, sizeof inferred);
    err(v, n, "type %s does not match the inferred type %s", have, inferred);
  }
}

/* The op's attributes by kind (ir_attrs.def), then the roles of leaves.
 * input_at[k]: schedule position of the input with index k, or -1. */
static void check_attrs(verifier *v, const ir_node *n, int pos, int n_inputs, int *input_at) {
  for (int k = 0; k < IR_ATTR_COUNT; k++) {
    if (!(ir_op_attrs(n->op) >> k & 1)) continue;
    const void *val = ir_attr_get(&n->attr, (ir_attr_key)k);
    const char *key = ir_attr_name((ir_attr_key)k);
    switch (ir_attr_kind_of((ir_attr_key)k)) {
    case IR_ATTR_KIND_DTYPE:
      if ((unsigned)*(const ir_attr_DTYPE *)val >= DT_COUNT)
        err(v, n, "attribute '%s' has an invalid dtype code %d", key, (int)*(const ir_attr_DTYPE *)val);
      break;
    case IR_ATTR_KIND_STRING:
      if (!*(const ir_attr_STRING *)val) err(v, n, "%s has no '%s' attribute", ir_op_name(n->op), key);
      break;
    case IR_ATTR_KIND_SHAPE: {
      int rank = ((const ir_shape *)val)->rank;
      if (rank < 0 || rank > IR_MAX_RANK) err(v, n, "attribute '%s' has rank %d, outside 0..%d", key, rank, IR_MAX_RANK);
      break;
    }
    case IR_ATTR_KIND_INTS: {
      int count = ((const ir_attr_INTS *)val)->n;
      if (count < 0 || count > IR_MAX_INTS)
        err(v, n, "attribute '%s' has %d integers, outside 0..%d", key, count, IR_MAX_INTS);
      break;
    }
    case IR_ATTR_KIND_STATE: {
      ir_state_kind sk = *(const ir_attr_STATE *)val;
      if (sk <= IR_STATE_NONE || sk >= IR_STATE_COUNT)
        err(v, n, "%s has no '%s' attribute (weight, nontrainable, slot or scalar)", ir_op_name(n->op), key);
      break;
    }
    case IR_ATTR_KIND_INT:
    case IR_ATTR_KIND_FLOAT:
      break; /* ranges are the type rule's */
    }
  }
  if (n->op == IR_OP_INPUT) {
    int64_t k = n->attr.index;
    if (k < 0 || k >= n_inputs) {
      err(v, n, "input index %lld is outside 0..%d", (long long)k, n_inputs - 1);
    } else if (input_at[k] >= 0) {
      err(v, n, "input index %lld is also used by %%%s", (long long)k, node_name(v->g->nodes[input_at[k]]));
    } else {
      input_at[k] = pos;
    }
  }
  if (n->op == IR_OP_CONST && ir_type_is_batched(&n->type)) err(v, n, "constant has the batch dimension N");
  if (n->op == IR_OP_VARIABLE && ir_type_is_batched(&n->type)) err(v, n, "variable has the batch dimension N");
  if (n->op == IR_OP_LITERAL) {
    if (n->type.rank != 0) err(v, n, "a literal is a scalar [], not rank %d", n->type.rank);
    if (!isfinite(n->attr.value)) err(v, n, "literal value %g is not finite", n->attr.value);
    else if (n->type.dtype == DT_I1 && n->attr.value != 0 && n->attr.value != 1)
      err(v, n, "an i1 literal is 0 or 1, not %g", n->attr.value);
    else if (!dtype_is_float(n->type.dtype) && n->attr.value != floor(n->attr.value))
      err(v, n, "an integer literal has no fraction, got %g", n->attr.value);
  }
  if ((unsigned)n->policy >= IR_POLICY_COUNT) err(v, n, "invalid policy code %d", (int)n->policy);
}

bool ir_verify(const ir_graph *g, diag_sink *d) {
  verifier v = {.g = g, .d = d};
  hmap_init(&v.pos, HMAP_POINTERS);
  hmap_reserve(&v.pos, (size_t)g->n_nodes);
  hmap names; /* name -> its first slot in the schedule */
  hmap_init(&names, HMAP_STRINGS);
  hmap_reserve(&names, (size_t)g->n_nodes);

  if (!g->name || !g->name[0]) err(&v, NULL, "the graph has no name");
  if ((unsigned)g->policy >= IR_POLICY_COUNT || g->policy == IR_POLICY_NONE)
    err(&v, NULL, "invalid graph policy code %d", (int)g->policy);

  /* Pass 1: positions, ids, names. A null node stops the checks. */
  bool null_node = false;
  for (int i = 0; i < g->n_nodes && !null_node; i++) {
    const ir_node *n = g->nodes[i];
    if (!n) {
      err(&v, NULL, "schedule position %d holds no node", i);
      null_node = true;
      continue;
    }
    int first = pos_of(g, hmap_put_ptr(&v.pos, n, &g->nodes[i]));
    if (first >= 0) err(&v, n, "appears twice in the schedule (positions %d and %d)", first, i);
    if (n->id != i) err(&v, n, "id %d does not match its schedule position %d", n->id, i);
    if (!n->name || !n->name[0]) {
      err(&v, n, "node at position %d has no name", i);
    } else {
      if (!name_ok(n->name, true))
        err(&v, n, "name is not a valid value name ([A-Za-z_][A-Za-z0-9_.]*)");
      int other = first < 0 ? pos_of(g, hmap_put_str(&names, n->name, strlen(n->name), &g->nodes[i])) : -1;
      if (other >= 0) err(&v, n, "name is also defined at schedule position %d", other);
    }
  }

  if (null_node) {
    hmap_fini(&v.pos);
    hmap_fini(&names);
    return false;
  }

  int n_inputs = 0;
  for (int i = 0; i < g->n_nodes; i++) n_inputs += g->nodes[i]->op == IR_OP_INPUT;
  int *input_at = xmalloc(((size_t)n_inputs + 1) * sizeof *input_at);
  for (int k = 0; k < n_inputs; k++) input_at[k] = -1;

  /* Pass 2: each node on its own and against its sources. */
  for (int i = 0; i < g->n_nodes; i++) {
    const ir_node *n = g->nodes[i];
    if ((unsigned)n->op >= IR_OP_COUNT) {
      err(&v, n, "invalid op code %d", (int)n->op);
      continue;
    }
    bool type_ok = check_type(&v, n);
    check_sources(&v, n, i, type_ok);
    check_attrs(&v, n, i, n_inputs, input_at);
  }
  free(input_at);

  /* Outputs. */
  if (g->n_outputs == 0) err(&v, NULL, "graph %s has no outputs", g->name ? g->name : "?");
  hmap outs; /* output name -> its output */
  hmap_init(&outs, HMAP_STRINGS);
  for (int i = 0; i < g->n_outputs; i++) {
    const ir_output *o = &g->outputs[i];
    const char *oname = o->name ? o->name : "?";
    if (!name_ok(o->name, false))
      err(&v, NULL, "output '%s' is not a valid output name ([A-Za-z_][A-Za-z0-9_]*)", oname);
    else if (hmap_put_str(&outs, o->name, strlen(o->name), &g->outputs[i]))
      err(&v, NULL, "output '%s' is defined twice", oname);
    if (!o->value) err(&v, NULL, "output '%s' has no value", oname);
    else if (!hmap_get_ptr(&v.pos, o->value))
      err(&v, NULL, "output '%s' is %%%s, which is not a node of the graph", oname,
          node_name(o->value));
  }
  hmap_fini(&outs);
  hmap_fini(&v.pos);
  hmap_fini(&names);
  return v.n_errors == 0;
}
