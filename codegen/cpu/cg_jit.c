/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cg_jit.c: the CPU JIT. Plans the graph, emits and optimizes the kernels
 * for the host through cg_target.c (shared with the AOT target, so both
 * run the same machine code), JIT-compiles the module with ORC LLJIT and
 * assembles the rt_program (cg_program.c's description, kernels by address,
 * weight data copied in). The description, whose weight packing is a pass
 * over every weight byte, is built on a second thread while LLVM optimizes
 * and compiles: it only reads the plan and layout, which are final once
 * the kernels are emitted.
 */
#include <errno.h>
#include <llvm-c/Error.h>
#include <llvm-c/LLJIT.h>
#include <llvm-c/Object.h>
#include <llvm-c/Orc.h>
#include <llvm-c/TargetMachine.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "codegen/cpu/cg_cpu.h"
#include "codegen/cpu/cg_gemm_internal.h"

static void jit_destroy(void *owner) {
  LLVMErrorRef err = LLVMOrcDisposeLLJIT((LLVMOrcLLJITRef)owner);
  if (err) LLVMConsumeError(err);
}

/* The program description (cg_program.c) with its own copy of every
 * constant: packing the GEMM weights is the bulk of it (a pass over every
 * weight byte), so it runs on a second thread while LLVM optimizes and
 * compiles the kernels, which read none of what it writes. */
typedef struct describe_job {
  const ir_graph *g;
  const cg_plan *plan;
  const cg_cpu_layout *layout;
  diag_sink *d;
  rt_program *p; /* the result; NULL on error (reported to d) */
} describe_job;

static void *describe_main(void *arg) {
  describe_job *j = arg;
  rt_program *p = cg_cpu_program_describe(j->g, j->plan, j->layout, j->d);
  for (int b = 0; p && b < p->n_buffers; b++) {
    rt_buffer *buf = &p->buffers[b];
    if (buf->kind != RT_BUF_CONST) continue;
    if (j->layout->packing[b].panel) continue; /* already a copy in p's arena (cg_cpu_layout_const_data) */
    void *copy = arena_alloc_aligned(p->arena, (size_t)buf->bytes_fixed, 64);
    memcpy(copy, buf->data, (size_t)buf->bytes_fixed);
    buf->data = copy;
  }
  j->p = p;
  return NULL;
}

/* Whether describing can fail: only a constant without data does (IR read
 * from text), and then it runs on the calling thread, reporting to d. */
static bool constants_have_data(const cg_plan *plan) {
  for (int b = 0; b < plan->n_buffers; b++)
    if (plan->buffers[b].kind == RT_BUF_CONST && !plan->buffer_node[b]->attr.data) return false;
  return true;
}

/* The kernels' addresses, one lookup per distinct function. */
static bool look_up_kernels(LLVMOrcLLJITRef jit, const cg_plan *plan, const cg_cpu_layout *layout,
                            rt_kernel_fn *fns, diag_sink *d) {
  for (int i = 0; i < plan->n_kernels; i++) {
    int r = layout->rep[i];
    if (r != i && layout->symbol[i] == layout->symbol[r]) { /* a shared body, looked up once */
      fns[i] = fns[r];
      continue;
    }
    LLVMOrcExecutorAddress addr = 0;
    if (cg_llvm_error(d, LLVMOrcLLJITLookup(jit, &addr, layout->symbol[i]), DIAG_KIND_CODEGEN, "looking up a kernel")) return false;
    fns[i] = (rt_kernel_fn)(uintptr_t)addr;
  }
  return true;
}

/* ---- a perf map of the kernels ----
 * With CASTOR_PERF_MAP=1 the JIT appends every function of its code
 * (kernels, GEMM epilogues, shared bodies) to /tmp/perf-PID.map, the file
 * `perf report` reads to name samples in JIT-compiled code. Each object
 * file's symbols are read before the JIT links it: their offsets in their
 * text section and sizes. The JIT keeps a section whole, so once a kernel
 * of that section is looked up, every function in it is at the kernel's
 * address less the kernel's offset plus its own. */
typedef struct perf_sym {
  char *name, *section;
  int obj;
  uint64_t off, size;
} perf_sym;

typedef struct perf_map {
  perf_sym *v;
  int n, cap;
} perf_map;

static bool perf_map_wanted(void) {
  const char *v = getenv("CASTOR_PERF_MAP");
  return v && *v && strcmp(v, "0") != 0;
}

static void perf_map_collect(perf_map *m, LLVMMemoryBufferRef obj, int obj_index) {
  char *msg = NULL;
  LLVMBinaryRef bin = LLVMCreateBinary(obj, NULL, &msg);
  LLVMDisposeMessage(msg);
  if (!bin) return; /* no map: profiles show addresses, as without one */
  LLVMSectionIteratorRef sec = LLVMObjectFileCopySectionIterator(bin);
  LLVMSymbolIteratorRef sym = LLVMObjectFileCopySymbolIterator(bin);
  for (; !LLVMObjectFileIsSymbolIteratorAtEnd(bin, sym); LLVMMoveToNextSymbol(sym)) {
    const char *name = LLVMGetSymbolName(sym);
    uint64_t size = LLVMGetSymbolSize(sym);
    if (!name || !*name || !size) continue;
    LLVMMoveToContainingSection(sec, sym);
    if (LLVMObjectFileIsSectionIteratorAtEnd(bin, sec)) continue;
    const char *sname = LLVMGetSectionName(sec);
    if (!sname || (strncmp(sname, ".text", 5) != 0 && strncmp(sname, ".ltext", 6) != 0)) continue; /* code */
    if (m->n == m->cap) {
      m->cap = m->cap ? 2 * m->cap : 64;
      m->v = xrealloc(m->v, (size_t)m->cap * sizeof *m->v);
    }
    m->v[m->n++] = (perf_sym){xstrdup(name), xstrdup(sname), obj_index, LLVMGetSymbolAddress(sym), size};
  }
  LLVMDisposeSymbolIterator(sym);
  LLVMDisposeSectionIterator(sec);
  LLVMDisposeBinary(bin);
}

/* Appends the functions whose section holds a looked-up kernel. Each
 * (object, section) gets its base once, from the first of its functions
 * that is a kernel: linear in functions x kernels at worst, not cubic. */
static void perf_map_write(const perf_map *m, const cg_plan *plan, const cg_cpu_layout *layout,
                           const rt_kernel_fn *fns, diag_sink *d) {
  if (!m->n) return;
  char path[64];
  snprintf(path, sizeof path, "/tmp/perf-%ld.map", (long)getpid());
  FILE *f = fopen(path, "a");
  if (!f) { /* the program still runs; the profile just has no names */
    diag_warning(d, (diag_loc){0}, "CASTOR_PERF_MAP: cannot append to %s: %s; perf will show JIT code as addresses",
                 path, strerror(errno));
    return;
  }
  typedef struct {
    int obj;
    const char *section;
    bool known;
    uint64_t base;
  } text_section;
  text_section *secs = xcalloc((size_t)m->n, sizeof *secs);
  int *sec_of = xcalloc((size_t)m->n, sizeof *sec_of), n_secs = 0;
  for (int i = 0; i < m->n; i++) {
    const perf_sym *y = &m->v[i];
    int s = 0;
    while (s < n_secs && (secs[s].obj != y->obj || strcmp(secs[s].section, y->section) != 0)) s++;
    if (s == n_secs) secs[n_secs++] = (text_section){y->obj, y->section, false, 0};
    sec_of[i] = s;
    for (int ki = 0; ki < plan->n_kernels && !secs[s].known; ki++)
      if (fns[ki] && !strcmp(layout->symbol[ki], y->name)) {
        secs[s].base = (uint64_t)(uintptr_t)fns[ki] - y->off;
        secs[s].known = true;
      }
  }
  for (int i = 0; i < m->n; i++) {
    const text_section *t = &secs[sec_of[i]];
    if (t->known)
      fprintf(f, "%llx %llx %s\n", (unsigned long long)(t->base + m->v[i].off), (unsigned long long)m->v[i].size,
              m->v[i].name);
  }
  free(secs);
  free(sec_of);
  fclose(f);
}

static void perf_map_free(perf_map *m) {
  for (int i = 0; i < m->n; i++) free(m->v[i].name), free(m->v[i].section);
  free(m->v);
}

/* ---- compiling on several threads ----
 * Kernels are independent functions, so the JIT groups them into units,
 * each emitted into a module and context of its own, optimized and
 * compiled to an object file, and links the objects into the one JIT in
 * unit order. Each kernel is emitted, optimized and compiled exactly as in
 * a single module (every module-level pass sees a kernel with its own
 * helper functions), so neither the grouping nor which thread compiles a
 * unit changes a bit. A few threads, each with a target machine of its
 * own, take the next unit, the costliest first, until none is left: the
 * work ends within about one unit on every thread, where a fixed split of
 * three modules over two cores left one core idle for up to a third of the
 * compile whenever a thread ran to its end unpreempted
 * (bench/results/compile-resnet50-2026-11-30-s15.md). */

enum { MAX_COMPILE_THREADS = 4 };

typedef struct compile_unit {
  bool *only;              /* its kernels */
  int64_t cost;            /* estimated: its kernels' kernel_cost */
  char name[32];
  diag_sink *d;            /* its own */
  LLVMMemoryBufferRef obj; /* the object file, or NULL on error */
} compile_unit;

typedef struct compile_pool {
  const cg_plan *plan;
  cg_cpu_layout *layout; /* final (cg_cpu_plan_layout): only read */
  const cg_options *o;
  compile_unit *units;
  int n_units;
  int *order;       /* unit indices by decreasing cost (ties: unit order) */
  atomic_int next;  /* in order[] */
} compile_pool;

typedef struct compile_worker {
  compile_pool *pool;
  cg_target t; /* a target machine of its own */
} compile_worker;

static void compile_unit_run(const compile_pool *pool, cg_target *t, compile_unit *u) {
  LLVMContextRef ctx = LLVMContextCreate();
  cg_emitter e = {0};
  LLVMModuleRef mod = cg_target_emit_module(t, ctx, u->name, pool->plan, pool->o, true, &e, pool->layout, u->only, u->d);
  if (mod) {
    char *msg = NULL;
    if (LLVMTargetMachineEmitToMemoryBuffer(t->tm, mod, LLVMObjectFile, &msg, &u->obj)) {
      cg_llvm_message_error(u->d, msg, DIAG_KIND_CODEGEN, "compiling the kernels");
      msg = NULL;
      u->obj = NULL;
    }
    LLVMDisposeMessage(msg);
    LLVMDisposeModule(mod);
  }
  cg_emitter_fini(&e);
  LLVMContextDispose(ctx);
}

static void *compile_main(void *arg) {
  compile_worker *w = arg;
  compile_pool *pool = w->pool;
  for (int i; (i = atomic_fetch_add(&pool->next, 1)) < pool->n_units;)
    compile_unit_run(pool, &w->t, &pool->units[pool->order[i]]);
  return NULL;
}

/* How many threads compile the plan: one per core and one more, since the
 * describing thread (its weight packing) takes part of a core, up to
 * MAX_COMPILE_THREADS, and no more than there are GEMM bodies to compile
 * (the bulk of the work). The seed MLP's three GEMM bodies on two cores:
 * with two threads one of them compiled two bodies while the other core
 * shared one body with the packing, ~10 ms of idle core at the end
 * (bench/results/compile-2026-11-26.md). */
static int compile_threads(const cg_plan *plan, const cg_cpu_layout *layout) {
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  int gemms = 0;
  for (int ki = 0; ki < plan->n_kernels; ki++)
    gemms += cg_is_gemm(&plan->kernels[ki]) && layout->rep[ki] == ki;
  if (cpus > 1) cpus++;
  int n = cpus < 1 ? 1 : cpus > MAX_COMPILE_THREADS ? MAX_COMPILE_THREADS : (int)cpus;
  return n < gemms ? n : gemms < 1 ? 1 : gemms;
}

/* A kernel's rough cost to compile: a GEMM body about ten times an
 * elementwise or row-wise kernel, a Winograd body (transforms, 36 GEMMs)
 * about twice a GEMM's (resnet50: 85-105 ms of LLVM against 35-55); no
 * code of its own, nothing. */
static int64_t kernel_cost(const cg_plan *plan, const cg_cpu_layout *layout, int ki) {
  if (layout->shared[ki] && layout->rep[ki] != ki) return 0;
  if (!cg_is_gemm(&plan->kernels[ki])) return 1;
  return layout->gemm[ki] && layout->gemm[ki]->conv.wino ? 20 : 10;
}

/* Groups the kernels, in plan order, into units of at least a GEMM body's
 * cost, about MAX_UNITS of them (a unit closes once it reaches a
 * MAX_UNITS-th of the total), so that each of up to MAX_COMPILE_THREADS
 * threads takes several; a function of the plan alone, so that the same
 * model gives the same objects on any machine. Returns the number of
 * units. */
enum { MAX_UNITS = 24 };
static int make_units(compile_pool *pool, const char *name) {
  const cg_plan *plan = pool->plan;
  int64_t total = 0;
  for (int ki = 0; ki < plan->n_kernels; ki++) total += kernel_cost(plan, pool->layout, ki);
  int64_t target = (total + MAX_UNITS - 1) / MAX_UNITS;
  if (target < 10) target = 10;
  pool->units = xcalloc((size_t)plan->n_kernels + 1, sizeof *pool->units);
  compile_unit *u = NULL;
  for (int ki = 0; ki < plan->n_kernels; ki++) {
    int64_t c = kernel_cost(plan, pool->layout, ki);
    if (!c) continue;
    if (!u || u->cost >= target) {
      u = &pool->units[pool->n_units];
      u->only = xcalloc((size_t)plan->n_kernels + 1, sizeof *u->only);
      u->d = diag_sink_create();
      snprintf(u->name, sizeof u->name, "%s.%d", name, pool->n_units);
      pool->n_units++;
    }
    u->only[ki] = true;
    u->cost += c;
  }
  /* the costliest first (insertion sort: stable, a few dozen units) */
  pool->order = xcalloc((size_t)pool->n_units + 1, sizeof *pool->order);
  for (int i = 0; i < pool->n_units; i++) {
    int j = i;
    for (; j > 0 && pool->units[pool->order[j - 1]].cost < pool->units[i].cost; j--) pool->order[j] = pool->order[j - 1];
    pool->order[j] = i;
  }
  return pool->n_units;
}

/* Forwards a unit's first error to d. */
static void forward_error(diag_sink *d, diag_sink *from) {
  const char *t = diag_first_error(from);
  if (!strncmp(t, "error: ", 7)) t += 7;
  size_t n = strlen(t);
  while (n && t[n - 1] == '\n') n--;
  diag_error_kind(d, diag_first_error_kind(from), (diag_loc){0}, "%.*s", (int)n, t);
}

/* A JIT for the target machine t->tm (taken over), resolving symbols of the
 * process and the runtime's helpers. NULL with a diagnostic on error. */
static LLVMOrcLLJITRef create_jit(cg_target *t, diag_sink *d) {
  LLVMOrcLLJITBuilderRef jb = LLVMOrcCreateLLJITBuilder();
  LLVMOrcLLJITBuilderSetJITTargetMachineBuilder(jb, LLVMOrcJITTargetMachineBuilderCreateFromTargetMachine(t->tm));
  t->tm = NULL; /* owned by the builder now */
  LLVMOrcLLJITRef jit;
  if (cg_llvm_error(d, LLVMOrcCreateLLJIT(&jit, jb), DIAG_KIND_CODEGEN, "creating the JIT")) return NULL;
  LLVMOrcJITDylibRef main_jd = LLVMOrcLLJITGetMainJITDylib(jit);
  LLVMOrcDefinitionGeneratorRef gen;
  if (cg_llvm_error(d, LLVMOrcCreateDynamicLibrarySearchGeneratorForProcess(
                           &gen, LLVMOrcLLJITGetGlobalPrefix(jit), NULL, NULL),
                    DIAG_KIND_CODEGEN, "searching the process for symbols")) {
    jit_destroy(jit);
    return NULL;
  }
  LLVMOrcJITDylibAddGenerator(main_jd, gen);
  /* runtime helpers generated code may call (e.g. __truncsfbf2) */
  const rt_symbol *helpers = rt_helper_symbols();
  int n_helpers = 0;
  while (helpers[n_helpers].name) n_helpers++;
  if (n_helpers) {
    LLVMOrcCSymbolMapPair *pairs = xcalloc((size_t)n_helpers, sizeof *pairs);
    for (int i = 0; i < n_helpers; i++) {
      pairs[i].Name = LLVMOrcLLJITMangleAndIntern(jit, helpers[i].name);
      pairs[i].Sym.Address = (LLVMOrcExecutorAddress)(uintptr_t)helpers[i].addr;
      pairs[i].Sym.Flags.GenericFlags = LLVMJITSymbolGenericFlagsExported | LLVMJITSymbolGenericFlagsCallable;
    }
    LLVMErrorRef err = LLVMOrcJITDylibDefine(main_jd, LLVMOrcAbsoluteSymbols(pairs, (size_t)n_helpers));
    free(pairs);
    if (cg_llvm_error(d, err, DIAG_KIND_CODEGEN, "defining runtime helpers")) {
      jit_destroy(jit);
      return NULL;
    }
  }
  return jit;
}

rt_program *cg_compile_cpu(const ir_graph *g, const cg_options *o, diag_sink *d) {
  cg_options defaults;
  if (!o) cg_options_init(&defaults), o = &defaults;
  cg_plan plan;
  if (!cg_plan_build(g, &plan, d)) return NULL;
  cg_plan_cut_images(g, &plan, o->force_image_cut ? o->image_cut : -1);
  cg_cpu_layout layout;
  cg_cpu_layout_init(&layout, &plan);
  layout.share_by_table = true; /* the runtime passes shared bodies their tables */
  layout.share_none = o->no_kernel_sharing;

  rt_program *prog = NULL;
  LLVMOrcThreadSafeContextRef tsc = NULL;
  LLVMModuleRef mod = NULL;
  LLVMOrcLLJITRef jit = NULL;
  cg_emitter e = {0};
  cg_target t;
  describe_job job = {g, &plan, &layout, NULL, NULL};
  pthread_t describer, threads[MAX_COMPILE_THREADS];
  compile_worker workers[MAX_COMPILE_THREADS];
  compile_pool pool = {.plan = &plan, .layout = &layout, .o = o};
  int n_workers = 0, n_started = 0;
  bool threaded = false, described = false;
  diag_sink *own_d = NULL; /* the describing thread's */
  perf_map pm = {0};
  rt_kernel_fn *fns = xcalloc((size_t)plan.n_kernels + 1, sizeof *fns);
  if (!cg_target_init(&t, o, true, d)) goto done;
  cg_cpu_plan_layout(&t.caps, &plan, &layout); /* final from here on: threads only read it */
  /* describe the program beside LLVM's work */
  if (constants_have_data(&plan)) {
    job.d = own_d = diag_sink_create();
    threaded = pthread_create(&describer, NULL, describe_main, &job) == 0;
    if (!threaded) describe_main(&job);
  } else {
    job.d = d;
    describe_main(&job);
    if (!job.p) goto done;
  }

  /* objects compiled by workers, one of them this thread; with the LLVM
   * IR dumped, one module that the JIT compiles */
  if (!o->dump_llvm) {
    int n_threads = compile_threads(&plan, &layout);
    for (; n_workers < n_threads; n_workers++) {
      workers[n_workers] = (compile_worker){.pool = &pool};
      if (!cg_target_init(&workers[n_workers].t, o, true, d)) {
        n_workers++;
        goto done;
      }
    }
    make_units(&pool, g->name);
    atomic_init(&pool.next, 0);
    for (n_started = 1; n_started < n_workers; n_started++)
      if (pthread_create(&threads[n_started], NULL, compile_main, &workers[n_started]) != 0) break;
    compile_main(&workers[0]); /* what no thread takes, this one does */
    for (int w = 1; w < n_started; w++) pthread_join(threads[w], NULL);
    n_started = 0;
    bool ok = true;
    for (int u = 0; u < pool.n_units && ok; u++)
      if (!pool.units[u].obj) forward_error(d, pool.units[u].d), ok = false;
    if (!ok || !(jit = create_jit(&t, d))) goto done;
    LLVMOrcJITDylibRef main_jd = LLVMOrcLLJITGetMainJITDylib(jit);
    for (int u = 0; u < pool.n_units; u++) {
      LLVMMemoryBufferRef obj = pool.units[u].obj;
      if (perf_map_wanted()) perf_map_collect(&pm, obj, u);
      pool.units[u].obj = NULL; /* owned by the JIT, even on error */
      if (cg_llvm_error(d, LLVMOrcLLJITAddObjectFile(jit, main_jd, obj), DIAG_KIND_CODEGEN, "adding the kernels")) goto done;
    }
  } else {
    tsc = LLVMOrcCreateNewThreadSafeContext();
    mod = cg_target_emit_module(&t, LLVMOrcThreadSafeContextGetContext(tsc), g->name, &plan, o, true, &e, &layout,
                                NULL, d);
    if (!mod || !(jit = create_jit(&t, d))) goto done;
    LLVMOrcThreadSafeModuleRef tsm = LLVMOrcCreateNewThreadSafeModule(mod, tsc);
    mod = NULL; /* owned by the thread-safe module */
    if (cg_llvm_error(d, LLVMOrcLLJITAddLLVMIRModule(jit, LLVMOrcLLJITGetMainJITDylib(jit), tsm),
                      DIAG_KIND_CODEGEN, "adding the module")) {
      LLVMOrcDisposeThreadSafeModule(tsm);
      goto done;
    }
  }
  described = look_up_kernels(jit, &plan, &layout, fns, d); /* links (and, for IR, compiles) */
  if (described) perf_map_write(&pm, &plan, &layout, fns, d);

done:
  if (threaded) pthread_join(describer, NULL);
  if (own_d) {
    if (!job.p) /* cannot fail once constants_have_data: a bug */
      diag_error_kind(d, DIAG_KIND_INTERNAL, (diag_loc){0}, "internal error: describing the program: %s",
                      diag_first_error(own_d));
    diag_sink_destroy(own_d);
  }
  for (int w = 0; w < n_workers; w++) cg_target_fini(&workers[w].t);
  for (int u = 0; u < pool.n_units; u++) {
    if (pool.units[u].obj) LLVMDisposeMemoryBuffer(pool.units[u].obj);
    diag_sink_destroy(pool.units[u].d);
    free(pool.units[u].only);
  }
  free(pool.units);
  free(pool.order);
  if (described && job.p) {
    prog = job.p;
    job.p = NULL;
    for (int i = 0; i < prog->n_launches; i++) prog->launches[i].fn = fns[i];
    prog->owner = jit;
    prog->owner_destroy = jit_destroy;
    jit = NULL;
  }
  rt_program_destroy(job.p);
  if (jit) jit_destroy(jit);
  perf_map_free(&pm);
  free(fns);
  cg_emitter_fini(&e);
  if (mod) LLVMDisposeModule(mod);
  if (tsc) LLVMOrcDisposeThreadSafeContext(tsc);
  cg_target_fini(&t);
  cg_cpu_layout_fini(&layout);
  cg_plan_fini(&plan);
  return prog;
}
