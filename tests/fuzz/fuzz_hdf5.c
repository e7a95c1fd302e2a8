/*
 * fuzz_hdf5.c: the HDF5 subset reader (formats/hdf5.c) on arbitrary bytes.
 * Invariants: success xor an error with a message; every dataset's data
 * inside the file with nbytes = numel x element size (read whole, so ASan
 * sees an overrun); paths unique, parents before children, found by
 * h5_find; every attribute string NUL-terminated (read whole).
 */
#include "tests/fuzz/fuzz.h"

#include <string.h>

#include "formats/hdf5.h"

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
  h5_fini(&f);
  return (int)(sum & 0);
}
