/* SPDX-License-Identifier: Apache-2.0 */
/*
 * aot.h: the contract between an object file that `castor build` emits for
 * an executable (codegen/cpu/cg_aot.c) and the AOT main driver (aot_main.c),
 * which is linked with it and with the static runtime.
 *
 * The object defines castor_aot_entry: a static rt_program (runtime.h)
 * built from constant globals (weights, buffer plan, launches of the
 * kernels in the object) plus a line describing the build. The driver runs
 * it with rt_program_run, so an executable gets exactly the runtime
 * features (threads, ...) the JIT gets. Nothing in the program is owned:
 * never rt_program_destroy it.
 */
#ifndef CASTOR_RT_AOT_H
#define CASTOR_RT_AOT_H

#include "runtime/runtime.h"

/* Bumped whenever rt_program or rt_aot_entry change layout. */
#define RT_AOT_ABI_VERSION 13 /* 2: rt_program gained states, rt_launch work_per_row_per_batch; 3: rt_launch args;
                              * 4: rank 6 (rt_tensor_desc.dims); 5: rt_aot_entry.features;
                              * 6: rt_launch row_tile_min; 7: rt_launch layer, bytes_per_row,
                              * bytes_fixed; 8: rt_tensor_desc index_limit, index_user;
                              * 9: rt_tensor_desc length_limit, length_user;
                              * 10: rt_launch tile_row_cost, tile_col_cost; 11: rt_launch algo;
                              * 12: rt_program images; 13: rt_program image_launches, image_slots */

typedef struct rt_aot_entry {
  int abi_version;           /* RT_AOT_ABI_VERSION of the castor that built the object */
  const rt_program *program;
  const char *about;         /* "compiled by castor 0.1.0 ... from MODEL (policy P, cpu C)" */
  const char *features;      /* the LLVM feature string the kernels were compiled for ("+avx2,..."):
                              * the main checks the CPU has them before it runs one (cpu_features.h) */
} rt_aot_entry;

/* The end of `about` when the kernels are the AMX-BF16 GEMM family: the
 * main then asks Linux for the tile state before any kernel runs. */
#define RT_AOT_AMX_MARK ", GEMM family amx-bf16"

#define RT_AOT_ENTRY_SYMBOL "castor_aot_entry"
extern const rt_aot_entry castor_aot_entry;

#endif
