/*
 * dataset.c: loading and checking training data (see dataset.h): .npy and
 * IDX files, gzip-compressed or not, into float32 features and int32 class
 * indices or float32 targets. Splitting, shuffling and batching live in
 * batch.c.
 *
 * A file is opened once; its first two bytes say whether it is gzip (1f 8b).
 * A gzip file is read through zlib behind a stdio FILE (fopencookie), so
 * one reader serves both: the .npy header goes through npy.c's
 * npy_read_header, the IDX header is parsed here. Either way the result
 * is a raw array (element kind, size, byte order, shape, bytes) read to
 * exactly its declared size, then converted. IDX stores big-endian
 * elements; .npy files may declare either order.
 */
#include "train/dataset.h"

#include "formats/npy.h"
#include "util/half.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

enum { FIRST_CHUNK = 1 << 20, STREAM_BUFFER = 1 << 18 };

static diag_loc at(const char *path) { return (diag_loc){path, 0, 0}; }

/* ---- a file, gzip or plain, as a FILE ---- */

typedef struct gz_cookie {
  gzFile gz;
  char err[160]; /* zlib's message for the first failed read */
} gz_cookie;

static ssize_t gz_cookie_read(void *c, char *buf, size_t n) {
  gz_cookie *g = c;
  int got = gzread(g->gz, buf, (unsigned)(n > INT_MAX ? INT_MAX : n));
  int zerr = Z_OK;
  const char *msg = gzerror(g->gz, &zerr);
  if (got < 0 || (zerr != Z_OK && zerr != Z_STREAM_END)) {
    /* zlib prefixes "<fd:N>: "; the diagnostic names the file already */
    if (msg && strncmp(msg, "<fd:", 4) == 0 && strstr(msg, ": ")) msg = strstr(msg, ": ") + 2;
    if (!g->err[0]) snprintf(g->err, sizeof g->err, "%s", msg && *msg ? msg : "zlib error");
    if (got <= 0) {
      errno = EIO;
      return -1;
    }
  }
  return got;
}

static int gz_cookie_seek(void *c, off64_t *off, int whence) {
  gz_cookie *g = c;
  if (whence == SEEK_END) return errno = EINVAL, -1;
  z_off_t r = gzseek(g->gz, (z_off_t)*off, whence);
  if (r < 0) return errno = EIO, -1;
  *off = r;
  return 0;
}

static int gz_cookie_close(void *c) {
  gz_cookie *g = c;
  gzclose(g->gz);
  free(g);
  return 0;
}

typedef struct stream {
  FILE *f;
  gz_cookie *gz; /* NULL for a plain file; owned by f */
} stream;

static bool stream_open(const char *path, stream *s, diag_sink *d) {
  *s = (stream){0};
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    diag_error_kind(d, DIAG_KIND_IO, at(path), "cannot open: %s", strerror(errno));
    return false;
  }
  unsigned char m[2] = {0, 0};
  ssize_t got = read(fd, m, 2);
  if (got < 0 || lseek(fd, 0, SEEK_SET) != 0) {
    diag_error_kind(d, DIAG_KIND_IO, at(path), "cannot read: %s", strerror(errno));
    close(fd);
    return false;
  }
  if (got == 2 && m[0] == 0x1f && m[1] == 0x8b) {
    gz_cookie *g = xcalloc(1, sizeof *g);
    g->gz = gzdopen(fd, "rb");
    if (!g->gz) {
      close(fd);
      free(g);
      diag_error_kind(d, DIAG_KIND_IO, at(path), "cannot open: out of memory");
      return false;
    }
    gzbuffer(g->gz, STREAM_BUFFER);
    s->f = fopencookie(g, "rb", (cookie_io_functions_t){gz_cookie_read, NULL, gz_cookie_seek,
                                                        gz_cookie_close});
    if (!s->f) {
      gz_cookie_close(g);
      diag_error_kind(d, DIAG_KIND_IO, at(path), "cannot open: %s", strerror(errno));
      return false;
    }
    s->gz = g;
  } else {
    s->f = fdopen(fd, "rb");
    if (!s->f) {
      close(fd);
      diag_error_kind(d, DIAG_KIND_IO, at(path), "cannot open: %s", strerror(errno));
      return false;
    }
  }
  setvbuf(s->f, NULL, _IOFBF, STREAM_BUFFER);
  return true;
}

static void stream_close(stream *s) {
  if (s->f) fclose(s->f);
  *s = (stream){0};
}

/* After a short or failed read: an I/O or gzip error if there was one. */
static bool stream_failed(stream *s, const char *path, diag_sink *d) {
  if (s->gz && s->gz->err[0]) {
    diag_error(d, at(path), "corrupt gzip data: %s", s->gz->err);
    return true;
  }
  if (ferror(s->f)) {
    diag_error_kind(d, DIAG_KIND_IO, at(path), "cannot read: %s", strerror(errno ? errno : EIO));
    return true;
  }
  return false;
}

/* ---- raw arrays ---- */

typedef struct raw_array {
  char kind;       /* 'f' float, 'i' signed, 'u' unsigned, 'b' bool */
  int size;        /* bytes per element: 1, 2, 4, 8 */
  bool big_endian;
  int rank;
  int64_t dims[RT_MAX_RANK];
  int64_t numel;
  unsigned char *data;
  const char *format; /* "npy" or "IDX" */
  bool gzip;
} raw_array;

static const char *numpy_name(char kind, int size) {
  switch (kind) {
  case 'f': return size == 2 ? "float16" : size == 4 ? "float32" : "float64";
  case 'i': return size == 1 ? "int8" : size == 2 ? "int16" : size == 4 ? "int32" : "int64";
  case 'u': return size == 1 ? "uint8" : size == 2 ? "uint16" : size == 4 ? "uint32" : "uint64";
  default: return "bool";
  }
}

static uint64_t load_bits(const raw_array *a, int64_t i) {
  const unsigned char *p = a->data + i * a->size;
  uint64_t v = 0;
  if (a->big_endian)
    for (int k = 0; k < a->size; k++) v = v << 8 | p[k];
  else
    for (int k = a->size; k-- > 0;) v = v << 8 | p[k];
  return v;
}

static double elem_f64(const raw_array *a, int64_t i) {
  if (a->kind == 'u' && a->size == 1) return a->data[i]; /* the common case, fast */
  uint64_t v = load_bits(a, i);
  switch (a->kind) {
  case 'f':
    if (a->size == 2) return half_f16_to_f32((uint16_t)v);
    if (a->size == 4) {
      float f;
      uint32_t u = (uint32_t)v;
      memcpy(&f, &u, 4);
      return f;
    } else {
      double x;
      memcpy(&x, &v, 8);
      return x;
    }
  case 'i': {
    int shift = 64 - 8 * a->size;
    return (double)((int64_t)(v << shift) >> shift);
  }
  default: return (double)v;
  }
}

/* An integer element; *out_neg_or_big is set for a uint64 beyond INT64_MAX. */
static int64_t elem_i64(const raw_array *a, int64_t i, bool *out_big) {
  uint64_t v = load_bits(a, i);
  *out_big = false;
  if (a->kind == 'i') {
    int shift = 64 - 8 * a->size;
    return (int64_t)(v << shift) >> shift;
  }
  if (v > INT64_MAX) *out_big = true;
  return (int64_t)v;
}

/* .npy descr -> kind/size/order; false if castor cannot take it at all. */
static bool parse_descr(const char *descr, raw_array *a) {
  size_t n = strlen(descr);
  if (n < 3 || !strchr("<>|=", descr[0]) || !strchr("fiub", descr[1])) return false;
  char *end;
  long size = strtol(descr + 2, &end, 10);
  if (*end || (size != 1 && size != 2 && size != 4 && size != 8)) return false;
  if (descr[1] == 'f' && size == 1) return false;
  if (descr[1] == 'b' && size != 1) return false;
  a->kind = descr[1];
  a->size = (int)size;
  a->big_endian = descr[0] == '>';
  return true;
}

static const char *shape_str(const raw_array *a, char *buf, size_t len) {
  return npy_shape_str(a->rank, a->dims, buf, len);
}

/* IDX: 00 00 <type> <ndims>, ndims big-endian uint32 dimensions, then the
 * elements, big-endian. Types: 08 ubyte, 09 sbyte, 0B short, 0C int,
 * 0D float, 0E double. The first four bytes are already in m. */
static bool read_idx_header(stream *s, const unsigned char *m, const char *path, raw_array *a,
                            diag_sink *d) {
  static const struct {
    unsigned char code;
    char kind;
    int size;
  } types[] = {{0x08, 'u', 1}, {0x09, 'i', 1}, {0x0B, 'i', 2},
               {0x0C, 'i', 4}, {0x0D, 'f', 4}, {0x0E, 'f', 8}};
  a->kind = 0;
  for (size_t i = 0; i < sizeof types / sizeof *types; i++)
    if (types[i].code == m[2]) a->kind = types[i].kind, a->size = types[i].size;
  if (!a->kind) {
    diag_error(d, at(path), "unsupported IDX element type 0x%02X (IDX defines 08, 09, 0B, 0C, 0D "
                            "and 0E)", m[2]);
    return false;
  }
  if (m[3] < 1 || m[3] > RT_MAX_RANK) {
    diag_error(d, at(path), "IDX file with %d dimensions is not supported (1 to %d)", m[3],
               RT_MAX_RANK);
    return false;
  }
  a->big_endian = true;
  a->rank = m[3];
  unsigned char b[4 * RT_MAX_RANK];
  size_t want = 4 * (size_t)a->rank, got = fread(b, 1, want, s->f);
  if (got < want) {
    if (!stream_failed(s, path, d))
      diag_error(d, at(path), "truncated IDX header: %d dimensions need %zu bytes, the file has %zu",
                 a->rank, 4 + want, 4 + got);
    return false;
  }
  for (int k = 0; k < a->rank; k++)
    a->dims[k] = (int64_t)b[4 * k] << 24 | (int64_t)b[4 * k + 1] << 16 |
                 (int64_t)b[4 * k + 2] << 8 | b[4 * k + 3];
  return true;
}

/* Reads exactly the declared bytes into a buffer that grows as they
 * arrive; warns about trailing bytes. */
static bool read_data(stream *s, const char *path, raw_array *a, diag_sink *d) {
  char shape[160];
  shape_str(a, shape, sizeof shape);
  int64_t numel = 1, nbytes;
  for (int k = 0; k < a->rank; k++)
    if (!size_mul_ok(numel, a->dims[k], &numel)) numel = -1;
  if (numel < 0 || !size_mul_ok(numel, a->size, &nbytes) || nbytes > RT_DATASET_MAX_BYTES) {
    diag_error(d, at(path), "%s array of shape %s and dtype %s is too large (castor reads at most "
               "%lld bytes of data per file)", a->format, shape, numpy_name(a->kind, a->size),
               (long long)RT_DATASET_MAX_BYTES);
    return false;
  }
  a->numel = numel;
  int64_t cap = nbytes < FIRST_CHUNK ? nbytes : FIRST_CHUNK, got = 0;
  unsigned char *buf = malloc(cap ? (size_t)cap : 1);
  for (;;) {
    if (!buf) {
      diag_error(d, at(path), "out of memory reading %lld bytes of data", (long long)nbytes);
      return false;
    }
    got += (int64_t)fread(buf + got, 1, (size_t)(cap - got), s->f);
    if (got < cap || cap == nbytes) break;
    cap = cap > nbytes / 2 ? nbytes : 2 * cap;
    unsigned char *nb = realloc(buf, (size_t)cap);
    if (!nb) free(buf);
    buf = nb;
  }
  if (got < nbytes) {
    if (!stream_failed(s, path, d))
      diag_error(d, at(path), "truncated %s file: shape %s of %s needs %lld bytes of data, the "
                 "file has %lld", a->format, shape, numpy_name(a->kind, a->size),
                 (long long)nbytes, (long long)got);
    free(buf);
    return false;
  }
  if (fgetc(s->f) != EOF)
    diag_warning(d, at(path), "bytes after the %s data (shape %s) are ignored", a->format, shape);
  else if (stream_failed(s, path, d)) {
    free(buf);
    return false;
  }
  a->data = buf;
  return true;
}

static bool read_raw(const char *path, raw_array *a, diag_sink *d) {
  *a = (raw_array){0};
  stream s;
  if (!stream_open(path, &s, d)) return false;
  a->gzip = s.gz != NULL;
  unsigned char m[6];
  size_t got = fread(m, 1, sizeof m, s.f);
  bool ok = false;
  if (got >= 6 && memcmp(m, "\x93NUMPY", 6) == 0) {
    a->format = "npy";
    npy_header h;
    if (fseek(s.f, 0, SEEK_SET) != 0)
      diag_error_kind(d, DIAG_KIND_IO, at(path), "cannot read: %s", strerror(errno));
    else if (npy_read_header(s.f, path, &h, d)) {
      if (!parse_descr(h.descr, a))
        diag_error(d, at(path), "unsupported .npy dtype '%s' (castor reads floats, integers and "
                                "booleans here)", h.descr);
      else if (h.fortran)
        diag_error(d, at(path), "Fortran-order .npy arrays are not supported; save a C-order "
                                "array (np.ascontiguousarray)");
      else {
        a->rank = h.rank;
        memcpy(a->dims, h.dims, sizeof a->dims);
        ok = read_data(&s, path, a, d);
      }
    }
  } else if (got >= 4 && m[0] == 0 && m[1] == 0) {
    a->format = "IDX";
    if (fseek(s.f, 4, SEEK_SET) != 0)
      diag_error_kind(d, DIAG_KIND_IO, at(path), "cannot read: %s", strerror(errno));
    else
      ok = read_idx_header(&s, m, path, a, d) && read_data(&s, path, a, d);
  } else if (!stream_failed(&s, path, d)) {
    str_buf b;
    str_buf_init(&b);
    for (size_t i = 0; i < got && i < 4; i++) str_buf_printf(&b, "%s%02x", i ? " " : "", m[i]);
    if (got == 0) diag_error(d, at(path), "the file is empty; castor reads .npy and IDX files");
    else
      diag_error(d, at(path), "not a .npy or IDX file (it starts with bytes %s); castor reads "
                 ".npy and IDX (MNIST) files, gzip-compressed or not", str_buf_cstr(&b));
    str_buf_fini(&b);
  }
  stream_close(&s);
  return ok;
}

/* Elements per sample: the product of the dimensions after the first (the
 * array's size is known to fit, but with n = 0 the rest might not). */
static bool per_sample(const raw_array *a, const char *path, const char *what, int64_t *out,
                       diag_sink *d) {
  *out = 1;
  for (int k = 1; k < a->rank; k++)
    if (!size_mul_ok(*out, a->dims[k], out)) {
      char shape[160];
      diag_error(d, at(path), "%s of shape %s are too large", what, shape_str(a, shape, sizeof shape));
      return false;
    }
  return true;
}

/* ---- features ---- */

static bool load_features(const char *path, const rt_dataset_options *o, rt_dataset *ds,
                          diag_sink *d) {
  raw_array a;
  if (!read_raw(path, &a, d)) return false;
  char shape[160];
  shape_str(&a, shape, sizeof shape);
  bool ok = false;
  snprintf(ds->x_dtype, sizeof ds->x_dtype, "%s", numpy_name(a.kind, a.size));
  snprintf(ds->x_format, sizeof ds->x_format, "%s", a.format);
  ds->x_gzip = a.gzip;
  ds->x_rank = a.rank;
  memcpy(ds->x_dims, a.dims, sizeof a.dims);
  if (a.rank == 0) {
    diag_error_kind(d, DIAG_KIND_INVALID_ARGUMENT, at(path),
                    "features must have a sample dimension, but the array is a scalar");
  } else if (a.kind != 'f' && !(a.kind == 'u' && a.size == 1)) {
    diag_error_kind(d, DIAG_KIND_INVALID_ARGUMENT, at(path),
                    "features of dtype %s are not supported (castor reads float32, float64, "
                    "float16 and uint8 features)", numpy_name(a.kind, a.size));
  } else if (per_sample(&a, path, "features", &ds->n_features, d)) {
    ds->n = a.dims[0];
    if (o->n_features > 0 && ds->n_features != o->n_features) {
      diag_error_kind(d, DIAG_KIND_INVALID_ARGUMENT, at(path),
                      "each sample has %lld features (shape %s), but the model's input takes %lld",
                      (long long)ds->n_features, shape, (long long)o->n_features);
    } else if (!(ds->x = malloc((size_t)(a.numel ? a.numel : 1) * sizeof(float)))) {
      diag_error(d, at(path), "out of memory for %lld features", (long long)a.numel);
    } else {
      ds->x_scaled = a.kind == 'u';
      int64_t bad = 0, first = -1;
      double first_v = 0;
      for (int64_t i = 0; i < a.numel; i++) {
        float v = ds->x_scaled ? (float)a.data[i] / 255.0f : (float)elem_f64(&a, i);
        /* float64 values beyond float32's range become Inf here: as bad as
         * an Inf in the file, so they are reported the same way */
        if (!isfinite(v)) {
          if (bad++ == 0) first = i, first_v = elem_f64(&a, i);
        }
        ds->x[i] = v;
      }
      if (bad) {
        int64_t nf = ds->n_features ? ds->n_features : 1;
        diag_error_kind(d, DIAG_KIND_INVALID_ARGUMENT, at(path),
                        "%lld feature value%s not finite; the first, %s, is feature %lld of "
                        "sample %lld", (long long)bad, bad == 1 ? " is" : "s are",
                        isnan(first_v) ? "NaN" : isinf(first_v) ? (first_v > 0 ? "inf" : "-inf")
                                                                 : "beyond float32's range",
                        (long long)(first % nf), (long long)(first / nf));
      } else {
        ok = true;
      }
    }
  }
  free(a.data);
  return ok;
}

/* ---- labels ---- */

static bool load_labels(const char *path, const rt_dataset_options *o, rt_dataset *ds,
                        diag_sink *d) {
  raw_array a;
  if (!read_raw(path, &a, d)) return false;
  char shape[160];
  shape_str(&a, shape, sizeof shape);
  snprintf(ds->y_dtype, sizeof ds->y_dtype, "%s", numpy_name(a.kind, a.size));
  snprintf(ds->y_format, sizeof ds->y_format, "%s", a.format);
  ds->y_gzip = a.gzip;
  rt_labels_kind kind = o->labels;
  if (kind == RT_LABELS_AUTO) kind = a.kind == 'f' ? RT_LABELS_DENSE : RT_LABELS_SPARSE;
  ds->labels = kind;
  int64_t n = a.rank ? a.dims[0] : 0, width = 1;
  bool ok = false;
#define BAD(...) diag_error_kind(d, DIAG_KIND_INVALID_ARGUMENT, at(path), __VA_ARGS__)
  if (!per_sample(&a, path, "labels", &width, d)) {
    /* reported */
  } else if (a.rank == 0) {
    BAD("labels must have a sample dimension, but the array is a scalar");
  } else if (kind == RT_LABELS_SPARSE) {
    if (a.rank > 2 || (a.rank == 2 && a.dims[1] != 1)) {
      BAD("sparse labels are class indices of shape (n,) or (n, 1), but the array has shape %s%s",
          shape, a.rank == 2 ? " (one-hot labels need categorical cross-entropy)" : "");
    } else if (!(ds->y = malloc((size_t)(n ? n : 1) * sizeof(int32_t)))) {
      diag_error(d, at(path), "out of memory for %lld labels", (long long)n);
    } else {
      int64_t hi = o->n_classes > 0 ? o->n_classes : (int64_t)INT32_MAX + 1;
      ok = true;
      for (int64_t i = 0; i < n && ok; i++) {
        if (a.kind == 'f') {
          double v = elem_f64(&a, i);
          if (v != floor(v) || !isfinite(v))
            ok = false, BAD("label %g at index %lld is not a whole number (sparse labels are "
                            "class indices)", v, (long long)i);
          else if (v < 0 || v >= (double)hi)
            ok = false, BAD("label %.0f at index %lld is outside [0, %lld)", v, (long long)i,
                            (long long)hi);
          else
            ds->y[i] = (int32_t)v;
          continue;
        }
        bool big;
        int64_t v = elem_i64(&a, i, &big);
        if (big)
          ok = false, BAD("label %llu at index %lld is outside [0, %lld)",
                          (unsigned long long)v, (long long)i, (long long)hi);
        else if (v < 0 || v >= hi)
          ok = false,
          BAD("label %lld at index %lld is outside [0, %lld)", (long long)v, (long long)i,
              (long long)hi);
        else
          ds->y[i] = (int32_t)v;
      }
      ds->y_width = 1;
    }
  } else {
    if (a.rank > 2) {
      BAD("dense labels have shape (n,) or (n, k), but the array has shape %s", shape);
    } else if (o->n_classes > 0 && width != o->n_classes) {
      BAD("labels have %lld value%s per sample (shape %s), but the model's output has %lld",
          (long long)width, width == 1 ? "" : "s", shape, (long long)o->n_classes);
    } else if (!(ds->y_dense = malloc((size_t)(a.numel ? a.numel : 1) * sizeof(float)))) {
      diag_error(d, at(path), "out of memory for %lld labels", (long long)a.numel);
    } else {
      int64_t bad = 0, first = -1;
      double first_v = 0;
      for (int64_t i = 0; i < a.numel; i++) {
        float v = (float)elem_f64(&a, i);
        if (!isfinite(v) && bad++ == 0) first = i, first_v = elem_f64(&a, i);
        ds->y_dense[i] = v;
      }
      ds->y_width = width;
      if (bad)
        BAD("%lld label value%s not finite; the first, %s, is value %lld of sample %lld",
            (long long)bad, bad == 1 ? " is" : "s are",
            isnan(first_v) ? "NaN" : isinf(first_v) ? (first_v > 0 ? "inf" : "-inf")
                                                     : "beyond float32's range",
            (long long)(first % width), (long long)(first / width));
      else
        ok = true;
    }
  }
#undef BAD
  if (ok && n != ds->n) {
    char xs[160];
    diag_error_kind(d, DIAG_KIND_INVALID_ARGUMENT, at(path),
                    "X and Y have different lengths: X has %lld samples (shape %s), Y has %lld "
                    "(shape %s)", (long long)ds->n,
                    npy_shape_str(ds->x_rank, ds->x_dims, xs, sizeof xs), (long long)n, shape);
    ok = false;
  }
  free(a.data);
  return ok;
}

/* ---- the dataset ---- */

void rt_dataset_options_init(rt_dataset_options *o) { *o = (rt_dataset_options){0}; }

bool rt_dataset_load(const char *x_path, const char *y_path, const rt_dataset_options *o,
                     rt_dataset *out, diag_sink *d) {
  rt_dataset_options defaults;
  if (!o) rt_dataset_options_init(&defaults), o = &defaults;
  *out = (rt_dataset){0};
  bool ok = load_features(x_path, o, out, d) && load_labels(y_path, o, out, d);
  if (ok && out->n == 0) {
    char xs[160];
    diag_error_kind(d, DIAG_KIND_INVALID_ARGUMENT, at(x_path),
                    "the dataset is empty: X has shape %s",
                    npy_shape_str(out->x_rank, out->x_dims, xs, sizeof xs));
    ok = false;
  }
  if (!ok) rt_dataset_fini(out);
  return ok;
}

void rt_dataset_fini(rt_dataset *ds) {
  if (!ds) return;
  free(ds->x);
  free(ds->y);
  free(ds->y_dense);
  *ds = (rt_dataset){0};
}

void rt_dataset_describe(const rt_dataset *ds, str_buf *out) {
  char xs[160];
  str_buf_printf(out, "%lld samples: X %s %s %s%s -> %lld float32 features%s; Y %s %s%s -> ",
                 (long long)ds->n, npy_shape_str(ds->x_rank, ds->x_dims, xs, sizeof xs),
                 ds->x_dtype, ds->x_format, ds->x_gzip ? " (gzip)" : "",
                 (long long)ds->n_features, ds->x_scaled ? ", scaled by 1/255" : "", ds->y_dtype,
                 ds->y_format, ds->y_gzip ? " (gzip)" : "");
  if (ds->labels == RT_LABELS_SPARSE) str_buf_puts(out, "class indices");
  else str_buf_printf(out, "%lld float32 target%s per sample", (long long)ds->y_width,
                      ds->y_width == 1 ? "" : "s");
}
