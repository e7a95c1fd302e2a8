/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ir_graph.c: the graph container: creation, the schedule (insert,
 * renumber, compact, replace uses), outputs, and the name index that makes
 * lookups and unique names constant time. Tables, types and the builder
 * with type inference are in ir.c.
 */
#include "ir/ir.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- graph ---- */

ir_graph *ir_graph_create(const char *name) {
  arena *a = arena_create();
  ir_graph *g = arena_alloc(a, sizeof *g);
  g->arena = a;
  g->name = arena_strdup(a, name);
  g->policy = IR_POLICY_FLOAT32;
  hmap_init(&g->names, HMAP_STRINGS);
  return g;
}

void ir_graph_destroy(ir_graph *g) {
  if (!g) return;
  free(g->nodes);
  free(g->outputs);
  hmap_fini(&g->names);
  arena_destroy(g->arena); /* g itself lives in the arena */
}

/* ---- the name index (g->names) ----
 * One cell per name ever given: the node last inserted or renamed under it
 * and the next suffix ir_graph_unique_name tries. Nodes leave the schedule
 * (ir_graph_compact, a pass that rebuilds it) without telling the index, so
 * a cell's node is believed only while it is in the schedule under that
 * name; otherwise the lookup scans (exact, and rare: a name whose node was
 * removed). A name absent from the index belongs to no node. */
typedef struct name_cell {
  const char *name; /* the key (arena) */
  ir_node *node;
  int next_k;       /* base.1 .. base.(next_k - 1) were taken when last asked */
} name_cell;

static name_cell *name_cell_get(const ir_graph *g, const char *name) {
  return hmap_get_str(&g->names, name, strlen(name));
}

static void name_index(ir_graph *g, ir_node *n) {
  name_cell *c = name_cell_get(g, n->name);
  if (!c) {
    c = arena_alloc(g->arena, sizeof *c);
    c->name = arena_strdup(g->arena, n->name);
    c->next_k = 1;
    hmap_put_str(&g->names, c->name, strlen(c->name), c);
  }
  c->node = n;
}

static bool in_schedule(const ir_graph *g, const ir_node *n) {
  return n->id >= 0 && n->id < g->n_nodes && g->nodes[n->id] == n;
}

void ir_graph_rename(ir_graph *g, ir_node *n, const char *name) {
  n->name = arena_strdup(g->arena, name);
  name_index(g, n);
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
  name_index(g, n);
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

static ir_node *find_cell(const ir_graph *g, const name_cell *c, const char *name) {
  if (!c) return NULL;
  if (c->node && in_schedule(g, c->node) && strcmp(c->node->name, name) == 0) return c->node;
  for (int i = 0; i < g->n_nodes; i++)
    if (strcmp(g->nodes[i]->name, name) == 0) return g->nodes[i];
  return NULL;
}

ir_node *ir_graph_find(const ir_graph *g, const char *name) {
  return find_cell(g, name_cell_get(g, name), name);
}

const char *ir_graph_unique_name(const ir_graph *g, const char *base) {
  name_cell *c = name_cell_get(g, base);
  if (!find_cell(g, c, base)) return arena_strdup(g->arena, base);
  str_buf b;
  str_buf_init(&b);
  for (int k = c->next_k;; k++) {
    str_buf_clear(&b);
    str_buf_printf(&b, "%s.%d", base, k);
    if (!ir_graph_find(g, str_buf_cstr(&b))) {
      c->next_k = k;
      char *s = arena_strdup(g->arena, str_buf_cstr(&b));
      str_buf_fini(&b);
      return s;
    }
  }
}

int ir_graph_num_inputs(const ir_graph *g) {
  int n = 0;
  for (int i = 0; i < g->n_nodes; i++) n += g->nodes[i]->op == IR_OP_INPUT;
  return n;
}

ir_node *ir_graph_input(const ir_graph *g, int index) {
  for (int i = 0; i < g->n_nodes; i++)
    if (g->nodes[i]->op == IR_OP_INPUT && g->nodes[i]->attr.index == index)
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
