/* SPDX-License-Identifier: Apache-2.0 */
/*
 * castor_check.c: `castor check`, the numerics debugger, over castor.h's
 * castor_check (api/check/check.c does the work; this file parses options,
 * loads inputs, prints the report), and the Graphviz rendering of DOT text
 * that `castor dump --emit=svg|png` uses too.
 *
 *   castor check MODEL [--policy P] [--input X.npy]... | [--batch N] [--seed S]
 *                [--weights W] [--tolerance T] [--layers=LIST] [--json]
 *                [--graph=FILE.dot|.svg|.png] [--no-search] [compile options]
 *
 *   castor check MODEL --train --x X --y Y [--policy P] [--batch-size B]
 *                [--loss-scale dynamic|none|N] [--loss L] [--from-logits] [--json]
 *
 * Exit status: 0 when the verdict is OK, 2 when the outputs are off (the
 * report says why and, when there is one, the fix), 1 on errors. With
 * --train (castor_check_train): 0 when no gradient of the batch flushes to
 * zero or overflows in float16 at the loss scale, 2 when some do.
 */
#include <errno.h>
#include <math.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "castor.h"
#include "api/internal.h"
#include "train/dataset.h"
#include "tools/castor_check.h"
#include "tools/options.h"

extern char **environ;

static int usage(FILE *f, int rc) {
  fputs("usage: castor check MODEL [options]\n"
        "\n"
        "Compiles MODEL under its policy (or --policy) and under float32, runs both on the\n"
        "same inputs and compares every layer: compute dtype, max abs and relative error,\n"
        "the share of values off by more than the tolerance, the float32 values' range\n"
        "against float16's (bfloat16's) limits, and the first NaN/Inf (layer, op,\n"
        "element). When the outputs are off it finds the smallest --fp32-layers set that\n"
        "brings them back (bisection over the 16-bit layers) and verifies it with a run.\n"
        "Exit status: 0 OK, 2 outputs off, 1 error.\n"
        "\n"
        "options:\n"
        "  --policy P          the policy to check (default: the model's)\n"
        "  --input FILE        an input tensor, once per model input, in order (.npy or\n"
        "                      IDX, any numeric dtype, converted to float32: castor run --help)\n"
        "  --batch N           rows of the seeded random input, and the bound batch: N\n"
        "                      becomes N rows, static shapes (default 1, N symbolic)\n"
        "  --seed S            its seed (default 1, as castor run)\n"
        "  --weights FILE      weights (.safetensors) instead of the model's 'weights' line\n"
        "                      (.cast), or in place of an ONNX model's, by key\n"
        "  --weights-seed S    seed of the init (Keras's initializers) without a weights file (0)\n"
        "  --dim NAME=VALUE    ONNX models: bind the symbolic dimension NAME to VALUE\n"
        "  --tolerance T       normalized error allowed on the outputs (default: 8 ulps of\n"
        "                      the policy's compute dtype: f16 3.9e-3, bf16 3.1e-2)\n"
        "  --layers=LIST       report these layers only (comma-separated layer names)\n"
        "  --json              print the report as JSON\n"
        "  --graph=FILE        also write the graph with each value's error: FILE.dot,\n"
        "                      FILE.svg or FILE.png (svg and png need Graphviz's dot)\n"
        "  --no-search         do not search for a --fp32-layers fix\n"
        "  --fp32-ops=LIST, --fp32-layers=LIST, --keep-16bit-outputs, --pad8,\n"
        "  --target=cpu|cuda, --device N, --sm=sm_NN, --threads T\n"
        "                      the build under test, as for castor run\n"
        "\n"
        "training mode (docs/check.md):\n"
        "  --train             report each layer's gradients of one batch against float16's\n"
        "                      range, unscaled and times the loss scale\n"
        "  --x X --y Y         features and labels (.npy or IDX, as castor train reads them)\n"
        "  --batch-size B      the batch: the first B samples (default 32)\n"
        "  --loss-scale S      dynamic (its start, 2^15; the default), none or a number\n"
        "  --loss L, --from-logits   the loss, as castor train\n",
        f);
  return rc;
}

int castor_render_dot(const char *dot, const char *format, const char *path) {
  int fds[2];
  if (pipe(fds) != 0) return cli_error("cannot create a pipe to dot: %s", strerror(errno));
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, fds[0], 0);
  posix_spawn_file_actions_addclose(&fa, fds[1]);
  posix_spawn_file_actions_addclose(&fa, fds[0]);
  char tflag[32];
  snprintf(tflag, sizeof tflag, "-T%s", format);
  char *argv[] = {"dot", tflag, path ? "-o" : NULL, (char *)path, NULL};
  pid_t pid;
  int rc = posix_spawnp(&pid, "dot", &fa, NULL, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  close(fds[0]);
  if (rc != 0) {
    close(fds[1]);
    if (rc == ENOENT)
      return cli_error("--emit=%s needs Graphviz's 'dot', which is not installed: install it with "
                   "'apt-get install graphviz' (Debian, Ubuntu), or write DOT with --emit=dot",
                   format);
    return cli_error("cannot run dot: %s", strerror(rc));
  }
  FILE *w = fdopen(fds[1], "w");
  bool wrote = w && fputs(dot, w) >= 0;
  if (w) fclose(w);
  else close(fds[1]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
  if (!wrote || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
    return cli_error("dot -T%s failed (exit status %d)", format, WIFEXITED(status) ? WEXITSTATUS(status) : -1);
  return 0;
}

typedef struct check_cli {
  const char *model, *graph;
  bool train;
  const char *x, *y;
  int64_t batch_size;
  castor_train_options to;
  VEC(const char *) inputs;
  bool json;
  cli_options opts; /* the shared load and compile options (tools/options.h) */
  castor_check_options o; /* its compile options are opts.compile, once parsed */
} check_cli;

/* The shared options check takes: the build under test, without -O and --cpu. */
enum {
  CHECK_OPTIONS = CLI_OPT_LOAD | CLI_OPT_POLICY | CLI_OPT_AUTOCAST | CLI_OPT_TARGET | CLI_OPT_THREADS
};

static int parse(int argc, char **argv, check_cli *c) {
  castor_check_options_init(&c->o);
  castor_train_options_init(&c->to);
  cli_options_init(&c->opts);
  c->batch_size = 0; /* 32 with --train */
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v;
    bool missing = false;
    int64_t n;
#define OPT(name) ((v = str_opt_arg(argc, argv, &i, name, &missing)) != NULL || missing)
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) return usage(stdout, 0), -1;
    cli_opt_result shared = cli_options_parse(&c->opts, CHECK_OPTIONS, argc, argv, &i);
    if (shared == CLI_OPT_ERROR) return 1;
    if (shared == CLI_OPT_TAKEN) continue;
    if (OPT("--input")) {
      if (missing) return cli_error("--input needs a file");
      vec_push(&c->inputs, v);
    } else if (OPT("--batch")) {
      if (!cli_parse_int("--batch", v, missing, 1, INT64_C(1) << 40, "2^40", "a positive integer", &n)) return 1;
      c->o.batch = c->opts.compile.batch = n; /* binds N: static shapes */
    } else if (OPT("--seed")) {
      if (missing || !str_parse_i64(v, 0, INT64_MAX, &n)) return cli_error("--seed needs a non-negative integer, got '%s'", missing ? "" : v);
      c->o.seed = (uint64_t)n;
    } else if (OPT("--tolerance")) {
      char *end = NULL;
      double t = missing ? 0 : strtod(v, &end);
      if (missing || !*v || *end || !isfinite(t) || t <= 0) return cli_error("--tolerance needs a positive number, got '%s'", missing ? "" : v);
      c->o.tolerance = t;
    } else if (OPT("--layers")) {
      if (missing) return cli_error("--layers needs a list of layer names");
      c->o.layers = v;
    } else if (OPT("--graph")) {
      if (missing) return cli_error("--graph needs a file name ending in .dot, .svg or .png");
      const char *dot = strrchr(v, '.');
      if (!dot || (strcmp(dot, ".dot") && strcmp(dot, ".svg") && strcmp(dot, ".png")))
        return cli_error("--graph: '%s' does not end in .dot, .svg or .png", v);
      c->graph = v;
    } else if (!strcmp(a, "--train")) {
      c->train = true;
    } else if (OPT("--x")) {
      if (missing) return cli_error("--x needs a file");
      c->x = v;
    } else if (OPT("--y")) {
      if (missing) return cli_error("--y needs a file");
      c->y = v;
    } else if (OPT("--batch-size")) {
      if (!cli_parse_int("--batch-size", v, missing, 1, INT64_C(1) << 30, "2^30", "a positive integer", &n)) return 1;
      c->batch_size = n;
    } else if (OPT("--loss-scale")) {
      if (missing) return cli_error("--loss-scale needs dynamic, none or a number");
      char *end = NULL;
      double s = strtod(v, &end);
      if (strcmp(v, "dynamic") && strcmp(v, "none") && (!*v || *end || !isfinite(s) || s <= 0))
        return cli_error("--loss-scale takes dynamic, none or a positive number, got '%s'", v);
      c->to.loss_scale = v;
    } else if (OPT("--loss")) {
      if (missing) return cli_error("--loss needs a loss name");
      c->to.loss = v;
    } else if (!strcmp(a, "--from-logits")) {
      c->to.from_logits = 1;
    } else if (!strcmp(a, "--json")) {
      c->json = true;
    } else if (!strcmp(a, "--no-search")) {
      c->o.search = 0;
    } else if (a[0] == '-' && a[1]) {
      return cli_unknown_option(a, "check", usage);
    } else if (!c->model) {
      c->model = a;
    } else {
      return cli_error("unexpected argument '%s' (see castor check --help)", a);
    }
#undef OPT
  }
  c->o.compile = c->opts.compile;
  if (!c->model) return cli_error("check: no model file given");
  if (c->inputs.len && c->o.batch != 1) return cli_error("--batch sets the random input's rows; it does not go with --input");
  if (c->train) {
    if (!c->x || !c->y) return cli_error("check --train: --x and --y are required (features and labels)");
    if (c->inputs.len) return cli_error("check --train: --input does not go with --train (the features are --x)");
    if (c->graph) return cli_error("check --train: --graph draws the inference check; it does not go with --train");
    if (c->o.compile.fp32_ops || c->o.compile.fp32_layers || c->o.compile.keep_16bit_outputs || c->o.layers ||
        c->o.tolerance > 0 || !c->o.search || c->o.batch != 1)
      return cli_error("check --train: --fp32-ops, --fp32-layers, --keep-16bit-outputs, --layers, --tolerance, "
                   "--no-search and --batch belong to the inference check (the gradients are float32's)");
  } else if (c->x || c->y || c->to.loss_scale || c->to.loss || c->to.from_logits || c->batch_size) {
    return cli_error("--x, --y, --batch-size, --loss-scale, --loss and --from-logits go with --train");
  }
  return 0;
}

static int write_graph(castor_check_report *r, const char *path) {
  const char *dot = castor_check_report_format(r, CASTOR_CHECK_DOT);
  const char *ext = strrchr(path, '.') + 1;
  if (strcmp(ext, "dot")) return castor_render_dot(dot, ext, path);
  FILE *f = fopen(path, "w");
  if (!f) return cli_error("cannot write '%s': %s", path, strerror(errno));
  /* fclose releases the stream even when it fails: it is called once. */
  errno = 0;
  int e = fputs(dot, f) < 0 || fflush(f) != 0 ? (errno ? errno : EIO) : 0;
  errno = 0;
  if (fclose(f) != 0 && !e) e = errno ? errno : EIO;
  if (e) return cli_error("cannot write '%s': %s", path, strerror(e));
  return 0;
}

/* castor check --train: the first --batch-size samples of X/Y (loaded and
 * checked as castor train loads them), castor_check_train on them. */
static int check_train(check_cli *c, castor_context *ctx, castor_model *m) {
  castor_train_options model_to;
  castor_model_train_options(m, &model_to);
  if (!c->to.loss) c->to.loss = model_to.loss, c->to.from_logits |= model_to.from_logits;
  castor_compile_options co = c->o.compile;
  co.policy = "float32";
  castor_program *eval = NULL;
  if (castor_compile_eval(m, &co, &c->to, &eval) != CASTOR_OK) {
    cli_put_diags(castor_context_last_error(ctx));
    return 1;
  }
  castor_tensor_info in, out, tgt;
  castor_program_input_info(eval, 0, &in);
  castor_program_output_info(eval, 0, &out);
  castor_program_input_info(eval, 1, &tgt);
  int64_t features = 1, classes = out.dims[out.rank - 1];
  for (int k = 1; k < in.rank; k++) features *= in.dims[k];
  bool sparse = tgt.dtype == CASTOR_I32;
  int in_rank = in.rank;
  int64_t xd[RT_MAX_RANK + 1] = {0};
  for (int k = 1; k < in.rank && k <= RT_MAX_RANK; k++) xd[k] = in.dims[k];
  castor_program_destroy(eval); /* in, out and tgt point into it */
  rt_dataset ds = {0};
  rt_dataset_options o;
  rt_dataset_options_init(&o);
  o.n_features = features;
  o.n_classes = classes;
  o.labels = sparse ? RT_LABELS_SPARSE : RT_LABELS_DENSE;
  o.sample_rank = in_rank - 1 < RT_MAX_RANK ? in_rank - 1 : RT_MAX_RANK; /* train/dataset.h's rule */
  memcpy(o.sample_dims, xd + 1, (size_t)o.sample_rank * sizeof(int64_t));
  diag_sink *d = diag_sink_create();
  bool ok = rt_dataset_load(c->x, c->y, &o, &ds, d);
  cli_put_diags(diag_text(d));
  diag_sink_destroy(d);
  if (!ok) return 1;
  int64_t batch = c->batch_size ? c->batch_size : 32;
  int64_t rows = ds.n < batch ? ds.n : batch;
  int64_t yd[] = {rows, ds.y_width};
  xd[0] = rows;
  castor_tensor *x = NULL, *y = NULL;
  castor_check_report *r = NULL;
  int rc = 1;
  if (castor_tensor_create(ctx, CASTOR_F32, in_rank, xd, &x) != CASTOR_OK ||
      castor_tensor_create(ctx, sparse ? CASTOR_I32 : CASTOR_F32, sparse ? 1 : 2, yd, &y) != CASTOR_OK) {
    cli_put_diags(castor_context_last_error(ctx));
    goto done;
  }
  memcpy(castor_tensor_data(x), ds.x, (size_t)(rows * features) * sizeof(float));
  memcpy(castor_tensor_data(y), sparse ? (void *)ds.y : (void *)ds.y_dense, (size_t)(rows * ds.y_width) * 4);
  castor_check_options opts = c->o;
  if (castor_check_train(m, &opts, &c->to, x, y, &r) != CASTOR_OK) {
    cli_put_diags(castor_context_last_error(ctx));
    goto done;
  }
  fputs(castor_check_report_format(r, c->json ? CASTOR_CHECK_JSON : CASTOR_CHECK_TEXT), stdout);
  fflush(stdout);
  castor_check_summary s;
  castor_check_report_summary(r, &s);
  rc = s.verdict == CASTOR_CHECK_OK ? 0 : 2;
done:
  castor_check_report_destroy(r);
  castor_tensor_destroy(x), castor_tensor_destroy(y);
  rt_dataset_fini(&ds);
  return rc;
}

int castor_check_main(int argc, char **argv) {
  check_cli c;
  memset(&c, 0, sizeof c);
  int rc = parse(argc, argv, &c);
  if (rc) {
    vec_free(&c.inputs);
    return rc < 0 ? 0 : rc;
  }
  castor_context *ctx = NULL;
  castor_model *m = NULL;
  castor_check_report *r = NULL;
  castor_tensor **in = xcalloc(c.inputs.len + 1, sizeof *in);
  castor_context_create(&ctx);
  rc = 1;
  if (cli_load_model(ctx, c.model, &c.opts, &m) != CASTOR_OK) goto done;
  if (c.train) {
    rc = check_train(&c, ctx, m);
    goto done;
  }
  for (size_t i = 0; i < c.inputs.len; i++)
    if (cli_load_input(ctx, c.inputs.data[i], CASTOR_F32, NULL, &in[i]) != CASTOR_OK) goto done;
  if (castor_check(m, &c.o, c.inputs.len ? in : NULL, (int)c.inputs.len, &r) != CASTOR_OK) {
    cli_put_diags(castor_context_last_error(ctx));
    goto done;
  }
  castor_check_summary s;
  castor_check_report_summary(r, &s);
  cli_put_diags(s.warnings);
  fputs(castor_check_report_format(r, c.json ? CASTOR_CHECK_JSON : CASTOR_CHECK_TEXT), stdout);
  fflush(stdout);
  if (c.graph && write_graph(r, c.graph)) goto done;
  rc = s.verdict == CASTOR_CHECK_OK ? 0 : 2;
done:
  for (size_t i = 0; i < c.inputs.len; i++) castor_tensor_destroy(in[i]);
  free(in);
  castor_check_report_destroy(r);
  castor_model_destroy(m);
  castor_context_destroy(ctx);
  vec_free(&c.inputs);
  return rc;
}
