/* SPDX-License-Identifier: Apache-2.0 */
/*
 * aot_main.c: main() of the executables `castor build` makes. Linked with
 * the model's object file (which defines castor_aot_entry, aot.h) and the
 * static runtime, it needs no LLVM: it reads .npy inputs, checks them
 * against the model's inputs, runs the static rt_program with the
 * runtime's rt_program_run_threads, and prints and writes the outputs.
 *
 *   NAME [--input FILE.npy]... [--output FILE.npy]... [--batch N] [--seed S] [--threads T]
 *        [--benchmark N]
 *
 * --benchmark N runs the model N more times after the run whose outputs it
 * prints (a warm-up) and prints the min and median wall time of a run.
 *
 * Its output matches `castor run` on the same model, inputs and seed: the
 * same summary lines and, bit for bit, the same .npy files. Every error is
 * one clear message on stderr and exit status 1.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <time.h>

#include "formats/npy.h"
#include "runtime/aot/aot.h"
#include "runtime/cpu_features.h"

static const char *prog_name = "model";

static int error(const char *fmt, ...) CASTOR_PRINTF(1, 2);
static int error(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "%s: error: ", prog_name);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  return 1;
}

static void shape_str(str_buf *b, const char *dtype, int rank, const int64_t *dims, int64_t batch) {
  str_buf_printf(b, "%s[", dtype);
  for (int r = 0; r < rank; r++) {
    if (r) str_buf_putc(b, ',');
    if (dims[r] >= 0) str_buf_printf(b, "%" PRId64, dims[r]);
    else if (batch > 0) str_buf_printf(b, "%" PRId64, batch);
    else str_buf_putc(b, 'N');
  }
  str_buf_putc(b, ']');
}

static int usage(const rt_program *p, const char *about, FILE *f, int rc) {
  fprintf(f,
          "usage: %s [--input FILE.npy]... [--output FILE.npy]... [--batch N] [--seed S] [--threads T]\n"
          "          [--benchmark N]\n\n",
          prog_name);
  fprintf(f, "Runs the model '%s' on the CPU: a standalone executable made by `castor build`\n", p->name);
  if (about && about[0]) fprintf(f, "(%s).\n", about);
  str_buf b;
  str_buf_init(&b);
  for (int io = 0; io < 2; io++) {
    int n = io ? p->n_outputs : p->n_inputs;
    const rt_tensor_desc *t = io ? p->outputs : p->inputs;
    fprintf(f, "\n%s%s:\n", io ? "outputs" : "inputs", io ? "" : " (N is the batch size)");
    for (int i = 0; i < n; i++) {
      str_buf_clear(&b);
      shape_str(&b, dtype_name(t[i].dtype), t[i].rank, t[i].dims, 0);
      fprintf(f, "  %-20s %s\n", t[i].name, str_buf_cstr(&b));
    }
  }
  str_buf_fini(&b);
  fprintf(f, "\noptions:\n"
             "  --input FILE.npy    an input tensor, once per model input, in order; float\n"
             "                      files (f64, f32, f16) are converted to the input's dtype\n"
             "                      (default: seeded uniform random values in [-1, 1))\n"
             "  --output FILE.npy   write an output tensor, once per output, in order\n"
             "  --batch N           batch size of the random input (default 1); with --input,\n"
             "                      the files' batch, which N must then match\n"
             "  --seed S            seed of the random input (default 1)\n"
             "  --threads T         threads to run on (default: $CASTOR_NUM_THREADS or all CPUs)\n"
             "  --benchmark N       after the run, time N more and print the min and median\n"
             "                      milliseconds a run\n"
             "  -h, --help          show this help\n");
  return rc;
}


typedef struct args {
  VEC(const char *) inputs;
  VEC(const char *) outputs;
  int64_t batch, threads, benchmark;
  uint64_t seed;
  bool batch_given;
} args;


/* 0: run; 1: error; 2: help printed */
static int parse_args(int argc, char **argv, const rt_aot_entry *en, args *c) {
  c->batch = 1, c->seed = 1;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v;
    bool missing = false;
    int64_t n;
#define OPT(name) ((v = str_opt_arg(argc, argv, &i, name, &missing)) != NULL || missing)
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      usage(en->program, en->about, stdout, 0);
      return 2;
    }
    if (OPT("--input")) {
      if (missing) return error("--input needs a file");
      vec_push(&c->inputs, v);
    } else if (OPT("--output")) {
      if (missing) return error("--output needs a file");
      vec_push(&c->outputs, v);
    } else if (OPT("--batch")) {
      if (missing || !str_parse_i64(v, 1, INT64_C(1) << 40, &n))
        return error("--batch needs a positive integer, got '%s'", missing ? "" : v);
      c->batch = n, c->batch_given = true;
    } else if (OPT("--seed")) {
      if (missing || !str_parse_i64(v, 0, INT64_MAX, &n))
        return error("--seed needs a non-negative integer, got '%s'", missing ? "" : v);
      c->seed = (uint64_t)n;
    } else if (OPT("--threads")) {
      if (missing || !str_parse_i64(v, 1, 1024, &n))
        return error("--threads needs an integer from 1 to 1024, got '%s'", missing ? "" : v);
      c->threads = n;
    } else if (OPT("--benchmark")) {
      if (missing || !str_parse_i64(v, 1, 1000000, &n))
        return error("--benchmark needs a number of runs from 1 to 1000000, got '%s'", missing ? "" : v);
      c->benchmark = n;
    } else {
      return error("%s '%s' (see %s --help)", a[0] == '-' ? "unknown option" : "unexpected argument", a,
                   prog_name);
    }
#undef OPT
  }
  const rt_program *p = en->program;
  if (c->inputs.len && (int)c->inputs.len != p->n_inputs)
    return error("model '%s' has %d input(s), got %zu --input file(s)", p->name, p->n_inputs, c->inputs.len);
  if (c->outputs.len > (size_t)p->n_outputs)
    return error("model '%s' has %d output(s), got %zu --output file(s)", p->name, p->n_outputs, c->outputs.len);
  return 0;
}

static bool is_float(rt_dtype t) { return t == DT_F32 || t == DT_F16 || t == DT_BF16; }

/* Reads input i from path into a, converted to the model's dtype, and
 * checks its shape; *batch is the batch so far (-1: none yet). */
static bool read_input(const rt_tensor_desc *t, const char *path, npy_array *a, int64_t *batch, const char *batch_from,
                       diag_sink *d) {
  if (!npy_read(path, a, d)) return false;
  bool float_file = a->is_f64 || is_float(a->dtype);
  bool ok = a->rank == t->rank && (a->is_f64 ? false : a->dtype == t->dtype);
  if (float_file && is_float(t->dtype) && a->rank == t->rank) ok = true; /* converted below */
  int64_t b = *batch;
  for (int r = 0; ok && r < t->rank; r++) {
    if (t->dims[r] >= 0) ok = a->dims[r] == t->dims[r];
    else if (b < 0) b = a->dims[r];
    else ok = a->dims[r] == b;
  }
  if (ok && b == 0) ok = false; /* an empty batch */
  if (!ok) {
    str_buf want, got;
    str_buf_init(&want), str_buf_init(&got);
    shape_str(&want, dtype_name(t->dtype), t->rank, t->dims, *batch);
    shape_str(&got, a->is_f64 ? "f64" : dtype_name(a->dtype), a->rank, a->dims, 0);
    if (*batch > 0) str_buf_printf(&want, " (the batch of %s)", batch_from);
    diag_error(d, ((diag_loc){path, 0, 0}), "input '%s' expects %s, got %s", t->name, str_buf_cstr(&want),
               str_buf_cstr(&got));
    str_buf_fini(&want), str_buf_fini(&got);
    return false;
  }
  if ((a->is_f64 || a->dtype != t->dtype) && !npy_convert(a, t->dtype, path, d)) return false;
  *batch = b;
  return true;
}

/* As `castor run` prints an output. */
static void summarize(const rt_tensor_desc *t, const int64_t *dims, const void *data) {
  str_buf b;
  str_buf_init(&b);
  rt_tensor_summary(&b, t->name, t->dtype, t->rank, dims, data);
  fputs(str_buf_cstr(&b), stdout);
  str_buf_fini(&b);
}

static void *alloc64(int64_t bytes) {
  size_t n = ((size_t)(bytes > 0 ? bytes : 1) + 63) & ~(size_t)63;
  void *p = aligned_alloc(64, n);
  if (p) memset(p, 0, n);
  return p;
}

/* Registered with atexit by main: standard output flushed and closed, and
 * a write error (a full disk, /dev/full, a file-size limit) reported with
 * exit status 1, so that output cut short never ends in status 0. A
 * descriptor closed before the start (`>&-`) with nothing written is not
 * an error. */
static void close_stdout(void) {
  int e = 0;
  bool bad = ferror(stdout) != 0;
  if (fflush(stdout) != 0) bad = true, e = errno;
  if (fclose(stdout) != 0 && errno != EBADF && !bad) bad = true, e = errno;
  if (!bad) return;
  fprintf(stderr, "%s: error: cannot write standard output%s%s\n", prog_name, e ? ": " : "", e ? strerror(e) : "");
  _exit(1);
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* --benchmark: n more runs, each timed by the monotonic clock; prints the
 * min and the median. The workspace is allocated once, as a server would. */
static bool benchmark(const rt_program *p, const args *c, int64_t batch, void **in, void **out, diag_sink *d) {
  int64_t ws_bytes = 0;
  void *ws = NULL;
  if (rt_program_workspace_bytes(p, batch, &ws_bytes) && ws_bytes > 0 && !(ws = alloc64(ws_bytes))) {
    diag_error(d, (diag_loc){0}, "cannot allocate %" PRId64 " bytes of workspace", ws_bytes);
    return false;
  }
  double *ms = xcalloc((size_t)c->benchmark, sizeof *ms);
  bool ok = true;
  for (int64_t i = 0; i < c->benchmark && ok; i++) {
    int64_t t0 = rt_clock_ns();
    ok = rt_program_run_threads(p, (int)c->threads, batch, (const void *const *)in, out, ws, d);
    ms[i] = (double)(rt_clock_ns() - t0) / 1e6;
  }
  if (ok) {
    qsort(ms, (size_t)c->benchmark, sizeof *ms, cmp_double);
    int64_t n = c->benchmark;
    double med = n % 2 ? ms[n / 2] : (ms[n / 2 - 1] + ms[n / 2]) / 2;
    printf("benchmark: %" PRId64 " runs at batch %" PRId64 ": min %.4f ms, median %.4f ms\n", n, batch, ms[0], med);
  }
  free(ms);
  free(ws);
  return ok;
}

int main(int argc, char **argv) {
  const char *slash = argv[0] ? strrchr(argv[0], '/') : NULL;
  prog_name = slash ? slash + 1 : argv[0] ? argv[0] : prog_name;
  atexit(close_stdout);
  signal(SIGXFSZ, SIG_IGN);
  const rt_aot_entry *en = &castor_aot_entry;
  if (en->abi_version != RT_AOT_ABI_VERSION)
    return error("this executable's model was compiled for AOT ABI %d, its runtime is ABI %d: rebuild it",
                 en->abi_version, RT_AOT_ABI_VERSION);
  /* before any kernel runs: a CPU without the instructions they were
   * compiled for is an error, not SIGILL */
  char lack[64];
  if (rt_cpu_lacks(en->features, lack, sizeof lack))
    return error("this CPU lacks %s, which this executable's kernels use (%s): build it for this CPU "
                 "(castor build --cpu=NAME, e.g. x86-64-v3)",
                 lack, en->about);
  /* kernels of the AMX family need the tile state, granted by Linux per process */
  char why[160];
  if (strstr(en->about, RT_AOT_AMX_MARK) && !rt_amx_request(why, sizeof why))
    return error("this executable's kernels use AMX tiles (%s), but %s: build it for another CPU "
                 "(castor build --cpu=sapphirerapids runs the FMA family)",
                 en->about, why);
  const rt_program *p = en->program;
  args c = {0};
  int rc = parse_args(argc, argv, en, &c);
  if (rc) {
    vec_free(&c.inputs), vec_free(&c.outputs);
    return rc == 2 ? 0 : 1;
  }
  rc = 1;
  diag_sink *d = diag_sink_create();
  void **in = xcalloc((size_t)p->n_inputs + 1, sizeof *in);
  void **out = xcalloc((size_t)p->n_outputs + 1, sizeof *out);
  int64_t batch = -1, dims[RT_MAX_RANK];
  if (c.inputs.len) {
    const char *batch_from = NULL;
    for (int i = 0; i < p->n_inputs; i++) {
      npy_array a;
      if (!read_input(&p->inputs[i], c.inputs.data[i], &a, &batch, batch_from, d) ||
          !rt_check_indices(&p->inputs[i], a.dims, a.data, d)) { /* a gather's indices */
        npy_fini(&a);
        fputs(diag_text(d), stderr);
        goto done;
      }
      bool batched = false;
      for (int r = 0; r < p->inputs[i].rank; r++) batched = batched || p->inputs[i].dims[r] < 0;
      if (batched && !batch_from) batch_from = c.inputs.data[i];
      in[i] = a.data; /* malloc'ed by the reader: ours now */
      a.data = NULL;
      npy_fini(&a);
    }
    if (batch < 0) batch = c.batch;
    if (c.batch_given && batch != c.batch) {
      error("--batch %" PRId64 " does not match the batch of the --input files (%" PRId64 ")", c.batch, batch);
      goto done;
    }
  } else {
    batch = c.batch;
    rng r;
    rng_init(&r, c.seed);
    for (int i = 0; i < p->n_inputs; i++) {
      const rt_tensor_desc *t = &p->inputs[i];
      if (t->dtype != DT_F32) {
        error("input '%s' has dtype %s; random inputs are float32 only, pass --input", t->name,
              dtype_name(t->dtype));
        goto done;
      }
      int64_t n = 1;
      for (int k = 0; k < t->rank; k++)
        if (!size_mul_ok(n, t->dims[k] < 0 ? batch : t->dims[k], &n)) n = -1;
      float *x = n >= 0 && n < INT64_MAX / 4 ? alloc64(n * 4) : NULL;
      if (!x) {
        error("cannot allocate input '%s' for batch %" PRId64, t->name, batch);
        goto done;
      }
      for (int64_t k = 0; k < n; k++) x[k] = rng_uniform_f32(&r, -1.0f, 1.0f);
      in[i] = x;
    }
  }
  for (int i = 0; i < p->n_outputs; i++) {
    const rt_tensor_desc *t = &p->outputs[i];
    int64_t n = dtype_size(t->dtype);
    for (int k = 0; k < t->rank; k++)
      if (!size_mul_ok(n, t->dims[k] < 0 ? batch : t->dims[k], &n)) n = -1;
    if (n < 0 || !(out[i] = alloc64(n))) {
      error("cannot allocate output '%s' for batch %" PRId64, t->name, batch);
      goto done;
    }
  }
  if (!rt_program_run_threads(p, (int)c.threads, batch, (const void *const *)in, out, NULL, d)) {
    fputs(diag_text(d), stderr);
    goto done;
  }
  for (int i = 0; i < p->n_outputs; i++) {
    const rt_tensor_desc *t = &p->outputs[i];
    for (int k = 0; k < t->rank; k++) dims[k] = t->dims[k] < 0 ? batch : t->dims[k];
    summarize(t, dims, out[i]);
  }
  fflush(stdout);
  if (c.benchmark > 0 && !benchmark(p, &c, batch, in, out, d)) {
    fputs(diag_text(d), stderr);
    goto done;
  }
  for (size_t i = 0; i < c.outputs.len; i++) {
    const rt_tensor_desc *t = &p->outputs[i];
    for (int k = 0; k < t->rank; k++) dims[k] = t->dims[k] < 0 ? batch : t->dims[k];
    if (!npy_write(c.outputs.data[i], t->dtype, t->rank, dims, out[i], d)) {
      fputs(diag_text(d), stderr);
      goto done;
    }
  }
  rc = 0;
done:
  for (int i = 0; i < p->n_inputs; i++) free(in[i]);
  for (int i = 0; i < p->n_outputs; i++) free(out[i]);
  free(in), free(out);
  vec_free(&c.inputs), vec_free(&c.outputs);
  diag_sink_destroy(d);
  return rc;
}
