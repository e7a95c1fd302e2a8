/* SPDX-License-Identifier: Apache-2.0 */
/*
 * check_rnn.c: the recurrent ops (simple_rnn, gru, lstm; ir_ops.def) on the
 * CPU against the float64 reference (tests/ref/ref_rnn.c): every cell, both
 * directions, gru's reset gate before and after, hidden sizes on and off
 * whole vectors, batch 1 and 7, f32 and bf16 (the state rounded per step as
 * the reference does), 1 and 3 threads bit for bit; the emitted code does
 * not grow with the sequence length (the scan is a loop); and the type
 * rule's exact messages for operands of the wrong shape.
 */
#include <check.h>

#include "tests/unit/test_support.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/cg_backend.h"
#include "codegen/cg_internal.h"
#include "passes/passes.h"
#include "tests/ref/ref.h"
#include "util/util.h"

static const diag_loc no_loc = {0};

typedef struct rnn_case {
  ir_op op;
  int64_t t, d, h; /* steps, input features, units */
  int reverse; /* 0, 1, or 2 (Keras go_backwards's order) */
  bool reset_after;
  ir_dtype dt;
  int64_t static_n; /* > 0: a static batch of this many rows (ONNX's static shapes), else N */
} rnn_case;

typedef struct built {
  ir_graph *g;
  float *data[8];
  int n_data;
} built;

static ir_node *konst(built *b, const char *name, int rank, const int64_t *dims, uint64_t seed, float scale) {
  ir_type t = {DT_F32, rank, {0}};
  int64_t n = 1;
  for (int r = 0; r < rank; r++) t.dims[r] = dims[r], n *= dims[r];
  float *d = xmalloc((size_t)n * sizeof *d);
  rng r;
  rng_init(&r, seed);
  for (int64_t i = 0; i < n; i++) d[i] = rng_uniform_f32(&r, -scale, scale);
  b->data[b->n_data++] = d;
  return ir_build_const(b->g, name, &t, name, d, no_loc);
}

static ir_node *cast_to(built *b, ir_node *x, ir_dtype dt, const char *name) {
  if (dt == DT_F32) return x;
  return ir_build_op(b->g, IR_OP_CAST, name, &x, 1, &(ir_attr){.to = dt}, no_loc);
}

/* inputs x [N,T,D], h0 [N,H] (and c0); y = op(x W + b, r, (rb), states) */
static void build(const rnn_case *rc, built *b) {
  memset(b, 0, sizeof *b);
  b->g = ir_graph_create("rnn");
  int gates = ir_rnn_gates(rc->op), states = ir_rnn_states(rc->op);
  int64_t gh = gates * rc->h;
  int64_t n0 = rc->static_n > 0 ? rc->static_n : IR_DIM_BATCH;
  ir_type xt = {DT_F32, 3, {n0, rc->t, rc->d}}, st = {DT_F32, 2, {n0, rc->h}};
  ir_node *x = ir_build_input(b->g, "x", &xt, 0, no_loc);
  ir_node *srcs[IR_MAX_SRCS];
  float scale = 1.0f / (float)rc->h; /* keeps the gates off saturation */
  ir_node *w = cast_to(b, konst(b, "w", 2, (int64_t[]){rc->d, gh}, 11, 0.5f), rc->dt, "w.c");
  ir_node *xp = ir_build_op(b->g, IR_OP_MATMUL, "xp.mm", (ir_node *[]){cast_to(b, x, rc->dt, "x.c"), w}, 2,
                            &(ir_attr){.acc = DT_F32}, no_loc);
  ir_node *bias = cast_to(b, konst(b, "b", 1, (int64_t[]){gh}, 12, 0.5f), rc->dt, "b.c");
  srcs[0] = ir_build_binary(b->g, IR_OP_ADD, "xp", xp, bias, no_loc);
  srcs[1] = cast_to(b, konst(b, "r", 2, (int64_t[]){rc->h, gh}, 13, 4.0f * scale), rc->dt, "r.c");
  int k = 2;
  if (gates == 3) srcs[k++] = cast_to(b, konst(b, "rb", 1, (int64_t[]){gh}, 14, 0.5f), rc->dt, "rb.c");
  for (int s = 0; s < states; s++)
    srcs[k++] = cast_to(b, ir_build_input(b->g, s ? "c0" : "h0", &st, 1 + s, no_loc), rc->dt, s ? "c0.c" : "h0.c");
  ir_attr a = {.reverse = rc->reverse, .reset_after = rc->reset_after};
  ir_node *y = ir_build_op(b->g, rc->op, "y", srcs, k, &a, no_loc);
  ck_assert_msg(y, "%s: build", ir_op_name(rc->op));
  ir_graph_add_output(b->g, "y", rc->dt == DT_F32 ? y : ir_build_op(b->g, IR_OP_CAST, "y.f32", &y, 1, &(ir_attr){.to = DT_F32}, no_loc));
}

static void unbuild(built *b) {
  ir_graph_destroy(b->g);
  for (int i = 0; i < b->n_data; i++) free(b->data[i]);
}

static void check_case(const rnn_case *rc, int64_t batch) {
  built b;
  build(rc, &b);
  diag_sink *d = diag_sink_create();
  pass_options po;
  pass_options_init(&po);
  po.verify_each = true;
  ck_assert_msg(pass_run_pipeline(b.g, PASS_PIPELINE_DEFAULT, &po, d), "passes: %s", diag_text(d));
  int states = ir_rnn_states(rc->op);
  int64_t nx = batch * rc->t * rc->d, ns = batch * rc->h, ny = batch * rc->t * states * rc->h;
  float *in[3];
  rng r;
  rng_init(&r, 5);
  int64_t sizes[3] = {nx, ns, ns};
  for (int i = 0; i < 3; i++) {
    in[i] = xmalloc((size_t)sizes[i] * sizeof(float));
    for (int64_t j = 0; j < sizes[i]; j++) in[i][j] = rng_uniform_f32(&r, -1.0f, 1.0f);
  }
  double *rin_d[3];
  for (int i = 0; i < 3; i++) rin_d[i] = ref_from_f32(in[i], sizes[i]);
  const double *rin[] = {rin_d[0], rin_d[1], rin_d[2]};
  double *want[1] = {NULL};
  char err[256];
  ck_assert_msg(ref_run(b.g, batch, rin, want, err, sizeof err), "reference: %s", err);
  float *got[2];
  for (int th = 0; th < 2; th++) {
    cg_backend_options bo;
    cg_backend_options_init(&bo);
    bo.threads = th ? 3 : 1;
    cg_exec *x = cg_backend_compile(&cg_backend_cpu, b.g, &bo, d);
    ck_assert_msg(x, "compile: %s", diag_text(d));
    got[th] = xcalloc((size_t)ny, sizeof(float));
    const void *ins[] = {in[0], in[1], in[2]};
    void *outs[] = {got[th]};
    ck_assert_msg(cg_backend_cpu.run(x, batch, ins, outs, d), "run: %s", diag_text(d));
    cg_exec_destroy(x);
  }
  char msg[256];
  const char *what = rc->op == IR_OP_GRU ? (rc->reset_after ? "gru(reset_after)" : "gru(reset before)")
                                         : ir_op_name(rc->op);
  ck_assert_msg(!memcmp(got[0], got[1], (size_t)ny * sizeof(float)), "%s T=%lld H=%lld: 1 and 3 threads differ",
                what, (long long)rc->t, (long long)rc->h);
  double e = ref_normalized_error(got[0], want[0], ny);
  ref_cmp worst = ref_compare_normalized(got[0], want[0], ny);
  /* f32: the same order of operations as the reference, a few ulp from the
   * tanh/sigmoid/exp approximations over T steps; bf16: the state rounded to
   * 8 bits every step, where one ulp of difference in a gate can flip a
   * rounding, so a few bf16 ulp */
  double bound = rc->dt == DT_F32 ? 1e-5 : 2e-2;
  ck_assert_msg(e <= bound, "%s %s T=%lld H=%lld batch %lld%s: normalized error %g vs the reference (%s)", what,
                dtype_name(rc->dt), (long long)rc->t, (long long)rc->h, (long long)batch,
                rc->reverse == 2 ? " reverse=2" : rc->reverse ? " reverse" : "", e, ref_cmp_str(&worst, msg, sizeof msg));
  ref_outputs_free(want, 1);
  for (int i = 0; i < 3; i++) free(in[i]), free(rin_d[i]);
  free(got[0]), free(got[1]);
  diag_sink_destroy(d);
  unbuild(&b);
}

START_TEST(test_cells_against_reference) {
  static const ir_op ops[] = {IR_OP_SIMPLE_RNN, IR_OP_GRU, IR_OP_LSTM};
  static const int64_t hs[] = {16, 13};
  for (size_t o = 0; o < 3; o++)
    for (int rev = 0; rev < 3; rev++)
      for (int ra = 0; ra < (ops[o] == IR_OP_GRU ? 2 : 1); ra++)
        for (size_t hi = 0; hi < 2; hi++)
          for (int dt = 0; dt < 2; dt++) {
            rnn_case rc = {ops[o], 28, 12, hs[hi], rev, ra, dt ? DT_BF16 : DT_F32, 0};
            if (rev == 2 && (hi || dt)) continue; /* reverse=2 moves only y's index */
            check_case(&rc, hi == 0 ? 7 : 1);
            rc.static_n = 5; /* the static batch: one launch row of 5 batch rows */
            if (dt == 0) check_case(&rc, 5);
          }
}
END_TEST

/* The optimized LLVM IR of a 16-step and a 4096-step lstm differs only in
 * the constant of the time loop: the same length, give or take the digits. */
START_TEST(test_compile_independent_of_length) {
  size_t len[2];
  int64_t ts[2] = {16, 4096};
  for (int i = 0; i < 2; i++) {
    rnn_case rc = {IR_OP_LSTM, ts[i], 8, 16, 0, false, DT_F32, 0};
    built b;
    build(&rc, &b);
    diag_sink *d = diag_sink_create();
    pass_options po;
    pass_options_init(&po);
    ck_assert(pass_run_pipeline(b.g, PASS_PIPELINE_DEFAULT, &po, d));
    cg_backend_options bo;
    cg_backend_options_init(&bo);
    str_buf s;
    str_buf_init(&s);
    ck_assert_msg(cg_backend_cpu.emit(b.g, &bo, CG_EMIT_LLVM, &s, d), "emit: %s", diag_text(d));
    len[i] = strlen(str_buf_cstr(&s));
    str_buf_fini(&s);
    diag_sink_destroy(d);
    unbuild(&b);
  }
  ck_assert_msg(len[1] < len[0] + len[0] / 50, "LLVM IR of T=16: %zu bytes, of T=4096: %zu bytes", len[0], len[1]);
}
END_TEST

/* Operands of the wrong shape: the type rule's message, exactly. */
START_TEST(test_bad_shapes) {
  static const struct {
    ir_op op;
    int64_t xp[3], r[2], h0[2];
    int rank_xp;
    const char *want;
  } cases[] = {
      {IR_OP_LSTM, {IR_DIM_BATCH, 5, 32}, {8, 32}, {IR_DIM_BATCH, 7}, 3,
       "lstm initial state (operand 3) must be [N, 8], got f32[N,7]"},
      {IR_OP_LSTM, {IR_DIM_BATCH, 5, 24}, {8, 32}, {IR_DIM_BATCH, 8}, 3,
       "lstm input projection f32[N,5,24] does not match the recurrent kernel f32[8,32]: its last dimension must be "
       "32"},
      {IR_OP_SIMPLE_RNN, {IR_DIM_BATCH, 8, 0}, {8, 8}, {IR_DIM_BATCH, 8}, 2,
       "simple_rnn input projection must be [N, T, 1*H] (batch, time, gates), got f32[N,8]"},
      {IR_OP_SIMPLE_RNN, {IR_DIM_BATCH, 5, 8}, {8, 16}, {IR_DIM_BATCH, 8}, 3,
       "simple_rnn recurrent kernel must be [H, 1*H] without the batch dimension, got f32[8,16]"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    ir_graph *g = ir_graph_create("bad");
    ir_type xt = {DT_F32, cases[i].rank_xp, {0}}, rt = {DT_F32, 2, {cases[i].r[0], cases[i].r[1]}};
    for (int r = 0; r < xt.rank; r++) xt.dims[r] = cases[i].xp[r];
    ir_type ht = {DT_F32, 2, {cases[i].h0[0], cases[i].h0[1]}};
    ir_node *srcs[4] = {ir_build_input(g, "xp", &xt, 0, no_loc), ir_build_input(g, "r", &rt, 1, no_loc),
                        ir_build_input(g, "h0", &ht, 2, no_loc), ir_build_input(g, "c0", &ht, 3, no_loc)};
    ir_type out;
    char err[256] = "";
    bool ok = ir_infer_type(cases[i].op, srcs, ir_rnn_states(cases[i].op) + 2, &(ir_attr){0}, &out, err, sizeof err);
    ck_assert_msg(!ok, "case %zu: accepted", i);
    ck_assert_str_eq(err, cases[i].want);
    ir_graph_destroy(g);
  }
}
END_TEST

static Suite *rnn_suite(void) {
  Suite *s = suite_create("rnn");
  TCase *tc = tcase_create("rnn");
  tcase_set_timeout(tc, 300); /* JIT compiles: dozens of graphs */
  tcase_add_test(tc, test_cells_against_reference);
  tcase_add_test(tc, test_compile_independent_of_length);
  tcase_add_test(tc, test_bad_shapes);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) { return check_run(rnn_suite()); }
