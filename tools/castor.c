/*
 * castor: the command-line driver.
 *
 *   castor run MODEL [--input FILE.npy]... [--output FILE.npy]... [--batch N]
 *                    [--seed S] [--weights FILE] [--policy P] [-O N]
 *   castor dump MODEL [--dump-after=PASS|all] [--dump-dir=DIR] [--passes=LIST]
 *                     [--emit=ir|llvm] [--weights FILE] [--policy P]
 *
 * `run` JIT-compiles through the public API (castor.h) exactly as an
 * embedding program would; `dump` drives the frontend and pass manager
 * directly to show the IR. Diagnostics go to stderr; every error exits 1.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "castor.h"
#include "codegen/codegen.h"
#include "frontend/frontend.h"
#include "passes/passes.h"
#include "runtime/npy.h"

static const char *prog_name = "castor";

static int usage(FILE *f, int rc) {
  fprintf(f,
          "usage: castor COMMAND MODEL [options]\n"
          "\n"
          "castor compiles small neural-network models (.cast files) to native code.\n"
          "\n"
          "commands:\n"
          "  run MODEL     JIT-compile MODEL and run it on the CPU\n"
          "  dump MODEL    print MODEL's IR after the compile pipeline\n"
          "\n"
          "run options:\n"
          "  --input FILE.npy    an input tensor, once per model input, in order\n"
          "                      (default: seeded uniform random values in [-1, 1))\n"
          "  --output FILE.npy   write an output tensor, once per output, in order\n"
          "  --batch N           batch size of the random input (default 1)\n"
          "  --seed S            seed of the random input (default 1)\n"
          "\n"
          "dump options:\n"
          "  --passes=LIST       pipeline to run (default %s)\n"
          "  --dump-after=PASS   also print the IR after PASS, or after every pass ('all')\n"
          "  --dump-dir=DIR      write those dumps to DIR/NN.after-PASS.cir instead\n"
          "  --emit=ir|llvm      print the IR (default) or the optimized LLVM IR\n"
          "  --casts             print the cast report: per layer its compute dtype, the\n"
          "                      rule that decided it, its casts and weight bytes\n"
          "\n"
          "common options:\n"
          "  --weights FILE      weights (.safetensors) instead of the model's 'weights' line\n"
          "  --weights-seed S    seed of the Glorot init when there is no weights file (0)\n"
          "  --policy P          dtype policy instead of the model's 'policy' line: float32,\n"
          "                      float16, bfloat16, mixed_float16 or mixed_bfloat16\n"
          "  --fp32-ops=LIST     force these ops to float32 (IR op names, e.g. gelu,add)\n"
          "  --fp32-layers=LIST  force these layers to float32 (layer names)\n"
          "  --keep-16bit-outputs  leave 16-bit model outputs 16-bit (default: float32)\n"
          "  -O N                LLVM optimization level 0-3 (default 2)\n"
          "  -h, --help          show this help\n"
          "  --version           show the version\n",
          PASS_PIPELINE_DEFAULT);
  return rc;
}

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

typedef struct cli {
  const char *cmd, *model;
  VEC(const char *) inputs;
  VEC(const char *) outputs;
  int64_t batch;
  uint64_t seed, weights_seed;
  const char *weights, *policy, *passes, *dump_after, *dump_dir, *emit, *fp32_ops, *fp32_layers;
  bool casts, keep16;
  int opt_level;
} cli;

static bool parse_int(const char *s, int64_t lo, int64_t hi, int64_t *out) {
  char *end;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (errno || end == s || *end || v < lo || v > hi) return false;
  *out = v;
  return true;
}

/* --name=value or --name value; returns the value or NULL if a is not --name */
static const char *opt_arg(int argc, char **argv, int *i, const char *name, bool *missing) {
  const char *a = argv[*i];
  size_t n = strlen(name);
  if (strncmp(a, name, n) != 0) return NULL;
  if (a[n] == '=') return a + n + 1;
  if (a[n] != 0) return NULL;
  if (*i + 1 >= argc) {
    *missing = true;
    return NULL;
  }
  return argv[++*i];
}

static int parse_args(int argc, char **argv, cli *c) {
  memset(c, 0, sizeof *c);
  c->batch = 1, c->seed = 1, c->opt_level = 2;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v;
    bool missing = false;
    int64_t n;
#define OPT(name) ((v = opt_arg(argc, argv, &i, name, &missing)) != NULL || missing)
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) exit(usage(stdout, 0));
    if (!strcmp(a, "--version")) {
      printf("castor %s\n", castor_version());
      exit(0);
    }
    if (OPT("--input")) {
      if (missing) return error("--input needs a file");
      vec_push(&c->inputs, v);
    } else if (OPT("--output")) {
      if (missing) return error("--output needs a file");
      vec_push(&c->outputs, v);
    } else if (OPT("--batch")) {
      if (missing || !parse_int(v, 1, INT64_C(1) << 40, &n)) return error("--batch needs a positive integer, got '%s'", missing ? "" : v);
      c->batch = n;
    } else if (OPT("--seed")) {
      if (missing || !parse_int(v, 0, INT64_MAX, &n)) return error("--seed needs a non-negative integer, got '%s'", missing ? "" : v);
      c->seed = (uint64_t)n;
    } else if (OPT("--weights-seed")) {
      if (missing || !parse_int(v, 0, INT64_MAX, &n)) return error("--weights-seed needs a non-negative integer, got '%s'", missing ? "" : v);
      c->weights_seed = (uint64_t)n;
    } else if (OPT("--weights")) {
      if (missing) return error("--weights needs a file");
      c->weights = v;
    } else if (OPT("--policy")) {
      if (missing) return error("--policy needs a policy name");
      c->policy = v;
    } else if (OPT("--fp32-ops")) {
      if (missing) return error("--fp32-ops needs a list of op names");
      c->fp32_ops = v;
    } else if (OPT("--fp32-layers")) {
      if (missing) return error("--fp32-layers needs a list of layer names");
      c->fp32_layers = v;
    } else if (!strcmp(a, "--keep-16bit-outputs")) {
      c->keep16 = true;
    } else if (!strcmp(a, "--casts")) {
      c->casts = true;
    } else if (OPT("--passes")) {
      if (missing) return error("--passes needs a pipeline");
      c->passes = v;
    } else if (OPT("--dump-after")) {
      if (missing) return error("--dump-after needs a pass name or 'all'");
      c->dump_after = v;
    } else if (OPT("--dump-dir")) {
      if (missing) return error("--dump-dir needs a directory");
      c->dump_dir = v;
    } else if (OPT("--emit")) {
      if (missing || (strcmp(v, "ir") && strcmp(v, "llvm"))) return error("--emit takes ir or llvm");
      c->emit = v;
    } else if (!strncmp(a, "-O", 2) && a[2]) {
      if (!parse_int(a + 2, 0, 3, &n)) return error("-O takes 0-3, got '%s'", a + 2);
      c->opt_level = (int)n;
    } else if (!strcmp(a, "-O")) {
      if (i + 1 >= argc || !parse_int(argv[++i], 0, 3, &n)) return error("-O takes 0-3");
      c->opt_level = (int)n;
    } else if (a[0] == '-' && a[1]) {
      return error("unknown option '%s' (see castor --help)", a);
    } else if (!c->cmd) {
      c->cmd = a;
    } else if (!c->model) {
      c->model = a;
    } else {
      return error("unexpected argument '%s' (see castor --help)", a);
    }
#undef OPT
  }
  if (!c->cmd) return usage(stderr, 1);
  if (strcmp(c->cmd, "run") && strcmp(c->cmd, "dump"))
    return error("unknown command '%s' (commands: run, dump)", c->cmd);
  if (!c->model) return error("%s: no model file given", c->cmd);
  return 0;
}

/* ---- dump ---- */

static int cmd_dump(const cli *c) {
  diag_sink *d = diag_sink_create();
  fe_options fo;
  fe_options_init(&fo);
  fo.seed = c->weights_seed;
  fo.weights_path = c->weights;
  int rc = 1;
  str_buf out;
  str_buf_init(&out);
  const char *pipeline = c->passes ? c->passes : PASS_PIPELINE_DEFAULT;
  ir_graph *g = pass_pipeline_check(pipeline, d) ? fe_load_file(c->model, &fo, d) : NULL;
  if (g && c->policy && !ir_policy_from_name(c->policy, strlen(c->policy), &g->policy)) {
    diag_error(d, (diag_loc){0}, "unknown policy '%s' (float32, float16, bfloat16, mixed_float16, mixed_bfloat16)", c->policy);
  } else if (g) {
    pass_options po;
    pass_options_init(&po);
    po.verify_each = true;
    po.dump_after = c->dump_after;
    po.dump_dir = c->dump_dir;
    po.dump_out = &out;
    po.autocast.fp32_ops = c->fp32_ops;
    po.autocast.fp32_layers = c->fp32_layers;
    po.autocast.keep_16bit_outputs = c->keep16;
    if (pass_run_pipeline(g, pipeline, &po, d)) {
      if (c->casts) {
        pass_cast_report(g, &out);
        rc = 0;
      } else if (c->emit && !strcmp(c->emit, "llvm")) {
        cg_options co;
        cg_options_init(&co);
        co.opt_level = c->opt_level;
        co.dump_llvm = &out;
        rt_program *p = cg_compile_cpu(g, &co, d);
        rc = p ? 0 : 1;
        rt_program_destroy(p);
      } else {
        ir_print(g, &out);
        rc = 0;
      }
    }
  }
  fputs(str_buf_cstr(&out), stdout);
  fputs(diag_text(d), stderr);
  str_buf_fini(&out);
  ir_graph_destroy(g);
  diag_sink_destroy(d);
  return rc;
}

/* ---- run ---- */

static void summarize(const castor_tensor_info *info, castor_tensor *t) {
  const int64_t *dims = castor_tensor_dims(t);
  int rank = castor_tensor_rank(t);
  printf("%s: %s[", info->name, castor_dtype_name(castor_tensor_dtype(t)));
  for (int r = 0; r < rank; r++) printf("%s%" PRId64, r ? "," : "", dims[r]);
  printf("]");
  if (castor_tensor_dtype(t) != CASTOR_F32) {
    printf("\n");
    return;
  }
  const float *x = castor_tensor_data(t);
  int64_t n = castor_tensor_numel(t);
  double lo = INFINITY, hi = -INFINITY, sum = 0;
  for (int64_t i = 0; i < n; i++) {
    lo = x[i] < lo ? x[i] : lo;
    hi = x[i] > hi ? x[i] : hi;
    sum += x[i];
  }
  printf(" min %.6g max %.6g mean %.6g", lo, hi, n ? sum / (double)n : 0.0);
  if (rank >= 1) {
    int64_t rows = dims[0], cols = n / (rows ? rows : 1), show = rows < 8 ? rows : 8;
    printf(" argmax [");
    for (int64_t r = 0; r < show; r++) {
      int64_t best = 0;
      for (int64_t j = 1; j < cols; j++)
        if (x[r * cols + j] > x[r * cols + best]) best = j;
      printf("%s%" PRId64, r ? ", " : "", best);
    }
    printf("%s]", rows > show ? ", ..." : "");
  }
  printf("\n");
}

static int cmd_run(const cli *c) {
  castor_context *ctx = NULL;
  castor_model *m = NULL;
  castor_program *p = NULL;
  castor_tensor **in = NULL, **out = NULL;
  int n_in = 0, n_out = 0, rc = 1;
  diag_sink *d = diag_sink_create();
  castor_context_create(&ctx);
  castor_load_options lo;
  castor_load_options_init(&lo);
  lo.seed = c->weights_seed;
  lo.weights_path = c->weights;
  castor_compile_options co;
  castor_compile_options_init(&co);
  co.policy = c->policy;
  co.opt_level = c->opt_level;
  co.fp32_ops = c->fp32_ops;
  co.fp32_layers = c->fp32_layers;
  co.keep_16bit_outputs = c->keep16;
  if (castor_model_load_file(ctx, c->model, &lo, &m) != CASTOR_OK ||
      (fputs(castor_context_last_warnings(ctx), stderr), castor_compile(m, &co, &p)) != CASTOR_OK) {
    fputs(castor_context_last_error(ctx), stderr);
    goto done;
  }
  fputs(castor_context_last_warnings(ctx), stderr);
  n_in = castor_program_num_inputs(p), n_out = castor_program_num_outputs(p);
  if (c->inputs.len && (int)c->inputs.len != n_in) {
    error("model '%s' has %d input(s), got %zu --input file(s)", c->model, n_in, c->inputs.len);
    goto done;
  }
  if (c->outputs.len > (size_t)n_out) {
    error("model '%s' has %d output(s), got %zu --output file(s)", c->model, n_out, c->outputs.len);
    goto done;
  }
  in = xcalloc((size_t)n_in + 1, sizeof *in);
  out = xcalloc((size_t)n_out + 1, sizeof *out);
  rng r;
  rng_init(&r, c->seed);
  for (int i = 0; i < n_in; i++) {
    castor_tensor_info info;
    castor_program_input_info(p, i, &info);
    int64_t dims[4];
    if (c->inputs.len) {
      rt_npy a;
      if (!rt_npy_read(c->inputs.data[i], &a, d) ||
          (info.dtype == CASTOR_F32 && !rt_npy_to_f32(&a, c->inputs.data[i], d))) {
        rt_npy_fini(&a);
        fputs(diag_text(d), stderr);
        goto done;
      }
      if (castor_tensor_create(ctx, (castor_dtype)a.dtype, a.rank, a.dims, &in[i]) != CASTOR_OK) {
        rt_npy_fini(&a);
        fputs(castor_context_last_error(ctx), stderr);
        goto done;
      }
      memcpy(castor_tensor_data(in[i]), a.data, (size_t)a.nbytes);
      rt_npy_fini(&a);
      continue;
    }
    for (int k = 0; k < info.rank; k++) dims[k] = info.dims[k] < 0 ? c->batch : info.dims[k];
    if (info.dtype != CASTOR_F32) {
      error("input '%s' has dtype %s; random inputs are float32 only, pass --input", info.name,
            castor_dtype_name(info.dtype));
      goto done;
    }
    if (castor_tensor_create(ctx, info.dtype, info.rank, dims, &in[i]) != CASTOR_OK) {
      fputs(castor_context_last_error(ctx), stderr);
      goto done;
    }
    float *x = castor_tensor_data(in[i]);
    for (int64_t k = 0; k < castor_tensor_numel(in[i]); k++) x[k] = rng_uniform_f32(&r, -1.0f, 1.0f);
  }
  if (castor_program_run(p, in, n_in, out, n_out) != CASTOR_OK) {
    fputs(castor_context_last_error(ctx), stderr);
    goto done;
  }
  for (int i = 0; i < n_out; i++) {
    castor_tensor_info info;
    castor_program_output_info(p, i, &info);
    summarize(&info, out[i]);
  }
  for (size_t i = 0; i < c->outputs.len; i++) {
    castor_tensor *t = out[i];
    if (!rt_npy_write(c->outputs.data[i], (rt_dtype)castor_tensor_dtype(t), castor_tensor_rank(t),
                      castor_tensor_dims(t), castor_tensor_data(t), d)) {
      fputs(diag_text(d), stderr);
      goto done;
    }
  }
  rc = 0;
done:
  for (int i = 0; in && i < n_in; i++) castor_tensor_destroy(in[i]);
  for (int i = 0; out && i < n_out; i++) castor_tensor_destroy(out[i]);
  free(in), free(out);
  castor_program_destroy(p);
  castor_model_destroy(m);
  castor_context_destroy(ctx);
  diag_sink_destroy(d);
  return rc;
}

int main(int argc, char **argv) {
  cli c;
  if (argc < 2) return usage(stderr, 1);
  int rc = parse_args(argc, argv, &c);
  if (rc == 0) rc = !strcmp(c.cmd, "dump") ? cmd_dump(&c) : cmd_run(&c);
  vec_free(&c.inputs);
  vec_free(&c.outputs);
  return rc;
}
