/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_hdf5.c: the HDF5 subset reader (formats/hdf5.c) on arbitrary bytes.
 * Invariants: success xor an error with a message; every dataset's data
 * inside the file with nbytes = numel x element size (read whole, so ASan
 * sees an overrun); paths unique, parents before children, found by
 * h5_find; every attribute string NUL-terminated (read whole).
 * The writer (formats/hdf5_write.c) under the same inputs: every file the
 * reader accepts whose attributes are strings and whose datasets are not
 * strings is written again with h5_write, which must succeed, and read
 * back: the same objects, types, shapes, data and attributes.
 */
#include "tests/fuzz/fuzz.h"

#include <stdlib.h>
#include <string.h>

#include "formats/hdf5.h"

static void rewrite(const h5_file *f) {
  h5w_object *w = calloc((size_t)f->n_objects + 1, sizeof *w);
  h5w_attr *attrs = NULL;
  int n_attrs = 0;
  for (int i = 0; i < f->n_objects; i++) n_attrs += f->objects[i].n_attrs;
  attrs = calloc((size_t)n_attrs + 1, sizeof *attrs);
  int a = 0;
  if (f->n_objects == 0 || f->objects[0].is_dataset) goto out; /* the writer's root is a group */
  for (int i = 0; i < f->n_objects; i++) {
    const h5_object *o = &f->objects[i];
    if (o->is_dataset && o->type.cls != H5_CLASS_FLOAT && o->type.cls != H5_CLASS_INT && o->type.cls != H5_CLASS_OPAQUE)
      goto out; /* a string dataset: outside what the writer writes */
    if (o->is_dataset && o->type.cls == H5_CLASS_OPAQUE && o->type.size == 0) goto out;
    w[i] = (h5w_object){.path = o->path, .is_dataset = o->is_dataset, .attrs = attrs + a, .n_attrs = o->n_attrs,
                        .type = o->type, .rank = o->rank, .data = o->data};
    memcpy(w[i].dims, o->dims, sizeof w[i].dims);
    for (int k = 0; k < o->n_attrs; k++, a++) {
      if (!o->attrs[k].str || strlen(o->attrs[k].name) > 65000) goto out; /* numeric, or a name past the writer's */
      attrs[a] = (h5w_attr){o->attrs[k].name, o->attrs[k].str};
    }
  }
  unsigned char *bytes;
  size_t len;
  h5_error err = {0};
  if (!h5_write(w, f->n_objects, &bytes, &len, &err)) fuzz_fail("h5_write refused what h5_open read", err.msg);
  h5_file g;
  if (!h5_open(&g, bytes, len, &err)) fuzz_fail("h5_open refused what h5_write wrote", err.msg);
  if (g.n_objects != f->n_objects) fuzz_fail("the rewritten file has another number of objects", "");
  for (int i = 0; i < f->n_objects; i++) {
    const h5_object *o = &f->objects[i], *r = h5_find(&g, o->path);
    if (!r || r->is_dataset != o->is_dataset) fuzz_fail("an object lost in the rewrite", o->path);
    for (int k = 0; k < o->n_attrs; k++) {
      const char *v = h5_attr_str(r, o->attrs[k].name);
      if (!v || strcmp(v, h5_attr_str(o, o->attrs[k].name)) != 0) fuzz_fail("an attribute lost in the rewrite", o->path);
    }
    if (!o->is_dataset) continue;
    if (r->type.cls != o->type.cls || r->type.size != o->type.size || r->rank != o->rank || r->nbytes != o->nbytes ||
        (o->type.cls == H5_CLASS_INT && r->type.is_signed != o->type.is_signed) ||
        memcmp(r->dims, o->dims, (size_t)o->rank * sizeof *o->dims) != 0 ||
        (o->nbytes && memcmp(r->data, o->data, (size_t)o->nbytes) != 0))
      fuzz_fail("a dataset changed in the rewrite", o->path);
  }
  h5_fini(&g);
  free(bytes);
out:
  free(w), free(attrs);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  h5_file f;
  h5_error err = {0};
  if (!h5_open(&f, data, size, &err)) {
    if (!err.msg[0]) fuzz_fail("an error without a message", "");
    return 0;
  }
  unsigned sum = 0;
  for (int i = 0; i < f.n_objects; i++) {
    const h5_object *o = &f.objects[i];
    if (h5_find(&f, o->path) != o) fuzz_fail("a path h5_find does not find first", o->path);
    if (i > 0) {
      const char *slash = strrchr(o->path, '/');
      char parent[4096];
      size_t n = slash == o->path ? 1 : (size_t)(slash - o->path);
      if (!slash || n >= sizeof parent) fuzz_fail("a path without a parent", o->path);
      memcpy(parent, o->path, n), parent[n] = 0;
      const h5_object *p = h5_find(&f, parent);
      if (!p || p >= o || p->is_dataset) fuzz_fail("a child before its group", o->path);
    }
    for (int k = 0; k < o->n_attrs; k++) {
      sum += (unsigned)strlen(o->attrs[k].name);
      if (o->attrs[k].str) sum += (unsigned)strlen(o->attrs[k].str);
    }
    if (!o->is_dataset) continue;
    int64_t numel = 1;
    for (int k = 0; k < o->rank; k++) numel *= o->dims[k];
    if (o->nbytes != numel * (int64_t)o->type.size) fuzz_fail("nbytes is not numel x size", o->path);
    if (o->nbytes && (!o->data || (const uint8_t *)o->data < data ||
                      (const uint8_t *)o->data + o->nbytes > data + size))
      fuzz_fail("a dataset outside the file", o->path);
    for (int64_t k = 0; k < o->nbytes; k++) sum += ((const uint8_t *)o->data)[k];
  }
  rewrite(&f);
  h5_fini(&f);
  return (int)(sum & 0);
}
