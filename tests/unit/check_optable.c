/* SPDX-License-Identifier: Apache-2.0 */
/*
 * check_optable.c: every op of ir/ir_ops.def through every stage.
 *
 * For each op the suite builds the smallest graph that uses it (its
 * operands chosen by the op's type rule), then checks that each stage has
 * an answer for it: the text form prints, parses back and prints the same
 * bytes; the verifier accepts it; the compile pipeline under every policy
 * keeps it valid; the reference interpreter computes it; every backend
 * either supports it or says why not; where the CPU backend supports it,
 * the JIT's results match the float64 reference; where the CUDA backend
 * does, PTX is emitted for it (no GPU needed), and under CASTOR_CUDA_EMULATE
 * (ctest's check_optable_emu) its results through the PTX emulator match
 * the reference too. A new op that a stage has no
 * answer for fails here, by name, instead of becoming a silent default.
 * -Wswitch-enum does the same at compile time for every switch over ops.
 */
#include <check.h>

#include "tests/unit/test_support.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/internal.h"
#include "codegen/cg_backend.h"
#include "codegen/cg_internal.h"
#include "passes/passes.h"
#include "tests/ref/ref.h"
#include "util/half.h"
#include "util/util.h"

#include "tests/unit/optable_cases.h"

static const diag_loc no_loc = {0};

START_TEST(test_table_is_consistent) {
  for (int i = 0; i < IR_OP_COUNT; i++) {
    ir_op op = (ir_op)i, back;
    const char *name = ir_op_name(op);
    ck_assert_msg(ir_op_from_name(name, strlen(name), &back) && back == op, "%s: name does not look up", name);
    ck_assert_msg(ir_op_arity(op) <= IR_MAX_SRCS && ir_op_arity(op) >= IR_VARIADIC, "%s: sources", name);
    ck_assert_msg(IR_ATTR_COUNT == 64 || ir_op_attrs(op) >> (IR_ATTR_COUNT & 63) == 0, "%s: an attribute outside ir_attrs.def", name);
    ck_assert_msg(ir_op_semantics(op) && *ir_op_semantics(op), "%s: no semantics", name);
    int f = ir_op_flops(op);
    ck_assert_msg(f >= 0 || f == IR_FLOPS_CONTRACT, "%s: flops %d", name, f);
    ck_assert_msg(f != IR_FLOPS_CONTRACT || ir_op_kernel(op) == IR_KERNEL_CONTRACT || op == IR_OP_MATMUL_TN ||
                      op == IR_OP_CONV2D_FILTER_GRAD || op == IR_OP_GROUP_CONV2D || op == IR_OP_GROUP_CONV2D_INPUT_GRAD ||
                      op == IR_OP_GROUP_CONV2D_FILTER_GRAD, /* convolutional networks: kit maps that sum */
                  "%s: contraction flops", name);
    ck_assert_msg(!(ir_op_flags(op) & IR_OPF_PAD8) ||
                      (ir_op_kernel(op) == IR_KERNEL_CONTRACT &&
                       (ir_op_type_rule(op) == IR_TYPE_MATMUL || ir_op_type_rule(op) == IR_TYPE_CONV2D)),
                  "%s: pad8 pads only [M,K] x [K,Nc] contractions and conv2d's channels", name);
    bool leaf = (ir_op_flags(op) & IR_OPF_LEAF) != 0;
    ck_assert_msg(leaf == (ir_op_kernel(op) == IR_KERNEL_NONE) && leaf == (ir_op_autocast(op) == IR_AC_LEAF),
                  "%s: leaf columns disagree", name);
    ck_assert_msg(strcmp(ir_ac_class_name(ir_op_autocast(op)), "?") != 0, "%s: autocast class", name);
    ck_assert_msg(strcmp(ir_kernel_class_name(ir_op_kernel(op)), "?") != 0, "%s: kernel class", name);
  }
  for (int k = 0; k < IR_ATTR_COUNT; k++) {
    ir_attr_key back;
    const char *name = ir_attr_name((ir_attr_key)k);
    ck_assert_msg(ir_attr_from_name(name, strlen(name), &back) && (int)back == k, "attribute %s", name);
    ck_assert_msg(strcmp(name, "policy") != 0, "'policy' is every node's, not an op attribute");
  }
}
END_TEST

/* Text form: print, parse, print gives the same bytes; the verifier passes. */
START_TEST(test_every_op_text_and_verify) {
  for (int i = 0; i < IR_OP_COUNT; i++) {
    op_case c;
    optable_build_case((ir_op)i, &c);
    int operand, dim;
    ck_assert_msg(ir_op_flops((ir_op)i) != IR_FLOPS_CONTRACT || ir_node_contraction(c.node, &operand, &dim),
                  "%s: contraction flops but its type rule names no summed index (ir.c)", ir_op_name((ir_op)i));
    diag_sink *d = diag_sink_create();
    ck_assert_msg(ir_verify(c.g, d), "%s: verify: %s", ir_op_name((ir_op)i), diag_text(d));
    str_buf a, b;
    str_buf_init(&a), str_buf_init(&b);
    ir_print(c.g, &a);
    ir_graph *back = ir_parse("t.cir", a.data, a.len, d);
    ck_assert_msg(back, "%s: does not parse back:\n%s\n%s", ir_op_name((ir_op)i), str_buf_cstr(&a), diag_text(d));
    ir_print(back, &b);
    ck_assert_msg(strcmp(str_buf_cstr(&a), str_buf_cstr(&b)) == 0, "%s: print/parse/print differs:\n%s\n%s",
                  ir_op_name((ir_op)i), str_buf_cstr(&a), str_buf_cstr(&b));
    ck_assert_msg(ir_verify(back, d), "%s: parsed graph fails verify: %s", ir_op_name((ir_op)i), diag_text(d));
    ir_graph_destroy(back);
    str_buf_fini(&a), str_buf_fini(&b);
    diag_sink_destroy(d);
    optable_free_case(&c);
  }
}
END_TEST

/* The compile pipelines under every policy keep the graph valid. */
START_TEST(test_every_op_through_the_passes) {
  static const char *const pipelines[] = {PASS_PIPELINE_DEFAULT, PASS_PIPELINE_PAD8};
  for (int i = 0; i < IR_OP_COUNT; i++)
    for (int p = 1; p < IR_POLICY_COUNT; p++)
      for (int k = 0; k < 2; k++) {
        op_case c;
        optable_build_case((ir_op)i, &c);
        c.g->policy = (ir_policy)p;
        diag_sink *d = diag_sink_create();
        pass_options po;
        pass_options_init(&po);
        po.verify_each = true;
        ck_assert_msg(pass_run_pipeline(c.g, pipelines[k], &po, d), "%s under %s, %s: %s", ir_op_name((ir_op)i),
                      ir_policy_name((ir_policy)p), pipelines[k], diag_text(d));
        diag_sink_destroy(d);
        optable_free_case(&c);
      }
}
END_TEST

/* The host's CPU, and the AVX2 and SSE2 code paths, which every x86-64
 * host that runs the suite can execute. */
static const struct { const char *cpu, *features; } cpus[] = {
    {NULL, NULL}, {"haswell", "+sse2,+sse4.2,+avx,+avx2,+fma,+f16c"}, {"x86-64", "+sse2"}};
enum { N_CPUS = sizeof cpus / sizeof cpus[0] };

/* Every backend answers for every op; the CPU's answers are checked
 * against the reference, the CUDA target's PTX is emitted. */
START_TEST(test_every_op_on_every_backend) {
  /* CNN on the cuda target: under CASTOR_CUDA_EMULATE (ctest's
   * check_optable_emu) the cuda target's ops run through the PTX emulator
   * against the reference, the CPU's are left to check_optable */
  bool emulated = getenv("CASTOR_CUDA_EMULATE") != NULL;
  for (int i = 0; i < IR_OP_COUNT; i++) {
    for (int bi = 0; bi < castor_backend_count(); bi++) {
      if (emulated && castor_backend_at(bi) != &cg_backend_cuda) continue;
      op_case c;
      optable_build_case((ir_op)i, &c);
      const cg_backend *be = castor_backend_at(bi);
      const char *why = cg_backend_unsupported(be, (ir_op)i);
      ck_assert_msg(!why || *why, "%s on %s: an exception without a reason", ir_op_name((ir_op)i), be->name);
      if (why) {
        optable_free_case(&c);
        continue;
      }
      diag_sink *d = diag_sink_create();
      pass_options po;
      pass_options_init(&po);
      po.verify_each = true;
      ck_assert(pass_run_pipeline(c.g, be->always_pad8 ? PASS_PIPELINE_PAD8 : PASS_PIPELINE_DEFAULT, &po, d));
      cg_backend_options bo;
      cg_backend_options_init(&bo);
      if (be == &cg_backend_cuda && !emulated) { /* no GPU here: emit and validate the PTX text */
        str_buf ptx;
        str_buf_init(&ptx);
        ck_assert_msg(be->emit(c.g, &bo, CG_EMIT_PTX, &ptx, d), "%s: PTX: %s", ir_op_name((ir_op)i), diag_text(d));
        ck_assert_msg(strstr(str_buf_cstr(&ptx), ".entry"), "%s: PTX without a kernel", ir_op_name((ir_op)i));
        str_buf_fini(&ptx);
      } else for (int ci = 0; ci < (be == &cg_backend_cuda ? 1 : N_CPUS); ci++) { /* every code path this host can run */
        bo.threads = 2;
        bo.cg.cpu = cpus[ci].cpu, bo.cg.features = cpus[ci].features;
        cg_exec *x = cg_backend_compile(be, c.g, &bo, d);
        ck_assert_msg(x, "%s: cpu compile: %s", ir_op_name((ir_op)i), diag_text(d));
        enum { BATCH = 5 };
        float in[BATCH * W];
        rng r;
        rng_init(&r, 3);
        for (int k = 0; k < BATCH * W; k++) in[k] = rng_uniform_f32(&r, -2.0f, 2.0f);
        /* int32 indices (gather's): -1 to 8 into a table of 7 rows, some outside it */
        bool ints = x->desc->inputs[0].dtype == DT_I32;
        int32_t in_i[BATCH * W];
        for (int k = 0; k < BATCH * W; k++) in_i[k] = (int32_t)floorf((in[k] + 2.0f) * 2.45f) - 1;
        if (ints)
          for (int k = 0; k < BATCH * W; k++) in[k] = (float)in_i[k];
        const rt_tensor_desc *od = &x->desc->outputs[0];
        int64_t n = 1;
        for (int k = 0; k < od->rank; k++) n *= od->dims[k] < 0 ? BATCH : od->dims[k];
        void *raw = xcalloc((size_t)n, 8);
        float *out = xcalloc((size_t)n, 4);
        const void *ins[] = {ints ? (const void *)in_i : (const void *)in};
        void *outs[] = {raw};
        ck_assert_msg(be->run(x, BATCH, ins, outs, d), "%s: run: %s", ir_op_name((ir_op)i), diag_text(d));
        for (int64_t k = 0; k < n; k++) out[k] = (float)dtype_load_double(od->dtype, raw, k);
        free(raw);
        double *xin = ref_from_f32(in, BATCH * W), *want[1] = {NULL};
        const double *rin[] = {xin};
        char err[256];
        ref_state st; /* the variables of the training ops, as the CPU starts them */
        ref_state_init(&st, c.g);
        ck_assert_msg(ref_run_state(c.g, BATCH, rin, &st, want, err, sizeof err), "%s: reference: %s",
                      ir_op_name((ir_op)i), err);
        ref_state_fini(&st);
        /* f32 kernels against float64: a few ulp (exp, tanh, erf approximations) */
        /* a reduction's outputs near zero come from cancellation (layer_norm's
         * x - mean): for row-wise ops the error is normalized by the output's
         * scale, as check_e2e measures models */
        /* so are sums over the rows and the training contractions (their
         * error is relative to the sum of |terms|, not to the result), and
         * the activation gradients, which cross zero inside the input range
         * (silu_grad at x = -1.28: elementwise relative error is unbounded) */
        ir_kernel_class kc = ir_op_kernel((ir_op)i);
        bool sums = kc == IR_KERNEL_ROWWISE || kc == IR_KERNEL_REDUCE || (ir_op)i == IR_OP_MATMUL_NT ||
                    strstr(ir_op_name((ir_op)i), "_grad") ||
                    (ir_op)i == IR_OP_CONV2D || /* convolutional networks: sums over a window */
                    (ir_op)i == IR_OP_GROUP_CONV2D ||
                    (ir_op)i == IR_OP_BATCH_NORM; /* CNN: x * k - mean * k cancels as layer_norm's x - mean */
        double e = sums ? ref_normalized_error(out, want[0], n) : ref_max_rel_error(out, want[0], n, 1e-3);
        ref_cmp worst = sums ? ref_compare_normalized(out, want[0], n) : ref_compare_rel(out, want[0], n, 1e-3);
        char msg[256];
        ck_assert_msg(e <= 2e-6, "%s on %s: max relative error %g vs the reference (%s)", ir_op_name((ir_op)i),
                      be == &cg_backend_cuda ? "the emulated cuda target" : cpus[ci].cpu ? cpus[ci].cpu : "the host", e,
                      ref_cmp_str(&worst, msg, sizeof msg));
        ref_outputs_free(want, 1);
        free(xin), free(out);
        cg_exec_destroy(x);
      }
      diag_sink_destroy(d);
      optable_free_case(&c);
    }
  }
}
END_TEST

/* layer_norm over one and over two trailing dimensions, lines that are not
 * a whole number of vectors, under f32 and a 16-bit policy: the CPU kernel
 * against the reference on the same compiled graph. */
/* The training contractions run on the GEMM (cg_gemm.c) with B packed at
 * run time: matmul_tn sums over the batch (K blocks of 256 rows, 512 on
 * the K-pair family, the last one short), matmul_nt packs its b transposed. Shapes that cross every
 * blocking edge: summed dimensions of more than one K block and not a
 * multiple of it; results wider than a column block (512 columns) with a
 * column tail that is not a whole vector; more rows than a row block
 * (8 register tiles) and not whole register tiles; f32, f16 and bf16
 * operands (bf16 on the host's family: vdpbf16ps over K pairs on a CPU
 * with AVX512-BF16, where odd sums pad the last pair with a zero);
 * on 1 and 3 threads (bit-identical), on every CPU path, against the
 * reference. */
typedef struct contraction_case {
  ir_op op;
  int64_t batch, rows_a, cols; /* tn: a [batch, rows_a], b [batch, cols]; nt: a [batch, rows_a], b [cols, rows_a] */
} contraction_case;

static void check_contraction(const contraction_case *cc, ir_dtype dt) {
  bool tn = cc->op == IR_OP_MATMUL_TN, f16 = dt != DT_F32; /* f16: a 16-bit dtype */
  int64_t N = cc->batch, K = cc->rows_a, J = cc->cols;
  op_case c = {0};
  c.g = ir_graph_create(tn ? "tn" : "nt");
  ir_type at = {dt, 2, {IR_DIM_BATCH, K}}, bt = {dt, 2, {IR_DIM_BATCH, J}}, wt = {dt, 2, {J, K}};
  int64_t na = N * K, nb = tn ? N * J : J * K, ny = tn ? K * J : N * J;
  float *ha = xmalloc((size_t)na * 4), *hb = xmalloc((size_t)nb * 4);
  uint16_t *ea = xmalloc((size_t)na * 2), *eb = xmalloc((size_t)nb * 2);
  rng r;
  rng_init(&r, 5);
  for (int64_t i = 0; i < na + nb; i++) {
    float v = rng_uniform_f32(&r, -1, 1), *h = i < na ? &ha[i] : &hb[i - na];
    uint16_t *e = i < na ? &ea[i] : &eb[i - na];
    *h = dt == DT_BF16 ? half_bf16_to_f32(*e = half_f32_to_bf16(v)) : half_f16_to_f32(*e = half_f32_to_f16(v));
  }
  ir_node *a = ir_build_input(c.g, "a", &at, 0, no_loc);
  ir_node *b = tn ? ir_build_input(c.g, "b", &bt, 1, no_loc)
                  : ir_build_const(c.g, "w", &wt, "w", f16 ? (void *)eb : (void *)hb, no_loc);
  ir_attr attr = {.acc = DT_F32};
  ir_node *y = ir_build_op(c.g, cc->op, "y", (ir_node *[]){a, b}, 2, &attr, no_loc);
  ir_node *y32 = f16 ? ir_build_cast(c.g, "y32", y, DT_F32, no_loc) : y;
  ir_graph_add_output(c.g, "y", y32);
  ir_graph_renumber(c.g);
  double *ra = ref_from_f32(ha, na), *rb = ref_from_f32(hb, nb), *want[1] = {NULL};
  char err[256];
  const double *rins[] = {ra, rb};
  ck_assert_msg(ref_run(c.g, N, rins, want, err, sizeof err), "%s", err);
  float *out[2] = {xmalloc((size_t)ny * 4), xmalloc((size_t)ny * 4)};
  for (int ci = 0; ci < N_CPUS; ci++)
    for (int t = 0; t < 2; t++) {
      diag_sink *d = diag_sink_create();
      cg_backend_options bo;
      cg_backend_options_init(&bo);
      bo.threads = t ? 3 : 1;
      bo.cg.cpu = cpus[ci].cpu, bo.cg.features = cpus[ci].features;
      setenv("CASTOR_PARALLEL_MIN_WORK", "0", 1);
      cg_exec *x = cg_backend_compile(&cg_backend_cpu, c.g, &bo, d);
      ck_assert_msg(x, "compile: %s", diag_text(d));
      const void *ins[] = {f16 ? (void *)ea : ha, f16 ? (void *)eb : hb};
      void *outs[] = {out[t]};
      ck_assert_msg(cg_backend_cpu.run(x, N, ins, outs, d), "run: %s", diag_text(d));
      unsetenv("CASTOR_PARALLEL_MIN_WORK");
      double e = ref_normalized_error(out[t], want[0], ny);
      /* a 16-bit result: one rounding of its dtype (2^-11 for f16, 2^-8 for bf16, relative) */
      double bound = dt == DT_F32 ? 2e-6 : dt == DT_F16 ? 1e-3 : 4e-3;
      ck_assert_msg(e <= bound, "%s %lldx%lldx%lld %s on %s, %d threads: normalized error %g",
                    ir_op_name(cc->op), (long long)N, (long long)K, (long long)J, dtype_name(dt),
                    cpus[ci].cpu ? cpus[ci].cpu : "the host", bo.threads, e);
      if (t) ck_assert_msg(memcmp(out[0], out[1], (size_t)ny * 4) == 0, "%s: 1 and 3 threads differ", ir_op_name(cc->op));
      cg_exec_destroy(x);
      diag_sink_destroy(d);
    }
  ref_outputs_free(want, 1);
  free(ra), free(rb), free(ha), free(hb), free(ea), free(eb), free(out[0]), free(out[1]);
  ir_graph_destroy(c.g);
}

START_TEST(test_contraction_blocking) {
  static const contraction_case cases[] = {
      {IR_OP_MATMUL_TN, 601, 37, 300},  /* 3 K blocks, the last short; rows < one tile x 3 */
      {IR_OP_MATMUL_TN, 300, 250, 613}, /* 2 row blocks, 2 column blocks with a tail */
      {IR_OP_MATMUL_TN, 5, 3, 7},       /* less than a K block, a vector, a tile */
      {IR_OP_MATMUL_NT, 37, 601, 300},  /* the transposed b over 3 K blocks */
      {IR_OP_MATMUL_NT, 250, 300, 613}, /* 2 row blocks, 2 column blocks with a tail */
      {IR_OP_MATMUL_NT, 3, 5, 7},
  };
  size_t k = 0;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    for (int t = 0; t < 3; t++)
      if (test_case_runs(k++)) check_contraction(&cases[i], t == 0 ? DT_F32 : t == 1 ? DT_F16 : DT_BF16);
}
END_TEST

START_TEST(test_layer_norm_shapes) {
  static const struct { int64_t axis; const char *policy; } cases[] = {
      {-1, "float32"}, {1, "float32"}, {-2, "mixed_float16"}, {2, "float16"}, {-1, "bfloat16"}};
  for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
    op_case c = {0};
    c.g = ir_graph_create("ln");
    ir_policy_from_name(cases[ci].policy, strlen(cases[ci].policy), &c.g->policy);
    ir_type xt = {DT_F32, 3, {IR_DIM_BATCH, 3, 7}};
    ir_node *x = ir_build_input(c.g, "x", &xt, 0, no_loc);
    int first = ir_norm_first_dim(&xt, cases[ci].axis);
    int64_t pd[2] = {xt.dims[first], first == 1 ? 7 : 0};
    ir_node *gamma = optable_konst(&c, "gamma", 3 - first, pd, 11), *beta = optable_konst(&c, "beta", 3 - first, pd, 12);
    ir_attr attr = {.axis = cases[ci].axis, .epsilon = 1e-5};
    ir_node *y = ir_build_op(c.g, IR_OP_LAYER_NORM, "y", (ir_node *[]){x, gamma, beta}, 3, &attr, no_loc);
    ir_graph_add_output(c.g, "y", y);
    diag_sink *d = diag_sink_create();
    pass_options po;
    pass_options_init(&po);
    po.verify_each = true;
    ck_assert_msg(pass_run_pipeline(c.g, PASS_PIPELINE_DEFAULT, &po, d), "%s", diag_text(d));
    cg_backend_options bo;
    cg_backend_options_init(&bo);
    bo.threads = 2;
    cg_exec *ex = cg_backend_compile(&cg_backend_cpu, c.g, &bo, d);
    ck_assert_msg(ex, "%s", diag_text(d));
    enum { BATCH = 4, N = BATCH * 21 };
    float in[N], out[N];
    rng r;
    rng_init(&r, 5);
    for (int k = 0; k < N; k++) in[k] = rng_uniform_f32(&r, -3.0f, 3.0f) + (float)(k % 7); /* a non-zero mean */
    const void *ins[] = {in};
    void *outs[] = {out};
    ck_assert_msg(ex->backend->run(ex, BATCH, ins, outs, d), "%s", diag_text(d));
    double *xin = ref_from_f32(in, N), *want[1] = {NULL};
    const double *rin[] = {xin};
    char err[256];
    ck_assert_msg(ref_run(c.g, BATCH, rin, want, err, sizeof err), "%s", err);
    /* the statistics run in f32 under every policy (deny class); 16-bit
     * policies round x, gamma and beta first, which the reference does too */
    double e = ref_normalized_error(out, want[0], N);
    ck_assert_msg(e <= 1e-6, "layer_norm axis %lld under %s: normalized error %g", (long long)cases[ci].axis,
                  cases[ci].policy, e);
    ref_outputs_free(want, 1);
    free(xin);
    cg_exec_destroy(ex);
    diag_sink_destroy(d);
    optable_free_case(&c);
  }
}
END_TEST

/* layer_norm's gradient ops (layer_norm_grad, layer_norm_xhat) over one
 * and over two trailing dimensions, lines of 7 and 21 elements (not whole
 * vectors on any path: the scalar tail), f32 and f16 operands (the
 * statistics in f32, the result rounded once), on every CPU path, against
 * the reference on the same graph. */
START_TEST(test_layer_norm_grad_shapes) {
  enum { BATCH = 5, N = BATCH * 21 };
  for (int axis = -2; axis <= -1; axis++)
    for (int f16 = 0; f16 < 2; f16++) {
      ir_dtype dt = f16 ? DT_F16 : DT_F32;
      ir_graph *g = ir_graph_create("ln_grad");
      ir_type xt = {dt, 3, {IR_DIM_BATCH, 3, 7}};
      ir_node *x = ir_build_input(g, "x", &xt, 0, no_loc), *dy = ir_build_input(g, "dy", &xt, 1, no_loc);
      int first = ir_norm_first_dim(&xt, axis);
      ir_type gt = {dt, 3 - first, {xt.dims[first], 7}};
      int64_t ng = first == 1 ? 21 : 7;
      uint16_t gh[21];
      float gf[21];
      rng r;
      rng_init(&r, 13);
      for (int k = 0; k < ng; k++) gf[k] = rng_uniform_f32(&r, -1.5f, 1.5f), gh[k] = half_f32_to_f16(gf[k]);
      if (f16)
        for (int k = 0; k < ng; k++) gf[k] = half_f16_to_f32(gh[k]);
      ir_node *gamma = ir_build_const(g, "gamma", &gt, "gamma", f16 ? (void *)gh : gf, no_loc);
      ir_attr attr = {.axis = axis, .epsilon = 1e-3};
      ir_node *dx = ir_build_op(g, IR_OP_LAYER_NORM_GRAD, "dx", (ir_node *[]){x, gamma, dy}, 3, &attr, no_loc);
      ir_node *xhat = ir_build_op(g, IR_OP_LAYER_NORM_XHAT, "xhat", &x, 1, &attr, no_loc);
      ir_graph_add_output(g, "dx", dx);
      ir_graph_add_output(g, "xhat", xhat);
      ir_graph_renumber(g);
      diag_sink *d = diag_sink_create();
      ck_assert_msg(ir_verify(g, d), "%s", diag_text(d));
      float xf[N], dyf[N];
      uint16_t xh[N], dyh[N];
      for (int k = 0; k < N; k++) {
        xf[k] = rng_uniform_f32(&r, -3.0f, 3.0f) + (float)(k % 7), dyf[k] = rng_uniform_f32(&r, -1.0f, 1.0f);
        xh[k] = half_f32_to_f16(xf[k]), dyh[k] = half_f32_to_f16(dyf[k]);
        if (f16) xf[k] = half_f16_to_f32(xh[k]), dyf[k] = half_f16_to_f32(dyh[k]);
      }
      double *rx = ref_from_f32(xf, N), *rdy = ref_from_f32(dyf, N), *want[2] = {NULL, NULL};
      char err[256];
      ck_assert_msg(ref_run(g, BATCH, (const double *[]){rx, rdy}, want, err, sizeof err), "%s", err);
      for (int ci = 0; ci < N_CPUS; ci++) {
        cg_backend_options bo;
        cg_backend_options_init(&bo);
        bo.threads = 2;
        bo.cg.cpu = cpus[ci].cpu, bo.cg.features = cpus[ci].features;
        cg_exec *ex = cg_backend_compile(&cg_backend_cpu, g, &bo, d);
        ck_assert_msg(ex, "%s", diag_text(d));
        uint8_t raw[2][N * 4];
        const void *ins[] = {f16 ? (void *)xh : xf, f16 ? (void *)dyh : dyf};
        void *outs[] = {raw[0], raw[1]};
        ck_assert_msg(cg_backend_cpu.run(ex, BATCH, ins, outs, d), "%s", diag_text(d));
        for (int o = 0; o < 2; o++) {
          float got[N];
          for (int k = 0; k < N; k++) got[k] = (float)dtype_load_double(ex->desc->outputs[o].dtype, raw[o], k);
          /* f16: the result rounded once (2^-11 relative), and an f32
           * difference that crosses a rounding boundary moves it one ulp */
          double e = ref_normalized_error(got, want[o], N), bound = f16 ? 1e-3 : 2e-6;
          ck_assert_msg(e <= bound, "%s axis %d %s on %s: normalized error %g", o ? "layer_norm_xhat" : "layer_norm_grad",
                        axis, dtype_name(dt), cpus[ci].cpu ? cpus[ci].cpu : "the host", e);
        }
        cg_exec_destroy(ex);
      }
      ref_outputs_free(want, 2);
      free(rx), free(rdy);
      diag_sink_destroy(d);
      ir_graph_destroy(g);
    }
}
END_TEST

/* The training contractions of unbatched operands (a weight's own
 * computation in a training step, such as layer_norm of a weight: the
 * gradients sum the weight's rows, not the batch's), at batches smaller and
 * larger than those rows, on every CPU path, against the reference. */
START_TEST(test_unbatched_contractions) {
  static const ir_op ops[] = {IR_OP_SUM_ROWS, IR_OP_MATMUL_TN, IR_OP_MATMUL_NT};
  for (size_t oi = 0; oi < sizeof ops / sizeof *ops; oi++) {
    op_case c = {0};
    c.g = ir_graph_create("unbatched");
    ir_type xt = {DT_F32, 2, {IR_DIM_BATCH, 3}};
    ir_node *x = ir_build_input(c.g, "x", &xt, 0, no_loc);
    ir_node *v = optable_konst(&c, "v", 2, (int64_t[]){5, 19}, 3), *u = optable_konst(&c, "u", 2, (int64_t[]){7, 19}, 4);
    ir_node *t = ir_build_unary(c.g, IR_OP_TANH, "t", v, no_loc); /* computed, not a leaf */
    ir_attr acc = {.acc = DT_F32};
    ir_node *srcs[] = {t, ops[oi] == IR_OP_MATMUL_NT ? u : t};
    ir_node *y = ir_build_op(c.g, ops[oi], "y", srcs, ops[oi] == IR_OP_SUM_ROWS ? 1 : 2, &acc, no_loc);
    ir_graph_add_output(c.g, "x", x);
    ir_graph_add_output(c.g, "y", y);
    ir_graph_renumber(c.g);
    int64_t n = 1;
    for (int r = 0; r < y->type.rank; r++) n *= y->type.dims[r];
    for (int ci = 0; ci < N_CPUS; ci++) {
      diag_sink *d = diag_sink_create();
      cg_backend_options bo;
      cg_backend_options_init(&bo);
      bo.threads = 2;
      bo.cg.cpu = cpus[ci].cpu, bo.cg.features = cpus[ci].features;
      cg_exec *ex = cg_backend_compile(&cg_backend_cpu, c.g, &bo, d);
      ck_assert_msg(ex, "%s", diag_text(d));
      for (int batch = 1; batch <= 9; batch += 8) {
        float in[27] = {0}, xo[27], out[19 * 19];
        void *outs[] = {xo, out};
        const void *ins[] = {in};
        ck_assert_msg(cg_backend_cpu.run(ex, batch, ins, outs, d), "%s", diag_text(d));
        double *rx = ref_from_f32(in, batch * 3), *want[2] = {NULL, NULL};
        char err[256];
        ck_assert_msg(ref_run(c.g, batch, (const double *[]){rx}, want, err, sizeof err), "%s", err);
        double e = ref_normalized_error(out, want[1], n);
        ck_assert_msg(e <= 2e-6, "%s of an unbatched operand at batch %d on %s: normalized error %g",
                      ir_op_name(ops[oi]), batch, cpus[ci].cpu ? cpus[ci].cpu : "the host", e);
        ref_outputs_free(want, 2);
        free(rx);
      }
      cg_exec_destroy(ex);
      diag_sink_destroy(d);
    }
    optable_free_case(&c);
  }
}
END_TEST

/* Every backend of the build answers for every op of the table: its
 * table of exceptions has a reason for the op, or the op's kernel class
 * has an emitter there (test_every_op_on_every_backend compiles those).
 * The NVPTX emitters of the training classes (reduce, update) run the
 * kit's formulas: an op of theirs without one (a GEMM without its
 * per-element form, cg_contract_value, or a formula row) needs a reason. */
START_TEST(test_every_op_has_an_answer) {
  ck_assert_int_ge(castor_backend_count(), 2);
  for (int bi = 0; bi < castor_backend_count(); bi++) {
    const cg_backend *be = castor_backend_at(bi);
    ck_assert_msg(be->exceptions, "%s: no table of exceptions", be->name);
    for (int i = 0; i < IR_OP_COUNT; i++) {
      const char *why = cg_backend_unsupported(be, (ir_op)i);
      ck_assert_msg(!why || strlen(why) > 10, "%s on %s: reason '%s' says nothing", ir_op_name((ir_op)i), be->name,
                    why);
      ir_kernel_class k = ir_op_kernel((ir_op)i);
      bool kit = cg_train_has_formula((ir_op)i) || (ir_op_flops((ir_op)i) == IR_FLOPS_CONTRACT && k == IR_KERNEL_REDUCE);
      if (be == &cg_backend_cuda && (k == IR_KERNEL_REDUCE || k == IR_KERNEL_UPDATE))
        ck_assert_msg(why || kit, "%s on cuda: no kit formula for its kernel class and no exception", ir_op_name((ir_op)i));
    }
  }
  ck_assert_ptr_null(castor_backend_at(castor_backend_count()));
}
END_TEST

/* The kernel kit has exactly one formula for every op of the classes whose
 * kernels it emits by op (every target's driver routes by class into the
 * kit's tables, which assert on a missing row instead of defaulting): a
 * row-wise op a line formula (cg_rowwise.c) or a row kernel (cg_train.c),
 * never both; a reduction a GEMM (contraction flops) or a training formula;
 * an update a training formula; no other class a training formula. */
START_TEST(test_every_op_has_one_kit_formula) {
  for (int i = 0; i < IR_OP_COUNT; i++) {
    ir_op op = (ir_op)i;
    const char *name = ir_op_name(op);
    bool line = cg_rowwise_has_line_formula(op), train = cg_train_has_formula(op);
    bool gemm = ir_op_flops(op) == IR_FLOPS_CONTRACT;
    switch (ir_op_kernel(op)) {
    case IR_KERNEL_ROWWISE: ck_assert_msg(line != train, "%s: line formula %d, row kernel %d", name, line, train); break;
    case IR_KERNEL_REDUCE: ck_assert_msg(gemm != train && !line, "%s: GEMM %d, formula %d", name, gemm, train); break;
    case IR_KERNEL_UPDATE: ck_assert_msg(train && !line, "%s: an update without a formula", name); break;
    case IR_KERNEL_NONE:
    case IR_KERNEL_CONTRACT:
    case IR_KERNEL_ELTWISE:
    case IR_KERNEL_REINDEX: ck_assert_msg(!train && !line, "%s: a kit formula outside its class", name); break;
    }
  }
}
END_TEST

/* An op a backend lacks is a clear error at the node, not a wrong kernel:
 * the cuda backend with a table of exceptions that names layer_norm (its
 * own names none today). */
START_TEST(test_unsupported_is_reported) {
  op_case c;
  optable_build_case(IR_OP_LAYER_NORM, &c);
  c.node->loc = (diag_loc){"m.cast", 3, 5};
  diag_sink *d = diag_sink_create();
  static const char *exceptions[IR_OP_COUNT] = {[IR_OP_LAYER_NORM] = "a reason for the test"};
  cg_backend be = cg_backend_cuda;
  be.exceptions = exceptions;
  ck_assert(!cg_backend_check(&be, c.g, d));
  ck_assert_msg(strstr(diag_text(d), "m.cast:3:5: error: layer_norm (%y) is not supported by the cuda target: a reason "
                                     "for the test"),
                "%s", diag_text(d));
  ck_assert_int_eq(diag_first_error_kind(d), DIAG_KIND_UNSUPPORTED);
  diag_sink_destroy(d);
  optable_free_case(&c);
}
END_TEST

/* general tensors: gather_grad, the ordered scatter-add, with many
 * repeated indices and some outside the table, on every CPU path: 1 and 3
 * threads give the same bits, and match the float64 reference. */
START_TEST(test_gather_grad_threads) {
  enum { T = 37, V = 11, D = 5, BATCH = 9 };
  op_case c = {0};
  c.g = ir_graph_create("scatter");
  ir_type xt = {DT_I32, 2, {IR_DIM_BATCH, T}};
  ir_node *x = ir_build_input(c.g, "x", &xt, 0, no_loc);
  ir_node *tab = optable_konst(&c, "table", 2, (int64_t[]){V, D}, 5);
  ir_node *g = ir_build_op(c.g, IR_OP_GATHER, "g", (ir_node *[]){tab, x}, 2, &(ir_attr){.axis = 0}, no_loc);
  ir_node *dy = ir_build_unary(c.g, IR_OP_TANH, "dy", g, no_loc);
  ir_attr ga = {.axis = 0, .shape = {2, {V, D}}};
  ir_node *y = ir_build_op(c.g, IR_OP_GATHER_GRAD, "y", (ir_node *[]){dy, x}, 2, &ga, no_loc);
  ir_graph_add_output(c.g, "y", y);
  ir_graph_renumber(c.g);
  int32_t in[BATCH * T];
  rng r;
  rng_init(&r, 11);
  for (int k = 0; k < BATCH * T; k++) in[k] = (int32_t)(rng_next(&r) % (V + 2)) - 1;
  double *rin = xmalloc(sizeof(double) * BATCH * T), *want[1] = {NULL};
  for (int k = 0; k < BATCH * T; k++) rin[k] = in[k];
  char err[256];
  ck_assert_msg(ref_run(c.g, BATCH, (const double *[]){rin}, want, err, sizeof err), "%s", err);
  float out[2][V * D];
  for (int ci = 0; ci < N_CPUS; ci++)
    for (int t = 0; t < 2; t++) {
      diag_sink *d = diag_sink_create();
      cg_backend_options bo;
      cg_backend_options_init(&bo);
      bo.threads = t ? 3 : 1;
      bo.cg.cpu = cpus[ci].cpu, bo.cg.features = cpus[ci].features;
      setenv("CASTOR_PARALLEL_MIN_WORK", "0", 1);
      cg_exec *ex = cg_backend_compile(&cg_backend_cpu, c.g, &bo, d);
      ck_assert_msg(ex, "%s", diag_text(d));
      void *outs[] = {out[t]};
      ck_assert_msg(cg_backend_cpu.run(ex, BATCH, (const void *[]){in}, outs, d), "%s", diag_text(d));
      unsetenv("CASTOR_PARALLEL_MIN_WORK");
      double e = ref_normalized_error(out[t], want[0], V * D);
      ck_assert_msg(e <= 2e-6, "gather_grad on %s, %d threads: normalized error %g",
                    cpus[ci].cpu ? cpus[ci].cpu : "the host", bo.threads, e);
      if (t) ck_assert_msg(!memcmp(out[0], out[1], sizeof out[0]), "gather_grad: 1 and 3 threads differ");
      cg_exec_destroy(ex);
      diag_sink_destroy(d);
    }
  ref_outputs_free(want, 1);
  free(rin);
  optable_free_case(&c);
}
END_TEST

/* general tensors: numpy broadcasting on odd shapes with size-1
 * dimensions (an operand broadcast along the line: one element splat over
 * every lane; along leading dimensions; the batched operand the broadcast
 * one), a fused chain of broadcast ops, and sum_to (over the batch, over
 * inner dimensions keeping N, to a scalar), on every CPU path against the
 * reference, and sum_to bit-identical with 1 and 3 threads. */
typedef struct bcast_case {
  ir_op op;
  int xr, kr;          /* ranks of x (batched: dims[0] = N) and of the constant k */
  int64_t xd[6], kd[4];
  bool k_first;        /* k is operand 0 */
  ir_op then;          /* a second op of x's result and k (IR_OP_COUNT: none) */
  int sum_rank;        /* sum_to the result to sum_dims (-1: none) */
  int64_t sum_dims[6];
} bcast_case;

static void run_bcast(const bcast_case *bc, int ci, int threads, float **out_got, int64_t *out_n) {
  enum { BATCH = 5 };
  op_case c = {0};
  c.g = ir_graph_create("bcast");
  ir_type xt = {DT_F32, bc->xr, {IR_DIM_BATCH}};
  for (int r = 1; r < bc->xr; r++) xt.dims[r] = bc->xd[r];
  ir_node *x = ir_build_input(c.g, "x", &xt, 0, no_loc);
  ir_node *k = bc->op == IR_OP_POW ? optable_konst_positive(&c, "k", bc->kd[0], 13) : optable_konst(&c, "k", bc->kr, bc->kd, 13);
  ir_node *y = ir_build_op(c.g, bc->op, "y", bc->k_first ? (ir_node *[]){k, x} : (ir_node *[]){x, k}, 2,
                           &(ir_attr){0}, no_loc);
  if (bc->then != IR_OP_COUNT) y = ir_build_op(c.g, bc->then, "y2", (ir_node *[]){y, k}, 2, &(ir_attr){0}, no_loc);
  if (bc->sum_rank >= 0) {
    ir_attr a = {.acc = DT_F32, .shape = {bc->sum_rank, {0}}};
    for (int r = 0; r < bc->sum_rank; r++) a.shape.dims[r] = bc->sum_dims[r];
    y = ir_build_op(c.g, IR_OP_SUM_TO, "s", &y, 1, &a, no_loc);
  }
  ir_graph_add_output(c.g, "y", y);
  diag_sink *d = diag_sink_create();
  pass_options po;
  pass_options_init(&po);
  po.verify_each = true;
  ck_assert_msg(pass_run_pipeline(c.g, PASS_PIPELINE_DEFAULT, &po, d), "%s", diag_text(d));
  cg_backend_options bo;
  cg_backend_options_init(&bo);
  bo.threads = threads;
  bo.cg.cpu = cpus[ci].cpu, bo.cg.features = cpus[ci].features;
  cg_exec *ex = cg_backend_compile(&cg_backend_cpu, c.g, &bo, d);
  ck_assert_msg(ex, "%s: %s", ir_op_name(bc->op), diag_text(d));
  int64_t nx = 0, n = 0;
  ck_assert(ir_type_numel(&xt, BATCH, &nx) && ir_type_numel(&y->type, BATCH, &n));
  float *in = xmalloc((size_t)nx * sizeof *in), *got = xmalloc((size_t)n * sizeof *got);
  rng r;
  rng_init(&r, 21);
  for (int64_t e = 0; e < nx; e++) in[e] = rng_uniform_f32(&r, -2.0f, 2.0f);
  const void *ins[] = {in};
  void *outs[] = {got};
  ck_assert_msg(ex->backend->run(ex, BATCH, ins, outs, d), "%s", diag_text(d));
  double *xin = ref_from_f32(in, nx), *want[1] = {NULL};
  const double *rin[] = {xin};
  char err[256];
  ck_assert_msg(ref_run(c.g, BATCH, rin, want, err, sizeof err), "%s", err);
  double e = bc->sum_rank >= 0 ? ref_normalized_error(got, want[0], n) : ref_max_rel_error(got, want[0], n, 1e-3);
  char ys[64];
  str_buf b;
  str_buf_init(&b);
  ir_type_print(&y->type, &b);
  snprintf(ys, sizeof ys, "%s", str_buf_cstr(&b));
  str_buf_fini(&b);
  ck_assert_msg(e <= 2e-6, "%s to %s on %s: error %g vs the reference", ir_op_name(bc->op), ys,
                cpus[ci].cpu ? cpus[ci].cpu : "the host", e);
  ref_outputs_free(want, 1);
  free(xin), free(in);
  cg_exec_destroy(ex);
  diag_sink_destroy(d);
  optable_free_case(&c);
  *out_got = got, *out_n = n;
}

START_TEST(test_broadcast_shapes) {
  const ir_op C = IR_OP_COUNT;
  static const ir_op binary[] = {IR_OP_ADD, IR_OP_SUB, IR_OP_MUL, IR_OP_DIV, IR_OP_MAXIMUM, IR_OP_MINIMUM, IR_OP_POW};
  for (size_t o = 0; o < sizeof binary / sizeof *binary; o++) {
    ir_op op = binary[o];
    bool pw = op == IR_OP_POW; /* pow: a positive [5] base, x the exponent */
    const bcast_case cases[] = {
        /* [N,3,1,5] with [4,1]: [N,3,4,5]; with [1] (splat along every line) */
        {op, 4, 2, {0, 3, 1, 5}, {4, 1}, false, C, -1, {0}},
        {op, 4, 1, {0, 3, 1, 5}, {1}, false, C, -1, {0}},
        /* the batched operand broadcast: [N,1,7] with [3,1] -> [N,3,7] */
        {op, 3, 2, {0, 1, 7}, {3, 1}, true, C, -1, {0}},
        /* fused: (x op k) op k, then summed over the batch to [3,1,1] */
        {op, 4, 2, {0, 3, 1, 5}, {4, 1}, false, op, 3, {3, 1, 1}},
    };
    const bcast_case pcases[] = {
        {op, 3, 1, {0, 2, 5}, {5}, true, C, -1, {0}},
        {op, 3, 1, {0, 2, 5}, {5}, true, C, 2, {1, 5}},
    };
    const bcast_case *cs = pw ? pcases : cases;
    int n_cs = pw ? 2 : 4;
    for (int i = 0; i < n_cs; i++)
      for (int ci = 0; ci < N_CPUS; ci++) {
        float *got;
        int64_t n;
        run_bcast(&cs[i], ci, 2, &got, &n);
        free(got);
      }
  }
  /* sum_to keeping N ([N,2,3] -> [N,1,3]), to a scalar, over odd shapes:
   * the same bits with 1 and 3 threads */
  const bcast_case sums[] = {
      {IR_OP_SUB, 3, 1, {0, 2, 3}, {3}, false, C, 3, {IR_DIM_BATCH, 1, 3}},
      {IR_OP_MUL, 2, 1, {0, 4}, {4}, false, C, 0, {0}},
      {IR_OP_ADD, 4, 2, {0, 3, 1, 5}, {4, 1}, false, C, 2, {4, 5}},
      /* convolutional networks: a bias's gradient, [N,H,W,C] -> [C]: 53
       * channels as 4 vectors at a time, single vectors, then one by one */
      {IR_OP_ADD, 4, 1, {0, 3, 2, 53}, {53}, false, C, 1, {53}},
  };
  for (size_t i = 0; i < sizeof sums / sizeof *sums; i++) {
    float *one, *three;
    int64_t n1, n3;
    run_bcast(&sums[i], 0, 1, &one, &n1);
    run_bcast(&sums[i], 0, 3, &three, &n3);
    ck_assert_int_eq(n1, n3);
    ck_assert_msg(memcmp(one, three, (size_t)n1 * sizeof *one) == 0, "sum_to case %zu: threads change the bits", i);
    free(one), free(three);
  }
}
END_TEST

/* step-level overheads: sum_to sums a kept last dimension of at least a
 * vector a vector at a time (cg_train.c), every lane in the order of its
 * element alone: so every CPU path (vectors of 16, 8, 4 lanes), 1 and 3
 * threads with the result split into tiles (CASTOR_PARALLEL_MIN_WORK=0)
 * give the same bits, and the reference's value. Last dimensions of 21
 * (a vector and a tail of 5), 40 and 33; summed dimensions merged (N and
 * 3), kept N, two summed groups apart (N and an inner 3), and N apart from
 * two merged inner dimensions (2 and 3). */
START_TEST(test_sum_to_vectors) {
  const ir_op C = IR_OP_COUNT;
  const bcast_case sums[] = {
      {IR_OP_ADD, 3, 1, {0, 3, 21}, {21}, false, C, 1, {21}},
      {IR_OP_SUB, 3, 1, {0, 2, 40}, {40}, false, C, 3, {IR_DIM_BATCH, 1, 40}},
      {IR_OP_MUL, 4, 1, {0, 4, 3, 33}, {33}, false, C, 3, {4, 1, 33}},
      {IR_OP_ADD, 5, 1, {0, 4, 2, 3, 21}, {21}, false, C, 4, {4, 1, 1, 21}},
  };
  setenv("CASTOR_PARALLEL_MIN_WORK", "0", 1);
  for (size_t i = 0; i < sizeof sums / sizeof *sums; i++) {
    float *first = NULL;
    int64_t n0 = 0;
    for (int ci = 0; ci < N_CPUS; ci++)
      for (int threads = 1; threads <= 3; threads += 2) {
        float *got;
        int64_t n;
        run_bcast(&sums[i], ci, threads, &got, &n);
        if (!first) {
          first = got, n0 = n;
          continue;
        }
        ck_assert_int_eq(n, n0);
        ck_assert_msg(memcmp(first, got, (size_t)n * sizeof *got) == 0, "sum_to case %zu on %s, %d threads: other bits",
                      i, cpus[ci].cpu ? cpus[ci].cpu : "the host", threads);
        free(got);
      }
    free(first);
  }
  unsetenv("CASTOR_PARALLEL_MIN_WORK");
}
END_TEST

/* convolutional networks: conv2d's implicit GEMM (cg_gemm.c: A gathered
 * from x inside the A packing, the HWIO kernel pre-packed as a constant B)
 * with its fused bias + relu epilogue, on the GEMM family of each CPU path
 * (the NAME@CPU entries: znver4 runs bf16 operands on vdpbf16ps, whose
 * packed A rows are x's bf16 copied tap run by tap run, an odd K block's
 * last pair padded with a zero). Shapes that cross the gather's and the
 * blocking's edges: odd K (27, 45, 175) and an odd K block in the middle
 * of K (3*3*57 = 513: blocks of 258 and 255 on the K-pair family), block
 * edges inside a tap, stride 2, dilation 2, 'same' with odd sizes, output
 * channels not a multiple of 8 nor of a vector and more than a column
 * block, more output pixels than a row block; f32, f16 and bf16; on 1 and
 * 3 threads (bit-identical) against the float64 reference. */
typedef struct conv_fwd_case {
  int64_t batch, H, W, C, KH, KW, O, s, d;
  bool same;
} conv_fwd_case;

static int64_t conv_same_pad(int64_t in, int64_t k, int64_t s, int64_t d, int64_t *p1) {
  int64_t out = (in + s - 1) / s, total = (out - 1) * s + d * (k - 1) + 1 - in;
  if (total < 0) total = 0;
  *p1 = total - total / 2;
  return total / 2;
}

static void check_conv_fwd(const conv_fwd_case *cc, ir_dtype dt) {
  bool h16 = dt != DT_F32;
  int64_t N = cc->batch, nx = N * cc->H * cc->W * cc->C, nw = cc->KH * cc->KW * cc->C * cc->O;
  ir_graph *g = ir_graph_create("conv");
  int64_t n[3] = {nx, nw, cc->O};
  float *h[3];
  uint16_t *e16[3];
  rng r;
  rng_init(&r, 23);
  for (int k = 0; k < 3; k++) {
    h[k] = xmalloc((size_t)n[k] * 4), e16[k] = xmalloc((size_t)n[k] * 2);
    for (int64_t i = 0; i < n[k]; i++) {
      float v = rng_uniform_f32(&r, -1, 1);
      h[k][i] = dt == DT_BF16 ? half_bf16_to_f32(e16[k][i] = half_f32_to_bf16(v))
                              : dt == DT_F16 ? half_f16_to_f32(e16[k][i] = half_f32_to_f16(v)) : v;
    }
  }
  ir_type xt = {dt, 4, {IR_DIM_BATCH, cc->H, cc->W, cc->C}}, wt = {dt, 4, {cc->KH, cc->KW, cc->C, cc->O}};
  ir_type bt = {dt, 1, {cc->O}};
  ir_attr a = {.acc = DT_F32, .strides = {2, {cc->s, cc->s}}, .dilations = {2, {cc->d, cc->d}}, .pads = {4, {0}}};
  if (cc->same) {
    a.pads.v[0] = conv_same_pad(cc->H, cc->KH, cc->s, cc->d, &a.pads.v[1]);
    a.pads.v[2] = conv_same_pad(cc->W, cc->KW, cc->s, cc->d, &a.pads.v[3]);
  }
  ir_node *x = ir_build_input(g, "x", &xt, 0, no_loc);
  ir_node *w = ir_build_const(g, "w", &wt, "w", h16 ? (void *)e16[1] : (void *)h[1], no_loc);
  ir_node *b = ir_build_const(g, "b", &bt, "b", h16 ? (void *)e16[2] : (void *)h[2], no_loc);
  ir_node *y = ir_build_op(g, IR_OP_CONV2D, "y", (ir_node *[]){x, w}, 2, &a, no_loc);
  y = ir_build_unary(g, IR_OP_RELU, "y.relu", ir_build_binary(g, IR_OP_ADD, "y.bias", y, b, no_loc), no_loc);
  ir_graph_add_output(g, "y", h16 ? ir_build_cast(g, "y32", y, DT_F32, no_loc) : y);
  ir_graph_renumber(g);
  int64_t ny = N * y->type.dims[1] * y->type.dims[2] * cc->O;
  double *rx = ref_from_f32(h[0], nx), *want[1] = {NULL};
  char err[256];
  ck_assert_msg(ref_run(g, N, (const double *[]){rx}, want, err, sizeof err), "%s", err);
  float *out[2] = {xmalloc((size_t)ny * 4), xmalloc((size_t)ny * 4)};
  for (int ci = 0; ci < N_CPUS; ci++)
    for (int t = 0; t < 2; t++) {
      diag_sink *d = diag_sink_create();
      cg_backend_options bo;
      cg_backend_options_init(&bo);
      bo.threads = t ? 3 : 1;
      bo.cg.cpu = cpus[ci].cpu, bo.cg.features = cpus[ci].features;
      setenv("CASTOR_PARALLEL_MIN_WORK", "0", 1);
      cg_exec *ex = cg_backend_compile(&cg_backend_cpu, g, &bo, d);
      ck_assert_msg(ex, "compile: %s", diag_text(d));
      const void *ins[] = {h16 ? (void *)e16[0] : h[0]};
      void *outs[] = {out[t]};
      ck_assert_msg(cg_backend_cpu.run(ex, N, ins, outs, d), "run: %s", diag_text(d));
      unsetenv("CASTOR_PARALLEL_MIN_WORK");
      double e = ref_normalized_error(out[t], want[0], ny);
      /* a 16-bit result: one rounding of its dtype (2^-11 for f16, 2^-8 for bf16, relative) */
      double bound = dt == DT_F32 ? 2e-6 : dt == DT_F16 ? 1e-3 : 4e-3;
      ck_assert_msg(e <= bound, "conv2d x [%lld,%lld,%lld,%lld] w %lldx%lldx%lld->%lld s %lld d %lld %s %s on %s, "
                    "%d threads: normalized error %g", (long long)N, (long long)cc->H, (long long)cc->W,
                    (long long)cc->C, (long long)cc->KH, (long long)cc->KW, (long long)cc->C, (long long)cc->O,
                    (long long)cc->s, (long long)cc->d, cc->same ? "same" : "valid", dtype_name(dt),
                    cpus[ci].cpu ? cpus[ci].cpu : "the host", bo.threads, e);
      if (t) ck_assert_msg(memcmp(out[0], out[1], (size_t)ny * 4) == 0, "conv2d %s: 1 and 3 threads differ",
                           dtype_name(dt));
      cg_exec_destroy(ex);
      diag_sink_destroy(d);
    }
  ref_outputs_free(want, 1);
  free(rx), free(out[0]), free(out[1]);
  for (int k = 0; k < 3; k++) free(h[k]), free(e16[k]);
  ir_graph_destroy(g);
}

START_TEST(test_conv_blocking) {
  static const conv_fwd_case cases[] = {
      /* N  H   W   C  KH KW  O   s  d  same */
      {3, 9, 7, 3, 3, 3, 13, 2, 1, true},   /* K = 27 (odd), stride 2, 'same' with the odd pixel */
      {2, 11, 10, 5, 3, 3, 7, 1, 2, false}, /* K = 45, dilation 2, 'valid' */
      {2, 6, 7, 57, 3, 3, 37, 1, 1, true},  /* K = 513: an odd K block after an even one, edges inside taps */
      {1, 20, 21, 7, 5, 5, 600, 1, 1, true}, /* K = 175, 420 pixels > a row block, O > a column block */
      {2, 5, 6, 300, 2, 3, 19, 2, 1, true}, /* C > a K block: a tap over several blocks */
      {2, 8, 8, 1, 3, 3, 32, 1, 1, true},   /* a first layer: one input channel */
  };
  size_t k = 0;
  setenv("CASTOR_CONV_ALGO", "direct", 1); /* the GEMM's blocking: Winograd (check_winograd) would take the 3x3 s1 cases */
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    for (int t = 0; t < 3; t++)
      if (test_case_runs(k++)) check_conv_fwd(&cases[i], t == 0 ? DT_F32 : t == 1 ? DT_F16 : DT_BF16);
  unsetenv("CASTOR_CONV_ALGO");
}
END_TEST

static Suite *optable_suite(void) {
  Suite *s = suite_create("optable");
  TCase *tc = tcase_create("ops");
  tcase_set_timeout(tc, 240);
  tcase_add_test(tc, test_table_is_consistent);
  tcase_add_test(tc, test_every_op_text_and_verify);
  tcase_add_test(tc, test_every_op_through_the_passes);
  tcase_add_test(tc, test_every_op_has_an_answer);
  tcase_add_test(tc, test_every_op_has_one_kit_formula);
  tcase_add_test(tc, test_every_op_on_every_backend);
  tcase_add_test(tc, test_layer_norm_shapes);
  tcase_add_test(tc, test_layer_norm_grad_shapes);
  tcase_add_test(tc, test_gather_grad_threads);
  tcase_add_test(tc, test_unbatched_contractions);
  tcase_add_test(tc, test_unsupported_is_reported);
  tcase_add_test(tc, test_broadcast_shapes);
  tcase_add_test(tc, test_sum_to_vectors); /* step-level overheads */
  suite_add_tcase(s, tc);
  /* a case of its own: the NAME@CPU entries of a GEMM family run only it
   * (CK_RUN_CASE=contraction, tests/CMakeLists.txt) */
  TCase *tg = tcase_create("contraction");
  tcase_set_timeout(tg, 540); /* 6 shapes x 3 dtypes x 3 CPUs x 2 thread counts: minutes on a busy machine */
  tcase_add_test(tg, test_contraction_blocking);
  tcase_add_test(tg, test_conv_blocking); /* convolutional networks: conv2d's implicit GEMM */
  suite_add_tcase(s, tg);
  return s;
}

int main(void) {
  if (getenv("CASTOR_CUDA_EMULATE")) { /* check_optable_emu: every op on the emulated cuda target */
    Suite *s = suite_create("optable_cuda_emulated");
    TCase *tc = tcase_create("cuda");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, test_every_op_on_every_backend);
    suite_add_tcase(s, tc);
    return check_run(s);
  }
  check_cpu_path("check_optable");
  return check_run(optable_suite());
}
