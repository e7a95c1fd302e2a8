/*
 * check_atomic_file.c: Check suite of util/atomic_file: a committed file
 * has the new contents and no temporary file is left beside it; after a
 * failed write (a file-size limit, a target that is a directory, a missing
 * directory, an abort) the old file is byte-identical and no temporary file
 * is left either. A FIFO, /dev/null and a symbolic link are written
 * through, never replaced; a long legal name works; atomic_file_check
 * refuses what commit would; every fatal signal before the commit leaves
 * no temporary file, and a file-size limit is a write error, not SIGXFSZ.
 */
#include "util/atomic_file.h"

#include "tests/unit/test_support.h"
#include "tests/unit/tmpdir_fixture.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>

static void assert_contents(const char *path, const char *want) {
  char *data;
  size_t len;
  ck_assert_msg(str_read_file(path, &data, &len), "%s: %s", path, strerror(errno));
  ck_assert_msg(len == strlen(want) && memcmp(data, want, len) == 0, "%s holds '%s', want '%s'",
                path, data, want);
  free(data);
}

START_TEST(test_create_and_replace) {
  char p[256];
  tmp_path("out.txt", p, sizeof p);
  diag_sink *d = diag_sink_create();
  ck_assert_msg(atomic_file_write_all(p, "first\n", 6, d), "%s", diag_text(d));
  assert_contents(p, "first\n");
  chmod(p, 0640);
  atomic_file af;
  ck_assert(atomic_file_begin(&af, p, d));
  ck_assert(atomic_file_printf(&af, "second %d\n", 2));
  ck_assert(atomic_file_write(&af, "x", 1));
  assert_contents(p, "first\n"); /* nothing visible before the commit */
  ck_assert_int_eq(tmpdir_count(), 2);
  ck_assert_msg(atomic_file_commit(&af, d), "%s", diag_text(d));
  assert_contents(p, "second 2\nx");
  struct stat st;
  ck_assert(stat(p, &st) == 0);
  ck_assert_msg((st.st_mode & 0777) == 0640, "mode %o: the replaced file's mode is kept",
                (unsigned)(st.st_mode & 0777));
  ck_assert_int_eq(tmpdir_count(), 1);
  ck_assert_int_eq(diag_error_count(d), 0);
  diag_sink_destroy(d);
}
END_TEST

START_TEST(test_abort_keeps_old) {
  char p[256];
  tmp_path("keep.txt", p, sizeof p);
  write_bytes(p, "old", 3);
  diag_sink *d = diag_sink_create();
  atomic_file af;
  ck_assert(atomic_file_begin(&af, p, d));
  atomic_file_write(&af, "new contents", 12);
  atomic_file_abort(&af);
  atomic_file_abort(&af); /* a second abort is a no-op */
  assert_contents(p, "old");
  ck_assert_int_eq(tmpdir_count(), 1);
  diag_sink_destroy(d);
}
END_TEST

/* A write that fails half-way (the file-size limit, as a full disk would):
 * the error names the file and the old contents survive. */
START_TEST(test_failed_write_keeps_old) {
  char p[256];
  tmp_path("big.bin", p, sizeof p);
  write_bytes(p, "old", 3);
  signal(SIGXFSZ, SIG_IGN);
  struct rlimit lim = {4096, 4096};
  ck_assert(setrlimit(RLIMIT_FSIZE, &lim) == 0);
  static char big[100000];
  memset(big, 'z', sizeof big);
  diag_sink *d = diag_sink_create();
  ck_assert(!atomic_file_write_all(p, big, sizeof big, d));
  char want[512];
  snprintf(want, sizeof want, "%s: error: cannot write: %s\n", p, strerror(EFBIG));
  ck_assert_str_eq(diag_text(d), want);
  ck_assert_int_eq(diag_first_error_kind(d), DIAG_KIND_IO);
  assert_contents(p, "old");
  ck_assert_int_eq(tmpdir_count(), 1);
  diag_sink_destroy(d);
}
END_TEST

START_TEST(test_errors) {
  char p[256], want[600];
  diag_sink *d = diag_sink_create();
  /* the target is a directory */
  tmp_path("dir", p, sizeof p);
  ck_assert(mkdir(p, 0755) == 0);
  ck_assert(!atomic_file_write_all(p, "x", 1, d));
  snprintf(want, sizeof want, "%s: error: cannot write: Is a directory\n", p);
  ck_assert_str_eq(diag_text(d), want);
  /* a directory that does not exist */
  diag_clear(d);
  tmp_path("missing/out.csv", p, sizeof p);
  ck_assert(!atomic_file_write_all(p, "x", 1, d));
  snprintf(want, sizeof want,
           "%s: error: cannot create a temporary file beside it: No such file or directory\n", p);
  ck_assert_str_eq(diag_text(d), want);
  ck_assert_int_eq(diag_first_error_kind(d), DIAG_KIND_IO);
  ck_assert_int_eq(tmpdir_count(), 1); /* only "dir" */
  diag_sink_destroy(d);
}
END_TEST

/* A FIFO is written through (a reader gets the bytes) and stays a FIFO. */
START_TEST(test_fifo_written_through) {
  char p[256];
  tmp_path("fifo", p, sizeof p);
  ck_assert(mkfifo(p, 0600) == 0);
  pid_t pid = fork();
  ck_assert(pid >= 0);
  if (pid == 0) { /* the reader */
    char buf[64] = {0};
    FILE *f = fopen(p, "rb");
    size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    _exit(n == 8 && memcmp(buf, "through\n", 8) == 0 ? 0 : 1);
  }
  diag_sink *d = diag_sink_create();
  ck_assert_msg(atomic_file_write_all(p, "through\n", 8, d), "%s", diag_text(d));
  int status = 0;
  ck_assert(waitpid(pid, &status, 0) == pid);
  ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the FIFO's reader got other bytes");
  struct stat st;
  ck_assert(lstat(p, &st) == 0);
  ck_assert_msg(S_ISFIFO(st.st_mode), "the FIFO was replaced (mode %o)", (unsigned)st.st_mode);
  ck_assert_int_eq(tmpdir_count(), 1);
  diag_sink_destroy(d);
}
END_TEST

/* /dev/null is written through and stays a character device (as root, a
 * rename would replace the system's /dev/null). */
START_TEST(test_dev_null_written_through) {
  struct stat before, after;
  ck_assert(stat("/dev/null", &before) == 0 && S_ISCHR(before.st_mode));
  diag_sink *d = diag_sink_create();
  ck_assert_msg(atomic_file_write_all("/dev/null", "x", 1, d), "%s", diag_text(d));
  ck_assert(stat("/dev/null", &after) == 0);
  ck_assert_msg(S_ISCHR(after.st_mode) && after.st_rdev == before.st_rdev, "/dev/null was replaced");
  ck_assert_str_eq(diag_text(d), "");
  diag_sink_destroy(d);
}
END_TEST

/* A symbolic link to a regular file: the link stays, and the file it
 * resolves to is replaced as a whole (a new inode: renamed over, all or
 * nothing), not rewritten in place. */
START_TEST(test_symlink_written_through) {
  char p[256], link[256];
  tmp_path("target.txt", p, sizeof p);
  tmp_path("link.txt", link, sizeof link);
  write_bytes(p, "old", 3);
  ck_assert(symlink("target.txt", link) == 0);
  struct stat before;
  ck_assert(stat(p, &before) == 0);
  diag_sink *d = diag_sink_create();
  ck_assert_msg(atomic_file_write_all(link, "new", 3, d), "%s", diag_text(d));
  struct stat st;
  ck_assert(lstat(link, &st) == 0 && S_ISLNK(st.st_mode));
  ck_assert(stat(p, &st) == 0);
  ck_assert_msg(st.st_ino != before.st_ino, "the link's target was rewritten in place, not replaced");
  assert_contents(p, "new");
  ck_assert_int_eq(tmpdir_count(), 2);
  diag_sink_destroy(d);
}
END_TEST

/* /dev/fd/N (as /dev/stdout is for fd 1) writes to descriptor N where it
 * stands: a file the shell opened to append to keeps what it had (opening
 * the path anew with O_TRUNC emptied it). */
START_TEST(test_own_descriptor_appends) {
  char p[256], dev[64];
  tmp_path("log.txt", p, sizeof p);
  write_bytes(p, "old,", 4);
  int fd = open(p, O_WRONLY | O_APPEND);
  ck_assert(fd >= 0);
  snprintf(dev, sizeof dev, "/dev/fd/%d", fd);
  diag_sink *d = diag_sink_create();
  ck_assert_msg(atomic_file_write_all(dev, "new", 3, d), "%s", diag_text(d));
  close(fd);
  assert_contents(p, "old,new");
  ck_assert_int_eq(tmpdir_count(), 1);
  diag_sink_destroy(d);
}
END_TEST

/* A legal 250-byte name works (the temporary name does not grow past
 * NAME_MAX); atomic_file_check refuses a name too long and a directory
 * before any work, and leaves nothing behind. */
START_TEST(test_long_name_and_check) {
  char name[300], p[400], want[800];
  memset(name, 'w', 250);
  name[250] = 0;
  tmp_path(name, p, sizeof p);
  diag_sink *d = diag_sink_create();
  ck_assert_msg(atomic_file_check(p, d), "%s", diag_text(d));
  ck_assert_int_eq(tmpdir_count(), 0);
  ck_assert_msg(atomic_file_write_all(p, "long\n", 5, d), "%s", diag_text(d));
  assert_contents(p, "long\n");
  ck_assert_int_eq(tmpdir_count(), 1);
  memset(name, 'w', 256);
  name[256] = 0;
  tmp_path(name, p, sizeof p);
  ck_assert(!atomic_file_check(p, d));
  snprintf(want, sizeof want, "%s: error: cannot create the file: %s\n", p, strerror(ENAMETOOLONG));
  ck_assert_str_eq(diag_text(d), want);
  diag_clear(d);
  tmp_path("dir", p, sizeof p);
  ck_assert(mkdir(p, 0755) == 0);
  ck_assert(!atomic_file_check(p, d));
  snprintf(want, sizeof want, "%s: error: cannot write: Is a directory\n", p);
  ck_assert_str_eq(diag_text(d), want);
  diag_clear(d);
  ck_assert_msg(atomic_file_check("/dev/null", d), "%s", diag_text(d));
  ck_assert_int_eq(tmpdir_count(), 2);
  diag_sink_destroy(d);
}
END_TEST

/* A fatal signal between the temporary file's creation and the rename:
 * the temporary file is removed and the process still dies of the signal.
 * Every signal whose default action ends the process and that can be
 * caught (SIGQUIT, SIGPIPE, ... left temporary files; issue 41). */
static const int fatal_signals[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE, SIGALRM,
                                    SIGUSR1, SIGUSR2, SIGXCPU, SIGVTALRM, SIGPROF};

START_TEST(test_signal_removes_tmp) {
  int sig = fatal_signals[_i];
  char p[256];
  tmp_path("out.safetensors", p, sizeof p);
  pid_t pid = fork();
  ck_assert(pid >= 0);
  if (pid == 0) {
    struct rlimit no_core = {0, 0};
    setrlimit(RLIMIT_CORE, &no_core); /* SIGQUIT, SIGXCPU dump core */
    signal(sig, SIG_DFL);
    diag_sink *d = diag_sink_create();
    atomic_file af;
    if (!atomic_file_begin(&af, p, d)) _exit(2);
    atomic_file_write(&af, "partial", 7);
    raise(sig);
    _exit(3);
  }
  int status = 0;
  ck_assert(waitpid(pid, &status, 0) == pid);
  ck_assert_msg(WIFSIGNALED(status) && WTERMSIG(status) == sig, "status %#x: not killed by %s", status,
                strsignal(sig));
  ck_assert_msg(tmpdir_count() == 0, "%s: %d files left behind", strsignal(sig), tmpdir_count());
}
END_TEST

/* A file-size limit (ulimit -f) under the save: SIGXFSZ, whose default
 * action kills, is ignored once a save begins, so the write fails with
 * EFBIG and the commit reports it; nothing is left behind. */
START_TEST(test_file_size_limit) {
  char p[256];
  tmp_path("out.safetensors", p, sizeof p);
  pid_t pid = fork();
  ck_assert(pid >= 0);
  if (pid == 0) {
    signal(SIGXFSZ, SIG_DFL);
    struct rlimit small = {4096, 4096};
    if (setrlimit(RLIMIT_FSIZE, &small) != 0) _exit(4);
    diag_sink *d = diag_sink_create();
    atomic_file af;
    if (!atomic_file_begin(&af, p, d)) _exit(2);
    static char big[65536];
    atomic_file_write(&af, big, sizeof big);
    if (atomic_file_commit(&af, d)) _exit(5);
    _exit(strstr(diag_text(d), "File too large") ? 0 : 6);
  }
  int status = 0;
  ck_assert(waitpid(pid, &status, 0) == pid);
  ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "status %#x: killed or no EFBIG error", status);
  ck_assert_msg(tmpdir_count() == 0, "%d files left behind", tmpdir_count());
}
END_TEST

static Suite *atomic_file_suite(void) {
  Suite *s = suite_create("atomic_file");
  TCase *tc = tcase_create("atomic_file");
  tcase_add_checked_fixture(tc, tmpdir_setup, tmpdir_teardown);
  tcase_add_test(tc, test_create_and_replace);
  tcase_add_test(tc, test_abort_keeps_old);
  tcase_add_test(tc, test_failed_write_keeps_old);
  tcase_add_test(tc, test_errors);
  tcase_add_test(tc, test_fifo_written_through);
  tcase_add_test(tc, test_dev_null_written_through);
  tcase_add_test(tc, test_symlink_written_through);
  tcase_add_test(tc, test_own_descriptor_appends);
  tcase_add_test(tc, test_long_name_and_check);
  tcase_add_loop_test(tc, test_signal_removes_tmp, 0, (int)(sizeof fatal_signals / sizeof *fatal_signals));
  tcase_add_test(tc, test_file_size_limit);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) { return check_run(atomic_file_suite()); }
