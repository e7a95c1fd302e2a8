/* SPDX-License-Identifier: Apache-2.0 */
/*
 * check_layout_lanes.c: the CPU's layout kernels a vector at a time and
 * its row-wise lines with a partial last vector (codegen/cpu/cg_cpu.c,
 * cg_reindex_lanes in codegen/kernel/cg_index_map.c) and its concatenations a
 * run at a time (concat_body), at the attention's
 * shapes, against the float64 reference on every CPU code path this host
 * runs (its own, AVX2 and SSE2: vectors of 16, 8 and 4 lanes).
 *
 * The graph is a transformer's head split (tests/onnx/models/vit.opset17's
 * q/k/v: a slice of the fused projection, a reshape to heads, the two
 * transposes) plus lines of every length class: a source stride of 1 and
 * of 64 (the transposed keys), a slice with step 2, a reshape whose lines
 * take 16-, 8- and 4-lane vectors and a scalar tail, and softmax and
 * log_softmax over 28 and 37 elements (whole vectors and one masked
 * partial one). Layout ops move values, so their results must equal the
 * reference exactly; the row-wise ones within 1e-6 (normalized).
 */
#include <check.h>

#include "tests/unit/test_support.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/cg_backend.h"
#include "passes/passes.h"
#include "tests/ref/ref.h"
#include "util/util.h"

static const char graph_text[] =
    "graph lanes policy=%s\n"
    "%%x = f32[N,28,192] input() {index=0}\n"
    "%%s = f32[N,28,64] strided_slice(%%x) {starts=[0,0,64], ends=[0,28,128], steps=[1,1,1]}\n"
    "%%r = f32[N,28,4,16] reshape(%%s) {shape=[N,28,4,16]}\n"
    "%%q = f32[N,4,28,16] transpose(%%r) {perm=[0,2,1,3]}\n"
    "%%k = f32[N,4,16,28] transpose(%%r) {perm=[0,2,3,1]}\n"
    "%%e = f32[N,28,96] strided_slice(%%x) {starts=[0,0,1], ends=[0,28,192], steps=[1,1,2]}\n"
    "%%w = f32[N,96,56] reshape(%%x) {shape=[N,96,56]}\n"
    "%%p = f32[N,4,16,28] softmax(%%k)\n"
    "%%t = f32[N,28,37] strided_slice(%%x) {starts=[0,0,3], ends=[0,28,40], steps=[1,1,1]}\n"
    "%%u = f32[N,28,37] softmax(%%t)\n"
    "%%l = f32[N,28,37] log_softmax(%%t)\n"
    "output q = %%q\n"
    "output k = %%k\n"
    "output e = %%e\n"
    "output w = %%w\n"
    "output p = %%p\n"
    "output u = %%u\n"
    "output l = %%l\n";

enum { N_OUT = 7 };

static const struct { const char *cpu, *features; } cpus[] = {
    {NULL, NULL}, {"haswell", "+sse2,+sse4.2,+avx,+avx2,+fma,+f16c"}, {"x86-64", "+sse2"}};

/* Compiles graph text (one input, N_IN elements a batch row) for every
 * CPU of cpus[] and compares each output with the reference: exactly
 * where exact[o], else by normalized error within tol. The reference runs
 * the graph as written (float32: so it checks the passes' rewrites too,
 * fold-layout's), else as the passes leave it (its 16-bit values). */
static void run_graph(const char *policy, const char *text, int n_out, const bool *exact, int64_t row_in, double tol) {
  diag_sink *d = diag_sink_create();
  ir_graph *g = ir_parse("lanes.cir", text, strlen(text), d);
  ck_assert_msg(g, "%s", diag_text(d));
  ir_graph *g0 = strcmp(policy, "float32") ? NULL : ir_parse("lanes.cir", text, strlen(text), d);
  pass_options po;
  pass_options_init(&po);
  po.verify_each = true;
  ck_assert_msg(pass_run_pipeline(g, PASS_PIPELINE_DEFAULT, &po, d), "%s", diag_text(d));
  enum { BATCH = 3 };
  const int64_t N_IN = BATCH * row_in;
  float *in = xcalloc((size_t)N_IN, sizeof *in);
  rng r;
  rng_init(&r, 7);
  for (int i = 0; i < N_IN; i++) in[i] = rng_uniform_f32(&r, -4.0f, 4.0f);
  double *xin = ref_from_f32(in, N_IN), *want[16] = {NULL};
  ck_assert_int_le(n_out, 16);
  const double *rin[] = {xin};
  char err[256];
  ck_assert_msg(ref_run(g0 ? g0 : g, BATCH, rin, want, err, sizeof err), "reference: %s", err);
  ir_graph_destroy(g0);
  for (size_t ci = 0; ci < sizeof cpus / sizeof cpus[0]; ci++) {
    cg_backend_options bo;
    cg_backend_options_init(&bo);
    bo.threads = 2;
    bo.cg.cpu = cpus[ci].cpu, bo.cg.features = cpus[ci].features;
    const char *cpu = cpus[ci].cpu ? cpus[ci].cpu : "the host";
    cg_exec *ex = cg_backend_compile(&cg_backend_cpu, g, &bo, d);
    ck_assert_msg(ex, "%s: %s", cpu, diag_text(d));
    ck_assert_int_eq(ex->desc->n_outputs, n_out);
    void *raw[16];
    int64_t n[16];
    for (int o = 0; o < n_out; o++) {
      const rt_tensor_desc *od = &ex->desc->outputs[o];
      n[o] = 1;
      for (int k = 0; k < od->rank; k++) n[o] *= od->dims[k] < 0 ? BATCH : od->dims[k];
      raw[o] = xcalloc((size_t)n[o], 4);
    }
    const void *ins[] = {in};
    ck_assert_msg(ex->backend->run(ex, BATCH, ins, raw, d), "%s: run: %s", cpu, diag_text(d));
    for (int o = 0; o < n_out; o++) {
      const rt_tensor_desc *od = &ex->desc->outputs[o];
      ck_assert_int_eq(od->dtype, DT_F32); /* model outputs are f32 under every policy */
      const float *got = raw[o];
      if (!exact[o]) {
        double e = ref_normalized_error(got, want[o], n[o]);
        ck_assert_msg(e <= tol, "%s, %s: output %s: normalized error %g", policy, cpu, g->outputs[o].name, e);
      } else {
        for (int64_t i = 0; i < n[o]; i++)
          ck_assert_msg((double)got[i] == want[o][i], "%s, %s: output %s element %lld: %.9g, the reference %.9g",
                        policy, cpu, g->outputs[o].name, (long long)i, (double)got[i], want[o][i]);
      }
      free(raw[o]);
    }
    cg_exec_destroy(ex);
  }
  ref_outputs_free(want, n_out);
  free(xin);
  free(in);
  ir_graph_destroy(g);
  diag_sink_destroy(d);
}

static void run_policy(const char *policy) {
  char text[4096];
  snprintf(text, sizeof text, graph_text, policy);
  static const bool exact[N_OUT] = {true, true, true, true, false, false, false}; /* the row-wise ones: 1e-6 */
  run_graph(policy, text, N_OUT, exact, 28 * 192, 1e-6);
}

/* Concatenations a run at a time (cg_cpu.c's concat_body): along the
 * channels (the last axis) with runs of 32 (two 16-lane vectors), 3
 * (scalars after a 16-lane kernel's run) and 45 (16 + 16 + 8 + 4 + 1
 * lanes), each starting at an offset that is no multiple of the vector;
 * along an earlier axis (whole lines, one operand each: rows and
 * columns); an operand that is the model's input itself; and a concat
 * that starts a chain (DenseNet's concat, batch norm and relu): an
 * operand of the result's shape, one broadcast along rows and columns
 * (read at the run's column), a literal and relu. Then ShuffleNetV2's
 * channel shuffle in ONNX's NCHW (which fold-layout makes one transpose
 * of the NHWC value and two slices) and the transposes that interleave
 * 8, 4, 2, 3 and 5 source rows (transpose_interleave_kernel: blocks of
 * 10, 20 and 40 elements: 16-, 8- and 4-lane vectors and scalar tails; 3
 * and 5 rows: an NCHW image into NHWC, the shuffle's tree of pairs padded
 * to 4 and 8), also followed in the kernel by casts to bf16 and f16 (a
 * mixed policy's image into its first convolution: each vector rounded). */
static const char concat_text[] =
    "graph concat policy=%s\n"
    "%%x = f32[N,6,5,80] input() {index=0}\n"
    "%%a = f32[N,6,5,3] strided_slice(%%x) {starts=[0,0,0,0], ends=[0,6,5,3], steps=[1,1,1,1]}\n"
    "%%b = f32[N,6,5,32] strided_slice(%%x) {starts=[0,0,0,3], ends=[0,6,5,35], steps=[1,1,1,1]}\n"
    "%%c = f32[N,6,5,45] strided_slice(%%x) {starts=[0,0,0,35], ends=[0,6,5,80], steps=[1,1,1,1]}\n"
    "%%y = f32[N,6,5,80] concat(%%b, %%a, %%c) {axis=3}\n"
    "%%w = f32[N,6,5,160] concat(%%c, %%x, %%b, %%a) {axis=-1}\n"
    "%%r0 = f32[N,2,5,80] strided_slice(%%x) {starts=[0,0,0,0], ends=[0,2,5,80], steps=[1,1,1,1]}\n"
    "%%r1 = f32[N,3,5,80] strided_slice(%%x) {starts=[0,3,0,0], ends=[0,6,5,80], steps=[1,1,1,1]}\n"
    "%%h = f32[N,11,5,80] concat(%%r0, %%x, %%r1) {axis=1}\n"
    "%%q0 = f32[N,6,1,80] strided_slice(%%x) {starts=[0,0,4,0], ends=[0,6,5,80], steps=[1,1,1,1]}\n"
    "%%v = f32[N,6,7,80] concat(%%q0, %%x, %%q0) {axis=2}\n"
    "%%y2 = f32[N,6,5,80] concat(%%c, %%b, %%a) {axis=3}\n"
    "%%p = f32[N,1,1,80] strided_slice(%%x) {starts=[0,2,1,0], ends=[0,3,2,80], steps=[1,1,1,1]}\n"
    "%%t0 = f32[N,6,5,80] add(%%y2, %%x)\n"
    "%%t1 = f32[N,6,5,80] mul(%%t0, %%p)\n"
    "%%half = f32[] literal() {value=0.5}\n"
    "%%t2 = f32[N,6,5,80] add(%%t1, %%half)\n"
    "%%t3 = f32[N,6,5,80] relu(%%t2)\n"
    "%%x_nchw = f32[N,80,6,5] transpose(%%x) {perm=[0,3,1,2]}\n"
    "%%sr = f32[N,2,40,6,5] reshape(%%x_nchw) {shape=[N,2,40,6,5]}\n"
    "%%st = f32[N,40,2,6,5] transpose(%%sr) {perm=[0,2,1,3,4]}\n"
    "%%sr1 = f32[N,80,6,5] reshape(%%st) {shape=[N,80,6,5]}\n"
    "%%sa = f32[N,40,6,5] strided_slice(%%sr1) {starts=[0,0,0,0], ends=[0,40,6,5], steps=[1,1,1,1]}\n"
    "%%sb = f32[N,40,6,5] strided_slice(%%sr1) {starts=[0,40,0,0], ends=[0,80,6,5], steps=[1,1,1,1]}\n"
    "%%sa_nhwc = f32[N,6,5,40] transpose(%%sa) {perm=[0,2,3,1]}\n"
    "%%sb_nhwc = f32[N,6,5,40] transpose(%%sb) {perm=[0,2,3,1]}\n"
    "%%i8 = f32[N,6,5,8,10] reshape(%%x) {shape=[N,6,5,8,10]}\n"
    "%%t8 = f32[N,6,5,10,8] transpose(%%i8) {perm=[0,1,2,4,3]}\n"
    "%%i4 = f32[N,4,6,5,20] reshape(%%x) {shape=[N,4,6,5,20]}\n"
    "%%t4 = f32[N,6,5,20,4] transpose(%%i4) {perm=[0,2,3,4,1]}\n"
    "%%i2 = f32[N,6,2,5,40] reshape(%%x) {shape=[N,6,2,5,40]}\n"
    "%%u2 = f32[N,6,5,40,2] transpose(%%i2) {perm=[0,1,3,4,2]}\n"
    "%%i3 = f32[N,3,20,40] reshape(%%x) {shape=[N,3,20,40]}\n"
    "%%u3 = f32[N,20,40,3] transpose(%%i3) {perm=[0,2,3,1]}\n"
    "%%i5 = f32[N,5,12,40] reshape(%%x) {shape=[N,5,12,40]}\n"
    "%%u5 = f32[N,12,40,5] transpose(%%i5) {perm=[0,2,3,1]}\n"
    "%%j3 = f32[N,3,40,20] reshape(%%x) {shape=[N,3,40,20]}\n"
    "%%v3 = f32[N,40,20,3] transpose(%%j3) {perm=[0,2,3,1]}\n"
    "%%v3h = bf16[N,40,20,3] cast(%%v3) {to=bf16}\n"
    "%%v3f = f32[N,40,20,3] cast(%%v3h) {to=f32}\n"
    "%%j5 = f32[N,5,24,20] reshape(%%x) {shape=[N,5,24,20]}\n"
    "%%v5 = f32[N,24,20,5] transpose(%%j5) {perm=[0,2,3,1]}\n"
    "%%v5h = f16[N,24,20,5] cast(%%v5) {to=f16}\n"
    "%%v5f = f32[N,24,20,5] cast(%%v5h) {to=f32}\n"
    "output y = %%y\n"
    "output w = %%w\n"
    "output h = %%h\n"
    "output v = %%v\n"
    "output t = %%t3\n"
    "output sa = %%sa_nhwc\n"
    "output sb = %%sb_nhwc\n"
    "output t8 = %%t8\n"
    "output t4 = %%t4\n"
    "output t2 = %%u2\n"
    "output t3 = %%u3\n"
    "output t5 = %%u5\n"
    "output t3b = %%v3f\n"
    "output t5h = %%v5f\n";

static void run_concat(const char *policy, double tol) {
  char text[4096];
  snprintf(text, sizeof text, concat_text, policy);
  static const bool exact[] = {true, true, true, true, false, true, true, true, true, true, true, true, true, true};
  run_graph(policy, text, 14, exact, 6 * 5 * 80, tol);
}

START_TEST(test_lanes_float32) { run_policy("float32"); }
END_TEST

/* the same graph under float16: every value f16 (each layout kernel loads
 * and stores 16-bit lanes), the softmaxes in f32 */
START_TEST(test_lanes_float16) { run_policy("float16"); }
END_TEST

START_TEST(test_concat_float32) { run_concat("float32", 1e-6); }
END_TEST

/* every value f16: the runs load and store 16-bit lanes; the chain's
 * three rounded ops within f16's precision */
START_TEST(test_concat_float16) { run_concat("float16", 2e-3); }
END_TEST

int main(void) {
  Suite *s = suite_create("layout_lanes");
  TCase *tc = tcase_create("lanes");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_lanes_float32);
  tcase_add_test(tc, test_lanes_float16);
  tcase_add_test(tc, test_concat_float32);
  tcase_add_test(tc, test_concat_float16);
  suite_add_tcase(s, tc);
  return check_run(s);
}
