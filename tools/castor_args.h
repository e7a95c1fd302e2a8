/*
 * castor_args.h: the parsed command line of `castor run` and `castor dump`
 * (castor_args.c), shared by the CLI (castor.c) and its fuzz target
 * (tests/fuzz/fuzz_cli.c).
 */
#ifndef CASTOR_TOOLS_ARGS_H
#define CASTOR_TOOLS_ARGS_H

#include <stdio.h>

#include "castor.h"
#include "util/util.h"

typedef struct castor_args {
  const char *cmd, *model;
  VEC(const char *) inputs;
  VEC(const char *) outputs;
  int64_t batch;
  uint64_t seed, weights_seed;
  const char *weights, *policy, *passes, *dump_after, *dump_dir, *emit, *fp32_ops, *fp32_layers;
  bool casts, keep16, pad8;
  castor_target target;
  int opt_level, device, repeat, threads;
  bool stats;
  const char *sm;
} castor_args;

enum { CASTOR_ARGS_EXIT = -1 }; /* --help or --version was printed: exit 0 */

/* Parses argv (argv[0] is the program) into *c: 0, 1 after printing an
 * error to stderr, or CASTOR_ARGS_EXIT. The strings point into argv; free
 * the vectors with castor_args_fini, whatever it returned. */
int castor_args_parse(int argc, char **argv, castor_args *c);
void castor_args_fini(castor_args *c);
/* Prints the usage to f and returns rc. */
int castor_usage(FILE *f, int rc);
/* Prints "castor: error: MESSAGE" to stderr and returns 1. */
int castor_error(const char *fmt, ...) CASTOR_PRINTF(1, 2);

#endif
