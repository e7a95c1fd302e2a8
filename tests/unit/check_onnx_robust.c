/*
 * check_onnx_robust.c: Check suite of the ONNX reader's defences (issue 41
 * items 1 to 6, ONNX half), on models written by tests/onnx/onnx_wire.h:
 * messages nested past ONNX_MAX_NESTING refused before protobuf-c's
 * recursive decoder runs (3,000 levels overflowed the stack); external
 * data only for a model read from a regular file, opened beneath its
 * folder without following links and never blocking (a symbolic link to
 * /etc/passwd, a FIFO, a '..' component; 'w..bin' is a name like any
 * other), through openat2 and through the per-component fallback; a 1 TiB
 * external tensor and a constant folded to 4e8 elements refused before
 * allocation; imports linear in the nodes
 * (a 100,000-node chain and a Sum of 100,000 inputs: minutes before) and
 * the node limit.
 */
#include "castor.h"
#include "formats/onnx.h"
#include "frontend/frontend.h"
#include "util/sys.h"

#include "tests/onnx/onnx_wire.h"
#include "tests/unit/test_support.h"
#include "tests/unit/tmpdir_fixture.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static void setup(void) { tmpdir_setup(); }
static void teardown(void) { tmpdir_teardown(); }

/* Loads bytes from memory as `name`: the status, and the error in *err. */
static castor_status load_mem(const wbuf *b, const char *name, char *err, size_t n) {
  castor_context *ctx;
  castor_context_create(&ctx);
  castor_model *m = NULL;
  castor_status st = castor_model_load_string(ctx, name, (const char *)b->data, b->len, NULL, &m);
  snprintf(err, n, "%s", castor_context_last_error(ctx));
  castor_model_destroy(m);
  castor_context_destroy(ctx);
  return st;
}

static castor_status load_path(const char *path, char *err, size_t n) {
  castor_context *ctx;
  castor_context_create(&ctx);
  castor_model *m = NULL;
  castor_status st = castor_model_load_file(ctx, path, NULL, &m);
  snprintf(err, n, "%s", castor_context_last_error(ctx));
  castor_model_destroy(m);
  castor_context_destroy(ctx);
  return st;
}

static void write_file(const char *path, const void *data, size_t n) {
  FILE *f = fopen(path, "wb");
  ck_assert_msg(f && fwrite(data, 1, n, f) == n && fclose(f) == 0, "writing %s", path);
}

START_TEST(test_nesting) {
  char err[1024];
  wbuf b = {0};
  /* 32 If levels: 98 message levels, decoded; the importer refuses If */
  wbuf_deep_if(&b, 32);
  ck_assert_int_eq(load_mem(&b, "d32.onnx", err, sizeof err), CASTOR_ERR_UNSUPPORTED);
  ck_assert_msg(strstr(err, "castor does not support the ONNX op If"), "%s", err);
  /* 33 levels: 101, one past the limit; 3,000: a stack overflow before */
  for (int levels = 33; levels <= 3000; levels += 2967) {
    b.len = 0;
    wbuf_deep_if(&b, levels);
    ck_assert_int_eq(load_mem(&b, "deep.onnx", err, sizeof err), CASTOR_ERR_PARSE);
    char want[512];
    snprintf(want, sizeof want,
             "deep.onnx: error: 'deep.onnx': this ONNX model nests protobuf messages more than 100 "
             "deep (a GraphProto at byte %d is level 101; subgraphs of If, Loop and Scan nest 3 "
             "levels each); castor refuses it\n", levels == 33 ? 1211 : 1394);
    ck_assert_str_eq(err, want);
  }
  wbuf_free(&b);
}
END_TEST

/* tmpdir/model.onnx, whose 4-float tensor w is in `location`. */
static void write_external_model(const char *location) {
  wbuf b = {0};
  wbuf_external_model(&b, 4, location);
  char path[256];
  snprintf(path, sizeof path, "%s/model.onnx", tmpdir);
  write_file(path, b.data, b.len);
  wbuf_free(&b);
}

static castor_status load_model(char *err, size_t n) {
  char path[256];
  snprintf(path, sizeof path, "%s/model.onnx", tmpdir);
  return load_path(path, err, n);
}

START_TEST(test_no_folder) {
  static const float w[4] = {1, 2, 3, 4};
  char path[256], err[1024];
  snprintf(path, sizeof path, "%s/w.bin", tmpdir);
  write_file(path, w, sizeof w);
  write_external_model("w.bin");
  ck_assert_msg(load_model(err, sizeof err) == CASTOR_OK, "%s", err);
  /* the same bytes from memory, and from a pipe: no folder */
  wbuf b = {0};
  wbuf_external_model(&b, 4, "w.bin");
  const char *want = "error: 'X': tensor 'w' keeps its data in the external file 'w.bin', and "
                     "this model was not read from a regular file (a pipe, or memory): it has no "
                     "folder to find it in\n";
  ck_assert_int_eq(load_mem(&b, "X", err, sizeof err), CASTOR_ERR_PARSE);
  ck_assert_msg(strstr(err, want), "%s", err);
  int p[2];
  ck_assert_int_eq(pipe(p), 0);
  ck_assert_int_eq(write(p[1], b.data, b.len), (ssize_t)b.len);
  close(p[1]);
  char dev[64];
  snprintf(dev, sizeof dev, "/dev/fd/%d", p[0]);
  ck_assert_int_eq(load_path(dev, err, sizeof err), CASTOR_ERR_PARSE);
  ck_assert_msg(strstr(err, "keeps its data in the external file 'w.bin', and this model was not "
                            "read from a regular file"), "%s", err);
  close(p[0]);
  /* /dev/fd/N of a regular file: the file's own folder, not /dev */
  snprintf(path, sizeof path, "%s/model.onnx", tmpdir);
  int fd = open(path, O_RDONLY);
  ck_assert_int_ge(fd, 0);
  snprintf(dev, sizeof dev, "/dev/fd/%d", fd);
  ck_assert_msg(load_path(dev, err, sizeof err) == CASTOR_OK, "%s", err);
  close(fd);
  wbuf_free(&b);
}
END_TEST

START_TEST(test_beneath) {
  static const float w[4] = {1, 2, 3, 4};
  char path[256], err[1024];
  snprintf(path, sizeof path, "%s/w..bin", tmpdir);
  write_file(path, w, sizeof w);
  snprintf(path, sizeof path, "%s/sub", tmpdir);
  ck_assert_int_eq(mkdir(path, 0700), 0);
  snprintf(path, sizeof path, "%s/sub/w.bin", tmpdir);
  write_file(path, w, sizeof w);
  /* "w..bin" is a name, not a '..' component; sub/ is inside */
  const char *good[] = {"w..bin", "sub/w.bin", "sub//w.bin", "./sub/w.bin"};
  for (size_t i = 0; i < sizeof good / sizeof *good; i++) {
    write_external_model(good[i]);
    ck_assert_msg(load_model(err, sizeof err) == CASTOR_OK, "%s: %s", good[i], err);
  }
  /* a link to /etc/passwd, a link to a file inside, a linked folder */
  snprintf(path, sizeof path, "%s/passwd.bin", tmpdir);
  ck_assert_int_eq(symlink("/etc/passwd", path), 0);
  snprintf(path, sizeof path, "%s/inside.bin", tmpdir);
  ck_assert_int_eq(symlink("w..bin", path), 0);
  snprintf(path, sizeof path, "%s/lnk", tmpdir);
  ck_assert_int_eq(symlink("sub", path), 0);
  const char *links[] = {"passwd.bin", "inside.bin", "lnk/w.bin"};
  for (size_t i = 0; i < 3; i++) {
    write_external_model(links[i]);
    ck_assert_int_eq(load_model(err, sizeof err), CASTOR_ERR_PARSE);
    char want[512];
    snprintf(want, sizeof want, "tensor 'w': external data '%s/%s' is a symbolic link or lies behind "
             "one; castor opens files beneath the model's directory without following links",
             tmpdir, links[i]);
    ck_assert_msg(strstr(err, want), "%s: %s", links[i], err);
  }
  /* '..' components, an absolute path */
  const char *out[] = {"../w.bin", "sub/../w..bin", "sub/..", "/etc/passwd"};
  for (size_t i = 0; i < 4; i++) {
    write_external_model(out[i]);
    ck_assert_int_eq(load_model(err, sizeof err), CASTOR_ERR_PARSE);
    char want[512];
    snprintf(want, sizeof want, "external data location '%s' must be a relative path inside the "
             "model's directory (no '..' component, not absolute)", out[i]);
    ck_assert_msg(strstr(err, want), "%s: %s", out[i], err);
  }
  /* a FIFO with no writer: refused at once (before: open() blocked forever) */
  snprintf(path, sizeof path, "%s/fifo.bin", tmpdir);
  ck_assert_int_eq(mkfifo(path, 0600), 0);
  write_external_model("fifo.bin");
  ck_assert_int_eq(load_model(err, sizeof err), CASTOR_ERR_PARSE);
  ck_assert_msg(strstr(err, "fifo.bin' is a pipe, not a regular file"), "%s", err);
  /* the same through both ways of opening beneath: openat2 and the walk */
  int dirfd = open(tmpdir, O_PATH | O_DIRECTORY);
  ck_assert_int_ge(dirfd, 0);
  for (int use = 0; use < 2; use++) {
    for (size_t i = 0; i < sizeof good / sizeof *good; i++) {
      int fd = file_open_beneath(dirfd, good[i], use);
      ck_assert_msg(fd >= 0, "%s (openat2 %d): %s", good[i], use, strerror(errno));
      close(fd);
    }
    for (size_t i = 0; i < 3; i++) {
      errno = 0;
      ck_assert_int_lt(file_open_beneath(dirfd, links[i], use), 0);
      ck_assert_msg(errno == ELOOP, "%s (openat2 %d): %s", links[i], use, strerror(errno));
    }
    for (size_t i = 0; i < 4; i++) {
      errno = 0;
      ck_assert_int_lt(file_open_beneath(dirfd, out[i], use), 0);
      ck_assert_msg(errno == EXDEV, "%s (openat2 %d): %s", out[i], use, strerror(errno));
    }
    int fd = file_open_beneath(dirfd, "fifo.bin", use); /* opens, never blocks */
    ck_assert_int_ge(fd, 0);
    struct stat st;
    ck_assert(fstat(fd, &st) == 0 && S_ISFIFO(st.st_mode));
    close(fd);
  }
  close(dirfd);
}
END_TEST

START_TEST(test_huge_external) {
  /* a 150-byte model whose tensor of 2^38 floats (1 TiB) is a sparse file
   * that holds them: refused before allocation (before: an abort) */
  char path[256], err[1024];
  wbuf b = {0};
  wbuf_external_model(&b, (int64_t)1 << 38, "w.bin");
  snprintf(path, sizeof path, "%s/w.bin", tmpdir);
  int fd = open(path, O_WRONLY | O_CREAT, 0600);
  ck_assert_int_ge(fd, 0);
  if (ftruncate(fd, (off_t)1 << 40) != 0) {
    close(fd);
    fprintf(stderr, "test_huge_external: this file system holds no sparse 1 TiB file (%s)\n",
            strerror(errno));
    wbuf_free(&b);
    return; /* its refusal by size is test_no_folder's and check_onnx's */
  }
  close(fd);
  snprintf(path, sizeof path, "%s/model.onnx", tmpdir);
  write_file(path, b.data, b.len);
  ck_assert_int_eq(load_path(path, err, sizeof err), CASTOR_ERR_PARSE);
  char want[512];
  snprintf(want, sizeof want, "tensor 'w': its external data '%s/w.bin' is 1.0 TiB; more than castor may allocate (",
           tmpdir);
  ck_assert_msg(strstr(err, want), "%s", err);
  wbuf_free(&b);
}
END_TEST

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

START_TEST(test_linear_import) {
  /* a chain of 100,000 nodes and a Sum of 100,000 inputs load in seconds
   * (before: over 400 s and 110 s); both are timed by Check's limit */
  wbuf b = {0};
  char err[1024];
  double t0 = now_s();
  wbuf_chain_model(&b, 100000);
  ck_assert_msg(load_mem(&b, "chain.onnx", err, sizeof err) == CASTOR_OK, "%s", err);
  double t1 = now_s();
  b.len = 0;
  wbuf_sum_model(&b, 100000);
  ck_assert_msg(load_mem(&b, "sum.onnx", err, sizeof err) == CASTOR_OK, "%s", err);
  fprintf(stderr, "test_linear_import: chain of 100000 %.2f s, Sum of 100000 %.2f s\n", t1 - t0,
          now_s() - t1);
  /* one node more than ONNX_MAX_NODES: refused before it is decoded */
  b.len = 0;
  wbuf_chain_model(&b, ONNX_MAX_NODES + 1);
  ck_assert_int_eq(load_mem(&b, "big.onnx", err, sizeof err), CASTOR_ERR_PARSE);
  ck_assert_str_eq(err, "big.onnx: error: 'big.onnx': this ONNX model has more than 100000 nodes "
                        "(node 100001 starts at byte 3166699); castor imports at most 100000 "
                        "(ONNX_MAX_NODES)\n");
  wbuf_free(&b);
}
END_TEST

START_TEST(test_folded_size) {
  /* a [20000, 1] + b [1, 20000]: 4e8 elements (3.2 GB) from 320 KB;
   * before: allocated (an abort under a memory limit) */
  wbuf b = {0};
  char err[1024];
  wbuf_broadcast_model(&b, 20000);
  ck_assert_int_eq(load_mem(&b, "bcast.onnx", err, sizeof err), CASTOR_ERR_UNSUPPORTED);
  ck_assert_str_eq(err, "bcast.onnx: node 'Add' (Add): error: Add folded to a constant of more than "
                        "2^28 elements\n");
  b.len = 0;
  wbuf_broadcast_model(&b, 100); /* 10,000 elements: folded */
  ck_assert_msg(load_mem(&b, "small.onnx", err, sizeof err) == CASTOR_OK, "%s", err);
  wbuf_free(&b);
}
END_TEST

static Suite *onnx_robust_suite(void) {
  Suite *s = suite_create("onnx_robust");
  TCase *tc = tcase_create("reader");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, test_nesting);
  tcase_add_test(tc, test_no_folder);
  tcase_add_test(tc, test_beneath);
  tcase_add_test(tc, test_huge_external);
  tcase_add_test(tc, test_folded_size);
  suite_add_tcase(s, tc);
  TCase *lin = tcase_create("linear");
  tcase_set_timeout(lin, 60);
  tcase_add_test(lin, test_linear_import);
  suite_add_tcase(s, lin);
  return s;
}

int main(void) { return check_run(onnx_robust_suite()); }
