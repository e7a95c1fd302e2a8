/* SPDX-License-Identifier: Apache-2.0 */
/*
 * check_keras_save.c: writing .keras files back (frontend/keras/save.c)
 * and the writers under it (formats/hdf5_write.c, formats/zip_write.c).
 *
 *   - h5_write's output read back by castor's own reader (h5_open): every
 *     group, dataset (float32, float16, bfloat16 as opaque with its dtype
 *     attribute, int32, int64 scalars), attribute, an empty group, and a
 *     group of 300 children (a two-level B-tree); its refusals;
 *   - zip_write's archives read back by zip_open/zip_read (CRC-32 checked
 *     there), with and without ZIP64 fields;
 *   - the round trip: a model of tests/golden/keras-models trained three
 *     steps under each policy (and one compiled with a LossScaleOptimizer) and saved with castor_program_save_keras is
 *     loaded back; its evaluation program's outputs are bit-identical to
 *     the trained program's (weights copied in memory), every weight
 *     dataset holds the trained state's bits, and the optimizer's
 *     variables sit where Keras 3 keeps them (LossScaleOptimizer under
 *     mixed_float16);
 *   - a .cast model is refused.
 * The libhdf5 oracle (h5py) is tests/keras/h5_oracle.py; Keras 3 loading
 * the files is tests/golden/keras-models/generate_saved.py's recorded run.
 */
#include "castor.h"
#include "formats/hdf5.h"
#include "formats/zip.h"
#include "util/util.h"

#include "tests/unit/test_support.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define DIR CASTOR_SOURCE_DIR "/tests/golden/keras-models"

static char *read_file(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  ck_assert_msg(f != NULL, "cannot open %s", path);
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *b = malloc((size_t)n + 1);
  ck_assert(fread(b, 1, (size_t)n, f) == (size_t)n);
  fclose(f);
  *len = (size_t)n;
  return b;
}

/* ---- h5_write ---- */

START_TEST(test_h5_roundtrip) {
  float f32[6] = {1.5f, -2, 3.25f, 0, 1e-3f, -7};
  uint16_t f16[4] = {0x3c00, 0xc000, 0x0001, 0x7bff}, bf16[3] = {0x3f80, 0xbf00, 0x4049};
  int32_t i32 = -5;
  int64_t i64 = (int64_t)1 << 40;
  static const h5w_attr name_x = {"name", "x"}, bf = {"dtype", "bfloat16"}, uni = {"note", "caf\xc3\xa9"};
  enum { BIG = 300 };
  h5w_object objs[16 + BIG] = {
      {.path = "/a"},
      {.path = "/a/vars", .attrs = &name_x, .n_attrs = 1},
      {.path = "/a/vars/0", .is_dataset = true, .type = {H5_CLASS_FLOAT, 4, false}, .rank = 2, .dims = {2, 3}, .data = f32},
      {.path = "/a/vars/1", .is_dataset = true, .type = {H5_CLASS_FLOAT, 2, false}, .rank = 1, .dims = {4}, .data = f16,
       .attrs = &uni, .n_attrs = 1},
      {.path = "/a/vars/2", .is_dataset = true, .type = {H5_CLASS_OPAQUE, 2, false}, .rank = 1, .dims = {3}, .data = bf16,
       .attrs = &bf, .n_attrs = 1},
      {.path = "/s32", .is_dataset = true, .type = {H5_CLASS_INT, 4, true}, .rank = 0, .data = &i32},
      {.path = "/s64", .is_dataset = true, .type = {H5_CLASS_INT, 8, true}, .rank = 0, .data = &i64},
      {.path = "/empty"},
      {.path = "/zero", .is_dataset = true, .type = {H5_CLASS_FLOAT, 4, false}, .rank = 2, .dims = {0, 3}},
      {.path = "/big"},
  };
  int n = 10;
  char names[BIG][24];
  float vals[BIG];
  for (int i = 0; i < BIG; i++) {
    snprintf(names[i], sizeof names[i], "/big/%d", i);
    vals[i] = (float)i;
    objs[n++] = (h5w_object){.path = names[i], .is_dataset = true, .type = {H5_CLASS_FLOAT, 4, false}, .data = &vals[i]};
  }
  unsigned char *bytes;
  size_t len;
  h5_error err;
  ck_assert_msg(h5_write(objs, n, &bytes, &len, &err), "h5_write: %s", err.msg);
  FILE *f = fopen(CASTOR_BINARY_DIR "/tests/h5_write_roundtrip.h5", "wb"); /* for a look with h5dump */
  if (f) fwrite(bytes, 1, len, f), fclose(f);
  h5_file h;
  ck_assert_msg(h5_open(&h, bytes, len, &err), "h5_open at %llu: %s", (unsigned long long)err.off, err.msg);
  ck_assert_int_eq(h.n_objects, n + 1); /* and the root */
  for (int i = 0; i < n; i++) {
    const h5_object *o = h5_find(&h, objs[i].path);
    ck_assert_msg(o != NULL, "%s missing", objs[i].path);
    ck_assert_msg(o->is_dataset == objs[i].is_dataset, "%s: kind", objs[i].path);
    for (int a = 0; a < objs[i].n_attrs; a++) {
      const char *v = h5_attr_str(o, objs[i].attrs[a].name);
      ck_assert_msg(v && !strcmp(v, objs[i].attrs[a].str), "%s: attribute %s", objs[i].path, objs[i].attrs[a].name);
    }
    if (!o->is_dataset) continue;
    ck_assert_msg(o->type.cls == objs[i].type.cls && o->type.size == objs[i].type.size &&
                      o->type.is_signed == objs[i].type.is_signed && o->rank == objs[i].rank,
                  "%s: type or rank", objs[i].path);
    int64_t numel = 1;
    for (int k = 0; k < o->rank; k++) ck_assert(o->dims[k] == objs[i].dims[k]), numel *= o->dims[k];
    ck_assert_msg(o->nbytes == numel * objs[i].type.size, "%s: size", objs[i].path);
    if (numel) ck_assert_msg(!memcmp(o->data, objs[i].data, (size_t)o->nbytes), "%s: data", objs[i].path);
  }
  /* children by name, as HDF5 keeps them: /big/0, /big/1, /big/10, /big/100, ... */
  const h5_object *b = h5_find(&h, "/big");
  ck_assert_str_eq(b[1].path, "/big/0");
  ck_assert_str_eq(b[3].path, "/big/10");
  ck_assert_str_eq(b[4].path, "/big/100");
  h5_fini(&h);
  /* deterministic */
  unsigned char *again;
  size_t len2;
  ck_assert(h5_write(objs, n, &again, &len2, &err));
  ck_assert(len2 == len && !memcmp(again, bytes, len));
  free(again), free(bytes);
}
END_TEST

static const struct {
  const char *what, *msg;
  h5w_object objs[2];
  int n;
} h5_bad[] = {
    {"missing group", "object '/a/b': its group '/a' is not listed", {{.path = "/a/b"}}, 1},
    {"twice", "object '/a' is listed twice", {{.path = "/a"}, {.path = "/a"}}, 2},
    {"relative path", "object 'a': a path must start with '/'", {{.path = "a"}}, 1},
    {"empty component", "object '/a//b': a path has no empty component and does not end in '/'", {{.path = "/a//b"}}, 1},
    {"string dataset", "dataset '/s': a datatype h5_write does not write (class 3, 4 bytes)",
     {{.path = "/s", .is_dataset = true, .type = {H5_CLASS_STRING, 4, false}}}, 1},
    {"under a dataset", "object '/d/x': its parent is a dataset",
     {{.path = "/d", .is_dataset = true, .type = {H5_CLASS_FLOAT, 4, false}, .rank = 1, .dims = {0}}, {.path = "/d/x"}}, 2},
};

START_TEST(test_h5_refusals) {
  unsigned char *bytes = (unsigned char *)"x";
  size_t len = 1;
  h5_error err;
  ck_assert_msg(!h5_write(h5_bad[_i].objs, h5_bad[_i].n, &bytes, &len, &err), "%s: written", h5_bad[_i].what);
  ck_assert_msg(!bytes && !len, "%s: output left", h5_bad[_i].what);
  ck_assert_msg(!strcmp(err.msg, h5_bad[_i].msg), "%s:\n got  %s\n want %s", h5_bad[_i].what, err.msg, h5_bad[_i].msg);
}
END_TEST

/* ---- zip_write ---- */

START_TEST(test_zip_roundtrip) {
  char big[70000];
  for (size_t i = 0; i < sizeof big; i++) big[i] = (char)(i * 31 + 7);
  zip_entry m[] = {{"metadata.json", "{}", 2}, {"empty", NULL, 0}, {"model.weights.h5", big, sizeof big}};
  for (int z64 = 0; z64 < 2; z64++) {
    char path[256];
    snprintf(path, sizeof path, "%s/tests/zip_write_%d.zip", CASTOR_BINARY_DIR, z64);
    diag_sink *d = diag_sink_create();
    ck_assert_msg(zip_write(path, m, 3, z64, d), "zip_write: %s", diag_text(d));
    diag_sink_destroy(d);
    size_t len;
    char *bytes = read_file(path, &len);
    zip_archive za;
    zip_error ze;
    ck_assert_msg(zip_open(&za, bytes, len, &ze), "zip64 %d: zip_open at %llu: %s", z64, (unsigned long long)ze.off, ze.msg);
    ck_assert_int_eq(za.n_members, 3);
    for (int i = 0; i < 3; i++) {
      const zip_member *zm = zip_find(&za, m[i].name);
      ck_assert_msg(zm && zm->method == 0, "%s: missing or not stored", m[i].name);
      unsigned char *out;
      size_t n;
      ck_assert_msg(zip_read(&za, zm, 1 << 20, &out, &n, &ze), "%s: %s", m[i].name, ze.msg); /* checks the CRC */
      ck_assert(n == m[i].size && (!n || !memcmp(out, m[i].data, n)));
      free(out);
    }
    zip_fini(&za);
    free(bytes);
    unlink(path);
  }
  diag_sink *d = diag_sink_create();
  zip_entry dup[] = {{"a", "x", 1}, {"a", "y", 1}};
  ck_assert(!zip_write(CASTOR_BINARY_DIR "/tests/zip_dup.zip", dup, 2, false, d));
  ck_assert_msg(strstr(diag_text(d), "ZIP member 'a' given twice"), "%s", diag_text(d));
  diag_sink_destroy(d);
}
END_TEST

/* ---- the round trip ---- */

static const struct {
  const char *file, *pol;
  int n_in, n_out, hidden; /* the first kernel is [n_in, hidden] */
  bool lso;                /* compile_config names a LossScaleOptimizer */
} cases[] = {
    {"seq-float32", "float32", 10, 5, 16, false},
    {"seq-float16", "float16", 10, 5, 16, false},
    {"seq-bfloat16", "bfloat16", 10, 5, 16, false},
    /* compile_config names Adam: Keras 3 wrapped it at compile, but loads it unwrapped */
    {"seq-mixed_float16", "mixed_float16", 10, 5, 16, false},
    {"seq-mixed_bfloat16", "mixed_bfloat16", 10, 5, 16, false},
    {"compile-lso", "mixed_float16", 4, 3, 3, true},
};

static castor_tensor *random_tensor(castor_context *ctx, int rank, const int64_t *dims, uint64_t *seed, bool one_hot) {
  castor_tensor *t;
  ck_assert(castor_tensor_create(ctx, CASTOR_F32, rank, dims, &t) == CASTOR_OK);
  float *p = castor_tensor_data(t);
  for (int64_t r = 0; r < dims[0]; r++)
    for (int64_t c = 0; c < dims[1]; c++) {
      *seed = *seed * 6364136223846793005ull + 1442695040888963407ull;
      double u = (double)(*seed >> 11) / 9007199254740992.0;
      p[r * dims[1] + c] = one_hot ? (c == (int64_t)(u * 1000) % dims[1]) : (float)(2 * u - 1);
    }
  if (one_hot) /* exactly one 1 per row */
    for (int64_t r = 0; r < dims[0]; r++) {
      int64_t hot = -1;
      for (int64_t c = 0; c < dims[1]; c++)
        if (p[r * dims[1] + c] == 1 && hot < 0) hot = c;
        else p[r * dims[1] + c] = 0;
      if (hot < 0) p[r * dims[1]] = 1;
    }
  return t;
}

/* Runs eval on x, y: its prediction (caller destroys). */
static castor_tensor *predict(castor_program *eval, castor_tensor *x, castor_tensor *y) {
  castor_tensor *ins[] = {x, y}, *outs[2] = {NULL, NULL};
  ck_assert(castor_program_run(eval, ins, 2, outs, 2) == CASTOR_OK);
  castor_tensor_destroy(outs[1]);
  return outs[0];
}

START_TEST(test_keras_roundtrip) {
  const char *pol = cases[_i].file;
  char src[512], dst[512];
  snprintf(src, sizeof src, "%s/%s.keras", DIR, pol);
  snprintf(dst, sizeof dst, "%s/tests/saved-%s.keras", CASTOR_BINARY_DIR, pol);
  castor_context *ctx;
  castor_context_create(&ctx);
  castor_model *m = NULL, *back = NULL;
  ck_assert_msg(castor_model_load_file(ctx, src, NULL, &m) == CASTOR_OK, "%s", castor_context_last_error(ctx));
  castor_compile_options co;
  castor_compile_options_init(&co);
  castor_train_options to;
  castor_train_options_init(&to);
  castor_program *step = NULL, *eval = NULL, *eval_back = NULL;
  ck_assert_msg(castor_compile_train(m, &co, &to, &step) == CASTOR_OK, "%s: %s", pol, castor_context_last_error(ctx));
  uint64_t seed = 42;
  int64_t xd[] = {8, cases[_i].n_in}, yd[] = {8, cases[_i].n_out};
  castor_tensor *x = random_tensor(ctx, 2, xd, &seed, false), *y = random_tensor(ctx, 2, yd, &seed, true);
  for (int s = 0; s < 3; s++) {
    castor_tensor *outs[2] = {NULL, NULL};
    ck_assert_msg(castor_program_run(step, (castor_tensor *[]){x, y}, 2, outs, 2) == CASTOR_OK, "%s: step: %s", pol,
                  castor_context_last_error(ctx));
    castor_tensor_destroy(outs[0]), castor_tensor_destroy(outs[1]);
  }
  ck_assert_msg(castor_program_save_keras(step, m, &to, dst) == CASTOR_OK, "%s: save: %s", pol,
                castor_context_last_error(ctx));
  /* the trained weights in memory, against the file loaded back */
  ck_assert(castor_compile_eval(m, &co, &to, &eval) == CASTOR_OK);
  ck_assert(castor_program_copy_weights(eval, step) == CASTOR_OK);
  ck_assert_msg(castor_model_load_file(ctx, dst, NULL, &back) == CASTOR_OK, "%s: load back: %s", pol,
                castor_context_last_error(ctx));
  ck_assert(castor_compile_eval(back, &co, &to, &eval_back) == CASTOR_OK);

  /* the file's datasets: weights and optimizer variables, bit for bit */
  size_t len, hlen;
  char *bytes = read_file(dst, &len);
  zip_archive za;
  zip_error ze;
  ck_assert(zip_open(&za, bytes, len, &ze));
  unsigned char *h5b;
  ck_assert(zip_read(&za, zip_find(&za, "model.weights.h5"), (uint64_t)1 << 30, &h5b, &hlen, &ze));
  h5_file h;
  h5_error he;
  ck_assert_msg(h5_open(&h, h5b, hlen, &he), "%s: %s", pol, he.msg);
  /* every trained weight's bits are in one of the layers' datasets; the first Dense kernel [10, 16] is
   * Keras's first variable, whose momentum follows iterations and learning_rate */
  const char *first = NULL;
  int n_trainable = 0;
  for (int i = 0; i < castor_program_num_states(step); i++) {
    castor_tensor_info info;
    castor_program_state_info(step, i, &info);
    if (castor_program_state_kind(step, i) != CASTOR_STATE_TRAINABLE) continue;
    n_trainable++;
    if (info.rank == 2 && info.dims[0] == cases[_i].n_in && info.dims[1] == cases[_i].hidden) first = info.name;
    castor_tensor *t = NULL;
    ck_assert(castor_program_get_state(step, info.name, &t) == CASTOR_OK);
    bool found = false;
    for (int k = 0; k < h.n_objects && !found; k++) {
      const h5_object *o = &h.objects[k];
      found = o->is_dataset && str_has_prefix(o->path, "/layers/") && (size_t)o->nbytes == castor_tensor_nbytes(t) &&
              !memcmp(o->data, castor_tensor_data(t), castor_tensor_nbytes(t));
    }
    ck_assert_msg(found, "%s: no dataset holds the trained %s", pol, info.name);
    castor_tensor_destroy(t);
  }
  ck_assert_msg(first != NULL, "%s: no first kernel", pol);
  bool lso = cases[_i].lso;
  const char *inner = lso ? "/optimizer/inner_optimizer/vars" : "/optimizer/vars";
  char p[128];
  snprintf(p, sizeof p, "%s/0", inner);
  const h5_object *it = h5_find(&h, p);
  ck_assert_msg(it && it->type.cls == H5_CLASS_INT && it->rank == 0, "%s: %s is not the iteration count", pol, p);
  int64_t iters = it->type.size == 4 ? *(const int32_t *)it->data : *(const int64_t *)it->data;
  ck_assert_msg(iters == 3, "%s: iterations %lld", pol, (long long)iters);
  /* Adam: iterations, learning_rate, then a momentum and a velocity per weight */
  int n_vars = 0;
  for (int i = 0; i < h.n_objects; i++)
    if (h.objects[i].is_dataset && str_has_prefix(h.objects[i].path, "/optimizer/vars/")) n_vars++;
  ck_assert_msg(n_vars == (lso ? 4 : 0) + 2 + 2 * n_trainable, "%s: %d optimizer variables", pol, n_vars);
  snprintf(p, sizeof p, "%s/2", inner); /* the first weight's momentum */
  castor_tensor *mom = NULL;
  char path_m[256];
  snprintf(path_m, sizeof path_m, "%s.momentum", first);
  ck_assert(castor_program_get_state(step, path_m, &mom) == CASTOR_OK);
  const h5_object *mo = h5_find(&h, p);
  ck_assert_msg(mo && (size_t)mo->nbytes == castor_tensor_nbytes(mom) &&
                    !memcmp(mo->data, castor_tensor_data(mom), castor_tensor_nbytes(mom)),
                "%s: %s is not %s's momentum", pol, p, path_m);
  castor_tensor_destroy(mom);
  if (lso) { /* the LossScaleOptimizer's own four first: its initial_scale was 1024 */
    const h5_object *sc = h5_find(&h, "/optimizer/vars/3");
    ck_assert_msg(sc && sc->type.cls == H5_CLASS_FLOAT && *(const float *)sc->data == 1024.0f, "dynamic_scale");
    const h5_object *gs = h5_find(&h, "/optimizer/vars/2");
    ck_assert_msg(gs && gs->type.cls == H5_CLASS_INT && (gs->type.size == 4 ? *(const int32_t *)gs->data : *(const int64_t *)gs->data) == 3, "step_counter");
  }
  castor_tensor *a = predict(eval, x, y), *b = predict(eval_back, x, y);
  ck_assert_msg(castor_tensor_nbytes(a) == castor_tensor_nbytes(b) &&
                    !memcmp(castor_tensor_data(a), castor_tensor_data(b), castor_tensor_nbytes(a)),
                "%s: the loaded-back model's outputs differ from the trained weights'", pol);
  castor_tensor_destroy(a), castor_tensor_destroy(b);
  h5_fini(&h);
  free(h5b);
  zip_fini(&za);
  free(bytes);
  castor_tensor_destroy(x), castor_tensor_destroy(y);
  castor_program_destroy(step), castor_program_destroy(eval), castor_program_destroy(eval_back);
  castor_model_destroy(m), castor_model_destroy(back);
  castor_context_destroy(ctx);
}
END_TEST

START_TEST(test_cast_refused) {
  castor_context *ctx;
  castor_context_create(&ctx);
  static const char text[] = "model t\nx = input(shape=[3])\ny = dense(x, units=2, name=d)\noutput y\n";
  castor_model *m = NULL;
  ck_assert(castor_model_load_string(ctx, "t.cast", text, sizeof text - 1, NULL, &m) == CASTOR_OK);
  castor_compile_options co;
  castor_compile_options_init(&co);
  castor_train_options to;
  castor_train_options_init(&to);
  to.loss = "mean_squared_error";
  castor_program *step = NULL;
  ck_assert_msg(castor_compile_train(m, &co, &to, &step) == CASTOR_OK, "%s", castor_context_last_error(ctx));
  ck_assert(castor_program_save_keras(step, m, &to, CASTOR_BINARY_DIR "/tests/never.keras") == CASTOR_ERR_UNSUPPORTED);
  ck_assert_msg(strstr(castor_context_last_error(ctx), "only a model loaded from a .keras file can be saved as one"),
                "%s", castor_context_last_error(ctx));
  ck_assert(access(CASTOR_BINARY_DIR "/tests/never.keras", F_OK) != 0);
  castor_program_destroy(step);
  castor_model_destroy(m);
  castor_context_destroy(ctx);
}
END_TEST

static Suite *keras_save_suite(void) {
  Suite *s = suite_create("keras_save");
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, 300);
  tcase_add_test(tc, test_h5_roundtrip);
  tcase_add_loop_test(tc, test_h5_refusals, 0, (int)(sizeof h5_bad / sizeof h5_bad[0]));
  tcase_add_test(tc, test_zip_roundtrip);
  tcase_add_loop_test(tc, test_keras_roundtrip, 0, (int)(sizeof cases / sizeof cases[0]));
  tcase_add_test(tc, test_cast_refused);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) { return check_run(keras_save_suite()); }
