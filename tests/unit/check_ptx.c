/* SPDX-License-Identifier: Apache-2.0 */
/*
 * check_ptx.c: the nvptx target's PTX, assembled by NVIDIA's ptxas.
 *
 * Every model of gpu_cases.h under every dtype policy is compiled through
 * the cuda pipeline (pad8) to PTX for sm_80 and sm_90, and ptxas must
 * accept the module (-arch=sm_XX, warnings as errors). 16-bit policies must
 * use the tensor cores (mma.sync, ldmatrix, cp.async in the PTX), float32
 * must not. One more test assembles a large GEMM (8192 x 8192 weights in
 * f16 and bf16) whose blocks need over 48 KB of shared memory.
 *
 * ptxas is looked up on PATH, then in /usr/local/cuda/bin; without it the
 * suite prints why and exits 77 (ctest: skipped). No GPU is needed.
 */
#include <check.h>

#include "tests/unit/test_support.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "codegen/codegen.h"
#include "tests/unit/gpu_cases.h"

static char ptxas[4096];

static bool find_ptxas(void) {
  const char *path = getenv("PATH");
  char *dup = strdup(path ? path : "");
  bool found = false;
  for (char *dir = strtok(dup, ":"); dir && !found; dir = strtok(NULL, ":")) {
    snprintf(ptxas, sizeof ptxas, "%s/ptxas", dir);
    found = access(ptxas, X_OK) == 0;
  }
  free(dup);
  if (!found) {
    snprintf(ptxas, sizeof ptxas, "/usr/local/cuda/bin/ptxas");
    found = access(ptxas, X_OK) == 0;
  }
  return found;
}

/* Assembles ptx for sm; on failure returns false with ptxas' output in log. */
static bool assemble(const char *ptx, const char *sm, char *log, size_t loglen) {
  char file[] = "/tmp/castor-ptx-XXXXXX";
  int fd = mkstemp(file);
  ck_assert_msg(fd >= 0, "mkstemp failed");
  FILE *f = fdopen(fd, "w");
  fputs(ptx, f);
  fclose(f);
  char cmd[8192];
  snprintf(cmd, sizeof cmd, "'%s' -arch=%s --warning-as-error -o /dev/null '%s' 2>&1", ptxas, sm, file);
  FILE *p = popen(cmd, "r");
  ck_assert_msg(p != NULL, "cannot run %s", cmd);
  size_t n = fread(log, 1, loglen - 1, p);
  log[n] = 0;
  int st = pclose(p);
  remove(file);
  return st == 0;
}

static const char *const sms[] = {"sm_80", "sm_90"};

static void check_program(const rt_cuda_program *p, const char *what, bool is16, const char *sm) {
  char log[16384];
  ck_assert_msg(assemble(p->ptx, sm, log, sizeof log), "%s: ptxas -arch=%s rejects the PTX:\n%s", what, sm, log);
  ck_assert_msg(strstr(p->ptx, ".target sm_") && strstr(p->ptx, sm), "%s: PTX does not target %s", what, sm);
  bool mma = strstr(p->ptx, "mma.sync.aligned.m16n8k16") != NULL;
  ck_assert_msg(mma == is16, "%s: mma.sync %s", what, mma ? "in a float32 program" : "missing");
  if (is16) {
    ck_assert_msg(strstr(p->ptx, "ldmatrix.sync.aligned.m8n8.x4") != NULL, "%s: no ldmatrix", what);
    ck_assert_msg(strstr(p->ptx, "cp.async.cg.shared.global") != NULL, "%s: no cp.async", what);
  }
  for (int i = 0; i < p->n_launches; i++) {
    const rt_cuda_launch *l = &p->launches[i];
    char entry[512];
    snprintf(entry, sizeof entry, ".entry %s(", l->name);
    ck_assert_msg(strstr(p->ptx, entry) != NULL, "%s: no kernel '%s' in the PTX", what, l->name);
    ck_assert_msg(l->block > 0 && l->block <= 1024 && l->block % 32 == 0, "%s: %s: block %d", what, l->name, l->block);
    ck_assert_msg(l->shared_bytes >= 0 && l->shared_bytes <= 227 * 1024, "%s: %s: shared %d", what, l->name, l->shared_bytes);
    ck_assert_msg(l->n_args >= 1, "%s: %s has no output argument", what, l->name);
    for (int64_t batch = 1; batch <= 8192; batch *= 2) {
      int64_t gx = rt_cuda_launch_grid_x(l, batch);
      ck_assert_msg(gx >= 1 && gx <= 0x7fffffff, "%s: %s: grid %lld at batch %lld", what, l->name, (long long)gx,
                    (long long)batch);
    }
  }
}

START_TEST(test_cases_assemble) {
  const gpu_case *c = &gpu_cases[_i / N_GPU_POLICIES];
  const char *policy = gpu_policies[_i % N_GPU_POLICIES];
  diag_sink *d = diag_sink_create();
  ir_graph *g = gpu_case_graph(c, policy, d);
  ck_assert_msg(g != NULL, "%s/%s: %s", c->name, policy, diag_text(d));
  bool is16 = strcmp(policy, "float32") != 0;
  for (int s = 0; s < 2; s++) {
    rt_cuda_program *p = cg_compile_cuda(g, sms[s], NULL, d);
    char what[128];
    snprintf(what, sizeof what, "%s/%s/%s", c->name, policy, sms[s]);
    ck_assert_msg(p != NULL, "%s: %s", what, diag_text(d));
    check_program(p, what, is16, sms[s]);
    rt_cuda_program_destroy(p);
  }
  ir_graph_destroy(g);
  diag_sink_destroy(d);
}
END_TEST

/* A dense layer with units x units weights: the 128 x 128 tensor-core tile
 * with its 4-stage pipeline (over 48 KB of shared memory). */
START_TEST(test_big_gemm_assembles) {
  static const char *const pols[] = {"float16", "bfloat16", "float32"};
  const char *policy = pols[_i];
  const char *text = "model big\nx = input(shape=[8192])\ny = dense(x, units=8192)\noutput y\n";
  gpu_case c = {"big", text};
  diag_sink *d = diag_sink_create();
  fe_options fo;
  fe_options_init(&fo);
  ir_graph *g = gpu_case_graph(&c, policy, d);
  ck_assert_msg(g != NULL, "big/%s: %s", policy, diag_text(d));
  for (int s = 0; s < 2; s++) {
    rt_cuda_program *p = cg_compile_cuda(g, sms[s], NULL, d);
    ck_assert_msg(p != NULL, "big/%s: %s", policy, diag_text(d));
    check_program(p, "big", _i < 2, sms[s]);
    int shared = 0;
    for (int i = 0; i < p->n_launches; i++)
      if (p->launches[i].shared_bytes > shared) shared = p->launches[i].shared_bytes;
    if (_i < 2) ck_assert_msg(shared > 48 * 1024, "big/%s: the GEMM's shared memory is %d bytes", policy, shared);
    rt_cuda_program_destroy(p);
  }
  ir_graph_destroy(g);
  diag_sink_destroy(d);
}
END_TEST

START_TEST(test_bad_sm) {
  diag_sink *d = diag_sink_create();
  ir_graph *g = gpu_case_graph(&gpu_cases[0], "float32", d);
  ck_assert_ptr_nonnull(g);
  ck_assert_ptr_null(cg_compile_cuda(g, "sm_70", NULL, d));
  ck_assert_msg(strstr(diag_text(d), "sm_80 or newer") != NULL, "%s", diag_text(d));
  diag_clear(d);
  ck_assert_ptr_null(cg_compile_cuda(g, "compute_80", NULL, d));
  ck_assert_msg(strstr(diag_text(d), "unknown GPU architecture") != NULL, "%s", diag_text(d));
  ir_graph_destroy(g);
  diag_sink_destroy(d);
}
END_TEST

int main(void) {
  if (!find_ptxas()) {
    printf("check_ptx: skipped: no ptxas on PATH or in /usr/local/cuda/bin (install the CUDA toolkit)\n");
    return 77;
  }
  Suite *s = suite_create("ptx");
  TCase *tc = tcase_create("ptxas");
  tcase_set_timeout(tc, 600);
  tcase_add_loop_test(tc, test_cases_assemble, 0, N_GPU_CASES * N_GPU_POLICIES);
  tcase_add_loop_test(tc, test_big_gemm_assembles, 0, 3);
  tcase_add_test(tc, test_bad_sm);
  suite_add_tcase(s, tc);
  return check_run(s);
}
