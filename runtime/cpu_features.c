/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cpu_features.c: the features of the running CPU (cpu_features.h), from
 * CPUID leaves 1, 7 (subleaves 0 and 1) and 0x80000001, and the register
 * state the OS saves (XCR0: ymm for the AVX family, zmm and mask registers
 * for AVX-512, tiles for AMX), as the Intel SDM (vol. 1, 13.3) says an
 * application must check before it uses them.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/cpu_features.h"

#if defined(__linux__) && defined(__x86_64__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>

enum { XCR0_AVX = 0x6, XCR0_AVX512 = 0xe6, XCR0_AMX = 0x60000 };

/* name, CPUID leaf and subleaf, register (a b c d), bit, XCR0 bits the OS must enable */
static const struct {
  const char *name;
  unsigned leaf, sub;
  char reg;
  int bit;
  unsigned xcr0;
} x86_features[] = {
    {"sse2", 1, 0, 'd', 26, 0},           {"sse3", 1, 0, 'c', 0, 0},
    {"ssse3", 1, 0, 'c', 9, 0},           {"sse4.1", 1, 0, 'c', 19, 0},
    {"sse4.2", 1, 0, 'c', 20, 0},         {"popcnt", 1, 0, 'c', 23, 0},
    {"movbe", 1, 0, 'c', 22, 0},          {"lzcnt", 0x80000001u, 0, 'c', 5, 0},
    {"bmi", 7, 0, 'b', 3, 0},             {"bmi2", 7, 0, 'b', 8, 0},
    {"avx", 1, 0, 'c', 28, XCR0_AVX},     {"fma", 1, 0, 'c', 12, XCR0_AVX},
    {"f16c", 1, 0, 'c', 29, XCR0_AVX},    {"avx2", 7, 0, 'b', 5, XCR0_AVX},
    {"avx512f", 7, 0, 'b', 16, XCR0_AVX512},     {"avx512dq", 7, 0, 'b', 17, XCR0_AVX512},
    {"avx512cd", 7, 0, 'b', 28, XCR0_AVX512},    {"avx512bw", 7, 0, 'b', 30, XCR0_AVX512},
    {"avx512vl", 7, 0, 'b', 31, XCR0_AVX512},    {"avx512ifma", 7, 0, 'b', 21, XCR0_AVX512},
    {"avx512vbmi", 7, 0, 'c', 1, XCR0_AVX512},   {"avx512vbmi2", 7, 0, 'c', 6, XCR0_AVX512},
    {"avx512vnni", 7, 0, 'c', 11, XCR0_AVX512},  {"avx512bitalg", 7, 0, 'c', 12, XCR0_AVX512},
    {"avx512vpopcntdq", 7, 0, 'c', 14, XCR0_AVX512}, {"avx512fp16", 7, 0, 'd', 23, XCR0_AVX512},
    {"avx512bf16", 7, 1, 'a', 5, XCR0_AVX512},   {"amx-tile", 7, 0, 'd', 24, XCR0_AMX},
    {"amx-bf16", 7, 0, 'd', 22, XCR0_AMX},       {"amx-int8", 7, 0, 'd', 25, XCR0_AMX},
};

static unsigned xcr0(void) {
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 27))) return 0; /* no OSXSAVE: no XGETBV */
  unsigned lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  (void)hi;
  return lo;
}

bool rt_cpu_has(const char *name, bool *known) {
  for (size_t i = 0; i < sizeof x86_features / sizeof x86_features[0]; i++) {
    if (strcmp(x86_features[i].name, name) != 0) continue;
    *known = true;
    unsigned r[4] = {0, 0, 0, 0}; /* a b c d */
    if (__get_cpuid_max(x86_features[i].leaf & 0x80000000u, NULL) < x86_features[i].leaf) return false;
    __cpuid_count(x86_features[i].leaf, x86_features[i].sub, r[0], r[1], r[2], r[3]);
    unsigned v = r[x86_features[i].reg - 'a'];
    if (!(v >> x86_features[i].bit & 1)) return false;
    return (xcr0() & x86_features[i].xcr0) == x86_features[i].xcr0;
  }
  *known = false;
  return true;
}
#else
bool rt_cpu_has(const char *name, bool *known) {
  (void)name;
  *known = false;
  return true;
}
#endif

/* Whether `features` turns name[0 .. len) on (its last mention wins). */
static bool turned_on(const char *features, const char *name, size_t len) {
  bool on = false;
  for (const char *s = features; *s;) {
    const char *end = strchr(s, ',');
    size_t n = end ? (size_t)(end - s) : strlen(s);
    if (n == len + 1 && (s[0] == '+' || s[0] == '-') && memcmp(s + 1, name, len) == 0) on = s[0] == '+';
    s += n;
    if (*s == ',') s++;
  }
  return on;
}

bool rt_cpu_lacks(const char *features, char *out, size_t out_len) {
  for (const char *s = features ? features : ""; *s;) {
    const char *end = strchr(s, ',');
    size_t len = end ? (size_t)(end - s) : strlen(s);
    char name[64];
    if (len > 1 && len < sizeof name && s[0] == '+' && turned_on(features, s + 1, len - 1)) {
      memcpy(name, s + 1, len - 1);
      name[len - 1] = '\0';
      bool known;
      if (!rt_cpu_has(name, &known) && known) {
        if (out_len) {
          size_t n = len - 1 < out_len - 1 ? len - 1 : out_len - 1;
          memcpy(out, name, n);
          out[n] = '\0';
        }
        return true;
      }
    }
    s += len;
    if (*s == ',') s++;
  }
  return false;
}

/* ---- the AMX tile state (Linux) ---- */

static pthread_once_t amx_once = PTHREAD_ONCE_INIT;
static bool amx_granted;
static char amx_why[160];

static void amx_ask(void) {
  bool known = false;
  if (getenv("CASTOR_AMX_DENY") && strcmp(getenv("CASTOR_AMX_DENY"), "1") == 0) {
    snprintf(amx_why, sizeof amx_why, "the tile state request was refused on purpose (CASTOR_AMX_DENY=1)");
    return;
  }
  if (!rt_cpu_has("amx-tile", &known) || !rt_cpu_has("amx-bf16", &known) || !known) {
    snprintf(amx_why, sizeof amx_why, "this CPU (or its OS's XCR0) has no AMX-TILE and AMX-BF16");
    return;
  }
#if defined(__linux__) && defined(__x86_64__)
  enum { ARCH_GET_XCOMP_PERM = 0x1022, ARCH_REQ_XCOMP_PERM = 0x1023, XFEATURE_XTILEDATA = 18 };
  if (syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) != 0) {
    int err = errno;
    snprintf(amx_why, sizeof amx_why, "Linux refused the tile state (arch_prctl ARCH_REQ_XCOMP_PERM: %s)", strerror(err));
    return;
  }
  unsigned long perm = 0;
  if (syscall(SYS_arch_prctl, ARCH_GET_XCOMP_PERM, &perm) != 0 || !(perm >> XFEATURE_XTILEDATA & 1)) {
    snprintf(amx_why, sizeof amx_why, "Linux did not grant the tile state (arch_prctl ARCH_GET_XCOMP_PERM)");
    return;
  }
  amx_granted = true;
#else
  snprintf(amx_why, sizeof amx_why, "castor asks for the AMX tile state only on Linux x86-64");
#endif
}

bool rt_amx_request(char *why, size_t why_len) {
  pthread_once(&amx_once, amx_ask);
  if (!amx_granted && why && why_len) snprintf(why, why_len, "%s", amx_why);
  return amx_granted;
}
