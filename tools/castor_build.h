/* SPDX-License-Identifier: Apache-2.0 */
/*
 * castor_build.h: `castor build` (castor_build.c), called by the castor
 * CLI's main for `castor build ...`; argv[0] is "build".
 */
#ifndef CASTOR_TOOLS_BUILD_H
#define CASTOR_TOOLS_BUILD_H

int castor_build_main(int argc, char **argv);

#endif
