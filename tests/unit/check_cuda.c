/* SPDX-License-Identifier: Apache-2.0 */
/*
 * check_cuda.c: the cuda target's numerics against the float64 reference
 * interpreter (tests/ref), on a GPU.
 *
 * Every model of gpu_cases.h under every dtype policy goes through the cuda
 * pipeline (pad8), is compiled for the device's architecture, loaded with
 * the CUDA runtime (runtime/cuda.c) and run at batches 1, 7, 129 and 1000
 * (and 8192 for the first model) on seeded uniform inputs in [-1, 1); each
 * output is compared with ref_run of the same graph by normalized error
 * (max |got - want| / max |want|). A second table runs single dense layers
 * through every GEMM tile width (N = 8 .. 264), with K and N that are and
 * are not multiples of 8, and rows that do not fill a block.
 *
 * Bounds, as check_e2e's for the CPU: f32 1e-5 (sums of K <= 784 products
 * in f32, ~sqrt(K) 2^-24); f16 4e-3 and bf16 3.2e-2 (8 ulps of a 16-bit
 * value: the GPU accumulates in another order than the oracle's double, so
 * a value may round to the other neighbour, and roundings of successive
 * layers compound).
 *
 * Without a GPU (no libcuda.so.1, or no device) the suite prints why and
 * exits 77, which ctest reports as skipped.
 */
#include <check.h>

#include "tests/unit/test_support.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/codegen.h"
#include "tests/unit/exec_values.h"
#include "tests/unit/gpu_cases.h"
#include "tests/ref/ref.h"
#include "util/half.h"

static rt_cuda_device *dev;
static char sm[16];

static double bound(const char *policy) {
  return strstr(policy, "bfloat16") ? 3.2e-2 : strstr(policy, "float16") ? 4e-3 : 1e-5;
}

/* Runs g on the GPU and through ref_run at each batch; asserts the bound. */
static void run_and_compare(ir_graph *g, const char *what, const char *policy, const int64_t *batches, int n_batches) {
  diag_sink *d = diag_sink_create();
  rt_cuda_program *p = cg_compile_cuda(g, sm, NULL, d);
  ck_assert_msg(p != NULL, "%s: compile: %s", what, diag_text(d));
  rt_cuda_module *m = rt_cuda_module_load(dev, p, d);
  ck_assert_msg(m != NULL, "%s: load: %s", what, diag_text(d));
  const rt_program *desc = p->desc;
  for (int bi = 0; bi < n_batches; bi++) {
    int64_t batch = batches[bi];
    rng_state = (uint64_t)batch * 7919u + 17u;
    void **in = calloc((size_t)desc->n_inputs + 1, sizeof *in), **out = calloc((size_t)desc->n_outputs + 1, sizeof *out);
    double **in64 = calloc((size_t)desc->n_inputs + 1, sizeof *in64), **want = calloc((size_t)desc->n_outputs + 1, sizeof *want);
    for (int i = 0; i < desc->n_inputs; i++) {
      ck_assert_int_eq(desc->inputs[i].dtype, DT_F32);
      int64_t n = numel(&desc->inputs[i], batch);
      float *x = malloc((size_t)n * sizeof *x);
      for (int64_t j = 0; j < n; j++) x[j] = rng_f32();
      in[i] = x;
      in64[i] = ref_from_f32(x, n);
    }
    for (int o = 0; o < desc->n_outputs; o++)
      out[o] = malloc((size_t)(numel(&desc->outputs[o], batch) * dtype_size(desc->outputs[o].dtype)) + 1);
    ck_assert_msg(rt_cuda_run(m, batch, (const void *const *)in, out, d), "%s batch %lld: %s", what, (long long)batch,
                  diag_text(d));
    char err[512];
    ck_assert_msg(ref_run(g, batch, (const double *const *)in64, want, err, sizeof err), "%s: ref: %s", what, err);
    for (int o = 0; o < desc->n_outputs; o++) {
      int64_t n = numel(&desc->outputs[o], batch);
      float *got = as_f32(&desc->outputs[o], out[o], n);
      ref_cmp c = ref_compare_normalized(got, want[o], n);
      char msg[256];
      ck_assert_msg(c.error < bound(policy), "%s batch %lld output %s: normalized %s (bound %g)", what,
                    (long long)batch, desc->outputs[o].name, ref_cmp_str(&c, msg, sizeof msg), bound(policy));
      free(got);
    }
    ref_outputs_free(want, desc->n_outputs);
    for (int i = 0; i < desc->n_inputs; i++) free(in[i]), free(in64[i]);
    for (int o = 0; o < desc->n_outputs; o++) free(out[o]);
    free(in), free(out), free(in64), free(want);
  }
  rt_cuda_module_unload(m);
  rt_cuda_program_destroy(p);
  diag_sink_destroy(d);
}

START_TEST(test_cases) {
  const gpu_case *c = &gpu_cases[_i / N_GPU_POLICIES];
  const char *policy = gpu_policies[_i % N_GPU_POLICIES];
  diag_sink *d = diag_sink_create();
  ir_graph *g = gpu_case_graph(c, policy, d);
  ck_assert_msg(g != NULL, "%s/%s: %s", c->name, policy, diag_text(d));
  char what[128];
  snprintf(what, sizeof what, "%s/%s/%s", c->name, policy, sm);
  static const int64_t batches[] = {1, 7, 129, 1000, 8192};
  run_and_compare(g, what, policy, batches, _i / N_GPU_POLICIES == 0 ? 5 : 4);
  ir_graph_destroy(g);
  diag_sink_destroy(d);
}
END_TEST

/* One dense layer [N, K] x [K, U] + bias, relu: every GEMM block width. */
static const int64_t gemm_shapes[][2] = {{8, 8},   {16, 16},  {24, 40},   {784, 64}, {64, 136},
                                         {13, 10}, {96, 264}, {200, 130}, {32, 512}};
enum { N_GEMM_SHAPES = sizeof gemm_shapes / sizeof gemm_shapes[0] };

START_TEST(test_gemm_shapes) {
  int64_t K = gemm_shapes[_i / N_GPU_POLICIES][0], U = gemm_shapes[_i / N_GPU_POLICIES][1];
  const char *policy = gpu_policies[_i % N_GPU_POLICIES];
  char text[256];
  snprintf(text, sizeof text, "model gemm\nx = input(shape=[%lld])\ny = dense(x, units=%lld, activation=relu)\noutput y\n",
           (long long)K, (long long)U);
  gpu_case c = {"gemm", text};
  diag_sink *d = diag_sink_create();
  ir_graph *g = gpu_case_graph(&c, policy, d);
  ck_assert_msg(g != NULL, "%s", diag_text(d));
  char what[128];
  snprintf(what, sizeof what, "gemm K=%lld U=%lld/%s", (long long)K, (long long)U, policy);
  static const int64_t batches[] = {1, 33, 130, 257};
  run_and_compare(g, what, policy, batches, 4);
  ir_graph_destroy(g);
  diag_sink_destroy(d);
}
END_TEST

START_TEST(test_bad_device) {
  diag_sink *d = diag_sink_create();
  ck_assert_ptr_null(rt_cuda_device_open(1000, d));
  ck_assert_msg(strstr(diag_text(d), "does not exist") != NULL, "%s", diag_text(d));
  diag_sink_destroy(d);
}
END_TEST

int main(void) {
  diag_sink *d = diag_sink_create();
  dev = rt_cuda_device_open(-1, d);
  if (!dev) {
    printf("check_cuda: skipped: %s", diag_text(d));
    diag_sink_destroy(d);
    return 77;
  }
  diag_sink_destroy(d);
  rt_cuda_device_sm(dev, sm, sizeof sm);
  printf("check_cuda: %s (%s)\n", rt_cuda_device_name(dev), sm);
  Suite *s = suite_create("cuda");
  TCase *tc = tcase_create("numerics");
  tcase_set_timeout(tc, 600);
  tcase_add_loop_test(tc, test_cases, 0, N_GPU_CASES * N_GPU_POLICIES);
  tcase_add_loop_test(tc, test_gemm_shapes, 0, N_GEMM_SHAPES * N_GPU_POLICIES);
  tcase_add_test(tc, test_bad_device);
  suite_add_tcase(s, tc);
  int rc = check_run_nofork(s); /* one CUDA context for the process */
  rt_cuda_device_close(dev);
  return rc;
}
