/* SPDX-License-Identifier: Apache-2.0 */
/*
 * safetensors_read.c: the strict safetensors reader (safetensors.h), used by
 * the frontend's weights binding when a model names a weights file.
 *
 * The header JSON goes through formats/json.h; its errors, and every
 * validation error, name the file and the byte offset in the file.
 * Validation checks every entry: a float dtype castor reads (F32, F16,
 * BF16), rank <= SAFETENSORS_MAX_RANK, byte size = numel * dtype size
 * without overflow, offsets inside the data section, no two tensors
 * overlapping. Nothing is read past the end of the buffer.
 *
 * Reading is driven by the header, never "until EOF": only regular files
 * are read (a device such as /dev/zero or a pipe is refused unread), their
 * size bounds the header length and the data offsets before anything is
 * allocated, and only the bytes the header declares are read (the header,
 * then the data section up to the end of the last tensor). A data section
 * too large to allocate is an error, not an abort.
 */
#include "formats/safetensors.h"

#include "formats/json.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_HEADER_BYTES ((uint64_t)100000000)

/* Where header errors are reported. */
typedef struct header_ctx {
  const char *path;
  diag_loc at;
  diag_sink *d;
} header_ctx;

/* off: byte offset in the file */
static bool corrupt(const header_ctx *p, size_t off, const char *fmt, ...) CASTOR_PRINTF(3, 4);
static bool corrupt(const header_ctx *p, size_t off, const char *fmt, ...) {
  str_buf b;
  str_buf_init(&b);
  va_list ap;
  va_start(ap, fmt);
  str_buf_vprintf(&b, fmt, ap);
  va_end(ap);
  diag_error(p->d, p->at, "corrupt safetensors header in '%s' at byte %zu: %s", p->path, off,
             str_buf_cstr(&b));
  str_buf_fini(&b);
  return false;
}

/* Fills t from the header entry `key: v`; false after reporting. */
static bool check_entry(const header_ctx *p, const char *key, const json_value *v, int64_t data_len,
                        safetensors_tensor *t) {
#define BAD(at, ...) corrupt(p, (at), __VA_ARGS__)
  if (v->kind != JSON_OBJ) return BAD(v->off, "tensor '%s' is %s, not an object", key, json_kind_name(v->kind));
  for (int i = 0; i < v->n; i++)
    if (!str_eq(v->keys[i], "dtype") && !str_eq(v->keys[i], "shape") &&
        !str_eq(v->keys[i], "data_offsets"))
      return BAD(v->items[i].off, "unexpected field '%s' in tensor '%s'", v->keys[i], key);
  const json_value *dt = json_field(v, "dtype"), *sh = json_field(v, "shape"), *of = json_field(v, "data_offsets");
  const char *missing = !dt ? "dtype" : !sh ? "shape" : !of ? "data_offsets" : NULL;
  if (missing) return BAD(v->off, "tensor '%s' has no '%s'", key, missing);
  if (dt->kind != JSON_STR) return BAD(dt->off, "dtype of tensor '%s' is not a string", key);
  if (str_eq(dt->s, "F32")) t->dtype = DT_F32;
  else if (str_eq(dt->s, "F16")) t->dtype = DT_F16;
  else if (str_eq(dt->s, "BF16")) t->dtype = DT_BF16;
  else {
    diag_error(p->d, p->at,
               "unsupported dtype %s of tensor '%s' in '%s' at byte %zu; castor reads F32, F16 "
               "and BF16",
               dt->s, key, p->path, dt->off);
    return false;
  }
  if (sh->kind != JSON_ARR) return BAD(sh->off, "shape of tensor '%s' is not an array", key);
  if (sh->n > SAFETENSORS_MAX_RANK)
    return BAD(sh->off, "tensor '%s' has rank %d; castor reads at most %d dimensions", key, sh->n,
               SAFETENSORS_MAX_RANK);
  t->rank = sh->n;
  int64_t numel = 1;
  for (int i = 0; i < sh->n; i++) {
    const json_value *e = &sh->items[i];
    if (e->kind != JSON_INT || e->i < 0)
      return BAD(e->off, "shape of tensor '%s' must hold non-negative integers", key);
    t->dims[i] = e->i;
    if (!size_mul_ok(numel, e->i, &numel))
      return BAD(sh->off, "shape of tensor '%s' overflows", key);
  }
  if (!size_mul_ok(numel, dtype_size(t->dtype), &t->nbytes))
    return BAD(sh->off, "shape of tensor '%s' overflows", key);
  if (of->kind != JSON_ARR || of->n != 2 || of->items[0].kind != JSON_INT || of->items[1].kind != JSON_INT ||
      of->items[0].i < 0 || of->items[1].i < 0)
    return BAD(of->off, "data_offsets of tensor '%s' must be two non-negative integers", key);
  int64_t begin = of->items[0].i, end = of->items[1].i;
  if (end < begin || end - begin != t->nbytes) {
    str_buf b;
    str_buf_init(&b);
    for (int i = 0; i < t->rank; i++) str_buf_printf(&b, "%s%lld", i ? "," : "", (long long)t->dims[i]);
    BAD(of->off, "tensor '%s' has data_offsets [%lld, %lld] but shape [%s] of %s needs %lld bytes",
        key, (long long)begin, (long long)end, str_buf_cstr(&b), dt->s, (long long)t->nbytes);
    str_buf_fini(&b);
    return false;
  }
  if (end > data_len)
    return BAD(of->off, "tensor '%s' has data_offsets [%lld, %lld] beyond the %lld-byte data section",
               key, (long long)begin, (long long)end, (long long)data_len);
  t->offset = begin;
  return true;
#undef BAD
}

static int cmp_begin(const void *a, const void *b) {
  int64_t x = ((const safetensors_tensor *)a)->offset, y = ((const safetensors_tensor *)b)->offset;
  return x < y ? -1 : x > y;
}

/* Where the bytes come from: an open regular file or a buffer. */
typedef struct source {
  const char *path;
  int fd;                   /* -1: mem */
  const unsigned char *mem;
  int64_t size;             /* the file's size when it was opened */
} source;

/* Reads n bytes at off; false (errno set, 0 for a file that shrank) when
 * they are not all there. */
static bool source_read(const source *s, int64_t off, void *dst, int64_t n) {
  if (s->fd < 0) {
    if (off > s->size || n > s->size - off) return errno = 0, false;
    if (n) memcpy(dst, s->mem + off, (size_t)n);
    return true;
  }
  for (int64_t got = 0; got < n;) {
    size_t want = n - got > (1 << 30) ? (size_t)1 << 30 : (size_t)(n - got);
    ssize_t r = pread(s->fd, (char *)dst + got, want, (off_t)(off + got));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return errno = r < 0 ? errno : 0, false;
    got += r;
  }
  return true;
}

static bool read_failed(const source *s, diag_loc at, diag_sink *d, int64_t off, int64_t n) {
  if (errno)
    diag_error_kind(d, DIAG_KIND_IO, at, "cannot read weights file '%s': %s", s->path, strerror(errno));
  else
    diag_error_kind(d, DIAG_KIND_IO, at,
                    "cannot read weights file '%s': it ended before byte %lld (it shrank while "
                    "being read?)",
                    s->path, (long long)(off + n));
  return false;
}

static bool load(const source *src, diag_loc at, diag_sink *d, safetensors_file *out);

bool safetensors_read(const char *path, diag_loc at, diag_sink *d, safetensors_file *out) {
  *out = (safetensors_file){0};
  /* O_NONBLOCK: opening a FIFO with no writer must not hang (it is refused) */
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  struct stat st;
  if (fd < 0 || fstat(fd, &st) != 0) {
    diag_error_kind(d, DIAG_KIND_IO, at, "cannot read weights file '%s': %s", path, strerror(errno));
    if (fd >= 0) close(fd);
    return false;
  }
  if (!S_ISREG(st.st_mode)) {
    diag_error_kind(d, DIAG_KIND_IO, at, "cannot read weights file '%s': not a regular file (%s)", path,
                    str_file_kind((unsigned)st.st_mode));
    close(fd);
    return false;
  }
  source src = {.path = path, .fd = fd, .size = (int64_t)st.st_size};
  bool ok = load(&src, at, d, out);
  close(fd);
  return ok;
}

bool safetensors_read_mem(const char *name, const void *bytes, size_t len, diag_loc at,
                             diag_sink *d, safetensors_file *out) {
  *out = (safetensors_file){0};
  source src = {.path = name, .fd = -1, .mem = bytes, .size = (int64_t)len};
  return load(&src, at, d, out);
}

static bool load(const source *src, diag_loc at, diag_sink *d, safetensors_file *out) {
  const char *path = src->path;
  int64_t len = src->size;
  if (len < 8) {
    diag_error(d, at,
               "weights file '%s' is too short: %lld bytes, but a safetensors file starts with an "
               "8-byte header length",
               path, (long long)len);
    return false;
  }
  unsigned char pre[8];
  if (!source_read(src, 0, pre, 8)) return read_failed(src, at, d, 0, 8);
  uint64_t hlen = 0;
  for (int i = 7; i >= 0; i--) hlen = hlen << 8 | pre[i];
  if (hlen > (uint64_t)(len - 8)) {
    diag_error(d, at, "weights file '%s' is truncated: header says %llu bytes, file has %lld after "
               "the length", path, (unsigned long long)hlen, (long long)(len - 8));
    return false;
  }
  if (hlen > MAX_HEADER_BYTES) {
    diag_error(d, at, "weights file '%s' has a header of %llu bytes, more than the limit of %llu",
               path, (unsigned long long)hlen, (unsigned long long)MAX_HEADER_BYTES);
    return false;
  }
  char *head = xmalloc((size_t)hlen + 1);
  if (!source_read(src, 8, head, (int64_t)hlen)) {
    free(head);
    return read_failed(src, at, d, 8, (int64_t)hlen);
  }
  arena *scratch = arena_create();
  header_ctx p = {.path = path, .at = at, .d = d};
  json_value top = {0};
  json_error jerr;
  json_parse_options jo = {.base = 8, .doc_name = "header", .require_object = true};
  bool ok = json_parse(head, (size_t)hlen, &jo, scratch, &top, &jerr);
  if (!ok) corrupt(&p, jerr.off, "%s", jerr.msg);
  int64_t data_len = len - 8 - (int64_t)hlen, data_end = 0;
  out->arena = arena_create();
  out->tensors = arena_alloc(out->arena, (size_t)(ok ? top.n : 0) * sizeof *out->tensors + 1);
  for (int i = 0; ok && i < top.n; i++) {
    const char *key = top.keys[i];
    const json_value *v = &top.items[i];
    if (str_eq(key, "__metadata__")) {
      bool strs = v->kind == JSON_OBJ;
      for (int k = 0; strs && k < v->n; k++) strs = v->items[k].kind == JSON_STR;
      if (!strs) ok = corrupt(&p, v->off, "__metadata__ must map strings to strings");
      continue;
    }
    safetensors_tensor *t = &out->tensors[out->n_tensors];
    *t = (safetensors_tensor){.name = arena_strdup(out->arena, key)};
    if ((ok = check_entry(&p, key, v, data_len, t))) {
      out->n_tensors++;
      if (t->offset + t->nbytes > data_end) data_end = t->offset + t->nbytes;
    }
  }
  /* No two tensors may share bytes (empty ones never do). */
  if (ok && out->n_tensors > 1) {
    safetensors_tensor *sorted = xmalloc((size_t)out->n_tensors * sizeof *sorted);
    memcpy(sorted, out->tensors, (size_t)out->n_tensors * sizeof *sorted);
    qsort(sorted, (size_t)out->n_tensors, sizeof *sorted, cmp_begin);
    int64_t end = 0;
    const char *end_key = NULL;
    for (int i = 0; ok && i < out->n_tensors; i++) {
      if (sorted[i].nbytes == 0) continue;
      int64_t b = sorted[i].offset;
      if (end_key && b < end) {
        diag_error(d, at, "tensors '%s' and '%s' in '%s' overlap in the data section", end_key,
                   sorted[i].name, path);
        ok = false;
      }
      if (b + sorted[i].nbytes > end) end = b + sorted[i].nbytes, end_key = sorted[i].name;
    }
    free(sorted);
  }
  arena_destroy(scratch);
  free(head);
  /* The data the header declares, and no more: it lies within the file
   * (checked above), so a regular file bounds it. */
  char *data = NULL;
  if (ok) {
    data = malloc((size_t)data_end + 1);
    if (!data) {
      diag_error(d, at, "weights file '%s': cannot allocate %lld bytes for its tensors", path,
                 (long long)data_end);
      ok = false;
    } else if (!source_read(src, 8 + (int64_t)hlen, data, data_end)) {
      ok = read_failed(src, at, d, 8 + (int64_t)hlen, data_end);
    }
  }
  if (!ok) {
    free(data);
    arena_destroy(out->arena);
    *out = (safetensors_file){0};
    return false;
  }
  for (int i = 0; i < out->n_tensors; i++) out->tensors[i].data = data + out->tensors[i].offset;
  out->blob = data;
  out->blob_len = (size_t)data_end;
  return true;
}

void safetensors_fini(safetensors_file *st) {
  free(st->blob);
  arena_destroy(st->arena);
  *st = (safetensors_file){0};
}

const safetensors_tensor *safetensors_find(const safetensors_file *st, const char *name) {
  for (int i = 0; i < st->n_tensors; i++)
    if (str_eq(st->tensors[i].name, name)) return &st->tensors[i];
  return NULL;
}
