/* SPDX-License-Identifier: Apache-2.0 */
/*
 * npy.c: NumPy .npy reader and writer (see npy.h for what is supported).
 *
 * Layout of the format: the magic "\x93NUMPY", a major and a minor version
 * byte, the header length (uint16 LE in 1.0, uint32 LE in 2.0 and 3.0), then
 * the header: a Python dict literal such as
 *   {'descr': '<f4', 'fortran_order': False, 'shape': (4, 784), }
 * padded with spaces and ended by '\n' so the data starts 64-byte aligned,
 * then the elements in C order.
 *
 * Robustness rules: the header is parsed by a small recursive-descent parser
 * that accepts exactly the dict NumPy writes (any key order, either quote,
 * trailing commas, Python 2 'L' suffixes); the data buffer grows only as
 * bytes actually arrive, so a lying shape cannot make us allocate terabytes.
 */
#include "formats/npy.h"

#include "util/half.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
  NPY_MAX_HEADER = 1 << 20,     /* NumPy itself refuses headers over 10000 bytes */
  NPY_FIRST_CHUNK = 1 << 20,    /* the data buffer starts here and doubles */
};
#define NPY_MAX_BYTES ((int64_t)1 << 40)

static const char npy_magic[6] = {'\x93', 'N', 'U', 'M', 'P', 'Y'};

static diag_loc at(const char *path) { return (diag_loc){path, 0, 0}; }

/* ---- dtypes ---- */

typedef struct npy_type {
  const char *code; /* descr without the byte-order character */
  dtype_id dtype;
  bool f64;
  int size;
} npy_type;

static const npy_type npy_types[] = {
    {"f4", DT_F32, false, 4}, {"f2", DT_F16, false, 2}, {"f8", DT_F32, true, 8},
    {"i4", DT_I32, false, 4}, {"i8", DT_I64, false, 8}, {"b1", DT_I1, false, 1},
};

static const npy_type *find_type(const char *code) {
  for (size_t i = 0; i < sizeof npy_types / sizeof *npy_types; i++)
    if (strcmp(npy_types[i].code, code) == 0) return &npy_types[i];
  return NULL;
}

static const char *descr_of(dtype_id t) {
  switch (t) {
  case DT_F32: return "<f4";
  case DT_F16: return "<f2";
  case DT_I32: return "<i4";
  case DT_I64: return "<i8";
  case DT_I1: return "|b1";
  case DT_BF16: return NULL;
  case DT_COUNT: break;
  }
  return NULL;
}

const char *npy_shape_str(int rank, const int64_t *dims, char *buf, size_t len) {
  size_t o = 0;
  buf[0] = 0;
#define PUT(...) (o += (size_t)snprintf(buf + o, o < len ? len - o : 0, __VA_ARGS__))
  PUT("(");
  for (int i = 0; i < rank; i++) PUT("%s%lld", i ? ", " : "", (long long)dims[i]);
  PUT(rank == 1 ? ",)" : ")");
#undef PUT
  return buf;
}

/* ---- header parsing ---- */

typedef struct hparse {
  const char *s;
  size_t n, i;
  const char *path;
  diag_sink *d;
} hparse;

/* The header text for messages: printable ASCII only, at most 96 bytes. */
static void header_snippet(const hparse *p, char *buf, size_t len) {
  size_t n = p->n, o = 0;
  while (n > 0 && (p->s[n - 1] == ' ' || p->s[n - 1] == '\n')) n--;
  for (size_t i = 0; i < n && o + 4 < len; i++) {
    if (i == 96) {
      memcpy(buf + o, "...", 3), o += 3;
      break;
    }
    unsigned char c = (unsigned char)p->s[i];
    buf[o++] = c >= 0x20 && c < 0x7f ? (char)c : '?';
  }
  buf[o] = 0;
}

static bool bad_header(hparse *p, const char *what) {
  char snip[128];
  header_snippet(p, snip, sizeof snip);
  diag_error(p->d, at(p->path), "malformed .npy header: %s at byte %zu of \"%s\"", what, p->i,
             snip);
  return false;
}

static void skip_ws(hparse *p) {
  while (p->i < p->n && (p->s[p->i] == ' ' || p->s[p->i] == '\t' || p->s[p->i] == '\n' ||
                         p->s[p->i] == '\r'))
    p->i++;
}

static bool eat(hparse *p, char c) {
  skip_ws(p);
  if (p->i < p->n && p->s[p->i] == c) return p->i++, true;
  return false;
}

static bool peek_is(hparse *p, char c) {
  skip_ws(p);
  return p->i < p->n && p->s[p->i] == c;
}

/* A quoted string into buf (truncated to len - 1 bytes; *out_full tells). */
static bool parse_string(hparse *p, char *buf, size_t len, const char *what) {
  skip_ws(p);
  if (p->i >= p->n || (p->s[p->i] != '\'' && p->s[p->i] != '"')) return bad_header(p, what);
  char q = p->s[p->i++];
  size_t o = 0, start = p->i;
  while (p->i < p->n && p->s[p->i] != q) {
    if (o + 1 < len) buf[o++] = p->s[p->i];
    p->i++;
  }
  if (p->i >= p->n) {
    p->i = start - 1;
    return bad_header(p, "unterminated string");
  }
  p->i++;
  buf[o] = 0;
  return true;
}

static bool parse_bool(hparse *p, bool *out) {
  skip_ws(p);
  if (p->n - p->i >= 4 && memcmp(p->s + p->i, "True", 4) == 0) return p->i += 4, *out = true, true;
  if (p->n - p->i >= 5 && memcmp(p->s + p->i, "False", 5) == 0)
    return p->i += 5, *out = false, true;
  return bad_header(p, "expected True or False for 'fortran_order'");
}

/* A tuple of non-negative integers. Dimensions past NPY_MAX_RANK are counted
 * (so the error names the real rank) but not stored. */
static bool parse_shape(hparse *p, int *out_rank, int64_t *dims) {
  if (!eat(p, '(')) return bad_header(p, "expected a tuple for 'shape'");
  int rank = 0;
  while (!eat(p, ')')) {
    skip_ws(p);
    size_t start = p->i;
    bool neg = p->i < p->n && p->s[p->i] == '-';
    if (neg) p->i++;
    if (p->i >= p->n || p->s[p->i] < '0' || p->s[p->i] > '9')
      return bad_header(p, "expected an integer in 'shape'");
    int64_t v = 0;
    bool overflow = false;
    while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') {
      int digit = p->s[p->i++] - '0';
      if (v > (INT64_MAX - digit) / 10) overflow = true;
      else v = v * 10 + digit;
    }
    if (p->i < p->n && p->s[p->i] == 'L') p->i++; /* Python 2 long */
    int len = (int)(p->i - start);
    if (neg) {
      diag_error(p->d, at(p->path), "negative dimension %.*s in .npy shape", len, p->s + start);
      return false;
    }
    if (overflow) {
      diag_error(p->d, at(p->path), ".npy shape dimension %.*s is too large", len, p->s + start);
      return false;
    }
    if (rank < NPY_MAX_RANK) dims[rank] = v;
    if (rank < 1000) rank++;
    if (!eat(p, ',')) {
      if (!eat(p, ')')) return bad_header(p, "expected ',' or ')' in 'shape'");
      break;
    }
  }
  *out_rank = rank;
  return true;
}

static bool parse_header(hparse *p, npy_header *h) {
  bool seen_descr = false, seen_fortran = false, seen_shape = false;
  if (!eat(p, '{')) return bad_header(p, "expected a dict");
  while (!eat(p, '}')) {
    char key[32];
    skip_ws(p);
    size_t key_at = p->i;
    if (!parse_string(p, key, sizeof key, "expected a quoted key")) return false;
    if (!eat(p, ':')) return bad_header(p, "expected ':' after the key");
    bool *seen;
    if (strcmp(key, "descr") == 0) {
      seen = &seen_descr;
      if (peek_is(p, '[')) {
        diag_error(p->d, at(p->path), "structured .npy dtypes are not supported");
        return false;
      }
      if (!parse_string(p, h->descr, sizeof h->descr, "expected a string for 'descr'"))
        return false;
      for (char *c = h->descr; *c; c++) /* it appears in messages */
        if ((unsigned char)*c < 0x20 || (unsigned char)*c >= 0x7f) *c = '?';
    } else if (strcmp(key, "fortran_order") == 0) {
      seen = &seen_fortran;
      if (!parse_bool(p, &h->fortran)) return false;
    } else if (strcmp(key, "shape") == 0) {
      seen = &seen_shape;
      if (!parse_shape(p, &h->rank, h->dims)) return false;
    } else {
      p->i = key_at;
      return bad_header(p, "unexpected key");
    }
    if (*seen) {
      p->i = key_at;
      return bad_header(p, "duplicate key");
    }
    *seen = true;
    if (!eat(p, ',')) {
      if (!eat(p, '}')) return bad_header(p, "expected ',' or '}'");
      break;
    }
  }
  skip_ws(p);
  if (p->i != p->n) return bad_header(p, "unexpected text after the dict");
  const char *missing = !seen_descr ? "descr" : !seen_fortran ? "fortran_order"
                        : !seen_shape ? "shape" : NULL;
  if (missing) {
    diag_error(p->d, at(p->path), "malformed .npy header: no '%s' key", missing);
    return false;
  }
  return true;
}

/* ---- reading ---- */

static bool read_error(FILE *f, const char *path, diag_sink *d) {
  if (!ferror(f)) return false;
  int e = errno ? errno : EIO;
  diag_error_kind(d, DIAG_KIND_IO, at(path), "cannot read: %s", strerror(e));
  return true;
}

/* Reads up to `need` bytes into a buffer that grows as data arrives. */
static bool read_data(FILE *f, int64_t need, void **out, int64_t *out_got, const char *path,
                      diag_sink *d) {
  int64_t cap = need < NPY_FIRST_CHUNK ? need : NPY_FIRST_CHUNK, got = 0;
  unsigned char *buf = malloc(cap ? (size_t)cap : 1);
  for (;;) {
    if (!buf) {
      diag_error(d, at(path), "out of memory reading %lld bytes of .npy data", (long long)need);
      return false;
    }
    got += (int64_t)fread(buf + got, 1, (size_t)(cap - got), f);
    if (got < cap || cap == need) break;
    cap = cap > need / 2 ? need : 2 * cap;
    unsigned char *nb = realloc(buf, (size_t)cap);
    if (!nb) free(buf);
    buf = nb;
  }
  errno = 0;
  if (read_error(f, path, d)) {
    free(buf);
    return false;
  }
  *out = buf;
  *out_got = got;
  return true;
}

static uint32_t le16(const unsigned char *b) { return (uint32_t)b[0] | (uint32_t)b[1] << 8; }
static uint32_t le32(const unsigned char *b) {
  return le16(b) | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}

/* The preamble and header dict; leaves f at the first data byte. */
static bool read_header(FILE *f, const char *path, npy_header *out_h, diag_sink *d) {
  unsigned char pre[12];
  size_t n = fread(pre, 1, 8, f);
  if (read_error(f, path, d)) return false;
  if (n < 6 || memcmp(pre, npy_magic, 6) != 0) {
    diag_error(d, at(path), "not a .npy file (bad magic bytes)");
    return false;
  }
  if (n < 8) {
    diag_error(d, at(path), "truncated .npy header: the file ends after %zu bytes", n);
    return false;
  }
  int major = pre[6], minor = pre[7];
  if (major < 1 || major > 3 || minor != 0) {
    diag_error(d, at(path), "unsupported .npy format version %d.%d (supported: 1.0, 2.0, 3.0)",
               major, minor);
    return false;
  }
  size_t len_bytes = major == 1 ? 2 : 4;
  n = fread(pre + 8, 1, len_bytes, f);
  if (read_error(f, path, d)) return false;
  if (n < len_bytes) {
    diag_error(d, at(path), "truncated .npy header: the file ends after %zu bytes", 8 + n);
    return false;
  }
  uint32_t hlen = major == 1 ? le16(pre + 8) : le32(pre + 8);
  if (hlen > NPY_MAX_HEADER) {
    diag_error(d, at(path), ".npy header of %lu bytes is too large (at most %d)",
               (unsigned long)hlen, NPY_MAX_HEADER);
    return false;
  }
  char *text = xmalloc(hlen ? hlen : 1);
  n = fread(text, 1, hlen, f);
  if (read_error(f, path, d)) return free(text), false;
  if (n < hlen) {
    diag_error(d, at(path), "truncated .npy header: it declares %lu bytes, the file has %zu",
               (unsigned long)hlen, n);
    free(text);
    return false;
  }
  npy_header h = {0};
  hparse p = {text, hlen, 0, path, d};
  bool ok = parse_header(&p, &h);
  free(text);
  if (!ok) return false;
  *out_h = h;
  return true;
}

static bool read_file(FILE *f, const char *path, npy_array *out, diag_sink *d) {
  npy_header h = {0};
  if (!read_header(f, path, &h, d)) return false;

  const char *code = h.descr[0] ? h.descr + 1 : "";
  const npy_type *t = strchr("<>|=", h.descr[0]) && h.descr[0] ? find_type(code) : NULL;
  if (t && h.descr[0] == '>' && t->size > 1) {
    diag_error(d, at(path),
               "big-endian .npy dtype '%s' is not supported; save it little-endian "
               "(a.astype('<%s'))",
               h.descr, code);
    return false;
  }
  if (!t) {
    diag_error(d, at(path),
               "unsupported .npy dtype '%s' (supported: <f4, <f2, <f8, <i4, <i8, |b1)", h.descr);
    return false;
  }
  if (h.fortran) {
    diag_error(d, at(path), "Fortran-order .npy arrays are not supported; save a C-order array "
                            "(np.ascontiguousarray)");
    return false;
  }
  if (h.rank > NPY_MAX_RANK) {
    diag_error(d, at(path), ".npy array of rank %d is not supported (at most %d dimensions)",
               h.rank, NPY_MAX_RANK);
    return false;
  }
  char shape[160];
  npy_shape_str(h.rank, h.dims, shape, sizeof shape);
  int64_t numel = 1, nbytes;
  for (int i = 0; i < h.rank; i++)
    if (!size_mul_ok(numel, h.dims[i], &numel)) numel = -1;
  if (numel < 0 || !size_mul_ok(numel, t->size, &nbytes) || nbytes > NPY_MAX_BYTES) {
    diag_error(d, at(path), ".npy shape %s of '%s' is too large", shape, h.descr);
    return false;
  }
  void *data;
  int64_t got;
  if (!read_data(f, nbytes, &data, &got, path, d)) return false;
  if (got < nbytes) {
    diag_error(d, at(path), "truncated .npy '%s': shape %s needs %lld bytes of data, file has %lld",
               path, shape, (long long)nbytes, (long long)got);
    free(data);
    return false;
  }
  if (fgetc(f) != EOF)
    diag_warning(d, at(path), "bytes after the .npy data (shape %s) are ignored", shape);
  out->dtype = t->dtype;
  out->is_f64 = t->f64;
  out->rank = h.rank;
  memcpy(out->dims, h.dims, sizeof h.dims);
  out->numel = numel;
  out->data = data;
  out->nbytes = nbytes;
  return true;
}

bool npy_read(const char *path, npy_array *out, diag_sink *d) {
  memset(out, 0, sizeof *out);
  FILE *f = fopen(path, "rb");
  if (!f) {
    diag_error_kind(d, DIAG_KIND_IO, at(path), "cannot open: %s", strerror(errno));
    return false;
  }
  bool ok = read_file(f, path, out, d);
  fclose(f);
  return ok;
}

bool npy_read_header(FILE *f, const char *path, npy_header *out, diag_sink *d) {
  memset(out, 0, sizeof *out);
  npy_header h = {0};
  if (!read_header(f, path, &h, d)) return false;
  if (h.rank > NPY_MAX_RANK) {
    diag_error(d, at(path), ".npy array of rank %d is not supported (at most %d dimensions)",
               h.rank, NPY_MAX_RANK);
    return false;
  }
  memcpy(out->descr, h.descr, sizeof out->descr);
  out->fortran = h.fortran;
  out->rank = h.rank;
  memcpy(out->dims, h.dims, sizeof h.dims);
  return true;
}

bool npy_read_stream(FILE *f, const char *name, npy_array *out, diag_sink *d) {
  memset(out, 0, sizeof *out);
  return read_file(f, name, out, d);
}

void npy_fini(npy_array *a) {
  if (!a) return;
  free(a->data);
  memset(a, 0, sizeof *a);
}

/* ---- conversion ---- */

/* x rounded to nearest even in a binary format with `mant` fraction bits,
 * smallest normal exponent emin and largest finite value max: one rounding
 * straight from float64, as NumPy's astype(float16) does (no double rounding
 * through float32). The result is exact in float32. (ml_dtypes converts
 * float64 to bfloat16 through float32, so bf16 targets do that instead.) */
static double round_to_format(double x, int mant, int emin, double max) {
  if (!isfinite(x) || x == 0) return x;
  int e;
  frexp(x, &e); /* |x| in [2^(e-1), 2^e) */
  e -= 1;
  if (e < emin) e = emin;
  double q = ldexp(1.0, e - mant);
  double r = nearbyint(x / q) * q;
  if (fabs(r) > max) return x > 0 ? INFINITY : -INFINITY;
  return r;
}

static double elem_f64(const npy_array *a, int64_t i) {
  if (a->is_f64) return ((const double *)a->data)[i];
  switch (a->dtype) {
  case DT_F32: return ((const float *)a->data)[i];
  case DT_F16: return half_f16_to_f32(((const uint16_t *)a->data)[i]);
  case DT_BF16: return half_bf16_to_f32(((const uint16_t *)a->data)[i]);
  case DT_I32:
  case DT_I64:
  case DT_I1: break;
  case DT_COUNT: break;
  }
  CASTOR_UNREACHABLE();
  return 0;
}

bool npy_convert(npy_array *a, dtype_id to, const char *path, diag_sink *d) {
  bool from_float = a->is_f64 || a->dtype == DT_F32 || a->dtype == DT_F16 || a->dtype == DT_BF16;
  bool to_float = to == DT_F32 || to == DT_F16 || to == DT_BF16;
  const char *from_name = a->is_f64 ? "f64" : dtype_name(a->dtype);
  if (!from_float || !to_float) {
    diag_error(d, at(path), "cannot convert a .npy array of %s to %s", from_name,
               dtype_name(to));
    return false;
  }
  if (!a->is_f64 && a->dtype == to) return true;
  int64_t nbytes = a->numel * dtype_size(to); /* numel <= 2^40: no overflow */
  void *dst = malloc(nbytes ? (size_t)nbytes : 1);
  if (!dst) {
    diag_error(d, at(path), "out of memory converting %lld elements", (long long)a->numel);
    return false;
  }
  for (int64_t i = 0; i < a->numel; i++) {
    double x = elem_f64(a, i);
    switch (to) {
    case DT_F32: ((float *)dst)[i] = (float)x; break;
    case DT_F16:
      ((uint16_t *)dst)[i] = half_f32_to_f16((float)round_to_format(x, 10, -14, 65504.0));
      break;
    case DT_BF16: ((uint16_t *)dst)[i] = half_f32_to_bf16((float)x); break;
    case DT_I32:
    case DT_I64:
    case DT_I1:
    case DT_COUNT: CASTOR_UNREACHABLE();
    }
  }
  free(a->data);
  a->data = dst;
  a->dtype = to;
  a->is_f64 = false;
  a->nbytes = nbytes;
  return true;
}

bool npy_to_f32(npy_array *a, const char *path, diag_sink *d) {
  return npy_convert(a, DT_F32, path, d);
}

/* ---- writing ---- */

bool npy_write(const char *path, dtype_id dtype, int rank, const int64_t *dims,
                  const void *data, diag_sink *d) {
  const char *descr = descr_of(dtype);
  if (!descr) {
    diag_error_kind(d, DIAG_KIND_UNSUPPORTED, at(path),
                    "cannot write %s to .npy: NumPy has no %s dtype", dtype_name(dtype),
                    dtype_name(dtype));
    return false;
  }
  if (rank < 0 || rank > NPY_MAX_RANK) {
    diag_error_kind(d, DIAG_KIND_INVALID_ARGUMENT, at(path),
                    "cannot write a .npy array of rank %d (at most %d)", rank, NPY_MAX_RANK);
    return false;
  }
  int64_t numel = 1, nbytes;
  for (int i = 0; i < rank; i++) {
    if (dims[i] < 0) {
      diag_error_kind(d, DIAG_KIND_INVALID_ARGUMENT, at(path),
                      "cannot write a .npy array with negative dimension %lld", (long long)dims[i]);
      return false;
    }
    if (!size_mul_ok(numel, dims[i], &numel)) numel = -1;
  }
  char shape[160];
  npy_shape_str(rank, dims, shape, sizeof shape);
  if (numel < 0 || !size_mul_ok(numel, dtype_size(dtype), &nbytes) ||
      nbytes > NPY_MAX_BYTES) {
    diag_error_kind(d, DIAG_KIND_UNSUPPORTED, at(path),
                    "cannot write a .npy array of shape %s: too large", shape);
    return false;
  }

  str_buf h;
  str_buf_init(&h);
  str_buf_printf(&h, "{'descr': '%s', 'fortran_order': False, 'shape': %s, }", descr, shape);
  /* Pad with spaces so magic + version + length + header is a multiple of
   * 64 and the header ends in '\n'. */
  bool v2 = 10 + h.len + 1 > 65535;
  size_t prefix = v2 ? 12 : 10;
  while ((prefix + h.len + 1) % 64) str_buf_putc(&h, ' ');
  str_buf_putc(&h, '\n');
  unsigned char pre[12];
  memcpy(pre, npy_magic, 6);
  pre[6] = v2 ? 2 : 1;
  pre[7] = 0;
  for (size_t i = 0; i < prefix - 8; i++) pre[8 + i] = (unsigned char)(h.len >> (8 * i));

  FILE *f = fopen(path, "wb");
  if (!f) {
    diag_error_kind(d, DIAG_KIND_IO, at(path), "cannot open for writing: %s", strerror(errno));
    str_buf_fini(&h);
    return false;
  }
  errno = 0;
  bool ok = fwrite(pre, 1, prefix, f) == prefix && fwrite(h.data, 1, h.len, f) == h.len &&
            (nbytes == 0 || fwrite(data, 1, (size_t)nbytes, f) == (size_t)nbytes);
  int e = errno;
  if (fclose(f) != 0 && ok) ok = false, e = errno;
  str_buf_fini(&h);
  if (!ok) {
    diag_error_kind(d, DIAG_KIND_IO, at(path), "cannot write: %s", strerror(e ? e : EIO));
    remove(path);
  }
  return ok;
}
