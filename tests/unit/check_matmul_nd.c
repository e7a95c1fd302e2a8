/* SPDX-License-Identifier: Apache-2.0 */
/*
 * check_matmul_nd.c: general tensors' contractions on the CPU GEMM
 * (codegen/cpu/cg_gemm.c) against the float64 reference (tests/ref):
 *   - matmul over leading dimensions (Keras Dense on [N, T, C]: the flat
 *     matrix of a's rows), and its gradients matmul_nt (the same rows) and
 *     matmul_tn (summing over every leading dimension, the batch's
 *     included: K blocks of the run's N*T rows);
 *   - batch_matmul of two activations with each pair of transpose flags,
 *     leading dimensions broadcast (a [1, ..] dimension, an operand of lower
 *     rank, an unbatched operand) and shapes that cross the GEMM's blocks;
 * on every CPU code path this host runs, at 1 and 3 threads (the results
 * must be the same bits), under float32 and a 16-bit policy (the reference
 * runs the same final graph, casts included). With CASTOR_CUDA_EMULATE set
 * (the ctest entry check_matmul_nd_emu), Dense on rank 3 also runs on the
 * cuda target through the PTX emulator; batch_matmul there is the cuda
 * target's stated exception.
 */
#include <check.h>

#include "tests/unit/test_support.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/internal.h"
#include "codegen/cg_backend.h"
#include "passes/passes.h"
#include "tests/ref/ref.h"
#include "util/util.h"

static const diag_loc no_loc = {0};

static const struct { const char *cpu, *features; } cpus[] = {
    {NULL, NULL}, {"haswell", "+sse2,+sse4.2,+avx,+avx2,+fma,+f16c"}, {"x86-64", "+sse2"}};
enum { N_CPUS = sizeof cpus / sizeof cpus[0] };

typedef struct mcase {
  ir_graph *g;
  float *data[8];
  int n_data;
} mcase;

static ir_node *konst(mcase *c, const char *name, int rank, const int64_t *dims, uint64_t seed) {
  ir_type t = {DT_F32, rank, {0}};
  int64_t n = 1;
  for (int r = 0; r < rank; r++) t.dims[r] = dims[r], n *= dims[r];
  float *d = xmalloc((size_t)n * sizeof *d);
  rng r;
  rng_init(&r, seed);
  for (int64_t i = 0; i < n; i++) d[i] = rng_uniform_f32(&r, -1.0f, 1.0f);
  ck_assert_int_lt(c->n_data, 8);
  c->data[c->n_data++] = d;
  return ir_build_const(c->g, name, &t, name, d, no_loc);
}

static ir_node *input(mcase *c, const char *name, int index, int rank, const int64_t *dims) {
  ir_type t = {DT_F32, rank, {0}};
  for (int r = 0; r < rank; r++) t.dims[r] = dims[r];
  return ir_build_input(c->g, name, &t, index, no_loc);
}

static ir_node *bmm(mcase *c, const char *name, ir_node *a, ir_node *b, int ta, int tb) {
  ir_attr attr = {.acc = DT_F32, .transpose_a = ta, .transpose_b = tb};
  return ir_build_op(c->g, IR_OP_BATCH_MATMUL, name, (ir_node *[]){a, b}, 2, &attr, no_loc);
}

static void case_free(mcase *c) {
  ir_graph_destroy(c->g);
  for (int i = 0; i < c->n_data; i++) free(c->data[i]);
}

static int64_t numel(const rt_tensor_desc *t, int64_t batch) {
  int64_t n = 1;
  for (int k = 0; k < t->rank; k++) n *= t->dims[k] < 0 ? batch : t->dims[k];
  return n;
}

/* Runs c's graph (one output) after the default pipeline under `policy`
 * on backend be (every CPU path, 1 and 3 threads, or the cuda target) at
 * `batch`, against the reference on the same final graph. */
static void check_case(mcase *c, const char *what, const char *policy, int64_t batch, const cg_backend *be) {
  diag_sink *d = diag_sink_create();
  ck_assert(ir_policy_from_name(policy, strlen(policy), &c->g->policy));
  pass_options po;
  pass_options_init(&po);
  po.verify_each = true;
  ck_assert_msg(pass_run_pipeline(c->g, be->always_pad8 ? PASS_PIPELINE_PAD8 : PASS_PIPELINE_DEFAULT, &po, d),
                "%s: passes: %s", what, diag_text(d));
  bool f32 = !strcmp(policy, "float32");
  int n_paths = be == &cg_backend_cpu ? N_CPUS : 1;
  for (int ci = 0; ci < n_paths; ci++) {
    float *first = NULL;
    for (int t = 0; t < (be == &cg_backend_cpu ? 2 : 1); t++) {
      cg_backend_options bo;
      cg_backend_options_init(&bo);
      bo.threads = t ? 3 : 1;
      if (be == &cg_backend_cpu) bo.cg.cpu = cpus[ci].cpu, bo.cg.features = cpus[ci].features;
      setenv("CASTOR_PARALLEL_MIN_WORK", "0", 1);
      cg_exec *x = cg_backend_compile(be, c->g, &bo, d);
      ck_assert_msg(x, "%s: compile: %s", what, diag_text(d));
      const rt_program *desc = x->desc;
      float *in[4] = {0};
      double *in64[4] = {0};
      ck_assert_int_le(desc->n_inputs, 4);
      rng r;
      rng_init(&r, 11);
      for (int i = 0; i < desc->n_inputs; i++) {
        int64_t n = numel(&desc->inputs[i], batch);
        in[i] = xmalloc((size_t)n * 4);
        for (int64_t j = 0; j < n; j++) in[i][j] = rng_uniform_f32(&r, -1.0f, 1.0f);
        in64[i] = ref_from_f32(in[i], n);
      }
      const rt_tensor_desc *od = &desc->outputs[0];
      int64_t n = numel(od, batch);
      void *raw = xcalloc((size_t)n, 8);
      float *out = xcalloc((size_t)n, 4);
      void *outs[] = {raw};
      ck_assert_msg(be->run(x, batch, (const void *const *)in, outs, d), "%s: run: %s", what, diag_text(d));
      unsetenv("CASTOR_PARALLEL_MIN_WORK");
      for (int64_t k = 0; k < n; k++) out[k] = (float)dtype_load_double(od->dtype, raw, k);
      double *want[1] = {NULL};
      char err[256];
      ck_assert_msg(ref_run(c->g, batch, (const double *const *)in64, want, err, sizeof err), "%s: reference: %s",
                    what, err);
      ref_cmp e = ref_compare_normalized(out, want[0], n);
      char msg[256];
      /* f32: sums in another order; 16-bit: the result's one rounding, relative */
      double bound = f32 ? 2e-6 : 2e-3;
      ck_assert_msg(e.error <= bound, "%s (%s) on %s, %d threads: %s", what, policy,
                    be != &cg_backend_cpu ? be->name : cpus[ci].cpu ? cpus[ci].cpu : "the host", bo.threads,
                    ref_cmp_str(&e, msg, sizeof msg));
      if (!first) {
        first = out;
      } else {
        ck_assert_msg(!memcmp(first, out, (size_t)n * 4), "%s (%s): 1 and 3 threads give different bits", what,
                      policy);
        free(out);
      }
      ref_outputs_free(want, 1);
      free(raw);
      for (int i = 0; i < desc->n_inputs; i++) free(in[i]), free(in64[i]);
      cg_exec_destroy(x);
    }
    free(first);
  }
  diag_sink_destroy(d);
}

/* Dense on [N, T, C] and [N, A, B, C]: matmul, a bias, tanh, fused. */
static void dense_case(mcase *c, int rank) {
  c->g = ir_graph_create("dense_nd");
  int64_t dims[4] = {IR_DIM_BATCH, 5, 3, 7};
  if (rank == 3) dims[1] = 5, dims[2] = 7;
  ir_node *x = input(c, "x", 0, rank, dims);
  ir_node *w = konst(c, "w", 2, (int64_t[]){7, 9}, 3), *b = konst(c, "b", 1, (int64_t[]){9}, 4);
  ir_node *m = ir_build_matmul(c->g, "m", x, w, DT_F32, no_loc);
  ir_node *y = ir_build_unary(c->g, IR_OP_TANH, "y", ir_build_binary(c->g, IR_OP_ADD, "ba", m, b, no_loc), no_loc);
  ir_graph_add_output(c->g, "y", y);
}

START_TEST(test_dense_any_rank) {
  static const char *const policies[] = {"float32", "mixed_float16", "mixed_bfloat16"};
  for (int rank = 3; rank <= 4; rank++)
    for (int p = 0; p < 3; p++)
      for (int64_t batch = 1; batch <= 33; batch += 32) {
        mcase c = {0};
        dense_case(&c, rank);
        char what[64];
        snprintf(what, sizeof what, "dense on rank %d, batch %lld", rank, (long long)batch);
        check_case(&c, what, policies[p], batch, &cg_backend_cpu);
        case_free(&c);
      }
}
END_TEST

/* matmul's gradients on [N, T, C]: matmul_nt over the rows, matmul_tn
 * summing N*T rows (61*5 = 305: two K blocks of 256, the last short). */
START_TEST(test_dense_gradients_any_rank) {
  for (int tn = 0; tn < 2; tn++)
    for (int64_t batch = 3; batch <= 61; batch += 58) {
      mcase c = {0};
      c.g = ir_graph_create("grad_nd");
      ir_node *a = input(&c, "a", 0, 3, (int64_t[]){IR_DIM_BATCH, 5, 9});
      ir_node *y;
      if (tn) {
        ir_node *b = input(&c, "b", 1, 3, (int64_t[]){IR_DIM_BATCH, 5, 19});
        y = ir_build_op(c.g, IR_OP_MATMUL_TN, "y", (ir_node *[]){a, b}, 2, &(ir_attr){.acc = DT_F32}, no_loc);
      } else {
        ir_node *w = konst(&c, "w", 2, (int64_t[]){7, 9}, 5);
        y = ir_build_op(c.g, IR_OP_MATMUL_NT, "y", (ir_node *[]){a, w}, 2, &(ir_attr){.acc = DT_F32}, no_loc);
      }
      ir_graph_add_output(c.g, "y", y);
      char what[64];
      snprintf(what, sizeof what, "%s on rank 3, batch %lld", tn ? "matmul_tn" : "matmul_nt", (long long)batch);
      check_case(&c, what, "float32", batch, &cg_backend_cpu);
      case_free(&c);
    }
}
END_TEST

/* batch_matmul: shapes of a and b (N: IR_DIM_BATCH; 0 ends a shape),
 * flags, and whether a softmax follows (a row-wise kernel on its result)
 * or a broadcast bias joins its epilogue. */
typedef struct bmm_shape {
  int64_t a[5], b[5];
  int ta, tb;
  int tail; /* 0 none, 1 bias add in the epilogue, 2 softmax */
  int64_t batch;
} bmm_shape;

static int rank_of(const int64_t *d) {
  int r = 0;
  while (r < 5 && d[r]) r++;
  return r;
}

START_TEST(test_batch_matmul) {
  enum { NB = IR_DIM_BATCH };
  static const bmm_shape shapes[] = {
      {{NB, 3, 5, 7}, {NB, 3, 7, 6}, 0, 0, 0, 2},   /* attention's shapes: [N, heads, T, d] */
      {{NB, 3, 5, 7}, {NB, 3, 6, 7}, 0, 1, 2, 3},   /* q k^T, then softmax */
      {{NB, 3, 7, 5}, {NB, 3, 7, 6}, 1, 0, 1, 2},   /* a^T b, a bias in the epilogue */
      {{NB, 3, 7, 5}, {NB, 3, 6, 7}, 1, 1, 0, 2},
      {{NB, 1, 5, 7}, {3, 7, 6}, 0, 0, 0, 2},       /* a [N,1,..] and an unbatched b of lower rank */
      {{3, 5, 7}, {NB, 3, 6, 7}, 0, 1, 0, 2},       /* an unbatched a */
      {{NB, 5, 7}, {7, 6}, 0, 0, 1, 4},             /* a rank-2 b: one matrix for every item */
      {{NB, 2, 1, 1}, {NB, 2, 1, 13}, 0, 0, 0, 3},  /* size-1 M and K */
      {{NB, 2, 37, 300}, {NB, 2, 300, 41}, 0, 0, 0, 2}, /* two K blocks, row blocks and a column tail */
      {{NB, 2, 300, 37}, {NB, 2, 41, 300}, 1, 1, 0, 1},
  };
  static const char *const policies[] = {"float32", "mixed_float16", "mixed_bfloat16"};
  for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++)
    for (int p = 0; p < 3; p++) {
      const bmm_shape *s = &shapes[i];
      if (p && s->a[3] == 300) continue; /* the large case under float32 only (the suite's time) */
      mcase c = {0};
      c.g = ir_graph_create("bmm");
      int ra = rank_of(s->a), rb = rank_of(s->b), index = 0;
      ir_node *a = s->a[0] == NB ? input(&c, "a", index++, ra, s->a) : konst(&c, "a", ra, s->a, 21);
      ir_node *b = s->b[0] == NB ? input(&c, "b", index++, rb, s->b) : konst(&c, "b", rb, s->b, 22);
      ir_node *y = bmm(&c, "y", a, b, s->ta, s->tb);
      if (s->tail == 1) {
        ir_node *bias = konst(&c, "bias", 1, &y->type.dims[y->type.rank - 1], 23);
        y = ir_build_binary(c.g, IR_OP_ADD, "yb", y, bias, no_loc);
      } else if (s->tail == 2) {
        y = ir_build_unary(c.g, IR_OP_SOFTMAX, "ys", y, no_loc);
      }
      ir_graph_add_output(c.g, "y", y);
      char what[96];
      snprintf(what, sizeof what, "batch_matmul case %zu (flags %d%d), batch %lld", i, s->ta, s->tb,
               (long long)s->batch);
      check_case(&c, what, policies[p], s->batch, &cg_backend_cpu);
      case_free(&c);
    }
}
END_TEST

/* Shapes that do not broadcast, and N moved inside, are located errors
 * naming both shapes. */
START_TEST(test_batch_matmul_errors) {
  static const struct {
    const char *text, *want;
  } cases[] = {
      {"%b = f32[N,3,6,7] input() {index=1}\n%y = f32[N,3,5,6] batch_matmul(%a, %b) {acc=f32, transpose_a=0, transpose_b=0}\n",
       "batch_matmul summed dimensions differ: f32[N,3,5,7] and f32[N,3,6,7]"},
      {"%b = f32[4,7,6] const() {weight=\"b\"}\n%y = f32[N,3,5,6] batch_matmul(%a, %b) {acc=f32, transpose_a=0, transpose_b=0}\n",
       "batch_matmul leading dimensions of f32[N,3,5,7] and f32[4,7,6] do not broadcast (dimension 1: a size against a size)"},
      {"%b = f32[2,1,7,6] const() {weight=\"b\"}\n%y = f32[N,2,5,6] batch_matmul(%c, %b) {acc=f32, transpose_a=0, transpose_b=0}\n",
       "would move the batch dimension N out of dimension 0"},
      {"%b = f32[N,7] input() {index=1}\n%y = f32[N,5,7] batch_matmul(%a2, %b) {acc=f32, transpose_a=0, transpose_b=0}\n",
       "the batch dimension N must be a leading (batch) dimension"},
      {"%b = f32[N,3,7,6] input() {index=1}\n%y = f32[N,3,5,6] batch_matmul(%a, %b) {acc=f32, transpose_a=2, transpose_b=0}\n",
       "transpose_a and transpose_b must be 0 or 1"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    char text[1024];
    snprintf(text, sizeof text,
             "graph m policy=float32\n%%a = f32[N,3,5,7] input() {index=0}\n%%c = f32[N,5,7] input() {index=2}\n"
             "%%a2 = f32[5,7] const() {weight=\"a2\"}\n%soutput y = %%y\n",
             cases[i].text);
    diag_sink *d = diag_sink_create();
    ir_graph *g = ir_parse("m.cir", text, strlen(text), d);
    ck_assert_msg(!g, "case %zu parsed", i);
    ck_assert_msg(strstr(diag_text(d), cases[i].want), "case %zu: got '%s', want '%s'", i, diag_text(d),
                  cases[i].want);
    ck_assert_msg(strstr(diag_text(d), "m.cir:"), "case %zu: no location in '%s'", i, diag_text(d));
    diag_sink_destroy(d);
  }
}
END_TEST

/* Dense on rank 3 on the cuda target, through the PTX emulator. */
START_TEST(test_dense_any_rank_cuda_emulated) {
  static const char *const policies[] = {"float32", "mixed_float16"};
  for (int p = 0; p < 2; p++) {
    mcase c = {0};
    dense_case(&c, 3);
    check_case(&c, "dense on rank 3 (cuda, emulated)", policies[p], 3, &cg_backend_cuda);
    case_free(&c);
  }
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("matmul_nd");
  TCase *tc = tcase_create("matmul_nd");
  tcase_set_timeout(tc, 600);
  if (getenv("CASTOR_CUDA_EMULATE")) {
    tcase_add_test(tc, test_dense_any_rank_cuda_emulated);
  } else {
    tcase_add_test(tc, test_dense_any_rank);
    tcase_add_test(tc, test_dense_gradients_any_rank);
    tcase_add_test(tc, test_batch_matmul);
    tcase_add_test(tc, test_batch_matmul_errors);
  }
  suite_add_tcase(s, tc);
  return s;
}

int main(void) { return check_run(suite()); }
