/*
 * hdf5.c: the HDF5 subset reader (formats/hdf5.h). Field layouts follow the
 * HDF5 File Format Specification version 3.0 (sections II.A superblock,
 * III.A.1 v1 B-trees, III.C symbol table nodes, III.D local heaps, III.E
 * global heaps, IV.A.1.a v1 object headers, IV.A.2 messages).
 *
 * The walk starts at the root group's symbol table entry in the superblock
 * and visits groups depth-first; each group's children come from its
 * B-tree in key order (by name, as HDF5 keeps them). All reads go through
 * `at` (bounds-checked against the buffer); addresses are relative to the
 * superblock's base address.
 */
#include "formats/hdf5.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const unsigned char SIG[8] = {0x89, 'H', 'D', 'F', '\r', '\n', 0x1a, '\n'};

typedef struct reader {
  const unsigned char *d;
  uint64_t len, base;
  int so, sl; /* size of offsets, of lengths */
  h5_error *err;
  h5_file *f;
  VEC(h5_object) objs;
  hmap seen;  /* object header address -> 1 */
  hmap paths; /* path -> 1: a group's links are unique */
  int64_t budget; /* structure reads left: B-tree nodes, continuation blocks, heap objects */
} reader;

static bool fail(reader *r, uint64_t off, const char *fmt, ...) CASTOR_PRINTF(3, 4);
static bool fail(reader *r, uint64_t off, const char *fmt, ...) {
  r->err->off = off;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(r->err->msg, sizeof r->err->msg, fmt, ap);
  va_end(ap);
  return false;
}

/* [off, off + n) inside the file? */
static bool in_file(reader *r, uint64_t off, uint64_t n) { return off <= r->len && n <= r->len - off; }

static uint64_t rdn(const unsigned char *p, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; i--) v = v << 8 | p[i];
  return v;
}
static bool undef(reader *r, uint64_t a) { return r->so == 8 ? a == UINT64_MAX : a == (1ull << (8 * r->so)) - 1; }

/* The file bytes at address a (relative to base) for n bytes, or NULL after
 * an error naming `what`. */
static const unsigned char *at(reader *r, uint64_t a, uint64_t n, const char *what, const char *obj) {
  if (a > UINT64_MAX - r->base || !in_file(r, a + r->base, n)) {
    fail(r, a, "object '%s': %s at address %llu of %llu bytes lies outside the file (%llu bytes; "
         "truncated or corrupt file)", obj, what, (unsigned long long)a, (unsigned long long)n, (unsigned long long)r->len);
    return NULL;
  }
  return r->d + r->base + a;
}

static bool spend(reader *r, uint64_t off, const char *obj) {
  if (--r->budget >= 0) return true;
  return fail(r, off, "object '%s': the file's structure is too large or loops (more than %d "
              "nodes read)", obj, 4 * H5_MAX_OBJECTS);
}

/* ---- local heap: names ---- */

typedef struct heap {
  const unsigned char *data;
  uint64_t size;
} heap;

static bool read_heap(reader *r, uint64_t a, const char *obj, heap *h) {
  const unsigned char *p = at(r, a, 8 + 2 * (uint64_t)r->sl + r->so, "local heap", obj);
  if (!p) return false;
  if (memcmp(p, "HEAP", 4) != 0 || p[4] != 0)
    return fail(r, a, "group '%s': no local heap (version 0) at address %llu", obj, (unsigned long long)a);
  h->size = rdn(p + 8, r->sl);
  uint64_t da = rdn(p + 8 + 2 * r->sl, r->so);
  return (h->data = at(r, da, h->size, "local heap data", obj)) != NULL;
}

static const char *heap_name(reader *r, const heap *h, uint64_t off, const char *obj) {
  if (off >= h->size) {
    fail(r, off, "group '%s': a link name at heap offset %llu lies outside its local heap of %llu "
         "bytes", obj, (unsigned long long)off, (unsigned long long)h->size);
    return NULL;
  }
  const unsigned char *s = h->data + off;
  const unsigned char *nul = memchr(s, 0, h->size - off);
  if (!nul || nul == s) {
    fail(r, off, "group '%s': a link name at heap offset %llu is %s", obj, (unsigned long long)off,
         nul ? "empty" : "not NUL-terminated inside its local heap");
    return NULL;
  }
  for (const unsigned char *c = s; c < nul; c++)
    if (*c == '/') {
      fail(r, off, "group '%s': a link name contains '/'", obj);
      return NULL;
    }
  return arena_strndup(r->f->arena, (const char *)s, (size_t)(nul - s));
}

/* ---- datatypes and dataspaces ---- */

static bool read_type(reader *r, const unsigned char *p, uint64_t n, uint64_t off, const char *obj,
                      const char *what, h5_type *t) {
  if (n < 8) return fail(r, off, "%s '%s': datatype message of %llu bytes is too short", what, obj, (unsigned long long)n);
  int cls = p[0] & 15, ver = p[0] >> 4;
  uint32_t bits = (uint32_t)rdn(p + 1, 3);
  uint32_t size = (uint32_t)rdn(p + 4, 4);
  *t = (h5_type){.size = size};
  if (ver < 1 || ver > 3)
    return fail(r, off, "%s '%s': datatype message version %d is not supported", what, obj, ver);
  switch (cls) {
  case 0: /* fixed point */
    if (bits & 1) return fail(r, off, "%s '%s': big-endian integers are not supported", what, obj);
    if (size < 1 || size > 8) return fail(r, off, "%s '%s': integers of %u bytes are not supported", what, obj, size);
    t->cls = H5_CLASS_INT;
    t->is_signed = bits & 8;
    return true;
  case 1: /* floating point */
    if (bits & 1 || bits & 64) return fail(r, off, "%s '%s': big-endian or VAX floats are not supported", what, obj);
    if (n < 20) return fail(r, off, "%s '%s': float datatype message is too short", what, obj);
    {
      int prec = (int)rdn(p + 10, 2), eloc = p[12], esz = p[13], mloc = p[14], msz = p[15];
      uint32_t bias = (uint32_t)rdn(p + 16, 4);
      bool ieee = (size == 2 && prec == 16 && eloc == 10 && esz == 5 && mloc == 0 && msz == 10 && bias == 15) ||
                  (size == 4 && prec == 32 && eloc == 23 && esz == 8 && mloc == 0 && msz == 23 && bias == 127) ||
                  (size == 8 && prec == 64 && eloc == 52 && esz == 11 && mloc == 0 && msz == 52 && bias == 1023);
      if (!ieee || rdn(p + 8, 2) != 0)
        return fail(r, off, "%s '%s': a %u-byte float that is not IEEE binary16/32/64 is not "
                    "supported", what, obj, size);
    }
    t->cls = H5_CLASS_FLOAT;
    return true;
  case 3: /* string */
    t->cls = H5_CLASS_STRING;
    return true;
  case 5: /* opaque */
    t->cls = H5_CLASS_OPAQUE;
    return true;
  case 9: /* variable length */
    if ((bits & 15) != 1)
      return fail(r, off, "%s '%s': variable-length sequences are not supported (only strings)", what, obj);
    if (size != 4u + (uint32_t)r->so + 4u)
      return fail(r, off, "%s '%s': variable-length string of element size %u (expected %d)", what, obj, size, 8 + r->so);
    t->cls = H5_CLASS_VSTRING;
    return true;
  default:
    return fail(r, off, "%s '%s': datatype class %d (%s) is not supported", what, obj, cls,
                cls == 2 ? "time" : cls == 4 ? "bitfield" : cls == 6 ? "compound" : cls == 7 ? "reference"
                : cls == 8 ? "enum" : cls == 10 ? "array" : "unknown");
  }
}

static bool read_space(reader *r, const unsigned char *p, uint64_t n, uint64_t off, const char *obj,
                       const char *what, int *rank, int64_t *dims, int64_t *numel) {
  if (n < 4) return fail(r, off, "%s '%s': dataspace message is too short", what, obj);
  int ver = p[0], nd = p[1], flags = p[2];
  uint64_t hdr = ver == 1 ? 8 : 4;
  if (ver != 1 && ver != 2) return fail(r, off, "%s '%s': dataspace version %d is not supported", what, obj, ver);
  if (ver == 2 && p[3] == 2) return fail(r, off, "%s '%s': a null dataspace is not supported", what, obj);
  if (nd > H5_MAX_RANK) return fail(r, off, "%s '%s': rank %d exceeds %d", what, obj, nd, H5_MAX_RANK);
  if (flags & 2) return fail(r, off, "%s '%s': dataspace permutations are not supported", what, obj);
  if (hdr + (uint64_t)nd * r->sl * ((flags & 1) ? 2 : 1) > n)
    return fail(r, off, "%s '%s': dataspace message of %llu bytes is too short for rank %d", what,
                obj, (unsigned long long)n, nd);
  int64_t e = 1;
  for (int i = 0; i < nd; i++) {
    uint64_t dv = rdn(p + hdr + (uint64_t)i * r->sl, r->sl);
    if (dv > INT64_MAX || !size_mul_ok(e, (int64_t)dv, &e))
      return fail(r, off, "%s '%s': dimension %d (%llu) overflows", what, obj, i, (unsigned long long)dv);
    dims[i] = (int64_t)dv;
  }
  *rank = nd, *numel = e;
  return true;
}

/* A variable-length string (length, global heap collection, index). */
static const char *vstring(reader *r, const unsigned char *p, const char *obj) {
  uint64_t slen = rdn(p, 4), ca = rdn(p + 4, r->so), idx = rdn(p + 4 + r->so, 4);
  const unsigned char *c = at(r, ca, 16 + (uint64_t)r->sl, "global heap collection", obj);
  if (!c) return NULL;
  if (memcmp(c, "GCOL", 4) != 0 || c[4] != 1) {
    fail(r, ca, "attribute of '%s': no global heap collection at address %llu", obj, (unsigned long long)ca);
    return NULL;
  }
  uint64_t csize = rdn(c + 8, r->sl);
  if (csize < 8 + (uint64_t)r->sl || !at(r, ca, csize, "global heap collection", obj)) {
    if (csize < 8 + (uint64_t)r->sl) fail(r, ca, "attribute of '%s': global heap collection size %llu is too small", obj, (unsigned long long)csize);
    return NULL;
  }
  uint64_t q = 8 + (uint64_t)r->sl;
  while (q + 8 + (uint64_t)r->sl <= csize) {
    if (!spend(r, ca + q, obj)) return NULL;
    const unsigned char *h = c + q;
    uint64_t i = rdn(h, 2), osz = rdn(h + 8, r->sl);
    uint64_t body = q + 8 + (uint64_t)r->sl;
    if (osz > csize - body) break;
    if (i == idx && i != 0) {
      if (slen > osz) break;
      char *s = arena_strndup(r->f->arena, (const char *)c + body, (size_t)slen);
      if (strlen(s) != slen) {
        fail(r, ca + body, "attribute of '%s': a variable-length string contains a NUL byte", obj);
        return NULL;
      }
      return s;
    }
    if (i == 0) break; /* free space: the rest of the collection */
    body += (osz + 7) & ~(uint64_t)7;
    if (body < q) break;
    q = body;
  }
  fail(r, ca, "attribute of '%s': global heap object %llu of %llu bytes not found in the "
       "collection at address %llu", obj, (unsigned long long)idx, (unsigned long long)slen, (unsigned long long)ca);
  return NULL;
}

static uint64_t pad8(uint64_t x, bool pad) { return pad ? (x + 7) & ~(uint64_t)7 : x; }

typedef VEC(h5_attr) attr_vec;

static bool read_attr(reader *r, const unsigned char *p, uint64_t n, uint64_t off, const char *obj,
                      attr_vec *attrs) {
  if (n < 8) return fail(r, off, "attribute of '%s': message too short", obj);
  int ver = p[0];
  if (ver < 1 || ver > 3) return fail(r, off, "attribute of '%s': message version %d is not supported", obj, ver);
  if (ver >= 2 && (p[1] & 3)) return fail(r, off, "attribute of '%s': shared datatypes or dataspaces are not supported", obj);
  uint64_t nsz = rdn(p + 2, 2), tsz = rdn(p + 4, 2), ssz = rdn(p + 6, 2);
  uint64_t q = ver == 3 ? 9 : 8;
  bool pad = ver == 1;
  if (q + pad8(nsz, pad) + pad8(tsz, pad) + pad8(ssz, pad) > n || nsz == 0)
    return fail(r, off, "attribute of '%s': its name, datatype and dataspace run past the message", obj);
  const char *name = (const char *)p + q;
  if (memchr(name, 0, nsz) != name + nsz - 1)
    return fail(r, off, "attribute of '%s': name is not NUL-terminated", obj);
  h5_attr a = {.name = arena_strdup(r->f->arena, name)};
  q += pad8(nsz, pad);
  if (!read_type(r, p + q, tsz, off + q, obj, "attribute of", &a.type)) return false;
  q += pad8(tsz, pad);
  int64_t numel;
  if (!read_space(r, p + q, ssz, off + q, obj, "attribute of", &a.rank, a.dims, &numel)) return false;
  q += pad8(ssz, pad);
  int64_t bytes;
  if (!size_mul_ok(numel, a.type.size, &bytes) || (uint64_t)bytes > n - q)
    return fail(r, off, "attribute '%s' of '%s': its %lld elements of %u bytes run past the message",
                a.name, obj, (long long)numel, a.type.size);
  if (numel == 1 && a.type.cls == H5_CLASS_VSTRING) {
    if (!(a.str = vstring(r, p + q, obj))) return false;
  } else if (numel == 1 && a.type.cls == H5_CLASS_STRING) {
    a.str = arena_strndup(r->f->arena, (const char *)p + q, a.type.size);
  }
  vec_push(attrs, a);
  return true;
}

/* ---- object headers ---- */

typedef struct header {
  bool has_stab, has_space, has_type, has_layout;
  uint64_t btree, heap;
  h5_type type;
  int rank;
  int64_t dims[H5_MAX_RANK], numel;
  uint64_t data_addr, data_size;
  attr_vec attrs;
} header;

static const char *msg_name(int type) {
  switch (type) {
  case 0x02: return "a link info message (a new-style group)";
  case 0x06: return "a link message (a new-style group)";
  case 0x07: return "external data files";
  case 0x0A: return "a group info message (a new-style group)";
  case 0x0F: return "a shared message table";
  case 0x13: return "B-tree 'K' values";
  case 0x14: return "a driver info message";
  case 0x17: return "a file space info message";
  default: return NULL;
  }
}

static bool read_msg(reader *r, header *h, int type, int flags, const unsigned char *p, uint64_t n,
                     uint64_t off, const char *obj) {
  if (flags & 2)
    return fail(r, off, "object '%s': shared message (type %d) is not supported", obj, type);
  switch (type) {
  case 0x00: /* NIL */
  case 0x04: /* old fill value */
  case 0x05: /* fill value */
  case 0x0D: /* comment */
  case 0x0E: /* old modification time */
  case 0x12: /* modification time */
  case 0x16: /* reference count */
  case 0x10: /* continuation: the caller follows it */
    return true;
  case 0x01:
    h->has_space = true;
    return read_space(r, p, n, off, obj, "dataset", &h->rank, h->dims, &h->numel);
  case 0x03:
    h->has_type = true;
    return read_type(r, p, n, off, obj, "dataset", &h->type);
  case 0x08: {
    if (n < 2) return fail(r, off, "dataset '%s': layout message too short", obj);
    if (p[0] != 3) return fail(r, off, "dataset '%s': data layout message version %d is not supported (version 3 is)", obj, p[0]);
    if (p[1] == 0) return fail(r, off, "dataset '%s': compact storage is not supported (castor reads contiguous datasets)", obj);
    if (p[1] == 2) return fail(r, off, "dataset '%s': chunked storage is not supported (castor reads contiguous datasets; save without chunks or compression)", obj);
    if (p[1] != 1) return fail(r, off, "dataset '%s': layout class %d is not supported", obj, p[1]);
    if (n < 2 + (uint64_t)r->so + r->sl) return fail(r, off, "dataset '%s': layout message too short", obj);
    h->has_layout = true;
    h->data_addr = rdn(p + 2, r->so);
    h->data_size = rdn(p + 2 + r->so, r->sl);
    return true;
  }
  case 0x0C: return read_attr(r, p, n, off, obj, &h->attrs);
  case 0x11:
    if (n < 2 * (uint64_t)r->so) return fail(r, off, "group '%s': symbol table message too short", obj);
    h->has_stab = true;
    h->btree = rdn(p, r->so);
    h->heap = rdn(p + r->so, r->so);
    return true;
  case 0x0B:
    return fail(r, off, "dataset '%s': a filter pipeline (compression, shuffle or a checksum) is "
                "not supported (castor reads contiguous, unfiltered datasets)", obj);
  case 0x15: /* attribute info: dense attribute storage */
    return fail(r, off, "object '%s': dense attribute storage (an attribute info message) is not supported", obj);
  default: {
    const char *what = msg_name(type);
    if (what) return fail(r, off, "object '%s': %s is not supported", obj, what);
    return fail(r, off, "object '%s': header message type %d is not supported", obj, type);
  }
  }
}

static bool read_header(reader *r, uint64_t a, const char *obj, header *h) {
  const unsigned char *p = at(r, a, 16, "object header", obj);
  if (!p) return false;
  if (p[0] != 1)
    return fail(r, a, "object '%s': object header version %d is not supported (version 1 is; "
                "the file was written with libver='latest'?)", obj, p[0] == 'O' ? 2 : p[0]);
  uint64_t n_msgs = rdn(p + 2, 2);
  uint64_t blk = a + 16, blk_len = rdn(p + 8, 4);
  uint64_t seen = 0;
  for (;;) { /* continuation blocks, each paid for (a cycle runs out of budget) */
    if (!spend(r, blk, obj)) return false;
    const unsigned char *b = at(r, blk, blk_len, "object header messages", obj);
    if (!b) return false;
    uint64_t q = 0, next = 0, next_len = 0;
    while (q + 8 <= blk_len && seen < n_msgs) {
      int type = (int)rdn(b + q, 2), flags = b[q + 4];
      uint64_t sz = rdn(b + q + 2, 2);
      if (sz > blk_len - q - 8)
        return fail(r, blk + q, "object '%s': header message of %llu bytes runs past its block",
                    obj, (unsigned long long)sz);
      if (type == 0x10) {
        if (sz < (uint64_t)r->so + r->sl) return fail(r, blk + q, "object '%s': continuation message too short", obj);
        next = rdn(b + q + 8, r->so), next_len = rdn(b + q + 8 + r->so, r->sl);
        if (next_len == 0) return fail(r, blk + q, "object '%s': empty continuation block", obj);
      }
      if (!read_msg(r, h, type, flags, b + q + 8, sz, blk + q + 8, obj)) return false;
      q += 8 + sz;
      seen++;
    }
    if (!next_len) break;
    blk = next, blk_len = next_len;
  }
  return true;
}

/* ---- groups: B-tree and symbol table nodes ---- */

static bool visit(reader *r, uint64_t addr, const char *path, int depth);

static bool read_snod(reader *r, uint64_t a, const heap *hp, const char *path, int depth) {
  uint64_t esz = 2 * (uint64_t)r->so + 24;
  const unsigned char *p = at(r, a, 8, "symbol table node", path);
  if (!p) return false;
  if (memcmp(p, "SNOD", 4) != 0 || p[4] != 1)
    return fail(r, a, "group '%s': no symbol table node at address %llu", path, (unsigned long long)a);
  uint64_t n = rdn(p + 6, 2);
  const unsigned char *e = at(r, a + 8, n * esz, "symbol table entries", path);
  if (!e) return false;
  for (uint64_t i = 0; i < n; i++, e += esz) {
    const char *name = heap_name(r, hp, rdn(e, r->so), path);
    if (!name) return false;
    const char *child = arena_printf(r->f->arena, "%s%s%s", path, strcmp(path, "/") ? "/" : "", name);
    if (hmap_get_str(&r->paths, child, strlen(child)))
      return fail(r, a, "group '%s': two links named '%s'", path, name);
    hmap_put_str(&r->paths, child, strlen(child), (void *)1);
    if (!visit(r, rdn(e + r->so, r->so), child, depth + 1)) return false;
  }
  return true;
}

static bool read_btree(reader *r, uint64_t a, const heap *hp, const char *path, int depth, int level) {
  if (!spend(r, a, path)) return false;
  const unsigned char *p = at(r, a, 8 + 2 * (uint64_t)r->so, "B-tree node", path);
  if (!p) return false;
  if (memcmp(p, "TREE", 4) != 0 || p[4] != 0)
    return fail(r, a, "group '%s': no group B-tree node (version 1, type 0) at address %llu", path, (unsigned long long)a);
  int lvl = p[5];
  if ((level >= 0 && lvl != level) || lvl > H5_MAX_DEPTH)
    return fail(r, a, "group '%s': B-tree node at address %llu has level %d (expected %d)", path, (unsigned long long)a, lvl, level);
  uint64_t n = rdn(p + 6, 2);
  uint64_t body = a + 8 + 2 * (uint64_t)r->so;
  uint64_t step = (uint64_t)r->sl + r->so;
  const unsigned char *k = at(r, body, n * step + r->sl, "B-tree keys and children", path);
  if (!k) return false;
  for (uint64_t i = 0; i < n; i++) {
    uint64_t child = rdn(k + i * step + r->sl, r->so);
    bool ok = lvl == 0 ? read_snod(r, child, hp, path, depth) : read_btree(r, child, hp, path, depth, lvl - 1);
    if (!ok) return false;
  }
  return true;
}

static bool visit(reader *r, uint64_t addr, const char *path, int depth) {
  if (depth > H5_MAX_DEPTH) return fail(r, addr, "group '%s': nested more than %d deep", path, H5_MAX_DEPTH);
  if (r->objs.len >= H5_MAX_OBJECTS) return fail(r, addr, "object '%s': more than %d objects", path, H5_MAX_OBJECTS);
  if (undef(r, addr) || addr == UINT64_MAX)
    return fail(r, addr, "object '%s': its object header address is undefined", path);
  if (hmap_get_ptr(&r->seen, (const void *)(uintptr_t)(addr + 1)))
    return fail(r, addr, "object '%s': its header at address %llu is reached twice (a hard link or a cycle)",
                path, (unsigned long long)addr);
  hmap_put_ptr(&r->seen, (const void *)(uintptr_t)(addr + 1), (void *)1);
  header h = {0};
  bool ok = read_header(r, addr, path, &h);
  h5_object o = {.path = path};
  if (ok) {
    o.n_attrs = (int)h.attrs.len;
    o.attrs = arena_alloc(r->f->arena, (h.attrs.len + 1) * sizeof *o.attrs);
    if (h.attrs.len) memcpy(o.attrs, h.attrs.data, h.attrs.len * sizeof *o.attrs);
  }
  vec_free(&h.attrs);
  if (!ok) return false;
  if (h.has_stab) {
    vec_push(&r->objs, o);
    heap hp;
    if (!read_heap(r, h.heap, path, &hp)) return false;
    return read_btree(r, h.btree, &hp, path, depth, -1);
  }
  if (!h.has_layout && !h.has_type && !h.has_space)
    return fail(r, addr, "object '%s': neither an old-style group (symbol table) nor a dataset; "
                "new-style groups (libver='latest') are not supported", path);
  if (!h.has_type || !h.has_space || !h.has_layout)
    return fail(r, addr, "dataset '%s': lacks its %s message", path,
                !h.has_type ? "datatype" : !h.has_space ? "dataspace" : "layout");
  o.is_dataset = true;
  o.type = h.type;
  o.rank = h.rank;
  memcpy(o.dims, h.dims, sizeof o.dims);
  if (h.type.cls == H5_CLASS_VSTRING)
    return fail(r, addr, "dataset '%s': variable-length string datasets are not supported", path);
  if (!size_mul_ok(h.numel, h.type.size, &o.nbytes))
    return fail(r, addr, "dataset '%s': its size overflows", path);
  if ((uint64_t)o.nbytes != h.data_size && !(undef(r, h.data_addr) && o.nbytes == 0))
    return fail(r, addr, "dataset '%s': its storage holds %llu bytes, its shape and type need %lld",
                path, (unsigned long long)h.data_size, (long long)o.nbytes);
  if (o.nbytes) {
    if (undef(r, h.data_addr))
      return fail(r, addr, "dataset '%s': no storage allocated (never written)", path);
    const unsigned char *dp = at(r, h.data_addr, (uint64_t)o.nbytes, "data", path);
    if (!dp) {
      fail(r, h.data_addr, "dataset '%s': its %lld bytes at address %llu run past the end of the "
           "file (%llu bytes)", path, (long long)o.nbytes, (unsigned long long)h.data_addr,
           (unsigned long long)r->len);
      return false;
    }
    o.data = dp;
    o.data_off = h.data_addr + r->base;
  }
  vec_push(&r->objs, o);
  return true;
}

bool h5_open(h5_file *f, const void *data, size_t len, h5_error *err) {
  *f = (h5_file){.arena = arena_create()};
  reader r = {.d = data, .len = len, .err = err, .f = f, .budget = 4 * H5_MAX_OBJECTS};
  hmap_init(&r.seen, HMAP_POINTERS);
  hmap_init(&r.paths, HMAP_STRINGS);
  bool ok = false;
  uint64_t sb = 0;
  /* the superblock is at 0, 512, 1024, ... (after a user block) */
  while (sb + 8 <= len && memcmp(r.d + sb, SIG, 8) != 0) sb = sb ? sb * 2 : 512;
  if (sb + 8 > len) {
    fail(&r, 0, "not an HDF5 file (no superblock signature)");
    goto done;
  }
  if (len - sb < 24) {
    fail(&r, sb, "truncated superblock");
    goto done;
  }
  const unsigned char *s = r.d + sb;
  if (s[8] != 0) {
    fail(&r, sb + 8, "superblock version %d is not supported (version 0 is: h5py's default "
         "libver='earliest')", s[8]);
    goto done;
  }
  r.so = s[13], r.sl = s[14];
  if ((r.so != 4 && r.so != 8) || (r.sl != 4 && r.sl != 8)) {
    fail(&r, sb + 13, "sizes of offsets (%d) and lengths (%d) must be 4 or 8", r.so, r.sl);
    goto done;
  }
  uint64_t need = 24 + 4 * (uint64_t)r.so + 2 * (uint64_t)r.so + 24;
  if (len - sb < need) {
    fail(&r, sb, "truncated superblock (%llu bytes, it needs %llu)", (unsigned long long)(len - sb), (unsigned long long)need);
    goto done;
  }
  /* Addresses are relative to the base address, which is where the
   * superblock is (after a user block: h5py's userblock_size). As libhdf5
   * does, the superblock's own position wins over a stored base that
   * differs (a user block prepended by hand), and the end-of-file address,
   * absolute when the stored base is right, moves with it. */
  uint64_t stored_base = rdn(s + 24, r.so), eof = rdn(s + 24 + 2 * r.so, r.so);
  r.base = sb;
  if (stored_base > eof) {
    fail(&r, sb + 24, "base address %llu lies past the end-of-file address %llu",
         (unsigned long long)stored_base, (unsigned long long)eof);
    goto done;
  }
  eof = eof - stored_base;
  if (eof > len - sb) {
    fail(&r, sb + 24 + 2 * r.so, "truncated: the superblock says the file has %llu bytes, it has "
         "%llu", (unsigned long long)(sb + eof), (unsigned long long)len);
    goto done;
  }
  const unsigned char *root = s + 24 + 4 * r.so;
  ok = visit(&r, rdn(root + r.so, r.so), "/", 0);
done:
  hmap_fini(&r.seen);
  hmap_fini(&r.paths);
  if (!ok) {
    vec_free(&r.objs);
    arena_destroy(f->arena);
    *f = (h5_file){0};
    return false;
  }
  f->n_objects = (int)r.objs.len;
  f->objects = arena_alloc(f->arena, (r.objs.len + 1) * sizeof *f->objects);
  if (r.objs.len) memcpy(f->objects, r.objs.data, r.objs.len * sizeof *f->objects);
  vec_free(&r.objs);
  hmap_init(&f->by_path, HMAP_STRINGS);
  hmap_reserve(&f->by_path, (size_t)f->n_objects);
  for (int i = 0; i < f->n_objects; i++)
    hmap_put_str(&f->by_path, f->objects[i].path, strlen(f->objects[i].path), &f->objects[i]);
  return true;
}

void h5_fini(h5_file *f) {
  hmap_fini(&f->by_path);
  arena_destroy(f->arena);
  *f = (h5_file){0};
}

const h5_object *h5_find(const h5_file *f, const char *path) {
  return f->n_objects ? hmap_get_str(&f->by_path, path, strlen(path)) : NULL;
}

const char *h5_attr_str(const h5_object *o, const char *name) {
  for (int i = 0; i < o->n_attrs; i++)
    if (strcmp(o->attrs[i].name, name) == 0) return o->attrs[i].str;
  return NULL;
}
