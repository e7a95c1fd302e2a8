/*
 * atomic_file.h: replacing a file all at once. The new contents go to a
 * temporary file in the same directory (so rename(2) cannot cross a file
 * system), which is flushed, fsync'ed and renamed over the target; the
 * directory is fsync'ed after the rename. Readers see either the old file
 * or the complete new one, never a half-written file. On any error the
 * temporary file is removed and the old file is left untouched.
 *
 * Used by every writer of castor's training outputs (safetensors, history
 * CSV, SVG plot). Errors are reported through the sink as DIAG_KIND_IO
 * errors located at the target path (`OUT.csv: error: cannot write: ...`).
 *
 *   atomic_file af;
 *   if (!atomic_file_begin(&af, path, d)) return false;
 *   atomic_file_write(&af, bytes, n);          // any number of times
 *   return atomic_file_commit(&af, d);         // or atomic_file_abort(&af)
 *
 * A target that is not a regular file is never replaced: a symbolic link
 * to a regular file replaces the file it resolves to (the link stays); a
 * FIFO or a character device (/dev/null) is written through, without the
 * all-at-once guarantee; /dev/stdout, /dev/stderr and /dev/fd/N write to
 * that descriptor where it stands (a file the shell opened to append to
 * keeps its contents); a directory, a block device or a socket is refused. A temporary file left by a signal that ends
 * the process (SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE, SIGALRM, ...)
 * is removed before the process ends; SIGXFSZ is ignored from the first
 * save on, so a file-size limit is a write error.
 *
 * Write errors are sticky: atomic_file_write remembers the first errno and
 * atomic_file_commit reports it, so callers need not check every write.
 */
#ifndef CASTOR_ATOMIC_FILE_H
#define CASTOR_ATOMIC_FILE_H

#include "util/diag.h"

#include <stdio.h>

typedef struct atomic_file {
  FILE *f;        /* the temporary file; NULL once committed or aborted */
  char *path;     /* the target */
  char *tmp_path; /* ".castor-<pid>-<n>.tmp" beside it; NULL when written through */
  int err;        /* first errno of a failed write; 0 while all is well */
  int slot;       /* its registration for removal on a fatal signal, + 1; 0: none */
} atomic_file;

/* Checks, before the work whose result goes there, that path can be
 * written: it is not a directory or another kind of file that is refused,
 * a temporary file can be created beside it, and a new name can be
 * created. False, with the error begin or commit would give. */
bool atomic_file_check(const char *path, diag_sink *d);

/* Creates the temporary file (mode 0666 minus the umask, or the mode of
 * the existing target). False, with an error, when it cannot be created:
 * af is then empty (abort is a no-op). */
bool atomic_file_begin(atomic_file *af, const char *path, diag_sink *d);
/* Appends n bytes; returns false (and keeps the error for commit) when the
 * write fails. */
bool atomic_file_write(atomic_file *af, const void *data, size_t n);
bool atomic_file_printf(atomic_file *af, const char *fmt, ...) CASTOR_PRINTF(2, 3);
/* Flushes, fsyncs, closes and renames the temporary file over the target.
 * False, with an error, if any write or any of these steps failed; the
 * temporary file is then removed and the target is as it was. */
bool atomic_file_commit(atomic_file *af, diag_sink *d);
/* Removes the temporary file; the target stays as it was. Safe to call
 * after commit or on an empty af. */
void atomic_file_abort(atomic_file *af);

/* begin + write + commit of one buffer. */
bool atomic_file_write_all(const char *path, const void *data, size_t n, diag_sink *d);

#endif
