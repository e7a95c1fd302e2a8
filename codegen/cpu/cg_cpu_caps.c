/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cg_cpu_caps.c: the CPU target's capabilities from its LLVM feature
 * string, parsed once per target (cg_target_init) for the JIT and AOT
 * alike.
 *
 * The string is split on ',' exactly as LLVM splits it (no trimming); each
 * token is a sign and a whole feature name. Later tokens override earlier
 * ones, as when LLVM applies them. The derived choices depend only on the
 * booleans, so two strings that agree on them give the same kernels.
 *
 * It also holds the CPUs castor compiles for by name ($CASTOR_CPU): a
 * name stands for a fixed feature string, so the AVX2 and SSE code paths
 * can be compiled, run and tested on any host that can execute them.
 */
#include <string.h>

#include "codegen/cpu/cg_cpu_caps.h"

/* The features castor reads, by LLVM name, and where each is kept. */
#define CG_CPU_FEATURES(X)                                                                         \
  X("sse2", sse2)                                                                                  \
  X("sse4.1", sse4_1)                                                                              \
  X("avx", avx)                                                                                    \
  X("avx2", avx2)                                                                                  \
  X("fma", fma)                                                                                    \
  X("f16c", f16c)                                                                                  \
  X("avx512f", avx512f)                                                                            \
  X("avx512bw", avx512bw)                                                                          \
  X("avx512dq", avx512dq)                                                                          \
  X("avx512vl", avx512vl)                                                                          \
  X("avx512bf16", avx512bf16)                                                                      \
  X("avx512fp16", avx512fp16)                                                                      \
  X("amx-tile", amx_tile)                                                                          \
  X("amx-bf16", amx_bf16)

/* Sets the feature named by the len bytes at name, if castor reads it. */
static void set_feature(cg_cpu_caps *c, const char *name, size_t len, bool on) {
#define X(str, field)                                                                              \
  if (len == sizeof str - 1 && memcmp(name, str, len) == 0) {                                      \
    c->field = on;                                                                                 \
    return;                                                                                        \
  }
  CG_CPU_FEATURES(X)
#undef X
}

void cg_cpu_caps_parse(const char *features, cg_cpu_caps *out_caps) {
  cg_cpu_caps *c = out_caps;
  memset(c, 0, sizeof *c);
  for (const char *s = features ? features : ""; *s;) {
    const char *end = strchr(s, ',');
    size_t len = end ? (size_t)(end - s) : strlen(s);
    if (len > 1 && (s[0] == '+' || s[0] == '-')) set_feature(c, s + 1, len - 1, s[0] == '+');
    s += len;
    if (*s == ',') s++;
  }
  if (c->avx512f) {
    /* vdpbf16ps against f32 FMA, measured: on Zen 4 (no AMX) a bf16 GEMM
     * runs ~2x faster on it (bench/results/cpu-bf16-*.md); on Sapphire
     * Rapids (AMX) it is no faster than the f32 FMAs, so a CPU with
     * AMX-BF16 gets the tiles instead (cg_target.c: the host's detection
     * and the named sapphirerapids-amx), else the FMA family */
    c->vector_f32_lanes = 16;
    c->gemm_kernel = c->avx512bf16 && c->avx512bw && !c->amx_bf16 ? CG_GEMM_KERNEL_AVX512_BF16 : CG_GEMM_KERNEL_AVX512;
  } else if (c->avx || c->avx2) {
    c->vector_f32_lanes = 8;
    c->gemm_kernel = CG_GEMM_KERNEL_AVX;
  } else {
    c->vector_f32_lanes = 4;
    c->gemm_kernel = CG_GEMM_KERNEL_SSE;
  }
}

const char *cg_gemm_kernel_name(cg_gemm_kernel k) {
  switch (k) {
  case CG_GEMM_KERNEL_SSE: return "sse";
  case CG_GEMM_KERNEL_AVX: return "avx";
  case CG_GEMM_KERNEL_AVX512: return "avx512";
  case CG_GEMM_KERNEL_AVX512_BF16: return "avx512-bf16";
  case CG_GEMM_KERNEL_AMX_BF16: return "amx-bf16";
  }
  return "?";
}

/* ---- named CPUs ----
 * The levels are the x86-64 psABI's micro-architecture levels, as LLVM 19
 * defines them (llvm/lib/Target/X86/X86.td); a named micro-architecture
 * takes its level's features and LLVM's scheduling model for that CPU. */
#define X86_64_V1 "+cmov,+cx8,+fxsr,+mmx,+sse,+sse2"
#define X86_64_V2 X86_64_V1 ",+cx16,+popcnt,+sahf,+sse3,+ssse3,+sse4.1,+sse4.2"
#define X86_64_V3 X86_64_V2 ",+avx,+avx2,+bmi,+bmi2,+f16c,+fma,+lzcnt,+movbe,+xsave"
#define X86_64_V4 X86_64_V3 ",+avx512f,+avx512bw,+avx512cd,+avx512dq,+avx512vl,+evex512"

static const cg_cpu_named named_cpus[] = {
    {"x86-64", "x86-64", X86_64_V1, "SSE2", false},
    {"x86-64-v2", "x86-64-v2", X86_64_V2, "SSE4.2", false},
    {"x86-64-v3", "x86-64-v3", X86_64_V3, "AVX2 + FMA + F16C", false},
    {"x86-64-v4", "x86-64-v4", X86_64_V4, "AVX-512", false},
    {"haswell", "haswell", X86_64_V3, "AVX2 + FMA + F16C", false},
    {"znver3", "znver3", X86_64_V3, "AVX2 + FMA + F16C", false},
    {"skylake-avx512", "skylake-avx512", X86_64_V4, "AVX-512", false},
    {"znver4", "znver4", X86_64_V4 ",+avx512bf16", "AVX-512 + BF16", false},
    {"cooperlake", "cooperlake", X86_64_V4 ",+avx512bf16", "AVX-512 + BF16", false},
    {"sapphirerapids", "sapphirerapids", X86_64_V4 ",+avx512bf16,+avx512fp16,+amx-tile,+amx-bf16",
     "AVX-512 + BF16 + FP16 + AMX (the FMA family: vdpbf16ps is no faster there; the host's detection gives AMX)", false},
    /* the AMX-BF16 GEMM family, which an AMX host also gets by detection
     * (cg_target.c; docs/numerics.md); without AVX512-FP16 (castor widens f16
     * either way), so that the fallback to the FMA family where AMX is
     * absent or refused runs on any AVX-512 + BF16 CPU */
    {"sapphirerapids-amx", "sapphirerapids", X86_64_V4 ",+avx512bf16,-avx512fp16,+amx-tile,+amx-bf16",
     "AVX-512 + BF16 + AMX-BF16 (the AMX family)", true},
};

const cg_cpu_named *cg_cpu_named_lookup(const char *name) {
  for (size_t i = 0; name && i < sizeof named_cpus / sizeof named_cpus[0]; i++)
    if (strcmp(named_cpus[i].name, name) == 0) return &named_cpus[i];
  return NULL;
}

const char *cg_cpu_named_list(void) {
  return "x86-64, x86-64-v2, x86-64-v3, x86-64-v4, haswell, znver3, skylake-avx512, znver4, cooperlake, "
         "sapphirerapids, sapphirerapids-amx";
}

/* Whether `have` turns feature name[0 .. len) on (the last mention wins). */
static bool has_feature(const char *have, const char *name, size_t len) {
  bool on = false;
  for (const char *s = have ? have : ""; *s;) {
    const char *end = strchr(s, ',');
    size_t n = end ? (size_t)(end - s) : strlen(s);
    if (n == len + 1 && (s[0] == '+' || s[0] == '-') && memcmp(s + 1, name, len) == 0) on = s[0] == '+';
    s += n;
    if (*s == ',') s++;
  }
  return on;
}

bool cg_cpu_caps_missing(const char *want, const char *have, char *out, int out_len) {
  for (const char *s = want ? want : ""; *s;) {
    const char *end = strchr(s, ',');
    size_t len = end ? (size_t)(end - s) : strlen(s);
    if (len > 1 && s[0] == '+' && !has_feature(want, s + 1, len - 1)) {
      /* a later -name in want itself cancels it */
    } else if (len > 1 && s[0] == '+' && !has_feature(have, s + 1, len - 1)) {
      if (out_len > 0) {
        size_t n = len - 1 < (size_t)out_len - 1 ? len - 1 : (size_t)out_len - 1;
        memcpy(out, s + 1, n);
        out[n] = '\0';
      }
      return true;
    }
    s += len;
    if (*s == ',') s++;
  }
  return false;
}
