/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cg_kit.c: the target-neutral part of kernel emission that every
 * target's emitters share: the emitter's types, counted loops, addressing
 * into the kernel's buffers, entry-block allocas, partial (masked by
 * count) vector loads and stores, and the one adapter from LLVM's errors
 * to diagnostics.
 *
 * Contract: every function emits at the builder's position and leaves the
 * builder after what it emitted (loops: in the body after _begin, after
 * the loop after _end). Values are named after the IR nodes they come
 * from, so `castor dump --emit=llvm` reads beside the IR dump. Nothing
 * here depends on a target's features: widths come in as arguments.
 */
#include <llvm-c/ErrorHandling.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "codegen/kernel/cg_kit.h"
#include "util/sys.h"

#define B (e->b)

/* ---- the emitter and LLVM's errors ---- */

void cg_emitter_init(cg_emitter *e, LLVMContextRef ctx, LLVMModuleRef mod, int vw) {
  memset(e, 0, sizeof *e);
  e->ctx = ctx, e->mod = mod;
  e->b = LLVMCreateBuilderInContext(ctx);
  e->f32 = LLVMFloatTypeInContext(ctx), e->half = LLVMHalfTypeInContext(ctx);
  e->bf16 = LLVMBFloatTypeInContext(ctx);
  e->i1 = LLVMInt1TypeInContext(ctx), e->i32 = LLVMInt32TypeInContext(ctx);
  e->i64 = LLVMInt64TypeInContext(ctx), e->ptr = LLVMPointerTypeInContext(ctx, 0);
  e->void_ = LLVMVoidTypeInContext(ctx);
  e->vw = vw;
}

void cg_emitter_fini(cg_emitter *e) {
  if (e->b) LLVMDisposeBuilder(e->b);
  e->b = NULL;
}

bool cg_llvm_error(diag_sink *d, LLVMErrorRef err, diag_kind kind, const char *what) {
  if (!err) return false;
  char *msg = LLVMGetErrorMessage(err);
  diag_error_kind(d, kind, (diag_loc){0}, "LLVM: %s: %s", what, msg);
  LLVMDisposeErrorMessage(msg);
  return true;
}

bool cg_llvm_message_error(diag_sink *d, char *msg, diag_kind kind, const char *what) {
  if (msg && *msg) diag_error_kind(d, kind, (diag_loc){0}, "LLVM: %s: %s", what, msg);
  else diag_error_kind(d, kind, (diag_loc){0}, "LLVM: %s", what);
  if (msg) LLVMDisposeMessage(msg);
  return true;
}

/* LLVM's C API has a hook for fatal errors (LLVMInstallFatalErrorHandler)
 * but none for allocation failures: llvm::install_bad_alloc_error_handler
 * and llvm::install_out_of_memory_new_handler are C++ only. castor is C,
 * so it calls the two by their (Itanium ABI) names, which libLLVM-19.so
 * and LLVM's static libraries export; their C++ types are plain function
 * pointers and a bool, the same in C. Without them LLVM writes "LLVM ERROR:
 * out of memory" and aborts, and a failed operator new terminates with
 * std::bad_alloc (LLVM is built without exceptions). */
typedef void (*cg_llvm_fatal_fn)(void *user_data, const char *reason, bool gen_crash_diag);
extern void cg_llvm_install_bad_alloc(cg_llvm_fatal_fn handler, void *user_data) __asm__(
    "_ZN4llvm31install_bad_alloc_error_handlerEPFvPvPKcbES0_");
extern void cg_llvm_install_new_handler(void) __asm__("_ZN4llvm33install_out_of_memory_new_handlerEv");

static void on_bad_alloc(void *user_data, const char *reason, bool gen_crash_diag) {
  (void)user_data, (void)gen_crash_diag;
  char what[160];
  snprintf(what, sizeof what, "LLVM: %s", reason && *reason ? reason : "allocation failed");
  mem_out_of_memory(what);
}

static void on_fatal(const char *reason) {
  /* LLVM cannot go on (its state is undefined after a fatal error), and
   * may have run out of memory on the way: castor's error, status 1 */
  char buf[1024];
  int n = snprintf(buf, sizeof buf, "castor: error: LLVM: %s\n", reason ? reason : "fatal error");
  if (n > 0) (void)!write(2, buf, (size_t)n < sizeof buf ? (size_t)n : sizeof buf - 1);
  _exit(1);
}

static pthread_once_t handlers_once = PTHREAD_ONCE_INIT;
static void install_handlers(void) {
  LLVMInstallFatalErrorHandler(on_fatal);
  cg_llvm_install_bad_alloc(on_bad_alloc, NULL);
  cg_llvm_install_new_handler();
}

void cg_llvm_install_handlers(void) { pthread_once(&handlers_once, install_handlers); }

LLVMValueRef cg_i64(cg_emitter *e, int64_t v) { return LLVMConstInt(e->i64, (unsigned long long)v, 1); }

/* ---- loops ---- */

cg_loop cg_loop_begin(cg_kctx *c, LLVMValueRef start, LLVMValueRef end, int64_t step, const char *name) {
  cg_emitter *e = c->e;
  cg_loop l;
  LLVMBasicBlockRef pre = LLVMGetInsertBlock(B);
  char nm[128];
  snprintf(nm, sizeof nm, "%s.header", name);
  l.header = LLVMAppendBasicBlockInContext(e->ctx, c->fn, nm);
  snprintf(nm, sizeof nm, "%s.body", name);
  l.body = LLVMAppendBasicBlockInContext(e->ctx, c->fn, nm);
  snprintf(nm, sizeof nm, "%s.exit", name);
  l.exit = LLVMAppendBasicBlockInContext(e->ctx, c->fn, nm);
  LLVMBuildBr(B, l.header);
  LLVMPositionBuilderAtEnd(B, l.header);
  l.iv = LLVMBuildPhi(B, e->i64, name);
  LLVMAddIncoming(l.iv, &start, &pre, 1);
  l.step = cg_i64(e, step);
  /* iv + step <= end, so a vector step never reads past the range */
  LLVMValueRef next = LLVMBuildAdd(B, l.iv, l.step, "");
  LLVMBuildCondBr(B, LLVMBuildICmp(B, LLVMIntSLE, next, end, ""), l.body, l.exit);
  LLVMPositionBuilderAtEnd(B, l.body);
  return l;
}

void cg_loop_end(cg_kctx *c, cg_loop *l) {
  cg_emitter *e = c->e;
  LLVMValueRef next = LLVMBuildAdd(B, l->iv, l->step, "");
  LLVMBasicBlockRef from = LLVMGetInsertBlock(B);
  LLVMAddIncoming(l->iv, &next, &from, 1);
  LLVMBuildBr(B, l->header);
  LLVMPositionBuilderAtEnd(B, l->exit);
}

/* ---- addressing and small helpers ---- */

LLVMValueRef cg_elem_ptr(cg_kctx *c, const ir_node *n, LLVMValueRef index) {
  cg_emitter *e = c->e;
  return LLVMBuildGEP2(B, cg_llvm_dtype(e, n->type.dtype), c->base[n->id], &index, 1, "");
}

LLVMValueRef cg_fmuladd(cg_emitter *e, LLVMValueRef a, LLVMValueRef b, LLVMValueRef acc) {
  LLVMTypeRef ty = LLVMTypeOf(acc);
  unsigned id = LLVMLookupIntrinsicID("llvm.fmuladd", strlen("llvm.fmuladd"));
  LLVMValueRef f = LLVMGetIntrinsicDeclaration(e->mod, id, &ty, 1);
  LLVMValueRef args[] = {a, b, acc};
  return LLVMBuildCall2(B, LLVMGlobalGetValueType(f), f, args, 3, "");
}

LLVMValueRef cg_splat(cg_emitter *e, LLVMValueRef s, int lanes) {
  if (lanes == 1) return s;
  LLVMTypeRef vt = LLVMVectorType(LLVMTypeOf(s), (unsigned)lanes);
  LLVMValueRef v = LLVMBuildInsertElement(B, LLVMGetUndef(vt), s, cg_i64(e, 0), "");
  LLVMValueRef zeros = LLVMConstNull(LLVMVectorType(e->i32, (unsigned)lanes));
  return LLVMBuildShuffleVector(B, v, LLVMGetUndef(vt), zeros, "");
}

void cg_nhwc_coords(cg_emitter *e, const ir_type *t, LLVMValueRef i, LLVMValueRef coord[4]) {
  LLVMValueRef rem = i;
  for (int r = 3; r >= 1; r--) {
    coord[r] = LLVMBuildURem(B, rem, cg_i64(e, t->dims[r]), "");
    rem = LLVMBuildUDiv(B, rem, cg_i64(e, t->dims[r]), "");
  }
  coord[0] = rem;
}

LLVMValueRef cg_nhwc_index(cg_emitter *e, const ir_type *t, LLVMValueRef n, LLVMValueRef h, LLVMValueRef w,
                           LLVMValueRef ch) {
  LLVMValueRef r = LLVMBuildAdd(B, LLVMBuildMul(B, n, cg_i64(e, t->dims[1]), ""), h, "");
  r = LLVMBuildAdd(B, LLVMBuildMul(B, r, cg_i64(e, t->dims[2]), ""), w, "");
  return LLVMBuildAdd(B, LLVMBuildMul(B, r, cg_i64(e, t->dims[3]), ""), ch, "");
}

LLVMValueRef cg_entry_alloca(cg_kctx *c, LLVMTypeRef ty, const char *name) {
  cg_emitter *e = c->e;
  LLVMBasicBlockRef cur = LLVMGetInsertBlock(B), entry = LLVMGetEntryBasicBlock(c->fn);
  LLVMValueRef first = LLVMGetFirstInstruction(entry);
  if (first) LLVMPositionBuilder(B, entry, first);
  else LLVMPositionBuilderAtEnd(B, entry);
  LLVMValueRef a = LLVMBuildAlloca(B, ty, name);
  LLVMPositionBuilderAtEnd(B, cur);
  return a;
}

bool cg_is_bias(const ir_node *o) { return o->type.rank == 1 && !ir_type_is_batched(&o->type); }

LLVMValueRef cg_load_part(cg_emitter *e, ir_dtype dt, LLVMValueRef ptr, int lanes, int valid, const char *name) {
  if (valid >= lanes) return cg_emit_load(e, dt, ptr, lanes, name);
  LLVMValueRef v = LLVMConstNull(LLVMVectorType(cg_lane_type(e, dt), (unsigned)lanes));
  LLVMTypeRef st = cg_llvm_dtype(e, dt);
  for (int i = 0; i < valid; i++) {
    LLVMValueRef p = LLVMBuildGEP2(B, st, ptr, (LLVMValueRef[]){cg_i64(e, i)}, 1, "");
    v = LLVMBuildInsertElement(B, v, cg_emit_load(e, dt, p, 1, ""), cg_i64(e, i), name);
  }
  return v;
}

static void store_part(cg_emitter *e, ir_dtype dt, LLVMValueRef val, LLVMValueRef ptr, int lanes, int valid,
                       void (*store)(cg_emitter *, ir_dtype, LLVMValueRef, LLVMValueRef, int)) {
  if (valid >= lanes) {
    store(e, dt, val, ptr, lanes);
    return;
  }
  LLVMTypeRef st = cg_llvm_dtype(e, dt);
  for (int i = 0; i < valid; i++) {
    LLVMValueRef p = LLVMBuildGEP2(B, st, ptr, (LLVMValueRef[]){cg_i64(e, i)}, 1, "");
    store(e, dt, LLVMBuildExtractElement(B, val, cg_i64(e, i), ""), p, 1);
  }
}

void cg_store_part(cg_emitter *e, ir_dtype dt, LLVMValueRef val, LLVMValueRef ptr, int lanes, int valid) {
  store_part(e, dt, val, ptr, lanes, valid, cg_emit_store);
}

void cg_store_part_rounded(cg_emitter *e, ir_dtype dt, LLVMValueRef val, LLVMValueRef ptr, int lanes, int valid) {
  store_part(e, dt, val, ptr, lanes, valid, cg_emit_store_rounded);
}

/* ---- the kernel's buffers ---- */

int cg_buffer_index(const cg_kctx *c, int b) { return c->slot ? c->slot[b] : b; }

void cg_load_base(cg_kctx *c, const ir_node *n) {
  cg_emitter *e = c->e;
  if (c->base[n->id]) return;
  int b = c->plan->buffer_of[n->id];
  CASTOR_ASSERT(b >= 0);
  LLVMValueRef slot = LLVMBuildGEP2(B, e->ptr, c->bufs, (LLVMValueRef[]){cg_i64(e, cg_buffer_index(c, b))}, 1, "");
  LLVMValueRef p = LLVMBuildLoad2(B, e->ptr, slot, n->name);
  c->base[n->id] = p;
}

void cg_load_bases(cg_kctx *c) {
  const cg_kernel *k = c->k;
  for (int t = 0; t < k->n_ops; t++)
    for (int s = 0; s < k->ops[t]->n_srcs; s++)
      if (c->plan->buffer_of[k->ops[t]->srcs[s]->id] >= 0) cg_load_base(c, k->ops[t]->srcs[s]);
  cg_load_base(c, k->ops[k->n_ops - 1]);
}

void cg_clear_bases(cg_kctx *c) {
  const cg_kernel *k = c->k;
  if (k->kind == CG_KERNEL_COPY) c->base[k->copy_src->id] = NULL;
  for (int t = 0; t < k->n_ops; t++) {
    c->base[k->ops[t]->id] = NULL;
    for (int s = 0; s < k->ops[t]->n_srcs; s++) c->base[k->ops[t]->srcs[s]->id] = NULL;
  }
}
