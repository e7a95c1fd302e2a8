/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cg_aot.c: the ahead-of-time CPU target (`castor build`).
 *
 * In: a final graph (the one castor_compile would JIT). Out: an object
 * file, assembly or LLVM IR text, plus optionally a C header.
 *
 * The kernels are the JIT's: cg_target_emit_module plans, emits, verifies
 * and optimizes them exactly as cg_jit.c does, for the same CPU and
 * features, so AOT and JIT results are bit-identical. Only then does this
 * file add, unoptimized and around those kernels (which become internal):
 *   - the weights, as private 64-byte aligned constant globals;
 *   - `int <prefix>_run(inputs..., outputs..., int64_t batch, void *scratch)`:
 *     lays out the scratch slots (prefix sums of align64(bytes_per_row *
 *     batch + bytes_fixed), as runtime/program.c does), fills a buffer
 *     table on the stack and calls every kernel over all its rows; it
 *     needs no runtime and allocates nothing;
 *   - `int64_t <prefix>_scratch_bytes(int64_t batch)`;
 *   - with ao->entry, castor_aot_entry (runtime/aot/aot.h): the program as
 *     a static rt_program, for the AOT main driver and runtime/program.c.
 * The static rt_program is laid out from the C structs' offsetof, and the
 * _Static_asserts below stop the build when runtime.h changes under it.
 */
#include <llvm-c/Analysis.h>
#include <llvm-c/Target.h>
#include <llvm-c/TargetMachine.h>
#include <errno.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "runtime/aot/aot.h"
#include "codegen/cpu/cg_cpu.h"

_Static_assert(sizeof(rt_buffer) == 32 && sizeof(rt_slot) == 16 && sizeof(rt_launch) == 160 &&
                   sizeof(rt_tensor_desc) == 104 && sizeof(rt_program) == 136 &&
                   sizeof(rt_aot_entry) == 32 && sizeof(rt_buffer_kind) == 4 &&
                   sizeof(rt_dtype) == 4 && sizeof(bool) == 1,
               "runtime.h changed: update the static rt_program emission in cg_aot.c "
               "(and RT_AOT_ABI_VERSION)");

void cg_aot_options_init(cg_aot_options *o) { memset(o, 0, sizeof *o); }

typedef struct aot {
  cg_emitter *e;
  LLVMModuleRef mod;
  LLVMTargetDataRef td;
  LLVMTypeRef i8;
  const cg_plan *plan;
  const rt_program *desc;
  LLVMValueRef *weights; /* per buffer: the weight global or NULL */
  int n_strings;
} aot;

/* ---- constants ---- */

static LLVMValueRef i8c(aot *a, int64_t v) { return LLVMConstInt(a->i8, (unsigned long long)v, 1); }
static LLVMValueRef i32c(aot *a, int64_t v) { return LLVMConstInt(a->e->i32, (unsigned long long)v, 1); }
static LLVMValueRef i64c(aot *a, int64_t v) { return LLVMConstInt(a->e->i64, (unsigned long long)v, 1); }
static LLVMValueRef nullp(aot *a) { return LLVMConstPointerNull(a->e->ptr); }

static LLVMValueRef private_global(aot *a, LLVMValueRef init, const char *name, unsigned align) {
  LLVMValueRef g = LLVMAddGlobal(a->mod, LLVMTypeOf(init), name);
  LLVMSetInitializer(g, init);
  LLVMSetGlobalConstant(g, 1);
  LLVMSetLinkage(g, LLVMPrivateLinkage);
  LLVMSetUnnamedAddress(g, LLVMGlobalUnnamedAddr);
  LLVMSetAlignment(g, align);
  return g;
}

static LLVMValueRef cstr(aot *a, const char *s) {
  char name[32];
  snprintf(name, sizeof name, "str.%d", a->n_strings++);
  return private_global(a, LLVMConstStringInContext(a->e->ctx, s, (unsigned)strlen(s), 0), name, 1);
}

/* A constant with the layout of a C struct of `size` bytes: each field's
 * value at its offsetof, zero bytes in between (padding). */
typedef struct cfield {
  size_t off;
  LLVMValueRef v;
} cfield;

static LLVMValueRef c_struct(aot *a, size_t size, const cfield *f, int n) {
  LLVMValueRef vals[64];
  int nv = 0;
  size_t at = 0;
  for (int i = 0; i <= n; i++) {
    size_t next = i < n ? f[i].off : size;
    CASTOR_ASSERT(next >= at && nv < 62);
    if (next > at) vals[nv++] = LLVMConstNull(LLVMArrayType2(a->i8, next - at));
    if (i == n) break;
    vals[nv++] = f[i].v;
    at = next + (size_t)LLVMABISizeOfType(a->td, LLVMTypeOf(f[i].v));
  }
  return LLVMConstStructInContext(a->e->ctx, vals, (unsigned)nv, 1);
}

static LLVMValueRef c_array(aot *a, LLVMValueRef *elems, int n, const char *name) {
  if (n == 0) return nullp(a);
  LLVMValueRef init = LLVMConstArray2(LLVMTypeOf(elems[0]), elems, (uint64_t)n);
  return private_global(a, init, name, 16);
}

/* ---- weights ---- */

static bool emit_weights(aot *a, diag_sink *d) {
  for (int b = 0; b < a->desc->n_buffers; b++) {
    const rt_buffer *buf = &a->desc->buffers[b];
    if (buf->kind != RT_BUF_CONST) continue;
    if (buf->bytes_fixed > (int64_t)UINT32_MAX) {
      diag_error_kind(d, DIAG_KIND_UNSUPPORTED, a->plan->buffer_node[b]->loc, "constant %%%s has %" PRId64 " bytes: too large for an object file",
                 a->plan->buffer_node[b]->name, buf->bytes_fixed);
      return false;
    }
    LLVMValueRef init = LLVMConstStringInContext(a->e->ctx, buf->data, (unsigned)buf->bytes_fixed, 1);
    char *name = arena_printf(a->plan->arena, "w.%s", a->plan->buffer_node[b]->name);
    a->weights[b] = private_global(a, init, name, 64);
  }
  return true;
}

/* ---- run and scratch_bytes functions ---- */

/* The largest batch whose buffer sizes stay far from int64 overflow. */
static int64_t max_batch(const rt_program *p) {
  int64_t per_row = 1;
  for (int s = 0; s < p->n_slots; s++) per_row += p->slots[s].bytes_per_row;
  for (int b = 0; b < p->n_buffers; b++)
    if (p->buffers[b].bytes_per_row > per_row) per_row = p->buffers[b].bytes_per_row;
  return (INT64_MAX / 4) / per_row;
}

#define B (a->e->b)

/* Emits `if (batch < 1 || batch > max) return bad;` */
static void emit_batch_check(aot *a, LLVMValueRef fn, LLVMValueRef batch, LLVMValueRef bad) {
  LLVMBasicBlockRef ok = LLVMAppendBasicBlockInContext(a->e->ctx, fn, "batch.ok");
  LLVMBasicBlockRef err = LLVMAppendBasicBlockInContext(a->e->ctx, fn, "batch.bad");
  LLVMValueRef lo = LLVMBuildICmp(B, LLVMIntSLT, batch, i64c(a, 1), "");
  LLVMValueRef hi = LLVMBuildICmp(B, LLVMIntSGT, batch, i64c(a, max_batch(a->desc)), "");
  LLVMBuildCondBr(B, LLVMBuildOr(B, lo, hi, ""), err, ok);
  LLVMPositionBuilderAtEnd(B, err);
  LLVMBuildRet(B, bad);
  LLVMPositionBuilderAtEnd(B, ok);
}

/* The kernels' per-call scratch (runtime.h), one call at a time. */
static int64_t kernel_scratch(const rt_program *p) {
  int64_t n = 0;
  for (int i = 0; i < p->n_launches; i++)
    if (p->launches[i].scratch_bytes > n) n = p->launches[i].scratch_bytes;
  return (n + 63) & ~(int64_t)63;
}

/* Slot offsets for the batch, then the kernels' scratch (offs[n_slots]);
 * returns the total. offs may be NULL. */
static LLVMValueRef emit_slot_offsets(aot *a, LLVMValueRef batch, LLVMValueRef *offs) {
  LLVMValueRef off = i64c(a, 0);
  for (int s = 0; s < a->desc->n_slots; s++) {
    const rt_slot *sl = &a->desc->slots[s];
    if (offs) offs[s] = off;
    LLVMValueRef n = LLVMBuildMul(B, batch, i64c(a, sl->bytes_per_row), "");
    n = LLVMBuildAdd(B, n, i64c(a, sl->bytes_fixed + 63), "");
    n = LLVMBuildAnd(B, n, i64c(a, ~(int64_t)63), "");
    char name[32];
    snprintf(name, sizeof name, "slot%d.end", s);
    off = LLVMBuildAdd(B, off, n, name);
  }
  if (offs) offs[a->desc->n_slots] = off;
  return LLVMBuildAdd(B, off, i64c(a, kernel_scratch(a->desc)), "scratch.bytes");
}

static void emit_scratch_bytes_fn(aot *a, const char *prefix) {
  cg_emitter *e = a->e;
  LLVMTypeRef fty = LLVMFunctionType(e->i64, (LLVMTypeRef[]){e->i64}, 1, 0);
  char *name = arena_printf(a->plan->arena, "%s_scratch_bytes", prefix);
  LLVMValueRef fn = LLVMAddFunction(a->mod, name, fty);
  LLVMValueRef batch = LLVMGetParam(fn, 0);
  LLVMSetValueName2(batch, "batch", 5);
  LLVMPositionBuilderAtEnd(B, LLVMAppendBasicBlockInContext(e->ctx, fn, "entry"));
  emit_batch_check(a, fn, batch, i64c(a, -1));
  LLVMBuildRet(B, emit_slot_offsets(a, batch, NULL));
}

static void emit_run_fn(aot *a, const char *prefix, LLVMValueRef *kernels) {
  cg_emitter *e = a->e;
  const rt_program *p = a->desc;
  int np = p->n_inputs + p->n_outputs + 2;
  LLVMTypeRef *params = xcalloc((size_t)np, sizeof *params);
  for (int i = 0; i < np; i++) params[i] = e->ptr;
  params[np - 2] = e->i64;
  LLVMTypeRef fty = LLVMFunctionType(e->i32, params, (unsigned)np, 0);
  free(params);
  char *name = arena_printf(a->plan->arena, "%s_run", prefix);
  LLVMValueRef fn = LLVMAddFunction(a->mod, name, fty);
  for (int i = 0; i < p->n_inputs; i++) {
    LLVMValueRef v = LLVMGetParam(fn, (unsigned)i);
    LLVMSetValueName2(v, p->inputs[i].name, strlen(p->inputs[i].name));
    LLVMAddAttributeAtIndex(fn, (unsigned)i + 1, LLVMCreateEnumAttribute(e->ctx, LLVMGetEnumAttributeKindForName("readonly", 8), 0));
  }
  for (int i = 0; i < p->n_outputs; i++) {
    LLVMValueRef v = LLVMGetParam(fn, (unsigned)(p->n_inputs + i));
    LLVMSetValueName2(v, p->outputs[i].name, strlen(p->outputs[i].name));
  }
  LLVMValueRef batch = LLVMGetParam(fn, (unsigned)np - 2), scratch = LLVMGetParam(fn, (unsigned)np - 1);
  LLVMSetValueName2(batch, "batch", 5), LLVMSetValueName2(scratch, "scratch", 7);

  LLVMPositionBuilderAtEnd(B, LLVMAppendBasicBlockInContext(e->ctx, fn, "entry"));
  LLVMTypeRef table_ty = LLVMArrayType2(e->ptr, (uint64_t)p->n_buffers + 1);
  LLVMValueRef bufs = LLVMBuildAlloca(B, table_ty, "bufs");
  LLVMSetAlignment(bufs, 16);
  emit_batch_check(a, fn, batch, i32c(a, 1));
  if (p->n_slots > 0 || kernel_scratch(p) > 0) { /* scratch is needed: NULL is error 2 */
    LLVMBasicBlockRef ok = LLVMAppendBasicBlockInContext(e->ctx, fn, "scratch.ok");
    LLVMBasicBlockRef err = LLVMAppendBasicBlockInContext(e->ctx, fn, "scratch.null");
    LLVMBuildCondBr(B, LLVMBuildIsNull(B, scratch, ""), err, ok);
    LLVMPositionBuilderAtEnd(B, err);
    LLVMBuildRet(B, i32c(a, 2));
    LLVMPositionBuilderAtEnd(B, ok);
  }
  LLVMValueRef *offs = xcalloc((size_t)p->n_slots + 1, sizeof *offs);
  emit_slot_offsets(a, batch, offs);
  for (int b = 0; b < p->n_buffers; b++) {
    const rt_buffer *buf = &p->buffers[b];
    LLVMValueRef v = NULL;
    switch (buf->kind) {
    case RT_BUF_CONST: v = a->weights[b]; break;
    case RT_BUF_INPUT: v = LLVMGetParam(fn, (unsigned)buf->index); break;
    case RT_BUF_OUTPUT: v = LLVMGetParam(fn, (unsigned)(p->n_inputs + buf->index)); break;
    case RT_BUF_SCRATCH:
      v = LLVMBuildGEP2(B, a->i8, scratch, (LLVMValueRef[]){offs[buf->index]}, 1, a->plan->buffer_node[b]->name);
      break;
    case RT_BUF_STATE: CASTOR_UNREACHABLE(); /* cg_compile_aot refuses training programs */
    }
    LLVMValueRef slot = LLVMBuildGEP2(B, e->ptr, bufs, (LLVMValueRef[]){i64c(a, b)}, 1, "");
    LLVMBuildStore(B, v, slot);
  }
  LLVMValueRef kscratch = LLVMBuildGEP2(B, a->i8, scratch, (LLVMValueRef[]){offs[p->n_slots]}, 1, "kernel.scratch");
  free(offs);
  /* the kernel ABI of runtime.h: (bufs, batch, row0, row1, col0, col1, scratch), here all rows and columns */
  LLVMTypeRef kty = LLVMFunctionType(e->void_, (LLVMTypeRef[]){e->ptr, e->i64, e->i64, e->i64, e->i64, e->i64, e->ptr}, 7, 0);
  for (int i = 0; i < p->n_launches; i++) {
    const rt_launch *l = &p->launches[i];
    LLVMValueRef rows = l->batched ? batch : i64c(a, l->rows_fixed);
    LLVMValueRef args[] = {bufs, batch, i64c(a, 0), rows, i64c(a, 0), i64c(a, l->cols > 0 ? l->cols : 0), kscratch};
    LLVMBuildCall2(B, kty, kernels[i], args, 7, "");
  }
  LLVMBuildRet(B, i32c(a, 0));
}

/* ---- the static rt_program for the AOT main driver ---- */

static LLVMValueRef emit_tensors(aot *a, const rt_tensor_desc *t, int n, const char *name) {
  LLVMValueRef *elems = xcalloc((size_t)n + 1, sizeof *elems);
  for (int i = 0; i < n; i++) {
    cfield f[8 + RT_MAX_RANK];
    int nf = 0;
    f[nf++] = (cfield){offsetof(rt_tensor_desc, name), cstr(a, t[i].name)};
    f[nf++] = (cfield){offsetof(rt_tensor_desc, dtype), i32c(a, t[i].dtype)};
    f[nf++] = (cfield){offsetof(rt_tensor_desc, rank), i32c(a, t[i].rank)};
    for (int r = 0; r < RT_MAX_RANK; r++)
      f[nf++] = (cfield){offsetof(rt_tensor_desc, dims) + (size_t)r * sizeof(int64_t), i64c(a, t[i].dims[r])};
    f[nf++] = (cfield){offsetof(rt_tensor_desc, buffer), i32c(a, t[i].buffer)};
    f[nf++] = (cfield){offsetof(rt_tensor_desc, index_limit), i64c(a, t[i].index_limit)};
    if (t[i].index_user) f[nf++] = (cfield){offsetof(rt_tensor_desc, index_user), cstr(a, t[i].index_user)};
    f[nf++] = (cfield){offsetof(rt_tensor_desc, length_limit), i64c(a, t[i].length_limit)};
    if (t[i].length_user) f[nf++] = (cfield){offsetof(rt_tensor_desc, length_user), cstr(a, t[i].length_user)};
    elems[i] = c_struct(a, sizeof(rt_tensor_desc), f, nf);
  }
  LLVMValueRef g = c_array(a, elems, n, name);
  free(elems);
  return g;
}

static void emit_entry(aot *a, LLVMValueRef *kernels, const char *about, const char *features) {
  const rt_program *p = a->desc;
  int n = p->n_buffers > p->n_launches ? p->n_buffers : p->n_launches;
  if (p->n_slots > n) n = p->n_slots;
  LLVMValueRef *elems = xcalloc((size_t)n + 1, sizeof *elems);
  for (int b = 0; b < p->n_buffers; b++) {
    const rt_buffer *buf = &p->buffers[b];
    cfield f[] = {
        {offsetof(rt_buffer, kind), i32c(a, buf->kind)},
        {offsetof(rt_buffer, index), i32c(a, buf->index)},
        {offsetof(rt_buffer, data), a->weights[b] ? a->weights[b] : nullp(a)},
        {offsetof(rt_buffer, bytes_per_row), i64c(a, buf->bytes_per_row)},
        {offsetof(rt_buffer, bytes_fixed), i64c(a, buf->bytes_fixed)},
    };
    elems[b] = c_struct(a, sizeof(rt_buffer), f, 5);
  }
  LLVMValueRef buffers = c_array(a, elems, p->n_buffers, "program.buffers");
  for (int s = 0; s < p->n_slots; s++) {
    cfield f[] = {
        {offsetof(rt_slot, bytes_per_row), i64c(a, p->slots[s].bytes_per_row)},
        {offsetof(rt_slot, bytes_fixed), i64c(a, p->slots[s].bytes_fixed)},
    };
    elems[s] = c_struct(a, sizeof(rt_slot), f, 2);
  }
  LLVMValueRef slots = c_array(a, elems, p->n_slots, "program.slots");
  for (int i = 0; i < p->n_launches; i++) {
    const rt_launch *l = &p->launches[i];
    cfield f[] = {
        {offsetof(rt_launch, fn), kernels[i]},
        {offsetof(rt_launch, name), cstr(a, l->name)},
        {offsetof(rt_launch, batched), i8c(a, l->batched)},
        {offsetof(rt_launch, rows_fixed), i64c(a, l->rows_fixed)},
        {offsetof(rt_launch, flops_per_row), i64c(a, l->flops_per_row)},
        {offsetof(rt_launch, cols), i64c(a, l->cols)},
        {offsetof(rt_launch, col_step), i64c(a, l->col_step)},
        {offsetof(rt_launch, row_step), i64c(a, l->row_step)},
        {offsetof(rt_launch, scratch_bytes), i64c(a, l->scratch_bytes)},
        {offsetof(rt_launch, work_per_row), i64c(a, l->work_per_row)},
        {offsetof(rt_launch, work_per_row_per_batch), i64c(a, l->work_per_row_per_batch)},
        {offsetof(rt_launch, row_tile_min), i64c(a, l->row_tile_min)},
        {offsetof(rt_launch, layer), l->layer ? cstr(a, l->layer) : nullp(a)},
        {offsetof(rt_launch, bytes_per_row), i64c(a, l->bytes_per_row)},
        {offsetof(rt_launch, bytes_fixed), i64c(a, l->bytes_fixed)},
        {offsetof(rt_launch, tile_row_cost), i64c(a, l->tile_row_cost)},
        {offsetof(rt_launch, tile_col_cost), i64c(a, l->tile_col_cost)},
        {offsetof(rt_launch, algo), l->algo ? cstr(a, l->algo) : nullp(a)},
    };
    elems[i] = c_struct(a, sizeof(rt_launch), f, 18);
  }
  LLVMValueRef launches = c_array(a, elems, p->n_launches, "program.launches");
  free(elems);
  LLVMValueRef inputs = emit_tensors(a, p->inputs, p->n_inputs, "program.inputs");
  LLVMValueRef outputs = emit_tensors(a, p->outputs, p->n_outputs, "program.outputs");
  cfield pf[] = {
      {offsetof(rt_program, name), cstr(a, p->name)},
      {offsetof(rt_program, buffers), buffers},
      {offsetof(rt_program, n_buffers), i32c(a, p->n_buffers)},
      {offsetof(rt_program, slots), slots},
      {offsetof(rt_program, n_slots), i32c(a, p->n_slots)},
      {offsetof(rt_program, launches), launches},
      {offsetof(rt_program, n_launches), i32c(a, p->n_launches)},
      {offsetof(rt_program, inputs), inputs},
      {offsetof(rt_program, outputs), outputs},
      {offsetof(rt_program, n_inputs), i32c(a, p->n_inputs)},
      {offsetof(rt_program, n_outputs), i32c(a, p->n_outputs)},
      /* states, n_states: none (training programs are not compiled ahead of time) */
      {offsetof(rt_program, images), i64c(a, p->images)},
      {offsetof(rt_program, image_launches), i32c(a, p->image_launches)},
      {offsetof(rt_program, image_slots), i32c(a, p->image_slots)},
      /* owner, owner_destroy, arena: NULL (zero padding) */
  };
  LLVMValueRef program = private_global(a, c_struct(a, sizeof(rt_program), pf, 14), "program", 16);
  cfield ef[] = {
      {offsetof(rt_aot_entry, abi_version), i32c(a, RT_AOT_ABI_VERSION)},
      {offsetof(rt_aot_entry, program), program},
      {offsetof(rt_aot_entry, about), cstr(a, about ? about : "")},
      {offsetof(rt_aot_entry, features), cstr(a, features ? features : "")},
  };
  LLVMValueRef entry = private_global(a, c_struct(a, sizeof(rt_aot_entry), ef, 4), RT_AOT_ENTRY_SYMBOL, 16);
  LLVMSetLinkage(entry, LLVMExternalLinkage);
  LLVMSetUnnamedAddress(entry, LLVMNoUnnamedAddr);
}

#undef B

/* ---- output ---- */

static bool write_file(const char *path, const char *data, size_t len, diag_sink *d) {
  bool to_stdout = !strcmp(path, "-");
  FILE *f = to_stdout ? stdout : fopen(path, "wb");
  if (!f) {
    diag_error_kind(d, DIAG_KIND_IO, (diag_loc){0}, "cannot write '%s': %s", path, strerror(errno));
    return false;
  }
  bool ok = fwrite(data, 1, len, f) == len;
  int err = errno;
  if (to_stdout) ok = fflush(f) == 0 && ok;
  else if (fclose(f) != 0) ok = false, err = errno;
  if (!ok) {
    diag_error_kind(d, DIAG_KIND_IO, (diag_loc){0}, "cannot write '%s': %s", path, strerror(err));
    if (!to_stdout) remove(path);
  }
  return ok;
}

static bool emit_output(LLVMTargetMachineRef tm, LLVMModuleRef mod, cg_aot_kind kind, const char *path, diag_sink *d) {
  if (kind == CG_AOT_LLVM) {
    char *s = LLVMPrintModuleToString(mod);
    bool ok = write_file(path, s, strlen(s), d);
    LLVMDisposeMessage(s);
    return ok;
  }
  LLVMMemoryBufferRef mb = NULL;
  char *msg = NULL;
  if (LLVMTargetMachineEmitToMemoryBuffer(tm, mod, kind == CG_AOT_ASM ? LLVMAssemblyFile : LLVMObjectFile, &msg, &mb)) {
    cg_llvm_message_error(d, msg, DIAG_KIND_CODEGEN, kind == CG_AOT_ASM ? "emitting assembly" : "emitting an object file");
    return false;
  }
  bool ok = write_file(path, LLVMGetBufferStart(mb), LLVMGetBufferSize(mb), d);
  LLVMDisposeMemoryBuffer(mb);
  return ok;
}

bool cg_compile_aot(const ir_graph *g, const cg_options *o, const cg_aot_options *ao, cg_aot_kind kind,
                    const char *path, diag_sink *d) {
  cg_options defaults;
  if (!o) cg_options_init(&defaults), o = &defaults;
  for (int i = 0; i < g->n_nodes; i++)
    if (ir_op_flags(g->nodes[i]->op) & IR_OPF_STATE) {
      diag_error_kind(d, DIAG_KIND_UNSUPPORTED, g->nodes[i]->loc,
                      "training programs cannot be compiled ahead of time yet (%%%s is a variable): "
                      "train with the JIT, then build the model with the saved weights", g->nodes[i]->name);
      return false;
    }
  cg_plan plan;
  if (!cg_plan_build(g, &plan, d)) return false;
  cg_plan_cut_images(g, &plan, o->force_image_cut ? o->image_cut : -1);
  cg_cpu_layout layout;
  cg_cpu_layout_init(&layout, &plan);
  bool ok = false;
  LLVMContextRef ctx = LLVMContextCreate();
  LLVMModuleRef mod = NULL;
  cg_emitter e = {0};
  rt_program *desc = NULL;
  LLVMValueRef *kernels = NULL;
  cg_target t;
  if (!cg_target_init(&t, o, false, d)) goto done;
  if (!(mod = cg_target_emit_module(&t, ctx, g->name, &plan, o, true, &e, &layout, NULL, d))) goto done;
  if (!(desc = cg_cpu_program_describe(g, &plan, &layout, d))) goto done; /* after emission: packed weights */

  aot a = {&e, mod, LLVMGetModuleDataLayout(mod), LLVMInt8TypeInContext(ctx), &plan, desc, NULL, 0};
  a.weights = arena_alloc(plan.arena, (size_t)(desc->n_buffers + 1) * sizeof *a.weights);
  kernels = xcalloc((size_t)desc->n_launches + 1, sizeof *kernels);
  for (int i = 0; i < desc->n_launches; i++) {
    kernels[i] = LLVMGetNamedFunction(mod, plan.kernels[i].name);
    CASTOR_ASSERT(kernels[i]);
    LLVMSetLinkage(kernels[i], LLVMInternalLinkage); /* several models may link together */
  }
  if (!emit_weights(&a, d)) goto done;
  emit_run_fn(&a, ao->prefix, kernels);
  emit_scratch_bytes_fn(&a, ao->prefix);
  if (ao->entry)
    /* the AMX family says so: the main asks Linux for the tile state at start-up (aot_main.c) */
    emit_entry(&a, kernels, arena_printf(plan.arena, "%s%s%s cpu %s%s", ao->about ? ao->about : "",
                                         ao->about ? ", " : "", t.triple, t.cpu,
                                         t.caps.gemm_kernel == CG_GEMM_KERNEL_AMX_BF16 ? RT_AOT_AMX_MARK : ""),
               t.features);
  char *msg = NULL;
  if (LLVMVerifyModule(mod, LLVMReturnStatusAction, &msg)) {
    diag_error_kind(d, DIAG_KIND_INTERNAL, (diag_loc){0}, "internal error: generated LLVM IR is invalid: %s", msg);
    LLVMDisposeMessage(msg);
    goto done;
  }
  LLVMDisposeMessage(msg);
  ok = emit_output(t.tm, mod, kind, path, d);
  if (ok && ao->header_path) ok = cg_aot_write_header(desc, ao, &t, g, d);

done:
  free(kernels);
  cg_emitter_fini(&e);
  if (mod) LLVMDisposeModule(mod);
  LLVMContextDispose(ctx);
  rt_program_destroy(desc);
  cg_target_fini(&t);
  cg_cpu_layout_fini(&layout);
  cg_plan_fini(&plan);
  return ok;
}
