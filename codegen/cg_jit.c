/*
 * cg_jit.c: the CPU target. Plans the graph, emits the kernels into one LLVM
 * module for the host (CPU name and features go to the target machine),
 * runs default<O2>, JIT-compiles with ORC LLJIT and assembles the rt_program
 * (kernels by address, the buffer plan, weight data copied in).
 *
 * This file is the one adapter between LLVM's errors and castor's
 * diagnostics (cg_llvm_error): LLVM failures become "LLVM: ..." errors.
 */
#include <llvm-c/Analysis.h>
#include <llvm-c/Error.h>
#include <llvm-c/LLJIT.h>
#include <llvm-c/Orc.h>
#include <llvm-c/Target.h>
#include <llvm-c/TargetMachine.h>
#include <llvm-c/Transforms/PassBuilder.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "cg_internal.h"

void cg_options_init(cg_options *o) {
  memset(o, 0, sizeof *o);
  o->opt_level = 2;
}

static bool cg_llvm_error(diag_sink *d, LLVMErrorRef err, const char *what) {
  if (!err) return false;
  char *msg = LLVMGetErrorMessage(err);
  diag_error(d, (diag_loc){0}, "LLVM: %s: %s", what, msg);
  LLVMDisposeErrorMessage(msg);
  return true;
}

static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static void init_llvm(void) {
  LLVMInitializeNativeTarget();
  LLVMInitializeNativeAsmPrinter();
}

static void jit_destroy(void *owner) {
  LLVMErrorRef err = LLVMOrcDisposeLLJIT((LLVMOrcLLJITRef)owner);
  if (err) LLVMConsumeError(err);
}

static void emitter_init(cg_emitter *e, LLVMContextRef ctx, LLVMModuleRef mod, const char *features) {
  memset(e, 0, sizeof *e);
  e->ctx = ctx, e->mod = mod;
  e->b = LLVMCreateBuilderInContext(ctx);
  e->f32 = LLVMFloatTypeInContext(ctx), e->half = LLVMHalfTypeInContext(ctx);
  e->bf16 = LLVMBFloatTypeInContext(ctx);
  e->i1 = LLVMInt1TypeInContext(ctx), e->i32 = LLVMInt32TypeInContext(ctx);
  e->i64 = LLVMInt64TypeInContext(ctx), e->ptr = LLVMPointerTypeInContext(ctx, 0);
  e->void_ = LLVMVoidTypeInContext(ctx);
  /* widest native f32 vector: 16 with AVX-512F, 8 with AVX, else 4 (SSE2 is x86-64 baseline) */
  e->vw = strstr(features, "+avx512f") ? 16 : strstr(features, "+avx,") || strstr(features, "+avx2") ? 8 : 4;
}

static rt_program *assemble(const ir_graph *g, const cg_plan *plan, LLVMOrcLLJITRef jit, diag_sink *d) {
  arena *a = arena_create();
  rt_program *p = arena_alloc(a, sizeof *p);
  p->arena = a;
  p->name = arena_strdup(a, g->name);
  p->owner = jit;
  p->owner_destroy = jit_destroy;
  p->n_buffers = plan->n_buffers;
  p->buffers = arena_alloc(a, (size_t)(plan->n_buffers + 1) * sizeof *p->buffers);
  memcpy(p->buffers, plan->buffers, (size_t)plan->n_buffers * sizeof *p->buffers);
  for (int b = 0; b < p->n_buffers; b++) {
    rt_buffer *buf = &p->buffers[b];
    if (buf->kind != RT_BUF_CONST) continue;
    const ir_node *n = plan->buffer_node[b];
    if (!n->attr.konst.data) {
      diag_error(d, n->loc, "constant %%%s has no data (IR read from text cannot be compiled)", n->name);
      rt_program_destroy(p);
      return NULL;
    }
    void *copy = arena_alloc_aligned(a, (size_t)buf->bytes_fixed, 64);
    memcpy(copy, n->attr.konst.data, (size_t)buf->bytes_fixed);
    buf->data = copy;
  }
  p->n_slots = plan->n_slots;
  p->slots = arena_alloc(a, (size_t)(plan->n_slots + 1) * sizeof *p->slots);
  memcpy(p->slots, plan->slots, (size_t)plan->n_slots * sizeof *p->slots);
  p->n_launches = plan->n_kernels;
  p->launches = arena_alloc(a, (size_t)(plan->n_kernels + 1) * sizeof *p->launches);
  for (int i = 0; i < plan->n_kernels; i++) {
    const cg_kernel *k = &plan->kernels[i];
    rt_launch *l = &p->launches[i];
    LLVMOrcExecutorAddress addr = 0;
    if (cg_llvm_error(d, LLVMOrcLLJITLookup(jit, &addr, k->name), "looking up a kernel")) {
      rt_program_destroy(p);
      return NULL;
    }
    l->fn = (rt_kernel_fn)(uintptr_t)addr;
    l->name = arena_strdup(a, k->name);
    const ir_node *res = k->kind == CG_KERNEL_COPY ? k->copy_src : k->ops[k->n_ops - 1];
    l->batched = ir_type_is_batched(&res->type);
    l->rows_fixed = l->batched ? 0 : k->kind == CG_KERNEL_MATMUL ? res->type.dims[0] : 1;
    if (k->kind == CG_KERNEL_MATMUL) {
      const ir_node *mm = k->ops[0];
      l->flops_per_row = 2 * mm->srcs[0]->type.dims[1] * mm->type.dims[1];
    }
  }
  p->n_inputs = ir_graph_num_inputs(g);
  p->inputs = arena_alloc(a, (size_t)(p->n_inputs + 1) * sizeof *p->inputs);
  p->n_outputs = g->n_outputs;
  p->outputs = arena_alloc(a, (size_t)(p->n_outputs + 1) * sizeof *p->outputs);
  for (int b = 0; b < p->n_buffers; b++) {
    const rt_buffer *buf = &p->buffers[b];
    if (buf->kind != RT_BUF_INPUT && buf->kind != RT_BUF_OUTPUT) continue;
    const ir_node *n = plan->buffer_node[b];
    rt_tensor_desc *t = buf->kind == RT_BUF_INPUT ? &p->inputs[buf->index] : &p->outputs[buf->index];
    t->name = arena_strdup(a, buf->kind == RT_BUF_INPUT ? n->name : g->outputs[buf->index].name);
    t->dtype = (rt_dtype)n->type.dtype;
    t->rank = n->type.rank;
    for (int r = 0; r < n->type.rank; r++) t->dims[r] = n->type.dims[r];
    t->buffer = b;
  }
  return p;
}

rt_program *cg_compile_cpu(const ir_graph *g, const cg_options *o, diag_sink *d) {
  cg_options defaults;
  if (!o) cg_options_init(&defaults), o = &defaults;
  pthread_once(&init_once, init_llvm);
  cg_plan plan;
  if (!cg_plan_build(g, &plan, d)) return NULL;

  char *triple = LLVMGetDefaultTargetTriple();
  char *cpu = o->cpu ? NULL : LLVMGetHostCPUName();
  char *features = o->features ? NULL : LLVMGetHostCPUFeatures();
  const char *cpu_s = o->cpu ? o->cpu : cpu, *feat_s = o->features ? o->features : features;
  LLVMTargetRef target;
  char *msg = NULL;
  rt_program *prog = NULL;
  LLVMOrcThreadSafeContextRef tsc = NULL;
  LLVMModuleRef mod = NULL;
  LLVMTargetMachineRef tm = NULL;
  cg_emitter e = {0};
  if (LLVMGetTargetFromTriple(triple, &target, &msg)) {
    diag_error(d, (diag_loc){0}, "LLVM: no target for '%s': %s", triple, msg);
    LLVMDisposeMessage(msg);
    goto done;
  }
  LLVMCodeGenOptLevel lvl = o->opt_level <= 0 ? LLVMCodeGenLevelNone
                            : o->opt_level == 1 ? LLVMCodeGenLevelLess
                            : o->opt_level == 2 ? LLVMCodeGenLevelDefault
                                                : LLVMCodeGenLevelAggressive;
  tm = LLVMCreateTargetMachine(target, triple, cpu_s, feat_s, lvl, LLVMRelocPIC, LLVMCodeModelJITDefault);
  tsc = LLVMOrcCreateNewThreadSafeContext();
  LLVMContextRef ctx = LLVMOrcThreadSafeContextGetContext(tsc);
  mod = LLVMModuleCreateWithNameInContext(g->name, ctx);
  LLVMSetTarget(mod, triple);
  LLVMTargetDataRef dl = LLVMCreateTargetDataLayout(tm);
  LLVMSetModuleDataLayout(mod, dl);
  LLVMDisposeTargetData(dl);

  emitter_init(&e, ctx, mod, feat_s);
  if (!cg_cpu_emit_kernels(&e, &plan, d)) goto done;
  if (LLVMVerifyModule(mod, LLVMReturnStatusAction, &msg)) {
    diag_error(d, (diag_loc){0}, "internal error: generated LLVM IR is invalid: %s", msg);
    LLVMDisposeMessage(msg);
    goto done;
  }
  LLVMDisposeMessage(msg);
  if (o->opt_level > 0) {
    char pipeline[32];
    snprintf(pipeline, sizeof pipeline, "default<O%d>", o->opt_level > 3 ? 3 : o->opt_level);
    LLVMPassBuilderOptionsRef po = LLVMCreatePassBuilderOptions();
    LLVMErrorRef err = LLVMRunPasses(mod, pipeline, tm, po);
    LLVMDisposePassBuilderOptions(po);
    if (cg_llvm_error(d, err, "optimizing")) goto done;
  }
  if (o->dump_llvm) {
    char *s = LLVMPrintModuleToString(mod);
    str_buf_puts(o->dump_llvm, s);
    LLVMDisposeMessage(s);
  }

  LLVMOrcLLJITBuilderRef jb = LLVMOrcCreateLLJITBuilder();
  LLVMOrcLLJITBuilderSetJITTargetMachineBuilder(jb, LLVMOrcJITTargetMachineBuilderCreateFromTargetMachine(tm));
  tm = NULL; /* owned by the builder now */
  LLVMOrcLLJITRef jit;
  if (cg_llvm_error(d, LLVMOrcCreateLLJIT(&jit, jb), "creating the JIT")) goto done;
  LLVMOrcJITDylibRef main_jd = LLVMOrcLLJITGetMainJITDylib(jit);
  LLVMOrcDefinitionGeneratorRef gen;
  if (cg_llvm_error(d, LLVMOrcCreateDynamicLibrarySearchGeneratorForProcess(
                           &gen, LLVMOrcLLJITGetGlobalPrefix(jit), NULL, NULL),
                    "searching the process for symbols")) {
    jit_destroy(jit);
    goto done;
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
    if (cg_llvm_error(d, err, "defining runtime helpers")) {
      jit_destroy(jit);
      goto done;
    }
  }
  LLVMOrcThreadSafeModuleRef tsm = LLVMOrcCreateNewThreadSafeModule(mod, tsc);
  mod = NULL; /* owned by the thread-safe module */
  if (cg_llvm_error(d, LLVMOrcLLJITAddLLVMIRModule(jit, main_jd, tsm), "adding the module")) {
    LLVMOrcDisposeThreadSafeModule(tsm);
    jit_destroy(jit);
    goto done;
  }
  prog = assemble(g, &plan, jit, d); /* on failure it disposed of the JIT */

done:
  if (e.b) LLVMDisposeBuilder(e.b);
  if (mod) LLVMDisposeModule(mod);
  if (tsc) LLVMOrcDisposeThreadSafeContext(tsc);
  if (tm) LLVMDisposeTargetMachine(tm);
  LLVMDisposeMessage(triple);
  if (cpu) LLVMDisposeMessage(cpu);
  if (features) LLVMDisposeMessage(features);
  cg_plan_fini(&plan);
  return prog;
}
