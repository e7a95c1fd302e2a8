/* SPDX-License-Identifier: Apache-2.0 */
/*
 * castor_train.c: `castor train` and `castor evaluate` (docs/training.md).
 *
 *   castor train MODEL --x X --y Y [--policy P] [--epochs E] [--batch-size B]
 *       [--optimizer sgd|rmsprop|adam] [--learning-rate LR] [--momentum M]
 *       [--nesterov] [--centered] [--loss L] [--from-logits] [--loss-scale dynamic|none|N]
 *       [--loss-scale-min S] [--loss-scale-initial S] [--loss-scale-growth-steps N]
 *       [--beta-1 B] [--beta-2 B] [--epsilon E] [--weight-decay W]
 *       [--clipnorm C | --global-clipnorm C | --clipvalue C]
 *       [--lr-schedule S [--decay-steps N] [--decay-rate R] [--staircase] [--alpha A]
 *        [--warmup-target T] [--warmup-steps W] [--boundaries B,...] [--values V,...]]
 *       [--validation-split F] [--x-val X --y-val Y]
 *       [--no-shuffle] [--seed S] [--save OUT.safetensors|OUT.keras]
 *       [--history OUT.csv] [--plot OUT.svg] [--weights W] [--threads T]
 *   castor evaluate MODEL --x X --y Y [--weights W] [--batch-size B] ...
 *
 * The loop is Keras's Model.fit: the validation split taken from the end
 * before shuffling, a seeded shuffle each epoch, batches of B with a last
 * partial one, the epoch's loss and accuracy as the batch-size-weighted
 * mean over its steps (from each step's forward pass, before its update),
 * validation after each epoch. Each step is one run of the compiled
 * training program (castor_compile_train); validation and evaluate run the
 * evaluation program (castor_compile_eval) with the current weights.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "api/internal.h"
#include "castor.h"
#include "tools/castor_train.h"
#include "tools/options.h"
#include "tools/train_options.h"
#include "train/dataset.h"
#include "train/history.h"
#include "util/atomic_file.h"

static int usage_train(FILE *f, int rc) {
  fprintf(f, "usage: castor train MODEL --x X --y Y [options]\n"
        "\n"
        "Trains MODEL on features X and labels Y (.npy or IDX files, gzipped or not;\n"
        "uint8 features are scaled by 1/255), Keras style (docs/training.md).\n"
        "\n"
        "options:\n"
        "  --epochs E            passes over the data (default 1)\n"
        "  --batch-size B        samples per step (default 32)\n"
        "%s"
        "  --validation-split F  hold out the last fraction F of X/Y (before shuffling)\n"
        "  --x-val X --y-val Y   validation data from files instead\n"
        "  --no-shuffle          keep the sample order\n"
        "  --seed S              seed of the shuffle (default 1)\n"
        "  --save FILE           write the trained weights (.safetensors: the keys a\n"
        "                        model's weights line loads; .keras: a .keras model\n"
        "                        written back with them, for Keras 3)\n"
        "  --history FILE.csv    per-epoch metrics (and FILE.loss_scale.csv: the scale)\n"
        "  --plot FILE.svg       loss, accuracy and the loss scale, drawn as SVG\n"
        "  --weights W, --weights-seed S, --dim NAME=VALUE, --policy P, --threads T, -O N: as castor run\n"
        "  --target=cpu|cuda     where the step runs (cuda: weights, optimizer slots and\n"
        "                        the loss scale stay in GPU memory; --device N, --sm ARCH)\n",
        cli_train_options_help);
  return rc;
}

static int usage_evaluate(FILE *f, int rc) {
  fputs("usage: castor evaluate MODEL --x X --y Y [options]\n"
        "\n"
        "The loss (and accuracy, for a classifier) of MODEL on features X and labels Y\n"
        "(.npy or IDX files, gzipped or not; uint8 features are scaled by 1/255), as\n"
        "Keras's Model.evaluate: batch-weighted means over the data, no update.\n"
        "\n"
        "options:\n"
        "  --batch-size B        samples per step (default 32)\n"
        "  --loss L              the loss (default: the model's own, from a .cast compile\n"
        "                        statement or a .keras file's compile config, else\n"
        "                        sparse_categorical_crossentropy)\n"
        "  --from-logits         the model's output is logits\n"
        "  --weights W, --weights-seed S, --policy P, --threads T, -O N: as castor run\n",
        f);
  return rc;
}

typedef struct train_cli {
  bool evaluate;
  const char *model, *x, *y, *x_val, *y_val, *save, *history, *plot;
  int64_t epochs, batch_size;
  bool batch_size_given; /* --batch-size on the command line (else 32, or a static batch's own) */
  uint64_t seed;
  double validation_split;
  bool shuffle;
  cli_options opts; /* the shared load and compile options (tools/options.h) */
  cli_train_options train; /* tools/train_options.h */
  char loss_scale_buf[64];
} train_cli;

/* The shared options train and evaluate take. */
enum { TRAIN_OPTIONS = CLI_OPT_LOAD | CLI_OPT_POLICY | CLI_OPT_OPT | CLI_OPT_THREADS | CLI_OPT_TARGET };

static bool parse_double(const char *s, double lo, double hi, double *out) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (!*s || *end || errno || !(v >= lo && v <= hi)) return false;
  *out = v;
  return true;
}

/* A model whose batch dimension is static (an ONNX file exported with a fixed batch, or bound by
 * --dim) runs whole batches of that size only: it is the batch size (unless --batch-size says
 * another, an error), and the samples must fill whole batches, which is checked before the
 * first step rather than at the last batch of the first epoch. */
static bool static_batch_ok(train_cli *c, int64_t nb, const rt_dataset *train, const rt_dataset *val) {
  if (c->batch_size_given && c->batch_size != nb) {
    cli_error("%s: the model takes batches of exactly %lld samples (a static batch dimension: exported with a "
              "fixed batch, or bound by --dim); train with --batch-size %lld, or export the model with a dynamic "
              "batch", c->model, (long long)nb, (long long)nb);
    return false;
  }
  c->batch_size = nb;
  const rt_dataset *sets[] = {train, val};
  const char *what[] = {c->validation_split > 0 ? "the training part of --x (after --validation-split)" : c->x,
                        c->x_val ? c->x_val : "the validation split"};
  for (int k = 0; k < 2; k++)
    if (sets[k]->n % nb) {
      cli_error("%s: %lld samples leave a last batch of %lld, but the model takes batches of exactly %lld samples "
                "(a static batch dimension); give a multiple of %lld samples, or export the model with a dynamic "
                "batch", what[k], (long long)sets[k]->n, (long long)(sets[k]->n % nb), (long long)nb, (long long)nb);
      return false;
    }
  return true;
}

static int parse(int argc, char **argv, train_cli *c) {
  memset(c, 0, sizeof *c);
  c->evaluate = !strcmp(argv[0], "evaluate");
  c->epochs = 1, c->batch_size = 32, c->seed = 1, c->shuffle = true;
  cli_train_options_init(&c->train);
  cli_options_init(&c->opts);
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v;
    bool missing = false;
    int64_t n;
    double d;
#define OPT(name) ((v = str_opt_arg(argc, argv, &i, name, &missing)) != NULL || missing)
#define NEED(what) \
  if (missing) return cli_error("%s needs %s", a, what)
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) exit((c->evaluate ? usage_evaluate : usage_train)(stdout, 0));
    cli_opt_result shared = cli_options_parse(&c->opts, TRAIN_OPTIONS, argc, argv, &i);
    if (shared == CLI_OPT_ERROR) return 1;
    if (shared == CLI_OPT_TAKEN) continue;
    cli_opt_result tr = cli_train_options_parse(&c->train, argc, argv, &i);
    if (tr == CLI_OPT_ERROR) return 1;
    if (tr == CLI_OPT_TAKEN) continue;
    if (OPT("--x")) { NEED("a file"); c->x = v; }
    else if (OPT("--y")) { NEED("a file"); c->y = v; }
    else if (OPT("--x-val")) { NEED("a file"); c->x_val = v; }
    else if (OPT("--y-val")) { NEED("a file"); c->y_val = v; }
    else if (OPT("--save")) { NEED("a file"); c->save = v; }
    else if (OPT("--history")) { NEED("a file"); c->history = v; }
    else if (OPT("--plot")) { NEED("a file"); c->plot = v; }
    else if (!strcmp(a, "--no-shuffle")) c->shuffle = false;
    else if (OPT("--epochs")) {
      if (!cli_parse_int("--epochs", v, missing, 1, 1000000, "10^6", "a positive integer", &n)) return 1;
      c->epochs = n;
    } else if (OPT("--batch-size")) {
      if (!cli_parse_int("--batch-size", v, missing, 1, INT64_C(1) << 30, "2^30", "a positive integer", &n)) return 1;
      c->batch_size = n, c->batch_size_given = true;
    } else if (OPT("--seed")) {
      if (missing || !str_parse_i64(v, 0, INT64_MAX, &n)) return cli_error("--seed needs a non-negative integer, got '%s'", missing ? "" : v);
      c->seed = (uint64_t)n;
    } else if (OPT("--validation-split")) {
      if (missing || !parse_double(v, 0, 0.999999, &d)) return cli_error("--validation-split needs a fraction in [0, 1), got '%s'", missing ? "" : v);
      c->validation_split = d;
    } else if (a[0] == '-' && a[1]) {
      return cli_unknown_option(a, argv[0], c->evaluate ? usage_evaluate : usage_train);
    } else if (!c->model) {
      c->model = a;
    } else {
      return cli_error("unexpected argument '%s' (see castor %s --help)", a, argv[0]);
    }
#undef OPT
#undef NEED
  }
  if (!c->model) return cli_error("%s: no model file given", argv[0]);
  if (!c->x || !c->y) return cli_error("%s: --x and --y are required (features and labels)", argv[0]);
  if (c->evaluate && (c->save || c->history || c->plot)) /* it was accepted and ignored */
    return cli_error("evaluate: %s is an option of castor train; evaluate trains nothing and writes no file",
                 c->save ? "--save" : c->history ? "--history" : "--plot");
  if ((c->x_val != NULL) != (c->y_val != NULL)) return cli_error("--x-val and --y-val go together");
  if (!cli_train_options_check(&c->train)) return 1;
  if (c->x_val && c->validation_split > 0) return cli_error("--validation-split and --x-val/--y-val exclude each other");
  return 0;
}

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* The argmax of each prediction row against the labels: correct count. */
static int64_t correct(const float *p, int64_t rows, int64_t classes, const rt_dataset *ds, const rt_batcher *b) {
  int64_t ok = 0;
  for (int64_t r = 0; r < rows; r++) {
    const float *row = p + r * classes;
    int64_t best = 0;
    for (int64_t j = 1; j < classes; j++)
      if (row[j] > row[best]) best = j;
    int64_t want = 0;
    if (ds->labels == RT_LABELS_SPARSE) {
      want = b->y[r];
    } else {
      const float *t = b->y_dense + r * ds->y_width;
      for (int64_t j = 1; j < ds->y_width; j++)
        if (t[j] > t[want]) want = j;
    }
    ok += best == want;
  }
  return ok;
}

typedef struct session {
  castor_context *ctx;
  castor_program *p; /* the step, or the evaluation program */
  int64_t classes, features;
  int in_rank;                   /* the model input's rank, the batch included */
  int64_t in_dims[RT_MAX_RANK];  /* its dimensions; in_dims[0] is a batch's rows */
  bool accuracy; /* classification: a loss over classes */
  const char *loss; /* the loss's name: the option's, else the model's, else the default */
  castor_model *m; /* what the step was compiled from, for the overflow warning */
  const castor_compile_options *co;
  const castor_train_options *to;
  bool scale_warned; /* the loss scale fell below 1 once: reported */
  double warn_s;     /* seconds that report took (not training time) */
  /* training stopped at the first non-finite loss (Keras TerminateOnNaN) */
  bool diverged;
  int64_t epochs; /* of the run, for messages */
} session;

/* The first model weight of step program p that holds NaN or Inf, with
 * its counts ("2 NaN, 6 Inf of 96") in why; NULL if every one is finite. */
static const char *nonfinite_weight(castor_program *p, str_buf *why) {
  for (int i = 0; i < castor_program_num_states(p); i++) {
    castor_state_kind k = castor_program_state_kind(p, i);
    castor_tensor_info info;
    castor_tensor *t = NULL;
    if ((k != CASTOR_STATE_TRAINABLE && k != CASTOR_STATE_NONTRAINABLE) ||
        castor_program_state_info(p, i, &info) != CASTOR_OK || castor_program_get_state(p, info.name, &t) != CASTOR_OK)
      continue;
    bool bad = castor_tensor_nonfinite(t, why);
    castor_tensor_destroy(t);
    if (bad) return info.name;
  }
  return NULL;
}

/* The loss of step `step_no` (epoch e, its k-th step of n) is not finite
 * and no dynamic loss scale skips such steps: says which step turned what
 * non-finite, and training stops there, as under Keras's TerminateOnNaN. */
static void warn_diverged(session *s, castor_program *p, double loss, int64_t e, int64_t k, int64_t n,
                          int64_t step_no, bool tty) {
  s->diverged = true;
  str_buf why;
  str_buf_init(&why);
  const char *w = nonfinite_weight(p, &why);
  if (tty) fputs("\r\033[K", stderr);
  fprintf(stderr, "castor: warning: epoch %lld/%lld, step %lld/%lld (step %lld of the run): the loss is %s; ",
          (long long)e + 1, (long long)s->epochs, (long long)k + 1, (long long)n, (long long)step_no,
          isnan(loss) ? "nan" : loss > 0 ? "inf" : "-inf");
  if (w && step_no > 1)
    fprintf(stderr, "the update of step %lld made the weights non-finite (%s first: %s)", (long long)step_no - 1, w,
            str_buf_cstr(&why));
  else if (w)
    fprintf(stderr, "the weights were non-finite before the first step (%s: %s)", w, str_buf_cstr(&why));
  else
    fputs("the weights are finite: the forward pass overflows (`castor check` shows where)", stderr);
  fputs("; training stops here (as Keras's TerminateOnNaN stops it); a smaller --learning-rate may help\n", stderr);
  str_buf_fini(&why);
}

/* The dynamic loss scale fell below 1 on this step: even unscaled the
 * gradients overflow. Says once which layer's overflowed first (the step
 * was rejected, so the weights are still the ones it saw). */
static void warn_overflow(session *s, castor_program *step, castor_tensor *x, castor_tensor *y, double used,
                          double fell_to, int64_t step_no, bool tty) {
  s->scale_warned = true;
  double t0 = now();
  castor_overflow_report r;
  if (tty) fputs("\r\033[K", stderr);
  fprintf(stderr, "castor: warning: step %lld: the loss scale fell below 1 (to %g): ", (long long)step_no, fell_to);
  if (castor_program_find_overflow(step, s->m, s->co, s->to, used, x, y, &r) != CASTOR_OK) {
    fprintf(stderr, "gradients overflow float16 even unscaled (finding the layer failed: %s)\n",
            castor_context_last_error(s->ctx));
  } else if (!r.loss_finite) {
    fprintf(stderr, "the loss itself is not finite at scale %g: the forward pass overflows; `castor check` shows "
                    "where\n", used);
  } else if (r.layers == 0) {
    fprintf(stderr, "no weight's gradient overflows at scale %g when recomputed: the loss's gradient does\n", used);
  } else {
    fprintf(stderr, "the gradients of layer '%s' overflow first (%lld of %lld not finite at scale %g", r.layer,
            (long long)r.nonfinite, (long long)r.numel, used);
    if (r.layers > 1) fprintf(stderr, "; %d other layer%s too", r.layers - 1, r.layers > 2 ? "s'" : "'s");
    fprintf(stderr, "); `castor check --train` counts every layer's\n");
  }
  s->warn_s += now() - t0;
}

/* One pass over ds with program p (a step or an evaluation): mean loss and
 * accuracy; per step the loss scale and skips go to the history. */
static bool run_epoch(session *s, castor_program *p, const rt_dataset *ds, int64_t batch_size, bool shuffle,
                      uint64_t seed, int64_t epoch, double *loss, double *acc, rt_history *h, int64_t *step,
                      int64_t *skipped, bool show) {
  diag_sink *d = diag_sink_create();
  rt_batcher b;
  if (!rt_batcher_init(&b, ds, batch_size, shuffle, seed, d)) {
    cli_put_diags(diag_text(d));
    diag_sink_destroy(d);
    return false;
  }
  diag_sink_destroy(d);
  rt_batcher_start_epoch(&b, epoch);
  double sum_loss = 0;
  int64_t n_seen = 0, n_correct = 0;
  bool ok = true;
  bool tty = show && isatty(2);
  bool train = castor_program_num_states(p) > 0 && h;
  castor_tensor *scale_t = NULL, *iters_t = NULL;
  for (int64_t k = 0; k < b.n_batches && ok && !s->diverged; k++) {
    int64_t rows = rt_batcher_fill(&b, k);
    int64_t xd[RT_MAX_RANK], yd[] = {rows, ds->y_width};
    memcpy(xd, s->in_dims, sizeof xd);
    xd[0] = rows;
    castor_tensor *x = NULL, *y = NULL, *outs[2] = {NULL, NULL};
    castor_tensor_create(s->ctx, CASTOR_F32, s->in_rank, xd, &x);
    bool sparse = ds->labels == RT_LABELS_SPARSE;
    castor_tensor_create(s->ctx, sparse ? CASTOR_I32 : CASTOR_F32, sparse ? 1 : 2, yd, &y);
    memcpy(castor_tensor_data(x), b.x, (size_t)(rows * s->features) * sizeof(float));
    memcpy(castor_tensor_data(y), sparse ? (void *)b.y : (void *)b.y_dense,
           (size_t)(rows * ds->y_width) * sizeof(float));
    double scale = 0;
    if (train && castor_program_get_state(p, "optimizer.loss_scale", &scale_t) == CASTOR_OK) {
      scale = *(float *)castor_tensor_data(scale_t);
      castor_tensor_destroy(scale_t);
    }
    castor_tensor *ins[] = {x, y};
    if (castor_program_run(p, ins, 2, outs, 2) != CASTOR_OK) {
      cli_put_diags(castor_context_last_error(s->ctx));
      ok = false;
    } else {
      double l = *(float *)castor_tensor_data(outs[1]);
      sum_loss += l * (double)rows;
      n_seen += rows;
      if (s->accuracy) n_correct += correct(castor_tensor_data(outs[0]), rows, s->classes, ds, &b);
      if (train && scale > 0 && !s->scale_warned) {
        castor_tensor *t = NULL;
        castor_program_get_state(p, "optimizer.loss_scale", &t);
        double now = *(float *)castor_tensor_data(t);
        castor_tensor_destroy(t);
        if (now < 1 && now < scale) warn_overflow(s, p, x, y, scale, now, *step + 1, tty);
      }
      if (train) {
        ++*step;
        int64_t before = *skipped; /* the trace's column: the skips before this step */
        castor_program_get_state(p, "optimizer.iterations", &iters_t);
        *skipped = *step - *(int64_t *)castor_tensor_data(iters_t);
        castor_tensor_destroy(iters_t);
        if (scale > 0) rt_history_add_scale(h, *step, epoch + 1, scale, before);
        if (!isfinite(l) && !(scale > 0)) warn_diverged(s, p, l, epoch, k, b.n_batches, *step, tty);
      }
      if (tty && (k + 1 == b.n_batches || k % 16 == 0)) {
        int width = 30, done = (int)((k + 1) * width / b.n_batches);
        fprintf(stderr, "\r%6lld/%lld [%.*s%.*s] loss: %.4f", (long long)(k + 1), (long long)b.n_batches, done,
                "==============================", width - done, "..............................",
                sum_loss / (double)n_seen);
        if (s->accuracy) fprintf(stderr, " - accuracy: %.4f", (double)n_correct / (double)n_seen);
        if (k + 1 == b.n_batches) fputs("\r\033[K", stderr);
      }
    }
    for (int i = 0; i < 2; i++) castor_tensor_destroy(outs[i]);
    castor_tensor_destroy(x), castor_tensor_destroy(y);
  }
  rt_batcher_fini(&b);
  *loss = n_seen ? sum_loss / (double)n_seen : NAN;
  *acc = n_seen ? (double)n_correct / (double)n_seen : NAN;
  return ok;
}

static bool load_data(const char *x, const char *y, const session *s, bool sparse, rt_dataset *ds) {
  int64_t features = s->features, classes = s->classes;
  diag_sink *d = diag_sink_create();
  rt_dataset_options o;
  rt_dataset_options_init(&o);
  o.n_features = features;
  o.sample_rank = s->in_rank - 1; /* the sample shape rule of train/dataset.h */
  memcpy(o.sample_dims, s->in_dims + 1, (size_t)o.sample_rank * sizeof(int64_t));
  o.n_classes = classes;
  o.labels = sparse ? RT_LABELS_SPARSE : RT_LABELS_DENSE;
  o.loss = s->loss;
  bool ok = rt_dataset_load(x, y, &o, ds, d);
  cli_put_diags(diag_text(d));
  diag_sink_destroy(d);
  if (ok) {
    str_buf b;
    str_buf_init(&b);
    rt_dataset_describe(ds, &b);
    fprintf(stderr, "castor: %s\n", str_buf_cstr(&b));
    str_buf_fini(&b);
  }
  return ok;
}

/* An output file must be creatable before an hour of training, not after:
 * its directory exists and is writable, and the writer's own checks pass
 * (not a directory, a temporary file beside it, a name that can be
 * created: atomic_file_check). */
static bool writable(const char *opt, const char *path) {
  const char *slash = strrchr(path, '/');
  char dir[4096];
  if (!slash) snprintf(dir, sizeof dir, ".");
  else snprintf(dir, sizeof dir, "%.*s", slash == path ? 1 : (int)(slash - path), path);
  if (access(dir, W_OK) != 0) {
    fprintf(stderr, "%s: error: %s cannot be written: directory %s: %s\n", path, opt, dir, strerror(errno));
    return false;
  }
  diag_sink *d = diag_sink_create();
  bool ok = atomic_file_check(path, d);
  cli_put_diags(diag_text(d));
  diag_sink_destroy(d);
  return ok;
}

/* Can FILE.loss_scale.csv go beside --history's path? Not when the path
 * is a device, a FIFO or a socket, nor when it lies in /dev or /proc
 * (/dev/stdout is a link that may reach a regular file). */
static bool beside_ok(const char *path) {
  struct stat st;
  if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) return false;
  const char *slash = strrchr(path, '/');
  char dir[4096], *real;
  if (!slash) snprintf(dir, sizeof dir, ".");
  else snprintf(dir, sizeof dir, "%.*s", slash == path ? 1 : (int)(slash - path), path);
  if (!(real = realpath(dir, NULL))) return true; /* writable() reports a missing directory */
  bool sys = !strcmp(real, "/dev") || !strncmp(real, "/dev/", 5) || !strcmp(real, "/proc") || !strncmp(real, "/proc/", 6);
  free(real);
  return !sys;
}

int castor_train_main(int argc, char **argv) {
  train_cli c;
  int rc = parse(argc, argv, &c);
  if (rc) return rc;
  if ((c.save && !writable("--save", c.save)) || (c.history && !writable("--history", c.history)) ||
      (c.plot && !writable("--plot", c.plot)))
    return 1;
  const cli_file ins[] = {{"model file", c.model}, {"--x file", c.x}, {"--y file", c.y}, {"--x-val file", c.x_val},
                          {"--y-val file", c.y_val}, {"--weights file", c.opts.load.weights_path}};
  const cli_file outs[] = {{"--save", c.save}, {"--history", c.history}, {"--plot", c.plot}};
  if (!cli_outputs_distinct(ins, 6, outs, 3)) return 1;
  session s = {0};
  castor_model *m = NULL;
  castor_program *step = NULL, *eval = NULL;
  rt_dataset train = {0}, val = {0};
  rt_history h = {0};
  rc = 1;
  castor_context_create(&s.ctx);
  if (cli_load_model(s.ctx, c.model, &c.opts, &m) != CASTOR_OK) goto done;
  cli_put_diags(castor_context_last_warnings(s.ctx));
  /* the format --save's name says, and what its writer refuses of this model, before training */
  bool keras = c.save && castor_save_format_of(c.save) == CASTOR_SAVE_KERAS; /* the model as Keras 3 loads it */
  if (keras && !castor_model_is_keras(m)) {
    fprintf(stderr, "%s: error: --save: only a model loaded from a .keras file can be saved as one (castor writes "
                    "back the file's config.json; %s has none): save the weights as .safetensors\n", c.save, c.model);
    goto done;
  }
  if (c.save && castor_model_check_save(m, c.save) != CASTOR_OK) {
    cli_put_diags(castor_context_last_error(s.ctx));
    goto done;
  }
  castor_train_options model_to; /* the model's training defaults, under the flags */
  castor_model_train_options(m, &model_to);
  if (!c.train.to.loss) c.train.to.loss = model_to.loss, c.train.to.from_logits |= model_to.from_logits;
  /* the optimizer and its arguments: the API takes the model's, for the optimizer it names, when
   * no --optimizer is given (castor_compile_train) */
  castor_compile_options co = c.opts.compile;
  s.m = m, s.co = &co, s.to = &c.train.to;
  if (!c.evaluate && castor_compile_train(m, &co, &c.train.to, &step) != CASTOR_OK) {
    cli_put_diags(castor_context_last_error(s.ctx));
    goto done;
  }
  cli_put_diags(castor_context_last_warnings(s.ctx)); /* weights the loss does not reach */
  if (castor_compile_eval(m, &co, &c.train.to, &eval) != CASTOR_OK) {
    cli_put_diags(castor_context_last_error(s.ctx));
    goto done;
  }
  castor_tensor_info in, out, tgt;
  castor_program_input_info(eval, 0, &in);
  castor_program_output_info(eval, 0, &out);
  castor_program_input_info(eval, 1, &tgt);
  s.features = 1;
  for (int r = 1; r < in.rank; r++) s.features *= in.dims[r];
  s.in_rank = in.rank <= RT_MAX_RANK ? in.rank : RT_MAX_RANK;
  memcpy(s.in_dims, in.dims, (size_t)s.in_rank * sizeof(int64_t));
  s.classes = out.dims[1];
  s.loss = c.train.to.loss                ? c.train.to.loss
           : castor_model_loss(m) ? castor_model_loss(m)
                                  : "sparse_categorical_crossentropy";
  bool sparse = tgt.dtype == CASTOR_I32;
  s.accuracy = !c.train.to.loss || (strcmp(c.train.to.loss, "mean_squared_error") != 0 && strcmp(c.train.to.loss, "mse") != 0);
  if (castor_program_num_inputs(eval) != 2) {
    cli_error("%s: training needs a model with one input, it has %d", c.model, castor_program_num_inputs(eval) - 1);
    goto done;
  }
  if (!load_data(c.x, c.y, &s, sparse, &train)) goto done;
  if (c.x_val && !load_data(c.x_val, c.y_val, &s, sparse, &val)) goto done;
  if (c.validation_split > 0) {
    diag_sink *d = diag_sink_create();
    bool ok = rt_dataset_split(&train, c.validation_split, &val, d);
    cli_put_diags(diag_text(d));
    diag_sink_destroy(d);
    if (!ok) goto done;
  }
  if (in.rank > 0 && in.dims[0] >= 0 && !static_batch_ok(&c, in.dims[0], &train, &val)) goto done;
  if (c.evaluate) {
    double loss, acc;
    int64_t st = 0, sk = 0;
    s.p = eval;
    if (!run_epoch(&s, eval, &train, c.batch_size, false, 0, 0, &loss, &acc, NULL, &st, &sk, false)) goto done;
    printf("loss: %.6g", loss);
    if (s.accuracy) printf(" - accuracy: %.6g", acc);
    printf("\n");
    rc = 0;
    goto done;
  }
  castor_tensor *probe = NULL;
  bool scaling = castor_program_get_state(step, "optimizer.loss_scale", &probe) == CASTOR_OK;
  castor_tensor_destroy(probe);
  if (scaling && c.history && !beside_ok(c.history)) {
    /* /dev/stdout, a FIFO: no file goes "beside" it (/dev/stdout.loss_scale.csv would be a new file in /dev) */
    fprintf(stderr,
            "%s: error: --history is not a regular file outside /dev and /proc, so the loss-scale trace that goes "
            "beside it (FILE.loss_scale.csv) has no place; give --history a file name, or train without loss "
            "scaling (--loss-scale none)\n", c.history);
    goto done;
  }
  if (scaling && c.history) { /* FILE.loss_scale.csv beside --history */
    char *scale_csv = rt_history_scale_csv_path(c.history);
    bool ok = writable("--history", scale_csv);
    free(scale_csv);
    if (!ok) goto done;
  }
  rt_history_init(&h, s.accuracy, val.n > 0, scaling);
  s.epochs = c.epochs;
  int64_t steps = 0, skipped = 0;
  for (int64_t e = 0; e < c.epochs; e++) {
    double t0 = now(), loss, acc, vloss = NAN, vacc = NAN;
    if (!run_epoch(&s, step, &train, c.batch_size, c.shuffle, c.seed, e, &loss, &acc, &h, &steps, &skipped, true))
      goto done;
    double train_s = now() - t0 - s.warn_s;
    s.warn_s = 0;
    if (val.n > 0) {
      int64_t st = 0, sk = 0;
      if (castor_program_copy_weights(eval, step) != CASTOR_OK ||
          !run_epoch(&s, eval, &val, c.batch_size, false, 0, 0, &vloss, &vacc, NULL, &st, &sk, false)) {
        cli_put_diags(castor_context_last_error(s.ctx));
        goto done;
      }
    }
    double secs = now() - t0, scale = 0;
    if (scaling) {
      castor_tensor *t = NULL;
      castor_program_get_state(step, "optimizer.loss_scale", &t);
      scale = *(float *)castor_tensor_data(t);
      castor_tensor_destroy(t);
    }
    printf("Epoch %lld/%lld - %.1fs %.0fus/sample - loss: %.4f", (long long)e + 1, (long long)c.epochs, secs,
           1e6 * train_s / (double)train.n, isnan(loss) ? fabs(loss) : loss); /* "nan", as Keras, not "-nan" */
    if (s.accuracy) printf(" - accuracy: %.4f", acc);
    if (val.n > 0) printf(" - val_loss: %.4f", vloss);
    if (val.n > 0 && s.accuracy) printf(" - val_accuracy: %.4f", vacc);
    if (scaling) printf(" - loss_scale: %g - skipped: %lld", scale, (long long)skipped);
    printf("\n");
    fflush(stdout);
    rt_epoch_record r = {e + 1, loss, acc, vloss, vacc, secs, train_s / (double)train.n, scale, skipped};
    rt_history_add_epoch(&h, &r);
    if (s.diverged) break;
  }
  diag_sink *d = diag_sink_create();
  bool ok = true;
  if (c.history) ok = rt_history_write_csv(&h, c.history, NULL, d);
  if (ok && c.plot) ok = rt_history_write_svg(&h, c.plot, c.model, d);
  cli_put_diags(diag_text(d));
  diag_sink_destroy(d);
  if (!ok) goto done;
  if (!s.diverged) { /* the last update may have made them non-finite with a finite loss before it */
    str_buf why;
    str_buf_init(&why);
    const char *w = nonfinite_weight(step, &why);
    if (w) {
      fprintf(stderr, "castor: warning: the update of the last step (step %lld of the run) made the weights "
                      "non-finite (%s first: %s)\n", (long long)steps, w, str_buf_cstr(&why));
      s.diverged = true;
    }
    str_buf_fini(&why);
  }
  if (s.diverged) { /* exit status 2: trained, but to non-finite weights */
    if (c.save) fprintf(stderr, "%s: error: --save not written: the weights are not finite\n", c.save);
    rc = 2;
    goto done;
  }
  if (c.save && (keras ? castor_program_save_keras(step, m, &c.train.to, c.save)
                       : castor_program_save_weights(step, c.save)) != CASTOR_OK) {
    cli_put_diags(castor_context_last_error(s.ctx));
    goto done;
  }
  rc = 0;
done:
  rt_history_fini(&h);
  rt_dataset_fini(&train), rt_dataset_fini(&val);
  castor_program_destroy(step), castor_program_destroy(eval);
  castor_model_destroy(m);
  castor_context_destroy(s.ctx);
  return rc;
}
