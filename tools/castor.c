/*
 * castor: the command-line driver.
 *
 *   castor run MODEL [--input FILE.npy]... [--output FILE.npy]... [--batch N]
 *                    [--seed S] [--weights FILE] [--policy P] [-O N]
 *   castor dump MODEL [--dump-after=PASS|all] [--dump-dir=DIR] [--passes=LIST]
 *                     [--emit=ir|llvm|ptx] [--weights FILE] [--policy P]
 *   both: [--target=cpu|cuda] [--device N] [--sm=sm_NN]; run: [--repeat N]
 *
 * Both commands go through the API: `run` through the public castor.h
 * exactly as an embedding program would, `dump` through the same compile
 * driver (castor_model_dump, api/internal.h), so what `dump` shows is what
 * `run` compiles. Diagnostics go to stderr; every error exits 1.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "castor.h"
#include "api/internal.h"
#include "tools/castor_args.h"
#include "tools/castor_build.h"

/* ---- dump ---- */

/* The compile options of the command line, for run and dump alike. */
static void compile_options(const castor_args *c, castor_compile_options *co) {
  castor_compile_options_init(co);
  co->policy = c->policy;
  co->opt_level = c->opt_level;
  co->fp32_ops = c->fp32_ops;
  co->fp32_layers = c->fp32_layers;
  co->keep_16bit_outputs = c->keep16;
  co->pad8 = c->pad8;
  co->target = c->target;
  co->device = c->device;
  co->sm = c->sm;
  co->threads = c->threads;
}

static castor_status load_model(const castor_args *c, castor_context *ctx, castor_model **m) {
  castor_load_options lo;
  castor_load_options_init(&lo);
  lo.seed = c->weights_seed;
  lo.weights_path = c->weights;
  castor_status st = castor_model_load_file(ctx, c->model, &lo, m);
  fputs(st == CASTOR_OK ? castor_context_last_warnings(ctx) : castor_context_last_error(ctx), stderr);
  return st;
}

static int cmd_dump(const castor_args *c) {
  castor_context *ctx = NULL;
  castor_model *m = NULL;
  castor_context_create(&ctx);
  str_buf out;
  str_buf_init(&out);
  int rc = 1;
  if (load_model(c, ctx, &m) == CASTOR_OK) {
    castor_compile_options co;
    compile_options(c, &co);
    castor_driver_options dopts;
    castor_driver_options_init(&dopts);
    dopts.passes = c->passes;
    dopts.dump_after = c->dump_after;
    dopts.dump_dir = c->dump_dir;
    dopts.dump_out = &out;
    dopts.verify_each = true;
    castor_emit what = c->casts ? CASTOR_EMIT_CASTS
                       : !c->emit || !strcmp(c->emit, "ir") ? CASTOR_EMIT_IR
                       : !strcmp(c->emit, "llvm") ? CASTOR_EMIT_LLVM
                                                  : CASTOR_EMIT_PTX;
    castor_status st = castor_model_dump(m, &co, &dopts, what, &out);
    fputs(str_buf_cstr(&out), stdout);
    fputs(st == CASTOR_OK ? castor_context_last_warnings(ctx) : castor_context_last_error(ctx), stderr);
    rc = st == CASTOR_OK ? 0 : 1;
  }
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
static void warn_nonfinite(const char *what, const char *name, const castor_tensor *t, const castor_args *c,
                           const char *from) {
  str_buf b;
  str_buf_init(&b);
  if (castor_tensor_nonfinite(t, &b)) {
    fprintf(stderr, "castor: warning: %s '%s'%s%s%s has %s of %lld values", what, name, from ? " (" : "",
            from ? from : "", from ? ")" : "", str_buf_cstr(&b), (long long)castor_tensor_numel(t));
    if (!from) fprintf(stderr, "; 'castor check %s' finds the layer that produces them", c->model);
    fputc('\n', stderr);
  }
  str_buf_fini(&b);
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static int cmd_run(const castor_args *c) {
  castor_context *ctx = NULL;
  castor_model *m = NULL;
  castor_program *p = NULL;
  castor_tensor **in = NULL, **out = NULL;
  int n_in = 0, n_out = 0, rc = 1;
  castor_context_create(&ctx);
  castor_compile_options co;
  compile_options(c, &co);
  struct timespec t0, t1;
  if (load_model(c, ctx, &m) != CASTOR_OK) goto done;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  if (castor_compile(m, &co, &p) != CASTOR_OK) {
    fputs(castor_context_last_error(ctx), stderr);
    goto done;
  }
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double compile_ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
  fputs(castor_context_last_warnings(ctx), stderr);
  n_in = castor_program_num_inputs(p), n_out = castor_program_num_outputs(p);
  if (c->inputs.len && (int)c->inputs.len != n_in) {
    castor_error("model '%s' has %d input(s), got %zu --input file(s)", c->model, n_in, c->inputs.len);
    goto done;
  }
  if (c->outputs.len > (size_t)n_out) {
    castor_error("model '%s' has %d output(s), got %zu --output file(s)", c->model, n_out, c->outputs.len);
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
      if (castor_tensor_load_npy_as(ctx, c->inputs.data[i], info.dtype == CASTOR_F32, &in[i]) != CASTOR_OK) {
        fputs(castor_context_last_error(ctx), stderr);
        goto done;
      }
      warn_nonfinite("input", info.name, in[i], c, c->inputs.data[i]);
      continue;
    }
    for (int k = 0; k < info.rank; k++) dims[k] = info.dims[k] < 0 ? c->batch : info.dims[k];
    if (info.dtype != CASTOR_F32) {
      castor_error("input '%s' has dtype %s; random inputs are float32 only, pass --input", info.name,
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
  for (int i = 0; i < n_out; i++) {
    castor_tensor_info info;
    castor_program_output_info(p, i, &info);
    warn_nonfinite("output", info.name, out[i], c, NULL);
  }
  if (c->repeat > 0) {
    double *ms = xcalloc((size_t)c->repeat, sizeof *ms);
    if (castor_program_time(p, in, n_in, 3, c->repeat, ms) != CASTOR_OK) {
      fputs(castor_context_last_error(ctx), stderr);
      free(ms);
      goto done;
    }
    qsort(ms, (size_t)c->repeat, sizeof *ms, cmp_double);
    castor_run_stats rs = {0};
    castor_program_stats(p, c->batch, &rs);
    double med = c->repeat % 2 ? ms[c->repeat / 2] : (ms[c->repeat / 2 - 1] + ms[c->repeat / 2]) / 2;
    printf("compile: %.1f ms\n", compile_ms);
    printf("time: median %.4f ms, min %.4f ms, %.1f GFLOP/s (%d runs%s)\n", med, ms[0],
           (double)rs.flops / (med * 1e6), c->repeat, c->target != CASTOR_TARGET_CPU ? ", device time of the kernels" : "");
    free(ms);
  }
  if (c->stats && c->target == CASTOR_TARGET_CPU) {
    castor_run_stats rs = {0};
    castor_program_stats(p, c->batch, &rs);
    printf("memory: weights %lld bytes; activations %lld bytes peak (workspace %lld, inputs+outputs %lld); "
           "gemm scratch %lld bytes x %d threads\n",
           (long long)rs.weight_bytes, (long long)(rs.workspace_bytes + rs.io_bytes), (long long)rs.workspace_bytes,
           (long long)rs.io_bytes, (long long)rs.thread_scratch_bytes, rs.threads);
  }
  for (size_t i = 0; i < c->outputs.len; i++) {
    if (castor_tensor_save_npy(out[i], c->outputs.data[i]) != CASTOR_OK) {
      fputs(castor_context_last_error(ctx), stderr);
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
  castor_args c;
  if (argc < 2) return castor_usage(stderr, 1);
  if (!strcmp(argv[1], "build")) return castor_build_main(argc - 1, argv + 1); /* castor_build.c */
  int rc = castor_args_parse(argc, argv, &c);
  if (rc == 0) rc = !strcmp(c.cmd, "dump") ? cmd_dump(&c) : cmd_run(&c);
  castor_args_fini(&c);
  return rc == CASTOR_ARGS_EXIT ? 0 : rc;
}
