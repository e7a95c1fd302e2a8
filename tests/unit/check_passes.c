/* SPDX-License-Identifier: Apache-2.0 */
/*
 * check_passes.c: the pass manager (pipeline strings, verify-each, dumps to
 * a buffer and to a directory), the dce pass, and fold-constants' layout
 * ops and adds of constants (their data, element by element, and that a
 * variable's or an input's never folds). Pass behaviour on text IR
 * is also covered by the golden tests in tests/golden/dce.
 */
#include <check.h>

#include "tests/unit/test_support.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "passes/passes.h"
#include "tests/ref/ref.h"

static ir_graph *parse(const char *text) {
  diag_sink *d = diag_sink_create();
  ir_graph *g = ir_parse("t.cir", text, strlen(text), d);
  ck_assert_msg(g != NULL, "%s", diag_text(d));
  diag_sink_destroy(d);
  return g;
}

static const char *dag = "graph m policy=float32\n"
                         "%x = f32[N,4] input() {index=0}\n"
                         "%w = f32[4,4] const() {weight=\"w\"}\n"
                         "%dead = f32[N,4] matmul(%x, %w) {acc=f32}\n"
                         "%y = f32[N,4] relu(%x)\n"
                         "output y = %y\n";

static char *print(const ir_graph *g) {
  str_buf b;
  str_buf_init(&b);
  ir_print(g, &b);
  return str_buf_take(&b);
}

START_TEST(test_pipeline_errors) {
  static const struct {
    const char *pipeline, *want;
  } cases[] = {
      {"verify,bogus", "error: unknown pass 'bogus' in pipeline 'verify,bogus' (passes: verify,autocast,cast-cleanup,pad8,fold-constants,grad,dce,fold-bn,hoist-pool,fold-empty,fuse-gelu,fuse-silu,fold-layout)\n"},
      {"verify,,dce", "error: empty pass name in pipeline 'verify,,dce'\n"},
      {",", "error: empty pass name in pipeline ','\n"},
      {"dce,", "error: empty pass name in pipeline 'dce,'\n"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    ir_graph *g = parse(dag);
    diag_sink *d = diag_sink_create();
    ck_assert_msg(!pass_run_pipeline(g, cases[i].pipeline, NULL, d), "%s", cases[i].pipeline);
    ck_assert_str_eq(diag_text(d), cases[i].want);
    ck_assert_int_eq(g->n_nodes, 4); /* nothing ran: %dead is still there */
    diag_sink_destroy(d);
    ir_graph_destroy(g);
  }
  diag_sink *d = diag_sink_create();
  ck_assert(pass_pipeline_check("", d));
  ck_assert(pass_pipeline_check("verify,dce,verify", d));
  ck_assert(pass_lookup("dce", 3) == pass_dce_run);
  ck_assert(pass_lookup("dc", 2) == NULL);
  diag_sink_destroy(d);
}
END_TEST

START_TEST(test_dce) {
  ir_graph *g = parse(dag);
  diag_sink *d = diag_sink_create();
  pass_options o;
  pass_options_init(&o);
  o.verify_each = true;
  ck_assert_msg(pass_run_pipeline(g, "dce", &o, d), "%s", diag_text(d));
  char *s = print(g);
  ck_assert_str_eq(s, "graph m policy=float32\n%x = f32[N,4] input() {index=0}\n%y = f32[N,4] relu(%x)\noutput y = %y\n");
  ck_assert_int_eq(g->nodes[1]->id, 1);
  ck_assert_msg(pass_run_pipeline(g, "dce", &o, d), "%s", diag_text(d));
  char *s2 = print(g);
  ck_assert_str_eq(s, s2); /* idempotent */
  free(s), free(s2);
  diag_sink_destroy(d);
  ir_graph_destroy(g);
}
END_TEST

START_TEST(test_verify_each_names_the_pass) {
  ir_graph *g = parse(dag);
  g->nodes[3]->type.dims[1] = 5; /* %y = relu(%x) now claims f32[N,5] */
  diag_sink *d = diag_sink_create();
  pass_options o;
  pass_options_init(&o);
  o.verify_each = true;
  ck_assert(!pass_run_pipeline(g, "dce", &o, d));
  ck_assert_msg(strstr(diag_text(d), "note: the IR is invalid after pass 'dce'") != NULL, "%s", diag_text(d));
  ck_assert_msg(strstr(diag_text(d), "%y") != NULL, "%s", diag_text(d));
  diag_clear(d);
  o.verify_each = false; /* without it dce alone does not notice */
  ck_assert(pass_run_pipeline(g, "dce", &o, d));
  ck_assert(!pass_run_pipeline(g, "verify", &o, d));
  diag_sink_destroy(d);
  ir_graph_destroy(g);
}
END_TEST

START_TEST(test_dump_to_buffer_and_dir) {
  ir_graph *g = parse(dag);
  diag_sink *d = diag_sink_create();
  str_buf out;
  str_buf_init(&out);
  pass_options o;
  pass_options_init(&o);
  o.dump_after = "dce";
  o.dump_out = &out;
  ck_assert(pass_run_pipeline(g, "verify,dce", &o, d));
  ck_assert_msg(str_has_prefix(str_buf_cstr(&out), "# IR after dce\ngraph m policy=float32\n"), "%s", str_buf_cstr(&out));
  ck_assert(strstr(str_buf_cstr(&out), "after verify") == NULL);
  ir_graph_destroy(g);

  char dir[] = "/tmp/castor_dump_XXXXXX";
  ck_assert(mkdtemp(dir) != NULL);
  g = parse(dag);
  o.dump_after = "all";
  o.dump_dir = dir;
  ck_assert_msg(pass_run_pipeline(g, "verify,dce,verify", &o, d), "%s", diag_text(d));
  const char *files[] = {"01.after-verify.cir", "02.after-dce.cir", "03.after-verify.cir"};
  for (int i = 0; i < 3; i++) {
    char path[256], *text;
    size_t len;
    snprintf(path, sizeof path, "%s/%s", dir, files[i]);
    ck_assert_msg(str_read_file(path, &text, &len), "missing %s", path);
    ck_assert(str_has_prefix(text, "graph m policy=float32\n"));
    ck_assert_int_eq(strstr(text, "%dead") != NULL, i == 0);
    free(text);
    unlink(path);
  }
  rmdir(dir);
  /* an unknown --dump-after pass is an error before anything runs */
  o.dump_after = "nope";
  ck_assert(!pass_run_pipeline(g, "dce", &o, d));
  ck_assert_msg(strstr(diag_text(d), "unknown pass 'nope' in --dump-after") != NULL, "%s", diag_text(d));
  /* an unwritable dump directory is reported */
  diag_clear(d);
  o.dump_after = "all";
  o.dump_dir = "/proc/castor-no-such-dir";
  ck_assert(!pass_run_pipeline(g, "dce", &o, d));
  ck_assert_msg(strstr(diag_text(d), "cannot create dump directory") != NULL, "%s", diag_text(d));
  str_buf_fini(&out);
  diag_sink_destroy(d);
  ir_graph_destroy(g);
}
END_TEST

/* fold-constants: a transpose, a strided_slice with steps, a concat along
 * the last axis and an f32 add of constants with data become constants
 * holding their results (what an ONNX LSTM's gate reordering lowers to,
 * computed once at compile time); an op of an input or a variable stays. */
START_TEST(test_fold_layout_of_constants) {
  ir_graph *g = parse("graph m policy=float32\n"
                      "%x = f32[N,3] input() {index=0}\n"
                      "%a = f32[2,3] const() {weight=\"a\"}\n"
                      "%b = f32[4,5] const() {weight=\"b\"}\n"
                      "%v = f32[3,2] variable() {weight=\"v\", init=0, kind=weight}\n"
                      "%at = f32[3,2] transpose(%a) {perm=[1,0]}\n"
                      "%bs = f32[2,2] strided_slice(%b) {starts=[1,1], ends=[4,5], steps=[2,3]}\n"
                      "%cat = f32[3,4] concat(%at, %at) {axis=-1}\n"
                      "%sum = f32[3,2] add(%at, %at)\n"
                      "%vt = f32[2,3] transpose(%v) {perm=[1,0]}\n"
                      "%y = f32[N,2] matmul(%x, %at) {acc=f32}\n"
                      "%y2 = f32[N,2] matmul(%x, %sum) {acc=f32}\n"
                      "%y3 = f32[N,4] matmul(%x, %cat) {acc=f32}\n"
                      "%y4 = f32[N,3] matmul(%y, %vt) {acc=f32}\n"
                      "%bsb = f32[2,2] add(%bs, %bs)\n"
                      "output y = %y\noutput y2 = %y2\noutput y3 = %y3\noutput y4 = %y4\noutput b = %bsb\n");
  static const float a[6] = {1, 2, 3, 4, 5, 6};
  float b[20];
  for (int i = 0; i < 20; i++) b[i] = (float)(10 + i);
  ir_graph_find(g, "a")->attr.data = a;
  ir_graph_find(g, "b")->attr.data = b;
  diag_sink *d = diag_sink_create();
  pass_options o;
  pass_options_init(&o);
  o.verify_each = true;
  ck_assert_msg(pass_run_pipeline(g, "verify,fold-constants", &o, d), "%s", diag_text(d)); /* no dce: %bs stays */
  static const struct {
    const char *name;
    int n;
    float want[12];
  } cases[] = {
      {"at", 6, {1, 4, 2, 5, 3, 6}},
      {"bs", 4, {16, 19, 26, 29}}, /* b[1,1], b[1,4], b[3,1], b[3,4] */
      {"cat", 12, {1, 4, 1, 4, 2, 5, 2, 5, 3, 6, 3, 6}},
      {"sum", 6, {2, 8, 4, 10, 6, 12}},
      {"bsb", 4, {32, 38, 52, 58}},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    const ir_node *n = ir_graph_find(g, cases[c].name);
    ck_assert_msg(n && n->op == IR_OP_CONST && n->attr.data, "%%%s is not a constant with data", cases[c].name);
    ck_assert_str_eq(n->attr.weight, cases[c].name);
    for (int i = 0; i < cases[c].n; i++)
      ck_assert_msg(((const float *)n->attr.data)[i] == cases[c].want[i], "%%%s[%d] = %g, want %g", cases[c].name, i,
                    (double)((const float *)n->attr.data)[i], (double)cases[c].want[i]);
  }
  ck_assert_msg(ir_graph_find(g, "vt")->op == IR_OP_TRANSPOSE, "a variable's transpose was folded");
  /* constants read from text have no data: the fold keeps the shape, without data */
  ir_graph_destroy(g);
  g = parse("graph m policy=float32\n%x = f32[N,2] input() {index=0}\n%a = f32[3,2] const() {weight=\"a\"}\n"
            "%at = f32[2,3] transpose(%a) {perm=[1,0]}\n%y = f32[N,3] matmul(%x, %at) {acc=f32}\noutput y = %y\n");
  ck_assert_msg(pass_run_pipeline(g, "verify,fold-constants,dce", &o, d), "%s", diag_text(d));
  char *text = print(g);
  ck_assert_str_eq(text, "graph m policy=float32\n%x = f32[N,2] input() {index=0}\n"
                         "%at = f32[2,3] const() {weight=\"at\"}\n%y = f32[N,3] matmul(%x, %at) {acc=f32}\n"
                         "output y = %y\n");
  free(text);
  diag_sink_destroy(d);
  ir_graph_destroy(g);
}
END_TEST

/* fold-layout's slices through unit views with a gather of a constant
 * index (text IR's constants have no data: tests/golden/fold-layout/slices
 * has the rest): ONNX's LSTM last step (Gather -1) and an index past the
 * end (clamped to the last row, as gather reads it) become one slice of
 * the scan-like input and a reshape, with the reference's same values. */
START_TEST(test_fold_layout_gather_slice) {
  const char *text = "graph m policy=float32\n"
                     "%y = f32[3,4,2,5] input() {index=0}\n"
                     "%h = f32[3,4,1,5] strided_slice(%y) {starts=[0,0,0,0], ends=[3,4,1,5], steps=[1,1,1,1]}\n"
                     "%t = f32[1,3,4,5] transpose(%h) {perm=[2,0,1,3]}\n"
                     "%s = f32[3,4,5] reshape(%t) {shape=[3,4,5]}\n"
                     "%i = i64[1] const() {weight=\"i\"}\n"
                     "%j = i32[] const() {weight=\"j\"}\n"
                     "%g = f32[3,1,5] gather(%s, %i) {axis=1}\n"
                     "%c = f32[3,5] gather(%s, %j) {axis=-2}\n"
                     "output g = %g\noutput c = %c\n";
  static const int64_t i_last = -1;
  static const int32_t j_past = 9;
  double x[3 * 4 * 2 * 5], *want[2], *got[2];
  for (int k = 0; k < 3 * 4 * 2 * 5; k++) x[k] = k;
  const double *in[1] = {x};
  char err[256];
  ir_graph *g = parse(text);
  ir_graph_find(g, "i")->attr.data = &i_last;
  ir_graph_find(g, "j")->attr.data = &j_past;
  ck_assert_msg(ref_run(g, 1, in, want, err, sizeof err), "%s", err);
  diag_sink *d = diag_sink_create();
  pass_options o;
  pass_options_init(&o);
  o.verify_each = true;
  ck_assert_msg(pass_run_pipeline(g, "verify,fold-layout,dce", &o, d), "%s", diag_text(d));
  for (int k = 0; k < 2; k++) {
    const ir_node *n = ir_graph_find(g, k ? "c" : "g");
    ck_assert_msg(n->op == IR_OP_RESHAPE && n->srcs[0]->op == IR_OP_STRIDED_SLICE && !strcmp(n->srcs[0]->srcs[0]->name, "y"),
                  "%%%s is not a reshape of a slice of %%y", n->name);
    const ir_attr *a = &n->srcs[0]->attr;
    static const int64_t starts[4] = {0, 3, 0, 0}, ends[4] = {3, 4, 1, 5};
    for (int r = 0; r < 4; r++)
      ck_assert_msg(a->starts.v[r] == starts[r] && a->ends.v[r] == ends[r] && a->steps.v[r] == 1,
                    "%%%s's slice at %d: %lld:%lld:%lld", n->name, r, (long long)a->starts.v[r], (long long)a->ends.v[r],
                    (long long)a->steps.v[r]);
  }
  ck_assert_msg(!ir_graph_find(g, "h") && !ir_graph_find(g, "t"), "the copies of h are still there");
  ck_assert_msg(ref_run(g, 1, in, got, err, sizeof err), "%s", err);
  for (int k = 0; k < 15; k++) {
    ck_assert_msg(got[0][k] == want[0][k] && got[1][k] == want[1][k], "output %d: %g %g, want %g %g", k, got[0][k],
                  got[1][k], want[0][k], want[1][k]);
    ck_assert_msg(want[0][k] == want[1][k], "the last row and the clamped one differ at %d", k);
  }
  ref_outputs_free(want, 2), ref_outputs_free(got, 2);
  diag_sink_destroy(d);
  ir_graph_destroy(g);
}
END_TEST

/* hoist-pool: an average pool without pads above the 1x1 conv2d (and bias
 * add) before it; the float64 reference of the rewritten graph equals the
 * original's up to its rounding (the two orders are the same linear map).
 * Not hoisted: a pool with pads (its zeros would meet the bias), a pool of
 * a 3x3 conv, a pool of a conv that has another use, and a 3x3 pool of
 * stride 1 after a conv of 16 channels to 1 (more work hoisted: 9 sums of
 * 16 channels a pixel instead of 9 of 1). */
START_TEST(test_hoist_pool) {
  const char *text = "graph m policy=float32\n"
                     "%x = f32[N,6,5,3] input() {index=0}\n"
                     "%w = f32[1,1,3,4] const() {weight=\"w\"}\n"
                     "%b = f32[4] const() {weight=\"b\"}\n"
                     "%c = f32[N,6,5,4] conv2d(%x, %w) {acc=f32, strides=[1,1], dilations=[1,1], pads=[0,0,0,0]}\n"
                     "%a = f32[N,6,5,4] add(%c, %b)\n"
                     "%p = f32[N,3,2,4] avg_pool2d(%a) {strides=[2,2], pads=[0,0,0,0], pool=[2,2]}\n"
                     "%r = f32[N,3,2,4] relu(%p)\n"
                     "%c2 = f32[N,6,5,4] conv2d(%x, %w) {acc=f32, strides=[1,1], dilations=[1,1], pads=[0,0,0,0]}\n"
                     "%p2 = f32[N,5,4,4] avg_pool2d(%c2) {strides=[1,1], pads=[0,0,0,0], pool=[2,2]}\n"
                     "%padded = f32[N,4,3,4] avg_pool2d(%c2) {strides=[2,2], pads=[1,1,1,1], pool=[2,2]}\n"
                     "%w3 = f32[3,3,3,4] const() {weight=\"w3\"}\n"
                     "%c3 = f32[N,6,5,4] conv2d(%x, %w3) {acc=f32, strides=[1,1], dilations=[1,1], pads=[1,1,1,1]}\n"
                     "%p3 = f32[N,3,2,4] avg_pool2d(%c3) {strides=[2,2], pads=[0,0,0,0], pool=[2,2]}\n"
                     "%c4 = f32[N,6,5,4] conv2d(%x, %w) {acc=f32, strides=[1,1], dilations=[1,1], pads=[0,0,0,0]}\n"
                     "%p4 = f32[N,3,2,4] avg_pool2d(%c4) {strides=[2,2], pads=[0,0,0,0], pool=[2,2]}\n"
                     "%x16 = f32[N,6,5,16] input() {index=1}\n"
                     "%w16 = f32[1,1,16,1] const() {weight=\"w16\"}\n"
                     "%c5 = f32[N,6,5,1] conv2d(%x16, %w16) {acc=f32, strides=[1,1], dilations=[1,1], pads=[0,0,0,0]}\n"
                     "%p5 = f32[N,4,3,1] avg_pool2d(%c5) {strides=[1,1], pads=[0,0,0,0], pool=[3,3]}\n"
                     "output r = %r\noutput p2 = %p2\noutput padded = %padded\noutput p3 = %p3\noutput p4 = %p4\n"
                     "output c4 = %c4\noutput p5 = %p5\n";
  static float w[12], b[4], w3[108], w16[16];
  for (int k = 0; k < 12; k++) w[k] = (float)((k * 7 % 11) - 5) / 4;
  for (int k = 0; k < 4; k++) b[k] = (float)k - 1.5f;
  for (int k = 0; k < 108; k++) w3[k] = (float)((k * 5 % 13) - 6) / 8;
  for (int k = 0; k < 16; k++) w16[k] = (float)(k - 8) / 8;
  enum { N = 2, NX = N * 6 * 5 * 3, NX16 = N * 6 * 5 * 16, NOUT = 7 };
  double x[NX], x16[NX16], *want[NOUT], *got[NOUT];
  for (int k = 0; k < NX; k++) x[k] = (double)((k * 37 % 101) - 50) / 25;
  for (int k = 0; k < NX16; k++) x16[k] = (double)((k * 29 % 97) - 48) / 24;
  const double *in[2] = {x, x16};
  char err[256];
  ir_graph *g = parse(text);
  ir_graph_find(g, "w")->attr.data = w;
  ir_graph_find(g, "b")->attr.data = b;
  ir_graph_find(g, "w3")->attr.data = w3;
  ir_graph_find(g, "w16")->attr.data = w16;
  ck_assert_msg(ref_run(g, N, in, want, err, sizeof err), "%s", err);
  diag_sink *d = diag_sink_create();
  pass_options o;
  pass_options_init(&o);
  o.verify_each = true;
  ck_assert_msg(pass_run_pipeline(g, "verify,hoist-pool,dce", &o, d), "%s", diag_text(d));
  /* r = relu(add(conv2d(avg_pool2d(x)), b)), the pool's attributes kept */
  const ir_node *r = ir_graph_find(g, "r"), *a = r->srcs[0], *c = a->srcs[0], *q = c->srcs[0];
  ck_assert_msg(a->op == IR_OP_ADD && c->op == IR_OP_CONV2D && q->op == IR_OP_AVG_POOL2D && !strcmp(q->srcs[0]->name, "x"),
                "%%r does not read add(conv2d(avg_pool2d(%%x)))");
  ck_assert_str_eq(q->name, "p.hoisted");
  ck_assert_int_eq(q->attr.pool.v[0], 2); ck_assert_int_eq(q->attr.strides.v[1], 2);
  ck_assert_int_eq(q->type.dims[1], 3); ck_assert_int_eq(q->type.dims[2], 2); ck_assert_int_eq(q->type.dims[3], 3);
  ck_assert_int_eq(c->type.dims[1], 3); ck_assert_int_eq(a->type.dims[2], 2);
  ck_assert_msg(!ir_graph_find(g, "p"), "the old pool is still there");
  /* the rest as written */
  static const char *const kept[] = {"p2", "padded", "p3", "p4", "p5"};
  for (int k = 0; k < 5; k++) {
    const ir_node *n = ir_graph_find(g, kept[k]);
    ck_assert_msg(n && n->op == IR_OP_AVG_POOL2D && n->srcs[0]->op == IR_OP_CONV2D, "%%%s was moved", kept[k]);
  }
  ck_assert_msg(ref_run(g, N, in, got, err, sizeof err), "%s", err);
  static const int64_t sizes[NOUT] = {N * 3 * 2 * 4, N * 5 * 4 * 4, N * 4 * 3 * 4, N * 3 * 2 * 4, N * 3 * 2 * 4, N * 6 * 5 * 4, N * 4 * 3};
  for (int o2 = 0; o2 < NOUT; o2++)
    for (int64_t k = 0; k < sizes[o2]; k++)
      ck_assert_msg(fabs(got[o2][k] - want[o2][k]) <= 1e-12 * (1 + fabs(want[o2][k])), "output %d [%lld]: %.17g, want %.17g",
                    o2, (long long)k, got[o2][k], want[o2][k]);
  ref_outputs_free(want, NOUT), ref_outputs_free(got, NOUT);
  diag_sink_destroy(d);
  ir_graph_destroy(g);
}
END_TEST

int main(void) {
  Suite *s = suite_create("passes");
  TCase *tc = tcase_create("manager");
  tcase_add_test(tc, test_pipeline_errors);
  tcase_add_test(tc, test_dce);
  tcase_add_test(tc, test_verify_each_names_the_pass);
  tcase_add_test(tc, test_dump_to_buffer_and_dir);
  tcase_add_test(tc, test_fold_layout_of_constants);
  tcase_add_test(tc, test_fold_layout_gather_slice);
  tcase_add_test(tc, test_hoist_pool);
  suite_add_tcase(s, tc);
  return check_run(s);
}
