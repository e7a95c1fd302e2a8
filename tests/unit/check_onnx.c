/* SPDX-License-Identifier: Apache-2.0 */
/*
 * check_onnx.c: Check suite of the ONNX frontend (formats/onnx_read.c,
 * frontend/onnx). Models are built here with protobuf-c's generated
 * structures and packed to bytes, so each test states exactly the file it
 * feeds: a small MLP that runs and matches a hand computation, external
 * data read beside the model, and for each kind of bad file (truncated
 * protobuf, a field of the wrong wire type, huge dimensions, external data
 * outside the model's directory, a cycle, an unknown domain, an unsupported
 * op, dtype or attribute) its one exact error.
 */
#include "castor.h"
#include "formats/onnx.h"
#include "formats/onnx.pb-c.h"
#include "frontend/frontend.h"

#include "tests/unit/test_support.h"
#include "tests/unit/tmpdir_fixture.h"

#include <math.h>
#include <string.h>
#include <unistd.h>

/* ---- a tiny model builder: everything in one arena ---- */

static arena *A;

static char *S(const char *s) { return arena_strdup(A, s); }

static Onnx__ValueInfoProto *vi(const char *name, int elem, int rank, const int64_t *dims,
                                const char *param0) {
  Onnx__TensorShapeProto *sh = arena_alloc(A, sizeof *sh);
  onnx__tensor_shape_proto__init(sh);
  sh->n_dim = (size_t)rank;
  sh->dim = arena_alloc(A, (size_t)(rank + 1) * sizeof *sh->dim);
  for (int r = 0; r < rank; r++) {
    Onnx__TensorShapeProto__Dimension *d = arena_alloc(A, sizeof *d);
    onnx__tensor_shape_proto__dimension__init(d);
    if (r == 0 && param0) {
      d->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
      d->dim_param = S(param0);
    } else {
      d->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
      d->dim_value = dims[r];
    }
    sh->dim[r] = d;
  }
  Onnx__TypeProto__Tensor *tt = arena_alloc(A, sizeof *tt);
  onnx__type_proto__tensor__init(tt);
  tt->has_elem_type = 1, tt->elem_type = elem, tt->shape = sh;
  Onnx__TypeProto *tp = arena_alloc(A, sizeof *tp);
  onnx__type_proto__init(tp);
  tp->value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE, tp->tensor_type = tt;
  Onnx__ValueInfoProto *v = arena_alloc(A, sizeof *v);
  onnx__value_info_proto__init(v);
  v->name = S(name), v->type = tp;
  return v;
}

static Onnx__TensorProto *tensor(const char *name, int dtype, int rank, const int64_t *dims,
                                 const void *raw, size_t nbytes) {
  Onnx__TensorProto *t = arena_alloc(A, sizeof *t);
  onnx__tensor_proto__init(t);
  t->name = S(name), t->has_data_type = 1, t->data_type = dtype;
  t->n_dims = (size_t)rank;
  t->dims = arena_alloc(A, (size_t)(rank + 1) * sizeof *t->dims);
  for (int r = 0; r < rank; r++) t->dims[r] = dims[r];
  if (raw) {
    t->has_raw_data = 1;
    t->raw_data.len = nbytes;
    t->raw_data.data = arena_alloc(A, nbytes + 1);
    memcpy(t->raw_data.data, raw, nbytes);
  }
  return t;
}

static Onnx__AttributeProto *attr_int(const char *name, int64_t v) {
  Onnx__AttributeProto *a = arena_alloc(A, sizeof *a);
  onnx__attribute_proto__init(a);
  a->name = S(name), a->has_type = 1, a->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT;
  a->has_i = 1, a->i = v;
  return a;
}

/* A node "OP(in0, in1, ...) -> out" with up to 4 attributes (NULL-ended). */
static Onnx__NodeProto *node(const char *op, const char *name, const char *domain,
                             const char *const *ins, int n_in, const char *out,
                             Onnx__AttributeProto *a0, Onnx__AttributeProto *a1) {
  Onnx__NodeProto *n = arena_alloc(A, sizeof *n);
  onnx__node_proto__init(n);
  n->op_type = S(op), n->name = S(name);
  if (domain) n->domain = S(domain);
  n->n_input = (size_t)n_in;
  n->input = arena_alloc(A, (size_t)(n_in + 1) * sizeof *n->input);
  for (int i = 0; i < n_in; i++) n->input[i] = S(ins[i]);
  n->n_output = 1;
  n->output = arena_alloc(A, sizeof *n->output);
  n->output[0] = S(out);
  n->attribute = arena_alloc(A, 3 * sizeof *n->attribute);
  if (a0) n->attribute[n->n_attribute++] = a0;
  if (a1) n->attribute[n->n_attribute++] = a1;
  return n;
}

typedef struct model {
  Onnx__ModelProto m;
  Onnx__GraphProto g;
  Onnx__OperatorSetIdProto *opsets[2];
  Onnx__NodeProto *nodes[8];
  Onnx__TensorProto *inits[8];
  Onnx__ValueInfoProto *ins[4], *outs[4];
} model;

static model *model_new(int64_t opset) {
  model *mb = arena_alloc(A, sizeof *mb);
  onnx__model_proto__init(&mb->m);
  onnx__graph_proto__init(&mb->g);
  mb->m.has_ir_version = 1, mb->m.ir_version = 8;
  Onnx__OperatorSetIdProto *o = arena_alloc(A, sizeof *o);
  onnx__operator_set_id_proto__init(o);
  o->domain = S(""), o->has_version = 1, o->version = opset;
  mb->opsets[0] = o;
  mb->m.n_opset_import = 1, mb->m.opset_import = mb->opsets;
  mb->m.graph = &mb->g;
  mb->g.name = S("g");
  mb->g.node = mb->nodes, mb->g.initializer = mb->inits, mb->g.input = mb->ins, mb->g.output = mb->outs;
  return mb;
}

static char *pack(model *mb, size_t *len) {
  *len = onnx__model_proto__get_packed_size(&mb->m);
  char *b = arena_alloc(A, *len + 1);
  onnx__model_proto__pack(&mb->m, (uint8_t *)b);
  return b;
}

/* The MLP of these tests: y = softmax(relu(x W1 + b1) W2 + b2) over
 * x [N, 3], W1 [3, 4] (a Gemm with transB: stored [4, 3]), W2 [4, 2]
 * (a MatMul + Add). */
static const float W1t[4][3] = {{0.5f, -1, 0.25f}, {1, 0.5f, -0.5f}, {-0.25f, 0.75f, 1}, {0.1f, 0.2f, 0.3f}};
static const float B1[4] = {0.1f, -0.2f, 0.3f, 0};
static const float W2[4][2] = {{1, -1}, {0.5f, 0.25f}, {-0.5f, 1}, {2, 0}};
static const float B2[2] = {0.05f, -0.05f};

static model *mlp(void) {
  model *mb = model_new(17);
  mb->ins[mb->g.n_input++] = vi("x", ONNX_FLOAT, 2, (int64_t[]){0, 3}, "batch");
  mb->outs[mb->g.n_output++] = vi("y", ONNX_FLOAT, 2, (int64_t[]){0, 2}, "batch");
  mb->inits[mb->g.n_initializer++] = tensor("fc1.weight", ONNX_FLOAT, 2, (int64_t[]){4, 3}, W1t, sizeof W1t);
  mb->inits[mb->g.n_initializer++] = tensor("fc1.bias", ONNX_FLOAT, 1, (int64_t[]){4}, B1, sizeof B1);
  mb->inits[mb->g.n_initializer++] = tensor("fc2.weight", ONNX_FLOAT, 2, (int64_t[]){4, 2}, W2, sizeof W2);
  mb->inits[mb->g.n_initializer++] = tensor("fc2.bias", ONNX_FLOAT, 1, (int64_t[]){2}, B2, sizeof B2);
  mb->nodes[mb->g.n_node++] = node("Gemm", "/fc1/Gemm", NULL, (const char *[]){"x", "fc1.weight", "fc1.bias"}, 3, "h",
                                   attr_int("transB", 1), NULL);
  mb->nodes[mb->g.n_node++] = node("Relu", "/act/Relu", NULL, (const char *[]){"h"}, 1, "r", NULL, NULL);
  mb->nodes[mb->g.n_node++] = node("MatMul", "/fc2/MatMul", NULL, (const char *[]){"r", "fc2.weight"}, 2, "m", NULL, NULL);
  mb->nodes[mb->g.n_node++] = node("Add", "/fc2/Add", NULL, (const char *[]){"m", "fc2.bias"}, 2, "z", NULL, NULL);
  mb->nodes[mb->g.n_node++] = node("Softmax", "/Softmax", NULL, (const char *[]){"z"}, 1, "y", NULL, NULL);
  return mb;
}

/* Loads bytes as model `name`; the load's status, and its first error in err. */
static castor_status load(castor_context *ctx, const char *name, const char *b, size_t len,
                          castor_model **m) {
  return castor_model_load_string(ctx, name, b, len, NULL, m);
}

static void expect_error(const char *name, const char *b, size_t len, castor_status want_st,
                         const char *want) {
  castor_context *ctx;
  castor_context_create(&ctx);
  castor_model *m = NULL;
  castor_status st = load(ctx, name, b, len, &m);
  ck_assert_ptr_null(m);
  ck_assert_msg(st == want_st, "status %s, want %s: %s", castor_status_string(st),
                castor_status_string(want_st), castor_context_last_error(ctx));
  ck_assert_str_eq(castor_context_last_error(ctx), want);
  castor_context_destroy(ctx);
}

static void setup(void) {
  A = arena_create();
  tmpdir_setup();
}

static void teardown(void) {
  tmpdir_teardown();
  arena_destroy(A);
}

START_TEST(test_mlp_runs) {
  size_t len;
  char *b = pack(mlp(), &len);
  castor_context *ctx;
  castor_context_create(&ctx);
  castor_model *m;
  ck_assert_msg(load(ctx, "mlp.onnx", b, len, &m) == CASTOR_OK, "%s", castor_context_last_error(ctx));
  castor_program *p;
  ck_assert_msg(castor_compile(m, NULL, &p) == CASTOR_OK, "%s", castor_context_last_error(ctx));
  castor_tensor_info info;
  castor_program_input_info(p, 0, &info);
  ck_assert_int_eq(info.rank, 2);
  ck_assert_int_eq(info.dims[0], -1); /* the dim_param became castor's batch N */
  castor_tensor *x, *y = NULL;
  castor_tensor_create(ctx, CASTOR_F32, 2, (int64_t[]){2, 3}, &x);
  float *xv = castor_tensor_data(x);
  const float xs[6] = {1, 2, 3, -1, 0.5f, 2};
  memcpy(xv, xs, sizeof xs);
  ck_assert_int_eq(castor_program_run(p, &x, 1, &y, 1), CASTOR_OK);
  const float *yv = castor_tensor_data(y);
  for (int n = 0; n < 2; n++) {
    double h[4], z[2];
    for (int j = 0; j < 4; j++) {
      h[j] = B1[j];
      for (int k = 0; k < 3; k++) h[j] += (double)xs[n * 3 + k] * W1t[j][k];
      h[j] = h[j] > 0 ? h[j] : 0;
    }
    for (int o = 0; o < 2; o++) {
      z[o] = B2[o];
      for (int j = 0; j < 4; j++) z[o] += h[j] * W2[j][o];
    }
    double mx = fmax(z[0], z[1]), e0 = exp(z[0] - mx), e1 = exp(z[1] - mx);
    ck_assert_double_eq_tol(yv[n * 2], e0 / (e0 + e1), 1e-6);
    ck_assert_double_eq_tol(yv[n * 2 + 1], e1 / (e0 + e1), 1e-6);
  }
  castor_tensor_destroy(x);
  castor_tensor_destroy(y);
  castor_program_destroy(p);
  /* layers are named after the ONNX nodes, for --fp32-layers and castor check */
  castor_compile_options o;
  castor_compile_options_init(&o);
  o.policy = "mixed_bfloat16";
  o.fp32_layers = "fc1_Gemm"; /* node /fc1/Gemm */
  ck_assert_msg(castor_compile(m, &o, &p) == CASTOR_OK, "%s", castor_context_last_error(ctx));
  castor_program_destroy(p);
  castor_model_destroy(m);
  castor_context_destroy(ctx);
}
END_TEST

START_TEST(test_external_data) {
  model *mb = mlp();
  /* fc2.weight's data in a file beside the model, at an offset */
  char path[256];
  snprintf(path, sizeof path, "%s/weights.bin", tmpdir);
  FILE *f = fopen(path, "wb");
  fwrite("pad!", 1, 4, f);
  fwrite(W2, 1, sizeof W2, f);
  fclose(f);
  Onnx__TensorProto *t = mb->inits[2];
  t->has_raw_data = 0, t->raw_data.len = 0;
  t->has_data_location = 1, t->data_location = ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL;
  Onnx__StringStringEntryProto *e[3];
  const char *kv[3][2] = {{"location", "weights.bin"}, {"offset", "4"}, {"length", "32"}};
  for (int i = 0; i < 3; i++) {
    e[i] = arena_alloc(A, sizeof *e[i]);
    onnx__string_string_entry_proto__init(e[i]);
    e[i]->key = S(kv[i][0]), e[i]->value = S(kv[i][1]);
  }
  t->n_external_data = 3, t->external_data = e;
  size_t len;
  char *b = pack(mb, &len);
  char mpath[256];
  snprintf(mpath, sizeof mpath, "%s/model.onnx", tmpdir);
  f = fopen(mpath, "wb");
  fwrite(b, 1, len, f);
  fclose(f);
  castor_context *ctx;
  castor_context_create(&ctx);
  castor_model *m = NULL;
  ck_assert_msg(castor_model_load_file(ctx, mpath, NULL, &m) == CASTOR_OK, "%s", castor_context_last_error(ctx));
  castor_model_destroy(m);
  /* "w..bin" is a file name, not a way out: only a component that is ".." is (issue 41) */
  char dots[256];
  snprintf(dots, sizeof dots, "%s/w..bin", tmpdir);
  ck_assert_int_eq(link(path, dots), 0);
  e[0]->value = S("w..bin");
  b = pack(mb, &len);
  f = fopen(mpath, "wb");
  fwrite(b, 1, len, f);
  fclose(f);
  m = NULL;
  ck_assert_msg(castor_model_load_file(ctx, mpath, NULL, &m) == CASTOR_OK, "w..bin: %s", castor_context_last_error(ctx));
  castor_model_destroy(m);
  /* outside the directory: '..', an absolute path, a symbolic link out of it */
  const char *bad[] = {"../weights.bin", "/etc/passwd", "link.bin"};
  char lpath[256];
  snprintf(lpath, sizeof lpath, "%s/link.bin", tmpdir);
  ck_assert_int_eq(symlink("/etc/hostname", lpath), 0);
  for (int i = 0; i < 3; i++) {
    e[0]->value = S(bad[i]);
    b = pack(mb, &len);
    f = fopen(mpath, "wb");
    fwrite(b, 1, len, f);
    fclose(f);
    m = NULL;
    ck_assert_int_eq(castor_model_load_file(ctx, mpath, NULL, &m), CASTOR_ERR_PARSE);
    const char *err = castor_context_last_error(ctx);
    if (i < 2)
      ck_assert_msg(strstr(err, "must be a relative path inside the model's directory (no '..' component, not absolute)"), "%s", err);
    else
      ck_assert_msg(strstr(err, "link.bin' is a symbolic link or lies behind one; castor opens files beneath the model's directory without following links"), "%s", err);
  }
  /* a length that disagrees with the tensor, and data past the file's end */
  e[0]->value = S("weights.bin");
  e[2]->value = S("31");
  b = pack(mb, &len);
  f = fopen(mpath, "wb");
  fwrite(b, 1, len, f);
  fclose(f);
  ck_assert_int_eq(castor_model_load_file(ctx, mpath, NULL, &m), CASTOR_ERR_PARSE);
  ck_assert_msg(strstr(castor_context_last_error(ctx), "tensor 'fc2.weight': external data length 31 does not match its 8 elements of float (32 bytes)"),
                "%s", castor_context_last_error(ctx));
  e[2]->value = S("32");
  e[1]->value = S("8");
  b = pack(mb, &len);
  f = fopen(mpath, "wb");
  fwrite(b, 1, len, f);
  fclose(f);
  ck_assert_int_eq(castor_model_load_file(ctx, mpath, NULL, &m), CASTOR_ERR_PARSE);
  ck_assert_msg(strstr(castor_context_last_error(ctx), "holds 36 bytes; the tensor needs 32 bytes at offset 8"),
                "%s", castor_context_last_error(ctx));
  castor_context_destroy(ctx);
}
END_TEST

START_TEST(test_truncated_and_wire_types) {
  size_t len;
  char *b = pack(mlp(), &len);
  /* every truncation is one error, never a crash */
  for (size_t cut = 1; cut < len; cut++) {
    castor_context *ctx;
    castor_context_create(&ctx);
    castor_model *m = NULL;
    castor_status st = load(ctx, "cut.onnx", b, cut, &m);
    if (st == CASTOR_OK) castor_model_destroy(m); /* a cut that ends on a field boundary may be a smaller valid model */
    else ck_assert_msg(strstr(castor_context_last_error(ctx), "cut.onnx"), "%s", castor_context_last_error(ctx));
    castor_context_destroy(ctx);
  }
  /* a cut inside the last top-level field (protobuf-c writes opset_import,
   * field 8, after the graph): located at that field's first byte */
  size_t last = onnx__operator_set_id_proto__get_packed_size(mlp()->opsets[0]) + 2;
  char msg[256];
  snprintf(msg, sizeof msg,
           "cut.onnx: error: 'cut.onnx' is not a valid ONNX model: malformed protobuf at byte %zu: a "
           "length-delimited field runs past the end (%zu bytes in all)\n", len - last, len - 1);
  expect_error("cut.onnx", b, len - 1, CASTOR_ERR_PARSE, msg);
  /* the graph field (7) as a varint instead of a message */
  char wrong[] = {0x08, 0x08, 0x38, 0x01};
  expect_error("wire.onnx", wrong, sizeof wrong, CASTOR_ERR_PARSE,
               "wire.onnx: error: 'wire.onnx' is not a valid ONNX model: its protobuf data is "
               "malformed (a field of the wrong type, or a nested message that is truncated; 4 "
               "bytes)\n");
  /* a file named .onnx is read as ONNX whatever its first byte (the
   * format sniffer wants 0x08, ir_version, first): the ir_version field (1)
   * as a length-delimited string, bytes that are no protobuf, no bytes */
  char first[] = {0x0a, 0x03, 'a', 'b', 'c', 0x08, 0x08};
  expect_error("first.onnx", first, sizeof first, CASTOR_ERR_PARSE,
               "first.onnx: error: 'first.onnx' is not a valid ONNX model: its protobuf data is "
               "malformed (a field of the wrong type, or a nested message that is truncated; 7 "
               "bytes)\n");
  char ff[12];
  memset(ff, 0xff, sizeof ff);
  expect_error("ff.onnx", ff, sizeof ff, CASTOR_ERR_PARSE,
               "ff.onnx: error: 'ff.onnx' is not a valid ONNX model: malformed protobuf at byte 0: a field "
               "key is longer than 10 bytes (12 bytes in all)\n");
  expect_error("empty.onnx", "", 0, CASTOR_ERR_PARSE,
               "empty.onnx: error: 'empty.onnx': the model has no graph (is it an ONNX model?)\n");
  /* a model without a graph */
  char nograph[] = {0x08, 0x08};
  expect_error("nograph.onnx", nograph, sizeof nograph, CASTOR_ERR_PARSE,
               "nograph.onnx: error: 'nograph.onnx': the model has no graph (is it an ONNX model?)\n");
}
END_TEST

START_TEST(test_bad_graphs) {
  size_t len;
  char *b;
  /* huge declared dimensions: an initializer, a graph input */
  model *mb = mlp();
  mb->inits[0]->dims[0] = (int64_t)1 << 40;
  b = pack(mb, &len);
  expect_error("huge.onnx", b, len, CASTOR_ERR_PARSE,
               "huge.onnx: error: 'huge.onnx': tensor 'fc1.weight': its dimensions multiply to more "
               "than 2^40 elements\n");
  mb = mlp();
  mb->ins[0] = vi("x", ONNX_FLOAT, 2, (int64_t[]){0, (int64_t)1 << 50}, "batch");
  b = pack(mb, &len);
  castor_context *ctx;
  castor_context_create(&ctx);
  castor_model *m = NULL;
  ck_assert_int_ne(load(ctx, "huge2.onnx", b, len, &m), CASTOR_OK);
  ck_assert_ptr_null(m);
  ck_assert_msg(strstr(castor_context_last_error(ctx), "huge2.onnx: "), "%s", castor_context_last_error(ctx));
  castor_context_destroy(ctx);
  /* ... feeding an element-wise op: one error naming the input */
  mb = model_new(17);
  mb->ins[mb->g.n_input++] = vi("x", ONNX_FLOAT, 2, (int64_t[]){0, (int64_t)1 << 50}, "batch");
  mb->outs[mb->g.n_output++] = vi("h", ONNX_FLOAT, 2, (int64_t[]){0, (int64_t)1 << 50}, "batch");
  mb->nodes[mb->g.n_node++] = node("Relu", "/big/Relu", NULL, (const char *[]){"x"}, 1, "h", NULL, NULL);
  b = pack(mb, &len);
  expect_error("huge3.onnx", b, len, CASTOR_ERR_PARSE,
               "huge3.onnx: error: graph input 'x' declares more than 1099511627776 bytes per batch row "
               "(castor's tensor limit)\n");
  /* a cycle of two nodes, each reading the other's output */
  mb = mlp();
  mb->nodes[0]->input[0] = S("q");
  mb->nodes[1]->output[0] = S("q");
  b = pack(mb, &len);
  expect_error("cycle2.onnx", b, len, CASTOR_ERR_PARSE,
               "cycle2.onnx: node '/fc1/Gemm' (Gemm): error: input 'q' is defined by no earlier node, "
               "graph input or initializer (the graph is not topologically sorted, or has a cycle)\n"
               /* every refusal in one run: Relu no longer defines r */
               "cycle2.onnx: node '/fc2/MatMul' (MatMul): error: input 'r' is defined by no earlier node, "
               "graph input or initializer (the graph is not topologically sorted, or has a cycle)\n");
  /* a cycle: Relu reads z, which a later node defines */
  mb = mlp();
  mb->nodes[1]->input[0] = S("z");
  b = pack(mb, &len);
  expect_error("cycle.onnx", b, len, CASTOR_ERR_PARSE,
               "cycle.onnx: node '/act/Relu' (Relu): error: input 'z' is defined by no earlier node, "
               "graph input or initializer (the graph is not topologically sorted, or has a cycle)\n");
  /* an op of another domain */
  mb = mlp();
  mb->nodes[1]->domain = S("com.microsoft");
  b = pack(mb, &len);
  expect_error("domain.onnx", b, len, CASTOR_ERR_UNSUPPORTED,
               "domain.onnx: node '/act/Relu' (Relu): error: op Relu of domain 'com.microsoft': castor "
               "supports the default ONNX domain only\n");
  /* an op castor lacks, an attribute it does not read, an opset too new */
  mb = mlp();
  mb->nodes[1]->op_type = S("Hardmax");
  b = pack(mb, &len);
  expect_error("op.onnx", b, len, CASTOR_ERR_UNSUPPORTED,
               "op.onnx: node '/act/Relu' (Hardmax): error: castor does not support the ONNX op Hardmax "
               "(opset 17); docs/onnx.md lists the ops it does\n");
  mb = mlp();
  mb->nodes[1]->attribute[mb->nodes[1]->n_attribute++] = attr_int("alpha", 2);
  b = pack(mb, &len);
  expect_error("attr.onnx", b, len, CASTOR_ERR_UNSUPPORTED,
               "attr.onnx: node '/act/Relu' (Relu): error: attribute 'alpha' of Relu is not supported "
               "by castor (it reads: consumed_inputs)\n");
  mb = mlp();
  mb->opsets[0]->version = 99;
  b = pack(mb, &len);
  expect_error("opset.onnx", b, len, CASTOR_ERR_UNSUPPORTED,
               "opset.onnx: error: the model uses opset 99; castor's ONNX ops are written against "
               "opsets up to 21\n");
  /* a double weight; an int64 graph input */
  mb = mlp();
  double w2d[8] = {0};
  mb->inits[2] = tensor("fc2.weight", ONNX_DOUBLE, 2, (int64_t[]){4, 2}, w2d, sizeof w2d);
  b = pack(mb, &len);
  expect_error("double.onnx", b, len, CASTOR_ERR_UNSUPPORTED,
               "double.onnx: node '/fc2/MatMul' (MatMul): error: MatMul uses the double tensor "
               "'fc2.weight' as a float operand; castor's ONNX import reads float, float16 and "
               "bfloat16 data\n");
  mb = mlp();
  mb->ins[0] = vi("x", ONNX_INT64, 2, (int64_t[]){0, 3}, "batch");
  b = pack(mb, &len);
  expect_error("int.onnx", b, len, CASTOR_ERR_UNSUPPORTED,
               "int.onnx: node '/fc1/Gemm' (Gemm): error: Gemm on (i64[N,3], f32[3,4]): matmul operands must share "
               "one float dtype, got i64[N,3] and f32[3,4] (castor computes this op on float tensors)\n");
  /* a graph input of a type castor does not compute in */
  mb = mlp();
  mb->ins[0] = vi("x", ONNX_DOUBLE, 2, (int64_t[]){0, 3}, "batch");
  b = pack(mb, &len);
  expect_error("double.onnx", b, len, CASTOR_ERR_UNSUPPORTED,
               "double.onnx: error: graph input 'x' is of type double; castor's ONNX import takes float, int64, int32 "
               "and bool inputs (bind others to data with --bind NAME=FILE)\n");
  /* raw data of the wrong size */
  mb = mlp();
  mb->inits[1]->raw_data.len = 12;
  b = pack(mb, &len);
  expect_error("raw.onnx", b, len, CASTOR_ERR_PARSE,
               "raw.onnx: error: 'raw.onnx': tensor 'fc1.bias' holds 12 bytes of raw data; 4 elements "
               "of float need 16\n");
  /* shapes that do not fit: named with both */
  mb = mlp();
  mb->inits[2]->dims[0] = 2, mb->inits[2]->dims[1] = 4;
  b = pack(mb, &len);
  castor_context_create(&ctx);
  ck_assert_int_eq(load(ctx, "shape.onnx", b, len, &m), CASTOR_ERR_PARSE);
  ck_assert_msg(strstr(castor_context_last_error(ctx),
                       "shape.onnx: node '/fc2/MatMul' (MatMul): error: MatMul on (f32[N,4], f32[2,4]): "),
                "%s", castor_context_last_error(ctx));
  castor_context_destroy(ctx);
}
END_TEST


/* PyTorch's exporter's models (tests/onnx/models/generate.py) against
 * ONNX Runtime's outputs: normalized error sqrt(sum (got - want)^2 / sum
 * want^2) within 1e-5 under float32 and within the bounds docs/onnx.md
 * states for the mixed policies, every output (NAME.T.ort.npy, then
 * NAME.T.ort1.npy, ...). MODELS lists the models castor imports. */
static const char *const MODELS[] = {"mlp.opset17",    "mlp.default",    "cnn.opset17",    "cnn.default",
                                     "resnet.opset17", "resnet.default", "layout.opset17", "layout.default",
                                     "vit.opset17",    "vit.default",
                                     /* recurrent layers: nn.LSTM and nn.GRU, 2 layers, bidirectional (static shapes) */
                                     "rnn_lstm.static", "rnn_gru.static"};

static double norm_err(const float *got, const float *want, int64_t n) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < n; i++) {
    double d = (double)got[i] - want[i];
    num += d * d, den += (double)want[i] * want[i];
  }
  return sqrt(num / (den > 0 ? den : 1));
}

START_TEST(test_exported_models) {
  /* the last: float32 with the batch bound (--batch 5, static shapes) */
  static const struct { const char *policy; double bound; int batch; } policies[] = {
      {"float32", 1e-5, 0}, {"mixed_float16", 2e-3, 0}, {"mixed_bfloat16", 2e-2, 0}, {"float32", 1e-5, 5}};
  castor_context *ctx;
  castor_context_create(&ctx);
  for (size_t i = 0; i < sizeof MODELS / sizeof *MODELS; i++) {
    char path[512], xp[512], yp[512], stem[128];
    snprintf(stem, sizeof stem, "%s", MODELS[i]);
    *strchr(stem, '.') = 0;
    snprintf(path, sizeof path, "%s/tests/onnx/models/%s.onnx", CASTOR_SOURCE_DIR, MODELS[i]);
    snprintf(xp, sizeof xp, "%s/tests/onnx/models/%s.x.npy", CASTOR_SOURCE_DIR, stem);
    snprintf(yp, sizeof yp, "%s/tests/onnx/models/%s.ort.npy", CASTOR_SOURCE_DIR, MODELS[i]);
    castor_model *m;
    ck_assert_msg(castor_model_load_file(ctx, path, NULL, &m) == CASTOR_OK, "%s: %s", path, castor_context_last_error(ctx));
    castor_tensor *x, *want[4] = {0};
    int n_out = 0;
    ck_assert_int_eq(castor_tensor_load_npy(ctx, xp, &x), CASTOR_OK);
    ck_assert_int_eq(castor_tensor_load_npy(ctx, yp, &want[n_out++]), CASTOR_OK);
    for (; n_out < 4; n_out++) {
      snprintf(yp, sizeof yp, "%s/tests/onnx/models/%s.ort%d.npy", CASTOR_SOURCE_DIR, MODELS[i], n_out);
      if (access(yp, R_OK) != 0) break;
      ck_assert_int_eq(castor_tensor_load_npy(ctx, yp, &want[n_out]), CASTOR_OK);
    }
    for (size_t p = 0; p < sizeof policies / sizeof *policies; p++) {
      castor_compile_options o;
      castor_compile_options_init(&o);
      o.policy = policies[p].policy;
      o.batch = policies[p].batch;
      castor_program *prog;
      ck_assert_msg(castor_compile(m, &o, &prog) == CASTOR_OK, "%s %s: %s", MODELS[i], o.policy, castor_context_last_error(ctx));
      ck_assert_int_eq(castor_program_num_outputs(prog), n_out);
      castor_tensor *y[4] = {0};
      ck_assert_msg(castor_program_run(prog, &x, 1, y, n_out) == CASTOR_OK, "%s", castor_context_last_error(ctx));
      for (int k = 0; k < n_out; k++) {
        ck_assert_int_eq(castor_tensor_rank(y[k]), castor_tensor_rank(want[k]));
        for (int r = 0; r < castor_tensor_rank(y[k]); r++) /* ONNX's NCHW order, not castor's NHWC */
          ck_assert_int_eq(castor_tensor_dims(y[k])[r], castor_tensor_dims(want[k])[r]);
        double e = norm_err(castor_tensor_data(y[k]), castor_tensor_data(want[k]), castor_tensor_numel(y[k]));
        ck_assert_msg(e <= policies[p].bound, "%s output %d under %s: normalized error %.3g > %.3g", MODELS[i], k,
                      o.policy, e, policies[p].bound);
        castor_tensor_destroy(y[k]);
      }
      castor_program_destroy(prog);
    }
    castor_tensor_destroy(x);
    for (int k = 0; k < n_out; k++) castor_tensor_destroy(want[k]);
    castor_model_destroy(m);
  }
  castor_context_destroy(ctx);
}
END_TEST

/* A model compiled with its batch bound (static shapes): its elementwise
 * and line kernels split over threads by their first dimension, as a
 * batched kernel splits by rows. The same bits on 1 and 3 threads. */
START_TEST(test_static_threads) {
  static const char *const models[] = {"vit.opset17", "resnet.opset17", "layout.opset17", "mlp.opset17"};
  castor_context *ctx;
  castor_context_create(&ctx);
  for (size_t i = 0; i < sizeof models / sizeof *models; i++) {
    char path[512], xp[512], stem[128];
    snprintf(stem, sizeof stem, "%s", models[i]);
    *strchr(stem, '.') = 0;
    snprintf(path, sizeof path, "%s/tests/onnx/models/%s.onnx", CASTOR_SOURCE_DIR, models[i]);
    snprintf(xp, sizeof xp, "%s/tests/onnx/models/%s.x.npy", CASTOR_SOURCE_DIR, stem);
    castor_model *m;
    ck_assert_msg(castor_model_load_file(ctx, path, NULL, &m) == CASTOR_OK, "%s: %s", path, castor_context_last_error(ctx));
    castor_tensor *x, *y[2][4] = {{0}};
    ck_assert_int_eq(castor_tensor_load_npy(ctx, xp, &x), CASTOR_OK);
    int n_out = 0;
    for (int t = 0; t < 2; t++) {
      castor_compile_options o;
      castor_compile_options_init(&o);
      o.batch = castor_tensor_dims(x)[0];
      o.threads = t ? 3 : 1;
      castor_program *prog;
      ck_assert_msg(castor_compile(m, &o, &prog) == CASTOR_OK, "%s: %s", models[i], castor_context_last_error(ctx));
      n_out = castor_program_num_outputs(prog);
      ck_assert_int_le(n_out, 4);
      ck_assert_msg(castor_program_run(prog, &x, 1, y[t], n_out) == CASTOR_OK, "%s", castor_context_last_error(ctx));
      castor_program_destroy(prog);
    }
    for (int k = 0; k < n_out; k++) {
      ck_assert_int_eq(castor_tensor_numel(y[0][k]), castor_tensor_numel(y[1][k]));
      ck_assert_msg(memcmp(castor_tensor_data(y[0][k]), castor_tensor_data(y[1][k]),
                           (size_t)castor_tensor_numel(y[0][k]) * sizeof(float)) == 0,
                    "%s output %d: 1 and 3 threads differ", models[i], k);
      castor_tensor_destroy(y[0][k]);
      castor_tensor_destroy(y[1][k]);
    }
    castor_tensor_destroy(x);
    castor_model_destroy(m);
  }
  castor_context_destroy(ctx);
}
END_TEST

/* The nodes of op `op` in tests/onnx/models/NAME.onnx as imported. */
static int count_ops(const char *name, ir_op op) {
  char path[512];
  snprintf(path, sizeof path, "%s/tests/onnx/models/%s.onnx", CASTOR_SOURCE_DIR, name);
  diag_sink *d = diag_sink_create();
  ir_graph *g = fe_load(path, NULL, d, NULL);
  ck_assert_msg(g != NULL, "%s", path);
  int n = 0;
  for (int i = 0; i < g->n_nodes; i++) n += g->nodes[i]->op == op;
  ir_graph_destroy(g);
  diag_sink_destroy(d);
  return n;
}

/* NCHW models held as NHWC: the transposes castor adds. The exported CNN
 * (conv -> pool -> flatten -> Gemm) has none: its one-channel input is
 * NHWC as it is (a reshape), and the flatten is absorbed into the Gemm's
 * weight rows. The ResNet transposes its 3-channel input; the layout model
 * that and its NCHW feature-map output. */
START_TEST(test_layout_transposes) {
  ck_assert_int_eq(count_ops("cnn.opset17", IR_OP_TRANSPOSE), 0);
  ck_assert_int_eq(count_ops("cnn.default", IR_OP_TRANSPOSE), 0);
  ck_assert_int_eq(count_ops("resnet.opset17", IR_OP_TRANSPOSE), 1);
  ck_assert_int_eq(count_ops("layout.opset17", IR_OP_TRANSPOSE), 2);
  ck_assert_int_eq(count_ops("layout.default", IR_OP_TRANSPOSE), 2);
}
END_TEST

/* AveragePool with count_include_pad: zeros only where it has pads. The
 * layout model's 3x3 pool (pads 1) pads its input; DenseNet's transition
 * pools (2x2, pads 0, as PyTorch exports AvgPool2d by default) have
 * nothing to pad and no copy (a pad_constant of x's own shape, a kernel of
 * its own, was 0.3 ms of DenseNet-121's 48 at batch 1). */
START_TEST(test_avgpool_pads) {
  ck_assert_int_eq(count_ops("layout.opset17", IR_OP_PAD_CONSTANT), 1);
  ck_assert_int_eq(count_ops("tv_densenet121.dynbatch", IR_OP_PAD_CONSTANT), 0);
  ck_assert_int_eq(count_ops("tv_densenet121.dynbatch", IR_OP_AVG_POOL2D), 4); /* 3 transitions, the global pool */
}
END_TEST

/* A Concat of more inputs than an IR node has sources is a tree of
 * concats; a concat of the same values as an earlier Concat's (or part's)
 * is that one: DenseNet's layers 9 to 24 of a block begin with the same 8
 * features, which layer 8 joins. No two concats of the imported graph have
 * the same operands (125 concats before, 83 now), and the shared parts
 * have several uses. */
START_TEST(test_concat_parts_shared) {
  char path[512];
  snprintf(path, sizeof path, "%s/tests/onnx/models/tv_densenet121.dynbatch.onnx", CASTOR_SOURCE_DIR);
  diag_sink *d = diag_sink_create();
  ir_graph *g = fe_load(path, NULL, d, NULL);
  ck_assert_msg(g != NULL, "%s", diag_text(d));
  ir_graph_renumber(g);
  int *uses = ir_graph_use_counts(g);
  int concats = 0, shared = 0;
  for (int i = 0; i < g->n_nodes; i++) {
    const ir_node *a = g->nodes[i];
    if (a->op != IR_OP_CONCAT) continue;
    concats++;
    if (uses[a->id] > 1) shared++;
    for (int j = i + 1; j < g->n_nodes; j++) {
      const ir_node *b = g->nodes[j];
      if (b->op != IR_OP_CONCAT || b->n_srcs != a->n_srcs || b->attr.axis != a->attr.axis) continue;
      bool same = true;
      for (int k = 0; k < a->n_srcs && same; k++) same = a->srcs[k] == b->srcs[k];
      ck_assert_msg(!same, "%%%s and %%%s concatenate the same values", a->name, b->name);
    }
  }
  ck_assert_int_eq(concats, 83);
  ck_assert_int_ge(shared, 4);
  free(uses);
  ir_graph_destroy(g);
  diag_sink_destroy(d);
}
END_TEST

/* attention: a MatMul of activations [N, T, C] by a weight [C, P] (the
 * ViT's Linear layers) is matmul on flat rows; only the two products of
 * activations per attention block (scores, combine) are batch_matmuls. */
START_TEST(test_matmul_by_weight) {
  /* proj, then per block qkv, out, mlp1, mlp2, and the head's Gemm */
  ck_assert_int_eq(count_ops("vit.opset17", IR_OP_MATMUL), 10);
  ck_assert_int_eq(count_ops("vit.opset17", IR_OP_BATCH_MATMUL), 4);
  ck_assert_int_eq(count_ops("vit.default", IR_OP_BATCH_MATMUL), 4);
}
END_TEST

/* A Conv model: x [N, 2, 5, 5] (rank 5 with `three_d`), W [3, 2, 3, 3]. */
static model *conv_model(bool three_d, Onnx__AttributeProto *a0, Onnx__AttributeProto *a1) {
  static const float w[3 * 2 * 3 * 3] = {0};
  model *mb = model_new(17);
  mb->ins[mb->g.n_input++] = vi("x", ONNX_FLOAT, three_d ? 5 : 4, (int64_t[]){0, 2, 5, 5, 5}, "batch");
  mb->outs[mb->g.n_output++] = vi("y", ONNX_FLOAT, 4, (int64_t[]){0, 3, 3, 3}, "batch");
  mb->inits[mb->g.n_initializer++] = tensor("w", ONNX_FLOAT, three_d ? 5 : 4, (int64_t[]){3, 2, 3, 3, 1}, w, sizeof w);
  mb->nodes[mb->g.n_node++] = node("Conv", "/c/Conv", NULL, (const char *[]){"x", "w"}, 2, "y", a0, a1);
  return mb;
}

static Onnx__AttributeProto *attr_ints(const char *name, int n, const int64_t *v) {
  Onnx__AttributeProto *a = arena_alloc(A, sizeof *a);
  onnx__attribute_proto__init(a);
  a->name = S(name), a->has_type = 1, a->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS;
  a->n_ints = (size_t)n, a->ints = arena_alloc(A, (size_t)(n + 1) * sizeof *a->ints);
  memcpy(a->ints, v, (size_t)n * sizeof *v);
  return a;
}

static Onnx__AttributeProto *attr_str(const char *name, const char *v) {
  Onnx__AttributeProto *a = arena_alloc(A, sizeof *a);
  onnx__attribute_proto__init(a);
  a->name = S(name), a->has_type = 1, a->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING;
  a->has_s = 1, a->s.len = strlen(v), a->s.data = (uint8_t *)S(v);
  return a;
}

START_TEST(test_conv_errors) {
  size_t len;
  char *b = pack(conv_model(false, NULL, NULL), &len);
  castor_context *ctx;
  castor_context_create(&ctx);
  castor_model *m;
  ck_assert_msg(load(ctx, "conv.onnx", b, len, &m) == CASTOR_OK, "%s", castor_context_last_error(ctx));
  castor_model_destroy(m);
  castor_context_destroy(ctx);
  b = pack(conv_model(false, attr_int("group", 3), NULL), &len);
  expect_error("group.onnx", b, len, CASTOR_ERR_PARSE,
               "group.onnx: node '/c/Conv' (Conv): error: Conv's group 3 does not divide the input's 2 channels\n");
  b = pack(conv_model(true, NULL, NULL), &len);
  expect_error("conv3d.onnx", b, len, CASTOR_ERR_UNSUPPORTED,
               "conv3d.onnx: node '/c/Conv' (Conv): error: Conv over 3 spatial dimensions: castor's convolutions "
               "and pooling are 1-D and 2-D\n");
  model *mb = conv_model(false, NULL, NULL);
  mb->inits[0]->dims[1] = 1, mb->inits[0]->dims[0] = 6;
  b = pack(mb, &len);
  expect_error("chan.onnx", b, len, CASTOR_ERR_PARSE,
               "chan.onnx: node '/c/Conv' (Conv): error: Conv's weight must be [M, C/group, k..] of rank 4 with C = "
               "the input's 2 channels, group 1 and M a multiple of group\n");
  b = pack(conv_model(false, attr_str("auto_pad", "SAME_UPPER"), attr_ints("pads", 4, (int64_t[]){1, 1, 1, 1})), &len);
  expect_error("autopad.onnx", b, len, CASTOR_ERR_PARSE,
               "autopad.onnx: node '/c/Conv' (Conv): error: Conv has both pads and auto_pad=SAME_UPPER\n");
  b = pack(conv_model(false, attr_ints("strides", 3, (int64_t[]){1, 1, 1}), NULL), &len);
  expect_error("strides.onnx", b, len, CASTOR_ERR_PARSE,
               "strides.onnx: node '/c/Conv' (Conv): error: Conv's strides has 3 entries; the input has 2 spatial "
               "dimensions (strides needs 2)\n");
  /* pooling whose padding fills a window; batch norm in training; a mean over the channels */
  mb = conv_model(false, NULL, NULL);
  mb->nodes[0] = node("MaxPool", "/p/MaxPool", NULL, (const char *[]){"x"}, 1, "y",
                      attr_ints("kernel_shape", 2, (int64_t[]){2, 2}), attr_ints("pads", 4, (int64_t[]){2, 0, 0, 0}));
  b = pack(mb, &len);
  expect_error("pool.onnx", b, len, CASTOR_ERR_UNSUPPORTED,
               "pool.onnx: node '/p/MaxPool' (MaxPool): error: MaxPool with pads 2 and 0 not smaller than its "
               "window 2: castor's windows each meet the input\n");
  static const float ones[2] = {1, 1};
  mb = conv_model(false, NULL, NULL);
  mb->inits[0] = tensor("s", ONNX_FLOAT, 1, (int64_t[]){2}, ones, sizeof ones);
  mb->nodes[0] = node("BatchNormalization", "/bn", NULL, (const char *[]){"x", "s", "s", "s", "s"}, 5, "y",
                      attr_int("training_mode", 1), NULL);
  b = pack(mb, &len);
  expect_error("bn.onnx", b, len, CASTOR_ERR_UNSUPPORTED,
               "bn.onnx: node '/bn' (BatchNormalization): error: BatchNormalization in training mode (batch "
               "statistics): castor imports ONNX models for inference, with the running mean and variance\n");
  mb = conv_model(false, NULL, NULL);
  mb->nodes[0] = node("ReduceMean", "/mean", NULL, (const char *[]){"x"}, 1, "y",
                      attr_ints("axes", 2, (int64_t[]){1, -3}), NULL);
  b = pack(mb, &len);
  expect_error("mean.onnx", b, len, CASTOR_ERR_PARSE,
               "mean.onnx: node '/mean' (ReduceMean): error: ReduceMean: axis -3 given twice\n");
}
END_TEST

/* recurrent layers: an LSTM X [T=3, N=2, D=2] (layout 0, hidden 2) with
 * initial_h and sequence_lens as given; its bad inputs are located errors. */
static model *lstm_model(int64_t h0_batch, const int32_t *seq_lens, int n_seq, int x_rank) {
  static const float w[4 * 2 * 2] = {0}, r[4 * 2 * 2] = {0}, h0[2 * 3 * 2] = {0};
  model *mb = model_new(14);
  mb->ins[mb->g.n_input++] = vi("x", ONNX_FLOAT, x_rank, (int64_t[]){3, 2, 2, 1}, NULL);
  mb->outs[mb->g.n_output++] = vi("y", ONNX_FLOAT, 4, (int64_t[]){3, 1, 2, 2}, NULL);
  mb->inits[mb->g.n_initializer++] = tensor("w", ONNX_FLOAT, 3, (int64_t[]){1, 8, 2}, w, sizeof w);
  mb->inits[mb->g.n_initializer++] = tensor("r", ONNX_FLOAT, 3, (int64_t[]){1, 8, 2}, r, sizeof r);
  mb->inits[mb->g.n_initializer++] = tensor("h0", ONNX_FLOAT, 3, (int64_t[]){1, h0_batch, 2}, h0,
                                            (size_t)h0_batch * 2 * sizeof(float));
  const char *ins[] = {"x", "w", "r", "", seq_lens ? "sl" : "", "h0"};
  if (seq_lens)
    mb->inits[mb->g.n_initializer++] = tensor("sl", ONNX_INT32, 1, (int64_t[]){n_seq}, seq_lens,
                                              (size_t)n_seq * sizeof(int32_t));
  mb->nodes[mb->g.n_node++] = node("LSTM", "/lstm", NULL, ins, 6, "y", attr_int("hidden_size", 2), NULL);
  return mb;
}

START_TEST(test_rnn_errors) {
  size_t len;
  char *b = pack(lstm_model(2, (const int32_t[]){3, 3}, 2, 3), &len);
  castor_context *ctx;
  castor_context_create(&ctx);
  castor_model *m;
  ck_assert_msg(load(ctx, "lstm.onnx", b, len, &m) == CASTOR_OK, "%s", castor_context_last_error(ctx));
  castor_model_destroy(m);
  castor_context_destroy(ctx);
  b = pack(lstm_model(3, NULL, 0, 3), &len);
  expect_error("state.onnx", b, len, CASTOR_ERR_PARSE,
               "state.onnx: node '/lstm' (LSTM): error: LSTM initial_h must be [1, 2, 2] (directions, batch_size, "
               "hidden_size), got f32[1,3,2]\n");
  b = pack(lstm_model(2, (const int32_t[]){3, 4}, 2, 3), &len);
  expect_error("seqlen.onnx", b, len, CASTOR_ERR_PARSE,
               "seqlen.onnx: node '/lstm' (LSTM): error: LSTM sequence_lens[1] is 4, outside the sequence's [0, 3] "
               "steps\n");
  b = pack(lstm_model(2, (const int32_t[]){-1, 3}, 2, 3), &len);
  expect_error("negative.onnx", b, len, CASTOR_ERR_PARSE,
               "negative.onnx: node '/lstm' (LSTM): error: LSTM sequence_lens[0] is -1, outside the sequence's [0, 3] "
               "steps\n");
  b = pack(lstm_model(2, (const int32_t[]){3, 3, 3}, 3, 3), &len);
  expect_error("count.onnx", b, len, CASTOR_ERR_PARSE,
               "count.onnx: node '/lstm' (LSTM): error: LSTM sequence_lens must be int32 [2] (batch_size), got "
               "i32[3]\n");
  b = pack(lstm_model(2, (const int32_t[]){3, 2, 1}, 3, 3), &len);
  expect_error("count2.onnx", b, len, CASTOR_ERR_PARSE,
               "count2.onnx: node '/lstm' (LSTM): error: LSTM sequence_lens must be int32 [2] (batch_size), got "
               "i32[3]\n");
  b = pack(lstm_model(2, NULL, 0, 4), &len);
  expect_error("rank.onnx", b, len, CASTOR_ERR_PARSE,
               "rank.onnx: node '/lstm' (LSTM): error: LSTM input X must be rank 3 ([seq_length, batch_size, "
               "input_size] or, with layout 1, batch first), got rank 4\n");
}
END_TEST

/* ONNX's LSTM, GRU and RNN with sequence_lens a graph input (bidirectional;
 * lengths 1, T, 3, 0, 4: tests/onnx/models/generate_rnn.py seqlens) against
 * ONNX Runtime: Y 0 past a row's length, Y_h (Y_c) its last valid step's
 * state (0 for length 0), the reverse direction from step len-1; the RNN
 * also with layout 1 over a symbolic batch (ORT's layout-0 outputs
 * transposed: ORT computes layout 0 only). Then a
 * run with a length beyond the sequence or below 0: a located error. */
START_TEST(test_rnn_sequence_lens) {
  static const char *const names[] = {"rnn_seqlens_lstm", "rnn_seqlens_gru", "rnn_seqlens_rnn",
                                      "rnn_seqlens_rnn1"}; /* rnn1: layout 1, the batch symbolic */
  static const struct { const char *policy; double bound; } policies[] = {
      {"float32", 1e-5}, {"mixed_float16", 2e-3}, {"mixed_bfloat16", 2e-2}};
  castor_context *ctx;
  castor_context_create(&ctx);
  for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
    char path[512];
    castor_model *m;
    castor_tensor *in[2], *want[3] = {0};
    int n_out = 0;
    snprintf(path, sizeof path, "%s/tests/onnx/models/%s.onnx", CASTOR_SOURCE_DIR, names[i]);
    ck_assert_msg(castor_model_load_file(ctx, path, NULL, &m) == CASTOR_OK, "%s: %s", path, castor_context_last_error(ctx));
    snprintf(path, sizeof path, "%s/tests/onnx/models/%s.x.npy", CASTOR_SOURCE_DIR, names[i]);
    ck_assert_int_eq(castor_tensor_load_npy(ctx, path, &in[0]), CASTOR_OK);
    snprintf(path, sizeof path, "%s/tests/onnx/models/%s.sl.npy", CASTOR_SOURCE_DIR, names[i]);
    ck_assert_int_eq(castor_tensor_load_npy(ctx, path, &in[1]), CASTOR_OK);
    for (; n_out < 3; n_out++) {
      if (n_out) snprintf(path, sizeof path, "%s/tests/onnx/models/%s.ort%d.npy", CASTOR_SOURCE_DIR, names[i], n_out);
      else snprintf(path, sizeof path, "%s/tests/onnx/models/%s.ort.npy", CASTOR_SOURCE_DIR, names[i]);
      if (access(path, R_OK) != 0) break;
      ck_assert_int_eq(castor_tensor_load_npy(ctx, path, &want[n_out]), CASTOR_OK);
    }
    ck_assert_int_ge(n_out, 2);
    for (size_t p = 0; p < sizeof policies / sizeof *policies; p++) {
      castor_compile_options o;
      castor_compile_options_init(&o);
      o.policy = policies[p].policy;
      castor_program *prog;
      ck_assert_msg(castor_compile(m, &o, &prog) == CASTOR_OK, "%s %s: %s", names[i], o.policy,
                    castor_context_last_error(ctx));
      ck_assert_int_eq(castor_program_num_outputs(prog), n_out);
      castor_tensor *y[3] = {0};
      ck_assert_msg(castor_program_run(prog, in, 2, y, n_out) == CASTOR_OK, "%s", castor_context_last_error(ctx));
      for (int k = 0; k < n_out; k++) {
        ck_assert_int_eq(castor_tensor_numel(y[k]), castor_tensor_numel(want[k]));
        const float *got = castor_tensor_data(y[k]), *ref = castor_tensor_data(want[k]);
        double e = norm_err(got, ref, castor_tensor_numel(y[k]));
        ck_assert_msg(e <= policies[p].bound, "%s output %d under %s: normalized error %.3g > %.3g", names[i], k,
                      o.policy, e, policies[p].bound);
        for (int64_t j = 0; j < castor_tensor_numel(y[k]); j++) /* ORT's zeros are castor's zeros */
          ck_assert_msg((ref[j] == 0) == (got[j] == 0), "%s output %d [%lld]: %g, ONNX Runtime %g", names[i], k,
                        (long long)j, got[j], ref[j]);
        castor_tensor_destroy(y[k]);
        y[k] = NULL;
      }
      if (p == 0) { /* lengths outside [0, T]: the run's error, the outputs untouched */
        int32_t *sl = castor_tensor_data(in[1]);
        static const int32_t bad[][2] = {{1, 7}, {2, -1}};
        for (int c = 0; c < 2; c++) {
          int32_t keep = sl[bad[c][0]];
          sl[bad[c][0]] = bad[c][1];
          ck_assert_int_eq(castor_program_run(prog, in, 2, y, n_out), CASTOR_ERR_INVALID_ARGUMENT);
          char want_msg[256];
          snprintf(want_msg, sizeof want_msg, "input 'sl' [%d] = %d is outside [0, 6], the sequence lengths of the 6 "
                   "steps that '%s' scans", bad[c][0], bad[c][1], i == 0 ? "lstm" : i == 1 ? "gru" : "rnn");
          ck_assert_msg(strstr(castor_context_last_error(ctx), want_msg), "%s", castor_context_last_error(ctx));
          for (int k = 0; k < n_out; k++) ck_assert_ptr_null(y[k]); /* nothing made */
          sl[bad[c][0]] = keep;
        }
      }
      castor_program_destroy(prog);
    }
    for (int k = 0; k < 2; k++) castor_tensor_destroy(in[k]);
    for (int k = 0; k < n_out; k++) castor_tensor_destroy(want[k]);
    castor_model_destroy(m);
  }
  castor_context_destroy(ctx);
}
END_TEST

static Suite *onnx_suite(void) {
  Suite *s = suite_create("onnx");
  TCase *tc = tcase_create("frontend");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_mlp_runs);
  tcase_add_test(tc, test_external_data);
  tcase_add_test(tc, test_truncated_and_wire_types);
  tcase_add_test(tc, test_bad_graphs);
  tcase_add_test(tc, test_exported_models);
  tcase_add_test(tc, test_static_threads);
  tcase_add_test(tc, test_layout_transposes);
  tcase_add_test(tc, test_avgpool_pads);
  tcase_add_test(tc, test_concat_parts_shared);
  tcase_add_test(tc, test_matmul_by_weight);
  tcase_add_test(tc, test_conv_errors);
  tcase_add_test(tc, test_rnn_errors); /* recurrent layers */
  tcase_add_test(tc, test_rnn_sequence_lens);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) { return check_run(onnx_suite()); }
