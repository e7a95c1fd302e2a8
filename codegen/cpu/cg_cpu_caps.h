/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cg_cpu_caps.h: what the CPU target may use, parsed once (cg_cpu_caps.c)
 * from the LLVM feature string the target machine gets ("+avx2,-avx512f,
 * ..."), so kernel choices read booleans and a micro-kernel family instead
 * of searching strings. Needs no LLVM headers: the parser is tested alone
 * (tests/unit/check_gemm.c). Private to codegen/.
 */
#ifndef CASTOR_CG_CPU_CAPS_H
#define CASTOR_CG_CPU_CAPS_H

#include <stdbool.h>

/* The GEMM micro-kernel families (cg_gemm.c), by the vector register file
 * they are shaped for and the instruction that multiplies. A family is
 * chosen per CPU by measured speed, not by feature bits alone
 * (cg_cpu_caps_parse: docs/numerics.md and bench/results/ have the
 * measurements); a named CPU ($CASTOR_CPU) picks its family the same way. */
typedef enum cg_gemm_kernel {
  CG_GEMM_KERNEL_SSE,    /* xmm: 4 f32 lanes, 16 registers (x86-64's baseline) */
  CG_GEMM_KERNEL_AVX,    /* ymm: 8 lanes, 16 registers; AVX2 + FMA, or AVX alone
                          * (llvm.fmuladd then becomes a multiply and an add) */
  CG_GEMM_KERNEL_AVX512, /* zmm: 16 lanes, 32 registers */
  CG_GEMM_KERNEL_AVX512_BF16, /* zmm, and a contraction of two bf16 operands on vdpbf16ps over K
                               * pairs (codegen/cpu/gemm/cg_gemm_bf16.h); other dtypes as AVX512 */
  /* AMX-BF16: zmm, and a contraction of two bf16 operands on tile registers (tdpbf16ps,
   * codegen/cpu/gemm/cg_gemm_amx.h); other dtypes as AVX512. Never derived from feature
   * bits: only a named CPU whose `amx` is set picks it (cg_cpu_named), until a real AMX
   * host has passed the suites (docs/numerics.md) */
  CG_GEMM_KERNEL_AMX_BF16,
} cg_gemm_kernel;

/* The family's name, as cg_cpu_describe and test skips print it: "avx512-bf16". */
const char *cg_gemm_kernel_name(cg_gemm_kernel k);

typedef struct cg_cpu_caps {
  /* x86 features, under LLVM 19's names (sse4.1, avx512bf16, ...): each is
   * what the string says of that very feature, the last mention winning;
   * LLVM's implications (avx2 implies avx, ...) are not applied */
  bool sse2, sse4_1, avx, avx2, fma, f16c;
  bool avx512f, avx512bw, avx512dq, avx512vl, avx512bf16, avx512fp16;
  bool amx_tile, amx_bf16;
  /* derived */
  int vector_f32_lanes;       /* widest native f32 vector: 16 with avx512f, 8 with avx
                               * or avx2, else 4 (SSE2 is x86-64's baseline) */
  cg_gemm_kernel gemm_kernel; /* the family of that width */
  /* convolutional networks: which algorithm a 3x3 stride-1 f32 conv2d may
   * take ($CASTOR_CONV_ALGO, read by cg_target_init): CG_CONV_ALGO_AUTO,
   * Winograd where the planner's cost model says it pays (cg_wino.c);
   * _DIRECT, never; _WINOGRAD, wherever it applies (tests) */
  int conv_algo;
} cg_cpu_caps;

enum { CG_CONV_ALGO_AUTO, CG_CONV_ALGO_DIRECT, CG_CONV_ALGO_WINOGRAD };

/* Parses an LLVM feature string, a comma-separated list of +name / -name
 * tokens (NULL or "": none), into *out_caps. Tokens are compared whole, so
 * "+avx512fp16" says nothing of avx512f; tokens without a sign and names
 * castor does not use are ignored. */
void cg_cpu_caps_parse(const char *features, cg_cpu_caps *out_caps);

/* A CPU castor can be told to compile for by name ($CASTOR_CPU, the
 * options' cpu): the x86-64 micro-architecture levels and a few named
 * micro-architectures, each with the LLVM CPU name and the exact LLVM
 * feature string it stands for, so a name means the same code on every
 * host. */
typedef struct cg_cpu_named {
  const char *name;     /* what the user writes: "x86-64-v3" */
  const char *llvm_cpu; /* for the target machine (scheduling) */
  const char *features; /* +name,... (cg_cpu_caps_parse's syntax) */
  const char *about;    /* "AVX2 + FMA + F16C" */
  bool amx;             /* the AMX-BF16 GEMM family (CG_GEMM_KERNEL_AMX_BF16) instead of the one the
                         * features give; the JIT asks Linux for the tile state first and falls back
                         * to the FMA family (CG_GEMM_KERNEL_AVX512) where it is refused */
} cg_cpu_named;

/* The named CPU `name`, or NULL if castor knows no such name. */
const cg_cpu_named *cg_cpu_named_lookup(const char *name);
/* The known names, comma-separated, for messages: "x86-64, x86-64-v2, ...". */
const char *cg_cpu_named_list(void);

/* The first feature that `want` turns on (+name) and `have` does not (the
 * host's feature string), copied to out (NUL-terminated, truncated to
 * out_len); false if `have` has every one. */
bool cg_cpu_caps_missing(const char *want, const char *have, char *out, int out_len);

#endif
