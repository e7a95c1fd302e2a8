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
#include <stdio.h>
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

/* Output 0's declared rank and dims (-1: the batch N), copied out of the program. */
typedef struct out_info {
  int rank;
  int64_t dims[8];
} out_info;

/* Compiles l's model (float32) and runs it on x [rank, dims] = 0, 1, 2, ...;
 * returns output 0 (the caller destroys it) and its declared shape in *info. */
static castor_tensor *run_iota(loaded *l, int rank, const int64_t *dims, out_info *info) {
  ck_assert_msg(l->st == CASTOR_OK, "load: %s", castor_context_last_error(l->ctx));
  castor_program *p;
  ck_assert_msg(castor_compile(l->m, NULL, &p) == CASTOR_OK, "compile: %s", castor_context_last_error(l->ctx));
  castor_tensor_info ti;
  castor_program_output_info(p, 0, &ti);
  info->rank = ti.rank;
  for (int r = 0; r < ti.rank && r < 8; r++) info->dims[r] = ti.dims[r];
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
  out_info info;
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
  out_info info;
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

/* A shape subgraph as exporters write them, every node of it folded:
 * a causal mask from Shape, Gather, Range, Unsqueeze, Greater and Where,
 * and a vector from ConstantOfShape, CumSum, Mod, Equal, Not, Less, And,
 * ScatterND, GatherElements, IsNaN, Cast. y = x + mask + f where
 * mask[i][j] = j > i ? -1e4 : 0 and f = [10, 0, 2, 0]. */
static ob_model *eval_model(void) {
  ob_model *mb = ob_model_new(17);
  mb->ins[mb->g.n_input++] = ob_value("x", ONNX_FLOAT, 3, (int64_t[]){0, 4, 4}, (const char *[]){"N", NULL, NULL});
  mb->outs[mb->g.n_output++] = ob_value("y", ONNX_FLOAT, 3, (int64_t[]){0, 4, 4}, (const char *[]){"N", NULL, NULL});
  ob_init_i64(mb, "one", 0, 1, (int64_t[]){1});
  ob_init_i64(mb, "zero", 0, 1, (int64_t[]){0});
  ob_init_i64(mb, "two", 0, 1, (int64_t[]){2});
  ob_init_i64(mb, "three", 0, 1, (int64_t[]){3});
  ob_init_i64(mb, "ax0", 1, 1, (int64_t[]){0});
  ob_init_i64(mb, "ax1", 1, 1, (int64_t[]){1});
  mb->inits[mb->g.n_initializer++] = ob_tensor("sidx", ONNX_INT64, 2, (int64_t[]){1, 1}, (int64_t[]){3}, 8);
  ob_init_i64(mb, "supd", 1, 1, (int64_t[]){10});
  ob_init_i64(mb, "perm", 1, 4, (int64_t[]){3, 0, 1, 2});
  float neg = -1e4f, zf = 0;
  mb->inits[mb->g.n_initializer++] = ob_tensor("neg", ONNX_FLOAT, 0, NULL, &neg, sizeof neg);
  mb->inits[mb->g.n_initializer++] = ob_tensor("zf", ONNX_FLOAT, 0, NULL, &zf, sizeof zf);
  ob_node(mb, "Shape", "/shape", (const char *[]){"x"}, 1, "s", NULL, NULL);
  ob_node(mb, "Gather", "/t", (const char *[]){"s", "one"}, 2, "t", ob_attr_int("axis", 0), NULL);
  ob_node(mb, "Range", "/range", (const char *[]){"zero", "t", "one"}, 3, "r", NULL, NULL);
  ob_node(mb, "Unsqueeze", "/row", (const char *[]){"r", "ax0"}, 2, "a", NULL, NULL);
  ob_node(mb, "Unsqueeze", "/col", (const char *[]){"r", "ax1"}, 2, "b", NULL, NULL);
  ob_node(mb, "Greater", "/gt", (const char *[]){"a", "b"}, 2, "m", NULL, NULL);
  ob_node(mb, "Where", "/mask", (const char *[]){"m", "neg", "zf"}, 3, "mask", NULL, NULL);
  ob_node(mb, "Unsqueeze", "/t1", (const char *[]){"t", "ax0"}, 2, "t1", NULL, NULL);
  ob_node(mb, "ConstantOfShape", "/ones", (const char *[]){"t1"}, 1, "c", ob_attr_tensor("value", ob_tensor("v", ONNX_INT64, 1, (int64_t[]){1}, (int64_t[]){1}, 8)), NULL);
  ob_node(mb, "CumSum", "/cumsum", (const char *[]){"c", "zero"}, 2, "cs", NULL, NULL);
  ob_node(mb, "Mod", "/mod", (const char *[]){"cs", "two"}, 2, "md", NULL, NULL);
  ob_node(mb, "Equal", "/eq", (const char *[]){"md", "zero"}, 2, "eq", NULL, NULL);
  ob_node(mb, "Not", "/not", (const char *[]){"eq"}, 1, "nt", NULL, NULL);
  ob_node(mb, "Less", "/lt", (const char *[]){"r", "three"}, 2, "lt", NULL, NULL);
  ob_node(mb, "And", "/and", (const char *[]){"nt", "lt"}, 2, "an", NULL, NULL);
  ob_node(mb, "ScatterND", "/scatter", (const char *[]){"cs", "sidx", "supd"}, 3, "sc", NULL, NULL);
  ob_node(mb, "GatherElements", "/ge", (const char *[]){"sc", "perm"}, 2, "ge", ob_attr_int("axis", 0), NULL);
  ob_node(mb, "Where", "/sel", (const char *[]){"an", "ge", "zero"}, 3, "wv", NULL, NULL);
  ob_node(mb, "Cast", "/cast", (const char *[]){"wv"}, 1, "f", ob_attr_int("to", ONNX_FLOAT), NULL);
  ob_node(mb, "IsNaN", "/isnan", (const char *[]){"f"}, 1, "nan", NULL, NULL);
  ob_node(mb, "Where", "/clean", (const char *[]){"nan", "zf", "f"}, 3, "f2", NULL, NULL);
  ob_node(mb, "Add", "/add_mask", (const char *[]){"x", "mask"}, 2, "xm", NULL, NULL);
  ob_node(mb, "Add", "/add_f", (const char *[]){"xm", "f2"}, 2, "y", NULL, NULL);
  return mb;
}

START_TEST(test_eval_shape_subgraph) {
  static const float f[4] = {10, 0, 2, 0};
  for (int64_t batch = 0; batch <= 2; batch += 2) { /* N symbolic, then bound */
    loaded l = load(eval_model(), batch, 0, NULL, NULL);
    out_info info;
    castor_tensor *y = run_iota(&l, 3, (int64_t[]){2, 4, 4}, &info);
    ck_assert_int_eq(info.dims[0], batch ? 2 : -1);
    const float *yv = castor_tensor_data(y);
    for (int n = 0; n < 2; n++)
      for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++) {
          int e = (n * 4 + i) * 4 + j;
          float want = (float)e + (j > i ? -1e4f : 0) + f[j];
          ck_assert_msg(yv[e] == want, "batch %d: y[%d][%d][%d] = %g, want %g", (int)batch, n, i, j, yv[e], want);
        }
    castor_tensor_destroy(y);
    /* nothing of the subgraph is left to run: x, two adds, their constants */
    castor_model_destroy(l.m);
    castor_context_destroy(l.ctx);
  }
}
END_TEST

/* Errors of the evaluator are located at the node: an index out of range,
 * arithmetic on the symbolic batch (with the advice that works). */
START_TEST(test_eval_errors) {
  ob_model *mb = eval_model();
  mb->inits[0]->raw_data.data[0] = 7; /* "one" = 7: Gather(Shape(x), 7) */
  expect_load_error(mb, 0, 0, NULL, NULL, CASTOR_ERR_PARSE,
                    "m.onnx: node '/t' (Gather): error: Gather index 7 is out of range for a dimension of 3\n");
  mb = eval_model();
  mb->inits[0]->raw_data.data[0] = 0; /* Gather(Shape(x), 0) is N: Range to N */
  expect_load_error(mb, 0, 0, NULL, NULL, CASTOR_ERR_UNSUPPORTED,
                    "m.onnx: node '/range' (Range): error: Range computes with the batch dimension N (a shape "
                    "computation): castor keeps N symbolic only where it is moved, not computed with; compile with "
                    "--batch B\n"
                    "m.onnx: node '/ones' (ConstantOfShape): error: ConstantOfShape of a shape with the batch "
                    "dimension N: compile with --batch B\n");
}
END_TEST

/* A model castor cannot compile: every distinct refusal in one run (each
 * op once, at its first node, with a note counting the others), nothing
 * about the nodes that only use a refused value, status UNSUPPORTED. */
START_TEST(test_all_refusals_at_once) {
  ob_model *mb = ob_model_new(17);
  mb->ins[mb->g.n_input++] = ob_value("x", ONNX_FLOAT, 2, (int64_t[]){0, 4}, (const char *[]){"N", NULL});
  mb->outs[mb->g.n_output++] = ob_value("y", ONNX_FLOAT, 2, (int64_t[]){0, 4}, (const char *[]){"N", NULL});
  ob_node(mb, "Frobnicate", "/f1", (const char *[]){"x"}, 1, "a", NULL, NULL);
  ob_node(mb, "Relu", "/uses_a", (const char *[]){"a"}, 1, "a2", NULL, NULL);
  ob_node(mb, "Frobnicate", "/f2", (const char *[]){"x"}, 1, "b", NULL, NULL);
  ob_node(mb, "Frobnicate", "/f3", (const char *[]){"x"}, 1, "c", NULL, NULL);
  ob_node(mb, "Softmax", "/sm", (const char *[]){"x"}, 1, "d", ob_attr_int("bogus", 1), NULL);
  ob_node(mb, "Twiddle", "/t", (const char *[]){"x"}, 1, "e", NULL, NULL);
  ob_node(mb, "Sum", "/sum", (const char *[]){"a2", "b", "c", "d", "e"}, 5, "y", NULL, NULL);
  expect_load_error(mb, 0, 0, NULL, NULL, CASTOR_ERR_UNSUPPORTED,
                    "m.onnx: node '/f1' (Frobnicate): error: castor does not support the ONNX op Frobnicate (opset "
                    "17); docs/onnx.md lists the ops it does\n"
                    "m.onnx: node '/sm' (Softmax): error: attribute 'bogus' of Softmax is not supported by castor "
                    "(it reads: axis)\n"
                    "m.onnx: node '/t' (Twiddle): error: castor does not support the ONNX op Twiddle (opset 17); "
                    "docs/onnx.md lists the ops it does\n"
                    "m.onnx: node '/f1' (Frobnicate): note: 2 more nodes of the model fail the same way\n");
}
END_TEST

/* Runs l's model (float32) on inputs xs[i] (f32, dims per input); output 0. */
static castor_tensor *run_inputs(loaded *l, int n, const int *ranks, const int64_t (*dims)[4], const float *const *xs) {
  ck_assert_msg(l->st == CASTOR_OK, "load: %s", castor_context_last_error(l->ctx));
  castor_program *p;
  ck_assert_msg(castor_compile(l->m, NULL, &p) == CASTOR_OK, "compile: %s", castor_context_last_error(l->ctx));
  castor_tensor *in[8], *y = NULL;
  for (int i = 0; i < n; i++) {
    ck_assert_int_eq(castor_tensor_create(l->ctx, CASTOR_F32, ranks[i], dims[i], &in[i]), CASTOR_OK);
    memcpy(castor_tensor_data(in[i]), xs[i], castor_tensor_nbytes(in[i]));
  }
  ck_assert_msg(castor_program_run(p, in, n, &y, 1) == CASTOR_OK, "run: %s", castor_context_last_error(l->ctx));
  for (int i = 0; i < n; i++) castor_tensor_destroy(in[i]);
  castor_program_destroy(p);
  return y;
}

/* Weights as graph inputs are operands like any other: Gemm's A (transA),
 * B and a matrix C, Clip's min and max, BatchNormalization's four
 * statistics, all run-time values; checked against a float64 computation. */
START_TEST(test_runtime_operands) {
  static const float A[3][2] = {{1, -2}, {0.5f, 3}, {-1, 4}}; /* A^T is [2, 3] */
  static const float B[4][3] = {{1, 0, -1}, {2, 1, 0.5f}, {0, -3, 1}, {0.25f, 2, -2}}; /* B^T is [3, 4] */
  static const float C[2][4] = {{1, 2, 3, 4}, {-1, -2, -3, -4}};
  ob_model *mb = ob_model_new(13);
  mb->ins[mb->g.n_input++] = ob_value("a", ONNX_FLOAT, 2, (int64_t[]){3, 2}, NULL);
  mb->ins[mb->g.n_input++] = ob_value("b", ONNX_FLOAT, 2, (int64_t[]){4, 3}, NULL);
  mb->ins[mb->g.n_input++] = ob_value("c", ONNX_FLOAT, 2, (int64_t[]){2, 4}, NULL);
  mb->ins[mb->g.n_input++] = ob_value("lo", ONNX_FLOAT, 0, NULL, NULL);
  mb->outs[mb->g.n_output++] = ob_value("y", ONNX_FLOAT, 2, (int64_t[]){2, 4}, NULL);
  Onnx__AttributeProto *alpha = ob_attr_int("transA", 1);
  Onnx__NodeProto *g = ob_node(mb, "Gemm", "/gemm", (const char *[]){"a", "b", "c"}, 3, "g", alpha, ob_attr_int("transB", 1));
  Onnx__AttributeProto *al = arena_alloc(ob_arena, sizeof *al);
  onnx__attribute_proto__init(al);
  al->name = ob_str("alpha"), al->has_type = 1, al->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT, al->has_f = 1, al->f = 0.5f;
  g->attribute[g->n_attribute++] = al;
  ob_node(mb, "Clip", "/clip", (const char *[]){"g", "lo"}, 2, "y", NULL, NULL);
  loaded l = load(mb, 0, 0, NULL, NULL);
  float lo = -1.5f;
  castor_tensor *y = run_inputs(&l, 4, (const int[]){2, 2, 2, 0},
                                (const int64_t[][4]){{3, 2}, {4, 3}, {2, 4}, {0}},
                                (const float *const[]){&A[0][0], &B[0][0], &C[0][0], &lo});
  const float *yv = castor_tensor_data(y);
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < 4; j++) {
      double acc = 0;
      for (int k = 0; k < 3; k++) acc += (double)A[k][i] * B[j][k];
      double want = fmax(0.5 * acc + C[i][j], lo);
      ck_assert_msg(fabs(yv[i * 4 + j] - want) < 1e-5, "y[%d][%d] = %g, want %g", i, j, yv[i * 4 + j], want);
    }
  castor_tensor_destroy(y);
  unload(&l);
  /* BatchNormalization with its statistics as inputs: x [1, 2, 1, 2] */
  mb = ob_model_new(15);
  mb->ins[mb->g.n_input++] = ob_value("x", ONNX_FLOAT, 4, (int64_t[]){1, 2, 1, 2}, NULL);
  const char *names[4] = {"scale", "bias", "mean", "var"};
  for (int i = 0; i < 4; i++) mb->ins[mb->g.n_input++] = ob_value(names[i], ONNX_FLOAT, 1, (int64_t[]){2}, NULL);
  mb->outs[mb->g.n_output++] = ob_value("y", ONNX_FLOAT, 4, (int64_t[]){1, 2, 1, 2}, NULL);
  ob_node(mb, "BatchNormalization", "/bn", (const char *[]){"x", "scale", "bias", "mean", "var"}, 5, "y", NULL, NULL);
  l = load(mb, 0, 0, NULL, NULL);
  static const float x[4] = {1, 2, 3, 4}, sc[2] = {2, 0.5f}, bi[2] = {0.1f, -0.1f}, mu[2] = {1, 3}, var[2] = {4, 0.25f};
  y = run_inputs(&l, 5, (const int[]){4, 1, 1, 1, 1}, (const int64_t[][4]){{1, 2, 1, 2}, {2}, {2}, {2}, {2}},
                 (const float *const[]){x, sc, bi, mu, var});
  yv = castor_tensor_data(y);
  for (int c = 0; c < 2; c++)
    for (int w = 0; w < 2; w++) {
      double want = (x[c * 2 + w] - mu[c]) / sqrt(var[c] + 1e-5) * sc[c] + bi[c];
      ck_assert_msg(fabs(yv[c * 2 + w] - want) < 1e-5, "bn y[%d][%d] = %g, want %g", c, w, yv[c * 2 + w], want);
    }
  castor_tensor_destroy(y);
  unload(&l);
}
END_TEST

/* Concat of more inputs than an IR node has sources (DenseNet's 25). */
START_TEST(test_concat_any_arity) {
  enum { K = 25 };
  ob_model *mb = ob_model_new(17);
  mb->ins[mb->g.n_input++] = ob_value("x", ONNX_FLOAT, 2, (int64_t[]){0, 2}, (const char *[]){"N", NULL});
  mb->outs[mb->g.n_output++] = ob_value("y", ONNX_FLOAT, 2, (int64_t[]){0, 2 * K}, (const char *[]){"N", NULL});
  const char *ins[K];
  for (int i = 0; i < K; i++) {
    char name[16];
    snprintf(name, sizeof name, "s%d", i);
    ins[i] = ob_str(name);
    float f = (float)i;
    mb->inits[mb->g.n_initializer++] = ob_tensor(arena_printf(ob_arena, "k%d", i), ONNX_FLOAT, 0, NULL, &f, sizeof f);
    ob_node(mb, "Add", arena_printf(ob_arena, "/add%d", i), (const char *[]){"x", arena_printf(ob_arena, "k%d", i)}, 2, name, NULL, NULL);
  }
  ob_node(mb, "Concat", "/cat", ins, K, "y", ob_attr_int("axis", 1), NULL);
  loaded l = load(mb, 0, 0, NULL, NULL);
  out_info info;
  castor_tensor *y = run_iota(&l, 2, (int64_t[]){3, 2}, &info);
  ck_assert_int_eq(info.dims[1], 2 * K);
  const float *yv = castor_tensor_data(y);
  for (int n = 0; n < 3; n++)
    for (int i = 0; i < K; i++)
      for (int j = 0; j < 2; j++) {
        float want = (float)(n * 2 + j + i);
        ck_assert_msg(yv[n * 2 * K + i * 2 + j] == want, "y[%d][%d] = %g, want %g", n, i * 2 + j, yv[n * 2 * K + i * 2 + j], want);
      }
  castor_tensor_destroy(y);
  unload(&l);
}
END_TEST

static Onnx__AttributeProto *attr_str(const char *name, const char *v) {
  Onnx__AttributeProto *a = arena_alloc(ob_arena, sizeof *a);
  onnx__attribute_proto__init(a);
  a->name = ob_str(name), a->has_type = 1, a->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING;
  a->has_s = 1, a->s.data = (uint8_t *)ob_str(v), a->s.len = strlen(v);
  return a;
}

/* Einsum as a batched contraction: attention's "bhid,bhjd->bhij" and a
 * contraction whose output is transposed ("bij,bjk->kbi"), against float64. */
START_TEST(test_einsum) {
  static const struct { const char *eq; int64_t a[4], b[4], o[4]; int ra, rb; } cases[] = {
      {"bhid,bhjd->bhij", {2, 2, 3, 4}, {2, 2, 5, 4}, {2, 2, 3, 5}, 4, 4},
      {"bij,bjk->kbi", {2, 3, 4}, {2, 4, 5}, {5, 2, 3}, 3, 3},
      {"ij,jk->ik", {3, 4}, {4, 2}, {3, 2}, 2, 2},
  };
  for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
    ob_model *mb = ob_model_new(13);
    int ro = cases[c].ra == 4 ? 4 : cases[c].ra == 3 ? 3 : 2;
    mb->ins[mb->g.n_input++] = ob_value("a", ONNX_FLOAT, cases[c].ra, cases[c].a, NULL);
    mb->ins[mb->g.n_input++] = ob_value("b", ONNX_FLOAT, cases[c].rb, cases[c].b, NULL);
    mb->outs[mb->g.n_output++] = ob_value("y", ONNX_FLOAT, ro, cases[c].o, NULL);
    ob_node(mb, "Einsum", "/einsum", (const char *[]){"a", "b"}, 2, "y", attr_str("equation", cases[c].eq), NULL);
    loaded l = load(mb, 0, 0, NULL, NULL);
    int64_t na = 1, nb = 1;
    for (int r = 0; r < cases[c].ra; r++) na *= cases[c].a[r];
    for (int r = 0; r < cases[c].rb; r++) nb *= cases[c].b[r];
    float *av = arena_alloc(ob_arena, (size_t)na * sizeof *av), *bv = arena_alloc(ob_arena, (size_t)nb * sizeof *bv);
    for (int64_t i = 0; i < na; i++) av[i] = (float)((i * 7) % 11) / 4 - 1;
    for (int64_t i = 0; i < nb; i++) bv[i] = (float)((i * 5) % 13) / 6 - 1;
    int64_t (*dims)[4] = arena_alloc(ob_arena, 2 * sizeof *dims);
    memcpy(dims[0], cases[c].a, sizeof dims[0]), memcpy(dims[1], cases[c].b, sizeof dims[1]);
    castor_tensor *y = run_inputs(&l, 2, (const int[]){cases[c].ra, cases[c].rb}, (const int64_t(*)[4])dims,
                                  (const float *const[]){av, bv});
    const float *yv = castor_tensor_data(y);
    const int64_t *A = cases[c].a, *B = cases[c].b;
    for (int64_t e = 0; e < castor_tensor_numel(y); e++) {
      double want = 0;
      if (c == 0) { /* y[b,h,i,j] = sum_d a[b,h,i,d] b[b,h,j,d] */
        int64_t j = e % B[2], i = e / B[2] % A[2], bh = e / (B[2] * A[2]);
        for (int64_t d = 0; d < A[3]; d++) want += (double)av[(bh * A[2] + i) * A[3] + d] * bv[(bh * B[2] + j) * B[3] + d];
      } else if (c == 1) { /* y[k,b,i] = sum_j a[b,i,j] b[b,j,k] */
        int64_t i = e % A[1], bb = e / A[1] % A[0], k = e / (A[1] * A[0]);
        for (int64_t j = 0; j < A[2]; j++) want += (double)av[(bb * A[1] + i) * A[2] + j] * bv[(bb * B[1] + j) * B[2] + k];
      } else { /* y[i,k] = sum_j a[i,j] b[j,k] */
        int64_t k = e % B[1], i = e / B[1];
        for (int64_t j = 0; j < A[1]; j++) want += (double)av[i * A[1] + j] * bv[j * B[1] + k];
      }
      ck_assert_msg(fabs(yv[e] - want) < 1e-5, "%s: y[%lld] = %g, want %g", cases[c].eq, (long long)e, yv[e], want);
    }
    castor_tensor_destroy(y);
    unload(&l);
  }
  ob_model *mb = ob_model_new(13);
  mb->ins[mb->g.n_input++] = ob_value("a", ONNX_FLOAT, 2, (int64_t[]){3, 3}, NULL);
  mb->outs[mb->g.n_output++] = ob_value("y", ONNX_FLOAT, 1, (int64_t[]){3}, NULL);
  ob_node(mb, "Einsum", "/diag", (const char *[]){"a", "a"}, 2, "y", attr_str("equation", "ii,ij->i"), NULL);
  expect_load_error(mb, 0, 0, NULL, NULL, CASTOR_ERR_UNSUPPORTED,
                    "m.onnx: node '/diag' (Einsum): error: Einsum with a repeated index 'i' in one term (a diagonal)\n");
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
  tcase_add_test(tc, test_eval_shape_subgraph);
  tcase_add_test(tc, test_eval_errors);
  tcase_add_test(tc, test_all_refusals_at_once);
  tcase_add_test(tc, test_runtime_operands);
  tcase_add_test(tc, test_concat_any_arity);
  tcase_add_test(tc, test_einsum);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) { return check_run(onnx_fold_suite()); }
