/* SPDX-License-Identifier: Apache-2.0 */
/*
 * options.h: the one parser of the compile and load options that the CLI
 * commands share (run, dump, build, check, train, evaluate): --weights,
 * --weights-seed, --policy, --fp32-ops, --fp32-layers, --keep-16bit-outputs,
 * --pad8, -O, --target, --device, --sm, --cpu, --threads, --batch. Each command
 * parses its own options and hands every other argument here, naming the
 * groups it takes; an option outside them stays the command's "unknown
 * option". Values land in the API's own option structs, so a command
 * passes them to castor_model_load_file and castor_compile* as they are.
 *
 * Errors are printed as `castor: error: ...` (the same words in every
 * command); nothing here exits.
 */
#ifndef CASTOR_TOOLS_OPTIONS_H
#define CASTOR_TOOLS_OPTIONS_H

#include "castor.h"

#include <stdbool.h>
#include <stdio.h>

#include "util/util.h"

/* Groups of shared options; a command passes the union it takes. */
enum {
  CLI_OPT_LOAD = 1u << 0,     /* --weights FILE, --weights-seed S, --bind NAME=FILE, --dim NAME=VALUE */
  CLI_OPT_POLICY = 1u << 1,   /* --policy P */
  CLI_OPT_AUTOCAST = 1u << 2, /* --fp32-ops, --fp32-layers, --keep-16bit-outputs, --pad8 */
  CLI_OPT_OPT = 1u << 3,      /* -O N, -ON */
  CLI_OPT_TARGET = 1u << 4,   /* --target (a backend's name), --device N, --sm ARCH */
  CLI_OPT_CPU = 1u << 5,      /* --cpu NAME (the JIT's CPU) */
  CLI_OPT_THREADS = 1u << 6,  /* --threads T */
  CLI_OPT_BATCH = 1u << 7,    /* --batch B: binds the batch N (static shapes), at load (an ONNX
                               * model's symbolic first dimensions) and at compile; run and check
                               * parse their own --batch, which also sizes the random input */
};

enum { CLI_MAX_BINDS = 64, CLI_MAX_DIMS = 16 };

typedef struct cli_options {
  castor_load_options load;
  castor_compile_options compile;
  /* --bind NAME=FILE: ONNX graph inputs bound to data (.npy, or an ONNX
   * TensorProto .pb); cli_load_model reads the files */
  const char *bind_names[CLI_MAX_BINDS]; /* into bind_name_buf */
  const char *bind_files[CLI_MAX_BINDS];
  int n_binds;
  char bind_name_buf[CLI_MAX_BINDS][256];
  /* --dim NAME=VALUE: ONNX dim_params bound at load (castor_load_options.dim_names) */
  const char *dim_names[CLI_MAX_DIMS]; /* into dim_name_buf */
  int64_t dim_values[CLI_MAX_DIMS];
  int n_dims;
  char dim_name_buf[CLI_MAX_DIMS][256];
} cli_options;

/* castor_load_options_init and castor_compile_options_init. */
void cli_options_init(cli_options *o);

/* Prints "castor: error: MESSAGE" and a newline to stderr, the CLI's one
 * form of a usage or setup error; returns 1, the exit status. */
int cli_error(const char *fmt, ...) CASTOR_PRINTF(1, 2);

/* Prints a diagnostic text (castor_context_last_error, _last_warnings,
 * diag_text) to stderr in the CLI's one error form: a line that starts
 * with its severity ("error: ...", which the library writes when there is
 * no file to name) gets "castor: " before it, so every error reads either
 * "FILE[:LINE:COL]: error: ..." or "castor: error: ...". */
void cli_put_diags(const char *text);

/* A command's usage printer (its --help). */
typedef int (*cli_usage_fn)(FILE *f, int rc);

/* "castor: error: unknown option 'ARG'; did you mean '--opt'? (see castor
 * CMD --help)": the suggestion is the nearest option (edit distance) among
 * those `usage` lists, when one is near; returns 1, the exit status. */
int cli_unknown_option(const char *arg, const char *cmd, cli_usage_fn usage);

/* The command line's argument names an output written to a terminal:
 * binary data (an image, an object) there is an error that asks for -o.
 * True when `path` is NULL or "-" (stdout) and stdout is a terminal. */
bool cli_stdout_is_tty(const char *path);

typedef enum cli_opt_result {
  CLI_OPT_NONE,  /* argv[*i] is none of the options in `groups`; *i unchanged */
  CLI_OPT_TAKEN, /* parsed; *i is at its last argument (its value, if separate) */
  CLI_OPT_ERROR, /* a bad or missing value, reported */
} cli_opt_result;

/* Parses argv[*i] if it is a shared option of `groups` (CLI_OPT_*). */
cli_opt_result cli_options_parse(cli_options *o, unsigned groups, int argc, char **argv, int *i);

/* An integer option's value in [lo, hi]. False, with the error printed,
 * when it is missing, not an integer or below lo ("--epochs needs a
 * positive integer, got '0'", `what` naming what it needs) or past hi,
 * where the error names the cap ("--epochs must be at most 10^6, got
 * '2000000'", `hi_text` writing hi). */
bool cli_parse_int(const char *opt, const char *v, bool missing, int64_t lo, int64_t hi, const char *hi_text,
                   const char *what, int64_t *out);

/* Loads the model at path with o's load options, reading --bind's files
 * first, with --dim's bindings and the batch of --batch (o->compile.batch:
 * an ONNX model's symbolic first dimensions are bound at import); prints the error (or the load's warnings) to stderr. */
/* cli_load_model with the batch given (0: symbolic) instead of o's; quiet:
 * a load error is left in ctx (castor_context_last_error), not printed */
castor_status cli_load_model_batch(castor_context *ctx, const char *path, const cli_options *o, int64_t batch,
                                   bool quiet, castor_model **out_model);
castor_status cli_load_model(castor_context *ctx, const char *path, const cli_options *o,
                             castor_model **out_model);

/* A file a command reads or writes, named by the option that gave it
 * ("the model", "--x", "--save"); path NULL: not given. */
typedef struct cli_file {
  const char *what;
  const char *path;
} cli_file;

/* Checks, before any work, that no output is the same file as an input
 * or as another output: regular files that exist compare by device and
 * inode (so links and other spellings of a name are seen through), names
 * not yet created by their resolved directory and base name. Devices and
 * FIFOs (/dev/null, /dev/stdout) may repeat. False after printing
 * "OUT: error: --plot is the model file 'm.keras' (the same file): castor
 * does not write over its inputs". */
bool cli_outputs_distinct(const cli_file *in, int n_in, const cli_file *out, int n_out);

/* For atexit in main: flushes and closes standard output; a write error is
 * "castor: error: cannot write standard output: ..." and exit status 1. */
void cli_close_stdout(void);

/* An input tensor from FILE for a model input of dtype `to`: a .npy or IDX
 * file (gzipped or not) of any numeric dtype, converted as
 * train/dataset.h's rt_tensor_file_load says (castor run --help sums it
 * up). With the input's info (else NULL), samples take its shape as castor
 * train's features do: an input [N, k] takes samples of any shape of k
 * values (an IDX file's [n, 28, 28] feeds [N, 784]), and an input of rank
 * 3 or more takes its shape without a trailing unit dimension ([n, 28, 28]
 * feeds [N, 28, 28, 1]). Prints the error (located at the file) and returns
 * non-OK on failure. */
castor_status cli_load_input(castor_context *ctx, const char *path, castor_dtype to,
                             const castor_tensor_info *info, castor_tensor **out);

/* The target named by a backend's name (cpu, cuda); false if none is. */
bool cli_target_from_name(const char *name, castor_target *out);

#endif
