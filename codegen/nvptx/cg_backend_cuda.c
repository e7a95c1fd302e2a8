/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cg_backend_cuda.c: the CUDA backend: PTX from cg_nvptx.c, loaded and run
 * through the CUDA driver API (runtime/cuda.c, dlopen'ed: no GPU or no
 * driver is a clear CASTOR_ERR_DEVICE, never a crash). It always pads
 * 16-bit matmuls (tensor-core tiles).
 */
#include <stdio.h>
#include <stdlib.h>

#include "codegen/cg_backend.h"

typedef struct cuda_exec {
  cg_exec base;
  rt_cuda_device *dev;
  rt_cuda_program *prog;
  rt_cuda_module *mod;
} cuda_exec;

/* The cuda target's one table of exceptions: each op it has no kernel for,
 * with the reason (cg_backend_check prints "<op> (%name) is not supported
 * by the cuda target: <reason>"). Every other op is emitted by the NVPTX
 * emitter of its kernel class (cg_nvptx.c), the training step's included
 * (the kit's formulas: cg_nvptx_train.c). */
static const char *const cuda_exceptions[IR_OP_COUNT] = {
    /* batch_matmul, for which the NVPTX GEMM has no batch loop, is the kit's
     * per-element contraction (cg_contract_value) */
    /* recurrent layers (simple_rnn, gru, lstm, their _grad and lstm_train) are
     * the kit's scan (cg_rnn.c): one batch row per thread, its state in local
     * memory; checked on the PTX emulator only (check_rnn_cuda), no GPU yet */
    NULL,
};

static void cuda_destroy(cg_exec *base) {
  cuda_exec *x = (cuda_exec *)base;
  rt_cuda_module_unload(x->mod);
  rt_cuda_program_destroy(x->prog); /* and base.desc, its description */
  rt_cuda_device_close(x->dev);
  free(x);
}

/* The device (its architecture unless o->sm), PTX, and the module loaded
 * with the constants uploaded. */
static cg_exec *cuda_compile(const ir_graph *g, const cg_backend_options *o, diag_sink *d) {
  cuda_exec *x = xcalloc(1, sizeof *x);
  x->base.backend = &cg_backend_cuda;
  x->base.threads = 1;
  char sm[16];
  if (!(x->dev = rt_cuda_device_open(o->device, d))) goto fail;
  rt_cuda_device_sm(x->dev, sm, sizeof sm);
  /* LLVM 19 knows architectures up to sm_90; newer GPUs JIT sm_90 PTX */
  if (rt_cuda_device_cc(x->dev) > 90) snprintf(sm, sizeof sm, "sm_90");
  if (!(x->prog = cg_compile_cuda(g, o->sm ? o->sm : sm, &o->cg, d))) goto fail;
  x->base.desc = x->prog->desc;
  if (!(x->mod = rt_cuda_module_load(x->dev, x->prog, d))) goto fail;
  return &x->base;
fail:
  cuda_destroy(&x->base);
  return NULL;
}

static bool cuda_emit(const ir_graph *g, const cg_backend_options *o, cg_emit_kind kind, str_buf *out,
                      diag_sink *d) {
  if (kind == CG_EMIT_PTX) return cg_emit_ptx(g, o->sm, out, d);
  cg_options co = o->cg;
  co.dump_llvm = out;
  rt_cuda_program *p = cg_compile_cuda(g, o->sm, &co, d);
  rt_cuda_program_destroy(p);
  return p != NULL;
}

static bool cuda_run(cg_exec *base, int64_t batch, const void *const *in, void *const *out, diag_sink *d) {
  return rt_cuda_run(((cuda_exec *)base)->mod, batch, in, out, d);
}

static bool cuda_state_read(cg_exec *base, int i, void *dst, diag_sink *d) {
  return rt_cuda_state_read(((cuda_exec *)base)->mod, i, dst, d);
}

static bool cuda_state_write(cg_exec *base, int i, const void *src, diag_sink *d) {
  return rt_cuda_state_write(((cuda_exec *)base)->mod, i, src, d);
}

static bool cuda_time(cg_exec *base, int64_t batch, const void *const *in, int warmup, int iters, double *out_ms,
                      diag_sink *d) {
  return rt_cuda_time(((cuda_exec *)base)->mod, batch, in, NULL, warmup, iters, out_ms, d);
}

const cg_backend cg_backend_cuda = {
    .name = "cuda",
    .always_pad8 = true,
    .exceptions = cuda_exceptions,
    .compile = cuda_compile,
    .emit = cuda_emit,
    .run = cuda_run,
    .profile = NULL, /* kernels are timed together (cuda_time), not one by one yet */
    .time = cuda_time,
    .state_read = cuda_state_read, /* a training program's state stays in device memory */
    .state_write = cuda_state_write,
    .destroy = cuda_destroy,
};
