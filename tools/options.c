/* SPDX-License-Identifier: Apache-2.0 */
/*
 * options.c: the shared CLI option parser (options.h). One branch per
 * option, each with the error words every command printed before they
 * shared it, so `castor run`, `check`, `build` and `train` say the same
 * thing about the same mistake. Values are range-checked here; what they
 * mean (a policy name, a CPU name) is checked by the API when it compiles.
 */
#include "tools/options.h"

#include "api/internal.h"
#include "formats/onnx.h"
#include "train/dataset.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void verror(const char *fmt, va_list ap) {
  fputs("castor: error: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
}

int cli_error(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  verror(fmt, ap);
  va_end(ap);
  return 1;
}

void cli_put_diags(const char *text) {
  static const char *const sev[] = {"error: ", "warning: ", "note: "};
  for (const char *p = text; *p;) {
    const char *eol = strchr(p, '\n');
    size_t n = eol ? (size_t)(eol - p) + 1 : strlen(p);
    for (size_t k = 0; k < sizeof sev / sizeof *sev; k++)
      if (!strncmp(p, sev[k], strlen(sev[k]))) {
        fputs("castor: ", stderr);
        break;
      }
    fwrite(p, 1, n, stderr);
    p += n;
  }
}

bool cli_stdout_is_tty(const char *path) {
  return (!path || !strcmp(path, "-")) && isatty(STDOUT_FILENO);
}

/* The options a usage text lists: every word that starts with '-' after
 * blanks or ", " at the start of a line's option column, cut at '=', ' '
 * or ','. The nearest to `arg` (at most a third of its length away) is
 * copied to best. */
static bool nearest_option(const char *help, const char *arg, char *best, size_t cap) {
  size_t na = strcspn(arg, "=");
  int best_d = (int)(na / 3) + 1;
  bool found = false;
  for (const char *p = help; *p; p++) {
    if (*p != '-' || (p > help && p[-1] != ' ' && p[-1] != '\n' && p[-1] != '[')) continue;
    size_t n = strspn(p, "-abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789");
    if (n < 2 || n >= cap || (p[1] != '-' && n != 2)) continue;
    int d = str_edit_distance(arg, na, p, n);
    if (d > 0 && d < best_d) {
      best_d = d, found = true;
      memcpy(best, p, n);
      best[n] = 0;
    }
    p += n - 1;
  }
  return found;
}

int cli_unknown_option(const char *arg, const char *cmd, cli_usage_fn usage) {
  char *help = NULL, best[64];
  size_t len = 0;
  FILE *f = open_memstream(&help, &len);
  if (f) {
    usage(f, 0);
    fclose(f);
  }
  const char *sp = *cmd ? " " : "";
  if (help && nearest_option(help, arg, best, sizeof best))
    cli_error("unknown option '%s'; did you mean '%s'? (see castor%s%s --help)", arg, best, sp, cmd);
  else
    cli_error("unknown option '%s' (see castor%s%s --help)", arg, sp, cmd);
  free(help);
  return 1;
}

/* An option parser's error: the message, then CLI_OPT_ERROR. */
static cli_opt_result error(const char *fmt, ...) CASTOR_PRINTF(1, 2);
static cli_opt_result error(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  verror(fmt, ap);
  va_end(ap);
  return CLI_OPT_ERROR;
}

bool cli_parse_int(const char *opt, const char *v, bool missing, int64_t lo, int64_t hi, const char *hi_text,
                   const char *what, int64_t *out) {
  if (missing) return error("%s needs %s, got ''", opt, what), false;
  const char *d = v + (*v == '+');
  bool digits = *d != 0;
  for (const char *p = d; *p; p++) digits &= *p >= '0' && *p <= '9';
  int64_t n;
  if (str_parse_i64(v, lo, hi, &n)) return *out = n, true;
  /* past the cap, or too many digits for int64 at all */
  if (str_parse_i64(v, hi, INT64_MAX, &n) || (digits && !str_parse_i64(v, INT64_MIN, INT64_MAX, &n)))
    return error("%s must be at most %s, got '%s'", opt, hi_text, v), false;
  return error("%s needs %s, got '%s'", opt, what, v), false;
}

void cli_options_init(cli_options *o) {
  memset(o, 0, sizeof *o);
  castor_load_options_init(&o->load);
  castor_compile_options_init(&o->compile);
}

bool cli_target_from_name(const char *name, castor_target *out) {
  for (castor_target t = CASTOR_TARGET_CPU; castor_target_backend(t); t++)
    if (!strcmp(castor_target_backend(t)->name, name)) return *out = t, true;
  return false;
}

static cli_opt_result parse_load(cli_options *o, int argc, char **argv, int *i) {
  castor_load_options *lo = &o->load;
  const char *v;
  bool missing = false;
  int64_t n;
#define OPT(name) ((v = str_opt_arg(argc, argv, i, name, &missing)) != NULL || missing)
  if (OPT("--weights-seed")) {
    if (missing || !str_parse_i64(v, 0, INT64_MAX, &n))
      return error("--weights-seed needs a non-negative integer, got '%s'", missing ? "" : v);
    lo->seed = (uint64_t)n;
  } else if (OPT("--weights")) {
    if (missing) return error("--weights needs a file");
    lo->weights_path = v;
  } else if (OPT("--bind")) {
    const char *eq = missing ? NULL : strchr(v, '=');
    if (!eq || eq == v || !eq[1])
      return error("--bind needs NAME=FILE (a graph input and a .npy or .pb file), got '%s'", missing ? "" : v);
    if (o->n_binds == CLI_MAX_BINDS) return error("--bind may be given at most %d times", CLI_MAX_BINDS);
    if ((size_t)(eq - v) >= sizeof o->bind_name_buf[0])
      return error("--bind: the input name in '%s' is longer than %zu bytes", v, sizeof o->bind_name_buf[0] - 1);
    memcpy(o->bind_name_buf[o->n_binds], v, (size_t)(eq - v));
    o->bind_name_buf[o->n_binds][eq - v] = 0;
    o->bind_names[o->n_binds] = o->bind_name_buf[o->n_binds];
    o->bind_files[o->n_binds++] = eq + 1;
  } else if (OPT("--dim")) {
    const char *eq = missing ? NULL : strchr(v, '=');
    if (!eq || eq == v || !eq[1])
      return error("--dim needs NAME=VALUE (an ONNX dim_param and its size), got '%s'", missing ? "" : v);
    if (o->n_dims == CLI_MAX_DIMS) return error("--dim may be given at most %d times", CLI_MAX_DIMS);
    if ((size_t)(eq - v) >= sizeof o->dim_name_buf[0])
      return error("--dim: the dimension name in '%s' is longer than %zu bytes", v, sizeof o->dim_name_buf[0] - 1);
    memcpy(o->dim_name_buf[o->n_dims], v, (size_t)(eq - v));
    o->dim_name_buf[o->n_dims][eq - v] = 0;
    for (int k = 0; k < o->n_dims; k++)
      if (!strcmp(o->dim_names[k], o->dim_name_buf[o->n_dims])) return error("--dim %s is given twice", o->dim_names[k]);
    if (!cli_parse_int("--dim", eq + 1, false, 1, INT64_C(1) << 40, "2^40", "NAME=VALUE with a positive integer VALUE",
                       &n))
      return CLI_OPT_ERROR;
    o->dim_names[o->n_dims] = o->dim_name_buf[o->n_dims];
    o->dim_values[o->n_dims++] = n;
  } else {
    return CLI_OPT_NONE;
  }
  return CLI_OPT_TAKEN;
}

static cli_opt_result parse_compile(castor_compile_options *co, unsigned groups, int argc,
                                    char **argv, int *i) {
  const char *a = argv[*i], *v;
  bool missing = false;
  int64_t n;
  if ((groups & CLI_OPT_POLICY) && OPT("--policy")) {
    if (missing) return error("--policy needs a policy name");
    co->policy = v;
  } else if ((groups & CLI_OPT_AUTOCAST) && OPT("--fp32-ops")) {
    if (missing) return error("--fp32-ops needs a list of op names");
    co->fp32_ops = v;
  } else if ((groups & CLI_OPT_AUTOCAST) && OPT("--fp32-layers")) {
    if (missing) return error("--fp32-layers needs a list of layer names");
    co->fp32_layers = v;
  } else if ((groups & CLI_OPT_AUTOCAST) && !strcmp(a, "--keep-16bit-outputs")) {
    co->keep_16bit_outputs = 1;
  } else if ((groups & CLI_OPT_AUTOCAST) && !strcmp(a, "--pad8")) {
    co->pad8 = 1;
  } else if ((groups & CLI_OPT_OPT) && !strncmp(a, "-O", 2) && a[2]) {
    if (!str_parse_i64(a + 2, 0, 3, &n)) return error("-O takes 0-3, got '%s'", a + 2);
    co->opt_level = (int)n;
  } else if ((groups & CLI_OPT_OPT) && !strcmp(a, "-O")) {
    if (*i + 1 >= argc || !str_parse_i64(argv[++*i], 0, 3, &n)) return error("-O takes 0-3");
    co->opt_level = (int)n;
  } else if ((groups & CLI_OPT_TARGET) && OPT("--target")) {
    if (missing || !cli_target_from_name(v, &co->target))
      return error("--target takes one of: %s", cg_backend_names());
  } else if ((groups & CLI_OPT_TARGET) && OPT("--device")) {
    if (!cli_parse_int("--device", v, missing, 0, 1024, "1024", "a device index", &n)) return CLI_OPT_ERROR;
    co->device = (int)n;
  } else if ((groups & CLI_OPT_TARGET) && OPT("--sm")) {
    if (missing) return error("--sm needs an architecture, e.g. sm_90");
    co->sm = v;
  } else if ((groups & CLI_OPT_CPU) && OPT("--cpu")) {
    if (missing) return error("--cpu needs a CPU name, e.g. x86-64-v3");
    co->cpu = v;
  } else if ((groups & CLI_OPT_CPU) && OPT("--conv-algo")) {
    /* convolutional networks: the CPU backend reads it from the environment
     * (codegen/cpu/cg_target.c), as the API's callers set it */
    if (missing || (strcmp(v, "auto") && strcmp(v, "direct") && strcmp(v, "winograd")))
      return error("--conv-algo takes auto, direct or winograd, got '%s'", missing ? "" : v);
    setenv("CASTOR_CONV_ALGO", v, 1);
  } else if ((groups & CLI_OPT_THREADS) && OPT("--threads")) {
    if (!cli_parse_int("--threads", v, missing, 1, 1024, "1024", "a positive integer", &n)) return CLI_OPT_ERROR;
    co->threads = (int)n;
  } else if ((groups & CLI_OPT_BATCH) && OPT("--batch")) {
    if (!cli_parse_int("--batch", v, missing, 1, INT64_C(1) << 40, "2^40", "a positive integer", &n)) return CLI_OPT_ERROR;
    co->batch = n;
  } else {
    return CLI_OPT_NONE;
  }
  return CLI_OPT_TAKEN;
#undef OPT
}

cli_opt_result cli_options_parse(cli_options *o, unsigned groups, int argc, char **argv, int *i) {
  if (groups & CLI_OPT_LOAD) {
    cli_opt_result r = parse_load(o, argc, argv, i);
    if (r != CLI_OPT_NONE) return r;
  }
  return parse_compile(&o->compile, groups, argc, argv, i);
}

/* The sample shape rule of cli_load_input: t reshaped to info's sample
 * dims when its samples hold the same values in the same order. */
static void fit_samples(rt_tensor_file *t, const castor_tensor_info *info) {
  if (!info || t->rank < 1 || info->rank < 2 || info->rank > CASTOR_MAX_RANK) return;
  int64_t want = 1, have = 1;
  for (int k = 1; k < info->rank; k++) want *= info->dims[k] < 0 ? -1 : info->dims[k];
  for (int k = 1; k < t->rank; k++) have *= t->dims[k];
  bool same = t->rank == info->rank;
  for (int k = 1; same && k < t->rank; k++) same = t->dims[k] == info->dims[k];
  bool unit = t->rank + 1 == info->rank && info->dims[info->rank - 1] == 1;
  for (int k = 1; unit && k < t->rank; k++) unit = t->dims[k] == info->dims[k];
  if (same || want < 0 || have != want || !(info->rank == 2 || unit)) return;
  for (int k = 1; k < info->rank; k++) t->dims[k] = info->dims[k];
  t->rank = info->rank;
}

castor_status cli_load_input(castor_context *ctx, const char *path, castor_dtype to,
                             const castor_tensor_info *info, castor_tensor **out) {
  diag_sink *d = diag_sink_create();
  rt_tensor_file t;
  castor_status st = CASTOR_ERR_INVALID_ARGUMENT;
  *out = NULL;
  if (!rt_tensor_file_load(path, (dtype_id)to, &t, d)) {
    cli_put_diags(diag_text(d));
  } else if (fit_samples(&t, info), t.rank > CASTOR_MAX_RANK) {
    cli_error("%s: an array of rank %d; castor's tensors have at most %d dimensions", path, t.rank,
              CASTOR_MAX_RANK);
  } else if ((st = castor_tensor_create(ctx, to, t.rank, t.dims, out)) == CASTOR_OK) {
    if (t.numel) memcpy(castor_tensor_data(*out), t.data, (size_t)t.numel * castor_dtype_size(to));
  } else {
    cli_put_diags(castor_context_last_error(ctx));
  }
  free(t.data);
  diag_sink_destroy(d);
  return st;
}

/* A tensor from an ONNX TensorProto file (ONNX's test data stores inputs so). */
static castor_status load_pb(castor_context *ctx, const char *path, castor_tensor **out) {
  char *bytes;
  size_t len;
  str_buf why;
  str_buf_init(&why);
  if (!str_read_file_max(path, ONNX_MAX_FILE_BYTES, &bytes, &len, &why)) {
    cli_error("--bind: cannot read '%s': %s", path, str_buf_cstr(&why));
    str_buf_fini(&why);
    return CASTOR_ERR_IO;
  }
  str_buf_fini(&why);
  arena *a = arena_create();
  diag_sink *d = diag_sink_create();
  onnx_tensor t;
  castor_status st = CASTOR_ERR_PARSE;
  if (!onnx_tensor_read(path, bytes, len, a, &t, d)) {
    cli_put_diags(diag_first_error(d));
  } else {
    int cd = t.dtype == ONNX_FLOAT ? CASTOR_F32 : t.dtype == ONNX_FLOAT16 ? CASTOR_F16
           : t.dtype == ONNX_BFLOAT16 ? CASTOR_BF16 : t.dtype == ONNX_INT32 ? CASTOR_I32
           : t.dtype == ONNX_INT64 ? CASTOR_I64 : t.dtype == ONNX_BOOL ? CASTOR_BOOL : -1;
    if (cd < 0 || t.rank > CASTOR_MAX_RANK) {
      cli_error("--bind: '%s' holds a %s tensor of rank %d; castor binds float, float16, "
                "bfloat16, int32, int64 and bool tensors of rank <= %d", path,
                onnx_dtype_name(t.dtype), t.rank, CASTOR_MAX_RANK);
      st = CASTOR_ERR_UNSUPPORTED;
    } else if ((st = castor_tensor_create(ctx, (castor_dtype)cd, t.rank, t.dims, out)) == CASTOR_OK) {
      if (t.nbytes) memcpy(castor_tensor_data(*out), t.data, t.nbytes);
    } else {
      cli_put_diags(castor_context_last_error(ctx));
    }
  }
  diag_sink_destroy(d);
  arena_destroy(a);
  free(bytes);
  return st;
}

castor_status cli_load_model(castor_context *ctx, const char *path, const cli_options *o,
                             castor_model **out_model) {
  return cli_load_model_batch(ctx, path, o, o->compile.batch, false, out_model);
}

castor_status cli_load_model_batch(castor_context *ctx, const char *path, const cli_options *o, int64_t batch,
                                   bool quiet, castor_model **out_model) {
  castor_tensor *t[CLI_MAX_BINDS] = {0};
  castor_status st = CASTOR_OK;
  for (int i = 0; i < o->n_binds && st == CASTOR_OK; i++) {
    const char *f = o->bind_files[i];
    size_t n = strlen(f);
    if (n > 3 && !strcmp(f + n - 3, ".pb")) {
      st = load_pb(ctx, f, &t[i]);
    } else if ((st = castor_tensor_load_npy(ctx, f, &t[i])) != CASTOR_OK) {
      cli_put_diags(castor_context_last_error(ctx));
    }
  }
  if (st == CASTOR_OK) {
    castor_load_options lo = o->load;
    lo.bind_names = o->bind_names, lo.bind_tensors = t, lo.n_binds = o->n_binds;
    lo.dim_names = o->dim_names, lo.dim_values = o->dim_values, lo.n_dims = o->n_dims;
    lo.batch = batch;
    st = castor_model_load_file(ctx, path, &lo, out_model);
    if (st == CASTOR_OK || !quiet) cli_put_diags(st == CASTOR_OK ? castor_context_last_warnings(ctx) : castor_context_last_error(ctx));
  }
  for (int i = 0; i < o->n_binds; i++) castor_tensor_destroy(t[i]);
  return st;
}

/* Registered with atexit by main: standard output flushed and closed, and
 * a write error (a full disk, /dev/full, a file-size limit) reported with
 * exit status 1, so that output cut short never ends in status 0. A
 * descriptor closed before the start (`>&-`) with nothing written is not
 * an error. */
void cli_close_stdout(void) {
  int e = 0;
  bool bad = ferror(stdout) != 0;
  if (fflush(stdout) != 0) bad = true, e = errno;
  if (fclose(stdout) != 0 && errno != EBADF && !bad) bad = true, e = errno;
  if (!bad) return;
  fprintf(stderr, "%s: error: cannot write standard output%s%s\n", "castor", e ? ": " : "", e ? strerror(e) : "");
  _exit(1);
}

/* What a path names: a regular file's device and inode, or, for a name
 * not yet created, its resolved directory and base name (malloc'ed in
 * *name); false for a device, a FIFO or anything else that may repeat. */
static bool file_identity(const char *path, struct stat *st, char **name) {
  *name = NULL;
  if (stat(path, st) == 0) return S_ISREG(st->st_mode);
  const char *slash = strrchr(path, '/');
  char *dir = slash ? strndup(path, slash == path ? 1 : (size_t)(slash - path)) : strdup(".");
  char *real = dir ? realpath(dir, NULL) : NULL;
  free(dir);
  if (!real) return false; /* its writer reports the missing directory */
  const char *base = slash ? slash + 1 : path;
  size_t n = strlen(real) + strlen(base) + 2;
  *name = malloc(n);
  if (*name) snprintf(*name, n, "%s/%s", real, base);
  free(real);
  return *name != NULL;
}

bool cli_outputs_distinct(const cli_file *in, int n_in, const cli_file *out, int n_out) {
  int n = n_in + n_out;
  struct stat *st = calloc((size_t)n + 1, sizeof *st);
  char **name = calloc((size_t)n + 1, sizeof *name);
  bool *known = calloc((size_t)n + 1, 1), ok = st && name && known;
  for (int i = 0; ok && i < n; i++) {
    const cli_file *f = i < n_in ? &in[i] : &out[i - n_in];
    known[i] = f->path && file_identity(f->path, &st[i], &name[i]);
  }
  for (int o = n_in; ok && o < n; o++) {
    if (!known[o]) continue;
    for (int j = 0; ok && j < o; j++) {
      if (!known[j]) continue;
      bool same = name[o] || name[j] ? name[o] && name[j] && !strcmp(name[o], name[j])
                                     : st[o].st_dev == st[j].st_dev && st[o].st_ino == st[j].st_ino;
      if (!same) continue;
      const cli_file *a = &out[o - n_in], *b = j < n_in ? &in[j] : &out[j - n_in];
      if (j < n_in)
        fprintf(stderr, "%s: error: %s is the %s '%s' (the same file): castor does not write over its inputs\n",
                a->path, a->what, b->what, b->path);
      else
        fprintf(stderr, "%s: error: %s and %s '%s' are the same file\n", a->path, a->what, b->what, b->path);
      ok = false;
    }
  }
  for (int i = 0; name && i < n; i++) free(name[i]);
  free(st), free(name), free(known);
  return ok;
}
