/*
 * fe_load.c: the frontend seam (frontend.h). Reads the model file once,
 * looks at its first bytes (fe_sniff) and hands the bytes to the frontend
 * of that format. The API and the CLI load models only through here, so a
 * new frontend is a folder beside cast/, a row in fe_sniff and a case in
 * load_bytes.
 *
 * The whole file is read before sniffing because .cast may come from a
 * pipe, which cannot be peeked and read again; the one limit
 * (FE_MAX_MODEL_BYTES) is .cast's. A binary frontend with larger files
 * (Keras archives) will sniff from the first bytes of a regular file and
 * set its own limit.
 */
#include "frontend/frontend.h"

#include "frontend/cast/cast.h"
#include "frontend/onnx/onnx_frontend.h"

#include <stdlib.h>
#include <string.h>

void fe_options_init(fe_options *o) { *o = (fe_options){0}; }

fe_format fe_sniff(const void *bytes, size_t len) {
  const unsigned char *b = bytes;
  static const unsigned char zip[] = {'P', 'K', 3, 4};
  static const unsigned char hdf5[] = {0x89, 'H', 'D', 'F', '\r', '\n', 0x1a, '\n'};
  if (len >= sizeof zip && memcmp(b, zip, sizeof zip) == 0) return FE_FORMAT_KERAS;
  if (len >= sizeof hdf5 && memcmp(b, hdf5, sizeof hdf5) == 0) return FE_FORMAT_KERAS;
  if (len >= 1 && b[0] == 0x08) return FE_FORMAT_ONNX;
  return FE_FORMAT_CAST;
}

/* A format castor recognizes but has no frontend for yet. */
static ir_graph *unsupported(const char *name, const char *what, diag_sink *d) {
  diag_error_kind(d, DIAG_KIND_UNSUPPORTED, (diag_loc){name, 0, 0},
                  "'%s' is %s; castor reads only .cast models so far (that frontend is not "
                  "supported yet)",
                  name, what);
  return NULL;
}

static ir_graph *load_bytes(const char *name, const char *bytes, size_t len, const fe_options *o,
                            diag_sink *d, fe_train_defaults *out_defaults) {
  fe_options defaults;
  if (!o) fe_options_init(&defaults), o = &defaults;
  fe_train_defaults td = {0};
  ir_graph *g = NULL;
  switch (fe_sniff(bytes, len)) {
  case FE_FORMAT_CAST: g = fe_cast_load(name, bytes, len, o, d, &td); break;
  case FE_FORMAT_KERAS:
    g = unsupported(name, "a Keras model (a ZIP or HDF5 file: .keras or .h5)", d);
    break;
  case FE_FORMAT_ONNX: g = fe_onnx_load(name, bytes, len, o, d, &td); break;
  }
  if (out_defaults) *out_defaults = td;
  return g;
}

ir_graph *fe_load_mem(const char *name, const char *bytes, size_t len, const fe_options *o,
                      diag_sink *d, fe_train_defaults *out_defaults) {
  return load_bytes(name, bytes, len, o, d, out_defaults);
}

ir_graph *fe_load(const char *path, const fe_options *o, diag_sink *d,
                  fe_train_defaults *out_defaults) {
  if (out_defaults) *out_defaults = (fe_train_defaults){0};
  char *text;
  size_t len;
  str_buf why;
  str_buf_init(&why);
  if (!str_read_file_max(path, FE_MAX_MODEL_BYTES, &text, &len, &why)) {
    diag_error_kind(d, DIAG_KIND_IO, (diag_loc){0}, "cannot read model file '%s': %s", path,
                    str_buf_cstr(&why));
    str_buf_fini(&why);
    return NULL;
  }
  str_buf_fini(&why);
  ir_graph *g = load_bytes(path, text, len, o, d, out_defaults);
  free(text);
  return g;
}
