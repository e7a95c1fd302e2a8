/* SPDX-License-Identifier: Apache-2.0 */
/*
 * castor_train.h: `castor train` and `castor evaluate` (castor_train.c),
 * called by the castor CLI's main; argv[0] is "train" or "evaluate".
 */
#ifndef CASTOR_TOOLS_TRAIN_H
#define CASTOR_TOOLS_TRAIN_H

int castor_train_main(int argc, char **argv);

#endif
