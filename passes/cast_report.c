/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cast_report.c: what autocast did, per layer (castor dump --casts).
 *
 * Reads a graph after the compile pipeline: for each layer, in model
 * order, the dtype its main op computes in (its first contraction, by the
 * op table's kernel class: a dense layer's matmul; else the layer's first
 * op), the rule that decided it, the casts executed at
 * run time on its behalf (weight casts were folded away) and its weight
 * bytes per dtype; then one total line. Not a pass: it changes nothing.
 *
 * After pad8 (a tensor-core target, or --pad8), one more line per layer
 * that pad8 touched, from the final graph's structure: the padded width of
 * its main op (a matmul's units, a convolution's channels, a recurrent
 * layer's units per gate) and what it is sliced back to, or that the
 * padding flows zero-filled into the next layer; the weights stored
 * padded; the pads and slices left to run.
 */
#include <stdio.h>
#include <string.h>

#include "passes/passes.h"

typedef struct layer_row {
  const char *name;
  const ir_node *main;
  const ir_node *scan;  /* its first recurrent op, if any */
  const ir_node *slice; /* pad8's first slice back in this layer */
  int n_pads, n_slices, n_padded_weights;
  char padded_weights[160];
  int n_casts;
  char casts[160];
  int64_t weight_bytes[DT_COUNT];
} layer_row;

static layer_row *row_for(layer_row *rows, int *n_rows, const char *layer) {
  for (int i = 0; i < *n_rows; i++)
    if (strcmp(rows[i].name, layer) == 0) return &rows[i];
  layer_row *r = &rows[(*n_rows)++];
  memset(r, 0, sizeof *r);
  r->name = layer;
  return r;
}

static void add_cast_dir(layer_row *r, const ir_node *c) {
  char dir[48];
  snprintf(dir, sizeof dir, "%s->%s", dtype_name(c->srcs[0]->type.dtype), dtype_name(c->type.dtype));
  r->n_casts++;
  if (!strstr(r->casts, dir)) {
    size_t len = strlen(r->casts);
    snprintf(r->casts + len, sizeof r->casts - len, "%s%s", len ? " " : "", dir);
  }
}

static bool is_contraction(const ir_node *n) { return ir_op_kernel(n->op) == IR_KERNEL_CONTRACT; }

static bool is_scan(const ir_node *n) { return ir_rnn_gates(n->op) > 0 && ir_rnn_forward(n->op) == IR_OP_COUNT; }

static bool is_pad8(const ir_node *n) { return n->rule && !strncmp(n->rule, "pad8", 4); }

/* "lstm.kernel [16,256]" into the layer's list of weights stored padded */
static void add_padded_weight(layer_row *r, const ir_node *n) {
  str_buf t;
  str_buf_init(&t);
  ir_type_print(&n->type, &t);
  const char *key = n->attr.weight ? n->attr.weight : n->name;
  size_t len = strlen(r->padded_weights);
  if (r->n_padded_weights++ < 4)
    snprintf(r->padded_weights + len, sizeof r->padded_weights - len, "%s%s %s", len ? ", " : "", key,
             strchr(str_buf_cstr(&t), '['));
  else if (r->n_padded_weights == 5)
    snprintf(r->padded_weights + len, sizeof r->padded_weights - len, ", ...");
  str_buf_fini(&t);
}

/* "pad8 lstm: units 60 -> 64 (each of its 4 gates), sliced back; weights stored padded: ...;
 * at run time 3 pads, 1 slice" */
static void pad8_line(const layer_row *r, str_buf *out) {
  const ir_node *m = r->scan ? r->scan : r->main;
  int gates = ir_rnn_gates(m->op);
  /* the padded width: a scan's units are its recurrent kernel's rows; a contraction's its last dimension */
  int64_t wide = r->scan ? m->srcs[1]->type.dims[0] : m->type.dims[m->type.rank - 1];
  int64_t back = r->slice ? r->slice->type.dims[r->slice->type.rank - 1] : wide;
  const char *what = r->scan || m->type.rank < 4 ? "units" : "channels";
  str_buf_printf(out, "pad8 %s: ", r->name);
  if (back != wide) str_buf_printf(out, "%s %lld -> %lld", what, (long long)back, (long long)wide);
  else str_buf_printf(out, "%s %lld wide", what, (long long)wide);
  if (gates > 1) str_buf_printf(out, " (each of its %d gates)", gates);
  str_buf_puts(out, back != wide ? ", sliced back" : ", not sliced back");
  if (r->n_padded_weights) str_buf_printf(out, "; weights stored padded: %s", r->padded_weights);
  str_buf_printf(out, "; at run time %d pad%s, %d slice%s\n", r->n_pads, r->n_pads == 1 ? "" : "s", r->n_slices,
                 r->n_slices == 1 ? "" : "s");
}

/* "33.6 MB", "12.5 kB", "144 B" */
static const char *human_bytes(int64_t b, char *buf) {
  if (b >= 1000000) snprintf(buf, 32, "%.1f MB", (double)b / 1e6);
  else if (b >= 1000) snprintf(buf, 32, "%.1f kB", (double)b / 1e3);
  else snprintf(buf, 32, "%lld B", (long long)b);
  return buf;
}

void pass_cast_report(const ir_graph *g, str_buf *out) {
  layer_row *rows = xcalloc((size_t)g->n_nodes + 1, sizeof *rows);
  int n_rows = 0, n_ops = 0, n_casts = 0, n_low[DT_COUNT] = {0};
  int64_t total_bytes[DT_COUNT] = {0};
  for (int i = 0; i < g->n_nodes; i++) {
    const ir_node *n = g->nodes[i];
    if (n->op == IR_OP_LITERAL) continue;
    bool model_weight = n->op == IR_OP_VARIABLE &&
                        (n->attr.kind == IR_STATE_WEIGHT || n->attr.kind == IR_STATE_NONTRAINABLE);
    if (n->op == IR_OP_CONST || model_weight) { /* a model's weights, and a training program's */
      int64_t b = 0;
      if (ir_type_bytes(&n->type, 1, &b)) total_bytes[n->type.dtype] += b;
      if (n->layer) row_for(rows, &n_rows, n->layer)->weight_bytes[n->type.dtype] += b;
      if (n->layer && is_pad8(n)) add_padded_weight(row_for(rows, &n_rows, n->layer), n);
      continue;
    }
    if (n->layer && is_pad8(n) && (n->op == IR_OP_PAD || n->op == IR_OP_SLICE)) {
      layer_row *r = row_for(rows, &n_rows, n->layer);
      if (n->op == IR_OP_PAD) r->n_pads++;
      else if (r->n_slices++ == 0) r->slice = n;
    }
    if (n->op == IR_OP_INPUT || n->op == IR_OP_VARIABLE) continue; /* slots and training scalars */
    if (n->op == IR_OP_CAST) {
      n_casts++;
      if (n->layer) add_cast_dir(row_for(rows, &n_rows, n->layer), n);
      continue;
    }
    n_ops++;
    n_low[n->type.dtype]++;
    if (!n->layer) continue;
    layer_row *r = row_for(rows, &n_rows, n->layer);
    if (!r->main || (is_contraction(n) && !is_contraction(r->main))) r->main = n;
    if (!r->scan && is_scan(n)) r->scan = n;
  }
  str_buf_printf(out, "cast report for %s (policy %s)\n", g->name, ir_policy_name(g->policy));
  str_buf_printf(out, "%-16s %-7s %-28s %-22s %s\n", "layer", "compute", "rule", "casts at run time", "weights");
  for (int i = 0; i < n_rows; i++) {
    layer_row *r = &rows[i];
    if (!r->main) continue; /* e.g. an input's layer */
    char casts[200], weights[160] = "";
    snprintf(casts, sizeof casts, r->n_casts ? "%d (%s)" : "0", r->n_casts, r->casts);
    size_t len = 0;
    for (int t = 0; t < DT_COUNT; t++)
      if (r->weight_bytes[t])
        len += (size_t)snprintf(weights + len, sizeof weights - len, "%s%s %s", len ? " + " : "",
                                human_bytes(r->weight_bytes[t], (char[32]){0}), dtype_name((ir_dtype)t));
    str_buf_printf(out, "%-16s %-7s %-28s %-22s %s\n", r->name, dtype_name(r->main->type.dtype),
                   r->main->rule ? r->main->rule : "-", casts, len ? weights : "-");
  }
  /* total: "12 of 14 ops in f16, 3 casts, weights 33.6 MB f16 + 0 B f32", in the
   * layer column's units (a small model's weights were "0.0 MB") */
  str_buf_puts(out, "total: ");
  int low = n_low[DT_F16] + n_low[DT_BF16];
  const char *low_name = n_low[DT_F16] && n_low[DT_BF16] ? "f16/bf16"
                         : n_low[DT_BF16]                       ? "bf16"
                                                                      : "f16";
  str_buf_printf(out, "%d of %d ops in %s, %d cast%s, weights ", low, n_ops, low_name, n_casts,
                 n_casts == 1 ? "" : "s");
  bool any = false;
  for (int t = DT_F16; t <= DT_BF16; t++)
    if (total_bytes[t]) {
      str_buf_printf(out, "%s%s %s", any ? " + " : "", human_bytes(total_bytes[t], (char[32]){0}),
                     dtype_name((ir_dtype)t));
      any = true;
    }
  str_buf_printf(out, "%s%s f32\n", any ? " + " : "", human_bytes(total_bytes[DT_F32], (char[32]){0}));
  for (int i = 0; i < n_rows; i++)
    if (rows[i].main && (rows[i].n_padded_weights || rows[i].n_pads || rows[i].n_slices)) pad8_line(&rows[i], out);
  free(rows);
}
