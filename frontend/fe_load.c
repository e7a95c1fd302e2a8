/*
 * fe_load.c: the frontend seam (frontend.h). Reads the model file once,
 * looks at its first bytes (fe_sniff) and hands the bytes to the frontend
 * of that format. The API and the CLI load models only through here, so a
 * new frontend is a folder beside cast/, a row in fe_sniff and a case in
 * load_bytes.
 *
 * Each frontend has its own size limit: .cast text FE_MAX_MODEL_BYTES, a
 * Keras archive FE_MAX_KERAS_BYTES, an ONNX file ONNX_MAX_FILE_BYTES. The limit of a regular file is chosen
 * by sniffing its first bytes; a pipe cannot be peeked and read again, so
 * it is read whole under .cast's limit before sniffing.
 */
#include "frontend/frontend.h"

#include "formats/hdf5.h"
#include "formats/onnx.h"

#include "frontend/cast/cast.h"
#include "frontend/onnx/onnx_frontend.h"
#include "frontend/keras/keras.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

void fe_options_init(fe_options *o) { *o = (fe_options){0}; }

fe_format fe_sniff(const void *bytes, size_t len) {
  const unsigned char *b = bytes;
  static const unsigned char zip[] = {'P', 'K', 3, 4};
  static const unsigned char empty_zip[] = {'P', 'K', 5, 6}; /* only an end record */
  static const unsigned char hdf5[] = {0x89, 'H', 'D', 'F', '\r', '\n', 0x1a, '\n'};
  if (len >= sizeof zip && memcmp(b, zip, sizeof zip) == 0) return FE_FORMAT_KERAS;
  if (len >= sizeof empty_zip && memcmp(b, empty_zip, sizeof empty_zip) == 0) return FE_FORMAT_KERAS;
  if (len >= sizeof hdf5 && memcmp(b, hdf5, sizeof hdf5) == 0) return FE_FORMAT_KERAS;
  if (len >= 1 && b[0] == 0x08) return FE_FORMAT_ONNX;
  return FE_FORMAT_CAST;
}

/* An HDF5 file is refused with how to re-save it; a legacy Keras model
 * (the model_config attribute Keras 2's and Keras 3's legacy .h5 saver
 * write) is named as one, with the Keras version that wrote it. */
static void legacy_h5(const char *name, const char *bytes, size_t len, diag_sink *d) {
  static const char resave[] = "castor reads Keras 3 .keras archives (in Keras 3: "
                               "keras.models.load_model(\"model.h5\").save(\"model.keras\"))";
  h5_file f;
  h5_error e;
  bool opened = h5_open(&f, bytes, len, &e);
  const h5_object *root = opened ? h5_find(&f, "/") : NULL;
  const char *version = root && h5_attr_str(root, "model_config") ? h5_attr_str(root, "keras_version") : NULL;
  if (root && h5_attr_str(root, "model_config"))
    diag_error_kind(d, DIAG_KIND_UNSUPPORTED, (diag_loc){name, 0, 0},
                    "'%s' is a legacy Keras .h5 model (its model_config attribute; written by Keras %s); %s",
                    name, version ? version : "of an unknown version", resave);
  else
    diag_error_kind(d, DIAG_KIND_UNSUPPORTED, (diag_loc){name, 0, 0},
                    "'%s' is an HDF5 file: a legacy Keras (.h5) model or a weights file; %s", name, resave);
  if (opened) h5_fini(&f);
}

static ir_graph *load_bytes(const char *name, const char *bytes, size_t len, const fe_options *o,
                            diag_sink *d, fe_train_defaults *out_defaults) {
  fe_options defaults;
  if (!o) fe_options_init(&defaults), o = &defaults;
  fe_train_defaults td = {0};
  ir_graph *g = NULL;
  /* the bytes decide, but a file named .onnx that is no zip or HDF5 file is
   * read as ONNX whatever its first byte (a writer that puts another field
   * first, a damaged file): its errors are then the protobuf reader's */
  fe_format f = fe_sniff(bytes, len);
  size_t nl = strlen(name);
  if (f == FE_FORMAT_CAST && nl >= 5 && strcmp(name + nl - 5, ".onnx") == 0) f = FE_FORMAT_ONNX;
  switch (f) {
  case FE_FORMAT_CAST: g = fe_cast_load(name, bytes, len, o, d, &td); break;
  case FE_FORMAT_KERAS:
    if (len >= 2 && bytes[0] == 'P')
      g = fe_keras_load(name, bytes, len, o, d, &td);
    else
      legacy_h5(name, bytes, len, d);
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

/* The folder of the regular file open at fd, where its external data lies:
 * the directory of the path the kernel knows it by (/proc/self/fd), so that
 * /dev/stdin redirected from a file, or a link to a model, gives the folder
 * the file is in, not /dev or the link's; NULL if unknown (caller frees). */
static char *folder_of_fd(int fd, const char *path) {
  char link[64], buf[PATH_MAX];
  snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
  ssize_t n = readlink(link, buf, sizeof buf - 1);
  if (n > 0 && buf[0] == '/') buf[n] = 0;
  else if (!realpath(path, buf)) return NULL;
  char *slash = strrchr(buf, '/');
  if (slash == buf) slash++; /* a file in / */
  *slash = 0;
  return xstrdup(buf);
}

ir_graph *fe_load(const char *path, const fe_options *o, diag_sink *d,
                  fe_train_defaults *out_defaults) {
  if (out_defaults) *out_defaults = (fe_train_defaults){0};
  fe_options opts;
  if (o) opts = *o;
  else fe_options_init(&opts);
  char *text = NULL, *dir = NULL;
  size_t len;
  str_buf why;
  str_buf_init(&why);
  int64_t limit = FE_MAX_MODEL_BYTES;
  struct stat st;
  /* O_NONBLOCK: opening a FIFO with no writer, or a device, must not hang;
   * it is cleared again before a pipe is read */
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  bool ok = fd >= 0 && fstat(fd, &st) == 0;
  if (ok) {
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0) fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
  }
  if (ok && S_ISREG(st.st_mode)) {
    unsigned char head[8];
    ssize_t n = pread(fd, head, sizeof head, 0);
    fe_format fmt = fe_sniff(head, n > 0 ? (size_t)n : 0);
    if (fmt == FE_FORMAT_KERAS) limit = FE_MAX_KERAS_BYTES;
    if (fmt == FE_FORMAT_ONNX) limit = ONNX_MAX_FILE_BYTES;
    /* only a regular file has a folder: a model from a pipe has no external data */
    opts.dir = dir = folder_of_fd(fd, path);
  } else if (ok) {
    opts.dir = NULL;
  }
  if (!ok) str_buf_puts(&why, strerror(errno));
  else ok = str_read_fd_max(fd, limit, &text, &len, &why);
  if (fd >= 0) close(fd);
  if (!ok) {
    diag_error_kind(d, DIAG_KIND_IO, (diag_loc){0}, "cannot read model file '%s': %s", path,
                    str_buf_cstr(&why));
    str_buf_fini(&why);
    free(dir);
    return NULL;
  }
  str_buf_fini(&why);
  ir_graph *g = load_bytes(path, text, len, &opts, d, out_defaults);
  free(text);
  free(dir);
  return g;
}
