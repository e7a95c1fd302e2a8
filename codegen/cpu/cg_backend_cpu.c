/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cg_backend_cpu.c: the CPU backend: kernels JIT-compiled for this host
 * (cg_jit.c) and run on the thread pool (runtime/program.c). The exec keeps
 * the workspaces between runs (one a thread when the program runs by image,
 * rt_program_workspaces), so a run at a batch it has seen touches no
 * fresh pages, and a training program's state in host memory, which
 * state_read / state_write copy out and in.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "codegen/cg_backend.h"

typedef struct cpu_exec {
  cg_exec base;
  rt_program *prog;
  void **ws; /* n_ws workspaces (rt_program_workspaces): the first ws_bytes, the others
              * rt_program_pass_bytes (a thread's passes by image) */
  int n_ws;
  int64_t ws_bytes;
  void **state; /* prog->states[i]'s memory (rt_state_bytes); NULL without state */
} cpu_exec;

/* The CPU target emits every op of the table (each kernel class has its
 * emitter: cg_cpu.c dispatches by class), so it has no exceptions. */
static const char *const cpu_exceptions[IR_OP_COUNT] = {NULL};

static cg_exec *cpu_compile(const ir_graph *g, const cg_backend_options *o, diag_sink *d) {
  if (o->threads <= 0 && !rt_threads_env_check(d)) return NULL;
  rt_program *p = cg_compile_cpu(g, &o->cg, d);
  if (!p) return NULL;
  cpu_exec *x = xcalloc(1, sizeof *x);
  x->base = (cg_exec){&cg_backend_cpu, p, o->threads > 0 ? o->threads : rt_default_threads(), NULL};
  x->prog = p;
  str_buf note;
  str_buf_init(&note);
  cg_cpu_note(&o->cg, &note);
  if (str_buf_cstr(&note)[0]) x->base.note = xstrdup(str_buf_cstr(&note));
  str_buf_fini(&note);
  if (p->n_states > 0) { /* a training program's state, in host memory, initialized */
    x->state = xcalloc((size_t)p->n_states, sizeof *x->state);
    for (int i = 0; i < p->n_states; i++) {
      size_t bytes = (size_t)rt_state_bytes(p, i);
      if (!(x->state[i] = aligned_alloc(64, (bytes + 63) & ~(size_t)63))) {
        diag_error_kind(d, DIAG_KIND_DEVICE, (diag_loc){0},
                        "cannot allocate %zu bytes for the state %s", bytes, p->states[i].t.name);
        cg_exec_destroy(&x->base);
        return NULL;
      }
      rt_state_init(p, i, x->state[i]);
    }
  }
  return &x->base;
}

static bool cpu_emit(const ir_graph *g, const cg_backend_options *o, cg_emit_kind kind, str_buf *out,
                     diag_sink *d) {
  if (kind != CG_EMIT_LLVM) {
    diag_error_kind(d, DIAG_KIND_INVALID_ARGUMENT, (diag_loc){0},
                    "the cpu target emits LLVM IR, not PTX (PTX needs the cuda target)");
    return false;
  }
  cg_options co = o->cg;
  co.dump_llvm = out;
  rt_program *p = cg_compile_cpu(g, &co, d);
  rt_program_destroy(p);
  return p != NULL;
}

/* The workspaces for `batch` (one, or one a thread by image), grown as
 * needed; none when the program needs none or they cannot be had (*ok
 * false: rt_program_run reports why). */
static int workspaces(cpu_exec *x, int64_t batch, bool *ok) {
  int64_t n = 0;
  *ok = rt_program_workspace_bytes(x->prog, batch, &n);
  if (!*ok || n == 0) return 0;
  int want = rt_program_workspaces(x->prog, x->base.threads);
  if (n > x->ws_bytes || want > x->n_ws) {
    for (int i = 0; i < x->n_ws; i++) free(x->ws[i]);
    free(x->ws);
    if (n < x->ws_bytes) n = x->ws_bytes; /* (keep the largest batch's) */
    x->ws = xcalloc((size_t)want, sizeof *x->ws);
    x->n_ws = want;
    x->ws_bytes = n;
    /* past the first: a thread's passes by image (their slots, first in the layout) */
    int64_t pass = rt_program_pass_bytes(x->prog);
    for (int i = 0; i < want && *ok; i++) {
      int64_t bytes = i == 0 ? n : pass;
      *ok = bytes == 0 || ((uint64_t)bytes <= SIZE_MAX && (x->ws[i] = aligned_alloc(64, (size_t)bytes)) != NULL);
    }
    if (!*ok) {
      for (int i = 0; i < want; i++) free(x->ws[i]);
      free(x->ws);
      x->ws = NULL, x->n_ws = 0, x->ws_bytes = 0;
      return 0;
    }
  }
  return x->n_ws;
}

static bool cpu_profile(cg_exec *base, int64_t batch, const void *const *in, void *const *out, rt_profile *prof,
                        diag_sink *d) {
  cpu_exec *x = (cpu_exec *)base;
  bool ok;
  int n = workspaces(x, batch, &ok);
  return rt_program_run_workspaces(x->prog, base->threads, batch, in, out, x->state, x->ws, ok ? n : 0, prof, d);
}

static bool cpu_run(cg_exec *base, int64_t batch, const void *const *in, void *const *out, diag_sink *d) {
  return cpu_profile(base, batch, in, out, NULL, d);
}

static bool cpu_time(cg_exec *base, int64_t batch, const void *const *in, int warmup, int iters, double *out_ms,
                     diag_sink *d) {
  const rt_program *p = base->desc;
  void **out = xcalloc((size_t)p->n_outputs + 1, sizeof *out);
  bool ok = true;
  for (int i = 0; i < p->n_outputs && ok; i++) {
    const rt_buffer *b = &p->buffers[p->outputs[i].buffer];
    size_t n = (size_t)(b->bytes_per_row * batch + b->bytes_fixed);
    if (!(out[i] = aligned_alloc(64, (n + 63) & ~(size_t)63))) {
      diag_error_kind(d, DIAG_KIND_DEVICE, (diag_loc){0}, "cannot allocate %zu bytes for output %d", n, i);
      ok = false;
    }
  }
  for (int i = 0; i < warmup + iters && ok; i++) {
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    ok = cpu_run(base, batch, in, out, d);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (i >= warmup)
      out_ms[i - warmup] = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
  }
  for (int i = 0; i < p->n_outputs; i++) free(out[i]);
  free(out);
  return ok;
}

/* cg_exec_state_read/write have checked i. */
static bool cpu_state_read(cg_exec *base, int i, void *dst, diag_sink *d) {
  (void)d;
  cpu_exec *x = (cpu_exec *)base;
  memcpy(dst, x->state[i], (size_t)rt_state_bytes(x->prog, i));
  return true;
}

static bool cpu_state_write(cg_exec *base, int i, const void *src, diag_sink *d) {
  (void)d;
  cpu_exec *x = (cpu_exec *)base;
  memcpy(x->state[i], src, (size_t)rt_state_bytes(x->prog, i));
  return true;
}

static void cpu_destroy(cg_exec *base) {
  cpu_exec *x = (cpu_exec *)base;
  for (int i = 0; x->state && i < x->prog->n_states; i++) free(x->state[i]);
  free(x->state);
  rt_program_destroy(x->prog);
  for (int i = 0; i < x->n_ws; i++) free(x->ws[i]);
  free(x->ws);
  free(x->base.note);
  free(x);
}

const cg_backend cg_backend_cpu = {
    .name = "cpu",
    .always_pad8 = false,
    .exceptions = cpu_exceptions,
    .compile = cpu_compile,
    .emit = cpu_emit,
    .run = cpu_run,
    .profile = cpu_profile,
    .time = cpu_time,
    .state_read = cpu_state_read,
    .state_write = cpu_state_write,
    .destroy = cpu_destroy,
};
