/* SPDX-License-Identifier: Apache-2.0 */
/*
 * check_util.c: Check suite of util/: arena, vectors, string buffers, checked
 * size arithmetic, the seeded PRNG, diagnostics rendering, and bit-exact
 * float16 / bfloat16 conversions against tables computed with NumPy 2.4
 * (float16) and ml_dtypes 0.6 (bfloat16).
 */
#include "util/diag.h"
#include "util/half.h"
#include "util/util.h"

#include <check.h>

#include "tests/unit/test_support.h"
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ck_assert_msg marks a checkpoint on every call (a pipe write), too slow
 * in loops over millions of values: this one costs nothing when it holds. */
#define EXPECT(cond, ...)                    \
  do {                                       \
    if (!(cond)) ck_abort_msg(__VA_ARGS__);  \
  } while (0)

static uint32_t f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}
static float bits_f32(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* A location as one macro argument (a compound literal's commas are not). */
static diag_loc loc_at(const char *file, int line, int col) {
  return (diag_loc){file, line, col};
}

/* ---- arena ---- */

START_TEST(test_arena_alignment) {
  arena *a = arena_create();
  static const size_t sizes[] = {1, 3, 7, 16, 33, 100, 1000};
  for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
    unsigned char *p = arena_alloc(a, sizes[i]);
    ck_assert_msg(((uintptr_t)p & 15) == 0, "arena_alloc(%zu) not 16-aligned: %p", sizes[i],
                  (void *)p);
    for (size_t j = 0; j < sizes[i]; j++) ck_assert_msg(p[j] == 0, "arena memory not zeroed");
    memset(p, 0xab, sizes[i]);
  }
  static const size_t aligns[] = {1, 2, 8, 32, 64, 256, 4096};
  for (size_t i = 0; i < sizeof aligns / sizeof *aligns; i++) {
    arena_alloc_aligned(a, 1, 1); /* misalign the cursor */
    void *p = arena_alloc_aligned(a, 24, aligns[i]);
    ck_assert_msg(((uintptr_t)p & (aligns[i] - 1)) == 0, "align %zu: %p", aligns[i], p);
  }
  arena_destroy(a);
}
END_TEST

START_TEST(test_arena_big_blocks_and_reset) {
  arena *a = arena_create();
  /* Many small allocations crossing block boundaries stay distinct. */
  int *ptrs[5000];
  for (int i = 0; i < 5000; i++) {
    ptrs[i] = arena_alloc(a, 40);
    *ptrs[i] = i;
  }
  for (int i = 0; i < 5000; i++) ck_assert_int_eq(*ptrs[i], i);
  /* Big blocks (beyond a quarter block) are zeroed and usable end to end. */
  size_t big = 3u << 20;
  unsigned char *b = arena_alloc_aligned(a, big, 64);
  ck_assert(((uintptr_t)b & 63) == 0);
  ck_assert(b[0] == 0 && b[big / 2] == 0 && b[big - 1] == 0);
  memset(b, 1, big);
  unsigned char *b2 = arena_alloc(a, big);
  ck_assert(b2[0] == 0 && b2[big - 1] == 0);
  ck_assert_msg(arena_bytes_used(a) >= 5000 * 40 + 2 * big, "bytes used %zu",
                arena_bytes_used(a));
  arena_reset(a);
  ck_assert_uint_eq(arena_bytes_used(a), 0);
  /* Around the size where blocks become mappings of their own (2 MiB; no
   * memset there): every byte zero, also after a reset freed the blocks the
   * first round wrote, and every alignment kept. */
  for (int round = 0; round < 2; round++) {
    size_t sizes[] = {(2u << 20) - 1, 2u << 20, (2u << 20) + 1, 5u << 20};
    for (int i = 0; i < 4; i++) {
      unsigned char *m = arena_alloc_aligned(a, sizes[i], 4096);
      ck_assert(((uintptr_t)m & 4095) == 0);
      for (size_t j = 0; j < sizes[i]; j++)
        if (m[j]) ck_abort_msg("round %d: byte %zu of a %zu-byte block is %d", round, j, sizes[i], m[j]);
      memset(m, 0xa5, sizes[i]);
    }
    arena_reset(a);
  }
  char *s = arena_strdup(a, "dense_1.kernel");
  ck_assert_str_eq(s, "dense_1.kernel");
  ck_assert_str_eq(arena_strndup(a, "abcdef", 3), "abc");
  ck_assert_str_eq(arena_printf(a, "%s.%d", "x", 12), "x.12");
  char *longp = arena_printf(a, "%0200d", 7);
  ck_assert_uint_eq(strlen(longp), 200);
  arena_destroy(a);
  arena_destroy(NULL);
}
END_TEST

START_TEST(test_vec) {
  VEC(int) v = {0};
  for (int i = 0; i < 1000; i++) vec_push(&v, i * 3);
  ck_assert_uint_eq(v.len, 1000);
  ck_assert_uint_ge(v.cap, 1000);
  for (int i = 0; i < 1000; i++) ck_assert_int_eq(v.data[i], i * 3);
  vec_free(&v);
  ck_assert_ptr_null(v.data);
  ck_assert_uint_eq(v.len, 0);
}
END_TEST

/* ---- strings ---- */

START_TEST(test_str_buf) {
  str_buf b;
  str_buf_init(&b);
  ck_assert_str_eq(str_buf_cstr(&b), "");
  str_buf_puts(&b, "f16[");
  str_buf_printf(&b, "N,%d", 784);
  str_buf_putc(&b, ']');
  str_buf_append(&b, "xyz", 1);
  ck_assert_str_eq(str_buf_cstr(&b), "f16[N,784]x");
  ck_assert_uint_eq(b.len, 11);
  str_buf_clear(&b);
  ck_assert_str_eq(str_buf_cstr(&b), "");
  for (int i = 0; i < 1000; i++) str_buf_printf(&b, "%03d,", i);
  ck_assert_uint_eq(b.len, 4000);
  ck_assert(strncmp(b.data + 3996, "999,", 4) == 0);
  char *t = str_buf_take(&b);
  ck_assert_uint_eq(strlen(t), 4000);
  ck_assert_ptr_null(b.data);
  free(t);
  t = str_buf_take(&b); /* empty buffer: "" the caller frees */
  ck_assert_str_eq(t, "");
  free(t);
  str_buf_fini(&b);

  ck_assert(str_eq("a", "a"));
  ck_assert(!str_eq("a", "ab"));
  ck_assert(!str_eq(NULL, "a") && !str_eq("a", NULL));
  ck_assert(str_has_prefix("dense_1.kernel", "dense_1."));
  ck_assert(!str_has_prefix("dense", "dense_1"));
  ck_assert(str_has_prefix("x", ""));
}
END_TEST

START_TEST(test_str_read_file) {
  char path[] = "/tmp/castor_check_util_XXXXXX";
  int fd = mkstemp(path);
  ck_assert_msg(fd >= 0, "mkstemp: %s", strerror(errno));
  static const char text[] = "line 1\nline\0 2\n";
  ck_assert(write(fd, text, sizeof text - 1) == (ssize_t)(sizeof text - 1));
  close(fd);
  char *data;
  size_t len;
  ck_assert(str_read_file(path, &data, &len));
  ck_assert_uint_eq(len, sizeof text - 1);
  ck_assert(memcmp(data, text, len) == 0 && data[len] == 0);
  free(data);
  unlink(path);
  errno = 0;
  ck_assert(!str_read_file(path, &data, &len));
  ck_assert_int_eq(errno, ENOENT);
}
END_TEST

/* Files of untrusted size: the size is checked before reading a regular
 * file (a sparse one over the limit costs nothing), a pipe is cut off past
 * the limit, and devices and directories are refused unread. */
START_TEST(test_str_read_file_max) {
  char path[] = "/tmp/castor_check_util_XXXXXX";
  int fd = mkstemp(path);
  ck_assert_msg(fd >= 0, "mkstemp: %s", strerror(errno));
  ck_assert(write(fd, "abc", 3) == 3);
  close(fd);
  char *data = NULL;
  size_t len = 0;
  str_buf why;
  str_buf_init(&why);
  ck_assert_msg(str_read_file_max(path, 3, &data, &len, &why), "%s", str_buf_cstr(&why));
  ck_assert(len == 3 && !strcmp(data, "abc"));
  free(data);
  ck_assert(truncate(path, (off_t)(64 << 20) + 1) == 0); /* sparse: never read */
  ck_assert(!str_read_file_max(path, (int64_t)64 << 20, &data, &len, &why));
  ck_assert_str_eq(str_buf_cstr(&why), "it has 67108865 bytes, more than the limit of 67108864 (64 MiB)");
  unlink(path);
  str_buf_clear(&why);
  ck_assert(!str_read_file_max("/dev/zero", 100, &data, &len, &why));
  ck_assert_str_eq(str_buf_cstr(&why), "not a regular file (a character device)");
  str_buf_clear(&why);
  ck_assert(!str_read_file_max("/tmp", 100, &data, &len, &why));
  ck_assert_str_eq(str_buf_cstr(&why), "not a regular file (a directory)");
  str_buf_clear(&why);
  ck_assert(!str_read_file_max(path, 100, &data, &len, &why));
  ck_assert_str_eq(str_buf_cstr(&why), strerror(ENOENT));
  /* a pipe holding more than the limit */
  int p[2];
  ck_assert(pipe(p) == 0);
  char chunk[5000];
  memset(chunk, 'x', sizeof chunk);
  ck_assert(write(p[1], chunk, sizeof chunk) == (ssize_t)sizeof chunk);
  close(p[1]);
  str_buf_clear(&why);
  ck_assert(!str_read_fd_max(p[0], 1000, &data, &len, &why));
  ck_assert_str_eq(str_buf_cstr(&why), "it holds more than the limit of 1000 bytes");
  close(p[0]);
  /* and one within it */
  ck_assert(pipe(p) == 0);
  ck_assert(write(p[1], chunk, 10) == 10);
  close(p[1]);
  ck_assert(str_read_fd_max(p[0], 1000, &data, &len, &why));
  ck_assert(len == 10 && data[10] == 0);
  free(data);
  close(p[0]);
  str_buf_fini(&why);
}
END_TEST

/* ---- checked arithmetic ---- */

START_TEST(test_size_checked) {
  int64_t r;
  ck_assert(size_mul_ok(4, 784, &r) && r == 3136);
  ck_assert(size_mul_ok(0, INT64_MAX, &r) && r == 0);
  ck_assert(size_mul_ok((int64_t)1 << 31, (int64_t)1 << 31, &r) && r == (int64_t)1 << 62);
  ck_assert(!size_mul_ok((int64_t)1 << 32, (int64_t)1 << 31, &r));
  ck_assert(!size_mul_ok(INT64_MAX, 2, &r));
  ck_assert(!size_mul_ok(3037000500, 3037000500, &r)); /* just over sqrt(2^63) */
  ck_assert(size_mul_ok(3037000499, 3037000499, &r));
  ck_assert(!size_mul_ok(-1, 5, &r)); /* negative sizes are refused */
  ck_assert(size_add_ok(INT64_MAX - 1, 1, &r) && r == INT64_MAX);
  ck_assert(!size_add_ok(INT64_MAX, 1, &r));
  ck_assert(!size_add_ok(-5, 2, &r));
}
END_TEST

/* ---- rng: splitmix64 seeding + xoshiro256**, values from a Python model
 * of the published algorithms ---- */

START_TEST(test_rng_determinism) {
  static const struct {
    uint64_t seed, first[4];
  } cases[] = {
      {0, {0x99ec5f36cb75f2b4ull, 0xbf6e1f784956452aull, 0x1a5f849d4933e6e0ull,
           0x6aa594f1262d2d2cull}},
      {42, {0x15780b2e0c2ec716ull, 0x6104d9866d113a7eull, 0xae17533239e499a1ull,
            0xecb8ad4703b360a1ull}},
  };
  for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
    rng r;
    rng_init(&r, cases[c].seed);
    for (int i = 0; i < 4; i++) {
      uint64_t v = rng_next(&r);
      ck_assert_msg(v == cases[c].first[i], "seed %llu, value %d: got 0x%016llx",
                    (unsigned long long)cases[c].seed, i, (unsigned long long)v);
    }
  }
  rng r, r2;
  rng_init(&r, 42);
  for (int i = 0; i < 4; i++) rng_next(&r);
  ck_assert_double_eq(rng_uniform(&r), 0.9918039142821028);
  rng_init(&r, 7), rng_init(&r2, 7);
  for (int i = 0; i < 10000; i++) {
    double u = rng_uniform(&r);
    ck_assert(u >= 0 && u < 1);
    ck_assert(u == rng_uniform(&r2));
    float f = rng_uniform_f32(&r, -0.5f, 0.25f);
    ck_assert(f >= -0.5f && f <= 0.25f);
    rng_uniform_f32(&r2, -0.5f, 0.25f);
  }
  rng_init(&r, 1), rng_init(&r2, 2);
  ck_assert(rng_next(&r) != rng_next(&r2));

  ck_assert(str_hash("") == 0xcbf29ce484222325ull);
  ck_assert(str_hash("a") == 0xaf63dc4c8601ec8cull);
  ck_assert(str_hash("dense_1.kernel") == 0xa19487650b227e57ull);
}
END_TEST

/* ---- diagnostics ---- */

START_TEST(test_diag_caret) {
  diag_sink *d = diag_sink_create();
  static const char src[] = "model m\nx = dence(digits, units=10)\n\tx = bad\n"
                            "s = \"h\xc3\xa9llo\" + bad\nctl\x01 = y";
  diag_sink_add_source(d, "model.cast", src, sizeof src - 1);
  diag_loc loc = loc_at(diag_intern(d, "model.cast"), 2, 5);
  diag_error(d, loc, "unknown layer '%s'", "dence");
  ck_assert_str_eq(diag_text(d), "model.cast:2:5: error: unknown layer 'dence'\n"
                                 "x = dence(digits, units=10)\n"
                                 "    ^\n");
  diag_clear(d);
  /* A tab before the column is copied into the caret line so the caret
   * lines up whatever the tab width. */
  diag_error(d, loc_at("model.cast", 3, 6), "bad");
  ck_assert_str_eq(diag_text(d), "model.cast:3:6: error: bad\n"
                                 "\tx = bad\n"
                                 "\t    ^\n");
  diag_clear(d);
  /* Columns are bytes; UTF-8 continuation bytes take no caret column. */
  diag_error(d, loc_at("model.cast", 4, 16), "unknown value 'bad'");
  ck_assert_str_eq(diag_text(d), "model.cast:4:16: error: unknown value 'bad'\n"
                                 "s = \"h\xc3\xa9llo\" + bad\n"
                                 "              ^\n");
  diag_clear(d);
  /* Control bytes print as '?'; the last line needs no newline. */
  diag_warning(d, loc_at("model.cast", 5, 7), "w");
  ck_assert_str_eq(diag_text(d), "model.cast:5:7: warning: w\nctl? = y\n      ^\n");
  ck_assert_int_eq(diag_warning_count(d), 1);
  ck_assert_int_eq(diag_error_count(d), 0);
  ck_assert_str_eq(diag_first_error(d), "");
  diag_sink_destroy(d);
}
END_TEST

START_TEST(test_diag_no_source_note_first_error) {
  diag_sink *d = diag_sink_create();
  ck_assert_str_eq(diag_text(d), "");
  diag_warning(d, loc_at("w.safetensors", 0, 0), "weight %s flushes to zero", "k");
  diag_error(d, loc_at("other.cast", 2, 3), "boom %d", 1);
  diag_note(d, loc_at("other.cast", 1, 1), "declared here");
  diag_error(d, loc_at(NULL, 0, 0), "second");
  diag_error(d, loc_at("f.cast", 7, 0), "line only");
  ck_assert_str_eq(diag_text(d), "w.safetensors: warning: weight k flushes to zero\n"
                                 "other.cast:2:3: error: boom 1\n"
                                 "other.cast:1:1: note: declared here\n"
                                 "error: second\n"
                                 "f.cast:7: error: line only\n");
  ck_assert_str_eq(diag_first_error(d), "other.cast:2:3: error: boom 1\n");
  ck_assert_int_eq(diag_error_count(d), 3);
  ck_assert_int_eq(diag_warning_count(d), 1);
  /* A note with a registered source gets its caret too. */
  diag_clear(d);
  ck_assert_int_eq(diag_error_count(d), 0);
  ck_assert_str_eq(diag_first_error(d), "");
  diag_sink_add_source(d, "n.cast", "a = input()\n", 12);
  diag_note(d, loc_at("n.cast", 1, 5), "here");
  ck_assert_str_eq(diag_text(d), "n.cast:1:5: note: here\na = input()\n    ^\n");
  const char *i1 = diag_intern(d, "n.cast"), *i2 = diag_intern(d, "n.cast");
  ck_assert_ptr_eq(i1, i2);
  ck_assert_str_eq(i1, "n.cast");
  diag_sink_destroy(d);
  diag_sink_destroy(NULL);
}
END_TEST

/* The first error's kind: NONE before any error and after diag_clear,
 * UNSPECIFIED from a plain diag_error; warnings, notes and later errors
 * leave it alone; a kinded error renders exactly as a plain one. */
START_TEST(test_diag_first_error_kind) {
  diag_sink *d = diag_sink_create(), *plain = diag_sink_create();
  ck_assert_int_eq(diag_first_error_kind(d), DIAG_KIND_NONE);
  diag_sink_add_source(d, "k.cast", "x = y\n", 6);
  diag_sink_add_source(plain, "k.cast", "x = y\n", 6);
  diag_warning(d, loc_at("k.cast", 1, 1), "w");
  diag_note(d, loc_at("k.cast", 1, 1), "n");
  ck_assert_int_eq(diag_first_error_kind(d), DIAG_KIND_NONE);
  diag_error_kind(d, DIAG_KIND_IO, loc_at("k.cast", 1, 5), "cannot read '%s'", "y");
  diag_error_kind(d, DIAG_KIND_DEVICE, loc_at(NULL, 0, 0), "later");
  diag_error(d, loc_at(NULL, 0, 0), "plain");
  ck_assert_int_eq(diag_first_error_kind(d), DIAG_KIND_IO);
  ck_assert_int_eq(diag_error_count(d), 3);
  diag_warning(plain, loc_at("k.cast", 1, 1), "w");
  diag_note(plain, loc_at("k.cast", 1, 1), "n");
  diag_error(plain, loc_at("k.cast", 1, 5), "cannot read '%s'", "y");
  diag_error(plain, loc_at(NULL, 0, 0), "later");
  diag_error(plain, loc_at(NULL, 0, 0), "plain");
  ck_assert_str_eq(diag_text(d), diag_text(plain));
  ck_assert_str_eq(diag_first_error(d), "k.cast:1:5: error: cannot read 'y'\nx = y\n    ^\n");
  ck_assert_int_eq(diag_first_error_kind(plain), DIAG_KIND_UNSPECIFIED);
  diag_clear(d);
  ck_assert_int_eq(diag_first_error_kind(d), DIAG_KIND_NONE);
  for (int k = DIAG_KIND_UNSPECIFIED; k <= DIAG_KIND_INTERNAL; k++) {
    diag_error_kind(d, (diag_kind)k, loc_at(NULL, 0, 0), "kind %d", k);
    ck_assert_msg(diag_first_error_kind(d) == (diag_kind)k, "kind %d: got %d", k, (int)diag_first_error_kind(d));
    diag_clear(d);
  }
  diag_sink_destroy(d);
  diag_sink_destroy(plain);
}
END_TEST

/* ---- half: tables from NumPy / ml_dtypes ----
 * f16 = np.float32(x).astype(np.float16).view(np.uint16)
 * bf16 = np.float32(x).astype(ml_dtypes.bfloat16).view(np.uint16) */

static const struct {
  uint32_t f32;
  uint16_t f16, bf16;
} half_cases[] = {
    {0x00000000u, 0x0000, 0x0000}, /* +0 */
    {0x80000000u, 0x8000, 0x8000}, /* -0 */
    {0x3f800000u, 0x3c00, 0x3f80}, /* 1.0 */
    {0xbf800000u, 0xbc00, 0xbf80}, /* -1.0 */
    {0xc0200000u, 0xc100, 0xc020}, /* -2.5 */
    {0x3dcccccdu, 0x2e66, 0x3dcd}, /* 0.10000000149011612 */
    {0x40490fdbu, 0x4248, 0x4049}, /* 3.1415927410125732 */
    {0x477fe000u, 0x7bff, 0x4780}, /* f16 max */
    {0x477ff000u, 0x7c00, 0x4780}, /* f16: ties up to inf */
    {0x477fefffu, 0x7bff, 0x4780}, /* 65519.996: f16 max */
    {0x477feffdu, 0x7bff, 0x4780}, /* 65519.99 */
    {0x47800000u, 0x7c00, 0x4780}, /* 65536.0 */
    {0x47c35000u, 0x7c00, 0x47c3}, /* 100000.0 */
    {0xc7c35000u, 0xfc00, 0xc7c3}, /* -100000.0 */
    {0x322bcc77u, 0x0000, 0x322c}, /* 1e-8: f16 zero */
    {0x33800000u, 0x0001, 0x3380}, /* smallest f16 subnormal */
    {0x33000000u, 0x0000, 0x3300}, /* half the smallest subnormal: ties to even -> 0 */
    {0x33000001u, 0x0001, 0x3300}, /* just above 2^-25 -> subnormal 1 */
    {0x32ffffffu, 0x0000, 0x3300}, /* just below 2^-25 -> 0 */
    {0x33c00000u, 0x0002, 0x33c0}, /* 1.5 * 2^-24: tie to even -> 2 */
    {0x38800000u, 0x0400, 0x3880}, /* smallest f16 normal */
    {0x387fffffu, 0x0400, 0x3880}, /* below smallest normal */
    {0x387fe000u, 0x0400, 0x3880}, /* between max subnormal and min normal: tie */
    {0x387fc000u, 0x03ff, 0x3880}, /* largest f16 subnormal */
    {0x3f801000u, 0x3c00, 0x3f80}, /* f16 tie, even down */
    {0x3f803000u, 0x3c02, 0x3f80}, /* f16 tie, odd up */
    {0x3f801001u, 0x3c01, 0x3f80}, /* just above f16 tie */
    {0xbf803000u, 0xbc02, 0xbf80}, /* negative tie */
    {0x45001000u, 0x6800, 0x4500}, /* 2049: f16 tie */
    {0x45003000u, 0x6802, 0x4500}, /* 2051: f16 tie up */
    {0x7fc00000u, 0x7e00, 0x7fc0}, /* quiet NaN */
    {0xffc00000u, 0xfe00, 0xffc0}, /* -quiet NaN */
    {0x7fd55555u, 0x7eaa, 0x7fc0}, /* quiet NaN with payload */
    {0x7ff00000u, 0x7f80, 0x7fc0}, /* quiet NaN top payload */
    {0x7fc02000u, 0x7e01, 0x7fc0}, /* quiet NaN, payload bit 13 */
    {0x7fc01fffu, 0x7e00, 0x7fc0}, /* quiet NaN, payload below f16 bits */
    {0x7f800000u, 0x7c00, 0x7f80}, /* +inf */
    {0xff800000u, 0xfc00, 0xff80}, /* -inf */
    {0x7149f2cau, 0x7c00, 0x714a}, /* 1.0000000150474662e+30 */
    {0xf149f2cau, 0xfc00, 0xf14a}, /* -1.0000000150474662e+30 */
    {0x7f7fffffu, 0x7c00, 0x7f80}, /* f32 max */
    {0xff7fffffu, 0xfc00, 0xff80}, /* -f32 max */
    {0x3f808000u, 0x3c04, 0x3f80}, /* bf16 tie, even down */
    {0x3f818000u, 0x3c0c, 0x3f82}, /* bf16 tie, odd up */
    {0x3f808001u, 0x3c04, 0x3f81}, /* just above bf16 tie */
    {0x3f80ffffu, 0x3c08, 0x3f81}, /* 1.0039: bf16 rounds up */
    {0x7f7f8000u, 0x7c00, 0x7f80}, /* bf16: f32 max region tie -> inf */
    {0x7f7fffffu, 0x7c00, 0x7f80}, /* f32 max -> bf16 inf */
    {0x7f7f7fffu, 0x7c00, 0x7f7f}, /* just below -> bf16 max */
    {0x00000001u, 0x0000, 0x0000}, /* smallest f32 subnormal */
    {0x80000001u, 0x8000, 0x8000}, /* -smallest f32 subnormal */
    {0x007fffffu, 0x0000, 0x0080}, /* largest f32 subnormal */
    {0x00400000u, 0x0000, 0x0040}, /* f32 subnormal 2^-127 */
    {0x00008000u, 0x0000, 0x0000}, /* f32 subnormal: bf16 tie to even -> 0 */
    {0x00018000u, 0x0000, 0x0002}, /* f32 subnormal: bf16 tie up */
    {0x00800000u, 0x0000, 0x0080}, /* smallest f32 normal */
    {0x3fc00000u, 0x3e00, 0x3fc0}, /* 1.5 */
    {0xbeaaaaabu, 0xb555, 0xbeab}, /* -0.3333333432674408 */
    {0x447a0000u, 0x63d0, 0x447a}, /* 1000.0 */
    {0x4640e6b6u, 0x7207, 0x4641}, /* 12345.677734375 */
    {0x3900f990u, 0x0808, 0x3901}, /* 0.0001230000052601099 */
    {0x387fda40u, 0x03ff, 0x3880}, /* 6.0999998822808266e-05 */
    {0x337ffae5u, 0x0001, 0x3380}, /* 5.960000137861243e-08 */
    {0x47000000u, 0x7800, 0x4700}, /* 32768.0 */
    {0x47800000u, 0x7c00, 0x4780}, /* 65536.0 */
    {0x71800000u, 0x7c00, 0x7180}, /* 1.2676506002282294e+30 */
    {0x0d800000u, 0x0000, 0x0d80}, /* 7.888609052210118e-31 */
    {0x43804000u, 0x5c02, 0x4380}, /* 256.5 */
    {0x43808000u, 0x5c04, 0x4380}, /* bf16 tie 257 */
    {0x43818000u, 0x5c0c, 0x4382}, /* bf16 tie 259 */
};

START_TEST(test_half_narrow_table) {
  for (size_t i = 0; i < sizeof half_cases / sizeof *half_cases; i++) {
    float x = bits_f32(half_cases[i].f32);
    uint16_t h = half_f32_to_f16(x), b = half_f32_to_bf16(x);
    ck_assert_msg(h == half_cases[i].f16, "f32 0x%08x (%.9g) -> f16: got 0x%04x, want 0x%04x",
                  half_cases[i].f32, (double)x, h, half_cases[i].f16);
    ck_assert_msg(b == half_cases[i].bf16, "f32 0x%08x (%.9g) -> bf16: got 0x%04x, want 0x%04x",
                  half_cases[i].f32, (double)x, b, half_cases[i].bf16);
  }
}
END_TEST

/* Signaling NaNs: NumPy keeps them signaling (0x7c01 for 0x7f800001), we
 * quiet them as F16C's vcvtps2ph does, so compile-time folding matches the
 * CPU kernels; the sign and top payload bits survive either way.
 * ml_dtypes' bf16 quiets them to the canonical NaN, as we do. */
START_TEST(test_half_signaling_nan) {
  static const struct {
    uint32_t f32;
    uint16_t f16, bf16;
  } cases[] = {
      {0x7f800001u, 0x7e00, 0x7fc0},
      {0x7fa00000u, 0x7f00, 0x7fc0},
      {0xff802000u, 0xfe01, 0xffc0},
      {0x7fbfffffu, 0x7fff, 0x7fc0},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    float x = bits_f32(cases[i].f32);
    ck_assert_msg(half_f32_to_f16(x) == cases[i].f16, "0x%08x -> f16 0x%04x", cases[i].f32,
                  half_f32_to_f16(x));
    ck_assert_msg(half_f32_to_bf16(x) == cases[i].bf16, "0x%08x -> bf16 0x%04x", cases[i].f32,
                  half_f32_to_bf16(x));
  }
}
END_TEST

/* Every f16 pattern widens to the exact value and narrows back to itself. */
START_TEST(test_half_f16_all_patterns) {
  for (uint32_t h = 0; h < 0x10000; h++) {
    float f = half_f16_to_f32((uint16_t)h);
    int exp = (h >> 10) & 0x1f, man = h & 0x3ff;
    double sign = h & 0x8000 ? -1 : 1;
    if (exp == 0x1f && man != 0) {
      EXPECT(isnan(f), "f16 0x%04x should widen to NaN", h);
      EXPECT((f32_bits(f) >> 31) == (h >> 15), "f16 0x%04x NaN sign", h);
      uint16_t back = half_f32_to_f16(f);
      EXPECT(back == (h | 0x200), "f16 NaN 0x%04x -> 0x%04x (want it quieted)", h, back);
      continue;
    }
    double want = exp == 0x1f ? sign * INFINITY
                  : exp == 0  ? sign * ldexp(man, -24)
                              : sign * ldexp(1024 + man, exp - 25);
    EXPECT((double)f == want && !signbit(f) == !signbit(want),
                  "f16 0x%04x -> %.9g, want %.9g", h, (double)f, want);
    uint16_t back = half_f32_to_f16(f);
    EXPECT(back == h, "f16 0x%04x -> f32 -> f16 0x%04x", h, back);
  }
}
END_TEST

START_TEST(test_half_bf16_all_patterns) {
  for (uint32_t h = 0; h < 0x10000; h++) {
    float f = half_bf16_to_f32((uint16_t)h);
    EXPECT(f32_bits(f) == h << 16, "bf16 0x%04x widened to 0x%08x", h, f32_bits(f));
    uint16_t back = half_f32_to_bf16(f);
    if (isnan(f))
      EXPECT(back == ((h & 0x8000) | 0x7fc0), "bf16 NaN 0x%04x -> 0x%04x", h, back);
    else
      EXPECT(back == h, "bf16 0x%04x -> f32 -> bf16 0x%04x", h, back);
  }
}
END_TEST

/* Nearest-even rounding of a finite double to a format with `mant` fraction
 * bits, smallest normal exponent emin and largest finite max: an independent
 * model to test the bit-twiddling conversions against. */
static double model_round(double x, int mant, int emin, double max) {
  if (x == 0) return x;
  int e;
  frexp(x, &e);
  e = e - 1 < emin ? emin : e - 1;
  double q = ldexp(1.0, e - mant), r = nearbyint(x / q) * q;
  return fabs(r) > max ? copysign(INFINITY, x) : r == 0 ? copysign(0.0, x) : r;
}

/* A million random finite f32 patterns (plus a dense sweep of the f16
 * range) narrowed by half.c agree with the model. */
START_TEST(test_half_narrow_random) {
  rng r;
  rng_init(&r, 2024);
  for (int i = 0; i < (1 << 20) + (1 << 18); i++) {
    uint32_t u = i < (1 << 20) ? (uint32_t)rng_next(&r)
                               : 0x33000000u + (uint32_t)(i - (1 << 20)) * 0x523u;
    /* (the sweep: 2^-25 up to 72000, past the f16 overflow threshold) */
    float x = bits_f32(u);
    if (!isfinite(x)) continue;
    float want16 = (float)model_round(x, 10, -14, 65504.0);
    float want_b = (float)model_round(x, 7, -126, 0x1.fep127);
    float got16 = half_f16_to_f32(half_f32_to_f16(x));
    float got_b = half_bf16_to_f32(half_f32_to_bf16(x));
    EXPECT(f32_bits(got16) == f32_bits(want16), "f16(0x%08x = %.9g) = %.9g, want %.9g", u,
                  (double)x, (double)got16, (double)want16);
    EXPECT(f32_bits(got_b) == f32_bits(want_b), "bf16(0x%08x = %.9g) = %.9g, want %.9g",
                  u, (double)x, (double)got_b, (double)want_b);
  }
}
END_TEST

/* The batch conversion (compile-time casts of weights) is the scalar one,
 * bit for bit, with its counts: every f32 exponent, the table's edge
 * cases, NaNs and infinities (which are never counted). */
START_TEST(test_half_batch_matches_scalar) {
  enum { N = 1 << 18 };
  static float x[N + 80];
  static uint16_t y[N + 80];
  rng r;
  rng_init(&r, 77);
  int n = 0;
  for (int i = 0; i < N; i++) x[n++] = bits_f32((uint32_t)rng_next(&r));
  for (size_t i = 0; i < sizeof half_cases / sizeof half_cases[0]; i++) x[n++] = bits_f32(half_cases[i].f32);
  for (int to_bf16 = 0; to_bf16 < 2; to_bf16++) {
    int64_t overflow, flushed, want_o = 0, want_f = 0;
    half_f32_to_16_n(x, y, n, to_bf16, &overflow, &flushed);
    for (int i = 0; i < n; i++) {
      uint16_t h = to_bf16 ? half_f32_to_bf16(x[i]) : half_f32_to_f16(x[i]);
      EXPECT(y[i] == h, "%s(0x%08x): batch 0x%04x, scalar 0x%04x", to_bf16 ? "bf16" : "f16", f32_bits(x[i]), y[i], h);
      float back = to_bf16 ? half_bf16_to_f32(h) : half_f16_to_f32(h);
      want_o += isinf(back) && !isinf(x[i]);
      want_f += x[i] != 0 && !isnan(x[i]) && fabsf(back) < (to_bf16 ? 0x1p-126f : 0x1p-14f);
    }
    ck_assert_int_eq(overflow, want_o);
    ck_assert_int_eq(flushed, want_f);
  }
}
END_TEST

/* ---- hmap: the one hash map ---- */

START_TEST(test_hmap_strings) {
  hmap m;
  hmap_init(&m, HMAP_STRINGS);
  ck_assert_ptr_null(hmap_get_str(&m, "a", 1)); /* empty, no table yet */
  enum { N = 5000 };
  static char names[N][16];
  static int vals[N];
  for (int i = 0; i < N; i++) {
    snprintf(names[i], sizeof names[i], "layer_%d", i);
    ck_assert_ptr_null(hmap_put_str(&m, names[i], strlen(names[i]), &vals[i]));
  }
  ck_assert_uint_eq(m.len, N);
  ck_assert_msg(m.cap > 2 * m.len, "cap %zu for %zu entries", m.cap, m.len);
  for (int i = 0; i < N; i++) {
    char key[16]; /* a different pointer: keys compare by content */
    snprintf(key, sizeof key, "layer_%d", i);
    ck_assert_ptr_eq(hmap_get_str(&m, key, strlen(key)), &vals[i]);
  }
  /* a key given in place, as a prefix of a longer text */
  ck_assert_ptr_eq(hmap_get_str(&m, "layer_12, more", 8), &vals[12]);
  ck_assert_ptr_null(hmap_get_str(&m, "layer_", 6));
  ck_assert_ptr_null(hmap_get_str(&m, "", 0));
  /* an existing key keeps its value */
  int other;
  ck_assert_ptr_eq(hmap_put_str(&m, "layer_7", 7, &other), &vals[7]);
  ck_assert_ptr_eq(hmap_get_str(&m, "layer_7", 7), &vals[7]);
  ck_assert_uint_eq(m.len, N);
  hmap_fini(&m);
  hmap_fini(&m); /* fini twice is harmless */
}
END_TEST

START_TEST(test_hmap_pointers) {
  hmap m;
  hmap_init(&m, HMAP_POINTERS);
  hmap_reserve(&m, 100);
  size_t cap = m.cap;
  enum { N = 100 };
  static char objs[N];
  for (int i = 0; i < N; i++) ck_assert_ptr_null(hmap_put_ptr(&m, &objs[i], &objs[(i + 1) % N]));
  ck_assert_uint_eq(m.cap, cap); /* reserved: no regrowth */
  for (int i = 0; i < N; i++) ck_assert_ptr_eq(hmap_get_ptr(&m, &objs[i]), &objs[(i + 1) % N]);
  ck_assert_ptr_eq(hmap_put_ptr(&m, &objs[3], &objs[0]), &objs[4]);
  ck_assert_ptr_null(hmap_get_ptr(&m, &m));
  hmap_fini(&m);
}
END_TEST

static Suite *util_suite(void) {
  Suite *s = suite_create("util");
  TCase *tc = tcase_create("arena");
  tcase_add_test(tc, test_arena_alignment);
  tcase_add_test(tc, test_arena_big_blocks_and_reset);
  tcase_add_test(tc, test_vec);
  suite_add_tcase(s, tc);
  tc = tcase_create("strings");
  tcase_add_test(tc, test_str_buf);
  tcase_add_test(tc, test_str_read_file);
  tcase_add_test(tc, test_str_read_file_max);
  tcase_add_test(tc, test_size_checked);
  tcase_add_test(tc, test_rng_determinism);
  suite_add_tcase(s, tc);
  tc = tcase_create("diag");
  tcase_add_test(tc, test_diag_caret);
  tcase_add_test(tc, test_diag_no_source_note_first_error);
  tcase_add_test(tc, test_diag_first_error_kind);
  suite_add_tcase(s, tc);
  tc = tcase_create("half");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_half_narrow_table);
  tcase_add_test(tc, test_half_signaling_nan);
  tcase_add_test(tc, test_half_f16_all_patterns);
  tcase_add_test(tc, test_half_bf16_all_patterns);
  tcase_add_test(tc, test_half_narrow_random);
  tcase_add_test(tc, test_half_batch_matches_scalar);
  tcase_add_test(tc, test_hmap_strings);
  tcase_add_test(tc, test_hmap_pointers);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  return check_run(util_suite());
}
