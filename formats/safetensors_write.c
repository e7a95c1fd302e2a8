/* SPDX-License-Identifier: Apache-2.0 */
/*
 * safetensors_write.c: the safetensors writer (see safetensors.h for
 * the layout). Validates every tensor first, then builds the header in
 * memory and streams header and data through one atomic file.
 */
#include "formats/safetensors.h"

#include "util/atomic_file.h"

#include <string.h>

static diag_loc at(const char *path) { return (diag_loc){path, 0, 0}; }

static const char *st_dtype_name(dtype_id t) {
  switch (t) {
  case DT_F32: return "F32";
  case DT_F16: return "F16";
  case DT_BF16: return "BF16";
  case DT_I32:
  case DT_I64:
  case DT_I1: break;
  case DT_COUNT: break;
  }
  return NULL;
}

/* Rank of the dtype in the reference's Dtype enum (F16 < BF16 < F32). */
static int st_dtype_order(dtype_id t) { return t == DT_F32 ? 2 : t == DT_BF16 ? 1 : 0; }

/* A JSON string: quotes, backslash and control characters escaped, the
 * rest (valid UTF-8, checked before) as is, as serde_json writes it. */
static void put_json_string(str_buf *b, const char *s) {
  str_buf_putc(b, '"');
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    switch (*p) {
    case '"': str_buf_puts(b, "\\\""); break;
    case '\\': str_buf_puts(b, "\\\\"); break;
    case '\b': str_buf_puts(b, "\\b"); break;
    case '\f': str_buf_puts(b, "\\f"); break;
    case '\n': str_buf_puts(b, "\\n"); break;
    case '\r': str_buf_puts(b, "\\r"); break;
    case '\t': str_buf_puts(b, "\\t"); break;
    default:
      if (*p < 0x20) str_buf_printf(b, "\\u%04x", *p);
      else str_buf_putc(b, (char)*p);
    }
  }
  str_buf_putc(b, '"');
}

static bool valid_utf8(const char *s) {
  size_t n = strlen(s);
  for (size_t i = 0; i < n;) {
    size_t k = str_utf8_len(s + i, n - i);
    if (k == 0) return false;
    i += k;
  }
  return true;
}

typedef struct entry {
  const safetensors_tensor *t;
  int64_t nbytes;
} entry;

static int cmp_entry(const void *a, const void *b) {
  const entry *x = a, *y = b;
  int ox = st_dtype_order(x->t->dtype), oy = st_dtype_order(y->t->dtype);
  if (ox != oy) return oy - ox;
  return strcmp(x->t->name, y->t->name);
}

static bool bad(diag_sink *d, const char *path, const char *fmt, ...) CASTOR_PRINTF(3, 4);
static bool bad(diag_sink *d, const char *path, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  diag_verror_kind(d, DIAG_KIND_INVALID_ARGUMENT, at(path), fmt, ap);
  va_end(ap);
  return false;
}

static bool check_tensor(const safetensors_tensor *t, int i, const char *path, int64_t *out_nbytes,
                         diag_sink *d) {
  if (!t->name) return bad(d, path, "cannot write tensor %d to safetensors: it has no name", i);
  if (!valid_utf8(t->name))
    return bad(d, path, "cannot write tensor %d to safetensors: its name is not valid UTF-8", i);
  if (strcmp(t->name, "__metadata__") == 0)
    return bad(d, path, "cannot write a tensor named '__metadata__' to safetensors: the name is "
                        "reserved for the header's metadata");
  if (!st_dtype_name(t->dtype))
    return bad(d, path, "cannot write tensor '%s' of dtype %s to safetensors (castor writes F32, "
                        "F16 and BF16)", t->name, dtype_name(t->dtype));
  if (t->rank < 0 || t->rank > SAFETENSORS_MAX_RANK)
    return bad(d, path, "cannot write tensor '%s' of rank %d to safetensors (at most %d)", t->name,
               t->rank, SAFETENSORS_MAX_RANK);
  int64_t numel = 1;
  for (int k = 0; k < t->rank; k++) {
    if (t->dims[k] < 0)
      return bad(d, path, "cannot write tensor '%s' to safetensors: dimension %d is %lld", t->name,
                 k, (long long)t->dims[k]);
    if (!size_mul_ok(numel, t->dims[k], &numel)) numel = -1;
  }
  if (numel < 0 || !size_mul_ok(numel, dtype_size(t->dtype), out_nbytes))
    return bad(d, path, "cannot write tensor '%s' to safetensors: its size overflows", t->name);
  if (*out_nbytes > 0 && !t->data)
    return bad(d, path, "cannot write tensor '%s' to safetensors: it has no data", t->name);
  return true;
}

bool safetensors_write(const char *path, const safetensors_tensor *tensors, int n_tensors,
                       const char *const *metadata, int n_metadata, diag_sink *d) {
  if (n_tensors < 0 || n_metadata < 0)
    return bad(d, path, "cannot write %d tensors and %d metadata pairs to safetensors", n_tensors,
               n_metadata);
  for (int i = 0; i < 2 * n_metadata; i++)
    if (!metadata[i] || !valid_utf8(metadata[i]))
      return bad(d, path, "safetensors metadata %s %d is %s", i % 2 ? "value" : "key", i / 2,
                 metadata[i] ? "not valid UTF-8" : "missing");
  for (int i = 0; i < n_metadata; i++)
    for (int j = 0; j < i; j++)
      if (strcmp(metadata[2 * i], metadata[2 * j]) == 0)
        return bad(d, path, "duplicate safetensors metadata key '%s'", metadata[2 * i]);

  entry *e = xmalloc((size_t)(n_tensors ? n_tensors : 1) * sizeof *e);
  bool ok = true;
  for (int i = 0; ok && i < n_tensors; i++) {
    e[i].t = &tensors[i];
    ok = check_tensor(&tensors[i], i, path, &e[i].nbytes, d);
  }
  if (ok) qsort(e, (size_t)n_tensors, sizeof *e, cmp_entry);
  for (int i = 1; ok && i < n_tensors; i++)
    for (int j = 0; j < i && ok; j++)
      if (strcmp(e[i].t->name, e[j].t->name) == 0)
        ok = bad(d, path, "duplicate tensor name '%s' for safetensors", e[i].t->name);
  if (!ok) {
    free(e);
    return false;
  }

  /* The header, compact as serde_json writes it. */
  str_buf h;
  str_buf_init(&h);
  str_buf_putc(&h, '{');
  if (n_metadata > 0) {
    str_buf_puts(&h, "\"__metadata__\":{");
    for (int i = 0; i < n_metadata; i++) {
      if (i) str_buf_putc(&h, ',');
      put_json_string(&h, metadata[2 * i]);
      str_buf_putc(&h, ':');
      put_json_string(&h, metadata[2 * i + 1]);
    }
    str_buf_putc(&h, '}');
  }
  int64_t offset = 0;
  for (int i = 0; i < n_tensors; i++) {
    const safetensors_tensor *t = e[i].t;
    if (i || n_metadata > 0) str_buf_putc(&h, ',');
    put_json_string(&h, t->name);
    str_buf_printf(&h, ":{\"dtype\":\"%s\",\"shape\":[", st_dtype_name(t->dtype));
    for (int k = 0; k < t->rank; k++) str_buf_printf(&h, "%s%lld", k ? "," : "", (long long)t->dims[k]);
    int64_t end;
    if (!size_add_ok(offset, e[i].nbytes, &end)) {
      str_buf_fini(&h);
      free(e);
      return bad(d, path, "cannot write safetensors: the tensors' total size overflows");
    }
    str_buf_printf(&h, "],\"data_offsets\":[%lld,%lld]}", (long long)offset, (long long)end);
    offset = end;
  }
  str_buf_putc(&h, '}');
  while (h.len % 8) str_buf_putc(&h, ' ');

  unsigned char len8[8];
  for (int i = 0; i < 8; i++) len8[i] = (unsigned char)((uint64_t)h.len >> (8 * i));
  atomic_file af;
  ok = atomic_file_begin(&af, path, d);
  if (ok) {
    atomic_file_write(&af, len8, sizeof len8);
    atomic_file_write(&af, h.data, h.len);
    for (int i = 0; i < n_tensors; i++) atomic_file_write(&af, e[i].t->data, (size_t)e[i].nbytes);
    ok = atomic_file_commit(&af, d);
  }
  str_buf_fini(&h);
  free(e);
  return ok;
}
