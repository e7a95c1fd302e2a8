/*
 * castor_args.c: the command line of `castor run` and `castor dump` parsed
 * into a castor_args (castor_args.h) apart from running anything, so that
 * the option parser can be fuzzed (tests/fuzz/fuzz_cli.c). It never exits:
 * --help and --version print and return CASTOR_ARGS_EXIT.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/internal.h"
#include "passes/passes.h" /* PASS_PIPELINE_DEFAULT for --help */
#include "tools/castor_args.h"

int castor_usage(FILE *f, int rc) {
  fprintf(f,
          "usage: castor COMMAND MODEL [options]\n"
          "\n"
          "castor compiles small neural-network models (.cast files) to native code.\n"
          "\n"
          "commands:\n"
          "  run MODEL     JIT-compile MODEL and run it on the CPU\n"
          "  dump MODEL    print MODEL's IR after the compile pipeline\n"
          "  build MODEL   compile MODEL ahead of time to an executable or an object\n"
          "                file and C header (see castor build --help)\n"
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
          "  --emit=ir|llvm|ptx  print the IR (default), the optimized LLVM IR, or the PTX\n"
          "                      (--target=cuda; no GPU needed)\n"
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
          "  --pad8              pad 16-bit matmuls to multiples of 8 on the CPU too\n"
          "                      (always on for --target=cuda)\n"
          "  -O N                LLVM optimization level 0-3 (default 2)\n"
          "  --target=cpu|cuda   run on this CPU (default) or an NVIDIA GPU (sm_80 or newer,\n"
          "                      through the CUDA driver); cuda pads 16-bit matmuls (pad8)\n"
          "  --device N          the CUDA device (default $CASTOR_DEVICE, else 0)\n"
          "  --sm=sm_NN          PTX architecture (default: the device's; sm_80 without one)\n"
          "  --repeat N          run: also time N runs after a warm-up and print the median\n"
          "                      (cuda: device time of the kernels, no copies), GFLOP/s\n"
          "                      and the compile time\n"
          "  --threads T         run: CPU threads (default $CASTOR_NUM_THREADS, else all)\n"
          "  --stats             run: print the memory of a run (weights, activations)\n"
          "  -h, --help          show this help\n"
          "  --version           show the version\n",
          PASS_PIPELINE_DEFAULT);
  return rc;
}

int castor_error(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("castor: error: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  return 1;
}

static bool target_from_name(const char *name, castor_target *out) {
  for (castor_target t = CASTOR_TARGET_CPU; castor_target_backend(t); t++)
    if (!strcmp(castor_target_backend(t)->name, name)) return *out = t, true;
  return false;
}

int castor_args_parse(int argc, char **argv, castor_args *c) {
  memset(c, 0, sizeof *c);
  c->batch = 1, c->seed = 1, c->opt_level = 2, c->device = -1;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v;
    bool missing = false;
    int64_t n;
#define OPT(name) ((v = str_opt_arg(argc, argv, &i, name, &missing)) != NULL || missing)
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) return castor_usage(stdout, 0), CASTOR_ARGS_EXIT;
    if (!strcmp(a, "--version")) {
      printf("castor %s\n", castor_version());
      return CASTOR_ARGS_EXIT;
    }
    if (OPT("--input")) {
      if (missing) return castor_error("--input needs a file");
      vec_push(&c->inputs, v);
    } else if (OPT("--output")) {
      if (missing) return castor_error("--output needs a file");
      vec_push(&c->outputs, v);
    } else if (OPT("--batch")) {
      if (missing || !str_parse_i64(v, 1, INT64_C(1) << 40, &n)) return castor_error("--batch needs a positive integer, got '%s'", missing ? "" : v);
      c->batch = n;
    } else if (OPT("--seed")) {
      if (missing || !str_parse_i64(v, 0, INT64_MAX, &n)) return castor_error("--seed needs a non-negative integer, got '%s'", missing ? "" : v);
      c->seed = (uint64_t)n;
    } else if (OPT("--weights-seed")) {
      if (missing || !str_parse_i64(v, 0, INT64_MAX, &n)) return castor_error("--weights-seed needs a non-negative integer, got '%s'", missing ? "" : v);
      c->weights_seed = (uint64_t)n;
    } else if (OPT("--weights")) {
      if (missing) return castor_error("--weights needs a file");
      c->weights = v;
    } else if (OPT("--policy")) {
      if (missing) return castor_error("--policy needs a policy name");
      c->policy = v;
    } else if (OPT("--fp32-ops")) {
      if (missing) return castor_error("--fp32-ops needs a list of op names");
      c->fp32_ops = v;
    } else if (OPT("--fp32-layers")) {
      if (missing) return castor_error("--fp32-layers needs a list of layer names");
      c->fp32_layers = v;
    } else if (!strcmp(a, "--keep-16bit-outputs")) {
      c->keep16 = true;
    } else if (!strcmp(a, "--pad8")) {
      c->pad8 = true;
    } else if (!strcmp(a, "--casts")) {
      c->casts = true;
    } else if (OPT("--passes")) {
      if (missing) return castor_error("--passes needs a pipeline");
      c->passes = v;
    } else if (OPT("--dump-after")) {
      if (missing) return castor_error("--dump-after needs a pass name or 'all'");
      c->dump_after = v;
    } else if (OPT("--dump-dir")) {
      if (missing) return castor_error("--dump-dir needs a directory");
      c->dump_dir = v;
    } else if (OPT("--emit")) {
      if (missing || (strcmp(v, "ir") && strcmp(v, "llvm") && strcmp(v, "ptx"))) return castor_error("--emit takes ir, llvm or ptx");
      c->emit = v;
    } else if (OPT("--target")) {
      if (missing || !target_from_name(v, &c->target)) return castor_error("--target takes one of: %s", cg_backend_names());
    } else if (OPT("--device")) {
      if (missing || !str_parse_i64(v, 0, 1024, &n)) return castor_error("--device needs a device index, got '%s'", missing ? "" : v);
      c->device = (int)n;
    } else if (OPT("--sm")) {
      if (missing) return castor_error("--sm needs an architecture, e.g. sm_90");
      c->sm = v;
    } else if (OPT("--threads")) {
      if (missing || !str_parse_i64(v, 1, 1024, &n)) return castor_error("--threads needs a positive integer, got '%s'", missing ? "" : v);
      c->threads = (int)n;
    } else if (!strcmp(a, "--stats")) {
      c->stats = true;
    } else if (OPT("--repeat")) {
      if (missing || !str_parse_i64(v, 1, 100000, &n)) return castor_error("--repeat needs a positive integer, got '%s'", missing ? "" : v);
      c->repeat = (int)n;
    } else if (!strncmp(a, "-O", 2) && a[2]) {
      if (!str_parse_i64(a + 2, 0, 3, &n)) return castor_error("-O takes 0-3, got '%s'", a + 2);
      c->opt_level = (int)n;
    } else if (!strcmp(a, "-O")) {
      if (i + 1 >= argc || !str_parse_i64(argv[++i], 0, 3, &n)) return castor_error("-O takes 0-3");
      c->opt_level = (int)n;
    } else if (a[0] == '-' && a[1]) {
      return castor_error("unknown option '%s' (see castor --help)", a);
    } else if (!c->cmd) {
      c->cmd = a;
    } else if (!c->model) {
      c->model = a;
    } else {
      return castor_error("unexpected argument '%s' (see castor --help)", a);
    }
#undef OPT
  }
  if (!c->cmd) return castor_usage(stderr, 1);
  if (strcmp(c->cmd, "run") && strcmp(c->cmd, "dump"))
    return castor_error("unknown command '%s' (commands: run, dump, build)", c->cmd);
  if (!c->model) return castor_error("%s: no model file given", c->cmd);
  return 0;
}

void castor_args_fini(castor_args *c) {
  vec_free(&c->inputs);
  vec_free(&c->outputs);
}
