/* SPDX-License-Identifier: Apache-2.0 */
/*
 * check_api.c: the public API (include/castor.h) as an embedder sees it:
 * statuses, last-error text, misuse of every entry point, tensor shapes and
 * dtypes checked at run, outputs created or filled in place, .npy I/O, and
 * statuses chosen by the kind of the first error, never by its text.
 */
#include <check.h>

#include "tests/unit/test_support.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api/internal.h"
#include "castor.h"
#include "util/diag.h"

static const char *model_text =
    "model two\nx = input(shape=[3])\ny = input(shape=[3])\ns = add(x, y)\n"
    "d = dense(s, units=2, activation=tanh, name=d)\noutput d, s\n";

static castor_context *ctx;
static castor_model *model;
static castor_program *prog;

static void setup(void) {
  ck_assert_int_eq(castor_context_create(&ctx), CASTOR_OK);
  castor_status st = castor_model_load_string(ctx, "two.cast", model_text, strlen(model_text), NULL, &model);
  ck_assert_msg(st == CASTOR_OK, "load: %s\n%s", castor_status_string(st), castor_context_last_error(ctx));
  st = castor_compile(model, NULL, &prog);
  ck_assert_msg(st == CASTOR_OK, "compile: %s\n%s", castor_status_string(st), castor_context_last_error(ctx));
}

static void teardown(void) {
  castor_program_destroy(prog);
  castor_model_destroy(model);
  castor_context_destroy(ctx);
}

static castor_tensor *tensor(castor_dtype dt, int rank, const int64_t *dims) {
  castor_tensor *t = NULL;
  ck_assert_int_eq(castor_tensor_create(ctx, dt, rank, dims, &t), CASTOR_OK);
  return t;
}

START_TEST(test_status_strings_and_version) {
  for (int s = CASTOR_OK; s <= CASTOR_ERR_INTERNAL; s++)
    ck_assert_msg(strncmp(castor_status_string((castor_status)s), "CASTOR_", 7) == 0, "status %d", s);
  ck_assert_str_eq(castor_status_string((castor_status)999), "unknown castor_status");
  ck_assert_msg(strstr(castor_version(), CASTOR_VERSION_STRING) == castor_version(), "%s", castor_version());
  ck_assert_msg(strstr(castor_version(), "LLVM 19.") != NULL, "%s", castor_version());
  ck_assert_str_eq(castor_dtype_name(CASTOR_BF16), "bf16");
  ck_assert_int_eq(castor_dtype_size(CASTOR_F16), 2);
}
END_TEST

START_TEST(test_null_arguments) {
  ck_assert_int_eq(castor_context_create(NULL), CASTOR_ERR_INVALID_ARGUMENT);
  ck_assert_int_eq(castor_model_load_file(NULL, "x", NULL, &model), CASTOR_ERR_INVALID_ARGUMENT);
  castor_model *m = NULL;
  ck_assert_int_eq(castor_model_load_file(ctx, NULL, NULL, &m), CASTOR_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(castor_context_last_error(ctx), "error: castor_model_load_file: NULL argument\n");
  ck_assert_int_eq(castor_compile(NULL, NULL, NULL), CASTOR_ERR_INVALID_ARGUMENT);
  ck_assert_int_eq(castor_program_run(NULL, NULL, 0, NULL, 0), CASTOR_ERR_INVALID_ARGUMENT);
  castor_tensor_info info;
  ck_assert_int_eq(castor_program_input_info(prog, 2, &info), CASTOR_ERR_INVALID_ARGUMENT);
  ck_assert_int_eq(castor_program_output_info(prog, -1, &info), CASTOR_ERR_INVALID_ARGUMENT);
  castor_model_destroy(NULL);
  castor_program_destroy(NULL);
  castor_tensor_destroy(NULL);
  castor_context_destroy(NULL);
}
END_TEST

START_TEST(test_load_errors) {
  castor_model *m = (castor_model *)1;
  castor_status st = castor_model_load_file(ctx, "/nonexistent/m.cast", NULL, &m);
  ck_assert_int_eq(st, CASTOR_ERR_IO);
  ck_assert_ptr_null(m);
  ck_assert_msg(strstr(castor_context_last_error(ctx), "/nonexistent/m.cast") != NULL, "%s",
                castor_context_last_error(ctx));
  const char *bad = "model m\nx = input(shape=[3])\ny = dense(x, units=0)\noutput y\n";
  st = castor_model_load_string(ctx, "bad.cast", bad, strlen(bad), NULL, &m);
  ck_assert_int_eq(st, CASTOR_ERR_PARSE);
  ck_assert_msg(strncmp(castor_context_last_error(ctx), "bad.cast:3:", 11) == 0, "%s", castor_context_last_error(ctx));
  /* a successful call clears the last error */
  castor_tensor *t = tensor(CASTOR_F32, 1, (int64_t[]){2});
  ck_assert_str_eq(castor_context_last_error(ctx), "");
  castor_tensor_destroy(t);
}
END_TEST

/* Each diagnostic kind maps to one status; an error without a kind, or no
 * error at all, gives the caller's fallback. */
START_TEST(test_status_from_diag_kind) {
  static const struct {
    diag_kind kind;
    castor_status want;
  } cases[] = {
      {DIAG_KIND_IO, CASTOR_ERR_IO},
      {DIAG_KIND_INVALID_ARGUMENT, CASTOR_ERR_INVALID_ARGUMENT},
      {DIAG_KIND_INVALID_MODEL, CASTOR_ERR_PARSE},
      {DIAG_KIND_UNSUPPORTED, CASTOR_ERR_UNSUPPORTED},
      {DIAG_KIND_CODEGEN, CASTOR_ERR_CODEGEN},
      {DIAG_KIND_DEVICE, CASTOR_ERR_DEVICE},
      {DIAG_KIND_INTERNAL, CASTOR_ERR_INTERNAL},
      {DIAG_KIND_UNSPECIFIED, CASTOR_ERR_NOMEM}, /* the fallback */
  };
  diag_sink *d = diag_sink_create();
  ck_assert_int_eq(castor_status_from_diag(d, CASTOR_ERR_NOMEM), CASTOR_ERR_NOMEM);
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    diag_clear(d);
    diag_error_kind(d, cases[i].kind, (diag_loc){0}, "cannot read: the text must not matter");
    diag_error_kind(d, DIAG_KIND_DEVICE, (diag_loc){0}, "a later error does not count");
    castor_status st = castor_status_from_diag(d, CASTOR_ERR_NOMEM);
    ck_assert_msg(st == cases[i].want, "kind %d: %s, want %s", (int)cases[i].kind, castor_status_string(st),
                  castor_status_string(cases[i].want));
  }
  diag_clear(d);
  diag_error(d, (diag_loc){0}, "cannot read: a plain error");
  ck_assert_int_eq(castor_status_from_diag(d, CASTOR_ERR_PARSE), CASTOR_ERR_PARSE);
  diag_sink_destroy(d);
}
END_TEST

/* Weights files: unreadable is CASTOR_ERR_IO, malformed CASTOR_ERR_PARSE; and
 * a malformed model whose diagnostics happen to say "cannot read" (here in
 * its name) is still CASTOR_ERR_PARSE. */
START_TEST(test_load_error_kinds) {
  const char *text = "model m\nx = input(shape=[3])\ny = dense(x, units=2, name=d)\noutput y\n";
  castor_load_options lo;
  castor_load_options_init(&lo);
  lo.weights_path = "/nonexistent/w.safetensors";
  castor_model *m = NULL;
  castor_status st = castor_model_load_string(ctx, "m.cast", text, strlen(text), &lo, &m);
  ck_assert_msg(st == CASTOR_ERR_IO, "missing weights: %s\n%s", castor_status_string(st),
                castor_context_last_error(ctx));
  ck_assert_ptr_null(m);
  char path[] = "/tmp/castor_api_w_XXXXXX";
  int fd = mkstemp(path);
  ck_assert(fd >= 0);
  ck_assert_int_eq(write(fd, "abc", 3), 3);
  close(fd);
  lo.weights_path = path;
  st = castor_model_load_string(ctx, "m.cast", text, strlen(text), &lo, &m);
  ck_assert_msg(st == CASTOR_ERR_PARSE, "short weights file: %s\n%s", castor_status_string(st),
                castor_context_last_error(ctx));
  unlink(path);
  const char *bad = "model m\nx = input(shape=[3])\ny = dense(x, units=0)\noutput y\n";
  st = castor_model_load_string(ctx, "cannot read.cast", bad, strlen(bad), NULL, &m);
  ck_assert_msg(st == CASTOR_ERR_PARSE, "%s\n%s", castor_status_string(st), castor_context_last_error(ctx));
  ck_assert_msg(strstr(castor_context_last_error(ctx), "cannot read.cast:3:") != NULL, "%s",
                castor_context_last_error(ctx));
}
END_TEST

START_TEST(test_compile_options) {
  castor_compile_options o;
  castor_compile_options_init(&o);
  ck_assert_int_eq(o.opt_level, 2);
  castor_program *p = NULL;
  o.policy = "float64";
  ck_assert_int_eq(castor_compile(model, &o, &p), CASTOR_ERR_INVALID_ARGUMENT);
  ck_assert_msg(strstr(castor_context_last_error(ctx), "unknown policy 'float64'") != NULL, "%s",
                castor_context_last_error(ctx));
  o.policy = NULL;
  o.opt_level = 7;
  ck_assert_int_eq(castor_compile(model, &o, &p), CASTOR_ERR_INVALID_ARGUMENT);
  o.opt_level = 0; /* unoptimized code computes the same values */
  o.verify_each = 1;
  ck_assert_int_eq(castor_compile(model, &o, &p), CASTOR_OK);
  ck_assert_ptr_nonnull(p);
  castor_program_destroy(p);
  /* the CPU by name: the options' field, else $CASTOR_CPU */
  o.cpu = "pentium-ii";
  ck_assert_int_eq(castor_compile(model, &o, &p), CASTOR_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(castor_context_last_error(ctx),
                   "error: unknown CPU 'pentium-ii' (known: host, x86-64, x86-64-v2, x86-64-v3, x86-64-v4, haswell, "
                   "znver3, skylake-avx512, znver4, cooperlake, sapphirerapids, sapphirerapids-amx)\n");
  o.cpu = NULL;
  const char *env = getenv("CASTOR_CPU");
  char *saved = env ? strdup(env) : NULL;
  setenv("CASTOR_CPU", "pentium-ii", 1);
  ck_assert_int_eq(castor_compile(model, &o, &p), CASTOR_ERR_INVALID_ARGUMENT);
  ck_assert_msg(strstr(castor_context_last_error(ctx), "unknown CPU 'pentium-ii' in CASTOR_CPU (known: host,"), "%s",
                castor_context_last_error(ctx));
  setenv("CASTOR_CPU", "x86-64", 1); /* SSE2: every x86-64 host runs it */
  ck_assert_int_eq(castor_compile(model, &o, &p), CASTOR_OK);
  castor_program_destroy(p);
  o.cpu = "host"; /* the field wins over the environment */
  ck_assert_int_eq(castor_compile(model, &o, &p), CASTOR_OK);
  castor_program_destroy(p);
  if (saved) setenv("CASTOR_CPU", saved, 1);
  else unsetenv("CASTOR_CPU");
  free(saved);
}
END_TEST

/* A bad $CASTOR_NUM_THREADS is an error of castor_compile, unless the
 * options give a thread count (each Check test runs in its own process). */
START_TEST(test_threads_env) {
  static const char *const bad[] = {"abc", "0", "99999999", "-2", "4x"};
  castor_compile_options o;
  castor_compile_options_init(&o);
  castor_program *p = NULL;
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    setenv("CASTOR_NUM_THREADS", bad[i], 1);
    ck_assert_int_eq(castor_compile(model, &o, &p), CASTOR_ERR_INVALID_ARGUMENT);
    char want[256];
    snprintf(want, sizeof want,
             "error: CASTOR_NUM_THREADS is '%s'; it must be a whole number from 1 to 1024 (or unset: every CPU)\n",
             bad[i]);
    ck_assert_str_eq(castor_context_last_error(ctx), want);
  }
  o.threads = 2;
  ck_assert_int_eq(castor_compile(model, &o, &p), CASTOR_OK);
  castor_program_destroy(p);
  setenv("CASTOR_NUM_THREADS", "3", 1);
  o.threads = 0;
  ck_assert_int_eq(castor_compile(model, &o, &p), CASTOR_OK);
  castor_program_destroy(p);
  unsetenv("CASTOR_NUM_THREADS");
}
END_TEST

START_TEST(test_info) {
  ck_assert_int_eq(castor_program_num_inputs(prog), 2);
  ck_assert_int_eq(castor_program_num_outputs(prog), 2);
  castor_tensor_info info;
  ck_assert_int_eq(castor_program_input_info(prog, 1, &info), CASTOR_OK);
  ck_assert_str_eq(info.name, "y");
  ck_assert_int_eq(info.rank, 2);
  ck_assert_int_eq(info.dims[0], -1);
  ck_assert_int_eq(info.dims[1], 3);
  ck_assert_int_eq(castor_program_output_info(prog, 0, &info), CASTOR_OK);
  ck_assert_str_eq(info.name, "d");
  ck_assert_int_eq(info.dims[1], 2);
  ck_assert_int_eq(info.dtype, CASTOR_F32);
}
END_TEST

START_TEST(test_run_and_shape_errors) {
  castor_tensor *x = tensor(CASTOR_F32, 2, (int64_t[]){2, 3}), *y = tensor(CASTOR_F32, 2, (int64_t[]){2, 3});
  float *xp = castor_tensor_data(x), *yp = castor_tensor_data(y);
  for (int i = 0; i < 6; i++) xp[i] = (float)i, yp[i] = 10.0f * (float)i;
  castor_tensor *in[2] = {x, y}, *out[2] = {NULL, NULL};
  ck_assert_msg(castor_program_run(prog, in, 2, out, 2) == CASTOR_OK, "%s", castor_context_last_error(ctx));
  ck_assert_int_eq(castor_tensor_dims(out[0])[0], 2);
  ck_assert_int_eq(castor_tensor_dims(out[0])[1], 2);
  const float *s = castor_tensor_data(out[1]);
  for (int i = 0; i < 6; i++) ck_assert_float_eq(s[i], 11.0f * (float)i);
  /* outputs given: written in place */
  float before = ((float *)castor_tensor_data(out[0]))[0];
  memset(castor_tensor_data(out[0]), 0, castor_tensor_nbytes(out[0]));
  ck_assert_int_eq(castor_program_run(prog, in, 2, out, 2), CASTOR_OK);
  ck_assert_float_eq(((float *)castor_tensor_data(out[0]))[0], before);

  /* wrong count */
  ck_assert_int_eq(castor_program_run(prog, in, 1, out, 2), CASTOR_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(castor_context_last_error(ctx),
                   "error: program 'two' takes 2 input(s) and 2 output(s), got 1 and 2\n");
  /* wrong inner dimension */
  castor_tensor *bad = tensor(CASTOR_F32, 2, (int64_t[]){2, 4});
  in[1] = bad;
  ck_assert_int_eq(castor_program_run(prog, in, 2, out, 2), CASTOR_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(castor_context_last_error(ctx),
                   "error: input 'y': expected f32[N,3], got f32[2,4]\n");
  castor_tensor_destroy(bad);
  /* batch differs between inputs */
  bad = tensor(CASTOR_F32, 2, (int64_t[]){5, 3});
  in[1] = bad;
  ck_assert_int_eq(castor_program_run(prog, in, 2, out, 2), CASTOR_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(castor_context_last_error(ctx),
                   "error: input 'y': batch 5 differs from the batch 2 of the tensors before it\n");
  castor_tensor_destroy(bad);
  /* wrong dtype */
  bad = tensor(CASTOR_F16, 2, (int64_t[]){2, 3});
  in[1] = bad;
  ck_assert_int_eq(castor_program_run(prog, in, 2, out, 2), CASTOR_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(castor_context_last_error(ctx),
                   "error: input 'y': expected f32[N,3], got f16[2,3]\n");
  castor_tensor_destroy(bad);
  /* NULL input */
  in[1] = NULL;
  ck_assert_int_eq(castor_program_run(prog, in, 2, out, 2), CASTOR_ERR_INVALID_ARGUMENT);
  /* output of the wrong batch */
  in[1] = y;
  castor_tensor *o3 = tensor(CASTOR_F32, 2, (int64_t[]){3, 2});
  castor_tensor *outs[2] = {o3, NULL};
  ck_assert_int_eq(castor_program_run(prog, in, 2, outs, 2), CASTOR_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(castor_context_last_error(ctx),
                   "error: output 'd': batch 3 differs from the batch 2 of the tensors before it\n");
  ck_assert_ptr_null(outs[1]);
  castor_tensor_destroy(o3);
  castor_tensor_destroy(out[0]), castor_tensor_destroy(out[1]);
  castor_tensor_destroy(x), castor_tensor_destroy(y);
}
END_TEST

START_TEST(test_tensor_create_errors) {
  castor_tensor *t = NULL;
  ck_assert_int_eq(castor_tensor_create(ctx, CASTOR_F32, 7, (int64_t[]){1, 1, 1, 1, 1, 1, 1}, &t),
                   CASTOR_ERR_INVALID_ARGUMENT);
  ck_assert_int_eq(castor_tensor_create(ctx, CASTOR_F32, 2, (int64_t[]){-1, 3}, &t), CASTOR_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(castor_context_last_error(ctx),
                   "error: castor_tensor_create: dimension 0 is -1; dimensions must be >= 0\n");
  ck_assert_int_eq(castor_tensor_create(ctx, CASTOR_F32, 3, (int64_t[]){0, 2, -5}, &t), CASTOR_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(castor_context_last_error(ctx),
                   "error: castor_tensor_create: dimension 2 is -5; dimensions must be >= 0\n");
  ck_assert_int_eq(castor_tensor_create(ctx, CASTOR_F32, 2, (int64_t[]){INT64_C(1) << 40, INT64_C(1) << 40}, &t),
                   CASTOR_ERR_INVALID_ARGUMENT);
  ck_assert_int_eq(castor_tensor_create(ctx, (castor_dtype)42, 1, (int64_t[]){1}, &t), CASTOR_ERR_INVALID_ARGUMENT);
  ck_assert_ptr_null(t);
  ck_assert_int_eq(castor_tensor_create(ctx, CASTOR_I64, 0, NULL, &t), CASTOR_OK);
  ck_assert_int_eq(castor_tensor_numel(t), 1);
  ck_assert_int_eq(castor_tensor_nbytes(t), 8);
  ck_assert_int_eq((uintptr_t)castor_tensor_data(t) % 64, 0);
  castor_tensor_destroy(t);
}
END_TEST

/* Empty tensors (a dimension 0, as NumPy's and ONNX's): created with a
 * valid aligned pointer, saved and loaded as .npy, and run as a batch of 0
 * rows, whose outputs are empty too. */
START_TEST(test_empty_tensors) {
  castor_tensor *t = tensor(CASTOR_F32, 2, (int64_t[]){4, 0});
  ck_assert_int_eq(castor_tensor_numel(t), 0);
  ck_assert_int_eq(castor_tensor_nbytes(t), 0);
  ck_assert_ptr_nonnull(castor_tensor_data(t));
  ck_assert_int_eq((uintptr_t)castor_tensor_data(t) % 64, 0);
  ck_assert_int_eq(castor_tensor_dims(t)[0], 4);
  ck_assert_int_eq(castor_tensor_dims(t)[1], 0);
  char path[] = "/tmp/castor_api_empty_XXXXXX";
  int fd = mkstemp(path);
  ck_assert(fd >= 0);
  close(fd);
  for (int k = 0; k < 2; k++) { /* [4, 0] f32 and [0, 2, 3] f16 */
    castor_tensor *u = NULL;
    ck_assert_msg(castor_tensor_save_npy(t, path) == CASTOR_OK, "%s", castor_context_last_error(ctx));
    ck_assert_msg(castor_tensor_load_npy(ctx, path, &u) == CASTOR_OK, "%s", castor_context_last_error(ctx));
    ck_assert_int_eq(castor_tensor_dtype(u), castor_tensor_dtype(t));
    ck_assert_int_eq(castor_tensor_rank(u), castor_tensor_rank(t));
    for (int r = 0; r < castor_tensor_rank(t); r++) ck_assert_int_eq(castor_tensor_dims(u)[r], castor_tensor_dims(t)[r]);
    ck_assert_int_eq(castor_tensor_numel(u), 0);
    castor_tensor_destroy(u);
    castor_tensor_destroy(t);
    t = k == 0 ? tensor(CASTOR_F16, 3, (int64_t[]){0, 2, 3}) : NULL;
  }
  unlink(path);

  /* a batch of 0 rows: outputs created empty, or given empty */
  castor_tensor *x = tensor(CASTOR_F32, 2, (int64_t[]){0, 3}), *y = tensor(CASTOR_F32, 2, (int64_t[]){0, 3});
  castor_tensor *in[2] = {x, y}, *out[2] = {NULL, NULL};
  ck_assert_msg(castor_program_run(prog, in, 2, out, 2) == CASTOR_OK, "%s", castor_context_last_error(ctx));
  ck_assert_int_eq(castor_tensor_rank(out[0]), 2);
  ck_assert_int_eq(castor_tensor_dims(out[0])[0], 0);
  ck_assert_int_eq(castor_tensor_dims(out[0])[1], 2);
  ck_assert_int_eq(castor_tensor_dims(out[1])[0], 0);
  ck_assert_int_eq(castor_tensor_dims(out[1])[1], 3);
  ck_assert_int_eq(castor_tensor_numel(out[0]), 0);
  ck_assert_int_eq(castor_program_run(prog, in, 2, out, 2), CASTOR_OK);
  /* an empty batch must match the other inputs' batch like any other */
  castor_tensor *two = tensor(CASTOR_F32, 2, (int64_t[]){2, 3});
  in[1] = two;
  ck_assert_int_eq(castor_program_run(prog, in, 2, out, 2), CASTOR_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(castor_context_last_error(ctx),
                   "error: input 'y': batch 2 differs from the batch 0 of the tensors before it\n");
  /* an empty inner dimension is a shape mismatch, not an empty batch */
  castor_tensor *thin = tensor(CASTOR_F32, 2, (int64_t[]){2, 0});
  in[0] = two, in[1] = thin;
  ck_assert_int_eq(castor_program_run(prog, in, 2, out, 2), CASTOR_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(castor_context_last_error(ctx), "error: input 'y': expected f32[N,3], got f32[2,0]\n");
  /* nothing to time in an empty batch */
  double ms = 0;
  in[0] = x, in[1] = y;
  ck_assert_int_eq(castor_program_time(prog, in, 2, 0, 1, &ms), CASTOR_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(castor_context_last_error(ctx),
                   "error: castor_program_time: the batch is empty (0 rows): nothing to time\n");
  castor_tensor_destroy(thin), castor_tensor_destroy(two);
  castor_tensor_destroy(out[0]), castor_tensor_destroy(out[1]);
  castor_tensor_destroy(x), castor_tensor_destroy(y);
}
END_TEST

START_TEST(test_npy_io) {
  char path[] = "/tmp/castor_api_XXXXXX";
  int fd = mkstemp(path);
  ck_assert(fd >= 0);
  close(fd);
  castor_tensor *t = tensor(CASTOR_F32, 2, (int64_t[]){2, 3}), *u = NULL;
  for (int i = 0; i < 6; i++) ((float *)castor_tensor_data(t))[i] = 0.5f * (float)i - 1.0f;
  ck_assert_int_eq(castor_tensor_save_npy(t, path), CASTOR_OK);
  ck_assert_int_eq(castor_tensor_load_npy(ctx, path, &u), CASTOR_OK);
  ck_assert_int_eq(castor_tensor_rank(u), 2);
  ck_assert_int_eq(memcmp(castor_tensor_data(t), castor_tensor_data(u), 24), 0);
  castor_tensor_destroy(u);
  u = NULL;
  FILE *f = fopen(path, "wb");
  fputs("not an npy file", f);
  fclose(f);
  ck_assert_int_eq(castor_tensor_load_npy(ctx, path, &u), CASTOR_ERR_PARSE);
  ck_assert_ptr_null(u);
  unlink(path);
  ck_assert_int_eq(castor_tensor_load_npy(ctx, path, &u), CASTOR_ERR_IO);
  castor_tensor *b = tensor(CASTOR_BF16, 1, (int64_t[]){2});
  ck_assert_int_eq(castor_tensor_save_npy(b, path), CASTOR_ERR_UNSUPPORTED);
  castor_tensor_destroy(b);
  castor_tensor_destroy(t);
}
END_TEST

/* .npy statuses come from the error's kind: a path that says "cannot" does
 * not make a malformed file an I/O error, and a directory (opens, then
 * fails to read) or an unwritable path is one. */
START_TEST(test_npy_error_kinds) {
  char dir[] = "/tmp/castor_api_cannot_XXXXXX";
  ck_assert_ptr_nonnull(mkdtemp(dir));
  char path[sizeof dir + 32];
  snprintf(path, sizeof path, "%s/cannot open.npy", dir);
  FILE *f = fopen(path, "wb");
  ck_assert_ptr_nonnull(f);
  fputs("\x93NUMPY\x01\x00", f); /* truncated header */
  fclose(f);
  castor_tensor *u = NULL;
  castor_status st = castor_tensor_load_npy(ctx, path, &u);
  ck_assert_msg(st == CASTOR_ERR_PARSE, "%s\n%s", castor_status_string(st), castor_context_last_error(ctx));
  ck_assert_ptr_null(u);
  st = castor_tensor_load_npy(ctx, dir, &u);
  ck_assert_msg(st == CASTOR_ERR_IO, "directory: %s\n%s", castor_status_string(st), castor_context_last_error(ctx));
  unlink(path);
  castor_tensor *t = tensor(CASTOR_F32, 1, (int64_t[]){2});
  snprintf(path, sizeof path, "%s/no/such/dir.npy", dir);
  st = castor_tensor_save_npy(t, path);
  ck_assert_msg(st == CASTOR_ERR_IO, "unwritable: %s\n%s", castor_status_string(st), castor_context_last_error(ctx));
  castor_tensor_destroy(t);
  rmdir(dir);
}
END_TEST

/* castor_tensor_wrap: a run reads and writes the caller's memory in
 * place; unaligned or NULL data is refused; destroy leaves the memory. */
START_TEST(test_tensor_wrap) {
  _Alignas(64) float xs[2][3] = {{1, 2, 3}, {4, 5, 6}}, ys[2][3] = {{0.5f, 0, -1}, {2, 2, 2}};
  _Alignas(64) float d[2][2], s[2][3];
  const int64_t dx[] = {2, 3}, dd[] = {2, 2};
  castor_tensor *in[2] = {NULL, NULL}, *out[2] = {NULL, NULL};
  ck_assert_int_eq(castor_tensor_wrap(ctx, CASTOR_F32, 2, dx, xs, &in[0]), CASTOR_OK);
  ck_assert_int_eq(castor_tensor_wrap(ctx, CASTOR_F32, 2, dx, ys, &in[1]), CASTOR_OK);
  ck_assert_int_eq(castor_tensor_wrap(ctx, CASTOR_F32, 2, dd, d, &out[0]), CASTOR_OK);
  ck_assert_int_eq(castor_tensor_wrap(ctx, CASTOR_F32, 2, dx, s, &out[1]), CASTOR_OK);
  ck_assert_ptr_eq(castor_tensor_data(in[0]), (void *)xs);
  castor_status st = castor_program_run(prog, in, 2, out, 2);
  ck_assert_msg(st == CASTOR_OK, "run: %s", castor_context_last_error(ctx));
  for (int r = 0; r < 2; r++)
    for (int j = 0; j < 3; j++) ck_assert_float_eq(s[r][j], xs[r][j] + ys[r][j]); /* the output, in place */
  /* the same run on created tensors gives the same d */
  castor_tensor *ci[2] = {tensor(CASTOR_F32, 2, dx), tensor(CASTOR_F32, 2, dx)}, *co[2] = {NULL, NULL};
  memcpy(castor_tensor_data(ci[0]), xs, sizeof xs), memcpy(castor_tensor_data(ci[1]), ys, sizeof ys);
  ck_assert_int_eq(castor_program_run(prog, ci, 2, co, 2), CASTOR_OK);
  ck_assert_int_eq(memcmp(castor_tensor_data(co[0]), d, sizeof d), 0);
  for (int i = 0; i < 2; i++) castor_tensor_destroy(in[i]), castor_tensor_destroy(out[i]);
  for (int i = 0; i < 2; i++) castor_tensor_destroy(ci[i]), castor_tensor_destroy(co[i]);
  ck_assert_float_eq(xs[1][2], 6); /* destroy left the caller's memory alone */
  castor_tensor *t = (castor_tensor *)1;
  ck_assert_int_eq(castor_tensor_wrap(ctx, CASTOR_F32, 2, dx, (char *)xs + 4, &t), CASTOR_ERR_INVALID_ARGUMENT);
  ck_assert_ptr_null(t);
  ck_assert_msg(strstr(castor_context_last_error(ctx), "castor_tensor_wrap: the data at ") &&
                    strstr(castor_context_last_error(ctx), "is not 64-byte aligned"),
                "%s", castor_context_last_error(ctx));
  ck_assert_int_eq(castor_tensor_wrap(ctx, CASTOR_F32, 2, dx, NULL, &t), CASTOR_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(castor_context_last_error(ctx), "error: castor_tensor_wrap: data is NULL\n");
  const int64_t bad[] = {2, -1};
  ck_assert_int_eq(castor_tensor_wrap(ctx, CASTOR_F32, 2, bad, xs, &t), CASTOR_ERR_INVALID_ARGUMENT);
  ck_assert_int_eq(castor_tensor_wrap(NULL, CASTOR_F32, 2, dx, xs, &t), CASTOR_ERR_INVALID_ARGUMENT);
}
END_TEST

/* castor_model_dump_text: each kind is the text castor_model_dump makes
 * (what castor dump prints), owned by the model; a bad kind is refused. */
START_TEST(test_dump_text) {
  const castor_emit emits[] = {CASTOR_EMIT_IR, CASTOR_EMIT_CASTS, CASTOR_EMIT_LLVM, CASTOR_EMIT_PTX,
                               CASTOR_EMIT_DOT, CASTOR_EMIT_SUMMARY};
  for (int k = CASTOR_DUMP_IR; k <= CASTOR_DUMP_SUMMARY; k++) {
    if (k == CASTOR_DUMP_PTX) continue; /* the cpu target has no PTX: an error (below) */
    const char *text = NULL;
    castor_status st = castor_model_dump_text(model, NULL, (castor_dump_kind)k, &text);
    ck_assert_msg(st == CASTOR_OK && text && text[0], "kind %d: %s", k, castor_context_last_error(ctx));
    str_buf want;
    str_buf_init(&want);
    castor_compile_options o;
    castor_compile_options_init(&o);
    ck_assert_int_eq(castor_model_dump(model, &o, NULL, emits[k], &want), CASTOR_OK);
    if (k != CASTOR_DUMP_LLVM) ck_assert_str_eq(text, str_buf_cstr(&want)); /* LLVM names its module per compile */
    str_buf_fini(&want);
  }
  const char *text = NULL;
  ck_assert_int_ne(castor_model_dump_text(model, NULL, CASTOR_DUMP_PTX, &text), CASTOR_OK);
  ck_assert_ptr_null(text);
  ck_assert_msg(castor_context_last_error(ctx)[0], "no message for PTX from the cpu target");
  ck_assert_int_eq(castor_model_dump_text(model, NULL, CASTOR_DUMP_SUMMARY, &text), CASTOR_OK);
  ck_assert_msg(strstr(text, "model two (policy float32)\n") == text, "%s", text);
  ck_assert_msg(strstr(text, "\nd                        matmul         [N,2]                           8  f32") != NULL,
                "%s", text);
  ck_assert_msg(strstr(text, "total params: 8 (32 B as float32; 32 B as compiled under float32)\n") != NULL, "%s", text);
  castor_compile_options o;
  castor_compile_options_init(&o);
  o.policy = "mixed_float16";
  ck_assert_int_eq(castor_model_dump_text(model, &o, CASTOR_DUMP_SUMMARY, &text), CASTOR_OK);
  ck_assert_msg(strstr(text, "16 B as compiled under mixed_float16") != NULL, "%s", text);
  ck_assert_int_eq(castor_model_dump_text(model, NULL, (castor_dump_kind)99, &text), CASTOR_ERR_INVALID_ARGUMENT);
  ck_assert_ptr_null(text);
  ck_assert_int_eq(castor_model_dump_text(model, NULL, CASTOR_DUMP_IR, NULL), CASTOR_ERR_INVALID_ARGUMENT);
  ck_assert_int_eq(castor_model_dump_text(NULL, NULL, CASTOR_DUMP_IR, &text), CASTOR_ERR_INVALID_ARGUMENT);
  o.policy = "float8";
  ck_assert_int_ne(castor_model_dump_text(model, &o, CASTOR_DUMP_IR, &text), CASTOR_OK);
  ck_assert_msg(strstr(castor_context_last_error(ctx), "float8") != NULL, "%s", castor_context_last_error(ctx));
}
END_TEST

START_TEST(test_policies_and_autocast_options) {
  const char *text = "model m\npolicy mixed_float16\nx = input(shape=[3])\ny = dense(x, units=2, name=d)\noutput y\n";
  castor_model *m = NULL;
  castor_program *p = NULL;
  ck_assert_int_eq(castor_model_load_string(ctx, "m.cast", text, strlen(text), NULL, &m), CASTOR_OK);
  ck_assert_msg(castor_compile(m, NULL, &p) == CASTOR_OK, "%s", castor_context_last_error(ctx));
  castor_tensor_info info;
  ck_assert_int_eq(castor_program_output_info(p, 0, &info), CASTOR_OK);
  ck_assert_int_eq(info.dtype, CASTOR_F32); /* outputs are f32 whatever the policy */
  castor_program_destroy(p);
  castor_compile_options o;
  castor_compile_options_init(&o);
  o.keep_16bit_outputs = 1;
  ck_assert_int_eq(castor_compile(m, &o, &p), CASTOR_OK);
  ck_assert_int_eq(castor_program_output_info(p, 0, &info), CASTOR_OK);
  ck_assert_int_eq(info.dtype, CASTOR_F16);
  castor_program_destroy(p);
  o.keep_16bit_outputs = 0;
  o.fp32_ops = "matmul,dense";
  ck_assert_int_eq(castor_compile(m, &o, &p), CASTOR_ERR_INVALID_ARGUMENT);
  /* the list is every op autocast may force (passes/autocast.c's forceable), in
   * table order: its start, and ops of each kind of branch that adds them */
  const char *err = castor_context_last_error(ctx);
  ck_assert_msg(str_has_prefix(err, "error: --fp32-ops: unknown op 'dense' (ops: matmul, add, mul, relu, sigmoid, tanh, "),
                "%s", err);
  ck_assert_msg(strstr(err, ", conv2d,") && strstr(err, ", exp,") && strstr(err, ", xent,") && !strstr(err, " cast,"),
                "%s", err);
  ck_assert_msg(strlen(err) > 2 && !strcmp(err + strlen(err) - 2, ")\n"), "%s", err);
  o.fp32_ops = NULL;
  o.fp32_layers = "d,nope";
  ck_assert_int_eq(castor_compile(m, &o, &p), CASTOR_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(castor_context_last_error(ctx), "error: --fp32-layers: the model has no layer 'nope'\n");
  o.fp32_layers = "d";
  ck_assert_int_eq(castor_compile(m, &o, &p), CASTOR_OK);
  castor_program_destroy(p);
  o.fp32_layers = NULL;
  o.policy = "bfloat16";
  ck_assert_int_eq(castor_compile(m, &o, &p), CASTOR_OK);
  castor_program_destroy(p);
  castor_model_destroy(m);
}
END_TEST

/* The optimization level picks LLVM's pipeline (-O2: the kernels' own,
 * codegen/cpu/cg_target.c; -O1/-O3: LLVM's default<O1>/<O3>; -O0: none): a
 * choice of speed, never of results. A CNN with every kind of kernel a real
 * net has (a convolution's implicit GEMM with its epilogue, depthwise and
 * pooling loops, a shared body, layer norm, a GELU dense and a softmax),
 * under float32 and mixed_bfloat16, gives the unoptimized code's bits at
 * every level: a pass that reassociated or contracted floating point, or
 * flags that allowed it, would fail here. */
START_TEST(test_opt_levels_same_bits) {
  static const char *cnn =
      "model cnn\nx = input(shape=[12, 12, 8])\n"
      "c = conv2d(x, filters=16, kernel_size=3, padding=same, activation=relu, name=c1)\n"
      "c = conv2d(c, filters=16, kernel_size=3, padding=same, activation=relu, name=c2)\n"
      "c = conv2d(c, filters=16, kernel_size=3, padding=same, activation=relu, name=c3)\n"
      "d = depthwise_conv2d(c, kernel_size=3, name=dw)\n"
      "p = max_pooling2d(d, pool_size=2, name=pool)\n"
      "f = flatten(p, name=flat)\n"
      "h = dense(f, units=24, activation=gelu, name=d1)\n"
      "h = layer_normalization(h, name=ln)\n"
      "l = dense(h, units=10, name=d2)\n"
      "y = activation(l, softmax, dtype=float32, name=probs)\noutput y\n";
  castor_model *m = NULL;
  castor_status st = castor_model_load_string(ctx, "cnn.cast", cnn, strlen(cnn), NULL, &m);
  ck_assert_msg(st == CASTOR_OK, "load: %s", castor_context_last_error(ctx));
  enum { BATCH = 3, IN = 12 * 12 * 8, OUT = 10 };
  castor_tensor *in = tensor(CASTOR_F32, 4, (int64_t[]){BATCH, 12, 12, 8});
  float *x = castor_tensor_data(in);
  uint32_t seed = 12345;
  for (int i = 0; i < BATCH * IN; i++) {
    seed = seed * 1664525u + 1013904223u;
    x[i] = (float)(seed >> 8) / (float)(1u << 24) * 2.0f - 1.0f;
  }
  const char *policies[] = {"float32", "mixed_bfloat16"};
  for (int pi = 0; pi < 2; pi++) {
    float want[BATCH * OUT];
    for (int level = 0; level <= 3; level++) {
      castor_compile_options o;
      castor_compile_options_init(&o);
      o.policy = policies[pi];
      o.opt_level = level;
      castor_program *p = NULL;
      st = castor_compile(m, &o, &p);
      ck_assert_msg(st == CASTOR_OK, "%s -O%d: %s", policies[pi], level, castor_context_last_error(ctx));
      castor_tensor *out = NULL;
      st = castor_program_run(p, &in, 1, &out, 1);
      ck_assert_msg(st == CASTOR_OK, "%s -O%d: %s", policies[pi], level, castor_context_last_error(ctx));
      ck_assert_int_eq(castor_tensor_numel(out), BATCH * OUT);
      const float *y = castor_tensor_data(out);
      if (level == 0) {
        memcpy(want, y, sizeof want);
        double sum = 0;
        for (int i = 0; i < BATCH * OUT; i++) sum += want[i];
        ck_assert_msg(fabs(sum - BATCH) < 1e-3, "%s: softmax rows sum to %g, not %d", policies[pi], sum, BATCH);
      } else {
        for (int i = 0; i < BATCH * OUT; i++)
          ck_assert_msg(memcmp(&y[i], &want[i], sizeof *y) == 0, "%s: -O%d gives %.9g at %d, -O0 %.9g",
                        policies[pi], level, (double)y[i], i, (double)want[i]);
      }
      castor_tensor_destroy(out);
      castor_program_destroy(p);
    }
  }
  castor_tensor_destroy(in);
  castor_model_destroy(m);
}
END_TEST

int main(void) {
  Suite *s = suite_create("api");
  TCase *tc = tcase_create("api");
  tcase_set_timeout(tc, 120);
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, test_status_strings_and_version);
  tcase_add_test(tc, test_null_arguments);
  tcase_add_test(tc, test_load_errors);
  tcase_add_test(tc, test_status_from_diag_kind);
  tcase_add_test(tc, test_load_error_kinds);
  tcase_add_test(tc, test_compile_options);
  tcase_add_test(tc, test_threads_env);
  tcase_add_test(tc, test_info);
  tcase_add_test(tc, test_run_and_shape_errors);
  tcase_add_test(tc, test_tensor_create_errors);
  tcase_add_test(tc, test_empty_tensors);
  tcase_add_test(tc, test_npy_io);
  tcase_add_test(tc, test_npy_error_kinds);
  tcase_add_test(tc, test_policies_and_autocast_options);
  tcase_add_test(tc, test_tensor_wrap);
  tcase_add_test(tc, test_dump_text);
  tcase_add_test(tc, test_opt_levels_same_bits);
  suite_add_tcase(s, tc);
  return check_run(s);
}
