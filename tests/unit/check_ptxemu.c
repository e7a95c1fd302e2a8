/* SPDX-License-Identifier: Apache-2.0 */
/*
 * check_ptxemu.c: the PTX emulator's own tests (tests/ptxemu).
 *
 * 1. Numerics from the standards: f16/bf16 rounding (ties to even,
 *    subnormals, overflow, NaN) on chosen values, every f16 value round
 *    trips, and agreement with castor's util/half.c on 200000 random
 *    floats (two independent implementations; a disagreement is a bug in
 *    one of them).
 * 2. Hand-written PTX for the instructions whose layouts matter, checked
 *    against the PTX ISA's fragment tables written here as inverse maps
 *    (element -> lane, register, half), not as the emulator computes them:
 *    mma.sync m16n8k16 (f16, bf16), ldmatrix x1/x2/x4 with and without
 *    .trans, shfl.sync bfly/up/down/idx after a divergent branch, cvt's
 *    saturation and rounding, ex2.approx within the ISA's 2 ulp.
 * 3. The checks must fire: cp.async data read before its wait_group, a
 *    read of another warp's write without bar.sync (in every order),
 *    out-of-bounds global and shared accesses, a shfl.sync reached by half
 *    a warp, an instruction the emulator does not implement (refused with
 *    its line), a runaway loop; damaged PTX is refused with a line, never
 *    a crash.
 * 4. Mutated castor kernels must fail: castor's own PTX for a
 *    tensor-core and an FMA GEMM, run through the runtime (runtime/cuda.c
 *    over libcastor_ptxemu.so), first unmodified (it must pass: else the
 *    mutations prove nothing), then with each bar.sync removed, a wrong
 *    cp.async.wait_group, a commit_group missing from the pipeline's
 *    prologue, ldmatrix's .trans removed or added, and bf16
 *    fragments fed to an f16 mma. Each must end in a failed launch or in
 *    results outside the bound.
 */
#include <check.h>

#include "tests/unit/test_support.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/codegen.h"
#include "frontend/frontend.h"
#include "passes/passes.h"
#include "ptxemu.h"
#include "tests/ref/ref.h"
#include "util/half.h"

/* ---- 1. numerics ---- */

static float f32_bits(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

START_TEST(test_f16_rounding) {
  static const struct { float x; uint16_t want; } cases[] = {
      {1.0f, 0x3c00},
      {1.0f + 0x1p-11f, 0x3c00},         /* tie: to even (down) */
      {1.0f + 3 * 0x1p-11f, 0x3c02},     /* tie: to even (up) */
      {1.0f + 0x1p-11f + 0x1p-20f, 0x3c01}, /* above the tie */
      {65504.0f, 0x7bff},
      {65519.0f, 0x7bff},
      {65520.0f, 0x7c00},                 /* tie between 65504 and 2^16: even is infinity */
      {-65520.0f, 0xfc00},
      {0x1p-24f, 0x0001},                 /* smallest subnormal */
      {0x1p-25f, 0x0000},                 /* tie: to even zero */
      {3 * 0x1p-25f, 0x0002},             /* 1.5 units: to even 2 */
      {0x1p-14f, 0x0400},                 /* smallest normal */
      {0x1p-14f - 0x1p-25f, 0x0400},      /* rounds up into the normals */
      {-0.0f, 0x8000},
      {1e-10f, 0x0000},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    ck_assert_msg(pe_f32_to_f16_rn(cases[i].x) == cases[i].want, "f16(%a) = %#x, want %#x", (double)cases[i].x,
                  pe_f32_to_f16_rn(cases[i].x), cases[i].want);
  ck_assert_uint_eq(pe_f32_to_f16_rn(NAN), 0x7fff);
  for (uint32_t h = 0; h < 0x10000; h++) {
    bool nan = (h & 0x7c00) == 0x7c00 && (h & 0x3ff);
    uint16_t back = pe_f32_to_f16_rn(pe_f16_to_f32((uint16_t)h));
    ck_assert_msg(nan ? back == 0x7fff : back == h, "f16 %#x round trips to %#x", h, back);
  }
}
END_TEST

START_TEST(test_bf16_rounding) {
  static const struct { float x; uint16_t want; } cases[] = {
      {1.0f, 0x3f80},
      {1.0f + 0x1p-8f, 0x3f80},     /* tie: to even */
      {1.0f + 3 * 0x1p-8f, 0x3f82}, /* tie: to even (up) */
      {0x1p-133f, 0x0001},          /* smallest subnormal */
      {0x1p-134f, 0x0000},          /* tie: to even zero */
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    ck_assert_msg(pe_f32_to_bf16_rn(cases[i].x) == cases[i].want, "bf16(%a) = %#x, want %#x", (double)cases[i].x,
                  pe_f32_to_bf16_rn(cases[i].x), cases[i].want);
  ck_assert_uint_eq(pe_f32_to_bf16_rn(f32_bits(0x7f7fffffu)), 0x7f80); /* FLT_MAX rounds to infinity */
  ck_assert_uint_eq(pe_f32_to_bf16_rn(NAN), 0x7fff);
}
END_TEST

START_TEST(test_half_agrees_with_util) {
  uint64_t s = 88172645463325252u;
  for (int i = 0; i < 200000; i++) {
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    uint32_t u = (uint32_t)s;
    if (i % 2) u = (u & 0x8fffffffu) | 0x30000000u; /* mostly f16's range */
    float f = f32_bits(u);
    if (isnan(f)) continue;
    ck_assert_msg(pe_f32_to_f16_rn(f) == half_f32_to_f16(f), "%a: ptxemu %#x, util %#x", (double)f,
                  pe_f32_to_f16_rn(f), half_f32_to_f16(f));
    ck_assert_msg(pe_f32_to_bf16_rn(f) == half_f32_to_bf16(f), "%a: ptxemu %#x, util %#x", (double)f,
                  pe_f32_to_bf16_rn(f), half_f32_to_bf16(f));
  }
}
END_TEST

/* ptx with occurrence `which` (0-based) of `from` replaced by `to`;
 * NULL when there are not that many. */
static char *replace_nth(const char *ptx, const char *from, const char *to, int which) {
  const char *at = ptx;
  for (int i = 0; at; i++) {
    at = strstr(at, from);
    if (!at) return NULL;
    if (i == which) break;
    at += strlen(from);
  }
  size_t n = strlen(ptx) + strlen(to) + 1;
  char *s = malloc(n);
  snprintf(s, n, "%.*s%s%s", (int)(at - ptx), ptx, to, at + strlen(from));
  return s;
}

/* ---- running hand-written PTX ---- */

typedef struct emu {
  pe_memory *mem;
  pe_module *mod;
  char err[2048];
} emu;

static void emu_load(emu *e, const char *ptx) {
  e->mem = pe_memory_create();
  e->mod = pe_module_load(ptx, e->err, sizeof e->err);
  ck_assert_msg(e->mod != NULL, "load: %s", e->err);
}

static void emu_fini(emu *e) {
  pe_module_destroy(e->mod);
  pe_memory_destroy(e->mem);
}

static uint64_t emu_buf(emu *e, const void *data, size_t n) {
  uint64_t a = pe_alloc(e->mem, n);
  ck_assert(a != 0);
  if (data) ck_assert(pe_write(e->mem, a, data, n));
  return a;
}

/* Launches kernel 0 with u64 params; returns whether it succeeded. */
static bool emu_run(emu *e, unsigned grid, unsigned block, unsigned smem, const uint64_t *params, int n,
                    pe_order order, pe_landing landing) {
  void *pp[8];
  for (int i = 0; i < n; i++) pp[i] = (void *)&params[i];
  pe_options o = {.order = order, .landing = landing};
  unsigned g[3] = {grid, 1, 1}, b[3] = {block, 1, 1};
  return pe_launch(e->mem, e->mod, 0, g, b, smem, pp, &o, e->err, sizeof e->err);
}

#define BAR "bar.sync \t0;" /* as LLVM prints it */
#define HEAD ".version 7.0\n.target sm_80\n.address_size 64\n"

/* ---- 2. layouts and semantics ---- */

static const char *mma_ptx =
    HEAD ".visible .entry mma_test(\n .param .u64 pa,\n .param .u64 pb,\n .param .u64 pd\n)\n{\n"
    " .reg .b32 %r<16>;\n .reg .f32 %f<8>;\n .reg .b64 %rd<16>;\n"
    " ld.param.u64 %rd1, [pa];\n ld.param.u64 %rd2, [pb];\n ld.param.u64 %rd3, [pd];\n"
    " mov.u32 %r1, %laneid;\n mul.wide.u32 %rd4, %r1, 16;\n add.s64 %rd5, %rd1, %rd4;\n"
    " ld.global.v4.b32 {%r2, %r3, %r4, %r5}, [%rd5];\n mul.wide.u32 %rd6, %r1, 8;\n add.s64 %rd7, %rd2, %rd6;\n"
    " ld.global.v2.b32 {%r6, %r7}, [%rd7];\n mov.f32 %f1, 0f3F000000;\n"
    " mma.sync.aligned.m16n8k16.row.col.f32.TYPE.TYPE.f32\n  {%f2, %f3, %f4, %f5},\n  {%r2, %r3, %r4, %r5},\n"
    "  {%r6, %r7},\n  {%f1, %f1, %f1, %f1};\n"
    " add.s64 %rd8, %rd3, %rd4;\n st.global.v4.f32 [%rd8], {%f2, %f3, %f4, %f5};\n ret;\n}\n";

START_TEST(test_mma_layout) {
  bool bf = _i == 1;
  char *p1 = replace_nth(mma_ptx, "TYPE", bf ? "bf16" : "f16", 0), *ptx = replace_nth(p1, "TYPE", bf ? "bf16" : "f16", 0);
  emu e;
  emu_load(&e, ptx);
  free(p1), free(ptx);
  float A[16][16], Bm[16][8];
  uint16_t afrag[32][8], bfrag[32][4];
  for (int r = 0; r < 16; r++)
    for (int k = 0; k < 16; k++) {
      A[r][k] = (float)((r * 7 + k * 3) % 17 - 8) / 8;
      /* the ISA's A table, inverted: (row, col) -> lane g*4 + tg, register, half */
      int lane = (r % 8) * 4 + (k % 8) / 2, reg = (r >= 8) + 2 * (k >= 8), half = k % 2;
      afrag[lane][reg * 2 + half] = bf ? half_f32_to_bf16(A[r][k]) : half_f32_to_f16(A[r][k]);
    }
  for (int k = 0; k < 16; k++)
    for (int n = 0; n < 8; n++) {
      Bm[k][n] = (float)((k * 5 + n * 11) % 13 - 6) / 4;
      int lane = n * 4 + (k % 8) / 2, reg = k >= 8, half = k % 2; /* B: col = groupID */
      bfrag[lane][reg * 2 + half] = bf ? half_f32_to_bf16(Bm[k][n]) : half_f32_to_f16(Bm[k][n]);
    }
  uint64_t pa = emu_buf(&e, afrag, sizeof afrag), pb = emu_buf(&e, bfrag, sizeof bfrag), pd = emu_buf(&e, NULL, 32 * 16);
  uint64_t params[] = {pa, pb, pd};
  ck_assert_msg(emu_run(&e, 1, 32, 0, params, 3, PE_ORDER_FORWARD, PE_LAND_LATE), "%s", e.err);
  float D[32][4];
  ck_assert(pe_read(e.mem, D, pd, sizeof D));
  for (int r = 0; r < 16; r++)
    for (int n = 0; n < 8; n++) {
      double want = 0.5;
      for (int k = 0; k < 16; k++) want += (double)A[r][k] * Bm[k][n];
      int lane = (r % 8) * 4 + n / 2, reg = 2 * (r >= 8) + n % 2;
      ck_assert_msg(D[lane][reg] == (float)want, "%s D[%d][%d] = %g, want %g", bf ? "bf16" : "f16", r, n,
                    (double)D[lane][reg], want);
    }
  emu_fini(&e);
}
END_TEST

static const char *ldm_ptx =
    HEAD ".extern .shared .align 16 .b8 smem[];\n"
    ".visible .entry ldm(\n .param .u64 pm,\n .param .u64 po\n)\n{\n"
    " .reg .b32 %r<24>;\n .reg .b64 %rd<16>;\n"
    " ld.param.u64 %rd1, [pm];\n ld.param.u64 %rd2, [po];\n mov.u32 %r1, %laneid;\n"
    " mul.wide.u32 %rd4, %r1, 16;\n add.s64 %rd5, %rd1, %rd4;\n ld.global.v4.b32 {%r2, %r3, %r4, %r5}, [%rd5];\n"
    " mov.u64 %rd6, smem;\n add.s64 %rd7, %rd6, %rd4;\n st.shared.v4.b32 [%rd7], {%r2, %r3, %r4, %r5};\n"
    " bar.sync 0;\n"
    " ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%r6, %r7, %r8, %r9}, [%rd7];\n"
    " ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%r10, %r11, %r12, %r13}, [%rd7];\n"
    " ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%r14, %r15}, [%rd7];\n"
    " ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16 {%r16}, [%rd7];\n"
    " mul.wide.u32 %rd8, %r1, 64;\n add.s64 %rd9, %rd2, %rd8;\n"
    " st.global.v4.b32 [%rd9], {%r6, %r7, %r8, %r9};\n st.global.v4.b32 [%rd9+16], {%r10, %r11, %r12, %r13};\n"
    " st.global.v2.b32 [%rd9+32], {%r14, %r15};\n st.global.b32 [%rd9+40], %r16;\n ret;\n}\n";

START_TEST(test_ldmatrix_layout) {
  emu e;
  emu_load(&e, ldm_ptx);
  uint16_t M[4][8][8]; /* matrix i, row r (lane 8i + r's address), column */
  for (int i = 0; i < 4; i++)
    for (int r = 0; r < 8; r++)
      for (int c = 0; c < 8; c++) M[i][r][c] = (uint16_t)(i * 1000 + r * 10 + c);
  uint64_t pm = emu_buf(&e, M, sizeof M), po = emu_buf(&e, NULL, 32 * 64);
  uint64_t params[] = {pm, po};
  ck_assert_msg(emu_run(&e, 1, 32, 512, params, 2, PE_ORDER_FORWARD, PE_LAND_LATE), "%s", e.err);
  uint32_t out[32][16];
  ck_assert(pe_read(e.mem, out, po, sizeof out));
  for (int t = 0; t < 32; t++)
    for (int i = 0; i < 4; i++) {
      /* ISA: thread t holds row t/4, columns 2(t%4), 2(t%4)+1; .trans: the transposed matrix */
      uint32_t want = M[i][t / 4][2 * (t % 4)] | (uint32_t)M[i][t / 4][2 * (t % 4) + 1] << 16;
      uint32_t want_t = M[i][2 * (t % 4)][t / 4] | (uint32_t)M[i][2 * (t % 4) + 1][t / 4] << 16;
      ck_assert_msg(out[t][i] == want, "x4 lane %d reg %d: %#x, want %#x", t, i, out[t][i], want);
      ck_assert_msg(out[t][4 + i] == want_t, "x4.trans lane %d reg %d: %#x, want %#x", t, i, out[t][4 + i], want_t);
      if (i < 2) ck_assert_msg(out[t][8 + i] == want, "x2 lane %d reg %d", t, i);
      if (i < 1) ck_assert_msg(out[t][10] == want_t, "x1.trans lane %d", t);
    }
  emu_fini(&e);
}
END_TEST

static const char *shfl_ptx =
    HEAD ".visible .entry shfl(\n .param .u64 po\n)\n{\n"
    " .reg .pred %p<4>;\n .reg .b32 %r<16>;\n .reg .b64 %rd<8>;\n"
    " ld.param.u64 %rd1, [po];\n mov.u32 %r1, %laneid;\n and.b32 %r2, %r1, 1;\n setp.eq.s32 %p1, %r2, 0;\n"
    " @%p1 bra $EVEN;\n mul.lo.s32 %r3, %r1, 3;\n bra.uni $JOIN;\n$EVEN:\n mul.lo.s32 %r3, %r1, 5;\n$JOIN:\n"
    " shfl.sync.bfly.b32 %r4, %r3, 1, 31, -1;\n shfl.sync.down.b32 %r5, %r3, 3, 31, -1;\n"
    " shfl.sync.up.b32 %r6, %r3, 2, 0, -1;\n shfl.sync.idx.b32 %r7, %r3, 7, 31, -1;\n"
    " mul.wide.u32 %rd2, %r1, 16;\n add.s64 %rd3, %rd1, %rd2;\n st.global.v4.b32 [%rd3], {%r4, %r5, %r6, %r7};\n"
    " ret;\n}\n";

START_TEST(test_shfl_divergence) {
  emu e;
  emu_load(&e, shfl_ptx);
  uint64_t po = emu_buf(&e, NULL, 32 * 16), params[] = {po};
  ck_assert_msg(emu_run(&e, 1, 32, 0, params, 1, PE_ORDER_FORWARD, PE_LAND_LATE), "%s", e.err);
  uint32_t out[32][4];
  ck_assert(pe_read(e.mem, out, po, sizeof out));
#define V(l) ((uint32_t)((l) % 2 ? 3 * (l) : 5 * (l)))
  for (int l = 0; l < 32; l++) {
    ck_assert_msg(out[l][0] == V(l ^ 1), "bfly lane %d", l);
    ck_assert_msg(out[l][1] == (l + 3 <= 31 ? V(l + 3) : V(l)), "down lane %d", l);
    ck_assert_msg(out[l][2] == (l >= 2 ? V(l - 2) : V(l)), "up lane %d", l);
    ck_assert_msg(out[l][3] == V(7), "idx lane %d", l);
  }
#undef V
  emu_fini(&e);
}
END_TEST

static const char *cvt_ptx =
    HEAD ".visible .entry cvt(\n .param .u64 pi,\n .param .u64 po\n)\n{\n"
    " .reg .b16 %rs<4>;\n .reg .b32 %r<16>;\n .reg .f32 %f<8>;\n .reg .b64 %rd<8>;\n"
    " ld.param.u64 %rd1, [pi];\n ld.param.u64 %rd2, [po];\n mov.u32 %r1, %tid.x;\n"
    " mul.wide.u32 %rd3, %r1, 4;\n add.s64 %rd4, %rd1, %rd3;\n ld.global.f32 %f1, [%rd4];\n"
    " cvt.rzi.s32.f32 %r2, %f1;\n cvt.rn.f16.f32 %rs1, %f1;\n cvt.u32.u16 %r3, %rs1;\n"
    " cvt.rn.bf16.f32 %rs2, %f1;\n cvt.u32.u16 %r4, %rs2;\n ex2.approx.f32 %f2, %f1;\n cvt.rni.s32.f32 %r5, %f1;\n"
    " mul.wide.u32 %rd5, %r1, 20;\n add.s64 %rd6, %rd2, %rd5;\n"
    " st.global.b32 [%rd6], %r2;\n st.global.b32 [%rd6+4], %r3;\n st.global.b32 [%rd6+8], %r4;\n"
    " st.global.f32 [%rd6+12], %f2;\n st.global.b32 [%rd6+16], %r5;\n ret;\n}\n";

START_TEST(test_cvt_ex2) {
  emu e;
  emu_load(&e, cvt_ptx);
  float in[8] = {3.7e9f, -3.7e9f, NAN, 2.5f, -2.5f, 1.0f + 0x1p-11f, 3.5f, -0.75f};
  uint64_t pi = emu_buf(&e, in, sizeof in), po = emu_buf(&e, NULL, 8 * 20), params[] = {pi, po};
  ck_assert_msg(emu_run(&e, 1, 8, 0, params, 2, PE_ORDER_FORWARD, PE_LAND_LATE), "%s", e.err);
  struct { int32_t rzi; uint32_t h, bh; float ex2; int32_t rni; } out[8];
  ck_assert(pe_read(e.mem, out, po, sizeof out));
  static const int32_t rzi[8] = {INT32_MAX, INT32_MIN, 0, 2, -2, 1, 3, 0}, rni[8] = {INT32_MAX, INT32_MIN, 0, 2, -2, 1, 4, -1};
  for (int i = 0; i < 8; i++) {
    ck_assert_msg(out[i].rzi == rzi[i], "cvt.rzi.s32.f32(%g) = %d, want %d", (double)in[i], out[i].rzi, rzi[i]);
    ck_assert_msg(out[i].rni == rni[i], "cvt.rni.s32.f32(%g) = %d, want %d", (double)in[i], out[i].rni, rni[i]);
    ck_assert_uint_eq(out[i].h, pe_f32_to_f16_rn(in[i]));
    ck_assert_uint_eq(out[i].bh, pe_f32_to_bf16_rn(in[i]));
    if (isfinite(in[i]) && fabsf(in[i]) < 100) {
      double want = exp2((double)in[i]), ulp = ldexp(1.0, ilogb(want) - 23);
      ck_assert_msg(fabs(out[i].ex2 - want) <= 2 * ulp, "ex2.approx(%g) = %a, want %a within 2 ulp", (double)in[i],
                    (double)out[i].ex2, want);
    }
  }
  ck_assert_uint_eq(out[5].h, 0x3c00); /* the tie went to even */
  emu_fini(&e);
}
END_TEST

/* The training step's double sums (a loss's mean, bn_mean) and LLVM's
 * way to take a b64's halves ({ .reg .b32 tmp; mov.b64 {tmp, %r}, %rd; }):
 * per thread t, x = in[t] as f64, (x * 3 + 1) / 7 and its sqrt, back to
 * f32; the high and low words of the bits of x, and the b64 packed again. */
static const char *f64_ptx =
    HEAD ".visible .entry f64(\n .param .u64 pi,\n .param .u64 po\n)\n{\n"
    " .reg .b32 %r<8>;\n .reg .f32 %f<4>;\n .reg .f64 %fd<8>;\n .reg .b64 %rd<12>;\n"
    " ld.param.u64 %rd1, [pi];\n ld.param.u64 %rd2, [po];\n mov.u32 %r1, %tid.x;\n"
    " mul.wide.u32 %rd3, %r1, 4;\n add.s64 %rd4, %rd1, %rd3;\n ld.global.f32 %f1, [%rd4];\n"
    " cvt.f64.f32 %fd1, %f1;\n mul.rn.f64 %fd2, %fd1, 0d4008000000000000;\n"
    " add.rn.f64 %fd3, %fd2, 0d3FF0000000000000;\n div.rn.f64 %fd4, %fd3, 0d401C000000000000;\n"
    " cvt.rn.f32.f64 %f2, %fd4;\n abs.f64 %fd5, %fd4;\n sqrt.rn.f64 %fd6, %fd5;\n neg.f64 %fd7, %fd6;\n"
    " cvt.rn.f32.f64 %f3, %fd7;\n mov.b64 %rd5, %fd1;\n"
    " { .reg .b32 tmp; mov.b64 {tmp, %r2}, %rd5; }\n { .reg .b32 tmp; mov.b64 {%r3, tmp}, %rd5; }\n"
    " mov.b64 %rd6, {%r3, %r2};\n"
    " mul.wide.u32 %rd7, %r1, 24;\n add.s64 %rd8, %rd2, %rd7;\n"
    " st.global.f32 [%rd8], %f2;\n st.global.f32 [%rd8+4], %f3;\n st.global.b32 [%rd8+8], %r2;\n"
    " st.global.b32 [%rd8+12], %r3;\n st.global.b64 [%rd8+16], %rd6;\n ret;\n}\n";

START_TEST(test_f64_and_halves) {
  emu e;
  emu_load(&e, f64_ptx);
  float in[4] = {2.5f, -1.0f / 3.0f, 1e30f, 0.1f};
  uint64_t pi = emu_buf(&e, in, sizeof in), po = emu_buf(&e, NULL, 4 * 24), params[] = {pi, po};
  ck_assert_msg(emu_run(&e, 1, 4, 0, params, 2, PE_ORDER_FORWARD, PE_LAND_LATE), "%s", e.err);
  struct { float q, r; uint32_t hi, lo; uint64_t packed; } out[4];
  ck_assert(pe_read(e.mem, out, po, sizeof out));
  for (int i = 0; i < 4; i++) {
    double x = in[i], q = (x * 3 + 1) / 7;
    uint64_t bits;
    memcpy(&bits, &x, 8);
    ck_assert_msg(out[i].q == (float)q, "(%g * 3 + 1) / 7 in f64: %a, want %a", x, (double)out[i].q, (double)(float)q);
    ck_assert_msg(out[i].r == (float)-sqrt(fabs(q)), "-sqrt|q| in f64: %a", (double)out[i].r);
    ck_assert_uint_eq(out[i].hi, (uint32_t)(bits >> 32));
    ck_assert_uint_eq(out[i].lo, (uint32_t)bits);
    ck_assert_msg(out[i].packed == bits, "mov.b64 {lo, hi} packs %llx, want %llx", (unsigned long long)out[i].packed,
                  (unsigned long long)bits);
  }
  emu_fini(&e);
}
END_TEST

/* Local memory as LLVM emits a stack frame (castor's recurrent scans keep
 * a row's state there): each thread writes its id and id + 100 to its own
 * frame through %SPL and through the depot's name (and reads one back
 * through its generic address, cvta.local's %SP, stored with a generic
 * st to global memory), the threads meet at a
 * barrier (so a shared frame would show), and each reads its values
 * back, plus one word it never wrote (the poison); a b32 split into its
 * 16-bit halves and packed again swapped (the scratch register `tmp`
 * declared b32 in one block and b16 in the next, as LLVM writes them). */
static const char *local_ptx =
    HEAD ".visible .entry loc(\n .param .u64 po\n)\n{\n"
    " .local .align 4 .b8 __local_depot0[16];\n .reg .b64 %SP;\n .reg .b64 %SPL;\n"
    " .reg .b16 %rs<2>;\n .reg .b32 %r<10>;\n .reg .b64 %rd<8>;\n"
    " mov.u64 %SPL, __local_depot0;\n cvta.local.u64 %SP, %SPL;\n ld.param.u64 %rd1, [po];\n mov.u32 %r1, %tid.x;\n"
    " add.u64 %rd2, %SPL, 4;\n st.local.u32 [%rd2+-4], %r1;\n add.s32 %r2, %r1, 100;\n"
    " st.local.u32 [__local_depot0+8], %r2;\n" BAR "\n"
    " ld.local.u32 %r3, [%SPL];\n ld.u32 %r4, [%SP+8];\n ld.local.u32 %r5, [__local_depot0+12];\n"
    " { .reg .b32 tmp; mov.b64 {tmp, %r8}, %rd1; }\n"
    " add.s32 %r6, %r1, 65536;\n { .reg .b16 tmp; mov.b32 {%rs1, tmp}, %r6; }\n"
    " { .reg .b16 tmp; mov.b32 {tmp, %rs0}, %r6; }\n mov.b32 %r7, {%rs0, %rs1};\n"
    " mul.wide.u32 %rd3, %r1, 16;\n add.s64 %rd4, %rd1, %rd3;\n st.global.u32 [%rd4], %r3;\n"
    " st.u32 [%rd4+4], %r4;\n st.global.u32 [%rd4+8], %r5;\n st.global.u32 [%rd4+12], %r7;\n ret;\n}\n";

START_TEST(test_local_memory) {
  emu e;
  emu_load(&e, local_ptx);
  uint64_t po = emu_buf(&e, NULL, 40 * 16), params[] = {po};
  for (int order = 0; order < 3; order++) {
    ck_assert_msg(emu_run(&e, 1, 40, 0, params, 1, (pe_order)order, PE_LAND_LATE), "%s", e.err);
    uint32_t out[40][4];
    ck_assert(pe_read(e.mem, out, po, sizeof out));
    for (uint32_t t = 0; t < 40; t++) {
      ck_assert_msg(out[t][0] == t && out[t][1] == t + 100, "thread %u reads %u, %u from its frame", t, out[t][0], out[t][1]);
      ck_assert_msg(out[t][2] == 0xffffffffu, "thread %u: an unwritten local word reads %#x, not the poison", t, out[t][2]);
      ck_assert_msg(out[t][3] == (t << 16 | 1u), "thread %u: mov.b32 halves swapped give %#x", t, out[t][3]);
    }
  }
  emu_fini(&e);
}
END_TEST

/* ---- 3. the checks fire ---- */

/* 64 threads: warp 0 cp.asyncs 16 bytes per thread into shared; every
 * thread then reads what lane t % 32 copied. WAIT and BAR are the lines
 * the variants drop or change. */
static char *cpa_ptx(const char *wait, const char *bar) {
  char *s = malloc(4096);
  snprintf(s, 4096,
           HEAD ".extern .shared .align 16 .b8 smem[];\n"
           ".visible .entry cpa(\n .param .u64 pi,\n .param .u64 po\n)\n{\n"
           " .reg .pred %%p<4>;\n .reg .b32 %%r<16>;\n .reg .b64 %%rd<16>;\n"
           " ld.param.u64 %%rd1, [pi];\n ld.param.u64 %%rd2, [po];\n mov.u32 %%r1, %%tid.x;\n"
           " and.b32 %%r2, %%r1, 31;\n mul.wide.u32 %%rd3, %%r2, 16;\n mov.u64 %%rd4, smem;\n add.s64 %%rd5, %%rd4, %%rd3;\n"
           " setp.lt.u32 %%p1, %%r1, 32;\n @!%%p1 bra $AFTER;\n add.s64 %%rd6, %%rd1, %%rd3;\n"
           " cp.async.cg.shared.global [%%rd5], [%%rd6], 16;\n cp.async.commit_group;\n %s\n"
           "$AFTER:\n %s\n ld.shared.b32 %%r5, [%%rd5];\n mul.wide.u32 %%rd7, %%r1, 4;\n add.s64 %%rd8, %%rd2, %%rd7;\n"
           " st.global.b32 [%%rd8], %%r5;\n ret;\n}\n",
           wait, bar);
  return s;
}

static bool cpa_run(const char *wait, const char *bar, pe_order order, pe_landing landing, char *err, size_t n) {
  char *ptx = cpa_ptx(wait, bar);
  emu e;
  emu_load(&e, ptx);
  free(ptx);
  uint32_t in[128];
  for (int i = 0; i < 128; i++) in[i] = (uint32_t)i * 2654435761u;
  uint64_t pi = emu_buf(&e, in, sizeof in), po = emu_buf(&e, NULL, 64 * 4), params[] = {pi, po};
  bool ok = emu_run(&e, 1, 64, 512, params, 2, order, landing);
  snprintf(err, n, "%s", e.err);
  if (ok) {
    uint32_t out[64];
    ck_assert(pe_read(e.mem, out, po, sizeof out));
    for (int t = 0; t < 64; t++) ck_assert_msg(out[t] == in[(t % 32) * 4], "thread %d read %#x", t, out[t]);
  }
  emu_fini(&e);
  return ok;
}

START_TEST(test_cp_async_checks) {
  char err[2048];
  for (int o = 0; o < 3; o++)
    for (int l = 0; l < 2; l++) {
      pe_order order = (pe_order)o;
      pe_landing land = (pe_landing)l;
      ck_assert_msg(cpa_run("cp.async.wait_group 0;", BAR, order, land, err, sizeof err), "correct: %s", err);
      ck_assert_msg(cpa_run("cp.async.wait_all;", BAR, order, land, err, sizeof err), "wait_all: %s", err);
      ck_assert(!cpa_run("", BAR, order, land, err, sizeof err));
      ck_assert_msg(strstr(err, "still copying") && strstr(err, "line"), "no wait: %s", err);
      ck_assert(!cpa_run("cp.async.wait_group 1;", BAR, order, land, err, sizeof err));
      ck_assert_msg(strstr(err, "still copying"), "wait_group 1: %s", err);
      ck_assert(!cpa_run("cp.async.wait_group 0;", "", order, land, err, sizeof err));
      ck_assert_msg(strstr(err, "race"), "no barrier (order %d): %s", o, err);
    }
}
END_TEST

static const char *oob_ptx =
    HEAD ".extern .shared .align 16 .b8 smem[];\n"
    ".visible .entry oob(\n .param .u64 pi,\n .param .u64 off,\n .param .u64 shoff\n)\n{\n"
    " .reg .b32 %r<8>;\n .reg .b64 %rd<8>;\n"
    " ld.param.u64 %rd1, [pi];\n ld.param.u64 %rd2, [off];\n ld.param.u64 %rd3, [shoff];\n"
    " add.s64 %rd4, %rd1, %rd2;\n ld.global.b32 %r1, [%rd4];\n mov.u64 %rd5, smem;\n add.s64 %rd6, %rd5, %rd3;\n"
    " st.shared.b32 [%rd6], %r1;\n ret;\n}\n";

START_TEST(test_bounds) {
  emu e;
  emu_load(&e, oob_ptx);
  uint64_t pi = emu_buf(&e, NULL, 256);
  uint64_t ok[] = {pi, 252, 60}, past[] = {pi, 256, 0}, far[] = {pi, 1 << 24, 0}, sh[] = {pi, 0, 64};
  ck_assert_msg(emu_run(&e, 1, 1, 64, ok, 3, PE_ORDER_FORWARD, PE_LAND_LATE), "%s", e.err);
  ck_assert(!emu_run(&e, 1, 1, 64, past, 3, PE_ORDER_FORWARD, PE_LAND_LATE));
  ck_assert_msg(strstr(e.err, "outside every allocation") && strstr(e.err, "line 17"), "%s", e.err);
  ck_assert(!emu_run(&e, 1, 1, 64, far, 3, PE_ORDER_FORWARD, PE_LAND_LATE));
  ck_assert_msg(strstr(e.err, "outside every allocation"), "%s", e.err);
  ck_assert(!emu_run(&e, 1, 1, 64, sh, 3, PE_ORDER_FORWARD, PE_LAND_LATE));
  ck_assert_msg(strstr(e.err, "outside the 64 bytes of shared memory") && strstr(e.err, "line 20"), "%s", e.err);
  emu_fini(&e);
}
END_TEST

/* A local access at the frame's address plus `off` bytes (a parameter): past
 * the end of the 16-byte frame, before it, or a global address. */
static const char *local_oob_ptx =
    HEAD ".visible .entry loob(\n .param .u64 off\n)\n{\n"
    " .local .align 8 .b8 __local_depot0[16];\n .reg .b64 %SPL;\n .reg .b32 %r<4>;\n .reg .b64 %rd<8>;\n"
    " mov.u64 %SPL, __local_depot0;\n ld.param.u64 %rd1, [off];\n add.s64 %rd2, %SPL, %rd1;\n"
    " mov.u32 %r1, 7;\n st.local.u32 [%rd2], %r1;\n ld.local.u32 %r2, [%rd2+4];\n ret;\n}\n";

START_TEST(test_local_bounds) {
  emu e;
  emu_load(&e, local_oob_ptx);
  uint64_t ok[] = {8}, past[] = {16}, read_past[] = {12}, before[] = {(uint64_t)-4}, glob[] = {0};
  glob[0] = emu_buf(&e, NULL, 64) - PE_LOCAL_BASE;
  ck_assert_msg(emu_run(&e, 1, 3, 0, ok, 1, PE_ORDER_FORWARD, PE_LAND_LATE), "%s", e.err);
  ck_assert(!emu_run(&e, 1, 3, 0, past, 1, PE_ORDER_FORWARD, PE_LAND_LATE));
  ck_assert_msg(strstr(e.err, "local write of 4 bytes") && strstr(e.err, "outside the thread's 16 bytes of local memory") &&
                    strstr(e.err, "line 16") && strstr(e.err, "thread 0"),
                "%s", e.err);
  ck_assert(!emu_run(&e, 1, 3, 0, read_past, 1, PE_ORDER_FORWARD, PE_LAND_LATE));
  ck_assert_msg(strstr(e.err, "local read of 4 bytes") && strstr(e.err, "line 17"), "%s", e.err);
  ck_assert(!emu_run(&e, 1, 3, 0, before, 1, PE_ORDER_FORWARD, PE_LAND_LATE));
  ck_assert_msg(strstr(e.err, "outside the thread's 16 bytes of local memory") && strstr(e.err, "line 16"), "%s", e.err);
  ck_assert(!emu_run(&e, 1, 3, 0, glob, 1, PE_ORDER_FORWARD, PE_LAND_LATE)); /* a global address in ld/st.local */
  ck_assert_msg(strstr(e.err, "outside the thread's 16 bytes of local memory"), "%s", e.err);
  emu_fini(&e);
}
END_TEST

static const char *divergent_ptx =
    HEAD ".visible .entry div(\n .param .u64 po\n)\n{\n"
    " .reg .pred %p<4>;\n .reg .b32 %r<16>;\n .reg .b64 %rd<8>;\n"
    " ld.param.u64 %rd1, [po];\n mov.u32 %r1, %laneid;\n and.b32 %r2, %r1, 1;\n setp.eq.s32 %p1, %r2, 0;\n"
    " @%p1 bra $OUT;\n shfl.sync.bfly.b32 %r4, %r1, 1, 31, -1;\n"
    " mul.wide.u32 %rd2, %r1, 4;\n add.s64 %rd3, %rd1, %rd2;\n st.global.b32 [%rd3], %r4;\n$OUT:\n ret;\n}\n";

START_TEST(test_divergent_shfl) {
  /* odd lanes only: a full-mask shfl.sync reached by half a warp */
  emu e;
  emu_load(&e, divergent_ptx);
  uint64_t po = emu_buf(&e, NULL, 32 * 4), params[] = {po};
  ck_assert(!emu_run(&e, 1, 32, 0, params, 1, PE_ORDER_FORWARD, PE_LAND_LATE));
  ck_assert_msg(strstr(e.err, "shfl.sync") && strstr(e.err, "membermask") && strstr(e.err, "line 16"), "%s", e.err);
  emu_fini(&e);
}
END_TEST

START_TEST(test_refuses_unknown) {
  static const struct { const char *insn, *what; } cases[] = {
      {"atom.global.add.f32 %f1, [%rd1], %f1;", "atom.global.add.f32"},
      {"add.rz.f64 %fd1, %fd1, %fd1;", "add.rz.f64"}, /* f64: .rn only */
      {"mov.b32 {%r1, %r1}, %rd1;", "mov.b32"},        /* halves: of the declared widths */
      {"mov.b32 {%rs1, %rs1}, %rd1;", "mov.b32"},
      {"cvta.shared.u64 %rd1, %rd1;", "cvta.shared"},   /* shared memory has no generic window here */
      {"ld.local.u32 %r1, [nowhere];", "unknown address 'nowhere'"},
      {".local .align 4 .b8 d[];", "only NAME[N] arrays"},
      {".local .align 4 .b8 d[600000];", "more than 524288 bytes of local memory"},
      {".local .align 3 .b8 d[4];", "alignment"},
      {"mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 {%f1, %f1, %f1, %f1}, {%r1, %r1}, {%r1}, {%f1, %f1, %f1, %f1};",
       "m16n8k8"},
      {"ldmatrix.sync.aligned.m8n8.x4.shared.b8 {%r1, %r1, %r1, %r1}, [%rd1];", "ldmatrix"},
      {"bar.sync 1;", "barrier 0"},
      {"mov.u32 %r1, %clock;", "%clock"},
      {"cvt.rz.f16.f32 %rs1, %f1;", "rz"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char ptx[1024], err[512];
    snprintf(ptx, sizeof ptx,
             HEAD ".visible .entry k(\n .param .u64 p\n)\n{\n .reg .b16 %%rs<2>;\n .reg .b32 %%r<2>;\n .reg .f32 %%f<2>;\n"
                  " .reg .f64 %%fd<2>;\n .reg .b64 %%rd<2>;\n %s\n ret;\n}\n",
             cases[i].insn);
    pe_module *m = pe_module_load(ptx, err, sizeof err);
    ck_assert_msg(m == NULL, "'%s' was accepted", cases[i].insn);
    ck_assert_msg(strstr(err, "line 13") && strstr(err, cases[i].what), "'%s': %s", cases[i].insn, err);
  }
  char err[512];
  ck_assert(!pe_module_load(HEAD ".global .f32 g;\n", err, sizeof err));
  ck_assert_msg(strstr(err, "line 4: unsupported directive '.global'"), "%s", err);
  ck_assert(!pe_module_load(HEAD ".local .align 4 .b8 d[4];\n", err, sizeof err)); /* a module's local: not emitted */
  ck_assert_msg(strstr(err, "line 4: unsupported directive '.local'"), "%s", err);
}
END_TEST

static const char *loop_ptx =
    HEAD ".visible .entry spin(\n .param .u64 p\n)\n{\n .reg .b32 %r<2>;\n"
    " mov.u32 %r1, 0;\n$TOP:\n add.s32 %r1, %r1, 1;\n bra.uni $TOP;\n}\n";

START_TEST(test_runaway) {
  emu e;
  emu_load(&e, loop_ptx);
  uint64_t params[] = {0};
  void *pp[] = {&params[0]};
  pe_options o = {.max_steps = 100000};
  unsigned g[3] = {2, 1, 1}, b[3] = {64, 1, 1};
  ck_assert(!pe_launch(e.mem, e.mod, 0, g, b, 0, pp, &o, e.err, sizeof e.err));
  ck_assert_msg(strstr(e.err, "runaway"), "%s", e.err);
  emu_fini(&e);
}
END_TEST

/* Damaged PTX (castor's own, cut short or with bytes changed) is refused
 * with a line number or loads; never a crash. */
START_TEST(test_damaged_ptx) {
  static const char *text = "model dmg\nx = input(shape=[40])\nh = dense(x, units=24, activation=gelu)\n"
                            "p = activation(h, softmax)\noutput p\n";
  diag_sink *d = diag_sink_create();
  ir_graph *g = fe_load_mem("dmg", text, strlen(text), NULL, d, NULL);
  ck_assert(g != NULL);
  ck_assert(ir_policy_from_name("mixed_float16", 13, &g->policy));
  pass_options po;
  pass_options_init(&po);
  ck_assert(pass_run_pipeline(g, PASS_PIPELINE_PAD8, &po, d));
  rt_cuda_program *p = cg_compile_cuda(g, "sm_80", NULL, d);
  ck_assert(p != NULL);
  size_t n = strlen(p->ptx);
  char *buf = malloc(n + 1), err[512];
  uint64_t s = 7;
  int refused = 0;
  for (int i = 0; i < 400; i++) {
    memcpy(buf, p->ptx, n + 1);
    s = s * 6364136223846793005u + 1442695040888963407u;
    size_t at = (size_t)(s >> 33) % n;
    if (i % 2) buf[at] = 0; /* cut short */
    else buf[at] = "};{[%.,0x@!$ "[(s >> 20) % 13];
    pe_module *m = pe_module_load(buf, err, sizeof err);
    if (!m) {
      refused++;
      ck_assert_msg(!strncmp(err, "ptxemu: line ", 13), "damaged PTX refused without a line: %s", err);
    }
    pe_module_destroy(m);
  }
  ck_assert_int_gt(refused, 100);
  free(buf);
  rt_cuda_program_destroy(p);
  ir_graph_destroy(g);
  diag_sink_destroy(d);
}
END_TEST

/* ---- 4. mutated castor kernels ---- */

static rt_cuda_device *dev;

/* K = 288: nine k-tiles, so the last one sits in pipeline stage 0, which
 * the epilogue's f32 tile overlaps; with K = 256 the last tile is in stage
 * 3, past the tile, and the barrier after the final wait_group protects
 * nothing (the emulator rightly finds no race there). */
static ir_graph *mut_graph(const char *policy) {
  static const char *text = "model mut\nx = input(shape=[288])\nh = dense(x, units=64, activation=relu)\n"
                            "y = dense(h, units=40)\noutput y\n";
  diag_sink *d = diag_sink_create();
  ir_graph *g = fe_load_mem("mut", text, strlen(text), NULL, d, NULL);
  ck_assert_msg(g != NULL, "%s", diag_text(d));
  ck_assert(ir_policy_from_name(policy, strlen(policy), &g->policy));
  pass_options po;
  pass_options_init(&po);
  ck_assert_msg(pass_run_pipeline(g, PASS_PIPELINE_PAD8, &po, d), "%s", diag_text(d));
  diag_sink_destroy(d);
  return g;
}

/* Runs g with castor's PTX replaced by `ptx` (NULL: unmodified) at batch
 * 40; true when the launch succeeded and the result is within the bound
 * of the reference. The reason otherwise goes to why. */
static bool mut_run(ir_graph *g, const char *ptx, double bound, char *why, size_t n) {
  diag_sink *d = diag_sink_create();
  rt_cuda_program *p = cg_compile_cuda(g, "sm_80", NULL, d);
  ck_assert_msg(p != NULL, "%s", diag_text(d));
  char *orig = p->ptx;
  if (ptx) p->ptx = (char *)ptx;
  rt_cuda_module *m = rt_cuda_module_load(dev, p, d);
  ck_assert_msg(m != NULL, "%s", diag_text(d));
  int64_t batch = 40, nin = batch * 288, nout = batch * 40;
  float *x = malloc((size_t)nin * sizeof *x), *y = malloc((size_t)nout * sizeof *y);
  uint64_t s = 42;
  for (int64_t i = 0; i < nin; i++) s = s * 6364136223846793005u + 1442695040888963407u, x[i] = (float)((double)(s >> 40) / (1 << 23) - 1);
  bool ok = rt_cuda_run(m, batch, (const void *const *)&x, (void *const *)&y, d);
  snprintf(why, n, "%s", ok ? "" : diag_text(d));
  if (ok) {
    double *x64 = ref_from_f32(x, nin), *want[1] = {NULL};
    char err[256];
    ck_assert(ref_run(g, batch, (const double *const *)&x64, want, err, sizeof err));
    ref_cmp c = ref_compare_normalized(y, want[0], nout);
    ok = c.error < bound;
    char msg[256];
    snprintf(why, n, "normalized %s", ref_cmp_str(&c, msg, sizeof msg));
    free(x64), free(want[0]);
  }
  free(x), free(y);
  rt_cuda_module_unload(m);
  p->ptx = orig;
  rt_cuda_program_destroy(p);
  diag_sink_destroy(d);
  return ok;
}

static char *castor_ptx(ir_graph *g) {
  diag_sink *d = diag_sink_create();
  rt_cuda_program *p = cg_compile_cuda(g, "sm_80", NULL, d);
  ck_assert(p != NULL);
  char *s = strdup(p->ptx);
  rt_cuda_program_destroy(p);
  diag_sink_destroy(d);
  return s;
}

static int count(const char *s, const char *what) {
  int n = 0;
  for (const char *p = strstr(s, what); p; p = strstr(p + 1, what)) n++;
  return n;
}

START_TEST(test_mutations_mma) {
  const char *policy = _i == 0 ? "float16" : "mixed_bfloat16";
  double bound = _i == 0 ? 4e-3 : 3.2e-2;
  ir_graph *g = mut_graph(policy);
  char *ptx = castor_ptx(g), why[2048];
  ck_assert_msg(strstr(ptx, "mma.sync") && strstr(ptx, "cp.async.wait_group 2"), "no tensor-core GEMM to mutate");
  ck_assert_msg(mut_run(g, NULL, bound, why, sizeof why), "%s: castor's own kernels fail: %s", policy, why);
  /* every barrier of the module, one at a time */
  int nbar = count(ptx, BAR);
  ck_assert_int_ge(nbar, 3);
  for (int i = 0; i < nbar; i++) {
    char *m = replace_nth(ptx, BAR, "", i);
    ck_assert_msg(!mut_run(g, m, bound, why, sizeof why), "%s: barrier %d of %d removed, not caught", policy, i, nbar);
    printf("%s: barrier %d removed: %s\n", policy, i, why);
    free(m);
  }
  char *m = replace_nth(ptx, "cp.async.wait_group 2;", "cp.async.wait_group 3;", 0);
  ck_assert_msg(!mut_run(g, m, bound, why, sizeof why), "%s: wait_group 3 not caught", policy);
  ck_assert_msg(strstr(why, "still copying"), "%s: wait_group 3: %s", policy, why);
  free(m);
  /* (the final wait_group 0 only waits for empty groups, so dropping it is
   * no bug; a commit_group dropped from the prologue is: the loop's
   * wait_group 2 then leaves the tile it computes on in flight) */
  m = replace_nth(ptx, "cp.async.commit_group;", "", 0);
  ck_assert_msg(!mut_run(g, m, bound, why, sizeof why), "%s: a missing commit_group not caught", policy);
  ck_assert_msg(strstr(why, "still copying"), "%s: missing commit_group: %s", policy, why);
  free(m);
  m = replace_nth(ptx, "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16", "ldmatrix.sync.aligned.m8n8.x4.shared.b16", 0);
  ck_assert_msg(!mut_run(g, m, bound, why, sizeof why), "%s: B without .trans not caught", policy);
  printf("%s: B without .trans: %s\n", policy, why);
  free(m);
  m = replace_nth(ptx, "ldmatrix.sync.aligned.m8n8.x4.shared.b16", "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16", 0);
  ck_assert_msg(!mut_run(g, m, bound, why, sizeof why), "%s: A with .trans not caught", policy);
  free(m);
  const char *mma = _i == 0 ? "row.col.f32.f16.f16.f32" : "row.col.f32.bf16.bf16.f32";
  const char *other = _i == 0 ? "row.col.f32.bf16.bf16.f32" : "row.col.f32.f16.f16.f32";
  m = replace_nth(ptx, mma, other, 0);
  ck_assert_msg(!mut_run(g, m, bound, why, sizeof why), "%s: wrong mma type not caught", policy);
  free(m);
  free(ptx);
  ir_graph_destroy(g);
}
END_TEST

START_TEST(test_mutations_fma) {
  ir_graph *g = mut_graph("float32");
  char *ptx = castor_ptx(g), why[2048];
  ck_assert_msg(mut_run(g, NULL, 1e-5, why, sizeof why), "castor's own kernels fail: %s", why);
  int nbar = count(ptx, BAR);
  ck_assert_int_ge(nbar, 3);
  for (int i = 0; i < nbar; i++) {
    char *m = replace_nth(ptx, BAR, "", i);
    ck_assert_msg(!mut_run(g, m, 1e-5, why, sizeof why), "float32: barrier %d of %d removed, not caught", i, nbar);
    ck_assert_msg(strstr(why, "race"), "float32 barrier %d: %s", i, why);
    free(m);
  }
  free(ptx);
  ir_graph_destroy(g);
}
END_TEST

static void open_device(void) {
  diag_sink *d = diag_sink_create();
  dev = rt_cuda_device_open(-1, d);
  ck_assert_msg(dev != NULL, "the emulated device (CASTOR_CUDA_EMULATE=%s): %s", getenv("CASTOR_CUDA_EMULATE"),
                diag_text(d));
  ck_assert_str_eq(rt_cuda_device_name(dev), "castor ptxemu (emulated sm_80)");
  diag_sink_destroy(d);
}

static void close_device(void) { rt_cuda_device_close(dev), dev = NULL; }

int main(void) {
  Suite *s = suite_create("ptxemu");
  TCase *tc = tcase_create("numerics");
  tcase_add_test(tc, test_f16_rounding);
  tcase_add_test(tc, test_bf16_rounding);
  tcase_add_test(tc, test_half_agrees_with_util);
  suite_add_tcase(s, tc);
  tc = tcase_create("semantics");
  tcase_add_loop_test(tc, test_mma_layout, 0, 2);
  tcase_add_test(tc, test_ldmatrix_layout);
  tcase_add_test(tc, test_shfl_divergence);
  tcase_add_test(tc, test_cvt_ex2);
  tcase_add_test(tc, test_f64_and_halves);
  tcase_add_test(tc, test_local_memory);
  suite_add_tcase(s, tc);
  tc = tcase_create("checks");
  tcase_add_test(tc, test_cp_async_checks);
  tcase_add_test(tc, test_bounds);
  tcase_add_test(tc, test_local_bounds);
  tcase_add_test(tc, test_divergent_shfl);
  tcase_add_test(tc, test_refuses_unknown);
  tcase_add_test(tc, test_runaway);
  tcase_add_test(tc, test_damaged_ptx);
  suite_add_tcase(s, tc);
  tc = tcase_create("mutations");
  tcase_set_timeout(tc, 600);
  tcase_add_checked_fixture(tc, open_device, close_device);
  tcase_add_loop_test(tc, test_mutations_mma, 0, 2);
  tcase_add_test(tc, test_mutations_fma);
  suite_add_tcase(s, tc);
  return check_run(s);
}
