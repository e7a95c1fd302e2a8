/*
 * cg_jit.c: the CPU JIT. Plans the graph, emits and optimizes the kernels
 * for the host through cg_target.c (shared with the AOT target, so both
 * run the same machine code), JIT-compiles the module with ORC LLJIT and
 * assembles the rt_program (cg_program.c's description, kernels by address,
 * weight data copied in).
 */
#include <llvm-c/Error.h>
#include <llvm-c/LLJIT.h>
#include <llvm-c/Orc.h>
#include <llvm-c/TargetMachine.h>
#include <string.h>

#include "cg_internal.h"

static void jit_destroy(void *owner) {
  LLVMErrorRef err = LLVMOrcDisposeLLJIT((LLVMOrcLLJITRef)owner);
  if (err) LLVMConsumeError(err);
}

/* Takes ownership of jit: on failure it is disposed of. */
static rt_program *assemble(const ir_graph *g, const cg_plan *plan, const cg_cpu_layout *layout,
                            LLVMOrcLLJITRef jit, diag_sink *d) {
  rt_program *p = cg_program_describe(g, plan, layout, d);
  if (!p) {
    jit_destroy(jit);
    return NULL;
  }
  p->owner = jit;
  p->owner_destroy = jit_destroy;
  for (int b = 0; b < p->n_buffers; b++) {
    rt_buffer *buf = &p->buffers[b];
    if (buf->kind != RT_BUF_CONST) continue;
    if (layout->packing[b].panel) continue; /* already a copy in p's arena (cg_cpu_layout_const_data) */
    void *copy = arena_alloc_aligned(p->arena, (size_t)buf->bytes_fixed, 64);
    memcpy(copy, buf->data, (size_t)buf->bytes_fixed);
    buf->data = copy;
  }
  for (int i = 0; i < p->n_launches; i++) {
    int r = layout->rep[i];
    if (r != i && layout->symbol[i] == layout->symbol[r]) { /* a shared body, looked up once */
      p->launches[i].fn = p->launches[r].fn;
      continue;
    }
    LLVMOrcExecutorAddress addr = 0;
    if (cg_llvm_error(d, LLVMOrcLLJITLookup(jit, &addr, layout->symbol[i]), "looking up a kernel")) {
      rt_program_destroy(p);
      return NULL;
    }
    p->launches[i].fn = (rt_kernel_fn)(uintptr_t)addr;
  }
  return p;
}

rt_program *cg_compile_cpu(const ir_graph *g, const cg_options *o, diag_sink *d) {
  cg_options defaults;
  if (!o) cg_options_init(&defaults), o = &defaults;
  cg_plan plan;
  if (!cg_plan_build(g, &plan, d)) return NULL;
  cg_cpu_layout layout;
  cg_cpu_layout_init(&layout, &plan);
  layout.share_by_table = true; /* the runtime passes shared bodies their tables */

  rt_program *prog = NULL;
  LLVMOrcThreadSafeContextRef tsc = NULL;
  LLVMModuleRef mod = NULL;
  cg_emitter e = {0};
  cg_target t;
  if (!cg_target_init(&t, o, true, d)) goto done;
  tsc = LLVMOrcCreateNewThreadSafeContext();
  mod = cg_target_emit_module(&t, LLVMOrcThreadSafeContextGetContext(tsc), g->name, &plan, o, &e, &layout, d);
  if (!mod) goto done;

  LLVMOrcLLJITBuilderRef jb = LLVMOrcCreateLLJITBuilder();
  LLVMOrcLLJITBuilderSetJITTargetMachineBuilder(jb, LLVMOrcJITTargetMachineBuilderCreateFromTargetMachine(t.tm));
  t.tm = NULL; /* owned by the builder now */
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
  prog = assemble(g, &plan, &layout, jit, d); /* on failure it disposed of the JIT */

done:
  cg_emitter_fini(&e);
  if (mod) LLVMDisposeModule(mod);
  if (tsc) LLVMOrcDisposeThreadSafeContext(tsc);
  cg_target_fini(&t);
  cg_cpu_layout_fini(&layout);
  cg_plan_fini(&plan);
  return prog;
}
