/* SPDX-License-Identifier: Apache-2.0 */
/*
 * check_cuda_emu.c: castor's CUDA kernels run through the PTX emulator
 * (tests/ptxemu), against the CPU backend and the float64 reference.
 *
 * ctest sets CASTOR_CUDA_EMULATE to the build's libcastor_ptxemu.so, so
 * the cuda backend (cg_backend_cuda -> runtime/cuda.c) loads the emulator
 * in place of libcuda.so.1: the same PTX, launch list, parameter layout,
 * shared-memory sizes and buffer plan as on a GPU.
 *
 * Every kernel kind under every policy on odd shapes: for units U = 10,
 * 37, 100 a model with a matmul and no epilogue, matmuls whose epilogues
 * are bias + relu / sigmoid / tanh / gelu / silu, an add/multiply/gelu
 * chain, a matmul that ends in a softmax (fused into the GEMM epilogue
 * for U <= 64, a standalone warp-per-row kernel for U = 100), a softmax
 * of the input, and an input as output (a copy). Under the 16-bit
 * policies pad8 adds pad and slice kernels (K = 29 and U are not
 * multiples of 8), autocast adds cast kernels and cast epilogues. Each
 * is run at batch 1, 3, 17 and 40 on one loaded module (the buffers grow
 * between runs, as a server's would).
 *
 * Bounds (normalized error, max |got - want| / max |want|):
 *   vs the float64 reference: f32 1e-5, f16 4e-3, bf16 3.2e-2, as
 *   check_cuda's (the GPU's accumulation order differs from the oracle's
 *   double; a 16-bit value may round to the other neighbour and layers
 *   compound it);
 *   vs the CPU backend: f32 2e-6 (both accumulate in f32, in different
 *   orders: a few ulps of the largest value), f16 2e-3 and bf16 1.6e-2
 *   (a few 16-bit ulps: the same roundings, except where different
 *   accumulation orders put a value on the other side of a rounding
 *   boundary, which the following layers carry along).
 * The emulator's measured errors are printed (CK_VERBOSE shows them).
 *
 * Ordering: one case per model also runs with the CTAs and warps in
 * reverse order and cp.async data landing early, and interleaved one
 * instruction at a time; the outputs must be bit-identical to the first
 * run (castor's kernels have no order-dependent results).
 */
#include <check.h>

#include "tests/unit/test_support.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/cg_backend.h"
#include "codegen/codegen.h"
#include "ptxemu.h"
#include "frontend/frontend.h"
#include "passes/passes.h"
#include "tests/ref/ref.h"
#include "tests/unit/exec_run.h"
#include "util/half.h"

static const char *const policies[] = {"float32", "float16", "bfloat16", "mixed_float16", "mixed_bfloat16"};
enum { N_POLICIES = 5 };
static const int units[] = {10, 37, 100};
enum { N_UNITS = 3 };
static const int64_t batches[] = {1, 3, 17, 40};
enum { N_BATCHES = 4 };

static double ref_bound(const char *policy) {
  return strstr(policy, "bfloat16") ? 3.2e-2 : strstr(policy, "float16") ? 4e-3 : 1e-5;
}
static double cpu_bound(const char *policy) {
  return strstr(policy, "bfloat16") ? 1.6e-2 : strstr(policy, "float16") ? 2e-3 : 2e-6;
}

static char *model_text(int u) {
  char *s = malloc(2048);
  snprintf(s, 2048,
           "model kinds%d\n"
           "x = input(shape=[29])\n"
           "a = dense(x, units=%d, use_bias=false)\n"
           "b = dense(a, units=%d, activation=relu)\n"
           "c = dense(b, units=%d, activation=sigmoid)\n"
           "d = dense(c, units=%d, activation=tanh)\n"
           "e = dense(d, units=%d, activation=gelu)\n"
           "f = dense(e, units=%d, activation=silu)\n"
           "s = add(f, b)\n"
           "m = multiply(s, c)\n"
           "g = activation(m, gelu)\n"
           "h = dense(g, units=%d)\n"
           "p = activation(h, softmax)\n"
           "q = activation(x, softmax)\n"
           "output p, q, m, a, x\n",
           u, u, u, u, u, u, u, u);
  return s;
}

static ir_graph *graph(int u, const char *policy, diag_sink *d) {
  char *text = model_text(u);
  char name[32];
  snprintf(name, sizeof name, "kinds%d", u);
  ir_graph *g = fe_load_mem(name, text, strlen(text), NULL, d, NULL);
  free(text);
  if (!g) return NULL;
  if (!ir_policy_from_name(policy, strlen(policy), &g->policy)) {
    ir_graph_destroy(g);
    return NULL;
  }
  pass_options po;
  pass_options_init(&po);
  po.verify_each = true;
  if (!pass_run_pipeline(g, PASS_PIPELINE_PAD8, &po, d)) {
    ir_graph_destroy(g);
    return NULL;
  }
  return g;
}

/* Each output of the cuda run (og) against the float64 reference (want)
 * and the CPU's run (oc), within the policy's bounds; the worst errors so
 * far in *worst_ref and *worst_cpu. */
static void compare_outputs(const rt_program *desc, int64_t batch, const outs *og, const outs *oc, double **want,
                            const char *policy, const char *what, double *worst_ref, double *worst_cpu) {
  for (int k = 0; k < desc->n_outputs; k++) {
    const rt_tensor_desc *t = &desc->outputs[k];
    int64_t n = numel(t, batch);
    float *got = as_f32(t, og->p[k], n), *cp = as_f32(t, oc->p[k], n);
    double *cpd = ref_from_f32(cp, n);
    ref_cmp er = ref_compare_normalized(got, want[k], n), ec = ref_compare_normalized(got, cpd, n);
    char m1[256], m2[256];
    ck_assert_msg(er.error < ref_bound(policy), "%s batch %lld output %s vs reference: %s (bound %g)", what,
                  (long long)batch, t->name, ref_cmp_str(&er, m1, sizeof m1), ref_bound(policy));
    ck_assert_msg(ec.error < cpu_bound(policy), "%s batch %lld output %s vs cpu: %s (bound %g)", what,
                  (long long)batch, t->name, ref_cmp_str(&ec, m2, sizeof m2), cpu_bound(policy));
    if (er.error > *worst_ref) *worst_ref = er.error;
    if (ec.error > *worst_cpu) *worst_cpu = ec.error;
    free(got), free(cp), free(cpd);
  }
}

START_TEST(test_kinds) {
  int u = units[_i / N_POLICIES];
  const char *policy = policies[_i % N_POLICIES];
  char what[64];
  snprintf(what, sizeof what, "kinds%d/%s", u, policy);
  diag_sink *d = diag_sink_create();
  ir_graph *g = graph(u, policy, d);
  ck_assert_msg(g != NULL, "%s: %s", what, diag_text(d));
  cg_backend_options bo;
  cg_backend_options_init(&bo);
  bo.threads = 1;
  cg_exec *gpu = cg_backend_compile(&cg_backend_cuda, g, &bo, d);
  ck_assert_msg(gpu != NULL, "%s: cuda compile: %s", what, diag_text(d));
  cg_exec *cpu = cg_backend_compile(&cg_backend_cpu, g, &bo, d);
  ck_assert_msg(cpu != NULL, "%s: cpu compile: %s", what, diag_text(d));
  const rt_program *desc = gpu->desc;
  double worst_ref = 0, worst_cpu = 0;
  for (int bi = 0; bi < N_BATCHES; bi++) {
    int64_t batch = batches[bi];
    rng_state = (uint64_t)batch * 7919u + (uint64_t)u;
    float **in = calloc((size_t)desc->n_inputs + 1, sizeof *in);
    double **in64 = calloc((size_t)desc->n_inputs + 1, sizeof *in64), **want = NULL;
    for (int i = 0; i < desc->n_inputs; i++) {
      int64_t n = numel(&desc->inputs[i], batch);
      in[i] = malloc((size_t)n * sizeof *in[i]);
      for (int64_t j = 0; j < n; j++) in[i][j] = rng_f32();
      in64[i] = ref_from_f32(in[i], n);
    }
    want = calloc((size_t)desc->n_outputs + 1, sizeof *want);
    char err[512];
    ck_assert_msg(ref_run(g, batch, (const double *const *)in64, want, err, sizeof err), "%s: ref: %s", what, err);
    outs og = run(gpu, batch, in, d, what), oc = run(cpu, batch, in, d, what);
    compare_outputs(desc, batch, &og, &oc, want, policy, what, &worst_ref, &worst_cpu);
    /* the same batch in other orders must give the same bits */
    if (bi == 2 && (_i % N_POLICIES == 0 || _i % N_POLICIES == 3)) {
      static const char *const orders[][2] = {{"reverse", "early"}, {"interleave", "late"}};
      for (int oi = 0; oi < 2; oi++) {
        setenv("CASTOR_PTXEMU_ORDER", orders[oi][0], 1);
        setenv("CASTOR_PTXEMU_LANDING", orders[oi][1], 1);
        outs o2 = run(gpu, batch, in, d, what);
        unsetenv("CASTOR_PTXEMU_ORDER");
        unsetenv("CASTOR_PTXEMU_LANDING");
        for (int k = 0; k < desc->n_outputs; k++) {
          size_t bytes = (size_t)(numel(&desc->outputs[k], batch) * dtype_size(desc->outputs[k].dtype));
          ck_assert_msg(!memcmp(o2.p[k], og.p[k], bytes), "%s batch %lld output %s: order %s/%s changes the result",
                        what, (long long)batch, desc->outputs[k].name, orders[oi][0], orders[oi][1]);
        }
        outs_free(&o2);
      }
    }
    outs_free(&og), outs_free(&oc);
    ref_outputs_free(want, desc->n_outputs);
    for (int i = 0; i < desc->n_inputs; i++) free(in[i]), free(in64[i]);
    free(in), free(in64), free(want);
  }
  printf("%-24s max normalized error: vs reference %.3g, vs cpu %.3g\n", what, worst_ref, worst_cpu);
  cpu->backend->destroy(cpu);
  gpu->backend->destroy(gpu);
  ir_graph_destroy(g);
  diag_sink_destroy(d);
}
END_TEST

/* The same models' PTX for sm_90 (what an H100 gets) is all emulated
 * instructions too: it loads. */
START_TEST(test_sm90_loads) {
  int u = units[_i / N_POLICIES];
  const char *policy = policies[_i % N_POLICIES];
  diag_sink *d = diag_sink_create();
  ir_graph *g = graph(u, policy, d);
  ck_assert_msg(g != NULL, "%s", diag_text(d));
  rt_cuda_program *p = cg_compile_cuda(g, "sm_90", NULL, d);
  ck_assert_msg(p != NULL, "%s", diag_text(d));
  char err[512];
  pe_module *m = pe_module_load(p->ptx, err, sizeof err);
  ck_assert_msg(m != NULL, "kinds%d/%s sm_90: %s", u, policy, err);
  for (int i = 0; i < p->n_launches; i++) ck_assert(pe_module_kernel(m, p->launches[i].name) >= 0);
  pe_module_destroy(m);
  rt_cuda_program_destroy(p);
  ir_graph_destroy(g);
  diag_sink_destroy(d);
}
END_TEST

/* The samples end to end: the small MLP under every policy, and the
 * 4096-unit one under mixed_float16 at batch 3 (about half a minute of
 * emulation; float32's FMA GEMM takes several times longer). */
static void sample(const char *file, const char *policy, int64_t batch) {
  char path[512], what[128];
  snprintf(path, sizeof path, "%s/samples/%s", CASTOR_SOURCE_DIR, file);
  snprintf(what, sizeof what, "%s/%s", file, policy);
  diag_sink *d = diag_sink_create();
  ir_graph *g = file[0] == '\n' ? fe_load_mem("pooling.cast", file, strlen(file), NULL, d, NULL) : fe_load(path, NULL, d, NULL);
  if (file[0] == '\n') snprintf(what, sizeof what, "pooling/%s", policy);
  ck_assert_msg(g != NULL, "%s: %s", what, diag_text(d));
  ck_assert(ir_policy_from_name(policy, strlen(policy), &g->policy));
  pass_options po;
  pass_options_init(&po);
  ck_assert_msg(pass_run_pipeline(g, PASS_PIPELINE_PAD8, &po, d), "%s: %s", what, diag_text(d));
  cg_backend_options bo;
  cg_backend_options_init(&bo);
  cg_exec *gpu = cg_backend_compile(&cg_backend_cuda, g, &bo, d);
  ck_assert_msg(gpu != NULL, "%s: %s", what, diag_text(d));
  cg_exec *cpu = cg_backend_compile(&cg_backend_cpu, g, &bo, d);
  ck_assert_msg(cpu != NULL, "%s: %s", what, diag_text(d));
  const rt_program *desc = gpu->desc;
  rng_state = 12345;
  int64_t n = numel(&desc->inputs[0], batch);
  float *x = malloc((size_t)n * sizeof *x);
  for (int64_t j = 0; j < n; j++) x[j] = (rng_f32() + 1) / 2; /* pixels in [0, 1) */
  double *x64 = ref_from_f32(x, n), *want[8] = {NULL}; /* every output's (pooling has two); output 0 compared */
  ck_assert_int_le(g->n_outputs, 8);
  char err[512];
  ck_assert_msg(ref_run(g, batch, (const double *const *)&x64, want, err, sizeof err), "%s: %s", what, err);
  outs og = run(gpu, batch, &x, d, what), oc = run(cpu, batch, &x, d, what);
  int64_t m = numel(&desc->outputs[0], batch);
  float *got = as_f32(&desc->outputs[0], og.p[0], m), *cp = as_f32(&desc->outputs[0], oc.p[0], m);
  double *cpd = ref_from_f32(cp, m);
  ref_cmp er = ref_compare_normalized(got, want[0], m), ec = ref_compare_normalized(got, cpd, m);
  char m1[256], m2[256];
  ck_assert_msg(er.error < ref_bound(policy), "%s vs reference: %s", what, ref_cmp_str(&er, m1, sizeof m1));
  ck_assert_msg(ec.error < cpu_bound(policy), "%s vs cpu: %s", what, ref_cmp_str(&ec, m2, sizeof m2));
  printf("%-32s batch %lld: vs reference %.3g, vs cpu %.3g\n", what, (long long)batch, er.error, ec.error);
  free(got), free(cp), free(cpd), free(x), free(x64);
  for (int k = 0; k < 8; k++) free(want[k]);
  outs_free(&og), outs_free(&oc);
  cpu->backend->destroy(cpu);
  gpu->backend->destroy(gpu);
  ir_graph_destroy(g);
  diag_sink_destroy(d);
}

START_TEST(test_sample_small) { sample("mnist_mlp_small.cast", policies[_i], _i == 0 ? 40 : 17); }
END_TEST

START_TEST(test_sample_4096) { sample("mnist_mlp.cast", "mixed_float16", 3); }
END_TEST

/* general tensors: layout ops. Every layout op's index map (the kit's,
 * cg_index_map.c) in PTX on odd shapes with a size-1 dimension, started
 * chains (tanh after a strided_slice, a cast under the 16-bit policies),
 * at every batch, against the reference and the CPU backend (1 and 3
 * threads, bit-identical); the emulator's CTA orders give the same bits. */
static const char layout_text[] =
    "graph layout policy=float32\n"
    "%x = f32[N,12] input() {index=0}\n"
    "%r = f32[N,3,1,4] reshape(%x) {shape=[N,3,1,4]}\n"
    "%t = f32[N,4,3,1] transpose(%r) {perm=[0,3,1,2]}\n"
    "%s = f32[N,2,3,1] strided_slice(%t) {starts=[0,-3,0,0], ends=[0,99,3,1], steps=[1,2,1,1]}\n"
    "%e = f32[N,2,3,1] tanh(%s)\n"
    "%c = f32[N,10,3,1] concat(%t, %e, %t) {axis=-3}\n"
    "%p = f32[N,11,5,2] pad_constant(%c) {shape=[N,11,5,2], value=-1.5, starts=[0,1,0,1], steps=[1,1,2,1]}\n"
    "%f = f32[N,110] reshape(%p) {shape=[N,110]}\n"
    "output f = %f\n"
    "output t = %t\n";

static void check_graph_text(const char *name, const char *text, const char *policy) {
  char what[64];
  snprintf(what, sizeof what, "%s/%s", name, policy);
  diag_sink *d = diag_sink_create();
  ir_graph *g = ir_parse("layout.cir", text, strlen(text), d);
  ck_assert_msg(g != NULL, "%s: %s", what, diag_text(d));
  ck_assert(ir_policy_from_name(policy, strlen(policy), &g->policy));
  pass_options po;
  pass_options_init(&po);
  po.verify_each = true;
  ck_assert_msg(pass_run_pipeline(g, PASS_PIPELINE_PAD8, &po, d), "%s: %s", what, diag_text(d));
  cg_backend_options bo;
  cg_backend_options_init(&bo);
  bo.threads = 1;
  cg_exec *gpu = cg_backend_compile(&cg_backend_cuda, g, &bo, d);
  ck_assert_msg(gpu != NULL, "%s: cuda compile: %s", what, diag_text(d));
  cg_exec *cpu = cg_backend_compile(&cg_backend_cpu, g, &bo, d);
  bo.threads = 3;
  setenv("CASTOR_PARALLEL_MIN_WORK", "0", 1);
  cg_exec *cpu3 = cg_backend_compile(&cg_backend_cpu, g, &bo, d);
  ck_assert_msg(cpu && cpu3, "%s: cpu compile: %s", what, diag_text(d));
  const rt_program *desc = gpu->desc;
  for (int bi = 0; bi < N_BATCHES; bi++) {
    int64_t batch = batches[bi];
    rng_state = (uint64_t)batch * 31u;
    int64_t nx = numel(&desc->inputs[0], batch);
    float *x = malloc((size_t)nx * sizeof *x);
    for (int64_t j = 0; j < nx; j++) x[j] = rng_f32();
    double *x64 = ref_from_f32(x, nx), *want[4] = {NULL, NULL, NULL, NULL};
    ck_assert_int_le(desc->n_outputs, 4);
    char err[512];
    ck_assert_msg(ref_run(g, batch, (const double *const *)&x64, want, err, sizeof err), "%s: ref: %s", what, err);
    outs og = run(gpu, batch, &x, d, what), oc = run(cpu, batch, &x, d, what), o3 = run(cpu3, batch, &x, d, what);
    setenv("CASTOR_PTXEMU_ORDER", "reverse", 1);
    outs orv = run(gpu, batch, &x, d, what);
    unsetenv("CASTOR_PTXEMU_ORDER");
    for (int k = 0; k < desc->n_outputs; k++) {
      const rt_tensor_desc *t = &desc->outputs[k];
      int64_t n = numel(t, batch);
      size_t bytes = (size_t)n * dtype_size(t->dtype);
      float *got = as_f32(t, og.p[k], n), *cp = as_f32(t, oc.p[k], n);
      double *cpd = ref_from_f32(cp, n);
      ref_cmp er = ref_compare_normalized(got, want[k], n), ec = ref_compare_normalized(got, cpd, n);
      char m1[256], m2[256];
      ck_assert_msg(er.error < ref_bound(policy), "%s batch %lld output %s vs reference: %s", what, (long long)batch,
                    t->name, ref_cmp_str(&er, m1, sizeof m1));
      ck_assert_msg(ec.error < cpu_bound(policy), "%s batch %lld output %s vs cpu: %s", what, (long long)batch,
                    t->name, ref_cmp_str(&ec, m2, sizeof m2));
      ck_assert_msg(!memcmp(oc.p[k], o3.p[k], bytes), "%s batch %lld output %s: 1 and 3 threads differ", what,
                    (long long)batch, t->name);
      ck_assert_msg(!memcmp(og.p[k], orv.p[k], bytes), "%s batch %lld output %s: CTA order changes the result",
                    what, (long long)batch, t->name);
      free(got), free(cp), free(cpd);
    }
    outs_free(&og), outs_free(&oc), outs_free(&o3), outs_free(&orv);
    ref_outputs_free(want, desc->n_outputs);
    free(x), free(x64);
  }
  unsetenv("CASTOR_PARALLEL_MIN_WORK");
  cpu->backend->destroy(cpu);
  cpu3->backend->destroy(cpu3);
  gpu->backend->destroy(gpu);
  ir_graph_destroy(g);
  diag_sink_destroy(d);
}

START_TEST(test_layout) { check_graph_text("layout", layout_text, policies[_i]); }
END_TEST

/* general tensors: the reductions over sets of axes (keepdims or not),
 * the max/min gradients' maps, broadcast_to, dropout (the identity),
 * log_softmax (the warp's row formula), the same way as the layout ops. */
static const char tensor_text[] =
    "graph tensor policy=float32\n"
    "%x = f32[N,12] input() {index=0}\n"
    "%r = f32[N,3,1,4] reshape(%x) {shape=[N,3,1,4]}\n"
    "%s = f32[N,3,1,1] reduce_sum(%r) {axes=[2,3], keepdims=1}\n"
    "%m = f32[N,1] reduce_mean(%r) {axes=[1,3], keepdims=0}\n"
    "%mx = f32[N,1,1,4] reduce_max(%r) {axes=[1], keepdims=1}\n"
    "%mi = f32[N,3] reduce_min(%r) {axes=[-1,-2], keepdims=0}\n"
    "%dy = f32[N,1,1,4] tanh(%mx)\n"
    "%g = f32[N,3,1,4] reduce_max_grad(%dy, %r) {axes=[1], keepdims=1}\n"
    "%dm = f32[N,3] tanh(%mi)\n"
    "%gm = f32[N,3,1,4] reduce_min_grad(%dm, %r) {axes=[-1,-2], keepdims=0}\n"
    "%b = f32[N,3,2,4] broadcast_to(%s) {shape=[N,3,2,4]}\n"
    "%g2 = f32[N,3,2,4] broadcast_to(%r) {shape=[N,3,2,4]}\n"
    "%d = f32[N,3,2,4] dropout(%b) {rate=0.5, seed=1}\n"
    "%e = f32[N,3,2,4] add(%d, %g2)\n"
    "%ls = f32[N,3,2,4] log_softmax(%e)\n"
    "output m = %m\n"
    "output g = %g\n"
    "output gm = %gm\n"
    "output ls = %ls\n";

START_TEST(test_tensor) { check_graph_text("tensor", tensor_text, policies[_i]); }
END_TEST

/* convolutional networks: pooling (the kit's window maps) on the cuda
 * target under every policy, against the CPU and the reference; odd
 * sizes, 'same' with the odd pad at the end, overlapping windows, a relu
 * after each (a chain behind the map). Pooling follows its operand's
 * dtype, so with an f32 input it stays f32 under every policy (16-bit
 * pooling behind a conv2d: test_conv). The model is
 * text (a leading newline tells sample() so). */
static const char pooling_model[] = "\nmodel pooling\n"
                                    "x = input(shape=[9, 7, 5])\n"
                                    "m = max_pooling2d(x, pool_size=3, strides=2, padding=same)\n"
                                    "r = activation(m, relu)\n"
                                    "a = average_pooling2d(r, pool_size=[2, 3], strides=1)\n"
                                    "output a\n"
                                    "output m\n";
START_TEST(test_pooling) { sample(pooling_model, policies[_i], 7); }
END_TEST

/* general tensors: every new element-wise op through the emulator, on
 * numpy-broadcast odd shapes ([N,3,1,5] against [4,1] and [5]): each value
 * an output of its own, so each op is a kernel (or ends one), against the
 * float64 reference and the CPU backend at batches 1, 3, 17 and 40. */
static ir_node *konst_data(ir_graph *g, const char *name, int rank, const int64_t *dims, float lo, float hi,
                           float **keep) {
  ir_type t = {DT_F32, rank, {0}};
  int64_t n = 1;
  for (int r = 0; r < rank; r++) t.dims[r] = dims[r], n *= dims[r];
  float *v = malloc((size_t)n * sizeof *v);
  for (int64_t i = 0; i < n; i++) v[i] = lo + (hi - lo) * (rng_f32() + 1) / 2;
  *keep = v;
  return ir_build_const(g, name, &t, name, v, (diag_loc){0});
}

START_TEST(test_general_elementwise) {
  diag_loc nl = {0};
  ir_graph *g = ir_graph_create("eltwise");
  rng_state = 99;
  float *kd, *pd;
  ir_type xt = {DT_F32, 4, {IR_DIM_BATCH, 3, 1, 5}};
  ir_node *x = ir_build_input(g, "x", &xt, 0, nl);
  ir_node *k = konst_data(g, "k", 2, (int64_t[]){4, 1}, -1, 1, &kd);
  ir_node *kp = konst_data(g, "kp", 1, (int64_t[]){5}, 0.25f, 2, &pd);
  const ir_attr none = {0};
#define BIN(name, o, a, b) ir_build_op(g, o, name, (ir_node *[]){a, b}, 2, &none, nl)
#define UN(name, o, a, ...) ir_build_op(g, o, name, (ir_node *[]){a}, 1, &(ir_attr){__VA_ARGS__}, nl)
  ir_node *sb = BIN("sb", IR_OP_SUB, x, k), *dv = BIN("dv", IR_OP_DIV, sb, kp);
  ir_node *mx = BIN("mx", IR_OP_MAXIMUM, dv, k), *mn = BIN("mn", IR_OP_MINIMUM, mx, x);
  ir_node *pw = BIN("pw", IR_OP_POW, kp, mn);
  ir_node *ab = UN("ab", IR_OP_ABS, mn, 0), *ex = UN("ex", IR_OP_EXP, mn, 0);
  ir_node *lg = UN("lg", IR_OP_LOG, ab, 0), *sq = UN("sq", IR_OP_SQRT, ab, 0);
  ir_node *ng = UN("ng", IR_OP_NEG, UN("rs", IR_OP_RSQRT, ab, 0), 0);
  ir_node *er = UN("er", IR_OP_ERF, mn, 0);
  ir_node *lr = UN("lr", IR_OP_LEAKY_RELU, mn, .alpha = 0.2), *el = UN("el", IR_OP_ELU, mn, .alpha = 1.1);
  ir_node *sp = UN("sp", IR_OP_SOFTPLUS, mn, 0), *hs = UN("hs", IR_OP_HARD_SIGMOID, mn, 0);
  ir_node *cl = UN("cl", IR_OP_CLIP, mn, .min_value = -0.5, .max_value = 0.75);
  ir_node *rl = UN("rl", IR_OP_RELU, mn, 0);
  ir_node *se = ir_build_op(g, IR_OP_SELECT, "se", (ir_node *[]){rl, ex, er}, 3, &none, nl);
#undef BIN
#undef UN
  ir_node *outs_[] = {pw, lg, sq, ng, lr, el, sp, hs, cl, se};
  static const char *const names[] = {"pw", "lg", "sq", "ng", "lr", "el", "sp", "hs", "cl", "se"};
  for (int i = 0; i < 10; i++) ir_graph_add_output(g, names[i], outs_[i]);
  diag_sink *d = diag_sink_create();
  pass_options po;
  pass_options_init(&po);
  po.verify_each = true;
  ck_assert_msg(pass_run_pipeline(g, PASS_PIPELINE_PAD8, &po, d), "%s", diag_text(d));
  cg_backend_options bo;
  cg_backend_options_init(&bo);
  bo.threads = 1;
  cg_exec *gpu = cg_backend_compile(&cg_backend_cuda, g, &bo, d);
  ck_assert_msg(gpu != NULL, "cuda compile: %s", diag_text(d));
  cg_exec *cpu = cg_backend_compile(&cg_backend_cpu, g, &bo, d);
  ck_assert_msg(cpu != NULL, "cpu compile: %s", diag_text(d));
  const rt_program *desc = gpu->desc;
  for (int bi = 0; bi < N_BATCHES; bi++) {
    int64_t batch = batches[bi], n_in = numel(&desc->inputs[0], batch);
    float *in[1] = {malloc((size_t)n_in * sizeof(float))};
    for (int64_t j = 0; j < n_in; j++) in[0][j] = rng_f32();
    double *in64[1] = {ref_from_f32(in[0], n_in)}, **want = calloc((size_t)desc->n_outputs, sizeof *want);
    char err[512];
    ck_assert_msg(ref_run(g, batch, (const double *const *)in64, want, err, sizeof err), "ref: %s", err);
    outs og = run(gpu, batch, in, d, "eltwise"), oc = run(cpu, batch, in, d, "eltwise");
    for (int k2 = 0; k2 < desc->n_outputs; k2++) {
      const rt_tensor_desc *t = &desc->outputs[k2];
      int64_t n = numel(t, batch);
      float *got = as_f32(t, og.p[k2], n), *cp = as_f32(t, oc.p[k2], n);
      double *cpd = ref_from_f32(cp, n);
      ref_cmp er2 = ref_compare_normalized(got, want[k2], n), ec = ref_compare_normalized(got, cpd, n);
      char m1[256], m2[256];
      ck_assert_msg(er2.error < 1e-5, "batch %lld %s vs reference: %s", (long long)batch, t->name,
                    ref_cmp_str(&er2, m1, sizeof m1));
      ck_assert_msg(ec.error < 2e-6, "batch %lld %s vs cpu: %s", (long long)batch, t->name, ref_cmp_str(&ec, m2, sizeof m2));
      free(got), free(cp), free(cpd);
    }
    outs_free(&og), outs_free(&oc);
    ref_outputs_free(want, desc->n_outputs);
    free(in[0]), free(in64[0]), free(want);
  }
  cpu->backend->destroy(cpu);
  gpu->backend->destroy(gpu);
  ir_graph_destroy(g);
  free(kd), free(pd);
  diag_sink_destroy(d);
}
END_TEST

/* CNN: batch normalization at inference (the element-wise chain's
 * batch_norm formula, shared by both targets) behind a pooling window map
 * (so it stays unfolded), its statistics seeded constants, under every
 * policy (always f32), against the reference and the CPU, and the CTA
 * order giving the same bits. */
static const char bn_text[] =
    "graph bn policy=float32\n"
    "%x = f32[N,9,7,5] input() {index=0}\n"
    "%m = f32[N,5,4,5] max_pool2d(%x) {pool=[3,3], strides=[2,2], pads=[1,1,1,1]}\n"
    "%g = f32[5] const() {weight=\"b.gamma\"}\n"
    "%be = f32[5] const() {weight=\"b.beta\"}\n"
    "%mm = f32[5] const() {weight=\"b.moving_mean\"}\n"
    "%mv = f32[5] const() {weight=\"b.moving_variance\"}\n"
    "%b = f32[N,5,4,5] batch_norm(%m, %g, %be, %mm, %mv) {epsilon=0.001, momentum=0.99}\n"
    "%r = f32[N,5,4,5] relu(%b)\n"
    "output r = %r\n";

START_TEST(test_batch_norm) {
  const char *policy = policies[_i];
  char what[64];
  snprintf(what, sizeof what, "batch_norm/%s", policy);
  diag_sink *d = diag_sink_create();
  ir_graph *g = ir_parse("bn.cir", bn_text, strlen(bn_text), d);
  ck_assert_msg(g != NULL, "%s: %s", what, diag_text(d));
  ck_assert(ir_policy_from_name(policy, strlen(policy), &g->policy));
  rng_state = 777;
  for (int i = 0; i < g->n_nodes; i++) {
    ir_node *n = g->nodes[i];
    if (n->op != IR_OP_CONST) continue;
    float *v = arena_alloc(g->arena, 5 * sizeof *v);
    for (int e = 0; e < 5; e++) v[e] = strstr(n->attr.weight, "variance") ? rng_f32() + 1.5f : rng_f32();
    n->attr.data = v;
  }
  pass_options po;
  pass_options_init(&po);
  po.verify_each = true;
  ck_assert_msg(pass_run_pipeline(g, PASS_PIPELINE_PAD8, &po, d), "%s: %s", what, diag_text(d));
  int n_bn = 0;
  for (int i = 0; i < g->n_nodes; i++) n_bn += g->nodes[i]->op == IR_OP_BATCH_NORM;
  ck_assert_int_eq(n_bn, 1);
  cg_backend_options bo;
  cg_backend_options_init(&bo);
  cg_exec *gpu = cg_backend_compile(&cg_backend_cuda, g, &bo, d);
  ck_assert_msg(gpu != NULL, "%s: cuda compile: %s", what, diag_text(d));
  cg_exec *cpu = cg_backend_compile(&cg_backend_cpu, g, &bo, d);
  ck_assert_msg(cpu != NULL, "%s: cpu compile: %s", what, diag_text(d));
  const rt_program *desc = gpu->desc;
  for (int bi = 0; bi < N_BATCHES; bi++) {
    int64_t batch = batches[bi];
    int64_t nx = numel(&desc->inputs[0], batch), n = numel(&desc->outputs[0], batch);
    float *x = malloc((size_t)nx * sizeof *x);
    for (int64_t j = 0; j < nx; j++) x[j] = 3 * rng_f32() + 1;
    double *x64 = ref_from_f32(x, nx), *want[1] = {NULL};
    char err[512];
    ck_assert_msg(ref_run(g, batch, (const double *const *)&x64, want, err, sizeof err), "%s: ref: %s", what, err);
    outs og = run(gpu, batch, &x, d, what), oc = run(cpu, batch, &x, d, what);
    setenv("CASTOR_PTXEMU_ORDER", "reverse", 1);
    outs orv = run(gpu, batch, &x, d, what);
    unsetenv("CASTOR_PTXEMU_ORDER");
    const rt_tensor_desc *t = &desc->outputs[0];
    float *got = as_f32(t, og.p[0], n), *cp = as_f32(t, oc.p[0], n);
    double *cpd = ref_from_f32(cp, n);
    ref_cmp er = ref_compare_normalized(got, want[0], n), ec = ref_compare_normalized(got, cpd, n);
    char m1[256], m2[256];
    ck_assert_msg(er.error < ref_bound(policy), "%s batch %lld vs reference: %s", what, (long long)batch,
                  ref_cmp_str(&er, m1, sizeof m1));
    ck_assert_msg(ec.error < cpu_bound(policy), "%s batch %lld vs cpu: %s", what, (long long)batch,
                  ref_cmp_str(&ec, m2, sizeof m2));
    ck_assert_msg(!memcmp(og.p[0], orv.p[0], (size_t)n * dtype_size(t->dtype)), "%s batch %lld: CTA order changes the result",
                  what, (long long)batch);
    free(got), free(cp), free(cpd);
    outs_free(&og), outs_free(&oc), outs_free(&orv);
    ref_outputs_free(want, 1);
    free(x), free(x64);
  }
  cpu->backend->destroy(cpu);
  gpu->backend->destroy(gpu);
  ir_graph_destroy(g);
  diag_sink_destroy(d);
}
END_TEST

/* convolutional networks: conv2d on the cuda target (the implicit GEMM of
 * cg_nvptx_gemm.c: the FMA GEMM under float32, mma.sync on pad8's channels
 * under the 16-bit policies) on odd shapes: stride 2 with 'same' (the odd
 * pad at the end), dilation 2 with a 5x5 kernel, a 1x1 and a 2x3 kernel,
 * channels 5, 13 and 7 (not multiples of 8), bias and activation epilogues,
 * a depthwise conv2d (depth_multiplier 2), a separable one, and pooling,
 * batch norm and a global pooling behind a convolution, each an output.
 * The weights (kernels, biases, batch-norm statistics) are seeded random
 * values, not the initializers' zeros and ones, so every epilogue operand
 * counts. Against the float64 reference and the CPU backend at batches 1,
 * 3 and 17 under every policy; the emulator's reverse CTA order and early
 * cp.async landing give the same bits. */
static const char conv_model[] =
    "model convs\n"
    "x = input(shape=[9, 7, 5])\n"
    "a = conv2d(x, filters=13, kernel_size=3, strides=2, padding=same, activation=relu)\n"
    "b = conv2d(a, filters=8, kernel_size=1)\n"
    "c = conv2d(x, filters=7, kernel_size=5, padding=same, dilation_rate=2, activation=tanh)\n"
    "d = depthwise_conv2d(c, kernel_size=3, depth_multiplier=2, strides=2)\n"
    "e = conv2d(x, filters=16, kernel_size=[2, 3], use_bias=false)\n"
    "n = batch_normalization(e)\n"
    "f = max_pooling2d(n, pool_size=2)\n"
    "s = separable_conv2d(a, filters=11, kernel_size=3, padding=same, activation=relu)\n"
    "p = global_average_pooling2d(s)\n"
    "output b, c, d, f, p\n";

/* Seeded values for every constant of g (f32 before autocast): variances
 * in [0.5, 1.5), everything else in [-0.5, 0.5). */
static void seed_constants(ir_graph *g, uint64_t seed) {
  rng_state = seed;
  for (int i = 0; i < g->n_nodes; i++) {
    ir_node *n = g->nodes[i];
    if (n->op != IR_OP_CONST || n->type.dtype != DT_F32) continue;
    int64_t k = 1;
    for (int r = 0; r < n->type.rank; r++) k *= n->type.dims[r];
    float *v = arena_alloc(g->arena, (size_t)(k > 0 ? k : 1) * sizeof *v);
    bool var = n->attr.weight && strstr(n->attr.weight, "variance");
    for (int64_t j = 0; j < k; j++) v[j] = var ? rng_f32() / 2 + 1.0f : rng_f32() / 2;
    n->attr.data = v;
  }
}

static void check_cast_model(const char *name, const char *text, const char *policy, const int64_t *bs, int nb,
                             bool seeded) {
  char what[96];
  snprintf(what, sizeof what, "%s/%s", name, policy);
  diag_sink *d = diag_sink_create();
  ir_graph *g = fe_load_mem(name, text, strlen(text), NULL, d, NULL);
  ck_assert_msg(g != NULL, "%s: %s", what, diag_text(d));
  if (seeded) seed_constants(g, 4242);
  ck_assert(ir_policy_from_name(policy, strlen(policy), &g->policy));
  pass_options po;
  pass_options_init(&po);
  po.verify_each = true;
  ck_assert_msg(pass_run_pipeline(g, PASS_PIPELINE_PAD8, &po, d), "%s: %s", what, diag_text(d));
  int n_conv = 0;
  for (int i = 0; i < g->n_nodes; i++) n_conv += g->nodes[i]->op == IR_OP_CONV2D;
  ck_assert_int_gt(n_conv, 0);
  cg_backend_options bo;
  cg_backend_options_init(&bo);
  bo.threads = 1;
  cg_exec *gpu = cg_backend_compile(&cg_backend_cuda, g, &bo, d);
  ck_assert_msg(gpu != NULL, "%s: cuda compile: %s", what, diag_text(d));
  cg_exec *cpu = cg_backend_compile(&cg_backend_cpu, g, &bo, d);
  ck_assert_msg(cpu != NULL, "%s: cpu compile: %s", what, diag_text(d));
  const rt_program *desc = gpu->desc;
  double worst_ref = 0, worst_cpu = 0;
  for (int bi = 0; bi < nb; bi++) {
    int64_t batch = bs[bi];
    rng_state = (uint64_t)batch * 131u + 7u;
    int64_t nx = numel(&desc->inputs[0], batch);
    float *x = malloc((size_t)nx * sizeof *x);
    for (int64_t j = 0; j < nx; j++) x[j] = rng_f32();
    double *x64 = ref_from_f32(x, nx), **want = calloc((size_t)desc->n_outputs + 1, sizeof *want);
    char err[512];
    ck_assert_msg(ref_run(g, batch, (const double *const *)&x64, want, err, sizeof err), "%s: ref: %s", what, err);
    outs og = run(gpu, batch, &x, d, what), oc = run(cpu, batch, &x, d, what);
    setenv("CASTOR_PTXEMU_ORDER", "reverse", 1);
    setenv("CASTOR_PTXEMU_LANDING", "early", 1);
    outs orv = run(gpu, batch, &x, d, what);
    unsetenv("CASTOR_PTXEMU_ORDER");
    unsetenv("CASTOR_PTXEMU_LANDING");
    compare_outputs(desc, batch, &og, &oc, want, policy, what, &worst_ref, &worst_cpu);
    for (int k = 0; k < desc->n_outputs; k++) {
      const rt_tensor_desc *t = &desc->outputs[k];
      ck_assert_msg(!memcmp(og.p[k], orv.p[k], (size_t)numel(t, batch) * dtype_size(t->dtype)),
                    "%s batch %lld output %s: CTA order changes the result", what, (long long)batch, t->name);
    }
    outs_free(&og), outs_free(&oc), outs_free(&orv);
    ref_outputs_free(want, desc->n_outputs);
    free(want), free(x), free(x64);
  }
  printf("%-32s max normalized error: vs reference %.3g, vs cpu %.3g\n", what, worst_ref, worst_cpu);
  cpu->backend->destroy(cpu);
  gpu->backend->destroy(gpu);
  ir_graph_destroy(g);
  diag_sink_destroy(d);
}

START_TEST(test_conv) {
  static const int64_t bs[] = {1, 3, 17};
  check_cast_model("convs", conv_model, policies[_i], bs, 3, true);
}
END_TEST

/* The CNN samples' forward pass (their initializers' weights: Glorot
 * kernels, zero biases, unit batch-norm statistics) at batch 3. */
static char *read_sample(const char *file) {
  char path[512], *text;
  size_t len;
  snprintf(path, sizeof path, "%s/samples/%s", CASTOR_SOURCE_DIR, file);
  ck_assert_msg(str_read_file(path, &text, &len), "cannot read %s", path);
  return text;
}

START_TEST(test_cnn_samples) {
  static const int64_t bs[] = {3};
  static const char *const files[] = {"fashion_cnn.cast", "edge_cnn.cast"};
  char *text = read_sample(files[_i / N_POLICIES]);
  check_cast_model(files[_i / N_POLICIES], text, policies[_i % N_POLICIES], bs, 1, false);
  free(text);
}
END_TEST

int main(void) {
  Suite *s = suite_create("cuda_emu");
  TCase *tc = tcase_create("kinds");
  tcase_set_timeout(tc, 600);
  tcase_add_loop_test(tc, test_kinds, 0, N_UNITS * N_POLICIES);
  tcase_add_loop_test(tc, test_sm90_loads, 0, N_UNITS * N_POLICIES);
  tcase_add_loop_test(tc, test_sample_small, 0, N_POLICIES);
  tcase_add_test(tc, test_sample_4096);
  tcase_add_loop_test(tc, test_pooling, 0, N_POLICIES);
  tcase_add_test(tc, test_general_elementwise);
  suite_add_tcase(s, tc);
  TCase *tl = tcase_create("layout"); /* general tensors: layout ops */
  tcase_set_timeout(tl, 600);
  tcase_add_loop_test(tl, test_layout, 0, N_POLICIES);
  tcase_add_loop_test(tl, test_batch_norm, 0, N_POLICIES); /* CNN: batch normalization */
  tcase_add_loop_test(tl, test_tensor, 0, N_POLICIES); /* general tensors: reductions */
  suite_add_tcase(s, tl);
  TCase *tcv = tcase_create("conv"); /* convolutional networks: conv2d's implicit GEMM */
  tcase_set_timeout(tcv, 600);
  tcase_add_loop_test(tcv, test_conv, 0, N_POLICIES);
  tcase_add_loop_test(tcv, test_cnn_samples, 0, 2 * N_POLICIES);
  suite_add_tcase(s, tcv);
  return check_run(s);
}
