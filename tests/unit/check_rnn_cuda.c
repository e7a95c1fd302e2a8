/* SPDX-License-Identifier: Apache-2.0 */
/*
 * check_rnn_cuda.c: the recurrent layers (lstm, gru, simple_rnn: the kit's
 * scan, codegen/kernel/cg_rnn.c, one batch row per GPU thread with its
 * state in PTX local memory) on the cuda target, run through the PTX
 * emulator (tests/ptxemu; ctest sets CASTOR_CUDA_EMULATE), against the
 * float64 reference and the CPU backend. With neither the emulator nor a
 * GPU the suite is skipped (77).
 *
 * These are the only checks of the recurrent NVPTX kernels: they have not
 * run on a real GPU yet, and one thread per row is a correctness
 * baseline, not a fast GPU kernel.
 *
 * Forward: for each cell, units H = 5 and 37 and T = 1 and 7 steps, one
 * model with a masked scan (Keras's Masking: steps of all-zero features,
 * about one in four, the first and last steps among them in some rows),
 * an unmasked go_backwards scan (reverse=2) and a bidirectional one over
 * the masked input (reverse 0 and 1); gru's reset gate after (the
 * default) in the first two and before in the bidirectional one. Under
 * float32, mixed_bfloat16 and mixed_float16 at batch 1, 3 and 17, every
 * output against the float64 reference and the CPU backend, with
 * check_cuda_emu's bounds (normalized error: f32 1e-5 / 2e-6, bf16
 * 3.2e-2 / 1.6e-2, f16 4e-3 / 2e-3); the emulator's reverse warp and CTA
 * order gives the same bits. The weights are seeded random values (the
 * recurrent kernels scaled by 1.5/sqrt(H), biases nonzero), not the
 * initializers' zero biases.
 *
 * Training: one SGD step of a model with every recurrent op's backward
 * (a masked bidirectional LSTM: lstm_train and lstm_grad reading its gates
 * under float32, lstm and lstm_grad recomputing them under the 16-bit
 * policies; gru_grad with the reset gate after and before; simple_rnn_grad
 * with go_backwards, reading tanh(u) from y under float32) on both targets
 * from the same initial weights at batch 3, under the three policies: the
 * loss and every weight's update (each nonzero) agree within
 * check_train_cuda's bounds.
 *
 * Sizes are small: the emulator interprets every instruction (a scan is
 * T x 4H x H FMAs per thread): about 50 s of CPU time, most of it LLVM
 * compiling each model for both targets. CI also runs it under ASan+UBSan,
 * where CASTOR_TEST_STRIDE=2 runs one forward case in two and float32's
 * training step only (every case runs natively; there the 18 forward
 * cases and one step took most of ctest's 600 s on this 2-core machine at
 * a load average of 20); not on the emulated CPU (the cuda target has no host
 * CPU path: label emulated-long, as check_train_cuda).
 */
#include <check.h>

#include "tests/unit/test_support.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "castor.h"
#include "codegen/cg_backend.h"
#include "codegen/codegen.h"
#include "frontend/frontend.h"
#include "passes/passes.h"
#include "tests/ref/ref.h"
#include "tests/unit/exec_run.h"
#include "util/half.h"
#include "util/util.h"

static const char *const policies[] = {"float32", "mixed_bfloat16", "mixed_float16"};
enum { N_POLICIES = 3 };
static const char *const cells[] = {"lstm", "gru", "simple_rnn"};
enum { N_CELLS = 3 };
static const int units[] = {5, 37};
static const int steps[] = {1, 7};
static const int64_t batches[] = {1, 3, 17};
enum { N_BATCHES = 3, F = 6 };

static double ref_bound(const char *policy) {
  return strstr(policy, "bfloat16") ? 3.2e-2 : strstr(policy, "float16") ? 4e-3 : 1e-5;
}
static double cpu_bound(const char *policy) {
  return strstr(policy, "bfloat16") ? 1.6e-2 : strstr(policy, "float16") ? 2e-3 : 2e-6;
}

/* The forward model of `cell` with h units over t steps. */
static char *model_text(const char *cell, int h, int t) {
  char *s = xmalloc(1024);
  const char *ra = strcmp(cell, "gru") ? "" : ", reset_after=false";
  snprintf(s, 1024,
           "model rnn_%s\n"
           "x = input(shape=[%d, %d])\n"
           "m = masking(x, mask_value=0)\n"
           "a = %s(m, units=%d, return_sequences=true, name=a)\n"
           "b = %s(x, units=%d, go_backwards=true, name=b)\n"
           "c = bidirectional(m, layer=%s, units=%d, return_sequences=true%s, name=c)\n"
           "output a, b, c\n",
           cell, t, F, cell, h, cell, h, cell, h, ra);
  return s;
}

/* Seeded values for the model's weights (constants with a weight name;
 * the masking value and the zero states stay): the recurrent kernels in
 * +-0.75/sqrt(H) (a contraction, as the orthogonal initializer's), the
 * rest in +-0.5. */
static void seed_weights(ir_graph *g, int h, uint64_t seed) {
  rng_state = seed;
  for (int i = 0; i < g->n_nodes; i++) {
    ir_node *n = g->nodes[i];
    if (n->op != IR_OP_CONST || n->type.dtype != DT_F32 || !n->attr.weight) continue;
    int64_t k = 1;
    for (int r = 0; r < n->type.rank; r++) k *= n->type.dims[r];
    float *v = arena_alloc(g->arena, (size_t)(k > 0 ? k : 1) * sizeof *v);
    float scale = strstr(n->attr.weight, "recurrent") ? 0.75f / sqrtf((float)h) : 0.5f;
    for (int64_t j = 0; j < k; j++) v[j] = rng_f32() * scale;
    n->attr.data = v;
  }
}

/* Features in [-1, 1), except the masked steps: all zeros where
 * (row * 5 + step * 3) % 4 == 0 (the first step of rows 0, 4, 8, ...,
 * the last of some others). */
static void fill_input(float *x, int64_t batch, int t) {
  for (int64_t n = 0; n < batch; n++)
    for (int s = 0; s < t; s++)
      for (int f = 0; f < F; f++) {
        float v = rng_f32();
        x[(n * t + s) * F + f] = (n * 5 + s * 3) % 4 == 0 ? 0.0f : v;
      }
}

/* Case _i: cell, then units, steps and policy (policy fastest). */
START_TEST(test_forward) {
  if (!test_case_runs((size_t)_i)) return; /* the sanitizer stage's CASTOR_TEST_STRIDE=2: one in two */
  const char *policy = policies[_i % N_POLICIES];
  int t = steps[(_i / N_POLICIES) % 2], h = units[(_i / N_POLICIES / 2) % 2];
  const char *cell = cells[_i / N_POLICIES / 4];
  char what[96];
  snprintf(what, sizeof what, "%s H=%d T=%d %s", cell, h, t, policy);
  diag_sink *d = diag_sink_create();
  char *text = model_text(cell, h, t);
  ir_graph *g = fe_load_mem("rnn.cast", text, strlen(text), NULL, d, NULL);
  free(text);
  ck_assert_msg(g != NULL, "%s: %s", what, diag_text(d));
  seed_weights(g, h, 4242 + (uint64_t)_i);
  ck_assert(ir_policy_from_name(policy, strlen(policy), &g->policy));
  pass_options po;
  pass_options_init(&po);
  po.verify_each = true;
  ck_assert_msg(pass_run_pipeline(g, PASS_PIPELINE_PAD8, &po, d), "%s: %s", what, diag_text(d));
  int n_scan = 0;
  for (int i = 0; i < g->n_nodes; i++) {
    ir_op op = g->nodes[i]->op;
    n_scan += op == IR_OP_LSTM || op == IR_OP_GRU || op == IR_OP_SIMPLE_RNN;
  }
  ck_assert_int_eq(n_scan, 4);
  cg_backend_options bo;
  cg_backend_options_init(&bo);
  bo.threads = 1;
  cg_exec *gpu = cg_backend_compile(&cg_backend_cuda, g, &bo, d);
  ck_assert_msg(gpu != NULL, "%s: cuda compile: %s", what, diag_text(d));
  cg_exec *cpu = cg_backend_compile(&cg_backend_cpu, g, &bo, d);
  ck_assert_msg(cpu != NULL, "%s: cpu compile: %s", what, diag_text(d));
  const rt_program *desc = gpu->desc;
  ck_assert_int_eq(desc->n_inputs, 1);
  double worst_ref = 0, worst_cpu = 0;
  for (int bi = 0; bi < N_BATCHES; bi++) {
    int64_t batch = batches[bi];
    rng_state = (uint64_t)batch * 131u + (uint64_t)_i;
    int64_t nx = numel(&desc->inputs[0], batch);
    float *x = xmalloc((size_t)nx * sizeof *x);
    fill_input(x, batch, t);
    double *x64 = ref_from_f32(x, nx), **want = xcalloc((size_t)desc->n_outputs + 1, sizeof *want);
    char err[512];
    ck_assert_msg(ref_run(g, batch, (const double *const *)&x64, want, err, sizeof err), "%s: ref: %s", what, err);
    outs og = run(gpu, batch, &x, d, what), oc = run(cpu, batch, &x, d, what);
    setenv("CASTOR_PTXEMU_ORDER", "reverse", 1);
    outs orv = run(gpu, batch, &x, d, what);
    unsetenv("CASTOR_PTXEMU_ORDER");
    for (int k = 0; k < desc->n_outputs; k++) {
      const rt_tensor_desc *td = &desc->outputs[k];
      int64_t n = numel(td, batch);
      float *got = as_f32(td, og.p[k], n), *cp = as_f32(td, oc.p[k], n);
      double *cpd = ref_from_f32(cp, n);
      ref_cmp er = ref_compare_normalized(got, want[k], n), ec = ref_compare_normalized(got, cpd, n);
      char m1[256], m2[256];
      ck_assert_msg(er.error < ref_bound(policy), "%s batch %lld output %s vs reference: %s (bound %g)", what,
                    (long long)batch, td->name, ref_cmp_str(&er, m1, sizeof m1), ref_bound(policy));
      ck_assert_msg(ec.error < cpu_bound(policy), "%s batch %lld output %s vs cpu: %s (bound %g)", what,
                    (long long)batch, td->name, ref_cmp_str(&ec, m2, sizeof m2), cpu_bound(policy));
      ck_assert_msg(!memcmp(og.p[k], orv.p[k], (size_t)n * dtype_size(td->dtype)),
                    "%s batch %lld output %s: the reverse warp and CTA order changes the result", what,
                    (long long)batch, td->name);
      if (er.error > worst_ref) worst_ref = er.error;
      if (ec.error > worst_cpu) worst_cpu = ec.error;
      free(got), free(cp), free(cpd);
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
END_TEST

/* ---- training: one step on both targets ---- */

static const char train_text[] = "model rnn_train\n"
                                 "x = input(shape=[5, 4])\n"
                                 "m = masking(x, mask_value=0)\n"
                                 "a = bidirectional(m, layer=lstm, units=5, return_sequences=true, name=a)\n"
                                 "b = gru(a, units=7, return_sequences=true, name=b)\n"
                                 "c = gru(b, units=6, reset_after=false, return_sequences=true, name=c)\n"
                                 "e = simple_rnn(c, units=5, go_backwards=true, name=e)\n"
                                 "o = dense(e, units=3, name=o)\n"
                                 "output o\n";

typedef struct prog {
  castor_context *ctx;
  castor_model *m;
  castor_program *p;
} prog;

static void prog_init(prog *r, castor_target target, const char *policy) {
  memset(r, 0, sizeof *r);
  ck_assert_int_eq(castor_context_create(&r->ctx), CASTOR_OK);
  ck_assert_msg(castor_model_load_string(r->ctx, "rnn_train.cast", train_text, strlen(train_text), NULL, &r->m) ==
                    CASTOR_OK,
                "%s", castor_context_last_error(r->ctx));
  castor_train_options to;
  castor_train_options_init(&to);
  to.loss = "mean_squared_error";
  to.optimizer = "sgd"; /* the update is the gradient: the bound is the gradients' */
  to.learning_rate = 0.1;
  castor_compile_options o;
  castor_compile_options_init(&o);
  o.policy = policy;
  o.target = target;
  castor_status st = castor_compile_train(r->m, &o, &to, &r->p);
  ck_assert_msg(st == CASTOR_OK, "rnn_train %s on %s: %s", policy, target == CASTOR_TARGET_CUDA ? "cuda" : "cpu",
                castor_context_last_error(r->ctx));
}

static void prog_fini(prog *r) {
  castor_program_destroy(r->p);
  castor_model_destroy(r->m);
  castor_context_destroy(r->ctx);
}

static double run_step(prog *r, const float *x, const float *y) {
  int64_t xd[] = {3, 5, 4}, yd[] = {3, 3};
  castor_tensor *tx = NULL, *ty = NULL;
  ck_assert_int_eq(castor_tensor_create(r->ctx, CASTOR_F32, 3, xd, &tx), CASTOR_OK);
  ck_assert_int_eq(castor_tensor_create(r->ctx, CASTOR_F32, 2, yd, &ty), CASTOR_OK);
  memcpy(castor_tensor_data(tx), x, 3 * 5 * 4 * 4);
  memcpy(castor_tensor_data(ty), y, 3 * 3 * 4);
  castor_tensor *ins[] = {tx, ty}, *res[2] = {NULL, NULL};
  ck_assert_msg(castor_program_run(r->p, ins, 2, res, 2) == CASTOR_OK, "step: %s", castor_context_last_error(r->ctx));
  double loss = *(float *)castor_tensor_data(res[1]);
  for (int i = 0; i < 2; i++) castor_tensor_destroy(res[i]);
  castor_tensor_destroy(tx), castor_tensor_destroy(ty);
  return loss;
}

/* State `name` as f32 values, malloc'ed; *n its elements. */
static float *state_f32(prog *r, const char *name, int64_t *n) {
  castor_tensor *t = NULL;
  ck_assert_msg(castor_program_get_state(r->p, name, &t) == CASTOR_OK, "%s: %s", name, castor_context_last_error(r->ctx));
  *n = castor_tensor_numel(t);
  float *v = xmalloc((size_t)*n * 4 + 4);
  const void *d = castor_tensor_data(t);
  for (int64_t i = 0; i < *n; i++) {
    switch (castor_tensor_dtype(t)) {
    case CASTOR_F32: v[i] = ((const float *)d)[i]; break;
    case CASTOR_F16: v[i] = half_f16_to_f32(((const uint16_t *)d)[i]); break;
    case CASTOR_BF16: v[i] = half_bf16_to_f32(((const uint16_t *)d)[i]); break;
    case CASTOR_I64: v[i] = (float)((const int64_t *)d)[i]; break;
    case CASTOR_I32: v[i] = (float)((const int32_t *)d)[i]; break;
    case CASTOR_BOOL: v[i] = ((const uint8_t *)d)[i]; break;
    }
  }
  castor_tensor_destroy(t);
  return v;
}

static double normalized(const float *got, const float *want, int64_t n) {
  double err = 0, scale = 0;
  for (int64_t i = 0; i < n; i++) {
    double e = fabs((double)got[i] - (double)want[i]);
    if (!(e <= err)) err = e; /* NaN sticks */
    if (fabs((double)want[i]) > scale) scale = fabs((double)want[i]);
  }
  return scale > 0 ? err / scale : err;
}

/* check_train_cuda's bounds on the normalized difference of the updates,
 * f32's loosened: the input kernels' updates are matmul_tn sums over the
 * batch and steps of small gradients that partly cancel (the LSTM's
 * backward direction's: 8e-5 at most), summed in another order on each
 * target; measured 1.1e-5 there, 0 for every other weight (the 16-bit
 * policies: 0 for all). */
static double step_bound(const char *policy) {
  if (!strcmp(policy, "float32")) return 5e-5;
  if (strstr(policy, "bfloat16")) return 8e-3;
  return 1e-3;
}

START_TEST(test_train_step) {
  if (!test_case_runs((size_t)_i)) return; /* CASTOR_TEST_STRIDE=2: float32's step only */
  const char *policy = policies[_i];
  prog cpu, gpu;
  prog_init(&gpu, CASTOR_TARGET_CUDA, policy);
  prog_init(&cpu, CASTOR_TARGET_CPU, policy);
  float x[3 * 5 * 4], y[3 * 3];
  rng_state = 99;
  for (int n = 0; n < 3; n++)
    for (int s = 0; s < 5; s++)
      for (int f = 0; f < 4; f++) x[(n * 5 + s) * 4 + f] = (n + 2 * s) % 4 == 1 ? 0.0f : rng_f32();
  for (int i = 0; i < 9; i++) y[i] = rng_f32();
  int ns = castor_program_num_states(cpu.p);
  ck_assert_int_eq(ns, castor_program_num_states(gpu.p));
  float **w0 = xcalloc((size_t)ns + 1, sizeof *w0);
  int n_rnn_weights = 0;
  for (int i = 0; i < ns; i++) {
    castor_tensor_info info;
    ck_assert_int_eq(castor_program_state_info(cpu.p, i, &info), CASTOR_OK);
    int64_t nc, ng;
    w0[i] = state_f32(&cpu, info.name, &nc);
    float *g0 = state_f32(&gpu, info.name, &ng);
    ck_assert_int_eq(nc, ng);
    ck_assert_msg(memcmp(w0[i], g0, (size_t)nc * 4) == 0, "initial state %s differs", info.name);
    n_rnn_weights += strstr(info.name, "recurrent_kernel") != NULL;
    free(g0);
  }
  ck_assert_int_eq(n_rnn_weights, 5); /* a's two directions, b, c, e */
  double lc = run_step(&cpu, x, y), lg = run_step(&gpu, x, y);
  double bound = step_bound(policy);
  ck_assert_msg(isfinite(lg) && fabs(lg - lc) <= bound * fabs(lc), "%s: loss %.9g on cuda, %.9g on the cpu", policy, lg,
                lc);
  double worst = 0;
  for (int i = 0; i < ns; i++) {
    castor_tensor_info info;
    ck_assert_int_eq(castor_program_state_info(cpu.p, i, &info), CASTOR_OK);
    if (castor_program_state_kind(cpu.p, i) != CASTOR_STATE_TRAINABLE) continue;
    int64_t nc, ng;
    float *c = state_f32(&cpu, info.name, &nc), *g = state_f32(&gpu, info.name, &ng);
    bool moved = false;
    for (int64_t k = 0; k < nc; k++) {
      c[k] -= w0[i][k], g[k] -= w0[i][k]; /* the updates */
      moved |= c[k] != 0;
    }
    ck_assert_msg(moved, "%s: the cpu's step leaves %s as it was", policy, info.name);
    double e = normalized(g, c, nc);
    ck_assert_msg(e <= bound, "%s: the update of %s differs by %g (normalized) from the cpu's (bound %g)", policy,
                  info.name, e, bound);
    if (e > worst) worst = e;
    free(c), free(g);
  }
  printf("rnn_train %-16s loss %.9g (cpu %.9g), updates within %.3g of the cpu's\n", policy, lg, lc, worst);
  for (int i = 0; i < ns; i++) free(w0[i]);
  free(w0);
  prog_fini(&cpu);
  prog_fini(&gpu);
}
END_TEST

int main(void) {
  diag_sink *d = diag_sink_create();
  rt_cuda_device *dev = rt_cuda_device_open(-1, d);
  if (!dev) {
    printf("check_rnn_cuda: skipped: %s", diag_text(d));
    diag_sink_destroy(d);
    return 77;
  }
  char sm[16];
  rt_cuda_device_sm(dev, sm, sizeof sm);
  printf("check_rnn_cuda: %s (%s)\n", rt_cuda_device_name(dev), sm);
  rt_cuda_device_close(dev);
  diag_sink_destroy(d);
  Suite *s = suite_create("rnn_cuda");
  TCase *tc = tcase_create("forward");
  tcase_set_timeout(tc, 600);
  tcase_add_loop_test(tc, test_forward, 0, N_CELLS * 4 * N_POLICIES);
  suite_add_tcase(s, tc);
  TCase *tt = tcase_create("train");
  tcase_set_timeout(tt, 600);
  tcase_add_loop_test(tt, test_train_step, 0, N_POLICIES);
  suite_add_tcase(s, tt);
  return check_run(s);
}
