/*
 * atomic_file.c: write-to-temporary, fsync, rename (see atomic_file.h).
 *
 * The temporary name is the target's plus ".tmp.<pid>.<counter>", created
 * with O_EXCL so that two writers (two threads, two processes) never share
 * one. The directory is fsync'ed after the rename so the new name survives
 * a crash; a directory that cannot be opened for that (some file systems)
 * is not an error, as the data itself is already on disk.
 */
#include "util/atomic_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static atomic_uint tmp_counter;

static diag_loc at(const char *path) { return (diag_loc){path, 0, 0}; }

bool atomic_file_begin(atomic_file *af, const char *path, diag_sink *d) {
  *af = (atomic_file){0};
  struct stat st;
  bool exists = stat(path, &st) == 0;
  if (exists && S_ISDIR(st.st_mode)) {
    diag_error_kind(d, DIAG_KIND_IO, at(path), "cannot write: %s", strerror(EISDIR));
    return false;
  }
  str_buf name;
  str_buf_init(&name);
  int fd = -1;
  for (int attempt = 0; attempt < 100 && fd < 0; attempt++) {
    str_buf_clear(&name);
    str_buf_printf(&name, "%s.tmp.%ld.%u", path, (long)getpid(),
                   atomic_fetch_add(&tmp_counter, 1u));
    fd = open(str_buf_cstr(&name), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0 && errno != EEXIST) break;
  }
  if (fd < 0) {
    diag_error_kind(d, DIAG_KIND_IO, at(path), "cannot create a temporary file beside it: %s",
                    strerror(errno));
    str_buf_fini(&name);
    return false;
  }
  /* A replaced file keeps its permissions (best effort: not an error). */
  if (exists && S_ISREG(st.st_mode)) (void)fchmod(fd, st.st_mode & 07777);
  FILE *f = fdopen(fd, "wb");
  if (!f) {
    int e = errno;
    close(fd);
    unlink(str_buf_cstr(&name));
    diag_error_kind(d, DIAG_KIND_IO, at(path), "cannot write: %s", strerror(e));
    str_buf_fini(&name);
    return false;
  }
  af->f = f;
  af->path = xstrdup(path);
  af->tmp_path = str_buf_take(&name);
  return true;
}

bool atomic_file_write(atomic_file *af, const void *data, size_t n) {
  if (!af->f || af->err) return false;
  if (n == 0) return true;
  errno = 0;
  if (fwrite(data, 1, n, af->f) != n) {
    af->err = errno ? errno : EIO;
    return false;
  }
  return true;
}

bool atomic_file_printf(atomic_file *af, const char *fmt, ...) {
  str_buf b;
  str_buf_init(&b);
  va_list ap;
  va_start(ap, fmt);
  str_buf_vprintf(&b, fmt, ap);
  va_end(ap);
  bool ok = atomic_file_write(af, b.data, b.len);
  str_buf_fini(&b);
  return ok;
}

static void release(atomic_file *af) {
  free(af->path);
  free(af->tmp_path);
  *af = (atomic_file){0};
}

void atomic_file_abort(atomic_file *af) {
  if (!af->f) {
    release(af);
    return;
  }
  fclose(af->f);
  unlink(af->tmp_path);
  release(af);
}

/* fsync of the directory holding path, so that the rename is durable. */
static void sync_dir(const char *path) {
  const char *slash = strrchr(path, '/');
  char *dir = slash ? xstrdup(path) : xstrdup(".");
  if (slash) dir[slash == path ? 1 : slash - path] = 0;
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    (void)fsync(fd);
    close(fd);
  }
  free(dir);
}

bool atomic_file_commit(atomic_file *af, diag_sink *d) {
  if (!af->f) return false;
  int e = af->err;
  const char *step = "cannot write";
  errno = 0;
  if (!e && fflush(af->f) != 0) e = errno ? errno : EIO;
  if (!e && fsync(fileno(af->f)) != 0) e = errno;
  errno = 0;
  if (fclose(af->f) != 0 && !e) e = errno ? errno : EIO;
  af->f = NULL;
  if (!e && rename(af->tmp_path, af->path) != 0) e = errno, step = "cannot replace the file";
  if (e) {
    unlink(af->tmp_path);
    diag_error_kind(d, DIAG_KIND_IO, at(af->path), "%s: %s", step, strerror(e));
    release(af);
    return false;
  }
  sync_dir(af->path);
  release(af);
  return true;
}

bool atomic_file_write_all(const char *path, const void *data, size_t n, diag_sink *d) {
  atomic_file af;
  if (!atomic_file_begin(&af, path, d)) return false;
  atomic_file_write(&af, data, n);
  return atomic_file_commit(&af, d);
}
