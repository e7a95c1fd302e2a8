/* SPDX-License-Identifier: Apache-2.0 */
/*
 * castor_check.h: `castor check` (castor_check.c), called by the castor
 * CLI's main for `castor check ...` (argv[0] is "check"), and the Graphviz
 * rendering that `castor dump --emit=svg|png` shares with it.
 */
#ifndef CASTOR_TOOLS_CHECK_H
#define CASTOR_TOOLS_CHECK_H

int castor_check_main(int argc, char **argv);

/* Renders DOT text with Graphviz's `dot -T<format>` (svg, png) into path,
 * or to stdout when path is NULL. Returns 0, or 1 after printing an error
 * (no `dot` installed: how to install it). */
int castor_render_dot(const char *dot, const char *format, const char *path);

#endif
