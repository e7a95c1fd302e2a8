/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cpu_features.h: what the CPU a compiled program runs on can execute,
 * asked of CPUID and of the operating system's saved register state
 * (XGETBV), for the AOT main (runtime/aot/aot_main.c): an executable built
 * for AVX-512 or AVX512-BF16 kernels says so on a CPU without them instead
 * of dying of SIGILL in the first kernel.
 */
#ifndef CASTOR_RT_CPU_FEATURES_H
#define CASTOR_RT_CPU_FEATURES_H

#include <stdbool.h>
#include <stddef.h>

/* The first feature that `features` (an LLVM feature string: "+avx2,
 * -avx512f,...", the last mention of a name winning) turns on and this CPU
 * lacks, copied to out (NUL-terminated, truncated to out_len); false if it
 * has every one this file knows. Names it does not know (castor's kernels
 * do not depend on them alone) are not checked; on a CPU that is not x86,
 * none is. */
bool rt_cpu_lacks(const char *features, char *out, size_t out_len);

/* Whether this CPU, with its OS, can execute feature `name` (LLVM's name:
 * "avx512bf16"); *known = false for a name this file does not know. */
bool rt_cpu_has(const char *name, bool *known);

/* Asks Linux once per process for the AMX tile data state (arch_prctl
 * ARCH_REQ_XCOMP_PERM for XFEATURE_XTILEDATA, Linux 5.16 and later), which
 * a process must hold before its first tile instruction. True when granted
 * (and the CPU has AMX-TILE and AMX-BF16 with the OS's XCR0 tile bits);
 * false with the reason in why (NUL-terminated, truncated to why_len):
 * no AMX on this CPU, or the kernel's refusal and its errno. Every later
 * call returns the first call's answer. $CASTOR_AMX_DENY set to 1 makes
 * the request count as refused (to test the fallback on an AMX host). */
bool rt_amx_request(char *why, size_t why_len);

#endif
