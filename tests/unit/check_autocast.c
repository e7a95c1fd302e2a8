/* SPDX-License-Identifier: Apache-2.0 */
/*
 * check_autocast.c: autocast seen from whole models: placements compared
 * with real Keras layer by layer (tests/golden/keras/placements.txt, made by
 * generate.py there), the documented differences, weights folded once per
 * dtype, the overflow and flush warnings of fold-constants, and the cast
 * report. Pass-level cases are golden tests in tests/golden/autocast and
 * tests/golden/cast-cleanup; per-policy numerics are in check_e2e.c.
 */
#include <check.h>

#include "tests/unit/test_support.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "frontend/frontend.h"
#include "passes/passes.h"
#include "tests/ref/ref.h"
#include "util/half.h"

static ir_graph *compile_text(const char *name, const char *text, const char *policy, const fe_options *fo,
                              diag_sink *d) {
  ir_graph *g = fe_load_mem(name, text, strlen(text), fo, d, NULL);
  ck_assert_msg(g != NULL, "%s: %s", name, diag_text(d));
  if (policy) ck_assert(ir_policy_from_name(policy, strlen(policy), &g->policy));
  pass_options po;
  pass_options_init(&po);
  po.verify_each = true;
  ck_assert_msg(pass_run_pipeline(g, PASS_PIPELINE_DEFAULT, &po, d), "%s: %s", name, diag_text(d));
  return g;
}

/* Writes a safetensors file with one F32 kernel [rows, cols] and a bias. */
static void write_safetensors(const char *path, const char *layer, int rows, int cols, const float *kernel,
                              const float *bias) {
  char header[512];
  int kbytes = rows * cols * 4, bbytes = cols * 4;
  int n = snprintf(header, sizeof header,
                   "{\"%s.kernel\":{\"dtype\":\"F32\",\"shape\":[%d,%d],\"data_offsets\":[0,%d]},"
                   "\"%s.bias\":{\"dtype\":\"F32\",\"shape\":[%d],\"data_offsets\":[%d,%d]}}",
                   layer, rows, cols, kbytes, layer, cols, kbytes, kbytes + bbytes);
  FILE *f = fopen(path, "wb");
  ck_assert(f != NULL);
  uint64_t len = (uint64_t)n;
  fwrite(&len, 8, 1, f);
  fwrite(header, 1, (size_t)n, f);
  fwrite(kernel, 4, (size_t)(rows * cols), f);
  fwrite(bias, 4, (size_t)cols, f);
  fclose(f);
}

START_TEST(test_overflow_and_flush_warnings) {
  char dir[] = "/tmp/castor_ac_XXXXXX", path[256];
  ck_assert(mkdtemp(dir) != NULL);
  snprintf(path, sizeof path, "%s/w.safetensors", dir);
  float kernel[8] = {70000.0f, 1.0f, -2.0f, 1e-9f, 0.5f, -70000.0f, 3e-6f, 0.0f}, bias[2] = {0.25f, 1e-30f};
  write_safetensors(path, "d", 4, 2, kernel, bias);
  const char *text = "model w\nx = input(shape=[4])\ny = dense(x, units=2, name=d)\noutput y\n";
  fe_options fo;
  fe_options_init(&fo);
  fo.weights_path = path;
  diag_sink *d = diag_sink_create();
  ir_graph *g = compile_text("w.cast", text, "mixed_float16", &fo, d);
  ck_assert_str_eq(diag_text(d),
                   "w.cast:3:5: warning: weight 'd.kernel': 2 of 8 values overflow f16 (|x| > 65504) and become infinite\n"
                   "y = dense(x, units=2, name=d)\n"
                   "    ^\n"
                   "w.cast:3:5: warning: weight 'd.kernel': 2 of 8 non-zero values become zero or subnormal in f16 (|x| < 6.10352e-05)\n"
                   "y = dense(x, units=2, name=d)\n"
                   "    ^\n"
                   "w.cast:3:5: warning: weight 'd.bias': 1 of 2 non-zero values become zero or subnormal in f16 (|x| < 6.10352e-05)\n"
                   "y = dense(x, units=2, name=d)\n"
                   "    ^\n");
  /* never clamped: the folded constant holds +-inf */
  const ir_node *k = ir_graph_find(g, "d.kernel.f16");
  ck_assert_msg(k && k->op == IR_OP_CONST && k->type.dtype == DT_F16, "no folded f16 kernel");
  const uint16_t *h = k->attr.data;
  ck_assert_uint_eq(h[0], 0x7c00);
  ck_assert_uint_eq(h[5], 0xfc00);
  ck_assert_uint_eq(h[1], 0x3c00);
  ck_assert(ir_graph_find(g, "d.kernel") == NULL); /* stored once, in f16 */
  ir_graph_destroy(g);
  /* bf16 has f32's range: no overflow, and 1e-30 is a normal bf16 */
  diag_clear(d);
  g = compile_text("w.cast", text, "mixed_bfloat16", &fo, d);
  ck_assert_str_eq(diag_text(d), "");
  ir_graph_destroy(g);
  diag_sink_destroy(d);
  unlink(path);
  rmdir(dir);
}
END_TEST

/* A weight large enough that fold-constants converts it in parts, one per
 * CPU (parts of 1M values and up): each policy's folded data is the
 * element-wise conversion of util/half.c, and the warnings count every
 * part's values once, whatever the split. Special values sit at every
 * 16th and near every multiple of 2^19 (where parts begin). */
START_TEST(test_fold_large_weight_in_parts) {
  char dir[] = "/tmp/castor_ac_XXXXXX", path[256];
  ck_assert(mkdtemp(dir) != NULL);
  snprintf(path, sizeof path, "%s/w.safetensors", dir);
  enum { ROWS = 1024, COLS = 2100 };
  int64_t n = (int64_t)ROWS * COLS;
  float *kernel = malloc((size_t)n * sizeof *kernel), bias[COLS];
  ck_assert(kernel != NULL);
  int64_t big = 0, tiny = 0;
  for (int64_t i = 0; i < n; i++) {
    kernel[i] = (float)((i * 7919) % 2001 - 1000) / 1024.0f;
    if (i % 16 == 5 || (i & ((1 << 19) - 1)) == 0 || ((i + 1) & ((1 << 19) - 1)) == 0) kernel[i] = 70000.0f, big++;
    else if (i % 16 == 11 || ((i + 2) & ((1 << 19) - 1)) == 0) kernel[i] = -3e-6f, tiny++;
  }
  for (int c = 0; c < COLS; c++) bias[c] = 0.5f;
  write_safetensors(path, "d", ROWS, COLS, kernel, bias);
  char text[160];
  snprintf(text, sizeof text, "model w\nx = input(shape=[%d])\ny = dense(x, units=%d, name=d)\noutput y\n", ROWS, COLS);
  fe_options fo;
  fe_options_init(&fo);
  fo.weights_path = path;
  diag_sink *d = diag_sink_create();
  for (int bf = 0; bf < 2; bf++) {
    diag_clear(d);
    ir_graph *g = compile_text("w.cast", text, bf ? "mixed_bfloat16" : "mixed_float16", &fo, d);
    char want[512];
    if (bf) /* 3e-6 is a normal bf16, 70000 finite */
      want[0] = 0;
    else
      snprintf(want, sizeof want,
               "w.cast:3:5: warning: weight 'd.kernel': %lld of %lld values overflow f16 (|x| > 65504) and become infinite\n"
               "y = dense(x, units=2100, name=d)\n    ^\n"
               "w.cast:3:5: warning: weight 'd.kernel': %lld of %lld non-zero values become zero or subnormal in f16 "
               "(|x| < 6.10352e-05)\ny = dense(x, units=2100, name=d)\n    ^\n",
               (long long)big, (long long)n, (long long)tiny, (long long)n);
    ck_assert_str_eq(diag_text(d), want);
    const ir_node *k = ir_graph_find(g, bf ? "d.kernel.bf16" : "d.kernel.f16");
    ck_assert_msg(k && k->op == IR_OP_CONST && k->attr.data, "no folded kernel");
    const uint16_t *h = k->attr.data;
    for (int64_t i = 0; i < n; i++) {
      uint16_t e = bf ? half_f32_to_bf16(kernel[i]) : half_f32_to_f16(kernel[i]);
      if (h[i] != e) ck_abort_msg("%s: value %lld: 0x%04x, want 0x%04x", bf ? "bf16" : "f16", (long long)i, h[i], e);
    }
    ir_graph_destroy(g);
  }
  diag_sink_destroy(d);
  free(kernel);
  unlink(path);
  rmdir(dir);
}
END_TEST

START_TEST(test_cast_report) {
  const char *text = "model r\nx = input(shape=[8])\nh = dense(x, units=8, activation=relu, name=d1)\n"
                     "h = dense(h, units=4, name=d2)\np = activation(h, softmax, name=sm)\noutput p\n";
  diag_sink *d = diag_sink_create();
  ir_graph *g = compile_text("r.cast", text, "mixed_bfloat16", NULL, d);
  str_buf b;
  str_buf_init(&b);
  pass_cast_report(g, &b);
  ck_assert_str_eq(str_buf_cstr(&b),
                   "cast report for r (policy mixed_bfloat16)\n"
                   "layer            compute rule                         casts at run time      weights\n"
                   "d1               bf16    mixed_bfloat16               1 (f32->bf16)          144 B bf16\n"
                   "d2               bf16    mixed_bfloat16               0                      72 B bf16\n"
                   "sm               f32     softmax runs in f32          1 (bf16->f32)          -\n"
                   "total: 5 of 6 ops in bf16, 2 casts, weights 216 B bf16 + 0 B f32\n");
  str_buf_fini(&b);
  ir_graph_destroy(g);
  diag_sink_destroy(d);
}
END_TEST

/* ---- placements against real Keras ----
 * Each line of placements.txt: model policy layer class compute output
 * variable castor_compute castor_output rules. Where rules is "-", castor
 * must agree with Keras's compute and output dtypes; otherwise the letters
 * name the documented differences (README.md beside the file) and castor
 * must give what the castor columns say: (a) softmax in f32, (b) model
 * outputs f32, (c) standalone elementwise layers not between 16-bit matmuls
 * in f32. The policy's variable dtype must equal Keras's. */

static const char *ir_name_of(const char *keras) {
  return !strcmp(keras, "float32") ? "f32" : !strcmp(keras, "float16") ? "f16" : !strcmp(keras, "bfloat16") ? "bf16" : keras;
}

START_TEST(test_keras_placements) {
  char path[1024], *text;
  size_t len;
  snprintf(path, sizeof path, "%s/tests/golden/keras/placements.txt", CASTOR_SOURCE_DIR);
  ck_assert_msg(str_read_file(path, &text, &len), "cannot read %s", path);
  char cur_model[64] = "", cur_policy[64] = "";
  ir_graph *g = NULL;
  diag_sink *d = diag_sink_create();
  int checked = 0, differences = 0;
  for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
    if (line[0] == '#' || !line[0]) continue;
    char model[64], policy[64], layer[64], cls[64], kc[16], ko[16], kv[16], cc[16], co[16], rules[16];
    ck_assert_msg(sscanf(line, "%63s %63s %63s %63s %15s %15s %15s %15s %15s %15s", model, policy, layer, cls, kc, ko,
                         kv, cc, co, rules) == 10,
                  "bad line: %s", line);
    if (strcmp(model, cur_model) || strcmp(policy, cur_policy)) {
      ir_graph_destroy(g);
      char cast_path[1024], *src;
      size_t src_len;
      snprintf(cast_path, sizeof cast_path, "%s/tests/golden/keras/%s.cast", CASTOR_SOURCE_DIR, model);
      ck_assert_msg(str_read_file(cast_path, &src, &src_len), "cannot read %s", cast_path);
      g = compile_text(cast_path, src, policy, NULL, d);
      free(src);
      snprintf(cur_model, sizeof cur_model, "%s", model);
      snprintf(cur_policy, sizeof cur_policy, "%s", policy);
    }
    const char *got_c = "-", *got_o;
    if (!strcmp(cls, "Output")) {
      const ir_node *v = NULL;
      for (int i = 0; i < g->n_outputs; i++)
        if (!strcmp(g->outputs[i].name, layer)) v = g->outputs[i].value;
      ck_assert_msg(v, "%s/%s: no output %s", model, policy, layer);
      got_o = dtype_name(v->type.dtype);
    } else {
      const ir_node *n = ir_graph_find(g, layer);
      ck_assert_msg(n, "%s/%s: no value %%%s", model, policy, layer);
      char mm[96];
      snprintf(mm, sizeof mm, "%s.matmul", layer);
      const ir_node *m = ir_graph_find(g, mm);
      got_o = dtype_name(n->type.dtype);
      if (strcmp(cls, "InputLayer")) got_c = dtype_name((m ? m : n)->type.dtype);
      if (strcmp(kv, "-")) {
        ir_policy p = n->policy != IR_POLICY_NONE ? n->policy : g->policy;
        ck_assert_msg(!strcmp(dtype_name(ir_policy_variable_dtype(p)), ir_name_of(kv)),
                      "%s/%s/%s: variable dtype %s, Keras %s", model, policy, layer,
                      dtype_name(ir_policy_variable_dtype(p)), kv);
      }
    }
    /* castor matches its documented rules ... */
    ck_assert_msg(!strcmp(got_c, ir_name_of(cc)) && !strcmp(got_o, ir_name_of(co)),
                  "%s/%s/%s: castor computes in %s with output %s; the documented rules say %s / %s", model, policy,
                  layer, got_c, got_o, cc, co);
    /* ... which are Keras's placement except where documented */
    if (!strcmp(rules, "-")) {
      ck_assert_msg(!strcmp(got_c, ir_name_of(kc)) && !strcmp(got_o, ir_name_of(ko)),
                    "%s/%s/%s: castor %s / %s, Keras %s / %s, and no documented difference", model, policy, layer,
                    got_c, got_o, kc, ko);
    } else {
      differences++;
      ck_assert_msg(strspn(rules, "abc") == strlen(rules), "%s/%s/%s: unknown rule '%s'", model, policy, layer, rules);
      /* every documented difference is castor choosing f32 where Keras did not */
      ck_assert_msg(!strcmp(got_o, "f32") && strcmp(ko, "float32"), "%s/%s/%s: rule %s but castor %s, Keras %s",
                    model, policy, layer, rules, got_o, ko);
    }
    checked++;
  }
  ck_assert_int_ge(checked, 150);
  ck_assert_int_ge(differences, 1);
  ir_graph_destroy(g);
  diag_sink_destroy(d);
  free(text);
}
END_TEST

/* pad8 changes shapes, never values: the reference interpreter gives the
 * same bits with and without it (padded products and biases are zeros, so
 * every sum is the same in double and every 16-bit rounding is too). */
START_TEST(test_pad8_preserves_values) {
  static const char *files[] = {"samples/mnist_mlp_small.cast", "tests/golden/keras/residual.cast",
                                "tests/golden/keras/shared_value.cast", "tests/golden/keras/overrides.cast"};
  static const char *pols[] = {"mixed_float16", "bfloat16"};
  for (size_t f = 0; f < sizeof files / sizeof files[0]; f++)
    for (size_t pi = 0; pi < 2; pi++) {
      char path[1024], *text;
      size_t len;
      snprintf(path, sizeof path, "%s/%s", CASTOR_SOURCE_DIR, files[f]);
      ck_assert_msg(str_read_file(path, &text, &len), "cannot read %s", path);
      diag_sink *d = diag_sink_create();
      ir_graph *plain = compile_text(path, text, pols[pi], NULL, d);
      ir_graph *padded = fe_load_mem(path, text, len, NULL, d, NULL);
      ck_assert(ir_policy_from_name(pols[pi], strlen(pols[pi]), &padded->policy));
      pass_options po;
      pass_options_init(&po);
      po.verify_each = true;
      ck_assert_msg(pass_run_pipeline(padded, PASS_PIPELINE_PAD8, &po, d), "%s", diag_text(d));
      int pads = 0;
      for (int i = 0; i < padded->n_nodes; i++) pads += padded->nodes[i]->op == IR_OP_SLICE;
      enum { B = 3 };
      const ir_node *in = ir_graph_input(plain, 0);
      int64_t n = 0;
      ck_assert(ir_type_numel(&in->type, B, &n));
      double *x = malloc((size_t)n * sizeof *x);
      rng r;
      rng_init(&r, 17);
      for (int64_t i = 0; i < n; i++) x[i] = rng_uniform(&r) * 4 - 2;
      double *want[8], *got[8];
      char err[256];
      ck_assert_msg(ref_run(plain, B, (const double *const *)&x, want, err, sizeof err), "%s", err);
      ck_assert_msg(ref_run(padded, B, (const double *const *)&x, got, err, sizeof err), "%s", err);
      for (int o = 0; o < plain->n_outputs; o++) {
        int64_t m = 0;
        ck_assert(ir_type_numel(&plain->outputs[o].value->type, B, &m));
        for (int64_t i = 0; i < m; i++)
          ck_assert_msg(want[o][i] == got[o][i] || (isnan(want[o][i]) && isnan(got[o][i])),
                        "%s %s output %d [%lld]: %.17g with pad8, %.17g without", files[f], pols[pi], o, (long long)i,
                        got[o][i], want[o][i]);
      }
      ck_assert_msg(pads > 0 || strstr(files[f], "residual"), "%s: pad8 did nothing", files[f]);
      ref_outputs_free(want, plain->n_outputs);
      ref_outputs_free(got, padded->n_outputs);
      free(x), free(text);
      ir_graph_destroy(plain), ir_graph_destroy(padded);
      diag_sink_destroy(d);
    }
}
END_TEST

int main(void) {
  Suite *s = suite_create("autocast");
  TCase *tc = tcase_create("models");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_overflow_and_flush_warnings);
  tcase_add_test(tc, test_fold_large_weight_in_parts);
  tcase_add_test(tc, test_cast_report);
  tcase_add_test(tc, test_keras_placements);
  tcase_add_test(tc, test_pad8_preserves_values);
  suite_add_tcase(s, tc);
  return check_run(s);
}
