/* SPDX-License-Identifier: Apache-2.0 */
/*
 * check_rnn.c: the recurrent ops (simple_rnn, gru, lstm; ir_ops.def) on the
 * CPU against the float64 reference (tests/ref/ref_rnn.c): every cell, both
 * directions, gru's reset gate before and after, hidden sizes on and off
 * whole vectors, batch 1, 7 and 11 (rows in blocks that share each load of
 * the recurrent kernel, and the rows left over; AVX-512 and AVX2 blocks),
 * f32 and bf16 (the state rounded per step as
 * the reference does), 1 and 3 threads bit for bit; the emitted code does
 * not grow with the sequence length (the scan is a loop); and the type
 * rule's exact messages for operands of the wrong shape. Backpropagation
 * through time (simple_rnn_grad, gru_grad, lstm_grad): the reference's
 * gradients of xp, r and rb against central finite differences of its
 * forward op (every cell, reverse 0/1/2, gru's reset gate both ways; a 1%
 * change of one gate's derivative fails it), and the kernel against the
 * reference (f32, T=28 H=16 batch 3, T=6 H=13 batch 1, T=7 H=40 batch 11
 * in row blocks, <= 1e-5 normalized, 1 and 3 threads bit for bit). The
 * mask operand (Keras's masking): every cell and direction forward (f32
 * and bf16; a skipped step's y is the state before it, bit for bit), by
 * finite differences and kernel against reference backward (row blocks
 * included). lstm_train and lstm_grad reading its gates: y's h and c and
 * the gradient the same bits as lstm's and lstm_grad's recomputing them.
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
  bool masked;      /* a mask operand i1 [N,T], an input after the states (fill_mask) */
} rnn_case;

/* A mask of about one step in three skipped, rows different, the first and
 * last steps among the skipped ones in some rows (the carry from the
 * initial state, and a final state from a skipped step). */
static void fill_mask(uint8_t *m, double *md, int64_t batch, int64_t t) {
  rng r;
  rng_init(&r, 53);
  for (int64_t i = 0; i < batch * t; i++) {
    m[i] = rng_uniform_f32(&r, 0.0f, 1.0f) >= 0.35f;
    if (i % t == 0 && (i / t) % 2) m[i] = 0;
    if (i % t == t - 1 && (i / t) % 3 == 1) m[i] = 0;
    if (md) md[i] = m[i];
  }
}

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
  if (rc->masked) srcs[k++] = ir_build_input(b->g, "mask", &(ir_type){DT_I1, 2, {n0, rc->t}}, 1 + states, no_loc);
  ir_attr a = {.reverse = rc->reverse, .reset_after = rc->reset_after};
  ir_node *y = ir_build_op(b->g, rc->op, "y", srcs, k, &a, no_loc);
  ck_assert_msg(y, "%s: build", ir_op_name(rc->op));
  ir_graph_add_output(b->g, "y", rc->dt == DT_F32 ? y : ir_build_op(b->g, IR_OP_CAST, "y.f32", &y, 1, &(ir_attr){.to = DT_F32}, no_loc));
}

static void unbuild(built *b) {
  ir_graph_destroy(b->g);
  for (int i = 0; i < b->n_data; i++) free(b->data[i]);
}

/* The CPU check_case compiles for (NULL: the host; "x86-64-v3": AVX2's
 * 8 lanes, whose blocks are 2 rows, AVX-512's 4). */
static const char *case_cpu;

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
  uint8_t *mask = xmalloc((size_t)(batch * rc->t));
  double *mask_d = xmalloc((size_t)(batch * rc->t) * sizeof(double));
  fill_mask(mask, mask_d, batch, rc->t);
  const double *rin[] = {rin_d[0], rin_d[1], rin_d[2], NULL};
  const void *ins[] = {in[0], in[1], in[2], NULL};
  rin[1 + states] = mask_d, ins[1 + states] = mask;
  double *want[1] = {NULL};
  char err[256];
  ck_assert_msg(ref_run(b.g, batch, rin, want, err, sizeof err), "reference: %s", err);
  float *got[2];
  for (int th = 0; th < 2; th++) {
    cg_backend_options bo;
    cg_backend_options_init(&bo);
    bo.threads = th ? 3 : 1;
    bo.cg.cpu = case_cpu;
    cg_exec *x = cg_backend_compile(&cg_backend_cpu, b.g, &bo, d);
    ck_assert_msg(x, "compile: %s", diag_text(d));
    got[th] = xcalloc((size_t)ny, sizeof(float));
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
  ck_assert_msg(e <= bound, "%s %s T=%lld H=%lld batch %lld%s%s: normalized error %g vs the reference (%s)", what,
                dtype_name(rc->dt), (long long)rc->t, (long long)rc->h, (long long)batch,
                rc->reverse == 2 ? " reverse=2" : rc->reverse ? " reverse" : "", rc->masked ? " masked" : "", e,
                ref_cmp_str(&worst, msg, sizeof msg));
  if (rc->masked) /* a skipped step's y is the state before it, bit for bit */
    for (int64_t b0 = 0; b0 < batch; b0++)
      for (int64_t s = 1; s < rc->t; s++) {
        int64_t t = rc->reverse ? rc->t - 1 - s : s, tp = rc->reverse ? t + 1 : t - 1;
        int64_t yt = rc->reverse == 2 ? s : t, yp = rc->reverse == 2 ? s - 1 : tp, row = states * rc->h;
        if (mask[b0 * rc->t + t]) continue;
        ck_assert_msg(!memcmp(got[0] + (b0 * rc->t + yt) * row, got[0] + (b0 * rc->t + yp) * row,
                              (size_t)row * sizeof(float)),
                      "%s: row %lld step %lld is masked but its y is not the state before it", what, (long long)b0,
                      (long long)s);
      }
  free(mask), free(mask_d);
  ref_outputs_free(want, 1);
  for (int i = 0; i < 3; i++) free(in[i]), free(rin_d[i]);
  free(got[0]), free(got[1]);
  diag_sink_destroy(d);
  unbuild(&b);
}

START_TEST(test_cells_against_reference) {
  static const ir_op ops[] = {IR_OP_SIMPLE_RNN, IR_OP_GRU, IR_OP_LSTM};
  static const int64_t hs[] = {16, 13};
  size_t k = 0;
  for (size_t o = 0; o < 3; o++)
    for (int rev = 0; rev < 3; rev++)
      for (int ra = 0; ra < (ops[o] == IR_OP_GRU ? 2 : 1); ra++)
        for (size_t hi = 0; hi < 2; hi++)
          for (int dt = 0; dt < 2; dt++) {
            rnn_case rc = {ops[o], 28, 12, hs[hi], rev, ra, dt ? DT_BF16 : DT_F32, 0, false};
            if (rev == 2 && (hi || dt)) continue; /* reverse=2 moves only y's index */
            if (!test_case_runs(k++)) continue;
            check_case(&rc, hi == 0 ? 7 : 1);
            rc.static_n = 5; /* the static batch: one launch row of 5 batch rows */
            if (dt == 0) check_case(&rc, 5);
            rc.static_n = 0, rc.masked = true; /* the mask: every cell, direction and dtype */
            if (hi == 0) check_case(&rc, 7);
          }
}
END_TEST

/* Units whose G*H columns make several whole vector blocks of the
 * recurrent product and a tail, at an offset for gru's reset-before
 * product (H = 40: lstm's 160 columns, gru's 120 as 80 + 40). */
START_TEST(test_cells_blocked_columns) {
  static const ir_op ops[] = {IR_OP_SIMPLE_RNN, IR_OP_GRU, IR_OP_LSTM};
  for (size_t o = 0; o < 3; o++)
    for (int ra = 0; ra < (ops[o] == IR_OP_GRU ? 2 : 1); ra++) {
      rnn_case rc = {ops[o], 12, 12, 40, 0, ra, DT_F32, 0, false};
      check_case(&rc, 3);
    }
}
END_TEST

/* Batch rows in blocks that share each load of r (cg_rnn.c: 4 rows with
 * AVX-512's 16 lanes, 2 with AVX2's 8) and the rows left over: 11 rows on
 * 1 thread (blocks and a remainder) and 3 (tiles of 3-4 rows), the units'
 * gates in whole vectors and a scalar tail (H = 40), on the host and on
 * x86-64-v3 where the host runs it; 29 rows on the host (AVX-512: the
 * forward's wide blocks of 12 rows, then 4, then 1; on 3 threads no wide
 * block: the same bits). */
START_TEST(test_cells_row_blocks) {
  static const ir_op ops[] = {IR_OP_SIMPLE_RNN, IR_OP_GRU, IR_OP_LSTM};
  static const char *cpus[] = {NULL, "x86-64-v3"};
  for (size_t ci = 0; ci < 2; ci++) {
    if (cpus[ci] && !__builtin_cpu_supports("avx2")) continue;
    case_cpu = cpus[ci];
    for (size_t o = 0; o < 3; o++)
      for (int ra = 0; ra < (ops[o] == IR_OP_GRU ? 2 : 1); ra++) {
        rnn_case rc = {ops[o], 9, 12, 40, ra ? 1 : 0, ra, DT_F32, 0, false};
        check_case(&rc, 11);
        if (!cpus[ci]) check_case(&rc, 29);
        rc.masked = true;
        check_case(&rc, 11);
        if (!cpus[ci]) check_case(&rc, 29);
      }
  }
  case_cpu = NULL;
}
END_TEST

/* The optimized LLVM IR of a 16-step and a 4096-step lstm differs only in
 * the constant of the time loop: the same length, give or take the digits. */
START_TEST(test_compile_independent_of_length) {
  size_t len[2];
  int64_t ts[2] = {16, 4096};
  for (int i = 0; i < 2; i++) {
    rnn_case rc = {IR_OP_LSTM, ts[i], 8, 16, 0, false, DT_F32, 0, false};
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

/* lstm_train's result [N,T,6,H]; lstm_grad takes lstm's or lstm_train's y,
 * and refuses any other width of y, and a dy of lstm_train's width (dy is
 * always of lstm's result type): the type rule's messages, exactly. */
START_TEST(test_reserve_types) {
  ir_graph *g = ir_graph_create("reserve");
  ir_type xt = {DT_F32, 3, {IR_DIM_BATCH, 5, 32}}, rt = {DT_F32, 2, {8, 32}}, ht = {DT_F32, 2, {IR_DIM_BATCH, 8}};
  ir_node *srcs[6] = {ir_build_input(g, "xp", &xt, 0, no_loc), ir_build_input(g, "r", &rt, 1, no_loc),
                      ir_build_input(g, "h0", &ht, 2, no_loc), ir_build_input(g, "c0", &ht, 3, no_loc)};
  ir_type out;
  char err[256] = "";
  ck_assert_msg(ir_infer_type(IR_OP_LSTM_TRAIN, srcs, 4, &(ir_attr){0}, &out, err, sizeof err), "%s", err);
  ck_assert(out.rank == 4 && out.dims[0] == IR_DIM_BATCH && out.dims[1] == 5 && out.dims[2] == 6 && out.dims[3] == 8);
  static const struct {
    int64_t y2, dy2;
    const char *want; /* NULL: accepted */
  } cases[] = {
      {2, 2, NULL},
      {6, 2, NULL},
      {3, 2, "lstm_grad y must be f32[N,5,2,8] (lstm's result), got f32[N,5,3,8]"},
      {6, 6, "lstm_grad dy must be f32[N,5,2,8] (lstm's result), got f32[N,5,6,8]"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    ir_type yt = {DT_F32, 4, {IR_DIM_BATCH, 5, cases[i].y2, 8}}, dyt = {DT_F32, 4, {IR_DIM_BATCH, 5, cases[i].dy2, 8}};
    char yn[16], dyn[16];
    snprintf(yn, sizeof yn, "y%zu", i), snprintf(dyn, sizeof dyn, "dy%zu", i);
    srcs[4] = ir_build_input(g, yn, &yt, 4 + 2 * (int)i, no_loc);
    srcs[5] = ir_build_input(g, dyn, &dyt, 5 + 2 * (int)i, no_loc);
    ck_assert(srcs[4] && srcs[5]);
    err[0] = 0;
    bool ok = ir_infer_type(IR_OP_LSTM_GRAD, srcs, 6, &(ir_attr){0}, &out, err, sizeof err);
    if (!cases[i].want) {
      ck_assert_msg(ok, "case %zu: %s", i, err);
      ck_assert(out.rank == 3 && out.dims[2] == ir_rnn_grad_width(IR_OP_LSTM_GRAD, 8));
    } else {
      ck_assert_msg(!ok, "case %zu: accepted", i);
      ck_assert_str_eq(err, cases[i].want);
    }
  }
  ir_graph_destroy(g);
}
END_TEST

/* A mask that does not fit xp's batch and time, or is not i1: the type rule's message, exactly. */
START_TEST(test_bad_mask) {
  static const struct {
    ir_type mask;
    const char *want;
  } cases[] = {
      {{DT_I1, 2, {IR_DIM_BATCH, 6}}, "gru mask (operand 5) must be i1 [N, 5] (batch, time) for the input projection "
                                      "f32[N,5,24], got i1[N,6]"},
      {{DT_F32, 2, {IR_DIM_BATCH, 5}}, "gru mask (operand 5) must be i1 [N, 5] (batch, time) for the input "
                                       "projection f32[N,5,24], got f32[N,5]"},
      {{DT_I1, 3, {IR_DIM_BATCH, 5, 1}}, "gru mask (operand 5) must be i1 [N, 5] (batch, time) for the input "
                                         "projection f32[N,5,24], got i1[N,5,1]"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    ir_graph *g = ir_graph_create("bad");
    ir_node *srcs[6] = {ir_build_input(g, "xp", &(ir_type){DT_F32, 3, {IR_DIM_BATCH, 5, 24}}, 0, no_loc),
                        ir_build_input(g, "r", &(ir_type){DT_F32, 2, {8, 24}}, 1, no_loc),
                        ir_build_input(g, "rb", &(ir_type){DT_F32, 1, {24}}, 2, no_loc),
                        ir_build_input(g, "h0", &(ir_type){DT_F32, 2, {IR_DIM_BATCH, 8}}, 3, no_loc),
                        ir_build_input(g, "mask", &cases[i].mask, 4, no_loc), NULL};
    ir_type out;
    char err[256] = "";
    ck_assert_msg(ir_infer_type(IR_OP_GRU, srcs, 4, &(ir_attr){0}, &out, err, sizeof err), "no mask: %s", err);
    ck_assert_msg(!ir_infer_type(IR_OP_GRU, srcs, 5, &(ir_attr){0}, &out, err, sizeof err), "case %zu: accepted", i);
    ck_assert_str_eq(err, cases[i].want);
    srcs[5] = srcs[3];
    ck_assert(!ir_infer_type(IR_OP_GRU, srcs, 6, &(ir_attr){0}, &out, err, sizeof err));
    ck_assert_str_eq(err, "gru takes 4 operands (5 with a mask), got 6");
    ir_graph_destroy(g);
  }
}
END_TEST

/* ---- backpropagation through time ---- */

/* inputs xp [N,T,G*H], h0 (c0), dy (y's shape); r (rb) constants; outputs y and g = <op>_grad(.., y, dy) */
typedef struct grad_graph {
  ir_graph *g;
  float *r, *rb;
  int64_t gh, ny, nw, n_in[4];
} grad_graph;

/* build_grad's lstm is lstm_train when set (y then holds the gates lstm_grad reads) */
static bool grad_reserve;

static void build_grad(const rnn_case *rc, grad_graph *b) {
  memset(b, 0, sizeof *b);
  b->g = ir_graph_create("rnn_grad");
  int gates = ir_rnn_gates(rc->op), states = ir_rnn_states(rc->op);
  b->gh = gates * rc->h;
  ir_type xt = {DT_F32, 3, {IR_DIM_BATCH, rc->t, b->gh}}, st = {DT_F32, 2, {IR_DIM_BATCH, rc->h}};
  ir_type yt = states == 2 ? (ir_type){DT_F32, 4, {IR_DIM_BATCH, rc->t, 2, rc->h}}
                           : (ir_type){DT_F32, 3, {IR_DIM_BATCH, rc->t, rc->h}};
  ir_node *srcs[IR_MAX_SRCS];
  int k = 0, in = 0;
  srcs[k++] = ir_build_input(b->g, "xp", &xt, in++, no_loc);
  ir_type rt = {DT_F32, 2, {rc->h, b->gh}}, rbt = {DT_F32, 1, {b->gh}};
  rng r;
  rng_init(&r, 41);
  b->r = xmalloc((size_t)(rc->h * b->gh) * sizeof(float));
  for (int64_t i = 0; i < rc->h * b->gh; i++) b->r[i] = rng_uniform_f32(&r, -1.5f, 1.5f) / (float)rc->h;
  srcs[k++] = ir_build_const(b->g, "r", &rt, "r", b->r, no_loc);
  if (gates == 3) {
    b->rb = xmalloc((size_t)b->gh * sizeof(float));
    for (int64_t i = 0; i < b->gh; i++) b->rb[i] = rng_uniform_f32(&r, -0.5f, 0.5f);
    srcs[k++] = ir_build_const(b->g, "rb", &rbt, "rb", b->rb, no_loc);
  }
  for (int s = 0; s < states; s++) srcs[k++] = ir_build_input(b->g, s ? "c0" : "h0", &st, in++, no_loc);
  ir_attr a = {.reverse = rc->reverse, .reset_after = rc->reset_after};
  ir_node *mask = rc->masked ? ir_build_input(b->g, "mask", &(ir_type){DT_I1, 2, {IR_DIM_BATCH, rc->t}}, 2 + states,
                                              no_loc)
                             : NULL;
  if (mask) srcs[k++] = mask;
  bool reserve = grad_reserve && rc->op == IR_OP_LSTM;
  ir_node *y = ir_build_op(b->g, reserve ? IR_OP_LSTM_TRAIN : rc->op, "y", srcs, k, &a, no_loc);
  ck_assert(y);
  if (mask) k--;
  srcs[k++] = y;
  srcs[k++] = ir_build_input(b->g, "dy", &yt, in++, no_loc);
  if (mask) srcs[k++] = mask;
  static const ir_op grads[] = {[1] = IR_OP_SIMPLE_RNN_GRAD, [3] = IR_OP_GRU_GRAD, [4] = IR_OP_LSTM_GRAD};
  ir_node *gr = ir_build_op(b->g, grads[gates], "g", srcs, k, &a, no_loc);
  ck_assert_msg(gr, "%s: build", ir_op_name(grads[gates]));
  ir_graph_add_output(b->g, "y", y);
  ir_graph_add_output(b->g, "g", gr);
  b->ny = rc->t * (states + (reserve ? gates : 0)) * rc->h;
  b->nw = rc->t * ir_rnn_grad_width(grads[gates], rc->h);
  b->n_in[0] = rc->t * b->gh, b->n_in[1] = b->n_in[2] = rc->h, b->n_in[1 + states] = rc->t * states * rc->h;
}

static void unbuild_grad(grad_graph *b) {
  ir_graph_destroy(b->g);
  free(b->r), free(b->rb);
}

static const char *case_name(const rnn_case *rc) {
  static char buf[64];
  snprintf(buf, sizeof buf, "%s%s reverse=%d%s", ir_op_name(rc->op),
           rc->op == IR_OP_GRU ? (rc->reset_after ? "(reset_after)" : "(reset before)") : "", rc->reverse,
           rc->masked ? " masked" : "");
  return buf;
}

/* The reference's gradient op against central finite differences of its
 * forward op: L = sum(y * dy); dL/dxp is g's dxp, dL/dr[k,j] = sum over the
 * rows and steps of p[k] du[j] (p2 for gru's h block with its reset gate
 * before), dL/drb[j] = sum of du[j]. The forward rounds its state to f32
 * each step, so differences of step 1e-2 are good to about 1e-4. */
static void check_fd(const rnn_case *rc) {
  grad_graph b;
  build_grad(rc, &b);
  int64_t batch = 2, h = rc->h, gh = b.gh, w = b.nw / rc->t;
  int states = ir_rnn_states(rc->op), n_in = states + 2;
  double *in[5] = {NULL};
  rng r;
  rng_init(&r, 43);
  for (int i = 0; i < n_in; i++) {
    in[i] = xmalloc((size_t)(batch * b.n_in[i]) * sizeof(double));
    for (int64_t j = 0; j < batch * b.n_in[i]; j++) in[i][j] = rng_uniform_f32(&r, -1.0f, 1.0f);
  }
  uint8_t *mask = xmalloc((size_t)(batch * rc->t));
  in[n_in] = xmalloc((size_t)(batch * rc->t) * sizeof(double));
  fill_mask(mask, in[n_in], batch, rc->t);
  double *out[2];
  char err[256];
  ck_assert_msg(ref_run(b.g, batch, (const double *const *)in, out, err, sizeof err), "%s", err);
  double *gg = out[1];
  double *dy = in[n_in - 1];
  bool before = rc->op == IR_OP_GRU && !rc->reset_after;
  /* the analytic gradients of r and rb from g's columns */
  double *dr = xcalloc((size_t)(h * gh), sizeof(double)), *drb = xcalloc((size_t)gh, sizeof(double));
  for (int64_t row = 0; row < batch * rc->t; row++) {
    const double *p = gg + row * w;
    for (int64_t j = 0; j < gh; j++) {
      drb[j] += p[gh + j];
      for (int64_t k = 0; k < h; k++) dr[k * gh + j] += p[2 * gh + (before && j >= 2 * h ? h : 0) + k] * p[gh + j];
    }
  }
  double scale = 0;
  for (int64_t i = 0; i < batch * rc->t; i++)
    for (int64_t j = 0; j < gh; j++) scale = fmax(scale, fabs(gg[i * w + j]));
  for (int64_t i = 0; i < h * gh; i++) scale = fmax(scale, fabs(dr[i]));
  /* L at a perturbed point */
#define LOSS(l)                                                                                                      \
  do {                                                                                                               \
    double *o[2];                                                                                                    \
    ck_assert_msg(ref_run(b.g, batch, (const double *const *)in, o, err, sizeof err), "%s", err);                    \
    l = 0;                                                                                                           \
    for (int64_t q = 0; q < batch * b.ny; q++) l += o[0][q] * dy[q];                                                 \
    ref_outputs_free(o, 2);                                                                                          \
  } while (0)
  const double step = 1e-2, tol = 2e-3 * fmax(scale, 1e-3);
  for (int64_t i = 0; i < batch * b.n_in[0]; i += 7) { /* xp */
    double keep = in[0][i], lp, lm;
    in[0][i] = keep + step;
    LOSS(lp);
    in[0][i] = keep - step;
    LOSS(lm);
    in[0][i] = keep;
    int64_t row = i / gh, j = i % gh;
    double fd = (lp - lm) / (2 * step), an = gg[row * w + j];
    ck_assert_msg(fabs(fd - an) <= tol, "%s: dxp[%lld] = %.8g, finite differences %.8g", case_name(rc), (long long)i,
                  an, fd);
  }
  for (int64_t i = 0; i < h * gh + (b.rb ? gh : 0); i += 3) { /* r, rb: f32 constants, the step as stored */
    float *v = i < h * gh ? &b.r[i] : &b.rb[i - h * gh];
    float keep = *v;
    double lp, lm;
    *v = keep + (float)step;
    double up = (double)*v - keep;
    LOSS(lp);
    *v = keep - (float)step;
    double down = keep - (double)*v;
    LOSS(lm);
    *v = keep;
    double fd = (lp - lm) / (up + down), an = i < h * gh ? dr[i] : drb[i - h * gh];
    ck_assert_msg(fabs(fd - an) <= tol, "%s: d%s[%lld] = %.8g, finite differences %.8g", case_name(rc),
                  i < h * gh ? "r" : "rb", (long long)(i < h * gh ? i : i - h * gh), an, fd);
  }
#undef LOSS
  ref_outputs_free(out, 2);
  for (int i = 0; i <= n_in; i++) free(in[i]);
  free(mask), free(dr), free(drb);
  unbuild_grad(&b);
}

/* The kernel's gradient op against the reference's (f32), on 1 and 3 threads (the same bits);
 * the kernel's y and gradient to *y_out and *g_out if given (the caller frees them). */
static void grad_kernel_run(const rnn_case *rc, int64_t batch, float **y_out, float **g_out) {
  grad_graph b;
  build_grad(rc, &b);
  int states = ir_rnn_states(rc->op), n_in = states + 2;
  diag_sink *d = diag_sink_create();
  pass_options po;
  pass_options_init(&po);
  po.verify_each = true;
  ck_assert_msg(pass_run_pipeline(b.g, PASS_PIPELINE_DEFAULT, &po, d), "passes: %s", diag_text(d));
  float *in[4];
  double *rin[5] = {NULL};
  rng r;
  rng_init(&r, 47);
  for (int i = 0; i < n_in; i++) {
    in[i] = xmalloc((size_t)(batch * b.n_in[i]) * sizeof(float));
    for (int64_t j = 0; j < batch * b.n_in[i]; j++) in[i][j] = rng_uniform_f32(&r, -1.0f, 1.0f);
    rin[i] = ref_from_f32(in[i], batch * b.n_in[i]);
  }
  uint8_t *mask = xmalloc((size_t)(batch * rc->t));
  rin[n_in] = xmalloc((size_t)(batch * rc->t) * sizeof(double));
  fill_mask(mask, rin[n_in], batch, rc->t);
  double *want[2];
  char err[256];
  ck_assert_msg(ref_run(b.g, batch, (const double *const *)rin, want, err, sizeof err), "reference: %s", err);
  float *got[2][2];
  for (int th = 0; th < 2; th++) {
    cg_backend_options bo;
    cg_backend_options_init(&bo);
    bo.threads = th ? 3 : 1;
    bo.cg.cpu = case_cpu;
    cg_exec *x = cg_backend_compile(&cg_backend_cpu, b.g, &bo, d);
    ck_assert_msg(x, "compile: %s", diag_text(d));
    got[th][0] = xcalloc((size_t)(batch * b.ny), sizeof(float));
    got[th][1] = xcalloc((size_t)(batch * b.nw), sizeof(float));
    const void *ins[] = {in[0], in[1], in[2], in[3], NULL};
    ins[n_in] = mask;
    void *outs[] = {got[th][0], got[th][1]};
    ck_assert_msg(cg_backend_cpu.run(x, batch, ins, outs, d), "run: %s", diag_text(d));
    cg_exec_destroy(x);
  }
  ck_assert_msg(!memcmp(got[0][1], got[1][1], (size_t)(batch * b.nw) * sizeof(float)), "%s: 1 and 3 threads differ",
                case_name(rc));
  char msg[256];
  double e = ref_normalized_error(got[0][1], want[1], batch * b.nw);
  ref_cmp worst = ref_compare_normalized(got[0][1], want[1], batch * b.nw);
  ck_assert_msg(e <= 1e-5, "%s T=%lld H=%lld: gradient's normalized error %g vs the reference (%s)", case_name(rc),
                (long long)rc->t, (long long)rc->h, e, ref_cmp_str(&worst, msg, sizeof msg));
  double ey = ref_normalized_error(got[0][0], want[0], batch * b.ny);
  ck_assert_msg(ey <= 1e-5, "%s: y's normalized error %g vs the reference", case_name(rc), ey);
  ref_outputs_free(want, 2);
  for (int i = 0; i < n_in; i++) free(in[i]), free(rin[i]);
  free(rin[n_in]), free(mask);
  if (y_out) *y_out = got[0][0], got[0][0] = NULL;
  if (g_out) *g_out = got[0][1], got[0][1] = NULL;
  for (int th = 0; th < 2; th++) free(got[th][0]), free(got[th][1]);
  diag_sink_destroy(d);
  unbuild_grad(&b);
}

static void check_grad_kernel(const rnn_case *rc, int64_t batch) { grad_kernel_run(rc, batch, NULL, NULL); }

/* lstm_train (the training step's forward: y holds the gates too) and
 * lstm_grad reading them: h, c and the gradient the same bits as lstm's
 * and lstm_grad's recomputing them; y's gates and the gradient against
 * the reference (grad_kernel_run). */
static void check_reserve(const rnn_case *rc, int64_t batch) {
  if (rc->op != IR_OP_LSTM) return;
  float *y[2], *g[2];
  for (int k = 0; k < 2; k++) {
    grad_reserve = k == 1;
    grad_kernel_run(rc, batch, &y[k], &g[k]);
  }
  grad_reserve = false;
  int64_t h = rc->h, w = ir_rnn_grad_width(IR_OP_LSTM_GRAD, h);
  for (int64_t i = 0; i < batch * rc->t; i++)
    ck_assert_msg(!memcmp(y[0] + i * 2 * h, y[1] + i * 6 * h, (size_t)(2 * h) * sizeof(float)),
                  "%s T=%lld H=%lld: lstm_train's h and c differ from lstm's at row*t %lld", case_name(rc),
                  (long long)rc->t, (long long)h, (long long)i);
  ck_assert_msg(!memcmp(g[0], g[1], (size_t)(batch * rc->t * w) * sizeof(float)),
                "%s T=%lld H=%lld: lstm_grad of lstm_train's y differs from lstm_grad recomputing the gates",
                case_name(rc), (long long)rc->t, (long long)h);
  for (int k = 0; k < 2; k++) free(y[k]), free(g[k]);
}

static void for_each_cell(void (*fn)(const rnn_case *rc, int64_t batch), int64_t t, int64_t h, int64_t batch,
                          int masks) {
  static const ir_op ops[] = {IR_OP_SIMPLE_RNN, IR_OP_GRU, IR_OP_LSTM};
  size_t k = 0;
  for (size_t o = 0; o < 3; o++)
    for (int rev = 0; rev < 3; rev++)
      for (int ra = 0; ra < (ops[o] == IR_OP_GRU ? 2 : 1); ra++)
        for (int mk = 0; mk < masks; mk++) {
          rnn_case rc = {ops[o], t, 0, h, rev, ra, DT_F32, 0, mk};
          if (!test_case_runs(k++)) continue;
          fn(&rc, batch);
        }
}

static void fd_case(const rnn_case *rc, int64_t batch) {
  (void)batch;
  check_fd(rc);
}

START_TEST(test_grad_finite_differences) { for_each_cell(fd_case, 5, 3, 2, 2); }
END_TEST

START_TEST(test_grad_kernel_against_reference) {
  for_each_cell(check_grad_kernel, 28, 16, 3, 2);
  for_each_cell(check_grad_kernel, 6, 13, 1, 1);
  /* rows in blocks (cg_rnn.c) and the rows left over, H = 40 off whole
   * blocks of columns; on x86-64-v3 (AVX2's blocks of 2) where it runs */
  for_each_cell(check_grad_kernel, 7, 40, 11, 1);
  if (__builtin_cpu_supports("avx2")) {
    case_cpu = "x86-64-v3";
    rnn_case lstm = {IR_OP_LSTM, 7, 0, 40, 1, 0, DT_F32, 0, true}, gru = {IR_OP_GRU, 7, 0, 40, 0, 0, DT_F32, 0, true};
    check_grad_kernel(&lstm, 11);
    check_grad_kernel(&gru, 11);
    case_cpu = NULL;
  }
}
END_TEST

START_TEST(test_grad_reserve_same_bits) {
  for_each_cell(check_reserve, 28, 16, 3, 2);
  for_each_cell(check_reserve, 7, 40, 11, 1); /* rows in blocks, H off whole blocks of columns */
}
END_TEST

static Suite *rnn_suite(void) {
  Suite *s = suite_create("rnn");
  TCase *tc = tcase_create("rnn");
  tcase_set_timeout(tc, 300); /* JIT compiles: dozens of graphs */
  tcase_add_test(tc, test_cells_against_reference);
  tcase_add_test(tc, test_cells_blocked_columns);
  tcase_add_test(tc, test_cells_row_blocks);
  tcase_add_test(tc, test_compile_independent_of_length);
  tcase_add_test(tc, test_bad_shapes);
  tcase_add_test(tc, test_bad_mask);
  tcase_add_test(tc, test_reserve_types);
  tcase_add_test(tc, test_grad_finite_differences);
  tcase_add_test(tc, test_grad_kernel_against_reference);
  tcase_add_test(tc, test_grad_reserve_same_bits);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) { return check_run(rnn_suite()); }
