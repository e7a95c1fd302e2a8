/* SPDX-License-Identifier: Apache-2.0 */
/*
 * hdf5_write.c: the HDF5 subset writer (formats/hdf5.h, h5_write): the
 * layout h5py gives a Keras weights file, and nothing outside what
 * h5_open reads. Field layouts follow the HDF5 File Format Specification
 * version 3.0, as hdf5.c's reader does.
 *
 *   superblock version 0 at byte 0 (offsets and lengths of 8 bytes; group
 *   leaf node K 4, internal node K 16, as libhdf5's defaults);
 *   one global heap collection (at least 4096 bytes, libhdf5's smallest)
 *   holding every attribute's string;
 *   then each object depth-first, children before their parent: a
 *   dataset's data (8-byte aligned), then its version 1 object header
 *   (dataspace v1 with maximum dimensions, datatype, fill value v2 as h5py
 *   writes it, layout v3 contiguous, attributes v1); a group's local heap
 *   (the empty name at offset 0, then its children's names), its symbol
 *   table nodes (8 entries each, the full node size libhdf5 reads), its
 *   version 1 B-tree (nodes of up to 32 children, full size, keys the
 *   heap offsets of each child's last name, siblings linked per level),
 *   then its object header (a symbol table message and its attributes).
 *
 * Children are ordered by name (strcmp), as libhdf5 keeps them and looks
 * them up. The output is deterministic: the same objects give the same
 * bytes.
 */
#include "formats/hdf5.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { LEAF_K = 4, NODE_K = 16, SNOD_SIZE = 8 + 2 * LEAF_K * 40, TREE_SIZE = 24 + 2 * NODE_K * 8 + (2 * NODE_K + 1) * 8 };
static const uint64_t UNDEF = UINT64_MAX;

typedef struct out {
  unsigned char *d;
  size_t len, cap;
} out;

static size_t grow(out *b, size_t n) {
  if (b->len + n > b->cap) {
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + n) cap *= 2;
    b->d = xrealloc(b->d, cap);
    b->cap = cap;
  }
  size_t at = b->len;
  memset(b->d + at, 0, n);
  b->len += n;
  return at;
}
static void put(out *b, const void *p, size_t n) {
  size_t at = grow(b, n);
  if (n) memcpy(b->d + at, p, n);
}
static void set_le(out *b, size_t at, uint64_t v, int n) {
  for (int i = 0; i < n; i++) b->d[at + (size_t)i] = (unsigned char)(v >> (8 * i));
}
static void put_le(out *b, uint64_t v, int n) { set_le(b, grow(b, (size_t)n), v, n); }
static void align8(out *b) { grow(b, (8 - b->len % 8) % 8); }

/* ---- messages ---- */

typedef struct msg {
  int type, flags;
  out body; /* padded to a multiple of 8 */
} msg;
typedef VEC(msg) msg_vec;

static out *msg_new(msg_vec *v, int type, int flags) {
  vec_push(v, ((msg){.type = type, .flags = flags}));
  return &v->data[v->len - 1].body;
}

static void put_type(out *b, const h5_type *t) {
  switch (t->cls) {
  case H5_CLASS_FLOAT: {
    int bits = 8 * (int)t->size;
    int eloc = bits == 16 ? 10 : bits == 32 ? 23 : 52, esz = bits == 16 ? 5 : bits == 32 ? 8 : 11;
    put_le(b, 0x11, 1), put_le(b, 0x20, 1), put_le(b, (uint64_t)bits - 1, 1), put_le(b, 0, 1);
    put_le(b, t->size, 4), put_le(b, 0, 2), put_le(b, (uint64_t)bits, 2);
    put_le(b, (uint64_t)eloc, 1), put_le(b, (uint64_t)esz, 1), put_le(b, 0, 1), put_le(b, (uint64_t)eloc, 1);
    put_le(b, bits == 16 ? 15 : bits == 32 ? 127 : 1023, 4);
    break;
  }
  case H5_CLASS_INT:
    put_le(b, 0x10, 1), put_le(b, t->is_signed ? 8 : 0, 1), put_le(b, 0, 2);
    put_le(b, t->size, 4), put_le(b, 0, 2), put_le(b, 8 * (uint64_t)t->size, 2);
    break;
  case H5_CLASS_OPAQUE: /* no tag, as Keras's bfloat16 */
    put_le(b, 0x15, 1), put_le(b, 0, 3), put_le(b, t->size, 4);
    break;
  case H5_CLASS_VSTRING: /* UTF-8, NUL-terminated padding; base type an unsigned byte */
    put_le(b, 0x19, 1), put_le(b, 0x01, 1), put_le(b, 0x01, 1), put_le(b, 0, 1), put_le(b, 16, 4);
    put_le(b, 0x10, 1), put_le(b, 0, 3), put_le(b, 1, 4), put_le(b, 0, 2), put_le(b, 8, 2);
    break;
  case H5_CLASS_STRING:
    CASTOR_ASSERT(!"h5_write: fixed-length strings are checked out before");
    break;
  }
  align8(b);
}

static void put_space(out *b, int rank, const int64_t *dims) {
  put_le(b, 1, 1), put_le(b, (uint64_t)rank, 1), put_le(b, rank ? 1 : 0, 1), put_le(b, 0, 5);
  for (int k = 0; k < 2 * rank; k++) put_le(b, (uint64_t)dims[k % rank], 8); /* dims, then max dims */
}

/* A scalar variable-length UTF-8 string attribute: its string is global
 * heap object `index` of the collection at gcol. */
static void put_attr(msg_vec *v, const char *name, uint64_t len, uint64_t gcol, int index) {
  out *b = msg_new(v, 0x0C, 0);
  size_t nsz = strlen(name) + 1;
  put_le(b, 1, 1), put_le(b, 0, 1), put_le(b, nsz, 2), put_le(b, 20, 2), put_le(b, 8, 2);
  put(b, name, nsz);
  align8(b);
  put_type(b, &(h5_type){.cls = H5_CLASS_VSTRING, .size = 16});
  put_space(b, 0, NULL);
  put_le(b, len, 4), put_le(b, gcol, 8), put_le(b, (uint64_t)index, 4);
}

/* Writes an object header of the messages (freed) at an 8-aligned
 * address; returns it. */
static uint64_t put_header(out *b, msg_vec *v) {
  align8(b);
  uint64_t at = b->len, size = 0;
  for (size_t i = 0; i < v->len; i++) size += 8 + v->data[i].body.len;
  put_le(b, 1, 1), put_le(b, 0, 1), put_le(b, v->len, 2), put_le(b, 1, 4), put_le(b, size, 4), put_le(b, 0, 4);
  for (size_t i = 0; i < v->len; i++) {
    msg *m = &v->data[i];
    put_le(b, (uint64_t)m->type, 2), put_le(b, m->body.len, 2), put_le(b, (uint64_t)m->flags, 1), put_le(b, 0, 3);
    put(b, m->body.d, m->body.len);
    free(m->body.d);
  }
  vec_free(v);
  return at;
}

/* ---- the tree ---- */

typedef struct node {
  const h5w_object *o; /* NULL: the root, not listed */
  const char *name;    /* the last component ("" for the root) */
  int *kids;
  int n_kids, depth;
  uint64_t header, btree, heap; /* once written */
  int attr0;                    /* its first attribute's global heap index */
} node;

typedef struct writer {
  out b;
  node *nodes;
  int n_nodes;
  uint64_t gcol;
  h5_error *err;
} writer;

static bool fail(writer *w, const char *fmt, ...) CASTOR_PRINTF(2, 3);
static bool fail(writer *w, const char *fmt, ...) {
  w->err->off = 0;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(w->err->msg, sizeof w->err->msg, fmt, ap);
  va_end(ap);
  return false;
}

typedef struct kid {
  const char *name;
  int index;
} kid;
static int cmp_kid(const void *a, const void *b) { return strcmp(((const kid *)a)->name, ((const kid *)b)->name); }

/* A group's children by name (strcmp), as libhdf5 keeps them. */
static void sort_kids(writer *w, node *n) {
  kid *k = xcalloc((size_t)n->n_kids + 1, sizeof *k);
  for (int i = 0; i < n->n_kids; i++) k[i] = (kid){w->nodes[n->kids[i]].name, n->kids[i]};
  qsort(k, (size_t)n->n_kids, sizeof *k, cmp_kid);
  for (int i = 0; i < n->n_kids; i++) n->kids[i] = k[i].index;
  free(k);
}

static void put_attrs(writer *w, const node *n, msg_vec *v) {
  for (int i = 0; n->o && i < n->o->n_attrs; i++)
    put_attr(v, n->o->attrs[i].name, strlen(n->o->attrs[i].str), w->gcol, n->attr0 + i);
}

static void write_dataset(writer *w, node *n) {
  const h5w_object *o = n->o;
  int64_t numel = 1;
  for (int k = 0; k < o->rank; k++) numel *= o->dims[k];
  uint64_t bytes = (uint64_t)numel * o->type.size, addr = UNDEF;
  if (bytes) {
    align8(&w->b);
    addr = w->b.len;
    put(&w->b, o->data, (size_t)bytes);
  }
  msg_vec v = {0};
  put_space(msg_new(&v, 0x01, 0), o->rank, o->dims);
  put_type(msg_new(&v, 0x03, 1), &o->type);
  out *fill = msg_new(&v, 0x05, 1); /* version 2: allocated late, written if set, the default value */
  put_le(fill, 2, 1), put_le(fill, 2, 1), put_le(fill, 2, 1), put_le(fill, 1, 1), put_le(fill, 0, 4);
  out *lay = msg_new(&v, 0x08, 0);
  put_le(lay, 3, 1), put_le(lay, 1, 1), put_le(lay, addr, 8), put_le(lay, bytes, 8);
  align8(lay);
  put_attrs(w, n, &v);
  n->header = put_header(&w->b, &v);
}

static void write_object(writer *w, node *n);

/* The group's local heap, symbol table nodes and B-tree. */
static void write_group(writer *w, node *n) {
  for (int i = 0; i < n->n_kids; i++) write_object(w, &w->nodes[n->kids[i]]);
  /* local heap: "" at 0, then each name, 8-aligned */
  uint64_t *name_off = xcalloc((size_t)n->n_kids + 1, sizeof *name_off), size = 8;
  for (int i = 0; i < n->n_kids; i++) {
    name_off[i] = size;
    size += (strlen(w->nodes[n->kids[i]].name) + 1 + 7) & ~(size_t)7;
  }
  align8(&w->b);
  n->heap = w->b.len;
  /* no free block: libhdf5 marks that with 1 (H5HL_FREE_NULL), not the undefined address */
  put(&w->b, "HEAP", 4), put_le(&w->b, 0, 4), put_le(&w->b, size, 8), put_le(&w->b, 1, 8);
  put_le(&w->b, n->heap + 32, 8);
  size_t seg = grow(&w->b, (size_t)size);
  for (int i = 0; i < n->n_kids; i++) {
    const char *nm = w->nodes[n->kids[i]].name;
    memcpy(w->b.d + seg + name_off[i], nm, strlen(nm));
  }
  /* symbol table nodes of 2K entries */
  int n_snod = (n->n_kids + 2 * LEAF_K - 1) / (2 * LEAF_K);
  uint64_t *child = xcalloc((size_t)n_snod + 1, sizeof *child), *key = xcalloc((size_t)n_snod + 1, sizeof *key);
  for (int s = 0; s < n_snod; s++) {
    int first = s * 2 * LEAF_K, cnt = n->n_kids - first < 2 * LEAF_K ? n->n_kids - first : 2 * LEAF_K;
    child[s] = w->b.len;
    size_t at = grow(&w->b, SNOD_SIZE);
    memcpy(w->b.d + at, "SNOD", 4);
    w->b.d[at + 4] = 1;
    set_le(&w->b, at + 6, (uint64_t)cnt, 2);
    for (int e = 0; e < cnt; e++) {
      const node *k = &w->nodes[n->kids[first + e]];
      size_t p = at + 8 + (size_t)e * 40;
      set_le(&w->b, p, name_off[first + e], 8);
      set_le(&w->b, p + 8, k->header, 8);
      if (!k->o || !k->o->is_dataset) { /* cached: the child group's B-tree and heap */
        set_le(&w->b, p + 16, 1, 4);
        set_le(&w->b, p + 24, k->btree, 8);
        set_le(&w->b, p + 32, k->heap, 8);
      }
    }
    key[s] = name_off[first + cnt - 1];
  }
  /* B-tree levels: 2K children per node; keys: the last name of each child */
  int level = 0, n_level = n_snod;
  do {
    int n_nodes = n_level ? (n_level + 2 * NODE_K - 1) / (2 * NODE_K) : 1;
    uint64_t *up = xcalloc((size_t)n_nodes + 1, sizeof *up), *up_key = xcalloc((size_t)n_nodes + 1, sizeof *up_key);
    for (int t = 0; t < n_nodes; t++) {
      int first = t * 2 * NODE_K, cnt = n_level - first < 2 * NODE_K ? n_level - first : 2 * NODE_K;
      up[t] = w->b.len;
      size_t at = grow(&w->b, TREE_SIZE);
      memcpy(w->b.d + at, "TREE", 4);
      w->b.d[at + 4] = 0, w->b.d[at + 5] = (unsigned char)level;
      set_le(&w->b, at + 6, (uint64_t)cnt, 2);
      set_le(&w->b, at + 8, t ? up[t - 1] : UNDEF, 8);
      set_le(&w->b, at + 16, UNDEF, 8); /* the right sibling: patched below */
      if (t) set_le(&w->b, (size_t)up[t - 1] + 16, up[t], 8);
      for (int c = 0; c < cnt; c++) {
        set_le(&w->b, at + 24 + 16 * (size_t)c, c ? key[first + c - 1] : (first ? key[first - 1] : 0), 8);
        set_le(&w->b, at + 24 + 16 * (size_t)c + 8, child[first + c], 8);
      }
      set_le(&w->b, at + 24 + 16 * (size_t)cnt, cnt ? key[first + cnt - 1] : 0, 8);
      up_key[t] = cnt ? key[first + cnt - 1] : 0;
    }
    free(child), free(key);
    child = up, key = up_key, n_level = n_nodes, level++;
  } while (n_level > 1);
  n->btree = child[0];
  free(child), free(key), free(name_off);
  msg_vec v = {0};
  out *st = msg_new(&v, 0x11, 0);
  put_le(st, n->btree, 8), put_le(st, n->heap, 8);
  put_attrs(w, n, &v);
  n->header = put_header(&w->b, &v);
}

static void write_object(writer *w, node *n) {
  if (n->o && n->o->is_dataset) write_dataset(w, n);
  else write_group(w, n);
}

/* ---- checks ---- */

static bool check_object(writer *w, const h5w_object *o) {
  const char *p = o->path;
  if (!p || p[0] != '/') return fail(w, "object '%s': a path must start with '/'", p ? p : "(null)");
  if (strcmp(p, "/") != 0 && (strstr(p, "//") || p[strlen(p) - 1] == '/'))
    return fail(w, "object '%s': a path has no empty component and does not end in '/'", p);
  for (int i = 0; i < o->n_attrs; i++) {
    if (!o->attrs[i].name || !o->attrs[i].name[0] || !o->attrs[i].str)
      return fail(w, "object '%s': attribute %d has no name or value", p, i);
    if (strlen(o->attrs[i].name) > 65000) /* its message's size is 16 bits */
      return fail(w, "object '%s': attribute name of %zu bytes (at most 65000)", p, strlen(o->attrs[i].name));
  }
  if (!o->is_dataset) return true;
  if (!strcmp(p, "/")) return fail(w, "object '/': the root is a group");
  const h5_type *t = &o->type;
  bool ok = (t->cls == H5_CLASS_FLOAT && (t->size == 2 || t->size == 4 || t->size == 8)) ||
            (t->cls == H5_CLASS_INT && t->size >= 1 && t->size <= 8) || (t->cls == H5_CLASS_OPAQUE && t->size >= 1);
  if (!ok) return fail(w, "dataset '%s': a datatype h5_write does not write (class %d, %u bytes)", p, t->cls, t->size);
  if (o->rank < 0 || o->rank > H5_MAX_RANK) return fail(w, "dataset '%s': rank %d", p, o->rank);
  int64_t numel = 1, bytes;
  for (int k = 0; k < o->rank; k++)
    if (o->dims[k] < 0 || !size_mul_ok(numel, o->dims[k], &numel))
      return fail(w, "dataset '%s': dimension %d is negative or overflows", p, k);
  if (!size_mul_ok(numel, t->size, &bytes)) return fail(w, "dataset '%s': its size overflows", p);
  if (bytes && !o->data) return fail(w, "dataset '%s': no data", p);
  return true;
}

bool h5_write(const h5w_object *objs, int n, unsigned char **out_bytes, size_t *out_len, h5_error *err) {
  *out_bytes = NULL, *out_len = 0;
  writer w = {.err = err};
  if (n < 0 || n > H5_MAX_OBJECTS) return fail(&w, "%d objects (at most %d)", n, H5_MAX_OBJECTS);
  w.nodes = xcalloc((size_t)n + 1, sizeof *w.nodes);
  hmap by_path;
  hmap_init(&by_path, HMAP_STRINGS);
  bool ok = true;
  w.n_nodes = 1; /* node 0: the root */
  w.nodes[0].name = "";
  for (int i = 0; i < n && ok; i++) {
    const h5w_object *o = &objs[i];
    if (!(ok = check_object(&w, o))) break;
    if (hmap_get_str(&by_path, o->path, strlen(o->path)) || (!strcmp(o->path, "/") && w.nodes[0].o)) {
      ok = fail(&w, "object '%s' is listed twice", o->path);
      break;
    }
    if (!strcmp(o->path, "/")) {
      w.nodes[0].o = o;
      continue;
    }
    node *d = &w.nodes[w.n_nodes];
    d->o = o;
    d->name = strrchr(o->path, '/') + 1;
    hmap_put_str(&by_path, o->path, strlen(o->path), (void *)(intptr_t)(w.n_nodes + 1));
    w.n_nodes++;
  }
  /* parents: each listed group; children counted, then filled */
  int *parent = xcalloc((size_t)w.n_nodes + 1, sizeof *parent), *fill = xcalloc((size_t)w.n_nodes + 1, sizeof *fill);
  for (int i = 1; i < w.n_nodes && ok; i++) {
    const char *p = w.nodes[i].o->path;
    size_t plen = (size_t)(w.nodes[i].name - 1 - p);
    int j = plen ? (int)(intptr_t)hmap_get_str(&by_path, p, plen) - 1 : 0;
    if (j < 0) ok = fail(&w, "object '%s': its group '%.*s' is not listed", p, (int)plen, p);
    else if (w.nodes[j].o && w.nodes[j].o->is_dataset) ok = fail(&w, "object '%s': its parent is a dataset", p);
    else parent[i] = j, w.nodes[j].n_kids++;
  }
  for (int i = 0; i < w.n_nodes && ok; i++) w.nodes[i].kids = xcalloc((size_t)w.nodes[i].n_kids + 1, sizeof(int));
  for (int i = 1; i < w.n_nodes && ok; i++) {
    w.nodes[parent[i]].kids[fill[parent[i]]++] = i;
    for (int j = i, d = 0; j; j = parent[j])
      if (++d > H5_MAX_DEPTH) ok = fail(&w, "object '%s': nested more than %d deep", w.nodes[i].o->path, H5_MAX_DEPTH);
  }
  free(parent), free(fill);
  hmap_fini(&by_path);
  if (ok) {
    for (int i = 0; i < w.n_nodes; i++) sort_kids(&w, &w.nodes[i]);
    grow(&w.b, 96); /* the superblock, filled last */
    /* the global heap collection: every attribute's string */
    uint64_t used = 16;
    int idx = 1;
    for (int i = 0; i < w.n_nodes; i++) {
      w.nodes[i].attr0 = idx;
      for (int a = 0; w.nodes[i].o && a < w.nodes[i].o->n_attrs; a++, idx++)
        used += 16 + ((strlen(w.nodes[i].o->attrs[a].str) + 7) & ~(size_t)7);
    }
    if (idx > 65535) ok = fail(&w, "%d attributes (at most 65534)", idx - 1);
    if (ok && idx > 1) {
      uint64_t size = used + 16 < 4096 ? 4096 : used + 16;
      w.gcol = w.b.len;
      put(&w.b, "GCOL", 4), put_le(&w.b, 1, 4), put_le(&w.b, size, 8);
      for (int i = 0, k = 1; i < w.n_nodes; i++)
        for (int a = 0; w.nodes[i].o && a < w.nodes[i].o->n_attrs; a++, k++) {
          const char *s = w.nodes[i].o->attrs[a].str;
          put_le(&w.b, (uint64_t)k, 2), put_le(&w.b, 1, 2), put_le(&w.b, 0, 4), put_le(&w.b, strlen(s), 8);
          put(&w.b, s, strlen(s));
          align8(&w.b);
        }
      put_le(&w.b, 0, 8), put_le(&w.b, size - used, 8); /* object 0: the free space */
      grow(&w.b, (size_t)(size - used - 16));
    }
  }
  if (ok) {
    write_object(&w, &w.nodes[0]);
    static const unsigned char sig[8] = {0x89, 'H', 'D', 'F', '\r', '\n', 0x1a, '\n'};
    memcpy(w.b.d, sig, 8);
    w.b.d[13] = 8, w.b.d[14] = 8;
    set_le(&w.b, 16, LEAF_K, 2), set_le(&w.b, 18, NODE_K, 2);
    set_le(&w.b, 24, 0, 8), set_le(&w.b, 32, UNDEF, 8), set_le(&w.b, 40, w.b.len, 8), set_le(&w.b, 48, UNDEF, 8);
    /* the root's symbol table entry: name offset 0, header, cached B-tree and heap */
    set_le(&w.b, 56, 0, 8), set_le(&w.b, 64, w.nodes[0].header, 8), set_le(&w.b, 72, 1, 4);
    set_le(&w.b, 80, w.nodes[0].btree, 8), set_le(&w.b, 88, w.nodes[0].heap, 8);
  }
  for (int i = 0; i < w.n_nodes; i++) free(w.nodes[i].kids);
  free(w.nodes);
  if (!ok) {
    free(w.b.d);
    return false;
  }
  *out_bytes = w.b.d, *out_len = w.b.len;
  return true;
}
