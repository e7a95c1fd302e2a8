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
 */
#include <stdio.h>
#include <string.h>

#include "passes/passes.h"

typedef struct layer_row {
  const char *name;
  const ir_node *main;
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
      continue;
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
  free(rows);
}
