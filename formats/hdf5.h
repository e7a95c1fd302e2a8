/*
 * hdf5.h: a reader of the subset of HDF5 that h5py writes for Keras
 * (model.weights.h5 inside a .keras archive), over bytes in memory.
 * Own code rather than libhdf5, whose ~40 shared libraries and stream of
 * CVEs for malformed files do not belong in a compiler (libhdf5, through
 * h5py, is the test oracle only).
 *
 * The subset: superblock version 0 (offsets and lengths of 8 bytes, or 4);
 * version 1 object headers with continuation blocks; old-style groups (a
 * symbol table message: a version 1 B-tree of symbol table nodes, names in
 * a local heap); datasets with a version 1 or 2 dataspace, contiguous
 * storage (layout message version 3) and no filters; datatypes IEEE float
 * (little-endian, 2, 4 or 8 bytes), integers (little-endian, 1 to 8 bytes),
 * opaque (Keras stores bfloat16 as an opaque 2-byte type with the attribute
 * dtype="bfloat16"), fixed-length and variable-length strings (the latter
 * in the global heap); attributes (message versions 1 to 3) of those types.
 * Anything else (a chunked, compact or filtered dataset, a new-style group,
 * a shared message, a superblock of another version, big-endian data...) is
 * an error that names the object and the feature.
 *
 * Every offset and size is checked against the buffer before use, every
 * object header is read once (a group reachable twice is refused as a
 * cycle), and the tree is capped in depth and size, so no input makes it
 * read out of bounds, loop or run out of memory.
 */
#ifndef CASTOR_FORMATS_HDF5_H
#define CASTOR_FORMATS_HDF5_H

#include "util/util.h"

enum { H5_MAX_RANK = 32, H5_MAX_OBJECTS = 1 << 16, H5_MAX_DEPTH = 32 };

typedef enum h5_class {
  H5_CLASS_INT,     /* size 1..8, signed or not */
  H5_CLASS_FLOAT,   /* IEEE binary16/32/64 */
  H5_CLASS_OPAQUE,  /* size bytes, tag */
  H5_CLASS_STRING,  /* fixed length: size bytes per element */
  H5_CLASS_VSTRING, /* variable-length string, decoded from the global heap */
} h5_class;

typedef struct h5_type {
  h5_class cls;
  uint32_t size; /* bytes per element in the file */
  bool is_signed;
} h5_type;

typedef struct h5_attr {
  const char *name;
  h5_type type;
  int rank;
  int64_t dims[H5_MAX_RANK];
  const char *str; /* a scalar or one-element string attribute: its value; else NULL */
} h5_attr;

typedef struct h5_object {
  const char *path; /* "/" for the root, "/layers/dense/vars/0" */
  bool is_dataset;
  h5_attr *attrs;
  int n_attrs;
  /* datasets */
  h5_type type;
  int rank;
  int64_t dims[H5_MAX_RANK];
  int64_t nbytes;     /* numel * type.size */
  const void *data;   /* inside the file's buffer; NULL when nbytes is 0 */
  uint64_t data_off;
} h5_object;

typedef struct h5_file {
  h5_object *objects; /* groups and datasets, parents before children, children by name */
  int n_objects;
  arena *arena;       /* paths, attributes */
  hmap by_path;       /* path -> its object: h5_find in constant time */
} h5_file;

typedef struct h5_error {
  uint64_t off;   /* byte offset in the file */
  char msg[400];  /* names the object: "dataset '/a/b': chunked storage is not supported ..." */
} h5_error;

/* Reads the structure of data[0..len) (which must outlive *f: datasets
 * point into it). On failure returns false with *err filled; *f then needs
 * no h5_fini. */
bool h5_open(h5_file *f, const void *data, size_t len, h5_error *err);
void h5_fini(h5_file *f);
const h5_object *h5_find(const h5_file *f, const char *path);
/* The value of a string attribute of o, or NULL. */
const char *h5_attr_str(const h5_object *o, const char *name);

/* ---- write (hdf5_write.c) ---- */

/* A scalar variable-length UTF-8 string attribute, as h5py writes a str. */
typedef struct h5w_attr {
  const char *name;
  const char *str;
} h5w_attr;

typedef struct h5w_object {
  const char *path; /* "/" for the root (may be left out), "/layers/dense/vars/0" */
  bool is_dataset;
  const h5w_attr *attrs;
  int n_attrs;
  /* datasets */
  h5_type type;     /* H5_CLASS_FLOAT (2, 4, 8 bytes), H5_CLASS_INT (1..8), H5_CLASS_OPAQUE (no tag) */
  int rank;
  int64_t dims[H5_MAX_RANK];
  const void *data; /* numel * type.size bytes, little-endian, row-major */
} h5w_object;

/* Lays the objects out as an HDF5 file of the subset h5_open reads
 * (superblock 0, v1 object headers, symbol-table groups with v1 B-trees
 * and local heaps, contiguous datasets, string attributes in the global
 * heap; hdf5_write.c has the layout) into a fresh buffer (*out, *out_len;
 * the caller frees). Objects may come in any order; every group on a path
 * must be listed but the root. A bad list (a path twice, a missing
 * group, a dataset's type outside the subset, ...) is an error naming the
 * object, with nothing written. */
bool h5_write(const h5w_object *objs, int n, unsigned char **out, size_t *out_len, h5_error *err);

#endif
