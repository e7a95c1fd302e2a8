/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cg_cpu.h: the CPU target's private interfaces: its layouts of a plan
 * (cg_cpu_layout.c), the driver (cg_cpu.c: the kernel ABI, elementwise,
 * row-wise and copy kernels), the GEMM (cg_gemm.c), the row-wise ops
 * (the kit's cg_rowwise.c with the CPU's rows), kernels that share a body
 * (cg_kernel_share.c), the target machine (cg_target.c) and the AOT header
 * (cg_aot_header.c). The target-neutral kit they build on, the row-wise and
 * training formulas included, is kernel/cg_kit.h. Private to codegen/cpu.
 */
#ifndef CASTOR_CG_CPU_H
#define CASTOR_CG_CPU_H

#include <llvm-c/TargetMachine.h>

#include "codegen/cpu/cg_cpu_caps.h"
#include "codegen/kernel/cg_kit.h"

/* ---- the CPU target's layouts of a plan (cg_cpu_layout.c) ---- */

/* A constant stored in a layout private to codegen: a GEMM's B operand
 * [K, Nc] pre-packed into column panels, block by block of kc rows of K
 * (cg_gemm.c). panel == 0: plain. */
typedef struct cg_packing {
  int panel;  /* columns of each full panel */
  int tail;   /* padded columns of the last, partial panel (0: none) */
  int64_t kc; /* rows of K per block (the last block may have fewer) */
  int pairs;  /* 1: the K-pair layout of the AVX512-BF16 family (codegen/cpu/gemm/cg_gemm_bf16.h);
               * 2: the AMX family's, K padded to 32 (codegen/cpu/gemm/cg_gemm_amx.h); 0: neither */
  int wino;   /* 1: a 3x3 conv2d's kernel as Winograd's U (cg_wino.c), panels of `panel` columns */
} cg_packing;

typedef struct cg_gemm cg_gemm; /* a matmul kernel's GEMM layout (cg_gemm.c) */

/* What the CPU emitter decides for a plan (cg_cpu_emit_kernels fills it)
 * and the program description reads: arrays in its own arena, indexed
 * like the plan's buffers and kernels. */
typedef struct cg_cpu_layout {
  arena *arena;
  cg_packing *packing;      /* per buffer: a constant's stored layout */
  int64_t *const_bytes;     /* per buffer: a constant's bytes in that layout
                             * (the plan's bytes_fixed unless packed; 0: not a constant) */
  cg_kernel_launch *launch; /* per kernel */
  cg_gemm **gemm;           /* per kernel: a GEMM's layout (cg_is_gemm), else NULL */
  /* Kernels that differ only in their buffers share one body
   * (cg_kernel_share.c). With share_by_table (set before emitting: the
   * JIT) the body is called with the kernel's own buffer table, which the
   * runtime builds from args (rt_launch.args); without it (AOT) each such
   * kernel is a small wrapper function of its own name that builds the
   * table and calls the body. */
  bool share_by_table;
  bool share_none;          /* set before emitting: no kernel shares a body */
  bool planned;             /* cg_cpu_plan_layout has filled what follows and the above */
  bool *shared;             /* per kernel: its body serves several kernels */
  const char **symbol;      /* per kernel: the function its launch calls */
  int *rep;                 /* per kernel: the first kernel with the same body */
  int **args;               /* per kernel: its table for a shared body, or NULL */
  int *n_args;
} cg_cpu_layout;

/* Sizes the layout for plan p: nothing packed, no launch split yet. _fini
 * of a zeroed layout is a no-op. */
void cg_cpu_layout_init(cg_cpu_layout *l, const cg_plan *p);
void cg_cpu_layout_fini(cg_cpu_layout *l);
/* Constant buffer b's data in the layout the kernels read (l->const_bytes[b]
 * bytes): the graph's own data, or a pre-packed copy allocated in a. */
const void *cg_cpu_layout_const_data(const cg_cpu_layout *l, const cg_plan *p, int b, arena *a);

/* Emits every kernel of the plan as a function of the kernel ABI in
 * runtime.h into e->mod, for caps. It first chooses the layouts the
 * kernels need (GEMM layouts, pre-packed constants, launch splits) into
 * *layout, made with cg_cpu_layout_init for plan: describe the program
 * (cg_program.c) with that layout after emitting. */
bool cg_cpu_emit_kernels(cg_emitter *e, const cg_cpu_caps *caps, const cg_plan *plan, cg_cpu_layout *layout,
                         const bool *only, diag_sink *d);
/* The layout part of that, for caps (done by the first cg_cpu_emit_kernels
 * unless done before): afterwards the layout is final and only read, so
 * several threads may emit subsets of the kernels (only[ki]: emit kernel
 * ki, or the body it shares with others when it is the first of them;
 * NULL: all) into modules of their own contexts. */
void cg_cpu_plan_layout(const cg_cpu_caps *caps, const cg_plan *plan, cg_cpu_layout *layout);

/* ---- target setup shared by the JIT and AOT (cg_target.c) ---- */

typedef struct cg_target {
  char *triple, *cpu, *features; /* LLVM messages: the given or the host's */
  cg_cpu_caps caps;              /* features, parsed once: what the kernels may use */
  LLVMTargetMachineRef tm;       /* NULL once handed over (to the JIT) */
  char note[256];                /* "" or why the named GEMM family is not used (the AMX family
                                  * where Linux refuses the tile state): --stats prints it */
} cg_target;

/* A target machine for o's CPU and features (the host's by default); the
 * JIT code model when jit, else the default one. Call _fini either way. */
bool cg_target_init(cg_target *t, const cg_options *o, bool jit, diag_sink *d);
void cg_target_fini(cg_target *t);

/* A new module `name` in ctx holding the plan's kernels, verified, and
 * (if optimize) optimized at o->opt_level and dumped to o->dump_llvm by
 * cg_target_optimize: the same for the JIT and AOT. NULL on error. e is set up for emitting more into the
 * module; release it with cg_emitter_fini. layout, made with
 * cg_cpu_layout_init for plan, is filled by cg_cpu_emit_kernels. */
LLVMModuleRef cg_target_emit_module(cg_target *t, LLVMContextRef ctx, const char *name,
                                    const cg_plan *plan, const cg_options *o, bool optimize, cg_emitter *e,
                                    cg_cpu_layout *layout, const bool *only, diag_sink *d);
/* Runs the kernels' pipeline (-O2) or default<O{o->opt_level}> over mod (none at 0) and dumps the result
 * to o->dump_llvm if set. False with a diagnostic if LLVM fails. */
bool cg_target_optimize(cg_target *t, LLVMModuleRef mod, const cg_options *o, diag_sink *d);

/* The rt_program of a plan as the CPU runs it: cg_program_describe's,
 * with the layout's constant sizes and pre-packed data (copies in the
 * program's arena), thread splits, scratch and shared bodies' tables. Call
 * after emitting (the layout is final). */
rt_program *cg_cpu_program_describe(const ir_graph *g, const cg_plan *plan, const cg_cpu_layout *layout,
                                    diag_sink *d);

/* Writes the C header of an AOT object (cg_aot_header.c) to ao->header_path. */
bool cg_aot_write_header(const rt_program *desc, const cg_aot_options *ao, const cg_target *t,
                         const ir_graph *g, diag_sink *d);

/* ---- convolutional networks: depthwise convolution (cg_dwconv.c) ---- */

/* Kernel k starts with a depthwise group_conv2d (cg_group_conv_vectorizes)
 * whose output rows have interior pixels: cg_dwconv_emit emits it. */
bool cg_dwconv_tiles(const cg_kernel *k);
/* The body of such a kernel over launch rows [row0, row1) (c->rows_fixed
 * as the CPU's layout has it): interior pixels as register tiles, edge
 * pixels as one-pixel tiles whose taps test x's column. */
void cg_dwconv_emit(cg_kctx *c);

/* ---- the GEMM (cg_gemm.c) ---- */

/* Chooses the GEMM layout of every matmul kernel for caps into layout:
 * micro-tile, cache blocks (layout->gemm), the launch split and scratch
 * (layout->launch), and which constant B operands are stored pre-packed
 * (layout->packing, layout->const_bytes). */
void cg_gemm_plan(const cg_cpu_caps *caps, const cg_plan *plan, cg_cpu_layout *layout);
/* Appends g's fields to a kernel's sharing key (cg_kernel_share.c). */
void cg_gemm_key(const cg_gemm *g, str_buf *out);
/* Emits the body of matmul kernel c->k with GEMM layout g (the entry block
 * is current). */
void cg_gemm_emit(cg_kctx *c, const cg_gemm *g);

/* ---- kernels that share one body (cg_kernel_share.c) ---- */

/* The buffers kernel k reads and writes, in the order its body first names
 * them (sources of its ops, then its result): out_table needs room for
 * plan->n_buffers. Returns how many. */
int cg_kernel_buffers(const cg_plan *plan, const cg_kernel *k, int *out_table);
/* Per kernel ki: out_rep[ki], the first kernel whose code is the same but
 * for its buffers, and out_count[ki], how many kernels ki represents (0
 * unless out_rep[ki] == ki). */
void cg_kernel_share(const cg_plan *plan, const cg_cpu_layout *layout, int *out_rep, int *out_count);

#endif
