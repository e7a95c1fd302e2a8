/* SPDX-License-Identifier: Apache-2.0 */
/*
 * train_options.h: the one parser of the training options (optimizer, loss,
 * loss scale, Keras's optimizer arguments, clipping, learning-rate
 * schedules) that `castor train`, `castor evaluate` and `castor dump --train`
 * share, so that the step `castor dump --train` prints is the step `castor
 * train` runs. Values land in the API's castor_train_options; errors are
 * printed as the CLI's other usage errors (tools/options.h).
 */
#ifndef CASTOR_TOOLS_TRAIN_OPTIONS_H
#define CASTOR_TOOLS_TRAIN_OPTIONS_H

#include "castor.h"
#include "tools/options.h"

typedef struct cli_train_options {
  castor_train_options to;
  int64_t boundaries[64]; /* --boundaries and --values: to.boundaries / to.values point here */
  double values[65];
} cli_train_options;

/* castor_train_options_init. */
void cli_train_options_init(cli_train_options *t);

/* Parses argv[*i] if it is a training option (as cli_options_parse). */
cli_opt_result cli_train_options_parse(cli_train_options *t, int argc, char **argv, int *i);

/* After parsing: each learning-rate schedule's own flags, and only those
 * ("--decay-rate needs --lr-schedule exponential_decay"). False, with the
 * error printed, when they do not fit. */
bool cli_train_options_check(const cli_train_options *t);

/* The lines of `--help` that describe these options. */
extern const char cli_train_options_help[];

#endif
