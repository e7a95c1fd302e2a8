/* SPDX-License-Identifier: Apache-2.0 */
/*
 * check_safetensors_write.c: Check suite of formats/safetensors_write: the
 * exact bytes of a small file (the layout of the reference implementation:
 * F32 before BF16 before F16, names sorted, compact JSON padded to 8 bytes),
 * round trips through safetensors_read for every dtype and rank, and
 * the argument errors, after which an existing file is untouched.
 */
#include "formats/safetensors.h"
#include "util/half.h"

#include "tests/unit/test_support.h"
#include "tests/unit/tmpdir_fixture.h"

static char *read_all(const char *path, size_t *len) {
  char *data;
  ck_assert_msg(str_read_file(path, &data, len), "%s: %s", path, strerror(errno));
  return data;
}

/* The header (after the 8-byte length) the reference writes for these
 * tensors: sorted by descending dtype, then name; offsets a running sum. */
START_TEST(test_exact_layout) {
  char p[256];
  tmp_path("w.safetensors", p, sizeof p);
  float k[6] = {1, 2, 3, 4, 5, 6}, b[2] = {0.5f, -0.5f};
  uint16_t h[3] = {half_f32_to_f16(1), half_f32_to_f16(2), half_f32_to_f16(3)};
  uint16_t bf[1] = {half_f32_to_bf16(7)};
  safetensors_tensor ts[] = {
      {"z.half", DT_F16, 1, {3}, h, 0, 0},
      {"dense_1.kernel", DT_F32, 2, {3, 2}, k, 0, 0},
      {"a.bf", DT_BF16, 0, {0}, bf, 0, 0},
      {"dense_1.bias", DT_F32, 1, {2}, b, 0, 0},
  };
  const char *meta[] = {"format", "castor"};
  diag_sink *d = diag_sink_create();
  ck_assert_msg(safetensors_write(p, ts, 4, meta, 1, d), "%s", diag_text(d));
  size_t len;
  char *data = read_all(p, &len);
  const char *want =
      "{\"__metadata__\":{\"format\":\"castor\"},"
      "\"dense_1.bias\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
      "\"dense_1.kernel\":{\"dtype\":\"F32\",\"shape\":[3,2],\"data_offsets\":[8,32]},"
      "\"a.bf\":{\"dtype\":\"BF16\",\"shape\":[],\"data_offsets\":[32,34]},"
      "\"z.half\":{\"dtype\":\"F16\",\"shape\":[3],\"data_offsets\":[34,40]}}";
  size_t wl = strlen(want), padded = (wl + 7) / 8 * 8;
  ck_assert_uint_eq(len, 8 + padded + 40);
  uint64_t hlen = 0;
  for (int i = 7; i >= 0; i--) hlen = hlen << 8 | (unsigned char)data[i];
  ck_assert_uint_eq(hlen, padded);
  ck_assert_msg(memcmp(data + 8, want, wl) == 0, "header: %.*s", (int)wl, data + 8);
  for (size_t i = wl; i < padded; i++) ck_assert_int_eq(data[8 + i], ' ');
  const char *sec = data + 8 + padded;
  ck_assert(memcmp(sec, b, 8) == 0 && memcmp(sec + 8, k, 24) == 0);
  ck_assert(memcmp(sec + 32, bf, 2) == 0 && memcmp(sec + 34, h, 6) == 0);
  free(data);
  diag_sink_destroy(d);
}
END_TEST

/* Every dtype and rank 0..4, odd shapes, random values, names that need
 * JSON escapes: what the frontend reads back is what was written. */
START_TEST(test_round_trip) {
  char p[256];
  tmp_path("rt.safetensors", p, sizeof p);
  static const int64_t shapes[][5] = {
      {0}, {1, 7}, {2, 3, 5}, {3, 2, 1, 3}, {4, 1, 3, 2, 2}, {2, 0, 3}};
  static const char *const names[] = {"scalar", "dense_1.bias", "w\"quoted\\", "dense_1.kernel",
                                      "caf\xc3\xa9.k", "empty"};
  enum { N = 6 * 3 };
  safetensors_tensor ts[N];
  void *bufs[N];
  char namebuf[N][64];
  rng r;
  rng_init(&r, 11);
  for (int i = 0; i < N; i++) {
    const int64_t *s = shapes[i % 6];
    dtype_id dt = (dtype_id[]){DT_F32, DT_F16, DT_BF16}[i / 6];
    snprintf(namebuf[i], sizeof namebuf[i], "%s/%s", names[i % 6], dtype_name(dt));
    ts[i] = (safetensors_tensor){namebuf[i], dt, (int)s[0], {0}, NULL, 0, 0};
    int64_t numel = 1;
    for (int k = 0; k < s[0]; k++) ts[i].dims[k] = s[1 + k], numel *= s[1 + k];
    bufs[i] = xmalloc((size_t)(numel * dtype_size(dt)) + 1);
    for (int64_t e = 0; e < numel; e++) {
      float v = rng_uniform_f32(&r, -3, 3);
      if (dt == DT_F32) ((float *)bufs[i])[e] = v;
      else if (dt == DT_F16) ((uint16_t *)bufs[i])[e] = half_f32_to_f16(v);
      else ((uint16_t *)bufs[i])[e] = half_f32_to_bf16(v);
    }
    ts[i].data = bufs[i];
  }
  diag_sink *d = diag_sink_create();
  ck_assert_msg(safetensors_write(p, ts, N, NULL, 0, d), "%s", diag_text(d));
  safetensors_file st;
  ck_assert_msg(safetensors_read(p, (diag_loc){0}, d, &st), "%s", diag_text(d));
  ck_assert_int_eq(st.n_tensors, N);
  int64_t total = 0;
  for (int i = 0; i < N; i++) {
    const safetensors_tensor *t = safetensors_find(&st, ts[i].name);
    ck_assert_msg(t != NULL, "tensor '%s' not read back", ts[i].name);
    ck_assert_int_eq((int)t->dtype, (int)ts[i].dtype);
    ck_assert_int_eq(t->rank, ts[i].rank);
    for (int k = 0; k < t->rank; k++) ck_assert_int_eq(t->dims[k], ts[i].dims[k]);
    int64_t nbytes = t->nbytes;
    ck_assert_msg(nbytes == 0 || memcmp(t->data, ts[i].data, (size_t)nbytes) == 0,
                  "data of '%s'", ts[i].name);
    total += nbytes;
  }
  /* the file itself (the reader keeps only what it needs): the header padded
   * to 8 bytes, and no holes: the data section is exactly the tensors */
  FILE *f = fopen(p, "rb");
  ck_assert_ptr_nonnull(f);
  unsigned char len8[8];
  ck_assert_int_eq(fread(len8, 1, 8, f), 8);
  uint64_t hlen = 0;
  for (int i = 7; i >= 0; i--) hlen = hlen << 8 | len8[i];
  ck_assert_int_eq(hlen % 8, 0);
  ck_assert_int_eq(fseek(f, 0, SEEK_END), 0);
  ck_assert_int_eq((int64_t)ftell(f), 8 + (int64_t)hlen + total);
  /* every tensor starts aligned to its element size: offsets from the header */
  ck_assert_int_eq(fseek(f, 8, SEEK_SET), 0);
  char *header = xcalloc(hlen + 1, 1);
  ck_assert_int_eq(fread(header, 1, hlen, f), hlen);
  for (const char *o = header; (o = strstr(o, "\"data_offsets\":[")) != NULL; o++) {
    long long begin = strtoll(o + strlen("\"data_offsets\":["), NULL, 10);
    const char *dt = o;
    while (dt > header && strncmp(dt, "\"dtype\":\"", 9) != 0) dt--;
    int size = !strncmp(dt + 9, "F32", 3) ? 4 : 2;
    ck_assert_int_eq(begin % size, 0);
  }
  free(header);
  fclose(f);
  safetensors_fini(&st);
  for (int i = 0; i < N; i++) free(bufs[i]);
  ck_assert_int_eq(diag_error_count(d), 0);
  diag_sink_destroy(d);
}
END_TEST

START_TEST(test_errors) {
  char p[256], want[700];
  tmp_path("old.safetensors", p, sizeof p);
  write_bytes(p, "old", 3);
  static float x[4] = {1, 2, 3, 4};
  static int32_t ix[1] = {1};
  static const struct {
    safetensors_tensor t[2];
    int n;
    const char *msg;
  } cases[] = {
      {{{"a", DT_I32, 1, {1}, ix, 0, 0}}, 1,
       "cannot write tensor 'a' of dtype i32 to safetensors (castor writes F32, F16 and BF16)"},
      {{{"a", DT_F32, 1, {-2}, x, 0, 0}}, 1, "cannot write tensor 'a' to safetensors: dimension 0 is -2"},
      {{{"a", DT_F32, 7, {1, 1, 1, 1, 1, 1}, x, 0, 0}}, 1,
       "cannot write tensor 'a' of rank 7 to safetensors (at most 6)"},
      {{{"a", DT_F32, 2, {INT64_MAX / 2, 4}, x, 0, 0}}, 1,
       "cannot write tensor 'a' to safetensors: its size overflows"},
      {{{"__metadata__", DT_F32, 1, {1}, x, 0, 0}}, 1,
       "cannot write a tensor named '__metadata__' to safetensors: the name is reserved for the "
       "header's metadata"},
      {{{"bad\xff", DT_F32, 1, {1}, x, 0, 0}}, 1,
       "cannot write tensor 0 to safetensors: its name is not valid UTF-8"},
      {{{"k", DT_F32, 1, {1}, x, 0, 0}, {"k", DT_F16, 1, {1}, x, 0, 0}}, 2,
       "duplicate tensor name 'k' for safetensors"},
      {{{"k", DT_F32, 1, {2}, NULL, 0, 0}}, 1, "cannot write tensor 'k' to safetensors: it has no data"},
  };
  diag_sink *d = diag_sink_create();
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    diag_clear(d);
    ck_assert_msg(!safetensors_write(p, cases[i].t, cases[i].n, NULL, 0, d), "case %zu", i);
    snprintf(want, sizeof want, "%s: error: %s\n", p, cases[i].msg);
    ck_assert_str_eq(diag_text(d), want);
    ck_assert_int_eq(diag_first_error_kind(d), DIAG_KIND_INVALID_ARGUMENT);
  }
  diag_clear(d);
  const char *meta[] = {"k", "v", "k", "w"};
  safetensors_tensor ok = {"a", DT_F32, 1, {1}, x, 0, 0};
  ck_assert(!safetensors_write(p, &ok, 1, meta, 2, d));
  snprintf(want, sizeof want, "%s: error: duplicate safetensors metadata key 'k'\n", p);
  ck_assert_str_eq(diag_text(d), want);
  size_t len;
  char *data = read_all(p, &len);
  ck_assert(len == 3 && memcmp(data, "old", 3) == 0);
  free(data);
  ck_assert_int_eq(tmpdir_count(), 1);
  /* an I/O error: the directory does not exist */
  diag_clear(d);
  tmp_path("no/such.safetensors", p, sizeof p);
  ck_assert(!safetensors_write(p, &ok, 1, NULL, 0, d));
  ck_assert_int_eq(diag_first_error_kind(d), DIAG_KIND_IO);
  diag_sink_destroy(d);
}
END_TEST

static Suite *safetensors_write_suite(void) {
  Suite *s = suite_create("safetensors_write");
  TCase *tc = tcase_create("safetensors_write");
  tcase_add_checked_fixture(tc, tmpdir_setup, tmpdir_teardown);
  tcase_add_test(tc, test_exact_layout);
  tcase_add_test(tc, test_round_trip);
  tcase_add_test(tc, test_errors);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) { return check_run(safetensors_write_suite()); }
