/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cg_backend.h: the backend interface, in the spirit of ggml's backend
 * vtable. A target (the CPU JIT, the CUDA driver, later an emulated GPU)
 * says what it supports, which pass pipeline it wants, how it compiles a
 * final graph into a loaded program, how it emits its code as text, and how
 * it runs and times that program. The API (api/castor.c) and the CLI
 * (tools/) reach targets only through this interface and the table of
 * backends (api/backends.c); they never ask "is this CUDA".
 *
 * Ahead-of-time compilation (cg_aot.c) is a CPU code emitter, not a
 * backend: it produces files, not a loaded program.
 */
#ifndef CASTOR_CG_BACKEND_H
#define CASTOR_CG_BACKEND_H

#include "codegen/codegen.h"

typedef struct cg_backend cg_backend;

/* What a compile asks of a backend; fields a backend does not use are
 * ignored. */
typedef struct cg_backend_options {
  cg_options cg;  /* optimization level, cpu/features (CPU), dump_llvm */
  int threads;    /* CPU: threads per run (<= 0: $CASTOR_NUM_THREADS, else all) */
  int device;     /* CUDA: device index (-1: $CASTOR_DEVICE, else 0) */
  const char *sm; /* CUDA: PTX architecture (NULL: the device's, sm_80 without one) */
} cg_backend_options;

void cg_backend_options_init(cg_backend_options *o);

/* A compiled program loaded on its backend. Backends embed it as the first
 * member of their own struct. desc describes inputs, outputs and buffers
 * (rt_program without kernel addresses on devices); owned by the exec. */
typedef struct cg_exec {
  const cg_backend *backend;
  const rt_program *desc;
  int threads; /* threads per run (CPU), for reports; 1 on devices */
  char *note;  /* NULL, or why the compiled code is not what was asked for (the CPU's
                * AMX family where the tile state is refused), for reports; the
                * backend's destroy frees it */
} cg_exec;

typedef enum cg_emit_kind {
  CG_EMIT_LLVM, /* the optimized LLVM IR of the kernels */
  CG_EMIT_PTX,  /* PTX assembly (NVIDIA targets) */
} cg_emit_kind;

struct cg_backend {
  const char *name; /* "cpu", "cuda": what --target= and castor_target name */
  /* The target pads 16-bit matmuls to multiples of 8 whatever the options
   * say (tensor cores): the driver then runs the pad8 pipeline. */
  bool always_pad8;
  /* The target's one table of exceptions, indexed by op: why it has no
   * kernel for that op (a row with its reason), or NULL: it emits the op
   * with its emitter for the op's kernel class (the op table's column).
   * IR_OP_COUNT entries; check_optable proves every op has an answer from
   * every backend (emitted, or a reason). */
  const char *const *exceptions;
  /* Compiles and loads g (after pipeline()); NULL with diagnostics. */
  cg_exec *(*compile)(const ir_graph *g, const cg_backend_options *o, diag_sink *d);
  /* Appends the target's code for g as text; false (with a diagnostic)
   * when the target has no such form. */
  bool (*emit)(const ir_graph *g, const cg_backend_options *o, cg_emit_kind kind, str_buf *out,
               diag_sink *d);
  /* Runs x on caller memory (inputs and outputs in the desc's layout). */
  bool (*run)(cg_exec *x, int64_t batch, const void *const *inputs, void *const *outputs, diag_sink *d);
  /* Runs x as run does, timing each kernel launch into prof (runtime.h);
   * NULL on a backend that cannot time its launches one by one (cuda). */
  bool (*profile)(cg_exec *x, int64_t batch, const void *const *inputs, void *const *outputs, rt_profile *prof,
                  diag_sink *d);
  /* `warmup` untimed runs, then out_ms[i] for `iters` timed ones: wall
   * time on the CPU, device time of the kernels on GPUs (no copies). */
  bool (*time)(cg_exec *x, int64_t batch, const void *const *inputs, int warmup, int iters,
               double *out_ms, diag_sink *d);
  /* A training program's state (desc->states[i], its kind there): the
   * backend keeps it where its kernels run (host memory on the CPU, device
   * memory on a GPU), made and initialized by compile, kept between runs.
   * state_read copies state i out into dst (rt_state_bytes(desc, i) bytes
   * of host memory), state_write copies it in from src; false with a
   * diagnostic. NULL on a backend that runs no training program. */
  bool (*state_read)(cg_exec *x, int i, void *dst, diag_sink *d);
  bool (*state_write)(cg_exec *x, int i, const void *src, diag_sink *d);
  void (*destroy)(cg_exec *x); /* NULL-safe through cg_exec_destroy */
};

/* Each target defines its backend; the table of them, and the lookups by
 * name, are the API's (api/backends.c), so nothing in codegen/'s root
 * calls up into a target. */
extern const cg_backend cg_backend_cpu;  /* cpu/cg_backend_cpu.c */
extern const cg_backend cg_backend_cuda; /* nvptx/cg_backend_cuda.c */
/* Why backend b has no kernel for op (its table of exceptions), or NULL
 * when it emits op. */
const char *cg_backend_unsupported(const cg_backend *b, ir_op op);
/* Reports every node of g the backend has no kernel for, at the node's
 * location ("layer_norm is not supported by the cuda target: ..."), as
 * DIAG_KIND_UNSUPPORTED; true when there is none. */
bool cg_backend_check(const cg_backend *b, const ir_graph *g, diag_sink *d);
/* Checks, then compiles. */
cg_exec *cg_backend_compile(const cg_backend *b, const ir_graph *g, const cg_backend_options *o,
                            diag_sink *d);
void cg_exec_destroy(cg_exec *x); /* NULL is a no-op */
/* x's backend's state_read / state_write for state i of x->desc; false,
 * with a DIAG_KIND_INVALID_ARGUMENT error, for an index outside the
 * states, and with a DIAG_KIND_UNSUPPORTED one where the backend keeps no
 * state. */
bool cg_exec_state_read(cg_exec *x, int i, void *dst, diag_sink *d);
bool cg_exec_state_write(cg_exec *x, int i, const void *src, diag_sink *d);

#endif
