/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_train.c: .cast text on through code generation: castor_compile_train
 * (the model's `compile` statement gives the loss and optimizer), then two
 * training steps on a batch of two samples made from the input's bytes
 * (class index 0 for a sparse target), as castor train runs them.
 *
 * Size caps keep one execution well under a second: inputs of at most
 * 2 KiB, models that load with at most 64 KiB of Glorot init and at most
 * 48 nodes, inputs of at most 2^16 elements a batch (a larger one is
 * compiled but not run), and LLVM at -O0 (-O1 for one length in four; the kernels are
 * the same, only LLVM's work differs). One thread, so a run is the same on
 * any machine.
 *
 * Invariants: compiling succeeds xor an error with a message; each step
 * succeeds (inputs of the shapes the program states cannot be refused)
 * with a scalar f32 loss; its state can be read back by name.
 */
#include <string.h>

#include "tests/fuzz/fuzz.h"

#include "castor.h"
#include "frontend/frontend.h"

enum { MAX_INPUT = 2048, MAX_NODES = 48, MAX_INIT = 64 << 10, MAX_ELEMS = 1 << 16, BATCH = 2 };

/* Whether the model loads within the caps (fuzz_cast_train.c checks the
 * load's own invariants). */
static bool small_model(const uint8_t *data, size_t size) {
  diag_sink *d = diag_sink_create();
  fe_options o;
  fe_options_init(&o);
  o.max_init_bytes = MAX_INIT;
  ir_graph *g = fe_load_mem("fuzz.cast", (const char *)data, size, &o, d, NULL);
  bool ok = g && g->n_nodes <= MAX_NODES;
  ir_graph_destroy(g);
  diag_sink_destroy(d);
  return ok;
}

/* A tensor of info's dtype and shape (batch BATCH): f32 from the input's
 * bytes in [-1, 1), everything else zero (class index 0). */
static castor_tensor *make_input(castor_context *ctx, const castor_tensor_info *info, const uint8_t *data,
                                 size_t size) {
  int64_t dims[8];
  for (int r = 0; r < info->rank; r++) dims[r] = info->dims[r] < 0 ? BATCH : info->dims[r];
  castor_tensor *t;
  if (castor_tensor_create(ctx, info->dtype, info->rank, dims, &t) != CASTOR_OK)
    fuzz_fail("cannot create an input of the program's own shape", castor_context_last_error(ctx));
  memset(castor_tensor_data(t), 0, castor_tensor_nbytes(t));
  if (info->dtype == CASTOR_F32) {
    float *f = castor_tensor_data(t);
    for (int64_t i = 0; i < castor_tensor_numel(t); i++) f[i] = (float)(data[(size_t)i % size] - 128) / 128.0f;
  }
  return t;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size == 0 || size > MAX_INPUT || !small_model(data, size)) return 0;
  castor_context *ctx;
  castor_model *m;
  castor_context_create(&ctx);
  if (castor_model_load_string(ctx, "fuzz.cast", (const char *)data, size, NULL, &m) != CASTOR_OK)
    fuzz_fail("the API does not load what the frontend loads", castor_context_last_error(ctx));
  castor_compile_options co;
  castor_compile_options_init(&co);
  co.threads = 1;
  co.opt_level = size % 4 == 0 ? 1 : 0;
  castor_program *step = NULL;
  castor_status st = castor_compile_train(m, &co, NULL, &step);
  const char *err = castor_context_last_error(ctx);
  if (st != CASTOR_OK && (!err || !*err)) fuzz_fail("castor_compile_train failed without an error", "");
  if (st == CASTOR_OK && err && *err) fuzz_fail("castor_compile_train succeeded with an error", err);
  if (st == CASTOR_OK) {
    int ni = castor_program_num_inputs(step), no = castor_program_num_outputs(step);
    if (ni < 2 || ni > 8 || no < 1 || no > 8) fuzz_fail("a training step without inputs and targets, or a loss", "");
    castor_tensor *in[8] = {0}, *out[8] = {0};
    bool small = true;
    for (int i = 0; i < ni; i++) {
      castor_tensor_info info;
      if (castor_program_input_info(step, i, &info) != CASTOR_OK) fuzz_fail("no input info", "");
      int64_t numel = 1;
      for (int r = 0; r < info.rank && small; r++) {
        int64_t d = info.dims[r] < 0 ? BATCH : info.dims[r];
        small = d <= MAX_ELEMS && (numel *= d) <= MAX_ELEMS;
      }
      if (small) in[i] = make_input(ctx, &info, data, size);
    }
    for (int s = 0; s < 2 && small; s++) {
      if (castor_program_run(step, in, ni, out, no) != CASTOR_OK)
        fuzz_fail("a training step refused inputs of its own shapes", castor_context_last_error(ctx));
      const castor_tensor *loss = out[no - 1];
      if (castor_tensor_dtype(loss) != CASTOR_F32 || castor_tensor_numel(loss) != 1)
        fuzz_fail("the step's last output is not a scalar f32 loss", "");
    }
    for (int i = 0; i < castor_program_num_states(step); i++) {
      castor_tensor_info info;
      castor_tensor *t = NULL;
      if (castor_program_state_info(step, i, &info) != CASTOR_OK ||
          castor_program_get_state(step, info.name, &t) != CASTOR_OK)
        fuzz_fail("a state cannot be read back by its name", castor_context_last_error(ctx));
      castor_tensor_destroy(t);
    }
    for (int i = 0; i < ni; i++) castor_tensor_destroy(in[i]); /* NULL: a no-op */
    for (int i = 0; i < no; i++) castor_tensor_destroy(out[i]);
    castor_program_destroy(step);
  }
  castor_model_destroy(m);
  castor_context_destroy(ctx);
  return 0;
}
