/*
 * codegen.h: from a final ir_graph to a runnable rt_program.
 *
 * Planning groups nodes into kernels (a matmul with its bias, activation
 * and cast epilogue; a row-wise softmax; a chain of elementwise ops), assigns
 * buffers by liveness into scratch slots, and emits one LLVM function per
 * kernel (explicit vector types, no calls per element). The CPU target
 * optimizes the module with default<O2> and JIT-compiles it with ORC LLJIT
 * for the host CPU and its features. After compilation the program refers
 * to no IR: weight data is copied into the program.
 */
#ifndef CASTOR_CODEGEN_H
#define CASTOR_CODEGEN_H

#include "../ir/ir.h"
#include "../runtime/runtime.h"

typedef struct cg_options {
  int opt_level;      /* 0-3; 2 runs default<O2> */
  const char *cpu;    /* NULL: the host CPU */
  const char *features; /* NULL: the host features */
  str_buf *dump_llvm; /* if set, receives the optimized LLVM IR */
} cg_options;

void cg_options_init(cg_options *o);

/* JIT-compiles g for the host CPU. Returns NULL with diagnostics on error
 * (CASTOR_ERR_CODEGEN at the API boundary). */
rt_program *cg_compile_cpu(const ir_graph *g, const cg_options *o, diag_sink *d);

#endif
