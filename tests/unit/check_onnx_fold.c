/*
 * check_onnx_fold.c: Check suite of the ONNX importer's compile-time
 * shapes (frontend/onnx): symbolic dimensions bound at load
 * (castor_load_options batch and dim_names, the CLI's --batch and --dim),
 * Reshape's -1 next to the symbolic batch, and the constant evaluator
 * (onnx_fold.c) over the shape subgraphs exporters write. Models are built
 * here (onnx_builder.h); each test runs the compiled program against a
 * hand computation, or checks its one exact error.
 */
#include "castor.h"

#include "tests/unit/onnx_builder.h"
#include "tests/unit/test_support.h"

#include <math.h>
#include <string.h>

static void setup(void) { ob_arena = arena_create(); }
static void teardown(void) { arena_destroy(ob_arena); }

typedef struct loaded {
  castor_context *ctx;
  castor_model *m;
  castor_status st;
} loaded;

static loaded load(ob_model *mb, int64_t batch, int n_dims, const char *const *names, const int64_t *values) {
  size_t len;
  char *b = ob_pack(mb, &len);
  loaded l = {0};
  castor_context_create(&l.ctx);
  castor_load_options o;
  castor_load_options_init(&o);
  o.batch = batch, o.n_dims = n_dims, o.dim_names = names, o.dim_values = values;
  l.st = castor_model_load_string(l.ctx, "m.onnx", b, len, &o, &l.m);
  return l;
}

static void expect_load_error(ob_model *mb, int64_t batch, int n_dims, const char *const *names,
                              const int64_t *values, castor_status want_st, const char *want) {
  loaded l = load(mb, batch, n_dims, names, values);
  ck_assert_ptr_null(l.m);
  ck_assert_msg(l.st == want_st, "status %s, want %s: %s", castor_status_string(l.st), castor_status_string(want_st),
                castor_context_last_error(l.ctx));
  ck_assert_str_eq(castor_context_last_error(l.ctx), want);
  castor_context_destroy(l.ctx);
}

/* Compiles l's model (float32) and runs it on x [rank, dims] = 0, 1, 2, ...;
 * returns output 0 (the caller destroys it) and its info in *info. */
static castor_tensor *run_iota(loaded *l, int rank, const int64_t *dims, castor_tensor_info *info) {
  ck_assert_msg(l->st == CASTOR_OK, "load: %s", castor_context_last_error(l->ctx));
  castor_program *p;
  ck_assert_msg(castor_compile(l->m, NULL, &p) == CASTOR_OK, "compile: %s", castor_context_last_error(l->ctx));
  castor_program_output_info(p, 0, info);
  castor_tensor *x, *y = NULL;
  ck_assert_int_eq(castor_tensor_create(l->ctx, CASTOR_F32, rank, dims, &x), CASTOR_OK);
  float *xv = castor_tensor_data(x);
  for (int64_t i = 0; i < castor_tensor_numel(x); i++) xv[i] = (float)i;
  ck_assert_msg(castor_program_run(p, &x, 1, &y, 1) == CASTOR_OK, "run: %s", castor_context_last_error(l->ctx));
  castor_tensor_destroy(x);
  castor_program_destroy(p);
  return y;
}

static void unload(loaded *l) {
  castor_model_destroy(l->m);
  castor_context_destroy(l->ctx);
}

/* x [batch, sequence, 4] -> Reshape(x, [-1, 4]) -> Relu: the -1 folds the
 * batch and the sequence together, so both must be bound. */
static ob_model *seq_model(void) {
  ob_model *mb = ob_model_new(17);
  mb->ins[mb->g.n_input++] = ob_value("x", ONNX_FLOAT, 3, (int64_t[]){0, 0, 4}, (const char *[]){"batch", "sequence", NULL});
  mb->outs[mb->g.n_output++] = ob_value("y", ONNX_FLOAT, 2, (int64_t[]){0, 4}, (const char *[]){"rows", NULL});
  ob_init_i64(mb, "shape", 1, 2, (int64_t[]){-1, 4});
  ob_node(mb, "Reshape", "/Reshape", (const char *[]){"x", "shape"}, 2, "r", NULL, NULL);
  ob_node(mb, "Relu", "/Relu", (const char *[]){"r"}, 1, "y", NULL, NULL);
  return mb;
}

START_TEST(test_dim_bound_at_load) {
  loaded l = load(seq_model(), 2, 1, (const char *[]){"sequence"}, (int64_t[]){3});
  castor_tensor_info info;
  castor_tensor *y = run_iota(&l, 3, (int64_t[]){2, 3, 4}, &info);
  ck_assert_int_eq(info.rank, 2);
  ck_assert_int_eq(info.dims[0], 6); /* static: batch 2 x sequence 3 */
  ck_assert_int_eq(info.dims[1], 4);
  const float *yv = castor_tensor_data(y);
  for (int i = 0; i < 24; i++) ck_assert_msg(yv[i] == (float)i, "y[%d] = %g", i, yv[i]);
  castor_tensor_destroy(y);
  unload(&l);
  /* a --dim naming the batch's dim_param binds it as well */
  l = load(seq_model(), 0, 2, (const char *[]){"sequence", "batch"}, (int64_t[]){5, 1});
  y = run_iota(&l, 3, (int64_t[]){1, 5, 4}, &info);
  ck_assert_int_eq(info.dims[0], 5);
  castor_tensor_destroy(y);
  unload(&l);
}
END_TEST

START_TEST(test_dim_errors) {
  expect_load_error(seq_model(), 2, 0, NULL, NULL, CASTOR_ERR_UNSUPPORTED,
                    "m.onnx: error: dimension 1 of graph input 'x' is symbolic ('sequence'); castor compiles one "
                    "shape per model except the first (batch) dimension: bind it with --dim sequence=VALUE\n");
  expect_load_error(seq_model(), 2, 1, (const char *[]){"seq"}, (int64_t[]){3}, CASTOR_ERR_INVALID_ARGUMENT,
                    "m.onnx: error: --dim seq: no graph input has a dimension named 'seq' (the model's named "
                    "dimensions: 'batch', 'sequence')\n");
  expect_load_error(seq_model(), 0, 1, (const char *[]){"sequence"}, (int64_t[]){0}, CASTOR_ERR_INVALID_ARGUMENT,
                    "error: castor_load_options: dimension 'sequence' must be bound to 1..2^40, got 0\n");
  expect_load_error(seq_model(), 0, 2, (const char *[]){"sequence", "sequence"}, (int64_t[]){3, 4},
                    CASTOR_ERR_INVALID_ARGUMENT, "error: castor_load_options: dimension 'sequence' is bound twice\n");
  expect_load_error(seq_model(), -1, 0, NULL, NULL, CASTOR_ERR_INVALID_ARGUMENT,
                    "error: castor_load_options: batch must be >= 1 (0: the batch N stays symbolic), got -1\n");
  /* the batch left symbolic: the -1 would take N and the sequence, and the
   * advice (--batch) is one that works (test_dim_bound_at_load) */
  expect_load_error(seq_model(), 0, 1, (const char *[]){"sequence"}, (int64_t[]){3}, CASTOR_ERR_UNSUPPORTED,
                    "m.onnx: node '/Reshape' (Reshape): error: Reshape with -1 of an input with the batch N (the -1 "
                    "would absorb N and other dimensions): only the batch is symbolic and it stays dimension 0; "
                    "compile with --batch B\n");
}
END_TEST

/* dynamo's flatten: Reshape(x, [-1, C]) of x [N, C, 1, 1] keeps N symbolic. */
START_TEST(test_reshape_minus_one_is_batch) {
  ob_model *mb = ob_model_new(18);
  mb->ins[mb->g.n_input++] = ob_value("x", ONNX_FLOAT, 4, (int64_t[]){0, 3, 1, 1}, (const char *[]){"s0", NULL, NULL, NULL});
  mb->outs[mb->g.n_output++] = ob_value("y", ONNX_FLOAT, 2, (int64_t[]){0, 3}, (const char *[]){"s0", NULL});
  ob_init_i64(mb, "shape", 1, 2, (int64_t[]){-1, 3});
  ob_node(mb, "Reshape", "/view", (const char *[]){"x", "shape"}, 2, "r", NULL, NULL);
  ob_node(mb, "Relu", "/relu", (const char *[]){"r"}, 1, "y", NULL, NULL);
  loaded l = load(mb, 0, 0, NULL, NULL);
  castor_tensor_info info;
  castor_tensor *y = run_iota(&l, 4, (int64_t[]){2, 3, 1, 1}, &info);
  ck_assert_int_eq(info.dims[0], -1); /* N stays symbolic */
  ck_assert_int_eq(info.dims[1], 3);
  const float *yv = castor_tensor_data(y);
  ck_assert_int_eq(castor_tensor_dims(y)[0], 2);
  for (int i = 0; i < 6; i++) ck_assert_msg(yv[i] == (float)i, "y[%d] = %g", i, yv[i]);
  castor_tensor_destroy(y);
  unload(&l);
}
END_TEST

static Suite *onnx_fold_suite(void) {
  Suite *s = suite_create("onnx_fold");
  TCase *tc = tcase_create("dims");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_dim_bound_at_load);
  tcase_add_test(tc, test_dim_errors);
  tcase_add_test(tc, test_reshape_minus_one_is_batch);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) { return check_run(onnx_fold_suite()); }
