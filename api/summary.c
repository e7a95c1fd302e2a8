/*
 * summary.c: castor summary MODEL (castor dump --summary), the model as
 * Keras's model.summary() shows it: each layer with its main op, its
 * output shape and its parameters, then the totals; and, since castor
 * compiles under a dtype policy, the layer's compute dtype and the bytes
 * its weights take as compiled (16-bit under the mixed policies) beside
 * their float32 bytes.
 *
 * Two graphs: the frontend's (the model as written: layers in order,
 * output shapes, parameters in float32) and the compiled one (what the
 * policy made of it: compute dtypes, the weights' final dtypes). A layer is
 * its nodes' `layer` field; its output is its last non-constant node in
 * schedule order, its main op its first contraction, else that output's op,
 * and its parameters the constants named as weights (<layer>.kernel, ...).
 * Linear in the graphs' size (one map from layer name to row).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/internal.h"

typedef struct sum_row {
  const char *layer;
  const ir_node *out, *main;   /* frontend: the layer's output and main op */
  int64_t params, f32_bytes;   /* frontend weights: elements, bytes as float32 */
  int64_t bytes;               /* compiled weights: bytes in their final dtype */
  int dtype;                   /* compiled: the main op's dtype (-1: none seen) */
} sum_row;

typedef struct sum_table {
  VEC(sum_row) rows;
  hmap index; /* layer name -> row index + 1 (as a pointer-sized integer) */
} sum_table;

static sum_row *row_of(sum_table *t, const char *layer, bool add) {
  size_t n = strlen(layer);
  void *v = hmap_get_str(&t->index, layer, n);
  if (v) return &t->rows.data[(uintptr_t)v - 1];
  if (!add) return NULL;
  sum_row r = {layer, NULL, NULL, 0, 0, 0, -1};
  vec_push(&t->rows, r);
  hmap_put_str(&t->index, layer, n, (void *)(uintptr_t)t->rows.len);
  return &t->rows.data[t->rows.len - 1];
}

static bool is_weight(const ir_node *n) { return n->op == IR_OP_CONST && n->attr.weight && n->attr.weight[0]; }

static int64_t numel(const ir_node *n) {
  int64_t e = 0;
  return ir_type_numel(&n->type, 1, &e) ? e : 0;
}

/* "1.3 kB" */
static void bytes_str(char *buf, size_t n, int64_t b) {
  if (b >= 1000000000) snprintf(buf, n, "%.2f GB", (double)b / 1e9);
  else if (b >= 1000000) snprintf(buf, n, "%.2f MB", (double)b / 1e6);
  else if (b >= 1000) snprintf(buf, n, "%.1f kB", (double)b / 1e3);
  else snprintf(buf, n, "%" PRId64 " B", b);
}

/* 34826 -> "34,826" */
static void count_str(char *buf, size_t n, int64_t v) {
  char digits[32];
  int len = snprintf(digits, sizeof digits, "%" PRId64, v), o = 0;
  for (int i = 0; i < len && o + 2 < (int)n; i++) {
    if (i && (len - i) % 3 == 0 && digits[i - 1] != '-') buf[o++] = ',';
    buf[o++] = digits[i];
  }
  buf[o] = 0;
}

void castor_summary_print(const ir_graph *model, const ir_graph *compiled, str_buf *out) {
  sum_table t = {0};
  hmap_init(&t.index, HMAP_STRINGS);
  for (int i = 0; i < model->n_nodes; i++) {
    const ir_node *n = model->nodes[i];
    if (!n->layer) continue;
    sum_row *r = row_of(&t, n->layer, true);
    if (is_weight(n)) {
      r->params += numel(n);
      r->f32_bytes += numel(n) * (int64_t)dtype_size(DT_F32);
    } else if (n->op != IR_OP_CONST) {
      r->out = n;
      if (!r->main && ir_op_kernel(n->op) == IR_KERNEL_CONTRACT) r->main = n;
    }
  }
  for (int i = 0; i < compiled->n_nodes; i++) {
    const ir_node *n = compiled->nodes[i];
    sum_row *r = n->layer ? row_of(&t, n->layer, false) : NULL;
    if (!r) continue;
    if (is_weight(n)) r->bytes += numel(n) * (int64_t)dtype_size(n->type.dtype);
    else if (n->op != IR_OP_CONST && n->op != IR_OP_CAST && (r->dtype < 0 || ir_op_kernel(n->op) == IR_KERNEL_CONTRACT))
      r->dtype = (int)n->type.dtype;
  }
  str_buf_printf(out, "model %s (policy %s)\n", model->name, ir_policy_name(compiled->policy));
  str_buf_printf(out, "%-24s %-14s %-20s %12s  %-7s %11s %11s\n", "layer", "op", "output shape", "params", "compute",
                 "f32 bytes", "compiled");
  int64_t params = 0, f32_bytes = 0, bytes = 0;
  str_buf shape;
  str_buf_init(&shape);
  for (size_t i = 0; i < t.rows.len; i++) {
    const sum_row *r = &t.rows.data[i];
    if (!r->out) continue; /* a layer of constants only */
    const ir_node *main = r->main ? r->main : r->out;
    str_buf_clear(&shape);
    ir_type_print(&r->out->type, &shape);
    const char *s = str_buf_cstr(&shape), *bracket = strchr(s, '[');
    char p[32], fb[32], cb[32];
    count_str(p, sizeof p, r->params);
    if (r->params) bytes_str(fb, sizeof fb, r->f32_bytes), bytes_str(cb, sizeof cb, r->bytes);
    else snprintf(fb, sizeof fb, "-"), snprintf(cb, sizeof cb, "-");
    str_buf_printf(out, "%-24s %-14s %-20s %12s  %-7s %11s %11s\n", r->layer, ir_op_name(main->op),
                   bracket ? bracket : s, p, r->dtype >= 0 ? dtype_name((dtype_id)r->dtype) : "-", fb, cb);
    params += r->params, f32_bytes += r->f32_bytes, bytes += r->bytes;
  }
  char p[32], fb[32], cb[32];
  count_str(p, sizeof p, params);
  bytes_str(fb, sizeof fb, f32_bytes);
  bytes_str(cb, sizeof cb, bytes);
  str_buf_printf(out, "total params: %s (%s as float32; %s as compiled under %s)\n", p, fb, cb,
                 ir_policy_name(compiled->policy));
  str_buf_fini(&shape);
  vec_free(&t.rows);
  hmap_fini(&t.index);
}
