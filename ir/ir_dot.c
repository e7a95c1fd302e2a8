/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ir_dot.c: a graph as Graphviz DOT (castor dump --emit=dot, castor check
 * --graph).
 *
 * A printer like ir_print, for people rather than for the parser: each
 * value is a node filled with its dtype's colour (f32 blue, f16 orange,
 * bf16 green, integers grey), the nodes of a model layer share a cluster
 * labelled with the layer's name, casts are small nodes labelled with the
 * reason autocast recorded in their note, pads and slices are trapezia with
 * a red border, inputs and outputs are house shapes. The caller may add a
 * line per node (castor check adds each value's error) and flag nodes to
 * draw with a thick red border. The output depends only on the graph, so
 * golden tests compare it byte for byte; it does not read constant data.
 */
#include <string.h>

#include "ir/ir.h"

static const char *dtype_color(ir_dtype t) {
  switch (t) {
  case DT_F32: return "#cfe2ff";
  case DT_F16: return "#ffd8a8";
  case DT_BF16: return "#c3f0ca";
  case DT_I32:
  case DT_I64:
  case DT_I1:
  case DT_COUNT: break;
  }
  return "#e9ecef";
}

/* Appends s inside a DOT "string": quotes and backslashes escaped,
 * newlines as \n (a centred line break). */
static void put_escaped(str_buf *out, const char *s) {
  for (; *s; s++) {
    if (*s == '\n') {
      str_buf_puts(out, "\\n"); /* a line break in a label */
      continue;
    }
    if (*s == '"' || *s == '\\') str_buf_putc(out, '\\');
    str_buf_putc(out, *s);
  }
}

/* The reason of a cast, from its note "autocast: dense_1 computes in f16
 * (mixed_float16)" or "pad8: ...": the text after the "stage: " prefix. */
static const char *note_reason(const ir_node *n) {
  if (!n->note) return NULL;
  const char *c = strstr(n->note, ": ");
  return c ? c + 2 : n->note;
}

static void put_node(const ir_node *n, const char *extra, bool alarm, const char *indent, str_buf *out) {
  const char *shape = "box", *style = "rounded,filled";
  str_buf label;
  str_buf_init(&label);
  if (n->op == IR_OP_INPUT) shape = "invhouse", style = "filled";
  else if (n->op == IR_OP_CONST) shape = "cylinder", style = "filled";
  else if (n->op == IR_OP_PAD) shape = "trapezium", style = "filled";
  else if (n->op == IR_OP_SLICE) shape = "invtrapezium", style = "filled";
  if (n->op == IR_OP_CAST) {
    str_buf_printf(&label, "cast %s -> %s", dtype_name(n->srcs[0]->type.dtype), dtype_name(n->type.dtype));
    const char *why = note_reason(n);
    if (why) str_buf_printf(&label, "\n%s", why);
  } else {
    str_buf_printf(&label, "%s\n%s ", n->name, n->op == IR_OP_CONST ? "weight" : ir_op_name(n->op));
    ir_type_print(&n->type, &label);
    if (n->op == IR_OP_PAD || n->op == IR_OP_SLICE) {
      const char *why = note_reason(n);
      if (why) str_buf_printf(&label, "\n%s", why);
    }
  }
  if (extra && *extra) str_buf_printf(&label, "\n%s", extra);
  str_buf_printf(out, "%sn%d [label=\"", indent, n->id);
  put_escaped(out, str_buf_cstr(&label));
  str_buf_printf(out, "\", shape=%s, style=\"%s\", fillcolor=\"%s\"", shape, style, dtype_color(n->type.dtype));
  if (n->op == IR_OP_CAST) str_buf_puts(out, ", fontsize=8, margin=\"0.05,0.02\", height=0.3");
  if (alarm) str_buf_puts(out, ", color=\"#d00000\", penwidth=3");
  else if (n->op == IR_OP_PAD || n->op == IR_OP_SLICE) str_buf_puts(out, ", color=\"#d00000\", penwidth=1.5");
  str_buf_puts(out, "];\n");
  str_buf_fini(&label);
}

void ir_print_dot(const ir_graph *g, const char *const *extra, const bool *alarm, str_buf *out) {
  int n = g->n_nodes;
  bool *done = xcalloc((size_t)n + 1, sizeof *done);
  str_buf_puts(out, "digraph \"");
  put_escaped(out, g->name ? g->name : "graph");
  str_buf_puts(out, "\" {\n  graph [rankdir=TB, fontname=\"Helvetica\", labelloc=t, label=\"");
  put_escaped(out, g->name ? g->name : "graph");
  str_buf_printf(out, " (policy %s)\"];\n", ir_policy_name(g->policy));
  str_buf_puts(out, "  node [fontname=\"Helvetica\", fontsize=10];\n  edge [color=\"#555555\"];\n");
  /* one cluster per layer, in the order layers first appear */
  for (int i = 0; i < n; i++) {
    const char *layer = g->nodes[i]->layer;
    if (done[i] || !layer) continue;
    str_buf_printf(out, "  subgraph \"cluster_%d\" {\n    label=\"", i);
    put_escaped(out, layer);
    str_buf_puts(out, "\"; style=\"rounded,dashed\"; color=\"#888888\"; fontsize=11;\n");
    for (int k = i; k < n; k++) {
      const ir_node *m = g->nodes[k];
      if (done[k] || !m->layer || strcmp(m->layer, layer)) continue;
      put_node(m, extra ? extra[k] : NULL, alarm && alarm[k], "    ", out);
      done[k] = true;
    }
    str_buf_puts(out, "  }\n");
  }
  for (int i = 0; i < n; i++)
    if (!done[i]) put_node(g->nodes[i], extra ? extra[i] : NULL, alarm && alarm[i], "  ", out);
  for (int i = 0; i < n; i++) {
    const ir_node *m = g->nodes[i];
    for (int k = 0; k < m->n_srcs; k++) str_buf_printf(out, "  n%d -> n%d;\n", m->srcs[k]->id, m->id);
  }
  for (int o = 0; o < g->n_outputs; o++) {
    str_buf_printf(out, "  out%d [label=\"output ", o);
    put_escaped(out, g->outputs[o].name);
    str_buf_printf(out, "\", shape=house, style=filled, fillcolor=\"%s\"];\n", dtype_color(g->outputs[o].value->type.dtype));
    str_buf_printf(out, "  n%d -> out%d;\n", g->outputs[o].value->id, o);
  }
  str_buf_puts(out, "  subgraph cluster_legend {\n    label=\"dtype\"; style=rounded; color=\"#bbbbbb\"; fontsize=9;\n");
  static const ir_dtype legend[3] = {DT_F32, DT_F16, DT_BF16};
  for (int t = 0; t < 3; t++)
    str_buf_printf(out, "    legend_%s [label=\"%s\", shape=box, style=\"rounded,filled\", fillcolor=\"%s\", fontsize=9];\n",
                   dtype_name(legend[t]), dtype_name(legend[t]), dtype_color(legend[t]));
  str_buf_puts(out, "  }\n}\n");
  free(done);
}
