/*
 * check_hdf5.c: Check suite of formats/hdf5 over the files h5py wrote
 * (tests/data/hdf5/make_files.py): the Keras layout read back with its
 * shapes, types, values and attributes (a variable-length string, the
 * bfloat16 opaque type), also after a user block; a group whose B-tree has more than one level; the
 * files outside the subset refused with a message naming the dataset and
 * the feature; and a valid file cut or overwritten in every place, which
 * must come back as an error, never a crash (the suite runs under ASan in
 * CI's sanitizer stage).
 */
#include "formats/hdf5.h"

#include "tests/unit/test_support.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

static char *load(const char *name, size_t *len) {
  char path[512];
  snprintf(path, sizeof path, "%s/tests/data/hdf5/%s", CASTOR_SOURCE_DIR, name);
  char *data;
  ck_assert_msg(str_read_file(path, &data, len), "cannot read %s", path);
  return data;
}

static float f32_at(const h5_object *o, int64_t i) {
  float v;
  memcpy(&v, (const char *)o->data + 4 * i, 4);
  return v;
}

/* The Keras layout three ways: weights.h5; userblock.h5 (the same content
 * after h5py's 512-byte user block, whose superblock's base address is
 * 512); weights.h5 after 1024 bytes added by hand (base address 0 in the
 * superblock, found at 1024: libhdf5 reads addresses from where the
 * superblock is, and so does castor). */
START_TEST(test_keras_layout) {
  size_t len;
  char *data = load(_i == 1 ? "userblock.h5" : "weights.h5", &len);
  if (_i == 2) {
    char *moved = xcalloc(len + 1024, 1);
    memcpy(moved + 1024, data, len);
    free(data);
    data = moved, len += 1024;
  }
  h5_file f;
  h5_error e;
  ck_assert_msg(h5_open(&f, data, len, &e), "at %llu: %s", (unsigned long long)e.off, e.msg);
  const h5_object *vars = h5_find(&f, "/layers/dense/vars");
  ck_assert_ptr_nonnull(vars);
  ck_assert(!vars->is_dataset);
  ck_assert_str_eq(h5_attr_str(vars, "name"), "dense");
  ck_assert_str_eq(h5_attr_str(h5_find(&f, "/layers/dense_1/vars"), "name"), "dense_2");

  const h5_object *k = h5_find(&f, "/layers/dense/vars/0");
  ck_assert(k && k->is_dataset);
  ck_assert_int_eq(k->type.cls, H5_CLASS_FLOAT);
  ck_assert_int_eq(k->type.size, 4);
  ck_assert_int_eq(k->rank, 2);
  ck_assert_int_eq(k->dims[0], 4);
  ck_assert_int_eq(k->dims[1], 3);
  for (int i = 0; i < 12; i++) ck_assert_float_eq(f32_at(k, i), i * 0.25f - 1);

  const h5_object *b = h5_find(&f, "/layers/dense/vars/1");
  ck_assert_int_eq(b->type.cls, H5_CLASS_FLOAT);
  ck_assert_int_eq(b->type.size, 2);
  const unsigned char *hb = b->data;
  ck_assert_uint_eq(hb[0] | hb[1] << 8, 0xbc00); /* f16 -1.0 */
  ck_assert_uint_eq(hb[4] | hb[5] << 8, 0xb800); /* f16 -0.5 */

  const h5_object *bf = h5_find(&f, "/layers/dense_1/vars/0");
  ck_assert_int_eq(bf->type.cls, H5_CLASS_OPAQUE);
  ck_assert_int_eq(bf->type.size, 2);
  ck_assert_str_eq(h5_attr_str(bf, "dtype"), "bfloat16");
  ck_assert_int_eq(bf->rank, 2);
  const unsigned char *bb = bf->data;
  ck_assert_uint_eq(bb[0] | bb[1] << 8, 0xbf80);  /* bf16 -1.0 */
  ck_assert_uint_eq(bb[10] | bb[11] << 8, 0x3e80); /* bf16 0.25 */

  const h5_object *it = h5_find(&f, "/optimizer/vars/0");
  ck_assert_int_eq(it->type.cls, H5_CLASS_INT);
  ck_assert_int_eq(it->type.size, 8);
  ck_assert(it->type.is_signed);
  ck_assert_int_eq(it->rank, 0);
  ck_assert_int_eq(((const unsigned char *)it->data)[0], 7);

  const h5_object *empty = h5_find(&f, "/vars/empty");
  ck_assert(empty && empty->is_dataset);
  ck_assert_int_eq(empty->nbytes, 0);
  ck_assert_ptr_null(h5_find(&f, "/layers/dense/vars/2"));
  /* parents before children */
  ck_assert_str_eq(f.objects[0].path, "/");
  h5_fini(&f);
  free(data);
}
END_TEST

START_TEST(test_deep_btree) {
  size_t len;
  char *data = load("many.h5", &len);
  h5_file f;
  h5_error e;
  ck_assert_msg(h5_open(&f, data, len, &e), "%s", e.msg);
  ck_assert_int_eq(f.n_objects, 302);
  for (int i = 0; i < 300; i++) {
    char p[32];
    snprintf(p, sizeof p, "/vars/%d", i);
    const h5_object *o = h5_find(&f, p);
    ck_assert_msg(o && o->nbytes == 4 && f32_at(o, 0) == (float)i, "%s", p);
  }
  h5_fini(&f);
  free(data);
}
END_TEST

static const struct {
  const char *file, *msg;
} refused[] = {
    {"chunked.h5", "dataset '/w': chunked storage is not supported (castor reads contiguous "
                   "datasets; save without chunks or compression)"},
    {"gzip.h5", "dataset '/w': a filter pipeline (compression, shuffle or a checksum) is not "
                "supported (castor reads contiguous, unfiltered datasets)"},
    {"compact.h5", "dataset '/w': compact storage is not supported (castor reads contiguous "
                   "datasets)"},
    {"latest.h5", "superblock version 3 is not supported (version 0 is: h5py's default "
                  "libver='earliest')"},
};

START_TEST(test_refused) {
  size_t len;
  char *data = load(refused[_i].file, &len);
  h5_file f;
  h5_error e;
  ck_assert_msg(!h5_open(&f, data, len, &e), "%s accepted", refused[_i].file);
  ck_assert_msg(strcmp(e.msg, refused[_i].msg) == 0, "%s:\n got  %s\n want %s", refused[_i].file,
                e.msg, refused[_i].msg);
  free(data);
}
END_TEST

/* Every truncation, and every byte of the structure overwritten with 0xff
 * or 0x01 in turn: an error or a file whose datasets lie inside the buffer. */
START_TEST(test_corrupt) {
  size_t len;
  char *data = load("weights.h5", &len);
  char *copy = xmalloc(len);
  int refused_n = 0, total = 0;
  for (size_t cut = 0; cut < len; cut += 7) {
    h5_file f;
    h5_error e;
    memcpy(copy, data, cut);
    total++;
    if (!h5_open(&f, copy, cut, &e)) {
      refused_n++;
      ck_assert_msg(e.msg[0], "cut at %zu: empty message", cut);
      continue;
    }
    for (int i = 0; i < f.n_objects; i++)
      ck_assert((const char *)f.objects[i].data + f.objects[i].nbytes <= copy + cut ||
                !f.objects[i].data);
    h5_fini(&f);
  }
  ck_assert_int_eq(refused_n, total); /* the superblock states the file's size */
  for (size_t at = 0; at < len; at++)
    for (int v = 0; v < 2; v++) {
      memcpy(copy, data, len);
      copy[at] = v ? (char)0xff : 1;
      h5_file f;
      h5_error e;
      if (!h5_open(&f, copy, len, &e)) continue;
      for (int i = 0; i < f.n_objects; i++)
        ck_assert(!f.objects[i].data ||
                  ((const char *)f.objects[i].data >= copy &&
                   (const char *)f.objects[i].data + f.objects[i].nbytes <= copy + len));
      h5_fini(&f);
    }
  free(copy);
  free(data);
}
END_TEST

/* 60,000 datasets under one group, each looked up by path, as the reader
 * of a Keras optimizer's variables counts /optimizer/vars/0, 1, ...: by
 * hash, so the whole count takes milliseconds (a scan of the objects per
 * lookup took 13 s; issue 41). Bounded by CPU time, with a wide margin. */
START_TEST(test_many_lookups) {
  enum { N = 60000 };
  h5w_object *objs = xcalloc(N + 2, sizeof *objs);
  char (*paths)[32] = xcalloc(N, sizeof *paths);
  static const float one = 1;
  objs[0] = (h5w_object){.path = "/optimizer"};
  objs[1] = (h5w_object){.path = "/optimizer/vars"};
  for (int i = 0; i < N; i++) {
    snprintf(paths[i], sizeof paths[i], "/optimizer/vars/%d", i);
    objs[i + 2] = (h5w_object){.path = paths[i], .is_dataset = true, .type = {H5_CLASS_FLOAT, 4, false},
                               .rank = 0, .data = &one};
  }
  unsigned char *bytes;
  size_t len;
  h5_error e;
  ck_assert_msg(h5_write(objs, N + 2, &bytes, &len, &e), "h5_write: %s", e.msg);
  h5_file f;
  ck_assert_msg(h5_open(&f, bytes, len, &e), "%s", e.msg);
  struct timespec t0, t1;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t0);
  int have = 0;
  char p[32];
  for (;; have++) {
    snprintf(p, sizeof p, "/optimizer/vars/%d", have);
    if (!h5_find(&f, p)) break;
  }
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t1);
  double secs = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
  ck_assert_int_eq(have, N);
  ck_assert_msg(secs < 1.0, "%d lookups took %.2f s of CPU time", N, secs);
  h5_fini(&f);
  free(bytes), free(paths), free(objs);
}
END_TEST

static Suite *hdf5_suite(void) {
  Suite *s = suite_create("hdf5");
  TCase *tc = tcase_create("core");
  tcase_add_loop_test(tc, test_keras_layout, 0, 3);
  tcase_add_test(tc, test_deep_btree);
  tcase_add_loop_test(tc, test_refused, 0, (int)(sizeof refused / sizeof refused[0]));
  tcase_add_test(tc, test_corrupt);
  tcase_add_test(tc, test_many_lookups);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) { return check_run(hdf5_suite()); }
