/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ptxemu.h: an emulator of the PTX that castor's nvptx target emits, for
 * testing GPU kernels on machines without a GPU. Test code: nothing in
 * castor's libraries or CLI links it (libcastor_ptxemu.so stands in for
 * libcuda.so.1 under CASTOR_CUDA_EMULATE, see ptxemu_cuda.c).
 *
 * Semantics come from NVIDIA's PTX ISA (not from castor's code generator):
 * integer and IEEE float arithmetic with the rounding each instruction
 * names, conversions (cvt.rn.f16.f32, cvt.rn.bf16.f32, cvt.rzi.s32.f32
 * saturating, ...), predicates and divergent branches, ld/st global,
 * shared and local (each thread's .local frame: LLVM's __local_depot
 * through %SPL), cp.async with commit and wait groups, bar.sync, shfl.sync,
 * ldmatrix (x1/x2/x4, .trans), mma.sync m16n8k16 (f16/bf16 in, f32
 * accumulate) and the approximate functions (ex2.approx, rcp.approx, ...)
 * answered with the worst error the ISA allows. Any other instruction,
 * modifier or directive is refused at load time with its line.
 *
 * Execution: a grid runs CTA by CTA; a CTA's warps run one at a time
 * between barriers (in ascending or descending order) or interleaved one
 * instruction at a time; within a warp, the lanes at the lowest pc run
 * together (divergent paths run one after the other and reconverge).
 * Warp-collective instructions (shfl.sync, ldmatrix, mma.sync: all
 * .aligned) need every live lane of the warp at the same instruction.
 *
 * Checks, each a launch failure with the instruction, its line, the
 * thread and the address:
 *   - global accesses outside every allocation, shared accesses outside
 *     the launch's dynamic shared size, local accesses outside the
 *     thread's frame (the kernel's .local arrays);
 *   - shared-memory hazards between warps inside one barrier interval:
 *     a read of bytes another warp wrote, a write over bytes another warp
 *     read or wrote (RAW, WAR, WAW);
 *   - reads or writes of shared bytes that a cp.async is still copying
 *     (before the wait_group that completes it), whether its data landed
 *     early (at issue) or late (at the wait);
 *   - warp-collective instructions reached by part of a warp, barriers
 *     in divergent code, runaway loops (a step limit).
 * Fresh global allocations, each CTA's shared memory and each thread's
 * local memory are filled with 0xff bytes: NaN as f32, f16 and bf16, so a read of unwritten memory
 * shows in the results.
 */
#ifndef CASTOR_TESTS_PTXEMU_H
#define CASTOR_TESTS_PTXEMU_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct pe_module pe_module;
typedef struct pe_memory pe_memory;

/* Local memory (.local arrays, LLVM's __local_depot stack frame): each
 * thread's own window of the kernel's local_bytes, at addresses from
 * PE_LOCAL_BASE (not 0, so a null or stray pointer used as a local
 * address is outside the window and reported). A .local symbol's value
 * is PE_LOCAL_BASE plus its offset in the frame; ld.local/st.local take
 * such addresses. PE_LOCAL_MAX is a thread's limit on a GPU (512 KiB). */
enum { PE_LOCAL_BASE = 1 << 24, PE_LOCAL_MAX = 512 << 10 };

/* How a launch runs, to shake out ordering bugs. */
typedef enum pe_order {
  PE_ORDER_FORWARD,   /* CTAs in order; warp 0 runs until it blocks, then warp 1, ... */
  PE_ORDER_REVERSE,   /* CTAs and warps from the last */
  PE_ORDER_INTERLEAVE /* CTAs in order; warps take turns one instruction at a time */
} pe_order;

typedef enum pe_landing {
  PE_LAND_LATE, /* cp.async data lands at the wait_group that completes it */
  PE_LAND_EARLY /* ... at issue (the checks still treat it as in flight) */
} pe_landing;

typedef struct pe_options {
  pe_order order;
  pe_landing landing;
  uint64_t max_steps; /* warp-instructions per CTA before "runaway"; 0: 2^28 */
} pe_options;

/* From $CASTOR_PTXEMU_ORDER (forward|reverse|interleave) and
 * $CASTOR_PTXEMU_LANDING (late|early); defaults forward, late. */
void pe_options_from_env(pe_options *o);

/* Parses PTX text. NULL with "line N: ..." in err on anything it does not
 * implement or cannot parse. */
pe_module *pe_module_load(const char *ptx, char *err, size_t errlen);
void pe_module_destroy(pe_module *m);
/* Index of kernel `name` (.entry), -1 if absent. */
int pe_module_kernel(const pe_module *m, const char *name);
/* Bytes of its parameters (each 8-byte aligned u64/pointer/...). */
int pe_kernel_n_params(const pe_module *m, int kernel);
/* Number of instructions of the module (for tests). */
int pe_module_n_insns(const pe_module *m);

/* The global memory: allocations at synthetic device addresses with
 * unmapped gaps between them. */
pe_memory *pe_memory_create(void);
void pe_memory_destroy(pe_memory *mem);
/* 0 when out of memory. The bytes are poisoned (0xff). */
uint64_t pe_alloc(pe_memory *mem, size_t bytes);
bool pe_free(pe_memory *mem, uint64_t addr);
/* Copies between host and device; false if [addr, addr+n) is not inside
 * one allocation. */
bool pe_write(pe_memory *mem, uint64_t addr, const void *src, size_t n);
bool pe_read(pe_memory *mem, void *dst, uint64_t addr, size_t n);
size_t pe_memory_live_bytes(const pe_memory *mem);

/* Runs kernel `kernel` on grid x block threads with `shared_bytes` of
 * dynamic shared memory; params[i] points at parameter i's value (as for
 * cuLaunchKernel). False with a message ("k1_dense line 233: ...") on a
 * failed check or a runtime error. */
bool pe_launch(pe_memory *mem, const pe_module *m, int kernel, const unsigned grid[3], const unsigned block[3],
               unsigned shared_bytes, void **params, const pe_options *o, char *err, size_t errlen);

/* ---- numerics (ptxemu_num.c), exposed for the emulator's own tests ---- */
uint16_t pe_f32_to_f16_rn(float f);
float pe_f16_to_f32(uint16_t h);
uint16_t pe_f32_to_bf16_rn(float f);
float pe_bf16_to_f32(uint16_t h);
uint16_t pe_f64_to_f16_rn(double d);

#endif
