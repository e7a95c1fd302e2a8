/*
 * options.c: the shared CLI option parser (options.h). One branch per
 * option, each with the error words every command printed before they
 * shared it, so `castor run`, `check`, `build` and `train` say the same
 * thing about the same mistake. Values are range-checked here; what they
 * mean (a policy name, a CPU name) is checked by the API when it compiles.
 */
#include "tools/options.h"

#include "api/internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

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
  castor_load_options_init(&o->load);
  castor_compile_options_init(&o->compile);
}

bool cli_target_from_name(const char *name, castor_target *out) {
  for (castor_target t = CASTOR_TARGET_CPU; castor_target_backend(t); t++)
    if (!strcmp(castor_target_backend(t)->name, name)) return *out = t, true;
  return false;
}

static cli_opt_result parse_load(castor_load_options *lo, int argc, char **argv, int *i) {
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
    cli_opt_result r = parse_load(&o->load, argc, argv, i);
    if (r != CLI_OPT_NONE) return r;
  }
  return parse_compile(&o->compile, groups, argc, argv, i);
}
