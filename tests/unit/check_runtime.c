/* SPDX-License-Identifier: Apache-2.0 */
/*
 * check_runtime.c: Check suite of the runtime's host-side pieces: dtype
 * tables, the thread pool, and .npy reading and writing. The embedded .npy files were written
 * by NumPy 2.4 (np.save / np.lib.format.write_array) and pasted as bytes.
 */
#include "formats/npy.h"
#include "runtime/cpu_features.h"
#include "runtime/runtime.h"
#include "runtime/threadpool.h"
#include "util/half.h"

#include <check.h>

#include "tests/unit/test_support.h"
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- fixture: a fresh temporary directory per test ---- */

static char tmpdir[64];

static void setup(void) {
  snprintf(tmpdir, sizeof tmpdir, "/tmp/castor_check_runtime_XXXXXX");
  ck_assert_msg(mkdtemp(tmpdir) != NULL, "mkdtemp: %s", strerror(errno));
}

static void teardown(void) {
  DIR *dir = opendir(tmpdir);
  if (!dir) return;
  struct dirent *e;
  char path[512];
  while ((e = readdir(dir)) != NULL) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    snprintf(path, sizeof path, "%s/%s", tmpdir, e->d_name);
    unlink(path);
  }
  closedir(dir);
  rmdir(tmpdir);
}

/* tmpdir/name; a static buffer per call site is enough for these tests. */
static const char *tmp_path(const char *name, char *buf, size_t len) {
  snprintf(buf, len, "%s/%s", tmpdir, name);
  return buf;
}

static void write_bytes(const char *path, const void *data, size_t len) {
  FILE *f = fopen(path, "wb");
  ck_assert_msg(f != NULL, "%s: %s", path, strerror(errno));
  ck_assert(len == 0 || fwrite(data, 1, len, f) == len);
  fclose(f);
}

static unsigned char *read_bytes(const char *path, size_t *out_len) {
  char *data;
  ck_assert_msg(str_read_file(path, &data, out_len), "%s: %s", path, strerror(errno));
  return (unsigned char *)data;
}

/* ---- dtypes ---- */

START_TEST(test_dtype_table) {
  static const struct {
    rt_dtype t;
    int size;
    const char *name;
  } cases[] = {{DT_F32, 4, "f32"}, {DT_F16, 2, "f16"}, {DT_BF16, 2, "bf16"},
               {DT_I32, 4, "i32"}, {DT_I64, 8, "i64"}, {DT_I1, 1, "i1"}};
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    ck_assert_msg(dtype_size(cases[i].t) == cases[i].size, "size of %s", cases[i].name);
    ck_assert_str_eq(dtype_name(cases[i].t), cases[i].name);
  }
}
END_TEST

/* ---- files written by NumPy ---- */

/* {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), } */
static const unsigned char npy_f4_2x3[152] = {
    0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59, 0x01, 0x00, 0x76, 0x00, 0x7b, 0x27, 0x64, 0x65, 0x73, 0x63,
    0x72, 0x27, 0x3a, 0x20, 0x27, 0x3c, 0x66, 0x34, 0x27, 0x2c, 0x20, 0x27, 0x66, 0x6f, 0x72, 0x74,
    0x72, 0x61, 0x6e, 0x5f, 0x6f, 0x72, 0x64, 0x65, 0x72, 0x27, 0x3a, 0x20, 0x46, 0x61, 0x6c, 0x73,
    0x65, 0x2c, 0x20, 0x27, 0x73, 0x68, 0x61, 0x70, 0x65, 0x27, 0x3a, 0x20, 0x28, 0x32, 0x2c, 0x20,
    0x33, 0x29, 0x2c, 0x20, 0x7d, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x0a,
    0x00, 0x00, 0x80, 0x3f, 0x00, 0x00, 0x00, 0x40, 0x00, 0x00, 0x40, 0x40, 0x00, 0x00, 0x80, 0x40,
    0x00, 0x00, 0xa0, 0x40, 0x00, 0x00, 0xd0, 0xc0,
};
/* {'descr': '<i4', 'fortran_order': False, 'shape': (3,), } */
static const unsigned char npy_i4_v2[140] = {
    0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59, 0x02, 0x00, 0x74, 0x00, 0x00, 0x00, 0x7b, 0x27, 0x64, 0x65,
    0x73, 0x63, 0x72, 0x27, 0x3a, 0x20, 0x27, 0x3c, 0x69, 0x34, 0x27, 0x2c, 0x20, 0x27, 0x66, 0x6f,
    0x72, 0x74, 0x72, 0x61, 0x6e, 0x5f, 0x6f, 0x72, 0x64, 0x65, 0x72, 0x27, 0x3a, 0x20, 0x46, 0x61,
    0x6c, 0x73, 0x65, 0x2c, 0x20, 0x27, 0x73, 0x68, 0x61, 0x70, 0x65, 0x27, 0x3a, 0x20, 0x28, 0x33,
    0x2c, 0x29, 0x2c, 0x20, 0x7d, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x0a,
    0x01, 0x00, 0x00, 0x00, 0xfe, 0xff, 0xff, 0xff, 0x03, 0x00, 0x00, 0x00,
};
/* {'descr': '<f4', 'fortran_order': False, 'shape': (1, 1, 1, 2), } */
static const unsigned char npy_f4_v3[136] = {
    0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59, 0x03, 0x00, 0x74, 0x00, 0x00, 0x00, 0x7b, 0x27, 0x64, 0x65,
    0x73, 0x63, 0x72, 0x27, 0x3a, 0x20, 0x27, 0x3c, 0x66, 0x34, 0x27, 0x2c, 0x20, 0x27, 0x66, 0x6f,
    0x72, 0x74, 0x72, 0x61, 0x6e, 0x5f, 0x6f, 0x72, 0x64, 0x65, 0x72, 0x27, 0x3a, 0x20, 0x46, 0x61,
    0x6c, 0x73, 0x65, 0x2c, 0x20, 0x27, 0x73, 0x68, 0x61, 0x70, 0x65, 0x27, 0x3a, 0x20, 0x28, 0x31,
    0x2c, 0x20, 0x31, 0x2c, 0x20, 0x31, 0x2c, 0x20, 0x32, 0x29, 0x2c, 0x20, 0x7d, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x0a,
    0x00, 0x00, 0x00, 0x3f, 0x00, 0x00, 0x80, 0xbe,
};
/* {'descr': '<f8', 'fortran_order': False, 'shape': (2, 2), } */
static const unsigned char npy_f8_2x2[160] = {
    0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59, 0x01, 0x00, 0x76, 0x00, 0x7b, 0x27, 0x64, 0x65, 0x73, 0x63,
    0x72, 0x27, 0x3a, 0x20, 0x27, 0x3c, 0x66, 0x38, 0x27, 0x2c, 0x20, 0x27, 0x66, 0x6f, 0x72, 0x74,
    0x72, 0x61, 0x6e, 0x5f, 0x6f, 0x72, 0x64, 0x65, 0x72, 0x27, 0x3a, 0x20, 0x46, 0x61, 0x6c, 0x73,
    0x65, 0x2c, 0x20, 0x27, 0x73, 0x68, 0x61, 0x70, 0x65, 0x27, 0x3a, 0x20, 0x28, 0x32, 0x2c, 0x20,
    0x32, 0x29, 0x2c, 0x20, 0x7d, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x0a,
    0x9a, 0x99, 0x99, 0x99, 0x99, 0x99, 0xb9, 0x3f, 0x9c, 0x75, 0x00, 0x88, 0x3c, 0xe4, 0x37, 0x7e,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x04, 0xc0, 0x55, 0x55, 0x55, 0x55, 0x55, 0x55, 0xd5, 0x3f,
};
/* {'descr': '<f2', 'fortran_order': False, 'shape': (4,), } */
static const unsigned char npy_f2_4[136] = {
    0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59, 0x01, 0x00, 0x76, 0x00, 0x7b, 0x27, 0x64, 0x65, 0x73, 0x63,
    0x72, 0x27, 0x3a, 0x20, 0x27, 0x3c, 0x66, 0x32, 0x27, 0x2c, 0x20, 0x27, 0x66, 0x6f, 0x72, 0x74,
    0x72, 0x61, 0x6e, 0x5f, 0x6f, 0x72, 0x64, 0x65, 0x72, 0x27, 0x3a, 0x20, 0x46, 0x61, 0x6c, 0x73,
    0x65, 0x2c, 0x20, 0x27, 0x73, 0x68, 0x61, 0x70, 0x65, 0x27, 0x3a, 0x20, 0x28, 0x34, 0x2c, 0x29,
    0x2c, 0x20, 0x7d, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x0a,
    0x00, 0x3c, 0x00, 0xc0, 0xff, 0x7b, 0x01, 0x00,
};
/* {'descr': '|b1', 'fortran_order': False, 'shape': (2, 2), } */
static const unsigned char npy_b1_2x2[132] = {
    0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59, 0x01, 0x00, 0x76, 0x00, 0x7b, 0x27, 0x64, 0x65, 0x73, 0x63,
    0x72, 0x27, 0x3a, 0x20, 0x27, 0x7c, 0x62, 0x31, 0x27, 0x2c, 0x20, 0x27, 0x66, 0x6f, 0x72, 0x74,
    0x72, 0x61, 0x6e, 0x5f, 0x6f, 0x72, 0x64, 0x65, 0x72, 0x27, 0x3a, 0x20, 0x46, 0x61, 0x6c, 0x73,
    0x65, 0x2c, 0x20, 0x27, 0x73, 0x68, 0x61, 0x70, 0x65, 0x27, 0x3a, 0x20, 0x28, 0x32, 0x2c, 0x20,
    0x32, 0x29, 0x2c, 0x20, 0x7d, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x0a,
    0x01, 0x00, 0x00, 0x01,
};
/* {'descr': '<i8', 'fortran_order': False, 'shape': (2,), } */
static const unsigned char npy_i8_2[144] = {
    0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59, 0x01, 0x00, 0x76, 0x00, 0x7b, 0x27, 0x64, 0x65, 0x73, 0x63,
    0x72, 0x27, 0x3a, 0x20, 0x27, 0x3c, 0x69, 0x38, 0x27, 0x2c, 0x20, 0x27, 0x66, 0x6f, 0x72, 0x74,
    0x72, 0x61, 0x6e, 0x5f, 0x6f, 0x72, 0x64, 0x65, 0x72, 0x27, 0x3a, 0x20, 0x46, 0x61, 0x6c, 0x73,
    0x65, 0x2c, 0x20, 0x27, 0x73, 0x68, 0x61, 0x70, 0x65, 0x27, 0x3a, 0x20, 0x28, 0x32, 0x2c, 0x29,
    0x2c, 0x20, 0x7d, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x0a,
    0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00,
};
/* {'descr': '<f4', 'fortran_order': False, 'shape': (), } */
static const unsigned char npy_f4_scalar[132] = {
    0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59, 0x01, 0x00, 0x76, 0x00, 0x7b, 0x27, 0x64, 0x65, 0x73, 0x63,
    0x72, 0x27, 0x3a, 0x20, 0x27, 0x3c, 0x66, 0x34, 0x27, 0x2c, 0x20, 0x27, 0x66, 0x6f, 0x72, 0x74,
    0x72, 0x61, 0x6e, 0x5f, 0x6f, 0x72, 0x64, 0x65, 0x72, 0x27, 0x3a, 0x20, 0x46, 0x61, 0x6c, 0x73,
    0x65, 0x2c, 0x20, 0x27, 0x73, 0x68, 0x61, 0x70, 0x65, 0x27, 0x3a, 0x20, 0x28, 0x29, 0x2c, 0x20,
    0x7d, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x0a,
    0x00, 0x00, 0x60, 0x40,
};
/* {'descr': '<f4', 'fortran_order': False, 'shape': (0, 3), } */
static const unsigned char npy_f4_0x3[128] = {
    0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59, 0x01, 0x00, 0x76, 0x00, 0x7b, 0x27, 0x64, 0x65, 0x73, 0x63,
    0x72, 0x27, 0x3a, 0x20, 0x27, 0x3c, 0x66, 0x34, 0x27, 0x2c, 0x20, 0x27, 0x66, 0x6f, 0x72, 0x74,
    0x72, 0x61, 0x6e, 0x5f, 0x6f, 0x72, 0x64, 0x65, 0x72, 0x27, 0x3a, 0x20, 0x46, 0x61, 0x6c, 0x73,
    0x65, 0x2c, 0x20, 0x27, 0x73, 0x68, 0x61, 0x70, 0x65, 0x27, 0x3a, 0x20, 0x28, 0x30, 0x2c, 0x20,
    0x33, 0x29, 0x2c, 0x20, 0x7d, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x0a,
};
/* {'descr': '<f4', 'fortran_order': True, 'shape': (2, 2), } */
static const unsigned char npy_fortran[144] = {
    0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59, 0x01, 0x00, 0x76, 0x00, 0x7b, 0x27, 0x64, 0x65, 0x73, 0x63,
    0x72, 0x27, 0x3a, 0x20, 0x27, 0x3c, 0x66, 0x34, 0x27, 0x2c, 0x20, 0x27, 0x66, 0x6f, 0x72, 0x74,
    0x72, 0x61, 0x6e, 0x5f, 0x6f, 0x72, 0x64, 0x65, 0x72, 0x27, 0x3a, 0x20, 0x54, 0x72, 0x75, 0x65,
    0x2c, 0x20, 0x27, 0x73, 0x68, 0x61, 0x70, 0x65, 0x27, 0x3a, 0x20, 0x28, 0x32, 0x2c, 0x20, 0x32,
    0x29, 0x2c, 0x20, 0x7d, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x0a,
    0x00, 0x00, 0x80, 0x3f, 0x00, 0x00, 0x40, 0x40, 0x00, 0x00, 0x00, 0x40, 0x00, 0x00, 0x80, 0x40,
};
/* {'descr': '>f4', 'fortran_order': False, 'shape': (2,), } */
static const unsigned char npy_big_endian[136] = {
    0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59, 0x01, 0x00, 0x76, 0x00, 0x7b, 0x27, 0x64, 0x65, 0x73, 0x63,
    0x72, 0x27, 0x3a, 0x20, 0x27, 0x3e, 0x66, 0x34, 0x27, 0x2c, 0x20, 0x27, 0x66, 0x6f, 0x72, 0x74,
    0x72, 0x61, 0x6e, 0x5f, 0x6f, 0x72, 0x64, 0x65, 0x72, 0x27, 0x3a, 0x20, 0x46, 0x61, 0x6c, 0x73,
    0x65, 0x2c, 0x20, 0x27, 0x73, 0x68, 0x61, 0x70, 0x65, 0x27, 0x3a, 0x20, 0x28, 0x32, 0x2c, 0x29,
    0x2c, 0x20, 0x7d, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x0a,
    0x3f, 0x80, 0x00, 0x00, 0x40, 0x00, 0x00, 0x00,
};
/* {'descr': '<c8', 'fortran_order': False, 'shape': (1,), } */
static const unsigned char npy_complex[136] = {
    0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59, 0x01, 0x00, 0x76, 0x00, 0x7b, 0x27, 0x64, 0x65, 0x73, 0x63,
    0x72, 0x27, 0x3a, 0x20, 0x27, 0x3c, 0x63, 0x38, 0x27, 0x2c, 0x20, 0x27, 0x66, 0x6f, 0x72, 0x74,
    0x72, 0x61, 0x6e, 0x5f, 0x6f, 0x72, 0x64, 0x65, 0x72, 0x27, 0x3a, 0x20, 0x46, 0x61, 0x6c, 0x73,
    0x65, 0x2c, 0x20, 0x27, 0x73, 0x68, 0x61, 0x70, 0x65, 0x27, 0x3a, 0x20, 0x28, 0x31, 0x2c, 0x29,
    0x2c, 0x20, 0x7d, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x0a,
    0x00, 0x00, 0x80, 0x3f, 0x00, 0x00, 0x00, 0x40,
};
/* {'descr': '<f4', 'fortran_order': False, 'shape': (1, 1, 1, 1, 1, 1, 2), } */
static const unsigned char npy_rank7[136] = {
    0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59, 0x01, 0x00, 0x76, 0x00, 0x7b, 0x27, 0x64, 0x65, 0x73, 0x63,
    0x72, 0x27, 0x3a, 0x20, 0x27, 0x3c, 0x66, 0x34, 0x27, 0x2c, 0x20, 0x27, 0x66, 0x6f, 0x72, 0x74,
    0x72, 0x61, 0x6e, 0x5f, 0x6f, 0x72, 0x64, 0x65, 0x72, 0x27, 0x3a, 0x20, 0x46, 0x61, 0x6c, 0x73,
    0x65, 0x2c, 0x20, 0x27, 0x73, 0x68, 0x61, 0x70, 0x65, 0x27, 0x3a, 0x20, 0x28, 0x31, 0x2c, 0x20,
    0x31, 0x2c, 0x20, 0x31, 0x2c, 0x20, 0x31, 0x2c, 0x20, 0x31, 0x2c, 0x20, 0x31, 0x2c, 0x20, 0x32,
    0x29, 0x2c, 0x20, 0x7d, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x0a,
    0x00, 0x00, 0x80, 0x3f, 0x00, 0x00, 0x00, 0x40,
};
static const unsigned char npy_f8_round[168] = {
    0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59, 0x01, 0x00, 0x76, 0x00, 0x7b, 0x27, 0x64, 0x65, 0x73, 0x63,
    0x72, 0x27, 0x3a, 0x20, 0x27, 0x3c, 0x66, 0x38, 0x27, 0x2c, 0x20, 0x27, 0x66, 0x6f, 0x72, 0x74,
    0x72, 0x61, 0x6e, 0x5f, 0x6f, 0x72, 0x64, 0x65, 0x72, 0x27, 0x3a, 0x20, 0x46, 0x61, 0x6c, 0x73,
    0x65, 0x2c, 0x20, 0x27, 0x73, 0x68, 0x61, 0x70, 0x65, 0x27, 0x3a, 0x20, 0x28, 0x35, 0x2c, 0x29,
    0x2c, 0x20, 0x7d, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x0a,
    0x00, 0x10, 0x00, 0x00, 0x00, 0x02, 0xf0, 0x3f, 0x9a, 0x99, 0x99, 0x99, 0x99, 0x99, 0xb9, 0x3f,
    0x9c, 0x75, 0x00, 0x88, 0x3c, 0xe4, 0x37, 0x7e, 0x55, 0x55, 0x55, 0x55, 0x55, 0x55, 0xd5, 0xbf,
    0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x60, 0x3e,
};

/* Reads a blob through a file; fails the test if reading fails. */
static void read_blob(const char *name, const unsigned char *blob, size_t len, npy_array *a) {
  char path[256];
  tmp_path(name, path, sizeof path);
  write_bytes(path, blob, len);
  diag_sink *d = diag_sink_create();
  bool ok = npy_read(path, a, d);
  ck_assert_msg(ok, "%s: %s", name, diag_text(d));
  ck_assert_int_eq(diag_error_count(d), 0);
  ck_assert_int_eq(diag_warning_count(d), 0);
  diag_sink_destroy(d);
}

static void assert_shape(const npy_array *a, int rank, const int64_t *dims) {
  ck_assert_int_eq(a->rank, rank);
  int64_t n = 1;
  for (int i = 0; i < rank; i++) {
    ck_assert_msg(a->dims[i] == dims[i], "dim %d: %lld != %lld", i, (long long)a->dims[i],
                  (long long)dims[i]);
    n *= dims[i];
  }
  ck_assert_int_eq(a->numel, n);
}

START_TEST(test_read_numpy_files) {
  npy_array a;
  read_blob("f4.npy", npy_f4_2x3, sizeof npy_f4_2x3, &a);
  ck_assert(a.dtype == DT_F32 && !a.is_f64);
  assert_shape(&a, 2, (int64_t[]){2, 3});
  ck_assert_int_eq(a.nbytes, 24);
  static const float f4[] = {1, 2, 3, 4, 5, -6.5f};
  ck_assert(memcmp(a.data, f4, sizeof f4) == 0);
  npy_fini(&a);
  ck_assert_ptr_null(a.data);

  read_blob("i4v2.npy", npy_i4_v2, sizeof npy_i4_v2, &a);
  ck_assert(a.dtype == DT_I32);
  assert_shape(&a, 1, (int64_t[]){3});
  ck_assert(memcmp(a.data, (int32_t[]){1, -2, 3}, 12) == 0);
  npy_fini(&a);

  read_blob("f4v3.npy", npy_f4_v3, sizeof npy_f4_v3, &a);
  ck_assert(a.dtype == DT_F32);
  assert_shape(&a, 4, (int64_t[]){1, 1, 1, 2});
  ck_assert(memcmp(a.data, (float[]){0.5f, -0.25f}, 8) == 0);
  npy_fini(&a);

  read_blob("f2.npy", npy_f2_4, sizeof npy_f2_4, &a);
  ck_assert(a.dtype == DT_F16);
  assert_shape(&a, 1, (int64_t[]){4});
  /* 6e-8 is the f16 subnormal 0x0001 */
  ck_assert(memcmp(a.data, (uint16_t[]){0x3c00, 0xc000, 0x7bff, 0x0001}, 8) == 0);
  npy_fini(&a);

  read_blob("b1.npy", npy_b1_2x2, sizeof npy_b1_2x2, &a);
  ck_assert(a.dtype == DT_I1);
  assert_shape(&a, 2, (int64_t[]){2, 2});
  ck_assert(memcmp(a.data, (uint8_t[]){1, 0, 0, 1}, 4) == 0);
  npy_fini(&a);

  read_blob("i8.npy", npy_i8_2, sizeof npy_i8_2, &a);
  ck_assert(a.dtype == DT_I64);
  ck_assert(memcmp(a.data, (int64_t[]){-1, (int64_t)1 << 40}, 16) == 0);
  npy_fini(&a);

  read_blob("scalar.npy", npy_f4_scalar, sizeof npy_f4_scalar, &a);
  ck_assert_int_eq(a.rank, 0);
  ck_assert_int_eq(a.numel, 1);
  ck_assert(*(float *)a.data == 3.5f);
  npy_fini(&a);

  read_blob("empty.npy", npy_f4_0x3, sizeof npy_f4_0x3, &a);
  assert_shape(&a, 2, (int64_t[]){0, 3});
  ck_assert_int_eq(a.nbytes, 0);
  npy_fini(&a);
}
END_TEST

START_TEST(test_read_f8_convert) {
  npy_array a;
  char path[256];
  tmp_path("f8.npy", path, sizeof path);
  read_blob("f8.npy", npy_f8_2x2, sizeof npy_f8_2x2, &a);
  ck_assert(a.is_f64);
  assert_shape(&a, 2, (int64_t[]){2, 2});
  ck_assert_int_eq(a.nbytes, 32);
  diag_sink *d = diag_sink_create();
  ck_assert(npy_to_f32(&a, path, d));
  ck_assert(a.dtype == DT_F32 && !a.is_f64 && a.nbytes == 16);
  float *f = a.data;
  ck_assert(f[0] == 0.1f && isinf(f[1]) && f[1] > 0 && f[2] == -2.5f && f[3] == (float)(1.0 / 3));
  npy_fini(&a);

  /* f64 -> f16 rounds once (NumPy: 1 + 2^-11 + 2^-40 -> 0x3c01, where going
   * through f32 would give 0x3c00); f64 -> bf16 goes through f32 as ml_dtypes
   * does. Expected bits from NumPy 2.4 / ml_dtypes 0.6. */
  static const uint16_t want16[] = {0x3c01, 0x2e66, 0x7c00, 0xb555, 0x0001};
  static const uint16_t want_b[] = {0x3f80, 0x3dcd, 0x7f80, 0xbeab, 0x3300};
  read_blob("round.npy", npy_f8_round, sizeof npy_f8_round, &a);
  ck_assert(npy_convert(&a, DT_F16, path, d));
  ck_assert(a.dtype == DT_F16 && a.nbytes == 10);
  for (int i = 0; i < 5; i++)
    ck_assert_msg(((uint16_t *)a.data)[i] == want16[i], "f16[%d] = 0x%04x, want 0x%04x", i,
                  ((uint16_t *)a.data)[i], want16[i]);
  npy_fini(&a);
  read_blob("round.npy", npy_f8_round, sizeof npy_f8_round, &a);
  ck_assert(npy_convert(&a, DT_BF16, path, d));
  for (int i = 0; i < 5; i++)
    ck_assert_msg(((uint16_t *)a.data)[i] == want_b[i], "bf16[%d] = 0x%04x, want 0x%04x", i,
                  ((uint16_t *)a.data)[i], want_b[i]);
  /* bf16 -> f32 is exact; f32 -> f32 is a no-op */
  ck_assert(npy_to_f32(&a, path, d));
  ck_assert(((float *)a.data)[1] == half_bf16_to_f32(0x3dcd));
  ck_assert(npy_to_f32(&a, path, d));
  ck_assert_int_eq(diag_error_count(d), 0);
  npy_fini(&a);

  /* integer arrays do not convert */
  read_blob("i4.npy", npy_i4_v2, sizeof npy_i4_v2, &a);
  ck_assert(!npy_convert(&a, DT_F32, path, d));
  char want[512];
  snprintf(want, sizeof want, "%s: error: cannot convert a .npy array of i32 to f32\n", path);
  ck_assert_str_eq(diag_text(d), want);
  ck_assert(a.dtype == DT_I32 && a.data != NULL);
  npy_fini(&a);
  diag_sink_destroy(d);
}
END_TEST

/* npy_write produces the very bytes np.save does. */
START_TEST(test_write_matches_numpy) {
  static const struct {
    const char *name;
    const unsigned char *blob;
    size_t len;
    rt_dtype dtype;
    int rank;
    int64_t dims[4];
  } cases[] = {
      {"f4", npy_f4_2x3, sizeof npy_f4_2x3, DT_F32, 2, {2, 3}},
      {"f2", npy_f2_4, sizeof npy_f2_4, DT_F16, 1, {4}},
      {"b1", npy_b1_2x2, sizeof npy_b1_2x2, DT_I1, 2, {2, 2}},
      {"i8", npy_i8_2, sizeof npy_i8_2, DT_I64, 1, {2}},
      {"scalar", npy_f4_scalar, sizeof npy_f4_scalar, DT_F32, 0, {0}},
      {"empty", npy_f4_0x3, sizeof npy_f4_0x3, DT_F32, 2, {0, 3}},
      {"rank4", npy_f4_v3, sizeof npy_f4_v3, DT_F32, 4, {1, 1, 1, 2}},
  };
  diag_sink *d = diag_sink_create();
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    npy_array a;
    read_blob("in.npy", cases[i].blob, cases[i].len, &a);
    char path[256];
    tmp_path("out.npy", path, sizeof path);
    ck_assert_msg(npy_write(path, cases[i].dtype, cases[i].rank, cases[i].dims, a.data, d),
                  "%s: %s", cases[i].name, diag_text(d));
    size_t len;
    unsigned char *bytes = read_bytes(path, &len);
    if (cases[i].blob == npy_f4_v3) {
      /* NumPy wrote that one as version 3.0; we write 1.0 with the same
       * 64-byte-aligned header (one byte shorter length field: two fewer
       * bytes of the prefix, two more spaces). */
      ck_assert_uint_eq(len, cases[i].len);
      ck_assert(bytes[6] == 1 && memcmp(bytes + 128, cases[i].blob + 128, len - 128) == 0);
    } else {
      ck_assert_msg(len == cases[i].len && memcmp(bytes, cases[i].blob, len) == 0,
                    "%s: bytes differ from np.save", cases[i].name);
    }
    free(bytes);
    npy_fini(&a);
  }
  diag_sink_destroy(d);
}
END_TEST

/* Write then read back: every dtype x rank, data and shape identical. */
START_TEST(test_round_trip) {
  static const rt_dtype dtypes[] = {DT_F32, DT_F16, DT_I32, DT_I64, DT_I1};
  static const int64_t shapes[][6] = {{0}, {5}, {3, 7}, {2, 3, 4}, {2, 1, 3, 5}, {1, 2, 1, 3, 2, 2},
                                      {2, 1, 2, 1, 3, 2}};
  rng r;
  rng_init(&r, 11);
  diag_sink *d = diag_sink_create();
  for (size_t t = 0; t < sizeof dtypes / sizeof *dtypes; t++) {
    for (int rank = 0; rank <= 6; rank++) {
      int64_t numel = 1;
      for (int i = 0; i < rank; i++) numel *= shapes[rank][i];
      int64_t nbytes = numel * dtype_size(dtypes[t]);
      unsigned char *data = malloc((size_t)nbytes);
      for (int64_t i = 0; i < nbytes; i++)
        data[i] = dtypes[t] == DT_I1 ? (unsigned char)(rng_next(&r) & 1)
                                     : (unsigned char)rng_next(&r);
      char path[256];
      tmp_path("rt.npy", path, sizeof path);
      ck_assert_msg(npy_write(path, dtypes[t], rank, shapes[rank], data, d), "%s rank %d: %s",
                    dtype_name(dtypes[t]), rank, diag_text(d));
      npy_array a;
      ck_assert_msg(npy_read(path, &a, d), "%s rank %d: %s", dtype_name(dtypes[t]), rank,
                    diag_text(d));
      ck_assert_msg(a.dtype == dtypes[t] && !a.is_f64, "%s rank %d: read back as %s",
                    dtype_name(dtypes[t]), rank, dtype_name(a.dtype));
      assert_shape(&a, rank, shapes[rank]);
      ck_assert_int_eq(a.nbytes, nbytes);
      ck_assert_msg(memcmp(a.data, data, (size_t)nbytes) == 0, "%s rank %d: data differs",
                    dtype_name(dtypes[t]), rank);
      size_t len;
      unsigned char *bytes = read_bytes(path, &len);
      ck_assert_msg((len - (size_t)nbytes) % 64 == 0, "header not 64-byte aligned");
      free(bytes);
      npy_fini(&a);
      free(data);
    }
  }
  ck_assert_int_eq(diag_error_count(d), 0);
  diag_sink_destroy(d);
}
END_TEST

/* ---- errors: exact messages ---- */

/* Reads `len` bytes of `blob` as tmpdir/name and checks the one error. */
static void expect_read_error(const char *name, const void *blob, size_t len, const char *msg) {
  char path[256], want[1024];
  tmp_path(name, path, sizeof path);
  write_bytes(path, blob, len);
  diag_sink *d = diag_sink_create();
  npy_array a;
  ck_assert_msg(!npy_read(path, &a, d), "%s: read should fail", name);
  ck_assert_ptr_null(a.data);
  snprintf(want, sizeof want, "%s: error: %s\n", path, msg);
  ck_assert_str_eq(diag_text(d), want);
  ck_assert_int_eq(diag_error_count(d), 1);
  npy_fini(&a);
  diag_sink_destroy(d);
}

/* A version-1.0 file with the given header text (padded as NumPy pads) and
 * `data_len` bytes of data; returns its length. */
static size_t make_npy(unsigned char *buf, const char *header, size_t data_len) {
  size_t h = strlen(header), total = 10 + h + 1;
  while (total % 64) total++;
  memcpy(buf, "\x93NUMPY\x01\x00", 8);
  buf[8] = (unsigned char)((total - 10) & 0xff);
  buf[9] = (unsigned char)((total - 10) >> 8);
  memcpy(buf + 10, header, h);
  memset(buf + 10 + h, ' ', total - 10 - h - 1);
  buf[total - 1] = '\n';
  for (size_t i = 0; i < data_len; i++) buf[total + i] = (unsigned char)i;
  return total + data_len;
}

START_TEST(test_read_errors) {
  char path[256], want[512];
  diag_sink *d = diag_sink_create();
  npy_array a;
  tmp_path("missing.npy", path, sizeof path);
  ck_assert(!npy_read(path, &a, d));
  snprintf(want, sizeof want, "%s: error: cannot open: No such file or directory\n", path);
  ck_assert_str_eq(diag_text(d), want);
  diag_sink_destroy(d);

  expect_read_error("empty.npy", "", 0, "not a .npy file (bad magic bytes)");
  expect_read_error("text.npy", "hello world\n", 12, "not a .npy file (bad magic bytes)");
  expect_read_error("magic.npy", npy_f4_2x3, 7,
                    "truncated .npy header: the file ends after 7 bytes");
  expect_read_error("hlen.npy", npy_f4_2x3, 9,
                    "truncated .npy header: the file ends after 9 bytes");
  expect_read_error("header.npy", npy_f4_2x3, 50,
                    "truncated .npy header: it declares 118 bytes, the file has 40");
  expect_read_error("version.npy", "\x93NUMPY\x04\x00\x00\x00", 10,
                    "unsupported .npy format version 4.0 (supported: 1.0, 2.0, 3.0)");
  expect_read_error("fortran.npy", npy_fortran, sizeof npy_fortran,
                    "Fortran-order .npy arrays are not supported; save a C-order array "
                    "(np.ascontiguousarray)");
  expect_read_error("big.npy", npy_big_endian, sizeof npy_big_endian,
                    "big-endian .npy dtype '>f4' is not supported; save it little-endian "
                    "(a.astype('<f4'))");
  expect_read_error("complex.npy", npy_complex, sizeof npy_complex,
                    "unsupported .npy dtype '<c8' (supported: <f4, <f2, <f8, <i4, <i8, |b1)");
  expect_read_error("rank7.npy", npy_rank7, sizeof npy_rank7,
                    ".npy array of rank 7 is not supported (at most 6 dimensions)");

  unsigned char buf[16384];
  size_t n;
  n = make_npy(buf, "{'descr': '<f4', 'fortran_order': False, 'shape': (4, 784), }", 100);
  snprintf(want, sizeof want,
           "truncated .npy '%s/short.npy': shape (4, 784) needs 12544 bytes of data, file has 100",
           tmpdir);
  expect_read_error("short.npy", buf, n, want);
  n = make_npy(buf, "{'descr': '<f4', 'fortran_order': False, 'shape': (1099511627776, 1024), }",
               0);
  expect_read_error("overflow.npy", buf, n,
                    ".npy shape (1099511627776, 1024) of '<f4' is too large");
  n = make_npy(buf, "{'descr': '<i8', 'fortran_order': False, 'shape': (4611686018427387904,), }",
               0);
  expect_read_error("overflow2.npy", buf, n,
                    ".npy shape (4611686018427387904,) of '<i8' is too large");
  n = make_npy(buf, "{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,), }",
               0);
  expect_read_error("hugedim.npy", buf, n,
                    ".npy shape dimension 99999999999999999999 is too large");
  n = make_npy(buf, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, -1), }", 0);
  expect_read_error("negative.npy", buf, n, "negative dimension -1 in .npy shape");
  n = make_npy(buf, "['descr', '<f4']", 0);
  expect_read_error("list.npy", buf, n,
                    "malformed .npy header: expected a dict at byte 0 of \"['descr', '<f4']\"");
  n = make_npy(buf, "{'descr': '<f4', 'fortran_order': False}", 0);
  expect_read_error("noshape.npy", buf, n, "malformed .npy header: no 'shape' key");
  n = make_npy(buf, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'x': 1}", 0);
  expect_read_error("extrakey.npy", buf, n,
                    "malformed .npy header: unexpected key at byte 56 of \"{'descr': '<f4', "
                    "'fortran_order': False, 'shape': (2,), 'x': 1}\"");
  n = make_npy(buf, "{'descr': '<f4', 'descr': '<f4'}", 0);
  expect_read_error("dup.npy", buf, n,
                    "malformed .npy header: duplicate key at byte 17 of \"{'descr': '<f4', "
                    "'descr': '<f4'}\"");
  n = make_npy(buf, "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,), }", 0);
  expect_read_error("struct.npy", buf, n, "structured .npy dtypes are not supported");
  n = make_npy(buf, "{'descr': '<f4, 'fortran_order': False, 'shape': (2,), }", 0);
  expect_read_error("quote.npy", buf, n,
                    "malformed .npy header: expected ',' or '}' at byte 17 of \"{'descr': "
                    "'<f4, 'fortran_order': False, 'shape': (2,), }\"");
  n = make_npy(buf, "{'descr': '<f4', 'fortran_order': false, 'shape': (2,), }", 0);
  expect_read_error("false.npy", buf, n,
                    "malformed .npy header: expected True or False for 'fortran_order' at byte 34 "
                    "of \"{'descr': '<f4', 'fortran_order': false, 'shape': (2,), }\"");
  n = make_npy(buf, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), } x", 0);
  expect_read_error("trailing.npy", buf, n,
                    "malformed .npy header: unexpected text after the dict at byte 58 of "
                    "\"{'descr': '<f4', 'fortran_order': False, 'shape': (2,), } x\"");
  n = make_npy(buf, "{'descr': '\x01\xff', 'fortran_order': False, 'shape': (2,), }", 0);
  expect_read_error("bytes.npy", buf, n,
                    "unsupported .npy dtype '?\?' (supported: <f4, <f2, <f8, <i4, <i8, |b1)");
  n = make_npy(buf, "{\"descr\": \"<f4\", \"fortran_order\": False, \"shape\": (2L, 1L)}", 8);
  /* double quotes and Python 2 longs are fine */
  tmp_path("py2.npy", path, sizeof path);
  write_bytes(path, buf, n);
  d = diag_sink_create();
  ck_assert_msg(npy_read(path, &a, d), "%s", diag_text(d));
  assert_shape(&a, 2, (int64_t[]){2, 1});
  npy_fini(&a);
  /* trailing data: a warning, the array is still read */
  n = make_npy(buf, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", 9);
  tmp_path("extra.npy", path, sizeof path);
  write_bytes(path, buf, n);
  ck_assert(npy_read(path, &a, d));
  snprintf(want, sizeof want,
           "%s: warning: bytes after the .npy data (shape (2,)) are ignored\n", path);
  ck_assert_str_eq(diag_text(d), want);
  npy_fini(&a);
  /* a directory */
  diag_clear(d);
  ck_assert(!npy_read(tmpdir, &a, d));
  snprintf(want, sizeof want, "%s: error: cannot read: Is a directory\n", tmpdir);
  ck_assert_str_eq(diag_text(d), want);
  diag_sink_destroy(d);
}
END_TEST

START_TEST(test_write_errors) {
  char path[256], want[512];
  diag_sink *d = diag_sink_create();
  tmp_path("w.npy", path, sizeof path);
  uint16_t data[4] = {0};
  ck_assert(!npy_write(path, DT_BF16, 1, (int64_t[]){4}, data, d));
  snprintf(want, sizeof want, "%s: error: cannot write bf16 to .npy: NumPy has no bf16 dtype\n",
           path);
  ck_assert_str_eq(diag_text(d), want);
  diag_clear(d);
  ck_assert(!npy_write(path, DT_F32, 7, (int64_t[]){1, 1, 1, 1, 1, 1, 1}, data, d));
  snprintf(want, sizeof want, "%s: error: cannot write a .npy array of rank 7 (at most 6)\n",
           path);
  ck_assert_str_eq(diag_text(d), want);
  diag_clear(d);
  ck_assert(!npy_write(path, DT_F32, 2, (int64_t[]){2, -3}, data, d));
  snprintf(want, sizeof want,
           "%s: error: cannot write a .npy array with negative dimension -3\n", path);
  ck_assert_str_eq(diag_text(d), want);
  diag_clear(d);
  ck_assert(!npy_write(path, DT_I64, 2, (int64_t[]){(int64_t)1 << 40, 1 << 20}, data, d));
  snprintf(want, sizeof want,
           "%s: error: cannot write a .npy array of shape (1099511627776, 1048576): too large\n",
           path);
  ck_assert_str_eq(diag_text(d), want);
  ck_assert(access(path, F_OK) != 0);
  diag_clear(d);
  tmp_path("no/such/dir.npy", path, sizeof path);
  ck_assert(!npy_write(path, DT_F32, 1, (int64_t[]){1}, data, d));
  snprintf(want, sizeof want, "%s: error: cannot open for writing: No such file or directory\n",
           path);
  ck_assert_str_eq(diag_text(d), want);
  diag_clear(d);
  if (access("/dev/full", W_OK) == 0) {
    ck_assert(!npy_write("/dev/full", DT_F32, 1, (int64_t[]){4}, data, d));
    ck_assert_str_eq(diag_text(d), "/dev/full: error: cannot write: No space left on device\n");
  }
  diag_sink_destroy(d);
}
END_TEST

/* Every truncation of a valid file, and random byte corruptions of its
 * header, are either read or reported; never a crash (ASan checks the
 * rest). */
START_TEST(test_read_fuzz) {
  char path[256];
  tmp_path("fuzz.npy", path, sizeof path);
  diag_sink *d = diag_sink_create();
  npy_array a;
  for (size_t len = 0; len < sizeof npy_f4_2x3; len++) {
    write_bytes(path, npy_f4_2x3, len);
    diag_clear(d);
    ck_assert_msg(!npy_read(path, &a, d), "truncated to %zu bytes but read", len);
    ck_assert_int_eq(diag_error_count(d), 1);
  }
  rng r;
  rng_init(&r, 99);
  unsigned char buf[sizeof npy_f8_2x2];
  int n_ok = 0;
  for (int iter = 0; iter < 3000; iter++) {
    memcpy(buf, npy_f8_2x2, sizeof buf);
    int flips = 1 + (int)(rng_next(&r) % 4);
    for (int k = 0; k < flips; k++) {
      size_t at = (size_t)(rng_next(&r) % 128);
      static const char interesting[] = "{}()[]',: 0123456789-LTF<>|\n\x00\xff";
      size_t pick = (size_t)(rng_next(&r) % (sizeof interesting - 1));
      buf[at] = rng_next(&r) & 1 ? (unsigned char)rng_next(&r) : (unsigned char)interesting[pick];
    }
    write_bytes(path, buf, sizeof buf);
    diag_clear(d);
    if (npy_read(path, &a, d)) {
      n_ok++;
      ck_assert(a.numel >= 0 && a.rank >= 0 && a.rank <= RT_MAX_RANK);
      npy_fini(&a);
    } else {
      ck_assert_int_eq(diag_error_count(d), 1);
      ck_assert_ptr_null(a.data);
    }
  }
  ck_assert_int_gt(n_ok, 0); /* flips in the padding leave the file valid */
  diag_sink_destroy(d);
}
END_TEST

/* __truncsfbf2 as the JIT resolves it: bf16 bits in the low half of the
 * returned register, rounded to nearest even, NaN canonical. */
START_TEST(test_truncsfbf2_helper) {
  const rt_symbol *h = rt_helper_symbols();
  ck_assert_str_eq(h[0].name, "__truncsfbf2");
  float (*fn)(float) = (float (*)(float))h[0].addr;
  static const struct {
    uint32_t in;
    uint16_t want;
  } cases[] = {
      {0x3f800000u, 0x3f80}, {0x3f808000u, 0x3f80}, /* 1 + 2^-8: tie to even */
      {0x3f818000u, 0x3f82}, /* 1 + 3*2^-8: tie up to even */
      {0xc0200000u, 0xc020}, {0x7f800000u, 0x7f80}, {0x7f800001u, 0x7fc0}, {0xff800001u, 0xffc0},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    float x, r;
    uint32_t bits;
    memcpy(&x, &cases[i].in, 4);
    r = fn(x);
    memcpy(&bits, &r, 4);
    ck_assert_msg((uint16_t)bits == cases[i].want, "0x%08x -> 0x%04x, want 0x%04x", cases[i].in,
                  (unsigned)(uint16_t)bits, cases[i].want);
  }
}
END_TEST

/* The summary castor run prints never hides NaN or Inf: min, max and mean
 * over the finite values, the counts after them, argmax skipping NaN. */
START_TEST(test_summary_nonfinite) {
  static const struct {
    float x[4];
    const char *want;
  } cases[] = {
      {{1, 2, 3, 4}, "y: f32[2,2] min 1 max 4 mean 2.5 argmax [1, 1]\n"},
      {{NAN, 2, INFINITY, 4},
       "y: f32[2,2] min 2 max 2 mean 2 argmax [1, 0]; 1 NaN, 1 +Inf, 1 -Inf (min, max and mean of the 1 "
       "finite values)\n"},
      {{NAN, NAN, NAN, NAN}, "y: f32[2,2] 4 NaN (no finite values)\n"},
      {{-INFINITY, INFINITY, NAN, NAN}, "y: f32[2,2] 2 NaN, 1 +Inf, 1 -Inf (no finite values)\n"},
  };
  int64_t dims[2] = {2, 2};
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    float x[4];
    memcpy(x, cases[i].x, sizeof x);
    if (i == 1) x[3] = -INFINITY; /* {NaN, 2, +Inf, -Inf} */
    str_buf b;
    str_buf_init(&b);
    rt_tensor_summary(&b, "y", DT_F32, 2, dims, x);
    ck_assert_msg(str_eq(str_buf_cstr(&b), cases[i].want), "case %zu:\ngot  %swant %s", i, str_buf_cstr(&b),
                  cases[i].want);
    str_buf_fini(&b);
  }
  /* 16-bit outputs (--keep-16bit-outputs) are summarized too */
  uint16_t h[4] = {0x3c00, 0x7e00, 0xfc00, 0x4000}; /* 1, NaN, -Inf, 2 */
  str_buf b;
  str_buf_init(&b);
  rt_tensor_summary(&b, "h", DT_F16, 2, dims, h);
  ck_assert_str_eq(str_buf_cstr(&b),
                   "h: f16[2,2] min 1 max 2 mean 1.5 argmax [0, 1]; 1 NaN, 1 -Inf (min, max and mean of the 2 "
                   "finite values)\n");
  str_buf_fini(&b);
  int64_t counts[3];
  ck_assert(!rt_tensor_nonfinite(DT_I32, 2, dims, h, counts) && counts[0] == 0);
  /* an empty tensor has no statistics */
  str_buf_init(&b);
  rt_tensor_summary(&b, "e", DT_F32, 2, (int64_t[]){3, 0}, h);
  ck_assert_str_eq(str_buf_cstr(&b), "e: f32[3,0] (empty)\n");
  str_buf_fini(&b);
}
END_TEST

/* The AOT main's CPU check (runtime/cpu_features.c): x86-64's baseline is
 * always there, unknown names are not checked, the last mention wins, and
 * rt_cpu_lacks agrees with rt_cpu_has name by name (on this CPU: under
 * tests/emulated-cpu.sh, an AVX2 one that lacks avx512f). */
START_TEST(test_cpu_features) {
  char lack[16] = "";
  bool known;
  ck_assert(rt_cpu_has("sse2", &known) && known);
  ck_assert(rt_cpu_has("no-such-feature", &known) && !known);
  ck_assert(!rt_cpu_lacks("+sse2,+no-such-feature,-avx512bf16", lack, sizeof lack));
  ck_assert(!rt_cpu_lacks("", lack, sizeof lack) && !rt_cpu_lacks(NULL, lack, sizeof lack));
  static const char *const names[] = {"avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl",
                                      "avx512bf16", "avx512fp16", "amx-tile", "amx-bf16"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    char want[64];
    snprintf(want, sizeof want, "+sse2,+%s", names[i]);
    bool has = rt_cpu_has(names[i], &known);
    ck_assert_msg(known, "%s: not known", names[i]);
    ck_assert_msg(rt_cpu_lacks(want, lack, sizeof lack) == !has, "%s: lacks and has disagree", names[i]);
    if (!has) ck_assert_str_eq(lack, names[i]);
    snprintf(want, sizeof want, "+%s,-%s", names[i], names[i]); /* turned off again: not needed */
    ck_assert(!rt_cpu_lacks(want, lack, sizeof lack));
  }
  fprintf(stderr, "check_runtime: this CPU %s avx512bf16\n", rt_cpu_has("avx512bf16", &known) ? "has" : "lacks");
}
END_TEST

/* ---- the thread pool ---- */

enum { POOL_MAX_TASKS = 500, POOL_SCRATCH = 200 };

typedef struct pool_job {
  atomic_int runs[POOL_MAX_TASKS];
  atomic_int bad_scratch;
  int spin; /* busy work per task, so that workers join while tasks remain */
} pool_job;

static void pool_task(void *arg, int64_t t, void *scratch) {
  pool_job *j = arg;
  if (!scratch || (uintptr_t)scratch % 64) atomic_fetch_add(&j->bad_scratch, 1);
  else memset(scratch, (int)(t & 0xff), POOL_SCRATCH); /* all of it: ASan sees an overrun */
  volatile int sink = 0;
  for (int i = 0; i < j->spin; i++) sink += i;
  atomic_fetch_add(&j->runs[t], 1);
}

/* Runs many jobs of each size on 2, 3 and 5 threads; every task runs once. */
static void pool_jobs(int rounds) {
  static const int64_t sizes[] = {1, 2, 3, 7, 64, POOL_MAX_TASKS};
  static const int threads[] = {2, 3, 5};
  pool_job *j = calloc(1, sizeof *j);
  ck_assert_ptr_nonnull(j);
  for (int r = 0; r < rounds; r++)
    for (size_t ti = 0; ti < sizeof threads / sizeof *threads; ti++)
      for (size_t si = 0; si < sizeof sizes / sizeof *sizes; si++) {
        int64_t n = sizes[si];
        j->spin = (r % 3) * 200;
        rt_pool_run(threads[ti], n, POOL_SCRATCH, pool_task, j);
        for (int64_t t = 0; t < n; t++) {
          int k = atomic_exchange(&j->runs[t], 0);
          ck_assert_msg(k == 1, "%d threads, %lld tasks: task %lld ran %d times", threads[ti], (long long)n,
                        (long long)t, k);
        }
        for (int64_t t = n; t < POOL_MAX_TASKS; t++) ck_assert_int_eq(atomic_load(&j->runs[t]), 0);
      }
  ck_assert_int_eq(atomic_load(&j->bad_scratch), 0);
  free(j);
}

/* Every task of every job runs exactly once with a scratch buffer of its
 * own, whether the workers join at once, late (the caller may finish a
 * small job before they wake, and then does not wait for them) or not at
 * all; and while a second thread runs jobs too (it finds the pool busy and
 * runs its own alone). */
static void *pool_jobs_thread(void *arg) {
  pool_jobs(*(int *)arg);
  return NULL;
}

START_TEST(test_thread_pool) {
  pool_job *empty = calloc(1, sizeof *empty); /* empty tensors: a job of 0 tasks runs none, on any thread count */
  ck_assert_ptr_nonnull(empty);
  for (int threads = 1; threads <= 5; threads++) rt_pool_run(threads, 0, POOL_SCRATCH, pool_task, empty);
  for (int t = 0; t < POOL_MAX_TASKS; t++) ck_assert_int_eq(atomic_load(&empty->runs[t]), 0);
  free(empty);
  int rounds = 60;
  pool_jobs(rounds);
  pthread_t other;
  ck_assert_int_eq(pthread_create(&other, NULL, pool_jobs_thread, &rounds), 0);
  pool_jobs(rounds);
  ck_assert_int_eq(pthread_join(other, NULL), 0);
}
END_TEST


/* convolutional networks: how a launch is cut into tiles. A GEMM launch
 * is cut into column tiles first (col_step columns), then rows; one with
 * row_tile_min into row tiles of at least that many rows first, columns
 * only for the tiles still wanted. */
enum { TILE_MAX = 64 };
static struct {
  atomic_int n;
  int64_t r0[TILE_MAX], r1[TILE_MAX], c0[TILE_MAX], c1[TILE_MAX];
} tiles;

static void record_tile(char *const *bufs, int64_t batch, int64_t row0, int64_t row1, int64_t col0, int64_t col1,
                        void *scratch) {
  (void)bufs, (void)batch, (void)scratch;
  int i = atomic_fetch_add(&tiles.n, 1);
  ck_assert_int_lt(i, TILE_MAX);
  tiles.r0[i] = row0, tiles.r1[i] = row1, tiles.c0[i] = col0, tiles.c1[i] = col1;
}

/* Runs launch l (record_tile, rows_fixed rows when not batched) on
 * `threads` threads; returns the tiles seen, and checks that they cover
 * rows x columns exactly once, on column steps. */
static int run_launch_tiles(rt_launch *l, int threads, int64_t batch) {
  l->fn = record_tile, l->name = "tiles";
  rt_program p = {.name = "tiles", .launches = l, .n_launches = 1};
  atomic_store(&tiles.n, 0);
  diag_sink *d = diag_sink_create();
  ck_assert(rt_program_run_threads(&p, threads, batch, NULL, NULL, NULL, d));
  diag_sink_destroy(d);
  int n = atomic_load(&tiles.n);
  int64_t area = 0;
  for (int i = 0; i < n; i++) {
    ck_assert(tiles.r1[i] > tiles.r0[i] && tiles.c1[i] > tiles.c0[i]);
    ck_assert(tiles.c0[i] % l->col_step == 0);
    area += (tiles.r1[i] - tiles.r0[i]) * (tiles.c1[i] - tiles.c0[i]);
  }
  ck_assert_int_eq(area, (l->batched ? batch : l->rows_fixed) * l->cols);
  return n;
}

/* A 256-column launch of `batch` rows on 2 threads. */
static int run_split(int64_t batch, int64_t row_tile_min) {
  rt_launch l = {.batched = true, .cols = 256, .col_step = 32, .row_step = 1, .work_per_row = 1 << 20,
                 .row_tile_min = row_tile_min};
  return run_launch_tiles(&l, 2, batch);
}

/* A launch with tile costs (a conv2d's GEMM over its pixels, cg_gemm_plan.c's
 * costs: 4 a row, 8 a column) of `rows` rows in steps of 14 and `cols`
 * columns in steps of 32 on `threads` threads. */
static int run_cost_split(int64_t rows, int64_t cols, int threads) {
  rt_launch l = {.batched = false, .rows_fixed = rows, .cols = cols, .col_step = 32, .row_step = 14,
                 .work_per_row = 1 << 20, .tile_row_cost = 4, .tile_col_cost = 8};
  return run_launch_tiles(&l, threads, 1);
}

START_TEST(test_launch_split) {
  /* columns first: 8 one-panel tiles of every row */
  ck_assert_int_eq(run_split(32, 0), 8);
  for (int i = 0; i < 8; i++) ck_assert(tiles.r0[i] == 0 && tiles.r1[i] == 32 && tiles.c1[i] - tiles.c0[i] == 32);
  /* rows first: 8 tiles of 4 rows, every column */
  ck_assert_int_eq(run_split(32, 3), 8);
  for (int i = 0; i < 8; i++) ck_assert(tiles.r1[i] - tiles.r0[i] == 4 && tiles.c0[i] == 0 && tiles.c1[i] == 256);
  /* rows first, at least 10 rows a tile: 3 row tiles, 3 column tiles each */
  ck_assert_int_eq(run_split(32, 10), 9);
  for (int i = 0; i < 9; i++) ck_assert(tiles.r1[i] - tiles.r0[i] >= 10);
  /* a batch of 1: columns as before */
  ck_assert_int_eq(run_split(1, 3), 8);
  for (int i = 0; i < 8; i++) ck_assert(tiles.r1[i] - tiles.r0[i] == 1 && tiles.c1[i] - tiles.c0[i] == 32);
}
END_TEST

/* convolutional networks: a launch with tile costs is cut where its
 * busiest thread has the least work, tile costs counted: ResNet's convs at
 * batch 1. A 56x56 map of 64 channels (3136 rows, 2 panels) splits rows
 * only (a column tile would gather A again); a 7x7 map of 512 channels
 * (49 rows, 16 panels) columns only (a row tile would read B again), two
 * tiles of 8 panels for 2 threads, three tiles for 3 (16 panels: 6, 5, 5
 * of them) rather than a row split; 28x28 of 128 channels rows again, in
 * whole steps of 14. */
START_TEST(test_launch_split_cost) {
  int n = run_cost_split(3136, 64, 2);
  ck_assert_int_ge(n, 2);
  for (int i = 0; i < n; i++) ck_assert(tiles.c0[i] == 0 && tiles.c1[i] == 64);
  n = run_cost_split(49, 512, 2);
  ck_assert_int_eq(n, 2);
  for (int i = 0; i < n; i++) ck_assert(tiles.r0[i] == 0 && tiles.r1[i] == 49 && tiles.c1[i] - tiles.c0[i] == 256);
  n = run_cost_split(49, 512, 3);
  ck_assert_int_eq(n, 3);
  for (int i = 0; i < n; i++) ck_assert(tiles.r0[i] == 0 && tiles.r1[i] == 49);
  n = run_cost_split(784, 128, 2);
  ck_assert_int_ge(n, 2);
  for (int i = 0; i < n; i++)
    ck_assert(tiles.c0[i] == 0 && tiles.c1[i] == 128 && (tiles.r0[i] % 14 == 0) && (tiles.r1[i] % 14 == 0 || tiles.r1[i] == 784));
  /* one thread: one tile */
  ck_assert_int_eq(run_cost_split(3136, 64, 1), 1);
}
END_TEST

/* A kernel that burns about 1 ms of CPU per tile, so its tiles' thread
 * CPU times are well above the clock's resolution. */
static void busy_tile(char *const *bufs, int64_t batch, int64_t row0, int64_t row1, int64_t col0, int64_t col1,
                      void *scratch) {
  (void)bufs, (void)batch, (void)scratch;
  volatile double x = 0;
  for (int64_t i = 0; i < (row1 - row0) * (col1 - col0) * 4000; i++) x += 1e-9;
}

/* castor run --profile's split table: a profiled run records each launch's
 * tiles and the CPU time of its tiles, all threads' and the busiest's. */
START_TEST(test_launch_split_profile) {
  rt_launch l = {.fn = busy_tile, .name = "busy", .batched = true, .cols = 256, .col_step = 32, .row_step = 1,
                 .work_per_row = 1 << 20};
  rt_program p = {.name = "busy", .launches = &l, .n_launches = 1};
  diag_sink *d = diag_sink_create();
  for (int threads = 1; threads <= 2; threads++) {
    rt_profile prof;
    rt_profile_init(&prof);
    ck_assert(rt_program_run_profile(&p, threads, 1, NULL, NULL, NULL, NULL, &prof, d));
    ck_assert_int_eq((int)prof.events.len, 2); /* the launch, then the run */
    const rt_profile_event *ev = &prof.events.data[0];
    ck_assert_int_eq(ev->launch, 0);
    ck_assert_msg(ev->n_row == 1 && ev->n_col == (threads == 1 ? 1 : 8), "%d threads: %lldx%lld tiles", threads,
                  (long long)ev->n_row, (long long)ev->n_col);
    ck_assert_msg(ev->n_threads >= 1 && ev->n_threads <= threads, "%d threads: %d ran tiles", threads, ev->n_threads);
    ck_assert_msg(ev->cpu_ns > 0 && ev->cpu_max_ns > 0 && ev->cpu_max_ns <= ev->cpu_ns, "cpu %lld, busiest %lld",
                  (long long)ev->cpu_ns, (long long)ev->cpu_max_ns);
    /* the span on free threads: at least an even share of the work, at most all of it */
    ck_assert_msg(ev->span_ns <= ev->cpu_ns && ev->span_ns * threads >= ev->cpu_ns && (threads > 1 || ev->span_ns == ev->cpu_ns),
                  "%d threads: span %lld of cpu %lld", threads, (long long)ev->span_ns, (long long)ev->cpu_ns);
    ck_assert_int_eq(prof.events.data[1].launch, -1);
    ck_assert_int_eq(prof.events.data[1].cpu_ns, 0);
    rt_profile_fini(&prof);
  }
  diag_sink_destroy(d);
}
END_TEST

static Suite *runtime_suite(void) {
  Suite *s = suite_create("runtime");
  TCase *tc = tcase_create("dtype");
  tcase_add_test(tc, test_dtype_table);
  tcase_add_test(tc, test_truncsfbf2_helper);
  tcase_add_test(tc, test_summary_nonfinite);
  tcase_add_test(tc, test_cpu_features);
  suite_add_tcase(s, tc);
  tc = tcase_create("pool");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_thread_pool);
  tcase_add_test(tc, test_launch_split);
  tcase_add_test(tc, test_launch_split_profile);
  tcase_add_test(tc, test_launch_split_cost);
  suite_add_tcase(s, tc);
  tc = tcase_create("npy");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_read_numpy_files);
  tcase_add_test(tc, test_read_f8_convert);
  tcase_add_test(tc, test_write_matches_numpy);
  tcase_add_test(tc, test_round_trip);
  tcase_add_test(tc, test_read_errors);
  tcase_add_test(tc, test_write_errors);
  tcase_add_test(tc, test_read_fuzz);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  return check_run(runtime_suite());
}
