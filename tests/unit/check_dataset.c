/* SPDX-License-Identifier: Apache-2.0 */
/*
 * check_dataset.c: Check suite of train/dataset.c and train/batch.c.
 * The test writes its own small files: .npy of every dtype the loader
 * takes (headers written here, byte order included), IDX files plain and
 * gzip-compressed with zlib; random contents with fixed seeds. Then: exact
 * values after loading and scaling, every bad-input diagnostic pinned,
 * Keras's split, the shuffle against an independent Python implementation,
 * batches. The last test loads Debian's Fashion-MNIST when it is installed.
 */
#include "train/dataset.h"
#include "util/half.h"

#include "tests/unit/test_support.h"
#include "tests/unit/tmpdir_fixture.h"

#include <math.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

/* ---- writing test files ---- */

/* A .npy file of elements of `size` bytes with the given descr, from
 * little-endian values v (converted to big-endian when descr says '>'). */
static void write_npy(const char *path, const char *descr, int rank, const int64_t *dims,
                      const void *data, size_t size) {
  char header[256], shape[128] = "";
  size_t o = 0;
  int64_t numel = 1;
  for (int i = 0; i < rank; i++) {
    o += (size_t)snprintf(shape + o, sizeof shape - o, "%lld,%s", (long long)dims[i],
                          i + 1 < rank ? " " : "");
    numel *= dims[i];
  }
  if (rank > 1) shape[o - 1] = 0; /* "(2, 3)" not "(2, 3,)" */
  int n = snprintf(header, sizeof header, "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }",
                   descr, shape);
  while ((10 + n + 1) % 64) header[n++] = ' ';
  header[n++] = '\n';
  FILE *f = fopen(path, "wb");
  ck_assert(f != NULL);
  unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)n,
                           (unsigned char)(n >> 8)};
  fwrite(pre, 1, 10, f);
  fwrite(header, 1, (size_t)n, f);
  const unsigned char *p = data;
  for (int64_t i = 0; i < numel; i++)
    for (size_t k = 0; k < size; k++)
      fputc(p[i * (int64_t)size + (descr[0] == '>' ? (int64_t)(size - 1 - k) : (int64_t)k)], f);
  fclose(f);
}

/* IDX bytes: magic, big-endian dims, elements (already big-endian). */
static size_t idx_bytes(unsigned char *out, unsigned char type, int rank, const uint32_t *dims,
                        const void *data, size_t nbytes) {
  size_t o = 0;
  out[o++] = 0, out[o++] = 0, out[o++] = type, out[o++] = (unsigned char)rank;
  for (int i = 0; i < rank; i++)
    for (int k = 3; k >= 0; k--) out[o++] = (unsigned char)(dims[i] >> (8 * k));
  if (nbytes) memcpy(out + o, data, nbytes); /* no data: data may be NULL */
  return o + nbytes;
}

static void write_gz(const char *path, const void *data, size_t len) {
  gzFile g = gzopen(path, "wb9");
  ck_assert(g != NULL);
  ck_assert_int_eq(gzwrite(g, data, (unsigned)len), (int)len);
  ck_assert_int_eq(gzclose(g), Z_OK);
}

/* An MNIST-like pair: n images of rows x cols random bytes and labels. */
enum { N_IMG = 7, ROWS = 3, COLS = 4 };
static unsigned char img[N_IMG * ROWS * COLS], lab[N_IMG];

static void make_mnist_like(const char *xpath, const char *ypath, bool gz) {
  rng r;
  rng_init(&r, 7);
  for (size_t i = 0; i < sizeof img; i++) img[i] = (unsigned char)(rng_next(&r) >> 56);
  img[5] = 255, img[6] = 0;
  for (size_t i = 0; i < sizeof lab; i++) lab[i] = (unsigned char)(rng_next(&r) % 10);
  static unsigned char buf[4096];
  uint32_t xd[3] = {N_IMG, ROWS, COLS}, yd[1] = {N_IMG};
  size_t n = idx_bytes(buf, 0x08, 3, xd, img, sizeof img);
  if (gz) write_gz(xpath, buf, n);
  else write_bytes(xpath, buf, n);
  n = idx_bytes(buf, 0x08, 1, yd, lab, sizeof lab);
  if (gz) write_gz(ypath, buf, n);
  else write_bytes(ypath, buf, n);
}

/* ---- loading ---- */

START_TEST(test_idx_plain_and_gzip) {
  for (int gz = 0; gz < 2; gz++) {
    char xp[256], yp[256];
    tmp_path(gz ? "train-images-idx3-ubyte.gz" : "images.idx3", xp, sizeof xp);
    tmp_path(gz ? "train-labels-idx1-ubyte.gz" : "labels.idx1", yp, sizeof yp);
    make_mnist_like(xp, yp, gz);
    diag_sink *d = diag_sink_create();
    rt_dataset_options o;
    rt_dataset_options_init(&o);
    o.n_features = ROWS * COLS;
    o.n_classes = 10;
    rt_dataset ds;
    ck_assert_msg(rt_dataset_load(xp, yp, &o, &ds, d), "%s", diag_text(d));
    ck_assert_int_eq(ds.n, N_IMG);
    ck_assert_int_eq(ds.n_features, ROWS * COLS);
    ck_assert(ds.x_scaled && ds.labels == RT_LABELS_SPARSE && ds.x_gzip == (gz == 1));
    for (int i = 0; i < N_IMG * ROWS * COLS; i++)
      ck_assert_msg(ds.x[i] == (float)img[i] / 255.0f, "x[%d] = %a", i, (double)ds.x[i]);
    ck_assert(ds.x[5] == 1.0f && ds.x[6] == 0.0f);
    for (int i = 0; i < N_IMG; i++) ck_assert_int_eq(ds.y[i], lab[i]);
    str_buf b;
    str_buf_init(&b);
    rt_dataset_describe(&ds, &b);
    ck_assert_str_eq(str_buf_cstr(&b),
                     gz ? "7 samples: X (7, 3, 4) uint8 IDX (gzip) -> 12 float32 features, scaled "
                          "by 1/255; Y uint8 IDX (gzip) -> class indices"
                        : "7 samples: X (7, 3, 4) uint8 IDX -> 12 float32 features, scaled by "
                          "1/255; Y uint8 IDX -> class indices");
    str_buf_fini(&b);
    ck_assert_int_eq(diag_error_count(d) + diag_warning_count(d), 0);
    rt_dataset_fini(&ds);
    diag_sink_destroy(d);
  }
}
END_TEST

/* Features of every float dtype and byte order, labels of every integer
 * dtype, shapes (n,) and (n, 1): the values come through exactly. */
START_TEST(test_npy_dtypes) {
  enum { N = 5, F = 3 };
  char xp[256], yp[256];
  tmp_path("x.npy", xp, sizeof xp);
  tmp_path("y.npy", yp, sizeof yp);
  rng r;
  rng_init(&r, 3);
  float xf[N * F];
  double xd[N * F];
  uint16_t xh[N * F];
  for (int i = 0; i < N * F; i++) {
    xd[i] = rng_uniform(&r) * 8 - 4;
    xf[i] = (float)xd[i];
    xh[i] = half_f32_to_f16(xf[i]);
  }
  static const int64_t labels[N] = {0, 3, 1, 2, 3};
  diag_sink *d = diag_sink_create();
  static const char *const ydescrs[] = {"|i1", "|u1", "<i2", ">u2", "<i4", "<u4", "<i8",
                                        ">i8", "<u8", "|b1"};
  for (int fi = 0; fi < 5; fi++) {
    int64_t xdims[3] = {N, F, 1};
    const char *descr = (const char *[]){"<f4", ">f4", "<f8", "<f2", "=f4"}[fi];
    const void *src = fi == 2 ? (const void *)xd : fi == 3 ? (const void *)xh : (const void *)xf;
    size_t size = fi == 2 ? 8 : fi == 3 ? 2 : 4;
    write_npy(xp, descr, 2 + fi % 2, xdims, src, size);
    for (size_t yi = 0; yi < sizeof ydescrs / sizeof *ydescrs; yi++) {
      int size_y = ydescrs[yi][2] - '0';
      unsigned char ybuf[N * 8];
      for (int i = 0; i < N; i++) {
        int64_t v = ydescrs[yi][1] == 'b' ? labels[i] != 0 : labels[i];
        memcpy(ybuf + i * size_y, &v, (size_t)size_y); /* little-endian host */
      }
      int64_t ydims[2] = {N, 1};
      write_npy(yp, ydescrs[yi], 1 + (int)(yi % 2), ydims, ybuf, (size_t)size_y);
      rt_dataset ds;
      rt_dataset_options o;
      rt_dataset_options_init(&o);
      o.n_classes = 4;
      ck_assert_msg(rt_dataset_load(xp, yp, &o, &ds, d), "%s %s: %s", descr, ydescrs[yi],
                    diag_text(d));
      ck_assert_int_eq(ds.n_features, F);
      ck_assert(!ds.x_scaled && ds.labels == RT_LABELS_SPARSE);
      for (int i = 0; i < N * F; i++) {
        float want = fi == 3 ? half_f16_to_f32(xh[i]) : xf[i];
        ck_assert_msg(ds.x[i] == want, "%s x[%d]", descr, i);
      }
      for (int i = 0; i < N; i++)
        ck_assert_int_eq(ds.y[i], ydescrs[yi][1] == 'b' ? labels[i] != 0 : labels[i]);
      rt_dataset_fini(&ds);
    }
  }
  /* uint8 .npy features are scaled like IDX ones */
  unsigned char xb[N * F];
  for (int i = 0; i < N * F; i++) xb[i] = (unsigned char)(i * 17);
  int64_t xdims[2] = {N, F}, ydims[2] = {N, 4};
  write_npy(xp, "|u1", 2, xdims, xb, 1);
  /* one-hot float32 labels: DENSE by AUTO, width checked */
  float onehot[N * 4] = {0};
  for (int i = 0; i < N; i++) onehot[i * 4 + labels[i]] = 1;
  write_npy(yp, "<f4", 2, ydims, onehot, 4);
  rt_dataset ds;
  rt_dataset_options o;
  rt_dataset_options_init(&o);
  o.n_classes = 4;
  o.n_features = F;
  ck_assert_msg(rt_dataset_load(xp, yp, &o, &ds, d), "%s", diag_text(d));
  ck_assert(ds.x_scaled && ds.labels == RT_LABELS_DENSE && ds.y_width == 4 && !ds.y);
  for (int i = 0; i < N * F; i++) ck_assert(ds.x[i] == (float)xb[i] / 255.0f);
  ck_assert(memcmp(ds.y_dense, onehot, sizeof onehot) == 0);
  rt_dataset_fini(&ds);
  /* integer labels asked for as DENSE (mean squared error) become floats;
   * float labels that are whole numbers serve as SPARSE */
  int32_t ints[N] = {5, -2, 7, 0, 1};
  int64_t nd[1] = {N};
  write_npy(yp, "<i4", 1, nd, ints, 4);
  o.labels = RT_LABELS_DENSE;
  o.n_classes = 1;
  ck_assert_msg(rt_dataset_load(xp, yp, &o, &ds, d), "%s", diag_text(d));
  for (int i = 0; i < N; i++) ck_assert(ds.y_dense[i] == (float)ints[i]);
  rt_dataset_fini(&ds);
  double whole[N] = {3, 0, 1, 2, 3};
  write_npy(yp, "<f8", 1, nd, whole, 8);
  o.labels = RT_LABELS_SPARSE;
  o.n_classes = 4;
  ck_assert_msg(rt_dataset_load(xp, yp, &o, &ds, d), "%s", diag_text(d));
  for (int i = 0; i < N; i++) ck_assert_int_eq(ds.y[i], (int)whole[i]);
  rt_dataset_fini(&ds);
  ck_assert_int_eq(diag_error_count(d) + diag_warning_count(d), 0);
  diag_sink_destroy(d);
}
END_TEST

/* ---- bad input: one exact diagnostic each ---- */

typedef struct bad_case {
  const char *name;
  /* files: X and Y as (descr or "idx:TT", rank, dims, data) */
  const char *xdescr;
  int xrank;
  int64_t xdims[3];
  const void *xdata;
  const char *ydescr;
  int yrank;
  int64_t ydims[2];
  const void *ydata;
  int64_t n_features, n_classes;
  rt_labels_kind labels;
  bool at_y; /* the message is located at Y */
  const char *msg;
} bad_case;

START_TEST(test_bad_input) {
  static const float x4x2[8] = {0.5f, 1, 2, 3, 4, 5, 6, 7};
  static const float x_nan[8] = {0.5f, 1, 2, NAN, 4, INFINITY, 6, NAN};
  static const float x_inf[8] = {0.5f, 1, 2, 3, 4, -INFINITY, 6, 7};
  static const double x_big[8] = {0.5, 1, 2, 3, 4, 5, 1e300, 7};
  static const int64_t y_ok[4] = {0, 1, 2, 1}, y_big[4] = {0, 1, 10, 1}, y_neg[4] = {0, -3, 1, 1};
  static const uint64_t y_huge[4] = {0, 1, 1, UINT64_MAX};
  static const int32_t x_i32[8] = {0};
  static const double y_half[4] = {0, 1, 2.5, 1};
  static const float y_nan[8] = {1, 0, 0, 1, 1, 0, NAN, 1};
  static const bad_case cases[] = {
      {"label out of range", "<f4", 2, {4, 2}, x4x2, "<i8", 1, {4}, y_big, 2, 10, RT_LABELS_AUTO,
       true, "label 10 at index 2 is outside [0, 10)"},
      {"negative label", "<f4", 2, {4, 2}, x4x2, "<i8", 2, {4, 1}, y_neg, 2, 10, RT_LABELS_AUTO,
       true, "label -3 at index 1 is outside [0, 10)"},
      {"huge uint64 label", "<f4", 2, {4, 2}, x4x2, "<u8", 1, {4}, y_huge, 2, 5, RT_LABELS_SPARSE,
       true, "label 18446744073709551615 at index 3 is outside [0, 5)"},
      {"feature count", "<f4", 3, {2, 2, 2}, x4x2, "<i8", 1, {2}, y_ok, 784, 10, RT_LABELS_AUTO,
       false, "each sample has 4 features (shape (2, 2, 2)), but the model's input takes 784"},
      {"lengths differ", "<f4", 2, {4, 2}, x4x2, "<i8", 1, {3}, y_ok, 2, 10, RT_LABELS_AUTO, true,
       "X and Y have different lengths: X has 4 samples (shape (4, 2)), Y has 3 (shape (3,))"},
      {"NaN features", "<f4", 2, {4, 2}, x_nan, "<i8", 1, {4}, y_ok, 2, 10, RT_LABELS_AUTO, false,
       "3 feature values are not finite; the first, NaN, is feature 1 of sample 1"},
      {"Inf feature", "<f4", 2, {4, 2}, x_inf, "<i8", 1, {4}, y_ok, 2, 10, RT_LABELS_AUTO, false,
       "1 feature value is not finite; the first, -inf, is feature 1 of sample 2"},
      {"float64 beyond float32", "<f8", 2, {4, 2}, x_big, "<i8", 1, {4}, y_ok, 2, 10,
       RT_LABELS_AUTO, false,
       "1 feature value is not finite; the first, beyond float32's range, is feature 0 of "
       "sample 3"},
      {"empty", "<f4", 2, {0, 2}, x4x2, "<i8", 1, {0}, y_ok, 2, 10, RT_LABELS_AUTO, false,
       "the dataset is empty: X has shape (0, 2)"},
      {"int features", "<i4", 2, {4, 2}, x_i32, "<i8", 1, {4}, y_ok, 2, 10, RT_LABELS_AUTO, false,
       "features of dtype int32 are not supported (castor reads float32, float64, float16 and "
       "uint8 features)"},
      {"scalar features", "<f4", 0, {0}, x4x2, "<i8", 1, {4}, y_ok, 0, 0, RT_LABELS_AUTO, false,
       "features must have a sample dimension, but the array is a scalar"},
      {"one-hot as sparse", "<f4", 2, {2, 2}, x4x2, "<f4", 2, {2, 4}, y_nan, 2, 4,
       RT_LABELS_SPARSE, true,
       "sparse labels are class indices of shape (n,) or (n, 1), but the array has shape (2, 4) "
       "(one-hot labels need categorical cross-entropy)"},
      {"dense width", "<f4", 2, {4, 2}, x4x2, "<f4", 2, {4, 2}, y_nan, 2, 10, RT_LABELS_AUTO, true,
       "labels have 2 values per sample (shape (4, 2)), but the model's output has 10"},
      {"NaN label", "<f4", 2, {4, 2}, x4x2, "<f4", 2, {4, 2}, y_nan, 2, 2, RT_LABELS_DENSE, true,
       "1 label value is not finite; the first, NaN, is value 0 of sample 3"},
      {"fractional label", "<f4", 2, {4, 2}, x4x2, "<f8", 1, {4}, y_half, 2, 10,
       RT_LABELS_SPARSE, true,
       "label 2.5 at index 2 is not a whole number (sparse labels are class indices)"},
      {"string dtype", "<U3", 2, {4, 2}, x4x2, "<i8", 1, {4}, y_ok, 2, 10, RT_LABELS_AUTO, false,
       "unsupported .npy dtype '<U3' (castor reads floats, integers and booleans here)"},
  };
  char xp[256], yp[256], want[1024];
  tmp_path("X.npy", xp, sizeof xp);
  tmp_path("Y.npy", yp, sizeof yp);
  diag_sink *d = diag_sink_create();
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    const bad_case *c = &cases[i];
    size_t xs = c->xdescr[1] == 'f' && c->xdescr[2] == '8' ? 8 : 4;
    write_npy(xp, c->xdescr, c->xrank, c->xdims, c->xdata, xs);
    size_t ys = c->ydescr[2] - '0';
    write_npy(yp, c->ydescr, c->yrank, c->ydims, c->ydata, ys);
    rt_dataset_options o = {.n_features = c->n_features, .n_classes = c->n_classes, .labels = c->labels};
    rt_dataset ds;
    diag_clear(d);
    ck_assert_msg(!rt_dataset_load(xp, yp, &o, &ds, d), "%s: loaded", c->name);
    snprintf(want, sizeof want, "%s: error: %s\n", c->at_y ? yp : xp, c->msg);
    ck_assert_msg(strcmp(diag_text(d), want) == 0, "%s:\n got  %s want %s", c->name,
                  diag_text(d), want);
    ck_assert_msg(ds.x == NULL && ds.y == NULL && ds.n == 0, "%s: *out not empty", c->name);
    rt_dataset_fini(&ds);
  }
  diag_sink_destroy(d);
}
END_TEST

/* Malformed files: IDX headers, truncation, lying sizes, gzip damage. */
START_TEST(test_bad_files) {
  char xp[256], yp[256], want[1024];
  tmp_path("x.idx", xp, sizeof xp);
  tmp_path("y.idx", yp, sizeof yp);
  static unsigned char buf[4096];
  unsigned char data[64] = {1, 2, 3};
  uint32_t d1[1] = {4};
  write_bytes(yp, buf, idx_bytes(buf, 0x08, 1, d1, data, 4));
  size_t len;
  diag_sink *d = diag_sink_create();
  rt_dataset ds;

#define RUN(path_bytes_len, gzip, expect)                                                   \
  do {                                                                                      \
    if (gzip) write_gz(xp, buf, path_bytes_len);                                            \
    else write_bytes(xp, buf, path_bytes_len);                                              \
    diag_clear(d);                                                                          \
    ck_assert(!rt_dataset_load(xp, yp, NULL, &ds, d));                                      \
    snprintf(want, sizeof want, "%s: error: %s\n", xp, expect);                             \
    ck_assert_msg(strcmp(diag_text(d), want) == 0, "got  %s want %s", diag_text(d), want); \
  } while (0)

  uint32_t d3[3] = {4, 2, 2};
  len = idx_bytes(buf, 0x08, 3, d3, data, 16);
  RUN(len - 3, false,
      "truncated IDX file: shape (4, 2, 2) of uint8 needs 16 bytes of data, the file has 13");
  RUN(len - 3, true,
      "truncated IDX file: shape (4, 2, 2) of uint8 needs 16 bytes of data, the file has 13");
  len = idx_bytes(buf, 0x07, 3, d3, data, 16);
  RUN(len, false, "unsupported IDX element type 0x07 (IDX defines 08, 09, 0B, 0C, 0D and 0E)");
  uint32_t d7[7] = {1, 1, 1, 1, 1, 1, 1};
  len = idx_bytes(buf, 0x08, 7, d7, data, 0);
  RUN(len, false, "IDX file with 7 dimensions is not supported (1 to 6)");
  len = idx_bytes(buf, 0x08, 3, d3, data, 0);
  RUN(9, false, "truncated IDX header: 3 dimensions need 16 bytes, the file has 9");
  /* a header that declares 2^32 * 2^32 * 2^16 bytes: refused before reading */
  uint32_t huge[3] = {0xffffffffu, 0xffffffffu, 0xffff};
  len = idx_bytes(buf, 0x0D, 3, huge, data, 8);
  RUN(len, true,
      "IDX array of shape (4294967295, 4294967295, 65535) and dtype float32 is too large (castor "
      "reads at most 68719476736 bytes of data per file)");
  uint32_t big[2] = {1u << 20, (1u << 14) + 1}; /* just over 64 GiB of float32 */
  len = idx_bytes(buf, 0x0D, 2, big, data, 8);
  RUN(len, false,
      "IDX array of shape (1048576, 16385) and dtype float32 is too large (castor reads at most "
      "68719476736 bytes of data per file)");
  /* a header that declares 1 GiB with 8 bytes behind it: refused before
   * any allocation, plain (the file's size) or gzip (deflate's ratio) */
  uint32_t lying[2] = {1u << 16, 1u << 12};
  len = idx_bytes(buf, 0x0D, 2, lying, data, 8);
  RUN(len, false,
      "truncated IDX file: shape (65536, 4096) of float32 needs 1073741824 bytes of data, the "
      "file has 8");
  RUN(len, true,
      "truncated IDX file: shape (65536, 4096) of float32 needs 1073741824 bytes of data, more "
      "than the 36 bytes of this gzip file can hold (deflate expands at most 1032 times)");
  memcpy(buf, "PK\3\4rest", 8);
  RUN(8, false, "not a .npy or IDX file (it starts with bytes 50 4b 03 04); castor reads .npy "
                "and IDX (MNIST) files, gzip-compressed or not");
  RUN(0, false, "the file is empty; castor reads .npy and IDX files");
#undef RUN

  /* a damaged gzip stream: a cut in the middle, then flipped bytes */
  uint32_t d2[2] = {4, 256};
  static unsigned char pixels[1024];
  for (int i = 0; i < 1024; i++) pixels[i] = (unsigned char)(i * 7);
  len = idx_bytes(buf, 0x08, 2, d2, pixels, 1024);
  write_gz(xp, buf, len);
  char *gz;
  size_t gzlen;
  ck_assert(str_read_file(xp, &gz, &gzlen));
  write_bytes(xp, gz, gzlen / 2);
  diag_clear(d);
  ck_assert(!rt_dataset_load(xp, yp, NULL, &ds, d));
  snprintf(want, sizeof want, "%s: error: corrupt gzip data: the file ends at byte %zu, inside "
           "the gzip member that starts at byte 0\n", xp, gzlen / 2);
  ck_assert_str_eq(diag_text(d), want);
  for (size_t i = 60; i < gzlen - 8; i++) gz[i] ^= 0x55;
  write_bytes(xp, gz, gzlen);
  diag_clear(d);
  ck_assert(!rt_dataset_load(xp, yp, NULL, &ds, d));
  snprintf(want, sizeof want, "%s: error: corrupt gzip data: ", xp);
  ck_assert_msg(strncmp(diag_text(d), want, strlen(want)) == 0, "%s", diag_text(d));
  free(gz);

  /* missing file and directory: I/O errors */
  diag_clear(d);
  tmp_path("nope.npy", xp, sizeof xp);
  ck_assert(!rt_dataset_load(xp, yp, NULL, &ds, d));
  snprintf(want, sizeof want, "%s: error: cannot open: No such file or directory\n", xp);
  ck_assert_str_eq(diag_text(d), want);
  ck_assert_int_eq(diag_first_error_kind(d), DIAG_KIND_IO);
  diag_clear(d);
  ck_assert(!rt_dataset_load(tmpdir, yp, NULL, &ds, d));
  snprintf(want, sizeof want, "%s: error: cannot read: Is a directory\n", tmpdir);
  ck_assert_str_eq(diag_text(d), want);

  /* trailing bytes: a warning, the data loads */
  tmp_path("x.idx", xp, sizeof xp);
  uint32_t d4[2] = {4, 2};
  len = idx_bytes(buf, 0x08, 2, d4, data, 8);
  write_bytes(xp, buf, len + 5);
  diag_clear(d);
  ck_assert_msg(rt_dataset_load(xp, yp, NULL, &ds, d), "%s", diag_text(d));
  snprintf(want, sizeof want, "%s: warning: bytes after the IDX data (shape (4, 2)) are ignored\n",
           xp);
  ck_assert_str_eq(diag_text(d), want);
  rt_dataset_fini(&ds);
  diag_sink_destroy(d);
}
END_TEST

/* ---- split, shuffle, batches ---- */

/* n samples whose features and label encode their index. */
static void make_indexed(rt_dataset *ds, int64_t n, int64_t nf, bool dense) {
  *ds = (rt_dataset){0};
  ds->n = n;
  ds->n_features = nf;
  ds->x = xmalloc((size_t)(n * nf) * sizeof(float));
  for (int64_t i = 0; i < n * nf; i++) ds->x[i] = (float)(i / nf) + 0.25f * (float)(i % nf);
  ds->labels = dense ? RT_LABELS_DENSE : RT_LABELS_SPARSE;
  ds->y_width = dense ? 2 : 1;
  if (dense) {
    ds->y_dense = xmalloc((size_t)(2 * n) * sizeof(float));
    for (int64_t i = 0; i < 2 * n; i++) ds->y_dense[i] = (float)(i / 2) * (i % 2 ? -1.0f : 1.0f);
  } else {
    ds->y = xmalloc((size_t)n * sizeof(int32_t));
    for (int64_t i = 0; i < n; i++) ds->y[i] = (int32_t)(100 + i);
  }
  ds->x_rank = 2;
  ds->x_dims[0] = n, ds->x_dims[1] = nf;
}

START_TEST(test_split) {
  /* split_at = floor(n * (1 - F)), from Python's math.floor */
  static const struct {
    int64_t n;
    double f;
    int64_t train;
  } cases[] = {{10, 0.2, 8}, {10, 0.25, 7}, {10, 0.3, 7}, {7, 0.3, 4},
               {100, 0.29, 71}, {3, 0.1, 2}, {60000, 0.2, 48000}, {5, 0, 5}};
  diag_sink *d = diag_sink_create();
  for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
    for (int dense = 0; dense < 2; dense++) {
      rt_dataset ds, val;
      make_indexed(&ds, cases[c].n, 3, dense);
      ck_assert_msg(rt_dataset_split(&ds, cases[c].f, &val, d), "%s", diag_text(d));
      ck_assert_int_eq(ds.n, cases[c].train);
      ck_assert_int_eq(val.n, cases[c].n - cases[c].train);
      ck_assert_int_eq(ds.x_dims[0], ds.n);
      for (int64_t i = 0; i < val.n; i++) { /* the tail, in order */
        ck_assert(val.x[i * 3 + 2] == (float)(ds.n + i) + 0.5f);
        if (dense) ck_assert(val.y_dense[2 * i + 1] == -(float)(ds.n + i));
        else ck_assert_int_eq(val.y[i], 100 + ds.n + i);
      }
      rt_dataset_fini(&ds);
      rt_dataset_fini(&val);
    }
  }
  static const struct {
    int64_t n;
    double f;
    const char *msg;
  } bad[] = {
      {10, 1, "error: validation_split must be in [0, 1), got 1\n"},
      {10, -0.1, "error: validation_split must be in [0, 1), got -0.1\n"},
      {10, NAN, "error: validation_split must be in [0, 1), got nan\n"},
      {1, 0.5, "error: the dataset has 1 sample, too few to split into training and validation "
               "sets with validation_split=0.5\n"},
      /* 1 - 1e-17 rounds to 1: every sample would train, none validate */
      {10, 1e-17, "error: the dataset has 10 samples, too few to split into training and "
                  "validation sets with validation_split=1e-17\n"},
  };
  for (size_t c = 0; c < sizeof bad / sizeof *bad; c++) {
    rt_dataset ds, val;
    make_indexed(&ds, bad[c].n, 2, false);
    diag_clear(d);
    ck_assert(!rt_dataset_split(&ds, bad[c].f, &val, d));
    ck_assert_str_eq(diag_text(d), bad[c].msg);
    ck_assert_int_eq(ds.n, bad[c].n);
    ck_assert(val.x == NULL);
    rt_dataset_fini(&ds);
  }
  diag_sink_destroy(d);
}
END_TEST

/* The expected orders come from a separate Python implementation of the
 * algorithm documented in dataset.h (docs/training-data.md). */
START_TEST(test_shuffle_golden) {
  static const struct {
    uint64_t seed;
    int64_t epoch, n;
    int64_t want[13];
  } cases[] = {
      {42, 0, 10, {9, 4, 2, 8, 1, 3, 0, 6, 5, 7}},
      {42, 1, 10, {1, 4, 6, 8, 5, 2, 7, 3, 9, 0}},
      {0, 0, 10, {0, 1, 4, 6, 3, 9, 8, 7, 2, 5}},
      {UINT64_MAX, 7, 13, {11, 9, 0, 6, 5, 2, 12, 4, 3, 1, 10, 8, 7}},
  };
  for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
    int64_t order[13];
    rt_shuffle_order(cases[c].seed, cases[c].epoch, cases[c].n, order);
    for (int64_t i = 0; i < cases[c].n; i++)
      ck_assert_msg(order[i] == cases[c].want[i], "case %zu: order[%lld] = %lld, want %lld", c,
                    (long long)i, (long long)order[i], (long long)cases[c].want[i]);
  }
  /* a large n is a permutation, different per epoch and per seed */
  enum { N = 100000 };
  int64_t *a = xmalloc(N * sizeof *a), *b = xmalloc(N * sizeof *b);
  unsigned char *seen = xcalloc(N, 1);
  rt_shuffle_order(5, 0, N, a);
  rt_shuffle_order(5, 1, N, b);
  int64_t same = 0;
  for (int64_t i = 0; i < N; i++) {
    ck_assert(a[i] >= 0 && a[i] < N && !seen[a[i]]);
    seen[a[i]] = 1;
    same += a[i] == b[i];
  }
  ck_assert_msg(same < 10, "epochs 0 and 1 agree at %lld places", (long long)same);
  rt_shuffle_order(6, 0, N, b);
  same = 0;
  for (int64_t i = 0; i < N; i++) same += a[i] == b[i];
  ck_assert_msg(same < 10, "seeds 5 and 6 agree at %lld places", (long long)same);
  free(a), free(b), free(seen);
  int64_t none[1] = {-1};
  rt_shuffle_order(1, 0, 0, none);
  ck_assert_int_eq(none[0], -1);
}
END_TEST

START_TEST(test_batches) {
  diag_sink *d = diag_sink_create();
  for (int dense = 0; dense < 2; dense++) {
    for (int shuffle = 0; shuffle < 2; shuffle++) {
      rt_dataset ds;
      make_indexed(&ds, 10, 3, dense);
      rt_batcher b;
      ck_assert(rt_batcher_init(&b, &ds, 4, shuffle, 9, d));
      ck_assert_int_eq(b.n_batches, 3);
      ck_assert_int_eq((uintptr_t)b.x % 64, 0);
      for (int64_t epoch = 0; epoch < 2; epoch++) {
        rt_batcher_start_epoch(&b, epoch);
        int64_t order[10], seen = 0;
        rt_shuffle_order(9, epoch, 10, order);
        for (int64_t k = 0; k < b.n_batches; k++) {
          int64_t rows = rt_batcher_fill(&b, k);
          ck_assert_int_eq(rows, k < 2 ? 4 : 2); /* Keras keeps the partial batch */
          for (int64_t r = 0; r < rows; r++, seen++) {
            int64_t s = shuffle ? order[seen] : seen;
            for (int f = 0; f < 3; f++) ck_assert(b.x[r * 3 + f] == ds.x[s * 3 + f]);
            if (dense) ck_assert(b.y_dense[r * 2 + 1] == -(float)s);
            else ck_assert_int_eq(b.y[r], 100 + s);
          }
        }
        ck_assert_int_eq(seen, 10);
      }
      rt_batcher_fini(&b);
      rt_dataset_fini(&ds);
    }
  }
  /* a batch larger than the data: one batch of everything */
  rt_dataset ds;
  make_indexed(&ds, 5, 2, false);
  rt_batcher b;
  ck_assert(rt_batcher_init(&b, &ds, 8192, true, 1, d));
  ck_assert_int_eq(b.n_batches, 1);
  ck_assert_int_eq(rt_batcher_fill(&b, 0), 5);
  rt_batcher_fini(&b);
  ck_assert(!rt_batcher_init(&b, &ds, 0, true, 1, d));
  ck_assert_str_eq(diag_text(d), "error: the batch size must be at least 1, got 0\n");
  rt_batcher_fini(&b);
  rt_dataset_fini(&ds);
  diag_sink_destroy(d);
}
END_TEST

/* Debian's dataset-fashion-mnist, when installed. */
#define FASHION_DIR "/usr/share/datasets/fashion-mnist"
START_TEST(test_fashion_mnist) {
  const char *dir = FASHION_DIR;
  char xp[256], yp[256];
  snprintf(xp, sizeof xp, "%s/train-images-idx3-ubyte.gz", dir);
  snprintf(yp, sizeof yp, "%s/train-labels-idx1-ubyte.gz", dir);
  ck_assert_msg(access(xp, R_OK) == 0 && access(yp, R_OK) == 0, "%s absent", dir);
  diag_sink *d = diag_sink_create();
  rt_dataset_options o = {.n_features = 784, .n_classes = 10, .labels = RT_LABELS_SPARSE};
  rt_dataset ds, val;
  ck_assert_msg(rt_dataset_load(xp, yp, &o, &ds, d), "%s", diag_text(d));
  ck_assert_int_eq(ds.n, 60000);
  ck_assert(ds.x_scaled && ds.x_gzip);
  static const int first[10] = {9, 0, 0, 3, 0, 2, 7, 2, 5, 5};
  for (int i = 0; i < 10; i++) ck_assert_int_eq(ds.y[i], first[i]);
  double sum = 0; /* the first image's pixels sum to 76247 / 255 */
  for (int i = 0; i < 784; i++) sum += ds.x[i] * 255.0;
  ck_assert_msg(fabs(sum - 76247) < 1e-2, "sum %f", sum);
  ck_assert(rt_dataset_split(&ds, 0.2, &val, d));
  ck_assert_int_eq(ds.n, 48000);
  ck_assert_int_eq(val.n, 12000);
  rt_dataset_fini(&val);
  rt_dataset_fini(&ds);
  snprintf(xp, sizeof xp, "%s/t10k-images-idx3-ubyte.gz", dir);
  snprintf(yp, sizeof yp, "%s/t10k-labels-idx1-ubyte.gz", dir);
  ck_assert_msg(rt_dataset_load(xp, yp, &o, &ds, d), "%s", diag_text(d));
  ck_assert_int_eq(ds.n, 10000);
  ck_assert(ds.y[0] == 9 && ds.y[1] == 2 && ds.y[2] == 1);
  rt_dataset_fini(&ds);
  ck_assert_int_eq(diag_error_count(d) + diag_warning_count(d), 0);
  diag_sink_destroy(d);
}
END_TEST

/* ---- streams: gzip members and trailers, header first, pipes ---- */

/* One gzip member of data at `level` (0: stored blocks, whose bytes can be
 * changed without a deflate error), into out; returns its length. With
 * sync_only the member stops after a sync flush: no final block, no trailer. */
static size_t gz_mem(const void *data, size_t len, int level, bool sync_only, unsigned char *out,
                     size_t cap) {
  z_stream z = {0};
  ck_assert_int_eq(deflateInit2(&z, level, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY),
                   Z_OK);
  z.next_in = (unsigned char *)data;
  z.avail_in = (uInt)len;
  z.next_out = out;
  z.avail_out = (uInt)cap;
  ck_assert_int_eq(deflate(&z, sync_only ? Z_SYNC_FLUSH : Z_FINISH), sync_only ? Z_OK : Z_STREAM_END);
  size_t n = z.total_out;
  deflateEnd(&z);
  return n;
}

static unsigned char *find_bytes(unsigned char *hay, size_t n, const void *needle, size_t k) {
  for (size_t i = 0; i + k <= n; i++)
    if (memcmp(hay + i, needle, k) == 0) return hay + i;
  return NULL;
}

START_TEST(test_gzip_trailers_and_members) {
  char xp[256], yp[256], want[1024];
  tmp_path("x.idx.gz", xp, sizeof xp);
  tmp_path("y.idx", yp, sizeof yp);
  enum { EXTRA = 1 << 20 };
  static unsigned char plain[EXTRA + 256], gz[EXTRA + 4096];
  unsigned char lab4[4] = {0, 1, 2, 1};
  uint32_t yd[1] = {4};
  write_bytes(yp, plain, idx_bytes(plain, 0x08, 1, yd, lab4, 4));
  /* X: 4 samples of 2 float32 (big-endian), then 1 MiB the header does not
   * declare (a warning; the loader reads on to the trailer anyway) */
  const float xs[8] = {0.574f, 1, 2, 3, 4, 5, 6, 7};
  unsigned char be[32];
  for (int i = 0; i < 8; i++) {
    uint32_t u;
    memcpy(&u, &xs[i], 4);
    for (int k = 0; k < 4; k++) be[4 * i + k] = (unsigned char)(u >> (24 - 8 * k));
  }
  uint32_t xd[2] = {4, 2};
  size_t plen = idx_bytes(plain, 0x0D, 2, xd, be, 32);
  memset(plain + plen, 'x', EXTRA);
  plen += EXTRA;
  diag_sink *d = diag_sink_create();
  rt_dataset_options o = {.n_features = 2, .n_classes = 3};
  rt_dataset ds;

  /* a corrupt byte in the data of a stored block: only the CRC can tell;
   * the loader used to stop reading after the declared bytes and the first
   * trailing one, warn about the trailing bytes, and train on the wrong
   * value */
  size_t glen = gz_mem(plain, plen, 0, false, gz, sizeof gz);
  unsigned char *v = find_bytes(gz, glen, be, 4);
  ck_assert(v != NULL);
  v[3] ^= 0x40;
  write_bytes(xp, gz, glen);
  ck_assert(!rt_dataset_load(xp, yp, &o, &ds, d));
  snprintf(want, sizeof want, "%s: error: corrupt gzip data: the CRC32 of the gzip member that "
           "starts at byte 0 does not match its data (trailer at byte %zu)\n", xp, glen - 8);
  ck_assert_str_eq(diag_text(d), want);
  v[3] ^= 0x40;

  /* the length (ISIZE) in the trailer */
  gz[glen - 1] ^= 1;
  write_bytes(xp, gz, glen);
  diag_clear(d);
  ck_assert(!rt_dataset_load(xp, yp, &o, &ds, d));
  snprintf(want, sizeof want, "%s: error: corrupt gzip data: the length of the gzip member that "
           "starts at byte 0 does not match its data (trailer at byte %zu)\n", xp, glen - 8);
  ck_assert_str_eq(diag_text(d), want);
  gz[glen - 1] ^= 1;

  /* bytes after the last member: an error, not silence */
  memcpy(gz + glen, "junk", 4);
  write_bytes(xp, gz, glen + 4);
  diag_clear(d);
  ck_assert(!rt_dataset_load(xp, yp, &o, &ds, d));
  snprintf(want, sizeof want, "%s: error: corrupt gzip data: the bytes after the last gzip member "
           "(from byte %zu) are not a gzip member\n", xp, glen);
  ck_assert_str_eq(diag_text(d), want);

  /* members one after the other (pigz, bgzip with its empty EOF member)
   * read as one stream, whatever the cut */
  static const size_t cuts[] = {1, 4, 7, 12, 13, 20, 43, 44, 45, EXTRA / 2, EXTRA + 43};
  for (size_t ci = 0; ci < sizeof cuts / sizeof *cuts; ci++) {
    size_t cut = cuts[ci];
    size_t n = gz_mem(plain, cut, 9, false, gz, sizeof gz);
    n += gz_mem(plain + cut, plen - cut, 1, false, gz + n, sizeof gz - n);
    n += gz_mem("", 0, 6, false, gz + n, sizeof gz - n);
    write_bytes(xp, gz, n);
    diag_clear(d);
    ck_assert_msg(rt_dataset_load(xp, yp, &o, &ds, d), "cut %zu: %s", cut, diag_text(d));
    for (int i = 0; i < 8; i++) ck_assert(ds.x[i] == xs[i]);
    snprintf(want, sizeof want, "%s: warning: bytes after the IDX data (shape (4, 2)) are ignored\n",
             xp);
    ck_assert_str_eq(diag_text(d), want);
    rt_dataset_fini(&ds);
  }
  diag_sink_destroy(d);
}
END_TEST

/* The header is checked against the model before any data is read: the
 * data behind these headers is a broken deflate stream, which the loader
 * would report if it inflated it. */
START_TEST(test_header_before_data) {
  static unsigned char hdr[64], gz[4096];
  uint32_t xd[2] = {200000000, 5};
  size_t hl = idx_bytes(hdr, 0x08, 2, xd, NULL, 0);
  size_t n = gz_mem(hdr, hl, 6, true, gz, sizeof gz);
  /* then a stored block that declares 65535 bytes and holds 1000: what
   * inflate cannot check before the data is asked for */
  memcpy(gz + n, "\x00\xff\xff\x00\x00", 5);
  memset(gz + n + 5, 0xab, 995);
  unsigned char y[16];
  uint32_t yd[1] = {3};
  size_t yl = idx_bytes(y, 0x08, 1, yd, (const unsigned char[]){0, 1, 2}, 3);
  diag_sink *d = diag_sink_create();
  rt_dataset_options o = {.n_features = 4, .n_classes = 3};
  rt_dataset ds;
  ck_assert(!rt_dataset_load_mem(gz, n + 1000, "x.gz", y, yl, "y", &o, &ds, d));
  ck_assert_str_eq(diag_text(d), "x.gz: error: each sample has 5 features (shape (200000000, 5)), "
                                 "but the model's input takes 4\n");
  /* the same header with the model's 5 features gets to the data */
  o.n_features = 5;
  diag_clear(d);
  ck_assert(!rt_dataset_load_mem(gz, n + 1000, "x.gz", y, yl, "y", &o, &ds, d));
  char want[512];
  snprintf(want, sizeof want, "x.gz: error: truncated IDX file: shape (200000000, 5) of uint8 needs "
           "1000000000 bytes of data, more than the %zu bytes of this gzip file can hold (deflate "
           "expands at most 1032 times)\n", n + 1000);
  ck_assert_str_eq(diag_text(d), want);
  /* Y's length against X's, before Y's data */
  uint32_t xd2[2] = {4, 1};
  hl = idx_bytes(hdr, 0x08, 2, xd2, (const unsigned char[]){1, 2, 3, 4}, 4);
  n = gz_mem(y, yl, 6, true, gz, sizeof gz);
  memset(gz + n, 0xff, 100);
  o.n_features = 1;
  diag_clear(d);
  ck_assert(!rt_dataset_load_mem(hdr, hl, "x", gz, n + 100, "y.gz", &o, &ds, d));
  ck_assert_str_eq(diag_text(d), "y.gz: error: X and Y have different lengths: X has 4 samples "
                                 "(shape (4, 1)), Y has 3 (shape (3,))\n");
  diag_sink_destroy(d);
}
END_TEST

/* Samples of no values and absurd counts: refused after the header. */
START_TEST(test_empty_samples_and_counts) {
  static unsigned char x[256], y[256];
  unsigned char one[4] = {0, 1, 0, 1};
  uint32_t yd[1] = {4};
  size_t yl = idx_bytes(y, 0x08, 1, yd, one, 4);
  diag_sink *d = diag_sink_create();
  rt_dataset ds;
  /* 12 bytes: (2^32 - 1, 0); this loaded, and the batcher wanted 34 GB */
  uint32_t xd[2] = {0xffffffffu, 0};
  size_t xl = idx_bytes(x, 0x08, 2, xd, NULL, 0);
  ck_assert_int_eq(xl, 12);
  ck_assert(!rt_dataset_load_mem(x, xl, "x", y, yl, "y", NULL, &ds, d));
  ck_assert_str_eq(diag_text(d), "x: error: each sample of X holds no values (shape (4294967295, "
                                 "0)); a sample needs at least one\n");
  /* a .npy header may declare more than 2^32 - 1 samples */
  char h[128];
  int hn = snprintf(h, sizeof h, "{'descr': '|u1', 'fortran_order': False, 'shape': (8589934592, 1), }");
  while ((10 + hn + 1) % 64) h[hn++] = ' ';
  h[hn++] = '\n';
  memcpy(x, "\x93NUMPY\x01\x00", 8);
  x[8] = (unsigned char)hn, x[9] = 0;
  memcpy(x + 10, h, (size_t)hn);
  diag_clear(d);
  ck_assert(!rt_dataset_load_mem(x, 10 + (size_t)hn, "x.npy", y, yl, "y", NULL, &ds, d));
  ck_assert_str_eq(diag_text(d), "x.npy: error: X declares 8589934592 samples (shape (8589934592, "
                                 "1)); castor takes at most 4294967295 (2^32 - 1)\n");
  /* dense labels of no values */
  uint32_t xd4[2] = {4, 1}, yd0[2] = {4, 0};
  xl = idx_bytes(x, 0x0D, 2, xd4, (const unsigned char[16]){0}, 16);
  yl = idx_bytes(y, 0x0D, 2, yd0, NULL, 0);
  rt_dataset_options o = {.labels = RT_LABELS_DENSE};
  diag_clear(d);
  ck_assert(!rt_dataset_load_mem(x, xl, "x", y, yl, "y", &o, &ds, d));
  ck_assert_str_eq(diag_text(d), "y: error: each sample of Y holds no values (shape (4, 0)); a "
                                 "sample needs at least one\n");
  /* the batcher refuses such a dataset built by hand, before allocating */
  rt_dataset bad = {.n = 0xffffffffLL, .n_features = 0, .labels = RT_LABELS_SPARSE};
  rt_batcher b;
  diag_clear(d);
  ck_assert(!rt_batcher_init(&b, &bad, 32, true, 1, d));
  ck_assert_str_eq(diag_text(d), "error: cannot batch a dataset of 4294967295 samples with 0 "
                                 "features and 1 label values each: it needs 1 to 4294967295 "
                                 "samples, each with at least one feature and one label value\n");
  rt_batcher_fini(&b);
  diag_sink_destroy(d);
}
END_TEST

/* A FIFO as X (`--x <(zcat x.gz)`): read as a stream, no seek. */
START_TEST(test_fifo) {
  for (int gz = 0; gz < 2; gz++) {
    char xp[256], yp[256];
    tmp_path("x.fifo", xp, sizeof xp);
    tmp_path("y.idx", yp, sizeof yp);
    make_mnist_like(xp, yp, false); /* y.idx, and the bytes of X in x.fifo for now */
    char *bytes;
    size_t len;
    ck_assert(str_read_file(xp, &bytes, &len));
    static unsigned char gzb[4096];
    if (gz) len = gz_mem(bytes, len, 9, false, gzb, sizeof gzb), memcpy(bytes, gzb, len);
    unlink(xp);
    ck_assert_int_eq(mkfifo(xp, 0600), 0);
    pid_t pid = fork();
    ck_assert(pid >= 0);
    if (pid == 0) { /* the writer, in small pieces */
      FILE *f = fopen(xp, "wb");
      for (size_t i = 0; f && i < len; i += 5) {
        fwrite(bytes + i, 1, len - i < 5 ? len - i : 5, f);
        fflush(f);
      }
      _exit(f && fclose(f) == 0 ? 0 : 1);
    }
    diag_sink *d = diag_sink_create();
    rt_dataset ds;
    rt_dataset_options o = {.n_features = ROWS * COLS, .n_classes = 10};
    bool ok = rt_dataset_load(xp, yp, &o, &ds, d);
    int status;
    waitpid(pid, &status, 0);
    ck_assert_msg(ok, "%s", diag_text(d));
    ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    ck_assert(ds.n == N_IMG && ds.x_gzip == (gz == 1));
    for (int i = 0; i < N_IMG * ROWS * COLS; i++) ck_assert(ds.x[i] == (float)img[i] / 255.0f);
    ck_assert_int_eq(diag_error_count(d) + diag_warning_count(d), 0);
    rt_dataset_fini(&ds);
    diag_sink_destroy(d);
    free(bytes);
    unlink(xp);
  }
}
END_TEST

/* Samples keep their shape: IDX images [n, 3, 4] feed [3, 4, 1], [3, 4]
 * and [12]; other shapes are errors naming both. */
START_TEST(test_sample_shape) {
  char xp[256], yp[256];
  tmp_path("x.idx", xp, sizeof xp);
  tmp_path("y.idx", yp, sizeof yp);
  make_mnist_like(xp, yp, true);
  diag_sink *d = diag_sink_create();
  rt_dataset ds;
  static const struct {
    int rank;
    int64_t dims[3];
  } ok_shapes[] = {{3, {ROWS, COLS, 1}}, {2, {ROWS, COLS}}, {1, {ROWS * COLS}}};
  for (int i = 0; i < 3; i++) {
    rt_dataset_options o = {.n_features = ROWS * COLS, .n_classes = 10,
                            .sample_rank = ok_shapes[i].rank};
    memcpy(o.sample_dims, ok_shapes[i].dims, sizeof ok_shapes[i].dims);
    ck_assert_msg(rt_dataset_load(xp, yp, &o, &ds, d), "%s", diag_text(d));
    ck_assert_int_eq(ds.n_features, ROWS * COLS);
    int want_rank = ok_shapes[i].rank == 1 ? 2 : ok_shapes[i].rank; /* rank 1: the file's */
    ck_assert_int_eq(ds.x_sample_rank, want_rank);
    ck_assert(ds.x_sample_dims[0] == ROWS && ds.x_sample_dims[1] == COLS);
    if (want_rank == 3) ck_assert_int_eq(ds.x_sample_dims[2], 1);
    for (int k = 0; k < N_IMG * ROWS * COLS; k++) ck_assert(ds.x[k] == (float)img[k] / 255.0f);
    rt_dataset_fini(&ds);
  }
  rt_dataset_options o = {.n_classes = 10, .sample_rank = 3, .sample_dims = {ROWS, COLS, 3}};
  ck_assert(!rt_dataset_load(xp, yp, &o, &ds, d));
  char want[512];
  snprintf(want, sizeof want, "%s: error: each sample has shape (3, 4) (X has shape (7, 3, 4)), "
           "but the model's input has shape (3, 4, 3)\n", xp);
  ck_assert_str_eq(diag_text(d), want);
  /* flat rows for an image input: the reshape to apply */
  static const float flat[2 * 12] = {0};
  int64_t fd[2] = {2, 12};
  tmp_path("flat.npy", xp, sizeof xp);
  write_npy(xp, "<f4", 2, fd, flat, 4);
  o.sample_dims[2] = 1;
  diag_clear(d);
  ck_assert(!rt_dataset_load(xp, yp, &o, &ds, d));
  snprintf(want, sizeof want, "%s: error: each sample has shape (12,) (X has shape (2, 12)), but "
           "the model's input has shape (3, 4, 1); reshape X to (2, 3, 4, 1) "
           "(x.reshape(-1, 3, 4, 1))\n", xp);
  ck_assert_str_eq(diag_text(d), want);
  diag_sink_destroy(d);
}
END_TEST

static Suite *dataset_suite(void) {
  Suite *s = suite_create("dataset");
  TCase *tc = tcase_create("dataset");
  tcase_add_checked_fixture(tc, tmpdir_setup, tmpdir_teardown);
  tcase_add_test(tc, test_idx_plain_and_gzip);
  tcase_add_test(tc, test_npy_dtypes);
  tcase_add_test(tc, test_bad_input);
  tcase_add_test(tc, test_bad_files);
  tcase_add_test(tc, test_split);
  tcase_add_test(tc, test_shuffle_golden);
  tcase_add_test(tc, test_batches);
  tcase_add_test(tc, test_gzip_trailers_and_members);
  tcase_add_test(tc, test_header_before_data);
  tcase_add_test(tc, test_empty_samples_and_counts);
  tcase_add_test(tc, test_fifo);
  tcase_add_test(tc, test_sample_shape);
  suite_add_tcase(s, tc);
  return s;
}

/* `check_dataset --fashion-mnist` (its own ctest entry) reads Debian's
 * dataset-fashion-mnist, which scripts/install-deps.sh installs; without it
 * the entry exits 77, which ctest reports as skipped. */
int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "--fashion-mnist") == 0) {
    if (access(FASHION_DIR "/train-images-idx3-ubyte.gz", R_OK) != 0) {
      fprintf(stderr, "check_dataset: %s absent (apt-get install dataset-fashion-mnist): skipped\n",
              FASHION_DIR);
      return 77;
    }
    Suite *s = suite_create("dataset-fashion-mnist");
    TCase *tc = tcase_create("fashion-mnist");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_fashion_mnist);
    suite_add_tcase(s, tc);
    return check_run(s);
  }
  return check_run(dataset_suite());
}
