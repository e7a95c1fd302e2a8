/* SPDX-License-Identifier: Apache-2.0 */
/*
 * codegen.h: from a final ir_graph to a runnable rt_program.
 *
 * Planning groups nodes into kernels (a matmul with its bias, activation
 * and cast epilogue; a row-wise softmax; a chain of elementwise ops), assigns
 * buffers by liveness into scratch slots, and emits one LLVM function per
 * kernel (explicit vector types, no calls per element). The CPU target
 * optimizes the module with its kernel pipeline (cg_target.c) and JIT-compiles it with ORC LLJIT
 * for the host CPU and its features. After compilation the program refers
 * to no IR: weight data is copied into the program.
 */
#ifndef CASTOR_CODEGEN_H
#define CASTOR_CODEGEN_H

#include "ir/ir.h"
#include "runtime/cuda.h"
#include "runtime/runtime.h"

typedef struct cg_options {
  int opt_level;      /* 0-3; 2 runs the kernels' pipeline (cg_target.c), 1 and 3 default<O1|3> */
  const char *cpu;    /* NULL: the host CPU */
  const char *features; /* NULL: the host features */
  str_buf *dump_llvm; /* if set, receives the optimized LLVM IR */
  bool no_kernel_sharing; /* compile every kernel on its own, even those that could
                           * share a body (cg_kernel_share.c); for tests */
  bool force_image_cut; /* convolutional networks: run the first image_cut kernels by image */
  int image_cut;         /* (cg_plan_cut_images), not the chosen cut; for tests */
} cg_options;

void cg_options_init(cg_options *o);

/* The CPU the JIT compiles for under o (o->cpu, else $CASTOR_CPU, else
 * the host), described in one line on out: "x86-64-v3 (LLVM cpu
 * x86-64-v3): GEMM kernel avx, 8 f32 lanes, fma, f16c". False with an
 * INVALID_ARGUMENT diagnostic for an unknown name or a CPU this host cannot
 * run (what cg_compile_cpu would then report). */
bool cg_cpu_describe(const cg_options *o, str_buf *out, diag_sink *d);
/* Appends to out why the JIT under o does not use the GEMM family o's CPU
 * names (the AMX family where this host has no AMX or Linux refuses the
 * tile state: codegen/cpu/cg_target.c); appends nothing when it does, or
 * when o names no CPU the JIT can compile for. */
void cg_cpu_note(const cg_options *o, str_buf *out);

/* JIT-compiles g for the host CPU. Returns NULL with diagnostics on error
 * (CASTOR_ERR_CODEGEN at the API boundary). */
rt_program *cg_compile_cpu(const ir_graph *g, const cg_options *o, diag_sink *d);

/* ---- NVIDIA GPUs (cg_nvptx.c) ---- */

/* PTX for architecture sm ("sm_80", "sm_90"; NULL: sm_80) and the launch
 * list of g, which should have gone through PASS_PIPELINE_PAD8. NULL with
 * diagnostics on error. Needs no GPU. o->cpu and o->features are ignored. */
rt_cuda_program *cg_compile_cuda(const ir_graph *g, const char *sm, const cg_options *o, diag_sink *d);
/* Appends the PTX module of g for sm to out. */
bool cg_emit_ptx(const ir_graph *g, const char *sm, str_buf *out, diag_sink *d);

/* ---- ahead of time (cg_aot.c) ---- */

typedef enum cg_aot_kind { CG_AOT_OBJ, CG_AOT_ASM, CG_AOT_LLVM } cg_aot_kind;

typedef struct cg_aot_options {
  const char *prefix;      /* C identifier prefixing the exported symbols: <prefix>_run */
  bool entry;              /* also define castor_aot_entry (runtime/aot/aot.h) for the AOT main */
  const char *about;       /* the entry's description of the build */
  const char *header_path; /* if set, also write the C header declaring <prefix>_run there */
  const char *source;      /* the model file, named in the header */
  const char *link_hint;   /* link instructions for the header's comment (lines) */
} cg_aot_options;

void cg_aot_options_init(cg_aot_options *o);
/* A C identifier for a model or tensor name: other characters become '_',
 * no leading digit or underscore, no keyword (which gets a trailing '_'). */
void cg_aot_c_identifier(str_buf *out, const char *name);

/* Compiles g ahead of time for o's CPU (the host's by default) into path
 * ("-": stdout) as an object file, assembly or LLVM IR text: the JIT's
 * kernels (bit-identical results), the weights, and
 *   int <prefix>_run(inputs..., outputs..., int64_t batch, void *scratch);
 *   int64_t <prefix>_scratch_bytes(int64_t batch);
 * False with diagnostics on error (an unwritable path included). */
bool cg_compile_aot(const ir_graph *g, const cg_options *o, const cg_aot_options *ao, cg_aot_kind kind,
                    const char *path, diag_sink *d);

#endif
