/* SPDX-License-Identifier: Apache-2.0 */
/*
 * check_frontend.c: Check suite of frontend/: the .cast language (the
 * DESIGN.md example, forward references, DAGs, Keras auto names, dtype
 * overrides), the Glorot init, safetensors loading (F32/F16/BF16 written by
 * the test, and every failure with its exact diagnostic), the golden error
 * cases of tests/golden/frontend-errors compared in process, and a seeded
 * mutation loop that must never crash and always explain a failure.
 */
#include "frontend/frontend.h"
#include "formats/safetensors.h"
#include "util/half.h"

#include <check.h>

#include "tests/unit/test_support.h"
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char design_example[] =
    "model mnist_mlp\n"
    "policy mixed_float16\n"
    "# weights \"mnist_mlp.safetensors\"      # optional; without it kernels get a seeded "
    "Glorot-uniform init\n"
    "\n"
    "digits      = input(shape=[784])                  # batch dimension is implicit and "
    "dynamic\n"
    "x           = dense(digits, units=4096, activation=relu, name=dense_1)\n"
    "x           = dense(x, units=4096, activation=relu, name=dense_2)\n"
    "logits      = dense(x, units=10, name=dense_logits)\n"
    "predictions = activation(logits, softmax, dtype=float32)\n"
    "output predictions\n";

/* ---- helpers ---- */

typedef struct loaded {
  diag_sink *d;
  ir_graph *g;
} loaded;

static loaded load_opts(const char *file, const char *text, const fe_options *o) {
  loaded r = {diag_sink_create(), NULL};
  r.g = fe_load_mem(file, text, strlen(text), o, r.d, NULL);
  return r;
}

static loaded load(const char *text) {
  fe_options o;
  fe_options_init(&o);
  return load_opts("t.cast", text, &o);
}

static void unload(loaded *r) {
  ir_graph_destroy(r->g);
  diag_sink_destroy(r->d);
}

/* One line per node: "%name = type op(%a, %b) {attr} # note [policy]", then
 * the outputs. ir_print belongs to ir/; this keeps the suite independent. */
static char *dump(const ir_graph *g) {
  str_buf b;
  str_buf_init(&b);
  str_buf_printf(&b, "model %s policy %s\n", g->name, ir_policy_name(g->policy));
  for (int i = 0; i < g->n_nodes; i++) {
    const ir_node *n = g->nodes[i];
    str_buf_printf(&b, "%%%s = ", n->name);
    ir_type_print(&n->type, &b);
    str_buf_printf(&b, " %s(", ir_op_name(n->op));
    for (int s = 0; s < n->n_srcs; s++) str_buf_printf(&b, "%s%%%s", s ? ", " : "", n->srcs[s]->name);
    str_buf_putc(&b, ')');
    if (n->op == IR_OP_INPUT) str_buf_printf(&b, " {index=%lld}", (long long)n->attr.index);
    if (n->op == IR_OP_CONST) str_buf_printf(&b, " {weight=%s}", n->attr.weight);
    if (n->op == IR_OP_MATMUL) str_buf_printf(&b, " {acc=%s}", dtype_name(n->attr.acc));
    str_buf_printf(&b, " # %s", n->note ? n->note : "-");
    if (n->policy != IR_POLICY_NONE) str_buf_printf(&b, " [%s]", ir_policy_name(n->policy));
    str_buf_putc(&b, '\n');
  }
  for (int i = 0; i < g->n_outputs; i++)
    str_buf_printf(&b, "output %s = %%%s\n", g->outputs[i].name, g->outputs[i].value->name);
  return str_buf_take(&b);
}

static void expect_graph(const char *text, const char *want) {
  loaded r = load(text);
  ck_assert_msg(r.g, "load failed:\n%s", diag_text(r.d));
  ck_assert_msg(diag_warning_count(r.d) == 0, "warnings:\n%s", diag_text(r.d));
  char *got = dump(r.g);
  ck_assert_str_eq(got, want);
  free(got);
  unload(&r);
}

static void expect_error(const char *text, const char *want) {
  loaded r = load(text);
  ck_assert_msg(!r.g, "load of\n%s\nsucceeded, wanted\n%s", text, want);
  ck_assert_str_eq(diag_text(r.d), want);
  unload(&r);
}

/* ---- the language ---- */

START_TEST(test_design_example) {
  expect_graph(design_example,
               "model mnist_mlp policy mixed_float16\n"
               "%digits = f32[N,784] input() {index=0} # digits\n"
               "%dense_1.kernel = f32[784,4096] const() {weight=dense_1.kernel} # dense_1\n"
               "%dense_1.bias = f32[4096] const() {weight=dense_1.bias} # dense_1\n"
               "%dense_1.matmul = f32[N,4096] matmul(%digits, %dense_1.kernel) {acc=f32} # dense_1\n"
               "%dense_1.bias_add = f32[N,4096] add(%dense_1.matmul, %dense_1.bias) # dense_1\n"
               "%dense_1 = f32[N,4096] relu(%dense_1.bias_add) # dense_1\n"
               "%dense_2.kernel = f32[4096,4096] const() {weight=dense_2.kernel} # dense_2\n"
               "%dense_2.bias = f32[4096] const() {weight=dense_2.bias} # dense_2\n"
               "%dense_2.matmul = f32[N,4096] matmul(%dense_1, %dense_2.kernel) {acc=f32} # dense_2\n"
               "%dense_2.bias_add = f32[N,4096] add(%dense_2.matmul, %dense_2.bias) # dense_2\n"
               "%dense_2 = f32[N,4096] relu(%dense_2.bias_add) # dense_2\n"
               "%dense_logits.kernel = f32[4096,10] const() {weight=dense_logits.kernel} # dense_logits\n"
               "%dense_logits.bias = f32[10] const() {weight=dense_logits.bias} # dense_logits\n"
               "%dense_logits.matmul = f32[N,10] matmul(%dense_2, %dense_logits.kernel) {acc=f32} # dense_logits\n"
               "%dense_logits = f32[N,10] add(%dense_logits.matmul, %dense_logits.bias) # dense_logits\n"
               "%activation = f32[N,10] softmax(%dense_logits) # activation [float32]\n"
               "output predictions = %activation\n");
}
END_TEST

START_TEST(test_locations_and_data) {
  loaded r = load(design_example);
  ck_assert_msg(r.g, "%s", diag_text(r.d));
  ir_node *mm = ir_graph_find(r.g, "dense_2.matmul");
  ck_assert_ptr_nonnull(mm);
  ck_assert_str_eq(mm->loc.file, "t.cast");
  ck_assert_int_eq(mm->loc.line, 7);
  ck_assert_int_eq(mm->loc.col, 15);
  ir_node *in = ir_graph_find(r.g, "digits");
  ck_assert_int_eq(in->loc.line, 5);
  ck_assert_int_eq(ir_graph_num_inputs(r.g), 1);
  for (int i = 0; i < r.g->n_nodes; i++) {
    ir_node *n = r.g->nodes[i];
    if (n->op != IR_OP_CONST) continue;
    ck_assert_msg(n->attr.data, "%%%s has no data", n->name);
    ck_assert_msg(((uintptr_t)n->attr.data & 63) == 0, "%%%s data not 64-aligned", n->name);
  }
  unload(&r);
}
END_TEST

START_TEST(test_forward_reference) {
  expect_graph("model fwd\n"
               "x = input(shape=[8])\n"
               "y = dense(h, units=4, use_bias=false, name=out)\n"
               "h = dense(x, units=6, activation=tanh)\n"
               "output y\n",
               "model fwd policy float32\n"
               "%x = f32[N,8] input() {index=0} # x\n"
               "%dense.kernel = f32[8,6] const() {weight=dense.kernel} # dense\n"
               "%dense.bias = f32[6] const() {weight=dense.bias} # dense\n"
               "%dense.matmul = f32[N,6] matmul(%x, %dense.kernel) {acc=f32} # dense\n"
               "%dense.bias_add = f32[N,6] add(%dense.matmul, %dense.bias) # dense\n"
               "%dense = f32[N,6] tanh(%dense.bias_add) # dense\n"
               "%out.kernel = f32[6,4] const() {weight=out.kernel} # out\n"
               "%out = f32[N,4] matmul(%dense, %out.kernel) {acc=f32} # out\n"
               "output y = %out\n");
}
END_TEST

START_TEST(test_rebinding_scopes) {
  /* x refers to the latest definition above; the output to the last x. */
  expect_graph("model chain\n"
               "x = input(shape=[3])\n"
               "x = activation(x, relu)\n"
               "x = activation(x, sigmoid)\n"
               "y = activation(x, linear)\n"
               "x = activation(x, gelu)\n"
               "output x, y\n",
               "model chain policy float32\n"
               "%x = f32[N,3] input() {index=0} # x\n"
               "%activation = f32[N,3] relu(%x) # activation\n"
               "%activation_1 = f32[N,3] sigmoid(%activation) # activation_1\n"
               "%activation_3 = f32[N,3] gelu(%activation_1) # activation_3\n"
               "output x = %activation_3\n"
               "output y = %activation_1\n");
}
END_TEST

START_TEST(test_dag) {
  expect_graph("model dag\n"
               "policy bfloat16\n"
               "x = input(shape=[8])\n"
               "q = input(shape=[8])\n"
               "a = dense(x, units=8, activation=relu)\n"
               "b = dense(x, units=8, activation=sigmoid, use_bias=false)\n"
               "s = add(a, b)\n"
               "p = multiply(s, q)\n"
               "output p, a\n",
               "model dag policy bfloat16\n"
               "%x = f32[N,8] input() {index=0} # x\n"
               "%q = f32[N,8] input() {index=1} # q\n"
               "%dense.kernel = f32[8,8] const() {weight=dense.kernel} # dense\n"
               "%dense.bias = f32[8] const() {weight=dense.bias} # dense\n"
               "%dense.matmul = f32[N,8] matmul(%x, %dense.kernel) {acc=f32} # dense\n"
               "%dense.bias_add = f32[N,8] add(%dense.matmul, %dense.bias) # dense\n"
               "%dense = f32[N,8] relu(%dense.bias_add) # dense\n"
               "%dense_1.kernel = f32[8,8] const() {weight=dense_1.kernel} # dense_1\n"
               "%dense_1.matmul = f32[N,8] matmul(%x, %dense_1.kernel) {acc=f32} # dense_1\n"
               "%dense_1 = f32[N,8] sigmoid(%dense_1.matmul) # dense_1\n"
               "%add = f32[N,8] add(%dense, %dense_1) # add\n"
               "%multiply = f32[N,8] mul(%add, %q) # multiply\n"
               "output p = %multiply\n"
               "output a = %dense\n");
}
END_TEST

START_TEST(test_auto_names_avoid_explicit) {
  /* Keras counts per kind; names the user took are skipped. */
  expect_graph("model names\n"
               "dense_2 = input(shape=[2])\n"
               "a = dense(dense_2, units=2, name=dense_1)\n"
               "b = dense(a, units=2)\n"
               "c = dense(b, units=2)\n"
               "d = dense(c, units=2, name=\"dense\")\n"
               "e = add(d, d)\n"
               "f = add(e, d, name=add_1)\n"
               "g = add(f, e)\n"
               "output g\n",
               "model names policy float32\n"
               "%dense_2 = f32[N,2] input() {index=0} # dense_2\n"
               "%dense_1.kernel = f32[2,2] const() {weight=dense_1.kernel} # dense_1\n"
               "%dense_1.bias = f32[2] const() {weight=dense_1.bias} # dense_1\n"
               "%dense_1.matmul = f32[N,2] matmul(%dense_2, %dense_1.kernel) {acc=f32} # dense_1\n"
               "%dense_1 = f32[N,2] add(%dense_1.matmul, %dense_1.bias) # dense_1\n"
               "%dense_3.kernel = f32[2,2] const() {weight=dense_3.kernel} # dense_3\n"
               "%dense_3.bias = f32[2] const() {weight=dense_3.bias} # dense_3\n"
               "%dense_3.matmul = f32[N,2] matmul(%dense_1, %dense_3.kernel) {acc=f32} # dense_3\n"
               "%dense_3 = f32[N,2] add(%dense_3.matmul, %dense_3.bias) # dense_3\n"
               "%dense_4.kernel = f32[2,2] const() {weight=dense_4.kernel} # dense_4\n"
               "%dense_4.bias = f32[2] const() {weight=dense_4.bias} # dense_4\n"
               "%dense_4.matmul = f32[N,2] matmul(%dense_3, %dense_4.kernel) {acc=f32} # dense_4\n"
               "%dense_4 = f32[N,2] add(%dense_4.matmul, %dense_4.bias) # dense_4\n"
               "%dense.kernel = f32[2,2] const() {weight=dense.kernel} # dense\n"
               "%dense.bias = f32[2] const() {weight=dense.bias} # dense\n"
               "%dense.matmul = f32[N,2] matmul(%dense_4, %dense.kernel) {acc=f32} # dense\n"
               "%dense = f32[N,2] add(%dense.matmul, %dense.bias) # dense\n"
               "%add = f32[N,2] add(%dense, %dense) # add\n"
               "%add_1 = f32[N,2] add(%add, %dense) # add_1\n"
               "%add_2 = f32[N,2] add(%add_1, %add) # add_2\n"
               "output g = %add_2\n");
}
END_TEST

START_TEST(test_dtype_override) {
  expect_graph("model over\n"
               "policy mixed_float16\n"
               "x = input(shape=[4], dtype=float32)\n"
               "y = dense(x, units=3, activation=softmax, dtype=mixed_bfloat16)\n"
               "z = activation(y, activation=tanh, name=t)\n"
               "w = multiply(z, z, dtype=\"float16\")\n"
               "output w\n",
               "model over policy mixed_float16\n"
               "%x = f32[N,4] input() {index=0} # x [float32]\n"
               "%dense.kernel = f32[4,3] const() {weight=dense.kernel} # dense [mixed_bfloat16]\n"
               "%dense.bias = f32[3] const() {weight=dense.bias} # dense [mixed_bfloat16]\n"
               "%dense.matmul = f32[N,3] matmul(%x, %dense.kernel) {acc=f32} # dense [mixed_bfloat16]\n"
               "%dense.bias_add = f32[N,3] add(%dense.matmul, %dense.bias) # dense [mixed_bfloat16]\n"
               "%dense = f32[N,3] softmax(%dense.bias_add) # dense [mixed_bfloat16]\n"
               "%t = f32[N,3] tanh(%dense) # t\n"
               "%multiply = f32[N,3] mul(%t, %t) # multiply [float16]\n"
               "output w = %multiply\n");
}
END_TEST

START_TEST(test_syntax_odds) {
  /* CRLF, tabs, trailing commas, comments everywhere, rank-3 input,
   * contextual keywords, an output of an input. */
  expect_graph("# leading comment\r\n"
               "\r\n"
               "model\todds   # trailing\r\n"
               "output = input(shape=[2, 3, 4,])\r\n"
               "model2 = activation(output, relu,)\r\n"
               "output model2, output\r\n",
               "model odds policy float32\n"
               "%output = f32[N,2,3,4] input() {index=0} # output\n"
               "%activation = f32[N,2,3,4] relu(%output) # activation\n"
               "output model2 = %activation\n"
               "output output = %output\n");
}
END_TEST

START_TEST(test_more_errors) {
  expect_error("model m\nx = input(shape=[4])\na = add(x, b)\nb = add(a, x)\noutput b\n",
               "t.cast:3:5: error: cycle in the model: a -> b -> a\n"
               "a = add(x, b)\n"
               "    ^\n"
               "t.cast:4:9: note: 'b' uses 'a' here\n"
               "b = add(a, x)\n"
               "        ^\n");
  expect_error("model m\nmodel n\nx = input(shape=[4])\noutput x\n",
               "t.cast:2:1: error: 'model' may appear only once\n"
               "model n\n"
               "^\n"
               "t.cast:1:1: note: first 'model' statement is here\n"
               "model m\n"
               "^\n");
  expect_error("model m\nx = input(shape=[4])\ny = add(x)\noutput y\n",
               "t.cast:3:5: error: add needs 2 inputs, got 1\n"
               "y = add(x)\n"
               "    ^\n");
  expect_error("model m\nx = input(shape=[4])\ny = dense(x, units=2, use_bias=yes)\noutput y\n",
               "t.cast:3:32: error: use_bias must be true or false, got 'yes'\n"
               "y = dense(x, units=2, use_bias=yes)\n"
               "                               ^\n");
  expect_error("model m\nx = input(shape=[4])\ny = dense(x, units=2, name=\"a b\")\noutput y\n",
               "t.cast:3:28: error: a layer name must be an identifier, got a string\n"
               "y = dense(x, units=2, name=\"a b\")\n"
               "                           ^\n");
  expect_error("model m\nweights \"a\\q\"\n",
               "t.cast:2:11: error: unknown escape sequence in string; only \\\" and \\\\ are "
               "allowed\n"
               "weights \"a\\q\"\n"
               "          ^\n"
               "t.cast:1:1: error: model 'm' has no output statement\n"
               "model m\n"
               "^\n");
  expect_error("model m\nx = input(shape=[4])\ny = activation(x)\noutput y\n",
               "t.cast:3:5: error: activation needs a function, e.g. activation(x, relu)\n"
               "y = activation(x)\n"
               "    ^\n");
  expect_error("model m\nx = input()\noutput x\n",
               "t.cast:2:5: error: input needs a shape, e.g. input(shape=[784])\n"
               "x = input()\n"
               "    ^\n");
  expect_error("model m\nx = input(shape=[[4]])\noutput x\n",
               "t.cast:2:18: error: a dimension must be a positive integer, got a list\n"
               "x = input(shape=[[4]])\n"
               "                 ^\n");
  expect_error("model m\nx = input(shape=[4])\ny = x\noutput y\n",
               "t.cast:3:6: error: expected '(' after 'x', got end of line\n"
               "y = x\n"
               "     ^\n");
  expect_error("model m\n\x01\noutput q\n",
               "t.cast:2:1: error: unexpected byte 0x01\n"
               "?\n"
               "^\n"
               "t.cast:3:8: error: use of undefined value 'q'\n"
               "output q\n"
               "       ^\n");
  /* A dense that would need more than FE_MAX_INIT_BYTES of Glorot init. */
  expect_error("model m\nx = input(shape=[65536])\ny = dense(x, units=32768)\noutput y\n",
               "t.cast:3:5: error: the weights of layer 'dense' take the model past 4 GiB, more "
               "than castor initializes without a weights file\n"
               "y = dense(x, units=32768)\n"
               "    ^\n");
}
END_TEST

START_TEST(test_error_limit) {
  str_buf b;
  str_buf_init(&b);
  str_buf_puts(&b, "model m\n");
  for (int i = 0; i < 100; i++) str_buf_printf(&b, "y%d = dense(q%d, units=1)\n", i, i);
  str_buf_puts(&b, "output y0\n");
  loaded r = load(str_buf_cstr(&b));
  ck_assert_ptr_null(r.g);
  ck_assert_int_eq(diag_error_count(r.d), 21); /* 20, then "too many errors" */
  ck_assert_msg(strstr(diag_text(r.d), "error: too many errors in 't.cast'; stopping\n"), "%s",
                diag_text(r.d));
  unload(&r);
  str_buf_fini(&b);
}
END_TEST

/* ---- Glorot init ---- */

static const float *const_data(const ir_graph *g, const char *name) {
  ir_node *n = ir_graph_find(g, name);
  ck_assert_msg(n && n->op == IR_OP_CONST, "no const %%%s", name);
  return n->attr.data;
}

/* Keras LayerNormalization with its defaults: the last axis, epsilon 1e-3,
 * gamma ones and beta zeros; automatic names per kind. */
START_TEST(test_layer_normalization) {
  const char *text = "model ln\n"
                     "x = input(shape=[3, 6])\n"
                     "y = layer_normalization(x)\n"
                     "z = layer_normalization(y, dtype=float32)\n"
                     "output z\n";
  expect_graph(text, "model ln policy float32\n"
                     "%x = f32[N,3,6] input() {index=0} # x\n"
                     "%layer_normalization.gamma = f32[6] const() {weight=layer_normalization.gamma} # layer_normalization\n"
                     "%layer_normalization.beta = f32[6] const() {weight=layer_normalization.beta} # layer_normalization\n"
                     "%layer_normalization = f32[N,3,6] layer_norm(%x, %layer_normalization.gamma, "
                     "%layer_normalization.beta) # layer_normalization\n"
                     "%layer_normalization_1.gamma = f32[6] const() {weight=layer_normalization_1.gamma} "
                     "# layer_normalization_1 [float32]\n"
                     "%layer_normalization_1.beta = f32[6] const() {weight=layer_normalization_1.beta} "
                     "# layer_normalization_1 [float32]\n"
                     "%layer_normalization_1 = f32[N,3,6] layer_norm(%layer_normalization, %layer_normalization_1.gamma, "
                     "%layer_normalization_1.beta) # layer_normalization_1 [float32]\n"
                     "output z = %layer_normalization_1\n");
  loaded r = load(text);
  ck_assert_msg(r.g, "%s", diag_text(r.d));
  const float *gamma = const_data(r.g, "layer_normalization.gamma"), *beta = const_data(r.g, "layer_normalization.beta");
  for (int i = 0; i < 6; i++) ck_assert_msg(gamma[i] == 1.0f && beta[i] == 0.0f, "gamma[%d] %g, beta[%d] %g", i, gamma[i], i, beta[i]);
  const ir_node *n = r.g->outputs[0].value;
  ck_assert_msg(n->attr.axis == -1 && n->attr.epsilon == 1e-3, "axis %lld, epsilon %g", (long long)n->attr.axis,
                n->attr.epsilon);
  unload(&r);
}
END_TEST

START_TEST(test_glorot) {
  const char *text = "model m\nx = input(shape=[300])\ny = dense(x, units=100, name=d)\noutput y\n";
  const char *text2 = "model m\nx = input(shape=[300])\nz = dense(x, units=7)\n"
                      "y = dense(x, units=100, name=d)\noutput y, z\n";
  fe_options o;
  fe_options_init(&o);
  o.seed = 42;
  loaded a = load_opts("a.cast", text, &o), b = load_opts("b.cast", text2, &o);
  o.seed = 43;
  loaded c = load_opts("c.cast", text, &o);
  ck_assert_msg(a.g && b.g && c.g, "%s%s%s", diag_text(a.d), diag_text(b.d), diag_text(c.d));
  const float *ka = const_data(a.g, "d.kernel"), *kb = const_data(b.g, "d.kernel");
  const float *kc = const_data(c.g, "d.kernel"), *bias = const_data(a.g, "d.bias");
  /* Seeded by (seed ^ hash(key)): the same whatever else is in the model. */
  ck_assert_msg(memcmp(ka, kb, 300 * 100 * sizeof(float)) == 0, "init depends on other layers");
  ck_assert_msg(memcmp(ka, kc, 300 * 100 * sizeof(float)) != 0, "seed ignored");
  double limit = sqrt(6.0 / (300 + 100)), sum = 0, sum2 = 0;
  float lo = 1, hi = -1;
  for (int i = 0; i < 300 * 100; i++) {
    ck_assert_msg(fabsf(ka[i]) <= limit, "kernel[%d] = %g beyond %g", i, ka[i], limit);
    sum += ka[i], sum2 += (double)ka[i] * ka[i];
    if (ka[i] < lo) lo = ka[i];
    if (ka[i] > hi) hi = ka[i];
  }
  /* U(-l, l): mean 0, variance l^2/3; and it spans the interval. */
  double mean = sum / 30000, var = sum2 / 30000 - mean * mean;
  ck_assert_msg(fabs(mean) < 0.01 * limit * 3, "mean %g", mean);
  ck_assert_msg(fabs(var / (limit * limit / 3) - 1) < 0.05, "variance %g", var);
  ck_assert_msg(lo < -0.99 * limit && hi > 0.99 * limit, "range [%g, %g]", lo, hi);
  for (int i = 0; i < 100; i++) ck_assert_msg(bias[i] == 0.0f, "bias[%d] = %g", i, bias[i]);
  /* Exact reproducibility of the first value, from util's PRNG. */
  rng r;
  rng_init(&r, 42 ^ str_hash("d.kernel"));
  ck_assert_msg(ka[0] == rng_uniform_f32(&r, (float)-limit, (float)limit), "first value");
  unload(&a);
  unload(&b);
  unload(&c);
}
END_TEST

/* Keras's LSTM/GRU initializers without a weights file: the input kernel
 * Glorot-uniform, the recurrent kernel orthogonal ([units, G units]:
 * orthonormal rows; [H, H] of a SimpleRNN: orthogonal), an LSTM's bias
 * ones for the forget gate's units only, a GRU's zeros. */
static void expect_orthonormal_rows(const float *w, int rows, int cols, const char *what) {
  for (int a = 0; a < rows; a++)
    for (int b = a; b < rows; b++) {
      double dot = 0;
      for (int j = 0; j < cols; j++) dot += (double)w[a * cols + j] * w[b * cols + j];
      ck_assert_msg(fabs(dot - (a == b)) < 1e-5, "%s: rows %d and %d: dot %g", what, a, b, dot);
    }
}

START_TEST(test_recurrent_init) {
  const char *text = "model m\nx = input(shape=[5, 3])\nh = lstm(x, units=6, name=l)\n"
                     "g = gru(x, units=4, name=g)\ns = simple_rnn(x, units=5, name=s)\noutput h, g, s\n";
  fe_options o;
  fe_options_init(&o);
  o.seed = 7;
  loaded a = load_opts("a.cast", text, &o), b = load_opts("b.cast", text, &o);
  o.seed = 8;
  loaded c = load_opts("c.cast", text, &o);
  ck_assert_msg(a.g && b.g && c.g, "%s%s%s", diag_text(a.d), diag_text(b.d), diag_text(c.d));
  const float *rk = const_data(a.g, "l.recurrent_kernel"), *bias = const_data(a.g, "l.bias");
  expect_orthonormal_rows(rk, 6, 24, "lstm [6,24]");
  expect_orthonormal_rows(const_data(a.g, "g.recurrent_kernel"), 4, 12, "gru [4,12]");
  expect_orthonormal_rows(const_data(a.g, "s.recurrent_kernel"), 5, 5, "simple_rnn [5,5]");
  ck_assert_msg(memcmp(rk, const_data(b.g, "l.recurrent_kernel"), 6 * 24 * sizeof(float)) == 0, "not reproducible");
  ck_assert_msg(memcmp(rk, const_data(c.g, "l.recurrent_kernel"), 6 * 24 * sizeof(float)) != 0, "seed ignored");
  for (int i = 0; i < 24; i++)
    ck_assert_msg(bias[i] == (i >= 6 && i < 12 ? 1.0f : 0.0f), "lstm bias[%d] = %g (gates i, f, c, o)", i, bias[i]);
  const float *gb = const_data(a.g, "g.bias");
  for (int i = 0; i < 2 * 12; i++) ck_assert_msg(gb[i] == 0.0f, "gru bias[%d] = %g", i, gb[i]);
  /* the input kernel stays Glorot-uniform: within its limit, not orthonormal */
  const float *k = const_data(a.g, "l.kernel");
  double limit = sqrt(6.0 / (3 + 24));
  for (int i = 0; i < 3 * 24; i++) ck_assert_msg(fabsf(k[i]) <= limit, "kernel[%d] = %g", i, k[i]);
  unload(&a);
  unload(&b);
  unload(&c);
  /* past the QR's cost bound: Glorot-uniform, and a warning that says so */
  loaded big = load_opts("big.cast", "model m\nx = input(shape=[2, 3])\nh = lstm(x, units=900, name=l)\noutput h\n", &o);
  ck_assert_msg(big.g, "%s", diag_text(big.d));
  ck_assert_msg(strstr(diag_text(big.d), "big.cast:3:5: warning: layer 'l': 'l.recurrent_kernel' [900,3600] starts "
                                         "Glorot-uniform, not orthogonal as in Keras"),
                "%s", diag_text(big.d));
  unload(&big);
}
END_TEST

/* ---- safetensors ---- */

static char tmpdir[256];

static void make_tmpdir(void) {
  const char *base = getenv("TMPDIR");
  snprintf(tmpdir, sizeof tmpdir, "%s/castor_fe_XXXXXX", base && *base ? base : "/tmp");
  ck_assert_msg(mkdtemp(tmpdir), "mkdtemp failed");
}

static void remove_tmpdir(void) {
  DIR *dir = opendir(tmpdir);
  if (!dir) return;
  struct dirent *e;
  while ((e = readdir(dir))) {
    if (e->d_name[0] == '.') continue;
    char p[512];
    snprintf(p, sizeof p, "%s/%s", tmpdir, e->d_name);
    unlink(p);
  }
  closedir(dir);
  rmdir(tmpdir);
}

static char *tmp_path(const char *name) {
  size_t n = strlen(tmpdir) + strlen(name) + 2;
  char *p = malloc(n);
  snprintf(p, n, "%s/%s", tmpdir, name);
  return p;
}

static void write_file(const char *name, const void *data, size_t len) {
  char *p = tmp_path(name);
  FILE *f = fopen(p, "wb");
  ck_assert_msg(f, "cannot write %s", p);
  ck_assert_int_eq(fwrite(data, 1, len, f), len);
  fclose(f);
  free(p);
}

/* Writes a safetensors file: `header` is the JSON, `hlen_override` (if not
 * 0) the length written in front of it, `data` the data section. */
static void write_st(const char *name, const char *header, uint64_t hlen_override,
                     const void *data, size_t data_len) {
  size_t hlen = strlen(header);
  uint64_t h = hlen_override ? hlen_override : hlen;
  unsigned char *buf = malloc(8 + hlen + data_len + 1);
  for (int i = 0; i < 8; i++) buf[i] = (unsigned char)(h >> (8 * i));
  memcpy(buf + 8, header, hlen);
  if (data_len) memcpy(buf + 8 + hlen, data, data_len);
  write_file(name, buf, 8 + hlen + data_len);
  free(buf);
}

static const char st_model[] = "model m\n"
                               "weights \"w.safetensors\"\n"
                               "x = input(shape=[3])\n"
                               "y = dense(x, units=2, name=d)\n"
                               "output y\n";

/* Loads st_model from the temp dir; returns the graph or NULL. */
static loaded load_st(void) {
  char *model = tmp_path("model.cast");
  fe_options o;
  fe_options_init(&o);
  loaded r = load_opts(model, st_model, &o);
  free(model);
  return r;
}

static const float kernel_vals[6] = {1.5f, -2.25f, 0.1f, 3e-5f, -65504.0f, 0.33333334f};
static const float bias_vals[2] = {0.5f, -0.125f};

START_TEST(test_safetensors_dtypes) {
  static const char *const dtypes[] = {"F32", "F16", "BF16"};
  for (int t = 0; t < 3; t++) {
    make_tmpdir();
    unsigned char data[64];
    size_t esize = t == 0 ? 4 : 2, off = 0;
    float want_k[6], want_b[2];
    const float *src[2] = {kernel_vals, bias_vals};
    float *want[2] = {want_k, want_b};
    int counts[2] = {6, 2};
    for (int w = 0; w < 2; w++)
      for (int i = 0; i < counts[w]; i++) {
        float v = src[w][i];
        uint32_t bits;
        if (t == 0) memcpy(&bits, &v, 4), want[w][i] = v;
        else if (t == 1) bits = half_f32_to_f16(v), want[w][i] = half_f16_to_f32((uint16_t)bits);
        else bits = half_f32_to_bf16(v), want[w][i] = half_bf16_to_f32((uint16_t)bits);
        for (size_t k = 0; k < esize; k++) data[off++] = (unsigned char)(bits >> (8 * k));
      }
    char header[512];
    snprintf(header, sizeof header,
             "{\"__metadata__\": {\"format\": \"pt\", \"note\": \"caf\\u00e9 \\\"q\\\"\"}, "
             "\"d.bias\": {\"dtype\": \"%s\", \"shape\": [2], \"data_offsets\": [%zu, %zu]}, "
             "\"d.kernel\":{\"dtype\":\"%s\",\"shape\":[3,2],\"data_offsets\":[0,%zu]}}   ",
             dtypes[t], 6 * esize, 8 * esize, dtypes[t], 6 * esize);
    write_st("w.safetensors", header, 0, data, off);
    loaded r = load_st();
    ck_assert_msg(r.g, "%s: %s", dtypes[t], diag_text(r.d));
    ck_assert_str_eq(diag_text(r.d), "");
    const float *k = const_data(r.g, "d.kernel"), *b = const_data(r.g, "d.bias");
    for (int i = 0; i < 6; i++)
      ck_assert_msg(memcmp(&k[i], &want_k[i], 4) == 0, "%s kernel[%d] = %g, want %g", dtypes[t],
                    i, k[i], want_k[i]);
    for (int i = 0; i < 2; i++)
      ck_assert_msg(b[i] == want_b[i], "%s bias[%d] = %g", dtypes[t], i, b[i]);
    unload(&r);
    remove_tmpdir();
  }
}
END_TEST

START_TEST(test_safetensors_extra_and_override) {
  make_tmpdir();
  float data[10] = {0};
  write_st("other.safetensors",
           "{\"d.kernel\":{\"dtype\":\"F32\",\"shape\":[3,2],\"data_offsets\":[0,24]},"
           "\"d.bias\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[24,32]},"
           "\"spare\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[32,40]},"
           "\"empty\":{\"dtype\":\"F16\",\"shape\":[0,3],\"data_offsets\":[40,40]}}",
           0, data, sizeof data);
  /* The option wins over the model's (missing) w.safetensors. */
  char *path = tmp_path("other.safetensors");
  char *model = tmp_path("model.cast");
  fe_options o;
  fe_options_init(&o);
  o.weights_path = path;
  loaded r = load_opts(model, st_model, &o);
  ck_assert_msg(r.g, "%s", diag_text(r.d));
  char want[1024];
  snprintf(want, sizeof want,
           "warning: weights file '%s' has tensor 'spare', which the model does not use\n"
           "warning: weights file '%s' has tensor 'empty', which the model does not use\n",
           path, path);
  ck_assert_str_eq(diag_text(r.d), want);
  unload(&r);
  free(path);
  free(model);
  remove_tmpdir();
}
END_TEST

/* One failure case: the file's bytes and the exact message. */
typedef struct st_case {
  const char *what;
  const char *header;
  uint64_t hlen; /* 0: the header's length */
  size_t data_len;
  const char *message; /* %1$s: the weights path */
} st_case;

static const st_case st_cases[] = {
    {"truncated", "{\"d.kernel\":", 1000, 8,
     "weights file '%s' is truncated: header says 1000 bytes, file has 20 after the length"},
    {"length past the file", "{}", 0xffffffffffffull, 0,
     "weights file '%s' is truncated: header says 281474976710655 bytes, file has 2 after the "
     "length"},
    {"corrupt json", "{\"d.kernel\" {\"dtype\":\"F32\"}}", 0, 0,
     "corrupt safetensors header in '%s' at byte 20: expected ':', got '{'"},
    {"not an object", "[1, 2]", 0, 0,
     "corrupt safetensors header in '%s' at byte 8: expected '{', got '['"},
    {"cut json", "{\"d.kernel\": {\"dtype\": \"F32\", ", 0, 0,
     "corrupt safetensors header in '%s' at byte 38: expected '\"', got the end of the header"},
    {"trailing garbage", "{} x", 0, 0,
     "corrupt safetensors header in '%s' at byte 11: unexpected data after the header object"},
    {"duplicate key",
     "{\"a\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4]},"
     "\"a\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4]}}", 0, 4,
     "corrupt safetensors header in '%s' at byte 61: duplicate key 'a'"},
    {"offsets out of range",
     "{\"d.kernel\":{\"dtype\":\"F32\",\"shape\":[3,2],\"data_offsets\":[0,24]},"
     "\"d.bias\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[24,32]}}", 0, 28,
     "corrupt safetensors header in '%s' at byte 123: tensor 'd.bias' has data_offsets [24, 32] "
     "beyond the 28-byte data section"},
    {"offsets disagree with the shape",
     "{\"d.kernel\":{\"dtype\":\"F32\",\"shape\":[3,2],\"data_offsets\":[0,20]}}", 0, 24,
     "corrupt safetensors header in '%s' at byte 64: tensor 'd.kernel' has data_offsets [0, 20] "
     "but shape [3,2] of F32 needs 24 bytes"},
    {"overlap",
     "{\"d.kernel\":{\"dtype\":\"F32\",\"shape\":[3,2],\"data_offsets\":[0,24]},"
     "\"d.bias\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[20,28]}}", 0, 28,
     "tensors 'd.kernel' and 'd.bias' in '%s' overlap in the data section"},
    {"shape overflow",
     "{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,0]}}", 0, 0,
     "corrupt safetensors header in '%s' at byte 36: shape of tensor 'a' overflows"},
    {"missing field", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1]}}", 0, 0,
     "corrupt safetensors header in '%s' at byte 13: tensor 'a' has no 'data_offsets'"},
    {"unsupported dtype",
     "{\"d.kernel\":{\"dtype\":\"I64\",\"shape\":[3,2],\"data_offsets\":[0,48]}}", 0, 48,
     "unsupported dtype I64 of tensor 'd.kernel' in '%s' at byte 29; castor reads F32, F16 and "
     "BF16"},
    {"bad metadata", "{\"__metadata__\":{\"a\":1}}", 0, 0,
     "corrupt safetensors header in '%s' at byte 24: __metadata__ must map strings to strings"},
    {"float shape", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,4]}}", 0, 4,
     "corrupt safetensors header in '%s' at byte 37: shape of tensor 'a' must hold non-negative "
     "integers"},
    {"bad escape", "{\"a\\x\":1}", 0, 0,
     "corrupt safetensors header in '%s' at byte 11: invalid escape sequence in a string"},
};

START_TEST(test_safetensors_errors) {
  for (size_t c = 0; c < sizeof st_cases / sizeof *st_cases; c++) {
    const st_case *sc = &st_cases[c];
    make_tmpdir();
    unsigned char data[64] = {0};
    write_st("w.safetensors", sc->header, sc->hlen, data, sc->data_len);
    loaded r = load_st();
    ck_assert_msg(!r.g, "%s: loaded", sc->what);
    char *wpath = tmp_path("w.safetensors"), *model = tmp_path("model.cast");
    str_buf want;
    str_buf_init(&want);
    str_buf_printf(&want, "%s:2:1: error: ", model);
    str_buf_printf(&want, sc->message, wpath);
    str_buf_puts(&want, "\nweights \"w.safetensors\"\n^\n");
    ck_assert_msg(str_eq(diag_text(r.d), str_buf_cstr(&want)), "%s:\ngot  %s\nwant %s", sc->what,
                  diag_text(r.d), str_buf_cstr(&want));
    str_buf_fini(&want);
    free(wpath);
    free(model);
    unload(&r);
    remove_tmpdir();
  }
}
END_TEST

START_TEST(test_safetensors_model_mismatch) {
  make_tmpdir();
  char *wpath = tmp_path("w.safetensors"), *model = tmp_path("model.cast");
  float data[16] = {0};
  char want[2048];

  /* Wrong kernel shape; the bias is missing. */
  write_st("w.safetensors",
           "{\"d.kernel\":{\"dtype\":\"F32\",\"shape\":[3,4],\"data_offsets\":[0,48]}}", 0, data,
           48);
  loaded r = load_st();
  ck_assert_ptr_null(r.g);
  snprintf(want, sizeof want,
           "%s:2:1: error: weight 'd.kernel' has shape [3,4] but the model needs [3,2]\n"
           "weights \"w.safetensors\"\n^\n"
           "%s:4:5: note: layer 'd' is declared here\n"
           "y = dense(x, units=2, name=d)\n    ^\n"
           "%s:2:1: error: weights file '%s' has no tensor 'd.bias'\n"
           "weights \"w.safetensors\"\n^\n"
           "%s:4:5: note: layer 'd' is declared here\n"
           "y = dense(x, units=2, name=d)\n    ^\n",
           model, model, model, wpath, model);
  ck_assert_str_eq(diag_text(r.d), want);
  unload(&r);

  /* Too short to hold the length; and no file at all. */
  write_st("w.safetensors", "", 0, data, 0);
  write_file("w.safetensors", "abc", 3);
  r = load_st();
  snprintf(want, sizeof want,
           "%s:2:1: error: weights file '%s' is too short: 3 bytes, but a safetensors file "
           "starts with an 8-byte header length\nweights \"w.safetensors\"\n^\n",
           model, wpath);
  ck_assert_str_eq(diag_text(r.d), want);
  unload(&r);
  unlink(wpath);
  r = load_st();
  snprintf(want, sizeof want,
           "%s:2:1: error: cannot read weights file '%s': No such file or directory\n"
           "weights \"w.safetensors\"\n^\n",
           model, wpath);
  ck_assert_str_eq(diag_text(r.d), want);
  unload(&r);
  free(wpath);
  free(model);
  remove_tmpdir();
}
END_TEST

/* Only regular files are read, and only as far as the header declares:
 * a device, a directory or a FIFO is refused unread (no hang, no memory
 * growth), and a file whose data section runs on (here 1 GiB of sparse
 * zeros after the two tensors) costs only the tensors' bytes. */
START_TEST(test_safetensors_declared_size) {
  make_tmpdir();
  char *wpath = tmp_path("w.safetensors"), *model = tmp_path("model.cast"), want[2048];
  float data[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  write_st("w.safetensors",
           "{\"d.kernel\":{\"dtype\":\"F32\",\"shape\":[3,2],\"data_offsets\":[0,24]},"
           "\"d.bias\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[24,32]}}",
           0, data, sizeof data);
  ck_assert(truncate(wpath, (off_t)1 << 30) == 0);
  diag_sink *d = diag_sink_create();
  safetensors_file st;
  ck_assert_msg(safetensors_read(wpath, (diag_loc){0}, d, &st), "%s", diag_text(d));
  ck_assert_uint_eq(st.blob_len, 32);
  ck_assert(st.n_tensors == 2 && memcmp(st.tensors[1].data, data + 6, 8) == 0);
  safetensors_fini(&st);
  diag_sink_destroy(d);
  loaded r = load_st();
  ck_assert_msg(r.g, "%s", diag_text(r.d));
  unload(&r);

  /* /dev/zero, a directory and a FIFO without a writer, as `weights` */
  const char *const bad[][2] = {{"/dev/zero", "a character device"},
                                {NULL, "a directory"},
                                {NULL, "a pipe"}};
  char *fifo = tmp_path("fifo");
  ck_assert(mkfifo(fifo, 0600) == 0);
  for (int i = 0; i < 3; i++) {
    const char *path = i == 0 ? bad[0][0] : i == 1 ? tmpdir : fifo;
    fe_options o;
    fe_options_init(&o);
    o.weights_path = path;
    r = load_opts(model, st_model, &o);
    ck_assert_ptr_null(r.g);
    snprintf(want, sizeof want, "error: cannot read weights file '%s': not a regular file (%s)\n", path,
             bad[i][1]);
    ck_assert_str_eq(diag_text(r.d), want);
    unload(&r);
  }
  free(fifo);
  free(wpath);
  free(model);
  remove_tmpdir();
}
END_TEST

/* fe_load picks the frontend by content, not name: a ZIP is a Keras
 * archive, HDF5 a legacy Keras file (refused with how to re-save it), a
 * protobuf an ONNX model (not supported yet), even named .cast; text is
 * .cast whatever its name. */
START_TEST(test_sniff) {
  static const struct {
    const char *bytes;
    size_t len;
    fe_format want;
    const char *msg;
    diag_kind kind;
  } cases[] = {
      {"PK\x03\x04\x14\0", 6, FE_FORMAT_KERAS,
       "m.cast: error: not a valid .keras archive: at byte 0: truncated: 6 bytes is shorter than "
       "the end-of-central-directory record\n", DIAG_KIND_UNSPECIFIED},
      {"\x89HDF\r\n\x1a\n", 8, FE_FORMAT_KERAS,
       "m.cast: error: 'm.cast' is an HDF5 file: a legacy Keras (.h5) model or a weights file; "
       "castor reads Keras 3 .keras archives (in Keras 3: "
       "keras.models.load_model(\"model.h5\").save(\"model.keras\"))\n", DIAG_KIND_UNSUPPORTED},
      {"\x08\x07\x12\x07pytorch", 11, FE_FORMAT_ONNX,
       "m.cast: error: 'm.cast': the model has no graph (is it an ONNX model?)\n", DIAG_KIND_UNSPECIFIED},
      {"model m\n", 8, FE_FORMAT_CAST, NULL, 0},
      {"PK", 2, FE_FORMAT_CAST, NULL, 0},
      {"", 0, FE_FORMAT_CAST, NULL, 0},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    ck_assert_msg(fe_sniff(cases[i].bytes, cases[i].len) == cases[i].want, "case %zu", i);
    if (!cases[i].msg) continue;
    diag_sink *d = diag_sink_create();
    ck_assert_ptr_null(fe_load_mem("m.cast", cases[i].bytes, cases[i].len, NULL, d, NULL));
    ck_assert_str_eq(diag_text(d), cases[i].msg);
    ck_assert_int_eq(diag_first_error_kind(d), cases[i].kind);
    diag_sink_destroy(d);
  }
  /* the training defaults come back through the seam */
  diag_sink *d = diag_sink_create();
  const char *text = "model m\ncompile loss=mse, optimizer=adam\nx = input(shape=[2])\n"
                     "y = dense(x, units=1)\noutput y\n";
  fe_train_defaults td;
  ir_graph *g = fe_load_mem("any.name", text, strlen(text), NULL, d, &td);
  ck_assert_msg(g != NULL, "%s", diag_text(d));
  ck_assert(td.present);
  ck_assert_str_eq(td.loss, "mse");
  ck_assert_str_eq(td.optimizer, "adam");
  ir_graph_destroy(g);
  diag_sink_destroy(d);
}
END_TEST

/* A model file is read only if it is a regular file of at most
 * FE_MAX_MODEL_BYTES (checked before reading) or a pipe. */
START_TEST(test_model_file_limits) {
  make_tmpdir();
  char *big = tmp_path("big.cast"), want[1024];
  write_file("big.cast", "model m\n", 8);
  ck_assert(truncate(big, FE_MAX_MODEL_BYTES + 1) == 0);
  const char *const paths[] = {big, "/dev/zero"};
  for (int i = 0; i < 2; i++) {
    diag_sink *d = diag_sink_create();
    ck_assert_ptr_null(fe_load(paths[i], NULL, d, NULL));
    if (i == 0)
      snprintf(want, sizeof want,
               "error: cannot read model file '%s': it has 16777217 bytes, more than the limit of "
               "16777216 (16 MiB)\n",
               big);
    else
      snprintf(want, sizeof want, "error: cannot read model file '/dev/zero': not a regular file (a character device)\n");
    ck_assert_str_eq(diag_text(d), want);
    diag_sink_destroy(d);
  }
  free(big);
  remove_tmpdir();
}
END_TEST

START_TEST(test_safetensors_api) {
  make_tmpdir();
  uint16_t h[4] = {0x3c00, 0xc000, 0x7bff, 0x0001}; /* 1, -2, 65504, smallest subnormal */
  write_st("h.safetensors", "{\"h\":{\"dtype\":\"F16\",\"shape\":[2,1,2],\"data_offsets\":[0,8]}}",
           0, h, sizeof h);
  char *p = tmp_path("h.safetensors");
  diag_sink *d = diag_sink_create();
  safetensors_file st;
  ck_assert_msg(safetensors_read(p, (diag_loc){0}, d, &st), "%s", diag_text(d));
  ck_assert_int_eq(st.n_tensors, 1);
  const safetensors_tensor *t = safetensors_find(&st, "h");
  ck_assert_ptr_nonnull(t);
  ck_assert_ptr_null(safetensors_find(&st, "g"));
  ck_assert_int_eq(t->dtype, DT_F16);
  ck_assert_int_eq(t->rank, 3);
  ck_assert_int_eq(t->dims[0] * t->dims[1] * t->dims[2], 4);
  ck_assert_int_eq(t->nbytes, 8);
  ck_assert_mem_eq(t->data, h, 8);
  safetensors_fini(&st);
  diag_sink_destroy(d);
  free(p);
  remove_tmpdir();
}
END_TEST

/* ---- the golden error cases, in process ---- */

static char *read_all(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  str_buf b;
  str_buf_init(&b);
  char chunk[4096];
  size_t n;
  while ((n = fread(chunk, 1, sizeof chunk, f)) > 0) str_buf_append(&b, chunk, n);
  fclose(f);
  return str_buf_take(&b);
}

START_TEST(test_golden_errors) {
  const char *dirpath = CASTOR_SOURCE_DIR "/tests/golden/frontend-errors";
  DIR *dir = opendir(dirpath);
  ck_assert_msg(dir, "cannot open %s", dirpath);
  struct dirent *e;
  int n_cases = 0;
  while ((e = readdir(dir))) {
    size_t len = strlen(e->d_name);
    if (len < 6 || strcmp(e->d_name + len - 5, ".cast") != 0) continue;
    char path[1024], exp_path[1024];
    snprintf(path, sizeof path, "%s/%s", dirpath, e->d_name);
    snprintf(exp_path, sizeof exp_path, "%s/%.*s.expected", dirpath, (int)(len - 5), e->d_name);
    char *text = read_all(path), *want = read_all(exp_path);
    ck_assert_msg(text && want, "%s: missing its .expected", e->d_name);
    ck_assert_msg(strstr(text, "# EXIT: 1\n"), "%s: no '# EXIT: 1'", e->d_name);
    loaded r = {diag_sink_create(), NULL};
    r.g = fe_load_mem(e->d_name, text, strlen(text), NULL, r.d, NULL);
    ck_assert_msg(!r.g, "%s: loaded", e->d_name);
    ck_assert_msg(str_eq(diag_text(r.d), want), "%s:\n--- got\n%s--- want\n%s", e->d_name,
                  diag_text(r.d), want);
    unload(&r);
    free(text);
    free(want);
    n_cases++;
  }
  closedir(dir);
  ck_assert_msg(n_cases >= 18, "only %d golden cases", n_cases);
}
END_TEST

/* ---- robustness: seeded mutations of the example ---- */

START_TEST(test_mutations) {
  /* The example with small layers, so successful loads stay cheap. */
  static const char base[] =
      "model mnist_mlp\n"
      "policy mixed_float16\n"
      "# weights \"mnist_mlp.safetensors\"      # optional\n"
      "\n"
      "digits      = input(shape=[784])                  # batch dimension is implicit\n"
      "x           = dense(digits, units=40, activation=relu, name=dense_1)\n"
      "x           = dense(x, units=40, activation=relu, name=dense_2)\n"
      "logits      = dense(x, units=10, name=dense_logits)\n"
      "predictions = activation(logits, softmax, dtype=float32)\n"
      "output predictions\n";
  static const char alphabet[] = "()[],=\"#\n\\ -0123456789xyz_\xff\xc3\xa9\x80";
  rng r;
  rng_init(&r, 20240601);
  size_t n = sizeof base - 1;
  int ok = 0, failed = 0;
  for (int iter = 0; iter < 200; iter++) {
    char buf[sizeof base + 64];
    memcpy(buf, base, n);
    size_t len = n;
    int edits = 1 + (int)(rng_next(&r) % 4);
    for (int e = 0; e < edits; e++) {
      size_t at = len ? rng_next(&r) % len : 0;
      char c = alphabet[rng_next(&r) % (sizeof alphabet - 1)];
      switch (rng_next(&r) % 5) {
      case 0: buf[at] = c; break;                                               /* replace */
      case 1: memmove(buf + at, buf + at + 1, len - at - 1), len--; break;     /* delete */
      case 2:                                                                   /* insert */
        if (len < sizeof buf - 1) memmove(buf + at + 1, buf + at, len - at), buf[at] = c, len++;
        break;
      case 3: len = at; break;                                                  /* truncate */
      case 4: buf[at] = (char)(rng_next(&r) & 0xff); break;                     /* any byte */
      }
    }
    diag_sink *d = diag_sink_create();
    fe_options o;
    fe_options_init(&o);
    ir_graph *g = fe_load_mem("fuzz.cast", buf, len, &o, d, NULL);
    if (g) {
      ok++;
      ck_assert_msg(g->n_outputs > 0 && diag_error_count(d) == 0, "iteration %d", iter);
    } else {
      failed++;
      ck_assert_msg(diag_error_count(d) > 0 && strstr(diag_text(d), "error: "),
                    "iteration %d failed without an error:\n%.*s", iter, (int)len, buf);
    }
    ir_graph_destroy(g);
    diag_sink_destroy(d);
  }
  ck_assert_msg(ok > 0 && failed > 0, "mutations: %d loaded, %d failed", ok, failed);
}
END_TEST

static Suite *frontend_suite(void) {
  Suite *s = suite_create("frontend");
  TCase *lang = tcase_create("language");
  tcase_add_test(lang, test_design_example);
  tcase_add_test(lang, test_locations_and_data);
  tcase_add_test(lang, test_forward_reference);
  tcase_add_test(lang, test_rebinding_scopes);
  tcase_add_test(lang, test_dag);
  tcase_add_test(lang, test_auto_names_avoid_explicit);
  tcase_add_test(lang, test_dtype_override);
  tcase_add_test(lang, test_layer_normalization);
  tcase_add_test(lang, test_syntax_odds);
  tcase_add_test(lang, test_more_errors);
  tcase_add_test(lang, test_error_limit);
  tcase_add_test(lang, test_golden_errors);
  tcase_set_timeout(lang, 60);
  suite_add_tcase(s, lang);
  TCase *w = tcase_create("weights");
  tcase_add_test(w, test_glorot);
  tcase_add_test(w, test_recurrent_init);
  tcase_add_test(w, test_safetensors_dtypes);
  tcase_add_test(w, test_safetensors_extra_and_override);
  tcase_add_test(w, test_safetensors_errors);
  tcase_add_test(w, test_safetensors_model_mismatch);
  tcase_add_test(w, test_safetensors_api);
  tcase_add_test(w, test_safetensors_declared_size);
  tcase_add_test(w, test_model_file_limits);
  tcase_add_test(w, test_sniff);
  suite_add_tcase(s, w);
  TCase *fuzz = tcase_create("robustness");
  tcase_add_test(fuzz, test_mutations);
  tcase_set_timeout(fuzz, 120);
  suite_add_tcase(s, fuzz);
  return s;
}

int main(void) {
  return check_run(frontend_suite());
}
