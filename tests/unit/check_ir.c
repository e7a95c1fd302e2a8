/* SPDX-License-Identifier: Apache-2.0 */
/*
 * check_ir.c: the IR module: printer, text parser and verifier.
 *
 * Printing compares whole texts (ck_assert_str_eq). Parsing is checked by
 * round trips over a table of texts (parse -> print gives the same bytes),
 * by canonicalization of irregular spacing, and by exact diagnostics for
 * malformed input. The verifier is checked on hand-broken graphs. A seeded
 * fuzz loop mutates valid text and checks that the parser never crashes and
 * always explains a NULL result. The op list in ir/README.md is checked
 * against ir_ops.def.
 */
#include <check.h>

#include "tests/unit/test_support.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/ir.h"

static const diag_loc no_loc = {0};

static char *print_graph(const ir_graph *g) {
  str_buf b;
  str_buf_init(&b);
  ir_print(g, &b);
  if (!b.data) str_buf_puts(&b, "");
  return str_buf_take(&b);
}

/* Parses text, asserting success; the caller destroys the graph. */
static ir_graph *parse_ok(const char *text) {
  diag_sink *d = diag_sink_create();
  ir_graph *g = ir_parse("t.cir", text, strlen(text), d);
  ck_assert_msg(g != NULL, "parse failed:\n%s\n--- text:\n%s", diag_text(d), text);
  ck_assert_msg(diag_error_count(d) == 0, "errors on success: %s", diag_text(d));
  diag_sink_destroy(d);
  return g;
}

/* ---- printing graphs made by the builder ---- */

static ir_graph *build_mlp(void) {
  ir_graph *g = ir_graph_create("mnist_mlp");
  ir_type tin = {DT_F32, 2, {IR_DIM_BATCH, 784}};
  ir_type tk = {DT_F32, 2, {784, 4096}};
  ir_type tb = {DT_F32, 1, {4096}};
  ir_node *x = ir_build_input(g, "digits", &tin, 0, no_loc);
  ir_node *k = ir_build_const(g, "dense_1.kernel", &tk, "dense_1.kernel", NULL, no_loc);
  ir_node *b = ir_build_const(g, "dense_1.bias", &tb, "dense_1.bias", NULL, no_loc);
  ir_node *mm = ir_build_matmul(g, "dense_1.matmul", x, k, DT_F32, no_loc);
  ir_node *ba = ir_build_binary(g, IR_OP_ADD, "dense_1.bias_add", mm, b, no_loc);
  ir_node *r = ir_build_unary(g, IR_OP_RELU, "dense_1", ba, no_loc);
  ir_node *c = ir_build_cast(g, "x.f16", r, DT_F16, no_loc);
  ir_node *s = ir_build_unary(g, IR_OP_SOFTMAX, "activation", c, no_loc);
  k->note = b->note = mm->note = ba->note = r->note = "dense_1";
  c->note = "autocast: dense_2 computes in f16 (mixed_float16)";
  s->policy = IR_POLICY_FLOAT32;
  s->note = "activation";
  ir_graph_add_output(g, "predictions", s);
  return g;
}

static const char mlp_text[] =
    "graph mnist_mlp policy=float32\n"
    "%digits = f32[N,784] input() {index=0}\n"
    "%dense_1.kernel = f32[784,4096] const() {weight=\"dense_1.kernel\"}  # dense_1\n"
    "%dense_1.bias = f32[4096] const() {weight=\"dense_1.bias\"}  # dense_1\n"
    "%dense_1.matmul = f32[N,4096] matmul(%digits, %dense_1.kernel) {acc=f32}  # dense_1\n"
    "%dense_1.bias_add = f32[N,4096] add(%dense_1.matmul, %dense_1.bias)  # dense_1\n"
    "%dense_1 = f32[N,4096] relu(%dense_1.bias_add)  # dense_1\n"
    "%x.f16 = f16[N,4096] cast(%dense_1) {to=f16}  # autocast: dense_2 computes in f16 "
    "(mixed_float16)\n"
    "%activation = f16[N,4096] softmax(%x.f16) {policy=float32}  # activation\n"
    "output predictions = %activation\n";

/* general tensors: the batch N */

START_TEST(test_bind_batch) {
  ir_graph *g = parse_ok("graph b policy=float32\n"
                         "%x = f32[N,3] input() {index=0}\n"
                         "%p = f32[N,8] pad(%x) {shape=[N,8]}\n"
                         "%r = f32[N,8] relu(%p)\n"
                         "%k = f32[8,2] const() {weight=\"k\"}\n"
                         "%m = f32[N,2] matmul(%r, %k) {acc=f32}\n"
                         "output m = %m\n");
  char err[256];
  ck_assert(!ir_graph_bind_batch(g, 0, err, sizeof err));
  ck_assert_str_eq(err, "the batch must be a whole number >= 1, got 0");
  ck_assert(!ir_graph_bind_batch(g, (int64_t)1 << 40, err, sizeof err));
  ck_assert_str_eq(err, "%x would have more than 1099511627776 bytes with a batch of 1099511627776");
  ck_assert_msg(ir_graph_bind_batch(g, 5, err, sizeof err), "bind: %s", err);
  str_buf b;
  str_buf_init(&b);
  ir_print(g, &b);
  ck_assert_str_eq(str_buf_cstr(&b), "graph b policy=float32\n"
                                     "%x = f32[5,3] input() {index=0}\n"
                                     "%p = f32[5,8] pad(%x) {shape=[5,8]}\n"
                                     "%r = f32[5,8] relu(%p)\n"
                                     "%k = f32[8,2] const() {weight=\"k\"}\n"
                                     "%m = f32[5,2] matmul(%r, %k) {acc=f32}\n"
                                     "output m = %m\n");
  str_buf_fini(&b);
  diag_sink *d = diag_sink_create();
  ck_assert_msg(ir_verify(g, d), "a bound graph (static inputs) verifies: %s", diag_text(d));
  diag_sink_destroy(d);
  ir_graph_destroy(g);
}
END_TEST

START_TEST(test_batch_stays_leading) {
  ir_type x = {DT_F32, 3, {IR_DIM_BATCH, 16, 32}}, st = {DT_F32, 3, {4, 16, 32}};
  char err[256] = "untouched";
  ck_assert(ir_batch_stays_leading(IR_OP_ADD, &x, true, "any", err, sizeof err));
  ck_assert(ir_batch_stays_leading(IR_OP_ADD, &st, false, "static: no N to move", err, sizeof err));
  ck_assert_str_eq(err, "untouched");
  ck_assert(!ir_batch_stays_leading(IR_OP_ADD, &x, false, "into dimension 1 of f32[2,N,16,32]", err, sizeof err));
  ck_assert_str_eq(err, "add of f32[N,16,32] would move the batch dimension N out of dimension 0 (into "
                        "dimension 1 of f32[2,N,16,32]); only the batch is symbolic: give it a fixed size "
                        "with --batch B (castor_compile_options.batch)");
}
END_TEST

START_TEST(test_print_built_graph) {
  ir_graph *g = build_mlp();
  char *text = print_graph(g);
  ck_assert_str_eq(text, mlp_text);
  diag_sink *d = diag_sink_create();
  ck_assert_msg(ir_verify(g, d), "verify: %s", diag_text(d));
  diag_sink_destroy(d);
  free(text);
  ir_graph_destroy(g);
}
END_TEST

/* trainable=false (ir_node.frozen) prints and verifies on a const; on any other op, a graph built
 * in memory (where the parser cannot refuse it) fails verification. */
START_TEST(test_frozen_const) {
  ir_graph *g = build_mlp();
  g->nodes[2]->frozen = true; /* dense_1.bias */
  char *text = print_graph(g);
  ck_assert_ptr_nonnull(strstr(text, "%dense_1.bias = f32[4096] const() {weight=\"dense_1.bias\", trainable=false}"));
  free(text);
  diag_sink *d = diag_sink_create();
  ck_assert_msg(ir_verify(g, d), "verify: %s", diag_text(d));
  g->nodes[5]->frozen = true; /* dense_1 (relu) */
  ck_assert(!ir_verify(g, d));
  ck_assert_ptr_nonnull(strstr(diag_text(d), "relu is trainable=false, which only a const can be"));
  diag_sink_destroy(d);
  ir_graph_destroy(g);
}
END_TEST

START_TEST(test_print_node_and_edge_cases) {
  ir_graph *g = ir_graph_create("edge");
  g->policy = IR_POLICY_MIXED_BFLOAT16;
  ir_type scalar = {DT_BF16, 0, {0}};
  ir_type t4 = {DT_I1, 4, {IR_DIM_BATCH, 2, 3, 4}};
  ir_node *s = ir_build_const(g, "s", &scalar, "we\"ird\\key\n", NULL, no_loc);
  ir_node *x = ir_build_input(g, "x", &t4, 0, no_loc);
  ir_node *c = ir_build_cast(g, "c", x, DT_I64, no_loc);
  c->policy = IR_POLICY_MIXED_FLOAT16;
  c->note = "tab\there, newline\nthere, trailing   ";
  s->note = "   "; /* blank notes print nothing */
  ir_graph_add_output(g, "out", c);

  str_buf b;
  str_buf_init(&b);
  ir_print_node(s, &b);
  ck_assert_str_eq(str_buf_cstr(&b), "%s = bf16[] const() {weight=\"we\\\"ird\\\\key\\x0a\"}");
  str_buf_clear(&b);
  ir_print_node(c, &b);
  ck_assert_str_eq(str_buf_cstr(&b), "%c = i64[N,2,3,4] cast(%x) {to=i64, policy=mixed_float16}"
                                     "  # tab\there, newline there, trailing");
  str_buf_fini(&b);

  /* What the printer writes for odd notes and keys parses back to itself. */
  char *text = print_graph(g);
  ir_graph *g2 = parse_ok(text);
  ck_assert_str_eq(g2->nodes[0]->attr.weight, "we\"ird\\key\n");
  char *text2 = print_graph(g2);
  ck_assert_str_eq(text2, text);
  free(text);
  free(text2);
  ir_graph_destroy(g2);
  ir_graph_destroy(g);
}
END_TEST

/* ---- round trips: parse -> print gives the same bytes ---- */

static const char *const roundtrip_cases[] = {
    mlp_text,
    /* every op; notes with special characters */
    "graph every_op policy=mixed_float16\n"
    "%x = f32[N,16] input() {index=0}\n"
    "%y = f32[N,16] input() {index=1}  # a second input\n"
    "%w = f32[16,8] const() {weight=\"layer.kernel\"}\n"
    "%b = f32[8] const() {weight=\"layer.bias\"}\n"
    "%m = f32[N,8] matmul(%x, %w) {acc=f32}\n"
    "%a = f32[N,8] add(%m, %b)\n"
    "%p = f32[N,16] mul(%x, %y)\n"
    "%r = f32[N,16] relu(%p)  # notes may hold # { } = % \" \\ , ( ) and unicode: é → ∑\n"
    "%s = f32[N,16] sigmoid(%r)\n"
    "%t = f32[N,16] tanh(%s)  #   leading spaces are kept\n"
    "%g = f32[N,16] gelu(%t)\n"
    "%sm = f32[N,8] softmax(%a) {policy=float32}\n"
    "%c = f16[N,16] cast(%g) {to=f16}  # autocast: to f16\n"
    "output y = %sm\n"
    "output z = %c\n",
    /* every dtype, every rank, every policy */
    "graph dtypes policy=bfloat16\n"
    "%a = f32[N] input() {index=0}\n"
    "%b = f16[N,1] input() {index=1}\n"
    "%c = bf16[N,2,3] input() {index=2}\n"
    "%d = i32[N,2,3,4] input() {index=3}\n"
    "%e = i64[] const() {weight=\"\"}\n"
    "%f = i1[7] const() {weight=\"f\"}\n"
    "%g = i1[N] cast(%a) {to=i1, policy=float16}\n"
    "%h = i64[N,2,3,4] cast(%d) {to=i64, policy=bfloat16}\n"
    "%i = bf16[N,1] cast(%b) {to=bf16, policy=mixed_bfloat16}\n"
    "%j = f32[N,2,3] cast(%c) {to=f32, policy=mixed_float16}\n"
    "%k = bf16[N,2,3] softmax(%c) {policy=float32}\n"
    "%l = bf16[N,2,3] relu(%c)\n"
    "output g = %g\n"
    "output h = %h\n"
    "output i = %i\n"
    "output j = %j\n",
    /* weight escapes; bf16 matmul with f32 accumulation; names with dots */
    "graph escapes policy=mixed_bfloat16\n"
    "%in.0 = bf16[N,8] input() {index=0}\n"
    "%w.q = bf16[8,8] const() {weight=\"quote\\\" back\\\\slash \\x01\\x7f é\"}  # weird key\n"
    "%mm._1 = bf16[N,8] matmul(%in.0, %w.q) {acc=f32, policy=mixed_bfloat16}\n"
    "%mm.2 = bf16[N,8] matmul(%mm._1, %w.q) {acc=bf16}\n"
    "output out_1 = %mm.2\n"
    "output out_2 = %in.0\n",
    /* the node fields layer (a word, or quoted when it is not one) and rule */
    "graph fields policy=mixed_float16\n"
    "%x = f32[N,4] input() {index=0, layer=x}\n"
    "%x.f16 = f16[N,4] cast(%x) {to=f16, layer=dense_1, rule=\"mixed_float16\"}  # autocast: dense_1 ...\n"
    "%w = f16[4,4] const() {weight=\"w\", layer=\"model/dense 1\", rule=\"dtype=float16\"}\n"
    "%r = f16[N,4] relu(%x.f16) {policy=float16, layer=a.b, rule=\"follows a's \\\"matmul\\\"\"}\n"
    "%s = f16[N,4] sigmoid(%r) {rule=\"\"}  # other_layer\n"
    "output s = %s\n",
    /* graph names may hold '-'; an output may name an input */
    "graph my-model.v2 policy=float16\n"
    "%x = f16[N,3] input() {index=0}\n"
    "output x = %x\n",
};

START_TEST(test_roundtrip_table) {
  for (size_t i = 0; i < sizeof roundtrip_cases / sizeof *roundtrip_cases; i++) {
    ir_graph *g = parse_ok(roundtrip_cases[i]);
    char *text = print_graph(g);
    ck_assert_msg(strcmp(text, roundtrip_cases[i]) == 0, "case %zu:\n--- want\n%s--- got\n%s", i,
                  roundtrip_cases[i], text);
    diag_sink *d = diag_sink_create();
    ck_assert_msg(ir_verify(g, d), "case %zu: %s", i, diag_text(d));
    diag_sink_destroy(d);
    free(text);
    ir_graph_destroy(g);
  }
}
END_TEST

START_TEST(test_parse_node_fields) {
  ir_graph *g = parse_ok("graph g policy=float32\n"
                         "%x = f32[N,4] input() {index=0}  # dense_1\n"
                         "%y = f32[N,4] relu(%x) { rule = \"r\" , layer = \"l 1\" , policy=float16 }\n"
                         "output o = %y\n");
  ck_assert_ptr_null(g->nodes[0]->layer);
  ck_assert_str_eq(g->nodes[1]->layer, "l 1");
  ck_assert_str_eq(g->nodes[1]->rule, "r");
  char *text = print_graph(g);
  ck_assert_str_eq(text, "graph g policy=float32\n"
                         "%x = f32[N,4] input() {index=0}  # dense_1\n"
                         "%y = f32[N,4] relu(%x) {policy=float16, layer=\"l 1\", rule=\"r\"}\n"
                         "output o = %y\n");
  free(text);
  ir_graph_destroy(g);
}
END_TEST

START_TEST(test_parse_fields) {
  const char *text = "# RUN: x\n"
                     "graph g policy=float32\n"
                     "\n"
                     "  %x = f32[N,4] input() {index=0}\n"
                     "%w = f32[4,2] const() {weight=\"w\"}\n"
                     "%m = f32[N,2] matmul(%x, %w) {acc=f32}  # note  \n"
                     "output o = %m\n";
  ir_graph *g = parse_ok(text);
  ck_assert_str_eq(g->name, "g");
  ck_assert_int_eq(g->n_nodes, 3);
  ir_node *x = g->nodes[0], *w = g->nodes[1], *m = g->nodes[2];
  ck_assert_str_eq(x->loc.file, "t.cir");
  ck_assert_int_eq(x->loc.line, 4);
  ck_assert_int_eq(x->loc.col, 3);
  ck_assert_int_eq(m->loc.line, 6);
  ck_assert_int_eq(m->loc.col, 1);
  ck_assert_int_eq(x->attr.index, 0);
  ck_assert_ptr_null(w->attr.data);
  ck_assert_str_eq(w->attr.weight, "w");
  ck_assert_str_eq(m->note, "note");
  ck_assert_ptr_null(x->note);
  ck_assert_ptr_null(m->layer); /* nothing is read out of a note */
  ck_assert_ptr_null(m->rule);
  ck_assert_ptr_eq(m->srcs[0], x);
  ck_assert_ptr_eq(m->srcs[1], w);
  ck_assert_int_eq(m->id, 2);
  ck_assert_int_eq(g->n_outputs, 1);
  ck_assert_ptr_eq(g->outputs[0].value, m);
  ir_graph_destroy(g);
}
END_TEST

START_TEST(test_canonicalize) {
  const char *messy = "# RUN: castor-opt %s\r\n"
                      "\r\n"
                      "   graph\tmessy   policy = float32   # header comment\r\n"
                      "# a comment line\r\n"
                      "%x=f32[ N , 4 ]input ( ){ index = 0 }\r\n"
                      "\t%b  =  f32[4]   const()  {weight = \"b\"}#note\r\n"
                      "%y = f32[N,4] add(%x,%b){policy=mixed_float16}   #  two spaces   \r\n"
                      "   \t\r\n"
                      "output   y=%y\r\n"
                      "output z = %x # comment dropped";
  const char *canon = "graph messy policy=float32\n"
                      "%x = f32[N,4] input() {index=0}\n"
                      "%b = f32[4] const() {weight=\"b\"}  # note\n"
                      "%y = f32[N,4] add(%x, %b) {policy=mixed_float16}  #  two spaces\n"
                      "output y = %y\n"
                      "output z = %x\n";
  ir_graph *g = parse_ok(messy);
  char *text = print_graph(g);
  ck_assert_str_eq(text, canon);
  free(text);
  ir_graph_destroy(g);
}
END_TEST

/* ---- parse errors: exact diagnostics ---- */

#define HDR "graph g policy=float32\n"
#define X "%x = f32[N,4] input() {index=0}\n"
#define OUT "output o = %x\n"

static const struct {
  const char *text, *want;
} error_cases[] = {
    {"", "t.cir:1:1: error: missing 'graph NAME policy=POLICY' header (the text is empty)\n\n^\n"},
    {"# only a comment\n%x = f32[N] input() {index=0}\n",
     "t.cir:2:1: error: missing 'graph NAME policy=POLICY' header before the first line\n"
     "%x = f32[N] input() {index=0}\n^\n"},
    {HDR X, "t.cir:1:1: error: graph g has no outputs (add 'output NAME = %value')\n"
            "graph g policy=float32\n^\n"},
    {HDR X "%y = f32[N,4] rleu(%x)\n" OUT,
     "t.cir:3:15: error: unknown op 'rleu'; did you mean 'relu' or 'elu'?\n"
     "%y = f32[N,4] rleu(%x)\n              ^\n"},
    /* the op list comes from the table: UNKNOWN_OP_WANT, built in the test */
    {HDR X "%y = f32[N,4] frobnicate(%x)\n" OUT, NULL},
    {HDR X "%p = f32[N,2] pad(%x) {shape=[N,2]}\n" OUT,
     "t.cir:3:15: error: pad of f32[N,4] would make "
     "dimension 1 2; a pad may only grow a dimension\n"
     "%p = f32[N,2] pad(%x) {shape=[N,2]}\n              ^\n"},
    {HDR X "%s = f32[4,4] slice(%x) {shape=[4,4]}\n" OUT,
     "t.cir:3:15: error: slice of f32[N,4] must keep "
     "the batch dimension N in dimension 0 and nowhere else\n"
     "%s = f32[4,4] slice(%x) {shape=[4,4]}\n              ^\n"},
    {HDR X "%y = f32[N,4] relu(%z)\n" OUT,
     "t.cir:3:20: error: undefined value %z\n%y = f32[N,4] relu(%z)\n                   ^\n"},
    {HDR X "%x = f32[N,4] relu(%x)\n" OUT,
     "t.cir:3:1: error: redefinition of %x\n%x = f32[N,4] relu(%x)\n^\n"
     "t.cir:2:1: note: previous definition of %x is here\n" X "^\n"},
    {HDR X "%y = f32[N,4] add(%x)\n" OUT,
     "t.cir:3:15: error: add takes 2 operands, got 1\n%y = f32[N,4] add(%x)\n              ^\n"},
    {HDR X "%y = f32[N,4] relu(%x, %x, %x)\n" OUT,
     "t.cir:3:15: error: relu takes 1 operand, got 3\n"
     "%y = f32[N,4] relu(%x, %x, %x)\n              ^\n"},
    {HDR "%x = f33[N,4] input() {index=0}\n" OUT,
     "t.cir:2:6: error: unknown dtype 'f33' (dtypes: f32, f16, bf16, i32, i64, i1)\n"
     "%x = f33[N,4] input() {index=0}\n     ^\n"},
    {HDR "%x = f32[4,N] input() {index=0}\n" OUT,
     "t.cir:2:12: error: the batch dimension N may only be the first dimension\n"
     "%x = f32[4,N] input() {index=0}\n           ^\n"},
    {HDR "%x = f32[N,-4] input() {index=0}\n" OUT,
     "t.cir:2:12: error: expected a dimension (an integer >= 0 or N), got '-'\n"
     "%x = f32[N,-4] input() {index=0}\n           ^\n"},
    {HDR "%x = f32[N,1,2,3,4,5,6] input() {index=0}\n" OUT,
     "t.cir:2:22: error: rank exceeds the maximum of 6\n"
     "%x = f32[N,1,2,3,4,5,6] input() {index=0}\n                     ^\n"},
    {HDR "%x = f32[N,1048576,1048576] input() {index=0}\n" OUT,
     "t.cir:2:6: error: type f32[N,1048576,1048576] is larger than the 1099511627776-byte "
     "tensor limit\n%x = f32[N,1048576,1048576] input() {index=0}\n     ^\n"},
    {HDR "%x = f32[N,99999999999999999999] input() {index=0}\n" OUT,
     "t.cir:2:12: error: a dimension (an integer >= 0 or N) 99999999999999999999 is too "
     "large\n%x = f32[N,99999999999999999999] input() {index=0}\n           ^\n"},
    {HDR X "%y = f32[N,4] relu(%x) {acc=f32}\n" OUT,
     "t.cir:3:25: error: unknown attribute 'acc' for relu (it takes only policy, compute, trainable, layer and rule)\n"
     "%y = f32[N,4] relu(%x) {acc=f32}\n                        ^\n"},
    {HDR X "%y = f16[N,4] cast(%x) {too=f16}\n" OUT,
     "t.cir:3:25: error: unknown attribute 'too' for cast (it takes to, policy, compute, trainable, layer and rule)\n"
     "%y = f16[N,4] cast(%x) {too=f16}\n                        ^\n"},
    {HDR X "%y = f32[N,4] relu(%x) {trainable=false}\n" OUT,
     "t.cir:3:25: error: trainable is a const's field (a constant training leaves as it is), not relu's\n"
     "%y = f32[N,4] relu(%x) {trainable=false}\n                        ^\n"},
    {HDR X "%w = f32[4] const() {weight=\"w\", trainable=true}\n" OUT,
     "t.cir:3:44: error: unknown trainable 'true' (only 'false': a const is a weight unless it says so)\n"
     "%w = f32[4] const() {weight=\"w\", trainable=true}\n                                           ^\n"},
    {HDR X "%y = f16[N,4] cast(%x) {policy=float32}\n" OUT,
     "t.cir:3:15: error: cast needs the attribute 'to'\n"
     "%y = f16[N,4] cast(%x) {policy=float32}\n              ^\n"},
    {HDR X "%y = f16[N,4] cast(%x) {to=f16, to=f16}\n" OUT,
     "t.cir:3:33: error: duplicate attribute 'to'\n"
     "%y = f16[N,4] cast(%x) {to=f16, to=f16}\n                                ^\n"},
    {HDR X "%y = f32[N,4] relu(%x) {policy=mixed}\n" OUT,
     "t.cir:3:32: error: unknown policy 'mixed' (policies: float32, float16, bfloat16, "
     "mixed_float16, mixed_bfloat16)\n"
     "%y = f32[N,4] relu(%x) {policy=mixed}\n                               ^\n"},
    {HDR X "%y = f32[N,5] relu(%x)\n" OUT,
     "t.cir:3:6: error: declared type f32[N,5] does not match the inferred type f32[N,4]: "
     "relu of f32[N,4]\n%y = f32[N,5] relu(%x)\n     ^\n"},
    {HDR X "%w = f32[5,2] const() {weight=\"w\"}\n%y = f32[N,2] matmul(%x, %w) {acc=f32}\n" OUT,
     "t.cir:4:15: error: matmul inner dimensions differ: f32[N,4] and f32[5,2]\n"
     "%y = f32[N,2] matmul(%x, %w) {acc=f32}\n              ^\n"},
    {HDR X "%y = f32[N,4] relu(%x) garbage\n" OUT,
     "t.cir:3:24: error: expected '{', '#' or the end of the line, got 'garbage'\n"
     "%y = f32[N,4] relu(%x) garbage\n                       ^\n"},
    {HDR X "output o = %x extra\n",
     "t.cir:3:15: error: expected the end of the line, got 'extra'\n"
     "output o = %x extra\n              ^\n"},
    {HDR X "output o = %nope\n",
     "t.cir:3:12: error: undefined value %nope\noutput o = %nope\n           ^\n"},
    {HDR X "output o.p = %x\n",
     "t.cir:3:9: error: output names may not contain '.' ([A-Za-z_][A-Za-z0-9_]*)\n"
     "output o.p = %x\n        ^\n"},
    {HDR X OUT "output o = %x\n",
     "t.cir:4:8: error: duplicate output 'o'\noutput o = %x\n       ^\n"},
    {HDR X "%y = f32[N,4] relu(%x)  # caf\xc3\n" OUT,
     "t.cir:3:30: error: invalid UTF-8 byte 0xc3\n%y = f32[N,4] relu(%x)  # caf\xc3\n"
     "                             ^\n"},
    {HDR "%x = f32[N,4] input() {index=0}\x01\n" OUT,
     "t.cir:2:32: error: unexpected control character 0x01\n"
     "%x = f32[N,4] input() {index=0}?\n                               ^\n"},
    {HDR "%w = f32[4] const() {weight=\"abc}\n" OUT,
     "t.cir:2:29: error: unterminated string\n%w = f32[4] const() {weight=\"abc}\n"
     "                            ^\n"},
    {HDR "%w = f32[4] const() {weight=\"a\\nb\"}\n" OUT,
     "t.cir:2:31: error: bad escape in string (use \\\", \\\\ or \\xHH with HH not 00)\n"
     "%w = f32[4] const() {weight=\"a\\nb\"}\n                              ^\n"},
    {HDR "graph h policy=float32\n",
     "t.cir:2:1: error: a second 'graph' header (one graph per file)\ngraph h policy=float32\n^\n"},
    {"graph g policy=float64\n",
     "t.cir:1:16: error: unknown policy 'float64' (policies: float32, float16, bfloat16, "
     "mixed_float16, mixed_bfloat16)\ngraph g policy=float64\n               ^\n"},
    {"graph g\n", "t.cir:1:8: error: expected 'policy=' after the graph name, got end of line\n"
                  "graph g\n       ^\n"},
    {HDR "x = f32[N] input() {index=0}\n",
     "t.cir:2:1: error: expected a node ('%name = ...'), an 'output' line or a comment, got 'x'\n"
     "x = f32[N] input() {index=0}\n^\n"},
    {HDR "%1 = f32[N] input() {index=0}\n",
     "t.cir:2:1: error: expected a value name after '%' ([A-Za-z_][A-Za-z0-9_.]*)\n"
     "%1 = f32[N] input() {index=0}\n^\n"},
    {HDR "%x = f32[N] input() {index=99999999999}\n",
     "t.cir:2:28: error: an integer 99999999999 is too large\n"
     "%x = f32[N] input() {index=99999999999}\n                           ^\n"},
    {HDR X "%y = f32[N,4] relu(%x) {layer=a, layer=b}\n" OUT,
     "t.cir:3:34: error: duplicate attribute 'layer'\n"
     "%y = f32[N,4] relu(%x) {layer=a, layer=b}\n                                 ^\n"},
    {HDR X "%y = f32[N,4] relu(%x) {layer=1a}\n" OUT,
     "t.cir:3:31: error: expected a layer name or a quoted string, got '1a'\n"
     "%y = f32[N,4] relu(%x) {layer=1a}\n                              ^\n"},
    {HDR X "%y = f32[N,4] relu(%x) {rule=mixed}\n" OUT,
     "t.cir:3:30: error: expected a quoted string, got 'mixed'\n"
     "%y = f32[N,4] relu(%x) {rule=mixed}\n                             ^\n"},
    {HDR X "%y = f32[N,4] relu(%y)\n" OUT,
     "t.cir:3:20: error: %y is used in its own definition\n"
     "%y = f32[N,4] relu(%y)\n                   ^\n"},
};

START_TEST(test_parse_errors) {
  for (size_t i = 0; i < sizeof error_cases / sizeof *error_cases; i++) {
    diag_sink *d = diag_sink_create();
    const char *text = error_cases[i].text;
    ir_graph *g = ir_parse("t.cir", text, strlen(text), d);
    ck_assert_msg(g == NULL, "case %zu: parsed but should fail:\n%s", i, text);
    str_buf want;
    str_buf_init(&want);
    if (error_cases[i].want) {
      str_buf_puts(&want, error_cases[i].want);
    } else { /* an unknown op: the message lists every op of ir_ops.def, in its order */
      str_buf_puts(&want, "t.cir:3:15: error: unknown op 'frobnicate' (ops: ");
      for (int op = 0; op < IR_OP_COUNT; op++) str_buf_printf(&want, "%s%s", op ? ", " : "", ir_op_name((ir_op)op));
      str_buf_puts(&want, ")\n%y = f32[N,4] frobnicate(%x)\n              ^\n");
    }
    ck_assert_msg(strcmp(diag_text(d), str_buf_cstr(&want)) == 0,
                  "case %zu:\n--- want\n%s--- got\n%s", i, str_buf_cstr(&want), diag_text(d));
    str_buf_fini(&want);
    diag_sink_destroy(d);
  }
}
END_TEST

/* ---- the INTS attribute kind, through ir_attr_value_parse and
 * ir_attr_value_print (no key has that kind yet: perm and axes come with
 * transpose and reductions) ---- */

START_TEST(test_ints_roundtrip) {
  static const char *const cases[] = {"[]", "[0]", "[0,2,1,3]", "[-1,-2]", "[5,4,3,2,1,0]",
                                      "[0,1,2,3,4,5,6,7,8,9,10,11]", "[2147483647,-2147483647]"};
  ir_graph *g = ir_graph_create("t");
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    diag_sink *d = diag_sink_create();
    ir_attr_INTS a = {0};
    bool ok = ir_attr_value_parse(g, IR_ATTR_KIND_INTS, "t.attr", cases[i], strlen(cases[i]), &a, d);
    ck_assert_msg(ok, "%s: %s", cases[i], diag_text(d));
    str_buf b;
    str_buf_init(&b);
    ir_attr_value_print(IR_ATTR_KIND_INTS, &a, &b);
    ck_assert_str_eq(str_buf_cstr(&b), cases[i]);
    str_buf_fini(&b);
    diag_sink_destroy(d);
  }
  /* blanks are accepted and dropped */
  diag_sink *d = diag_sink_create();
  ir_attr_INTS a = {0};
  ck_assert(ir_attr_value_parse(g, IR_ATTR_KIND_INTS, "t.attr", "[ 1 , -1 ]", 10, &a, d));
  ck_assert_int_eq(a.n, 2);
  ck_assert(a.v[0] == 1 && a.v[1] == -1);
  diag_sink_destroy(d);
  ir_graph_destroy(g);
}
END_TEST

/* ---- the STATE attribute kind: a variable's kind= ---- */

static void expect_verify_error(const ir_graph *g, const char *want);

static const char state_text[] =
    "graph s policy=float32\n"
    "%w = f32[2,3] variable() {weight=\"d.kernel\", init=0, kind=weight, layer=d}\n"
    "%m = f32[2,3] variable() {weight=\"d.kernel.momentum\", init=0, kind=slot}\n"
    "%v = f32[3] variable() {weight=\"bn.moving_mean\", init=1, kind=nontrainable}\n"
    "%i = i64[] variable() {weight=\"optimizer.iterations\", init=0, kind=scalar}\n"
    "output w = %w\n"
    "output m = %m\n"
    "output v = %v\n"
    "output i = %i\n";

START_TEST(test_state_kind) {
  ir_graph *g = parse_ok(state_text);
  static const ir_state_kind want[] = {IR_STATE_WEIGHT, IR_STATE_SLOT, IR_STATE_NONTRAINABLE, IR_STATE_SCALAR};
  ck_assert_int_eq(g->n_nodes, 4);
  for (int i = 0; i < 4; i++) ck_assert_int_eq(g->nodes[i]->attr.kind, want[i]);
  diag_sink *d = diag_sink_create();
  ck_assert_msg(ir_verify(g, d), "%s", diag_text(d));
  diag_sink_destroy(d);
  char *text = print_graph(g);
  ck_assert_str_eq(text, state_text);
  free(text);
  /* the names and back, NONE included (the verifier, not the parser, rejects it) */
  for (int k = 0; k < IR_STATE_COUNT; k++) {
    const char *name = ir_state_kind_name((ir_state_kind)k);
    ir_state_kind back = IR_STATE_COUNT;
    ck_assert(ir_state_kind_from_name(name, strlen(name), &back));
    ck_assert_int_eq(back, k);
  }
  g->nodes[1]->attr.kind = IR_STATE_NONE;
  expect_verify_error(g, "verify: %m: variable has no 'kind' attribute (weight, nontrainable, slot or scalar)");
  ir_graph_destroy(g);
  /* the text must say the kind, and a known one */
  static const struct {
    const char *text, *want;
  } bad[] = {
      {"graph s policy=float32\n%w = f32[3] variable() {weight=\"w\", init=0}\n",
       "t.cir:2:13: error: variable needs the attribute 'kind'"},
      {"graph s policy=float32\n%w = f32[3] variable() {weight=\"w\", init=0, kind=moving}\n",
       "unknown state kind 'moving' (kinds: weight, nontrainable, slot, scalar)"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    d = diag_sink_create();
    ck_assert(ir_parse("t.cir", bad[i].text, strlen(bad[i].text), d) == NULL);
    ck_assert_msg(strstr(diag_text(d), bad[i].want), "wanted '%s' in:\n%s", bad[i].want, diag_text(d));
    diag_sink_destroy(d);
  }
}
END_TEST

static const struct {
  const char *text, *want;
} ints_error_cases[] = {
    {"0,1", "t.attr:1:1: error: expected '[', got '0'\n0,1\n^\n"},
    {"[0,1", "t.attr:1:5: error: expected ',' or ']' in the list, got end of line\n[0,1\n    ^\n"},
    {"[0,]", "t.attr:1:4: error: expected an integer, got ']'\n[0,]\n   ^\n"},
    {"[0 1]", "t.attr:1:4: error: expected ',' or ']' in the list, got '1'\n[0 1]\n   ^\n"},
    {"[a]", "t.attr:1:2: error: expected an integer, got 'a'\n[a]\n ^\n"},
    {"[1.5]", "t.attr:1:2: error: expected an integer, got '1.'\n[1.5]\n ^\n"},
    {"[0,1,2,3,4,5,6,7,8,9,10,11,12]",
     "t.attr:1:28: error: more than 12 integers in the list\n[0,1,2,3,4,5,6,7,8,9,10,11,12]\n"
     "                           ^\n"},
    {"[99999999999]", "t.attr:1:2: error: an integer 99999999999 is too large\n[99999999999]\n ^\n"},
    {"[0] x", "t.attr:1:5: error: expected the end of the value, got 'x'\n[0] x\n    ^\n"},
};

START_TEST(test_ints_errors) {
  ir_graph *g = ir_graph_create("t");
  for (size_t i = 0; i < sizeof ints_error_cases / sizeof *ints_error_cases; i++) {
    diag_sink *d = diag_sink_create();
    ir_attr_INTS a = {0};
    const char *text = ints_error_cases[i].text;
    ck_assert_msg(!ir_attr_value_parse(g, IR_ATTR_KIND_INTS, "t.attr", text, strlen(text), &a, d), "%s parsed",
                  text);
    ck_assert_msg(strcmp(diag_text(d), ints_error_cases[i].want) == 0, "case %zu:\n--- want\n%s--- got\n%s", i,
                  ints_error_cases[i].want, diag_text(d));
    diag_sink_destroy(d);
  }
  ir_graph_destroy(g);
}
END_TEST

START_TEST(test_parse_nul_byte) {
  const char text[] = HDR "%x = f32[N] input() {index=0}\0\n" OUT;
  diag_sink *d = diag_sink_create();
  ir_graph *g = ir_parse("t.cir", text, sizeof text - 1, d);
  ck_assert_ptr_null(g);
  ck_assert_msg(strstr(diag_text(d), "t.cir:2:30: error: unexpected control character 0x00"),
                "%s", diag_text(d));
  diag_sink_destroy(d);
}
END_TEST

/* ---- verifier ---- */

/* Verifies g and checks that it fails with `want` somewhere in the text. */
static void expect_verify_error(const ir_graph *g, const char *want) {
  diag_sink *d = diag_sink_create();
  ck_assert_msg(!ir_verify(g, d), "verify passed; wanted '%s'", want);
  ck_assert_msg(strstr(diag_text(d), want) != NULL, "wanted '%s' in:\n%s", want, diag_text(d));
  diag_sink_destroy(d);
}

START_TEST(test_verify_use_before_def) {
  ir_graph *g = parse_ok(mlp_text);
  /* Swap the matmul (position 3) with the add that uses it (4). */
  ir_node *t = g->nodes[3];
  g->nodes[3] = g->nodes[4];
  g->nodes[4] = t;
  expect_verify_error(g, "t.cir:6:1: error: verify: %dense_1.bias_add: source %dense_1.matmul "
                         "is not defined before use\n");
  ir_graph_renumber(g);
  diag_sink *d = diag_sink_create();
  ck_assert(!ir_verify(g, d));
  ck_assert_int_eq(diag_error_count(d), 1); /* renumbering fixed the ids */
  diag_sink_destroy(d);
  ir_graph_destroy(g);
}
END_TEST

START_TEST(test_verify_wrong_type) {
  ir_graph *g = parse_ok(mlp_text);
  g->nodes[5]->type.dims[1] = 4095; /* %dense_1 = relu */
  expect_verify_error(g, "verify: %dense_1: type f32[N,4095] does not match the inferred type "
                         "f32[N,4096]");
  g->nodes[5]->type.dims[1] = 4096;
  g->nodes[3]->type.dims[1] = 7; /* matmul result: its user now fails to infer */
  expect_verify_error(g, "verify: %dense_1.bias_add: add operand shapes f32[N,7] and f32[4096] do not "
                         "broadcast: aligned at the last dimension, they have 7 and 4096 in dimension 1 of "
                         "the result (numpy broadcasting: equal, or one of them 1; N only against N or 1)");
  g->nodes[3]->type.dims[1] = 4096;
  g->nodes[3]->type.rank = 7;
  expect_verify_error(g, "verify: %dense_1.matmul: rank 7 is outside 0..6");
  g->nodes[3]->type.rank = 2;
  g->nodes[3]->type.dims[1] = IR_DIM_BATCH;
  expect_verify_error(g, "verify: %dense_1.matmul: the batch dimension N is dimension 1");
  ir_graph_destroy(g);
}
END_TEST

START_TEST(test_verify_names_outputs_leaves) {
  ir_graph *g = build_mlp(); /* no locations: messages have none either */
  g->nodes[2]->name = "dense_1.kernel";
  expect_verify_error(g, "error: verify: %dense_1.kernel: name is also defined at schedule "
                         "position 1\n");
  g->nodes[2]->name = "";
  expect_verify_error(g, "node at position 2 has no name");
  g->nodes[2]->name = "bad name";
  expect_verify_error(g, "verify: %bad name: name is not a valid value name");
  g->nodes[2]->name = "dense_1.bias";

  g->nodes[0]->attr.index = 1;
  expect_verify_error(g, "verify: %digits: input index 1 is outside 0..0");
  g->nodes[0]->attr.index = 0;
  g->nodes[1]->attr.weight = NULL;
  expect_verify_error(g, "verify: %dense_1.kernel: const has no 'weight' attribute");
  g->nodes[1]->attr.weight = "dense_1.kernel";
  g->nodes[1]->id = 7;
  expect_verify_error(g, "verify: %dense_1.kernel: id 7 does not match its schedule position 1");
  g->nodes[1]->id = 1;
  g->nodes[2]->n_srcs = 1;
  g->nodes[2]->srcs[0] = g->nodes[0];
  expect_verify_error(g, "verify: %dense_1.bias: const takes 0 operand(s), has 1");
  g->nodes[2]->n_srcs = 0;

  ir_node stray = *g->nodes[5];
  g->outputs[0].value = &stray;
  expect_verify_error(g, "error: verify: output 'predictions' is %dense_1, which is not a node "
                         "of the graph\n");
  g->nodes[6]->srcs[0] = &stray;
  expect_verify_error(g, "verify: %x.f16: source %dense_1 is not a node of the graph");
  g->nodes[6]->srcs[0] = g->nodes[5];
  g->outputs[0].value = g->nodes[7];
  ir_graph_add_output(g, "predictions", g->nodes[5]);
  expect_verify_error(g, "verify: output 'predictions' is defined twice");
  g->n_outputs = 0;
  expect_verify_error(g, "error: verify: graph mnist_mlp has no outputs\n");
  g->n_outputs = 1;

  diag_sink *d = diag_sink_create();
  ck_assert_msg(ir_verify(g, d), "repaired graph: %s", diag_text(d));
  diag_sink_destroy(d);
  ir_graph_destroy(g);
}
END_TEST

START_TEST(test_verify_graph_invariants_left_by_the_parser) {
  /* The parser accepts these so that golden tests can show the verifier.
   * %c, a static input (no N), is fine. */
  ir_graph *g = parse_ok("graph g policy=float32\n"
                         "%a = f32[N,2] input() {index=0}\n"
                         "%b = f32[N,2] input() {index=0}\n"
                         "%c = f32[3,2] input() {index=1}\n"
                         "%k = f32[N,2] const() {weight=\"k\"}\n"
                         "output o = %a\n");
  diag_sink *d = diag_sink_create();
  ck_assert(!ir_verify(g, d));
  ck_assert_str_eq(diag_text(d),
                   "t.cir:3:1: error: verify: %b: input index 0 is also used by %a\n"
                   "t.cir:5:1: error: verify: %k: constant has the batch dimension N\n");
  diag_sink_destroy(d);
  ir_graph_destroy(g);
}
END_TEST

START_TEST(test_verify_reports_every_violation) {
  ir_graph *g = parse_ok(mlp_text);
  g->nodes[5]->type.dims[1] = 1;
  g->nodes[2]->type.dims[0] = IR_DIM_BATCH;
  g->n_outputs = 0;
  diag_sink *d = diag_sink_create();
  ck_assert(!ir_verify(g, d));
  /* the const is batched; the add no longer infers; the relu's type is off;
   * the cast after it no longer matches; no outputs */
  ck_assert_msg(diag_error_count(d) == 5, "%s", diag_text(d));
  diag_sink_destroy(d);
  ir_graph_destroy(g);
}
END_TEST

/* ---- fuzz: mutated text never crashes and NULL always comes with an error ---- */

START_TEST(test_fuzz_parse) {
  static const char *const alphabet[] = {"%",  "=", "(", ")",    "{",  "}", "[",   "]",
                                         ",",  "#", "\"", "\\",  "\n", " ", "N",   "0",
                                         "9",  "f32", "relu", "\r", "\t", "\xff", "\xc3\xa9",
                                         "%x", "output", "graph", "9999999999999999999999"};
  /* CASTOR_FUZZ_ITERS and CASTOR_FUZZ_SEED run longer or other campaigns. */
  const char *env_iters = getenv("CASTOR_FUZZ_ITERS"), *env_seed = getenv("CASTOR_FUZZ_SEED");
  int iters = env_iters ? atoi(env_iters) : 600;
  rng r;
  rng_init(&r, env_seed ? strtoull(env_seed, NULL, 0) : 0xC0FFEE);
  int parsed = 0;
  for (int iter = 0; iter < iters; iter++) {
    const char *base = roundtrip_cases[rng_next(&r) % (sizeof roundtrip_cases /
                                                       sizeof *roundtrip_cases)];
    str_buf b;
    str_buf_init(&b);
    str_buf_puts(&b, base);
    int n_mut = rng_next(&r) % 4 ? 1 : 2 + (int)(rng_next(&r) % 3);
    for (int m = 0; m < n_mut; m++) {
      size_t len = b.len;
      size_t at = len ? (size_t)(rng_next(&r) % len) : 0;
      switch (rng_next(&r) % 6) {
      case 0: /* truncate */
        b.len = at, b.data[at] = 0;
        break;
      case 5: /* double a blank: must canonicalize away */ {
        char *sp = strchr(b.data + at, ' ');
        if (sp) {
          char *tail = xstrdup(sp);
          b.len = (size_t)(sp - b.data);
          str_buf_putc(&b, ' ');
          str_buf_puts(&b, tail);
          free(tail);
        }
        break;
      }
      case 1: /* delete a span */ {
        size_t n = 1 + (size_t)(rng_next(&r) % 8);
        if (at + n > len) n = len - at;
        memmove(b.data + at, b.data + at + n, len - at - n + 1);
        b.len -= n;
        break;
      }
      case 2: /* flip a byte */
        if (len) b.data[at] = (char)(rng_next(&r) & 0xff);
        break;
      case 3: /* insert a token */ {
        const char *tok = alphabet[rng_next(&r) % (sizeof alphabet / sizeof *alphabet)];
        char *tail = xstrdup(b.data + at);
        b.len = at;
        str_buf_puts(&b, tok);
        str_buf_puts(&b, tail);
        free(tail);
        break;
      }
      default: /* duplicate a span (repeats lines and names) */ {
        size_t n = 1 + (size_t)(rng_next(&r) % 40);
        if (at + n > len) n = len - at;
        char *span = xmalloc(n + 1);
        memcpy(span, b.data + at, n);
        span[n] = 0;
        size_t to = (size_t)(rng_next(&r) % (len + 1));
        char *tail = xstrdup(b.data + to);
        b.len = to;
        str_buf_append(&b, span, n);
        str_buf_puts(&b, tail);
        free(tail);
        free(span);
        break;
      }
      }
    }
    /* parse with the exact length: flipped bytes may be NUL */
    diag_sink *d = diag_sink_create();
    ir_graph *g = ir_parse("fuzz.cir", str_buf_cstr(&b), b.len, d);
    if (!g) {
      ck_assert_msg(diag_error_count(d) > 0, "iter %d: NULL without an error:\n%s", iter,
                    str_buf_cstr(&b));
    } else {
      parsed++;
      ck_assert_int_eq(diag_error_count(d), 0);
      (void)ir_verify(g, d); /* may fail (indices), must not crash */
      char *once = print_graph(g);
      diag_sink *d2 = diag_sink_create();
      ir_graph *g2 = ir_parse("again.cir", once, strlen(once), d2);
      ck_assert_msg(g2 != NULL, "iter %d: printed text does not parse:\n%s\n%s", iter, once,
                    diag_text(d2));
      char *twice = print_graph(g2);
      ck_assert_str_eq(twice, once);
      free(twice);
      free(once);
      ir_graph_destroy(g2);
      diag_sink_destroy(d2);
    }
    ir_graph_destroy(g);
    diag_sink_destroy(d);
    str_buf_fini(&b);
  }
  ck_assert_msg(parsed > 0 && parsed < iters, "parsed %d of %d mutants", parsed, iters);
}
END_TEST

/* ---- ir/README.md lists the ops of ir_ops.def ---- */

START_TEST(test_readme_op_list) {
  char *readme;
  size_t len;
  ck_assert_msg(str_read_file(CASTOR_SOURCE_DIR "/ir/README.md", &readme, &len),
                "cannot read ir/README.md");
  const char *begin = strstr(readme, "<!-- ops:begin -->\n");
  const char *end = strstr(readme, "<!-- ops:end -->");
  ck_assert_msg(begin && end && begin < end, "ir/README.md lacks the ops:begin/ops:end markers");
  begin += strlen("<!-- ops:begin -->\n");
  str_buf want;
  str_buf_init(&want);
  str_buf_puts(&want, "| op | operands | attributes | autocast | kernel | semantics |\n|---|---|---|---|---|---|\n");
  for (int i = 0; i < IR_OP_COUNT; i++) {
    ir_op op = (ir_op)i;
    str_buf_printf(&want, "| `%s` | %s | ", ir_op_name(op), ir_op_arity_str(op));
    int n = 0;
    for (int k = 0; k < IR_ATTR_COUNT; k++)
      if (ir_op_attrs(op) >> k & 1) str_buf_printf(&want, "%s`%s`", n++ ? ", " : "", ir_attr_name((ir_attr_key)k));
    str_buf_printf(&want, "%s | %s | %s | %s |\n", n ? "" : "-", ir_ac_class_name(ir_op_autocast(op)),
                   ir_kernel_class_name(ir_op_kernel(op)), ir_op_semantics(op));
  }
  char *got = xmalloc((size_t)(end - begin) + 1);
  memcpy(got, begin, (size_t)(end - begin));
  got[end - begin] = 0;
  if (strcmp(got, str_buf_cstr(&want)) != 0) { /* too long for a Check message */
    const char *path = CASTOR_BINARY_DIR "/ir-README-ops.md";
    FILE *f = fopen(path, "w");
    if (f) fputs(str_buf_cstr(&want), f), fclose(f);
    ck_abort_msg("ir/README.md's op list is stale; replace it with %s", path);
  }
  free(got);
  str_buf_fini(&want);
  free(readme);
}
END_TEST

static Suite *ir_suite(void) {
  Suite *s = suite_create("ir");
  TCase *tc = tcase_create("print");
  tcase_add_test(tc, test_print_built_graph);
  tcase_add_test(tc, test_print_node_and_edge_cases);
  tcase_add_test(tc, test_frozen_const);
  suite_add_tcase(s, tc);
  tc = tcase_create("parse");
  tcase_add_test(tc, test_roundtrip_table);
  tcase_add_test(tc, test_parse_fields);
  tcase_add_test(tc, test_parse_node_fields);
  tcase_add_test(tc, test_canonicalize);
  tcase_add_test(tc, test_parse_errors);
  tcase_add_test(tc, test_parse_nul_byte);
  tcase_add_test(tc, test_ints_roundtrip);
  tcase_add_test(tc, test_ints_errors);
  tcase_add_test(tc, test_state_kind);
  tcase_add_test(tc, test_readme_op_list);
  suite_add_tcase(s, tc);
  tc = tcase_create("verify");
  tcase_add_test(tc, test_verify_use_before_def);
  tcase_add_test(tc, test_verify_wrong_type);
  tcase_add_test(tc, test_verify_names_outputs_leaves);
  tcase_add_test(tc, test_verify_graph_invariants_left_by_the_parser);
  tcase_add_test(tc, test_verify_reports_every_violation);
  tcase_add_test(tc, test_bind_batch);
  tcase_add_test(tc, test_batch_stays_leading);
  suite_add_tcase(s, tc);
  tc = tcase_create("fuzz");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_fuzz_parse);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  return check_run(ir_suite());
}
