/* SPDX-License-Identifier: Apache-2.0 */
/*
 * check_amx.c: the AMX-BF16 GEMM family (codegen/cpu/gemm/cg_gemm_amx.h)
 * on any x86-64 host: what can be checked without executing a tile
 * instruction.
 *
 * - the tile configuration's 64 bytes, field by field (Intel SDM: palette
 *   1, colsb of tiles 0..7 at bytes 16.., rows at 48..);
 * - the compile-time packing of a constant B against a scalar reference
 *   written from the layout's definition (element (k, n) of block, panel
 *   and pair), on K and N across every padding edge;
 * - the emitted code: each kind of bf16 contraction (forward matmul with a
 *   pre-packed or a per-call B, matmul_nt, matmul_tn over the run's batch)
 *   compiled ahead of time for sapphirerapids-amx verifies and contains
 *   ldtilecfg, tileloadd, tdpbf16ps, tilestored and tilerelease;
 * - the run-time packing (LLVM IR: cg_gemm_amx_pack_a, _pack_b) JIT-compiled
 *   alone, without a tile instruction, and run here: B from [K, Nc] and
 *   [Nc, K], a whole K and a later block, against the compile-time packer
 *   (the same layout); A row-major and from a stored [K, M] against the
 *   layout's definition, padding included;
 * - the fallback: naming the family where the tile state is refused (or
 *   AMX is absent, as on a host without it) compiles the FMA family, says
 *   why in the note that --stats prints, and its results match the
 *   float64 reference.
 *
 * Execution of the family itself is tested by check_gemm@sapphirerapids-amx,
 * check_train@ and check_optable@ (tests/CMakeLists.txt), which report
 * SKIPPED on a host that cannot run it.
 */
#include <check.h>
#include <llvm-c/Analysis.h>
#include <llvm-c/Core.h>
#include <llvm-c/LLJIT.h>
#include <llvm-c/Target.h>

#include "tests/unit/test_support.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "codegen/codegen.h"
#include "codegen/cpu/cg_cpu_caps.h"
#include "codegen/cpu/gemm/cg_gemm_amx.h"
#include "passes/passes.h"
#include "runtime/cpu_features.h"
#include "tests/ref/ref.h"
#include "util/half.h"

START_TEST(test_amx_config) {
  uint8_t b[64];
  cg_amx_config_bytes(b);
  ck_assert_int_eq(b[0], 1); /* palette 1 */
  ck_assert_int_eq(b[1], 0); /* start_row */
  for (int i = 2; i < 16; i++) ck_assert_int_eq(b[i], 0);
  for (int t = 0; t < 16; t++) {
    int colsb = b[16 + 2 * t] | b[17 + 2 * t] << 8, rows = b[48 + t];
    ck_assert_int_eq(colsb, t < 8 ? 64 : 0);
    ck_assert_int_eq(rows, t < 8 ? 16 : 0);
  }
}
END_TEST

/* The layout, element by element: where (k, n) of a B [K, Nc] lands. */
static int64_t packed_at(int64_t k, int64_t n, int64_t K, int64_t Nc, int panel, int tail, int64_t kc) {
  int64_t padded_w = (Nc / panel) * panel + tail;
  int64_t blk = k / kc, k0 = blk * kc, kk = K - k0 < kc ? K - k0 : kc;
  int64_t kp16 = (kk + 31) / 32 * 16;
  int64_t q = n / panel, width = q < Nc / panel ? panel : tail;
  int64_t base = k0 * padded_w /* whole blocks before: kc x padded width each (kc a multiple of 32) */
                 + q * kp16 * 2 * panel;
  int64_t j = (k - k0) / 2, h = (k - k0) % 2;
  return base + j * 2 * width + 2 * (n - q * panel) + h;
}

START_TEST(test_amx_pack_const) {
  static const struct { int64_t K, Nc; int panel, tail; int64_t kc; } cases[] = {
      {1, 1, 32, 16, 512},     {3, 5, 32, 16, 512},    {31, 16, 32, 16, 512}, {32, 32, 32, 0, 512},
      {33, 47, 32, 16, 512},   {64, 65, 32, 16, 512},  {600, 33, 32, 16, 512}, {1025, 70, 32, 32, 512},
      {96, 40, 32, 16, 32},    {7, 8, 16, 16, 32},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    int64_t K = cases[c].K, Nc = cases[c].Nc, kc = cases[c].kc;
    int panel = cases[c].panel, tail = cases[c].tail;
    if (Nc % panel == 0) tail = 0;
    int64_t bytes = cg_gemm_amx_const_bytes(K, Nc, panel, tail);
    int64_t padded_w = (Nc / panel) * panel + tail;
    ck_assert_int_eq(bytes, (K + 31) / 32 * 32 * padded_w * 2);
    uint16_t *src = malloc((size_t)(K * Nc) * 2), *dst = malloc((size_t)bytes);
    char *seen = calloc((size_t)bytes / 2, 1);
    for (int64_t i = 0; i < K * Nc; i++) src[i] = (uint16_t)(0x3f80 + (i % 4093) + 1); /* nonzero */
    memset(dst, 0xa5, (size_t)bytes);
    cg_gemm_amx_pack_const(dst, src, K, Nc, panel, tail, kc);
    for (int64_t k = 0; k < K; k++)
      for (int64_t n = 0; n < Nc; n++) {
        int64_t at = packed_at(k, n, K, Nc, panel, tail, kc);
        ck_assert_msg(at >= 0 && at < bytes / 2, "case %zu: (%lld, %lld) at %lld", c, (long long)k, (long long)n,
                      (long long)at);
        ck_assert_msg(dst[at] == src[k * Nc + n], "case %zu: B[%lld, %lld] at %lld: %04x, want %04x", c,
                      (long long)k, (long long)n, (long long)at, dst[at], src[k * Nc + n]);
        ck_assert_msg(!seen[at], "case %zu: two elements at %lld", c, (long long)at);
        seen[at] = 1;
      }
    for (int64_t i = 0; i < bytes / 2; i++) /* padding: past K (to 32) and past Nc (to the panel) */
      ck_assert_msg(seen[i] || dst[i] == 0, "case %zu: padding at %lld is %04x", c, (long long)i, dst[i]);
    free(src), free(dst), free(seen);
  }
}
END_TEST

/* ---- the emitted code ---- */

static ir_node *bf16_const(ir_graph *g, const char *name, int64_t r, int64_t c, rng *rg) {
  uint16_t *h = arena_alloc(g->arena, (size_t)(r * c) * sizeof *h);
  for (int64_t i = 0; i < r * c; i++) h[i] = half_f32_to_bf16(rng_uniform_f32(rg, -1.0f, 1.0f));
  return ir_build_const(g, name, &(ir_type){DT_BF16, 2, {r, c}}, name, h, (diag_loc){0});
}

/* One bf16 contraction: 0 matmul (B constant), 1 matmul (B computed: packed
 * per call), 2 matmul_nt (B [Nc, K] constant), 3 matmul_tn (sums over the
 * batch). */
static ir_graph *contraction(int kind, int64_t k, int64_t n) {
  ir_graph *g = ir_graph_create("amx");
  rng r;
  rng_init(&r, 7 + (uint64_t)kind);
  diag_loc loc = {0};
  ir_node *x = ir_build_input(g, "x", &(ir_type){DT_F32, 2, {IR_DIM_BATCH, k}}, 0, loc);
  ir_node *a = ir_build_cast(g, "x.bf16", x, DT_BF16, loc), *y;
  const ir_attr acc = {.acc = DT_F32};
  if (kind == 0) {
    y = ir_build_matmul(g, "mm", a, bf16_const(g, "w", k, n, &r), DT_F32, loc);
  } else if (kind == 1) {
    ir_node *w = ir_build_unary(g, IR_OP_RELU, "w.relu", bf16_const(g, "w", k, n, &r), loc);
    y = ir_build_matmul(g, "mm", a, w, DT_F32, loc);
  } else if (kind == 2) {
    y = ir_build_op(g, IR_OP_MATMUL_NT, "mm", (ir_node *[]){a, bf16_const(g, "w", n, k, &r)}, 2, &acc, loc);
  } else {
    ir_node *dy = ir_build_input(g, "dy", &(ir_type){DT_F32, 2, {IR_DIM_BATCH, n}}, 1, loc);
    ir_node *b = ir_build_cast(g, "dy.bf16", dy, DT_BF16, loc);
    y = ir_build_op(g, IR_OP_MATMUL_TN, "mm", (ir_node *[]){a, b}, 2, &acc, loc);
  }
  if (y->type.dtype != DT_F32) y = ir_build_cast(g, "y.f32", y, DT_F32, loc);
  ir_graph_add_output(g, "y", y);
  ir_graph_renumber(g);
  return g;
}

static char *read_all(const char *path) {
  FILE *f = fopen(path, "rb");
  ck_assert_msg(f != NULL, "%s", path);
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *s = malloc((size_t)n + 1);
  ck_assert_int_eq(fread(s, 1, (size_t)n, f), (size_t)n);
  s[n] = '\0';
  fclose(f);
  return s;
}

static int count(const char *s, const char *what) {
  int n = 0;
  for (const char *p = s; (p = strstr(p, what)); p += strlen(what)) n++;
  return n;
}

START_TEST(test_amx_emit) {
  /* K across the tile step and the K block; N across the panel and its 16-column half */
  static const struct { int kind; int64_t k, n; } cases[] = {
      {0, 3, 5}, {0, 600, 47}, {0, 64, 64}, {1, 33, 40}, {2, 1025, 70}, {3, 37, 33},
  };
  char path[] = "/tmp/check_amx_XXXXXX";
  int fd = mkstemp(path);
  ck_assert(fd >= 0);
  close(fd);
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    ir_graph *g = contraction(cases[i].kind, cases[i].k, cases[i].n);
    diag_sink *d = diag_sink_create();
    ck_assert_msg(pass_run_pipeline(g, "verify,dce", NULL, d), "case %zu: %s", i, diag_text(d));
    cg_options o;
    cg_options_init(&o);
    o.cpu = "sapphirerapids-amx";
    cg_aot_options ao;
    cg_aot_options_init(&ao);
    ao.prefix = "amx";
    /* the LLVM IR (verified on the way: cg_target_emit_module), then the machine code */
    ck_assert_msg(cg_compile_aot(g, &o, &ao, CG_AOT_LLVM, path, d), "case %zu: %s", i, diag_text(d));
    char *ll = read_all(path);
    ck_assert_msg(strstr(ll, "@llvm.x86.tdpbf16ps(i8 0, i8 4, i8 6)") && strstr(ll, "@llvm.x86.ldtilecfg"),
                  "case %zu: no AMX intrinsics in the LLVM IR", i);
    free(ll);
    ck_assert_msg(cg_compile_aot(g, &o, &ao, CG_AOT_ASM, path, d), "case %zu: %s", i, diag_text(d));
    char *s = read_all(path);
    static const char *const insns[] = {"ldtilecfg", "tileloadd", "tdpbf16ps", "tilestored", "tilerelease", "tilezero"};
    for (size_t j = 0; j < sizeof insns / sizeof insns[0]; j++)
      ck_assert_msg(count(s, insns[j]) >= 1, "case %zu (kind %d, K %lld, N %lld): no %s", i, cases[i].kind,
                    (long long)cases[i].k, (long long)cases[i].n, insns[j]);
    ck_assert_msg(strstr(s, "tdpbf16ps\t%tmm6, %tmm4, %tmm0"), "case %zu: C00 += A0 B0 missing", i);
    ck_assert_msg(!strstr(s, "vdpbf16ps"), "case %zu: the K-pair family's instruction in the AMX code", i);
    free(s);
    diag_sink_destroy(d);
    ir_graph_destroy(g);
  }
  /* the FMA family for the same CPU without AMX: no tile instruction */
  ir_graph *g = contraction(0, 64, 64);
  diag_sink *d = diag_sink_create();
  cg_options o;
  cg_options_init(&o);
  o.cpu = "sapphirerapids";
  cg_aot_options ao;
  cg_aot_options_init(&ao);
  ao.prefix = "amx";
  ck_assert_msg(cg_compile_aot(g, &o, &ao, CG_AOT_ASM, path, d), "%s", diag_text(d));
  char *s = read_all(path);
  ck_assert(!strstr(s, "tdpbf16ps") && !strstr(s, "ldtilecfg"));
  free(s);
  diag_sink_destroy(d);
  ir_graph_destroy(g);
  unlink(path);
}
END_TEST


/* ---- the run-time packers, JIT-compiled alone ---- */

enum { PK = 75, PNC = 47, PNR = 32, PM = 37, PLDA = 64 }; /* K, B's columns, panel, A's rows, A's row stride (pairs) */

/* void pack(ptr b_kn, ptr b_nk, ptr a_mk, ptr a_km, ptr out_b, ptr out_bt, ptr out_a, ptr out_at, i64 k0, i64 kk) */
typedef void (*pack_fn)(const uint16_t *, const uint16_t *, const uint16_t *, const uint16_t *, uint16_t *, uint16_t *,
                        uint32_t *, uint32_t *, int64_t, int64_t);

static void emit_pack_fn(cg_emitter *e, cg_kctx *c) {
  LLVMTypeRef params[10];
  for (int i = 0; i < 8; i++) params[i] = e->ptr;
  params[8] = params[9] = e->i64;
  LLVMTypeRef ft = LLVMFunctionType(LLVMVoidTypeInContext(e->ctx), params, 10, 0);
  c->fn = LLVMAddFunction(e->mod, "pack", ft);
  LLVMPositionBuilderAtEnd(e->b, LLVMAppendBasicBlockInContext(e->ctx, c->fn, "entry"));
  LLVMValueRef k0 = LLVMGetParam(c->fn, 8), kk = LLVMGetParam(c->fn, 9), p0 = cg_i64(e, 0),
               p1 = cg_i64(e, (PNC + PNR - 1) / PNR);
  LLVMValueRef b_kn = LLVMGetParam(c->fn, 0), b_nk = LLVMGetParam(c->fn, 1);
  cg_gemm_amx_pack_b(c, b_kn, false, PK, PNC, PNR, LLVMGetParam(c->fn, 4), p0, p1, k0, kk);
  cg_gemm_amx_pack_b(c, b_nk, true, PK, PNC, PNR, LLVMGetParam(c->fn, 5), p0, p1, k0, kk);
  /* A's block starts at column k0 (row-major) or row k0 (stored [K, M]) */
  LLVMTypeRef h = LLVMInt16TypeInContext(e->ctx);
  LLVMValueRef at = LLVMBuildGEP2(e->b, h, LLVMGetParam(c->fn, 3), (LLVMValueRef[]){LLVMBuildMul(e->b, k0, cg_i64(e, PM), "")}, 1, "");
  cg_gemm_amx_pack_a(c, LLVMGetParam(c->fn, 2), PK, false, cg_i64(e, PM), k0, kk, LLVMGetParam(c->fn, 6), PLDA);
  cg_gemm_amx_pack_a(c, at, PM, true, cg_i64(e, PM), cg_i64(e, 0), kk, LLVMGetParam(c->fn, 7), PLDA);
  LLVMBuildRetVoid(e->b);
}

START_TEST(test_amx_pack_runtime) {
  LLVMInitializeNativeTarget();
  LLVMInitializeNativeAsmPrinter();
  LLVMOrcThreadSafeContextRef tsc = LLVMOrcCreateNewThreadSafeContext();
  LLVMContextRef ctx = LLVMOrcThreadSafeContextGetContext(tsc);
  LLVMModuleRef mod = LLVMModuleCreateWithNameInContext("amxpack", ctx);
  cg_emitter e;
  cg_emitter_init(&e, ctx, mod, 16);
  cg_kctx c = {.e = &e};
  emit_pack_fn(&e, &c);
  char *msg = NULL;
  ck_assert_msg(!LLVMVerifyModule(mod, LLVMReturnStatusAction, &msg), "%s", msg);
  LLVMDisposeMessage(msg);
  cg_emitter_fini(&e);
  LLVMOrcLLJITRef jit;
  ck_assert(!LLVMOrcCreateLLJIT(&jit, LLVMOrcCreateLLJITBuilder()));
  ck_assert(!LLVMOrcLLJITAddLLVMIRModule(jit, LLVMOrcLLJITGetMainJITDylib(jit), LLVMOrcCreateNewThreadSafeModule(mod, tsc)));
  LLVMOrcExecutorAddress addr = 0;
  ck_assert(!LLVMOrcLLJITLookup(jit, &addr, "pack"));
  pack_fn pack = (pack_fn)(uintptr_t)addr;

  static uint16_t b_kn[PK * PNC], b_nk[PNC * PK], a_mk[PM * PK], a_km[PK * PM];
  for (int k = 0; k < PK; k++)
    for (int n = 0; n < PNC; n++) b_kn[k * PNC + n] = b_nk[n * PK + k] = (uint16_t)(1 + k * 131 + n);
  for (int r = 0; r < PM; r++)
    for (int k = 0; k < PK; k++) a_mk[r * PK + k] = a_km[k * PM + r] = (uint16_t)(0x4000 + r * 97 + k);
  static const int64_t blocks[][2] = {{0, PK}, {32, PK - 32}, {64, PK - 64}}; /* k0, kk */
  int np = (PNC + PNR - 1) / PNR;
  for (size_t bi = 0; bi < sizeof blocks / sizeof blocks[0]; bi++) {
    int64_t k0 = blocks[bi][0], kk = blocks[bi][1], kp16 = (kk + 31) / 32 * 16;
    size_t bn = (size_t)(kp16 * 2 * np * PNR), an = (size_t)(PM + 1) * PLDA;
    uint16_t *ob = malloc(bn * 2), *obt = malloc(bn * 2), *want = malloc(bn * 2);
    uint32_t *oa = malloc(an * 4), *oat = malloc(an * 4);
    memset(ob, 0xa5, bn * 2), memset(obt, 0xa5, bn * 2), memset(oa, 0xa5, an * 4), memset(oat, 0xa5, an * 4);
    pack(b_kn, b_nk, a_mk, a_km, ob, obt, oa, oat, k0, kk);
    /* B: the compile-time packer's layout on rows [k0, k0 + kk), every panel nr wide */
    cg_gemm_amx_pack_const(want, b_kn + k0 * PNC, kk, PNC, PNR, PNC % PNR ? PNR : 0, kp16 * 2);
    for (size_t i = 0; i < bn; i++) {
      ck_assert_msg(ob[i] == want[i], "block %zu: packed B [K, Nc] at %zu: %04x, want %04x", bi, i, ob[i], want[i]);
      ck_assert_msg(obt[i] == want[i], "block %zu: packed B [Nc, K] at %zu: %04x, want %04x", bi, i, obt[i], want[i]);
    }
    /* A: pair j of row r at [r lda + j], zero past kk up to kp16 pairs */
    for (int r = 0; r < PM; r++)
      for (int64_t j = 0; j < kp16; j++) {
        int64_t k = k0 + 2 * j;
        uint32_t lo = 2 * j < kk ? a_mk[r * PK + k] : 0, hi = 2 * j + 1 < kk ? a_mk[r * PK + k + 1] : 0;
        uint32_t w = lo | hi << 16;
        ck_assert_msg(oa[r * PLDA + j] == w, "block %zu: A row %d pair %lld: %08x, want %08x", bi, r, (long long)j,
                      oa[r * PLDA + j], w);
        ck_assert_msg(oat[r * PLDA + j] == w, "block %zu: A^T row %d pair %lld: %08x, want %08x", bi, r,
                      (long long)j, oat[r * PLDA + j], w);
      }
    for (size_t i = (size_t)PM * PLDA; i < an; i++) /* rows past m: untouched */
      ck_assert(oa[i] == 0xa5a5a5a5u && oat[i] == 0xa5a5a5a5u);
    free(ob), free(obt), free(want), free(oa), free(oat);
  }
  LLVMOrcDisposeLLJIT(jit);
  LLVMOrcDisposeThreadSafeContext(tsc); /* the module went to the JIT; the context is ours */
}
END_TEST

/* ---- the fallback ---- */

START_TEST(test_amx_fallback) {
  char why[160] = "";
  bool granted = rt_amx_request(why, sizeof why);
  cg_options o;
  cg_options_init(&o);
  o.cpu = "sapphirerapids-amx";
  str_buf line, note;
  str_buf_init(&line), str_buf_init(&note);
  diag_sink *d = diag_sink_create();
  bool ok = cg_cpu_describe(&o, &line, d);
  cg_cpu_note(&o, &note);
  if (granted) { /* an AMX host that grants the tile state: the family itself, no note */
    ck_assert_msg(ok && strstr(str_buf_cstr(&line), "GEMM kernel amx-bf16"), "%s%s", str_buf_cstr(&line), diag_text(d));
    ck_assert_str_eq(str_buf_cstr(&note), "");
  } else if (!ok) { /* no AVX-512 + BF16 either: the fallback cannot run here */
    ck_assert_msg(strstr(diag_text(d), "cannot run code for CPU 'sapphirerapids-amx'") &&
                      !strstr(diag_text(d), "lacks amx"),
                  "%s", diag_text(d));
  } else {
    ck_assert_msg(strstr(str_buf_cstr(&line), "GEMM kernel avx512,"), "%s", str_buf_cstr(&line));
    ck_assert_msg(strlen(why) > 0 && strstr(str_buf_cstr(&note), why), "note '%s', why '%s'", str_buf_cstr(&note), why);
    ck_assert_msg(strstr(str_buf_cstr(&note), "GEMM family amx-bf16 (CPU sapphirerapids-amx) not used: ") &&
                      strstr(str_buf_cstr(&note), "the FMA family avx512 runs instead"),
                  "%s", str_buf_cstr(&note));
    /* and the fallback computes: forward GEMMs against the float64 reference */
    for (int kind = 0; kind < 3; kind++) {
      ir_graph *g = contraction(kind, 70, 37);
      ck_assert_msg(pass_run_pipeline(g, "verify,dce", NULL, d), "%s", diag_text(d));
      rt_program *p = cg_compile_cpu(g, &o, d);
      ck_assert_msg(p != NULL, "%s", diag_text(d));
      enum { M = 45 };
      float x[M * 70], y[M * 37];
      rng r;
      rng_init(&r, 99);
      for (int i = 0; i < M * 70; i++) x[i] = rng_uniform_f32(&r, -1.0f, 1.0f);
      const void *in[] = {x};
      void *out[] = {y};
      ck_assert_msg(rt_program_run_threads(p, 2, M, in, out, NULL, d), "%s", diag_text(d));
      double *x64 = ref_from_f32(x, M * 70), *want[1];
      char err[256], buf[256];
      ck_assert_msg(ref_run(g, M, (const double *const *)&x64, want, err, sizeof err), "%s", err);
      ref_cmp c = ref_compare_normalized(y, want[0], M * 37);
      ck_assert_msg(c.error < 1e-5, "kind %d: %s", kind, ref_cmp_str(&c, buf, sizeof buf));
      ref_outputs_free(want, 1);
      free(x64);
      rt_program_destroy(p);
      ir_graph_destroy(g);
    }
  }
  /* the answer is the process's: asked once */
  char why2[160] = "";
  ck_assert(rt_amx_request(why2, sizeof why2) == granted);
  ck_assert_str_eq(why2, why);
  str_buf_fini(&line), str_buf_fini(&note);
  diag_sink_destroy(d);
}
END_TEST


/* `castor run --stats` names the fallback and its reason: CASTOR_AMX_DENY=1
 * refuses the tile state on any host, AMX or not. */
START_TEST(test_amx_stats_note) {
  const char *cmd = "CASTOR_AMX_DENY=1 " CASTOR_BINARY_DIR "/castor run " CASTOR_SOURCE_DIR
                    "/samples/mnist_mlp_small.cast --policy mixed_bfloat16 --cpu=sapphirerapids-amx --stats 2>&1";
  FILE *f = popen(cmd, "r");
  ck_assert(f != NULL);
  char out[8192];
  size_t n = fread(out, 1, sizeof out - 1, f);
  out[n] = '\0';
  int rc = pclose(f);
  if (strstr(out, "cannot run code for CPU 'sapphirerapids-amx'")) { /* no AVX-512 + BF16: no fallback here */
    ck_assert_msg(rc != 0 && !strstr(out, "lacks amx"), "%s", out);
    return;
  }
  ck_assert_msg(rc == 0, "%s", out);
  ck_assert_msg(strstr(out, "\nnote: GEMM family amx-bf16 (CPU sapphirerapids-amx) not used: the tile state request was "
                            "refused on purpose (CASTOR_AMX_DENY=1); the FMA family avx512 runs instead\n"),
                "%s", out);
  /* without the AMX name, no note */
  f = popen(CASTOR_BINARY_DIR "/castor run " CASTOR_SOURCE_DIR "/samples/mnist_mlp_small.cast --stats 2>&1", "r");
  ck_assert(f != NULL);
  n = fread(out, 1, sizeof out - 1, f);
  out[n] = '\0';
  ck_assert_msg(pclose(f) == 0 && strstr(out, "memory: ") && !strstr(out, "note: "), "%s", out);
}
END_TEST

int main(void) {
#if !defined(__x86_64__)
  fputs("check_amx: skipped: AMX is an x86-64 extension, and this host is not x86-64\n", stderr);
  return 77;
#endif
  Suite *s = suite_create("amx");
  TCase *tc = tcase_create("amx");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_amx_config);
  tcase_add_test(tc, test_amx_pack_const);
  tcase_add_test(tc, test_amx_emit);
  tcase_add_test(tc, test_amx_pack_runtime);
  tcase_add_test(tc, test_amx_fallback);
  tcase_add_test(tc, test_amx_stats_note);
  suite_add_tcase(s, tc);
  return check_run(s);
}
