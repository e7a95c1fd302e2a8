/*
 * atomic_file.c: write-to-temporary, fsync, rename (see atomic_file.h).
 *
 * The temporary file is ".castor-<pid>-<counter>.tmp" in the target's
 * directory: a short name of fixed form, so that it fits NAME_MAX whatever
 * the target's length (a 250-byte target name plus a suffix did not),
 * created with O_EXCL so that two writers (two threads, two processes)
 * never share one. The directory is fsync'ed after the rename so the new
 * name survives a crash; a directory that cannot be opened for that (some
 * file systems) is not an error, as the data itself is already on disk.
 *
 * Only a regular file (or a new name) is replaced. A symbolic link to a
 * regular file replaces the file it resolves to, the same way, and the
 * link stays. A FIFO or a character device (/dev/null, a terminal, and
 * /dev/stdout, a link to one) is written through, since renaming over it
 * would replace the node itself; any other kind of file is refused.
 *
 * Live temporary names are registered for every catchable signal that
 * ends a process (cleanup_signals): a handler (installed where the
 * signal's action was the default) unlinks them and re-raises the signal,
 * so an interrupted run leaves none behind. SIGXFSZ is ignored instead.
 */
#include "util/atomic_file.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static atomic_uint tmp_counter;

static diag_loc at(const char *path) { return (diag_loc){path, 0, 0}; }

/* ---- temporary names removed on a fatal signal ---- */

enum { LIVE_MAX = 16 }; /* writers open at once; more go unregistered */
static _Atomic(char *) live[LIVE_MAX];
static atomic_flag handlers_installed = ATOMIC_FLAG_INIT;
/* Every signal whose default action ends the process and that a handler
 * can catch (the crashes, SIGSEGV and the like, are a bug's, and left to
 * the sanitizers' and debuggers' handlers). SIGXFSZ is not among them: it
 * is ignored instead, so that a file-size limit (ulimit -f) makes write()
 * fail with EFBIG, an error the commit reports. */
static const int cleanup_signals[] = {SIGINT, SIGTERM, SIGHUP,    SIGQUIT,   SIGPIPE, SIGALRM,
                                      SIGUSR1, SIGUSR2, SIGXCPU, SIGVTALRM, SIGPROF};

/* Async-signal-safe: unlink and raise only. SA_RESETHAND restored the
 * default action, so the re-raised signal ends the process on return. */
static void on_fatal_signal(int sig) {
  int saved = errno;
  for (int i = 0; i < LIVE_MAX; i++) {
    char *p = atomic_load(&live[i]);
    if (p) unlink(p);
  }
  errno = saved;
  raise(sig);
}

static void install_handlers(void) {
  if (atomic_flag_test_and_set(&handlers_installed)) return;
  struct sigaction xfsz;
  if (sigaction(SIGXFSZ, NULL, &xfsz) == 0 && xfsz.sa_handler == SIG_DFL) signal(SIGXFSZ, SIG_IGN);
  for (size_t i = 0; i < sizeof cleanup_signals / sizeof *cleanup_signals; i++) {
    struct sigaction old;
    if (sigaction(cleanup_signals[i], NULL, &old) != 0 || old.sa_handler != SIG_DFL) continue;
    struct sigaction sa = {0};
    sa.sa_handler = on_fatal_signal;
    sa.sa_flags = SA_RESETHAND;
    sigemptyset(&sa.sa_mask);
    (void)sigaction(cleanup_signals[i], &sa, NULL);
  }
}

/* Registers name; returns its slot + 1, or 0 when every slot is taken. */
static int live_add(char *name) {
  install_handlers();
  for (int i = 0; i < LIVE_MAX; i++) {
    char *expect = NULL;
    if (atomic_compare_exchange_strong(&live[i], &expect, name)) return i + 1;
  }
  return 0;
}

static void live_remove(int slot) {
  if (slot > 0) atomic_store(&live[slot - 1], NULL);
}

/* ---- what the target is ---- */

typedef enum { TARGET_NEW, TARGET_REGULAR, TARGET_THROUGH, TARGET_BAD } target_kind;

/* How path is written; false with errno set when it cannot be at all. */
static target_kind target_of(const char *path, struct stat *st, int *out_err) {
  struct stat lst;
  *out_err = 0;
  bool link = lstat(path, &lst) == 0 && S_ISLNK(lst.st_mode);
  if (stat(path, st) != 0) {
    if (link) return TARGET_THROUGH; /* a dangling link: create its target */
    return TARGET_NEW;
  }
  if (S_ISDIR(st->st_mode)) return *out_err = EISDIR, TARGET_BAD;
  if (S_ISFIFO(st->st_mode) || S_ISCHR(st->st_mode) || (link && S_ISREG(st->st_mode))) return TARGET_THROUGH;
  if (!S_ISREG(st->st_mode)) return TARGET_BAD;
  return TARGET_REGULAR;
}

static void bad_target(const char *path, int err, diag_sink *d) {
  if (err) diag_error_kind(d, DIAG_KIND_IO, at(path), "cannot write: %s", strerror(err));
  else
    diag_error_kind(d, DIAG_KIND_IO, at(path),
                    "cannot write: not a regular file, a FIFO or a character device (it is left as it is)");
}

/* The directory part of path ("." when none), malloc'ed. */
static char *dir_of(const char *path) {
  const char *slash = strrchr(path, '/');
  char *dir = slash ? xstrdup(path) : xstrdup(".");
  if (slash) dir[slash == path ? 1 : slash - path] = 0;
  return dir;
}

/* Creates a fresh temporary file beside path; -1 with errno on failure. */
static int create_tmp(const char *path, str_buf *name) {
  char *dir = dir_of(path);
  int fd = -1;
  for (int attempt = 0; attempt < 100 && fd < 0; attempt++) {
    str_buf_clear(name);
    str_buf_printf(name, "%s/.castor-%ld-%u.tmp", dir, (long)getpid(), atomic_fetch_add(&tmp_counter, 1u));
    fd = open(str_buf_cstr(name), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0 && errno != EEXIST) break;
  }
  int e = errno;
  free(dir);
  errno = e;
  return fd;
}

bool atomic_file_check(const char *path, diag_sink *d) {
  struct stat st;
  int err;
  target_kind k = target_of(path, &st, &err);
  if (k == TARGET_BAD) return bad_target(path, err, d), false;
  if (k == TARGET_THROUGH) {
    if (access(path, W_OK) == 0 || errno == ENOENT) return true;
    diag_error_kind(d, DIAG_KIND_IO, at(path), "cannot write: %s", strerror(errno));
    return false;
  }
  str_buf name;
  str_buf_init(&name);
  int fd = create_tmp(path, &name);
  if (fd < 0) {
    diag_error_kind(d, DIAG_KIND_IO, at(path), "cannot create a temporary file beside it: %s", strerror(errno));
    str_buf_fini(&name);
    return false;
  }
  close(fd);
  unlink(str_buf_cstr(&name));
  str_buf_fini(&name);
  if (k == TARGET_NEW) { /* the name itself: too long, or not allowed here */
    fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0 && errno != EEXIST) {
      diag_error_kind(d, DIAG_KIND_IO, at(path), "cannot create the file: %s", strerror(errno));
      return false;
    }
    if (fd >= 0) close(fd), unlink(path);
  }
  return true;
}

/* The descriptor a path names in this process ("/dev/stdout", "/dev/stderr",
 * "/dev/fd/N", "/proc/self/fd/N"), or -1. Writing to such a path means
 * writing to that descriptor where the shell left it (a file it opened to
 * append to, a pipe): opening the path anew would start at offset 0 and,
 * with O_TRUNC, empty the file. */
static int own_descriptor(const char *path) {
  if (strcmp(path, "/dev/stdout") == 0) return 1;
  if (strcmp(path, "/dev/stderr") == 0) return 2;
  const char *n = strncmp(path, "/dev/fd/", 8) == 0 ? path + 8 : strncmp(path, "/proc/self/fd/", 14) == 0 ? path + 14 : NULL;
  if (!n || !*n) return -1;
  long v = 0;
  for (; *n; n++) {
    if (*n < '0' || *n > '9' || v > 1 << 20) return -1;
    v = v * 10 + (*n - '0');
  }
  return (int)v;
}

bool atomic_file_begin(atomic_file *af, const char *path, diag_sink *d) {
  *af = (atomic_file){0};
  struct stat st, lst;
  int err;
  target_kind k = target_of(path, &st, &err);
  if (k == TARGET_BAD) return bad_target(path, err, d), false;
  if (k == TARGET_THROUGH && S_ISREG(st.st_mode) && lstat(path, &lst) == 0 && S_ISLNK(lst.st_mode)) {
    /* a link to a regular file: the file it resolves to is replaced as a
     * whole (all or nothing), and the link stays */
    char *real = realpath(path, NULL);
    /* /dev/stdout and /dev/fd/N lead through /proc/self/fd to whatever the
     * descriptor is: a file the shell opened (maybe to append to) is
     * written through, never replaced */
    if (real && (strncmp(path, "/dev/", 5) == 0 || strncmp(real, "/proc/", 6) == 0)) free(real), real = NULL;
    if (real) {
      bool ok = atomic_file_begin(af, real, d);
      free(real);
      return ok;
    }
  }
  if (k == TARGET_THROUGH) {
    int own = own_descriptor(path);
    int fd = own >= 0 ? fcntl(own, F_DUPFD_CLOEXEC, 3)
                      : open(path, O_WRONLY | O_CREAT | O_NOCTTY | O_CLOEXEC | (S_ISREG(st.st_mode) ? O_TRUNC : 0), 0666);
    FILE *f = fd >= 0 ? fdopen(fd, "wb") : NULL;
    if (!f) {
      int e = errno;
      if (fd >= 0) close(fd);
      diag_error_kind(d, DIAG_KIND_IO, at(path), "cannot write: %s", strerror(e));
      return false;
    }
    af->f = f;
    af->path = xstrdup(path);
    return true;
  }
  str_buf name;
  str_buf_init(&name);
  int fd = create_tmp(path, &name);
  if (fd < 0) {
    diag_error_kind(d, DIAG_KIND_IO, at(path), "cannot create a temporary file beside it: %s",
                    strerror(errno));
    str_buf_fini(&name);
    return false;
  }
  /* A replaced file keeps its permissions (best effort: not an error). */
  if (k == TARGET_REGULAR) (void)fchmod(fd, st.st_mode & 07777);
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
  af->slot = live_add(af->tmp_path);
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
  live_remove(af->slot);
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
  if (af->tmp_path) unlink(af->tmp_path);
  release(af);
}

/* fsync of the directory holding path, so that the rename is durable. */
static void sync_dir(const char *path) {
  char *dir = dir_of(path);
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
  if (!e && af->tmp_path && fsync(fileno(af->f)) != 0) e = errno;
  errno = 0;
  if (fclose(af->f) != 0 && !e) e = errno ? errno : EIO;
  af->f = NULL;
  if (!af->tmp_path) { /* written through: nothing to rename */
    if (e) diag_error_kind(d, DIAG_KIND_IO, at(af->path), "%s: %s", step, strerror(e));
    release(af);
    return !e;
  }
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
