/* SPDX-License-Identifier: Apache-2.0 */
/*
 * check_codegen16.c: the CPU JIT's 16-bit conversions and 16-bit elementwise
 * math, bit for bit.
 *
 * Every test parses a text-IR graph (ir_parse), JIT-compiles it with
 * cg_compile_cpu (no passes run: the casts are written by hand) and runs it
 * with rt_program_run. Rows are 71 wide, so each row goes through the
 * vector loop (columns 0..63 for 4, 8 or 16 lanes) and the scalar tail
 * (64..70); every special value is placed in every column of some row, so
 * it meets both paths however the kernels split a row.
 *
 * Oracles:
 * - f32 -> f16 / bf16: tables of bit patterns computed with NumPy 2.4.6
 *   (np.float32(x).astype(np.float16).view(np.uint16)) and ml_dtypes 0.6.0
 *   (.astype(ml_dtypes.bfloat16)), pasted below.
 * - f16 -> f32: exact by construction (ldexp), computed here.
 * - a sweep over every sign and exponent: util/half.c, host C code that
 *   shares nothing with the LLVM emission and is itself bit-exact with NumPy
 *   and ml_dtypes (check_util).
 * - elementwise f16/bf16 ops: tests/ref's ref_run, which computes in double
 *   and rounds once to the node's dtype.
 *
 * NaNs. bf16: castor gives ml_dtypes' canonical quiet NaN with the sign kept
 * (0x7fc0 | sign), checked exactly. f16: NumPy keeps a signalling NaN
 * signalling (0x7f800001 -> 0x7c01), while castor's fptrunc quiets it as
 * x86 F16C's vcvtps2ph does (0x7e00 | sign | top payload bits), so f16 NaNs
 * are checked for NaN-ness, the quiet bit and the sign only.
 */
#include <check.h>

#include "tests/unit/test_support.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/codegen.h"
#include "tests/ref/ref.h"
#include "util/half.h"

enum { COLS = 71 };
#define COLS_S "71"

/* ---- bits ---- */

static uint32_t f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}
static float bits_f32(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}
static bool f16_is_nan(uint16_t h) { return (h & 0x7c00) == 0x7c00 && (h & 0x03ff) != 0; }
static bool f32_is_nan(uint32_t u) { return (u & 0x7fffffffu) > 0x7f800000u; }

/* f16 -> f32, exact: the value is m * 2^e with an 11-bit m */
static uint32_t f16_widen_bits(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000) << 16, m = h & 0x3ff;
  int e = (h >> 10) & 0x1f;
  if (e == 31) return sign | 0x7f800000u | (m << 13);
  float v = e ? ldexpf((float)(m | 0x400), e - 25) : ldexpf((float)m, -24);
  return sign | f32_bits(v);
}

/* f16 NaN as castor makes it: NaN, quiet, same sign as the f32 NaN */
static bool f16_nan_ok(uint16_t got, uint32_t in) {
  return f16_is_nan(got) && (got & 0x0200) && (got >> 15) == (in >> 31);
}

static uint64_t rng_state;
static uint32_t rng_u32(void) { /* splitmix64, fixed seed per test */
  uint64_t z = (rng_state += 0x9e3779b97f4a7c15u);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
  return (uint32_t)((z ^ (z >> 31)) >> 32);
}

/* ---- compile and run ---- */

static ir_graph *parse(const char *text) {
  diag_sink *d = diag_sink_create();
  ir_graph *g = ir_parse("t.cir", text, strlen(text), d);
  ck_assert_msg(g != NULL, "ir_parse: %s", diag_text(d));
  ck_assert_msg(ir_verify(g, d), "ir_verify: %s", diag_text(d));
  diag_sink_destroy(d);
  return g;
}

static rt_program *compile(const ir_graph *g, str_buf *llvm) {
  diag_sink *d = diag_sink_create();
  cg_options o;
  cg_options_init(&o);
  o.dump_llvm = llvm;
  rt_program *p = cg_compile_cpu(g, &o, d);
  ck_assert_msg(p != NULL, "cg_compile_cpu: %s", diag_text(d));
  diag_sink_destroy(d);
  return p;
}

static void run(const rt_program *p, int64_t batch, const void *const *in, void *const *out) {
  diag_sink *d = diag_sink_create();
  ck_assert_msg(rt_program_run(p, batch, in, out, NULL, d), "rt_program_run: %s", diag_text(d));
  diag_sink_destroy(d);
}

/* Output k of p must be named `name` (outputs keep the graph's order). */
static void check_output_name(const rt_program *p, int k, const char *name) {
  ck_assert_int_gt(p->n_outputs, k);
  ck_assert_str_eq(p->outputs[k].name, name);
}

/* ---- f32 -> f16 / bf16 against NumPy and ml_dtypes ---- */

typedef struct conv_case {
  uint32_t in;      /* f32 bits */
  uint16_t f16;     /* np.float32(x).astype(np.float16) */
  uint32_t f16_f32; /* ... .astype(np.float32) */
  uint16_t bf16;    /* .astype(ml_dtypes.bfloat16) */
  uint32_t bf16_f32;
  const char *what;
} conv_case;

/* Generated with NumPy 2.4.6 and ml_dtypes 0.6.0. */
static const conv_case cases[] = {
    {0x00000000u, 0x0000, 0x00000000u, 0x0000, 0x00000000u, "+0"},
    {0x80000000u, 0x8000, 0x80000000u, 0x8000, 0x80000000u, "-0"},
    {0x3f800000u, 0x3c00, 0x3f800000u, 0x3f80, 0x3f800000u, "1"},
    {0xc0200000u, 0xc100, 0xc0200000u, 0xc020, 0xc0200000u, "-2.5"},
    {0x477fe000u, 0x7bff, 0x477fe000u, 0x4780, 0x47800000u, "65504, f16 max"},
    {0x477feffdu, 0x7bff, 0x477fe000u, 0x4780, 0x47800000u, "65519.99 -> f16 max"},
    {0x477ff000u, 0x7c00, 0x7f800000u, 0x4780, 0x47800000u, "65520 -> f16 inf (tie, odd max)"},
    {0xc77ff000u, 0xfc00, 0xff800000u, 0xc780, 0xc7800000u, "-65520 -> -inf"},
    {0x322bcc77u, 0x0000, 0x00000000u, 0x322c, 0x322c0000u, "1e-8 -> 0 in f16"},
    {0x33800000u, 0x0001, 0x33800000u, 0x3380, 0x33800000u, "2^-24, f16 min subnormal"},
    {0x33000000u, 0x0000, 0x00000000u, 0x3300, 0x33000000u, "2^-25, tie -> 0"},
    {0x33000001u, 0x0001, 0x33800000u, 0x3300, 0x33000000u, "just above 2^-25 -> 2^-24"},
    {0x32ffffffu, 0x0000, 0x00000000u, 0x3300, 0x33000000u, "just below 2^-25 -> 0"},
    {0x33c00000u, 0x0002, 0x34000000u, 0x33c0, 0x33c00000u, "3*2^-25, tie -> 2*2^-24 (even)"},
    {0xb3c00000u, 0x8002, 0xb4000000u, 0xb3c0, 0xb3c00000u, "-3*2^-25"},
    {0x3727c5acu, 0x00a8, 0x37280000u, 0x3728, 0x37280000u, "1e-5, f16 subnormal"},
    {0xb649539cu, 0x8032, 0xb6480000u, 0xb649, 0xb6490000u, "-3e-6, f16 subnormal"},
    {0x387fc000u, 0x03ff, 0x387fc000u, 0x3880, 0x38800000u, "2^-14 - 2^-24, f16 max subnormal"},
    {0x387fe000u, 0x0400, 0x38800000u, 0x3880, 0x38800000u, "2^-14 - 2^-25, tie -> 2^-14"},
    {0x38800000u, 0x0400, 0x38800000u, 0x3880, 0x38800000u, "2^-14, f16 min normal"},
    {0xb87fda40u, 0x83ff, 0xb87fc000u, 0xb880, 0xb8800000u, "-6.1e-5, f16 subnormal"},
    {0x3f801000u, 0x3c00, 0x3f800000u, 0x3f80, 0x3f800000u, "1 + 2^-11, f16 tie -> 1"},
    {0x3f803000u, 0x3c02, 0x3f804000u, 0x3f80, 0x3f800000u, "1 + 3*2^-11, f16 tie -> 1 + 2^-9"},
    {0x3f801001u, 0x3c01, 0x3f802000u, 0x3f80, 0x3f800000u, "1 + 2^-11 + 2^-23, f16 up"},
    {0x3f800fffu, 0x3c00, 0x3f800000u, 0x3f80, 0x3f800000u, "1 + 2^-11 - 2^-23, f16 down"},
    {0x3f808000u, 0x3c04, 0x3f808000u, 0x3f80, 0x3f800000u, "1 + 2^-8, bf16 tie -> 1"},
    {0x3f818000u, 0x3c0c, 0x3f818000u, 0x3f82, 0x3f820000u, "1 + 3*2^-8, bf16 tie -> 1 + 2^-6"},
    {0x3f808001u, 0x3c04, 0x3f808000u, 0x3f81, 0x3f810000u, "1 + 2^-8 + 2^-23, bf16 up"},
    {0xbf818000u, 0xbc0c, 0xbf818000u, 0xbf82, 0xbf820000u, "-(1 + 3*2^-8)"},
    {0x7f800000u, 0x7c00, 0x7f800000u, 0x7f80, 0x7f800000u, "+inf"},
    {0xff800000u, 0xfc00, 0xff800000u, 0xff80, 0xff800000u, "-inf"},
    {0x7fc00000u, 0x7e00, 0x7fc00000u, 0x7fc0, 0x7fc00000u, "quiet NaN"},
    {0xffc00000u, 0xfe00, 0xffc00000u, 0xffc0, 0xffc00000u, "-quiet NaN"},
    {0x7f800001u, 0x7c01, 0x7f802000u, 0x7fc0, 0x7fc00000u, "signalling NaN"},
    {0xff800001u, 0xfc01, 0xff802000u, 0xffc0, 0xffc00000u, "-signalling NaN"},
    {0x7fa00000u, 0x7d00, 0x7fa00000u, 0x7fc0, 0x7fc00000u, "signalling NaN, high payload"},
    {0x7fc12345u, 0x7e09, 0x7fc12000u, 0x7fc0, 0x7fc00000u, "quiet NaN with payload"},
    {0x7149f2cau, 0x7c00, 0x7f800000u, 0x714a, 0x714a0000u, "1e30"},
    {0xf149f2cau, 0xfc00, 0xff800000u, 0xf14a, 0xf14a0000u, "-1e30"},
    {0x00000001u, 0x0000, 0x00000000u, 0x0000, 0x00000000u, "f32 min subnormal"},
    {0x807fffffu, 0x8000, 0x80000000u, 0x8080, 0x80800000u, "-f32 max subnormal"},
    {0x00400000u, 0x0000, 0x00000000u, 0x0040, 0x00400000u, "f32 subnormal 2^-127"},
    {0x007fffffu, 0x0000, 0x00000000u, 0x0080, 0x00800000u, "f32 max subnormal -> bf16 min normal"},
    {0x00008000u, 0x0000, 0x00000000u, 0x0000, 0x00000000u, "f32 subnormal, bf16 tie -> 0"},
    {0x00018000u, 0x0000, 0x00000000u, 0x0002, 0x00020000u, "f32 subnormal, bf16 tie -> 0x0002"},
    {0x7f7fffffu, 0x7c00, 0x7f800000u, 0x7f80, 0x7f800000u, "FLT_MAX -> bf16 inf"},
    {0x7f7f7fffu, 0x7c00, 0x7f800000u, 0x7f7f, 0x7f7f0000u, "below the bf16 tie -> bf16 max"},
    {0x7f7f8000u, 0x7c00, 0x7f800000u, 0x7f80, 0x7f800000u, "bf16 tie above bf16 max -> inf"},
    {0x7f7e8000u, 0x7c00, 0x7f800000u, 0x7f7e, 0x7f7e0000u, "bf16 tie, even -> 0x7f7e"},
    {0xff7f0000u, 0xfc00, 0xff800000u, 0xff7f, 0xff7f0000u, "-bf16 max"},
    {0x40490fdbu, 0x4248, 0x40490000u, 0x4049, 0x40490000u, "pi"},
    {0xba83126fu, 0x9419, 0xba832000u, 0xba83, 0xba830000u, "-0.001"},
    {0x3dcccccdu, 0x2e66, 0x3dccc000u, 0x3dcd, 0x3dcd0000u, "0.1"},
    {0x4640e6b6u, 0x7207, 0x4640e000u, 0x4641, 0x46410000u, "12345.678"},
};
enum { N_CASES = sizeof cases / sizeof cases[0] };

/* Row r, column j holds cases[(r + j) % N_CASES], so with N_CASES rows
 * every case is at column 0 (vector loop) of some row and at columns 64..70
 * (scalar tail) of others. */
static int case_at(int64_t r, int64_t j) { return (int)((r + j) % N_CASES); }

static const char *narrow_ir(const char *dt) {
  static char buf[512];
  snprintf(buf, sizeof buf,
           "graph c policy=float32\n"
           "%%x = f32[N," COLS_S "] input() {index=0}\n"
           "%%h = %s[N," COLS_S "] cast(%%x) {to=%s}\n"
           "%%w = f32[N," COLS_S "] cast(%%h) {to=f32}\n"
           "output h = %%h\n"
           "output w = %%w\n",
           dt, dt);
  return buf;
}

static void run_narrow(const char *dt, uint16_t *h, uint32_t *w) {
  ir_graph *g = parse(narrow_ir(dt));
  rt_program *p = compile(g, NULL);
  check_output_name(p, 0, "h");
  check_output_name(p, 1, "w");
  static uint32_t x[N_CASES * COLS];
  for (int64_t r = 0; r < N_CASES; r++)
    for (int64_t j = 0; j < COLS; j++) x[r * COLS + j] = cases[case_at(r, j)].in;
  run(p, N_CASES, (const void *[]){x}, (void *[]){h, w});
  rt_program_destroy(p);
  ir_graph_destroy(g);
}

START_TEST(test_f32_to_f16_numpy) {
  static uint16_t h[N_CASES * COLS];
  static uint32_t w[N_CASES * COLS];
  run_narrow("f16", h, w);
  for (int64_t r = 0; r < N_CASES; r++)
    for (int64_t j = 0; j < COLS; j++) {
      const conv_case *c = &cases[case_at(r, j)];
      uint16_t got = h[r * COLS + j];
      uint32_t gw = w[r * COLS + j];
      const char *path = j < 64 ? "cols 0..63" : "cols 64..70";
      if (f32_is_nan(c->in)) {
        ck_assert_msg(f16_nan_ok(got, c->in), "f16(%s 0x%08x) [%s]: got 0x%04x, want a quiet NaN with the sign",
                      c->what, c->in, path, got);
        ck_assert_msg(f32_is_nan(gw) && (gw >> 31) == (c->in >> 31), "f32(f16(%s)) [%s]: got 0x%08x",
                      c->what, path, gw);
        continue;
      }
      ck_assert_msg(got == c->f16, "f16(%s 0x%08x) [%s, row %lld col %lld]: got 0x%04x, NumPy 0x%04x", c->what,
                    c->in, path, (long long)r, (long long)j, got, c->f16);
      ck_assert_msg(gw == c->f16_f32, "f32(f16(%s)) [%s]: got 0x%08x, NumPy 0x%08x", c->what, path, gw,
                    c->f16_f32);
    }
}
END_TEST

START_TEST(test_f32_to_bf16_ml_dtypes) {
  static uint16_t h[N_CASES * COLS];
  static uint32_t w[N_CASES * COLS];
  run_narrow("bf16", h, w);
  for (int64_t r = 0; r < N_CASES; r++)
    for (int64_t j = 0; j < COLS; j++) {
      const conv_case *c = &cases[case_at(r, j)];
      const char *path = j < 64 ? "cols 0..63" : "cols 64..70";
      /* exact, NaNs included: ml_dtypes' canonical NaN keeps the sign */
      ck_assert_msg(h[r * COLS + j] == c->bf16, "bf16(%s 0x%08x) [%s, row %lld col %lld]: got 0x%04x, ml_dtypes 0x%04x",
                    c->what, c->in, path, (long long)r, (long long)j, h[r * COLS + j], c->bf16);
      ck_assert_msg(w[r * COLS + j] == c->bf16_f32, "f32(bf16(%s)) [%s]: got 0x%08x, ml_dtypes 0x%08x", c->what,
                    path, w[r * COLS + j], c->bf16_f32);
    }
}
END_TEST

/* ---- every f16 / bf16 pattern: widen exactly, narrow back unchanged ---- */

enum { ALL16 = 65536, ALL16_ROWS = (ALL16 + COLS - 1) / COLS };

static void run_widen(const char *dt, uint16_t *in, uint32_t *w, uint16_t *back) {
  char text[512];
  snprintf(text, sizeof text,
           "graph w policy=float32\n"
           "%%h = %s[N," COLS_S "] input() {index=0}\n"
           "%%w = f32[N," COLS_S "] cast(%%h) {to=f32}\n"
           "%%n = %s[N," COLS_S "] cast(%%w) {to=%s}\n"
           "output w = %%w\n"
           "output n = %%n\n",
           dt, dt, dt);
  ir_graph *g = parse(text);
  rt_program *p = compile(g, NULL);
  check_output_name(p, 0, "w");
  check_output_name(p, 1, "n");
  for (int64_t i = 0; i < ALL16_ROWS * COLS; i++) in[i] = (uint16_t)(i % ALL16);
  run(p, ALL16_ROWS, (const void *[]){in}, (void *[]){w, back});
  rt_program_destroy(p);
  ir_graph_destroy(g);
}

START_TEST(test_f16_widen_exhaustive) {
  static uint16_t in[ALL16_ROWS * COLS], back[ALL16_ROWS * COLS];
  static uint32_t w[ALL16_ROWS * COLS];
  run_widen("f16", in, w, back);
  for (int64_t i = 0; i < ALL16_ROWS * COLS; i++) {
    uint16_t h = in[i];
    if (f16_is_nan(h)) {
      ck_assert_msg(f32_is_nan(w[i]) && (w[i] >> 31) == (uint32_t)(h >> 15), "f32(f16 0x%04x): got 0x%08x", h, w[i]);
      ck_assert_msg(f16_is_nan(back[i]) && (back[i] >> 15) == (h >> 15), "f16(f32(0x%04x)): got 0x%04x", h,
                    back[i]);
      continue;
    }
    ck_assert_msg(w[i] == f16_widen_bits(h), "f32(f16 0x%04x) [col %lld]: got 0x%08x, want 0x%08x", h,
                  (long long)(i % COLS), w[i], f16_widen_bits(h));
    ck_assert_msg(back[i] == h, "f16(f32(f16 0x%04x)): got 0x%04x", h, back[i]);
  }
}
END_TEST

START_TEST(test_bf16_widen_exhaustive) {
  static uint16_t in[ALL16_ROWS * COLS], back[ALL16_ROWS * COLS];
  static uint32_t w[ALL16_ROWS * COLS];
  run_widen("bf16", in, w, back);
  for (int64_t i = 0; i < ALL16_ROWS * COLS; i++) {
    uint16_t h = in[i];
    /* widening is a shift, exact for every pattern, NaN payloads included */
    ck_assert_msg(w[i] == (uint32_t)h << 16, "f32(bf16 0x%04x) [col %lld]: got 0x%08x", h, (long long)(i % COLS),
                  w[i]);
    uint16_t want = f32_is_nan(w[i]) ? (uint16_t)((h & 0x8000) | 0x7fc0) : h;
    ck_assert_msg(back[i] == want, "bf16(f32(bf16 0x%04x)): got 0x%04x, want 0x%04x", h, back[i], want);
  }
}
END_TEST

/* ---- a sweep of f32 patterns in every binade, against util/half.c ---- */

enum { SWEEP_PER_EXP = 1024, SWEEP = 512 * SWEEP_PER_EXP, SWEEP_ROWS = (SWEEP + COLS - 1) / COLS };

START_TEST(test_f32_sweep_vs_host) {
  static uint32_t x[SWEEP_ROWS * COLS], w16[SWEEP_ROWS * COLS], wb[SWEEP_ROWS * COLS];
  static uint16_t h16[SWEEP_ROWS * COLS], hb[SWEEP_ROWS * COLS];
  /* per sign and exponent: mantissas at and around the f16 and bf16
   * rounding points, then random ones */
  static const uint32_t edges[] = {0x000000, 0x000001, 0x7fffff, 0x001000, 0x000fff, 0x001001,
                                   0x003000, 0x002fff, 0x003001, 0x008000, 0x007fff, 0x008001,
                                   0x018000, 0x017fff, 0x018001, 0x7fe000, 0x7ff000, 0x7fefff,
                                   0x7f8000, 0x400000, 0x7fc000, 0x3fffff};
  rng_state = 16;
  int64_t n = 0;
  for (uint32_t se = 0; se < 512; se++)
    for (int k = 0; k < SWEEP_PER_EXP; k++) {
      uint32_t man = k < (int)(sizeof edges / sizeof edges[0]) ? edges[k] : rng_u32() & 0x7fffff;
      x[n++] = se << 23 | man;
    }
  while (n < SWEEP_ROWS * COLS) x[n] = x[n - SWEEP], n++;
  ir_graph *g16 = parse(narrow_ir("f16"));
  rt_program *p16 = compile(g16, NULL);
  run(p16, SWEEP_ROWS, (const void *[]){x}, (void *[]){h16, w16});
  ir_graph *gb = parse(narrow_ir("bf16"));
  rt_program *pb = compile(gb, NULL);
  run(pb, SWEEP_ROWS, (const void *[]){x}, (void *[]){hb, wb});
  for (int64_t i = 0; i < SWEEP_ROWS * COLS; i++) {
    float f = bits_f32(x[i]);
    uint16_t want16 = half_f32_to_f16(f), wantb = half_f32_to_bf16(f);
    if (f32_is_nan(x[i]))
      ck_assert_msg(f16_nan_ok(h16[i], x[i]), "f16(0x%08x): got 0x%04x, want a quiet NaN", x[i], h16[i]);
    else
      ck_assert_msg(h16[i] == want16, "f16(0x%08x) [col %lld]: got 0x%04x, want 0x%04x", x[i],
                    (long long)(i % COLS), h16[i], want16);
    ck_assert_msg(hb[i] == wantb, "bf16(0x%08x) [col %lld]: got 0x%04x, want 0x%04x", x[i], (long long)(i % COLS),
                  hb[i], wantb);
  }
  rt_program_destroy(p16);
  rt_program_destroy(pb);
  ir_graph_destroy(g16);
  ir_graph_destroy(gb);
}
END_TEST

/* ---- 16-bit elementwise math against the reference interpreter ----
 *
 * For f16 and bf16 operands a, b, castor computes a + b and a * b in f32
 * and rounds the f32 result to 16 bits; ref_run computes in double and
 * rounds once. The two agree bit for bit: a * b is exact in f32 (an 11- or
 * 8-bit times an 11- or 8-bit significand fits in 24 bits; for bf16 a
 * product below f32's normal range rounds in f32, but only when it is below
 * 2^-133, where no f32 rounding can create a false bf16 tie: the one
 * candidate, (2^16 + 1) * 2^-150, is not a product of two 8-bit
 * significands), and a + b rounded to f32 then to the 16-bit type is
 * innocuous double rounding, since 24 >= 2p + 2 for p = 11 and p = 8
 * (Figueroa, "When is double rounding innocuous?", 1995), with f32 sums in
 * the subnormal range exact. So bf16 add/mul are double-rounding-free here
 * too; the tests check it on random operands over the whole bf16 exponent
 * range, subnormals and overflow included. A clip of a rounded value (a
 * sum it is fused with) is not rounded again when its bounds are values of
 * the type (k: relu6, cg_chain.c's keeps_rounded); q's bounds are not (-1 - 2^-8 - 2^-9 in
 * bf16, 1 + 2^-11 + 2^-12 in f16), so a clip that skipped its rounding
 * there would give the bound itself, not the 16-bit value ref_run rounds
 * it to. */

static const char *eltwise_ir(const char *dt) {
  static char buf[2560];
  snprintf(buf, sizeof buf,
           "graph e policy=float32\n"
           "%%x = f32[N," COLS_S "] input() {index=0}\n"
           "%%y = f32[N," COLS_S "] input() {index=1}\n"
           "%%hx = %s[N," COLS_S "] cast(%%x) {to=%s}\n"
           "%%hy = %s[N," COLS_S "] cast(%%y) {to=%s}\n"
           "%%r = %s[N," COLS_S "] relu(%%hx)\n"
           "%%s = %s[N," COLS_S "] add(%%r, %%hx)\n"
           "%%a = %s[N," COLS_S "] add(%%hx, %%hy)\n"
           "%%m = %s[N," COLS_S "] mul(%%hx, %%hy)\n"
           "%%c = %s[N," COLS_S "] mul(%%a, %%hx)\n"
           "%%ak = %s[N," COLS_S "] add(%%hx, %%hy)\n"
           "%%k = %s[N," COLS_S "] clip(%%ak) {min_value=0, max_value=6}\n"
           "%%aq = %s[N," COLS_S "] add(%%hx, %%hy)\n"
           "%%q = %s[N," COLS_S "] clip(%%aq) {min_value=-1.005859375, max_value=1.000732421875}\n"
           "%%s.f32 = f32[N," COLS_S "] cast(%%s) {to=f32}\n"
           "%%a.f32 = f32[N," COLS_S "] cast(%%a) {to=f32}\n"
           "%%m.f32 = f32[N," COLS_S "] cast(%%m) {to=f32}\n"
           "%%c.f32 = f32[N," COLS_S "] cast(%%c) {to=f32}\n"
           "%%k.f32 = f32[N," COLS_S "] cast(%%k) {to=f32}\n"
           "%%q.f32 = f32[N," COLS_S "] cast(%%q) {to=f32}\n"
           "output s = %%s.f32\n"
           "output a = %%a.f32\n"
           "output m = %%m.f32\n"
           "output c = %%c.f32\n"
           "output k = %%k.f32\n"
           "output q = %%q.f32\n",
           dt, dt, dt, dt, dt, dt, dt, dt, dt, dt, dt, dt, dt);
  return buf;
}

enum { EW_ROWS = 2048, EW = EW_ROWS * COLS, EW_OUTS = 6 };

/* A random f32 whose 16-bit rounding spans the type: exponents from below
 * the smallest subnormal to past the largest finite value, either sign,
 * with low bits that make the first cast round; some specials mixed in. */
static float random_operand(bool bf16) {
  uint32_t u = rng_u32(), sign = u & 0x80000000u;
  uint32_t k = rng_u32() % 64;
  if (k == 0) return bits_f32(cases[rng_u32() % N_CASES].in);
  int lo = bf16 ? 1 : 127 - 26, hi = bf16 ? 254 : 127 + 16;
  uint32_t e = (uint32_t)lo + rng_u32() % (uint32_t)(hi - lo + 1);
  return bits_f32(sign | e << 23 | (rng_u32() & 0x7fffff));
}

static void check_eltwise(const char *dt) {
  bool bf16 = !strcmp(dt, "bf16");
  static float x[EW], y[EW], out[EW_OUTS][EW];
  static const char *names[EW_OUTS] = {"s", "a", "m", "c", "k", "q"};
  rng_state = bf16 ? 0xbf16 : 0xf16;
  for (int64_t i = 0; i < EW; i++) x[i] = random_operand(bf16), y[i] = random_operand(bf16);
  /* near-ties for the sum: x = 1, y = one ulp of the 16-bit type / 2 (+-) */
  for (int64_t r = 0; r < 16; r++)
    for (int64_t j = 60; j < COLS; j++) {
      x[r * COLS + j] = r % 2 ? -1.0f : 1.0f;
      y[r * COLS + j] = ldexpf(1.0f + (float)(j - 65) * 0x1p-7f, bf16 ? -8 : -11) * (r % 4 < 2 ? 1.0f : 3.0f);
    }
  ir_graph *g = parse(eltwise_ir(dt));
  rt_program *p = compile(g, NULL);
  for (int k = 0; k < EW_OUTS; k++) check_output_name(p, k, names[k]);
  run(p, EW_ROWS, (const void *[]){x, y}, (void *[]){out[0], out[1], out[2], out[3], out[4], out[5]});
  double *dx = ref_from_f32(x, EW), *dy = ref_from_f32(y, EW), *want[EW_OUTS];
  char err[256];
  ck_assert_msg(ref_run(g, EW_ROWS, (const double *const[]){dx, dy}, want, err, sizeof err), "ref_run: %s", err);
  for (int k = 0; k < EW_OUTS; k++)
    for (int64_t i = 0; i < EW; i++) {
      uint32_t got = f32_bits(out[k][i]), wnt = f32_bits((float)want[k][i]);
      if (f32_is_nan(got) && f32_is_nan(wnt)) continue;
      /* exact, zeros' signs included: relu(-0) is +0 as in NumPy and JAX */
      ck_assert_msg(got == wnt, "%s %s [row %lld col %lld]: x=%a y=%a: got %a (0x%08x), ref %a (0x%08x)", dt,
                    names[k], (long long)(i / COLS), (long long)(i % COLS), (double)x[i], (double)y[i],
                    (double)out[k][i], got, (double)want[k][i], wnt);
    }
  ref_outputs_free(want, EW_OUTS);
  free(dx);
  free(dy);
  rt_program_destroy(p);
  ir_graph_destroy(g);
}

/* An NCHW image of one channel into NHWC, [N, 1, 5, 7] -> [N, 5, 7, 1]: a
 * reshape (fold-layout's), then a cast to the 16-bit type and a relu, as a
 * mixed policy's first convolution reads it. The kernel runs each row as
 * one flat line of 35 (cg_cpu.c, reshape_runs_flat: vectors, then the
 * tail one at a time), not 35 lines of one; against ref_run, bit for bit. */
static void check_reshape_flat(const char *dt) {
  bool bf16 = !strcmp(dt, "bf16");
  enum { RS_ROWS = 512, RS = RS_ROWS * 35 };
  static float x[RS], out[RS];
  char ir[1024];
  snprintf(ir, sizeof ir,
           "graph r policy=float32\n"
           "%%x = f32[N,1,5,7] input() {index=0}\n"
           "%%r = f32[N,5,7,1] reshape(%%x) {shape=[N,5,7,1]}\n"
           "%%h = %s[N,5,7,1] cast(%%r) {to=%s}\n"
           "%%u = %s[N,5,7,1] relu(%%h)\n"
           "%%y = f32[N,5,7,1] cast(%%u) {to=f32}\n"
           "output y = %%y\n",
           dt, dt, dt);
  rng_state = bf16 ? 0x5bf16 : 0x5f16;
  for (int64_t i = 0; i < RS; i++) x[i] = random_operand(bf16);
  ir_graph *g = parse(ir);
  rt_program *p = compile(g, NULL);
  run(p, RS_ROWS, (const void *[]){x}, (void *[]){out});
  double *dx = ref_from_f32(x, RS), *want[1];
  char err[256];
  ck_assert_msg(ref_run(g, RS_ROWS, (const double *const[]){dx}, want, err, sizeof err), "ref_run: %s", err);
  for (int64_t i = 0; i < RS; i++) {
    uint32_t got = f32_bits(out[i]), wnt = f32_bits((float)want[0][i]);
    if (f32_is_nan(got) && f32_is_nan(wnt)) continue;
    ck_assert_msg(got == wnt, "%s reshape+cast+relu [%lld]: x=%a: got %a (0x%08x), ref %a (0x%08x)", dt, (long long)i,
                  (double)x[i], (double)out[i], got, (double)want[0][i], wnt);
  }
  ref_outputs_free(want, 1);
  free(dx);
  rt_program_destroy(p);
  ir_graph_destroy(g);
}

START_TEST(test_reshape_flat_vs_ref) {
  check_reshape_flat("bf16");
  check_reshape_flat("f16");
}
END_TEST

START_TEST(test_f16_eltwise_vs_ref) { check_eltwise("f16"); }
END_TEST

START_TEST(test_bf16_eltwise_vs_ref) { check_eltwise("bf16"); }
END_TEST

/* ---- the bf16 path calls no conversion helper ----
 * LLVM 19 lowers `fptrunc float to bfloat` on x86 without AVX512-BF16 to a
 * call of __truncsfbf2 per element; castor rounds bf16 with integer ops
 * instead, or with vcvtneps2bf16 where the CPU has it (cg_target.c), so
 * the optimized module has no such call, and the bfloat type only on the
 * lines of that intrinsic (its call and the bitcast of its result, and a
 * phi and a store of it where LLVM sinks the stores of a chain's two
 * roundings, the instruction's and the recomputed one:
 * cg_emit_value_stored), never in an fptrunc or fpext. (An f16 fptrunc stays `fptrunc ... to half` in
 * the IR; whether the backend makes it vcvtps2ph (F16C) or a __truncsfhf2
 * call is below this dump.) */
START_TEST(test_bf16_no_libcalls) {
  str_buf b;
  str_buf_init(&b);
  ir_graph *g = parse(eltwise_ir("bf16"));
  rt_program *p = compile(g, &b);
  const char *s = str_buf_cstr(&b);
  ck_assert_msg(strstr(s, "define void @") != NULL, "no kernels in the dump:\n%.2000s", s);
  ck_assert_msg(strstr(s, "__truncsfbf2") == NULL, "bf16 rounding calls __truncsfbf2");
  ck_assert_msg(strstr(s, "__truncsfhf2") == NULL, "bf16 graph calls __truncsfhf2");
  for (const char *l = s; *l;) {
    const char *end = strchr(l, '\n');
    int len = end ? (int)(end - l) : (int)strlen(l);
    char line[1024];
    snprintf(line, sizeof line, "%.*s", len, l);
    if (strstr(line, "bfloat"))
      ck_assert_msg(!strstr(line, "fptrunc") && !strstr(line, "fpext") &&
                        (strstr(line, "cvtneps2bf16") || strstr(line, "bitcast") || strstr(line, " = phi <") ||
                         strstr(line, "store <")),
                    "the bfloat type outside the AVX512-BF16 intrinsic (lowered by a libcall on x86): %s", line);
    l += len + (end != NULL);
  }
  rt_program_destroy(p);
  ir_graph_destroy(g);
  str_buf_fini(&b);
}
END_TEST


/* ---- the AVX512-BF16 rounding against the integer rounding ----
 * Where the CPU has AVX512-BF16, a 16- or 8-lane bf16 rounding is
 * vcvtneps2bf16 with a branch to the integer rounding for a vector with a
 * NaN or subnormal lane (cg_math.c, cg_target.c). Inside a real GEMM
 * epilogue (an f32 matmul, K = 1, whose epilogue rounds the product to
 * bf16, adds a bf16 bias and applies relu, then hard-swish), compiled for
 * znver4 (the instruction), x86-64-v4 (AVX-512 without BF16: the integer
 * rounding on the same 16 lanes) and x86-64-v3 (8 lanes): every output
 * bit is the same, and the relu output is util/half.c's rounding of the
 * same steps computed here. The products x * w are exact (w a power of
 * two) unless they leave f32's range, and x spans every sign and exponent
 * with mantissas at and around bf16's rounding points, random ones, and
 * NaNs with payloads; w's column 0 is 1, so there the rounding input is x
 * itself, subnormals included. A second matmul of the same x and w, y2,
 * has relu as its sum's only reader, so its epilogue chain is cast, add,
 * relu and relu takes the add's rounding (cg_chain.c, relu_takes_rounding:
 * relu of the unrounded f32 sum, rounded once): y2 must be y bit for bit.
 * This case runs only where the host can run znver4 (main);
 * check_codegen16@bf16native exits 77 elsewhere. */

enum { NAT_PER_EXP = 40, NAT = 512 * NAT_PER_EXP + 64, NAT_ROWS = NAT };

static float nat_w[COLS];
static uint16_t nat_b[COLS];

static ir_graph *native_graph(void) {
  ir_graph *g = ir_graph_create("native");
  diag_loc loc = {0};
  float *w = nat_w;
  uint16_t *b = nat_b;
  for (int j = 0; j < COLS; j++) {
    static const float scale[] = {1.0f, -1.0f, 0.5f, 2.0f, -0x1p-8f, 0x1p8f, 0x1p-20f, -0x1p20f};
    w[j] = j == 0 ? 1.0f : scale[j % 8];
    /* zero, then bias values that make ties and cancellations with the products */
    static const uint16_t bias[] = {0x0000, 0x8000, 0x3f80, 0xbf80, 0x0001, 0x8080, 0x3380, 0x7f7f, 0xc000};
    b[j] = j < 2 ? 0 : bias[j % 9];
  }
  ir_node *x = ir_build_input(g, "x", &(ir_type){DT_F32, 2, {IR_DIM_BATCH, 1}}, 0, loc);
  ir_node *wc = ir_build_const(g, "w", &(ir_type){DT_F32, 2, {1, COLS}}, "w", w, loc);
  ir_node *mm = ir_build_matmul(g, "mm", x, wc, DT_F32, loc);
  ir_node *h = ir_build_cast(g, "mm.bf16", mm, DT_BF16, loc);
  ir_node *bc = ir_build_const(g, "b", &(ir_type){DT_BF16, 1, {COLS}}, "b", b, loc);
  ir_node *sum = ir_build_binary(g, IR_OP_ADD, "sum", h, bc, loc);
  ir_node *y = ir_build_unary(g, IR_OP_RELU, "relu", sum, loc);
  ir_node *hs = ir_build_binary(g, IR_OP_MUL, "hswish", sum, ir_build_unary(g, IR_OP_HARD_SIGMOID, "hsig", sum, loc),
                                loc);
  ir_node *mm2 = ir_build_matmul(g, "mm2", x, wc, DT_F32, loc);
  ir_node *sum2 = ir_build_binary(g, IR_OP_ADD, "sum2", ir_build_cast(g, "mm2.bf16", mm2, DT_BF16, loc), bc, loc);
  ir_graph_add_output(g, "y", y);
  ir_graph_add_output(g, "hs", hs);
  ir_graph_add_output(g, "y2", ir_build_unary(g, IR_OP_RELU, "relu2", sum2, loc));
  diag_sink *d = diag_sink_create();
  ck_assert_msg(ir_verify(g, d), "ir_verify: %s", diag_text(d));
  diag_sink_destroy(d);
  return g;
}

START_TEST(test_bf16_native_vs_integer) {
  static uint32_t x[NAT_ROWS];
  static uint16_t y[3][NAT_ROWS * COLS], hs[3][NAT_ROWS * COLS], y2[3][NAT_ROWS * COLS];
  static const uint32_t edges[] = {0x000000, 0x000001, 0x7fffff, 0x008000, 0x007fff, 0x008001, 0x018000,
                                   0x017fff, 0x018001, 0x7f8000, 0x7f7fff, 0x7fc000, 0x400000, 0x3fffff};
  rng_state = 40;
  int64_t n = 0;
  for (uint32_t se = 0; se < 512; se++)
    for (int k = 0; k < NAT_PER_EXP; k++) {
      uint32_t man = k < (int)(sizeof edges / sizeof edges[0]) ? edges[k] : rng_u32() & 0x7fffff;
      x[n++] = se << 23 | man;
    }
  /* NaNs with payloads, quiet and signalling, either sign; the infinities */
  static const uint32_t special[] = {0x7fc00000u, 0xffc00000u, 0x7f800001u, 0xff800001u, 0x7fa00000u,
                                     0x7fc12345u, 0xffbfffffu, 0x7fffffffu, 0x7f800000u, 0xff800000u};
  for (int k = 0; n < NAT_ROWS; k++) x[n++] = k < 10 ? special[k] : rng_u32();
  static const char *const cpus[] = {"znver4", "x86-64-v4", "x86-64-v3"};
  ir_graph *g = native_graph();
  for (int c = 0; c < 3; c++) {
    diag_sink *d = diag_sink_create();
    cg_options o;
    cg_options_init(&o);
    o.cpu = cpus[c];
    str_buf llvm;
    str_buf_init(&llvm);
    o.dump_llvm = &llvm;
    rt_program *p = cg_compile_cpu(g, &o, d);
    ck_assert_msg(p != NULL, "cg_compile_cpu (%s): %s", cpus[c], diag_text(d));
    /* the instruction is in znver4's GEMM epilogue, and only there */
    const char *ll = str_buf_cstr(&llvm);
    bool native = strstr(ll, "@llvm.x86.avx512bf16.cvtneps2bf16.512") != NULL;
    ck_assert_msg(native == (c == 0), "%s: vcvtneps2bf16 %s", cpus[c], native ? "used" : "not used");
    ck_assert_msg(strstr(ll, ".epilogue(") != NULL, "%s: no GEMM epilogue in the module", cpus[c]);
    run(p, NAT_ROWS, (const void *[]){x}, (void *[]){y[c], hs[c], y2[c]});
    rt_program_destroy(p);
    str_buf_fini(&llvm);
    diag_sink_destroy(d);
  }
  const float *w = nat_w;
  const uint16_t *b = nat_b;
  for (int64_t i = 0; i < NAT_ROWS * COLS; i++) {
    int64_t r = i / COLS, j = i % COLS;
    float a = bits_f32(x[r]) * w[j] + 0.0f; /* the GEMM's sum from 0 */
    uint16_t s = half_f32_to_bf16(half_bf16_to_f32(half_f32_to_bf16(a)) + half_bf16_to_f32(b[j]));
    float sf = half_bf16_to_f32(s);
    uint16_t want = sf > 0.0f || sf != sf ? s : 0; /* relu: NaN stays, -0 is +0 */
    for (int c = 0; c < 3; c++) {
      ck_assert_msg(y[c][i] == want, "%s: relu(bf16(0x%08x * w[%lld]) + b): got 0x%04x, want 0x%04x", cpus[c], x[r],
                    (long long)j, y[c][i], want);
      ck_assert_msg(y2[c][i] == want, "%s: relu(bf16(0x%08x * w[%lld]) + b), relu the sum's one reader: got 0x%04x, want "
                    "0x%04x", cpus[c], x[r], (long long)j, y2[c][i], want);
      ck_assert_msg(hs[c][i] == hs[1][i], "%s: hard-swish at 0x%08x, column %lld: got 0x%04x, x86-64-v4 0x%04x",
                    cpus[c], x[r], (long long)j, hs[c][i], hs[1][i]);
    }
  }
  ir_graph_destroy(g);
}
END_TEST

/* Whether this host can run znver4's code (AVX-512 + BF16). */
static bool host_has_bf16(void) {
  cg_options o;
  cg_options_init(&o);
  o.cpu = "znver4";
  str_buf line;
  str_buf_init(&line);
  diag_sink *d = diag_sink_create();
  bool ok = cg_cpu_describe(&o, &line, d);
  diag_sink_destroy(d);
  str_buf_fini(&line);
  return ok;
}

int main(void) {
  check_cpu_path("check_codegen16");
  Suite *s = suite_create("codegen16");
  TCase *tc = tcase_create("bits");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_f32_to_f16_numpy);
  tcase_add_test(tc, test_f32_to_bf16_ml_dtypes);
  tcase_add_test(tc, test_f16_widen_exhaustive);
  tcase_add_test(tc, test_bf16_widen_exhaustive);
  tcase_add_test(tc, test_f32_sweep_vs_host);
  suite_add_tcase(s, tc);
  TCase *te = tcase_create("eltwise");
  tcase_set_timeout(te, 120);
  tcase_add_test(te, test_f16_eltwise_vs_ref);
  tcase_add_test(te, test_bf16_eltwise_vs_ref);
  tcase_add_test(te, test_bf16_no_libcalls);
  tcase_add_test(te, test_reshape_flat_vs_ref);
  suite_add_tcase(s, te);
  const char *only = getenv("CK_RUN_CASE");
  if (host_has_bf16()) {
    TCase *tn = tcase_create("bf16native");
    tcase_set_timeout(tn, 120);
    tcase_add_test(tn, test_bf16_native_vs_integer);
    suite_add_tcase(s, tn);
  } else if (only && strcmp(only, "bf16native") == 0) {
    fputs("check_codegen16: skipped: the AVX512-BF16 rounding needs a CPU with AVX-512 + BF16 (znver4's code)\n",
          stderr);
    return 77;
  }
  return check_run(s);
}
