/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cg_target.c: the LLVM setup the JIT (cg_jit.c) and the ahead-of-time
 * target (cg_aot.c) share, so that both compile the very same optimized
 * kernels: the target machine for the host (or the requested) CPU and
 * features, and a module holding the plan's kernels, verified and run
 * through the kernels' pipeline (-O2, the default) or default<O{n}>.
 *
 * The JIT and AOT differ only after this point: the JIT hands the module
 * to ORC; AOT adds its data (weights, descriptors, a run function) around
 * the already optimized kernels and emits an object file.
 *
 * LLVM's failures go through the kit's one adapter (cg_llvm_error,
 * kernel/cg_kit.c) as DIAG_KIND_CODEGEN errors.
 */
#include <llvm-c/Analysis.h>
#include <llvm-c/Error.h>
#include <llvm-c/Target.h>
#include <llvm-c/TargetMachine.h>
#include <llvm-c/Transforms/PassBuilder.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/cpu/cg_cpu.h"
#include "runtime/cpu_features.h"

static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static void init_llvm(void) {
  cg_llvm_install_handlers();
  LLVMInitializeNativeTarget();
  LLVMInitializeNativeAsmPrinter();
}

/* The CPU and features to compile for: o's, else $CASTOR_CPU's, else the
 * host's. A name without features must be one of the named CPUs
 * (cg_cpu_caps.h), which fix the features; "host" and "native" mean the
 * host. The JIT runs what it compiles here, so it refuses a feature the
 * host lacks rather than let the program die of SIGILL. */
/* Whether LLVM's host feature string (+name,-name,...) turns `feature` (with its +) on. */
static bool has_host_feature(const char *all, const char *feature) {
  size_t n = strlen(feature);
  for (const char *s = all; s && (s = strstr(s, feature)) != NULL; s += n)
    if ((s == all || s[-1] == ',') && (s[n] == ',' || s[n] == 0)) return true;
  return false;
}

/* convolutional networks: $CASTOR_CONV_ALGO (auto, direct, winograd; unset
 * or empty: auto), which the CLI's --conv-algo sets */
static bool resolve_conv_algo(cg_target *t, diag_sink *d) {
  static const char *const names[] = {[CG_CONV_ALGO_AUTO] = "auto", [CG_CONV_ALGO_DIRECT] = "direct",
                                      [CG_CONV_ALGO_WINOGRAD] = "winograd"};
  const char *env = getenv("CASTOR_CONV_ALGO");
  t->caps.conv_algo = CG_CONV_ALGO_AUTO;
  if (!env || !*env) return true;
  for (int i = 0; i < (int)(sizeof names / sizeof *names); i++)
    if (strcmp(env, names[i]) == 0) {
      t->caps.conv_algo = i;
      return true;
    }
  diag_error_kind(d, DIAG_KIND_INVALID_ARGUMENT, (diag_loc){0},
                  "unknown convolution algorithm '%s' in CASTOR_CONV_ALGO (known: auto, direct, winograd)", env);
  return false;
}

static bool resolve_cpu(cg_target *t, const cg_options *o, bool jit, diag_sink *d) {
  const char *cpu = o->cpu, *features = o->features, *from = "";
  bool amx = false, amx_fallback = false;
  const char *env = getenv("CASTOR_CPU");
  if (!cpu && !features && env && *env) cpu = env, from = " in CASTOR_CPU";
  const char *shown = cpu ? cpu : "host";
  if (cpu && !features && (strcmp(cpu, "host") == 0 || strcmp(cpu, "native") == 0)) cpu = NULL;
  if (cpu && !features) {
    const cg_cpu_named *nc = cg_cpu_named_lookup(cpu);
    if (!nc) { /* the closest named CPU, as clang suggests */
      const char *near = NULL, *list = cg_cpu_named_list();
      int near_d = 3;
      size_t len = strlen(cpu);
      for (const char *q = list; *q;) {
        size_t n = strcspn(q, ",");
        int dist = str_edit_distance(cpu, len, q, n);
        if (dist < near_d && (size_t)dist < len) near = q, near_d = dist;
        q += n;
        while (*q == ',' || *q == ' ') q++;
      }
      if (near)
        diag_error_kind(d, DIAG_KIND_INVALID_ARGUMENT, (diag_loc){0}, "unknown CPU '%s'%s; did you mean '%.*s'? (known: host, %s)",
                        cpu, from, (int)strcspn(near, ","), near, list);
      else
        diag_error_kind(d, DIAG_KIND_INVALID_ARGUMENT, (diag_loc){0}, "unknown CPU '%s'%s (known: host, %s)", cpu, from, list);
      return false;
    }
    cpu = nc->llvm_cpu, features = nc->features;
    amx = nc->amx;
  }
  /* the host: a CPU with AMX-BF16 gets the AMX family (measured on a
   * Sapphire Rapids guest: a bf16 GEMM 5x faster than its f32 FMAs, where
   * vdpbf16ps is no faster than them; docs/numerics.md), with the same
   * tile-state request and fallback as the named sapphirerapids-amx */
  char *host_features = NULL;
  if (!cpu && !features) {
    host_features = LLVMGetHostCPUFeatures();
    if (has_host_feature(host_features, "+amx-bf16") && has_host_feature(host_features, "+amx-tile") &&
        has_host_feature(host_features, "+avx512bf16")) {
      amx = true;
      features = host_features;
    }
  }
  /* the AMX family: the JIT runs it here, so it asks Linux for the tile
   * state now (once per process); refused, or on a CPU without AMX, the
   * FMA family of the same CPU less AMX, with a note (an AOT executable
   * asks at its start-up instead: runtime/aot/aot_main.c) */
  str_buf fallback;
  str_buf_init(&fallback);
  if (amx && jit) {
    char why[160];
    if (!rt_amx_request(why, sizeof why)) {
      snprintf(t->note, sizeof t->note, "GEMM family amx-bf16 (CPU %s%s) not used: %s; the FMA family avx512 runs instead",
               shown, from, why);
      str_buf_printf(&fallback, "%s,-amx-tile,-amx-bf16", features);
      features = str_buf_cstr(&fallback);
      amx_fallback = true;
      amx = false;
    }
  }
  t->cpu = cpu ? LLVMCreateMessage(cpu) : LLVMGetHostCPUName();
  t->features = features ? LLVMCreateMessage(features) : LLVMGetHostCPUFeatures();
  if (features == host_features) features = NULL; /* the host's own: nothing to check against the host below */
  if (host_features) LLVMDisposeMessage(host_features);
  bool lacks = false;
  if (jit && features) {
    char *host = LLVMGetHostCPUFeatures(), *host_cpu = LLVMGetHostCPUName();
    char missing[64];
    lacks = cg_cpu_caps_missing(features, host, missing, (int)sizeof missing);
    if (lacks)
      diag_error_kind(d, DIAG_KIND_INVALID_ARGUMENT, (diag_loc){0},
                      "this host (%s) cannot run code for CPU '%s'%s: it lacks %s", host_cpu, shown,
                      from, missing);
    LLVMDisposeMessage(host);
    LLVMDisposeMessage(host_cpu);
  }
  str_buf_fini(&fallback);
  if (lacks) return false;
  cg_cpu_caps_parse(t->features, &t->caps);
  if (amx) t->caps.gemm_kernel = CG_GEMM_KERNEL_AMX_BF16;
  if (amx_fallback) t->caps.gemm_kernel = CG_GEMM_KERNEL_AVX512; /* vdpbf16ps is slower there (issue) */
  return resolve_conv_algo(t, d);
}

bool cg_cpu_describe(const cg_options *o, str_buf *out, diag_sink *d) {
  cg_target t;
  memset(&t, 0, sizeof t);
  pthread_once(&init_once, init_llvm);
  bool ok = resolve_cpu(&t, o, true, d);
  if (!ok) {
    if (t.cpu) LLVMDisposeMessage(t.cpu);
    if (t.features) LLVMDisposeMessage(t.features);
    return false;
  }
  const char *env = getenv("CASTOR_CPU");
  const char *name = o->cpu ? o->cpu : !o->features && env && *env ? env : "host";
  str_buf_printf(out, "%s (LLVM cpu %s): GEMM kernel %s, %d f32 lanes%s%s", name, t.cpu, cg_gemm_kernel_name(t.caps.gemm_kernel),
                 t.caps.vector_f32_lanes, t.caps.fma ? ", fma" : "", t.caps.f16c ? ", f16c" : "");
  if (t.note[0]) str_buf_printf(out, "; note: %s", t.note);
  LLVMDisposeMessage(t.cpu);
  LLVMDisposeMessage(t.features);
  return true;
}

void cg_cpu_note(const cg_options *o, str_buf *out) {
  cg_target t;
  memset(&t, 0, sizeof t);
  pthread_once(&init_once, init_llvm);
  diag_sink *d = diag_sink_create();
  if (resolve_cpu(&t, o, true, d) && t.note[0]) str_buf_puts(out, t.note);
  diag_sink_destroy(d);
  if (t.cpu) LLVMDisposeMessage(t.cpu);
  if (t.features) LLVMDisposeMessage(t.features);
}

static const char *const x86_cpus[] = {
#define CG_X86_CPU(name) name,
#include "codegen/cpu/cg_x86_cpus.def"
#undef CG_X86_CPU
};

/* An unknown --cpu is an error, not LLVM's warning and generic code. Only
 * x86 names are known here (cg_x86_cpus.def); other hosts pass the name to
 * LLVM as it is. */
static bool check_cpu(const char *triple, const char *cpu, diag_sink *d) {
  if (strncmp(triple, "x86_64", 6) != 0 && strncmp(triple, "i386", 4) != 0 && strncmp(triple, "i686", 4) != 0)
    return true;
  size_t n = sizeof x86_cpus / sizeof *x86_cpus, len = strlen(cpu);
  const char *near = NULL;
  int near_d = 3;
  for (size_t i = 0; i < n; i++) {
    if (!strcmp(cpu, x86_cpus[i])) return true;
    int dist = str_edit_distance(cpu, len, x86_cpus[i], strlen(x86_cpus[i]));
    if (dist < near_d && (size_t)dist < len) near = x86_cpus[i], near_d = dist;
  }
  if (near)
    diag_error_kind(d, DIAG_KIND_INVALID_ARGUMENT, (diag_loc){0}, "unknown CPU '%s' for %s; did you mean '%s'?", cpu,
                    triple, near);
  else
    diag_error_kind(d, DIAG_KIND_INVALID_ARGUMENT, (diag_loc){0},
                    "unknown CPU '%s' for %s (for example x86-64-v3, skylake-avx512, znver4; "
                    "'llc-19 -mcpu=help' lists all)",
                    cpu, triple);
  return false;
}

bool cg_target_init(cg_target *t, const cg_options *o, bool jit, diag_sink *d) {
  memset(t, 0, sizeof *t);
  pthread_once(&init_once, init_llvm);
  if (!resolve_cpu(t, o, jit, d)) return false;
  t->triple = LLVMGetDefaultTargetTriple();
  if (o->cpu && o->features && !check_cpu(t->triple, o->cpu, d)) return false;
  LLVMTargetRef target;
  char *msg = NULL;
  if (LLVMGetTargetFromTriple(t->triple, &target, &msg)) {
    char what[160];
    snprintf(what, sizeof what, "no target for '%s'", t->triple);
    cg_llvm_message_error(d, msg, DIAG_KIND_CODEGEN, what);
    return false;
  }
  LLVMCodeGenOptLevel lvl = o->opt_level <= 0 ? LLVMCodeGenLevelNone
                            : o->opt_level == 1 ? LLVMCodeGenLevelLess
                            : o->opt_level == 2 ? LLVMCodeGenLevelDefault
                                                : LLVMCodeGenLevelAggressive;
  /* PIC either way: an AOT object must link into position-independent executables */
  t->tm = LLVMCreateTargetMachine(target, t->triple, t->cpu, t->features, lvl, LLVMRelocPIC,
                                  jit ? LLVMCodeModelJITDefault : LLVMCodeModelDefault);
  if (!t->tm) {
    char what[160];
    snprintf(what, sizeof what, "cannot create a target machine for '%s' (cpu '%s')", t->triple, t->cpu);
    cg_llvm_message_error(d, NULL, DIAG_KIND_CODEGEN, what);
    return false;
  }
  return true;
}

void cg_target_fini(cg_target *t) {
  if (t->tm) LLVMDisposeTargetMachine(t->tm);
  if (t->triple) LLVMDisposeMessage(t->triple);
  if (t->cpu) LLVMDisposeMessage(t->cpu);
  if (t->features) LLVMDisposeMessage(t->features);
  memset(t, 0, sizeof *t);
}

/* The kernels' pipeline at -O2 (the default). The emitters hand LLVM loop
 * nests that are vectorized and register-blocked by construction (vector
 * types, FMA and tile intrinsics, accumulators in allocas, one per
 * register): what they need from the optimizer is SROA (accumulators to
 * registers), redundancy elimination (address arithmetic, loads of the
 * buffer table), combining, CFG clean-up, hoisting of loop invariants, and
 * the loop canonicalization the backend's strength reduction builds on:
 * rotation, induction variables, deletion of dead loops (without rotation
 * and deletion the AMX kernels' short k-step loops ran resnet50 4% slower
 * under mixed_bfloat16; without indvars the implicit-GEMM packing of small
 * convolutions 12-15% slower). default<O2>'s IPO, unswitching, idioms,
 * second SROA/GVN rounds and the rest took about a fifth of torchvision
 * resnet50's compile CPU; the backend still runs at CodeGenOpt::Default.
 * No pass here or there may reassociate or contract floating point (no
 * fast-math flags are emitted; FMAs are explicit), so the choice changes
 * speed, never a result bit (bench/results/compile-resnet50-2026-11-29-s12.md).
 * -O1 and -O3 keep LLVM's default<O1> and default<O3>. (instcombine without
 * verify-fixpoint, as default<O2> runs it: LLVM 19's textual instcombine
 * otherwise fails a kernel whose fixpoint takes two rounds.) */
static const char kernel_pipeline[] =
    "function(sroa,early-cse,instcombine<no-verify-fixpoint>,simplifycfg,loop-mssa(licm,loop-rotate,licm),"
    "simplifycfg,instcombine<no-verify-fixpoint>,loop(indvars,loop-deletion),gvn,instcombine<no-verify-fixpoint>,"
    "simplifycfg)";

bool cg_target_optimize(cg_target *t, LLVMModuleRef mod, const cg_options *o, diag_sink *d) {
  if (o->opt_level > 0) {
    char pipeline[sizeof kernel_pipeline];
    if (o->opt_level == 2) memcpy(pipeline, kernel_pipeline, sizeof kernel_pipeline);
    else snprintf(pipeline, sizeof pipeline, "default<O%d>", o->opt_level > 3 ? 3 : o->opt_level);
    LLVMPassBuilderOptionsRef po = LLVMCreatePassBuilderOptions();
    /* the kernels are vectorized by construction (cg_cpu.c, cg_gemm.c): the
     * auto-vectorizers and unrolling would only cost compile time */
    LLVMPassBuilderOptionsSetLoopVectorization(po, 0);
    LLVMPassBuilderOptionsSetSLPVectorization(po, 0);
    LLVMPassBuilderOptionsSetLoopUnrolling(po, 0);
    LLVMErrorRef err = LLVMRunPasses(mod, pipeline, t->tm, po);
    LLVMDisposePassBuilderOptions(po);
    if (cg_llvm_error(d, err, DIAG_KIND_CODEGEN, "optimizing")) return false;
  }
  if (o->dump_llvm) {
    char *s = LLVMPrintModuleToString(mod);
    str_buf_puts(o->dump_llvm, s);
    LLVMDisposeMessage(s);
  }
  return true;
}

/* cg_emitter.bf16_native on x86 AVX512-BF16 (+ DQ for vfpclassps, + VL
 * for 8 lanes): vcvtneps2bf16, round to nearest even, but with subnormal
 * inputs taken as zero and a NaN's payload kept (checked over all 2^32
 * inputs: bench/results/cnn-bf16-2026-11-29-s12.md), so vfpclassps flags
 * the lanes that are a quiet NaN (0x01), a signalling NaN (0x80) or
 * subnormal (0x20). A normal input rounds to a normal or infinite bf16 (the
 * two share f32's exponent range), so the output's flush never applies. */
static LLVMValueRef x86_bf16_native(cg_emitter *e, LLVMValueRef v, int lanes, LLVMValueRef *out_odd) {
  const char *cvt = lanes == 16 ? "llvm.x86.avx512bf16.cvtneps2bf16.512"
                    : lanes == 8 ? "llvm.x86.avx512bf16.cvtneps2bf16.256" : NULL;
  const char *cls = lanes == 16 ? "llvm.x86.avx512.fpclass.ps.512" : "llvm.x86.avx512.fpclass.ps.256";
  if (!cvt) return NULL;
  LLVMValueRef f = LLVMGetIntrinsicDeclaration(e->mod, LLVMLookupIntrinsicID(cls, strlen(cls)), NULL, 0);
  LLVMValueRef args[] = {v, LLVMConstInt(e->i32, 0x01 | 0x80 | 0x20, 0)};
  LLVMValueRef odd = LLVMBuildCall2(e->b, LLVMGlobalGetValueType(f), f, args, 2, "");
  LLVMTypeRef mask = LLVMIntTypeInContext(e->ctx, (unsigned)lanes);
  odd = LLVMBuildBitCast(e->b, odd, mask, "");
  *out_odd = LLVMBuildICmp(e->b, LLVMIntNE, odd, LLVMConstNull(mask), "bf16.odd");
  f = LLVMGetIntrinsicDeclaration(e->mod, LLVMLookupIntrinsicID(cvt, strlen(cvt)), NULL, 0);
  LLVMValueRef h = LLVMBuildCall2(e->b, LLVMGlobalGetValueType(f), f, &v, 1, "");
  return LLVMBuildBitCast(e->b, h, LLVMVectorType(LLVMInt16TypeInContext(e->ctx), (unsigned)lanes), "");
}

LLVMModuleRef cg_target_emit_module(cg_target *t, LLVMContextRef ctx, const char *name,
                                    const cg_plan *plan, const cg_options *o, bool optimize, cg_emitter *e,
                                    cg_cpu_layout *layout, const bool *only, diag_sink *d) {
  LLVMModuleRef mod = LLVMModuleCreateWithNameInContext(name, ctx);
  LLVMSetTarget(mod, t->triple);
  LLVMTargetDataRef dl = LLVMCreateTargetDataLayout(t->tm);
  LLVMSetModuleDataLayout(mod, dl);
  LLVMDisposeTargetData(dl);
  cg_emitter_init(e, ctx, mod, t->caps.vector_f32_lanes);
  const cg_cpu_caps *cap = &t->caps;
  e->const_loads_invariant = true;
  if (cap->avx512bf16 && cap->avx512f && cap->avx512dq && cap->avx512vl) e->bf16_native = x86_bf16_native;
  if (!layout->planned) layout->share_none = o->no_kernel_sharing;
  char *msg = NULL;
  if (!cg_cpu_emit_kernels(e, &t->caps, plan, layout, only, d)) goto fail;
  if (LLVMVerifyModule(mod, LLVMReturnStatusAction, &msg)) {
    diag_error(d, (diag_loc){0}, "internal error: generated LLVM IR is invalid: %s", msg);
    LLVMDisposeMessage(msg);
    goto fail;
  }
  LLVMDisposeMessage(msg);
  if (optimize && !cg_target_optimize(t, mod, o, d)) goto fail;
  return mod;
fail:
  LLVMDisposeModule(mod);
  e->mod = NULL;
  return NULL;
}
