/*
 * cg_nvptx.c: the nvptx target: the plan's kernels as PTX for NVIDIA GPUs.
 *
 * In: a verified graph after the cuda pipeline (PASS_PIPELINE_PAD8: 16-bit
 * matmuls padded to multiples of 8). Out: an rt_cuda_program (runtime/cuda.h):
 * PTX text for triple nvptx64-nvidia-cuda and the sm architecture asked for
 * (the device's, or sm_80 by default), and a launch list over the same
 * static buffer plan as the CPU target (cg_plan.c).
 *
 * Every kernel is a function with the ptx_kernel calling convention and the
 * parameters (i64 batch, ptr args...), one pointer per buffer it touches.
 *   matmul  cg_nvptx_gemm.c: tensor-core mma.sync GEMM (f16/bf16), FMA GEMM
 *           (f32 and shapes the tensor-core path cannot take), the epilogue
 *           chain (bias, activation, cast, even a narrow row softmax) fused.
 *   conv2d  the same GEMMs as an implicit GEMM (A gathered from x in the
 *           tile loads; convolutional networks).
 *   eltwise grid-stride loop over the result's elements, the chain applied
 *           in registers by the kit's cg_apply_chain (kernel/cg_chain.c: one
 *           rounding model for both targets); a reindex op (pad, slice) may
 *           start the chain through the kit's index map (cg_index_map.c).
 *   softmax one warp per row: the row-wise op by cg_nvptx_rowwise.c (max,
 *           sum of exp and scaled exp, with warp shuffles for the
 *           reductions), the emitter the GEMM epilogue shares.
 *   copy    a byte copy (an output that is another value).
 * The module is optimized with default<O2> on the NVPTX target machine and
 * printed as PTX by LLVM's NVPTX backend.
 */
#include <llvm-c/Analysis.h>
#include <llvm-c/Target.h>
#include <llvm-c/TargetMachine.h>
#include <llvm-c/Transforms/PassBuilder.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/nvptx/cg_nvptx.h"

#define B (e->b)
#define NV_TRIPLE "nvptx64-nvidia-cuda"

enum { PTX_KERNEL_CC = 71 }; /* llvm::CallingConv::PTX_Kernel */

/* ---- small emitters ---- */

LLVMValueRef cg_i32(cg_emitter *e, int64_t v) { return LLVMConstInt(e->i32, (unsigned long long)v, 1); }

LLVMValueRef cg_nv_intrinsic(cg_emitter *e, const char *name, LLVMTypeRef *ovl, int n_ovl,
                             LLVMValueRef *args, int n_args, const char *vname) {
  unsigned id = LLVMLookupIntrinsicID(name, strlen(name));
  CASTOR_ASSERT(id != 0);
  /* the overloaded NVVM intrinsics castor calls (ldmatrix) are overloaded
   * on their first operand, the shared-memory pointer */
  LLVMTypeRef first;
  if (!n_ovl && n_args > 0 && LLVMIntrinsicIsOverloaded(id)) first = LLVMTypeOf(args[0]), ovl = &first, n_ovl = 1;
  LLVMValueRef f = LLVMGetIntrinsicDeclaration(e->mod, id, ovl, (size_t)n_ovl);
  LLVMValueRef call = LLVMBuildCall2(B, LLVMGlobalGetValueType(f), f, args, (unsigned)n_args, vname);
  /* warp-collective operations (ldmatrix, mma, shuffles, barriers) must not
   * be moved into thread-dependent control flow; LLVM 19 does not mark
   * every one of them convergent, so the call site says it */
  if (strstr(name, "ldmatrix") || strstr(name, ".mma.") || strstr(name, "shfl") || strstr(name, "barrier")) {
    unsigned kind = LLVMGetEnumAttributeKindForName("convergent", strlen("convergent"));
    LLVMAddCallSiteAttribute(call, LLVMAttributeFunctionIndex, LLVMCreateEnumAttribute(e->ctx, kind, 0));
  }
  return call;
}

LLVMValueRef cg_nv_sreg(cg_emitter *e, const char *reg) {
  char name[64];
  snprintf(name, sizeof name, "llvm.nvvm.read.ptx.sreg.%s", reg);
  return cg_nv_intrinsic(e, name, NULL, 0, NULL, 0, reg);
}

void cg_nv_barrier(cg_emitter *e) { cg_nv_intrinsic(e, "llvm.nvvm.barrier0", NULL, 0, NULL, 0, ""); }

LLVMValueRef cg_nv_shfl_xor(cg_emitter *e, LLVMValueRef v, int mask) {
  LLVMValueRef args[] = {cg_i32(e, -1), v, cg_i32(e, mask), cg_i32(e, 31)};
  return cg_nv_intrinsic(e, "llvm.nvvm.shfl.sync.bfly.f32", NULL, 0, args, 4, "");
}

LLVMValueRef cg_nv_warp_reduce(cg_emitter *e, LLVMValueRef v, bool is_max) {
  for (int m = 16; m >= 1; m /= 2) {
    LLVMValueRef o = cg_nv_shfl_xor(e, v, m);
    v = is_max ? LLVMBuildSelect(B, LLVMBuildFCmp(B, LLVMRealOGT, o, v, ""), o, v, "") : LLVMBuildFAdd(B, v, o, "");
  }
  return v;
}

LLVMValueRef cg_nv_smem_at(cg_nv_kernel *g, LLVMValueRef off) {
  cg_emitter *e = g->c.e;
  return LLVMBuildGEP2(B, LLVMInt8TypeInContext(e->ctx), g->smem, &off, 1, "");
}

cg_nv_loop cg_nv_loop_begin(cg_nv_kernel *g, LLVMValueRef start, LLVMValueRef end, LLVMValueRef step,
                            const char *name) {
  cg_emitter *e = g->c.e;
  cg_nv_loop l;
  char nm[96];
  LLVMBasicBlockRef pre = LLVMGetInsertBlock(B);
  snprintf(nm, sizeof nm, "%s.header", name);
  l.header = LLVMAppendBasicBlockInContext(e->ctx, g->c.fn, nm);
  snprintf(nm, sizeof nm, "%s.body", name);
  l.body = LLVMAppendBasicBlockInContext(e->ctx, g->c.fn, nm);
  snprintf(nm, sizeof nm, "%s.exit", name);
  l.exit = LLVMAppendBasicBlockInContext(e->ctx, g->c.fn, nm);
  LLVMBuildBr(B, l.header);
  LLVMPositionBuilderAtEnd(B, l.header);
  l.iv = LLVMBuildPhi(B, LLVMTypeOf(start), name);
  LLVMAddIncoming(l.iv, &start, &pre, 1);
  l.step = step;
  LLVMBuildCondBr(B, LLVMBuildICmp(B, LLVMIntSLT, l.iv, end, ""), l.body, l.exit);
  LLVMPositionBuilderAtEnd(B, l.body);
  return l;
}

void cg_nv_loop_end(cg_nv_kernel *g, cg_nv_loop *l) {
  cg_emitter *e = g->c.e;
  LLVMValueRef next = LLVMBuildAdd(B, l->iv, l->step, "");
  LLVMBasicBlockRef from = LLVMGetInsertBlock(B);
  LLVMAddIncoming(l->iv, &next, &from, 1);
  LLVMBuildBr(B, l->header);
  LLVMPositionBuilderAtEnd(B, l->exit);
}

LLVMBasicBlockRef cg_nv_if(cg_nv_kernel *g, LLVMValueRef cond, const char *name) {
  cg_emitter *e = g->c.e;
  char nm[96];
  snprintf(nm, sizeof nm, "%s.then", name);
  LLVMBasicBlockRef then = LLVMAppendBasicBlockInContext(e->ctx, g->c.fn, nm);
  snprintf(nm, sizeof nm, "%s.join", name);
  LLVMBasicBlockRef join = LLVMAppendBasicBlockInContext(e->ctx, g->c.fn, nm);
  LLVMBuildCondBr(B, cond, then, join);
  LLVMPositionBuilderAtEnd(B, then);
  return join;
}

void cg_nv_endif(cg_nv_kernel *g, LLVMBasicBlockRef join) {
  cg_emitter *e = g->c.e;
  LLVMBuildBr(B, join);
  LLVMPositionBuilderAtEnd(B, join);
}

LLVMValueRef cg_nv_rows(cg_nv_kernel *g, const ir_node *res) {
  if (ir_type_is_batched(&res->type)) return g->batch;
  return cg_i64(g->c.e, g->c.k->kind == CG_KERNEL_CONTRACT ? res->type.dims[0] : 1);
}

/* global thread id and the grid's thread count, as i64 */
static void grid_ids(cg_nv_kernel *g, LLVMValueRef *gid, LLVMValueRef *nthreads) {
  cg_emitter *e = g->c.e;
  LLVMValueRef ntid = LLVMBuildZExt(B, cg_nv_sreg(e, "ntid.x"), e->i64, "");
  LLVMValueRef ctaid = LLVMBuildZExt(B, cg_nv_sreg(e, "ctaid.x"), e->i64, "");
  LLVMValueRef tid = LLVMBuildZExt(B, cg_nv_sreg(e, "tid.x"), e->i64, "");
  *gid = LLVMBuildAdd(B, LLVMBuildMul(B, ctaid, ntid, ""), tid, "gid");
  *nthreads = LLVMBuildMul(B, LLVMBuildZExt(B, cg_nv_sreg(e, "nctaid.x"), e->i64, ""), ntid, "nthreads");
}

static const ir_node *result(const cg_kernel *k) { return k->ops[k->n_ops - 1]; }

static int64_t inner_of(const ir_node *n) {
  int64_t v = 1;
  CASTOR_ASSERT(ir_type_inner_numel(&n->type, &v));
  return v;
}

/* ---- elementwise chains, possibly started by a pad or slice ---- */

static void emit_eltwise(cg_nv_kernel *g) {
  cg_emitter *e = g->c.e;
  const cg_kernel *k = g->c.k;
  const ir_node *res = result(k), *first = k->ops[0];
  int64_t inner = inner_of(res);
  bool scalar_rows = res->type.rank == 0 || (res->type.rank == 1 && ir_type_is_batched(&res->type));
  int64_t last = scalar_rows ? 1 : res->type.dims[res->type.rank - 1];
  LLVMValueRef gid, nthreads;
  grid_ids(g, &gid, &nthreads);
  LLVMValueRef total = LLVMBuildMul(B, cg_nv_rows(g, res), cg_i64(e, inner), "total");
  cg_nv_loop l = cg_nv_loop_begin(g, gid, total, nthreads, "i");
  LLVMValueRef col = LLVMBuildSRem(B, l.iv, cg_i64(e, last), "col");
  LLVMValueRef val;
  if (ir_op_kernel(first->op) == IR_KERNEL_REINDEX) { /* the kit's index map (cg_index_map.c) */
    val = cg_emit_round_to(e, cg_reindex_value(&g->c, first, l.iv), first->type.dtype, first->name);
    val = cg_apply_chain(&g->c, 1, k->n_ops, val, l.iv, col, 1, 1);
  } else {
    val = cg_apply_chain(&g->c, 0, k->n_ops, NULL, l.iv, col, 1, 1);
  }
  cg_emit_store(e, res->type.dtype, val, cg_elem_ptr(&g->c, res, l.iv), 1);
  cg_nv_loop_end(g, &l);
  rt_cuda_launch *ln = g->launch;
  ln->block = 256, ln->units_per_row = inner, ln->units_per_block = 256 * 4, ln->max_grid_x = 1 << 18;
}

/* ---- row-wise: one warp per line of the last dimension ---- */

/* A line of the row-wise op that is the kernel: its input and result
 * buffers from flat element index `base` (i64, as j). */
typedef struct line_row {
  cg_nv_row row;
  cg_nv_kernel *g;
  const ir_node *op;
  LLVMValueRef base;
} line_row;

static LLVMValueRef line_load(cg_nv_row *row, LLVMValueRef j) {
  line_row *l = (line_row *)row;
  cg_emitter *e = l->g->c.e;
  const ir_node *x = l->op->srcs[0];
  return cg_emit_load(e, x->type.dtype, cg_elem_ptr(&l->g->c, x, LLVMBuildAdd(B, l->base, j, "")), 1, x->name);
}

static void line_store(cg_nv_row *row, LLVMValueRef j, LLVMValueRef val) {
  line_row *l = (line_row *)row;
  cg_emitter *e = l->g->c.e;
  cg_emit_store(e, l->op->type.dtype, val, cg_elem_ptr(&l->g->c, l->op, LLVMBuildAdd(B, l->base, j, "")), 1);
}

static void emit_rowwise(cg_nv_kernel *g) {
  cg_emitter *e = g->c.e;
  const ir_node *op = g->c.k->ops[0];
  int64_t inner = inner_of(op);
  bool scalar_rows = op->type.rank == 0 || (op->type.rank == 1 && ir_type_is_batched(&op->type));
  int64_t last = scalar_rows ? 1 : op->type.dims[op->type.rank - 1];
  LLVMValueRef gid, nthreads;
  grid_ids(g, &gid, &nthreads);
  LLVMValueRef warp = LLVMBuildUDiv(B, gid, cg_i64(e, 32), "warp");
  LLVMValueRef nwarps = LLVMBuildUDiv(B, nthreads, cg_i64(e, 32), "nwarps");
  LLVMValueRef lane = LLVMBuildURem(B, gid, cg_i64(e, 32), "lane");
  LLVMValueRef lines = LLVMBuildMul(B, cg_nv_rows(g, op), cg_i64(e, inner / last), "lines");
  cg_nv_loop lr = cg_nv_loop_begin(g, warp, lines, nwarps, "line");
  line_row l = {.row = {.n = last, .lane = lane, .load = line_load, .store = line_store}, .g = g, .op = op,
                .base = LLVMBuildMul(B, lr.iv, cg_i64(e, last), "line.base")};
  cg_nv_emit_rowwise(g, op, &l.row);
  cg_nv_loop_end(g, &lr);
  rt_cuda_launch *ln = g->launch;
  ln->block = 256, ln->units_per_row = inner / last, ln->units_per_block = 8, ln->max_grid_x = 1 << 18;
}

/* ---- copy ---- */

static void emit_copy(cg_nv_kernel *g) {
  cg_emitter *e = g->c.e;
  const cg_kernel *k = g->c.k;
  const rt_buffer *ob = &g->c.plan->buffers[k->out_buffer];
  int64_t row_bytes = ob->bytes_per_row ? ob->bytes_per_row : ob->bytes_fixed;
  LLVMValueRef gid, nthreads;
  grid_ids(g, &gid, &nthreads);
  LLVMValueRef total = LLVMBuildMul(B, ob->bytes_per_row ? g->batch : cg_i64(e, 1), cg_i64(e, row_bytes), "bytes");
  LLVMTypeRef i8 = LLVMInt8TypeInContext(e->ctx);
  LLVMValueRef dst = LLVMGetParam(g->c.fn, (unsigned)g->launch->n_args); /* the output: the last parameter */
  cg_nv_loop l = cg_nv_loop_begin(g, gid, total, nthreads, "byte");
  LLVMValueRef v = LLVMBuildLoad2(B, i8, LLVMBuildGEP2(B, i8, g->c.base[k->copy_src->id], &l.iv, 1, ""), "");
  LLVMBuildStore(B, v, LLVMBuildGEP2(B, i8, dst, &l.iv, 1, ""));
  cg_nv_loop_end(g, &l);
  rt_cuda_launch *ln = g->launch;
  ln->block = 256, ln->units_per_row = row_bytes, ln->units_per_block = 256 * 8, ln->max_grid_x = 1 << 18;
  ln->batched = ob->bytes_per_row != 0, ln->rows_fixed = 1;
}

/* ---- kernels and the module ---- */

static void add_arg(const cg_plan *plan, rt_cuda_launch *l, int b) {
  for (int i = 0; i < l->n_args; i++)
    if (l->args[i] == b) return;
  l->args[l->n_args++] = b;
  (void)plan;
}

static void emit_kernel(cg_emitter *e, const cg_plan *plan, int ki, LLVMValueRef smem, int sm,
                        LLVMValueRef *base, rt_cuda_launch *l, arena *a) {
  const cg_kernel *k = &plan->kernels[ki];
  /* PTX identifiers have no '.': k0.dense_1.matmul -> k0_dense_1_matmul (the
   * k<index> prefix keeps them unique) */
  char *name = arena_strdup(a, k->name);
  for (char *ch = name; *ch; ch++)
    if (!((*ch >= 'a' && *ch <= 'z') || (*ch >= 'A' && *ch <= 'Z') || (*ch >= '0' && *ch <= '9') || *ch == '_')) *ch = '_';
  l->name = name;
  l->args = arena_alloc(a, (size_t)(2 * IR_MAX_SRCS * (k->n_ops + 1) + 2) * sizeof(int));
  if (k->kind == CG_KERNEL_COPY) {
    add_arg(plan, l, plan->buffer_of[k->copy_src->id]);
  } else {
    for (int t = 0; t < k->n_ops; t++)
      for (int s = 0; s < k->ops[t]->n_srcs; s++) {
        int b = plan->buffer_of[k->ops[t]->srcs[s]->id];
        if (b >= 0) add_arg(plan, l, b);
      }
  }
  int n_in = l->n_args;
  add_arg(plan, l, k->out_buffer);
  CASTOR_ASSERT(l->n_args == n_in + 1); /* kernels never read their own output buffer */

  LLVMTypeRef *params = xcalloc((size_t)l->n_args + 1, sizeof *params);
  params[0] = e->i64;
  for (int i = 0; i < l->n_args; i++) params[i + 1] = e->ptr;
  LLVMTypeRef fty = LLVMFunctionType(e->void_, params, (unsigned)l->n_args + 1, 0);
  free(params);
  cg_nv_kernel g = {.c = {.e = e, .plan = plan, .k = k, .base = base}, .smem = smem, .launch = l, .sm = sm};
  g.c.fn = LLVMAddFunction(e->mod, l->name, fty);
  LLVMSetFunctionCallConv(g.c.fn, PTX_KERNEL_CC);
  LLVMPositionBuilderAtEnd(e->b, LLVMAppendBasicBlockInContext(e->ctx, g.c.fn, "entry"));
  g.batch = LLVMGetParam(g.c.fn, 0);
  LLVMSetValueName2(g.batch, "batch", 5);
  g.c.batch = g.batch; /* the kit's maps that sum over the batch (group_conv2d_filter_grad) read it */
  /* every node an input argument holds reads its address from that argument */
  for (int i = 0; i < n_in; i++) {
    LLVMValueRef p = LLVMGetParam(g.c.fn, (unsigned)i + 1);
    const ir_node *n = plan->buffer_node[l->args[i]];
    LLVMSetValueName2(p, n->name, strlen(n->name));
    base[n->id] = p;
  }
  /* layout: a reshape shares its operand's buffer (cg_plan.c): its value
   * reads the same argument */
  for (int t = 0; k->kind != CG_KERNEL_COPY && t < k->n_ops; t++)
    for (int s = 0; s < k->ops[t]->n_srcs; s++) {
      const ir_node *src = k->ops[t]->srcs[s];
      for (int i = 0; i < n_in; i++)
        if (l->args[i] == plan->buffer_of[src->id]) base[src->id] = LLVMGetParam(g.c.fn, (unsigned)i + 1);
    }
  if (k->kind == CG_KERNEL_COPY) base[k->copy_src->id] = LLVMGetParam(g.c.fn, 1);
  if (k->kind != CG_KERNEL_COPY) base[result(k)->id] = LLVMGetParam(g.c.fn, (unsigned)n_in + 1);
  const ir_node *res = k->kind == CG_KERNEL_COPY ? k->copy_src : result(k);
  l->batched = ir_type_is_batched(&res->type);
  l->rows_fixed = l->batched ? 0 : k->kind == CG_KERNEL_CONTRACT ? res->type.dims[0] : 1;
  l->grid_y = 1;
  switch (k->kind) { /* one emitter per kernel class */
  case CG_KERNEL_CONTRACT:
    l->flops_per_row = ir_node_flops(k->ops[0], 1) / (l->batched ? 1 : l->rows_fixed); /* op table */
    cg_nv_gemm_emit(&g);
    break;
  case CG_KERNEL_ELTWISE: emit_eltwise(&g); break;
  case CG_KERNEL_ROWWISE: emit_rowwise(&g); break;
  case CG_KERNEL_COPY: emit_copy(&g); break;
  case CG_KERNEL_REDUCE: /* every op of these classes is in the cuda target's exceptions */
  case CG_KERNEL_UPDATE: CASTOR_UNREACHABLE();
  }
  LLVMBuildRetVoid(e->b);
}

static pthread_once_t nv_once = PTHREAD_ONCE_INIT;
static void nv_init(void) {
  cg_llvm_install_handlers();
  LLVMInitializeNVPTXTargetInfo();
  LLVMInitializeNVPTXTarget();
  LLVMInitializeNVPTXTargetMC();
  LLVMInitializeNVPTXAsmPrinter();
}

/* The architectures from sm_80 on that LLVM 19's NVPTX backend knows: it
 * aborts the process ("Cannot select" cp.async) on any other. A newer GPU
 * (sm_100, sm_120, ...) gets PTX for the newest of them, which the driver
 * JIT-compiles forward (castor uses no arch-specific 'a' features). */
static const int nv_known_sm[] = {80, 86, 87, 89, 90};
enum { NV_NEWEST_SM = 90 };

/* "sm_80" -> 80; sm_90a -> 90. 0 if malformed. */
static int parse_sm(const char *sm) {
  if (strncmp(sm, "sm_", 3) != 0) return 0;
  char *end;
  long v = strtol(sm + 3, &end, 10);
  if (end == sm + 3 || (*end && strcmp(end, "a")) || v <= 0 || v > 1000) return 0;
  return (int)v;
}


rt_cuda_program *cg_compile_cuda(const ir_graph *g, const char *sm, const cg_options *o, diag_sink *d) {
  cg_options defaults;
  if (!o) cg_options_init(&defaults), o = &defaults;
  if (!sm) sm = "sm_80";
  int smv = parse_sm(sm);
  if (!smv) {
    diag_error(d, (diag_loc){0}, "unknown GPU architecture '%s' (expected sm_NN, e.g. sm_80 or sm_90)", sm);
    return NULL;
  }
  if (smv < 80) {
    diag_error(d, (diag_loc){0}, "castor's CUDA kernels need sm_80 or newer (mma.sync bf16, cp.async, ldmatrix), got %s", sm);
    return NULL;
  }
  char newest[16];
  if (smv > NV_NEWEST_SM) {
    snprintf(newest, sizeof newest, "sm_%d", NV_NEWEST_SM);
    sm = newest, smv = NV_NEWEST_SM;
  }
  bool known = false;
  for (size_t i = 0; i < sizeof nv_known_sm / sizeof nv_known_sm[0]; i++) known |= nv_known_sm[i] == smv;
  if (!known) {
    diag_error(d, (diag_loc){0}, "unknown GPU architecture '%s' (LLVM's NVPTX target knows sm_80, sm_86, sm_87, sm_89 and sm_90)", sm);
    return NULL;
  }
  pthread_once(&nv_once, nv_init);
  cg_plan plan;
  if (!cg_plan_build(g, &plan, d)) return NULL;

  rt_cuda_program *prog = NULL;
  arena *a = arena_create();
  rt_cuda_launch *launches = arena_alloc(a, (size_t)(plan.n_kernels + 1) * sizeof *launches);
  LLVMTargetMachineRef tm = NULL;
  LLVMContextRef ctx = LLVMContextCreate();
  LLVMModuleRef mod = LLVMModuleCreateWithNameInContext(g->name, ctx);
  cg_emitter e;
  cg_emitter_init(&e, ctx, mod, 1); /* one thread, one element: no host vectors */
  LLVMValueRef *base = NULL;
  char *msg = NULL;
  LLVMTargetRef target;
  if (LLVMGetTargetFromTriple(NV_TRIPLE, &target, &msg)) {
    cg_llvm_message_error(d, msg, DIAG_KIND_CODEGEN, "no NVPTX target");
    goto done;
  }
  LLVMCodeGenOptLevel lvl = o->opt_level <= 0 ? LLVMCodeGenLevelNone : LLVMCodeGenLevelAggressive;
  tm = LLVMCreateTargetMachine(target, NV_TRIPLE, sm, "", lvl, LLVMRelocDefault, LLVMCodeModelDefault);
  if (!tm) {
    char what[64];
    snprintf(what, sizeof what, "cannot create an NVPTX target machine for %s", sm);
    cg_llvm_message_error(d, NULL, DIAG_KIND_CODEGEN, what);
    goto done;
  }
  LLVMSetTarget(mod, NV_TRIPLE);
  LLVMTargetDataRef dl = LLVMCreateTargetDataLayout(tm);
  LLVMSetModuleDataLayout(mod, dl);
  LLVMDisposeTargetData(dl);

  LLVMValueRef smem = LLVMAddGlobalInAddressSpace(mod, LLVMArrayType(LLVMInt8TypeInContext(ctx), 0), "castor_smem",
                                                  CG_NV_SHARED);
  LLVMSetLinkage(smem, LLVMExternalLinkage);
  LLVMSetAlignment(smem, 16);
  int max_id = g->n_nodes;
  base = xcalloc((size_t)max_id + 1, sizeof *base);
  for (int ki = 0; ki < plan.n_kernels; ki++) {
    memset(base, 0, ((size_t)max_id + 1) * sizeof *base);
    emit_kernel(&e, &plan, ki, smem, smv, base, &launches[ki], a);
  }
  if (LLVMVerifyModule(mod, LLVMReturnStatusAction, &msg)) {
    diag_error(d, (diag_loc){0}, "internal error: generated NVPTX LLVM IR is invalid: %s", msg);
    LLVMDisposeMessage(msg);
    goto done;
  }
  LLVMDisposeMessage(msg), msg = NULL;
  if (o->opt_level > 0) {
    LLVMPassBuilderOptionsRef po = LLVMCreatePassBuilderOptions();
    LLVMErrorRef err = LLVMRunPasses(mod, o->opt_level >= 3 ? "default<O3>" : "default<O2>", tm, po);
    LLVMDisposePassBuilderOptions(po);
    if (cg_llvm_error(d, err, DIAG_KIND_CODEGEN, "optimizing the NVPTX module")) goto done;
  }
  if (o->dump_llvm) {
    char *s = LLVMPrintModuleToString(mod);
    str_buf_puts(o->dump_llvm, s);
    LLVMDisposeMessage(s);
  }
  LLVMMemoryBufferRef buf = NULL;
  if (LLVMTargetMachineEmitToMemoryBuffer(tm, mod, LLVMAssemblyFile, &msg, &buf)) {
    cg_llvm_message_error(d, msg, DIAG_KIND_CODEGEN, "emitting PTX");
    goto done;
  }
  rt_program *desc = cg_program_describe(g, &plan, d); /* launch geometry: rt_cuda_launch */
  if (!desc) {
    LLVMDisposeMemoryBuffer(buf);
    goto done;
  }
  prog = xcalloc(1, sizeof *prog);
  prog->arena = a, a = NULL;
  prog->desc = desc;
  size_t n = LLVMGetBufferSize(buf);
  prog->ptx = arena_alloc(prog->arena, n + 1);
  memcpy(prog->ptx, LLVMGetBufferStart(buf), n);
  prog->ptx[n] = 0;
  LLVMDisposeMemoryBuffer(buf);
  snprintf(prog->sm, sizeof prog->sm, "%s", sm);
  prog->launches = launches;
  prog->n_launches = plan.n_kernels;

done:
  free(base);
  cg_emitter_fini(&e);
  LLVMDisposeModule(mod);
  LLVMContextDispose(ctx);
  if (tm) LLVMDisposeTargetMachine(tm);
  if (a) arena_destroy(a);
  cg_plan_fini(&plan);
  return prog;
}

bool cg_emit_ptx(const ir_graph *g, const char *sm, str_buf *out, diag_sink *d) {
  rt_cuda_program *p = cg_compile_cuda(g, sm, NULL, d);
  if (!p) return false;
  str_buf_puts(out, p->ptx);
  rt_cuda_program_destroy(p);
  return true;
}
