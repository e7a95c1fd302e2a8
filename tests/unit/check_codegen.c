/* SPDX-License-Identifier: Apache-2.0 */
/*
 * check_codegen.c: kernel planning and the CPU JIT, seen from the program
 * they produce: how nodes fuse into launches, how scratch buffers share
 * slots by liveness, the LLVM dump, and runtime errors on bad batches.
 * Numerics are in check_e2e.c.
 */
#include <check.h>

#include "tests/unit/test_support.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "codegen/cg_backend.h"
#include "codegen/codegen.h"
#include "frontend/frontend.h"
#include "passes/passes.h"

static ir_graph *compile_graph(const char *text, diag_sink *d) {
  ir_graph *g = fe_load_mem("t.cast", text, strlen(text), NULL, d, NULL);
  ck_assert_msg(g != NULL, "%s", diag_text(d));
  ck_assert_msg(pass_run_pipeline(g, PASS_PIPELINE_DEFAULT, NULL, d), "%s", diag_text(d));
  return g;
}

static rt_program *compile(const char *text, str_buf *llvm) {
  diag_sink *d = diag_sink_create();
  ir_graph *g = compile_graph(text, d);
  cg_options o;
  cg_options_init(&o);
  o.dump_llvm = llvm;
  rt_program *p = cg_compile_cpu(g, &o, d);
  ck_assert_msg(p != NULL, "%s", diag_text(d));
  ir_graph_destroy(g);
  diag_sink_destroy(d);
  return p;
}

static const char *mlp =
    "model mlp\nx = input(shape=[16])\nh = dense(x, units=32, activation=relu, name=d1)\n"
    "h = dense(h, units=32, activation=gelu, name=d2)\nl = dense(h, units=10, name=d3)\n"
    "p = activation(l, softmax)\noutput p\n";

START_TEST(test_fusion_and_slots) {
  rt_program *p = compile(mlp, NULL);
  /* three matmul kernels with their bias + activation epilogues; the last
   * one's row (10 wide) fits one GEMM panel, so it does the softmax too */
  ck_assert_int_eq(p->n_launches, 3);
  ck_assert_str_eq(p->launches[0].name, "k0.d1.matmul");
  ck_assert_str_eq(p->launches[1].name, "k1.d2.matmul");
  ck_assert_str_eq(p->launches[2].name, "k2.d3.matmul");
  ck_assert_int_eq(p->launches[0].flops_per_row, 2 * 16 * 32);
  /* GEMMs may be split by columns too, except the one with the softmax */
  ck_assert_int_eq(p->launches[1].cols, 32);
  ck_assert_int_eq(p->launches[2].col_step, 10);
  ck_assert_int_eq(p->launches[1].row_tile_min, 0); /* a matmul: columns first */
  /* d1 and d2 are scratch, in two slots (d2 reads d1) */
  ck_assert_int_eq(p->n_slots, 2);
  ck_assert_int_eq(p->slots[0].bytes_per_row, 32 * 4);
  ck_assert_int_eq(p->n_inputs, 1);
  ck_assert_int_eq(p->n_outputs, 1);
  ck_assert_str_eq(p->outputs[0].name, "p");
  ck_assert_int_eq(p->outputs[0].dims[0], -1);
  ck_assert_int_eq(p->outputs[0].dims[1], 10);
  int64_t ws;
  ck_assert(rt_program_workspace_bytes(p, 3, &ws));
  ck_assert_int_eq(ws, 2 * 384); /* two slots of 3 rows x 128 bytes (already 64-aligned) */
  rt_program_destroy(p);
}
END_TEST

START_TEST(test_no_fusion_across_shared_values) {
  /* h feeds two layers, so its relu cannot fuse into a consumer; s is an
   * output and also feeds multiply, so it gets its own launch too */
  rt_program *p = compile("model m\nx = input(shape=[8])\nh = dense(x, units=8, activation=relu)\n"
                          "s = add(h, x)\nt = multiply(s, h)\noutput s, t\n",
                          NULL);
  ck_assert_int_eq(p->n_launches, 3);
  ck_assert_str_eq(p->launches[1].name, "k1.add");
  ck_assert_str_eq(p->launches[2].name, "k2.multiply");
  rt_program_destroy(p);
}
END_TEST

/* The JIT compiles its kernels in units, a module and object file each,
 * on several threads (cg_jit.c); a kernel's code must not depend on the
 * unit it lands in: a CNN with more GEMM bodies than a unit holds (so
 * several units, taken by whichever thread comes first) gives the bits of
 * the same plan compiled as one module (the path of an LLVM dump), under
 * float32 (Winograd on its 3x3 convolutions) and mixed_bfloat16, batch 3. */
START_TEST(test_units_same_bits) {
  static const char *policies[] = {"float32", "mixed_bfloat16"};
  for (int pi = 0; pi < 2; pi++) {
    char text[1400];
    snprintf(text, sizeof text,
             "model units\npolicy %s\nx = input(shape=[14, 14, 8])\n"
             "c = conv2d(x, filters=24, kernel_size=3, padding=same, activation=relu, name=c1)\n"
             "c = conv2d(c, filters=40, kernel_size=3, padding=same, activation=relu, name=c2)\n"
             "c = conv2d(c, filters=40, kernel_size=1, activation=relu, name=c3)\n"
             "c = conv2d(c, filters=48, kernel_size=3, strides=2, padding=same, activation=relu, name=c4)\n"
             "c = conv2d(c, filters=56, kernel_size=3, padding=same, activation=relu, name=c5)\n"
             "d = depthwise_conv2d(c, kernel_size=3, name=dw)\n"
             "c = conv2d(d, filters=32, kernel_size=1, name=c6)\n"
             "p = max_pooling2d(c, pool_size=2, name=pool)\n"
             "f = flatten(p, name=flat)\n"
             "h = dense(f, units=40, activation=gelu, name=d1)\n"
             "h = layer_normalization(h, name=ln)\n"
             "h = dense(h, units=24, activation=relu, name=d2)\n"
             "l = dense(h, units=10, name=d3)\n"
             "y = activation(l, softmax, dtype=float32, name=probs)\noutput y\n",
             policies[pi]);
    enum { BATCH = 3, IN = 14 * 14 * 8, OUT = 10 };
    static float x[BATCH * IN];
    uint32_t seed = 40;
    for (int i = 0; i < BATCH * IN; i++) {
      seed = seed * 1664525u + 1013904223u;
      x[i] = (float)(seed >> 8) / (float)(1u << 24) * 2.0f - 1.0f;
    }
    float y[2][BATCH * OUT];
    for (int one = 0; one < 2; one++) {
      str_buf llvm;
      str_buf_init(&llvm);
      rt_program *p = compile(text, one ? &llvm : NULL);
      ck_assert_int_eq(p->n_outputs, 1);
      diag_sink *d = diag_sink_create();
      const void *in[] = {x};
      void *out[] = {y[one]};
      ck_assert_msg(rt_program_run(p, BATCH, in, out, NULL, d), "%s", diag_text(d));
      diag_sink_destroy(d);
      rt_program_destroy(p);
      str_buf_fini(&llvm);
    }
    for (int i = 0; i < BATCH * OUT; i++)
      ck_assert_msg(memcmp(&y[0][i], &y[1][i], sizeof y[0][i]) == 0, "%s: units give %.9g at %d, one module %.9g",
                    policies[pi], (double)y[0][i], i, (double)y[1][i]);
  }
}
END_TEST

START_TEST(test_llvm_dump_names) {
  str_buf b;
  str_buf_init(&b);
  rt_program *p = compile(mlp, &b);
  const char *s = str_buf_cstr(&b);
  ck_assert_msg(strstr(s, "define void @k0.d1.matmul(ptr") != NULL, "kernel not found in:\n%.2000s", s);
  ck_assert_msg(strstr(s, "@llvm.fmuladd.v") != NULL, "no vector FMA in the GEMM");
  ck_assert_msg(strstr(s, "call float @exp") == NULL && strstr(s, "@expf") == NULL, "exp must be inline");
  /* the 16-register families prefetch the next B panel in the k loop;
   * AVX-512's taller tiles do not (cg_gemm.c, "Prefetch") */
  cg_options o;
  cg_options_init(&o);
  str_buf line;
  str_buf_init(&line);
  diag_sink *d = diag_sink_create();
  ck_assert(cg_cpu_describe(&o, &line, d));
  bool avx512 = strstr(str_buf_cstr(&line), "GEMM kernel avx512") != NULL ||
                strstr(str_buf_cstr(&line), "GEMM kernel amx-bf16") != NULL; /* its f32 GEMMs: avx512's tiles */
  ck_assert_msg((strstr(s, "@llvm.prefetch") != NULL) == !avx512, "%s: the GEMM %s prefetch", str_buf_cstr(&line),
                avx512 ? "must not" : "must");
  str_buf_fini(&line);
  diag_sink_destroy(d);
  rt_program_destroy(p);
  str_buf_fini(&b);
}
END_TEST

/* CASTOR_PERF_MAP=1: every kernel in /tmp/perf-PID.map at the address its
 * launch calls, with a size, beside its GEMM epilogue; nothing without it.
 * Check runs each test in a process of its own, so the file is this one's. */
static char *perf_map_text(void) {
  char path[64];
  snprintf(path, sizeof path, "/tmp/perf-%ld.map", (long)getpid());
  FILE *f = fopen(path, "r");
  if (!f) return NULL;
  str_buf b = {0};
  char line[512];
  while (fgets(line, sizeof line, f)) str_buf_puts(&b, line);
  fclose(f);
  remove(path);
  return b.data ? b.data : xstrdup("");
}

START_TEST(test_perf_map) {
  free(perf_map_text()); /* a stale file of an earlier process with this pid */
  unsetenv("CASTOR_PERF_MAP");
  rt_program_destroy(compile(mlp, NULL));
  ck_assert_msg(perf_map_text() == NULL, "a perf map was written without CASTOR_PERF_MAP");
  setenv("CASTOR_PERF_MAP", "1", 1);
  rt_program *p = compile(mlp, NULL);
  unsetenv("CASTOR_PERF_MAP");
  char *map = perf_map_text();
  ck_assert_msg(map != NULL, "CASTOR_PERF_MAP=1 wrote no /tmp/perf-PID.map");
  for (int i = 0; i < p->n_launches; i++) {
    char want[256];
    snprintf(want, sizeof want, "%llx ", (unsigned long long)(uintptr_t)p->launches[i].fn);
    const char *at = strstr(map, want);
    ck_assert_msg(at && (at == map || at[-1] == '\n'), "no map line starts at %s's address %s:\n%s", p->launches[i].name,
                  want, map);
    unsigned long long size = 0;
    char name[256] = "";
    ck_assert_int_eq(sscanf(at + strlen(want), "%llx %255s", &size, name), 2);
    ck_assert_str_eq(name, p->launches[i].name);
    ck_assert_msg(size > 0, "%s: size 0", name);
  }
  ck_assert_msg(strstr(map, " k0.d1.matmul.epilogue\n"), "no line for the GEMM epilogue:\n%s", map);
  free(map);
  rt_program_destroy(p);
  /* a map that cannot be written: a warning, and the program still compiles */
  char path[64];
  snprintf(path, sizeof path, "/tmp/perf-%ld.map", (long)getpid());
  rmdir(path); /* left by an earlier process with this pid that failed here */
  ck_assert_int_eq(mkdir(path, 0700), 0);
  setenv("CASTOR_PERF_MAP", "1", 1);
  diag_sink *d = diag_sink_create();
  ir_graph *g = compile_graph(mlp, d);
  p = cg_compile_cpu(g, NULL, d);
  unsetenv("CASTOR_PERF_MAP");
  rmdir(path);
  ck_assert_msg(p != NULL, "%s", diag_text(d));
  char want[256];
  snprintf(want, sizeof want, "warning: CASTOR_PERF_MAP: cannot append to %s: Is a directory; perf will show JIT code as addresses\n", path);
  ck_assert_str_eq(diag_text(d), want);
  rt_program_destroy(p);
  ir_graph_destroy(g);
  diag_sink_destroy(d);
}
END_TEST

START_TEST(test_bad_batch) {
  rt_program *p = compile(mlp, NULL);
  diag_sink *d = diag_sink_create();
  float x[16] = {0}, y[10];
  const void *in[] = {x};
  void *out[] = {y};
  ck_assert(!rt_program_run(p, -1, in, out, NULL, d));
  ck_assert_str_eq(diag_text(d), "error: batch size must be at least 0, got -1\n");
  diag_clear(d);
  /* an empty batch runs no row: nothing is read or written */
  for (int i = 0; i < 10; i++) y[i] = -7.0f;
  ck_assert_msg(rt_program_run(p, 0, in, out, NULL, d), "%s", diag_text(d));
  for (int i = 0; i < 10; i++) ck_assert_float_eq(y[i], -7.0f);
  ck_assert(!rt_program_run(p, INT64_MAX / 8, in, out, NULL, d));
  ck_assert_msg(strstr(diag_text(d), "too large") != NULL, "%s", diag_text(d));
  diag_sink_destroy(d);
  rt_program_destroy(p);
}
END_TEST

/* attention: a row softmax ends the kernel of the batch_matmul whose
 * result it reads at any rank (the epilogue's rows are the result's flat
 * rows), with the elementwise ops between them (the scale); a row wider
 * than one GEMM panel (CG_GEMM_SOFTMAX_MAX_COLS) is a kernel of its own */
static rt_program *compile_cir(const char *text) {
  diag_sink *d = diag_sink_create();
  ir_graph *g = ir_parse("m.cir", text, strlen(text), d);
  ck_assert_msg(g != NULL, "%s", diag_text(d));
  rt_program *p = cg_compile_cpu(g, NULL, d);
  ck_assert_msg(p != NULL, "%s", diag_text(d));
  ir_graph_destroy(g);
  diag_sink_destroy(d);
  return p;
}

/* Parses text and compiles it for the CPU backend on `threads` threads;
 * *g is the parsed graph, for the caller to destroy after the program. */
static cg_exec *exec_cir(const char *text, int threads, diag_sink *d, ir_graph **g) {
  *g = ir_parse("m.cir", text, strlen(text), d);
  ck_assert_msg(*g != NULL, "%s", diag_text(d));
  cg_backend_options o;
  cg_backend_options_init(&o);
  o.threads = threads;
  cg_exec *x = cg_backend_compile(&cg_backend_cpu, *g, &o, d);
  ck_assert_msg(x != NULL, "%s", diag_text(d));
  return x;
}

/* Compiles text on two threads and runs it on a batch of `batch` rows
 * (the values' tests below). */
static void run_cir(const char *text, int64_t batch, const void *const *ins, void **outs) {
  diag_sink *d = diag_sink_create();
  ir_graph *g;
  cg_exec *x = exec_cir(text, 2, d, &g);
  ck_assert_msg(x->backend->run(x, batch, ins, outs, d), "%s", diag_text(d));
  cg_exec_destroy(x);
  ir_graph_destroy(g);
  diag_sink_destroy(d);
}

/* convolutional networks: a conv2d GEMM's launch is cut into row tiles
 * (whole images, at least a row block each) before columns, so that no
 * two threads gather the same A block; the direct convolution (a first
 * layer: 3 channels in, 8 out) splits images only. */
START_TEST(test_conv_launch_rows_first) {
  rt_program *p = compile("model c\nx = input(shape=[7, 7, 3])\n"
                          "h = conv2d(x, filters=8, kernel_size=3, padding=same, name=c1)\n"
                          "y = conv2d(h, filters=64, kernel_size=3, padding=same, name=c2)\noutput y\n",
                          NULL);
  ck_assert_int_eq(p->n_launches, 2);
  ck_assert_int_eq(p->launches[0].row_tile_min, 0);
  ck_assert_int_eq(p->launches[1].cols, 64);
  ck_assert_int_ge(p->launches[1].row_tile_min, 1);
  rt_program_destroy(p);
}
END_TEST

START_TEST(test_batch_matmul_softmax_epilogue) {
  const char *fmt = "graph m policy=float32\n%%q = f32[N,2,5,4] input() {index=0}\n"
                    "%%k = f32[N,2,%d,4] input() {index=1}\n"
                    "%%s = f32[N,2,5,%d] batch_matmul(%%q, %%k) {acc=f32, transpose_a=0, transpose_b=1}\n"
                    "%%c = f32[] literal() {value=0.5}\n%%t = f32[N,2,5,%d] mul(%%s, %%c)\n"
                    "%%p = f32[N,2,5,%d] softmax(%%t)\noutput p = %%p\n";
  char text[1024];
  snprintf(text, sizeof text, fmt, 7, 7, 7, 7);
  rt_program *p = compile_cir(text);
  ck_assert_int_eq(p->n_launches, 1);
  ck_assert_str_eq(p->launches[0].name, "k0.s");
  ck_assert_int_eq(p->launches[0].col_step, 7); /* whole rows */
  ck_assert_int_eq(p->n_slots, 0);
  rt_program_destroy(p);
  /* its values against float64 (batch 3, two threads) */
  enum { NB = 3, H = 2, M = 5, P = 7, K = 4 };
  static float q[NB * H * M * K], kk[NB * H * P * K], out[NB * H * M * P];
  for (int i = 0; i < NB * H * M * K; i++) q[i] = (float)((i * 37 % 23) - 11) / 7.0f;
  for (int i = 0; i < NB * H * P * K; i++) kk[i] = (float)((i * 53 % 29) - 14) / 9.0f;
  const void *ins[] = {q, kk};
  void *outs[] = {out};
  run_cir(text, NB, ins, outs);
  for (int it = 0; it < NB * H; it++)
    for (int m = 0; m < M; m++) {
      double row[P], mx = -1e300, sum = 0;
      for (int j = 0; j < P; j++) {
        row[j] = 0;
        for (int c = 0; c < K; c++) row[j] += (double)q[(it * M + m) * K + c] * kk[(it * P + j) * K + c];
        row[j] *= 0.5;
        mx = row[j] > mx ? row[j] : mx;
      }
      for (int j = 0; j < P; j++) sum += exp(row[j] - mx);
      for (int j = 0; j < P; j++) {
        double want = exp(row[j] - mx) / sum, got = out[(it * M + m) * P + j];
        ck_assert_msg(fabs(got - want) <= 1e-6, "item %d row %d col %d: %.9g, want %.9g", it, m, j, got, want);
      }
    }
  snprintf(text, sizeof text, fmt, 65, 65, 65, 65);
  p = compile_cir(text);
  ck_assert_int_eq(p->n_launches, 2);
  ck_assert_str_eq(p->launches[0].name, "k0.s");
  ck_assert_str_eq(p->launches[1].name, "k1.p");
  rt_program_destroy(p);
}
END_TEST

/* layout: a reshape of a scratch result reads that buffer with its own
 * shape (no kernel); a reshape that is a model output copies into it */
START_TEST(test_reshape_shares_buffer) {
  const char *text = "graph m policy=float32\n%x = f32[N,8] input() {index=0}\n"
                     "%c = f32[] literal() {value=2}\n%t = f32[N,8] mul(%x, %c)\n"
                     "%r = f32[N,2,4] reshape(%t) {shape=[N,2,4]}\n%p = f32[N,2,4] softmax(%r)\n"
                     "%q = f32[N,4,2] reshape(%p) {shape=[N,4,2]}\noutput q = %q\n";
  rt_program *p = compile_cir(text);
  ck_assert_int_eq(p->n_launches, 3); /* t, p, and q's copy into the output */
  ck_assert_str_eq(p->launches[0].name, "k0.t");
  ck_assert_str_eq(p->launches[1].name, "k1.p");
  ck_assert_str_eq(p->launches[2].name, "k2.q");
  ck_assert_int_eq(p->n_slots, 2); /* t (read as r), p */
  rt_program_destroy(p);
  float in[3 * 8], out[3 * 8];
  for (int i = 0; i < 3 * 8; i++) in[i] = (float)((i * 7 % 11) - 5) / 4.0f;
  const void *ins[] = {in};
  void *outs[] = {out};
  run_cir(text, 3, ins, outs);
  for (int r = 0; r < 3 * 2; r++) {
    double sum = 0;
    for (int j = 0; j < 4; j++) sum += exp(2.0 * in[r * 4 + j]);
    for (int j = 0; j < 4; j++)
      ck_assert_msg(fabs(out[r * 4 + j] - exp(2.0 * in[r * 4 + j]) / sum) <= 1e-6, "row %d col %d: %.9g", r, j,
                    out[r * 4 + j]);
  }
}
END_TEST

START_TEST(test_const_without_data) {
  const char *text = "graph m policy=float32\n%x = f32[N,2] input() {index=0}\n"
                     "%w = f32[2,2] const() {weight=\"w\"}\n%y = f32[N,2] matmul(%x, %w) {acc=f32}\n"
                     "output y = %y\n";
  diag_sink *d = diag_sink_create();
  ir_graph *g = ir_parse("m.cir", text, strlen(text), d);
  ck_assert_msg(g != NULL, "%s", diag_text(d));
  ck_assert(cg_compile_cpu(g, NULL, d) == NULL);
  ck_assert_msg(strstr(diag_text(d), "constant %w has no data") != NULL, "%s", diag_text(d));
  ir_graph_destroy(g);
  diag_sink_destroy(d);
}
END_TEST

/* A program's state through the backend's accessors: its kind from the
 * IR, read and written by copy, and a backend without state or an index
 * outside the states refused with a reason. */
START_TEST(test_state_accessors) {
  const char *text = "graph m policy=float32\n%x = f32[N,2] input() {index=0}\n"
                     "%w = f32[2] variable() {weight=\"w\", init=0.5, kind=weight}\n"
                     "%s = f32[2] variable() {weight=\"w.momentum\", init=0, kind=slot}\n"
                     "%a = f32[N,2] add(%x, %w)\n%y = f32[N,2] add(%a, %s)\noutput y = %y\n";
  diag_sink *d = diag_sink_create();
  ir_graph *g;
  cg_exec *x = exec_cir(text, 1, d, &g);
  ck_assert_int_eq(x->desc->n_states, 2);
  int wi = strcmp(x->desc->states[0].t.name, "w") == 0 ? 0 : 1; /* the weight's index, the slot's 1 - wi */
  ck_assert_int_eq(x->desc->states[wi].kind, RT_STATE_TRAINABLE);
  ck_assert_int_eq(x->desc->states[1 - wi].kind, RT_STATE_SLOT);
  float w[2] = {0, 0}, w2[2] = {2, 3};
  ck_assert(cg_exec_state_read(x, wi, w, d));
  ck_assert(w[0] == 0.5f && w[1] == 0.5f);
  ck_assert(cg_exec_state_write(x, wi, w2, d));
  float in[2] = {1, 1}, out[2] = {0, 0};
  const void *ins[] = {in};
  void *outs[] = {out};
  ck_assert_msg(x->backend->run(x, 1, ins, outs, d), "%s", diag_text(d));
  ck_assert(out[0] == 3.0f && out[1] == 4.0f);
  ck_assert(!cg_exec_state_read(x, 2, w, d));
  ck_assert_msg(strstr(diag_text(d), "state index 2 is outside 0..1"), "%s", diag_text(d));
  /* a backend without accessors (the cuda one has its own since it trains) */
  cg_backend stateless = cg_backend_cpu;
  stateless.name = "stateless", stateless.state_read = NULL, stateless.state_write = NULL;
  cg_exec on_stateless = {&stateless, x->desc, 1, NULL};
  ck_assert(!cg_exec_state_write(&on_stateless, 0, w, d));
  ck_assert_msg(strstr(diag_text(d), "the stateless target keeps no training state (training runs on the cpu target)"),
                "%s", diag_text(d));
  ck_assert_int_eq(diag_first_error_kind(d), DIAG_KIND_INVALID_ARGUMENT);
  cg_exec_destroy(x);
  ir_graph_destroy(g);
  diag_sink_destroy(d);
}
END_TEST

int main(void) {
  check_cpu_path("check_codegen");
  Suite *s = suite_create("codegen");
  TCase *tc = tcase_create("plan");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_fusion_and_slots);
  tcase_add_test(tc, test_conv_launch_rows_first);
  tcase_add_test(tc, test_no_fusion_across_shared_values);
  tcase_add_test(tc, test_llvm_dump_names);
  tcase_add_test(tc, test_units_same_bits);
  tcase_add_test(tc, test_bad_batch);
  tcase_add_test(tc, test_perf_map);
  tcase_add_test(tc, test_const_without_data);
  tcase_add_test(tc, test_state_accessors);
  tcase_add_test(tc, test_batch_matmul_softmax_epilogue);
  tcase_add_test(tc, test_reshape_shares_buffer);
  suite_add_tcase(s, tc);
  return check_run(s);
}
