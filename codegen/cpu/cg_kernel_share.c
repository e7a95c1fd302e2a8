/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cg_kernel_share.c: which CPU kernels can share one compiled body.
 *
 * A deep model repeats itself: 10,000 chained dense layers of one width are
 * 10,000 matmul kernels that differ only in which buffers they read and
 * write. LLVM's optimization and code generation cost is per function, so
 * compiling each of them would make compile time a large constant times the
 * depth. Instead, kernels with the same key share one body (cg_cpu.c): the
 * body reads its buffers through a small table of the kernel's own buffers,
 * in the order the kernel first names them, and each kernel is a wrapper
 * that fills that table from the program's buffers and calls the body.
 *
 * The key is everything the emitters read besides buffer addresses: the
 * kernel kind, every op (op, dtype, shape, every attribute of
 * ir_attrs.def), each source as
 * "the previous op" or a table slot with its type and stored layout
 * (packed or not), the result's slot and type, the GEMM layout and the
 * launch split. Two kernels with equal keys get the same machine code by
 * construction, so sharing changes no result bit.
 *
 * In: a plan and its CPU layout (cg_gemm_plan done). Out: per kernel the
 * index of the first kernel with the same key, and the table of buffers of
 * each kernel. Linear in the plan (util's hmap over the keys).
 */
#include <string.h>

#include "codegen/cpu/cg_cpu.h"

_Static_assert(sizeof(cg_kernel_launch) == 64 && sizeof(cg_packing) == 24,
               "a new field of cg_kernel_launch or cg_packing must join kernel_key");

/* Appends buffer b to the kernel's table if it is not there yet. */
static void table_add(int *table, int *n, int b) {
  for (int i = 0; i < *n; i++)
    if (table[i] == b) return;
  table[(*n)++] = b;
}

int cg_kernel_buffers(const cg_plan *plan, const cg_kernel *k, int *out_table) {
  int n = 0;
  if (k->kind == CG_KERNEL_COPY) {
    table_add(out_table, &n, plan->buffer_of[k->copy_src->id]);
  } else {
    for (int t = 0; t < k->n_ops; t++)
      for (int s = 0; s < k->ops[t]->n_srcs; s++) {
        int b = plan->buffer_of[k->ops[t]->srcs[s]->id];
        if (b >= 0) table_add(out_table, &n, b);
      }
  }
  table_add(out_table, &n, k->out_buffer);
  return n;
}

static int slot_of(const int *table, int n, int b) {
  for (int i = 0; i < n; i++)
    if (table[i] == b) return i;
  CASTOR_UNREACHABLE();
  return -1;
}

/* Every attribute of ir_attrs.def by its kind, so an attribute added there
 * can never be left out of the key. */
static void put_INT(str_buf *s, int64_t v) { str_buf_printf(s, "%lld,", (long long)v); }
static void put_FLOAT(str_buf *s, double v) { str_buf_printf(s, "%a,", v); }
static void put_DTYPE(str_buf *s, ir_dtype v) { str_buf_printf(s, "%d,", (int)v); }
static void put_STRING(str_buf *s, const char *v) { str_buf_printf(s, "%zu:%s,", v ? strlen(v) : 0, v ? v : ""); }
static void put_SHAPE(str_buf *s, ir_shape v) {
  str_buf_printf(s, "%d[", v.rank);
  for (int r = 0; r < v.rank; r++) str_buf_printf(s, "%lld,", (long long)v.dims[r]);
  str_buf_puts(s, "],");
}

/* (perm, starts, ends and steps are lists: every kind here is used) */
static inline void put_INTS(str_buf *s, ir_attr_INTS v) {
  str_buf_printf(s, "%d[", v.n);
  for (int i = 0; i < v.n; i++) str_buf_printf(s, "%lld,", (long long)v.v[i]);
  str_buf_puts(s, "],");
}

static void put_STATE(str_buf *s, ir_state_kind v) { str_buf_printf(s, "%d,", (int)v); }

static void put_attrs(str_buf *s, const ir_attr *a) {
  str_buf_putc(s, '{');
#define IR_ATTR(key, kind, doc) put_##kind(s, a->key);
#include "ir/ir_attrs.def"
#undef IR_ATTR
  str_buf_putc(s, '}');
}

static void put_type(str_buf *s, const ir_type *t) {
  str_buf_printf(s, "%d[", (int)t->dtype);
  for (int r = 0; r < t->rank; r++) str_buf_printf(s, "%lld,", (long long)t->dims[r]);
  str_buf_putc(s, ']');
}

static void put_buffer(str_buf *s, const cg_plan *plan, const cg_cpu_layout *layout, const int *table, int n,
                       int b) {
  const rt_buffer *buf = &plan->buffers[b];
  str_buf_printf(s, "b%d:%d:%lld:%lld:%d:%d:%lld:%d:%d", slot_of(table, n, b), (int)buf->kind, (long long)buf->bytes_per_row,
                 (long long)buf->bytes_fixed, layout->packing[b].panel, layout->packing[b].tail,
                 (long long)layout->packing[b].kc, layout->packing[b].pairs, layout->packing[b].wino);
}

/* The key of kernel ki (see the file comment). */
static void kernel_key(const cg_plan *plan, const cg_cpu_layout *layout, int ki, const int *table, int n,
                       str_buf *s) {
  const cg_kernel *k = &plan->kernels[ki];
  str_buf_printf(s, "K%d/", (int)k->kind);
  /* reductions over the batch and state updates (cg_train.c) share like
   * the rest: their launch (cg_train_launch) follows from the op's type and
   * their emitters read only the op, its sources' types and the buffers of
   * the table, all in the key; a training step of a deep model is 4 such
   * kernels per layer, which compiled one by one cost 50 ms per layer */
  if (k->kind == CG_KERNEL_COPY) {
    put_type(s, &k->copy_src->type);
    put_buffer(s, plan, layout, table, n, plan->buffer_of[k->copy_src->id]);
  }
  for (int t = 0; t < k->n_ops; t++) {
    const ir_node *op = k->ops[t];
    str_buf_printf(s, "|%d:", (int)op->op);
    put_type(s, &op->type);
    put_attrs(s, &op->attr);
    for (int i = 0; i < op->n_srcs; i++) {
      const ir_node *src = op->srcs[i];
      str_buf_putc(s, '(');
      if (t > 0 && src == k->ops[t - 1]) {
        str_buf_putc(s, 'P');
      } else {
        put_type(s, &src->type);
        int b = plan->buffer_of[src->id];
        CASTOR_ASSERT(b >= 0);
        put_buffer(s, plan, layout, table, n, b);
      }
      str_buf_putc(s, ')');
    }
  }
  str_buf_puts(s, "->");
  put_buffer(s, plan, layout, table, n, k->out_buffer);
  const cg_kernel_launch *l = &layout->launch[ki];
  str_buf_printf(s, "/%lld,%lld,%lld,%lld,%lld,%lld,%lld,%lld/", (long long)l->cols, (long long)l->col_step,
                 (long long)l->row_step, (long long)l->scratch_bytes, (long long)l->row_tile_min, (long long)l->rows_fixed,
                 (long long)l->tile_row_cost, (long long)l->tile_col_cost);
  if (layout->gemm[ki]) cg_gemm_key(layout->gemm[ki], s);
}

void cg_kernel_share(const cg_plan *plan, const cg_cpu_layout *layout, int *out_rep, int *out_count) {
  int nk = plan->n_kernels;
  hmap first; /* key -> the first kernel with it */
  hmap_init(&first, HMAP_STRINGS);
  hmap_reserve(&first, (size_t)nk);
  char **keys = xcalloc((size_t)nk + 1, sizeof *keys); /* the map's keys, freed after it */
  int *table = xcalloc((size_t)plan->n_buffers + 1, sizeof *table);
  str_buf s;
  str_buf_init(&s);
  for (int ki = 0; ki < nk; ki++) {
    out_count[ki] = 0;
    int n = cg_kernel_buffers(plan, &plan->kernels[ki], table);
    str_buf_clear(&s);
    kernel_key(plan, layout, ki, table, n, &s);
    size_t len = s.len;
    keys[ki] = str_buf_take(&s);
    const cg_kernel *rep = hmap_put_str(&first, keys[ki], len, (void *)&plan->kernels[ki]);
    out_rep[ki] = rep ? (int)(rep - plan->kernels) : ki;
    out_count[out_rep[ki]]++;
  }
  str_buf_fini(&s);
  hmap_fini(&first);
  for (int ki = 0; ki < nk; ki++) free(keys[ki]);
  free(keys);
  free(table);
}
