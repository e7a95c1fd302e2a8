/* SPDX-License-Identifier: Apache-2.0 */
/*
 * exec_run.h: running a compiled program (cg_exec) of any backend on f32
 * inputs and reading its outputs back as f32, for the suites that compare
 * backends (check_cuda_emu, check_rnn_cuda); their seeded values are
 * exec_values.h's. Static functions: a suite includes it once.
 */
#ifndef CASTOR_TESTS_EXEC_RUN_H
#define CASTOR_TESTS_EXEC_RUN_H

#include <check.h>
#include <stdint.h>
#include <stdlib.h>

#include "codegen/cg_backend.h"
#include "util/half.h"
#include "util/util.h"
#include "tests/unit/exec_values.h"

typedef struct outs {
  void **p;
  int n;
} outs;

/* Runs x at `batch` on the inputs `in`; the outputs in their own dtypes. */
static outs run(cg_exec *x, int64_t batch, float **in, diag_sink *d, const char *what) {
  const rt_program *desc = x->desc;
  outs o = {xcalloc((size_t)desc->n_outputs + 1, sizeof(void *)), desc->n_outputs};
  for (int k = 0; k < desc->n_outputs; k++)
    o.p[k] = xmalloc((size_t)(numel(&desc->outputs[k], batch) * dtype_size(desc->outputs[k].dtype)) + 1);
  ck_assert_msg(x->backend->run(x, batch, (const void *const *)in, o.p, d), "%s batch %lld (%s): %s", what,
                (long long)batch, x->backend->name, diag_text(d));
  return o;
}

static void outs_free(outs *o) {
  for (int k = 0; k < o->n; k++) free(o->p[k]);
  free(o->p);
}

#endif
