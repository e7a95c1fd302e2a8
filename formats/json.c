/* SPDX-License-Identifier: Apache-2.0 */
/*
 * json.c: the strict JSON reader (json.h). A recursive-descent parser over
 * a byte buffer that never reads past len; numbers are classified (integer
 * in int64 range, or float) but floats are not converted, since no reader
 * in castor needs their value yet. Duplicate keys are found by sorting an
 * object's keys, so objects of many thousands of keys stay cheap.
 */
#include "formats/json.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

typedef struct jparser {
  const char *text;
  size_t len, pos, base; /* base: file offset of text[0] */
  arena *a;
  const char *doc_name;
  json_error *err;
} jparser;

static bool corrupt(jparser *p, size_t off, const char *fmt, ...) CASTOR_PRINTF(3, 4);
static bool corrupt(jparser *p, size_t off, const char *fmt, ...) {
  str_buf b;
  str_buf_init(&b);
  va_list ap;
  va_start(ap, fmt);
  str_buf_vprintf(&b, fmt, ap);
  va_end(ap);
  p->err->off = p->base + off;
  p->err->msg = arena_strdup(p->a, str_buf_cstr(&b));
  str_buf_fini(&b);
  return false;
}

static void skip_ws(jparser *p) {
  while (p->pos < p->len) {
    char c = p->text[p->pos];
    if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
    p->pos++;
  }
}

static bool unexpected(jparser *p, const char *what) {
  if (p->pos >= p->len) return corrupt(p, p->pos, "expected %s, got the end of the %s", what,
                                           p->doc_name);
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


/* A byte a string holds as it is: printable ASCII but the quote and the backslash. */
static bool plain_ascii(unsigned char c) { return c >= 0x20 && c < 0x80 && c != '"' && c != '\\'; }

static bool parse_string(jparser *p, const char **out) {
  if (p->pos >= p->len || p->text[p->pos] != '"') return unexpected(p, "'\"'");
  size_t start = p->pos++;
  /* the common case, printable ASCII up to the closing quote: one copy */
  size_t q = p->pos;
  while (q < p->len && plain_ascii((unsigned char)p->text[q])) q++;
  if (q < p->len && p->text[q] == '"') {
    *out = arena_strndup(p->a, p->text + p->pos, q - p->pos);
    p->pos = q + 1;
    return true;
  }
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
    size_t run = p->pos;
    while (run < p->len && plain_ascii((unsigned char)p->text[run])) run++;
    if (run > p->pos) {
      str_buf_append(&b, p->text + p->pos, run - p->pos);
      p->pos = run;
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

static bool parse_number(jparser *p, json_value *v) {
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
  v->kind = JSON_INT;
  if (p->pos < p->len && p->text[p->pos] == '.') {
    p->pos++;
    if (p->pos >= p->len || !is_digit(p->text[p->pos])) return corrupt(p, start, "invalid number");
    while (p->pos < p->len && is_digit(p->text[p->pos])) p->pos++;
    v->kind = JSON_FLOAT;
  }
  if (p->pos < p->len && (p->text[p->pos] == 'e' || p->text[p->pos] == 'E')) {
    p->pos++;
    if (p->pos < p->len && (p->text[p->pos] == '+' || p->text[p->pos] == '-')) p->pos++;
    if (p->pos >= p->len || !is_digit(p->text[p->pos])) return corrupt(p, start, "invalid number");
    while (p->pos < p->len && is_digit(p->text[p->pos])) p->pos++;
    v->kind = JSON_FLOAT;
  }
  if (v->kind == JSON_INT && overflow) return corrupt(p, start, "integer out of range");
  v->i = neg ? -(int64_t)mag : (int64_t)mag;
  /* the spelling is valid JSON, which strtod reads in full; copied so
   * strtod stops at its end */
  char num[64];
  size_t n = p->pos - start;
  if (n < sizeof num) {
    memcpy(num, p->text + start, n);
    num[n] = 0;
    v->num = strtod(num, NULL);
  } else {
    char *big = arena_strndup(p->a, p->text + start, n);
    v->num = strtod(big, NULL);
  }
  return true;
}

static bool parse_value(jparser *p, json_value *v, int depth);

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
  if (n <= 16) { /* most objects: pairs, without the sort */
    for (size_t i = 1; i < n; i++)
      for (size_t j = 0; j < i; j++)
        if (str_eq(keys[i], keys[j])) return corrupt(p, offs[i], "duplicate key '%s'", keys[i]);
    return true;
  }
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
static bool parse_container(jparser *p, json_value *v, int depth) {
  bool obj = p->text[p->pos] == '{';
  char close = obj ? '}' : ']';
  v->kind = obj ? JSON_OBJ : JSON_ARR;
  if (depth >= JSON_MAX_DEPTH) return corrupt(p, p->pos, "nested more than %d deep", JSON_MAX_DEPTH);
  p->pos++;
  VEC(json_value) items = {0};
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
      json_value item = {0};
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

static bool parse_value(jparser *p, json_value *v, int depth) {
  skip_ws(p);
  v->off = p->pos + p->base;
  if (p->pos >= p->len) return unexpected(p, "a value");
  char c = p->text[p->pos];
  if (c == '{' || c == '[') return parse_container(p, v, depth);
  if (c == '"') return v->kind = JSON_STR, parse_string(p, &v->s);
  if (c == '-' || is_digit(c)) return parse_number(p, v);
  static const char *const lits[] = {"true", "false", "null"};
  for (int i = 0; i < 3; i++) {
    size_t n = strlen(lits[i]);
    if (p->len - p->pos >= n && memcmp(p->text + p->pos, lits[i], n) == 0) {
      p->pos += n;
      v->kind = JSON_LIT;
      v->lit = "tfn"[i];
      return true;
    }
  }
  return unexpected(p, "a value");
}

bool json_parse(const char *text, size_t len, const json_parse_options *o, arena *a,
                json_value *out, json_error *err) {
  jparser p = {.text = text, .len = len, .base = o->base, .a = a, .doc_name = o->doc_name,
               .err = err};
  *out = (json_value){0};
  *err = (json_error){0};
  skip_ws(&p);
  if (o->require_object && (p.pos >= p.len || p.text[p.pos] != '{')) return unexpected(&p, "'{'");
  if (!parse_value(&p, out, 0)) return false;
  skip_ws(&p);
  if (p.pos < p.len)
    return corrupt(&p, p.pos, "unexpected data after the %s %s", p.doc_name,
                   o->require_object ? "object" : "value");
  return true;
}

const json_value *json_field(const json_value *obj, const char *key) {
  for (int i = 0; i < obj->n; i++)
    if (str_eq(obj->keys[i], key)) return &obj->items[i];
  return NULL;
}

const char *json_kind_name(json_kind k) {
  static const char *const names[] = {"a string", "an integer", "a number", "a literal",
                                      "an array", "an object"};
  return names[k];
}
