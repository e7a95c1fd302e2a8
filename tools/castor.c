/* SPDX-License-Identifier: Apache-2.0 */
/*
 * castor: the command-line driver.
 *
 *   castor run MODEL [--input FILE]... [--output FILE.npy]... [--batch N]
 *                    [--seed S] [--weights FILE] [--policy P] [-O N]
 *   castor dump MODEL [--dump-after=PASS|all] [--dump-dir=DIR] [--passes=LIST]
 *                     [--emit=ir|llvm|ptx|dot|svg|png] [--weights FILE] [--policy P]
 *                     [--train [castor train's training options]]
 *   castor train / evaluate: castor_train.c
 *   both: [--target=cpu|cuda] [--device N] [--sm=sm_NN] [--cpu=NAME]; run: [--repeat N]
 *   castor check MODEL ...   (castor_check.c), castor build MODEL ... (castor_build.c)
 *
 * Both commands go through the API: `run` through the public castor.h
 * exactly as an embedding program would, `dump` through the same compile
 * driver (castor_model_dump, api/internal.h), so what `dump` shows is what
 * `run` compiles. Diagnostics go to stderr; every error exits 1.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "castor.h"
#include "api/internal.h"
#include "passes/passes.h" /* PASS_PIPELINE_DEFAULT for --help */
#include "tools/castor_build.h"
#include "tools/castor_check.h"
#include "tools/castor_train.h"
#include "tools/train_options.h"
#include "tools/options.h"
#include "util/atomic_file.h"

static const char *prog_name = "castor";

/* castor's own help: the commands; each command's --help lists its options. */
static int usage(FILE *f, int rc) {
  fputs("usage: castor COMMAND MODEL [options]\n"
        "\n"
        "castor compiles small neural-network models (.keras, .onnx and .cast files) to\n"
        "native code.\n"
        "\n"
        "commands:\n"
        "  run MODEL       JIT-compile MODEL and run it on this CPU (or a GPU)\n"
        "  dump MODEL      print MODEL's IR after the compile pipeline, its LLVM IR,\n"
        "                  PTX, cast report or graph\n"
        "  summary MODEL   MODEL's layers: op, output shape, parameters, compute dtype\n"
        "                  and weight bytes under the policy (castor dump --summary)\n"
        "  build MODEL     compile MODEL ahead of time to an executable or an object\n"
        "                  file and C header\n"
        "  check MODEL     compare MODEL under its policy with float32, layer by layer,\n"
        "                  and find the smallest --fp32-layers fix; with --train, its\n"
        "                  gradients against float16's range\n"
        "  train MODEL     train MODEL on data, Keras style\n"
        "  evaluate MODEL  the loss and accuracy of MODEL on data\n"
        "\n"
        "castor COMMAND --help lists a command's options.\n"
        "  -h, --help      show this help\n"
        "  --version       show the version\n",
        f);
  return rc;
}

/* The load and compile options run and dump share. */
static const char common_help[] =
    "  --weights FILE      weights (.safetensors) instead of the model's 'weights' line\n"
    "                      (.cast), or in place of an ONNX model's, by key\n"
    "  --weights-seed S    seed of the init (Keras's initializers) without a weights file (0)\n"
    "  --bind NAME=FILE    ONNX models: bind graph input NAME to the data in FILE (.npy,\n"
    "                      or an ONNX TensorProto .pb): a shape, axes or bounds an op\n"
    "                      needs at compile time; the input becomes a constant\n"
    "  --dim NAME=VALUE    ONNX models: bind the symbolic dimension NAME (a dim_param,\n"
    "                      e.g. sequence) to VALUE: the model compiles for that size\n"
    "  --policy P          dtype policy instead of the model's 'policy' line: float32,\n"
    "                      float16, bfloat16, mixed_float16 or mixed_bfloat16\n"
    "  --fp32-ops=LIST     force these ops to float32 (IR op names, e.g. gelu,add)\n"
    "  --fp32-layers=LIST  force these layers to float32 (layer names)\n"
    "  --keep-16bit-outputs  leave 16-bit model outputs 16-bit (default: float32)\n"
    "  --pad8              pad 16-bit matmuls to multiples of 8 on the CPU too\n"
    "                      (always on for --target=cuda)\n"
    "  -O N                LLVM optimization level 0-3 (default 2: castor's short\n"
    "                      kernel pipeline; 1 and 3: LLVM's default<O1>/<O3>)\n"
    "  --target=cpu|cuda   run on this CPU (default) or an NVIDIA GPU (sm_80 or newer,\n"
    "                      through the CUDA driver); cuda pads 16-bit matmuls (pad8)\n"
    "  --device N          the CUDA device (default $CASTOR_DEVICE, else 0)\n"
    "  --sm=sm_NN          PTX architecture (default: the device's; sm_80 without one)\n"
    "  --threads T         CPU threads (default $CASTOR_NUM_THREADS, else all)\n"
    "  --cpu=NAME          compile for this CPU instead of the host's (default\n"
    "                      $CASTOR_CPU): x86-64, x86-64-v2, x86-64-v3 (AVX2),\n"
    "                      x86-64-v4 (AVX-512), haswell, znver3, skylake-avx512,\n"
    "                      znver4, cooperlake, sapphirerapids, sapphirerapids-amx\n"
    "                      (AMX tiles; named only) or host; it must be one this\n"
    "                      host can run\n"
    "  --conv-algo=ALGO    3x3 stride-1 float32 convolutions: auto (default\n"
    "                      $CASTOR_CONV_ALGO, else auto: Winograd F(4x4,3x3) where\n"
    "                      it pays), direct (never Winograd: the usual bits) or\n"
    "                      winograd (wherever it applies); sets $CASTOR_CONV_ALGO\n"
;

static int usage_run(FILE *f, int rc) {
  fprintf(f,
          "usage: castor run MODEL [--input FILE]... [--output FILE.npy]... [options]\n"
          "\n"
          "JIT-compiles MODEL for this CPU (or --target=cuda) and runs it once; prints each\n"
          "output's name, dtype, shape and a summary (min, max, mean, argmax).\n"
          "\n"
          "options:\n"
          "  --input FILE        an input tensor, once per model input, in order: a .npy or\n"
          "                      IDX (MNIST's format) file, gzipped or not, of any numeric\n"
          "                      dtype, or a PNG image ([1, H, W] gray, else [1, H, W, C]),\n"
          "                      converted to the input's dtype: to a float, rounded (uint8\n"
          "                      and pixels are not scaled); to an integer, whole values\n"
          "                      that fit (else an error naming the element); to bool,\n"
          "                      nonzero is true. Samples of another shape with the same\n"
          "                      values feed an input [N, k], and [n, H, W] feeds [N, H, W, 1].\n"
          "                      Without --input: seeded uniform random values in [-1, 1),\n"
          "                      said so on stderr\n"
          "  --output FILE.npy   write an output tensor, once per output, in order\n"
          "  --batch N           the batch: binds the symbolic batch N to N rows and compiles\n"
          "                      with static shapes (also the random input's rows; default\n"
          "                      1, N symbolic)\n"
          "  --seed S            seed of the random input (default 1)\n"
          "  --repeat N          also time N runs after a warm-up and print the median\n"
          "                      (cuda: device time of the kernels, no copies), GFLOP/s\n"
          "                      and the compile time (wall, and CPU time of all threads)\n"
          "  --stats             print the memory of a run (weights, activations),\n"
          "                      and a note if the CPU's named GEMM family is not used\n"
          "  --profile           time every kernel launch over --repeat runs (default 10)\n"
          "                      and print a table per kernel and per layer: time a run,\n"
          "                      share of the run, GFLOP/s, bytes moved (cpu target)\n"
          "  --profile-json FILE also write those runs as a Chrome trace (Perfetto,\n"
          "                      chrome://tracing)\n"
          "%s"
          "  -h, --help          show this help\n",
          common_help);
  return rc;
}

static int usage_dump(FILE *f, int rc) {
  fprintf(f,
          "usage: castor dump MODEL [options]\n"
          "\n"
          "Prints MODEL's IR after the compile pipeline (the one castor run compiles), or\n"
          "what --emit or --casts asks for.\n"
          "\n"
          "options:\n"
          "  --passes=LIST       pipeline to run (default %s)\n"
          "  --dump-after=PASS   also print the IR after PASS, or after every pass ('all')\n"
          "  --dump-dir=DIR      write those dumps to DIR/NN.after-PASS.cir instead\n"
          "  --emit=ir|llvm|ptx  print the IR (default), the optimized LLVM IR, or the PTX\n"
          "                      (--target=cuda; no GPU needed)\n"
          "  --emit=dot|svg|png  the final IR as a Graphviz graph: DOT text, or SVG/PNG\n"
          "                      rendered by Graphviz's dot (apt-get install graphviz);\n"
          "                      svg and png need -o FILE when stdout is a terminal\n"
          "  -o FILE             write the output to FILE instead of stdout\n"
          "  --casts             print the cast report: per layer its compute dtype, the\n"
          "                      rule that decided it, its casts and weight bytes\n"
          "  --summary           print the model summary (as castor summary MODEL)\n"
          "  --train             the training step instead (forward, loss, gradients,\n"
          "                      optimizer update), with the training options of\n"
          "                      castor train (--loss, --optimizer, ...: castor train --help)\n"
          "%s"
          "  -h, --help          show this help\n",
          PASS_PIPELINE_DEFAULT, common_help);
  return rc;
}

static int usage_summary(FILE *f, int rc) {
  fprintf(f,
          "usage: castor summary MODEL [options]\n"
          "\n"
          "Prints MODEL's layers as compiled: per layer its op, output shape, parameter\n"
          "count, compute dtype and weight bytes under the policy, then the totals (the\n"
          "same table as castor dump --summary).\n"
          "\n"
          "options:\n"
          "  -o FILE             write the summary to FILE instead of stdout\n"
          "%s"
          "  -h, --help          show this help\n",
          common_help);
  return rc;
}

typedef struct cli {
  const char *cmd, *model;
  VEC(const char *) inputs;
  VEC(const char *) outputs;
  int64_t batch;
  uint64_t seed;
  const char *passes, *dump_after, *dump_dir, *emit, *out_path;
  bool casts, train, summary;
  cli_train_options train_opts; /* with --train (tools/train_options.h) */
  const char *train_opt;        /* the first training option given */
  cli_options opts; /* the shared load and compile options (tools/options.h) */
  int repeat;
  bool stats, profile;
  const char *profile_json;
} cli;

/* The shared options run and dump take: all of them. */
enum {
  RUN_OPTIONS = CLI_OPT_LOAD | CLI_OPT_POLICY | CLI_OPT_AUTOCAST | CLI_OPT_OPT | CLI_OPT_TARGET |
                CLI_OPT_CPU | CLI_OPT_THREADS
};

/* parse_args' answer when --help or --version was printed: exit 0. It
 * never exits itself, so that tests/fuzz/fuzz_cli.c can fuzz it. */
enum { CLI_EXIT = -1 };

static int parse_args(int argc, char **argv, cli *c) {
  memset(c, 0, sizeof *c);
  c->batch = 1, c->seed = 1;
  cli_train_options_init(&c->train_opts);
  cli_options_init(&c->opts);
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v;
    bool missing = false;
    int64_t n;
#define OPT(name) ((v = str_opt_arg(argc, argv, &i, name, &missing)) != NULL || missing)
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      cli_usage_fn u = !c->cmd                      ? usage
                       : !strcmp(c->cmd, "run")     ? usage_run
                       : !strcmp(c->cmd, "dump")    ? usage_dump
                       : !strcmp(c->cmd, "summary") ? usage_summary
                                                    : usage;
      return u(stdout, 0), CLI_EXIT;
    }
    if (!strcmp(a, "--version")) {
      printf("castor %s\n", castor_version());
      return CLI_EXIT;
    }
    cli_opt_result shared = cli_options_parse(&c->opts, RUN_OPTIONS, argc, argv, &i);
    if (shared == CLI_OPT_ERROR) return 1;
    if (shared == CLI_OPT_TAKEN) continue;
    cli_opt_result tr = cli_train_options_parse(&c->train_opts, argc, argv, &i);
    if (tr == CLI_OPT_ERROR) return 1;
    if (tr == CLI_OPT_TAKEN) {
      if (!c->train_opt) c->train_opt = a;
      continue;
    }
    if (OPT("--input")) {
      if (missing) return cli_error("--input needs a file");
      vec_push(&c->inputs, v);
    } else if (OPT("--output")) {
      if (missing) return cli_error("--output needs a file");
      vec_push(&c->outputs, v);
    } else if (OPT("--batch")) {
      if (!cli_parse_int("--batch", v, missing, 1, INT64_C(1) << 40, "2^40", "a positive integer", &n)) return 1;
      c->batch = c->opts.compile.batch = n; /* binds N: static shapes */
    } else if (OPT("--seed")) {
      if (missing || !str_parse_i64(v, 0, INT64_MAX, &n)) return cli_error("--seed needs a non-negative integer, got '%s'", missing ? "" : v);
      c->seed = (uint64_t)n;
    } else if (!strcmp(a, "--casts")) {
      c->casts = true;
    } else if (!strcmp(a, "--summary")) {
      c->summary = true;
    } else if (!strcmp(a, "--train")) {
      c->train = true;
    } else if (OPT("--passes")) {
      if (missing) return cli_error("--passes needs a pipeline");
      c->passes = v;
    } else if (OPT("--dump-after")) {
      if (missing) return cli_error("--dump-after needs a pass name or 'all'");
      c->dump_after = v;
    } else if (OPT("--dump-dir")) {
      if (missing) return cli_error("--dump-dir needs a directory");
      c->dump_dir = v;
    } else if (OPT("-o")) {
      if (missing || !*v) return cli_error("-o needs an output file");
      c->out_path = v;
    } else if (OPT("--emit")) {
      if (missing || (strcmp(v, "ir") && strcmp(v, "llvm") && strcmp(v, "ptx") && strcmp(v, "dot") && strcmp(v, "svg") &&
                      strcmp(v, "png")))
        return cli_error("--emit takes ir, llvm, ptx, dot, svg or png");
      c->emit = v;
    } else if (!strcmp(a, "--stats")) {
      c->stats = true;
    } else if (!strcmp(a, "--profile")) {
      c->profile = true;
    } else if (OPT("--profile-json")) {
      if (missing) return cli_error("--profile-json needs a file");
      c->profile_json = v;
      c->profile = true;
    } else if (OPT("--repeat")) {
      if (!cli_parse_int("--repeat", v, missing, 1, 100000, "10^5", "a positive integer", &n)) return 1;
      c->repeat = (int)n;
    } else if (a[0] == '-' && a[1]) {
      bool run = c->cmd && !strcmp(c->cmd, "run"),
           dump = c->cmd && (!strcmp(c->cmd, "dump") || !strcmp(c->cmd, "summary"));
      bool summary = c->cmd && !strcmp(c->cmd, "summary");
      return cli_unknown_option(a, run || dump ? c->cmd : "", run       ? usage_run
                                                              : summary ? usage_summary
                                                              : dump    ? usage_dump
                                                                        : usage);
    } else if (!c->cmd) {
      c->cmd = a;
    } else if (!c->model) {
      c->model = a;
    } else {
      return cli_error("unexpected argument '%s' (see castor --help)", a);
    }
#undef OPT
  }
  if (!c->cmd) return usage(stderr, 1);
  if (strcmp(c->cmd, "run") && strcmp(c->cmd, "dump") && strcmp(c->cmd, "summary"))
    return cli_error("unknown command '%s' (commands: run, dump, summary, build, check, train, evaluate)", c->cmd);
  if (!strcmp(c->cmd, "summary")) c->summary = true;
  if (c->summary && !strcmp(c->cmd, "run")) return cli_error("--summary is an option of castor dump");
  if (c->summary && c->train)
    return cli_error("--summary and --train exclude each other: the summary describes the model as compiled "
                     "for inference (its layers are the ones training trains)");
  if (c->profile && strcmp(c->cmd, "run")) return cli_error("--profile and --profile-json are options of castor run");
  if (!c->model) return cli_error("%s: no model file given (see castor %s --help)", c->cmd, c->cmd);
  if (c->out_path && !strcmp(c->cmd, "run"))
    return cli_error("-o is an option of castor dump; castor run writes outputs with --output FILE.npy");
  if (!strcmp(c->cmd, "dump") && c->emit && !c->casts && (!strcmp(c->emit, "svg") || !strcmp(c->emit, "png")) &&
      cli_stdout_is_tty(c->out_path))
    return cli_error("--emit=%s writes an image, not text for a terminal: give -o FILE.%s (or redirect stdout)",
                     c->emit, c->emit);
  if (c->train_opt && (!c->train || strcmp(c->cmd, "dump")))
    return cli_error("%s is a training option: castor dump --train (or castor train) takes it", c->train_opt);
  if (c->train && !cli_train_options_check(&c->train_opts)) return 1;
  return 0;
}

/* ---- dump ---- */

static castor_status load_model(const cli *c, castor_context *ctx, castor_model **m) {
  return cli_load_model(ctx, c->model, &c->opts, m);
}

/* castor run runs one batch: a model that does not load with a symbolic
 * batch (an ONNX export that computes with it, as a transformer's attention
 * mask does: the importer asks for --batch B), with no --batch given, is
 * loaded again with the batch of the first --input file (a .npy), as
 * --batch would bind it. If that fails too, the first load's errors are
 * reported. */
static castor_status load_model_for_inputs(const cli *c, castor_context *ctx, castor_compile_options *co,
                                           castor_model **m) {
  if (co->batch > 0 || !c->inputs.len) return load_model(c, ctx, m);
  castor_status st = cli_load_model_batch(ctx, c->model, &c->opts, 0, true, m);
  if (st == CASTOR_OK) return st;
  char *first = strdup(castor_context_last_error(ctx));
  castor_tensor *t = NULL;
  int64_t batch = 0;
  if (castor_tensor_load_npy(ctx, c->inputs.data[0], &t) == CASTOR_OK && castor_tensor_rank(t) >= 1)
    batch = castor_tensor_dims(t)[0];
  castor_tensor_destroy(t);
  if (batch > 0 && cli_load_model_batch(ctx, c->model, &c->opts, batch, true, m) == CASTOR_OK) {
    co->batch = batch; /* its warnings printed by cli_load_model_batch (quiet keeps only errors back) */
    st = CASTOR_OK;
  } else {
    cli_put_diags(first); /* the model's errors as given, without the binding */
  }
  free(first);
  return st;
}

static int cmd_dump(const cli *c) {
  castor_context *ctx = NULL;
  castor_model *m = NULL;
  castor_context_create(&ctx);
  str_buf out;
  str_buf_init(&out);
  int rc = 1;
  if (c->out_path) { /* before the compile, not after */
    diag_sink *d = diag_sink_create();
    bool ok = atomic_file_check(c->out_path, d);
    cli_put_diags(diag_text(d));
    diag_sink_destroy(d);
    const cli_file ins[] = {{"model file", c->model}, {"--weights file", c->opts.load.weights_path}};
    if (!ok || !cli_outputs_distinct(ins, 2, &(cli_file){"-o", c->out_path}, 1)) goto done;
  }
  if (load_model(c, ctx, &m) == CASTOR_OK) {
    castor_compile_options co = c->opts.compile;
    castor_driver_options dopts;
    castor_driver_options_init(&dopts);
    dopts.passes = c->passes;
    dopts.dump_after = c->dump_after;
    dopts.dump_dir = c->dump_dir;
    dopts.dump_out = &out;
    dopts.verify_each = true;
    if (c->train) dopts.train = &c->train_opts.to;
    castor_emit what = c->summary ? CASTOR_EMIT_SUMMARY
                       : c->casts ? CASTOR_EMIT_CASTS
                       : !c->emit || !strcmp(c->emit, "ir") ? CASTOR_EMIT_IR
                       : !strcmp(c->emit, "llvm") ? CASTOR_EMIT_LLVM
                       : !strcmp(c->emit, "ptx")  ? CASTOR_EMIT_PTX
                                                  : CASTOR_EMIT_DOT;
    castor_status st = castor_model_dump(m, &co, &dopts, what, &out);
    cli_put_diags(st == CASTOR_OK ? castor_context_last_warnings(ctx) : castor_context_last_error(ctx));
    rc = st == CASTOR_OK ? 0 : 1;
    if (st == CASTOR_OK && c->emit && !c->casts && !c->summary && (!strcmp(c->emit, "svg") || !strcmp(c->emit, "png"))) {
      fflush(stdout);
      rc = castor_render_dot(str_buf_cstr(&out), c->emit, c->out_path); /* tools/castor_check.c */
    } else if (st == CASTOR_OK && c->out_path) {
      diag_sink *d = diag_sink_create();
      if (!atomic_file_write_all(c->out_path, str_buf_cstr(&out), out.len, d)) rc = 1;
      cli_put_diags(diag_text(d));
      diag_sink_destroy(d);
    } else {
      fputs(str_buf_cstr(&out), stdout);
    }
  }
done:
  str_buf_fini(&out);
  castor_model_destroy(m);
  castor_context_destroy(ctx);
  return rc;
}

/* ---- run ---- */

static void summarize(const castor_tensor_info *info, castor_tensor *t) {
  str_buf b;
  str_buf_init(&b);
  castor_tensor_summary(t, info->name, &b);
  fputs(str_buf_cstr(&b), stdout);
  str_buf_fini(&b);
}

/* NaN and Inf are reported, never only summarized: an input read from a
 * file (`from`), or an output, with the command that finds their origin. */
static void warn_nonfinite(const char *what, const char *name, const castor_tensor *t, const cli *c,
                           const char *from) {
  str_buf b;
  str_buf_init(&b);
  if (castor_tensor_nonfinite(t, &b)) {
    fprintf(stderr, "%s: warning: %s '%s'%s%s%s has %s of %lld values", prog_name, what, name, from ? " (" : "",
            from ? from : "", from ? ")" : "", str_buf_cstr(&b), (long long)castor_tensor_numel(t));
    if (!from)
      fprintf(stderr, "; 'castor check %s%s%s' finds the layer that produces them", c->model,
              c->opts.load.weights_path ? " --weights " : "",
              c->opts.load.weights_path ? c->opts.load.weights_path : "");
    fputc('\n', stderr);
  }
  str_buf_fini(&b);
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* castor run --profile: the table on stdout, the trace into its file. */
static bool run_profile(const cli *c, castor_context *ctx, castor_program *p, castor_tensor **in, int n_in) {
  str_buf table, trace;
  str_buf_init(&table), str_buf_init(&trace);
  bool ok = castor_program_profile(p, in, n_in, c->repeat > 0 ? c->repeat : 10, &table,
                                   c->profile_json ? &trace : NULL) == CASTOR_OK;
  if (!ok) cli_put_diags(castor_context_last_error(ctx));
  else fputs(str_buf_cstr(&table), stdout);
  if (ok && c->profile_json) {
    diag_sink *d = diag_sink_create();
    ok = atomic_file_write_all(c->profile_json, str_buf_cstr(&trace), trace.len, d);
    cli_put_diags(diag_text(d));
    diag_sink_destroy(d);
  }
  str_buf_fini(&table), str_buf_fini(&trace);
  return ok;
}

static int cmd_run(const cli *c) {
  castor_context *ctx = NULL;
  castor_model *m = NULL;
  castor_program *p = NULL;
  castor_tensor **in = NULL, **out = NULL;
  int n_in = 0, n_out = 0, rc = 1;
  { /* --output onto the model, its weights, an --input or another --output: refused before the work */
    size_t ni = c->inputs.len + 2;
    cli_file *fi = xcalloc(ni, sizeof *fi), *fo = xcalloc(c->outputs.len + 1, sizeof *fo);
    fi[0] = (cli_file){"model file", c->model}, fi[1] = (cli_file){"--weights file", c->opts.load.weights_path};
    for (size_t i = 0; i < c->inputs.len; i++) fi[i + 2] = (cli_file){"--input file", c->inputs.data[i]};
    for (size_t i = 0; i < c->outputs.len; i++) fo[i] = (cli_file){"--output", c->outputs.data[i]};
    bool ok = cli_outputs_distinct(fi, (int)ni, fo, (int)c->outputs.len);
    free(fi), free(fo);
    if (!ok) return 1;
  }
  castor_context_create(&ctx);
  castor_compile_options co = c->opts.compile;
  struct timespec t0, t1, c0, c1;
  if (load_model_for_inputs(c, ctx, &co, &m) != CASTOR_OK) goto done;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c0);
  if (castor_compile(m, &co, &p) != CASTOR_OK) {
    cli_put_diags(castor_context_last_error(ctx));
    goto done;
  }
  clock_gettime(CLOCK_MONOTONIC, &t1);
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c1);
  double compile_ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
  /* CPU time of every thread: the work, whatever else the machine is doing */
  double compile_cpu_ms = (double)(c1.tv_sec - c0.tv_sec) * 1e3 + (double)(c1.tv_nsec - c0.tv_nsec) / 1e6;
  cli_put_diags(castor_context_last_warnings(ctx));
  n_in = castor_program_num_inputs(p), n_out = castor_program_num_outputs(p);
  if (c->inputs.len && (int)c->inputs.len != n_in) {
    cli_error("model '%s' has %d input(s), got %zu --input file(s)", c->model, n_in, c->inputs.len);
    goto done;
  }
  if (c->outputs.len > (size_t)n_out) {
    cli_error("model '%s' has %d output(s), got %zu --output file(s)", c->model, n_out, c->outputs.len);
    goto done;
  }
  in = xcalloc((size_t)n_in + 1, sizeof *in);
  out = xcalloc((size_t)n_out + 1, sizeof *out);
  rng r;
  rng_init(&r, c->seed);
  for (int i = 0; i < n_in; i++) {
    castor_tensor_info info;
    castor_program_input_info(p, i, &info);
    int64_t dims[CASTOR_MAX_RANK];
    if (c->inputs.len) {
      if (cli_load_input(ctx, c->inputs.data[i], info.dtype, &info, &in[i]) != CASTOR_OK) goto done;
      warn_nonfinite("input", info.name, in[i], c, c->inputs.data[i]);
      continue;
    }
    for (int k = 0; k < info.rank; k++) dims[k] = info.dims[k] < 0 ? c->batch : info.dims[k];
    if (info.dtype != CASTOR_F32) {
      cli_error("input '%s' has dtype %s; random inputs are float32 only, pass --input", info.name,
            castor_dtype_name(info.dtype));
      goto done;
    }
    if (castor_tensor_create(ctx, info.dtype, info.rank, dims, &in[i]) != CASTOR_OK) {
      cli_put_diags(castor_context_last_error(ctx));
      goto done;
    }
    float *x = castor_tensor_data(in[i]);
    for (int64_t k = 0; k < castor_tensor_numel(in[i]); k++) x[k] = rng_uniform_f32(&r, -1.0f, 1.0f);
    fprintf(stderr, "%s: no --input: input '%s' is %s[", prog_name, info.name, castor_dtype_name(info.dtype));
    for (int k = 0; k < info.rank; k++) fprintf(stderr, "%s%lld", k ? "," : "", (long long)dims[k]);
    fprintf(stderr, "] of seeded random values in [-1, 1) (--seed %llu)\n", (unsigned long long)c->seed);
  }
  if (castor_program_run(p, in, n_in, out, n_out) != CASTOR_OK) {
    cli_put_diags(castor_context_last_error(ctx));
    goto done;
  }
  for (int i = 0; i < n_out; i++) {
    castor_tensor_info info;
    castor_program_output_info(p, i, &info);
    summarize(&info, out[i]);
  }
  for (int i = 0; i < n_out; i++) {
    castor_tensor_info info;
    castor_program_output_info(p, i, &info);
    warn_nonfinite("output", info.name, out[i], c, NULL);
  }
  if (c->repeat > 0) {
    double *ms = xcalloc((size_t)c->repeat, sizeof *ms);
    struct timespec r0, r1;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &r0);
    castor_status ts = castor_program_time(p, in, n_in, 3, c->repeat, ms);
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &r1);
    if (ts != CASTOR_OK) {
      cli_put_diags(castor_context_last_error(ctx));
      free(ms);
      goto done;
    }
    qsort(ms, (size_t)c->repeat, sizeof *ms, cmp_double);
    castor_run_stats rs = {0};
    castor_program_stats(p, c->batch, &rs);
    double med = c->repeat % 2 ? ms[c->repeat / 2] : (ms[c->repeat / 2 - 1] + ms[c->repeat / 2]) / 2;
    printf("compile: %.1f ms (cpu %.1f ms)\n", compile_ms, compile_cpu_ms);
    printf("time: median %.4f ms, min %.4f ms, %.1f GFLOP/s (%d runs%s)\n", med, ms[0],
           (double)rs.flops / (med * 1e6), c->repeat, co.target != CASTOR_TARGET_CPU ? ", device time of the kernels" : "");
    /* the process's CPU time over the 3 warm-up and the timed runs: with one
     * thread, the run's work whatever else holds the cores (a loaded
     * machine); with more, every thread's, a spinning wait included */
    double cpu_ms = (double)(r1.tv_sec - r0.tv_sec) * 1e3 + (double)(r1.tv_nsec - r0.tv_nsec) / 1e6;
    printf("cpu: mean %.4f ms a run (process CPU time, every thread)\n", cpu_ms / (c->repeat + 3));
    free(ms);
  }
  if (c->profile && !run_profile(c, ctx, p, in, n_in)) goto done;
  if (c->stats && co.target == CASTOR_TARGET_CPU) {
    castor_run_stats rs = {0};
    castor_program_stats(p, c->batch, &rs);
    printf("memory: weights %lld bytes; activations %lld bytes peak (workspace %lld, inputs+outputs %lld); "
           "gemm scratch %lld bytes x %d threads\n",
           (long long)rs.weight_bytes, (long long)(rs.workspace_bytes + rs.io_bytes), (long long)rs.workspace_bytes,
           (long long)rs.io_bytes, (long long)rs.thread_scratch_bytes, rs.threads);
    if (rs.images > 0 && rs.image_launches < rs.launches)
      printf("by image: launches 1-%d of %d run an image at a time (%lld images), the rest on the whole batch\n",
             rs.image_launches, rs.launches, (long long)rs.images);
    else if (rs.images > 0)
      printf("by image: all %d launches run an image at a time (%lld images)\n", rs.launches, (long long)rs.images);
    if (rs.note) printf("note: %s\n", rs.note);
  }
  for (size_t i = 0; i < c->outputs.len; i++) {
    if (castor_tensor_save_npy(out[i], c->outputs.data[i]) != CASTOR_OK) {
      cli_put_diags(castor_context_last_error(ctx));
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
  return rc;
}

int main(int argc, char **argv) {
  cli c;
  static bool registered; /* once: tests/fuzz/fuzz_cli.c calls this main many times */
  if (!registered) registered = true, atexit(cli_close_stdout); /* a write error on standard output is an error */
  signal(SIGXFSZ, SIG_IGN); /* a file-size limit is a write error, not death */
  if (argc < 2) return usage(stderr, 1);
  if (!strcmp(argv[1], "build")) return castor_build_main(argc - 1, argv + 1); /* castor_build.c */
  if (!strcmp(argv[1], "check")) return castor_check_main(argc - 1, argv + 1); /* castor_check.c */
  if (!strcmp(argv[1], "train") || !strcmp(argv[1], "evaluate"))
    return castor_train_main(argc - 1, argv + 1); /* castor_train.c */
  int rc = parse_args(argc, argv, &c);
  if (rc == 0) rc = strcmp(c.cmd, "run") ? cmd_dump(&c) : cmd_run(&c);
  vec_free(&c.inputs);
  vec_free(&c.outputs);
  return rc == CLI_EXIT ? 0 : rc;
}
