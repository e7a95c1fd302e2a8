/*
 * cg_cpu_caps.c: the CPU target's capabilities from its LLVM feature
 * string, parsed once per target (cg_target_init) for the JIT and AOT
 * alike.
 *
 * The string is split on ',' exactly as LLVM splits it (no trimming); each
 * token is a sign and a whole feature name. Later tokens override earlier
 * ones, as when LLVM applies them. The derived choices depend only on the
 * booleans, so two strings that agree on them give the same kernels.
 */
#include <string.h>

#include "cg_cpu_caps.h"

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
  X("avx512vl", avx512vl)                                                                          \
  X("avx512bf16", avx512bf16)                                                                      \
  X("avx512fp16", avx512fp16)

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
    c->vector_f32_lanes = 16;
    c->gemm_kernel = CG_GEMM_KERNEL_AVX512;
  } else if (c->avx || c->avx2) {
    c->vector_f32_lanes = 8;
    c->gemm_kernel = CG_GEMM_KERNEL_AVX;
  } else {
    c->vector_f32_lanes = 4;
    c->gemm_kernel = CG_GEMM_KERNEL_SSE;
  }
}
