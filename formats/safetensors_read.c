/*
 * safetensors.c: a strict reader of the safetensors weight format, used by
 * weights.c when a model names a weights file.
 *
 * Layout: an 8-byte little-endian header length H, H bytes of JSON, then
 * the data section. The JSON is an object mapping tensor names to
 * {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]} (offsets
 * relative to the data section), plus an optional "__metadata__" object of
 * string to string.
 *
 * The JSON reader is small and strict (RFC 8259: no trailing commas, no
 * comments, duplicate keys rejected, strings UTF-8 with every escape,
 * nesting at most 64 deep) and builds a tree in a scratch arena.
 * Validation then checks every entry: a float dtype castor reads (F32, F16,
 * BF16), rank <= IR_MAX_RANK, byte size = numel * dtype size without
 * overflow, offsets inside the data section, no two tensors overlapping.
 * Every error names the file and, for header problems, the byte offset in
 * the file; nothing is read past the end of the buffer.
 *
 * Reading is driven by the header, never "until EOF": only regular files
 * are read (a device such as /dev/zero or a pipe is refused unread), their
 * size bounds the header length and the data offsets before anything is
 * allocated, and only the bytes the header declares are read (the header,
 * then the data section up to the end of the last tensor). A data section
 * too large to allocate is an error, not an abort.
 */
#include "frontend/cast/internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

enum { JSON_MAX_DEPTH = 64 };
#define MAX_HEADER_BYTES ((uint64_t)100000000)

typedef enum jkind { J_STR, J_INT, J_FLOAT, J_LIT, J_ARR, J_OBJ } jkind;

typedef struct jval {
  jkind kind;
  size_t off; /* byte offset in the file */
  const char *s; /* STR */
  int64_t i;     /* INT */
  struct jval *items; /* ARR, OBJ (values) */
  const char **keys;  /* OBJ */
  int n;
} jval;

typedef struct jparser {
  const char *text;
  size_t len, pos, base; /* base: file offset of text[0] */
  arena *a;
  const char *path;
  diag_loc at;
  diag_sink *d;
} jparser;

static bool corrupt(jparser *p, size_t off, const char *fmt, ...) CASTOR_PRINTF(3, 4);
static bool corrupt(jparser *p, size_t off, const char *fmt, ...) {
  str_buf b;
  str_buf_init(&b);
  va_list ap;
  va_start(ap, fmt);
  str_buf_vprintf(&b, fmt, ap);
  va_end(ap);
  diag_error(p->d, p->at, "corrupt safetensors header in '%s' at byte %zu: %s", p->path,
             p->base + off, str_buf_cstr(&b));
  str_buf_fini(&b);
  return false;
}

static void skip_ws(jparser *p) {
  while (p->pos < p->len && strchr(" \t\n\r", p->text[p->pos]) && p->text[p->pos]) p->pos++;
}

static bool unexpected(jparser *p, const char *what) {
  if (p->pos >= p->len) return corrupt(p, p->pos, "expected %s, got the end of the header", what);
  unsigned char c = (unsigned char)p->text[p->pos];
  if (c > 0x20 && c < 0x7f) return corrupt(p, p->pos, "expected %s, got '%c'", what, c);
  return corrupt(p, p->pos, "expected %s, got byte 0x%02x", what, c);
}

static bool expect_char(jparser *p, char c) {
  skip_ws(p);
  if (p->pos < p->len && p->text[p->pos] == c) return p->pos++, true;
  char what[4] = {'\'', c, '\'', 0};
  return unexpected(p, what);
}

static int hex4(const char *s) {
  int v = 0;
  for (int i = 0; i < 4; i++) {
    char c = s[i];
    int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
            : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
    if (d < 0) return -1;
    v = v * 16 + d;
  }
  return v;
}

static void put_utf8(str_buf *b, unsigned cp) {
  char u[4];
  int n;
  if (cp < 0x80) u[0] = (char)cp, n = 1;
  else if (cp < 0x800) u[0] = (char)(0xc0 | cp >> 6), u[1] = (char)(0x80 | (cp & 0x3f)), n = 2;
  else if (cp < 0x10000)
    u[0] = (char)(0xe0 | cp >> 12), u[1] = (char)(0x80 | ((cp >> 6) & 0x3f)),
    u[2] = (char)(0x80 | (cp & 0x3f)), n = 3;
  else
    u[0] = (char)(0xf0 | cp >> 18), u[1] = (char)(0x80 | ((cp >> 12) & 0x3f)),
    u[2] = (char)(0x80 | ((cp >> 6) & 0x3f)), u[3] = (char)(0x80 | (cp & 0x3f)), n = 4;
  str_buf_append(b, u, (size_t)n);
}


static bool parse_string(jparser *p, const char **out) {
  if (p->pos >= p->len || p->text[p->pos] != '"') return unexpected(p, "'\"'");
  size_t start = p->pos++;
  str_buf b;
  str_buf_init(&b);
  bool ok = false;
  for (;;) {
    if (p->pos >= p->len) {
      corrupt(p, start, "unterminated string");
      break;
    }
    unsigned char c = (unsigned char)p->text[p->pos];
    if (c == '"') {
      p->pos++;
      ok = true;
      break;
    }
    if (c < 0x20) {
      corrupt(p, p->pos, "control character 0x%02x in a string", c);
      break;
    }
    if (c == '\\') {
      char e = p->pos + 1 < p->len ? p->text[p->pos + 1] : 0;
      const char *simple = strchr("\"\\/bfnrt", e);
      if (e && simple) {
        str_buf_putc(&b, "\"\\/\b\f\n\r\t"[simple - "\"\\/bfnrt"]);
        p->pos += 2;
        continue;
      }
      int cp = e == 'u' && p->pos + 6 <= p->len ? hex4(p->text + p->pos + 2) : -1;
      if (cp < 0) {
        corrupt(p, p->pos, "invalid escape sequence in a string");
        break;
      }
      size_t esc = p->pos;
      p->pos += 6;
      if (cp >= 0xd800 && cp <= 0xdbff) { /* a surrogate pair */
        int lo = p->pos + 6 <= p->len && p->text[p->pos] == '\\' && p->text[p->pos + 1] == 'u'
                     ? hex4(p->text + p->pos + 2) : -1;
        if (lo < 0xdc00 || lo > 0xdfff) {
          corrupt(p, esc, "unpaired surrogate in a string");
          break;
        }
        cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
        p->pos += 6;
      } else if (cp >= 0xdc00 && cp <= 0xdfff) {
        corrupt(p, esc, "unpaired surrogate in a string");
        break;
      } else if (cp == 0) {
        corrupt(p, esc, "NUL character in a string");
        break;
      }
      put_utf8(&b, (unsigned)cp);
      continue;
    }
    size_t n = str_utf8_len((const unsigned char *)p->text + p->pos, p->len - p->pos);
    if (n == 0) {
      corrupt(p, p->pos, "invalid UTF-8 byte 0x%02x in a string", c);
      break;
    }
    str_buf_append(&b, p->text + p->pos, n);
    p->pos += n;
  }
  if (ok) *out = arena_strdup(p->a, str_buf_cstr(&b));
  str_buf_fini(&b);
  return ok;
}

static bool is_digit(char c) { return c >= '0' && c <= '9'; }

static bool parse_number(jparser *p, jval *v) {
  size_t start = p->pos;
  bool neg = p->text[p->pos] == '-';
  if (neg) p->pos++;
  if (p->pos >= p->len || !is_digit(p->text[p->pos])) return corrupt(p, start, "invalid number");
  if (p->text[p->pos] == '0' && p->pos + 1 < p->len && is_digit(p->text[p->pos + 1]))
    return corrupt(p, start, "invalid number: leading zero");
  uint64_t mag = 0;
  bool overflow = false;
  while (p->pos < p->len && is_digit(p->text[p->pos])) {
    unsigned dg = (unsigned)(p->text[p->pos++] - '0');
    if (mag > ((uint64_t)INT64_MAX - dg) / 10) overflow = true;
    else mag = mag * 10 + dg;
  }
  v->kind = J_INT;
  if (p->pos < p->len && p->text[p->pos] == '.') {
    p->pos++;
    if (p->pos >= p->len || !is_digit(p->text[p->pos])) return corrupt(p, start, "invalid number");
    while (p->pos < p->len && is_digit(p->text[p->pos])) p->pos++;
    v->kind = J_FLOAT;
  }
  if (p->pos < p->len && (p->text[p->pos] == 'e' || p->text[p->pos] == 'E')) {
    p->pos++;
    if (p->pos < p->len && (p->text[p->pos] == '+' || p->text[p->pos] == '-')) p->pos++;
    if (p->pos >= p->len || !is_digit(p->text[p->pos])) return corrupt(p, start, "invalid number");
    while (p->pos < p->len && is_digit(p->text[p->pos])) p->pos++;
    v->kind = J_FLOAT;
  }
  if (v->kind == J_INT && overflow) return corrupt(p, start, "integer out of range");
  v->i = neg ? -(int64_t)mag : (int64_t)mag;
  return true;
}

static bool parse_value(jparser *p, jval *v, int depth);

typedef struct keyed {
  const char *key;
  size_t off;
} keyed;

static int cmp_keyed(const void *a, const void *b) {
  const keyed *x = a, *y = b;
  int c = strcmp(x->key, y->key);
  return c ? c : (x->off > y->off) - (x->off < y->off);
}

/* Duplicate keys, found by sorting: headers may hold many thousands. */
static bool check_unique(jparser *p, const char **keys, const size_t *offs, size_t n) {
  keyed *k = xmalloc(n * sizeof *k);
  for (size_t i = 0; i < n; i++) k[i] = (keyed){keys[i], offs[i]};
  qsort(k, n, sizeof *k, cmp_keyed);
  bool ok = true;
  for (size_t i = 1; i < n && ok; i++)
    if (str_eq(k[i].key, k[i - 1].key)) ok = corrupt(p, k[i].off, "duplicate key '%s'", k[i].key);
  free(k);
  return ok;
}

/* Objects and arrays: a list of values, with keys for objects. */
static bool parse_container(jparser *p, jval *v, int depth) {
  bool obj = p->text[p->pos] == '{';
  char close = obj ? '}' : ']';
  v->kind = obj ? J_OBJ : J_ARR;
  if (depth >= JSON_MAX_DEPTH) return corrupt(p, p->pos, "nested more than %d deep", JSON_MAX_DEPTH);
  p->pos++;
  VEC(jval) items = {0};
  VEC(const char *) keys = {0};
  VEC(size_t) koffs = {0};
  bool ok = true;
  skip_ws(p);
  if (p->pos < p->len && p->text[p->pos] == close) {
    p->pos++;
  } else {
    for (;;) {
      const char *key = NULL;
      skip_ws(p);
      if (obj) {
        size_t koff = p->pos;
        if (!(ok = parse_string(p, &key))) break;
        vec_push(&koffs, koff);
        if (!(ok = expect_char(p, ':'))) break;
      }
      jval item = {0};
      if (!(ok = parse_value(p, &item, depth + 1))) break;
      vec_push(&items, item);
      if (obj) vec_push(&keys, key);
      skip_ws(p);
      if (p->pos < p->len && p->text[p->pos] == ',') {
        p->pos++;
        continue;
      }
      if (p->pos < p->len && p->text[p->pos] == close) {
        p->pos++;
        break;
      }
      ok = unexpected(p, obj ? "',' or '}'" : "',' or ']'");
      break;
    }
  }
  if (ok && obj && keys.len > 1) ok = check_unique(p, keys.data, koffs.data, keys.len);
  if (ok) {
    v->n = (int)items.len;
    v->items = arena_alloc(p->a, items.len * sizeof *items.data + 1);
    if (items.len) memcpy(v->items, items.data, items.len * sizeof *items.data);
    if (obj) {
      v->keys = arena_alloc(p->a, keys.len * sizeof *keys.data + 1);
      if (keys.len) memcpy(v->keys, keys.data, keys.len * sizeof *keys.data);
    }
  }
  vec_free(&items);
  vec_free(&keys);
  vec_free(&koffs);
  return ok;
}

static bool parse_value(jparser *p, jval *v, int depth) {
  skip_ws(p);
  v->off = p->pos + p->base;
  if (p->pos >= p->len) return unexpected(p, "a value");
  char c = p->text[p->pos];
  if (c == '{' || c == '[') return parse_container(p, v, depth);
  if (c == '"') return v->kind = J_STR, parse_string(p, &v->s);
  if (c == '-' || is_digit(c)) return parse_number(p, v);
  static const char *const lits[] = {"true", "false", "null"};
  for (int i = 0; i < 3; i++) {
    size_t n = strlen(lits[i]);
    if (p->len - p->pos >= n && memcmp(p->text + p->pos, lits[i], n) == 0) {
      p->pos += n;
      v->kind = J_LIT;
      return true;
    }
  }
  return unexpected(p, "a value");
}

/* ---- validation ---- */

static const jval *field(const jval *obj, const char *key) {
  for (int i = 0; i < obj->n; i++)
    if (str_eq(obj->keys[i], key)) return &obj->items[i];
  return NULL;
}

static const char *type_name(jkind k) {
  static const char *const names[] = {"a string", "an integer", "a number", "a literal",
                                      "an array", "an object"};
  return names[k];
}

/* Fills t from the header entry `key: v`; false after reporting. */
static bool check_entry(jparser *p, const char *key, const jval *v, int64_t data_len, fe_tensor *t) {
#define BAD(at, ...) corrupt(p, (at) - p->base, __VA_ARGS__)
  if (v->kind != J_OBJ) return BAD(v->off, "tensor '%s' is %s, not an object", key, type_name(v->kind));
  for (int i = 0; i < v->n; i++)
    if (!str_eq(v->keys[i], "dtype") && !str_eq(v->keys[i], "shape") &&
        !str_eq(v->keys[i], "data_offsets"))
      return BAD(v->items[i].off, "unexpected field '%s' in tensor '%s'", v->keys[i], key);
  const jval *dt = field(v, "dtype"), *sh = field(v, "shape"), *of = field(v, "data_offsets");
  const char *missing = !dt ? "dtype" : !sh ? "shape" : !of ? "data_offsets" : NULL;
  if (missing) return BAD(v->off, "tensor '%s' has no '%s'", key, missing);
  if (dt->kind != J_STR) return BAD(dt->off, "dtype of tensor '%s' is not a string", key);
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
  if (sh->kind != J_ARR) return BAD(sh->off, "shape of tensor '%s' is not an array", key);
  if (sh->n > IR_MAX_RANK)
    return BAD(sh->off, "tensor '%s' has rank %d; castor reads at most %d dimensions", key, sh->n,
               IR_MAX_RANK);
  t->rank = sh->n;
  int64_t numel = 1;
  for (int i = 0; i < sh->n; i++) {
    const jval *e = &sh->items[i];
    if (e->kind != J_INT || e->i < 0)
      return BAD(e->off, "shape of tensor '%s' must hold non-negative integers", key);
    t->dims[i] = e->i;
    if (!size_mul_ok(numel, e->i, &numel))
      return BAD(sh->off, "shape of tensor '%s' overflows", key);
  }
  if (!size_mul_ok(numel, dtype_size(t->dtype), &t->nbytes))
    return BAD(sh->off, "shape of tensor '%s' overflows", key);
  if (of->kind != J_ARR || of->n != 2 || of->items[0].kind != J_INT || of->items[1].kind != J_INT ||
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
  int64_t x = ((const fe_tensor *)a)->offset, y = ((const fe_tensor *)b)->offset;
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

static bool load(const source *src, diag_loc at, diag_sink *d, fe_safetensors *out);

bool fe_safetensors_read(const char *path, diag_loc at, diag_sink *d, fe_safetensors *out) {
  *out = (fe_safetensors){0};
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

bool fe_safetensors_read_mem(const char *name, const void *bytes, size_t len, diag_loc at,
                             diag_sink *d, fe_safetensors *out) {
  *out = (fe_safetensors){0};
  source src = {.path = name, .fd = -1, .mem = bytes, .size = (int64_t)len};
  return load(&src, at, d, out);
}

static bool load(const source *src, diag_loc at, diag_sink *d, fe_safetensors *out) {
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
  jparser p = {.text = head, .len = (size_t)hlen, .base = 8, .a = scratch, .path = path,
               .at = at, .d = d};
  jval top = {0};
  bool ok = true;
  skip_ws(&p);
  if (p.pos >= p.len || p.text[p.pos] != '{') ok = unexpected(&p, "'{'");
  ok = ok && parse_value(&p, &top, 0);
  if (ok) {
    skip_ws(&p);
    if (p.pos < p.len) ok = corrupt(&p, p.pos, "unexpected data after the header object");
  }
  int64_t data_len = len - 8 - (int64_t)hlen, data_end = 0;
  out->arena = arena_create();
  out->tensors = arena_alloc(out->arena, (size_t)(ok ? top.n : 0) * sizeof *out->tensors + 1);
  for (int i = 0; ok && i < top.n; i++) {
    const char *key = top.keys[i];
    const jval *v = &top.items[i];
    if (str_eq(key, "__metadata__")) {
      bool strs = v->kind == J_OBJ;
      for (int k = 0; strs && k < v->n; k++) strs = v->items[k].kind == J_STR;
      if (!strs) ok = corrupt(&p, v->off - p.base, "__metadata__ must map strings to strings");
      continue;
    }
    fe_tensor *t = &out->tensors[out->n_tensors];
    *t = (fe_tensor){.key = arena_strdup(out->arena, key)};
    if ((ok = check_entry(&p, key, v, data_len, t))) {
      out->n_tensors++;
      if (t->offset + t->nbytes > data_end) data_end = t->offset + t->nbytes;
    }
  }
  /* No two tensors may share bytes (empty ones never do). */
  if (ok && out->n_tensors > 1) {
    fe_tensor *sorted = xmalloc((size_t)out->n_tensors * sizeof *sorted);
    memcpy(sorted, out->tensors, (size_t)out->n_tensors * sizeof *sorted);
    qsort(sorted, (size_t)out->n_tensors, sizeof *sorted, cmp_begin);
    int64_t end = 0;
    const char *end_key = NULL;
    for (int i = 0; ok && i < out->n_tensors; i++) {
      if (sorted[i].nbytes == 0) continue;
      int64_t b = sorted[i].offset;
      if (end_key && b < end) {
        diag_error(d, at, "tensors '%s' and '%s' in '%s' overlap in the data section", end_key,
                   sorted[i].key, path);
        ok = false;
      }
      if (b + sorted[i].nbytes > end) end = b + sorted[i].nbytes, end_key = sorted[i].key;
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
    *out = (fe_safetensors){0};
    return false;
  }
  for (int i = 0; i < out->n_tensors; i++) out->tensors[i].data = data + out->tensors[i].offset;
  out->blob = data;
  out->blob_len = (size_t)data_end;
  return true;
}

void fe_safetensors_fini(fe_safetensors *st) {
  free(st->blob);
  arena_destroy(st->arena);
  *st = (fe_safetensors){0};
}

const fe_tensor *fe_safetensors_find(const fe_safetensors *st, const char *key) {
  for (int i = 0; i < st->n_tensors; i++)
    if (str_eq(st->tensors[i].key, key)) return &st->tensors[i];
  return NULL;
}
