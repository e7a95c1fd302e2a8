/* SPDX-License-Identifier: Apache-2.0 */
/*
 * check_rnn_gates.c: the recurrent scans' gate activations
 * (cg_emit_gate_sigmoid, cg_emit_gate_tanh: codegen/kernel/cg_math.c),
 * JIT-compiled alone on 16 lanes and on 1, against float64's sigmoid and
 * tanh, over a dense sweep of [-100, 100], every power of two, and the
 * special values:
 *
 * - error at most 4 ulps of the result (relative, 2^-21) where |y| >=
 *   2^-126 (f32's normal range: sigmoid's tail to -87.3), and at most
 *   2^-125 in absolute terms below that (sigmoid past -87.3: the old
 *   formula's 0 past -88.7, the gates' 2^-126);
 * - the ends exact: sigmoid 0 and 1, tanh -1 and 1 past the range, tanh(+-0)
 *   = +-0, sigmoid(-inf) = 0, NaN in, NaN out;
 * - the 16 lanes and the scalar give the same bits (a scan's vector body
 *   and its tail agree); and the old formulas (cg_emit_unary's sigmoid and
 *   tanh) meet the same bound, so the gates did not trade accuracy.
 *
 * Compiled for $CASTOR_CPU's LLVM CPU and features where it is set (the
 * ctest entries check_rnn_gates@x86-64-v3 and @x86-64: without FMA the
 * fmuladds are a multiply and an add), else for the host.
 */
#include <check.h>
#include <llvm-c/Analysis.h>
#include <llvm-c/Core.h>
#include <llvm-c/LLJIT.h>
#include <llvm-c/Target.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/cpu/cg_cpu_caps.h"
#include "codegen/kernel/cg_kit.h"
#include "tests/unit/test_support.h"

/* void f(const float *x, float *y, i64 n): y[i] = formula(x[i]), n a multiple of lanes */
typedef void (*map_fn)(const float *, float *, int64_t);

typedef LLVMValueRef (*formula)(cg_emitter *e, LLVMValueRef x, const char *name);

static LLVMValueRef old_sigmoid(cg_emitter *e, LLVMValueRef x, const char *name) {
  return cg_emit_unary(e, IR_OP_SIGMOID, x, name);
}
static LLVMValueRef old_tanh(cg_emitter *e, LLVMValueRef x, const char *name) {
  return cg_emit_unary(e, IR_OP_TANH, x, name);
}

static const struct {
  const char *name;
  formula f;
  bool tanh;
} formulas[] = {
    {"gate_sigmoid", cg_emit_gate_sigmoid, false}, {"gate_tanh", cg_emit_gate_tanh, true},
    {"sigmoid", old_sigmoid, false},               {"tanh", old_tanh, true},
};
enum { N_FORMULAS = sizeof formulas / sizeof formulas[0], N_LANES = 2 };
static const int lanes_of[N_LANES] = {16, 1};

/* one function per formula and lane count, in one module */
static void emit_map(cg_emitter *e, const char *fname, formula f, int lanes) {
  LLVMTypeRef params[3] = {e->ptr, e->ptr, e->i64};
  LLVMValueRef fn = LLVMAddFunction(e->mod, fname, LLVMFunctionType(LLVMVoidTypeInContext(e->ctx), params, 3, 0));
  LLVMBasicBlockRef entry = LLVMAppendBasicBlockInContext(e->ctx, fn, "entry"),
                    body = LLVMAppendBasicBlockInContext(e->ctx, fn, "body"),
                    done = LLVMAppendBasicBlockInContext(e->ctx, fn, "done");
  LLVMBuilderRef b = e->b;
  LLVMPositionBuilderAtEnd(b, entry);
  LLVMValueRef n = LLVMGetParam(fn, 2);
  LLVMBuildCondBr(b, LLVMBuildICmp(b, LLVMIntSGT, n, cg_i64(e, 0), ""), body, done);
  LLVMPositionBuilderAtEnd(b, body);
  LLVMValueRef i = LLVMBuildPhi(b, e->i64, "i");
  LLVMTypeRef vt = lanes > 1 ? LLVMVectorType(e->f32, (unsigned)lanes) : e->f32;
  LLVMValueRef xp = LLVMBuildGEP2(b, e->f32, LLVMGetParam(fn, 0), &i, 1, "");
  LLVMValueRef yp = LLVMBuildGEP2(b, e->f32, LLVMGetParam(fn, 1), &i, 1, "");
  LLVMValueRef x = LLVMBuildLoad2(b, vt, xp, "x");
  LLVMSetAlignment(x, 4);
  LLVMSetAlignment(LLVMBuildStore(b, f(e, x, "y"), yp), 4);
  LLVMValueRef next = LLVMBuildAdd(b, i, cg_i64(e, lanes), "");
  LLVMValueRef zero = cg_i64(e, 0);
  LLVMAddIncoming(i, (LLVMValueRef[]){zero, next}, (LLVMBasicBlockRef[]){entry, body}, 2);
  LLVMBuildCondBr(b, LLVMBuildICmp(b, LLVMIntSLT, next, n, ""), body, done);
  LLVMPositionBuilderAtEnd(b, done);
  LLVMBuildRetVoid(b);
}

static float want_of(bool is_tanh, float x) {
  double d = x;
  return (float)(is_tanh ? tanh(d) : 1.0 / (1.0 + exp(-d)));
}

/* the sweep: [-100, 100] in steps of 2^-10 (around 0 in steps that reach
 * tanh's polynomial and its switch at 0.625 densely), every power of two
 * of both signs, and the special values; padded to a multiple of 16 */
static float *sweep(int64_t *out_n) {
  int64_t cap = 400000, n = 0;
  float *x = malloc((size_t)cap * sizeof *x);
  for (int64_t k = -102400; k <= 102400; k++) x[n++] = (float)k / 1024.0f;
  for (int64_t k = -20000; k <= 20000; k++) x[n++] = (float)k * 3.1e-5f; /* +-0.62: the polynomial and its edge */
  for (int p = -149; p <= 127; p++) x[n++] = ldexpf(1.0f, p), x[n++] = -ldexpf(1.0f, p);
  static const float special[] = {0.0f, -0.0f, 0.625f, -0.625f, 0.62499994f, 87.0f, -87.0f, 88.7f, -88.7f, 89.0f,
                                  -104.0f, 1e30f, -1e30f, 3.4e38f, -3.4e38f};
  for (size_t k = 0; k < sizeof special / sizeof special[0]; k++) x[n++] = special[k];
  x[n++] = INFINITY, x[n++] = -INFINITY, x[n++] = NAN;
  while (n % 16) x[n++] = 1.0f;
  *out_n = n;
  return x;
}

START_TEST(test_gate_formulas) {
  LLVMInitializeNativeTarget();
  LLVMInitializeNativeAsmPrinter();
  LLVMOrcThreadSafeContextRef tsc = LLVMOrcCreateNewThreadSafeContext();
  LLVMContextRef ctx = LLVMOrcThreadSafeContextGetContext(tsc);
  LLVMModuleRef mod = LLVMModuleCreateWithNameInContext("gates", ctx);
  cg_emitter e;
  cg_emitter_init(&e, ctx, mod, 16);
  char fname[64];
  for (int f = 0; f < N_FORMULAS; f++)
    for (int l = 0; l < N_LANES; l++) {
      snprintf(fname, sizeof fname, "%s_%d", formulas[f].name, lanes_of[l]);
      emit_map(&e, fname, formulas[f].f, lanes_of[l]);
    }
  char *msg = NULL;
  ck_assert_msg(!LLVMVerifyModule(mod, LLVMReturnStatusAction, &msg), "%s", msg);
  LLVMDisposeMessage(msg);
  cg_emitter_fini(&e);
  LLVMOrcLLJITRef jit;
  LLVMOrcLLJITBuilderRef builder = LLVMOrcCreateLLJITBuilder();
  const cg_cpu_named *named = cg_cpu_named_lookup(getenv("CASTOR_CPU"));
  if (named) { /* the named CPU path's code (check_cpu_path skipped it where this host cannot run it) */
    char *triple = LLVMGetDefaultTargetTriple(), *terr = NULL;
    LLVMTargetRef target;
    ck_assert_msg(!LLVMGetTargetFromTriple(triple, &target, &terr), "%s", terr);
    LLVMTargetMachineRef tm = LLVMCreateTargetMachine(target, triple, named->llvm_cpu, named->features,
                                                      LLVMCodeGenLevelDefault, LLVMRelocDefault, LLVMCodeModelJITDefault);
    LLVMDisposeMessage(triple);
    LLVMOrcLLJITBuilderSetJITTargetMachineBuilder(builder, LLVMOrcJITTargetMachineBuilderCreateFromTargetMachine(tm));
  }
  ck_assert(!LLVMOrcCreateLLJIT(&jit, builder));
  ck_assert(!LLVMOrcLLJITAddLLVMIRModule(jit, LLVMOrcLLJITGetMainJITDylib(jit), LLVMOrcCreateNewThreadSafeModule(mod, tsc)));

  int64_t n;
  float *x = sweep(&n), *y[N_LANES];
  for (int l = 0; l < N_LANES; l++) y[l] = malloc((size_t)n * sizeof(float));
  for (int f = 0; f < N_FORMULAS; f++) {
    bool is_tanh = formulas[f].tanh;
    for (int l = 0; l < N_LANES; l++) {
      LLVMOrcExecutorAddress addr = 0;
      snprintf(fname, sizeof fname, "%s_%d", formulas[f].name, lanes_of[l]);
      ck_assert_msg(!LLVMOrcLLJITLookup(jit, &addr, fname), "%s", fname);
      ((map_fn)(uintptr_t)addr)(x, y[l], n);
    }
    ck_assert_msg(!memcmp(y[0], y[1], (size_t)n * sizeof(float)), "%s: 16 lanes and 1 differ", formulas[f].name);
    double worst = 0;
    float worst_x = 0;
    for (int64_t i = 0; i < n; i++) {
      float got = y[0][i], want = want_of(is_tanh, x[i]);
      if (isnan(x[i])) {
        ck_assert_msg(isnan(got), "%s(NaN) = %g", formulas[f].name, got);
        continue;
      }
      ck_assert_msg(!isnan(got), "%s(%a) is NaN", formulas[f].name, x[i]);
      double err = fabs((double)got - (double)want_of(is_tanh, x[i]));
      double ulps = fabs(want) >= 0x1p-126 ? err / (fabs(want) * 0x1p-23) : err / 0x1p-125 * 4; /* 4 = the bound */
      if (ulps > worst) worst = ulps, worst_x = x[i];
      ck_assert_msg(ulps <= 4, "%s(%a) = %a, want %a (float64 rounded): %.2f ulps", formulas[f].name, x[i], got, want,
                    ulps);
      if (x[i] == 0) /* sigmoid(0) = 1/2, tanh(+-0) = +-0 (the gates'; the old tanh's -0 is +0) */
        ck_assert_msg(is_tanh ? got == 0 && (signbit(got) == signbit(x[i]) || formulas[f].f == old_tanh) : got == 0.5f,
                      "%s(%g) = %g", formulas[f].name, x[i], got);
      if (fabs(x[i]) >= 20) /* the ends exact */
        ck_assert_msg(got == want || (!is_tanh && x[i] < 0), "%s(%g) = %a, want %a", formulas[f].name, x[i], got,
                      want);
    }
    fprintf(stderr, "check_rnn_gates: %s: worst %.2f ulps at %a over %lld values\n", formulas[f].name, worst, worst_x,
            (long long)n);
  }
  for (int l = 0; l < N_LANES; l++) free(y[l]);
  free(x);
  LLVMOrcDisposeLLJIT(jit);
  LLVMOrcDisposeThreadSafeContext(tsc);
}
END_TEST

int main(void) {
  check_cpu_path("check_rnn_gates");
  Suite *s = suite_create("rnn_gates");
  TCase *tc = tcase_create("rnn_gates");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_gate_formulas);
  suite_add_tcase(s, tc);
  return check_run(s);
}
