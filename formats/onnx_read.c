/*
 * onnx_read.c: ONNX ModelProto and TensorProto files into the structures of
 * onnx.h. protobuf-c decodes the wire format (with an allocator capped at
 * ONNX_MAX_DECODE_BYTES); this file checks what the schema leaves open and
 * copies what castor uses into an arena, then frees protobuf-c's message.
 */
#include "formats/onnx.h"

#include "formats/onnx.pb-c.h"
#include "util/sys.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- names ---- */

static const char *const dtype_names[] = {
    [ONNX_UNDEFINED] = "undefined", [ONNX_FLOAT] = "float",     [ONNX_UINT8] = "uint8",
    [ONNX_INT8] = "int8",           [ONNX_UINT16] = "uint16",   [ONNX_INT16] = "int16",
    [ONNX_INT32] = "int32",         [ONNX_INT64] = "int64",     [ONNX_STRING] = "string",
    [ONNX_BOOL] = "bool",           [ONNX_FLOAT16] = "float16", [ONNX_DOUBLE] = "double",
    [ONNX_UINT32] = "uint32",       [ONNX_UINT64] = "uint64",   [ONNX_COMPLEX64] = "complex64",
    [ONNX_COMPLEX128] = "complex128", [ONNX_BFLOAT16] = "bfloat16",
};

const char *onnx_dtype_name(int dtype) {
  static _Thread_local char buf[32];
  if (dtype >= 0 && dtype < (int)(sizeof dtype_names / sizeof *dtype_names) && dtype_names[dtype])
    return dtype_names[dtype];
  snprintf(buf, sizeof buf, "dtype %d", dtype);
  return buf;
}

size_t onnx_dtype_size(int dtype) {
  switch (dtype) {
  case ONNX_BOOL:
  case ONNX_UINT8:
  case ONNX_INT8: return 1;
  case ONNX_UINT16:
  case ONNX_INT16:
  case ONNX_FLOAT16:
  case ONNX_BFLOAT16: return 2;
  case ONNX_FLOAT:
  case ONNX_INT32:
  case ONNX_UINT32: return 4;
  case ONNX_INT64:
  case ONNX_UINT64:
  case ONNX_DOUBLE:
  case ONNX_COMPLEX64: return 8;
  case ONNX_COMPLEX128: return 16;
  default: return 0;
  }
}

const char *onnx_attr_type_name(int type) {
  switch (type) {
  case ONNX_ATTR_FLOAT: return "float";
  case ONNX_ATTR_INT: return "int";
  case ONNX_ATTR_STRING: return "string";
  case ONNX_ATTR_TENSOR: return "tensor";
  case ONNX_ATTR_GRAPH: return "graph";
  case ONNX_ATTR_FLOATS: return "floats";
  case ONNX_ATTR_INTS: return "ints";
  case ONNX_ATTR_STRINGS: return "strings";
  case ONNX_ATTR_TENSORS: return "tensors";
  case ONNX_ATTR_GRAPHS: return "graphs";
  case ONNX_ATTR_SPARSE_TENSOR: return "sparse tensor";
  case ONNX_ATTR_SPARSE_TENSORS: return "sparse tensors";
  case ONNX_ATTR_TYPE_PROTO: return "type proto";
  case ONNX_ATTR_TYPE_PROTOS: return "type protos";
  default: return "undefined";
  }
}

/* ---- protobuf-c with a capped allocator ---- */

typedef struct capped {
  ProtobufCAllocator base;
  int64_t used, cap;
  bool over;
} capped;

static void *capped_alloc(void *data, size_t size) {
  capped *c = data;
  if ((int64_t)size > c->cap - c->used) {
    c->over = true;
    return NULL;
  }
  c->used += (int64_t)size;
  return malloc(size ? size : 1);
}

static void capped_free(void *data, void *p) {
  (void)data;
  free(p);
}

static void capped_init(capped *c, int64_t cap) {
  *c = (capped){.base = {.alloc = capped_alloc, .free = capped_free}, .cap = cap};
  c->base.allocator_data = c;
}

/* Where the top-level fields of a protobuf message stop making sense: the
 * offset of the first field that runs past the end, or has a wire type
 * protobuf does not define; -1 if the top level is well formed. Gives a
 * malformed file's error a location (protobuf-c reports none). */
static int64_t wire_first_bad(const unsigned char *p, size_t len, const char **why) {
  size_t i = 0;
  while (i < len) {
    size_t start = i;
    uint64_t key = 0;
    int shift = 0;
    for (;;) {
      if (i >= len) return *why = "a field key runs past the end", (int64_t)start;
      if (shift > 63) return *why = "a field key is longer than 10 bytes", (int64_t)start;
      key |= (uint64_t)(p[i] & 0x7f) << shift;
      shift += 7;
      if (!(p[i++] & 0x80)) break;
    }
    if (key >> 3 == 0) return *why = "field number 0", (int64_t)start;
    switch (key & 7) {
    case 0: /* varint */
      for (int k = 0;; k++) {
        if (i >= len) return *why = "a varint runs past the end", (int64_t)start;
        if (k >= 10) return *why = "a varint is longer than 10 bytes", (int64_t)start;
        if (!(p[i++] & 0x80)) break;
      }
      break;
    case 1: /* 64-bit */
      if (len - i < 8) return *why = "a 64-bit field runs past the end", (int64_t)start;
      i += 8;
      break;
    case 5: /* 32-bit */
      if (len - i < 4) return *why = "a 32-bit field runs past the end", (int64_t)start;
      i += 4;
      break;
    case 2: { /* length-delimited */
      uint64_t n = 0;
      shift = 0;
      for (;;) {
        if (i >= len) return *why = "a length runs past the end", (int64_t)start;
        if (shift > 63) return *why = "a length is longer than 10 bytes", (int64_t)start;
        n |= (uint64_t)(p[i] & 0x7f) << shift;
        shift += 7;
        if (!(p[i++] & 0x80)) break;
      }
      if (n > len - i) return *why = "a length-delimited field runs past the end", (int64_t)start;
      i += (size_t)n;
      break;
    }
    default: return *why = "a wire type protobuf does not define", (int64_t)start;
    }
  }
  return -1;
}

/* Reads the varint at p[*i..end); false if it runs past end or over 10 bytes. */
static bool wire_varint(const unsigned char *p, size_t *i, size_t end, uint64_t *out) {
  uint64_t v = 0;
  for (int shift = 0; shift < 70; shift += 7) {
    if (*i >= end) return false;
    unsigned char b = p[(*i)++];
    v |= (uint64_t)(b & 0x7f) << shift;
    if (!(b & 0x80)) return *out = v, true;
  }
  return false;
}

/* What wire_scan found past a limit: the offset of the first message
 * nested deeper than ONNX_MAX_NESTING levels (the outermost message is
 * level 1) and its type, or of the first NodeProto past ONNX_MAX_NODES;
 * -1 where none. */
typedef struct wire_limits {
  int64_t too_deep_at, too_many_at;
  const char *too_deep_type;
} wire_limits;

/* Bounds a protobuf message before protobuf-c's decoder runs (it recurses
 * once per nested message and allocates every node): an iterative walk of
 * the wire format with an explicit stack, typed by protobuf-c's own
 * descriptors so that only fields the schema declares as messages are
 * entered (bytes and strings are skipped whole), counting NodeProtos in
 * every graph. Stops at the first limit passed. A malformed encoding ends
 * the walk quietly: protobuf-c's decoder then reports it (malformed). */
static void wire_scan(const unsigned char *p, size_t len, const ProtobufCMessageDescriptor *top,
                      wire_limits *out) {
  struct {
    const ProtobufCMessageDescriptor *desc;
    size_t end;
  } stack[ONNX_MAX_NESTING];
  *out = (wire_limits){.too_deep_at = -1, .too_many_at = -1};
  int depth = 1;
  int64_t nodes = 0;
  stack[0].desc = top, stack[0].end = len;
  size_t i = 0;
  while (depth > 0) {
    size_t end = stack[depth - 1].end;
    if (i >= end) {
      if (i > end) return;
      depth--;
      continue;
    }
    size_t start = i;
    uint64_t key, n;
    if (!wire_varint(p, &i, end, &key)) return;
    switch (key & 7) {
    case 0:
      if (!wire_varint(p, &i, end, &n)) return;
      break;
    case 1:
      if (end - i < 8) return;
      i += 8;
      break;
    case 5:
      if (end - i < 4) return;
      i += 4;
      break;
    case 2: {
      if (!wire_varint(p, &i, end, &n) || n > end - i) return;
      const ProtobufCFieldDescriptor *f =
          key >> 3 > UINT32_MAX ? NULL
                                : protobuf_c_message_descriptor_get_field(stack[depth - 1].desc,
                                                                          (unsigned)(key >> 3));
      if (f && f->type == PROTOBUF_C_TYPE_MESSAGE) {
        const ProtobufCMessageDescriptor *sub = f->descriptor;
        if (depth == ONNX_MAX_NESTING) {
          out->too_deep_at = (int64_t)start, out->too_deep_type = sub->short_name;
          return;
        }
        if (sub == &onnx__node_proto__descriptor && ++nodes > ONNX_MAX_NODES) {
          out->too_many_at = (int64_t)start;
          return;
        }
        stack[depth].desc = sub;
        stack[depth].end = i + (size_t)n;
        depth++;
      } else {
        i += (size_t)n;
      }
      break;
    }
    default: return;
    }
  }
}

/* Refuses bytes whose messages nest deeper than ONNX_MAX_NESTING, or that
 * hold more than ONNX_MAX_NODES nodes, before they reach protobuf-c; false
 * with the error in d. */
static bool limits_ok(diag_sink *d, const char *name, const char *what, const void *bytes,
                      size_t len, const ProtobufCMessageDescriptor *top) {
  wire_limits w;
  wire_scan(bytes, len, top, &w);
  if (w.too_deep_at >= 0) {
    diag_error(d, (diag_loc){name, 0, 0},
               "'%s': this %s nests protobuf messages more than %d deep (a %s at byte %lld is "
               "level %d; subgraphs of If, Loop and Scan nest 3 levels each); castor refuses it",
               name, what, ONNX_MAX_NESTING, w.too_deep_type, (long long)w.too_deep_at,
               ONNX_MAX_NESTING + 1);
    return false;
  }
  if (w.too_many_at >= 0) {
    diag_error(d, (diag_loc){name, 0, 0},
               "'%s': this %s has more than %d nodes (node %d starts at byte %lld); castor "
               "imports at most %d (ONNX_MAX_NODES)", name, what, ONNX_MAX_NODES,
               ONNX_MAX_NODES + 1, (long long)w.too_many_at, ONNX_MAX_NODES);
    return false;
  }
  return true;
}

static void malformed(diag_sink *d, const char *name, const char *what, const void *bytes,
                      size_t len, const capped *c) {
  if (c->over) {
    diag_error(d, (diag_loc){name, 0, 0},
               "'%s': decoding this %s needs more than %lld MiB of memory; castor refuses it",
               name, what, (long long)(c->cap >> 20));
    return;
  }
  const char *why = NULL;
  int64_t at = wire_first_bad(bytes, len, &why);
  if (at >= 0)
    diag_error(d, (diag_loc){name, 0, 0},
               "'%s' is not a valid %s: malformed protobuf at byte %lld: %s (%zu bytes in all)",
               name, what, (long long)at, why, len);
  else
    diag_error(d, (diag_loc){name, 0, 0},
               "'%s' is not a valid %s: its protobuf data is malformed (a field of the wrong "
               "type, or a nested message that is truncated; %zu bytes)",
               name, what, len);
}

/* ---- conversion ---- */

typedef struct reader {
  const char *file; /* the model file, for messages */
  const char *dir;  /* external data's directory, or NULL */
  int dirfd;        /* dir opened (O_PATH) at the first external tensor; -1 before */
  arena *a;
  diag_sink *d;
  bool ok;
} reader;

static void fail(reader *r, const char *fmt, ...) CASTOR_PRINTF(2, 3);
static void fail(reader *r, const char *fmt, ...) {
  if (!r->ok) return; /* one error per file: the first */
  r->ok = false;
  str_buf b;
  str_buf_init(&b);
  va_list ap;
  va_start(ap, fmt);
  str_buf_vprintf(&b, fmt, ap);
  va_end(ap);
  diag_error(r->d, (diag_loc){r->file, 0, 0}, "'%s': %s", r->file, str_buf_cstr(&b));
  str_buf_fini(&b);
}

static const char *dup_str(reader *r, const char *s) { return arena_strdup(r->a, s ? s : ""); }

/* Reads `nbytes` at `offset` of the external file `loc`, beneath the
 * model's directory, into the arena (*out). */
static bool read_external(reader *r, const char *tname, const char *loc, int64_t offset,
                          size_t nbytes, void **out) {
  if (!r->dir) {
    fail(r, "tensor '%s' keeps its data in the external file '%s', and this model was not "
            "read from a regular file (a pipe, or memory): it has no folder to find it in",
         tname, loc);
    return false;
  }
  if (r->dirfd < 0 && (r->dirfd = open(r->dir, O_PATH | O_DIRECTORY | O_CLOEXEC)) < 0) {
    fail(r, "tensor '%s': cannot open the model's directory '%s': %s", tname, r->dir,
         strerror(errno));
    return false;
  }
  int fd = file_open_beneath(r->dirfd, loc, true);
  if (fd < 0 && errno == EXDEV) {
    fail(r, "tensor '%s': external data location '%s' must be a relative path inside the "
            "model's directory (no '..' component, not absolute)", tname, loc);
    return false;
  }
  char *path = arena_printf(r->a, "%s/%s", r->dir, loc);
  struct stat st;
  if (fd < 0 && errno == ELOOP) {
    fail(r, "tensor '%s': external data '%s' is a symbolic link or lies behind one; castor "
            "opens files beneath the model's directory without following links", tname, path);
    return false;
  }
  if (fd < 0 || fstat(fd, &st) != 0) {
    fail(r, "tensor '%s': cannot open its external data '%s': %s", tname, path, strerror(errno));
    if (fd >= 0) close(fd);
    return false;
  }
  if (!S_ISREG(st.st_mode)) {
    fail(r, "tensor '%s': external data '%s' is %s, not a regular file", tname, path,
         str_file_kind(st.st_mode));
    close(fd);
    return false;
  }
  if (offset < 0 || offset > st.st_size || (int64_t)nbytes > st.st_size - offset) {
    fail(r, "tensor '%s': external data '%s' holds %lld bytes; the tensor needs %zu bytes at "
            "offset %lld", tname, path, (long long)st.st_size, nbytes, (long long)offset);
    close(fd);
    return false;
  }
  /* the file holds them (checked above), but a sparse file may claim a
   * terabyte in a few blocks: the memory limit decides before allocating */
  char *dst = mem_fits((int64_t)nbytes) ? arena_try_alloc_aligned(r->a, nbytes, 64) : NULL;
  if (!dst) {
    fail(r, "tensor '%s': its external data '%s' is %s; %s", tname, path,
         str_bytes((int64_t)nbytes), mem_limit_text());
    close(fd);
    return false;
  }
  *out = dst;
  size_t got = 0;
  while (got < nbytes) {
    ssize_t k = pread(fd, dst + got, nbytes - got, offset + (off_t)got);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) {
      fail(r, "tensor '%s': reading external data '%s' failed: %s", tname, path,
           k < 0 ? strerror(errno) : "unexpected end of file");
      close(fd);
      return false;
    }
    got += (size_t)k;
  }
  close(fd);
  return true;
}

static bool parse_i64(const char *s, int64_t *out) {
  return s && str_parse_i64(s, 0, INT64_MAX, out);
}

/* Packs `count` values from a wider protobuf field into dst elements of
 * `size` bytes (little endian: the low bytes of each value). */
static void pack_low_bytes(void *dst, size_t size, const void *src, size_t src_size, size_t count) {
  const unsigned char *s = src;
  unsigned char *o = dst;
  for (size_t k = 0; k < count; k++) memcpy(o + k * size, s + k * src_size, size);
}

static bool tensor_from_pb(reader *r, const Onnx__TensorProto *t, onnx_tensor *out) {
  *out = (onnx_tensor){.name = dup_str(r, t->name)};
  const char *tn = out->name[0] ? out->name : "(unnamed)";
  if (!t->has_data_type || t->data_type == ONNX_UNDEFINED) {
    fail(r, "tensor '%s' has no data type", tn);
    return false;
  }
  out->dtype = t->data_type;
  if (t->n_dims > ONNX_MAX_RANK) {
    fail(r, "tensor '%s' has %zu dimensions; castor reads at most %d", tn, t->n_dims,
         ONNX_MAX_RANK);
    return false;
  }
  out->rank = (int)t->n_dims;
  int64_t numel = 1;
  for (size_t k = 0; k < t->n_dims; k++) {
    if (t->dims[k] < 0) {
      fail(r, "tensor '%s' has a negative dimension %lld", tn, (long long)t->dims[k]);
      return false;
    }
    if (!size_mul_ok(numel, t->dims[k], &numel) || numel > ((int64_t)1 << 40)) {
      fail(r, "tensor '%s': its dimensions multiply to more than 2^40 elements", tn);
      return false;
    }
    out->dims[k] = t->dims[k];
  }
  out->numel = numel;
  if (t->segment) {
    fail(r, "tensor '%s' is stored in segments, which castor does not read", tn);
    return false;
  }
  size_t es = onnx_dtype_size(out->dtype);
  if (out->dtype == ONNX_STRING) {
    if ((int64_t)t->n_string_data != numel) {
      fail(r, "tensor '%s' declares %lld strings and holds %zu", tn, (long long)numel,
           t->n_string_data);
      return false;
    }
    return true; /* strings are counted, never used as numbers */
  }
  if (es == 0) {
    fail(r, "tensor '%s' has data type %d, which onnx.proto does not define", tn, out->dtype);
    return false;
  }
  int64_t nbytes;
  if (!size_mul_ok(numel, (int64_t)es, &nbytes)) {
    fail(r, "tensor '%s' is too large", tn);
    return false;
  }
  out->nbytes = (size_t)nbytes;
  /* the data must be there before anything is allocated for it: a few
   * bytes of file may declare 2^40 elements */
  if (t->has_data_location && t->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL) {
    const char *loc = NULL;
    int64_t offset = 0, length = -1;
    for (size_t k = 0; k < t->n_external_data; k++) {
      const Onnx__StringStringEntryProto *e = t->external_data[k];
      const char *key = e->key ? e->key : "";
      if (str_eq(key, "location")) loc = e->value;
      else if (str_eq(key, "offset") && !parse_i64(e->value, &offset)) {
        fail(r, "tensor '%s': external data offset '%s' is not a non-negative integer", tn,
             e->value ? e->value : "");
        return false;
      } else if (str_eq(key, "length") && !parse_i64(e->value, &length)) {
        fail(r, "tensor '%s': external data length '%s' is not a non-negative integer", tn,
             e->value ? e->value : "");
        return false;
      }
    }
    if (!loc) {
      fail(r, "tensor '%s' keeps its data externally but names no location", tn);
      return false;
    }
    if (length >= 0 && length != nbytes) {
      fail(r, "tensor '%s': external data length %lld does not match its %lld elements of %s "
              "(%lld bytes)", tn, (long long)length, (long long)numel,
           onnx_dtype_name(out->dtype), (long long)nbytes);
      return false;
    }
    void *data = NULL;
    if (nbytes && !read_external(r, tn, loc, offset, (size_t)nbytes, &data)) return false;
    out->data = data;
    return true;
  }
  const void *src;
  size_t have, src_size = es; /* elements present, and the size of each in the file */
  if (t->has_raw_data && t->raw_data.len > 0) {
    if ((int64_t)t->raw_data.len != nbytes) {
      fail(r, "tensor '%s' holds %zu bytes of raw data; %lld elements of %s need %lld", tn,
           t->raw_data.len, (long long)numel, onnx_dtype_name(out->dtype), (long long)nbytes);
      return false;
    }
    have = (size_t)numel, src = t->raw_data.data;
  } else {
    switch (out->dtype) {
    case ONNX_FLOAT: have = t->n_float_data, src = t->float_data; break;
    case ONNX_COMPLEX64: have = t->n_float_data / 2, src = t->float_data; break;
    case ONNX_INT32:
    case ONNX_INT16:
    case ONNX_INT8:
    case ONNX_UINT16:
    case ONNX_UINT8:
    case ONNX_BOOL:
    case ONNX_FLOAT16:
    case ONNX_BFLOAT16: have = t->n_int32_data, src = t->int32_data, src_size = 4; break;
    case ONNX_INT64: have = t->n_int64_data, src = t->int64_data; break;
    case ONNX_DOUBLE: have = t->n_double_data, src = t->double_data; break;
    case ONNX_COMPLEX128: have = t->n_double_data / 2, src = t->double_data; break;
    case ONNX_UINT32:
    case ONNX_UINT64: have = t->n_uint64_data, src = t->uint64_data, src_size = 8; break;
    default: have = 0, src = NULL; break;
    }
    if ((int64_t)have != numel) {
      fail(r, "tensor '%s' declares %lld elements of %s and holds %zu", tn, (long long)numel,
           onnx_dtype_name(out->dtype), have);
      return false;
    }
  }
  if (!nbytes) return true;
  void *data = arena_alloc_aligned(r->a, (size_t)nbytes, 64);
  if (src_size == es) memcpy(data, src, (size_t)nbytes);
  else pack_low_bytes(data, es, src, src_size, have);
  out->data = data;
  return true;
}

static bool value_info_from_pb(reader *r, const Onnx__ValueInfoProto *v, onnx_value_info *out) {
  *out = (onnx_value_info){.name = dup_str(r, v->name), .rank = -1};
  if (!out->name[0]) {
    fail(r, "a graph input or output has no name");
    return false;
  }
  const Onnx__TypeProto *tp = v->type;
  if (!tp || tp->value_case != ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE || !tp->tensor_type)
    return true; /* not a tensor: the importer says what it is not */
  out->is_tensor = true;
  const Onnx__TypeProto__Tensor *tt = tp->tensor_type;
  out->elem_type = tt->has_elem_type ? tt->elem_type : 0;
  if (!tt->shape) return true;
  if (tt->shape->n_dim > ONNX_MAX_RANK) {
    fail(r, "value '%s' has %zu dimensions; castor reads at most %d", out->name,
         tt->shape->n_dim, ONNX_MAX_RANK);
    return false;
  }
  out->rank = (int)tt->shape->n_dim;
  for (int k = 0; k < out->rank; k++) {
    const Onnx__TensorShapeProto__Dimension *dm = tt->shape->dim[k];
    out->dims[k] = -1;
    if (dm->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE) {
      if (dm->dim_value < 0) {
        fail(r, "value '%s': dimension %d is negative (%lld)", out->name, k,
             (long long)dm->dim_value);
        return false;
      }
      out->dims[k] = dm->dim_value;
    } else if (dm->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM) {
      out->dim_params[k] = dup_str(r, dm->dim_param);
    }
  }
  return true;
}

static bool attr_from_pb(reader *r, const Onnx__AttributeProto *p, onnx_attr *out,
                         const char *node) {
  *out = (onnx_attr){.name = dup_str(r, p->name), .type = p->has_type ? (int)p->type : 0};
  switch (out->type) {
  case ONNX_ATTR_FLOAT: out->f = p->f; break;
  case ONNX_ATTR_INT: out->i = p->i; break;
  case ONNX_ATTR_STRING:
    /* an empty string may come with no data pointer at all */
    out->s = arena_strndup(r->a, p->s.len ? (const char *)p->s.data : "", p->s.len);
    out->s_len = p->s.len;
    break;
  case ONNX_ATTR_INTS: {
    int64_t *v = arena_alloc(r->a, (p->n_ints ? p->n_ints : 1) * sizeof *v);
    if (p->n_ints) memcpy(v, p->ints, p->n_ints * sizeof *v);
    out->ints = v;
    out->n = (int)p->n_ints;
    break;
  }
  case ONNX_ATTR_FLOATS: {
    float *v = arena_alloc(r->a, (p->n_floats ? p->n_floats : 1) * sizeof *v);
    if (p->n_floats) memcpy(v, p->floats, p->n_floats * sizeof *v);
    out->floats = v;
    out->n = (int)p->n_floats;
    break;
  }
  case ONNX_ATTR_STRINGS: out->n = (int)p->n_strings; break;
  case ONNX_ATTR_TENSOR: {
    if (!p->t) {
      fail(r, "node '%s': tensor attribute '%s' holds no tensor", node, out->name);
      return false;
    }
    onnx_tensor *t = arena_alloc(r->a, sizeof *t);
    if (!tensor_from_pb(r, p->t, t)) return false;
    out->t = t;
    break;
  }
  default: break; /* graphs, sparse tensors, type protos: kept as a type the importer refuses */
  }
  if (p->n_ints > INT_MAX || p->n_floats > INT_MAX || p->n_strings > INT_MAX) {
    fail(r, "node '%s': attribute '%s' has too many elements", node, out->name);
    return false;
  }
  return true;
}

static bool node_from_pb(reader *r, const Onnx__NodeProto *p, int index, onnx_node *out) {
  *out = (onnx_node){.name = dup_str(r, p->name), .op_type = dup_str(r, p->op_type),
                     .domain = dup_str(r, p->domain), .index = index};
  const char *nn = out->name[0] ? out->name : arena_printf(r->a, "#%d", index);
  if (!out->op_type[0]) {
    fail(r, "node %s has no op_type", nn);
    return false;
  }
  if (p->n_input > INT_MAX || p->n_output > INT_MAX || p->n_attribute > INT_MAX) {
    fail(r, "node %s has too many inputs, outputs or attributes", nn);
    return false;
  }
  out->n_inputs = (int)p->n_input;
  out->inputs = arena_alloc(r->a, (p->n_input + 1) * sizeof *out->inputs);
  for (size_t k = 0; k < p->n_input; k++) out->inputs[k] = dup_str(r, p->input[k]);
  out->n_outputs = (int)p->n_output;
  out->outputs = arena_alloc(r->a, (p->n_output + 1) * sizeof *out->outputs);
  for (size_t k = 0; k < p->n_output; k++) out->outputs[k] = dup_str(r, p->output[k]);
  out->n_attrs = (int)p->n_attribute;
  out->attrs = arena_alloc(r->a, (p->n_attribute + 1) * sizeof *out->attrs);
  for (size_t k = 0; k < p->n_attribute; k++)
    if (!attr_from_pb(r, p->attribute[k], &out->attrs[k], nn)) return false;
  return true;
}

static bool count_ok(reader *r, size_t n, const char *what) {
  if (n > (size_t)INT_MAX / 2) {
    fail(r, "the graph has too many %s (%zu)", what, n);
    return false;
  }
  return true;
}

static bool graph_from_pb(reader *r, const Onnx__GraphProto *p, onnx_graph *g) {
  *g = (onnx_graph){.name = dup_str(r, p->name)};
  if (!count_ok(r, p->n_node, "nodes") || !count_ok(r, p->n_initializer, "initializers") ||
      !count_ok(r, p->n_input, "inputs") || !count_ok(r, p->n_output, "outputs"))
    return false;
  if (p->n_sparse_initializer) {
    fail(r, "the graph has sparse initializers, which castor does not read");
    return false;
  }
  g->n_initializers = (int)p->n_initializer;
  g->initializers = arena_alloc(r->a, (p->n_initializer + 1) * sizeof *g->initializers);
  for (size_t k = 0; k < p->n_initializer; k++)
    if (!tensor_from_pb(r, p->initializer[k], &g->initializers[k])) return false;
  g->n_inputs = (int)p->n_input;
  g->inputs = arena_alloc(r->a, (p->n_input + 1) * sizeof *g->inputs);
  for (size_t k = 0; k < p->n_input; k++)
    if (!value_info_from_pb(r, p->input[k], &g->inputs[k])) return false;
  g->n_outputs = (int)p->n_output;
  g->outputs = arena_alloc(r->a, (p->n_output + 1) * sizeof *g->outputs);
  for (size_t k = 0; k < p->n_output; k++)
    if (!value_info_from_pb(r, p->output[k], &g->outputs[k])) return false;
  g->n_nodes = (int)p->n_node;
  g->nodes = arena_alloc(r->a, (p->n_node + 1) * sizeof *g->nodes);
  for (size_t k = 0; k < p->n_node; k++)
    if (!node_from_pb(r, p->node[k], (int)k, &g->nodes[k])) return false;
  return true;
}

onnx_model *onnx_model_read(const char *name, const void *bytes, size_t len, const char *dir,
                            diag_sink *d) {
  if ((int64_t)len > ONNX_MAX_FILE_BYTES) {
    diag_error(d, (diag_loc){name, 0, 0},
               "'%s' is %zu bytes; an ONNX model file is at most 2 GiB (larger models keep "
               "their weights in external data files)", name, len);
    return NULL;
  }
  if (!limits_ok(d, name, "ONNX model", bytes, len, &onnx__model_proto__descriptor)) return NULL;
  capped c;
  capped_init(&c, ONNX_MAX_DECODE_BYTES);
  Onnx__ModelProto *p = onnx__model_proto__unpack(&c.base, len, bytes);
  if (!p) {
    malformed(d, name, "ONNX model", bytes, len, &c);
    return NULL;
  }
  onnx_model *m = xcalloc(1, sizeof *m);
  m->arena = arena_create();
  reader r = {.file = name, .dir = dir, .dirfd = -1, .a = m->arena, .d = d, .ok = true};
  m->ir_version = p->has_ir_version ? p->ir_version : 0;
  if (!p->graph) fail(&r, "the model has no graph (is it an ONNX model?)");
  if (r.ok && count_ok(&r, p->n_opset_import, "opset imports")) {
    m->n_opsets = (int)p->n_opset_import;
    m->opsets = arena_alloc(m->arena, (p->n_opset_import + 1) * sizeof *m->opsets);
    for (size_t k = 0; k < p->n_opset_import; k++) {
      m->opsets[k].domain = dup_str(&r, p->opset_import[k]->domain);
      m->opsets[k].version = p->opset_import[k]->has_version ? p->opset_import[k]->version : 0;
    }
    const char *pn = p->producer_name ? p->producer_name : "";
    const char *pv = p->producer_version ? p->producer_version : "";
    m->producer = arena_printf(m->arena, "%s%s%s", pn, *pn && *pv ? " " : "", pv);
    graph_from_pb(&r, p->graph, &m->graph);
  }
  onnx__model_proto__free_unpacked(p, &c.base);
  if (r.dirfd >= 0) close(r.dirfd);
  if (!r.ok) {
    onnx_model_free(m);
    return NULL;
  }
  return m;
}

void onnx_model_free(onnx_model *m) {
  if (!m) return;
  arena_destroy(m->arena);
  free(m);
}

bool onnx_tensor_read(const char *name, const void *bytes, size_t len, arena *a, onnx_tensor *out,
                      diag_sink *d) {
  if (!limits_ok(d, name, "ONNX tensor", bytes, len, &onnx__tensor_proto__descriptor)) return false;
  capped c;
  capped_init(&c, ONNX_MAX_DECODE_BYTES);
  Onnx__TensorProto *p = onnx__tensor_proto__unpack(&c.base, len, bytes);
  if (!p) {
    malformed(d, name, "ONNX tensor", bytes, len, &c);
    return false;
  }
  reader r = {.file = name, .dir = NULL, .dirfd = -1, .a = a, .d = d, .ok = true};
  tensor_from_pb(&r, p, out);
  onnx__tensor_proto__free_unpacked(p, &c.base);
  return r.ok;
}
