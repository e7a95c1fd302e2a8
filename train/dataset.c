/*
 * dataset.c: loading and checking training data (see dataset.h): .npy and
 * IDX files, gzip-compressed or not, into float32 features and int32 class
 * indices or float32 targets. Splitting, shuffling and batching live in
 * batch.c.
 *
 * A file is opened once and read front to back through `src` (no seek,
 * no size assumed: pipes work); its first two bytes say whether it is gzip
 * (1f 8b), then zlib inflates member after member. The .npy header goes
 * through npy.c's npy_read_header, the IDX header is parsed here. Either
 * way the header is checked against the model before the data is read;
 * the data then streams in 1 MiB chunks straight into the float32 / int32
 * arrays. IDX stores big-endian elements; .npy files may declare either
 * order.
 */
#include "train/dataset.h"

#include "formats/npy.h"
#include "util/half.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

enum { CHUNK = 1 << 14, FIRST_CHUNK = 1 << 20 };

/* Deflate expands at most 1032 times (RFC 1951's longest match, 258 bytes,
 * costs at least 2 bits): a gzip file of c bytes holds less than
 * 1032 * c bytes of data. */
enum { DEFLATE_MAX_RATIO = 1032 };

static diag_loc at(const char *path) { return (diag_loc){path, 0, 0}; }

/* ---- a file read once, front to back: plain or gzip ----
 *
 * Nothing here seeks or trusts a size: a FIFO or a pipe (`--x <(zcat
 * x.gz)`) reads like a file. A regular file's size is only used to refuse,
 * before allocating, a header that declares more data than the file can
 * hold. gzip members are inflated with zlib's gzip wrapper, which checks
 * each member's trailer (CRC32 and ISIZE); members follow one another as
 * `gzip -d` reads them (pigz, bgzip), and anything after the last one is an
 * error. Every failure is reported once, through the sink, and the source
 * stays failed. */

typedef struct src {
  const char *path;
  diag_sink *d;
  int fd;                          /* -1: reading mem */
  const unsigned char *mem;
  size_t mem_len, mem_pos;
  int64_t file_size;               /* a regular file's size; -1 otherwise */
  unsigned char in[CHUNK];         /* raw bytes read ahead */
  size_t in_pos, in_len;
  int64_t in_off;                  /* file offset of in[0] */
  bool raw_eof, failed;
  bool gzip, z_live, gz_done;
  z_stream z;
  int64_t member_at;               /* file offset of the current gzip member */
  int64_t out_off;                 /* bytes delivered (after inflating) */
} src;

static int64_t src_pos(const src *s) { return s->in_off + (int64_t)s->in_pos; }

/* More raw bytes into in[]: false at the end of the file or on an error
 * (s->failed tells). */
static bool src_fill(src *s) {
  if (s->raw_eof || s->failed) return false;
  if (s->in_pos > 0) {
    memmove(s->in, s->in + s->in_pos, s->in_len - s->in_pos);
    s->in_off += (int64_t)s->in_pos;
    s->in_len -= s->in_pos;
    s->in_pos = 0;
  }
  size_t room = sizeof s->in - s->in_len;
  if (room == 0) return true;
  ssize_t got;
  if (s->fd < 0) {
    got = (ssize_t)(s->mem_len - s->mem_pos < room ? s->mem_len - s->mem_pos : room);
    memcpy(s->in + s->in_len, s->mem + s->mem_pos, (size_t)got);
    s->mem_pos += (size_t)got;
  } else {
    do got = read(s->fd, s->in + s->in_len, room);
    while (got < 0 && errno == EINTR);
  }
  if (got < 0) {
    diag_error_kind(s->d, DIAG_KIND_IO, at(s->path), "cannot read: %s", strerror(errno));
    s->failed = true;
    return false;
  }
  if (got == 0) {
    s->raw_eof = true;
    return false;
  }
  s->in_len += (size_t)got;
  return true;
}

/* At least n (<= CHUNK) raw bytes buffered, unless the file ends first. */
static size_t src_want(src *s, size_t n) {
  while (s->in_len - s->in_pos < n && src_fill(s)) {}
  return s->in_len - s->in_pos;
}

static void gz_error(src *s, const char *fmt, ...) CASTOR_PRINTF(2, 3);
static void gz_error(src *s, const char *fmt, ...) {
  char msg[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  diag_error(s->d, at(s->path), "corrupt gzip data: %s", msg);
  s->failed = true;
}

/* After a member's end: the next member, or the end of the file. */
static bool gz_next_member(src *s) {
  size_t have = src_want(s, 2);
  if (s->failed) return false;
  if (have == 0) {
    s->gz_done = true;
    return true;
  }
  if (have < 2 || s->in[s->in_pos] != 0x1f || s->in[s->in_pos + 1] != 0x8b) {
    gz_error(s, "the bytes after the last gzip member (from byte %lld) are not a gzip member",
             (long long)src_pos(s));
    return false;
  }
  s->member_at = src_pos(s);
  inflateReset(&s->z);
  return true;
}

/* Up to n inflated bytes; fewer only at the end of the last member. */
static int64_t gz_read(src *s, unsigned char *out, int64_t n) {
  int64_t got = 0;
  while (got < n && !s->gz_done && !s->failed) {
    if (s->in_pos == s->in_len && !src_fill(s)) {
      if (!s->failed)
        gz_error(s, "the file ends at byte %lld, inside the gzip member that starts at byte %lld",
                 (long long)src_pos(s), (long long)s->member_at);
      break;
    }
    size_t room = (size_t)(n - got < (int64_t)UINT_MAX ? n - got : (int64_t)UINT_MAX);
    s->z.next_in = s->in + s->in_pos;
    s->z.avail_in = (uInt)(s->in_len - s->in_pos);
    s->z.next_out = out + got;
    s->z.avail_out = (uInt)room;
    int r = inflate(&s->z, Z_NO_FLUSH);
    got += (int64_t)(room - s->z.avail_out);
    s->in_pos = s->in_len - s->z.avail_in;
    if (r == Z_STREAM_END) {
      if (!gz_next_member(s)) break;
    } else if (r == Z_DATA_ERROR) {
      const char *m = s->z.msg ? s->z.msg : "invalid data";
      if (strcmp(m, "incorrect data check") == 0)
        gz_error(s, "the CRC32 of the gzip member that starts at byte %lld does not match its "
                    "data (trailer at byte %lld)", (long long)s->member_at,
                 (long long)src_pos(s) - 4);
      else if (strcmp(m, "incorrect length check") == 0)
        gz_error(s, "the length of the gzip member that starts at byte %lld does not match its "
                    "data (trailer at byte %lld)", (long long)s->member_at,
                 (long long)src_pos(s) - 8);
      else
        gz_error(s, "%s at byte %lld (in the gzip member that starts at byte %lld)", m,
                 (long long)src_pos(s), (long long)s->member_at);
    } else if (r == Z_MEM_ERROR) {
      diag_error(s->d, at(s->path), "out of memory inflating gzip data");
      s->failed = true;
    } else if (r != Z_OK && r != Z_BUF_ERROR) {
      gz_error(s, "zlib error %d at byte %lld", r, (long long)src_pos(s));
    }
  }
  return got;
}

/* Up to n bytes of the file's content (inflated when gzip); fewer at its
 * end or on an error (s->failed). */
static int64_t src_read(src *s, void *buf, int64_t n) {
  unsigned char *out = buf;
  int64_t got = 0;
  if (s->gzip) got = gz_read(s, out, n);
  else
    while (got < n && !s->failed) {
      if (s->in_pos == s->in_len && !src_fill(s)) break;
      size_t k = s->in_len - s->in_pos;
      if ((int64_t)k > n - got) k = (size_t)(n - got);
      memcpy(out + got, s->in + s->in_pos, k);
      s->in_pos += k, got += (int64_t)k;
    }
  s->out_off += got;
  return got;
}

static void src_close(src *s) {
  if (s->z_live) inflateEnd(&s->z);
  if (s->fd >= 0) close(s->fd);
  s->fd = -1;
  s->z_live = false;
}

/* Opens path (or, with path_is_name, reads mem under that name) and sniffs
 * gzip's magic bytes without consuming anything the reader needs. */
static bool src_start(src *s, diag_sink *d) {
  s->d = d;
  if (s->fd >= 0) {
    struct stat st;
    s->file_size = fstat(s->fd, &st) == 0 && S_ISREG(st.st_mode) ? (int64_t)st.st_size : -1;
  } else {
    s->file_size = (int64_t)s->mem_len;
  }
  size_t have = src_want(s, 2);
  if (s->failed) return false;
  if (have >= 2 && s->in[0] == 0x1f && s->in[1] == 0x8b) {
    s->gzip = true;
    if (inflateInit2(&s->z, 16 + MAX_WBITS) != Z_OK) {
      diag_error(d, at(s->path), "out of memory starting zlib");
      s->failed = true;
      return false;
    }
    s->z_live = true;
  }
  return true;
}

static bool src_open(const char *path, src *s, diag_sink *d) {
  memset(s, 0, sizeof *s);
  s->path = path;
  s->fd = open(path, O_RDONLY | O_CLOEXEC);
  if (s->fd < 0) {
    diag_error_kind(d, DIAG_KIND_IO, at(path), "cannot open: %s", strerror(errno));
    return false;
  }
  return src_start(s, d);
}

static bool src_open_mem(const char *name, const void *data, size_t len, src *s, diag_sink *d) {
  memset(s, 0, sizeof *s);
  s->path = name;
  s->fd = -1;
  s->mem = data;
  s->mem_len = len;
  return src_start(s, d);
}

/* Most bytes of content the rest of the file can hold, or -1 when that is
 * not known (a pipe). */
static int64_t src_content_bound(const src *s) {
  if (s->file_size < 0) return -1;
  int64_t rest = s->file_size - src_pos(s);
  if (rest < 0) rest = 0;
  if (!s->gzip) return rest;
  int64_t total;
  /* the content still inside the buffer plus what the compressed rest can give */
  if (!size_mul_ok(s->file_size - s->member_at + 1, DEFLATE_MAX_RATIO, &total)) return -1;
  return total;
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
static bool read_idx_header(src *s, const unsigned char *m, raw_array *a, diag_sink *d) {
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
    diag_error(d, at(s->path), "unsupported IDX element type 0x%02X (IDX defines 08, 09, 0B, 0C, "
                               "0D and 0E)", m[2]);
    return false;
  }
  if (m[3] < 1 || m[3] > RT_MAX_RANK) {
    diag_error(d, at(s->path), "IDX file with %d dimensions is not supported (1 to %d)", m[3],
               RT_MAX_RANK);
    return false;
  }
  a->big_endian = true;
  a->rank = m[3];
  unsigned char b[4 * RT_MAX_RANK];
  int64_t want = 4 * (int64_t)a->rank, got = src_read(s, b, want);
  if (s->failed) return false;
  if (got < want) {
    diag_error(d, at(s->path), "truncated IDX header: %d dimensions need %lld bytes, the file has "
               "%lld", a->rank, (long long)(4 + want), (long long)(4 + got));
    return false;
  }
  for (int k = 0; k < a->rank; k++)
    a->dims[k] = (int64_t)b[4 * k] << 24 | (int64_t)b[4 * k + 1] << 16 |
                 (int64_t)b[4 * k + 2] << 8 | b[4 * k + 3];
  return true;
}

/* The .npy preamble and header, read from the stream and handed to npy.c's
 * parser through a memory FILE (the first 6 bytes are already in m). */
enum { NPY_HEADER_CAP = 1 << 20 }; /* npy.c's limit on the header's length */

static bool read_npy_header(src *s, const unsigned char *m, raw_array *a, diag_sink *d) {
  unsigned char pre[12];
  memcpy(pre, m, 6);
  size_t n = 6 + (size_t)src_read(s, pre + 6, 2);
  uint32_t hlen = 0;
  if (!s->failed && n == 8 && pre[6] >= 1 && pre[6] <= 3 && pre[7] == 0) {
    size_t len_bytes = pre[6] == 1 ? 2 : 4;
    n += (size_t)src_read(s, pre + 8, (int64_t)len_bytes);
    if (n == 8 + len_bytes)
      for (size_t k = len_bytes; k-- > 0;) hlen = hlen << 8 | pre[8 + k];
  }
  if (s->failed) return false;
  size_t text = hlen <= NPY_HEADER_CAP ? hlen : 0;
  unsigned char *buf = malloc(n + text);
  if (!buf) {
    diag_error(d, at(s->path), "out of memory reading a .npy header");
    return false;
  }
  memcpy(buf, pre, n);
  n += (size_t)src_read(s, buf + n, (int64_t)text);
  if (s->failed) return free(buf), false;
  FILE *f = fmemopen(buf, n, "rb");
  if (!f) {
    diag_error(d, at(s->path), "cannot read the .npy header: %s", strerror(errno));
    free(buf);
    return false;
  }
  npy_header h;
  bool ok = npy_read_header(f, s->path, &h, d);
  fclose(f);
  free(buf);
  if (!ok) return false;
  if (!parse_descr(h.descr, a)) {
    diag_error(d, at(s->path), "unsupported .npy dtype '%s' (castor reads floats, integers and "
                               "booleans here)", h.descr);
    return false;
  }
  if (h.fortran) {
    diag_error(d, at(s->path), "Fortran-order .npy arrays are not supported; save a C-order "
                               "array (np.ascontiguousarray)");
    return false;
  }
  a->rank = h.rank;
  memcpy(a->dims, h.dims, sizeof a->dims);
  return true;
}

/* The header of either format; then the data's size, refused when it
 * overflows or exceeds RT_DATASET_MAX_BYTES. Nothing of the data is read. */
static bool read_header(src *s, raw_array *a, diag_sink *d) {
  *a = (raw_array){0};
  a->gzip = s->gzip;
  unsigned char m[6];
  int64_t got = src_read(s, m, 4);
  if (s->failed) return false;
  if (got == 4 && memcmp(m, "\x93NUM", 4) == 0) {
    got += src_read(s, m + 4, 2);
    if (s->failed) return false;
  }
  bool ok = false;
  if (got >= 6 && memcmp(m, "\x93NUMPY", 6) == 0) {
    a->format = "npy";
    ok = read_npy_header(s, m, a, d);
  } else if (got >= 4 && m[0] == 0 && m[1] == 0) {
    a->format = "IDX";
    ok = read_idx_header(s, m, a, d);
  } else if (got == 0) {
    diag_error(d, at(s->path), "the file is empty; castor reads .npy and IDX files");
  } else {
    str_buf b;
    str_buf_init(&b);
    for (int64_t i = 0; i < got && i < 4; i++) str_buf_printf(&b, "%s%02x", i ? " " : "", m[i]);
    diag_error(d, at(s->path), "not a .npy or IDX file (it starts with bytes %s); castor reads "
               ".npy and IDX (MNIST) files, gzip-compressed or not", str_buf_cstr(&b));
    str_buf_fini(&b);
  }
  if (!ok) return false;
  char shape[160];
  int64_t numel = 1, nbytes;
  for (int k = 0; k < a->rank; k++)
    if (!size_mul_ok(numel, a->dims[k], &numel)) numel = -1;
  if (numel < 0 || !size_mul_ok(numel, a->size, &nbytes) || nbytes > RT_DATASET_MAX_BYTES) {
    diag_error(d, at(s->path), "%s array of shape %s and dtype %s is too large (castor reads at "
               "most %lld bytes of data per file)", a->format, shape_str(a, shape, sizeof shape),
               numpy_name(a->kind, a->size), (long long)RT_DATASET_MAX_BYTES);
    return false;
  }
  a->numel = numel;
  return true;
}

/* Where it is knowable (a regular file), a header that declares more data
 * than the file can hold is refused before anything is allocated, with the
 * message a short read would give. */
static bool check_fits(src *s, const raw_array *a, diag_sink *d) {
  int64_t bound = src_content_bound(s), nbytes = a->numel * a->size;
  if (bound < 0 || nbytes <= bound) return true;
  char shape[160];
  shape_str(a, shape, sizeof shape);
  if (!s->gzip)
    diag_error(d, at(s->path), "truncated %s file: shape %s of %s needs %lld bytes of data, the "
               "file has %lld", a->format, shape, numpy_name(a->kind, a->size), (long long)nbytes,
               (long long)bound);
  else
    diag_error(d, at(s->path), "truncated %s file: shape %s of %s needs %lld bytes of data, more "
               "than the %lld bytes of this gzip file can hold (deflate expands at most %d times)",
               a->format, shape, numpy_name(a->kind, a->size), (long long)nbytes,
               (long long)s->file_size, DEFLATE_MAX_RATIO);
  return false;
}

/* A buffer of `total` elements that grows as they arrive, so a header that
 * lies about a pipe's length costs only what actually came. */
typedef struct growbuf {
  void *p;
  int64_t cap, total;
  size_t el;
  bool whole; /* the source is known to hold it all: allocate it at once */
} growbuf;

static bool growbuf_reserve(growbuf *g, int64_t n, const char *path, diag_sink *d) {
  if (n <= g->cap && g->p) return true;
  int64_t cap = g->cap ? g->cap : g->whole || FIRST_CHUNK > g->total ? g->total : FIRST_CHUNK;
  while (cap < n) cap = cap > g->total / 2 ? g->total : 2 * cap;
  void *p = realloc(g->p, (size_t)(cap ? cap : 1) * g->el);
  if (!p) {
    diag_error(d, at(path), "out of memory for %lld values", (long long)cap);
    return false;
  }
  g->p = p, g->cap = cap;
  return true;
}

/* Receives the data chunk by chunk: chunk->data holds chunk->numel
 * elements, the first of which is element `first` of the array. */
typedef bool (*chunk_fn)(void *ctx, const raw_array *chunk, int64_t first);

/* Streams exactly the declared elements through fn in chunks of at most
 * FIRST_CHUNK bytes (the only copy of the raw bytes), then reads the file to
 * its end: a gzip file's every trailer is checked there, and content after
 * the data is a warning. */
static bool read_data(src *s, const raw_array *a, chunk_fn fn, void *ctx, diag_sink *d) {
  int64_t nbytes = a->numel * a->size;
  /* the chunk: 1 MiB, or less for less data (at least 4 KiB for the end) */
  int64_t chunk = nbytes < FIRST_CHUNK ? (nbytes > 4096 ? nbytes : 4096) : FIRST_CHUNK;
  chunk -= chunk % a->size;
  int64_t per = chunk / a->size;
  unsigned char *buf = malloc((size_t)chunk);
  if (!buf) {
    diag_error(d, at(s->path), "out of memory reading data");
    return false;
  }
  char shape[160];
  shape_str(a, shape, sizeof shape);
  bool ok = true;
  for (int64_t first = 0; first < a->numel && ok;) {
    int64_t want = a->numel - first < per ? a->numel - first : per;
    int64_t got = src_read(s, buf, want * a->size);
    if (got < want * a->size) {
      if (!s->failed)
        diag_error(d, at(s->path), "truncated %s file: shape %s of %s needs %lld bytes of data, "
                   "the file has %lld", a->format, shape, numpy_name(a->kind, a->size),
                   (long long)nbytes, (long long)(first * a->size + got));
      ok = false;
      break;
    }
    raw_array part = *a;
    part.data = buf;
    part.numel = want;
    ok = fn(ctx, &part, first);
    first += want;
  }
  if (ok) {
    int64_t extra = 0, k;
    if (s->gzip)
      while ((k = src_read(s, buf, chunk)) > 0) extra += k;
    else
      extra = src_read(s, buf, 1);
    if (s->failed) ok = false;
    else if (extra)
      diag_warning(d, at(s->path), "bytes after the %s data (shape %s) are ignored", a->format,
                   shape);
  }
  free(buf);
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

/* The sample count of a file: at least one sample, at most
 * RT_DATASET_MAX_SAMPLES, and every sample holding at least one value. */
static bool check_samples(const raw_array *a, int64_t per, const char *path, const char *what,
                          diag_sink *d) {
  char shape[160];
  shape_str(a, shape, sizeof shape);
  if (a->dims[0] == 0) {
    diag_error_kind(d, DIAG_KIND_INVALID_ARGUMENT, at(path), "the dataset is empty: %s has shape %s",
                    what, shape);
    return false;
  }
  if (per == 0) {
    diag_error_kind(d, DIAG_KIND_INVALID_ARGUMENT, at(path),
                    "each sample of %s holds no values (shape %s); a sample needs at least one",
                    what, shape);
    return false;
  }
  if (a->dims[0] > RT_DATASET_MAX_SAMPLES) {
    diag_error_kind(d, DIAG_KIND_INVALID_ARGUMENT, at(path),
                    "%s declares %lld samples (shape %s); castor takes at most %lld (2^32 - 1)",
                    what, (long long)a->dims[0], shape, (long long)RT_DATASET_MAX_SAMPLES);
    return false;
  }
  return true;
}

/* ---- features ---- */

/* The file's sample shape against the model's input (dataset.h has the
 * rule); sets ds's sample shape. */
static bool match_input(const raw_array *a, const rt_dataset_options *o, const char *path,
                        rt_dataset *ds, diag_sink *d) {
  char shape[160], want[160], file[160];
  shape_str(a, shape, sizeof shape);
  npy_shape_str(a->rank - 1, a->dims + 1, file, sizeof file);
  ds->x_sample_rank = a->rank - 1;
  memcpy(ds->x_sample_dims, a->dims + 1, (size_t)(a->rank - 1) * sizeof(int64_t));
  if (o->sample_rank >= 2) {
    int r = o->sample_rank;
    bool same = a->rank - 1 == r, unit = a->rank - 1 == r - 1 && o->sample_dims[r - 1] == 1;
    for (int k = 0; k < a->rank - 1 && (same || unit); k++)
      if (k >= r || a->dims[k + 1] != o->sample_dims[k]) same = unit = false;
    npy_shape_str(r, o->sample_dims, want, sizeof want);
    if (!same && !unit) {
      int64_t model = 1;
      for (int k = 0; k < r; k++) model *= o->sample_dims[k];
      str_buf b;
      str_buf_init(&b);
      if (model == ds->n_features) {
        int64_t dims[RT_MAX_RANK + 1] = {a->dims[0]};
        memcpy(dims + 1, o->sample_dims, (size_t)r * sizeof(int64_t));
        char to[160], call[160];
        npy_shape_str(r + 1, dims, to, sizeof to);
        dims[0] = -1;
        npy_shape_str(r + 1, dims, call, sizeof call);
        call[strlen(call) - 1] = 0; /* "(-1, 28, 28, 1" */
        str_buf_printf(&b, "; reshape X to %s (x.reshape%s))", to, call);
      }
      diag_error_kind(d, DIAG_KIND_INVALID_ARGUMENT, at(path),
                      "each sample has shape %s (X has shape %s), but the model's input has shape "
                      "%s%s", file, shape, want, str_buf_cstr(&b));
      str_buf_fini(&b);
      return false;
    }
    ds->x_sample_rank = r;
    memcpy(ds->x_sample_dims, o->sample_dims, (size_t)r * sizeof(int64_t));
    return true;
  }
  if (o->n_features > 0 && ds->n_features != o->n_features) {
    diag_error_kind(d, DIAG_KIND_INVALID_ARGUMENT, at(path),
                    "each sample has %lld features (shape %s), but the model's input takes %lld",
                    (long long)ds->n_features, shape, (long long)o->n_features);
    return false;
  }
  return true;
}

typedef struct feature_ctx {
  growbuf x;
  bool scaled;
  int64_t bad, first;
  double first_v;
  const char *path;
  diag_sink *d;
} feature_ctx;

static bool feature_chunk(void *ctx, const raw_array *c, int64_t first) {
  feature_ctx *f = ctx;
  if (!growbuf_reserve(&f->x, first + c->numel, f->path, f->d)) return false;
  float *x = (float *)f->x.p + first;
  for (int64_t i = 0; i < c->numel; i++) {
    float v = f->scaled ? (float)c->data[i] / 255.0f : (float)elem_f64(c, i);
    /* float64 values beyond float32's range become Inf here: as bad as
     * an Inf in the file, so they are reported the same way */
    if (!isfinite(v) && f->bad++ == 0) f->first = first + i, f->first_v = elem_f64(c, i);
    x[i] = v;
  }
  return true;
}

static bool load_features(src *s, const rt_dataset_options *o, rt_dataset *ds, diag_sink *d) {
  const char *path = s->path;
  raw_array a;
  if (!read_header(s, &a, d)) return false;
  snprintf(ds->x_dtype, sizeof ds->x_dtype, "%s", numpy_name(a.kind, a.size));
  snprintf(ds->x_format, sizeof ds->x_format, "%s", a.format);
  ds->x_gzip = a.gzip;
  ds->x_rank = a.rank;
  memcpy(ds->x_dims, a.dims, sizeof a.dims);
  if (a.rank == 0) {
    diag_error_kind(d, DIAG_KIND_INVALID_ARGUMENT, at(path),
                    "features must have a sample dimension, but the array is a scalar");
    return false;
  }
  if (a.kind != 'f' && !(a.kind == 'u' && a.size == 1)) {
    diag_error_kind(d, DIAG_KIND_INVALID_ARGUMENT, at(path),
                    "features of dtype %s are not supported (castor reads float32, float64, "
                    "float16 and uint8 features)", numpy_name(a.kind, a.size));
    return false;
  }
  if (!per_sample(&a, path, "features", &ds->n_features, d) ||
      !check_samples(&a, ds->n_features, path, "X", d) || !match_input(&a, o, path, ds, d) ||
      !check_fits(s, &a, d))
    return false;
  ds->n = a.dims[0];
  /* a plain regular file holds what it declares (check_fits): one allocation */
  feature_ctx f = {{NULL, 0, a.numel, sizeof(float), !s->gzip && s->file_size >= 0}, a.kind == 'u',
                   0, -1, 0, path, d};
  bool ok = read_data(s, &a, feature_chunk, &f, d);
  ds->x = f.x.p;
  ds->x_scaled = f.scaled;
  if (ok && f.bad) {
    diag_error_kind(d, DIAG_KIND_INVALID_ARGUMENT, at(path),
                    "%lld feature value%s not finite; the first, %s, is feature %lld of "
                    "sample %lld", (long long)f.bad, f.bad == 1 ? " is" : "s are",
                    isnan(f.first_v) ? "NaN" : isinf(f.first_v) ? (f.first_v > 0 ? "inf" : "-inf")
                                                                 : "beyond float32's range",
                    (long long)(f.first % ds->n_features), (long long)(f.first / ds->n_features));
    ok = false;
  }
  return ok;
}

/* ---- labels ---- */

typedef struct label_ctx {
  growbuf y;
  bool sparse;
  int64_t hi, width; /* SPARSE: labels lie in [0, hi); DENSE: values per sample */
  int64_t bad, first;
  double first_v;
  const char *path;
  diag_sink *d;
} label_ctx;

#define BAD(...) diag_error_kind(l->d, DIAG_KIND_INVALID_ARGUMENT, at(l->path), __VA_ARGS__)

static bool label_chunk(void *ctx, const raw_array *c, int64_t first) {
  label_ctx *l = ctx;
  if (!growbuf_reserve(&l->y, first + c->numel, l->path, l->d)) return false;
  if (!l->sparse) {
    float *y = (float *)l->y.p + first;
    for (int64_t i = 0; i < c->numel; i++) {
      float v = (float)elem_f64(c, i);
      if (!isfinite(v) && l->bad++ == 0) l->first = first + i, l->first_v = elem_f64(c, i);
      y[i] = v;
    }
    return true;
  }
  int32_t *y = (int32_t *)l->y.p + first;
  for (int64_t i = 0; i < c->numel; i++) {
    long long at_i = (long long)(first + i);
    if (c->kind == 'f') {
      double v = elem_f64(c, i);
      if (v != floor(v) || !isfinite(v))
        return BAD("label %g at index %lld is not a whole number (sparse labels are class "
                   "indices)", v, at_i), false;
      if (v < 0 || v >= (double)l->hi)
        return BAD("label %.0f at index %lld is outside [0, %lld)", v, at_i, (long long)l->hi),
               false;
      y[i] = (int32_t)v;
      continue;
    }
    bool big;
    int64_t v = elem_i64(c, i, &big);
    if (big)
      return BAD("label %llu at index %lld is outside [0, %lld)", (unsigned long long)v, at_i,
                 (long long)l->hi), false;
    if (v < 0 || v >= l->hi)
      return BAD("label %lld at index %lld is outside [0, %lld)", (long long)v, at_i,
                 (long long)l->hi), false;
    y[i] = (int32_t)v;
  }
  return true;
}

static bool load_labels(src *s, const rt_dataset_options *o, rt_dataset *ds, diag_sink *d) {
  const char *path = s->path;
  raw_array a;
  if (!read_header(s, &a, d)) return false;
  char shape[160];
  shape_str(&a, shape, sizeof shape);
  snprintf(ds->y_dtype, sizeof ds->y_dtype, "%s", numpy_name(a.kind, a.size));
  snprintf(ds->y_format, sizeof ds->y_format, "%s", a.format);
  ds->y_gzip = a.gzip;
  rt_labels_kind kind = o->labels;
  if (kind == RT_LABELS_AUTO) kind = a.kind == 'f' ? RT_LABELS_DENSE : RT_LABELS_SPARSE;
  ds->labels = kind;
  int64_t n = a.rank ? a.dims[0] : 0, width = 1;
  label_ctx lc = {{NULL, 0, a.numel, kind == RT_LABELS_SPARSE ? sizeof(int32_t) : sizeof(float),
                   !s->gzip && s->file_size >= 0},
                  kind == RT_LABELS_SPARSE, 0, 1, 0, -1, 0, path, d};
  label_ctx *l = &lc;
  if (!per_sample(&a, path, "labels", &width, d)) return false;
  if (a.rank == 0) return BAD("labels must have a sample dimension, but the array is a scalar"), false;
  if (kind == RT_LABELS_SPARSE) {
    if (a.rank > 2 || (a.rank == 2 && a.dims[1] != 1))
      return BAD("sparse labels are class indices of shape (n,) or (n, 1), but the array has "
                 "shape %s%s", shape,
                 a.rank == 2 ? " (one-hot labels need categorical cross-entropy)" : ""), false;
    lc.hi = o->n_classes > 0 ? o->n_classes : (int64_t)INT32_MAX + 1;
  } else {
    if (a.rank > 2)
      return BAD("dense labels have shape (n,) or (n, k), but the array has shape %s", shape),
             false;
    if (o->n_classes > 0 && width != o->n_classes && o->loss && strstr(o->loss, "categorical_crossentropy"))
      return BAD("loss %s expects one-hot labels (%lld values per sample, the model's output); the "
                 "labels have %lld (shape %s): %s", o->loss, (long long)o->n_classes, (long long)width,
                 shape, width == 1 ? "use --loss sparse_categorical_crossentropy for class indices, or "
                                     "one-hot labels" : "give one-hot labels of the model's width"), false;
    if (o->n_classes > 0 && width != o->n_classes)
      return BAD("labels have %lld value%s per sample (shape %s), but the model's output has %lld%s%s%s",
                 (long long)width, width == 1 ? "" : "s", shape, (long long)o->n_classes,
                 o->loss ? " (loss " : "", o->loss ? o->loss : "", o->loss ? ")" : ""), false;
    if (width == 0)
      return BAD("each sample of Y holds no values (shape %s); a sample needs at least one",
                 shape), false;
    lc.width = width;
  }
  if (n != ds->n) {
    char xs[160];
    return BAD("X and Y have different lengths: X has %lld samples (shape %s), Y has %lld "
               "(shape %s)", (long long)ds->n,
               npy_shape_str(ds->x_rank, ds->x_dims, xs, sizeof xs), (long long)n, shape), false;
  }
  if (!check_fits(s, &a, d)) return false;
  bool ok = read_data(s, &a, label_chunk, &lc, d);
  if (kind == RT_LABELS_SPARSE) ds->y = lc.y.p, ds->y_width = 1;
  else ds->y_dense = lc.y.p, ds->y_width = width;
  if (ok && lc.bad) {
    BAD("%lld label value%s not finite; the first, %s, is value %lld of sample %lld",
        (long long)lc.bad, lc.bad == 1 ? " is" : "s are",
        isnan(lc.first_v) ? "NaN" : isinf(lc.first_v) ? (lc.first_v > 0 ? "inf" : "-inf")
                                                       : "beyond float32's range",
        (long long)(lc.first % width), (long long)(lc.first / width));
    ok = false;
  }
  return ok;
}
#undef BAD

/* ---- the dataset ---- */

void rt_dataset_options_init(rt_dataset_options *o) { *o = (rt_dataset_options){0}; }

static bool load_pair(src *xs, src *ys, bool y_open, const rt_dataset_options *o,
                      rt_dataset *out, diag_sink *d) {
  rt_dataset_options defaults;
  if (!o) rt_dataset_options_init(&defaults), o = &defaults;
  bool ok = load_features(xs, o, out, d) && y_open && load_labels(ys, o, out, d);
  if (!ok) rt_dataset_fini(out);
  return ok;
}

bool rt_dataset_load(const char *x_path, const char *y_path, const rt_dataset_options *o,
                     rt_dataset *out, diag_sink *d) {
  *out = (rt_dataset){0};
  /* the sources hold 16 KiB buffers each: on the heap */
  src *s = xmalloc(2 * sizeof *s);
  bool ok = false;
  if (src_open(x_path, &s[0], d)) {
    rt_dataset_options defaults;
    if (!o) rt_dataset_options_init(&defaults), o = &defaults;
    ok = load_features(&s[0], o, out, d);
    src_close(&s[0]);
    if (ok) {
      ok = src_open(y_path, &s[1], d) && load_labels(&s[1], o, out, d);
      src_close(&s[1]);
    }
  } else {
    src_close(&s[0]);
  }
  free(s);
  if (!ok) rt_dataset_fini(out);
  return ok;
}

bool rt_dataset_load_mem(const void *x, size_t x_len, const char *x_name, const void *y,
                         size_t y_len, const char *y_name, const rt_dataset_options *o,
                         rt_dataset *out, diag_sink *d) {
  *out = (rt_dataset){0};
  src *s = xmalloc(2 * sizeof *s);
  bool xo = src_open_mem(x_name, x, x_len, &s[0], d);
  bool yo = xo && src_open_mem(y_name, y, y_len, &s[1], d);
  bool ok = xo && load_pair(&s[0], &s[1], yo, o, out, d);
  src_close(&s[0]);
  if (xo) src_close(&s[1]);
  free(s);
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
