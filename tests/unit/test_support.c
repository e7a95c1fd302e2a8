/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_support.c: the one main loop of the Check suites (test_support.h).
 */
#include "tests/unit/test_support.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/cpu/cg_cpu_caps.h"
#include "codegen/codegen.h"
#include <math.h>

static int run(Suite *s, bool fork) {
  SRunner *sr = srunner_create(s);
  if (!fork) srunner_set_fork_status(sr, CK_NOFORK);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

int check_run(Suite *s) { return run(s, true); }

bool test_case_runs(size_t k) {
  const char *env = getenv("CASTOR_TEST_STRIDE");
  long n = env ? strtol(env, NULL, 10) : 1;
  /* the offset turns with each block of N, so that the inner loops' values
   * (dtypes, masks) each get their turn: N = 2 runs 0, 3, 4, 7, 8, ... */
  return n <= 1 || k % (size_t)n == (k / (size_t)n) % (size_t)n;
}
int check_run_nofork(Suite *s) { return run(s, false); }

void check_cpu_path(const char *suite) {
  cg_options o;
  cg_options_init(&o);
  str_buf line;
  str_buf_init(&line);
  diag_sink *d = diag_sink_create();
  if (!cg_cpu_describe(&o, &line, d)) {
    /* a name castor does not know is a mistake, not a path to skip */
    const char *env = getenv("CASTOR_CPU");
    const cg_cpu_named *nc = cg_cpu_named_lookup(env);
    bool known = nc != NULL;
    if (known) { /* name the GEMM family this host cannot run, and why */
      cg_cpu_caps caps;
      cg_cpu_caps_parse(nc->features, &caps);
      fprintf(stderr, "%s: skipped: the %s GEMM family (CPU %s: %s) cannot run here: %s\n", suite,
              cg_gemm_kernel_name(caps.gemm_kernel), nc->name, nc->about, diag_text(d));
    } else {
      fprintf(stderr, "%s: failed: %s\n", suite, diag_text(d));
    }
    exit(known ? 77 : EXIT_FAILURE);
  }
  /* a named family the JIT fell back from (the AMX family where this host
   * has no AMX or Linux refuses the tile state) is skipped, not passed */
  const cg_cpu_named *named = cg_cpu_named_lookup(getenv("CASTOR_CPU"));
  if (named && named->amx && !strstr(str_buf_cstr(&line), "GEMM kernel amx-bf16")) {
    fprintf(stderr, "%s: skipped: the amx-bf16 GEMM family (CPU %s: %s) cannot run here: %s\n", suite, named->name,
            named->about, str_buf_cstr(&line));
    exit(77);
  }
  fprintf(stderr, "%s: CPU path %s\n", suite, str_buf_cstr(&line));
  str_buf_fini(&line);
  diag_sink_destroy(d);
}

double test_rel_max_err(const float *got, const float *want, int64_t n) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < n; i++) {
    num = fmax(num, fabs((double)got[i] - want[i]));
    den = fmax(den, fabs((double)want[i]));
  }
  return num / (den > 0 ? den : 1);
}

castor_tensor *test_load_onnx_npy(castor_context *ctx, const char *name) {
  char path[512];
  snprintf(path, sizeof path, "%s/tests/onnx/models/%s", CASTOR_SOURCE_DIR, name);
  castor_tensor *t;
  ck_assert_msg(castor_tensor_load_npy(ctx, path, &t) == CASTOR_OK, "%s: %s", path, castor_context_last_error(ctx));
  return t;
}

castor_tensor *test_first_rows(castor_context *ctx, const castor_tensor *x, int64_t rows) {
  int64_t dims[8];
  int rank = castor_tensor_rank(x);
  memcpy(dims, castor_tensor_dims(x), (size_t)rank * sizeof *dims);
  size_t row_bytes = castor_tensor_nbytes(x) / (size_t)dims[0];
  dims[0] = rows;
  castor_tensor *t;
  ck_assert_int_eq(castor_tensor_create(ctx, castor_tensor_dtype(x), rank, dims, &t), CASTOR_OK);
  memcpy(castor_tensor_data(t), castor_tensor_data((castor_tensor *)x), row_bytes * (size_t)rows);
  return t;
}
