/* SPDX-License-Identifier: Apache-2.0 */
/*
 * check_gemm.c: the CPU GEMM (codegen/cpu/cg_gemm.c) against the float64
 * reference interpreter, on shapes chosen to hit every edge of its
 * blocking: 1x1x1, odd and prime sizes, K across the K block (256; 512
 * on the K-pair family), rows
 * not a multiple of the 14/4/1-row micro-tiles, columns not a multiple of
 * the 32-wide panels or of a vector, B narrower than a vector; every
 * epilogue (bias, activations, a fused row softmax, 16-bit results); f16
 * and bf16 weights kept 16-bit; a B that is not a constant (read in place,
 * not pre-packed). Each case runs on 1, 2 and 3 threads, and the outputs
 * must be bit-identical: the split of the work never changes a result.
 * A few cases also run on the AVX2 and generic SSE2 emitters, and the
 * parser of the feature strings that choose them (cg_cpu_caps) is checked
 * on its own.
 *
 * Graphs are built with ir_build_* (the frontend has no 16-bit weights
 * without a weights file), run through the default pass pipeline and
 * codegen, and compared by normalized error (max |got - want| / max
 * |want|). Bounds: f32 1e-5 (an f32 dot product of length K <= 1031 on
 * random data has relative error ~sqrt(K) 2^-24 ~ 2e-6); a 16-bit result
 * differs from the reference by at most one rounding of that dtype where
 * the f32 sum lands near a rounding boundary: 2^-10 for f16, 2^-7 for bf16.
 */
#include <check.h>

#include "tests/unit/test_support.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/cpu/cg_cpu_caps.h"
#include "codegen/codegen.h"
#include "passes/passes.h"
#include "tests/ref/ref.h"
#include "util/half.h"

typedef enum epi { EPI_NONE, EPI_BIAS_RELU, EPI_BIAS_GELU, EPI_TANH, EPI_SOFTMAX } epi;

typedef struct gemm_case {
  int64_t m, k, n;
  ir_dtype dt;  /* compute and weight dtype */
  epi ep;
  bool b_cast;  /* B is cast(f32 const) in the graph: not a plain constant */
} gemm_case;

/* Random data in [-1, 1) as dtype dt (arena-owned). */
static void *random_data(arena *a, ir_dtype dt, int64_t n, rng *r) {
  if (dt == DT_F32) {
    float *x = arena_alloc(a, (size_t)n * sizeof *x);
    for (int64_t i = 0; i < n; i++) x[i] = rng_uniform_f32(r, -1.0f, 1.0f);
    return x;
  }
  uint16_t *h = arena_alloc(a, (size_t)n * sizeof *h);
  for (int64_t i = 0; i < n; i++) {
    float f = rng_uniform_f32(r, -1.0f, 1.0f);
    h[i] = dt == DT_F16 ? half_f32_to_f16(f) : half_f32_to_bf16(f);
  }
  return h;
}

/* y = epilogue(cast(x, dt) @ W) -> f32 output, batch rows of x [N, k]. */
static ir_graph *build(const gemm_case *gc, uint64_t seed) {
  ir_graph *g = ir_graph_create("gemm");
  rng r;
  rng_init(&r, seed);
  diag_loc loc = {0};
  ir_node *x = ir_build_input(g, "x", &(ir_type){DT_F32, 2, {IR_DIM_BATCH, gc->k}}, 0, loc);
  ir_node *a = gc->dt == DT_F32 ? x : ir_build_cast(g, "x.cast", x, gc->dt, loc);
  ir_node *w;
  if (gc->b_cast) {
    ir_node *w32 = ir_build_const(g, "w32", &(ir_type){DT_F32, 2, {gc->k, gc->n}}, "w32",
                                  random_data(g->arena, DT_F32, gc->k * gc->n, &r), loc);
    w = ir_build_cast(g, "w", w32, gc->dt == DT_F32 ? DT_F16 : gc->dt, loc);
    if (gc->dt == DT_F32) w = ir_build_cast(g, "w.f32", w, DT_F32, loc);
  } else {
    w = ir_build_const(g, "w", &(ir_type){gc->dt, 2, {gc->k, gc->n}}, "w",
                       random_data(g->arena, gc->dt, gc->k * gc->n, &r), loc);
  }
  ir_node *y = ir_build_matmul(g, "mm", a, w, DT_F32, loc);
  if (gc->ep == EPI_BIAS_RELU || gc->ep == EPI_BIAS_GELU) {
    ir_node *bias = ir_build_const(g, "b", &(ir_type){gc->dt, 1, {gc->n}}, "b",
                                   random_data(g->arena, gc->dt, gc->n, &r), loc);
    y = ir_build_binary(g, IR_OP_ADD, "bias", y, bias, loc);
    y = ir_build_unary(g, gc->ep == EPI_BIAS_RELU ? IR_OP_RELU : IR_OP_GELU, "act", y, loc);
  } else if (gc->ep == EPI_TANH) {
    y = ir_build_unary(g, IR_OP_TANH, "act", y, loc);
  }
  if (y->type.dtype != DT_F32) y = ir_build_cast(g, "y.f32", y, DT_F32, loc);
  if (gc->ep == EPI_SOFTMAX) y = ir_build_unary(g, IR_OP_SOFTMAX, "sm", y, loc);
  ir_graph_add_output(g, "y", y);
  ir_graph_renumber(g);
  return g;
}

static double bound(ir_dtype dt) { return dt == DT_F16 ? 0x1p-10 : dt == DT_BF16 ? 0x1p-7 : 1e-5; }

static void run_case_on(const gemm_case *gc, uint64_t seed, const cg_options *co) {
  char what[160];
  snprintf(what, sizeof what, "%lldx%lldx%lld %s epi %d%s", (long long)gc->m, (long long)gc->k, (long long)gc->n,
           dtype_name(gc->dt), (int)gc->ep, gc->b_cast ? " (B computed)" : "");
  diag_sink *d = diag_sink_create();
  ir_graph *g = build(gc, seed);
  ck_assert_msg(ir_verify(g, d), "%s: verify:\n%s", what, diag_text(d));
  ck_assert_msg(pass_run_pipeline(g, "verify,dce", NULL, d), "%s: passes:\n%s", what, diag_text(d));
  rt_program *p = cg_compile_cpu(g, co, d);
  ck_assert_msg(p != NULL, "%s: codegen:\n%s", what, diag_text(d));

  int64_t nx = gc->m * gc->k, ny = gc->m * gc->n;
  float *x = malloc((size_t)nx * sizeof *x);
  rng r;
  rng_init(&r, seed ^ 0x9e3779b97f4a7c15ull);
  for (int64_t i = 0; i < nx; i++) x[i] = rng_uniform_f32(&r, -1.0f, 1.0f);
  float *y[4];
  for (int t = 1; t <= 3; t++) {
    y[t] = malloc((size_t)ny * sizeof(float));
    for (int64_t i = 0; i < ny; i++) y[t][i] = NAN; /* every element must be written */
    const void *in[] = {x};
    void *out[] = {y[t]};
    ck_assert_msg(rt_program_run_threads(p, t, gc->m, in, out, NULL, d), "%s: run:\n%s", what, diag_text(d));
  }
  double *x64 = ref_from_f32(x, nx), *want[1];
  char err[256], buf[256];
  ck_assert_msg(ref_run(g, gc->m, (const double *const *)&x64, want, err, sizeof err), "%s: ref: %s", what, err);
  ref_cmp c = ref_compare_normalized(y[1], want[0], ny);
  ck_assert_msg(c.error < bound(gc->dt), "%s: %s (bound %g)", what, ref_cmp_str(&c, buf, sizeof buf), bound(gc->dt));
  for (int t = 2; t <= 3; t++)
    ck_assert_msg(memcmp(y[1], y[t], (size_t)ny * sizeof(float)) == 0, "%s: %d threads differ from 1", what, t);
  ref_outputs_free(want, 1);
  free(x64), free(x);
  for (int t = 1; t <= 3; t++) free(y[t]);
  rt_program_destroy(p);
  ir_graph_destroy(g);
  diag_sink_destroy(d);
}

static void run_case(const gemm_case *gc, uint64_t seed) { run_case_on(gc, seed, NULL); }

#define F32 DT_F32
#define F16 DT_F16
#define BF16 DT_BF16

static const gemm_case shapes[] = {
    {1, 1, 1, F32, EPI_NONE, false},
    {7, 13, 5, F32, EPI_NONE, false},
    {7, 13, 5, F32, EPI_BIAS_RELU, false},
    {1, 300, 97, F32, EPI_BIAS_RELU, false},     /* GEMV, K not a multiple of anything */
    {15, 257, 33, F32, EPI_NONE, false},         /* K one past the K block; 14 + 1 rows */
    {29, 513, 67, F32, EPI_BIAS_GELU, false},    /* three K blocks; 14+14+1 rows */
    {31, 37, 41, F32, EPI_TANH, false},          /* primes */
    {97, 101, 103, F32, EPI_BIAS_RELU, false},   /* primes; 6 row tiles + tails */
    {127, 1031, 131, F32, EPI_NONE, false},      /* more rows than a row block (112) */
    {2, 64, 600, F32, EPI_BIAS_RELU, false},     /* more columns than a column block (512) */
    {33, 80, 10, F32, EPI_SOFTMAX, false},       /* softmax fused, one partial vector */
    {9, 40, 40, F32, EPI_SOFTMAX, false},        /* softmax over several vectors */
    {5, 16, 64, F32, EPI_SOFTMAX, false},        /* softmax, whole vectors */
    {6, 50, 7, F32, EPI_NONE, true},             /* B not a constant: read in place */
    {17, 300, 45, F32, EPI_BIAS_RELU, true},
    {1, 300, 97, F16, EPI_BIAS_RELU, false},     /* 16-bit weights */
    {19, 260, 70, F16, EPI_NONE, false},
    {3, 33, 10, F16, EPI_SOFTMAX, false},
    {1, 300, 97, BF16, EPI_BIAS_RELU, false},
    {23, 517, 65, BF16, EPI_BIAS_GELU, false},
    {8, 64, 64, BF16, EPI_SOFTMAX, false},
    {11, 40, 37, F16, EPI_NONE, true},
    {11, 40, 37, BF16, EPI_TANH, true},
    /* bf16 x bf16: the K-pair family where the host has it (vdpbf16ps):
     * odd K (a zero pair), K across the K block, more rows than a row
     * block, more columns than a column block, B packed per call */
    {1, 1, 1, BF16, EPI_NONE, false},
    {7, 13, 5, BF16, EPI_BIAS_RELU, false},
    {15, 257, 33, BF16, EPI_NONE, false},
    {29, 513, 67, BF16, EPI_BIAS_GELU, true},
    {97, 101, 103, BF16, EPI_BIAS_RELU, false},
    {127, 1031, 131, BF16, EPI_NONE, false},
    {2, 64, 600, BF16, EPI_BIAS_RELU, true},
    {33, 80, 10, BF16, EPI_SOFTMAX, false},
    {9, 40, 40, BF16, EPI_SOFTMAX, true},
    /* the K-pair family's K block is 512: one past it, exactly two, B per call */
    {15, 513, 33, BF16, EPI_BIAS_RELU, true},
    {14, 1024, 32, BF16, EPI_NONE, true},
    {3, 1025, 47, BF16, EPI_NONE, false},
    /* AMX-BF16 (CASTOR_CPU=sapphirerapids-amx): 32-row tiles over more rows
     * than its 256-row block, the last tile partial; K one past a tile step
     * (padded to 32); a 16-column tail panel; B packed per call */
    {300, 33, 48, BF16, EPI_BIAS_RELU, false},
    {257, 96, 17, BF16, EPI_NONE, true},
    {45, 31, 16, BF16, EPI_SOFTMAX, false},
};

START_TEST(test_shapes) { run_case(&shapes[_i], 100 + (uint64_t)_i); }
END_TEST

/* The batch sizes of the sample model's benchmark, on its layer shapes
 * scaled down in K, and a batch that is not a multiple of any tile. */
START_TEST(test_batches) {
  static const int64_t ms[] = {1, 2, 13, 14, 15, 64, 113, 250};
  for (size_t i = 0; i < sizeof ms / sizeof ms[0]; i++) {
    gemm_case gc = {ms[i], 200, 130, F32, EPI_BIAS_RELU, false};
    run_case(&gc, 7 + i);
    gc.dt = BF16;
    run_case(&gc, 70 + i);
  }
}
END_TEST

/* The AVX2 (8 lanes, 16 registers: 6x16 tiles) and generic SSE2 (4 lanes)
 * emitters, compiled for those feature sets; this host runs both. */
START_TEST(test_narrow_targets) {
  static const struct { const char *cpu, *features; } targets[] = {
      {"haswell", "+sse2,+sse4.2,+avx,+avx2,+fma,+f16c"},
      {"x86-64", "+sse2"},
      {"x86-64-v3", NULL}, /* by name: the features from cg_cpu_caps.c */
  };
  static const gemm_case cases[] = {
      {7, 13, 5, F32, EPI_BIAS_RELU, false}, {29, 513, 67, F32, EPI_BIAS_GELU, false},
      {33, 80, 10, F32, EPI_SOFTMAX, false}, {9, 40, 40, F32, EPI_SOFTMAX, false},
      {1, 300, 97, F16, EPI_BIAS_RELU, false}, {23, 517, 65, BF16, EPI_TANH, false},
      {6, 50, 7, F32, EPI_NONE, true},
  };
  for (size_t t = 0; t < sizeof targets / sizeof targets[0]; t++) {
    cg_options co;
    cg_options_init(&co);
    co.cpu = targets[t].cpu;
    co.features = targets[t].features;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_case_on(&cases[i], 500 + i, &co);
  }
}
END_TEST

/* The feature-string parser: whole tokens, signs, the last mention wins. */
START_TEST(test_cpu_caps) {
  static const struct {
    const char *features;
    int lanes;
    cg_gemm_kernel kernel;
    bool avx512f, avx2, fma, avx512fp16;
  } cases[] = {
      {"+avx512f,+avx2,+avx,+fma,+f16c,+sse2", 16, CG_GEMM_KERNEL_AVX512, true, true, true, false},
      {"-avx512f,+avx2,+fma,+avx", 8, CG_GEMM_KERNEL_AVX, false, true, true, false},
      {"+sse2,+sse4.2,+avx,+avx2,+fma,+f16c", 8, CG_GEMM_KERNEL_AVX, false, true, true, false},
      {"+avx", 8, CG_GEMM_KERNEL_AVX, false, false, false, false}, /* last token, no comma after it */
      {"+sse2", 4, CG_GEMM_KERNEL_SSE, false, false, false, false},
      {"", 4, CG_GEMM_KERNEL_SSE, false, false, false, false},
      {NULL, 4, CG_GEMM_KERNEL_SSE, false, false, false, false},
      {"+avx512fp16", 4, CG_GEMM_KERNEL_SSE, false, false, false, true}, /* not a prefix match */
      {"+avx512vl,+avx512bw,+avx512bf16", 4, CG_GEMM_KERNEL_SSE, false, false, false, false},
      {"+avx2,-avx2,+sse2", 4, CG_GEMM_KERNEL_SSE, false, false, false, false},
      {"-avx2,+avx2", 8, CG_GEMM_KERNEL_AVX, false, true, false, false},
      {"+avx512f,-avx512f,+avx", 8, CG_GEMM_KERNEL_AVX, false, false, false, false},
      {"avx2,+fma,,+", 4, CG_GEMM_KERNEL_SSE, false, false, true, false}, /* unsigned, empty tokens */
      {" +avx512f,+avx2x,+xavx2", 4, CG_GEMM_KERNEL_SSE, false, false, false, false}, /* whole names */
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const char *f = cases[i].features;
    cg_cpu_caps c;
    cg_cpu_caps_parse(f, &c);
    ck_assert_msg(c.vector_f32_lanes == cases[i].lanes, "'%s': %d lanes, want %d", f ? f : "(null)",
                  c.vector_f32_lanes, cases[i].lanes);
    ck_assert_msg(c.gemm_kernel == cases[i].kernel, "'%s': kernel %d, want %d", f ? f : "(null)", (int)c.gemm_kernel,
                  (int)cases[i].kernel);
    ck_assert_msg(c.avx512f == cases[i].avx512f && c.avx2 == cases[i].avx2 && c.fma == cases[i].fma &&
                      c.avx512fp16 == cases[i].avx512fp16,
                  "'%s': avx512f %d avx2 %d fma %d avx512fp16 %d", f ? f : "(null)", c.avx512f, c.avx2, c.fma,
                  c.avx512fp16);
  }
  /* the named CPUs: each in the list, its features parsed to its path */
  static const struct { const char *name; cg_gemm_kernel kernel; } named[] = {
      {"x86-64", CG_GEMM_KERNEL_SSE},         {"x86-64-v2", CG_GEMM_KERNEL_SSE},
      {"x86-64-v3", CG_GEMM_KERNEL_AVX},      {"x86-64-v4", CG_GEMM_KERNEL_AVX512},
      {"haswell", CG_GEMM_KERNEL_AVX},        {"znver3", CG_GEMM_KERNEL_AVX},
      {"skylake-avx512", CG_GEMM_KERNEL_AVX512}, {"znver4", CG_GEMM_KERNEL_AVX512_BF16},
      {"cooperlake", CG_GEMM_KERNEL_AVX512_BF16}, {"sapphirerapids", CG_GEMM_KERNEL_AVX512},
      /* the AMX family: by the name's amx flag (cg_target.c), never by the features */
      {"sapphirerapids-amx", CG_GEMM_KERNEL_AVX512},
  };
  char list[512] = "";
  for (size_t i = 0; i < sizeof named / sizeof named[0]; i++) {
    const cg_cpu_named *nc = cg_cpu_named_lookup(named[i].name);
    ck_assert_msg(nc != NULL, "%s: not a named CPU", named[i].name);
    cg_cpu_caps nk;
    cg_cpu_caps_parse(nc->features, &nk);
    ck_assert_msg(nk.gemm_kernel == named[i].kernel, "%s: kernel %d", named[i].name, (int)nk.gemm_kernel);
    snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? ", " : "", named[i].name);
  }
  ck_assert_str_eq(cg_cpu_named_list(), list);
  ck_assert(cg_cpu_named_lookup("x86-64-v5") == NULL && cg_cpu_named_lookup("") == NULL &&
            cg_cpu_named_lookup(NULL) == NULL);
  /* what a host lacks: whole names, the last mention winning on both sides */
  char miss[16];
  ck_assert(!cg_cpu_caps_missing("+sse2,+avx2", "+avx2,+fma,+sse2", miss, (int)sizeof miss));
  ck_assert(cg_cpu_caps_missing("+sse2,+avx512f", "+avx2,+avx512fp16,+sse2", miss, (int)sizeof miss));
  ck_assert_str_eq(miss, "avx512f");
  ck_assert(cg_cpu_caps_missing("+avx2", "+avx2,-avx2", miss, (int)sizeof miss));
  ck_assert_str_eq(miss, "avx2");
  ck_assert(!cg_cpu_caps_missing("+avx512f,-avx512f,-fma", "+sse2", miss, (int)sizeof miss));
  ck_assert(cg_cpu_caps_missing("+a-very-long-feature-name", "", miss, (int)sizeof miss));
  ck_assert_str_eq(miss, "a-very-long-fea"); /* truncated to the buffer */
  /* every field, from a host-style string (LLVM 19 on an AVX-512 machine) */
  cg_cpu_caps c;
  cg_cpu_caps_parse("+avx,-avx512fp16,+sse4.1,+avx2,+avx512vl,+sse,+avx512f,+avx512bf16,+avx512bw,+fma,"
                    "+f16c,+sse2,-avx10.1-512",
                    &c);
  ck_assert(c.sse2 && c.sse4_1 && c.avx && c.avx2 && c.fma && c.f16c);
  ck_assert(c.avx512f && c.avx512bw && c.avx512vl && c.avx512bf16 && !c.avx512fp16);
  ck_assert_int_eq(c.vector_f32_lanes, 16);
  ck_assert_int_eq(c.gemm_kernel, CG_GEMM_KERNEL_AVX512_BF16);
  /* the family by measured speed: vdpbf16ps where it wins (Zen 4), the
   * FMA family beside AMX (Sapphire Rapids), and only with avx512bw */
  static const struct { const char *features; cg_gemm_kernel kernel; } fam[] = {
      {"+avx512f,+avx512bw,+avx512bf16", CG_GEMM_KERNEL_AVX512_BF16},
      {"+avx512f,+avx512bw,+avx512bf16,+amx-tile,+amx-bf16", CG_GEMM_KERNEL_AVX512},
      {"+avx512f,+avx512bw,+avx512bf16,+amx-tile,-amx-bf16", CG_GEMM_KERNEL_AVX512_BF16},
      {"+avx512f,+avx512bf16", CG_GEMM_KERNEL_AVX512},
      {"+avx2,+avx512bw,+avx512bf16", CG_GEMM_KERNEL_AVX},
  };
  for (size_t i = 0; i < sizeof fam / sizeof fam[0]; i++) {
    cg_cpu_caps_parse(fam[i].features, &c);
    ck_assert_msg(c.gemm_kernel == fam[i].kernel, "'%s': kernel %s, want %s", fam[i].features,
                  cg_gemm_kernel_name(c.gemm_kernel), cg_gemm_kernel_name(fam[i].kernel));
  }
  ck_assert_str_eq(cg_gemm_kernel_name(CG_GEMM_KERNEL_AVX512_BF16), "avx512-bf16");
}
END_TEST

/* Choosing the CPU: a name castor does not know, and features this host
 * lacks, are clear errors before anything is compiled (not SIGILL). */
START_TEST(test_cpu_select) {
  gemm_case gc = {3, 5, 7, F32, EPI_NONE, false};
  ir_graph *g = build(&gc, 1);
  const char *env = getenv("CASTOR_CPU"); /* this suite's path (NAME@CPU entries), restored after */
  char *saved = env ? strdup(env) : NULL;
  static const struct { const char *cpu, *features, *env, *want; } cases[] = {
      {"i486", NULL, NULL, "error: unknown CPU 'i486' (known: host, "},
      {NULL, NULL, "i486", "error: unknown CPU 'i486' in CASTOR_CPU (known: host, "},
      {"x86-64", "+sse2,+nosuchfeature", NULL, "cannot run code for CPU 'x86-64': it lacks nosuchfeature\n"},
      {NULL, NULL, "x86-64", NULL},
      {"x86-64", NULL, "i486", NULL}, /* the options win */
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    if (cases[i].env) setenv("CASTOR_CPU", cases[i].env, 1);
    else unsetenv("CASTOR_CPU");
    cg_options co;
    cg_options_init(&co);
    co.cpu = cases[i].cpu, co.features = cases[i].features;
    diag_sink *d = diag_sink_create();
    rt_program *p = cg_compile_cpu(g, &co, d);
    if (!cases[i].want) {
      ck_assert_msg(p != NULL, "case %zu: %s", i, diag_text(d));
    } else {
      const char *t = diag_text(d);
      ck_assert_msg(p == NULL && (strncmp(t, cases[i].want, strlen(cases[i].want)) == 0 ||
                                  (strstr(t, cases[i].want) && strncmp(t, "error: this host (", 18) == 0)),
                    "case %zu: got '%s', want '%s'", i, t, cases[i].want);
      ck_assert_int_eq(diag_first_error_kind(d), DIAG_KIND_INVALID_ARGUMENT);
    }
    rt_program_destroy(p);
    diag_sink_destroy(d);
  }
  if (saved) setenv("CASTOR_CPU", saved, 1);
  else unsetenv("CASTOR_CPU");
  free(saved);
  ir_graph_destroy(g);
}
END_TEST

int main(void) {
  check_cpu_path("check_gemm");
  setenv("CASTOR_PARALLEL_MIN_WORK", "0", 1); /* split even the small cases over threads */
  Suite *s = suite_create("gemm");
  TCase *tc = tcase_create("gemm");
  tcase_set_timeout(tc, 300);
  tcase_add_loop_test(tc, test_shapes, 0, (int)(sizeof shapes / sizeof shapes[0]));
  tcase_add_test(tc, test_batches);
  tcase_add_test(tc, test_narrow_targets);
  tcase_add_test(tc, test_cpu_caps);
  tcase_add_test(tc, test_cpu_select);
  suite_add_tcase(s, tc);
  return check_run(s);
}
