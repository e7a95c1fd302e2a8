/* SPDX-License-Identifier: Apache-2.0 */
/*
 * check_e2e.c: end-to-end numerics. Models go through the real pipeline
 * (frontend -> passes -> codegen JIT -> runtime) and their outputs are
 * compared with the float64 reference interpreter (tests/ref) on seeded
 * random inputs, op by op and for the sample models; the CLI and the
 * samples/host.c program are checked against the same oracle.
 *
 * Bounds (float32 everywhere):
 *  - normalized error (max |got - want| / max |want|) below 1e-5 for op
 *    tests: an f32 dot product of length K has relative error about
 *    sqrt(K) * 2^-24 on random data (K <= 300 here: ~1e-6), and exp/tanh/
 *    gelu are accurate to a few ulp (~3e-7);
 *  - max relative error below 1e-5 for the softmax outputs of the sample
 *    models, as the foundation issue requires: softmax outputs are positive
 *    and their relative error is the absolute error of the logits (~1e-6).
 */
#include <check.h>

#include "tests/unit/test_support.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "castor.h"
#include "codegen/codegen.h"
#include "frontend/frontend.h"
#include "passes/passes.h"
#include "formats/npy.h"
#include "tests/ref/ref.h"

/* Compiles `text` and runs it at `batch` on seeded inputs; compares every
 * output with the reference; returns the worst error of the chosen metric. */
typedef struct e2e_result {
  double worst;
  char msg[512];
} e2e_result;

/* Loads `text`, runs the default pipeline under `policy` (NULL: the
 * model's), JIT-compiles and runs at `batch` on seeded inputs. Compares
 * every output with the reference interpreter run on the same compiled
 * graph (16-bit rounding modelled: measures codegen) into *same, and on
 * the float32 model as the frontend lowered it (measures what the policy
 * costs) into *exact. */
static void run_policy_case(const char *name, const char *text, const char *policy, int64_t batch,
                            uint64_t seed, bool rel, e2e_result *same, e2e_result *exact) {
  diag_sink *d = diag_sink_create();
  fe_options fo;
  fe_options_init(&fo);
  fo.seed = seed;
  ir_graph *g32 = fe_load_mem(name, text, strlen(text), &fo, d, NULL);
  ck_assert_msg(g32 != NULL, "%s: load failed:\n%s", name, diag_text(d));
  ir_graph *g = ir_graph_clone(g32);
  if (policy) ck_assert(ir_policy_from_name(policy, strlen(policy), &g->policy));
  pass_options po;
  pass_options_init(&po);
  po.verify_each = true;
  ck_assert_msg(pass_run_pipeline(g, PASS_PIPELINE_DEFAULT, &po, d), "%s: passes:\n%s", name, diag_text(d));
  rt_program *p = cg_compile_cpu(g, NULL, d);
  ck_assert_msg(p != NULL, "%s: codegen failed:\n%s", name, diag_text(d));

  int ni = p->n_inputs, no = p->n_outputs;
  float **in = calloc((size_t)ni, sizeof *in);
  double **in64 = calloc((size_t)ni, sizeof *in64);
  float **out = calloc((size_t)no, sizeof *out);
  int64_t *out_n = calloc((size_t)no, sizeof *out_n);
  rng r;
  rng_init(&r, seed * 7919 + 1);
  for (int i = 0; i < ni; i++) {
    int64_t n = batch;
    for (int k = 1; k < p->inputs[i].rank; k++) n *= p->inputs[i].dims[k];
    in[i] = malloc((size_t)n * sizeof(float));
    for (int64_t k = 0; k < n; k++) in[i][k] = rng_uniform_f32(&r, -2.0f, 2.0f);
    in64[i] = ref_from_f32(in[i], n);
  }
  for (int o = 0; o < no; o++) {
    ck_assert_msg(p->outputs[o].dtype == DT_F32, "%s: output %d is not f32", name, o);
    int64_t n = 1;
    for (int k = 0; k < p->outputs[o].rank; k++) n *= p->outputs[o].dims[k] < 0 ? batch : p->outputs[o].dims[k];
    out_n[o] = n;
    out[o] = malloc((size_t)n * sizeof(float));
    for (int64_t k = 0; k < n; k++) out[o][k] = NAN; /* every element must be written */
  }
  ck_assert_msg(rt_program_run(p, batch, (const void *const *)in, (void *const *)out, NULL, d), "%s: run:\n%s",
                name, diag_text(d));
  for (int pass = 0; pass < 2; pass++) {
    e2e_result *res = pass == 0 ? same : exact;
    if (!res) continue;
    res->worst = 0;
    res->msg[0] = 0;
    double **want = calloc((size_t)no, sizeof *want);
    char err[256];
    ck_assert_msg(ref_run(pass == 0 ? g : g32, batch, (const double *const *)in64, want, err, sizeof err),
                  "%s: ref: %s", name, err);
    for (int o = 0; o < no; o++) {
      ref_cmp c = rel ? ref_compare_rel(out[o], want[o], out_n[o], 1e-30)
                      : ref_compare_normalized(out[o], want[o], out_n[o]);
      if (c.error >= res->worst) {
        char buf[256];
        res->worst = c.error;
        snprintf(res->msg, sizeof res->msg, "%s policy %s batch %lld output %s vs %s: %s", name,
                 policy ? policy : "(model)", (long long)batch, p->outputs[o].name,
                 pass == 0 ? "the same graph" : "the f32 model", ref_cmp_str(&c, buf, sizeof buf));
      }
    }
    ref_outputs_free(want, no);
    free(want);
  }
  for (int i = 0; i < ni; i++) free(in[i]), free(in64[i]);
  for (int o = 0; o < no; o++) free(out[o]);
  free(in), free(in64), free(out), free(out_n);
  rt_program_destroy(p);
  ir_graph_destroy(g);
  ir_graph_destroy(g32);
  diag_sink_destroy(d);
}

static e2e_result run_case(const char *name, const char *text, int64_t batch, uint64_t seed, bool rel) {
  e2e_result res;
  run_policy_case(name, text, NULL, batch, seed, rel, &res, NULL);
  return res;
}

/* ---- one case per op and fusion shape ---- */

static const struct {
  const char *name, *text;
} op_cases[] = {
    {"dense_relu", "model m\nx = input(shape=[37])\ny = dense(x, units=29, activation=relu)\noutput y\n"},
    {"dense_linear_nobias", "model m\nx = input(shape=[8])\ny = dense(x, units=16, use_bias=false)\noutput y\n"},
    {"dense_sigmoid", "model m\nx = input(shape=[13])\ny = dense(x, units=7, activation=sigmoid)\noutput y\n"},
    {"dense_tanh", "model m\nx = input(shape=[64])\ny = dense(x, units=33, activation=tanh)\noutput y\n"},
    {"dense_gelu", "model m\nx = input(shape=[100])\ny = dense(x, units=100, activation=gelu)\noutput y\n"},
    {"dense_softmax", "model m\nx = input(shape=[300])\ny = dense(x, units=10, activation=softmax)\noutput y\n"},
    {"dense_1x1", "model m\nx = input(shape=[1])\ny = dense(x, units=1)\noutput y\n"},
    {"activations", "model m\nx = input(shape=[45])\na = activation(x, relu)\nb = activation(a, tanh)\n"
                    "c = activation(x, sigmoid)\nd = activation(x, gelu)\ne = activation(x, softmax)\n"
                    "f = activation(x, linear)\noutput b, c, d, e, f\n"},
    {"add_mul_dag", "model m\nx = input(shape=[24])\na = dense(x, units=24, activation=relu)\n"
                    "b = dense(x, units=24, activation=tanh)\ns = add(a, b)\np = multiply(s, a)\n"
                    "q = add(p, x)\noutput q\n"},
    {"two_inputs", "model m\nx = input(shape=[5])\ny = input(shape=[5])\nz = multiply(x, y)\n"
                   "w = dense(z, units=3)\noutput w, z\n"},
    {"output_is_input", "model m\nx = input(shape=[6])\ny = dense(x, units=2)\nz = activation(y, linear)\noutput x, y, z\n"},
    {"residual", "model m\nx = input(shape=[32])\nh = dense(x, units=32, activation=gelu)\n"
                 "h = dense(h, units=32)\nr = add(h, x)\nr = activation(r, relu)\no = dense(r, units=5, activation=softmax)\noutput o\n"},
};

static const int64_t batches[] = {1, 2, 3, 4, 5, 7, 9, 16, 33};

START_TEST(test_ops) {
  for (size_t b = 0; b < sizeof batches / sizeof batches[0]; b++) {
    e2e_result r = run_case(op_cases[_i].name, op_cases[_i].text, batches[b], 11 + (uint64_t)b, false);
    ck_assert_msg(r.worst < 1e-5, "%s", r.msg);
  }
}
END_TEST

/* Extreme inputs: the transcendental kernels must saturate, not overflow. */
START_TEST(test_extreme_values) {
  static const char *text = "model m\nx = input(shape=[12])\na = activation(x, sigmoid)\nb = activation(x, tanh)\n"
                            "c = activation(x, gelu)\nd = activation(x, softmax)\noutput a, b, c, d\n";
  static const float xs[12] = {-1000, -100, -88.5f, -20, -1e-6f, 0, 1e-7f, 0.5f, 20, 88.8f, 100, 1000};
  diag_sink *d = diag_sink_create();
  ir_graph *g = fe_load_mem("extreme", text, strlen(text), NULL, d, NULL);
  ck_assert_msg(g != NULL, "%s", diag_text(d));
  rt_program *p = cg_compile_cpu(g, NULL, d);
  ck_assert_msg(p != NULL, "%s", diag_text(d));
  float out[4][12];
  void *outs[4] = {out[0], out[1], out[2], out[3]};
  const void *ins[1] = {xs};
  ck_assert(rt_program_run(p, 1, ins, outs, NULL, d));
  double *x64 = ref_from_f32(xs, 12), *want[4];
  char err[256];
  ck_assert_msg(ref_run(g, 1, (const double *const *)&x64, want, err, sizeof err), "%s", err);
  for (int o = 0; o < 4; o++)
    for (int i = 0; i < 12; i++) {
      ck_assert_msg(isfinite(out[o][i]), "output %d element %d (x=%g) is %g", o, i, xs[i], out[o][i]);
      double tol = 2e-6 * fabs(want[o][i]) + 1e-30;
      ck_assert_msg(fabs(out[o][i] - want[o][i]) <= tol || fabs(want[o][i]) < 1e-37,
                    "output %d at x=%g: got %.9g want %.9g", o, xs[i], out[o][i], want[o][i]);
    }
  ref_outputs_free(want, 4);
  free(x64);
  rt_program_destroy(p);
  ir_graph_destroy(g);
  diag_sink_destroy(d);
}
END_TEST

/* ---- every policy ----
 * Bounds, normalized error (max |got - want| / max |want|):
 *  vs the same compiled graph (the reference rounds every 16-bit value, as
 *  castor stores it): castor's matmuls sum in f32, the reference in double,
 *  so an f32 sum may land on the other side of a 16-bit rounding boundary:
 *  one ulp of a 16-bit intermediate (2^-11 f16, 2^-8 bf16) that later layers
 *  damp. Bound: 2 ulps (f16 1e-3, bf16 8e-3), f32 1e-5.
 *  vs the float32 model in float64 (what the policy costs): every stored
 *  16-bit value carries a relative rounding error of at most 2^-11 (f16) or
 *  2^-8 (bf16); through a few layers of sums of random-signed terms the
 *  errors partly cancel. Bound: 8 ulps of a 16-bit value (f16 4e-3, bf16
 *  3.2e-2), measured about 2-4 ulps. */
static const char *const policies[] = {"float32", "float16", "bfloat16", "mixed_float16", "mixed_bfloat16"};

static double bound_same(const char *policy) {
  return strstr(policy, "bfloat16") ? 8e-3 : strstr(policy, "float16") ? 1e-3 : 1e-5;
}
static double bound_exact(const char *policy) {
  return strstr(policy, "bfloat16") ? 3.2e-2 : strstr(policy, "float16") ? 4e-3 : 1e-5;
}

START_TEST(test_ops_policies) {
  for (size_t pi = 0; pi < sizeof policies / sizeof policies[0]; pi++)
    for (int64_t batch = 1; batch <= 9; batch += 4) {
      e2e_result same, exact;
      run_policy_case(op_cases[_i].name, op_cases[_i].text, policies[pi], batch, 3, false, &same, &exact);
      ck_assert_msg(same.worst < bound_same(policies[pi]), "%s", same.msg);
      ck_assert_msg(exact.worst < bound_exact(policies[pi]), "%s", exact.msg);
    }
}
END_TEST

static char *read_sample(const char *file) {
  char path[1024], *text;
  size_t len;
  snprintf(path, sizeof path, "%s/samples/%s", CASTOR_SOURCE_DIR, file);
  ck_assert_msg(str_read_file(path, &text, &len), "cannot read %s", path);
  return text;
}

START_TEST(test_sample_small) {
  char *text = read_sample("mnist_mlp_small.cast");
  for (int64_t batch = 1; batch <= 64; batch *= 4) {
    e2e_result r = run_case("mnist_mlp_small.cast", text, batch, 5, true);
    ck_assert_msg(r.worst < 1e-5, "%s", r.msg);
  }
  free(text);
}
END_TEST

START_TEST(test_sample_small_policies) {
  char *text = read_sample("mnist_mlp_small.cast");
  for (size_t pi = 0; pi < sizeof policies / sizeof policies[0]; pi++) {
    e2e_result same, exact;
    run_policy_case("mnist_mlp_small.cast", text, policies[pi], 16, 5, false, &same, &exact);
    ck_assert_msg(same.worst < bound_same(policies[pi]), "%s", same.msg);
    ck_assert_msg(exact.worst < bound_exact(policies[pi]), "%s", exact.msg);
    if (getenv("CASTOR_E2E_VERBOSE")) fprintf(stderr, "%s\n%s\n", same.msg, exact.msg);
  }
  free(text);
}
END_TEST

START_TEST(test_sample_full_policies) {
  char *text = read_sample("mnist_mlp.cast");
  for (size_t pi = 1; pi < sizeof policies / sizeof policies[0]; pi++) {
    e2e_result same, exact;
    run_policy_case("mnist_mlp.cast", text, policies[pi], 4, 0, false, &same, &exact);
    ck_assert_msg(same.worst < bound_same(policies[pi]), "%s", same.msg);
    ck_assert_msg(exact.worst < bound_exact(policies[pi]), "%s", exact.msg);
    if (getenv("CASTOR_E2E_VERBOSE")) fprintf(stderr, "%s\n%s\n", same.msg, exact.msg);
  }
  free(text);
}
END_TEST

START_TEST(test_sample_full) {
  char *text = read_sample("mnist_mlp.cast");
  e2e_result r = run_case("mnist_mlp.cast", text, 4, 0, true);
  ck_assert_msg(r.worst < 1e-5, "%s", r.msg);
  free(text);
}
END_TEST

/* The CLI and samples/host.c on one input: bit-identical to each other and
 * within the bound of the reference. */
START_TEST(test_cli_and_host) {
  char dir[] = "/tmp/castor_e2e_XXXXXX";
  ck_assert(mkdtemp(dir) != NULL);
  char x_path[256], y1[256], y2[256], cmd[2048], model[1024];
  snprintf(x_path, sizeof x_path, "%s/x.npy", dir);
  snprintf(y1, sizeof y1, "%s/y_cli.npy", dir);
  snprintf(y2, sizeof y2, "%s/y_host.npy", dir);
  snprintf(model, sizeof model, "%s/samples/mnist_mlp.cast", CASTOR_SOURCE_DIR);
  enum { B = 4, IN = 784, OUT = 10 };
  static float x[B * IN];
  rng r;
  rng_init(&r, 99);
  for (int i = 0; i < B * IN; i++) x[i] = rng_uniform_f32(&r, 0.0f, 1.0f);
  diag_sink *d = diag_sink_create();
  ck_assert(npy_write(x_path, DT_F32, 2, (int64_t[]){B, IN}, x, d));
  snprintf(cmd, sizeof cmd, "%s/castor run %s --input %s --output %s > %s/cli.txt 2>&1", CASTOR_BINARY_DIR, model,
           x_path, y1, dir);
  ck_assert_msg(system(cmd) == 0, "failed: %s", cmd);
  snprintf(cmd, sizeof cmd, "%s/samples/host %s %s %s > %s/host.txt 2>&1", CASTOR_BINARY_DIR, model, x_path, y2, dir);
  ck_assert_msg(system(cmd) == 0, "failed: %s", cmd);
  npy_array a, b;
  ck_assert_msg(npy_read(y1, &a, d) && npy_read(y2, &b, d), "%s", diag_text(d));
  ck_assert_int_eq(a.nbytes, (int64_t)(B * OUT * sizeof(float)));
  ck_assert_msg(a.nbytes == b.nbytes && memcmp(a.data, b.data, (size_t)a.nbytes) == 0,
                "castor run and samples/host differ");

  char *text = read_sample("mnist_mlp.cast");
  ir_graph *g = fe_load_mem(model, text, strlen(text), NULL, d, NULL);
  ck_assert_msg(g != NULL, "%s", diag_text(d));
  double *x64 = ref_from_f32(x, B * IN), *want[1];
  char err[256], buf[256];
  ck_assert_msg(ref_run(g, B, (const double *const *)&x64, want, err, sizeof err), "%s", err);
  ref_cmp c = ref_compare_rel(a.data, want[0], B * OUT, 1e-30);
  ck_assert_msg(c.error < 1e-5, "castor run vs reference: %s", ref_cmp_str(&c, buf, sizeof buf));
  ref_outputs_free(want, 1);
  free(x64), free(text);
  ir_graph_destroy(g);
  npy_fini(&a), npy_fini(&b);
  diag_sink_destroy(d);
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  ck_assert(system(cmd) == 0);
}
END_TEST

/* pad8 on the CPU (--pad8) computes the same bits as without it: padded
 * products are zeros that leave each f32 FMA chain unchanged, and the pad
 * and slice kernels move values without rounding. */
START_TEST(test_pad8_cpu_same_bits) {
  static const char *files[] = {"samples/mnist_mlp_small.cast", "tests/golden/keras/residual.cast",
                                "tests/golden/keras/shared_value.cast", "tests/golden/keras/overrides.cast"};
  static const char *pols[] = {"mixed_float16", "bfloat16", "float32"};
  castor_context *ctx;
  ck_assert_int_eq(castor_context_create(&ctx), CASTOR_OK);
  for (size_t f = 0; f < sizeof files / sizeof files[0]; f++) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", CASTOR_SOURCE_DIR, files[f]);
    castor_model *m;
    ck_assert_msg(castor_model_load_file(ctx, path, NULL, &m) == CASTOR_OK, "%s", castor_context_last_error(ctx));
    for (size_t pi = 0; pi < 3; pi++) {
      castor_tensor *out[2][4] = {{0}};
      castor_tensor *x = NULL;
      int n_out = 0;
      for (int pad = 0; pad < 2; pad++) {
        castor_compile_options o;
        castor_compile_options_init(&o);
        o.policy = pols[pi];
        o.pad8 = pad;
        castor_program *p;
        ck_assert_msg(castor_compile(m, &o, &p) == CASTOR_OK, "%s", castor_context_last_error(ctx));
        n_out = castor_program_num_outputs(p);
        ck_assert_int_le(n_out, 4);
        if (!x) {
          castor_tensor_info info;
          castor_program_input_info(p, 0, &info);
          ck_assert_int_eq(castor_tensor_create(ctx, CASTOR_F32, 2, (int64_t[]){7, info.dims[1]}, &x), CASTOR_OK);
          rng r;
          rng_init(&r, 23);
          float *xp = castor_tensor_data(x);
          for (int64_t i = 0; i < castor_tensor_numel(x); i++) xp[i] = rng_uniform_f32(&r, -2, 2);
        }
        ck_assert_msg(castor_program_run(p, &x, 1, out[pad], n_out) == CASTOR_OK, "%s", castor_context_last_error(ctx));
        castor_program_destroy(p);
      }
      for (int o = 0; o < n_out; o++) {
        const float *a = castor_tensor_data(out[0][o]), *b = castor_tensor_data(out[1][o]);
        for (int64_t i = 0; i < castor_tensor_numel(out[0][o]); i++)
          ck_assert_msg(a[i] == b[i] || (isnan(a[i]) && isnan(b[i])), "%s %s output %d [%lld]: %.9g with pad8, %.9g without",
                        files[f], pols[pi], o, (long long)i, (double)b[i], (double)a[i]);
        castor_tensor_destroy(out[0][o]);
        castor_tensor_destroy(out[1][o]);
      }
      castor_tensor_destroy(x);
    }
    castor_model_destroy(m);
  }
  castor_context_destroy(ctx);
}
END_TEST

static Suite *e2e_suite(void) {
  Suite *s = suite_create("e2e");
  TCase *tc = tcase_create("numerics");
  tcase_set_timeout(tc, 300);
  tcase_add_loop_test(tc, test_ops, 0, (int)(sizeof op_cases / sizeof op_cases[0]));
  tcase_add_test(tc, test_extreme_values);
  tcase_add_test(tc, test_sample_small);
  tcase_add_loop_test(tc, test_ops_policies, 0, (int)(sizeof op_cases / sizeof op_cases[0]));
  tcase_add_test(tc, test_sample_small_policies);
  tcase_add_test(tc, test_sample_full_policies);
  tcase_add_test(tc, test_sample_full);
  tcase_add_test(tc, test_cli_and_host);
  tcase_add_test(tc, test_pad8_cpu_same_bits);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  check_cpu_path("check_e2e");
  return check_run(e2e_suite());
}
